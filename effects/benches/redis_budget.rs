//! What one decision of the retry budget in Redis costs: the round trip of
//! `RedisBudget::acquire` / `record` (one EVALSHA of the budget script) on loopback.
//!
//! Run: `cargo bench -p rebound-effects --features redis --bench redis_budget` (a plain
//! `harness = false` main; a number argument is how many decisions to time per case,
//! default 20,000). It starts its own `redis-server` on a free loopback port (no
//! persistence) and stops it at the end; without `redis-server` installed it says so and
//! exits.
//!
//! Cases, each timed one decision at a time through the public API (what a runner waits for):
//! a first attempt's permit (a deposit), a charged retry granted from a full bucket, a
//! success noted; then the same first-attempt permits asked by 20 tasks at once over the one
//! multiplexed connection, as 20 runners of one process would.
//!
//! `-- scale`: the server's time per call (Redis's own `INFO commandstats`, so neither the
//! network nor this process counts) with 100, 1,000 and 10,000 retries waiting in the queue.
//!
//! `-- fleet PROCESSES AGENTS SECONDS` (by hand, not in CI; default 50 200 15): PROCESSES
//! processes of this bench, AGENTS agents each, every agent a charged retry of a total
//! outage waiting up to 15 s with the default options (a 50 ms call timeout), first asking
//! at a random time in the first 5 s, asking again 0.5 s after each denial, for SECONDS;
//! prints Redis's CPU over the run and how many processes fell back to a local budget.

use rebound_core::{BudgetConfig, BudgetNote, Millis, PermitAsk, PermitDecision, PermitKind};
use rebound_effects::budget::redis::{ScriptOp, ScriptReply};
use rebound_effects::budget::{BudgetEvent, BudgetStore, RedisBudget, RedisOptions};
use std::io::{Read, Write};
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

/// One command to the Redis on `port` (inline protocol), its raw reply.
fn command(port: u16, line: &str) -> String {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(2_000)));
    if s.write_all(format!("{line}\r\n").as_bytes()).is_err() {
        return String::new();
    }
    let mut buf = vec![0u8; 256 * 1024];
    let n = s.read(&mut buf).unwrap_or(0);
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

/// Redis's CPU seconds so far (user + system).
fn server_cpu(port: u16) -> f64 {
    let info = command(port, "INFO cpu");
    ["used_cpu_sys:", "used_cpu_user:"]
        .iter()
        .filter_map(|f| {
            info.lines()
                .find_map(|l| l.strip_prefix(f))
                .and_then(|v| v.trim().parse::<f64>().ok())
        })
        .sum()
}

/// `(calls, µs per call)` of EVALSHA since the last `CONFIG RESETSTAT`.
fn evalsha_cost(port: u16) -> (u64, f64) {
    let stats = command(port, "INFO commandstats");
    let Some(line) = stats.lines().find(|l| l.starts_with("cmdstat_evalsha:")) else {
        return (0, 0.0);
    };
    let field = |name: &str| {
        line.split([':', ','])
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .unwrap_or("0")
            .to_owned()
    };
    (
        field("calls").parse().unwrap_or(0),
        field("usec_per_call").parse().unwrap_or(0.0),
    )
}

fn charged_op(request: u64, wait_ms: u64) -> ScriptOp {
    ScriptOp::Ask {
        request,
        kind: PermitKind::Charged,
        target: 0,
        wait_ms,
        age_ms: 0,
    }
}

