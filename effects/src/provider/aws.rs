//! How a request to Amazon Bedrock proves who sends it (feature `bedrock`): AWS credentials
//! and Signature Version 4, or a Bedrock API key.
//!
//! Bedrock takes either of two credentials, and [`BedrockAuth::from_env`] picks the one the
//! environment holds, as the AWS SDKs and CLI do:
//!
//! - A Bedrock API key (`AWS_BEARER_TOKEN_BEDROCK`), sent as `Authorization: Bearer …`;
//!   nothing is signed.
//! - AWS credentials (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN` for
//!   temporary ones), with which every request is signed ([`sign`]): the method, URL, the
//!   headers named and a hash of the body, for the service `bedrock` in one region, at one
//!   time. The signature is the AWS SDK's own (`aws-sigv4`), not ours.
//!
//! Either way the request gains a few headers ([`AuthHeaders`]) and nothing else changes, so
//! the caller sends exactly the URL, headers and body it asked to have signed.
//!
//! The secrets never print: [`AwsCredentials`] and [`AuthHeaders`] show no value in `Debug`,
//! no error here holds one, and the signer's own trace events (which write the session token
//! out) are not passed to the embedder's `tracing` subscriber.
//!
//! ```
//! use rebound_effects::provider::aws::{AwsCredentials, BedrockAuth, RequestToSign};
//! use rebound_effects::provider::bedrock_base_url;
//! use std::time::SystemTime;
//!
//! let region = "us-east-1";
//! let auth = BedrockAuth::SigV4 {
//!     credentials: AwsCredentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None),
//!     region: region.to_owned(),
//! };
//! let url = format!("{}/model/amazon.nova-lite-v1:0/converse-stream", bedrock_base_url(region));
//! let body = br#"{"messages":[{"role":"user","content":[{"text":"Hi"}]}]}"#;
//! let request = RequestToSign {
//!     method: "POST",
//!     url: &url,
//!     headers: &[("content-type", "application/json"), ("accept", "application/vnd.amazon.eventstream")],
//!     body,
//! };
//! let added = auth.headers(&request, SystemTime::now())?;
//! let names: Vec<&str> = added.iter().map(|(name, _)| name).collect();
//! assert_eq!(names, ["x-amz-date", "authorization"]);
//! # Ok::<(), rebound_effects::provider::aws::SignError>(())
//! ```

