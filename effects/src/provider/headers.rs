//! Extra request headers whose values never print.

use crate::config::HeaderError;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use std::fmt;

/// Headers an [`HttpProvider`](super::HttpProvider) adds to every request: a beta flag
/// (`anthropic-beta`), an organization (`OpenAI-Organization`), a gateway's own credential.
///
/// Names and values are checked as they are added ([`HeaderError`]). Values are treated as
/// secrets: marked sensitive (HTTP/2 never indexes them), and left out of `Debug` (which shows
/// the names only), of errors and of logs, like an [`ApiKey`](super::ApiKey). The headers
/// rebound sets itself (the API key's, `content-type`, `accept`, `anthropic-version`, and the
/// ones the HTTP client manages) are refused when the provider is built
/// ([`ConfigError::ReservedHeader`](crate::config::ConfigError::ReservedHeader)), so none can
/// be replaced by accident.
///
/// ```
/// use rebound_effects::provider::ExtraHeaders;
///
/// let headers = ExtraHeaders::new()
///     .with("anthropic-beta", "context-1m-2025-08-07")?
///     .with("x-gateway-token", "gw-secret")?;
/// assert_eq!(format!("{headers:?}"), r#"ExtraHeaders(["anthropic-beta", "x-gateway-token"])"#);
/// assert!(ExtraHeaders::new().with("bad name", "v").is_err());
/// # Ok::<(), rebound_effects::provider::HeaderError>(())
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ExtraHeaders {
    map: HeaderMap,
}

impl ExtraHeaders {
    /// No headers.
    #[must_use]
    pub fn new() -> Self {
        ExtraHeaders::default()
    }

    /// Sets header `name` to `value`, replacing an earlier value of that name.
    pub fn insert(&mut self, name: &str, value: &str) -> Result<(), HeaderError> {
        let header = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
            HeaderError::InvalidName {
                name: printable(name),
            }
        })?;
        let mut value =
            HeaderValue::from_str(value.trim()).map_err(|_| HeaderError::InvalidValue {
                name: header.as_str().to_owned(),
            })?;
        value.set_sensitive(true);
        self.map.insert(header, value);
        Ok(())
    }

    /// The same headers with `name` set to `value`.
    pub fn with(mut self, name: &str, value: &str) -> Result<Self, HeaderError> {
        self.insert(name, value)?;
        Ok(self)
    }

    /// Takes the headers of a [`HeaderMap`] (all of its values, each marked sensitive).
    #[must_use]
    pub fn from_map(mut map: HeaderMap) -> Self {
        for value in map.values_mut() {
            value.set_sensitive(true);
        }
        ExtraHeaders { map }
    }

    /// Parses one `Name: value` line, as `curl -H` takes it, into the headers.
    pub fn insert_line(&mut self, line: &str) -> Result<(), HeaderError> {
        let Some((name, value)) = line.split_once(':') else {
            // Whatever came is maybe a bare value (a token): show none of it.
            return Err(HeaderError::NotAHeaderLine);
        };
        self.insert(name, value)
    }

    /// The header names, lower-case, in no particular order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(HeaderName::as_str)
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The headers, to add to a request.
    #[must_use]
    pub fn as_map(&self) -> &HeaderMap {
        &self.map
    }
}

impl fmt::Debug for ExtraHeaders {
    /// The names only: values may be credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut names: Vec<&str> = self.names().collect();
        names.sort_unstable();
        f.debug_tuple("ExtraHeaders").field(&names).finish()
    }
}

/// `text` with control characters escaped, at most 64 characters of it.
fn printable(text: &str) -> String {
    text.chars().take(64).flat_map(char::escape_debug).collect()
}

/// The headers rebound or the HTTP client sets on every request: an extra header may not
/// replace them.
const SET_ON_EVERY_REQUEST: [&str; 6] = [
    "content-type",
    "accept",
    "content-length",
    "host",
    "transfer-encoding",
    "connection",
];

/// Whether an extra header `name` (lowercase) would replace one rebound sets on a request to
/// `provider` (its credential and API version) or that the HTTP client manages.
pub(crate) fn reserved(provider: rebound_core::ProviderKind, name: &str) -> bool {
    let own: &[&str] = match provider {
        rebound_core::ProviderKind::Anthropic => &["x-api-key", "anthropic-version"],
        rebound_core::ProviderKind::Gemini => &["x-goog-api-key", "authorization"],
        rebound_core::ProviderKind::Bedrock => &[
            "authorization",
            "x-amz-date",
            "x-amz-security-token",
            "x-amz-content-sha256",
        ],
        _ => &["authorization"],
    };
    own.contains(&name) || SET_ON_EVERY_REQUEST.contains(&name)
}
