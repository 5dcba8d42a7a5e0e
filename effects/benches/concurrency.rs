//! Many runners in one process, each streaming its answer from a loopback server: memory per
//! agent, CPU per streamed MB, threads, and the delay from a chunk leaving the server to the
//! runner's receiver seeing its text.
//!
//! Run: `cargo bench -p rebound-effects --bench concurrency` (a plain `harness = false` main;
//! `-- --agents N --deltas N --interval-ms N --workers N` change the defaults 1000, 200, 20, 2).
//!
//! Three rows, each in a fresh child process with the same in-process server (hyper 1, HTTP/1,
//! one connection per agent), so the server's share of the CPU is the same in each:
//!
//! - `reqwest, bytes only`: one plain reqwest streaming request per agent, bytes counted and
//!   dropped — the floor;
//! - `reqwest + StreamDecoder`: the same, every chunk through `wire::StreamDecoder`;
//! - `Runner`: one `Runner::run` per agent (`tokio::spawn`ed), with a receiver that reads the
//!   server's send time out of every text delta;
//! - `Runner, telemetry exported`: the same, with the runner's spans and metrics exported as
//!   the `rebound` binary exports them (a `tracing-opentelemetry` layer, the SDK's batch span
//!   processor and periodic metric reader, OTLP/HTTP protobuf to a receiver in the parent
//!   process, flushed before the row's CPU is read). Metrics need the `otel` feature:
//!   `cargo bench -p rebound-effects --features otel --bench concurrency`.
//!
//! Each agent holds two file descriptors (its connection and the server's end of it); the bench
//! raises its soft open-files limit to `2 × agents + 256` as far as the hard limit allows and
//! otherwise stops, naming the `ulimit -n` to run it under (10,000 agents: 20,256).
//! `-- --server-process` runs the server in a process of its own instead (one descriptor per
//! agent in each), whose CPU and resident-set growth are added to the row's, so the columns
//! keep their meaning; the threads column stays the runners' process's.
//!
//! `-- --shared-client` sends every agent of a row through one reqwest client (a connection
//! per concurrent stream still, from its pool), as an embedder running thousands of agents
//! would with `HttpProvider::with_client`; by default each agent builds its own, as
//! `HttpProvider::new` does.
//!
//! `-- --repeat N` runs the two runner rows N times, alternating, for a side-by-side
//! comparison on one machine in one run.
//!
//! With `--agents 1 --interval-ms 0` it measures one turn streamed as fast as the server can
//! write it: the runner's overhead per turn over plain reqwest on the same bytes.
//!
//! Every answer is an Anthropic stream of `--deltas` text deltas, one every `--interval-ms`,
//! each carrying the server's clock (µs since the bench started) when it was written; the
//! receiver subtracts it from its own clock on arrival. That delay includes loopback, hyper's
//! and reqwest's buffering, SSE decoding, JSON parsing and the runner: everything between the
//! server's write and the UI.
//!
//! CPU is the process's user + system time (`/proc/self/stat`) over the row, server included;
//! memory is the growth of the resident set (`VmRSS`) at the peak of the row (sampled every
//! 10 ms) over the resident set before it, divided by the agents. At most 1,000 agents connect
//! at once (more overflow the server's accept queue); `streaming (peak)` is the most agents
//! streaming at once, which should be all of them for the memory per agent to mean that.

