//! The HTTP provider: Anthropic Messages, OpenAI Chat Completions and OpenAI Responses over
//! reqwest, streaming.

use super::{ApiKey, BoxFuture, DeltaSink, ExtraHeaders, Provider, ProviderRequest, SendError};
use crate::config::ConfigError;
use rebound_core::classify::{classify_http, classify_transport_error, TransportError};
use rebound_core::run::{Stall, StreamWatch};
use rebound_core::secrets::{Secrets, MIN_SECRET_BYTES};
use rebound_core::wire::{
    self, RequestOptions, RequestParams, StreamDecoder, ToolIdForm, WireError,
};
use rebound_core::{
    AssistantResponse, Conversation, Headers, Millis, ProviderFailure, ProviderKind,
    StreamDeadlines, TargetIdentity, ToolSpec, TransportFault,
};
use std::error::Error as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

/// The Anthropic API version header value sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Most bytes of an error response body read for classification.
const MAX_ERROR_BODY: usize = 1 << 20;

/// Most bytes of a successful non-streamed (JSON) response body: twice the largest message
/// a stream may assemble (64 MiB, `StreamLimits::default`), for JSON escaping and the
/// envelope. A larger body fails like a stream over its limit.
const MAX_RESPONSE_BODY: usize = 128 << 20;

/// Everything an [`HttpProvider`] needs. Build with [`HttpProviderConfig::new`] and the
/// `with_*` methods (or set the fields); [`HttpProvider::new`] and
/// [`HttpProvider::with_client`] validate it.
///
/// ```
/// use rebound_core::ProviderKind;
/// use rebound_effects::provider::{
///     ApiKey, ExtraHeaders, HttpProviderConfig, RequestOptions, ToolChoice,
/// };
///
/// let config = HttpProviderConfig::new(ProviderKind::Anthropic, "claude-sonnet-4-6", ApiKey::new("k"))
///     .with_max_tokens(16_000)
///     .with_options(
///         RequestOptions::new()
///             .with_thinking_budget(8_000)
///             .with_tool_choice(ToolChoice::Auto)
///             .with_parallel_tool_calls(false),
///     )
///     .with_headers(ExtraHeaders::new().with("anthropic-beta", "context-1m-2025-08-07")?);
/// assert_eq!(config.max_tokens, 16_000);
/// # Ok::<(), rebound_effects::provider::HeaderError>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HttpProviderConfig {
    /// Which API the server speaks.
    pub provider: ProviderKind,
    /// Base URL: Anthropic's without `/v1` (`https://api.anthropic.com`), OpenAI's with it
    /// (`https://api.openai.com/v1`), as the official SDKs take them.
    pub base_url: String,
    /// Model id sent in each request.
    pub model: String,
    /// The API key.
    pub api_key: ApiKey,
    /// System prompt.
    pub system: Option<String>,
    /// Output token limit per response: Anthropic `max_tokens`, OpenAI Chat
    /// `max_completion_tokens`, Responses `max_output_tokens`.
    pub max_tokens: u32,
    /// How long connecting may take, for the client [`HttpProvider::new`] builds. (A client
    /// given to [`HttpProvider::with_client`] has its own. How long the response may take is
    /// the machine's decision: [`MachineConfig::stream`](rebound_core::MachineConfig::stream),
    /// carried on each request.)
    pub connect_timeout: Duration,
    /// Sampling, stop sequences, tool choice, reasoning, a user id and a provider-specific
    /// JSON object for every request ([`RequestOptions`]); checked against the API when the
    /// provider is built.
    pub options: RequestOptions,
    /// Headers added to every request, e.g. `anthropic-beta` or a gateway's credential;
    /// their values never print.
    pub headers: ExtraHeaders,
    /// The tool-call ids the server takes (OpenAI wire formats). `None` (the default): the
    /// form known for the base URL ([`ToolIdForm::for_base_url`]: nine letters and digits
    /// for Mistral's API, else OpenAI's), or learned: a server that refuses an id with the
    /// 400 naming the nine-character rule (a self-hosted Mistral model) gets the same
    /// request once more, at once, with fitted ids, and fitted ids from then on. A form set
    /// here is kept whatever the server says.
    pub tool_ids: Option<ToolIdForm>,
    /// How the key is sent: in the provider's own header (the default: Anthropic
    /// `x-api-key`, Gemini `x-goog-api-key`, OpenAI `Authorization: Bearer`, Bedrock's API
    /// key `Authorization: Bearer`), or as a bearer token (Vertex AI's access token, a
    /// gateway's).
    pub auth: Auth,
}

