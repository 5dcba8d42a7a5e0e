//! What durability costs, side by side in one run: the same turns (a tool call, then an
//! answer) through the plain tokio runner and through a durable run on a real Restate
//! server, against the same healthy fake provider. Prints requests and wall time per turn,
//! and the journal entries and bytes per turn, as a Markdown table (docs/performance.md).
//!
//! ```sh
//! cargo run --release -p rebound-tests --example durable_cost -- 50
//! ```
//!
//! Needs restate-server (installed from npm into target/restate on first use, as the tests
//! do).

#[path = "../../durable/tests/support/restate.rs"]
mod restate;

use rebound_core::{
    BatchOutcome, CallOutcome, MachineConfig, ProviderKind, ToolCall, ToolOutput, ToolSpec,
};
use rebound_durable::{register, serve, DurableAgent};
use rebound_effects::provider::{ApiKey, BoxFuture, HttpProvider, HttpProviderConfig};
use rebound_effects::runner::{RunInput, Runner, ToolExecutor};
use rebound_sim::fake::{FakeServer, FakeServerConfig};
use rebound_sim::scenario::Scenario;
use restate::{free_port, Client, RestateServer};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A tool that does nothing but answer.
struct Note;

impl ToolExecutor for Note {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "note".into(),
            description: "Takes a note.".into(),
            input_schema: json!({"type": "object"}),
        }]
    }

    fn run_batch<'a>(
        &'a self,
        calls: Vec<ToolCall>,
        _cancel: &'a tokio_util::sync::CancellationToken,
    ) -> BoxFuture<'a, BatchOutcome> {
        Box::pin(async move {
            calls
                .iter()
                .map(|c| CallOutcome::ok(&c.id, ToolOutput::text("noted")))
                .collect()
        })
    }
}

/// `turns` turns, each a tool call then an answer.
async fn fake(turns: usize) -> FakeServer {
    let one = [
        json!({"answer": {"tool_calls": [{"id": "toolu_1", "name": "note", "input": {}}]}}),
        json!({"answer": {"text": "Noted, and done."}}),
    ];
    let script: Vec<_> = one.iter().cycle().take(2 * turns).cloned().collect();
    let scenario = Scenario::from_json(&json!({"turns": script}).to_string()).expect("valid");
    FakeServer::start(FakeServerConfig::new(scenario, 1))
        .await
        .expect("the fake provider starts")
}

fn provider(server: &FakeServer) -> HttpProvider {
    HttpProvider::new(
        HttpProviderConfig::new(
            ProviderKind::Anthropic,
            "claude-sonnet-4-5",
            ApiKey::new("sk-ant-cost"),
        )
        .with_base_url(server.base_url()),
    )
    .expect("a provider")
}

#[allow(clippy::cast_precision_loss)]
fn per(total: f64, turns: usize) -> f64 {
    total / turns as f64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let turns: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(50)
        .max(1);
    let Some(restate) = RestateServer::start("cost") else {
        eprintln!("no restate-server: see durable/tests/support/install-restate.sh");
        std::process::exit(2);
    };

    // The plain runner.
    let plain = fake(turns).await;
    let started = Instant::now();
    for _ in 0..turns {
        let mut runner = Runner::new(MachineConfig::default(), vec![Box::new(provider(&plain))])
            .tools(Arc::new(Note));
        runner
            .run(RunInput::text("Take a note."))
            .await
            .expect("the turn finishes");
    }
    let plain_wall = started.elapsed();

    // The durable run, endpoint in this process.
    let durable = fake(turns).await;
    let agent = DurableAgent::new(MachineConfig::default(), vec![Box::new(provider(&durable))])
        .tools(Arc::new(Note));
    let port = free_port();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("a port");
    tokio::spawn(serve(agent, listener));
    register(&restate.admin_url(), &format!("http://127.0.0.1:{port}"))
        .await
        .expect("registered");
    let client = Client::new(&restate);
    let started = Instant::now();
    for i in 0..turns {
        let (status, body) = client
            .call(
                &format!("Agent/cost-{i}/run"),
                Some(r#"{"message": "Take a note."}"#),
            )
            .await;
        assert_eq!(status, 200, "{body}");
    }
    let durable_wall = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rows = client
        .query(
            "SELECT count(*) AS entries, sum(raw_length) AS bytes FROM sys_journal \
             WHERE id IN (SELECT id FROM sys_invocation WHERE target_handler_name = 'run')",
        )
        .await;
    let entries = rows[0]["entries"].as_f64().unwrap_or(0.0);
    let bytes = rows[0]["bytes"].as_f64().unwrap_or(0.0);

    let kinds = client
        .query(
            "SELECT entry_type, name, raw_length FROM sys_journal WHERE id = (SELECT id FROM \
             sys_invocation WHERE target_handler_name = 'run' LIMIT 1) ORDER BY index",
        )
        .await;
    let kinds: Vec<String> = kinds
        .iter()
        .map(|r| {
            let name = r["name"].as_str().filter(|n| !n.is_empty());
            let kind = r["entry_type"].as_str().unwrap_or("?");
            let bytes = r["raw_length"].as_u64().unwrap_or(0);
            name.map_or_else(
                || format!("{kind} ({bytes} B)"),
                |n| format!("{kind} {n} ({bytes} B)"),
            )
        })
        .collect();
    let requests = |s: &FakeServer| per(s.requests().len() as f64, turns);
    let ms = |d: Duration| per(d.as_secs_f64() * 1000.0, turns);
    println!("{turns} turns, each a tool call then an answer, against a healthy fake provider:\n");
    println!("| | requests per turn | wall time per turn | journal entries per turn | journal bytes per turn |");
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| plain runner | {:.2} | {:.1} ms | — | — |",
        requests(&plain),
        ms(plain_wall)
    );
    println!(
        "| durable run on Restate | {:.2} | {:.1} ms | {:.1} | {:.0} |",
        requests(&durable),
        ms(durable_wall),
        per(entries, turns),
        per(bytes, turns)
    );
    println!("\nThe journal of one turn: {}", kinds.join(", "));
}
