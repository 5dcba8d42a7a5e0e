//! The fake server as a reasoning model on the Responses API: every answer starts with a
//! reasoning item, and a request that passes one back changed is refused, as the real API
//! refuses encrypted content it cannot verify.
//!
//! The item is a pure function of its id and its owner — the server's organisation and the
//! API key of the request that got it (the encrypted content a 64-bit FNV-1a of the three) —
//! so the server needs no memory to check it: any reasoning item in a request must be
//! exactly the item it would mint for that id and the request's own key. As with the real
//! API, another server's (another organisation's) or another key's item is refused. The id names the script step the answer
//! comes from (`rs_fake_t0`, `rs_fake_t0_alt`, `rs_fake_summary`), not the request, so a
//! retried turn gets the same answer, reasoning included, as the simulator's scripted
//! provider would give.

use super::reject::Rejection;
use rebound_core::{AssistantResponse, ContentBlock};
use serde_json::{json, Value};

/// Who the server mints reasoning for: its organisation and the request's API key.
pub(crate) fn owner(organization: &str, key: Option<&str>) -> String {
    format!("{organization}\0{}", key.unwrap_or_default())
}

/// The reasoning item the fake model returns to `owner` with the answer named `step`.
#[must_use]
pub(crate) fn item(step: &str, owner: &str) -> Value {
    item_for_id(&format!("rs_fake_{step}"), owner)
}

/// A 64-bit FNV-1a of `owner`, a NUL, and `id`.
pub(crate) fn seal(owner: &str, id: &str) -> u64 {
    owner
        .bytes()
        .chain([0])
        .chain(id.bytes())
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
}

fn item_for_id(id: &str, owner: &str) -> Value {
    let hash = seal(owner, id);
    json!({
        "id": id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Reading the request before answering."}],
        "encrypted_content": format!("gAAAAAB{hash:016x}"),
    })
}

/// `response` with the reasoning item for `step` in front (an empty message stays empty).
pub(crate) fn with_reasoning(
    mut response: AssistantResponse,
    step: &str,
    owner: &str,
) -> AssistantResponse {
    if !response.message.content.is_empty() {
        response
            .message
            .content
            .insert(0, ContentBlock::reasoning(item(step, owner)));
    }
    response
}

/// 400 unless every reasoning item of the request's `input` is one this server minted for
/// `owner`, unchanged (the real API's `invalid_encrypted_content`, in its words).
pub(crate) fn check(body: &Value, owner: &str) -> Result<(), Rejection> {
    let Some(items) = body.get("input").and_then(Value::as_array) else {
        return Ok(());
    };
    for it in items {
        if it.get("type").and_then(Value::as_str) != Some("reasoning") {
            continue;
        }
        let id = it.get("id").and_then(Value::as_str).unwrap_or_default();
        if *it != item_for_id(id, owner) {
            let content = it
                .get("encrypted_content")
                .and_then(Value::as_str)
                .unwrap_or_default();
            // As the API shortens it: "gAAA...Rg==" (openai/codex#8132).
            let head: String = content.chars().take(4).collect();
            let tail: String = content
                .chars()
                .skip(content.chars().count().saturating_sub(4))
                .collect();
            let message = format!("The encrypted content {head}...{tail} could not be verified.");
            let body = json!({"error": {"message": message, "type": "invalid_request_error",
                                        "param": null,
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