/// How an [`HttpProvider`] sends its key.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub enum Auth {
    /// The provider's own header: `x-api-key` for Anthropic, `x-goog-api-key` for Gemini
    /// (AI Studio), `Authorization: Bearer` for OpenAI's APIs.
    #[default]
    ProviderHeader,
    /// `Authorization: Bearer {key}`: Vertex AI (an OAuth access token, e.g. from
    /// `gcloud auth print-access-token`) and gateways that take one.
    Bearer,
    /// Every request signed with AWS Signature Version 4 for Bedrock (feature `bedrock`):
    /// the credentials and region of [`aws::BedrockAuth::SigV4`](super::aws::BedrockAuth).
    /// The config's key then only names the identity (use the access key id).
    #[cfg(feature = "bedrock")]
    AwsSigV4 {
        /// The access key, secret key and session token.
        credentials: super::aws::AwsCredentials,
        /// The region signed for, e.g. `us-east-1`.
        region: String,
    },
}

/// The endpoint of Bedrock's runtime API in `region` (`us-east-1`, …):
/// `https://bedrock-runtime.{region}.amazonaws.com`.
///
/// ```
/// use rebound_effects::provider::bedrock_base_url;
/// assert_eq!(bedrock_base_url("eu-west-3"), "https://bedrock-runtime.eu-west-3.amazonaws.com");
/// ```
#[must_use]
pub fn bedrock_base_url(region: &str) -> String {
    format!("https://bedrock-runtime.{region}.amazonaws.com")
}

/// The base URL of Gemini on Vertex AI for `project` in `location` (`global`, or a region
/// such as `us-central1`): `https://{location}-aiplatform.googleapis.com/v1/projects/{project}/locations/{location}/publishers/google`
/// (`https://aiplatform.googleapis.com/…` for `global`). Send with [`Auth::Bearer`].
///
/// ```
/// use rebound_effects::provider::vertex_base_url;
/// assert_eq!(
///     vertex_base_url("my-proj", "us-central1"),
///     "https://us-central1-aiplatform.googleapis.com/v1/projects/my-proj/locations/us-central1/publishers/google"
/// );
/// ```
#[must_use]
pub fn vertex_base_url(project: &str, location: &str) -> String {
    let host = if location == "global" {
        "aiplatform.googleapis.com".to_owned()
    } else {
        format!("{location}-aiplatform.googleapis.com")
    };
    format!("https://{host}/v1/projects/{project}/locations/{location}/publishers/google")
}

impl HttpProviderConfig {
    /// Defaults for `provider` with its official base URL.
    #[must_use]
    pub fn new(provider: ProviderKind, model: impl Into<String>, api_key: ApiKey) -> Self {
        HttpProviderConfig {
            provider,
            base_url: default_base_url(provider).to_owned(),
            model: model.into(),
            api_key,
            system: None,
            max_tokens: rebound_core::wire::DEFAULT_MAX_TOKENS,
            connect_timeout: Duration::from_secs(10),
            options: RequestOptions::default(),
            headers: ExtraHeaders::default(),
            tool_ids: None,
            auth: Auth::default(),
        }
    }
}

