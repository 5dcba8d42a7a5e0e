//! Requests the real APIs refuse, refused with the providers' own status, body and wording:
//! missing or wrong API key, missing `anthropic-version`, bodies that are too large or not
//! JSON, blank text and tool-call ids the APIs do not accept, and conversations that break
//! tool-call pairing.

use hyper::HeaderMap;
use rebound_core::wire::{self, WireError};
use rebound_core::{ContentBlock, Conversation, PairingError, ProviderKind};
use serde_json::{json, Value};

/// A refusal: status, body, and a one-line reason for the request log (never a secret).
#[derive(Debug, Clone)]
pub(crate) struct Rejection {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    pub(crate) reason: String,
}

impl Rejection {
    fn new(provider: ProviderKind, status: u16, error_type: Option<&str>, message: &str) -> Self {
        // Google's bodies name the status, and AWS's types are its own (in a header the
        // reply adds), not another API's type.
        let error_type = error_type
            .filter(|_| !matches!(provider, ProviderKind::Gemini | ProviderKind::Bedrock));
        Rejection {
            status,
            body: wire::encode_error_body(provider, status, error_type, message),
            reason: message.to_owned(),
        }
    }

    /// An OpenAI error with a `param` (which `encode_error_body` does not take).
    fn openai_param(status: u16, message: &str, param: &str) -> Self {
        let body = json!({"error": {"message": message, "type": "invalid_request_error",
                                    "param": param, "code": null}});
        Rejection {
            status,
            body: body.to_string().into_bytes(),
            reason: message.to_owned(),
        }
    }
}

/// The API key a request carries: `x-api-key`, else `Authorization: Bearer …`.
pub(crate) fn api_key(provider: ProviderKind, headers: &HeaderMap) -> Option<String> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    let bearer = header("authorization").and_then(|v| {
        let (scheme, token) = v.split_once(' ')?;
        let token = token.trim();
        (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_owned())
    });
    match provider {
        ProviderKind::Anthropic => header("x-api-key").or(bearer),
        // AI Studio's key header, or Vertex AI's bearer token.
        ProviderKind::Gemini => header("x-goog-api-key").or(bearer),
        // A Bedrock API key (bearer), or SigV4's access key id (the signature is not
        // checked: the fake server holds no secret key).
        ProviderKind::Bedrock => bearer.or_else(|| {
            let auth = header("authorization")?;
            let rest = auth.strip_prefix("AWS4-HMAC-SHA256 ")?;
            let credential = rest
                .split(',')
                .map(str::trim)
                .find_map(|p| p.strip_prefix("Credential="))?;
            credential.split('/').next().map(str::to_owned)
        }),
        // OpenAI's APIs, and the bearer token most others take.
        _ => bearer,
    }
}

