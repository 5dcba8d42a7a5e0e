//! The fake server as a thinking model on the Gemini API: the first function call of every
//! answer carries a `thoughtSignature` — and, when the request asks for thoughts
//! (`generationConfig.thinkingConfig.includeThoughts`), the answer's text does too — and a
//! request that passes back a signature this server did not mint for its key is refused with
//! Gemini's 400, as the real API refuses a signature it cannot verify.
//!
//! As with [`super::reasoning`], a signature is a pure function of what it signs and its
//! owner (the server's organisation and the request's key), so checking needs no memory: it
//! is the base64 of `{seal}.{what}`, where `what` names the script step and the part
//! (`t0.call`, `t0_alt.text`, …) and `seal` is a 64-bit FNV-1a of the owner and `what`. A
//! retried turn gets the same signature, and another key's (or organisation's), or a
//! changed one, does not verify. The payload is ASCII whose base64 holds letters and digits
//! only and no padding, so the standard and the URL-safe alphabets (Google's SDKs send the
//! latter back) spell it the same.
//!
//! The documented stand-ins for a call Gemini did not make are always accepted:
//! `skip_thought_signature_validator` (which rebound's request parser already reads as no
//! signature), and on the Gemini API (not Vertex AI) `context_engineering_is_the_way_to_go`
//! (ai.google.dev "Thought signatures", FAQ; Vertex AI takes only the first,
//! pydantic/pydantic-ai#3881).

use super::reasoning::seal;
use super::reject::Rejection;
use rebound_core::wire;
use rebound_core::{AssistantResponse, ContentBlock, Conversation, ProviderKind, Role};
use serde_json::{json, Value};

/// The key of a thought signature in a part, and in the reasoning item rebound keeps it in.
const SIGNATURE: &str = "thoughtSignature";

/// The Gemini API's second documented stand-in; Vertex AI refuses it.
const GEMINI_API_STAND_IN: &str = "context_engineering_is_the_way_to_go";

/// The Gemini API's words for a signature it cannot verify, as it answers another key's or
/// a changed one (google-gemini/gemini-cli#13467 and #14620, after a switch of credentials;
/// massgen/MassGen#665, from Google AI Studio).
const GEMINI_API_MESSAGE: &str = "Corrupted thought signature.";

/// Vertex AI's words for the same (RooCodeInc/Roo-Code#11716; the "Learn more" link as
/// decolua/9router#301 quotes it).
const VERTEX_MESSAGE: &str = "Unable to submit request because Thought signature is not \
                              valid.. Learn more: \
                              https://cloud.google.com/vertex-ai/generative-ai/docs/model-reference/gemini";

/// The base64 alphabet; minted signatures use only its first 62 characters.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Whether a request's path is Vertex AI's (`…/publishers/{publisher}/models/…`) rather
/// than the Gemini API's (`/v1beta/models/…`).
pub(crate) fn is_vertex(path: &str) -> bool {
    path.contains("/publishers/")
}

/// Whether the request asks for thoughts (`generationConfig.thinkingConfig.includeThoughts`).
/// Each name in either spelling, as Google's proto JSON parser accepts them: the
/// google-genai Python SDK sends `thinkingConfig: {"include_thoughts": true}`.
pub(crate) fn asks_for_thoughts(body: &Value) -> bool {
    let field =
        |v: &Value, camel: &str, snake: &str| v.get(camel).or_else(|| v.get(snake)).cloned();
    field(body, "generationConfig", "generation_config")
        .and_then(|g| field(&g, "thinkingConfig", "thinking_config"))
        .and_then(|t| field(&t, "includeThoughts", "include_thoughts"))
        .and_then(|b| b.as_bool())
        .unwrap_or(false)
}