/// Server time per call with 100, 1,000 and 10,000 retries waiting.
async fn scale(port: u16) {
    println!(
        "| waiting | ask (queued) | a process's poll (inbox) | 200 waiters polled one by one | success granting the head | figures |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for waiting in [100_u64, 1_000, 10_000] {
        let url = format!("redis://127.0.0.1:{port}/scale-{waiting}")
            .parse()
            .expect("a budget url");
        // Nothing refills: a waiter leaves only when a success pays for it.
        let config = BudgetConfig::default()
            .with_capacity(1.0)
            .with_initial(0.0)
            .with_deposit_per_request(0.0)
            .with_deposit_per_success(1.0)
            .with_refill_per_sec(0.0);
        let options = RedisOptions::default().with_call_timeout(Duration::from_secs(5));
        let budget = RedisBudget::new(&url, config, options).expect("a client");
        let mut next = 1_u64;
        let mut ask = |budget: &RedisBudget| {
            next += 1;
            let op = charged_op(next, 600_000);
            let budget = budget.clone();
            async move {
                let reply = budget.call(op, None).await.expect("redis answers");
                assert!(matches!(reply, ScriptReply::Queued { .. }), "{reply:?}");
            }
        };
        for _ in 0..waiting {
            ask(&budget).await;
        }
        // As many asks join the queue as successes then take from its head: the queue holds
        // between `waiting` and twice as many.
        let rounds = waiting.min(1_000);
        command(port, "CONFIG RESETSTAT");
        for _ in 0..rounds {
            ask(&budget).await;
        }
        let (_, ask_us) = evalsha_cost(port);
        command(port, "CONFIG RESETSTAT");
        for _ in 0..rounds {
            let op = ScriptOp::Inbox { acks: Vec::new() };
            budget.call(op, None).await.expect("redis answers");
        }
        let (_, inbox_us) = evalsha_cost(port);
        let polled: Vec<u64> = (2..202).collect();
        command(port, "CONFIG RESETSTAT");
        for _ in 0..rounds {
            let op = ScriptOp::Poll {
                requests: polled.clone(),
            };
            budget.call(op, None).await.expect("redis answers");
        }
        let (_, poll_us) = evalsha_cost(port);
        command(port, "CONFIG RESETSTAT");
        for _ in 0..rounds {
            budget.record(BudgetNote::Succeeded { target: 0 }).await;
        }
        let (_, success_us) = evalsha_cost(port);
        command(port, "CONFIG RESETSTAT");
        for _ in 0..rounds {
            budget.stats().await.expect("redis answers");
        }
        let (_, stats_us) = evalsha_cost(port);
        let stats = budget.stats().await.expect("redis answers");
        assert!(budget.is_shared());
        eprintln!("scale {waiting}: {stats:?}");
        println!(
            "| {waiting} | {ask_us:.1} µs | {inbox_us:.1} µs | {poll_us:.1} µs | {success_us:.1} µs | {stats_us:.1} µs |"
        );
    }
}