/// Checks the key (present, and equal to `expected` when one is configured) and, for
/// Anthropic, the `anthropic-version` header.
pub(crate) fn check_headers(
    provider: ProviderKind,
    headers: &HeaderMap,
    expected: Option<&str>,
) -> Result<(), Rejection> {
    let key = api_key(provider, headers);
    match provider {
        ProviderKind::Anthropic => {
            let Some(key) = key else {
                return Err(Rejection::new(
                    provider,
                    401,
                    Some("authentication_error"),
                    "x-api-key header is required",
                ));
            };
            if expected.is_some_and(|e| e != key) {
                return Err(Rejection::new(
                    provider,
                    401,
                    Some("authentication_error"),
                    "invalid x-api-key",
                ));
            }
            if headers.get("anthropic-version").is_none() {
                return Err(Rejection::new(
                    provider,
                    400,
                    Some("invalid_request_error"),
                    "anthropic-version: header is required",
                ));
            }
        }
        // Google's answers (Gemini API): no key is a 403, a wrong one a 400 whose
        // `ErrorInfo` says `API_KEY_INVALID`.
        ProviderKind::Gemini => {
            if key.is_none() {
                return Err(Rejection::new(
                    provider,
                    403,
                    None,
                    "Method doesn't allow unregistered callers (callers without established \
                     identity). Please use API Key or other form of API consumer identity to \
                     call this API.",
                ));
            }
            if expected.is_some_and(|e| Some(e) != key.as_deref()) {
                let message = "API key not valid. Please pass a valid API key.";
                let body = json!({"error": {"code": 400, "message": message,
                    "status": "INVALID_ARGUMENT", "details": [{
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]}});
                return Err(Rejection {
                    status: 400,
                    body: body.to_string().into_bytes(),
                    reason: message.to_owned(),
                });
            }
        }
        // AWS's answers: no credentials, or unknown ones.
        ProviderKind::Bedrock => {
            if key.is_none() {
                return Err(Rejection::new(
                    provider,
                    403,
                    None,
                    "Missing Authentication Token",
                ));
            }
            if expected.is_some_and(|e| Some(e) != key.as_deref()) {
                return Err(Rejection::new(
                    provider,
                    403,
                    None,
                    "The security token included in the request is invalid.",
                ));
            }
        }
        // OpenAI's APIs (and, in their words, any other this server does not know).
        _ => {
            let Some(key) = key else {
                return Err(Rejection::new(
                    provider,
                    401,
                    Some("invalid_request_error"),
                    "You didn't provide an API key. You need to provide your API key in an \
                     Authorization header using Bearer auth (i.e. Authorization: Bearer \
                     YOUR_KEY), or as the password field (with blank username) if you're \
                     accessing the API from your browser and are prompted for a username. You \
                     can obtain an API key from https://platform.openai.com/account/api-keys.",
                ));
            };
            if expected.is_some_and(|e| e != key) {
                let mut r = Rejection::new(
                    provider,
                    401,
                    Some("invalid_api_key"),
                    &format!(
                        "Incorrect API key provided: {}. You can find your API key at \
                         https://platform.openai.com/account/api-keys.",
                        mask(&key)
                    ),
                );
                r.reason = "Incorrect API key provided".to_owned();
                return Err(r);
            }
        }
    }
    Ok(())
}

/// The key as OpenAI shows it back: the first 3 and last 4 characters (all stars if short).
fn mask(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() <= 12 {
        return "*".repeat(chars.len().max(4));
    }
    let head: String = chars[..3].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}{}{tail}", "*".repeat(chars.len() - 7))
}

/// 413: the body is larger than the server accepts.
pub(crate) fn too_large(provider: ProviderKind, limit: usize) -> Rejection {
    let mut r = match provider {
        ProviderKind::Anthropic => Rejection::new(
            provider,
            413,
            Some("request_too_large"),
            "Request exceeds the maximum allowed number of bytes.",
        ),
        _ => Rejection::new(
            provider,
            413,
            Some("invalid_request_error"),
            "Request too large: the request body exceeds the maximum allowed size.",
        ),
    };
    r.reason = format!("{} (limit {limit} bytes)", r.reason);
    r
}

/// 400: the body is not JSON, or not a request of this provider.
pub(crate) fn bad_body(provider: ProviderKind, error: &WireError) -> Rejection {
    match (provider, error) {
        (ProviderKind::Gemini, WireError::InvalidJson { detail }) => Rejection::new(
            provider,
            400,
            None,
            &format!("Invalid JSON payload received. {detail}"),
        ),
        (ProviderKind::Gemini, WireError::EmptyConversation) => Rejection::new(
            provider,
            400,
            None,
            "* GenerateContentRequest.contents: contents is not specified\n",
        ),
        (_, WireError::InvalidJson { .. }) if provider != ProviderKind::Anthropic => {
            Rejection::new(
                provider,
                400,
                Some("invalid_request_error"),
                "We could not parse the JSON body of your request. (HINT: This likely means you \
             aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, \
             but what was sent was not valid JSON. If you have trouble figuring out how to fix \
             this, please contact us through our help center at help.openai.com.)",
            )
        }
        (ProviderKind::Anthropic, WireError::InvalidJson { detail }) => Rejection::new(
            provider,
            400,
            Some("invalid_request_error"),
            &format!("There was an error parsing the body: {detail}"),
        ),
        (ProviderKind::Anthropic, WireError::EmptyConversation) => Rejection::new(
            provider,
            400,
            Some("invalid_request_error"),
            "messages: at least one message is required",
        ),
        (ProviderKind::OpenAi, WireError::EmptyConversation) => {
            Rejection::openai_param(400, "[] is too short - 'messages'", "messages")
        }
        (_, WireError::EmptyConversation) => Rejection::openai_param(
            400,
            "Invalid 'input': empty array. Expected an array with minimum length 1, but got an \
             empty array instead.",
            "input",
        ),
        (_, WireError::InvalidRequest { detail }) => {
            Rejection::new(provider, 400, Some("invalid_request_error"), detail)
        }
        (_, WireError::Pairing(e)) => pairing(provider, e, &Conversation::new()),
        (_, other) => Rejection::new(
            provider,
            400,
            Some("invalid_request_error"),
            &other.to_string(),
        ),
    }
}