/// The signature minted for `owner` on the part named `what` (`{step}.call`, `{step}.text`).
fn mint(owner: &str, what: &str) -> String {
    let mut payload = format!("{:016x}.{what}", seal(owner, &format!("thought\0{what}")));
    // A whole number of 3-byte groups: no padding.
    while payload.len() % 3 != 0 {
        payload.push('.');
    }
    let mut out = String::with_capacity(payload.len() / 3 * 4);
    for group in payload.as_bytes().chunks(3) {
        let n = u32::from(group[0]) << 16 | u32::from(group[1]) << 8 | u32::from(group[2]);
        for shift in [18, 12, 6, 0] {
            out.push(char::from(ALPHABET[(n >> shift & 63) as usize]));
        }
    }
    out
}

/// The payload of a signature this server could have minted: base64 of letters and digits,
/// no padding; `None` for anything else.
fn payload(signature: &str) -> Option<String> {
    let bytes = signature.as_bytes();
    if bytes.is_empty() || bytes.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for group in bytes.chunks(4) {
        let mut n = 0u32;
        for &c in group {
            let value = ALPHABET[..62].iter().position(|&a| a == c)?;
            n = n << 6 | value as u32;
        }
        out.extend([(n >> 16) as u8, (n >> 8) as u8, n as u8]);
    }
    String::from_utf8(out).ok()
}

/// Whether `signature` is one this server minted for `owner`, unchanged.
fn verifies(owner: &str, signature: &str) -> bool {
    let Some(payload) = payload(signature) else {
        return false;
    };
    let Some((_, what)) = payload.split_once('.') else {
        return false;
    };
    signature == mint(owner, what.trim_end_matches('.'))
}

/// `response` with the signatures for `step`: on its first function call, and on its first
/// text when `thoughts` (each as the reasoning item before the part, as rebound's decoder
/// makes it from the wire, and from which the encoder puts it on that part).
pub(crate) fn with_signatures(
    mut response: AssistantResponse,
    step: &str,
    owner: &str,
    thoughts: bool,
) -> AssistantResponse {
    let content = &mut response.message.content;
    let signed = |what: &str| ContentBlock::reasoning(json!({SIGNATURE: mint(owner, what)}));
    let call = content
        .iter()
        .position(|b| matches!(b, ContentBlock::ToolUse { .. }));
    let text = content
        .iter()
        .position(|b| matches!(b, ContentBlock::Text { text } if !text.is_empty()))
        .filter(|_| thoughts);
    // The later one first, so the earlier index still holds.
    let mut at: Vec<(usize, String)> = Vec::new();
    at.extend(call.map(|i| (i, format!("{step}.call"))));
    at.extend(text.map(|i| (i, format!("{step}.text"))));
    at.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
    for (i, what) in at {
        content.insert(i, signed(&what));
    }
    response
}

/// 400 unless every thought signature of the model turns of `conversation` (as rebound's
/// request parser reads them back: reasoning items, the stand-in left out) is one this
/// server minted for `owner`, unchanged, or a documented stand-in; in Vertex AI's words when
/// `vertex`, else the Gemini API's.
pub(crate) fn check(
    conversation: &Conversation,
    owner: &str,
    vertex: bool,
) -> Result<(), Rejection> {
    let signatures = conversation
        .messages()
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            ContentBlock::Reasoning { item, .. } => item.get(SIGNATURE).and_then(Value::as_str),
            _ => None,
        })
        // An empty signature is no signature (bytes, in Google's schema).
        .filter(|s| !s.is_empty());
    for signature in signatures {
        if (!vertex && signature == GEMINI_API_STAND_IN) || verifies(owner, signature) {
            continue;
        }
        let message = if vertex {
            VERTEX_MESSAGE
        } else {
            GEMINI_API_MESSAGE
        };
        return Err(Rejection {
            status: 400,
            body: wire::encode_error_body(ProviderKind::Gemini, 400, None, message),
            reason: message.to_owned(),
        });
    }
    Ok(())
}

