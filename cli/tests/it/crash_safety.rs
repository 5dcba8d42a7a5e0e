//! Crash safety: `kill -9` the CLI at random points of runs with `--session`, in a loop.
//!
//! A slow provider on loopback drips its answers (a few tool calls, then text), so kills land
//! everywhere: before the first append, mid-stream, between a tool call and its result, in the
//! middle of an append, while an old whole-file session is converted to a transcript. After
//! every kill the session file must load (a torn last line is ignored) and keep every message
//! the previous run left, unchanged; the next run resumes from it. A last, undisturbed run
//! must finish with every tool call answered.

use crate::server;
use crate::table;

use rebound_core::{ContentBlock, Conversation};
use rebound_effects::session::{decode_session, decode_session_file, SessionForm};
use server::{serve, write, SSE_HEAD};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How many runs are killed, one after the other, resuming one session.
const KILLS: usize = 200;
/// How many runs are killed while converting an old whole-file session.
const CONVERSION_KILLS: usize = 40;
/// Tool calls the fake model makes after each user message before it answers in text.
const CALLS_PER_TURN: usize = 3;
/// Pause between streamed events.
const DRIP: Duration = Duration::from_millis(5);

/// Tool results since the last user text message (the model's progress on this turn).
fn results_this_turn(body: &serde_json::Value) -> usize {
    let empty = Vec::new();
    let messages = body["messages"].as_array().unwrap_or(&empty);
    let mut count = 0;
    for message in messages.iter().rev() {
        let blocks = message["content"].as_array().cloned().unwrap_or_default();
        let is_text_turn = message["role"] == "user"
            && (message["content"].is_string() || blocks.iter().any(|b| b["type"] == "text"));
        count += blocks.iter().filter(|b| b["type"] == "tool_result").count();
        if is_text_turn {
            break;
        }
    }
    count
}

fn events(tool_call: Option<usize>) -> Vec<String> {
    let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\n".to_owned();
    let (block, deltas, stop) = match tool_call {
        Some(n) => (
            format!("{{\"type\":\"tool_use\",\"id\":\"toolu_{n}_{}\",\"name\":\"list\",\"input\":{{}}}}", fastrand::u32(..)),
            vec![
                "{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\": \"}".to_owned(),
                "{\"type\":\"input_json_delta\",\"partial_json\":\"\\\".\\\"}\"}".to_owned(),
            ],
            "tool_use",
        ),
        None => (
            "{\"type\":\"text\",\"text\":\"\"}".to_owned(),
            ["All ", "done ", "here."]
                .iter()
                .map(|t| format!("{{\"type\":\"text_delta\",\"text\":\"{t}\"}}"))
                .collect(),
            "end_turn",
        ),
    };
    let mut out = vec![
        start,
        format!("event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{block}}}\n\n"),
    ];
    for d in deltas {
        out.push(format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{d}}}\n\n"
        ));
    }
    out.push(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
            .to_owned(),
    );
    out.push(format!("event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"{stop}\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":2}}}}\n\n"));
    out.push("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".to_owned());
    out
}

fn load(path: &Path) -> Option<Conversation> {
    let bytes = std::fs::read(path).ok()?;
    Some(decode_session(&bytes).unwrap_or_else(|e| {
        panic!(
            "the session is torn or corrupt after a kill: {e}\n{}",
            String::from_utf8_lossy(&bytes)
        )
    }))
}

