//! A provider the agent configures: built on the caller's own `reqwest::Client`, with extra
//! headers and request options, against the fake provider server on 127.0.0.1 — what
//! reaches the server, and that rebound's idle deadline still cuts a stall read through the
//! caller's client.

use rebound_core::wire::StreamDelta;
use rebound_core::{
    Conversation, Message, ProviderKind, StreamDeadlines, ToolSpec, TransportFault,
};
use rebound_effects::config::ConfigError;
use rebound_effects::provider::{
    ApiKey, ExtraHeaders, HttpProvider, HttpProviderConfig, OptionsError, Provider,
    ProviderRequest, ReasoningEffort, RequestOptions, SendError, ToolChoice,
};
use rebound_sim::fake::{FakeServer, FakeServerConfig, RequestRecord};
use rebound_sim::Scenario;
use serde_json::json;
use std::time::Duration;

const KINDS: [ProviderKind; 3] = [
    ProviderKind::Anthropic,
    ProviderKind::OpenAi,
    ProviderKind::OpenAiResponses,
];

/// Far above every deadline of these tests: reaching it means a wait was not bounded.
const OUTER: Duration = Duration::from_secs(30);

/// The caller's own client: no timeouts of its own, and a default header of its own that
/// shows on the server only if this very client sent the request.
fn callers_client() -> reqwest::Client {
    let mut defaults = reqwest::header::HeaderMap::new();
    defaults.insert(
        "x-client-of",
        reqwest::header::HeaderValue::from_static("the-agent"),
    );
    reqwest::Client::builder()
        .default_headers(defaults)
        .build()
        .expect("a client")
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "read".into(),
        description: "Reads a file".into(),
        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }]
}

/// Every option `kind`'s API has, set.
fn all_options(kind: ProviderKind) -> RequestOptions {
    let options = RequestOptions::new()
        .with_top_p(0.97)
        .with_tool_choice(ToolChoice::Auto)
        .with_parallel_tool_calls(false)
        .with_user_id("user-hash-1")
        .with_extra_field("service_tier", json!("auto"));
    match kind {
        ProviderKind::Anthropic => options
            .with_stop_sequence("END")
            .with_thinking_budget(2_048),
        ProviderKind::OpenAi => options
            .with_temperature(0.4)
            .with_stop_sequence("END")
            .with_reasoning_effort(ReasoningEffort::Low),
        _ => options
            .with_temperature(0.4)
            .with_reasoning_effort(ReasoningEffort::Low),
    }
}

fn config(kind: ProviderKind, server: &FakeServer) -> HttpProviderConfig {
    let beta = match kind {
        ProviderKind::Anthropic => "anthropic-beta",
        _ => "openai-organization",
    };
    let headers = ExtraHeaders::new()
        .with(beta, "beta-or-org-1")
        .and_then(|h| h.with("x-gateway-token", "gw-secret-42"))
        .expect("valid headers");
    HttpProviderConfig::new(kind, "test-model", ApiKey::new("sk-test-config"))
        .with_base_url(server.base_url_for(kind))
        .with_max_tokens(4_096)
        .with_options(all_options(kind))
        .with_headers(headers)
}

async fn send(
    provider: &HttpProvider,
    deadlines: StreamDeadlines,
) -> Result<rebound_core::AssistantResponse, SendError> {
    let conversation = Conversation::from(vec![Message::user_text("hi")]);
    let tools = tools();
    let request = ProviderRequest::new(&conversation, &tools).with_deadlines(deadlines);
    let mut sink = |_: StreamDelta<&str>| true;
    tokio::time::timeout(OUTER, provider.send(request, &mut sink))
        .await
        .expect("the provider's deadlines bound every wait")
}