/// 400 for a Gemini 3 model (`model` starts with `gemini-3`) when a model turn of the current
/// turn — every content after the last user content with text — sends its first function
/// call without a `thoughtSignature`: Gemini 3 validates them ("Thought signatures": "If a
/// required thought signature is not returned … the model will return a 400 error"), in the
/// words its API answers (quoted in many issues, e.g. "Function call is missing a
/// thought_signature in functionCall parts. …"; the position is the content's, from 1).
/// Earlier models do not validate. Checked on the body as sent (`raw`): the parsed
/// conversation no longer tells a stand-in from nothing.
pub(crate) fn check_calls_signed(raw: &Value, model: &str) -> Result<(), Rejection> {
    if !model.starts_with("gemini-3") {
        return Ok(());
    }
    let Some(contents) = raw.get("contents").and_then(Value::as_array) else {
        return Ok(());
    };
    let parts = |c: &Value| {
        c.get("parts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let current = contents
        .iter()
        .rposition(|c| {
            c.get("role").and_then(Value::as_str) != Some("model")
                && parts(c).iter().any(|p| p.get("text").is_some())
        })
        .unwrap_or(0);
    for (n, content) in contents.iter().enumerate().skip(current) {
        if content.get("role").and_then(Value::as_str) != Some("model") {
            continue;
        }
        let Some(call) = parts(content)
            .into_iter()
            .find(|p| p.get("functionCall").is_some())
        else {
            continue;
        };
        let signed = call
            .get(SIGNATURE)
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty());
        if signed {
            continue;
        }
        let name = call["functionCall"]
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let message = format!(
            "Function call is missing a thought_signature in functionCall parts. This is \
             required for tools to work correctly, and missing thought_signature may lead to \
             degraded model performance. Additional data, function call `default_api:{name}` \
             , position {}. Please refer to \
             https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
            n + 1
        );
        return Err(Rejection {
            status: 400,
            body: wire::encode_error_body(ProviderKind::Gemini, 400, None, &message),
            reason: "Function call is missing a thought_signature in functionCall parts".to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rebound_core::Message;

    #[test]
    fn gemini_3_refuses_a_current_call_without_a_signature_and_earlier_models_do_not() {
        let body = |signature: Option<&str>| {
            let mut call = json!({"functionCall": {"name": "read", "args": {}}});
            if let Some(s) = signature {
                call[SIGNATURE] = s.into();
            }
            json!({"contents": [
                {"role": "user", "parts": [{"text": "read a"}]},
                {"role": "model", "parts": [call]},
                {"role": "user", "parts": [{"functionResponse": {"name": "read", "response": {}}}]},
            ]})
        };
        let refused = check_calls_signed(&body(None), "gemini-3-pro-preview").unwrap_err();
        assert_eq!(refused.status, 400);
        let text = String::from_utf8(refused.body).unwrap();
        assert!(text.contains("`default_api:read` , position 2."), "{text}");
        assert!(check_calls_signed(&body(None), "gemini-2.5-flash").is_ok());
        assert!(check_calls_signed(
            &body(Some("skip_thought_signature_validator")),
            "gemini-3-pro-preview"
        )
        .is_ok());
        assert!(check_calls_signed(&body(Some("")), "gemini-3-pro-preview").is_err());
        // A call before the last user text is not the current turn's.
        let mut earlier = body(None);
        earlier["contents"]
            .as_array_mut()
            .unwrap()
            .push(json!({"role": "user", "parts": [{"text": "thanks"}]}));
        assert!(check_calls_signed(&earlier, "gemini-3-pro-preview").is_ok());
    }

    #[test]
    fn minted_signatures_are_url_safe_base64_and_verify_for_their_owner_only() {
        for what in [
            "t0.call",
            "t12_alt.text",
            "summary.call",
            "interrupted.text",
        ] {
            let s = mint("org\0key-a", what);
            assert!(s.bytes().all(|b| b.is_ascii_alphanumeric()), "{s}");
            assert_eq!(s.len() % 4, 0);
            assert!(verifies("org\0key-a", &s), "{what}");
            assert!(!verifies("org\0key-b", &s), "{what}");
            assert!(!verifies("other-org\0key-a", &s), "{what}");
            let mut changed = s.clone();
            changed.replace_range(0..1, if s.starts_with('A') { "B" } else { "A" });
            assert!(!verifies("org\0key-a", &changed), "{what}");
        }
        assert!(!verifies("o", ""));
        assert!(!verifies("o", "c2tpcA=="));
    }

    #[test]
    fn the_first_call_is_signed_and_the_text_only_when_thoughts_are_asked_for() {
        let mut message = Message::assistant_text("Reading.");
        message
            .content
            .push(ContentBlock::tool_use("a", "read", json!({})));
        message
            .content
            .push(ContentBlock::tool_use("b", "read", json!({})));
        let response = AssistantResponse::end_turn(message);
        let kinds = |r: &AssistantResponse| -> Vec<String> {
            r.message
                .content
                .iter()
                .map(|b| match b {
                    ContentBlock::Text { .. } => "text".to_owned(),
                    ContentBlock::ToolUse { id, .. } => format!("call {id}"),
                    ContentBlock::Reasoning { item, .. } => {
                        let s = item[SIGNATURE].as_str().expect("a signature");
                        payload(s)
                            .expect("minted")
                            .split_once('.')
                            .expect("a dot")
                            .1
                            .trim_end_matches('.')
                            .to_owned()
                    }
                    other => format!("{other:?}"),
                })
                .collect()
        };
        let plain = with_signatures(response.clone(), "t0", "o", false);
        assert_eq!(kinds(&plain), ["text", "t0.call", "call a", "call b"]);
        let thoughts = with_signatures(response, "t1_alt", "o", true);
        assert_eq!(
            kinds(&thoughts),
            ["t1_alt.text", "text", "t1_alt.call", "call a", "call b"]
        );
    }

    #[test]
    fn thoughts_are_asked_for_in_either_spelling_of_the_field_names() {
        for body in [
            json!({"generationConfig": {"thinkingConfig": {"includeThoughts": true}}}),
            // What google-genai 3.6.1 sends.
            json!({"generationConfig": {"thinkingConfig": {"include_thoughts": true}}}),
            json!({"generation_config": {"thinking_config": {"include_thoughts": true}}}),
        ] {
            assert!(asks_for_thoughts(&body), "{body}");
        }
        for body in [
            json!({}),
            json!({"generationConfig": {"thinkingConfig": {"thinkingBudget": 1024}}}),
            json!({"generationConfig": {"thinkingConfig": {"includeThoughts": false}}}),
        ] {
            assert!(!asks_for_thoughts(&body), "{body}");
        }
    }

    #[test]
    fn a_foreign_signature_is_refused_in_the_apis_words_and_the_stand_ins_pass() {
        let turn = |signature: &str| {
            let mut m = Message::assistant_text("");
            m.content = vec![
                ContentBlock::reasoning(json!({SIGNATURE: signature})),
                ContentBlock::tool_use("gc_1_0", "read", json!({})),
            ];
            Conversation::from(vec![Message::user_text("read a"), m])
        };
        let ours = mint("o\0a", "t0.call");
        assert!(check(&turn(&ours), "o\0a", false).is_ok());
        let refused = check(&turn(&ours), "o\0b", false).unwrap_err();
        assert_eq!(
            (refused.status, refused.reason.as_str()),
            (400, GEMINI_API_MESSAGE)
        );
        let body: Value = serde_json::from_slice(&refused.body).expect("JSON");
        assert_eq!(
            body,
            json!({"error": {"code": 400, "message": GEMINI_API_MESSAGE, "status": "INVALID_ARGUMENT"}})
        );
        let vertex = check(&turn(&ours), "o\0b", true).unwrap_err();
        assert_eq!(vertex.reason, VERTEX_MESSAGE);
        assert!(check(&turn(GEMINI_API_STAND_IN), "o\0b", false).is_ok());
        assert!(check(&turn(GEMINI_API_STAND_IN), "o\0b", true).is_err());
    }
}