impl HttpProviderConfig {
    /// Sets [`base_url`](Self::base_url), e.g. a local OpenAI-compatible server's
    /// `http://127.0.0.1:11434/v1`.
    #[must_use]
    pub fn with_base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// Sets [`system`](Self::system), the system prompt.
    #[must_use]
    pub fn with_system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Sets [`max_tokens`](Self::max_tokens), the output token limit per response.
    #[must_use]
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Sets [`connect_timeout`](Self::connect_timeout), how long connecting may take.
    #[must_use]
    pub fn with_connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }

    /// Sets [`tool_ids`](Self::tool_ids): the tool-call ids the server takes, whatever its
    /// base URL (an OpenAI-compatible server hosting Mistral models that enforces their
    /// templates' nine-character ids, say).
    #[must_use]
    pub fn with_tool_ids(mut self, tool_ids: ToolIdForm) -> Self {
        self.tool_ids = Some(tool_ids);
        self
    }

    /// Sets [`options`](Self::options), the request options.
    #[must_use]
    pub fn with_options(mut self, options: RequestOptions) -> Self {
        self.options = options;
        self
    }

    /// Sets [`auth`](Self::auth), how the key is sent.
    #[must_use]
    pub fn with_auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    /// Sets [`headers`](Self::headers), the extra request headers.
    #[must_use]
    pub fn with_headers(mut self, headers: ExtraHeaders) -> Self {
        self.headers = headers;
        self
    }
}

/// The official base URL of `provider`; empty for a kind this version does not know (then
/// set [`HttpProviderConfig::base_url`]: an empty one is refused as a bad URL).
#[must_use]
pub fn default_base_url(provider: ProviderKind) -> &'static str {
    match provider {
        ProviderKind::Anthropic => "https://api.anthropic.com",
        ProviderKind::OpenAi | ProviderKind::OpenAiResponses => "https://api.openai.com/v1",
        ProviderKind::Gemini => "https://generativelanguage.googleapis.com/v1beta",
        _ => "",
    }
}

/// A provider reached over HTTP(S), streaming its responses.
///
/// Built with [`new`](Self::new), it makes its own HTTP client; built with
/// [`with_client`](Self::with_client), it sends through yours (its proxy, connection pool,
/// TLS roots and middleware), and rebound's per-request deadlines still bound every
/// response read through it.
#[derive(Debug)]
pub struct HttpProvider {
    config: HttpProviderConfig,
    url: reqwest::Url,
    client: reqwest::Client,
    identity: TargetIdentity,
    /// The key and the extra headers' values, masked in every failure this provider returns.
    secrets: Secrets,
    /// The server refused a tool-call id with the 400 that names the nine-character rule:
    /// from then on every request's ids are nine letters and digits.
    learned_nine_ids: AtomicBool,
}

/// What a server requiring nine-character ids says when it refuses another id (Mistral's
/// API: "Tool call id was call_0 but must be a-z, A-Z, 0-9, with a length of 9."; the same
/// words from servers running Mistral's chat templates).
const NINE_ID_RULE: &str = "must be a-z, A-Z, 0-9, with a length of 9";

