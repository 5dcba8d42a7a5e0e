//! An API key never appears in any output, trace, session, error message or debug form —
//! even when a hostile server echoes it back in its error bodies and headers.
//!
//! The CLI binary runs with recognizable fake keys through runs that fail in every way
//! (401, 403, 500 until attempts are exhausted, an error event mid-stream, a cut stream,
//! connection refused, a bad URL, a cancel by SIGTERM); its stdout, stderr, trace and session
//! files are searched for the key. The library's error and config types are searched too.

use crate::server;
use crate::table;

use rebound_core::{Conversation, MachineConfig, Message, ProviderKind, RetryConfig};
use rebound_effects::provider::{
    ApiKey, HttpProvider, HttpProviderConfig, Provider, ProviderRequest, SendError,
};
use rebound_effects::runner::{RunInput, Runner};
use server::{serve, write, SSE_HEAD};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// An Anthropic-looking key (masked by classification's `sk-` rule too).
const ANTHROPIC_KEY: &str = "sk-ant-TESTSECRET123";
/// A key of a self-hosted OpenAI-compatible server: no `sk-` prefix to recognise it by.
const OPENAI_KEY: &str = "local-TESTSECRET456";
/// What both keys share, to search for.
const NEEDLE: &str = "TESTSECRET";

/// A server that answers every request with `status` and a body and headers echoing `key`.
async fn echoing(status: u16, key: &'static str) -> server::Server {
    serve(move |mut sock, _| async move {
        let body = format!(
            "{{\"type\":\"error\",\"error\":{{\"type\":\"authentication_error\",\"message\":\"invalid x-api-key {key} (Bearer {key})\"}}}}"
        );
        let head = format!(
            "HTTP/1.1 {status} Echo\r\ncontent-type: application/json\r\nrequest-id: req_{key}\r\nx-request-id: {key}\r\ncontent-length: {}\r\n\r\n",
            body.len()
        );
        write(&mut sock, head.as_bytes()).await;
        write(&mut sock, body.as_bytes()).await;
    })
    .await
}

struct CliRun {
    name: &'static str,
    provider: ProviderKind,
    base_url: String,
    extra: Vec<&'static str>,
    /// Send SIGTERM after this long.
    cancel_after: Option<Duration>,
}

struct Output {
    status: Option<i32>,
    text: String,
}

