//! Known phrasings in error messages, for the cases where status and error type are not
//! enough: context overflow, spend/quota exhaustion and overload.
//!
//! Each marker is a lowercase substring; where it was seen is noted beside it.

/// Phrases that mean "the prompt does not fit the model's context window".
const CONTEXT_OVERFLOW: &[&str] = &[
    // Anthropic: "prompt is too long: 205351 tokens > 200000 maximum"
    "prompt is too long",
    // Anthropic: "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, …"
    "exceed context limit",
    // OpenAI ("This model's maximum context length is 8192 tokens. However, your messages
    // resulted in …"), vLLM, DeepSeek, OpenRouter ("This endpoint's maximum context length is …")
    "maximum context length",
    // OpenAI error code, also quoted in proxies' messages
    "context_length_exceeded",
    "context length exceeded",
    // OpenAI: "… Please reduce the length of the messages."
    "reduce the length of the messages",
    // llama.cpp server: "the request exceeds the available context size, try increasing it",
    // type "exceed_context_size_error"
    "exceeds the available context size",
    "exceed_context_size_error",
    // Ollama: "the input length exceeds the context length"
    "input length exceeds the context length",
    "input exceeds context length",
    // OpenAI Responses API: "Your input exceeds the context window of this model."
    "exceeds the context window",
    // Gemini (native and behind OpenAI-compatible proxies): "The input token count (…) exceeds
    // the maximum number of tokens allowed (…)"
    "exceeds the maximum number of tokens",
    // LiteLLM (SDK and proxy) names its mapped exception in the message:
    // "litellm.ContextWindowExceededError: …" (OpenHands/OpenHands#4894, #5350)
    "contextwindowexceedederror",
    "context window exceeded",
    // AWS Bedrock ValidationException: "Input is too long for requested model." (also
    // Replicate); "too many input tokens" (listed in BerriAI/litellm#21647)
    "input is too long",
    "too many input tokens",
    // Mistral: "Prompt contains N tokens and M draft tokens, too large for model with K
    // maximum context length" (BerriAI/litellm#21647)
    "too large for model with",
    // Perplexity: "The total length of all messages is too long." (BerriAI/litellm#21647)
    "length of all messages is too long",
    // Azure OpenAI: "Input tokens exceed the configured limit of 272000 tokens. Your messages
    // resulted in 509178 tokens. …" (BerriAI/litellm#15968)
    "input tokens exceed the configured limit",
];

/// Phrases that mean "money or quota is spent: no retry will help".
const QUOTA: &[&str] = &[
    // Anthropic 400: "Your credit balance is too low to access the Anthropic API. …"
    "credit balance is too low",
    // Anthropic 400 (own limit): "You have reached your specified API usage limits. …";
    // Anthropic 429 (tier cap): "You have reached your API usage limits: …"
    "api usage limits",
    "spend limit",
    // OpenAI 429 insufficient_quota: "You exceeded your current quota, please check your plan
    // and billing details. …"
    "exceeded your current quota",
    // OpenRouter 402: "Insufficient credits. …"
    "insufficient credits",
];

/// Phrases that mean "the reasoning passed back could not be verified": another
/// organisation's, key's or model's encrypted reasoning or thinking signature.
const REASONING_REJECTED: &[&str] = &[
    // OpenAI Responses 400, code `invalid_encrypted_content`: "The encrypted content
    // gAAA...Rg== could not be verified." (openai/codex#8132, #8128), later with "Reason:
    // Encrypted content could not be decrypted or parsed." (Wei-Shaw/sub2api#2863)
    "encrypted content could not be decrypted",
    // Anthropic 400 invalid_request_error: "messages.1.content.0: Invalid `signature` in
    // `thinking` block" (anthropics/claude-code#10627); proxies drop the backticks
    "invalid `signature` in `thinking` block",
    "invalid signature in thinking block",
    // Anthropic 400: "messages.23.content.2: Invalid `data` in `redacted_thinking` block"
    // (anthropics/claude-code#56708)
    "invalid `data` in `redacted_thinking` block",
    // Gemini API 400 INVALID_ARGUMENT for a thought signature it did not mint: "Corrupted
    // thought signature." (google-gemini/gemini-cli#13467, #14620); Vertex AI: "Unable to
    // submit request because Thought signature is not valid.." (RooCodeInc/Roo-Code#11716)
    "corrupted thought signature",
    "thought signature is not valid",
    // Anthropic 400 when the tool loop's last assistant turn lacks its thinking: "… When
    // `thinking` is enabled, a final `assistant` message must start with a thinking block
    // (preceeding the lastmost set of `tool_use` and `tool_result` blocks). …"
    // (Kilo-Org/kilocode#5219). The retry without reasoning goes without thinking.
    "a final `assistant` message must start with a thinking block",
    "a final assistant message must start with a thinking block",
];

