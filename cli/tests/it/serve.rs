//! `rebound serve` as a user's agent meets it: the process started as a person starts it,
//! requests sent over loopback HTTP, its log read from stderr once it is stopped.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr, Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_rebound");

/// A running `rebound serve`, killed when dropped.
struct Serve {
    child: Child,
    url: String,
}

impl Serve {
    /// Starts `rebound serve --port 0 ARGS…` and reads the address it prints.
    fn start(args: &[&str]) -> Serve {
        let mut child = Command::new(BIN)
            .args(["serve", "--port", "0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("rebound serve starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut line)
            .expect("reads the address");
        let url = line.trim().to_owned();
        assert!(url.starts_with("http://127.0.0.1:"), "printed {url:?}");
        Serve { child, url }
    }

    /// POSTs `body` to `path` with `headers`; returns the status and the body.
    fn post(&self, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
        let client = reqwest::blocking::Client::new();
        let mut request = client
            .post(format!("{}{path}", self.url))
            .header("content-type", "application/json")
            .body(body.to_owned());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().expect("the server answers");
        let status = response.status().as_u16();
        (status, response.text().unwrap_or_default())
    }

    /// Stops the server and returns what it wrote on stderr.
    fn log(mut self) -> String {
        let _ = self.child.kill();
        let mut stderr: ChildStderr = self.child.stderr.take().expect("piped stderr");
        let mut log = String::new();
        let _ = stderr.read_to_string(&mut log);
        let _ = self.child.wait();
        log
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The headers of an Anthropic request with the key `key`.
fn anthropic(key: &str) -> Vec<(&str, &str)> {
    vec![("x-api-key", key), ("anthropic-version", "2023-06-01")]
}

/// An Anthropic request body whose first user message is `text`.
fn opening(text: &str) -> String {
    serde_json::json!({"model": "m", "max_tokens": 64,
                       "messages": [{"role": "user", "content": text}]})
    .to_string()
}

#[test]
fn log_requests_prints_each_requests_headers_with_secrets_masked_and_its_body_up_to_the_bound() {
    let serve = Serve::start(&["--log-requests", "--log-body-bytes", "40"]);
    let key = "sk-ant-secret-key-0123456789";
    let body = opening("Please fix the failing test in src/parse.rs");
    let mut headers = anthropic(key);
    headers.extend([
        ("authorization", "Bearer sk-bearer-secret-42"),
        ("x-goog-api-key", "goog-secret-42"),
        ("cookie", "session=cookie-secret-42"),
        ("x-portkey-api-key", "portkey-secret-42"),
        ("x-trace", "visible-value"),
    ]);
    let (status, _) = serve.post("/v1/messages", &headers, &body);
    assert_eq!(status, 200);
    // A request refused on its head: its body is never read.
    let (status, _) = serve.post("/v1/nowhere", &[], "{}");
    assert_eq!(status, 404);
    let log = serve.log();

    for secret in [
        key,
        "sk-bearer-secret-42",
        "goog-secret-42",
        "cookie-secret-42",
        "portkey-secret-42",
    ] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
    let lines: Vec<&str> = log.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("#0 ") && l.contains("POST /v1/messages"))
        .unwrap_or_else(|| panic!("no log line for the request:\n{log}"));
    let details: Vec<&str> = lines[at + 1..]
        .iter()
        .take_while(|l| l.starts_with("    "))
        .map(|l| l.trim_start())
        .collect();
    for header in [
        "x-api-key: <redacted>",
        "authorization: <redacted>",
        "x-goog-api-key: <redacted>",
        "cookie: <redacted>",
        "x-portkey-api-key: <redacted>",
        "anthropic-version: 2023-06-01",
        "content-type: application/json",
        "x-trace: visible-value",
    ] {
        assert!(details.contains(&header), "{header:?} in {details:#?}");
    }
    let size = format!("body: {} bytes, the first 40 shown", body.len());
    assert!(details.contains(&size.as_str()), "{size:?} in {details:#?}");
    assert!(
        details.contains(&&body[..40]),
        "the body's head in {details:#?}"
    );
    assert!(!log.contains(&body[40..]), "past the bound:\n{log}");

    let refused = lines
        .iter()
        .position(|l| l.starts_with("#1 ") && l.contains("rejected 404"))
        .unwrap_or_else(|| panic!("no log line for the refused request:\n{log}"));
    assert!(
        lines[refused + 1..]
            .iter()
            .take_while(|l| l.starts_with("    "))
            .any(|l| l.trim_start() == "body: not read"),
        "{log}"
    );
}

#[test]
fn without_log_requests_the_log_is_one_line_per_request() {
    let serve = Serve::start(&[]);
    let (status, _) = serve.post("/v1/messages", &anthropic("k"), &opening("hi"));
    assert_eq!(status, 200);
    let log = serve.log();
    let request_lines: Vec<&str> = log.lines().filter(|l| l.starts_with('#')).collect();
    assert_eq!(request_lines.len(), 1, "{log}");
    assert!(!log.contains("x-api-key"), "{log}");
    assert!(!log.lines().any(|l| l.starts_with("    ")), "{log}");
}

#[test]
fn serve_help_says_what_each_field_of_the_log_line_means() {
    let out = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .expect("rebound runs");
    let help = String::from_utf8_lossy(&out.stdout);
    for field in [
        "The request log (stderr)",
        "the request's place in the log",
        "since the server started",
        "rejected STATUS: why",
        "(req_fake_...) the request id",
        "With --log-requests",
        "<redacted>",
    ] {
        assert!(help.contains(field), "{field:?} in:\n{help}");
    }
}

#[test]
fn each_conversation_meets_the_scenarios_faults_unless_the_script_is_shared() {
    let statuses = |args: &[&str]| {
        let serve = Serve::start(args);
        let statuses: Vec<u16> = ["Fix the parser.", "Write the docs.", "Add a test."]
            .iter()
            .map(|text| {
                serve
                    .post("/v1/messages", &anthropic("k"), &opening(text))
                    .0
            })
            .collect();
        (statuses, serve.log())
    };
    // blip: two 529s before the first answer.
    let (each, log) = statuses(&["--scenario", "blip"]);
    assert_eq!(each, [529, 529, 529], "{log}");
    assert!(log.contains(" conversation 2 at 0ms -> fault"), "{log}");
    let (shared, log) = statuses(&["--scenario", "blip", "--shared-script"]);
    assert_eq!(shared, [529, 529, 200], "{log}");
}

/// The story a run's `--events json` tells: each retry's kind, each stream reset and
/// compaction, each tool call started and each result (ok or error), and the end.
fn story(stdout: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|e| {
            Some(match e["type"].as_str()? {
                "provider_retry" => format!("retry {}", e["kind"].as_str()?),
                "stream_reset" => "stream reset".to_owned(),
                "compaction" => "compaction".to_owned(),
                "tool_start" => format!("call {}", e["name"].as_str()?),
                "tool_result" if e["is_error"] == true => "result error".to_owned(),
                "tool_result" => "result ok".to_owned(),
                "done" => format!("done after {} turns", e["turns"]),
                "error" => format!("failed: {}", e["message"]),
                _ => return None,
            })
        })
        .collect()
}

/// `rebound demo --provider PROVIDER`, and an agent (`rebound run`, with the built-in file
/// tools: `read` but no `bash` or `edit`) against `rebound serve --scenario demo`, in that
/// wire format: each tells the demo's whole story.
fn the_demo_tells_its_whole_story(provider: &str) {
    let out = Command::new(BIN)
        .args(["demo", "--events", "json", "--provider", provider])
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .output()
        .expect("rebound demo runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{provider}: {stderr}");
    assert_eq!(
        story(&out.stdout),
        [
            "retry unavailable",
            "call read",
            "result error",
            "retry rate_limited",
            "call bash",
            "result ok",
            "stream reset",
            "retry stream_malformed",
            "call read",
            "result ok",
            "retry context_overflow",
            "compaction",
            "call edit",
            "result ok",
            "done after 5 turns",
        ],
        "rebound demo --provider {provider}"
    );

    let serve = Serve::start(&["--scenario", "demo"]);
    let root = tempfile::tempdir().expect("a temporary folder");
    std::fs::create_dir(root.path().join("src")).expect("src");
    std::fs::write(
        root.path().join("src/parse.rs"),
        "fn parse(input: &str) -> Ast { todo!() }\n",
    )
    .expect("src/parse.rs");
    let base_url = match provider {
        "anthropic" => serve.url.clone(),
        "gemini" => format!("{}/v1beta", serve.url),
        "bedrock" => serve.url.clone(),
        _ => format!("{}/v1", serve.url),
    };
    let out = Command::new(BIN)
        .args(["run", "Fix the failing test.", "--events", "json"])
        .args([
            "--provider",
            provider,
            "--base-url",
            &base_url,
            "--model",
            "m",
        ])
        .arg("--tools-root")
        .arg(root.path())
        .env("ANTHROPIC_API_KEY", "sk-ant-demo")
        .env("OPENAI_API_KEY", "sk-demo")
        .env("GEMINI_API_KEY", "gm-demo-key")
        .env("AWS_BEARER_TOKEN_BEDROCK", "bedrock-api-key-demo")
        .stdin(Stdio::null())
        .output()
        .expect("rebound run runs");
    let log = serve.log();
    assert_eq!(out.status.code(), Some(0), "{provider}: {log}");
    assert_eq!(
        story(&out.stdout),
        [
            "retry unavailable",
            "call read",
            "result error", // src/parser.rs is not there
            "retry rate_limited",
            "result error", // the agent has no `bash`
            "stream reset",
            "retry stream_malformed",
            "call read",
            "result ok",
            "retry context_overflow",
            "compaction",
            "result error", // nor `edit`
            "done after 5 turns",
        ],
        "rebound run --provider {provider} against rebound serve --scenario demo:\n{log}"
    );
}

#[test]
fn the_demo_tells_its_whole_story_on_anthropic_messages() {
    the_demo_tells_its_whole_story("anthropic");
}

#[test]
fn the_demo_tells_its_whole_story_on_openai_chat_completions() {
    the_demo_tells_its_whole_story("openai");
}

#[test]
fn the_demo_tells_its_whole_story_on_the_openai_responses_api() {
    the_demo_tells_its_whole_story("openai-responses");
}

#[test]
fn the_demo_tells_its_whole_story_on_gemini() {
    the_demo_tells_its_whole_story("gemini");
}

#[test]
fn the_demo_tells_its_whole_story_on_bedrock() {
    the_demo_tells_its_whole_story("bedrock");
}