use super::ApiKey;
use aws_credential_types::Credentials;
use aws_sigv4::http_request::{self, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4::SigningParams;
use rebound_core::secrets::{Secrets, MIN_SECRET_BYTES};
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// The name Bedrock's runtime is signed for (the `bedrock` in a credential scope
/// `20250101/us-east-1/bedrock/aws4_request`).
const BEDROCK_SIGNING_NAME: &str = "bedrock";

/// The access key id's variable.
const ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
/// The secret access key's variable.
const SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
/// The session token's variable (temporary credentials: SSO, an assumed role).
const SESSION_TOKEN: &str = "AWS_SESSION_TOKEN";
/// The region's variable, read first.
const REGION: &str = "AWS_REGION";
/// The region's variable the AWS CLI sets, read when `AWS_REGION` is not.
const DEFAULT_REGION: &str = "AWS_DEFAULT_REGION";
/// The Bedrock API key's variable.
const BEARER_TOKEN: &str = "AWS_BEARER_TOKEN_BEDROCK";

/// The last second the signer's date format can write (9999-12-31T23:59:59Z).
const LAST_SIGNABLE_SECOND: u64 = 253_402_300_799;

/// AWS credentials, for signing requests to Bedrock: an access key id, a secret access key
/// and, for temporary credentials (SSO, an assumed role), a session token.
///
/// None of the three prints: `Debug` shows only whether there is a session token, and there
/// is no `Display`. They are held by the AWS SDK's own `Credentials`, which wipes them from
/// memory when dropped.
///
/// ```
/// use rebound_effects::provider::aws::AwsCredentials;
///
/// let credentials = AwsCredentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None);
/// assert_eq!(format!("{credentials:?}"), "AwsCredentials { access_key_id: ***, secret_access_key: ***, session_token: None }");
/// ```
#[derive(Clone)]
pub struct AwsCredentials {
    inner: Credentials,
}

impl AwsCredentials {
    /// Credentials from their three parts; surrounding whitespace (a trailing newline from a
    /// file) is trimmed, and an empty session token is none.
    #[must_use]
    pub fn new(
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        let session_token = session_token
            .map(|token| token.trim().to_owned())
            .filter(|token| !token.is_empty());
        AwsCredentials {
            inner: Credentials::new(
                access_key_id.into().trim(),
                secret_access_key.into().trim(),
                session_token,
                None,
                "rebound",
            ),
        }
    }

    /// The credentials in the standard environment variables: `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY` and, when set, `AWS_SESSION_TOKEN`.
    ///
    /// # Errors
    ///
    /// [`AwsConfigError::MissingVariable`] naming the first of the two required variables
    /// that is unset or empty; [`AwsConfigError::NotUnicode`] for one that is not UTF-8.
    pub fn from_env() -> Result<Self, AwsConfigError> {
        Self::read(&env_var)
    }

    /// The credentials in the variables `lookup` gives (the same names as
    /// [`from_env`](Self::from_env)), for an embedder whose settings are not the process's
    /// environment (and for tests, which must not change it).
    ///
    /// ```
    /// use rebound_effects::provider::aws::{AwsConfigError, AwsCredentials};
    ///
    /// let missing = AwsCredentials::from_lookup(|name| {
    ///     (name == "AWS_ACCESS_KEY_ID").then(|| "AKIDEXAMPLE".to_owned())
    /// });
    /// assert_eq!(
    ///     missing.unwrap_err(),
    ///     AwsConfigError::MissingVariable { var: "AWS_SECRET_ACCESS_KEY" }
    /// );
    /// ```
    ///
    /// # Errors
    ///
    /// [`AwsConfigError::MissingVariable`] naming the first of the two required variables
    /// that is unset or empty.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, AwsConfigError> {
        Self::read(&|name| Ok(lookup(name)))
    }

    fn read(get: &Lookup<'_>) -> Result<Self, AwsConfigError> {
        let access_key_id = required(get, ACCESS_KEY_ID)?;
        let secret_access_key = required(get, SECRET_ACCESS_KEY)?;
        let session_token = optional(get, SESSION_TOKEN)?;
        Ok(AwsCredentials::new(
            access_key_id,
            secret_access_key,
            session_token,
        ))
    }

    /// Whether these are temporary credentials, sent with their session token
    /// (`x-amz-security-token`).
    #[must_use]
    pub fn has_session_token(&self) -> bool {
        self.inner.session_token().is_some()
    }

    /// The parts to mask wherever the machine writes text ([`Secrets`]): the access key id,
    /// the secret access key and the session token, those at least [`MIN_SECRET_BYTES`]
    /// long. A provider names them in
    /// [`Provider::secrets`](crate::provider::Provider::secrets).
    #[must_use]
    pub fn secrets(&self) -> Secrets {
        let parts = [
            Some(self.inner.access_key_id()),
            Some(self.inner.secret_access_key()),
            self.inner.session_token(),
        ];
        long_enough(parts.into_iter().flatten())
    }
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let token = if self.has_session_token() {
            "Some(***)"
        } else {
            "None"
        };
        write!(
            f,
            "AwsCredentials {{ access_key_id: ***, secret_access_key: ***, session_token: {token} }}"
        )
    }
}

/// The AWS region in the environment: `AWS_REGION`, else `AWS_DEFAULT_REGION` (the AWS
/// CLI's), trimmed; an empty variable counts as unset.
///
/// # Errors
///
/// [`AwsConfigError::MissingRegion`] when neither is set; [`AwsConfigError::InvalidRegion`]
/// for a value that is not a region's name (lowercase letters, digits and `-`), which would
/// otherwise go into the endpoint's host name; [`AwsConfigError::NotUnicode`].
pub fn aws_region_from_env() -> Result<String, AwsConfigError> {
    read_region(&env_var)
}