impl HttpProvider {
    /// Validates `config` (see [`with_client`](Self::with_client)) and builds its own HTTP
    /// client, connecting within [`HttpProviderConfig::connect_timeout`]. No request is made.
    pub fn new(config: HttpProviderConfig) -> Result<Self, ConfigError> {
        Self::check(&config)?;
        // No `read_timeout`: every read below is bounded by the provider's own idle and
        // progress deadlines, and reqwest's would re-arm one more timer for every chunk.
        let client = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|e| ConfigError::HttpClient(e.without_url().to_string()))?;
        Self::with_client(config, client)
    }

    /// Validates `config` and sends its requests through `client`. No request is made.
    ///
    /// The client's own settings apply: its proxy, pool, TLS, default headers, and its
    /// timeouts; [`HttpProviderConfig::connect_timeout`] is not used (set
    /// `connect_timeout` on your client builder). rebound still bounds each response by the
    /// request's [`StreamDeadlines`] (silence, and no content, for too long: a retryable
    /// idle timeout). A total `timeout` on the client also cuts a long but healthy stream,
    /// so leave it unset, or longer than your longest response.
    ///
    /// A process running many agents should give them all one client (clones share it):
    /// [`HttpProvider::new`] builds a client per provider, TLS roots and pool included, which
    /// at 10,000 agents costs about 19 KiB of memory each and slows their start
    /// (docs/performance.md, "Ten thousand agents in one process").
    ///
    /// Refuses, as a [`ConfigError`]: an empty API key, or one that cannot be a header; no
    /// model; a base URL that is not http(s); request options the API would refuse
    /// ([`RequestOptions::check`]); an extra header that rebound sets itself
    /// ([`ConfigError::ReservedHeader`]).
    ///
    /// ```
    /// use rebound_core::ProviderKind;
    /// use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig};
    /// use std::time::Duration;
    ///
    /// let client = reqwest::Client::builder()
    ///     .connect_timeout(Duration::from_secs(5))
    ///     .pool_max_idle_per_host(4)
    ///     .build()?;
    /// let config = HttpProviderConfig::new(ProviderKind::OpenAi, "gpt-4o", ApiKey::new("sk-x"));
    /// let provider = HttpProvider::with_client(config, client)?;
    /// assert_eq!(provider.url().as_str(), "https://api.openai.com/v1/chat/completions");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_client(
        config: HttpProviderConfig,
        client: reqwest::Client,
    ) -> Result<Self, ConfigError> {
        let url = Self::check(&config)?;
        let identity = target_identity(&config);
        let secrets = credentials(&config);
        Ok(HttpProvider {
            config,
            url,
            client,
            identity,
            secrets,
            learned_nine_ids: AtomicBool::new(false),
        })
    }

    /// Checks `config`, returning the request URL.
    fn check(config: &HttpProviderConfig) -> Result<reqwest::Url, ConfigError> {
        if config.api_key.is_empty() {
            return Err(ConfigError::EmptyApiKey {
                provider: config.provider,
            });
        }
        if reqwest::header::HeaderValue::from_str(config.api_key.expose()).is_err() {
            // Never echo the key: it may be a real one with a stray control character.
            return Err(ConfigError::Invalid(format!(
                "the {} API key contains characters not allowed in an HTTP header \
                 (a newline or another control character)",
                config.provider
            )));
        }
        if config.model.trim().is_empty() {
            return Err(ConfigError::EmptyModel);
        }
        let url = endpoint_url(config.provider, &config.base_url, &config.model)?;
        config.options.check(config.provider, config.max_tokens)?;
        if let Some(name) = config
            .headers
            .names()
            .find(|n| super::headers::reserved(config.provider, n))
        {
            return Err(ConfigError::ReservedHeader {
                name: name.to_owned(),
                provider: config.provider,
            });
        }
        Ok(url)
    }

    /// The full request URL.
    #[must_use]
    pub fn url(&self) -> &reqwest::Url {
        &self.url
    }

    /// Who this provider is for the encrypted reasoning and signed thinking it produces:
    /// `{provider}:{32 hex digits}`, the digits the first 128 bits of an HMAC-SHA256 keyed
    /// by the API key over the provider kind, the base URL and the extra headers (an
    /// `OpenAI-Organization`, a gateway's credential). The same configuration gives the
    /// same identity in every process, so a resumed session keeps sending its reasoning;
    /// another key, base URL or header gives another, so it does not. The key cannot be
    /// recovered from it.
    ///
    /// ```
    /// use rebound_core::ProviderKind;
    /// use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig};
    ///
    /// let make = |key: &str| {
    ///     let config = HttpProviderConfig::new(ProviderKind::OpenAiResponses, "gpt-5", ApiKey::new(key));
    ///     HttpProvider::new(config).unwrap().identity().clone()
    /// };
    /// assert_eq!(make("sk-first"), make("sk-first"));
    /// assert_ne!(make("sk-first"), make("sk-second"));
    /// assert!(!make("sk-first").as_str().contains("sk-first"));
    /// assert!(make("sk-first").as_str().starts_with("openai-responses:"));
    /// ```
    #[must_use]
    pub fn identity(&self) -> &TargetIdentity {
        &self.identity
    }

    /// The tool-call ids this provider's requests carry: the configured form, else the one
    /// learned from the server's refusal, else the one known for the base URL.
    fn tool_ids(&self) -> ToolIdForm {
        match self.config.tool_ids {
            Some(form) => form,
            None if self.learned_nine_ids.load(Ordering::Relaxed) => ToolIdForm::NineAlphanumeric,
            None => ToolIdForm::for_base_url(&self.config.base_url),
        }
    }

    /// Whether `failure` is the server refusing the ids this provider sent for a rule it
    /// can fit without being told, and it has now learned the rule: the same request, with
    /// fitted ids, is then worth sending once more at once (nothing was streamed: the
    /// refusal is the response's status).
    fn learns_from(&self, failure: &ProviderFailure) -> bool {
        let refused = failure.message.contains(NINE_ID_RULE)
            && failure.status.is_some_and(|s| s >= 400)
            && self.config.tool_ids.is_none()
            && self.tool_ids() == ToolIdForm::Standard;
        if refused {
            self.learned_nine_ids.store(true, Ordering::Relaxed);
        }
        refused
    }

    async fn send_inner(
        &self,
        conversation: &Conversation,
        tools: &[ToolSpec],
        deadlines: StreamDeadlines,
        deltas: DeltaSink<'_>,
    ) -> Result<AssistantResponse, SendError> {
        let kind = self.config.provider;
        let mut params = RequestParams::new(&self.config.model, self.config.max_tokens)
            .with_tools(tools)
            .with_stream(true)
            .with_options(&self.config.options)
            .with_tool_ids(self.tool_ids());
        params.system = self.config.system.as_deref();
        // Reasoning another target produced is left out: this one could not read it.
        params.identity = Some(&self.identity);
        // A conversation no request can be built from is the caller's problem, not the
        // provider's: nothing is sent.
        let body = wire::request_body(kind, conversation, &params)?;
        let body = serde_json::to_vec(&body).map_err(|e| WireError::InvalidRequest {
            detail: e.to_string(),
        })?;
        // The extra headers first: none of them is one set below (`check`).
        let mut request = self
            .client
            .post(self.url.clone())
            .headers(self.config.headers.as_map().clone())
            .header("content-type", "application/json")
            .header(
                "accept",
                format!("{}, application/json", wire::stream_content_type(kind)),
            );
        request = match (kind, &self.config.auth) {
            (ProviderKind::Anthropic, Auth::ProviderHeader) => request
                .header("x-api-key", self.config.api_key.expose())
                .header("anthropic-version", ANTHROPIC_VERSION),
            (ProviderKind::Anthropic, Auth::Bearer) => request
                .bearer_auth(self.config.api_key.expose())
                .header("anthropic-version", ANTHROPIC_VERSION),
            (ProviderKind::Gemini, Auth::ProviderHeader) => {
                request.header("x-goog-api-key", self.config.api_key.expose())
            }
            #[cfg(feature = "bedrock")]
            (
                _,
                Auth::AwsSigV4 {
                    credentials,
                    region,
                },
            ) => {
                let accept = format!("{}, application/json", wire::stream_content_type(kind));
                let to_sign = super::aws::RequestToSign {
                    method: "POST",
                    url: self.url.as_str(),
                    headers: &[("content-type", "application/json"), ("accept", &accept)],
                    body: &body,
                };
                let signed =
                    super::aws::sign(&to_sign, credentials, region, std::time::SystemTime::now())
                        .map_err(|e| {
                        ProviderFailure::new(
                            rebound_core::FailureKind::AuthFailed,
                            format!("the request could not be signed: {e}"),
                        )
                    })?;
                for (name, value) in signed.iter() {
                    if let Ok(mut value) = reqwest::header::HeaderValue::from_str(value) {
                        value.set_sensitive(true);
                        request = request.header(name, value);
                    }
                }
                request
            }
            // OpenAI's APIs, Vertex AI, Bedrock's API keys, and the bearer token most other
            // APIs take.
            _ => request.bearer_auth(self.config.api_key.expose()),
        };
        let send = request.body(body).send();
        let idle = Duration::from_millis(deadlines.idle_ms.max(1));
        let mut response = match tokio::time::timeout(idle, send).await {
            Err(_) => {
                return Err(
                    transport(TransportFault::Timeout, "no response headers in time").into(),
                )
            }
            Ok(Err(e)) => return Err(classify_reqwest(&e, false).into()),
            Ok(Ok(r)) => r,
        };
        let status = response.status().as_u16();
        let headers = to_headers(response.headers());
        if !response.status().is_success() {
            // Classification needs the start of the body; whatever was read is used.
            let body = read_bounded(&mut response, deadlines, MAX_ERROR_BODY)
                .await
                .body;
            return Err(classify_http(kind, status, &headers, &body, now_unix_ms()).into());
        }
        let is_json = headers
            .get("content-type")
            .is_some_and(|ct| ct.starts_with("application/json"));
        if is_json {
            // A server that ignored `stream: true` (some compatible servers do). The answer
            // must be read whole: a part of it is no answer.
            let read = read_bounded(&mut response, deadlines, MAX_RESPONSE_BODY).await;
            let parsed = match read.end {
                End::Complete => wire::parse_response(kind, &read.body),
                End::Limit => Err(transport(
                    TransportFault::MalformedStream,
                    &format!("response body larger than {MAX_RESPONSE_BODY} bytes"),
                )),
                End::Failed(failure) => Err(failure),
            };
            return parsed.map_err(|f| with_request_id(f, &headers).into());
        }
        let mut decoder = StreamDecoder::new(kind);
        // Core's watch says when the stream has failed; this reader's clock is the time
        // since the body began.
        let began = Instant::now();
        let since = |t: Instant| {
            Millis(u64::try_from(t.duration_since(began).as_millis()).unwrap_or(u64::MAX))
        };
        let at = |m: Millis| later(began, Duration::from_millis(m.0));
        let mut watch = StreamWatch::stream(deadlines, Millis::ZERO);
        // One timer for the whole body, moved only when it fires early: re-arming a timeout
        // for every chunk cost more than decoding the chunk. When it fires, the watch is
        // asked which deadline, if any, has passed.
        let timer = tokio::time::sleep_until(at(watch.deadline()));
        tokio::pin!(timer);
        loop {
            let chunk = tokio::select! {
                biased;
                chunk = response.chunk() => chunk,
                () = &mut timer => {
                    match watch.expired(since(Instant::now())) {
                        Some(stall) => return Err(with_request_id(stall.failure(), &headers).into()),
                        None => {
                            timer.as_mut().reset(at(watch.deadline()));
                            continue;
                        }
                    }
                }
            };
            let chunk = match chunk {
                Err(e) => return Err(with_request_id(classify_reqwest(&e, true), &headers).into()),
                Ok(None) => break,
                Ok(Some(chunk)) => chunk,
            };
            // The pieces are lent to the sink as they are decoded (no copy per piece); once it
            // asks to stop, it is given no more.
            let (mut progressed, mut stopped) = (false, false);
            decoder
                .feed_with(&chunk, |piece| {
                    progressed |= piece.is_progress();
                    stopped = stopped || !deltas(piece);
                })
                .map_err(|f| with_request_id(f, &headers))?;
            if stopped {
                return Err(SendError::Stopped);
            }
            if decoder.is_complete() {
                break;
            }
            // The bytes count from when this reader waits again, not from when the chunk
            // came: while the decoder and the sink (a slow UI, a loaded machine) held this
            // task, the connection could not hand over the bytes that came meanwhile, and a
            // server that kept sending must not be taken for a silent one.
            if let Err(stall) = watch.arrived(since(Instant::now()), progressed) {
                return Err(with_request_id(stall.failure(), &headers).into());
            }
        }
        Ok(decoder.finish().map_err(|f| with_request_id(f, &headers))?)
    }
}

