//! Runs the fake provider server until killed.
//!
//! ```text
//! cargo run -p rebound-sim --features server --example fake_server -- [--scenario NAME|FILE|JSON] [--seed N]
//!     [--api-key KEY] [--context-limit-bytes N]
//! ```
//!
//! Prints `http://127.0.0.1:PORT` on its first line, then one JSON line per request received
//! (the [`RequestRecord`](rebound_sim::fake::RequestRecord)), so a test in another language
//! can read the address and the log from standard output.

use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::Scenario;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;

fn scenario(arg: &str) -> Result<Scenario, String> {
    if arg.trim_start().starts_with('{') {
        return Scenario::from_json(arg).map_err(|e| e.to_string());
    }
    if let Some(s) = Scenario::builtin(arg) {
        return Ok(s);
    }
    let text = std::fs::read_to_string(arg)
        .map_err(|e| format!("`{arg}` is no built-in scenario and no readable file: {e}"))?;
    Scenario::from_json(&text).map_err(|e| format!("{arg}: {e}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut config = FakeServerConfig::healthy();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let Some(value) = args.next() else {
            eprintln!("{flag} needs a value");
            return ExitCode::from(2);
        };
        let result = match flag.as_str() {
            "--scenario" => scenario(&value).map(|s| config.scenario = s),
            "--seed" => value
                .parse()
                .map(|n| config.seed = n)
                .map_err(|e| format!("--seed: {e}")),
            "--api-key" => {
                config.api_key = Some(value);
                Ok(())
            }
            "--context-limit-bytes" => value
                .parse()
                .map(|n| config.context_limit_bytes = Some(n))
                .map_err(|e| format!("--context-limit-bytes: {e}")),
            other => Err(format!("unknown option {other}")),
        };
        if let Err(e) = result {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    }
    config.on_request = Some(Arc::new(|record| {
        if let Ok(line) = serde_json::to_string(record) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }));
    let server = match FakeServer::start(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(1);
        }
    };
    println!("{}", server.base_url());
    let _ = std::io::stdout().flush();
    let _ = tokio::signal::ctrl_c().await;
    server.shutdown().await;
    ExitCode::SUCCESS
}