use hyper::body::{Bytes, Frame};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rebound_core::wire::{encode_stream, StreamDecoder, StreamDelta};
use rebound_core::{
    AssistantResponse, MachineConfig, Message, ProviderKind, RetryConfig, TargetSpec,
};
use rebound_effects::provider::{ApiKey, HttpProvider, HttpProviderConfig};
use rebound_effects::receiver::{Receiver, ReceiverError};
use rebound_effects::runner::{RunInput, Runner};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Microseconds on the system's monotonic clock, the clock both sides read (the server may be
/// another process, `--server-process`).
#[cfg(unix)]
fn micros() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` only writes the `timespec` it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    let (seconds, nanos) = (
        u64::try_from(now.tv_sec).unwrap_or(0),
        u64::try_from(now.tv_nsec).unwrap_or(0),
    );
    seconds * 1_000_000 + nanos / 1000
}

/// Microseconds since the bench started (one process only).
#[cfg(not(unix))]
fn micros() -> u64 {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    u64::try_from(ORIGIN.get_or_init(Instant::now).elapsed().as_micros()).unwrap_or(u64::MAX)
}

#[derive(Clone, Copy)]
struct Options {
    agents: usize,
    deltas: usize,
    interval: Duration,
    workers: usize,
    repeat: usize,
    /// The server in a process of its own (`--server-process`), so each process holds one
    /// descriptor per agent rather than two.
    server_process: bool,
    /// The port of the OTLP receiver the parent runs (telemetry row only).
    otlp_port: u16,
    /// Every agent of a row sends through one reqwest client (`--shared-client`), as an
    /// embedder starting thousands of agents would (`HttpProvider::with_client`): its pool
    /// still opens a connection per concurrent stream, but the client (rustls' root store and
    /// session cache, the pool) is built once rather than once per agent.
    shared_client: bool,
}

impl Options {
    fn parse() -> Options {
        let mut o = Options {
            agents: 1000,
            deltas: 200,
            interval: Duration::from_millis(20),
            workers: 2,
            repeat: 1,
            server_process: false,
            otlp_port: 0,
            shared_client: false,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            // `cargo bench` passes `--bench`; ignore what is not ours.
            let mut value = || args.next().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            match arg.as_str() {
                "--agents" => o.agents = usize::try_from(value()).unwrap_or(1).max(1),
                "--deltas" => o.deltas = usize::try_from(value()).unwrap_or(1).max(1),
                "--interval-ms" => o.interval = Duration::from_millis(value()),
                "--workers" => o.workers = usize::try_from(value()).unwrap_or(1).max(1),
                "--repeat" => o.repeat = usize::try_from(value()).unwrap_or(1).max(1),
                "--otlp-port" => o.otlp_port = u16::try_from(value()).unwrap_or(0),
                "--server-process" => o.server_process = true,
                "--shared-client" => o.shared_client = true,
                "--row" => {
                    value();
                }
                _ => {}
            }
        }
        o
    }
}

/// The answer's SSE events: everything before the text delta, the delta (its text `"X"` to be
/// replaced), and everything after.
struct Template {
    head: Vec<Bytes>,
    delta: (String, String),
    tail: Vec<Bytes>,
}

impl Template {
    fn new() -> Template {
        let response = AssistantResponse::end_turn(Message::assistant_text("X"));
        let events = encode_stream(ProviderKind::Anthropic, &response, "bench", "msg_bench");
        let at = events
            .iter()
            .position(|e| String::from_utf8_lossy(e).contains("text_delta"))
            .expect("an Anthropic stream has a text delta");
        let delta = String::from_utf8_lossy(&events[at]).into_owned();
        let (before, after) = delta
            .split_once("\"X\"")
            .expect("the delta carries the text");
        Template {
            head: events[..at].iter().cloned().map(Bytes::from).collect(),
            delta: (before.to_owned(), after.to_owned()),
            tail: events[at + 1..].iter().cloned().map(Bytes::from).collect(),
        }
    }

    /// A delta whose text is the server's clock now, padded to about 60 bytes of text.
    fn delta_now(&self) -> Bytes {
        let text = format!("\"{:>20} {:<38}\"", micros(), "tokens tokens tokens tokens");
        Bytes::from(format!("{}{text}{}", self.delta.0, self.delta.1))
    }
}

/// Serves every POST with the paced answer; counts the bytes written.
async fn serve(options: Options, written: Arc<AtomicU64>) -> SocketAddr {
    // tokio's `TcpListener::bind` listens with a backlog of 1,024, and a connection the full
    // queue drops waits a second for its SYN to be resent; up to `CONNECTING` agents connect
    // at once. The kernel caps this at `net.core.somaxconn` (4,096 by default).
    let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
    socket
        .bind("127.0.0.1:0".parse().expect("an address"))
        .expect("bind loopback");
    let backlog = u32::try_from(options.agents).unwrap_or(u32::MAX).max(1024);
    let listener = socket.listen(backlog).expect("listen");
    let addr = listener.local_addr().expect("local address");
    let template = Arc::new(Template::new());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of file descriptors (see `raise_open_files`): wait rather than spin.
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            };
            let template = Arc::clone(&template);
            let written = Arc::clone(&written);
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                    let template = Arc::clone(&template);
                    let written = Arc::clone(&written);
                    async move {
                        use http_body_util::BodyExt;
                        let _ = request.into_body().collect().await;
                        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
                        tokio::spawn(async move {
                            let send = |b: Bytes| {
                                written.fetch_add(b.len() as u64, Ordering::Relaxed);
                                tx.send(b)
                            };
                            for b in template.head.clone() {
                                if send(b).await.is_err() {
                                    return;
                                }
                            }
                            for _ in 0..options.deltas {
                                if !options.interval.is_zero() {
                                    tokio::time::sleep(options.interval).await;
                                }
                                if send(template.delta_now()).await.is_err() {
                                    return;
                                }
                            }
                            for b in template.tail.clone() {
                                if send(b).await.is_err() {
                                    return;
                                }
                            }
                        });
                        let body = http_body_util::StreamBody::new(futures_util::stream::unfold(
                            rx,
                            |mut rx| async move {
                                rx.recv()
                                    .await
                                    .map(|b| (Ok::<_, Infallible>(Frame::data(b)), rx))
                            },
                        ));
                        Response::builder()
                            .header("content-type", "text/event-stream")
                            .body(body)
                    }
                });
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

/// Agents streaming now, and the most at once in this row (the row's own process).
static STREAMING: AtomicU64 = AtomicU64::new(0);
static PEAK_STREAMING: AtomicU64 = AtomicU64::new(0);

/// At most this many agents connect at once. Ten thousand SYNs at once overflow the server's
/// accept queue (capped at `net.core.somaxconn`, 4,096 here), and a dropped SYN is resent after
/// 1, 3, 7, 15 s: the row would last longer than its streams, and fewer than all the agents
/// would stream at once, which the memory per agent assumes.
const CONNECTING: usize = 1000;

/// An agent's permit to connect, returned once its answer streams (reqwest rows: the response
/// head; runner rows: the first text delta), and its count among the agents streaming.
struct Started {
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    streaming: bool,
}

impl Started {
    fn new(permit: tokio::sync::OwnedSemaphorePermit) -> Started {
        Started {
            permit: Some(permit),
            streaming: false,
        }
    }

    fn streaming(&mut self) {
        if !self.streaming {
            self.streaming = true;
            self.permit = None;
            let now = STREAMING.fetch_add(1, Ordering::Relaxed) + 1;
            PEAK_STREAMING.fetch_max(now, Ordering::Relaxed);
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        if self.streaming {
            STREAMING.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Reads the server's clock out of every text delta.
struct Probe {
    delays: Vec<u64>,
    all: Arc<Mutex<Vec<u64>>>,
    started: Started,
}

fn sent_at(text: &str) -> Option<u64> {
    text.split_whitespace().next()?.parse().ok()
}

impl Receiver for Probe {
    fn delta(&mut self, delta: &StreamDelta<&str>) -> Result<(), ReceiverError> {
        if let StreamDelta::Text { text, .. } = delta {
            self.started.streaming();
            if let Some(at) = sent_at(text) {
                self.delays.push(micros().saturating_sub(at));
            }
        }
        Ok(())
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        if let Ok(mut all) = self.all.lock() {
            all.append(&mut self.delays);
        }
    }
}

/// `/proc/self` or `/proc/<pid>`.
fn proc_dir(pid: Option<u32>) -> String {
    pid.map_or_else(|| "/proc/self".to_owned(), |pid| format!("/proc/{pid}"))
}

/// `(utime + stime)` of this process (or of `pid`), in seconds.
fn cpu_seconds(pid: Option<u32>) -> f64 {
    let stat = std::fs::read_to_string(format!("{}/stat", proc_dir(pid))).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Counted in USER_HZ, which Linux's user ABI fixes at 100 per second.
    (ticks(11) + ticks(12)) / 100.0
}

/// A line of `/proc/self/status` (or `/proc/<pid>/status`), e.g. `VmRSS` in KiB or `Threads`.
fn status(pid: Option<u32>, field: &str) -> u64 {
    std::fs::read_to_string(format!("{}/status", proc_dir(pid)))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

struct Row {
    name: &'static str,
    wall: Duration,
    cpu: f64,
    bytes: u64,
    rss_kib: u64,
    threads: u64,
    delays: Vec<u64>,
    failed: usize,
    streaming: u64,
    /// The server process's share of `cpu` (`--server-process`).
    server_cpu: Option<f64>,
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
}

#[derive(Clone, Copy, PartialEq)]
enum Client {
    Bytes,
    Decoder,
    Runner,
    RunnerExported,
}

/// The reqwest client an agent sends through: the row's shared one (`--shared-client`), or a
/// new one of its own as `HttpProvider::new` builds it.
fn agent_http(shared: Option<&reqwest::Client>) -> Option<reqwest::Client> {
    match shared {
        Some(http) => Some(http.clone()),
        None => reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .ok(),
    }
}

async fn one_agent(
    client: Client,
    shared: Option<reqwest::Client>,
    url: String,
    all: Arc<Mutex<Vec<u64>>>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> bool {
    let started = Started::new(permit);
    match client {
        Client::Bytes | Client::Decoder => {
            let Some(http) = agent_http(shared.as_ref()) else {
                return false;
            };
            let Ok(mut response) = http
                .post(format!("{url}/v1/messages"))
                .body("{}")
                .send()
                .await
            else {
                return false;
            };
            let mut decoder = StreamDecoder::new(ProviderKind::Anthropic);
            let mut probe = Probe {
                delays: Vec::new(),
                all,
                started,
            };
            probe.started.streaming();
            while let Ok(Some(chunk)) = response.chunk().await {
                if let Client::Decoder = client {
                    let lent = decoder.feed_with(&chunk, |d| {
                        let _ = probe.delta(&d);
                    });
                    if lent.is_err() {
                        return false;
                    }
                }
            }
            matches!(client, Client::Bytes) || decoder.finish().is_ok()
        }
        Client::Runner | Client::RunnerExported => {
            let mut http =
                HttpProviderConfig::new(ProviderKind::Anthropic, "bench", ApiKey::new("sk-bench"));
            http.base_url = url;
            let Some(provider) =
                agent_http(shared.as_ref()).and_then(|c| HttpProvider::with_client(http, c).ok())
            else {
                return false;
            };
            let config = MachineConfig::default()
                .with_retry(RetryConfig::default().with_max_attempts(1))
                .with_targets(vec![TargetSpec::new(ProviderKind::Anthropic, "bench")]);
            let mut runner = Runner::new(config, vec![Box::new(provider)])
                .seed(1)
                .receiver(Probe {
                    delays: Vec::new(),
                    all,
                    started,
                });
            runner.run(RunInput::text("go")).await.is_ok()
        }
    }
}

async fn row(
    name: &'static str,
    client: Client,
    options: Options,
    export: Option<otel::Export>,
) -> Row {
    let written = Arc::new(AtomicU64::new(0));
    let (addr, server) = if options.server_process {
        let server = ServerProcess::start();
        (server.addr, Some(server))
    } else {
        (serve(options, Arc::clone(&written)).await, None)
    };
    let server_pid = server.as_ref().map(|s| s.child.id());
    let url = format!("http://{addr}");
    let all = Arc::new(Mutex::new(Vec::new()));
    let rss_before = status(None, "VmRSS");
    let peak = Arc::new(AtomicU64::new(rss_before));
    let server_rss_before = server_pid.map_or(0, |pid| status(Some(pid), "VmRSS"));
    let server_peak = Arc::new(AtomicU64::new(server_rss_before));
    let threads = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, server_peak, threads, done) = (
            Arc::clone(&peak),
            Arc::clone(&server_peak),
            Arc::clone(&threads),
            Arc::clone(&done),
        );
        tokio::spawn(async move {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(status(None, "VmRSS"), Ordering::Relaxed);
                threads.fetch_max(status(None, "Threads"), Ordering::Relaxed);
                if let Some(pid) = server_pid {
                    server_peak.fetch_max(status(Some(pid), "VmRSS"), Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let server_cpu = || server_pid.map_or(0.0, |pid| cpu_seconds(Some(pid)));
    let server_cpu_before = server_cpu();
    let cpu_before = cpu_seconds(None) + server_cpu_before;
    let started = Instant::now();
    let shared = if options.shared_client {
        agent_http(None)
    } else {
        None
    };
    let connecting = Arc::new(tokio::sync::Semaphore::new(CONNECTING));
    let mut tasks = Vec::with_capacity(options.agents);
    for _ in 0..options.agents {
        let permit = Arc::clone(&connecting)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        tasks.push(tokio::spawn(one_agent(
            client,
            shared.clone(),
            url.clone(),
            Arc::clone(&all),
            permit,
        )));
    }
    let mut failed = 0;
    for t in tasks {
        if !t.await.unwrap_or(false) {
            failed += 1;
        }
    }
    let wall = started.elapsed();
    // The export's last flush is the row's cost too.
    if let Some(export) = export {
        export.shutdown();
    }
    let server_cpu = server_pid.map(|_| server_cpu() - server_cpu_before);
    let cpu = cpu_seconds(None) + server_cpu.unwrap_or(0.0) - cpu_before;
    done.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    if let Some(server) = server {
        written.store(server.stop(), Ordering::Relaxed);
    }
    let mut delays = std::mem::take(&mut *all.lock().expect("no panics while held"));
    delays.sort_unstable();
    Row {
        name,
        wall,
        cpu,
        bytes: written.load(Ordering::Relaxed),
        rss_kib: peak.load(Ordering::Relaxed).saturating_sub(rss_before)
            + server_peak
                .load(Ordering::Relaxed)
                .saturating_sub(server_rss_before),
        threads: threads.load(Ordering::Relaxed),
        delays,
        failed,
        streaming: PEAK_STREAMING.load(Ordering::Relaxed),
        server_cpu,
    }
}

const CLIENTS: [(&str, Client); 4] = [
    ("reqwest, bytes only", Client::Bytes),
    ("reqwest + StreamDecoder", Client::Decoder),
    ("Runner", Client::Runner),
    ("Runner, telemetry exported", Client::RunnerExported),
];

/// Each row runs in a child process of its own (`--row N`), so that one row's heap does not
/// lower the next one's resident-set growth.
fn main() {
    let options = Options::parse();
    let per_agent = if options.server_process { 1 } else { 2 };
    raise_open_files(options.agents, per_agent);
    if std::env::args().any(|a| a == "--serve") {
        ServerProcess::run(options);
        return;
    }
    let row_arg = std::env::args()
        .skip_while(|a| a != "--row")
        .nth(1)
        .and_then(|v| v.parse::<usize>().ok());
    if let Some(i) = row_arg {
        run_row(i, options);
        return;
    }
    println!(
        "{} agents, {} deltas each every {} ms, {} runtime workers; server in {}.\n",
        options.agents,
        options.deltas,
        options.interval.as_millis(),
        options.workers,
        if options.server_process {
            "a process of its own (its CPU and resident-set growth added to the row's; \
             threads are the runners' process's)"
        } else {
            "the same process"
        }
    );
    println!("| client | wall | CPU s | streamed MB | CPU s / MB | RSS growth / agent | threads (peak) | delay p50 | p99 | failed | streaming (peak) |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let me = std::env::current_exe().expect("the bench's own path");
    let receiver = otel::receiver();
    let mut rows: Vec<usize> = vec![0, 1];
    for _ in 0..options.repeat {
        rows.extend([2, 3]);
    }
    for i in rows {
        let status = std::process::Command::new(&me)
            .args(std::env::args().skip(1))
            .args(["--row", &i.to_string()])
            .args(["--otlp-port", &receiver.to_string()])
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            eprintln!("row {i} failed: {status:?}");
            std::process::exit(1);
        }
    }
}

/// Every agent holds `per_agent` descriptors in this process: its connection, and the server's
/// end of it unless the server has a process of its own. 10,000 agents with the server in the
/// same process need about 20,100 open files, more than many shells' default soft limit
/// (1,024). Raises the soft limit as far as the hard limit allows; if that is not enough, says
/// which `ulimit -n` (or `--server-process`) to run the bench with.
#[cfg(not(unix))]
fn raise_open_files(_agents: usize, _per_agent: u64) {}

/// See above.
#[cfg(unix)]
fn raise_open_files(agents: usize, per_agent: u64) {
    let needed = u64::try_from(agents).unwrap_or(u64::MAX / 4) * per_agent + 256;
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` and `setrlimit` only read or write the `rlimit` they are given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return;
    }
    if limit.rlim_cur >= needed {
        return;
    }
    if limit.rlim_max < needed {
        eprintln!(
            "{agents} agents need about {needed} open files in one process; the hard limit is {}: \
             run the bench after `ulimit -n {needed}` (raising a hard limit needs \
             CAP_SYS_RESOURCE){}",
            limit.rlim_max,
            if per_agent > 1 {
                ", or with `--server-process`"
            } else {
                ""
            }
        );
        std::process::exit(1);
    }
    limit.rlim_cur = needed;
    // SAFETY: as above.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        eprintln!("could not raise the open-files limit to {needed}");
        std::process::exit(1);
    }
}

