//! HTTP response headers as plain data, so classification stays a pure function.

use serde::{Deserialize, Serialize};

/// An ordered list of HTTP header (name, value) pairs with case-insensitive lookup.
///
/// Drivers build it from whatever HTTP library they use; classification and the simulator
/// read it. Values that were not valid UTF-8 should be dropped by the driver (they are never
/// needed for a decision).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    /// An empty header list.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a header, keeping earlier ones with the same name.
    pub fn push(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.push((name.into(), value.into()));
    }

    /// Builder form of [`Headers::push`].
    #[must_use]
    pub fn with(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.push(name, value);
        self
    }

    /// The first value of `name`, compared case-insensitively, trimmed of surrounding spaces.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    }

    /// All (name, value) pairs in the order they were added.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// How many headers there are.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no headers.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<N: Into<String>, V: Into<String>> FromIterator<(N, V)> for Headers {
    fn from_iter<T: IntoIterator<Item = (N, V)>>(iter: T) -> Self {
        Headers(
            iter.into_iter()
                .map(|(n, v)| (n.into(), v.into()))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_ignores_case_and_returns_the_first_value() {
        let h = Headers::new()
            .with("Retry-After", " 5 ")
            .with("retry-after", "9");
        assert_eq!(h.get("retry-after"), Some("5"));
        assert_eq!(h.get("RETRY-AFTER"), Some("5"));
        assert_eq!(h.get("x-missing"), None);
    }
}