impl Provider for HttpProvider {
    fn label(&self) -> String {
        format!("{}:{}", self.config.provider, self.config.model)
    }

    fn identity(&self) -> Option<TargetIdentity> {
        Some(self.identity.clone())
    }

    fn secrets(&self) -> Secrets {
        self.secrets.clone()
    }

    fn send<'a>(
        &'a self,
        request: ProviderRequest<'a>,
        deltas: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<AssistantResponse, SendError>> {
        let deadlines = request.deadlines;
        Box::pin(async move {
            let mut result = self
                .send_inner(request.conversation, request.tools, deadlines, &mut *deltas)
                .await;
            if let Err(SendError::Provider(failure)) = &result {
                if self.learns_from(failure) {
                    result = self
                        .send_inner(request.conversation, request.tools, deadlines, deltas)
                        .await;
                }
            }
            result.map_err(|e| match e {
                SendError::Provider(f) => SendError::Provider(self.secrets.redact_failure(f)),
                other => other,
            })
        })
    }
}

/// The identity of the target `config` describes (see [`HttpProvider::identity`]).
fn target_identity(config: &HttpProviderConfig) -> TargetIdentity {
    use ring::hmac;
    let key = hmac::Key::new(hmac::HMAC_SHA256, config.api_key.expose().as_bytes());
    let mut context = hmac::Context::with_key(&key);
    // Each part ends with a byte no part holds, so no two configurations hash the same text.
    let mut part = |bytes: &[u8]| {
        context.update(bytes);
        context.update(b"\0");
    };
    part(b"rebound target identity v1");
    part(config.provider.to_string().as_bytes());
    part(config.base_url.trim_end_matches('/').as_bytes());
    let mut headers: Vec<(&str, &[u8])> = config
        .headers
        .as_map()
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_bytes()))
        .collect();
    headers.sort_unstable();
    for (name, value) in headers {
        part(name.as_bytes());
        part(value);
    }
    let tag = context.sign();
    let hex: String = tag.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    TargetIdentity::new(format!("{}:{hex}", config.provider))
}