/// The AWS region in the variables `lookup` gives: as [`aws_region_from_env`], for settings
/// that are not the process's environment.
///
/// ```
/// use rebound_effects::provider::aws::aws_region_from_lookup;
///
/// let region = aws_region_from_lookup(|name| {
///     (name == "AWS_DEFAULT_REGION").then(|| "eu-west-3\n".to_owned())
/// });
/// assert_eq!(region.as_deref(), Ok("eu-west-3"));
/// ```
///
/// # Errors
///
/// As [`aws_region_from_env`]'s.
pub fn aws_region_from_lookup(
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<String, AwsConfigError> {
    read_region(&|name| Ok(lookup(name)))
}

fn read_region(get: &Lookup<'_>) -> Result<String, AwsConfigError> {
    let region = match optional(get, REGION)? {
        Some(region) => region,
        None => optional(get, DEFAULT_REGION)?.ok_or(AwsConfigError::MissingRegion)?,
    };
    if is_region_name(&region) {
        Ok(region)
    } else {
        Err(AwsConfigError::InvalidRegion {
            region: shown(&region),
        })
    }
}

/// How requests to Bedrock are authorized: signed with AWS credentials, or with a Bedrock API
/// key. Its `Debug` shows the region, never a credential.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum BedrockAuth {
    /// Each request signed with Signature Version 4 ([`sign`]) for the service `bedrock`.
    SigV4 {
        /// The credentials signed with.
        credentials: AwsCredentials,
        /// The region signed for: the endpoint's ([`bedrock_base_url`](super::bedrock_base_url)).
        region: String,
    },
    /// A Bedrock API key (`AWS_BEARER_TOKEN_BEDROCK`), sent as `Authorization: Bearer {key}`;
    /// nothing is signed.
    BearerToken(ApiKey),
}

impl BedrockAuth {
    /// The credentials in the environment, as the AWS SDKs read them for Bedrock: a Bedrock
    /// API key in `AWS_BEARER_TOKEN_BEDROCK` when it is set (and not empty); else AWS
    /// credentials ([`AwsCredentials::from_env`]) signing for the region in `AWS_REGION` or
    /// `AWS_DEFAULT_REGION` ([`aws_region_from_env`]).
    ///
    /// The endpoint's region is needed either way: read it with [`aws_region_from_env`].
    ///
    /// # Errors
    ///
    /// [`AwsConfigError::MissingVariable`] for a missing credential variable (its message
    /// names the API key's variable too), [`AwsConfigError::MissingRegion`],
    /// [`AwsConfigError::InvalidRegion`], [`AwsConfigError::NotUnicode`].
    pub fn from_env() -> Result<Self, AwsConfigError> {
        Self::read(&env_var)
    }

    /// The credentials in the variables `lookup` gives: as [`from_env`](Self::from_env), for
    /// settings that are not the process's environment.
    ///
    /// ```
    /// use rebound_effects::provider::aws::BedrockAuth;
    ///
    /// let auth = BedrockAuth::from_lookup(|name| match name {
    ///     "AWS_BEARER_TOKEN_BEDROCK" => Some("bedrock-api-key-example".to_owned()),
    ///     "AWS_ACCESS_KEY_ID" => Some("AKIDEXAMPLE".to_owned()),
    ///     _ => None,
    /// })?;
    /// assert!(matches!(auth, BedrockAuth::BearerToken(_)));
    /// # Ok::<(), rebound_effects::provider::aws::AwsConfigError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`from_env`](Self::from_env)'s.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, AwsConfigError> {
        Self::read(&|name| Ok(lookup(name)))
    }

    fn read(get: &Lookup<'_>) -> Result<Self, AwsConfigError> {
        if let Some(token) = optional(get, BEARER_TOKEN)? {
            return Ok(BedrockAuth::BearerToken(ApiKey::new(token)));
        }
        Ok(BedrockAuth::SigV4 {
            credentials: AwsCredentials::read(get)?,
            region: read_region(get)?,
        })
    }

    /// The headers that authorize `request` sent at `time` (the wall clock's
    /// `SystemTime::now()`; AWS refuses a signature more than five minutes off its own
    /// clock): with AWS credentials, [`sign`]'s; with an API key, `authorization: Bearer
    /// {key}`.
    ///
    /// # Errors
    ///
    /// [`sign`]'s, and [`SignError::InvalidHeader`] for an API key no header can carry.
    pub fn headers(
        &self,
        request: &RequestToSign<'_>,
        time: SystemTime,
    ) -> Result<AuthHeaders, SignError> {
        match self {
            BedrockAuth::SigV4 {
                credentials,
                region,
            } => sign(request, credentials, region, time),
            BedrockAuth::BearerToken(key) => {
                let value = format!("Bearer {}", key.expose());
                if !is_header_value(&value) {
                    return Err(SignError::InvalidHeader {
                        name: "authorization".to_owned(),
                    });
                }
                Ok(AuthHeaders {
                    headers: vec![("authorization", value)],
                })
            }
        }
    }

    /// The credentials to mask wherever the machine writes text: the API key, or
    /// [`AwsCredentials::secrets`].
    #[must_use]
    pub fn secrets(&self) -> Secrets {
        match self {
            BedrockAuth::SigV4 { credentials, .. } => credentials.secrets(),
            BedrockAuth::BearerToken(key) => long_enough([key.expose()]),
        }
    }
}