/// The server of `--server-process`: this bench's binary run with `--serve` by a row's process,
/// which adds the server's CPU and resident-set growth to the row's.
struct ServerProcess {
    child: std::process::Child,
    addr: SocketAddr,
    stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl ServerProcess {
    /// Starts the server and reads the port it listens on.
    fn start() -> ServerProcess {
        use std::io::BufRead;
        let me = std::env::current_exe().expect("the bench's own path");
        let mut child = std::process::Command::new(me)
            .args(std::env::args().skip(1))
            .arg("--serve")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the server process");
        let mut stdout = std::io::BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("the server's port");
        let addr = line.trim().parse().expect("the server's address");
        ServerProcess {
            child,
            addr,
            stdout,
        }
    }

    /// Closes the server's input, which stops it; returns the bytes it wrote.
    fn stop(mut self) -> u64 {
        use std::io::BufRead;
        drop(self.child.stdin.take());
        let mut line = String::new();
        let _ = self.stdout.read_line(&mut line);
        let _ = self.child.wait();
        line.trim().parse().expect("the bytes the server wrote")
    }

    /// The `--serve` side: serves until its input closes, then prints the bytes it wrote.
    fn run(options: Options) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(options.workers)
            .enable_all()
            .build()
            .expect("runtime");
        let written = Arc::new(AtomicU64::new(0));
        runtime.block_on(async {
            let addr = serve(options, Arc::clone(&written)).await;
            println!("{addr}");
            tokio::task::spawn_blocking(|| {
                let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            })
            .await
            .expect("the stdin reader");
        });
        println!("{}", written.load(Ordering::Relaxed));
    }
}