/// 400: content the API refuses before reading the conversation, checked on the raw body so
/// the error names the same place the real one does.
///
/// - Anthropic: a text block (or string content) that is empty, "messages: text content
///   blocks must be non-empty" (anthropics/claude-code#59812), or only whitespace, "messages:
///   text content blocks must contain non-whitespace text" (anthropics/claude-code#23369); a
///   `tool_use.id` outside `^[a-zA-Z0-9_-]+$` (the pattern of `ToolUseBlockParam.id` in
///   https://platform.claude.com/docs/en/api/messages; wording from BlockRunAI/ClawRouter#17);
///   a `tool_use` id used twice anywhere in the request (wording from trycua/cua#524; reused
///   ids across turns in NVIDIA-NeMo/Switchyard#502).
/// - OpenAI: a `tool_calls[].id` longer than 40 characters (the API's own error, quoted in
///   agno-agi/agno#5382 and microsoft/autogen#6377).
pub(crate) fn content(provider: ProviderKind, body: &Value) -> Result<(), Rejection> {
    let Some(messages) = body.get("messages").and_then(Value::as_array) else {
        return Ok(());
    };
    match provider {
        ProviderKind::Anthropic => anthropic_content(messages),
        ProviderKind::OpenAi => openai_tool_call_ids(messages),
        // Responses: its items are read from `input`, not `messages`. Others: not known.
        _ => Ok(()),
    }
}