/// The parts of an HTTP request a signature covers, as they will be sent.
///
/// `url` is the exact URL the HTTP client sends, percent-encoding included (a model id with
/// `:` or an ARN's `/` escaped as the client escapes it: pass the client's own
/// `Url::as_str()`); `headers` those sent that should be signed (at least `content-type`
/// and `accept`; the host is taken from the URL); `body` the exact bytes sent. Its `Debug`
/// shows the headers' names and the body's length, not their contents (a gateway's header
/// may be a credential).
#[derive(Clone, Copy)]
pub struct RequestToSign<'a> {
    /// The HTTP method, e.g. `POST`.
    pub method: &'a str,
    /// The full URL, e.g.
    /// `https://bedrock-runtime.us-east-1.amazonaws.com/model/amazon.nova-lite-v1:0/converse-stream`.
    pub url: &'a str,
    /// Headers that are sent and signed, as `(name, value)`.
    pub headers: &'a [(&'a str, &'a str)],
    /// The request body.
    pub body: &'a [u8],
}

impl fmt::Debug for RequestToSign<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| *name).collect();
        f.debug_struct("RequestToSign")
            .field("method", &self.method)
            .field("url", &self.url)
            .field("headers", &names)
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// The headers to add to a request to authorize it ([`sign`], [`BedrockAuth::headers`]),
/// lowercase names first to last. Its `Debug` shows their names only: `authorization` and
/// `x-amz-security-token` are credentials (mark them sensitive in the HTTP client, e.g.
/// `HeaderValue::set_sensitive`).
#[derive(Clone, PartialEq, Eq)]
pub struct AuthHeaders {
    headers: Vec<(&'static str, String)>,
}

impl AuthHeaders {
    /// Each header's `(name, value)`.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&'static str, &str)> {
        self.headers
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
    }

    /// The value of the header `name` (lowercase), if it is one of them.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }
}

impl fmt::Debug for AuthHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AuthHeaders")?;
        f.debug_list()
            .entries(self.headers.iter().map(|(name, _)| name))
            .finish()
    }
}

/// Signs `request` with Signature Version 4 for the Bedrock service in `region` at `time`,
/// and returns the headers to add: `x-amz-date`, `authorization` and, with temporary
/// credentials, `x-amz-security-token`. (No `x-amz-content-sha256`: the body's hash is
/// signed but not sent, as the AWS SDKs do for Bedrock.)
///
/// The signature is `aws-sigv4`'s, the AWS SDK for Rust's signer. `time` is an argument so
/// a signature can be reproduced; pass `SystemTime::now()` when sending.
///
/// ```
/// use rebound_effects::provider::aws::{sign, AwsCredentials, RequestToSign};
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let credentials = AwsCredentials::new("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", None);
/// let request = RequestToSign {
///     method: "POST",
///     url: "https://bedrock-runtime.us-east-1.amazonaws.com/model/amazon.nova-lite-v1:0/converse-stream",
///     headers: &[("content-type", "application/json")],
///     body: b"{}",
/// };
/// let time = UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01T00:00:00Z
/// let headers = sign(&request, &credentials, "us-east-1", time)?;
/// assert_eq!(headers.get("x-amz-date"), Some("20260101T000000Z"));
/// let authorization = headers.get("authorization").unwrap();
/// assert!(authorization.starts_with(
///     "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20260101/us-east-1/bedrock/aws4_request, \
///      SignedHeaders=content-type;host;x-amz-date, Signature="
/// ));
/// # Ok::<(), rebound_effects::provider::aws::SignError>(())
/// ```
///
/// # Errors
///
/// [`SignError::InvalidRegion`], [`SignError::InvalidUrl`] (not an absolute http(s) URL
/// with a host), [`SignError::InvalidHeader`] (a name or value no header can carry, or one
/// the signature adds itself), [`SignError::InvalidTime`] (before 1970 or after 9999),
/// [`SignError::Signer`].
pub fn sign(
    request: &RequestToSign<'_>,
    credentials: &AwsCredentials,
    region: &str,
    time: SystemTime,
) -> Result<AuthHeaders, SignError> {
    if !is_region_name(region) {
        return Err(SignError::InvalidRegion {
            region: shown(region),
        });
    }
    sign_for(BEDROCK_SIGNING_NAME, request, credentials, region, time)
}