fn run_row(i: usize, options: Options) {
    let Some(&(name, client)) = CLIENTS.get(i) else {
        eprintln!("no row {i}");
        std::process::exit(2);
    };
    micros();
    // Installed outside the runtime, as the `rebound` binary does.
    let export = (client == Client::RunnerExported).then(|| otel::install(options.otlp_port));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(options.workers)
        .enable_all()
        .build()
        .expect("runtime");
    let r = runtime.block_on(row(name, client, options, export));
    let mb = r.bytes as f64 / 1e6;
    let delay = |p| {
        if r.delays.is_empty() {
            "—".to_owned()
        } else {
            format!("{:.2} ms", percentile(&r.delays, p))
        }
    };
    println!(
        "| {} | {:.2} s | {:.2} | {:.1} | {:.3} | {:.1} KiB | {} | {} | {} | {} | {} |",
        r.name,
        r.wall.as_secs_f64(),
        r.cpu,
        mb,
        r.cpu / mb.max(1e-9),
        r.rss_kib as f64 / options.agents as f64,
        r.threads,
        delay(50.0),
        delay(99.0),
        r.failed,
        r.streaming
    );
    if let Some(server) = r.server_cpu {
        eprintln!(
            "  of the CPU, the server process's: {server:.2} s; the runners' process's: {:.2} s ({:.3} s / MB)",
            r.cpu - server,
            (r.cpu - server) / mb.max(1e-9)
        );
    }
}

