//! Hostile session files and hostile use of them: lines torn by a crash, and a second
//! process opening a session another one is running.

use crate::server;
use crate::table;

use rebound_core::{Conversation, Message};
use rebound_effects::session::{
    compaction_line, decode_session, encode_session, message_line, SessionError, SessionHeader,
    SessionStore,
};
use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn three_messages() -> Conversation {
    Conversation::from(vec![
        Message::user_text("one"),
        Message::assistant_text("two"),
        Message::user_text("three"),
    ])
}

/// Every line of the file parses as JSON and ends with a newline.
fn assert_valid_json_lines(path: &Path, case: &str) {
    let text = fs::read_to_string(path).expect("read");
    assert!(
        text.ends_with('\n'),
        "{case}: the file ends with a complete line"
    );
    for (n, line) in text.lines().enumerate() {
        serde_json::from_str::<serde_json::Value>(line)
            .unwrap_or_else(|e| panic!("{case}: line {} is not JSON ({e}): {line:?}", n + 1));
    }
}

#[tokio::test]
async fn a_torn_last_line_is_ignored_on_load_and_cut_off_by_the_next_append() {
    let dir = tempfile::tempdir().expect("temp dir");
    let complete = encode_session(&SessionHeader::now(), &three_messages());
    let next = message_line(&Message::assistant_text("four, the lost one"));
    let compaction = compaction_line(3, &Conversation::from(vec![Message::user_text("sum")]));
    let header_only = encode_session(&SessionHeader::now(), &Conversation::default());

    // (name, complete lines, torn tail)
    let cases: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
        ("one byte", complete.clone(), next[..1].to_vec()),
        (
            "half a line",
            complete.clone(),
            next[..next.len() / 2].to_vec(),
        ),
        (
            "all but the closing brace",
            complete.clone(),
            next[..next.len() - 2].to_vec(),
        ),
        ("zeros after a power loss", complete.clone(), vec![0; 4096]),
        ("zeros and a newline", complete.clone(), {
            let mut z = vec![0; 300];
            z.push(b'\n');
            z
        }),
        (
            "a torn line then blank lines",
            complete.clone(),
            [&next[..20], b"\n\n  \n"].concat(),
        ),
        (
            "half a compaction line",
            complete.clone(),
            compaction[..compaction.len() / 2].to_vec(),
        ),
        (
            "a torn first line after the header",
            header_only.clone(),
            next[..next.len() / 3].to_vec(),
        ),
        (
            "a torn line that is valid UTF-8 only in part",
            complete.clone(),
            "{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"é"
                .as_bytes()
                .split_last()
                .map(|(_, rest)| rest.to_vec())
                .unwrap_or_default(),
        ),
    ];
    let mut tried = 0;
    for (case, lines, tail) in &cases {
        let path = dir.path().join(format!("{tried}.jsonl"));
        let on_disk = [&lines[..], &tail[..]].concat();
        fs::write(&path, &on_disk).expect("write");
        let expected = decode_session(lines).expect("the complete lines decode");

        let (store, loaded) = SessionStore::open(&path)
            .await
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        assert_eq!(
            loaded, expected,
            "{case}: the complete lines, and only them"
        );
        assert_eq!(
            fs::read(&path).expect("read"),
            on_disk,
            "{case}: opening writes nothing"
        );

        let added = Message::user_text(format!("after {case}"));
        store.append(&added).await.expect("append");
        let after = fs::read(&path).expect("read");
        assert_eq!(
            &after[..lines.len()],
            &lines[..],
            "{case}: complete lines kept"
        );
        assert_eq!(&after[lines.len()..], &message_line(&added)[..], "{case}");
        assert_valid_json_lines(&path, case);
        let mut expected = expected;
        expected.push(added);
        assert_eq!(store.load().await.expect("load"), expected, "{case}");
        tried += 1;
    }

    // A complete last line that only lost its newline is kept, and the newline is added.
    let path = dir.path().join("no-newline.jsonl");
    fs::write(&path, &complete[..complete.len() - 1]).expect("write");
    let (store, loaded) = SessionStore::open(&path).await.expect("open");
    assert_eq!(
        loaded,
        three_messages(),
        "the complete last message is kept"
    );
    store
        .append(&Message::user_text("four"))
        .await
        .expect("append");
    assert_valid_json_lines(&path, "no newline");
    assert_eq!(store.load().await.expect("load").len(), 4);
    tried += 1;

    table::check("session-torn-lines", tried);
}