fn run_cli(run: &CliRun, dir: &Path, json: bool) -> Output {
    let session = dir.join(format!("{}-session.json", run.name));
    let trace = dir.join(format!("{}.trace", run.name));
    // A session with history, so a failed run has something to save (or keep).
    std::fs::write(
        &session,
        br#"{"version":1,"messages":[{"role":"user","content":"earlier"},{"role":"assistant","content":"ok"}]}"#,
    )
    .expect("seed session");
    let (provider, var, key) = match run.provider {
        ProviderKind::Anthropic => ("anthropic", "ANTHROPIC_API_KEY", ANTHROPIC_KEY),
        ProviderKind::OpenAi => ("openai", "OPENAI_API_KEY", OPENAI_KEY),
        ProviderKind::OpenAiResponses => ("openai-responses", "OPENAI_API_KEY", OPENAI_KEY),
        other => panic!("the CLI offers no {other:?}"),
    };
    let mut command = Command::new(env!("CARGO_BIN_EXE_rebound"));
    command
        .args(["run", "say hi", "--provider", provider, "--model", "m"])
        .args(["--base-url", &run.base_url])
        .args(["--max-attempts", "2", "--initial-delay-ms", "10"])
        .args(["--events", if json { "json" } else { "human" }])
        .arg("--session")
        .arg(&session)
        .arg("--trace")
        .arg(&trace)
        .args(&run.extra)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env(var, key)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().expect("the rebound binary starts");
    let pid = child.id();
    if let Some(after) = run.cancel_after {
        std::thread::sleep(after);
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    let started = Instant::now();
    let out = child.wait_with_output().expect("the run ends");
    assert!(started.elapsed() < Duration::from_secs(60), "{}", run.name);
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    for file in [&session, &trace] {
        if let Ok(bytes) = std::fs::read(file) {
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    Output {
        status: out.status.code(),
        text,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_never_prints_or_stores_the_key_in_any_failing_run() {
    let dir = tempfile::tempdir().expect("temp dir");
    let unauthorized = echoing(401, ANTHROPIC_KEY).await;
    let forbidden = echoing(403, OPENAI_KEY).await;
    let failing = echoing(500, ANTHROPIC_KEY).await;
    let failing_openai = echoing(500, OPENAI_KEY).await;
    let mid_stream = serve(|mut sock, _| async move {
        write(&mut sock, SSE_HEAD).await;
        let event = format!(
            "event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"key {ANTHROPIC_KEY} overloaded\"}}}}\n\n"
        );
        write(&mut sock, event.as_bytes()).await;
    })
    .await;
    let cut = serve(|mut sock, _| async move {
        write(&mut sock, SSE_HEAD).await;
        let stream = server::anthropic_stream("hello");
        write(&mut sock, &stream[..stream.len() / 2]).await;
    })
    .await;
    let stalled = serve(|mut sock, _| async move {
        write(&mut sock, SSE_HEAD).await;
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(sock);
    })
    .await;
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", l.local_addr().expect("addr"))
    };
    let openai = |url: String| format!("{url}/v1");
    let runs = vec![
        CliRun {
            name: "unauthorized",
            provider: ProviderKind::Anthropic,
            base_url: unauthorized.url(),
            extra: vec![],
            cancel_after: None,
        },
        CliRun {
            name: "forbidden-openai",
            provider: ProviderKind::OpenAi,
            base_url: openai(forbidden.url()),
            extra: vec![],
            cancel_after: None,
        },
        CliRun {
            name: "exhausted",
            provider: ProviderKind::Anthropic,
            base_url: failing.url(),
            extra: vec![],
            cancel_after: None,
        },
        CliRun {
            name: "exhausted-openai-fallback",
            provider: ProviderKind::OpenAi,
            base_url: openai(failing_openai.url()),
            extra: vec![],
            cancel_after: None,
        },
        CliRun {
            name: "error-event",
            provider: ProviderKind::Anthropic,
            base_url: mid_stream.url(),
            extra: vec![],
            cancel_after: None,
        },
        CliRun {
            name: "cut-stream",
            provider: ProviderKind::Anthropic,
            base_url: cut.url(),
            extra: vec![],
            cancel_after: None,
        },
        CliRun {
            name: "refused",
            provider: ProviderKind::OpenAi,
            base_url: openai(refused.clone()),
            extra: vec![],
            cancel_after: None,
        },
        CliRun {
            name: "bad-url-with-userinfo",
            provider: ProviderKind::Anthropic,
            base_url: format!("gopher://user:{ANTHROPIC_KEY}@127.0.0.1"),
            extra: vec![],
            cancel_after: None,
        },
        CliRun {
            name: "bad-url",
            provider: ProviderKind::OpenAi,
            base_url: "not a url".to_owned(),
            extra: vec![],
            cancel_after: None,
        },
        CliRun {
            name: "canceled",
            provider: ProviderKind::Anthropic,
            base_url: stalled.url(),
            extra: vec![],
            cancel_after: Some(Duration::from_millis(1_500)),
        },
        CliRun {
            name: "unknown-alias",
            provider: ProviderKind::Anthropic,
            base_url: unauthorized.url(),
            extra: vec!["--model", "@nope"],
            cancel_after: None,
        },
    ];
    let mut cases = 0;
    for run in &runs {
        for json in [false, true] {
            cases += 1;
            let out = run_cli(run, dir.path(), json);
            assert!(
                !out.text.contains(NEEDLE),
                "{} (json: {json}) leaked the key:\n{}",
                run.name,
                out.text
            );
            assert!(
                matches!(out.status, Some(1 | 2 | 130)),
                "{}: exit {:?}\n{}",
                run.name,
                out.status,
                out.text
            );
            if run.name == "canceled" {
                assert_eq!(out.status, Some(130), "{}", out.text);
            }
        }
    }
    table::check("secrets-cli", cases);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn library_errors_and_debug_forms_never_contain_the_key() {
    let mut cases = 0;
    let mut seen = Vec::new();
    let check = |what: &str, text: String, cases: &mut usize| {
        *cases += 1;
        assert!(!text.contains(NEEDLE), "{what} leaked the key: {text}");
    };

    // Config forms and config errors.
    let config = HttpProviderConfig::new(ProviderKind::OpenAi, "m", ApiKey::new(OPENAI_KEY));
    check("config Debug", format!("{config:?}"), &mut cases);
    check("key Debug", format!("{:?}", config.api_key), &mut cases);
    let provider = HttpProvider::new(config.clone()).expect("valid");
    check("provider Debug", format!("{provider:?}"), &mut cases);
    check("provider label", provider.label(), &mut cases);
    let mut bad = config.clone();
    bad.base_url = format!("ftp://u:{OPENAI_KEY}@x");
    let e = HttpProvider::new(bad).expect_err("bad url");
    check("BadUrl", format!("{e} {e:?}"), &mut cases);
    let mut bad = config.clone();
    bad.api_key = ApiKey::new(format!("{OPENAI_KEY}\r\nx: y"));
    let e = HttpProvider::new(bad).expect_err("bad key");
    check("bad key", format!("{e} {e:?}"), &mut cases);

    // Provider failures and run errors from servers that echo the key.
    for (status, kind, key) in [
        (401, ProviderKind::Anthropic, ANTHROPIC_KEY),
        (403, ProviderKind::OpenAi, OPENAI_KEY),
        (500, ProviderKind::OpenAi, OPENAI_KEY),
        (429, ProviderKind::Anthropic, ANTHROPIC_KEY),
        (401, ProviderKind::OpenAiResponses, OPENAI_KEY),
    ] {
        let s = echoing(status, key).await;
        let mut c = HttpProviderConfig::new(kind, "m", ApiKey::new(key));
        c.base_url = match kind {
            ProviderKind::Anthropic => s.url(),
            // OpenAI's APIs; the loop above names no other.
            _ => format!("{}/v1", s.url()),
        };
        let provider = HttpProvider::new(c).expect("valid");
        let conversation = Conversation::from(vec![Message::user_text("hi")]);
        let mut sink = |_: rebound_core::wire::StreamDelta<&str>| true;
        let Err(SendError::Provider(f)) = provider
            .send(ProviderRequest::new(&conversation, &[]), &mut sink)
            .await
        else {
            panic!("a provider failure for an error status");
        };
        assert!(
            f.message.contains("***"),
            "the echoed key was masked: {f:?}"
        );
        check("ProviderFailure", format!("{f} {f:?}"), &mut cases);
        seen.push(serde_json::to_string(&f).expect("serializes"));
        let machine = MachineConfig::default().with_retry(
            RetryConfig::default()
                .with_max_attempts(2)
                .with_initial_delay_ms(5),
        );
        let mut runner = Runner::new(machine, vec![Box::new(provider)]);
        let e = runner
            .run(RunInput::text("hi"))
            .await
            .expect_err("the run fails");
        check("RunError", format!("{e} {e:?}"), &mut cases);
    }
    check("serialized failures", seen.join("\n"), &mut cases);
    table::check("secrets-library", cases);
}
