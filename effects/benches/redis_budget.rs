//! What one decision of the retry budget in Redis costs: the round trip of
//! `RedisBudget::acquire` / `record` (one EVALSHA of the budget script) on loopback.
//!
//! Run: `cargo bench -p rebound-effects --bench redis_budget` (a plain `harness = false`
//! main; the argument, if any, is how many decisions to time per case, default 20,000). It
//! starts its own `redis-server` on a free loopback port (no persistence) and stops it at the
//! end; without `redis-server` installed it says so and exits.
//!
//! Cases, each timed one decision at a time through the public API (what a runner waits for):
//! a first attempt's permit (a deposit), a charged retry granted from a full bucket, a
//! success noted; then the same first-attempt permits asked by 20 tasks at once over the one
//! multiplexed connection, as 20 runners of one process would.

use rebound_core::{BudgetConfig, BudgetNote, Millis, PermitAsk, PermitKind};
use rebound_effects::budget::{BudgetStore, RedisBudget, RedisOptions};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis() -> Option<(Server, u16, tempfile::TempDir)> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .ok()?
        .port();
    let dir = tempfile::tempdir().ok()?;
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no"])
        .arg("--dir")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let server = Server(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Some((server, port, dir))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[at]
}

fn report(case: &str, mut times: Vec<Duration>, wall: Duration) {
    times.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "| {case} | {} | {:.0} µs | {:.0} µs | {:.0} µs | {:.0} µs | {:.0} |",
        times.len(),
        us(percentile(&times, 0.50)),
        us(percentile(&times, 0.99)),
        us(percentile(&times, 0.999)),
        us(percentile(&times, 1.0)),
        times.len() as f64 / wall.as_secs_f64(),
    );
}

fn now(budget: &RedisBudget) -> Millis {
    Millis(u64::try_from(budget.origin().elapsed().as_millis()).unwrap_or(u64::MAX))
}

fn ask(budget: &RedisBudget, kind: PermitKind) -> PermitAsk {
    let now = now(budget);
    PermitAsk {
        kind,
        target: 0,
        deadline: now.plus(10_000),
        since: now,
    }
}

async fn time_each<F, Fut>(n: usize, mut decide: F) -> (Vec<Duration>, Duration)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let started = Instant::now();
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        decide().await;
        times.push(t.elapsed());
    }
    (times, started.elapsed())
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let Some((_server, port, _dir)) = start_redis() else {
        println!("redis_budget: redis-server is not installed or did not start: nothing measured");
        return;
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async move {
        let url = format!("redis://127.0.0.1:{port}/bench")
            .parse()
            .expect("a budget url");
        // A bucket that never runs dry, so every charged permit is one grant; generous
        // timeouts, so a slow call is measured rather than sent to the local budget.
        let config = BudgetConfig::default().with_capacity(1e9).with_initial(1e9);
        let options = RedisOptions::default().with_call_timeout(Duration::from_secs(5));
        let budget = RedisBudget::new(&url, config, options).expect("a client");
        budget.check().await.expect("redis answers");
        for _ in 0..1_000 {
            budget.acquire(ask(&budget, PermitKind::FirstAttempt)).await;
        }
        println!("| decision | n | p50 | p99 | p99.9 | max | per second |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        let (times, wall) = time_each(n, || async {
            budget.acquire(ask(&budget, PermitKind::FirstAttempt)).await;
        })
        .await;
        report("first attempt (deposit), one at a time", times, wall);
        let (times, wall) = time_each(n, || async {
            budget.acquire(ask(&budget, PermitKind::Charged)).await;
        })
        .await;
        report("charged retry granted, one at a time", times, wall);
        let (times, wall) = time_each(n, || async {
            budget.record(BudgetNote::Succeeded { target: 0 }).await;
        })
        .await;
        report("success noted, one at a time", times, wall);

        let budget = Arc::new(budget);
        let started = Instant::now();
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let budget = Arc::clone(&budget);
                tokio::spawn(async move {
                    time_each(n / 20, || async {
                        budget.acquire(ask(&budget, PermitKind::FirstAttempt)).await;
                    })
                    .await
                    .0
                })
            })
            .collect();
        let mut times = Vec::new();
        for task in tasks {
            times.extend(task.await.expect("joins"));
        }
        report("first attempt, 20 tasks at once", times, started.elapsed());
        let stats = budget.stats().await.expect("redis answers");
        assert!(budget.is_shared(), "every decision was Redis's");
        eprintln!("budget in Redis after the run: {stats:?}");
    });
}