/// The telemetry row's export, as the `rebound` binary sets it up (`cli/src/telemetry.rs`):
/// spans through `tracing-opentelemetry` (filtered to the runner's target, no busy/idle
/// tracking) into the SDK's batch processor, metrics through the global meter provider's
/// periodic reader, both over OTLP/HTTP protobuf with a reqwest 0.12 blocking client.
mod otel {
    use bytes::Bytes;
    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
    use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
    use std::io::{BufRead, BufReader, Read, Write};
    use std::sync::Arc;
    use std::time::Duration;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;

    pub struct Export {
        tracer: SdkTracerProvider,
        meter: SdkMeterProvider,
    }

    impl Export {
        /// Flushes everything (the row counts it) and stops the export threads.
        pub fn shutdown(self) {
            std::thread::spawn(move || {
                let _ = self.tracer.shutdown();
                let _ = self.meter.shutdown();
            })
            .join()
            .expect("the flush thread");
        }
    }

    #[derive(Debug)]
    struct Client(reqwest::blocking::Client);

    #[async_trait::async_trait]
    impl opentelemetry_http::HttpClient for Client {
        async fn send_bytes(
            &self,
            request: http::Request<Bytes>,
        ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
            let (parts, body) = request.into_parts();
            let sent = self
                .0
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body.to_vec())
                .send()?;
            let status = sent.status().as_u16();
            let bytes = sent.bytes()?;
            Ok(http::Response::builder().status(status).body(bytes)?)
        }
    }

    pub fn install(port: u16) -> Export {
        let endpoint = format!("http://127.0.0.1:{port}");
        let client: Arc<dyn opentelemetry_http::HttpClient> = Arc::new(Client(
            reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(3))
                .build()
                .expect("client"),
        ));
        let spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("{endpoint}/v1/traces"))
            .with_shared_http_client(Arc::clone(&client))
            .build()
            .expect("span exporter");
        // Room for every span of the row, so none is dropped (and so not counted).
        let batch = BatchSpanProcessor::builder(spans)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_max_queue_size(65_536)
                    .build(),
            )
            .build();
        let tracer = SdkTracerProvider::builder()
            .with_span_processor(batch)
            .build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer.tracer("rebound"))
            .with_tracked_inactivity(false)
            .with_threads(false)
            .with_location(false)
            .with_target(false)
            .with_level(false)
            .with_filter(tracing_subscriber::filter::Targets::new().with_target(
                rebound_effects::telemetry::names::TRACING_TARGET,
                tracing::Level::INFO,
            ));
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer))
            .expect("one subscriber");
        let metrics = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_endpoint(format!("{endpoint}/v1/metrics"))
            .with_shared_http_client(client)
            .build()
            .expect("metric exporter");
        let meter = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(metrics).build())
            .build();
        opentelemetry::global::set_meter_provider(meter.clone());
        Export { tracer, meter }
    }

    /// An OTLP/HTTP receiver on loopback, in the parent process (so its work is not the
    /// row's): reads each request and answers 200. Returns its port.
    pub fn receiver() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
                    let mut writer = stream;
                    loop {
                        let mut length = 0usize;
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        loop {
                            line.clear();
                            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                                return;
                            }
                            let header = line.trim_end().to_ascii_lowercase();
                            if header.is_empty() {
                                break;
                            }
                            if let Some(v) = header.strip_prefix("content-length:") {
                                length = v.trim().parse().unwrap_or(0);
                            }
                        }
                        let mut body = vec![0; length];
                        if reader.read_exact(&mut body).is_err()
                            || writer
                                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                                .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        port
    }
}
