//! The same scenario fault, seen by the simulator and on the wire: what a client decodes
//! from the fake server's bytes is classified as the simulator says it would be.

use rebound_core::classify::classify_http;
use rebound_core::wire::StreamDecoder;
use rebound_core::{Headers, ProviderFailure, ProviderKind, TransportFault};
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::scenario::{Answer, Fault, Scenario};
use serde_json::json;
use std::time::Duration;

/// The URL and body of a streamed "hi" to model `m` in `provider`'s format, as core builds
/// every request.
fn hi(server: &FakeServer, provider: ProviderKind) -> (String, serde_json::Value) {
    let conversation =
        rebound_core::Conversation::from(vec![rebound_core::Message::user_text("hi")]);
    let params = rebound_core::wire::RequestParams::new("m", 100);
    let body = rebound_core::wire::request_body(provider, &conversation, &params).expect("a body");
    let url = format!(
        "{}{}",
        server.base_url_for(provider),
        rebound_core::wire::request_path(provider, "m", true)
    );
    (url, body)
}

/// What the runner would make of one streamed request: a failure, or `None` for an answer.
async fn wire_failure(server: &FakeServer, provider: ProviderKind) -> Option<ProviderFailure> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client");
    let (url, body) = hi(server, provider);
    let response = match client
        .post(url)
        .header("x-api-key", "k")
        .header("x-goog-api-key", "k")
        .header("authorization", "Bearer k")
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
    {
        Ok(r) => r,
        Err(_) => return Some(ProviderFailure::transport(TransportFault::Reset, None)),
    };
    let status = response.status().as_u16();
    let headers: Headers = response
        .headers()
        .iter()
        .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect();
    let mut response = response;
    if status != 200 {
        let body = response.bytes().await.unwrap_or_default();
        return Some(classify_http(provider, status, &headers, &body, None));
    }
    let mut decoder = StreamDecoder::new(provider);
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if decoder.feed(&chunk).is_err() {
                    break;
                }
            }
            Ok(None) => break,
            // The connection ended mid-body: the decoder decides what that means.
            Err(_) => break,
        }
    }
    decoder.finish().err()
}

#[tokio::test]
async fn every_fault_is_classified_on_the_wire_as_in_the_simulator() {
    let faults = json!([
        {"type": "http", "status": 429, "headers": {"retry-after": "2"}},
        {"type": "http", "status": 429, "headers": {"retry-after-ms": "1500", "x-should-retry": "false"}},
        {"type": "http", "status": 529},
        {"type": "http", "status": 503},
        {"type": "http", "status": 500},
        {"type": "http", "status": 401},
        {"type": "http", "status": 404},
        {"type": "http", "status": 400, "error_type": "invalid_request_error", "message": "bad"},
        {"type": "http", "status": 429, "error_type": "insufficient_quota", "message": "You exceeded your current quota"},
        {"type": "stream_cut", "after_events": 0},
        {"type": "stream_cut", "after_events": 5},
        {"type": "stream_cut_bytes", "after_bytes": 100},
        {"type": "stream_error"},
        {"type": "stream_error", "error_type": "rate_limit_error", "message": "slow down"},
        {"type": "stream_error", "error_type": "api_error", "message": "Internal server error"},
        {"type": "stream_error", "after_deltas": 1},
        {"type": "stream_error", "error_type": "rate_limit_error", "after_deltas": 3},
        {"type": "empty_message"},
        {"type": "context_overflow"},
        {"type": "malformed_stream"},
        {"type": "transport", "fault": "reset"},
        {"type": "transport", "fault": "connect"}
    ]);
    let faults: Vec<Fault> = serde_json::from_value(faults).expect("faults");
    for &provider in ProviderKind::ALL {
        for fault in &faults {
            let mut scenario = Scenario::default();
            scenario.provider = provider;
            scenario.turns = vec![rebound_sim::scenario::Turn {
                faults: vec![fault.clone()],
                answer: Answer::text("All good."),
                ..Default::default()
            }];
            let server = FakeServer::start(FakeServerConfig::new(scenario, 3))
                .await
                .expect("start");
            let sim = fault.failure(provider);
            let wire = wire_failure(&server, provider)
                .await
                .unwrap_or_else(|| panic!("{provider} {fault:?}: the wire answered"));
            let what = format!("{provider} {fault:?}\n  sim:  {sim:?}\n  wire: {wire:?}");
            assert_eq!(wire.kind, sim.kind, "{what}");
            assert_eq!(wire.status, sim.status, "{what}");
            assert_eq!(wire.retry_after_ms, sim.retry_after_ms, "{what}");
            assert_eq!(wire.should_retry, sim.should_retry, "{what}");
            if sim.status.is_some() || sim.transport.is_none() {
                assert_eq!(wire.error_type, sim.error_type, "{what}");
            }
            // The answer follows the fault on the wire, as in the simulator.
            assert!(wire_failure(&server, provider).await.is_none(), "{what}");
            server.shutdown().await;
        }
    }
}

#[tokio::test]
async fn a_mid_answer_error_is_the_bytes_the_simulator_renders_and_begins_the_answer_in_both() {
    use rebound_sim::scenario::{message_id, render, Rendered, WireRequest};
    let scenario = Scenario::from_json(
        r#"{"turns": [{"faults": [{"type": "stream_error", "after_deltas": 2}],
                       "answer": {"text": "Let me read the parser, it is where the failing test points."}}]}"#,
    )
    .expect("a scenario");
    let fault = &scenario.turns[0].faults[0];
    for &provider in ProviderKind::ALL {
        // The simulator: the answer began before the failure.
        let (_, begins) = fault.played(provider);
        assert!(begins, "{provider}: the simulator's answer begins");
        let server = FakeServer::start(FakeServerConfig::new(scenario.clone(), 3))
            .await
            .expect("start");
        let client = reqwest::Client::new();
        let (url, body) = hi(&server, provider);
        let bytes = client
            .post(url)
            .header("x-api-key", "k")
            .header("x-goog-api-key", "k")
            .header("authorization", "Bearer k")
            .header("anthropic-version", "2023-06-01")
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .expect("a response")
            .bytes()
            .await
            .expect("a whole body");
        // On the wire: text arrived before the failure.
        let mut decoder = StreamDecoder::new(provider);
        let mut deltas = Vec::new();
        let fed = decoder.feed_into(&bytes, &mut deltas);
        assert!(
            fed.is_err() || decoder.finish().is_err(),
            "{provider}: a failure"
        );
        assert!(
            !deltas.is_empty(),
            "{provider}: the answer began on the wire"
        );
        // Byte for byte what `render` makes of the fault for this request (the Responses
        // API's answers carry the server's reasoning item besides).
        if provider != ProviderKind::OpenAiResponses {
            let id = message_id(provider, "req_fake_000001");
            let request = WireRequest {
                provider,
                stream: true,
                model: "m",
                message_id: &id,
                timing: &scenario.timing,
            };
            let interrupted = scenario.turns[0].answer.response(0, false);
            let Rendered::Chunked { chunks, cut, .. } = render(fault, &request, &interrupted)
            else {
                panic!("{provider}: a mid-stream error renders as a stream");
            };
            assert!(!cut);
            assert_eq!(
                String::from_utf8_lossy(&bytes),
                String::from_utf8_lossy(&chunks.concat()),
                "{provider}"
            );
        }
        server.shutdown().await;
    }
}
