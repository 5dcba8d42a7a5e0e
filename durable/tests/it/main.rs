//! rebound-durable's integration tests, one module per file, in one test binary (one link of
//! Restate's SDK and the runner, one parallel pool): `cargo test -p rebound-durable --test it
//! crash` runs one module. Each test starts its own `restate-server` (`support/restate.rs`).

#[path = "../support/restate.rs"]
mod restate;

mod cancel;
mod crash;
mod secrets;
mod telemetry;

/// Serves `agent` on a free loopback port and registers the endpoint with `restate`.
async fn serve_registered(
    restate: &restate::RestateServer,
    agent: rebound_durable::DurableAgent,
) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    let server = tokio::spawn(rebound_durable::serve(agent, listener));
    rebound_durable::register(&restate.admin_url(), &url)
        .await
        .expect("the endpoint registers");
    server
}
