//! What Restate's own round trips cost, with no rebound in them: a bare Virtual Object
//! handler that reads a state key, makes `n` journaled steps (`ctx.run`) whose work takes
//! 1 ms and gives a result of 0 or 400 bytes, writes the state key and answers, called
//! `calls` times for each case on a real restate-server, each call a new object key as a
//! durable turn is, served as `rebound_durable::serve` serves. Prints the wall time per
//! call and per step as a Markdown table (docs/performance.md, "Durable runs on Restate"):
//! the floor under a durable turn of `n` steps.
//!
//! ```sh
//! cargo run --release -p rebound-durable --example step_cost -- 50
//! cargo run --release -p rebound-durable --example step_cost -- 50 --nagle   # without TCP_NODELAY
//! ```
//!
//! Needs restate-server (installed from npm into target/restate on first use, as the tests
//! do).

#[path = "../tests/support/restate.rs"]
mod restate;

use restate::{free_port, Client, RestateServer};
use restate_sdk::prelude::*;
use std::time::Instant;

/// The bare handler.
struct Bare;

#[restate_sdk::object(name = "Bare")]
impl Bare {
    /// Reads the state, makes `n` empty steps, writes the state.
    #[handler]
    async fn steps(
        &self,
        ctx: ObjectContext<'_>,
        ask: Json<(u32, usize)>,
    ) -> Result<Json<u32>, HandlerError> {
        let (n, bytes) = ask.into_inner();
        let seen = ctx.get::<u32>("seen").await?.unwrap_or(0);
        for i in 0..n {
            ctx.run(move || async move {
                // Work that takes a while, as a request or a tool call does: the step's
                // outcome is a write of its own.
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                Ok("x".repeat(bytes))
            })
            .name(format!("step {i}"))
            .await?;
        }
        ctx.set("seen", seen + n);
        Ok(Json(n))
    }
}

#[allow(clippy::cast_precision_loss)]
fn per(total: f64, n: usize) -> f64 {
    total / n as f64
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(50)
        .max(1);
    let Some(restate) = RestateServer::start("step-cost") else {
        eprintln!("no restate-server: see durable/tests/support/install-restate.sh");
        std::process::exit(2);
    };
    let port = free_port();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("a port");
    // Served as `rebound_durable::serve` serves: HTTP/2, TCP_NODELAY on each connection
    // (unless `--nagle`).
    let nodelay = std::env::args().nth(2).as_deref() != Some("--nagle");
    let endpoint = restate_sdk::hyper::HyperEndpoint::new(Endpoint::builder().bind(Bare).build());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(nodelay);
            let connection =
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), endpoint.clone());
            tokio::spawn(connection);
        }
    });
    rebound_durable::register(&restate.admin_url(), &format!("http://127.0.0.1:{port}"))
        .await
        .expect("registered");
    let client = Client::new(&restate);
    // Warm up: the first calls open the connections.
    for i in 0..5 {
        let (status, body) = client
            .call(&format!("Bare/warm-{i}/steps"), Some("[1, 0]"))
            .await;
        assert_eq!(status, 200, "{body}");
    }
    println!(
        "{calls} calls of a bare handler, TCP_NODELAY {}",
        if nodelay { "on" } else { "off" }
    );
    println!("(state read, n steps of 1 ms journaling a result of the given size, state write)\n");
    println!("| steps per call | result per step | wall time per call | per step beyond 0 |");
    println!("|---:|---:|---:|---:|");
    let mut zero = 0.0;
    for (n, bytes) in [
        (0u32, 0usize),
        (1, 0),
        (2, 0),
        (4, 0),
        (1, 400),
        (2, 400),
        (4, 400),
    ] {
        let started = Instant::now();
        for i in 0..calls {
            let (status, body) = client
                .call(
                    &format!("Bare/n{n}-{bytes}-{i}/steps"),
                    Some(&format!("[{n}, {bytes}]")),
                )
                .await;
            assert_eq!(status, 200, "{body}");
        }
        let ms = per(started.elapsed().as_secs_f64() * 1000.0, calls);
        if n == 0 {
            zero = ms;
            println!("| 0 | — | {ms:.1} ms | — |");
        } else {
            println!(
                "| {n} | {bytes} B | {ms:.1} ms | {:.1} ms |",
                (ms - zero) / f64::from(n)
            );
        }
    }
}
