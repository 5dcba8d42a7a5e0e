//! Context windows of common models, for compacting before the provider refuses a request.

/// Context windows in tokens by model-name prefix; the longest matching prefix wins.
///
/// From the providers' model pages (Anthropic "Models overview", OpenAI model docs, Google
/// Gemini model docs, DeepSeek and Mistral API docs). Windows that need an opt-in (Claude's
/// 1M-token beta) are not assumed. Override with `--context-window` or
/// [`TargetSpec::context_window`](crate::TargetSpec::context_window).
const WINDOWS: &[(&str, u64)] = &[
    // Anthropic
    ("claude-", 200_000),
    // OpenAI
    ("gpt-5", 400_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-4-turbo", 128_000),
    ("gpt-4-0125", 128_000),
    ("gpt-4-1106", 128_000),
    ("gpt-4", 8_192),
    ("gpt-3.5-turbo", 16_385),
    ("o1", 200_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("gpt-oss", 131_072),
    // Google
    ("gemini-1.5", 1_048_576),
    ("gemini-2", 1_048_576),
    // DeepSeek, Mistral
    ("deepseek-", 128_000),
    ("mistral-large", 128_000),
    ("codestral", 256_000),
];

/// The context window of `model` in tokens, when it is a known model.
///
/// A provider prefix (`anthropic/`, `openai/`, as gateways write) is ignored.
///
/// ```
/// use rebound_core::context_window;
/// assert_eq!(context_window("claude-sonnet-4-5"), Some(200_000));
/// assert_eq!(context_window("openai/gpt-4o-mini"), Some(128_000));
/// assert_eq!(context_window("gpt-4"), Some(8_192));
/// assert_eq!(context_window("my-local-model"), None);
/// ```
#[must_use]
pub fn context_window(model: &str) -> Option<u64> {
    let name = model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase();
    WINDOWS
        .iter()
        .filter(|(prefix, _)| name.starts_with(prefix))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|&(_, tokens)| tokens)
}