/// Error codes that mean rejected reasoning.
const REASONING_REJECTED_CODES: &[&str] = &["invalid_encrypted_content"];

/// Error types and codes that mean context overflow.
const CONTEXT_OVERFLOW_CODES: &[&str] = &[
    "context_length_exceeded",
    "request_too_large",
    "exceed_context_size_error",
];

/// Error types and codes that mean quota exhaustion.
const QUOTA_CODES: &[&str] = &[
    "insufficient_quota",
    "billing_error",
    "billing_hard_limit_reached",
    "enforced_spend_limit_reached",
    // AWS (Bedrock): a service quota of the account, raised only by asking AWS.
    "servicequotaexceededexception",
];

/// Whether an error message says the prompt does not fit the context window.
///
/// Matches the known phrasings of Anthropic, OpenAI and OpenAI-compatible servers (vLLM,
/// llama.cpp, Ollama, OpenRouter), case-insensitively.
///
/// ```
/// use rebound_core::classify::is_context_overflow_message;
/// assert!(is_context_overflow_message("prompt is too long: 205351 tokens > 200000 maximum"));
/// assert!(is_context_overflow_message(
///     "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens."
/// ));
/// assert!(!is_context_overflow_message("Overloaded"));
/// ```
#[must_use]
pub fn is_context_overflow_message(message: &str) -> bool {
    contains_any(&message.to_lowercase(), CONTEXT_OVERFLOW)
}

/// `lowercase` mentions a context overflow.
pub(crate) fn mentions_overflow(lowercase: &str) -> bool {
    contains_any(lowercase, CONTEXT_OVERFLOW)
}

/// `lowercase` says passed-back reasoning could not be verified.
pub(crate) fn mentions_rejected_reasoning(lowercase: &str) -> bool {
    contains_any(lowercase, REASONING_REJECTED)
        || (lowercase.contains("the encrypted content")
            && lowercase.contains("could not be verified"))
}

/// `code` (lowercase) is a rejected-reasoning code.
pub(crate) fn is_rejected_reasoning_code(code: &str) -> bool {
    REASONING_REJECTED_CODES.contains(&code)
}

/// `lowercase` mentions spend or quota exhaustion.
pub(crate) fn mentions_quota(lowercase: &str) -> bool {
    contains_any(lowercase, QUOTA)
}

/// `lowercase` mentions overload.
pub(crate) fn mentions_overload(lowercase: &str) -> bool {
    lowercase.contains("overloaded")
}

/// `code` (lowercase) is an overflow type or code.
pub(crate) fn is_overflow_code(code: &str) -> bool {
    CONTEXT_OVERFLOW_CODES.contains(&code)
}

/// `code` (lowercase) is a quota type or code.
pub(crate) fn is_quota_code(code: &str) -> bool {
    QUOTA_CODES.contains(&code)
}

fn contains_any(haystack: &str, needles: &[&str]) -> bool {
    needles.iter().any(|needle| haystack.contains(needle))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_wording_is_neither_overflow_nor_quota() {
        for text in [
            "This request would exceed the rate limit for your organization of 40,000 input tokens per minute.",
            "Number of request tokens has exceeded your per-minute rate limit",
            "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM): Limit 30000, Used 29937, Requested 385. Please try again in 644ms.",
        ] {
            let lower = text.to_lowercase();
            assert!(!mentions_overflow(&lower), "{text}");
            assert!(!mentions_quota(&lower), "{text}");
        }
    }

    #[test]
    fn gateway_and_cloud_overflow_wordings_are_overflow() {
        for text in [
            "Prompt contains 40000 tokens and 0 draft tokens, too large for model with 32768 maximum context length",
            "The total length of all messages is too long.",
            "Input tokens exceed the configured limit of 272000 tokens. Your messages resulted in 509178 tokens. Please reduce the length of the messages.",
            "Too many input tokens. Max input tokens: 200000, request input token count: 210000",
            "litellm.ContextWindowExceededError: Context Window exceeded",
        ] {
            assert!(is_context_overflow_message(text), "{text}");
        }
    }

    #[test]
    fn overflow_check_ignores_case() {
        assert!(is_context_overflow_message("Prompt Is Too Long"));
        assert!(!is_context_overflow_message(""));
    }
}
