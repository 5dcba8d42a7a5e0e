//! Secrets that are not shaped like `sk-…` keys: a gateway's key and token echoed by the
//! server, a token a failing tool quotes. Named to the runner (the provider names its own
//! credentials), none reaches a notice, the run's error, the model, or the trace.

use crate::server::{serve, write, SSE_HEAD};
use crate::shared_buf::SharedBuf;

use rebound_core::{
    FallbackInfo, MachineConfig, ProviderKind, ProviderRetryInfo, RetryConfig, RunError, Secrets,
    TargetSpec, ToolSpec,
};
use rebound_effects::provider::{ApiKey, ExtraHeaders, HttpProvider, HttpProviderConfig};
use rebound_effects::receiver::{Receiver, ReceiverError};
use rebound_effects::runner::{RunInput, Runner, TraceRecorder};
use rebound_effects::tools::{FnTool, ToolError, ToolSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const KEY: &str = "gw-live-4f2a9b7c1d83e6";
const GATEWAY_TOKEN: &str = "gwtok-99887766aabb";
const TOOL_TOKEN: &str = "deploy-token-5e6f7a8b";

/// An Anthropic stream whose answer calls tool `deploy`.
fn tool_call_stream() -> Vec<u8> {
    let mut out = SSE_HEAD.to_vec();
    out.extend_from_slice(
        b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\
          \"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\
          \"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":1,\
          \"output_tokens\":1}}}\n\n\
          event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\
          \"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"deploy\",\
          \"input\":{}}}\n\n\
          event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\
          \"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{}\"}}\n\n\
          event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
          event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\
          \"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":2}}\n\n\
          event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    );
    out
}

/// An error response echoing the key and the gateway token, with the key in its request id.
fn echoing(status: &str, error_type: &str) -> Vec<u8> {
    let body = format!(
        r#"{{"type":"error","error":{{"type":"{error_type}","message":"key {KEY} (gateway {GATEWAY_TOKEN}) refused"}}}}"#
    );
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nrequest-id: req_{KEY}\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Everything the runner shows, as text.
#[derive(Clone, Default)]
struct Shown(Arc<Mutex<Vec<String>>>);

impl Receiver for Shown {
    fn provider_retry(&mut self, info: &ProviderRetryInfo) -> Result<(), ReceiverError> {
        self.0
            .lock()
            .expect("lock")
            .push(format!("{info} {info:?}"));
        Ok(())
    }

    fn fallback(&mut self, info: &FallbackInfo) -> Result<(), ReceiverError> {
        self.0
            .lock()
            .expect("lock")
            .push(format!("{info} {info:?}"));
        Ok(())
    }

    fn error(&mut self, error: &RunError) {
        self.0
            .lock()
            .expect("lock")
            .push(format!("{error} {error:?}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_of_any_shape_never_reach_a_notice_the_error_the_model_or_the_trace() {
    let served = Arc::new(AtomicUsize::new(0));
    let server = {
        let served = Arc::clone(&served);
        serve(move |mut socket, _request| {
            let n = served.fetch_add(1, Ordering::SeqCst);
            async move {
                let answer = match n {
                    0 => tool_call_stream(),
                    1 => echoing("529 Site Overloaded", "overloaded_error"),
                    _ => echoing("401 Unauthorized", "authentication_error"),
                };
                write(&mut socket, &answer).await;
            }
        })
        .await
    };
    let mut http = HttpProviderConfig::new(ProviderKind::Anthropic, "m", ApiKey::new(KEY));
    http.base_url = server.url();
    http.headers = ExtraHeaders::new()
        .with("x-gateway-token", GATEWAY_TOKEN)
        .expect("a header");
    let provider = HttpProvider::new(http).expect("a provider");
    let deploy = FnTool::new(
        ToolSpec {
            name: "deploy".into(),
            description: "Deploys.".into(),
            input_schema: serde_json::json!({"type": "object"}),
        },
        |_, _| async { Err(ToolError::model(format!("token {TOOL_TOKEN} expired"))) },
    );
    let tools = ToolSet::builder().tool(deploy).build().expect("tools");
    let config = MachineConfig::default()
        .with_retry(
            RetryConfig::default()
                .with_initial_delay_ms(5)
                .with_jitter(false),
        )
        .with_targets(vec![
            TargetSpec::new(ProviderKind::Anthropic, "m").with_context_window(None)
        ]);
    let shown = Shown::default();
    let trace = SharedBuf::default();
    let mut runner = Runner::new(config, vec![Box::new(provider)])
        .seed(3)
        .tools(Arc::new(tools))
        .secrets(Secrets::new([TOOL_TOKEN]).expect("long enough"))
        .receiver(shown.clone())
        .trace(TraceRecorder::new(trace.clone()));
    let error = runner
        .run(RunInput::text("deploy it"))
        .await
        .expect_err("the 401 ends the run");

    let shown = shown.0.lock().expect("lock").join("\n");
    let trace = trace.text();
    let requests: Vec<String> = server
        .requests
        .lock()
        .expect("requests")
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect();
    assert_eq!(requests.len(), 3, "a tool call, a 529, the 401");
    // What was masked is still there, as `***`: the texts say what happened.
    assert!(shown.contains("key *** (gateway ***) refused"), "{shown}");
    assert!(shown.contains("req_***"), "{shown}");
    assert!(
        requests[1].contains("token *** expired"),
        "the tool's error reaches the model masked: {}",
        requests[1]
    );
    let error = format!("{error} {error:?}");
    for secret in [KEY, GATEWAY_TOKEN, TOOL_TOKEN] {
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
        assert!(!error.contains(secret), "{secret} in the error: {error}");
        assert!(!trace.contains(secret), "{secret} in the trace: {trace}");
        // The model is sent the tool's error, never the token in it.
        let bodies = requests
            .iter()
            .map(|r| &r[r.find("\r\n\r\n").unwrap_or(0)..]);
        assert!(
            bodies.clone().all(|b| !b.contains(secret)),
            "{secret} sent to the model"
        );
    }
}
