//! API keys that never print.

use std::fmt;

/// A provider API key. Its `Debug` form is redacted and it has no `Display`, so it cannot
/// end up in a log line, an error message, a trace or a session by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key; surrounding whitespace (a trailing newline from a file) is trimmed.
    #[must_use]
    pub fn new(key: impl Into<String>) -> Self {
        ApiKey(key.into().trim().to_owned())
    }

    /// The key, for building the request header only.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the key is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_key() {
        let k = ApiKey::new("sk-ant-secret-123\n");
        assert_eq!(format!("{k:?}"), "ApiKey(***)");
        assert_eq!(k.expose(), "sk-ant-secret-123");
    }
}