fn only_request(server: &FakeServer) -> RequestRecord {
    let records = server.requests();
    assert_eq!(records.len(), 1, "{records:?}");
    records.into_iter().next().expect("one request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_on_the_callers_client_sends_its_headers_and_every_option() {
    for kind in KINDS {
        let server = FakeServer::start(FakeServerConfig::healthy())
            .await
            .expect("fake server");
        let provider =
            HttpProvider::with_client(config(kind, &server), callers_client()).expect("valid");
        let response = send(&provider, StreamDeadlines::default()).await;
        assert!(response.is_ok(), "{kind}: {response:?}");
        let record = only_request(&server);
        assert_eq!(
            record.header("x-client-of"),
            Some("the-agent"),
            "{kind}: not the caller's client"
        );
        // It arrived; the server's log masks a header named like a credential.
        assert_eq!(
            record.header("x-gateway-token"),
            Some("<redacted>"),
            "{kind}"
        );
        let beta = match kind {
            ProviderKind::Anthropic => "anthropic-beta",
            _ => "openai-organization",
        };
        assert_eq!(record.header(beta), Some("beta-or-org-1"), "{kind}");
        // rebound's own headers are there once, untouched.
        assert_eq!(
            record.header("content-type"),
            Some("application/json"),
            "{kind}"
        );
        let count = |name: &str| record.headers.iter().filter(|(n, _)| n == name).count();
        assert_eq!(count("content-type"), 1, "{kind}");
        let body = record.body.expect("a JSON body");
        assert_eq!(body["top_p"], 0.97, "{kind}");
        assert_eq!(body["service_tier"], "auto", "{kind}");
        match kind {
            ProviderKind::Anthropic => {
                assert_eq!(body["max_tokens"], 4_096);
                assert_eq!(body["stop_sequences"], json!(["END"]));
                assert_eq!(
                    body["tool_choice"],
                    json!({"type": "auto", "disable_parallel_tool_use": true})
                );
                assert_eq!(
                    body["thinking"],
                    json!({"type": "enabled", "budget_tokens": 2048})
                );
                assert_eq!(body["metadata"], json!({"user_id": "user-hash-1"}));
                assert!(body.get("temperature").is_none());
            }
            ProviderKind::OpenAi => {
                assert_eq!(body["max_completion_tokens"], 4_096);
                assert_eq!(body["temperature"], 0.4);
                assert_eq!(body["stop"], json!(["END"]));
                assert_eq!(body["tool_choice"], "auto");
                assert_eq!(body["parallel_tool_calls"], false);
                assert_eq!(body["reasoning_effort"], "low");
                assert_eq!(body["safety_identifier"], "user-hash-1");
            }
            _ => {
                assert_eq!(body["max_output_tokens"], 4_096);
                assert_eq!(body["temperature"], 0.4);
                assert_eq!(body["tool_choice"], "auto");
                assert_eq!(body["parallel_tool_calls"], false);
                assert_eq!(body["reasoning"], json!({"effort": "low"}));
                assert_eq!(body["safety_identifier"], "user-hash-1");
                assert!(body.get("stop").is_none());
            }
        }
        // The headers' values never print with the provider.
        let shown = format!("{provider:?}");
        assert!(shown.contains("x-gateway-token"), "{shown}");
        assert!(!shown.contains("gw-secret-42"), "{shown}");
        assert!(!shown.contains("sk-test-config"), "{shown}");
        server.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_read_through_the_callers_client_is_cut_by_the_requests_idle_deadline() {
    let scenario = Scenario::from_json(
        r#"{"turns": [{"faults": [{"type": "stall", "ms": 60000}], "answer": {"text": "late"}}]}"#,
    )
    .expect("a scenario");
    for kind in KINDS {
        let server = FakeServer::start(FakeServerConfig::new(scenario.clone(), 1))
            .await
            .expect("fake server");
        let provider =
            HttpProvider::with_client(config(kind, &server), callers_client()).expect("valid");
        // The caller's client has no timeout at all: only the request's deadlines apply.
        let result = send(&provider, StreamDeadlines::new(300, 20_000)).await;
        match result {
            Err(SendError::Provider(failure)) => {
                assert_eq!(
                    failure.transport,
                    Some(TransportFault::IdleTimeout),
                    "{kind}: {failure:?}"
                );
                assert!(
                    !failure.message.contains("gw-secret-42"),
                    "{kind}: {failure:?}"
                );
            }
            other => panic!("{kind}: expected an idle timeout, got {other:?}"),
        }
        server.shutdown().await;
    }
}

#[test]
fn options_an_api_lacks_are_refused_when_the_provider_is_built() {
    let key = || ApiKey::new("sk-test");
    let config = HttpProviderConfig::new(ProviderKind::OpenAiResponses, "m", key())
        .with_options(RequestOptions::new().with_stop_sequence("END"));
    let err = HttpProvider::new(config).expect_err("Responses has no stop sequences");
    assert!(
        matches!(err, ConfigError::Options(OptionsError::Unsupported { .. })),
        "{err}"
    );
    // The output limit the budget must stay below is the config's own.
    let config = HttpProviderConfig::new(ProviderKind::Anthropic, "m", key())
        .with_max_tokens(2_000)
        .with_options(RequestOptions::new().with_thinking_budget(2_000));
    let err = HttpProvider::with_client(config, reqwest::Client::new()).expect_err("budget");
    assert!(
        matches!(
            err,
            ConfigError::Options(OptionsError::ThinkingBudget {
                budget: 2_000,
                max_tokens: 2_000
            })
        ),
        "{err}"
    );
}

#[test]
fn headers_rebound_sets_are_refused_and_values_never_show_in_errors() {
    let key = || ApiKey::new("sk-test");
    for (kind, name) in [
        (ProviderKind::Anthropic, "x-api-key"),
        (ProviderKind::Anthropic, "anthropic-version"),
        (ProviderKind::OpenAi, "Authorization"),
        (ProviderKind::OpenAiResponses, "content-type"),
        (ProviderKind::OpenAi, "accept"),
    ] {
        let headers = ExtraHeaders::new()
            .with(name, "secret-value-9")
            .expect("valid");
        let config = HttpProviderConfig::new(kind, "m", key()).with_headers(headers);
        let err = HttpProvider::new(config).expect_err("reserved");
        assert!(
            matches!(err, ConfigError::ReservedHeader { .. }),
            "{kind} {name}: {err}"
        );
        assert!(!err.to_string().contains("secret-value-9"), "{err}");
        assert!(
            err.to_string().contains(&name.to_ascii_lowercase()),
            "{err}"
        );
    }
    // Anthropic's key goes in `x-api-key`: an `authorization` of a gateway is the caller's.
    let headers = ExtraHeaders::new()
        .with("authorization", "Bearer gw")
        .expect("valid");
    let config = HttpProviderConfig::new(ProviderKind::Anthropic, "m", key()).with_headers(headers);
    assert!(HttpProvider::new(config).is_ok());
    // A value no header may carry: the error names the header, never the value.
    let err = ExtraHeaders::new()
        .with("x-gateway-token", "tok\nen-secret")
        .expect_err("a newline");
    assert!(err.to_string().contains("x-gateway-token"), "{err}");
    assert!(!err.to_string().contains("secret"), "{err}");
    let mut headers = ExtraHeaders::new();
    let err = headers
        .insert_line("just-a-token-secret")
        .expect_err("no colon");
    assert!(!err.to_string().contains("secret"), "{err}");
    headers
        .insert_line("X-Org:  org-7 ")
        .expect("a header line");
    assert_eq!(headers.names().collect::<Vec<_>>(), ["x-org"]);
    assert_eq!(headers.as_map()["x-org"], "org-7");
    assert!(headers.as_map()["x-org"].is_sensitive());
}

/// One provider, shared: two runners take the same `Arc<HttpProvider>` (and a runner a
/// `Box<dyn Provider>` boxed again), each run is answered, and all requests reach the one
/// server through it.
#[tokio::test]
async fn a_shared_or_boxed_provider_is_a_provider() {
    use rebound_effects::runner::{RunInput, Runner};
    use std::sync::Arc;
    let server = FakeServer::start(FakeServerConfig::healthy())
        .await
        .expect("fake server");
    let shared =
        Arc::new(HttpProvider::new(config(ProviderKind::Anthropic, &server)).expect("valid"));
    let boxed: Box<dyn Provider> = Box::new(Arc::clone(&shared));
    assert_eq!(boxed.label(), shared.label());
    assert_eq!(boxed.identity(), shared.identity());
    let config = rebound_core::MachineConfig::default();
    let runners = [
        Runner::new(config.clone(), vec![Box::new(Arc::clone(&shared))]),
        Runner::new(config.clone(), vec![Box::new(Arc::clone(&shared))]),
        Runner::new(config, vec![Box::new(boxed)]),
    ];
    for mut runner in runners {
        let run = tokio::time::timeout(OUTER, runner.run(RunInput::text("hi")))
            .await
            .expect("the run ends");
        assert!(run.is_ok(), "{run:?}");
    }
    assert_eq!(server.requests().len(), 3);
    server.shutdown().await;
}
