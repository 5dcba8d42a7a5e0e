//! Configuration errors: problems found before any request is made.

use rebound_core::ProviderKind;

/// A configuration problem: missing key, malformed URL, unknown model. Reported before any
/// request is sent; the CLI exits with status 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The API key variable is not set.
    #[error("no API key: set the {var} environment variable (or pass --api-key-env VAR)")]
    MissingApiKey {
        /// The variable that was read.
        var: String,
    },
    /// The API key is empty.
    #[error("the {provider} API key is empty")]
    EmptyApiKey {
        /// Which provider.
        provider: ProviderKind,
    },
    /// The base URL is not a usable http(s) URL.
    #[error("bad base URL `{url}`: {reason}")]
    BadUrl {
        /// The URL, with any credentials removed.
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// No model was named.
    #[error("no model given: pass --model NAME")]
    EmptyModel,
    /// A model alias that rebound does not know.
    #[error("unknown model alias `{alias}`; known aliases: {known}")]
    UnknownModelAlias {
        /// The alias given.
        alias: String,
        /// The aliases that exist.
        known: String,
    },
    /// The HTTP client could not be built.
    #[error("could not set up the HTTP client: {0}")]
    HttpClient(String),
    /// Request options the provider's API would refuse (a parameter it lacks, a value out
    /// of its range, an extra body key rebound sets).
    #[error("{0}")]
    Options(#[from] rebound_core::wire::OptionsError),
    /// An extra header that cannot be sent.
    #[error("{0}")]
    Header(#[from] HeaderError),
    /// An extra header that would replace one rebound sets.
    #[error(
        "header `{name}` cannot be set for {provider}: rebound sets it (the API key, the \
         content type, the API version) or the HTTP client does"
    )]
    ReservedHeader {
        /// The header's name (never its value).
        name: String,
        /// Which provider.
        provider: ProviderKind,
    },
    /// Any other invalid setting.
    #[error("{0}")]
    Invalid(String),
}

/// A header that cannot be sent. Never holds a header's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HeaderError {
    /// Not a valid HTTP header name.
    #[error("`{name}` is not a valid HTTP header name (letters, digits and -, no spaces)")]
    InvalidName {
        /// The name, with control characters escaped, at most 64 characters of it.
        name: String,
    },
    /// A value with characters no header may carry (a newline or another control
    /// character).
    #[error(
        "the value of header `{name}` contains characters not allowed in an HTTP header (a \
         newline or another control character)"
    )]
    InvalidValue {
        /// The header's name.
        name: String,
    },
    /// A line without the `:` between name and value.
    #[error("a header must be given as `Name: value`")]
    NotAHeaderLine,
}