fn rebound(session: &Path, root: &Path, url: &str, prompt: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rebound"));
    c.args(["run", prompt, "--model", "m", "--base-url", url])
        .arg("--session")
        .arg(session)
        .arg("--tools-root")
        .arg(root)
        .args(["--max-attempts", "3", "--initial-delay-ms", "10"])
        .env("ANTHROPIC_API_KEY", "sk-test-crash")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_at_random_points_never_loses_a_complete_message_and_resume_completes() {
    let server = serve(|mut sock, request| async move {
        let at = request
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(request.len(), |p| p + 4);
        let body: serde_json::Value = serde_json::from_slice(&request[at..]).unwrap_or_default();
        let done = results_this_turn(&body);
        let call = (done < CALLS_PER_TURN).then_some(done);
        if !write(&mut sock, SSE_HEAD).await {
            return;
        }
        for event in events(call) {
            tokio::time::sleep(DRIP).await;
            if !write(&mut sock, event.as_bytes()).await {
                return;
            }
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("root");
    std::fs::create_dir(&root).expect("root");
    std::fs::write(root.join("file.txt"), "x").expect("file");
    let session = dir.path().join("session.json");
    // It starts as an old whole-file session: the first run converts it.
    std::fs::write(
        &session,
        br#"{"version": 1, "messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "Hi."}]}"#,
    )
    .expect("old session");

    let seed = fastrand::u64(..);
    let mut rng = fastrand::Rng::with_seed(seed);
    println!("crash-safety seed {seed}");
    let mut previous = load(&session).expect("the old session loads");
    let mut killed_after_an_append = 0;
    for i in 0..KILLS {
        let before = std::fs::read(&session).expect("the session");
        let mut child = rebound(&session, &root, &server.url(), &format!("turn {i}"))
            .spawn()
            .expect("rebound starts");
        if i % 4 == 3 {
            // Every fourth kill lands after the run wrote something, whatever the machine's
            // speed now (random moments alone may all fall before the first append on a
            // loaded machine): wait for a change, then kill within a few appends.
            let started = Instant::now();
            while std::fs::read(&session).is_ok_and(|b| b == before)
                && started.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_micros(500));
            }
            std::thread::sleep(Duration::from_millis(rng.u64(0..100)));
        } else {
            // A whole run takes about (CALLS_PER_TURN + 1) requests × 7 events × DRIP, plus
            // the start of the process and the tools.
            std::thread::sleep(Duration::from_millis(rng.u64(0..300)));
        }
        let _ = child.kill(); // SIGKILL
        let status = child.wait().expect("wait");
        // Killed, or (when the kill came late) finished cleanly on its own.
        assert!(
            matches!(status.code(), None | Some(0)),
            "run {i} (seed {seed}) failed on its own: {status:?}"
        );
        let conversation = load(&session).expect("the session is never removed");
        conversation
            .check_tool_pairing(true)
            .unwrap_or_else(|e| panic!("run {i} (seed {seed}): bad pairing {e}"));
        let n = conversation.len();
        assert!(
            n >= previous.len()
                && conversation.messages()[..previous.len()] == *previous.messages(),
            "run {i} (seed {seed}): a complete message was lost or changed ({} -> {n})",
            previous.len()
        );
        if n > previous.len() {
            killed_after_an_append += 1;
        }
        previous = conversation;
    }
    assert!(
        killed_after_an_append > 0,
        "no kill landed after an append: the loop tests nothing (seed {seed})"
    );
    let bytes = std::fs::read(&session).expect("read");
    assert!(
        matches!(
            decode_session_file(&bytes).expect("decodes").form,
            SessionForm::Transcript(_)
        ),
        "the old session was converted"
    );
    assert!(
        std::fs::read_to_string(dir.path().join("session.json.v1.bak"))
            .expect("the old session is kept")
            .contains("\"Hi.\""),
    );

    // An undisturbed run resumes and finishes, answering every interrupted call.
    let started = Instant::now();
    let out = rebound(&session, &root, &server.url(), "finish")
        .output()
        .expect("rebound runs");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let conversation = load(&session).expect("a session");
    conversation
        .check_tool_pairing(false)
        .expect("every tool call is answered");
    let last = conversation.messages().last().expect("messages");
    assert_eq!(last.text(), "All done here.");
    let interrupted = conversation
        .messages()
        .iter()
        .flat_map(|m| &m.content)
        .filter(|b| matches!(b, ContentBlock::ToolResult(r) if r.is_error))
        .count();
    println!(
        "{KILLS} kills, {} messages, {interrupted} interrupted calls answered",
        conversation.len()
    );
    let strays = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        })
        .count();
    assert!(strays <= KILLS, "{strays} temporary files");
    table::check("crash-kill-9", KILLS);
}

