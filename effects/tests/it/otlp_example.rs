//! The `otlp` example (examples/otlp.rs, compiled into this binary) exports a run's spans
//! and metrics to an OTLP/HTTP receiver and flushes them before it returns: run in a child
//! process of this test binary, since it installs the process's global subscriber and meter
//! provider, which the other tests here must not see.

#[path = "../../examples/otlp.rs"]
mod example;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::Command;
use std::sync::{Arc, Mutex};

/// Set in the child: run the example instead of the test.
const CHILD: &str = "REBOUND_OTLP_EXAMPLE_CHILD";

/// What the receiver got: each request's path and body.
type Received = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// An OTLP/HTTP receiver on loopback that keeps each request's path and body and answers 200.
fn receiver() -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let endpoint = format!("http://{}", listener.local_addr().expect("addr"));
    let got = Arc::new(Mutex::new(Vec::new()));
    let keep = Arc::clone(&got);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let keep = Arc::clone(&keep);
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                let mut writer = stream;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                    let mut length = 0;
                    loop {
                        let mut header = String::new();
                        if reader.read_line(&mut header).unwrap_or(0) == 0 {
                            return;
                        }
                        let header = header.trim_end().to_ascii_lowercase();
                        if header.is_empty() {
                            break;
                        }
                        if let Some(v) = header.strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                    }
                    let mut body = vec![0; length];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    keep.lock().unwrap().push((path, body));
                    let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
                    if writer.write_all(ok).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (endpoint, got)
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn the_otlp_example_exports_the_runs_spans_and_metrics_before_it_exits() {
    if std::env::var_os(CHILD).is_some() {
        example::main().expect("the example runs");
        return;
    }
    let (endpoint, got) = receiver();
    let mut child = Command::new(std::env::current_exe().expect("this test binary"));
    child
        .args([
            "otlp_example::the_otlp_example_exports_the_runs_spans_and_metrics_before_it_exits",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL");
    for proxy in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
    ] {
        child.env_remove(proxy);
    }
    let out = child.output().expect("the child runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("after 2 turns"), "{said}");

    // Everything arrived before the child exited: no waiting here.
    let got = got.lock().unwrap().clone();
    let body = |path: &str| -> Vec<u8> {
        got.iter()
            .filter(|(p, _)| p == path)
            .flat_map(|(_, b)| b.clone())
            .collect()
    };
    let traces = body("/v1/traces");
    for name in [
        "invoke_agent otlp-example",
        "chat claude-sonnet-4-6",
        "attempt",
        "retry",
        "execute_tool clock",
    ] {
        assert!(contains(&traces, name), "no {name:?} in the spans: {got:?}");
    }
    let metrics = body("/v1/metrics");
    for name in [
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "rebound.retries",
        "rebound.tool.calls",
    ] {
        assert!(contains(&metrics, name), "no {name:?} in the metrics");
    }
}
