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
//! - AWS (Bedrock, restJson1): `{"message":"…"}` (or `"Message"`), its type in the
//!   `x-amzn-errortype` header (read by `classify_http`) or a body's `__type`
//!   (`com.amazon…#ThrottlingException`: the part after `#`), as botocore's
//!   `RestJSONParser` reads them.
//! - Flat objects from older compatible servers and frameworks:
//!   `{"object":"error","message":"…","type":"…","code":400}` or `{"detail":"…"}`.
//! - Google (Gemini API, Vertex AI): `{"error":{"code":429,"message":"…","status":
//!   "RESOURCE_EXHAUSTED","details":[…]}}`, often in a one-element array; its `details` are
//!   read for `google.rpc.RetryInfo` (`retryDelay`), `google.rpc.QuotaFailure` (each
//!   violation's `quotaId`) and `google.rpc.ErrorInfo` (`reason`), and Vertex's
//!   `errors[].reason`.
//! - A one-element array around any of these (Google-style proxies).
//! - Any of these quoted whole as the `message` of another (a client library or proxy that
//!   wraps the provider's body in its own error): the quoted body is read instead.
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
    /// Google's `google.rpc.RetryInfo.retryDelay` (`"26s"`), in ms (rounded up).
    pub retry_delay_ms: Option<u64>,
    /// Google's `google.rpc.QuotaFailure` violations' `quotaId`s, e.g.
    /// `GenerateRequestsPerDayPerProjectPerModel-FreeTier`.
    pub quota_ids: Vec<String>,
    /// Google's `google.rpc.ErrorInfo` `reason`s (`API_KEY_INVALID`) and Vertex's
    /// `errors[].reason` (`rateLimitExceeded`).
    pub reasons: Vec<String>,
}

/// Parses `body` as an error object; `None` if it is not JSON or has none of the fields.
pub(crate) fn parse(body: &[u8]) -> Option<ErrorBody> {
    let body = body.strip_prefix(b"\xef\xbb\xbf").unwrap_or(body);
    let outer = read(serde_json::from_slice(body).ok()?)?;
    // A provider's body quoted whole as another error's message: the quoted one says more.
    let quoted = outer
        .message
        .as_deref()
        .map(str::trim)
        .filter(|m| m.starts_with('{') || m.starts_with('['))
        .and_then(|m| serde_json::from_str(m).ok())
        .and_then(read);
    match quoted {
        Some(mut inner) => {
            inner.request_id = inner.request_id.or(outer.request_id);
            Some(inner)
        }
        None => Some(outer),
    }
}

/// The error fields of a parsed body.
fn read(value: Value) -> Option<ErrorBody> {
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
            if let Some(details) = error.get("details").and_then(Value::as_array) {
                google_details(details, &mut parsed);
            }
            if let Some(errors) = error.get("errors").and_then(Value::as_array) {
                parsed.reasons.extend(
                    errors
                        .iter()
                        .filter_map(Value::as_object)
                        .filter_map(|e| string_field(e, "reason")),
                );
            }
        }
        Some(Value::String(message)) => {
            parsed.message = Some(message.clone());
            parsed.error_type = flat_type(top);
            parsed.code = string_field(top, "code");
        }
        _ => {
            parsed.message = string_field(top, "message")
                .or_else(|| string_field(top, "Message"))
                .or_else(|| string_field(top, "detail"));
            parsed.error_type = flat_type(top).or_else(|| aws_type(top));
            parsed.code = string_field(top, "code");
        }
    }
    let has_content =
        parsed.error_type.is_some() || parsed.code.is_some() || parsed.message.is_some();
    has_content.then_some(parsed)
}

/// What Google's `details` say: the retry delay, the quotas violated, the reasons.
fn google_details(details: &[Value], parsed: &mut ErrorBody) {
    for detail in details.iter().filter_map(Value::as_object) {
        let Some(kind) = detail.get("@type").and_then(Value::as_str) else {
            continue;
        };
        match kind.rsplit('/').next().unwrap_or(kind) {
            "google.rpc.RetryInfo" => {
                parsed.retry_delay_ms = detail
                    .get("retryDelay")
                    .and_then(Value::as_str)
                    .and_then(duration_ms);
            }
            "google.rpc.QuotaFailure" => {
                let violations = detail.get("violations").and_then(Value::as_array);
                parsed.quota_ids.extend(
                    violations
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_object)
                        .filter_map(|v| string_field(v, "quotaId")),
                );
            }
            "google.rpc.ErrorInfo" => parsed.reasons.extend(string_field(detail, "reason")),
            _ => {}
        }
    }
}

/// A protobuf `Duration` in its JSON form (`"26s"`, `"0.5s"`, `"3.000000001s"`: seconds with
/// up to nine fractional digits), in ms rounded up; anything else is `None`. Too large
/// saturates.
fn duration_ms(text: &str) -> Option<u64> {
    let seconds = text.trim().strip_suffix('s')?;
    let (whole, fraction) = seconds.split_once('.').unwrap_or((seconds, ""));
    if whole.is_empty()
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || fraction.len() > 9
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: u64 = whole.parse().unwrap_or(u64::MAX);
    let nanos: u64 = format!("{fraction:0<9}").parse().ok()?;
    Some(
        whole
            .saturating_mul(1000)
            .saturating_add(nanos.div_ceil(1_000_000)),
    )
}

/// A non-empty string field.
fn string_field(object: &Map<String, Value>, key: &str) -> Option<String> {
    match object.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s.clone()),
        _ => None,
    }
}

/// An AWS body's `__type`, without its namespace (`…#ThrottlingException`).
fn aws_type(object: &Map<String, Value>) -> Option<String> {
    string_field(object, "__type").map(|t| t.rsplit('#').next().unwrap_or(&t).to_owned())
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
    fn google_durations_read_as_milliseconds_rounded_up() {
        assert_eq!(duration_ms("26s"), Some(26_000));
        assert_eq!(duration_ms("0.5s"), Some(500));
        assert_eq!(duration_ms("3.000000001s"), Some(3_001));
        assert_eq!(duration_ms("99999999999999999999s"), Some(u64::MAX));
        for bad in [
            "",
            "s",
            "26",
            "-1s",
            "1.5e3s",
            ".5s",
            "1.0000000001s",
            "1,5s",
        ] {
            assert_eq!(duration_ms(bad), None, "{bad}");
        }
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
