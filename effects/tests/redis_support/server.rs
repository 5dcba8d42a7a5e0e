//! A real `redis-server` per test, on a free loopback port, in a temporary folder, with no
//! persistence, killed when dropped: each test owns its server, so one can kill and restart
//! it mid-run without touching another test.
//!
//! When `redis-server` is not installed the tests that need it print why and pass as skipped
//! — unless `REBOUND_REQUIRE_REDIS` is set (CI sets it, after installing the Debian package),
//! then a missing server fails them.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    /// More arguments for `redis-server` (a mode: cluster, sentinel).
    extra: Vec<String>,
    /// Started as a Sentinel (from a config file it may rewrite).
    sentinel: bool,
}

/// Whether `redis-server` can be run here.
fn installed() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl RedisServer {
    /// A fresh server, or `None` (after saying why) when none can be run and none is
    /// required. With `REBOUND_REQUIRE_REDIS` set, a missing server is a failure.
    pub fn start(test: &str) -> Option<RedisServer> {
        Self::start_with(test, &[], false)
    }

    /// A fresh Redis Cluster node (cluster mode on, no slots assigned), or `None` as
    /// [`start`](Self::start).
    pub fn start_cluster_node(test: &str) -> Option<RedisServer> {
        Self::start_with(test, &["--cluster-enabled", "yes"], false)
    }

    /// A fresh Sentinel (watching nothing), or `None` as [`start`](Self::start).
    pub fn start_sentinel(test: &str) -> Option<RedisServer> {
        Self::start_with(test, &[], true)
    }

    fn start_with(test: &str, extra: &[&str], sentinel: bool) -> Option<RedisServer> {
        if !installed() {
            if std::env::var_os("REBOUND_REQUIRE_REDIS").is_some() {
                panic!(
                    "{test}: REBOUND_REQUIRE_REDIS is set but redis-server is not installed \
                     (apt-get install -y redis-server)"
                );
            }
            // Straight to stderr, past the test harness's capture: a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: redis-server is not installed (apt-get install -y \
                 redis-server; set REBOUND_REQUIRE_REDIS=1 to make this a failure)"
            );
            return None;
        }
        let dir = tempfile::tempdir().expect("a temporary folder");
        let mut server = RedisServer {
            child: None,
            port: free_port(),
            dir,
            extra: extra.iter().map(|a| (*a).to_owned()).collect(),
            sentinel,
        };
        server.restart();
        Some(server)
    }

    /// The port it listens on (the same after a restart).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/NAME`, a budget on this server.
    pub fn budget_url(&self, name: &str) -> String {
        format!("redis://127.0.0.1:{}/{name}", self.port)
    }

    /// Kills the server at once (SIGKILL: no goodbye to clients), and waits for it to go.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server (again) on the same port, empty, and waits until it answers.
    pub fn restart(&mut self) {
        self.kill();
        let mut command = Command::new("redis-server");
        if self.sentinel {
            let config = self.dir.path().join("sentinel.conf");
            std::fs::write(&config, "").expect("a sentinel config");
            command.arg(config).arg("--sentinel");
        } else {
            command
                .args(["--save", "", "--appendonly", "no"])
                .arg("--cluster-config-file")
                .arg(self.dir.path().join("nodes.conf"));
        }
        let child = command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.answers() {
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer within 10 s",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether it answers `PING`.
    pub fn answers(&self) -> bool {
        let Ok(mut s) = TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 16];
        s.write_all(b"PING\r\n").is_ok()
            && s.read(&mut buf)
                .is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
    }

    /// Runs one command (inline protocol) and returns the raw reply, read whole: a reply
    /// may come in several reads, and a Redis busy with a fleet may take a while to send it
    /// (the read timeout bounds a Redis that never answers, not a slow one).
    pub fn command(&self, line: &str) -> String {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("redis answers");
        let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
        s.write_all(format!("{line}\r\n").as_bytes())
            .expect("redis takes a command");
        let mut reply = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        while resp_end(&reply, 0).is_none() {
            let n = s.read(&mut buf).expect("redis replies");
            assert!(n > 0, "redis closed the connection mid-reply: {reply:?}");
            reply.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&reply).into_owned()
    }
}

/// Where the RESP value starting at `at` ends, if `bytes` holds all of it.
fn resp_end(bytes: &[u8], at: usize) -> Option<usize> {
    let line_end = at + bytes.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let after_line = line_end + 2;
    let number = || {
        std::str::from_utf8(&bytes[at + 1..line_end])
            .ok()?
            .parse::<i64>()
            .ok()
    };
    match bytes.get(at)? {
        b'$' => match number()? {
            len if len < 0 => Some(after_line),
            len => {
                let end = after_line + usize::try_from(len).ok()? + 2;
                (bytes.len() >= end).then_some(end)
            }
        },
        b'*' => {
            let mut end = after_line;
            for _ in 0..number()?.max(0) {
                end = resp_end(bytes, end)?;
            }
            Some(end)
        }
        _ => Some(after_line),
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}