/// An old whole-file session, as `rebound` wrote it before transcripts.
const OLD_SESSION: &[u8] = br#"{
  "version": 1,
  "messages": [
    {"role": "user", "content": [{"type": "text", "text": "list the files"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "There is file.txt."}]}
  ]
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_converting_an_old_session_keeps_it_whole_or_converted_with_a_backup() {
    let server = serve(|mut sock, _| async move {
        if !write(&mut sock, SSE_HEAD).await {
            return;
        }
        for event in events(None) {
            tokio::time::sleep(DRIP).await;
            if !write(&mut sock, event.as_bytes()).await {
                return;
            }
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let old = decode_session(OLD_SESSION).expect("the old form loads");
    let seed = fastrand::u64(..);
    let mut rng = fastrand::Rng::with_seed(seed);
    println!("conversion seed {seed}");
    // How long a run takes to convert the session on this machine, now: kills land on
    // both sides of that moment.
    let calibration = dir.path().join("calibration.json");
    std::fs::write(&calibration, OLD_SESSION).expect("old session");
    let started = Instant::now();
    let mut child = rebound(&calibration, dir.path(), &server.url(), "go on")
        .spawn()
        .expect("rebound starts");
    while std::fs::read(&calibration).is_ok_and(|b| b == OLD_SESSION) {
        assert!(started.elapsed() < Duration::from_secs(60), "no conversion");
        std::thread::sleep(Duration::from_micros(500));
    }
    let converts_after = started.elapsed().as_micros() as u64;
    let _ = child.kill();
    child.wait().expect("wait");
    println!("a run converts the session {converts_after} µs after it starts");

    let (mut converted, mut untouched) = (0, 0);
    for i in 0..CONVERSION_KILLS {
        let folder = dir.path().join(i.to_string());
        std::fs::create_dir(&folder).expect("folder");
        let session = folder.join("session.json");
        std::fs::write(&session, OLD_SESSION).expect("old session");
        let mut child = rebound(&session, &folder, &server.url(), "go on")
            .spawn()
            .expect("rebound starts");
        if i >= CONVERSION_KILLS / 2 {
            // The second half of the kills lands after the conversion, whatever the machine's
            // speed now (the first half's random moments may all fall before it on a loaded
            // machine): wait for it, then kill within the time one takes, so kills also land
            // while the converted file is being written to.
            let started = Instant::now();
            while std::fs::read(&session).is_ok_and(|b| b == OLD_SESSION)
                && started.elapsed() < Duration::from_secs(60)
            {
                std::thread::sleep(Duration::from_micros(200));
            }
            std::thread::sleep(Duration::from_micros(rng.u64(0..converts_after.max(1))));
        } else {
            std::thread::sleep(Duration::from_micros(rng.u64(0..2 * converts_after)));
        }
        let _ = child.kill(); // SIGKILL
        let status = child.wait().expect("wait");
        assert!(
            matches!(status.code(), None | Some(0)),
            "run {i}: {status:?}"
        );

        let bytes = std::fs::read(&session).expect("the session is never removed");
        let decoded = decode_session_file(&bytes)
            .unwrap_or_else(|e| panic!("run {i} (seed {seed}): corrupt session: {e}"));
        match decoded.form {
            SessionForm::Whole => {
                assert_eq!(
                    bytes, OLD_SESSION,
                    "run {i}: an unconverted session is untouched"
                );
                untouched += 1;
            }
            SessionForm::Transcript(header) => {
                let backup = header.converted_from.expect("the header names the backup");
                assert_eq!(
                    std::fs::read(folder.join(&backup)).expect("backup"),
                    OLD_SESSION,
                    "run {i} (seed {seed}): the backup is the old file, byte for byte"
                );
                assert_eq!(
                    decoded.conversation.messages()[..old.len()],
                    *old.messages(),
                    "run {i} (seed {seed}): the old messages are kept"
                );
                converted += 1;
            }
            other => panic!("run {i}: a form this test does not know: {other:?}"),
        }
    }
    println!("{CONVERSION_KILLS} kills: {converted} converted, {untouched} untouched");
    assert!(
        converted > 0,
        "no kill landed after the conversion (seed {seed})"
    );
    table::check("crash-kill-9-conversion", CONVERSION_KILLS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_between_a_tool_call_and_its_result_resumes_with_an_error_result() {
    let server = serve(|mut sock, _| async move {
        write(&mut sock, SSE_HEAD).await;
        for event in events(None) {
            write(&mut sock, event.as_bytes()).await;
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let session = dir.path().join("session.json");
    // What a kill right after saving the assistant's tool call leaves behind.
    std::fs::write(
        &session,
        br#"{"version":1,"messages":[
            {"role":"user","content":[{"type":"text","text":"list the files"}]},
            {"role":"assistant","content":[
                {"type":"tool_use","id":"toolu_a","name":"list","input":{}},
                {"type":"tool_use","id":"toolu_b","name":"read","input":{"path":"x"}}]}]}"#,
    )
    .expect("session");
    let out = rebound(&session, dir.path(), &server.url(), "go on")
        .output()
        .expect("rebound runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let conversation = load(&session).expect("session");
    conversation
        .check_tool_pairing(false)
        .expect("the interrupted calls are answered");
    let answers: Vec<_> = conversation.messages()[2]
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some((r.tool_use_id.as_str(), r.is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(answers, [("toolu_a", true), ("toolu_b", true)]);
    assert_eq!(conversation.messages()[2].text(), "go on");
    assert_eq!(
        conversation.messages().last().expect("last").text(),
        "All done here."
    );
}