/// The credentials `config` sends: the key and the extra headers' values, those long
/// enough to be masked ([`MIN_SECRET_BYTES`]; a shorter one would mask ordinary words).
fn credentials(config: &HttpProviderConfig) -> Secrets {
    let headers = config
        .headers
        .as_map()
        .values()
        .filter_map(|v| v.to_str().ok());
    let long_enough = std::iter::once(config.api_key.expose())
        .chain(headers)
        .map(str::trim)
        .filter(|s| s.len() >= MIN_SECRET_BYTES);
    // Every one is long enough: nothing is refused.
    let secrets = Secrets::new(long_enough).unwrap_or_default();
    #[cfg(feature = "bedrock")]
    if let Auth::AwsSigV4 { credentials, .. } = &config.auth {
        return secrets.and(&credentials.secrets());
    }
    secrets
}

/// `base` + the provider's request path (streamed: every request asks for a stream),
/// checked to be an http(s) URL.
fn endpoint_url(
    provider: ProviderKind,
    base: &str,
    model: &str,
) -> Result<reqwest::Url, ConfigError> {
    let bad = |reason: &str| ConfigError::BadUrl {
        url: redact_userinfo(base),
        reason: reason.to_owned(),
    };
    let parsed = reqwest::Url::parse(base.trim()).map_err(|e| bad(&e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad("the scheme must be http or https"));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad("the URL has no host"));
    }
    let full = format!(
        "{}{}",
        base.trim().trim_end_matches('/'),
        wire::request_path(provider, model, true)
    );
    reqwest::Url::parse(&full).map_err(|e| bad(&e.to_string()))
}

