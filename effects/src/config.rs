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
    Header(#[from] crate::provider::HeaderError),
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