/// [`sign`] for the service `name`: the AWS test suite's vectors are for a service called
/// `service`.
fn sign_for(
    name: &str,
    request: &RequestToSign<'_>,
    credentials: &AwsCredentials,
    region: &str,
    time: SystemTime,
) -> Result<AuthHeaders, SignError> {
    check_url(request.url)?;
    for (name, value) in request.headers {
        let lower = name.to_ascii_lowercase();
        let added = [
            "authorization",
            "x-amz-date",
            "x-amz-security-token",
            "x-amz-content-sha256",
        ];
        if !is_header_name(name) || !is_header_value(value) || added.contains(&lower.as_str()) {
            return Err(SignError::InvalidHeader { name: shown(name) });
        }
    }
    let seconds = time.duration_since(UNIX_EPOCH).map(|d| d.as_secs());
    if !matches!(seconds, Ok(s) if s <= LAST_SIGNABLE_SECOND) {
        return Err(SignError::InvalidTime);
    }
    let identity = credentials.inner.clone().into();
    let params = SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(name)
        .time(time)
        .settings(SigningSettings::default())
        .build()
        .map_err(|e| SignError::Signer(e.to_string()))?
        .into();
    let signable = SignableRequest::new(
        request.method,
        request.url,
        request.headers.iter().map(|&(name, value)| (name, value)),
        SignableBody::Bytes(request.body),
    )
    .map_err(|e| SignError::Signer(e.to_string()))?;
    // The signer's trace events write out the canonical request, the session token's
    // header among it, and the identity with the access key id: none of them reaches the
    // embedder's subscriber (or a `tracing` log bridge), whatever level it records.
    let signed =
        tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), || {
            http_request::sign(signable, &params)
        })
        .map_err(|e| SignError::Signer(e.to_string()))?;
    let (instructions, _signature) = signed.into_parts();
    let (headers, _query) = instructions.into_parts();
    Ok(AuthHeaders {
        headers: headers
            .into_iter()
            .map(|header| (header.name(), header.value().to_owned()))
            .collect(),
    })
}

/// Why AWS credentials or a region could not be read. Never holds a credential.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AwsConfigError {
    /// A credential variable is unset or empty.
    #[error(
        "no AWS credentials: set the {var} environment variable (or AWS_BEARER_TOKEN_BEDROCK \
         to a Bedrock API key)"
    )]
    MissingVariable {
        /// The variable's name.
        var: &'static str,
    },
    /// Neither region variable is set.
    #[error("no AWS region: set the AWS_REGION environment variable, e.g. to us-east-1")]
    MissingRegion,
    /// A region that is not a region's name.
    #[error(
        "`{region}` is not an AWS region: a region is lowercase letters, digits and -, e.g. \
         us-east-1"
    )]
    InvalidRegion {
        /// The value, with control characters escaped, at most 64 characters of it.
        region: String,
    },
    /// A variable that is not UTF-8.
    #[error("the {var} environment variable is not valid UTF-8")]
    NotUnicode {
        /// The variable's name.
        var: &'static str,
    },
}

/// Why a request could not be signed. Never holds a credential or a header's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignError {
    /// The region to sign for is not a region's name.
    #[error(
        "cannot sign for `{region}`: not an AWS region (lowercase letters, digits and -, e.g. \
         us-east-1)"
    )]
    InvalidRegion {
        /// The value, with control characters escaped, at most 64 characters of it.
        region: String,
    },
    /// The URL is not an absolute http(s) URL with a host.
    #[error("cannot sign the request: its URL {reason}")]
    InvalidUrl {
        /// What is wrong with it (never the URL, which may carry a password).
        reason: String,
    },
    /// A header that cannot be signed: a name or value no header can carry, or one the
    /// signature itself adds (`authorization`, `x-amz-date`, `x-amz-security-token`,
    /// `x-amz-content-sha256`).
    #[error(
        "cannot sign header `{name}`: not a valid header, or one the signature adds itself \
         (authorization, x-amz-date, x-amz-security-token, x-amz-content-sha256)"
    )]
    InvalidHeader {
        /// The header's name, with control characters escaped, at most 64 characters of it
        /// (never its value).
        name: String,
    },
    /// A time the signature cannot carry: before 1970 or after 9999.
    #[error("cannot sign the request: the clock reads before 1970 or after 9999")]
    InvalidTime,
    /// The signer refused the request otherwise (its message, which holds no credential).
    #[error("the AWS signer refused the request: {0}")]
    Signer(String),
}

/// Reads a variable: `Ok(None)` when unset.
type Lookup<'a> = dyn Fn(&'static str) -> Result<Option<String>, AwsConfigError> + 'a;