/// `base` with any `user:password@` part replaced, for error messages.
fn redact_userinfo(base: &str) -> String {
    match (base.find("://"), base.find('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://***@{}", &base[..scheme_end], &base[at + 1..])
        }
        _ => base.to_owned(),
    }
}

fn to_headers(map: &reqwest::header::HeaderMap) -> Headers {
    map.iter()
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect()
}

fn request_id(headers: &Headers) -> Option<String> {
    headers
        .get("request-id")
        .or_else(|| headers.get("x-request-id"))
        .map(str::to_owned)
}

fn with_request_id(mut failure: ProviderFailure, headers: &Headers) -> ProviderFailure {
    if failure.request_id.is_none() {
        failure.request_id = request_id(headers);
    }
    failure
}

fn transport(fault: TransportFault, detail: &str) -> ProviderFailure {
    ProviderFailure::transport(fault, Some(detail))
}

fn now_unix_ms() -> Option<u64> {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_millis()).ok())
}

/// `after` past `t`, or about 30 years (tokio's "never") when that is not representable.
fn later(t: Instant, after: Duration) -> Instant {
    t.checked_add(after)
        .unwrap_or_else(|| t + Duration::from_secs(86_400 * 365 * 30))
}

/// A body read by [`read_bounded`]: what arrived, and why reading stopped.
struct Read {
    body: Vec<u8>,
    end: End,
}

