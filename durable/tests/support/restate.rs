//! A real Restate server per test (the official binary, from npm), on free loopback ports, in
//! a temporary folder, killed when dropped; it can be killed (SIGKILL) and started again on
//! the same ports and data mid-run.
//!
//! The binary comes from `REBOUND_RESTATE_SERVER` when set, else `install-restate.sh`
//! installs it into target/restate on first use. When it cannot be had (no npm, no registry)
//! the tests that need it print why and pass as skipped, unless `REBOUND_REQUIRE_RESTATE`
//! is set (CI sets it): then they fail.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `restate-server`.
pub struct RestateServer {
    binary: PathBuf,
    child: Option<Child>,
    dir: tempfile::TempDir,
    node_port: u16,
    admin_port: u16,
    ingress_port: u16,
}

/// A free loopback port (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn binary(test: &str) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("REBOUND_RESTATE_SERVER") {
        return Some(PathBuf::from(path));
    }
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../durable/tests/support/install-restate.sh"
    );
    let out = Command::new("bash")
        .arg(script)
        .stderr(Stdio::inherit())
        .output();
    match out {
        Ok(out) if out.status.success() => {
            let path = String::from_utf8_lossy(&out.stdout);
            let path = path.lines().last().unwrap_or_default().trim().to_owned();
            Some(PathBuf::from(path))
        }
        other => {
            let why = format!("install-restate.sh failed: {other:?}");
            if std::env::var_os("REBOUND_REQUIRE_RESTATE").is_some() {
                panic!("{test}: REBOUND_REQUIRE_RESTATE is set but {why}");
            }
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: no restate-server ({why}; set REBOUND_REQUIRE_RESTATE=1 to make \
                 this a failure)"
            );
            None
        }
    }
}

impl RestateServer {
    /// A fresh server, or `None` (after saying why) when none can be had and none is required.
    pub fn start(test: &str) -> Option<RestateServer> {
        let binary = binary(test)?;
        let mut server = RestateServer {
            binary,
            child: None,
            dir: tempfile::tempdir().expect("a temporary folder"),
            node_port: free_port(),
            admin_port: free_port(),
            ingress_port: free_port(),
        };
        server.restart();
        Some(server)
    }

    /// The admin API, e.g. `http://127.0.0.1:9070`.
    pub fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin_port)
    }

    /// The ingress, e.g. `http://127.0.0.1:8080`.
    pub fn ingress_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ingress_port)
    }

    /// Kills the server at once (SIGKILL) and waits for it to go.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server (again) on the same ports and data, and waits until its admin API
    /// and ingress answer.
    pub fn restart(&mut self) {
        self.kill();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("server.log"))
            .expect("a log file");
        let child = Command::new(&self.binary)
            .args(["--no-logo", "--node-name", "rebound-test", "--base-dir"])
            .arg(self.dir.path().join("data"))
            .env("RESTATE_LISTEN_MODE", "tcp")
            .env(
                "RESTATE_BIND_ADDRESS",
                format!("127.0.0.1:{}", self.node_port),
            )
            .env(
                "RESTATE_ADVERTISED_ADDRESS",
                format!("http://127.0.0.1:{}/", self.node_port),
            )
            .env(
                "RESTATE_ADMIN__BIND_ADDRESS",
                format!("127.0.0.1:{}", self.admin_port),
            )
            .env(
                "RESTATE_INGRESS__BIND_ADDRESS",
                format!("127.0.0.1:{}", self.ingress_port),
            )
            .env("RESTATE_DISABLE_TELEMETRY", "true")
            .env("RESTATE_LOG_DISABLE_ANSI_CODES", "true")
            .env("RESTATE_DEFAULT_NUM_PARTITIONS", "2")
            .env("RESTATE_ROCKSDB_TOTAL_MEMORY_SIZE", "256MB")
            // A crashed endpoint is tried again soon (the default backs off to a minute).
            .env("RESTATE_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL", "100ms")
            .env("RESTATE_DEFAULT_RETRY_POLICY__MAX_INTERVAL", "1s")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("restate-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !(get_ok(self.admin_port, "/health") && get_ok(self.ingress_port, "/restate/health"))
        {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("restate-server exited ({status}): {}", self.log_tail());
                }
            }
            assert!(
                Instant::now() < deadline,
                "restate-server did not answer within 60 s: {}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The end of the server's log, for a failure message.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
        let start = log.len().saturating_sub(3_000);
        log.get(start..).unwrap_or_default().to_owned()
    }
}