/// The process environment's variable `name`.
fn env_var(name: &'static str) -> Result<Option<String>, AwsConfigError> {
    match std::env::var(name) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(_)) => Err(AwsConfigError::NotUnicode { var: name }),
    }
}

/// The variable `name`, trimmed, or `None` when it is unset or empty.
fn optional(get: &Lookup<'_>, name: &'static str) -> Result<Option<String>, AwsConfigError> {
    Ok(get(name)?
        .map(|value| value.trim().to_owned())
        .filter(|value| !value.is_empty()))
}

/// The variable `name`, trimmed; unset or empty is an error naming it.
fn required(get: &Lookup<'_>, name: &'static str) -> Result<String, AwsConfigError> {
    optional(get, name)?.ok_or(AwsConfigError::MissingVariable { var: name })
}

/// A region's name: `us-east-1`, `us-gov-west-1`, `ap-southeast-5`.
fn is_region_name(region: &str) -> bool {
    !region.is_empty()
        && !region.starts_with('-')
        && !region.ends_with('-')
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// A header name: an HTTP token.
fn is_header_name(name: &str) -> bool {
    reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_ok()
}

/// A header value: visible ASCII, spaces and tabs (what the signer takes).
fn is_header_value(value: &str) -> bool {
    value
        .bytes()
        .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
}

/// An absolute http(s) URL with a host, or why not.
fn check_url(url: &str) -> Result<(), SignError> {
    let bad = |reason: String| Err(SignError::InvalidUrl { reason });
    match reqwest::Url::parse(url) {
        Err(e) => bad(format!("cannot be parsed ({e})")),
        Ok(parsed) if !matches!(parsed.scheme(), "http" | "https") => {
            bad("is not an http(s) URL".to_owned())
        }
        Ok(parsed) if parsed.host_str().is_none_or(str::is_empty) => bad("has no host".to_owned()),
        Ok(_) => Ok(()),
    }
}

/// `text` as an error may show it: control characters escaped, at most 64 characters.
fn shown(text: &str) -> String {
    text.chars().take(64).flat_map(char::escape_debug).collect()
}

/// `secrets` at least [`MIN_SECRET_BYTES`] long (a shorter one would mask ordinary words).
fn long_enough<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Secrets {
    let long = secrets
        .into_iter()
        .map(str::trim)
        .filter(|s| s.len() >= MIN_SECRET_BYTES);
    // Every one is long enough: nothing is refused.
    Secrets::new(long).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    //! The AWS Signature Version 4 test suite's vectors (shipped in the `aws-sigv4` crate,
    //! `aws-signing-test-suite/v4/`), through the same path [`sign`] takes with the service
    //! they are for (`service`). Bedrock's own vectors, computed by botocore, are in
    //! `tests/it/aws_sigv4.rs`.

    use super::*;
    use std::time::Duration;

    /// The suite's credentials.
    fn suite_credentials(token: Option<&str>) -> AwsCredentials {
        AwsCredentials::new(
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
            token.map(str::to_owned),
        )
    }

    /// The suite's time: 2015-08-30T12:36:00Z.
    fn suite_time() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_440_938_160)
    }

    fn suite_sign(method: &str, token: Option<&str>) -> AuthHeaders {
        let request = RequestToSign {
            method,
            url: "https://example.amazonaws.com/",
            headers: &[],
            body: b"",
        };
        sign_for(
            "service",
            &request,
            &suite_credentials(token),
            "us-east-1",
            suite_time(),
        )
        .expect("the suite's request signs")
    }

    #[test]
    fn post_vanilla_matches_the_aws_test_suite() {
        // v4/post-vanilla/header-signed-request.txt
        let headers = suite_sign("POST", None);
        assert_eq!(headers.get("x-amz-date"), Some("20150830T123600Z"));
        assert_eq!(
            headers.get("authorization"),
            Some(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
                 SignedHeaders=host;x-amz-date, \
                 Signature=5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"
            )
        );
        assert_eq!(headers.iter().len(), 2);
    }

    #[test]
    fn get_vanilla_with_session_token_matches_the_aws_test_suite() {
        // v4/get-vanilla-with-session-token/header-signed-request.txt
        let token = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267";
        let headers = suite_sign("GET", Some(token));
        assert_eq!(headers.get("x-amz-security-token"), Some(token));
        assert_eq!(
            headers.get("authorization"),
            Some(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
                 SignedHeaders=host;x-amz-date;x-amz-security-token, \
                 Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8"
            )
        );
    }
}
