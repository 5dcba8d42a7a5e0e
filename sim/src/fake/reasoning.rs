//! The fake server as a reasoning model on the Responses API: every answer starts with a
//! reasoning item, and a request that passes one back changed is refused, as the real API
//! refuses encrypted content it cannot verify.
//!
//! The item is a pure function of its id (the encrypted content a 64-bit FNV-1a of the id),
//! so the server needs no memory to check it: any reasoning item in a request must be
//! exactly the item it would mint for that id. The id names the script step the answer
//! comes from (`rs_fake_t0`, `rs_fake_t0_alt`, `rs_fake_summary`), not the request, so a
//! retried turn gets the same answer, reasoning included, as the simulator's scripted
//! provider would give.

use super::reject::Rejection;
use rebound_core::{AssistantResponse, ContentBlock};
use serde_json::{json, Value};

/// The reasoning item the fake model returns with the answer named `step`.
#[must_use]
pub(crate) fn item(step: &str) -> Value {
    item_for_id(&format!("rs_fake_{step}"))
}

fn item_for_id(id: &str) -> Value {
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    json!({
        "id": id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Reading the request before answering."}],
        "encrypted_content": format!("gAAAAAB{hash:016x}"),
    })
}

/// `response` with the reasoning item for `step` in front (an empty message stays empty).
pub(crate) fn with_reasoning(mut response: AssistantResponse, step: &str) -> AssistantResponse {
    if !response.message.content.is_empty() {
        response
            .message
            .content
            .insert(0, ContentBlock::reasoning(item(step)));
    }
    response
}

/// 400 unless every reasoning item of the request's `input` is one this server minted,
/// unchanged (the real API's `invalid_encrypted_content`).
pub(crate) fn check(body: &Value) -> Result<(), Rejection> {
    let Some(items) = body.get("input").and_then(Value::as_array) else {
        return Ok(());
    };
    for (i, it) in items.iter().enumerate() {
        if it.get("type").and_then(Value::as_str) != Some("reasoning") {
            continue;
        }
        let id = it.get("id").and_then(Value::as_str).unwrap_or_default();
        if *it != item_for_id(id) {
            let message = format!("The encrypted content for item {id} could not be verified.");
            let body = json!({"error": {"message": message, "type": "invalid_request_error",
                                        "param": format!("input[{i}]"),
                                        "code": "invalid_encrypted_content"}});
            return Err(Rejection {
                status: 400,
                body: body.to_string().into_bytes(),
                reason: message,
            });
        }
    }
    Ok(())
}
