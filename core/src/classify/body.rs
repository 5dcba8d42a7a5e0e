//! Reading the fields of a provider error body, whichever of the known shapes it has.
//!
//! - Anthropic: `{"type":"error","error":{"type":"…","message":"…","details":{"error_code":"…"}},"request_id":"req_…"}`
//!   (also the `data:` of a mid-stream `event: error`).
//! - OpenAI and compatible servers: `{"error":{"message":"…","type":"…","param":…,"code":"…"}}`
//!   (`code` may be a string, a number as in vLLM, or null).
//! - OpenAI Responses, inside a 200 stream: the `response.failed` event,
//!   `{"type":"response.failed","response":{…,"error":{"code":"…","message":"…"}}}` (the
//!   response's `error` is read), and the `error` event, `{"type":"error","code":"…",
//!   "message":"…","param":…}` (a flat object, below).
//! - Ollama's native API: `{"error":"…"}`.
//! - Flat objects from older compatible servers and frameworks:
//!   `{"object":"error","message":"…","type":"…","code":400}` or `{"detail":"…"}`.
//! - A one-element array around any of these (Google-style proxies).
//!
//! Parsing goes through `serde_json`, whose recursion limit (128) turns deeply nested input
//! into an error rather than a stack overflow; any parse failure means "not an error body".

use serde_json::{Map, Value};

/// The fields classification needs, all optional and unsanitized.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct ErrorBody {
    /// `error.type` (or a flat `type` other than `"error"`, or Google's `status`).
    pub error_type: Option<String>,
    /// `error.code` when it is a string.
    pub code: Option<String>,
    /// `error.message` (or a flat `message` / `detail`, or Ollama's `error` string).
    pub message: Option<String>,
    /// Anthropic's top-level `request_id`.
    pub request_id: Option<String>,
    /// Anthropic's `error.details.error_code`, e.g. `enforced_spend_limit_reached`.
    pub detail_code: Option<String>,
}

/// Parses `body` as an error object; `None` if it is not JSON or has none of the fields.
pub(crate) fn parse(body: &[u8]) -> Option<ErrorBody> {
    let body = body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body);
    let value: Value = serde_json::from_slice(body).ok()?;
    let value = match value {
        Value::Array(mut items) if !items.is_empty() => items.swap_remove(0),
        other => other,
    };
    let top = value.as_object()?;

    let mut parsed = ErrorBody {
        request_id: string_field(top, "request_id"),
        ..ErrorBody::default()
    };
    // A Responses `response.failed` event (or a failed response object inside another body).
    let nested = top
        .get("response")
        .and_then(|r| r.get("error"))
        .filter(|e| e.is_object());
    match nested.or_else(|| top.get("error")) {
        Some(Value::Object(error)) => {
            parsed.error_type =
                string_field(error, "type").or_else(|| string_field(error, "status"));
            parsed.code = string_field(error, "code");
            parsed.message = string_field(error, "message");
            parsed.detail_code = error
                .get("details")
                .and_then(Value::as_object)
                .and_then(|details| string_field(details, "error_code"));
        }
        Some(Value::String(message)) => {
            parsed.message = Some(message.clone());
            parsed.error_type = flat_type(top);
            parsed.code = string_field(top, "code");
        }
        _ => {
            parsed.message = string_field(top, "message").or_else(|| string_field(top, "detail"));
            parsed.error_type = flat_type(top);
            parsed.code = string_field(top, "code");
        }
    }
    let has_content =
        parsed.error_type.is_some() || parsed.code.is_some() || parsed.message.is_some();
    has_content.then_some(parsed)
}

/// A non-empty string field.
fn string_field(object: &Map<String, Value>, key: &str) -> Option<String> {
    match object.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// A flat `type`, unless it is Anthropic's envelope marker `"error"`.
fn flat_type(object: &Map<String, Value>) -> Option<String> {
    string_field(object, "type").filter(|t| t != "error")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anthropic_shape_yields_type_message_details_and_request_id() {
        let body = br#"{"type":"error","error":{"type":"rate_limit_error","message":"m","details":{"error_code":"enforced_spend_limit_reached"}},"request_id":"req_1"}"#;
        let parsed = parse(body).expect("error body");
        assert_eq!(parsed.error_type.as_deref(), Some("rate_limit_error"));
        assert_eq!(parsed.message.as_deref(), Some("m"));
        assert_eq!(
            parsed.detail_code.as_deref(),
            Some("enforced_spend_limit_reached")
        );
        assert_eq!(parsed.request_id.as_deref(), Some("req_1"));
    }

    #[test]
    fn openai_numeric_and_null_codes_are_ignored() {
        let parsed =
            parse(br#"{"error":{"message":"m","type":"BadRequestError","param":null,"code":400}}"#)
                .expect("error body");
        assert_eq!(parsed.code, None);
        assert_eq!(parsed.error_type.as_deref(), Some("BadRequestError"));
    }

    #[test]
    fn responses_failed_event_yields_the_response_error() {
        let parsed = parse(
            br#"{"type":"response.failed","sequence_number":3,"response":{"id":"resp_1","status":"failed","error":{"code":"rate_limit_exceeded","message":"slow down"}}}"#,
        )
        .expect("error body");
        assert_eq!(parsed.code.as_deref(), Some("rate_limit_exceeded"));
        assert_eq!(parsed.message.as_deref(), Some("slow down"));
    }

    #[test]
    fn ollama_string_error_and_flat_objects_are_read() {
        let parsed = parse(br#"{"error":"the input length exceeds the context length"}"#)
            .expect("error body");
        assert_eq!(
            parsed.message.as_deref(),
            Some("the input length exceeds the context length")
        );
        let flat =
            parse(br#"{"object":"error","message":"m","type":"BadRequestError","code":400}"#)
                .expect("error body");
        assert_eq!(flat.message.as_deref(), Some("m"));
        assert_eq!(flat.error_type.as_deref(), Some("BadRequestError"));
        let detail = parse(br#"{"detail":"Not Found"}"#).expect("error body");
        assert_eq!(detail.message.as_deref(), Some("Not Found"));
    }

    #[test]
    fn non_error_json_and_non_json_are_not_error_bodies() {
        for body in [
            &b""[..],
            b"null",
            b"[]",
            b"42",
            b"{}",
            b"{\"id\":\"msg_1\"}",
            b"<html>502</html>",
            b"{\"error\":{\"type\":",
            b"\xff\xfe\xfd",
        ] {
            assert_eq!(parse(body), None, "{:?}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn json_nested_ten_thousand_deep_is_rejected_without_overflowing_the_stack() {
        let mut deep = vec![b'['; 10_000];
        deep.extend(vec![b']'; 10_000]);
        assert_eq!(parse(&deep), None);
        let mut deep_objects = Vec::new();
        for _ in 0..10_000 {
            deep_objects.extend_from_slice(br#"{"error":"#);
        }
        deep_objects.extend_from_slice(b"1");
        deep_objects.extend(vec![b'}'; 10_000]);
        assert_eq!(parse(&deep_objects), None);
    }
}