/// The characters Anthropic allows in a tool-use id.
fn anthropic_id_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn anthropic_content(messages: &[Value]) -> Result<(), Rejection> {
    let invalid = |message: &str| {
        Err(Rejection::new(
            ProviderKind::Anthropic,
            400,
            Some("invalid_request_error"),
            message,
        ))
    };
    let blank = |text: &str| {
        if text.is_empty() {
            Some("messages: text content blocks must be non-empty")
        } else if text.trim().is_empty() {
            Some("messages: text content blocks must contain non-whitespace text")
        } else {
            None
        }
    };
    let mut ids: Vec<&str> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let blocks = match m.get("content") {
            Some(Value::String(text)) => match blank(text) {
                Some(message) => return invalid(message),
                None => continue,
            },
            Some(Value::Array(blocks)) => blocks,
            _ => continue,
        };
        for (j, block) in blocks.iter().enumerate() {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    let text = block
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if let Some(message) = blank(text) {
                        return invalid(message);
                    }
                }
                Some("tool_use") => {
                    let id = block.get("id").and_then(Value::as_str).unwrap_or_default();
                    if id.is_empty() || !id.chars().all(anthropic_id_char) {
                        return invalid(&format!(
                            "messages.{i}.content.{j}.tool_use.id: String should match pattern \
                             '^[a-zA-Z0-9_-]+$'"
                        ));
                    }
                    if ids.contains(&id) {
                        return invalid(&format!(
                            "messages.{i}.content.{j}: `tool_use` ids must be unique"
                        ));
                    }
                    ids.push(id);
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// The longest `tool_calls[].id` OpenAI accepts, in characters.
const OPENAI_MAX_TOOL_CALL_ID: usize = 40;

fn openai_tool_call_ids(messages: &[Value]) -> Result<(), Rejection> {
    for (i, m) in messages.iter().enumerate() {
        let Some(calls) = m.get("tool_calls").and_then(Value::as_array) else {
            continue;
        };
        for (k, call) in calls.iter().enumerate() {
            let id = call.get("id").and_then(Value::as_str).unwrap_or_default();
            let length = id.chars().count();
            if length > OPENAI_MAX_TOOL_CALL_ID {
                let param = format!("messages[{i}].tool_calls[{k}].id");
                let message = format!(
                    "Invalid '{param}': string too long. Expected a string with maximum length \
                     {OPENAI_MAX_TOOL_CALL_ID}, but got a string with length {length} instead."
                );
                let body = json!({"error": {"message": message, "type": "invalid_request_error",
                                            "param": param, "code": "string_above_max_length"}});
                return Err(Rejection {
                    status: 400,
                    body: body.to_string().into_bytes(),
                    reason: message,
                });
            }
        }
    }
    Ok(())
}

/// 400: the conversation breaks tool-call pairing, in the provider's own words.
pub(crate) fn pairing(
    provider: ProviderKind,
    error: &PairingError,
    conversation: &Conversation,
) -> Rejection {
    let block_index = |message: usize, id: &str| {
        conversation
            .messages()
            .get(message)
            .and_then(|m| {
                m.content
                    .iter()
                    .position(|b| matches!(b, ContentBlock::ToolResult(r) if r.tool_use_id == id))
            })
            .unwrap_or(0)
    };
    match provider {
        ProviderKind::Anthropic => {
            let message = match error {
                PairingError::MissingResult {
                    message,
                    tool_use_id,
                } => format!(
                    "messages.{message}: `tool_use` ids were found without `tool_result` blocks \
                     immediately after: {tool_use_id}. Each `tool_use` block must have a \
                     corresponding `tool_result` block in the next message."
                ),
                PairingError::UnknownResult {
                    message,
                    tool_use_id,
                } => format!(
                    "messages.{message}.content.{}: unexpected `tool_use_id` found in \
                     `tool_result` blocks: {tool_use_id}. Each `tool_result` block must have a \
                     corresponding `tool_use` block in the previous message.",
                    block_index(*message, tool_use_id)
                ),
                PairingError::ResultsOutOfOrder { message } => format!(
                    "messages.{message}: `tool_result` blocks must come first in the message \
                     and in the order of the `tool_use` blocks they answer."
                ),
                PairingError::DuplicateToolUseId { message, .. } => {
                    format!("messages.{message}: `tool_use` ids must be unique")
                }
                other => other.to_string(),
            };
            Rejection::new(provider, 400, Some("invalid_request_error"), &message)
        }
        ProviderKind::OpenAi => match error {
            PairingError::MissingResult {
                message,
                tool_use_id,
            } => Rejection::openai_param(
                400,
                &format!(
                    "An assistant message with 'tool_calls' must be followed by tool messages \
                     responding to each 'tool_call_id'. The following tool_call_ids did not \
                     have response messages: {tool_use_id}"
                ),
                &format!("messages.[{message}].role"),
            ),
            PairingError::ResultsOutOfOrder { message } => Rejection::openai_param(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages \
                 responding to each 'tool_call_id'. (insufficient tool messages following \
                 tool_calls message)",
                &format!("messages.[{message}].role"),
            ),
            PairingError::UnknownResult { message, .. } => Rejection::openai_param(
                400,
                "Invalid parameter: messages with role 'tool' must be a response to a \
                 preceeding message with 'tool_calls'.",
                &format!("messages.[{message}].role"),
            ),
            PairingError::DuplicateToolUseId { message, .. } => Rejection::openai_param(
                400,
                "Invalid parameter: duplicate tool call ids in 'tool_calls'.",
                &format!("messages.[{message}].tool_calls"),
            ),
            other => Rejection::new(
                provider,
                400,
                Some("invalid_request_error"),
                &other.to_string(),
            ),
        },
        // The Responses API's own wording (quoted in openai/codex issues).
        ProviderKind::OpenAiResponses => {
            let message = match error {
                PairingError::MissingResult { tool_use_id, .. } => {
                    format!("No tool output found for function call {tool_use_id}.")
                }
                PairingError::UnknownResult { tool_use_id, .. } => format!(
                    "No tool call found for function call output with call_id {tool_use_id}."
                ),
                PairingError::ResultsOutOfOrder { .. } => {
                    "Function call outputs must follow their function calls, in order.".to_owned()
                }
                PairingError::DuplicateToolUseId { tool_use_id, .. } => {
                    format!("Duplicate value for 'call_id': {tool_use_id}.")
                }
                other => other.to_string(),
            };
            Rejection::openai_param(400, &message, "input")
        }
        _ => Rejection::new(
            provider,
            400,
            Some("invalid_request_error"),
            &error.to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_keys_never_show_the_middle() {
        assert_eq!(mask("short"), "*****");
        let m = mask("sk-proj-abcdefghijklmnop");
        assert!(
            m.starts_with("sk-") && m.ends_with("mnop") && !m.contains("abc"),
            "{m}"
        );
    }
}