/// Why [`read_bounded`] stopped.
enum End {
    /// The body ended.
    Complete,
    /// The body went on past the limit; `body` holds the limit's worth.
    Limit,
    /// The connection broke or went silent; `body` holds what came before.
    Failed(ProviderFailure),
}

/// Reads a body up to `limit` bytes, within the request's deadlines (a body read whole
/// must end within the progress deadline, with no idle gap); a body that is slow, endless or
/// broken stops early and says why.
async fn read_bounded(
    response: &mut reqwest::Response,
    deadlines: StreamDeadlines,
    limit: usize,
) -> Read {
    let began = Instant::now();
    let since = || Millis(u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX));
    let mut watch = StreamWatch::body(deadlines, Millis::ZERO);
    let mut body = Vec::new();
    let end = loop {
        let wait = Duration::from_millis(watch.deadline().since(since()));
        match tokio::time::timeout(wait, response.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                let room = limit - body.len();
                if chunk.len() > room {
                    body.extend_from_slice(&chunk[..room]);
                    break End::Limit;
                }
                body.extend_from_slice(&chunk);
                if let Err(stall) = watch.arrived(since(), true) {
                    break End::Failed(stall.failure());
                }
            }
            Ok(Ok(None)) => break End::Complete,
            Ok(Err(e)) => break End::Failed(classify_reqwest(&e, true)),
            Err(_) => {
                let stall = watch.expired(since()).unwrap_or(Stall::Idle);
                break End::Failed(stall.failure());
            }
        }
    };
    Read { body, end }
}

/// Maps a reqwest error to a transport failure through core's classifier. `mid_body` is true
/// once the response started: a break then is a cut stream.
fn classify_reqwest(error: &reqwest::Error, mid_body: bool) -> ProviderFailure {
    let mut chain = String::new();
    let mut source: Option<&dyn std::error::Error> = error.source();
    while let Some(e) = source {
        chain.push_str(&e.to_string().to_ascii_lowercase());
        chain.push(' ');
        source = e.source();
    }
    let detail = error_detail(error, &chain);
    classify_transport_error(
        &TransportError::new(&detail)
            .with_timed_out(error.is_timeout())
            .with_connect_failed(error.is_connect())
            .with_response_started(mid_body),
    )
}

fn error_detail(error: &reqwest::Error, chain: &str) -> String {
    // reqwest's Display may include the URL; the chain does not. Neither holds headers.
    let top = if error.is_connect() {
        "connect error"
    } else if error.is_body() || error.is_decode() {
        "body error"
    } else if error.is_timeout() {
        "timed out"
    } else {
        "request error"
    };
    let chain = chain.trim();
    if chain.is_empty() {
        top.to_owned()
    } else {
        format!("{top}: {}", chain.chars().take(300).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_urls_follow_the_official_sdks() {
        assert_eq!(
            endpoint_url(ProviderKind::Anthropic, "https://api.anthropic.com/", "m")
                .unwrap()
                .as_str(),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            endpoint_url(ProviderKind::OpenAi, "http://127.0.0.1:8080/v1", "m")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:8080/v1/chat/completions"
        );
    }

    #[test]
    fn malformed_urls_are_config_errors_without_credentials() {
        for bad in ["", "not a url", "ftp://x.example", "http://"] {
            assert!(
                endpoint_url(ProviderKind::OpenAi, bad, "m").is_err(),
                "{bad}"
            );
        }
        let err = endpoint_url(ProviderKind::OpenAi, "gopher://user:hunter2@x", "m").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn an_empty_key_is_refused_before_any_request() {
        let config = HttpProviderConfig::new(ProviderKind::Anthropic, "m", ApiKey::new("  "));
        assert!(matches!(
            HttpProvider::new(config),
            Err(ConfigError::EmptyApiKey { .. })
        ));
    }
}