const BIN: &str = env!("CARGO_BIN_EXE_rebound");

fn rebound_run(session: &Path, url: &str) -> Command {
    let mut c = Command::new(BIN);
    c.args(["run", "hello", "--model", "m", "--base-url", url])
        .arg("--session")
        .arg(session)
        .args(["--max-attempts", "1"])
        .env("ANTHROPIC_API_KEY", "sk-test-concurrent")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// Waits until a run holds the session: its first message is on disk, which it writes
/// only after taking the lock (the file alone may exist a moment before).
fn wait_until_held(path: &Path) {
    let start = Instant::now();
    while !fs::read_to_string(path).is_ok_and(|t| t.contains("\"hello\"")) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no run took the session"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_opener_of_a_running_session_is_refused_and_the_lock_dies_with_its_holder() {
    // A provider that answers only once the gate opens, so a run stays in progress for as
    // long as a case needs, however slow the machine.
    let gate = Arc::new(AtomicBool::new(false));
    let held = Arc::clone(&gate);
    let server = server::serve(move |mut sock, _| {
        let held = Arc::clone(&held);
        async move {
            while held.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            if !server::write(&mut sock, server::SSE_HEAD).await {
                return;
            }
            server::write(&mut sock, &server::anthropic_stream("Hello back.")).await;
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut tried = 0;

    // 1. A second store in the same process.
    let path = dir.path().join("in-process.jsonl");
    let (first, _) = SessionStore::open(&path).await.expect("open");
    let err = SessionStore::open(&path).await.expect_err("second opener");
    assert!(matches!(err, SessionError::Locked { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("in-process.jsonl") && message.contains("in use"),
        "{message}"
    );
    tried += 1;

    // 2. The CLI, while this process holds the session: exit 2, nothing written.
    first
        .append(&Message::user_text("held"))
        .await
        .expect("append");
    let before = fs::read(&path).expect("read");
    let out = rebound_run(&path, &server.url()).output().expect("runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("in use"), "{stderr}");
    assert_eq!(fs::read(&path).expect("read"), before);
    tried += 1;

    // 3. Once the holder is gone, the session opens.
    drop(first);
    let (_, resumed) = SessionStore::open(&path).await.expect("reopen");
    assert_eq!(resumed.len(), 1);
    drop(resumed);
    tried += 1;

    // 4. Two CLI runs of one session: the second is refused, the first finishes cleanly.
    let path = dir.path().join("two-runs.jsonl");
    gate.store(true, Ordering::SeqCst);
    let first = rebound_run(&path, &server.url())
        .spawn()
        .expect("first run");
    wait_until_held(&path);
    let second = rebound_run(&path, &server.url())
        .output()
        .expect("second run");
    gate.store(false, Ordering::SeqCst);
    assert_eq!(second.status.code(), Some(2), "{second:?}");
    let first = first.wait_with_output().expect("first run ends");
    assert_eq!(first.status.code(), Some(0), "{first:?}");
    let conversation = decode_session(&fs::read(&path).expect("read")).expect("loads");
    let texts: Vec<String> = conversation.messages().iter().map(|m| m.text()).collect();
    assert_eq!(
        texts,
        ["hello", "Hello back."],
        "only the first run's lines"
    );
    assert_valid_json_lines(&path, "two runs");
    tried += 1;

    // 5. A run killed with -9 holds no lock: the next run resumes.
    let path = dir.path().join("killed.jsonl");
    gate.store(true, Ordering::SeqCst);
    let mut killed = rebound_run(&path, &server.url()).spawn().expect("run");
    wait_until_held(&path);
    killed.kill().expect("SIGKILL");
    killed.wait().expect("reaped");
    gate.store(false, Ordering::SeqCst);
    let out = rebound_run(&path, &server.url()).output().expect("resumes");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    tried += 1;

    table::check("session-concurrent-open", tried);
}