/// One process of the fleet: `agents` agents asking for charged retries for `seconds`;
/// prints `decisions granted denied fell_back`.
async fn fleet_child(port: u16, agents: usize, seconds: u64) {
    let url = format!("redis://127.0.0.1:{port}/fleet")
        .parse()
        .expect("a budget url");
    let fell_back = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = Arc::clone(&fell_back);
    let options = RedisOptions::default().with_on_event(Arc::new(move |e: &BudgetEvent| {
        if matches!(e, BudgetEvent::FellBack { .. }) {
            // Counted from the start of the clock (below); said always, with why.
            eprintln!("{e}");
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }));
    // The defaults of `rebound run`, in a total outage: nothing succeeds.
    let budget = RedisBudget::new(&url, BudgetConfig::default(), options).expect("a client");
    // Connected before the clock starts: fifty processes starting at once on a small
    // machine connect slowly, which is not what this measures.
    let ready = Instant::now() + Duration::from_secs(30);
    while budget.check().await.is_err() && Instant::now() < ready {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    fell_back.store(0, std::sync::atomic::Ordering::SeqCst);
    let until = Instant::now() + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..agents)
        .map(|_| {
            let budget = budget.clone();
            // The agents' first failures spread over the first 5 s, as a fleet's do (their
            // requests started at different times), not all in one millisecond.
            let start = Duration::from_millis(fastrand::u64(..5_000));
            tokio::spawn(async move {
                tokio::time::sleep(start).await;
                let mut counts = [0_u64; 2];
                while Instant::now() < until {
                    let now = now(&budget);
                    let ask = PermitAsk {
                        kind: PermitKind::Charged,
                        target: 0,
                        deadline: now.plus(15_000),
                        since: now,
                    };
                    match budget.acquire(ask).await {
                        PermitDecision::Granted => counts[0] += 1,
                        _ => {
                            counts[1] += 1;
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                }
                counts
            })
        })
        .collect();
    let mut counts = [0_u64; 2];
    for t in tasks {
        let c = t.await.expect("joins");
        counts[0] += c[0];
        counts[1] += c[1];
    }
    println!(
        "{} {} {}",
        counts[0],
        counts[1],
        fell_back.load(std::sync::atomic::Ordering::SeqCst)
    );
}

/// The operations and durations of a `SLOWLOG GET` reply, slowest first (at most ten): each
/// entry is `*6`, its id, time and duration (µs), then the command's arguments, among which
/// the script's operation.
fn slowest(reply: &str) -> String {
    const OPS: [&str; 7] = [
        "ask", "inbox", "poll", "cancel", "success", "limited", "stats",
    ];
    let lines: Vec<&str> = reply.split("\r\n").collect();
    let mut entries = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if *line != "*6" {
            continue;
        }
        let Some(us) = lines
            .get(i + 3)
            .and_then(|l| l.trim_start_matches(':').parse::<u64>().ok())
        else {
            continue;
        };
        let op = lines[i + 4..]
            .iter()
            .take(40)
            .find(|l| OPS.contains(l))
            .copied()
            .unwrap_or("?");
        entries.push((us, op));
    }
    entries.sort_unstable_by(|a, b| b.cmp(a));
    entries
        .iter()
        .take(10)
        .map(|(us, op)| format!("{op} {:.1} ms", *us as f64 / 1000.0))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The whole fleet: `processes` children of this bench against one Redis.
fn fleet(port: u16, processes: usize, agents: usize, seconds: u64) {
    let exe = std::env::current_exe().expect("this bench");
    let cpu_before = server_cpu(port);
    let started = Instant::now();
    let children: Vec<Child> = (0..processes)
        .map(|_| {
            Command::new(&exe)
                .args(["fleet-child", &port.to_string(), &agents.to_string()])
                .arg(seconds.to_string())
                .stdout(Stdio::piped())
                .spawn()
                .expect("a child")
        })
        .collect();
    // Redis's CPU, sampled once a second while the agents wait.
    let mut peak = 0.0_f64;
    let mut last = (Instant::now(), server_cpu(port));
    while started.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_secs(1));
        let now = (Instant::now(), server_cpu(port));
        peak = peak.max((now.1 - last.1) / now.0.duration_since(last.0).as_secs_f64());
        last = now;
    }
    let mut totals = [0_u64; 3];
    let mut fell_back_processes = 0;
    for child in children {
        let out = child.wait_with_output().expect("a child ends");
        let text = String::from_utf8_lossy(&out.stdout);
        let numbers: Vec<u64> = text
            .split_whitespace()
            .filter_map(|n| n.parse().ok())
            .collect();
        if let [granted, denied, fell_back] = numbers[..] {
            totals[0] += granted;
            totals[1] += denied;
            totals[2] += fell_back;
            fell_back_processes += usize::from(fell_back > 0);
        } else {
            println!("a child said: {text}");
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let cpu = (server_cpu(port) - cpu_before) / wall;
    let (calls, us) = evalsha_cost(port);
    eprintln!(
        "calls that took Redis over 10 ms (wall time, so a busy machine's too): {}",
        command(port, "SLOWLOG LEN").trim().trim_start_matches(':')
    );
    eprintln!(
        "the slowest: {}",
        slowest(&command(port, "SLOWLOG GET 128"))
    );
    println!(
        "| {processes} × {agents} agents | {seconds} s | {:.0} % | {:.0} % | {calls} | {:.0} | {us:.1} µs | {} / {} | {fell_back_processes} |",
        cpu * 100.0,
        peak * 100.0,
        calls as f64 / wall,
        totals[0],
        totals[1],
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let words: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if let ["fleet-child", port, agents, seconds] = words[..] {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let (Ok(port), Ok(agents), Ok(seconds)) = (port.parse(), agents.parse(), seconds.parse())
        else {
            return;
        };
        runtime.block_on(fleet_child(port, agents, seconds));
        return;
    }
    let Some((_server, port, _dir)) = start_redis() else {
        println!("redis_budget: redis-server is not installed or did not start: nothing measured");
        return;
    };
    if words.first() == Some(&"fleet") {
        let arg =
            |i: usize, default: u64| words.get(i).and_then(|w| w.parse().ok()).unwrap_or(default);
        println!("| fleet | for | Redis CPU (mean) | (peak second) | calls | calls/s | µs per call | granted / denied | processes fallen back |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
        command(port, "CONFIG RESETSTAT");
        command(port, "CONFIG SET slowlog-log-slower-than 10000");
        command(port, "SLOWLOG RESET");
        fleet(port, arg(1, 50) as usize, arg(2, 200) as usize, arg(3, 15));
        return;
    }
    let scale_only = words.first() == Some(&"scale");
    let n: usize = words.iter().find_map(|a| a.parse().ok()).unwrap_or(20_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if scale_only {
        runtime.block_on(scale(port));
        return;
    }
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
        println!();
        scale(port).await;
    });
}