impl Drop for RestateServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether `body` is the ingress's answer for a run that failed: `{"code", "message"}`
/// whose message is a `RunFailure` in JSON.
pub fn is_run_failure(body: &str) -> bool {
    run_failure(body).is_some()
}

/// The `RunFailure` (as JSON) of a failed run's answer, if `body` is one.
pub fn run_failure(body: &str) -> Option<serde_json::Value> {
    let envelope: serde_json::Value = serde_json::from_str(body).ok()?;
    let failure: serde_json::Value = serde_json::from_str(envelope["message"].as_str()?).ok()?;
    failure.get("kind").is_some().then_some(failure)
}

/// Whether `GET path` on the loopback `port` answers 200.
fn get_ok(port: u16, path: &str) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    let mut head = [0u8; 12];
    s.write_all(request.as_bytes()).is_ok()
        && s.read(&mut head)
            .is_ok_and(|n| head[..n].starts_with(b"HTTP/1.1 200"))
}

/// The ingress and admin calls a test makes, as a user would with curl.
pub struct Client {
    http: reqwest::Client,
    ingress: String,
    admin: String,
}

impl Client {
    pub fn new(server: &RestateServer) -> Client {
        Client {
            http: reqwest::Client::new(),
            ingress: server.ingress_url(),
            admin: server.admin_url(),
        }
    }

    /// Starts `run` on the agent `key` without waiting; returns the invocation id.
    pub async fn send_run(&self, key: &str, message: &str) -> String {
        let body = serde_json::json!({ "message": message }).to_string();
        let response = self
            .http
            .post(format!("{}/Agent/{key}/run/send", self.ingress))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("the ingress answers");
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        assert!(status.is_success(), "send: {status} {text}");
        let value: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        value["invocationId"]
            .as_str()
            .expect("an invocation id")
            .to_owned()
    }

    /// Waits for the invocation's end (re-attaching when the server went away meanwhile);
    /// returns its status and body.
    pub async fn attach(&self, invocation: &str, within: Duration) -> (u16, String) {
        let deadline = Instant::now() + within;
        loop {
            let attempt = self
                .http
                .get(format!(
                    "{}/restate/invocation/{invocation}/attach",
                    self.ingress
                ))
                .timeout(deadline.saturating_duration_since(Instant::now()))
                .send()
                .await;
            if let Ok(response) = attempt {
                let status = response.status().as_u16();
                if let Ok(text) = response.text().await {
                    // 5xx from an ingress still starting; anything else is the answer, and
                    // so is a run's failure (its message is a `RunFailure`).
                    if status < 500 || is_run_failure(&text) {
                        return (status, text);
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "invocation {invocation} did not end within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Cancels the invocation (`PATCH /invocations/{id}/cancel` on the admin API).
    pub async fn cancel(&self, invocation: &str) {
        let response = self
            .http
            .patch(format!("{}/invocations/{invocation}/cancel", self.admin))
            .send()
            .await
            .expect("the admin API answers");
        assert!(
            response.status().is_success(),
            "cancel: {}",
            response.status()
        );
    }

    /// Calls a handler and waits for its answer (status, body).
    pub async fn call(&self, path: &str, body: Option<&str>) -> (u16, String) {
        let mut request = self.http.post(format!("{}/{path}", self.ingress));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        let response = request.send().await.expect("the ingress answers");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap_or_default())
    }

    /// Rows of an SQL query on the admin API's introspection tables (`sys_journal`, …).
    pub async fn query(&self, sql: &str) -> Vec<serde_json::Value> {
        let response = self
            .http
            .post(format!("{}/query", self.admin))
            .header("content-type", "application/json")
            .header("accept", "application/json")
            .body(serde_json::json!({ "query": sql }).to_string())
            .send()
            .await
            .expect("the admin API answers");
        let text = response.text().await.unwrap_or_default();
        let value: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        value["rows"].as_array().cloned().unwrap_or_default()
    }
}
