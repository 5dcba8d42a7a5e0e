//! Session transcripts on a real filesystem: the line format, appends, compaction, older
//! forms and their conversion, corrupt files, locking, modes, kills.

use rebound_core::{ContentBlock, Conversation, MediaSource, Message, Role, ToolResultPart};
use rebound_effects::session::{
    decode_session, decode_session_file, encode_session, load_session, message_line, SessionError,
    SessionForm, SessionFormatError, SessionHeader, SessionStore, SESSION_FORMAT, SESSION_VERSION,
};
use serde_json::{json, Value};
use std::fs;
use std::path::{Path, PathBuf};

use crate::table;

fn rich_conversation() -> Conversation {
    Conversation::from(vec![
        Message::user_text("read src/main.rs and fix it"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "look first".into(),
                    signature: "sig".into(),
                    owner: None,
                },
                ContentBlock::text("Reading it."),
                ContentBlock::tool_use("toolu_1", "read", json!({"path": "src/main.rs"})),
                ContentBlock::tool_use("toolu_2", "read", json!({"path": "src/foo.rs"})),
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::tool_result(
                    "toolu_1",
                    vec![
                        ToolResultPart::text("fn main() {}"),
                        ToolResultPart::Image {
                            source: MediaSource::Base64 {
                                media_type: "image/png".into(),
                                data: "iVBORw0KGgo=".into(),
                            },
                        },
                    ],
                    false,
                ),
                ContentBlock::tool_result(
                    "toolu_2",
                    vec![ToolResultPart::text(
                        "Tool execution failed for `read`: file not found: src/foo.rs",
                    )],
                    true,
                ),
            ],
        },
        Message::assistant_text("Done — ünïcödé and \"quotes\"\nand newlines survive."),
    ])
}

fn session_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("session.jsonl")
}

/// The lines of the file, each parsed as JSON.
fn lines(path: &Path) -> Vec<Value> {
    let text = fs::read_to_string(path).expect("read");
    assert!(text.ends_with('\n'), "the file ends with a complete line");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {l:?}: {e}")))
        .collect()
}

async fn append_all(store: &SessionStore, conversation: &Conversation) {
    for message in conversation.messages() {
        store.append(message).await.expect("append");
    }
}

#[tokio::test]
async fn a_session_is_a_header_line_then_one_line_per_message_and_loads_back_equal() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let (store, empty) = SessionStore::open(&path).await.expect("open");
    assert!(empty.is_empty(), "a missing file opens as a new session");
    assert!(!path.exists(), "opening does not create the file");

    append_all(&store, &rich_conversation()).await;
    drop(store);
    let (_, loaded) = SessionStore::open(&path).await.expect("reopen");
    assert_eq!(loaded, rich_conversation());

    let lines = lines(&path);
    assert_eq!(lines.len(), 1 + rich_conversation().len());
    let header = &lines[0];
    assert_eq!(header["format"], json!(SESSION_FORMAT));
    assert_eq!(header["version"], json!(SESSION_VERSION));
    assert!(
        header["created"].as_str().is_some_and(|c| c.ends_with('Z')),
        "{header}"
    );
    assert!(header["origin"]
        .as_str()
        .is_some_and(|o| o.starts_with("rebound ")));
    for line in &lines[1..] {
        assert_eq!(line["type"], json!("message"));
    }
    assert_eq!(lines[1]["message"]["role"], json!("user"));
    assert_eq!(lines[2]["message"]["content"][2]["type"], json!("tool_use"));
    assert_eq!(lines[3]["message"]["content"][1]["is_error"], json!(true));
    assert!(lines[3]["message"]["content"][0].get("is_error").is_none());
}

#[tokio::test]
async fn an_append_writes_exactly_its_line_however_long_the_session() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let many = Conversation::from(
        (0..2_000)
            .map(|i| Message::user_text(format!("message {i} {}", "x".repeat(200))))
            .collect::<Vec<_>>(),
    );
    fs::write(&path, encode_session(&SessionHeader::now(), &many)).expect("write");
    let (store, loaded) = SessionStore::open(&path).await.expect("open");
    assert_eq!(loaded.len(), 2_000);
    let before = fs::read(&path).expect("read");
    let next = Message::assistant_text("the 2001st");
    store.append(&next).await.expect("append");
    let after = fs::read(&path).expect("read");
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "earlier lines untouched"
    );
    assert_eq!(&after[before.len()..], &message_line(&next)[..]);
    assert_eq!(store.load().await.expect("load").len(), 2_001);
}

#[tokio::test]
async fn a_compaction_is_a_line_holding_the_new_conversation_and_the_history_stays() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let (store, _) = SessionStore::open(&path).await.expect("open");
    append_all(&store, &rich_conversation()).await;
    let compacted = Conversation::from(vec![
        Message::user_text("[summary] fixed src/main.rs"),
        Message::assistant_text("Done."),
    ]);
    store.replace(&compacted).await.expect("replace");
    store
        .append(&Message::user_text("and now?"))
        .await
        .expect("append");

    let mut expected = compacted.clone();
    expected.push(Message::user_text("and now?"));
    assert_eq!(store.load().await.expect("load"), expected);
    let lines = lines(&path);
    assert_eq!(lines.len(), 1 + 4 + 1 + 1);
    let marker = &lines[5];
    assert_eq!(marker["type"], json!("compaction"));
    assert_eq!(marker["replaces"], json!(4));
    assert_eq!(
        marker["messages"][0]["content"][0]["text"],
        json!("[summary] fixed src/main.rs")
    );
    // The full history is still in the file, for people to read.
    let history = decode_session(&fs::read(&path).expect("read")[..]).expect("decode");
    assert_eq!(history, expected);
    assert!(fs::read_to_string(&path)
        .expect("read")
        .contains("look first"));
}

fn legacy_messages() -> (Value, Conversation) {
    let expected = Conversation::from(vec![
        Message::user_text("hi"),
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::tool_use("t1", "list", json!({}))],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result(
                "t1",
                vec![ToolResultPart::text("a.txt")],
                false,
            )],
        },
    ]);
    let messages = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "list", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]}
    ]);
    (messages, expected)
}

#[tokio::test]
async fn older_forms_load_and_the_next_write_converts_them_keeping_a_backup() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (messages, expected) = legacy_messages();
    for (name, file) in [
        ("bare-array.json", messages.clone()),
        ("no-version.json", json!({ "messages": messages })),
        (
            "v1.json",
            json!({"version": 1, "messages": messages, "title": "later field"}),
        ),
    ] {
        let path = dir.path().join(name);
        let old = serde_json::to_vec_pretty(&file).expect("json");
        fs::write(&path, &old).expect("write");
        let (store, loaded) = SessionStore::open(&path).await.expect(name);
        assert_eq!(loaded, expected, "{name}");
        assert_eq!(
            fs::read(&path).expect("read"),
            old,
            "{name}: opening writes nothing"
        );

        store
            .append(&Message::assistant_text("converted"))
            .await
            .expect("append");
        let lines = lines(&path);
        assert_eq!(lines[0]["format"], json!(SESSION_FORMAT), "{name}");
        let backup_name = format!("{name}.v1.bak");
        assert_eq!(lines[0]["converted_from"], json!(backup_name), "{name}");
        assert_eq!(lines.len(), 1 + 3 + 1, "{name}");
        assert_eq!(
            fs::read(dir.path().join(&backup_name)).expect("backup"),
            old,
            "{name}: the old file is kept, byte for byte"
        );
        let mut after = expected.clone();
        after.push(Message::assistant_text("converted"));
        assert_eq!(store.load().await.expect("load"), after, "{name}");
        // Later writes append.
        let before = fs::read(&path).expect("read").len();
        store
            .append(&Message::user_text("more"))
            .await
            .expect("append");
        assert_eq!(
            fs::read(&path).expect("read").len(),
            before + message_line(&Message::user_text("more")).len()
        );
    }
}

#[tokio::test]
async fn converting_again_after_a_crash_keeps_every_backup() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("s.json");
    let (messages, _) = legacy_messages();
    let old = serde_json::to_vec(&json!({"version": 1, "messages": messages})).expect("json");
    fs::write(&path, &old).expect("write");
    // A conversion killed after it linked the backup, before it renamed the transcript in.
    fs::write(dir.path().join("s.json.v1.bak"), b"an earlier backup").expect("write");
    let (store, _) = SessionStore::open(&path).await.expect("open");
    store
        .append(&Message::user_text("x"))
        .await
        .expect("append");
    assert_eq!(
        fs::read(dir.path().join("s.json.v1.bak")).expect("read"),
        b"an earlier backup"
    );
    assert_eq!(
        fs::read(dir.path().join("s.json.v1.1.bak")).expect("read"),
        old
    );
    assert_eq!(lines(&path)[0]["converted_from"], json!("s.json.v1.1.bak"));
}

#[tokio::test]
async fn a_compaction_converts_an_old_file_too() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("s.json");
    let (messages, expected) = legacy_messages();
    fs::write(&path, serde_json::to_vec(&messages).expect("json")).expect("write");
    let (store, _) = SessionStore::open(&path).await.expect("open");
    let compacted = Conversation::from(vec![Message::user_text("summary")]);
    store.replace(&compacted).await.expect("replace");
    assert_eq!(store.load().await.expect("load"), compacted);
    let lines = lines(&path);
    assert_eq!(lines.len(), 1 + expected.len() + 1);
    assert_eq!(lines[4]["replaces"], json!(3));
}

fn assert_untouched(path: &Path, before: &[u8]) {
    assert_eq!(
        fs::read(path).expect("read"),
        before,
        "the file was changed"
    );
}

#[tokio::test]
async fn a_corrupt_whole_file_is_reported_with_its_path_and_left_untouched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let torn = br#"{"version": 1, "messages": [{"role": "user", "content": "hel"#;
    fs::write(&path, torn).expect("write");

    let err = SessionStore::open(&path).await.expect_err("corrupt");
    let SessionError::Corrupt {
        path: reported,
        problem,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(reported, &path);
    assert!(
        matches!(problem, SessionFormatError::Json { line: 1, .. }),
        "{problem:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("session.jsonl") && message.contains("left untouched"),
        "{message}"
    );
    assert_untouched(&path, torn);
}

#[tokio::test]
async fn malformed_messages_and_shapes_are_corrupt_with_what_is_wrong() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cases: [(&str, Value, &str); 6] = [
        (
            "bad-role",
            json!({"version": 1, "messages": [{"role": "user", "content": "ok"}, {"role": "robot", "content": "x"}]}),
            "message 1 (0-based) is malformed",
        ),
        (
            "bad-block",
            json!([{"role": "user", "content": [{"type": "hologram"}]}]),
            "message 0 (0-based) is malformed",
        ),
        ("string", json!("hello"), "found a string"),
        (
            "no-messages",
            json!({"version": 1}),
            "an object without `messages`",
        ),
        (
            "messages-object",
            json!({"messages": {}}),
            "`messages` as an object",
        ),
        (
            "version-string",
            json!({"version": "1", "messages": []}),
            "`version` must be a positive integer",
        ),
    ];
    for (name, content, expect) in cases {
        let path = dir.path().join(name);
        let bytes = serde_json::to_vec(&content).expect("json");
        fs::write(&path, &bytes).expect("write");
        let err = load_session(&path).await.expect_err(name);
        assert!(
            matches!(err, SessionError::Corrupt { .. }),
            "{name}: {err:?}"
        );
        assert!(err.to_string().contains(expect), "{name}: {err}");
        assert_untouched(&path, &bytes);
    }
    let empty = dir.path().join("empty");
    fs::write(&empty, "").expect("write");
    assert!(matches!(
        load_session(&empty).await,
        Err(SessionError::Corrupt { .. })
    ));
}

#[tokio::test]
async fn a_bad_line_before_the_last_is_corrupt_naming_the_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let header = String::from_utf8(encode_session(
        &SessionHeader::now(),
        &Conversation::default(),
    ))
    .expect("utf-8");
    let good = r#"{"type":"message","message":{"role":"user","content":"ok"}}"#;
    let cases = [
        (
            "not-json",
            "{\"type\":\"mess",
            "line 3 is malformed: not valid JSON",
        ),
        (
            "not-object",
            "[1, 2]",
            "line 3 is malformed: expected an object",
        ),
        (
            "no-type",
            r#"{"message":{}}"#,
            "line 3 is malformed: a line without a `type`",
        ),
        (
            "unknown-type",
            r#"{"type":"hologram"}"#,
            "unknown line type `hologram`",
        ),
        (
            "bad-message",
            r#"{"type":"message","message":{"role":"robot","content":"x"}}"#,
            "line 3 is malformed: bad message",
        ),
        (
            "bad-compaction",
            r#"{"type":"compaction","messages":{}}"#,
            "without a `messages` array",
        ),
    ];
    for (name, bad, expect) in cases {
        let path = dir.path().join(name);
        let bytes = format!("{header}{good}\n{bad}\n{good}\n");
        fs::write(&path, &bytes).expect("write");
        let err = SessionStore::open(&path).await.expect_err(name);
        assert!(
            matches!(
                &err,
                SessionError::Corrupt {
                    problem: SessionFormatError::Line { line: 3, .. },
                    ..
                }
            ),
            "{name}: {err:?}"
        );
        assert!(err.to_string().contains(expect), "{name}: {err}");
        assert_untouched(&path, bytes.as_bytes());
    }
    // A bad header (an unknown format) is line 1.
    let path = dir.path().join("format");
    fs::write(&path, "{\"format\":\"other\",\"version\":2}\n").expect("write");
    let err = load_session(&path).await.expect_err("format");
    assert!(err.to_string().contains("line 1 is malformed"), "{err}");
}

#[tokio::test]
async fn a_newer_version_is_a_typed_error_and_the_file_is_untouched() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, bytes) in [
        (
            "whole",
            &br#"{"version": 7, "messages": [{"role": "user", "content": "from the future"}]}"#[..],
        ),
        (
            "transcript",
            &b"{\"format\":\"rebound-session\",\"version\":3}\n{\"type\":\"hologram\"}\n"[..],
        ),
    ] {
        let path = dir.path().join(name);
        fs::write(&path, bytes).expect("write");
        let err = SessionStore::open(&path).await.expect_err("too new");
        assert!(
            matches!(
                err,
                SessionError::UnsupportedVersion {
                    supported: SESSION_VERSION,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(err.to_string().contains("upgrade rebound"), "{err}");
        assert_untouched(&path, bytes);
    }
}

#[tokio::test]
async fn a_crash_while_creating_leaves_no_session_and_a_stray_temp_file_is_harmless() {
    // What a first write killed midway leaves: no session file, a partial temp file.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let complete = encode_session(&SessionHeader::now(), &rich_conversation());
    fs::write(
        dir.path().join(".session.jsonl.99999.0.tmp"),
        &complete[..complete.len() / 2],
    )
    .expect("write partial temp");

    let (store, loaded) = SessionStore::open(&path).await.expect("opens as new");
    assert!(loaded.is_empty());
    append_all(&store, &rich_conversation()).await;
    assert_eq!(store.load().await.expect("load"), rich_conversation());
}

#[tokio::test]
async fn a_failed_write_reports_the_path_and_keeps_the_previous_lines() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let (store, _) = SessionStore::open(&path).await.expect("open");
    store
        .append(&Message::user_text("first"))
        .await
        .expect("append");
    let before = fs::read(&path).expect("read");

    // A read-only session file: appending fails. Root ignores permissions, so the test checks
    // the permission is effective before relying on it.
    let mut perms = fs::metadata(&path).expect("meta").permissions();
    perms.set_readonly(true);
    fs::set_permissions(&path, perms.clone()).expect("chmod");
    let privileged = fs::OpenOptions::new().append(true).open(&path).is_ok();
    if !privileged {
        let (store, _) = {
            drop(store);
            SessionStore::open(&path).await.expect("reopen")
        };
        let err = store
            .append(&Message::assistant_text("second"))
            .await
            .expect_err("read-only file");
        assert!(matches!(err, SessionError::Write { .. }), "{err:?}");
        assert!(err.to_string().contains("session.jsonl"), "{err}");
        assert_untouched(&path, &before);
    }

    // A folder that does not exist: opening fails (it cannot take the lock), with the path.
    let err = SessionStore::open(dir.path().join("no/such/dir/s.jsonl"))
        .await
        .expect_err("no folder");
    assert!(matches!(err, SessionError::Lock { .. }), "{err:?}");
    assert!(err.to_string().contains("no/such/dir/s.jsonl"), "{err}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_new_session_file_is_private_and_an_existing_files_mode_is_kept() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let mode = |p: &Path| fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    let path = session_path(&dir);
    let (store, _) = SessionStore::open(&path).await.expect("open");
    store
        .append(&Message::user_text("hi"))
        .await
        .expect("append");
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&dir.path().join("session.jsonl.lock")), 0o600);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).expect("chmod");
    store
        .append(&Message::user_text("again"))
        .await
        .expect("append");
    assert_eq!(mode(&path), 0o640);

    // Converting an old file keeps its mode, in the transcript and the backup.
    let old = dir.path().join("old.json");
    fs::write(&old, r#"{"version":1,"messages":[]}"#).expect("write");
    fs::set_permissions(&old, fs::Permissions::from_mode(0o640)).expect("chmod");
    let (store, _) = SessionStore::open(&old).await.expect("open");
    store
        .append(&Message::user_text("hi"))
        .await
        .expect("append");
    assert_eq!(mode(&old), 0o640);
    assert_eq!(mode(&dir.path().join("old.json.v1.bak")), 0o640);
}

#[test]
fn decoding_is_a_pure_function_of_the_bytes() {
    let bytes = encode_session(&SessionHeader::now(), &rich_conversation());
    assert!(bytes.ends_with(b"\n"));
    let decoded = decode_session_file(&bytes).expect("decodes");
    assert_eq!(decoded.conversation, rich_conversation());
    assert_eq!(decoded.complete_len, bytes.len());
    assert!(matches!(decoded.form, SessionForm::Transcript(_)));
    assert!(matches!(
        decode_session(b"\xff\xfe"),
        Err(SessionFormatError::Json { .. })
    ));
    let deep = "[".repeat(10_000);
    assert!(
        decode_session(deep.as_bytes()).is_err(),
        "deep nesting is an error, not a crash"
    );
    let mut deep_line = bytes.clone();
    deep_line.extend_from_slice(format!("{}\n{}\n", "[".repeat(10_000), "{}").as_bytes());
    assert!(decode_session(&deep_line).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_appends_through_clones_are_all_recorded_in_the_order_they_came() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let (store, _) = SessionStore::open(&path).await.expect("open");
    let clone = store.clone();
    let m: Vec<Message> = (0..4)
        .map(|i| Message::user_text(format!("m{i}")))
        .collect();
    let (a, b, c, d) = tokio::join!(
        store.append(&m[0]),
        clone.append(&m[1]),
        store.append(&m[2]),
        clone.append(&m[3]),
    );
    for r in [a, b, c, d] {
        r.expect("append");
    }
    assert_eq!(store.load().await.expect("load"), Conversation::from(m));
}

#[tokio::test]
async fn a_session_store_persists_for_the_runner() {
    use rebound_effects::runner::{Persist, PersistError};
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let (store, _) = SessionStore::open(&path).await.expect("open");
    let persist: Box<dyn Persist> = Box::new(store.clone());
    for message in rich_conversation().messages() {
        persist.append(message).await.expect("append");
    }
    assert_eq!(store.load().await.expect("load"), rich_conversation());
    let compacted = Conversation::from(vec![Message::user_text("summary")]);
    persist.replace(&compacted).await.expect("replace");
    assert_eq!(store.load().await.expect("load"), compacted);

    // A failing store reports the file: here, a folder has taken the file's place.
    drop(persist);
    drop(store);
    let other = dir.path().join("other.jsonl");
    fs::write(&other, encode_session(&SessionHeader::now(), &compacted)).expect("write");
    let (broken, _) = SessionStore::open(&other).await.expect("open");
    fs::remove_file(&other).expect("rm");
    fs::create_dir(&other).expect("mkdir");
    let persist: Box<dyn Persist> = Box::new(broken);
    let err = persist
        .append(&Message::user_text("x"))
        .await
        .expect_err("not a file");
    assert!(err.to_string().contains("other.jsonl"), "{err}");
    assert!(matches!(err, PersistError::Session(_)), "{err:?}");
}

/// How many messages the kill test's child has appended to `conversation` in all: a
/// compaction leaves `summary of N`, standing for the first N.
fn appended_in_all(conversation: &Conversation) -> usize {
    let summarized = conversation
        .messages()
        .first()
        .and_then(|m| m.text().strip_prefix("summary of ")?.parse::<usize>().ok());
    match summarized {
        Some(n) => n + conversation.len() - 1,
        None => conversation.len(),
    }
}

/// Set in the child process of the kill test: the session file to append to, forever.
const CHILD_ENV: &str = "REBOUND_TEST_SESSION_APPENDER";

/// Not a test on its own: when started by the kill test, appends messages to the session
/// named in [`CHILD_ENV`] until it is killed, compacting now and then, and printing
/// [`appended_in_all`] after each append returned (so after it was fsynced).
#[tokio::test]
async fn session_appender_child_process() {
    use std::io::Write;
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let (store, conversation) = SessionStore::open(&path).await.expect("open");
    let mut n = appended_in_all(&conversation);
    let mut out = std::io::stdout().lock();
    writeln!(out, "open").expect("stdout");
    out.flush().expect("flush");
    loop {
        n += 1;
        let message = if n.is_multiple_of(10) {
            Message::assistant_text("y".repeat(64 * 1024))
        } else {
            Message::user_text(format!("message {n} {}", "x".repeat(n % 7 * 300)))
        };
        store.append(&message).await.expect("append");
        if n.is_multiple_of(25) {
            let kept = Conversation::from(vec![Message::user_text(format!("summary of {n}"))]);
            store.replace(&kept).await.expect("replace");
        }
        writeln!(out, "{n}").expect("stdout");
        out.flush().expect("flush");
    }
}

/// [`session_appender_child_process`]'s name in this test binary: its module's path without the
/// crate's name, then its own.
fn child_test_name() -> String {
    let module = module_path!().split_once("::").map_or("", |(_, path)| path);
    format!("{module}::session_appender_child_process")
}

/// How many times the kill test kills an appending process.
const KILLS: u64 = 200;

#[cfg(unix)]
#[test]
fn a_process_killed_while_appending_loses_no_acknowledged_message() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::Duration;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let exe = std::env::current_exe().expect("test binary");
    let seed = fastrand::u64(..);
    println!("kill test seed {seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut acknowledged_total = 0;
    for round in 0..KILLS {
        let mut child = Command::new(&exe)
            .args([&child_test_name(), "--exact", "--nocapture"])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        let stdout = child.stdout.take().expect("stdout");
        let (lines_tx, lines_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut acknowledged = Vec::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(n) = line.trim().parse::<usize>() {
                    acknowledged.push(n);
                }
                let _ = lines_tx.send(());
            }
            acknowledged
        });
        // One round in ten kills the child while it starts and opens the session; the others
        // once it has opened it, while it appends.
        if round % 10 != 0 {
            lines_rx
                .recv_timeout(Duration::from_secs(20))
                .expect("the child opens the session");
        }
        std::thread::sleep(Duration::from_micros(rng.u64(0..20_000)));
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("reap");
        assert!(
            status.code().is_none(),
            "round {round}: the child ended on its own"
        );
        let acknowledged = reader.join().expect("reader");
        acknowledged_total += acknowledged.len();

        let loaded = match fs::read(&path) {
            Ok(bytes) => decode_session(&bytes)
                .unwrap_or_else(|e| panic!("round {round} (seed {seed}): corrupt session: {e}")),
            Err(_) => {
                assert!(
                    acknowledged.is_empty(),
                    "round {round}: acknowledged but no file"
                );
                continue;
            }
        };
        if let Some(&last) = acknowledged.last() {
            let kept = appended_in_all(&loaded);
            assert!(
                kept >= last,
                "round {round} (seed {seed}): {last} messages acknowledged, {kept} kept"
            );
        }
    }
    assert!(
        acknowledged_total > 0,
        "no append ever completed (seed {seed})"
    );
    // After all the kills, every line of the file is complete JSON once one more append
    // repaired a torn tail, if any.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (store, before) = SessionStore::open(&path).await.expect("open");
        store
            .append(&Message::user_text("after the kills"))
            .await
            .expect("append");
        assert_eq!(store.load().await.expect("load").len(), before.len() + 1);
    });
    let _ = lines(&path);
    println!("{KILLS} kills, {acknowledged_total} acknowledged appends");
}

/// A tool input `depth` levels deep: `{"a":{"a":…{}…}}`.
fn nested(depth: usize) -> Value {
    (1..depth).fold(json!({}), |inner, _| json!({ "a": inner }))
}

fn calling(input: Value) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![ContentBlock::tool_use("toolu_deep", "read", input)],
    }
}

#[tokio::test]
async fn a_line_that_would_not_load_again_is_refused_and_nothing_stored_is_lost() {
    let mut cases = 0;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let (store, _) = SessionStore::open(&path).await.expect("open");
    store
        .append(&Message::user_text("first"))
        .await
        .expect("append");
    let before = fs::read(&path).expect("read");
    // 124 levels is valid JSON a response may carry, but the line holding it nests past
    // serde_json's limit of 128, so it could not be read back; 200 levels neither.
    for depth in [124, 200] {
        cases += 1;
        let err = store
            .append(&calling(nested(depth)))
            .await
            .expect_err("an unloadable line");
        assert!(matches!(err, SessionError::Unloadable { .. }), "{err}");
        assert!(err.to_string().contains("nothing was written"), "{err}");
        assert_eq!(fs::read(&path).expect("read"), before);
    }
    // A compaction line holding such a message.
    cases += 1;
    let deep = Conversation::from(vec![Message::user_text("hi"), calling(nested(124))]);
    let err = store.replace(&deep).await.expect_err("an unloadable line");
    assert!(matches!(err, SessionError::Unloadable { .. }), "{err}");
    assert_eq!(fs::read(&path).expect("read"), before);
    // The store goes on, and every line it wrote loads: 64 levels (the most a tool input
    // may nest) fit.
    cases += 1;
    store
        .append(&calling(nested(64)))
        .await
        .expect("64 levels fit");
    store
        .append(&Message::user_text("last"))
        .await
        .expect("append");
    let loaded = load_session(&path).await.expect("loads").expect("exists");
    assert_eq!(loaded.len(), 3);
    assert_eq!(loaded.messages()[2].text(), "last");
    table::check("session-deep-lines", cases);
}

#[tokio::test]
async fn a_whole_line_nested_too_deep_is_refused_never_cut_off() {
    let mut cases = 0;
    for last in [true, false] {
        cases += 1;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = session_path(&dir);
        // What an older rebound could write: a complete line nested past the limit.
        let mut bytes = encode_session(
            &SessionHeader::now(),
            &Conversation::from(vec![Message::user_text("first")]),
        );
        bytes.extend_from_slice(&message_line(&calling(nested(124))));
        if !last {
            bytes.extend_from_slice(&message_line(&Message::user_text("after")));
        }
        fs::write(&path, &bytes).expect("write");
        let err = load_session(&path).await.expect_err("refused, not cut off");
        assert!(
            matches!(
                &err,
                SessionError::Corrupt {
                    problem: SessionFormatError::Line { line: 3, .. },
                    ..
                }
            ),
            "{err}"
        );
        let err = SessionStore::open(&path).await.expect_err("not opened");
        assert!(matches!(err, SessionError::Corrupt { .. }), "{err}");
        assert_untouched(&path, &bytes);
        if last {
            // A line cut short by a crash is still a torn line, ignored.
            cases += 1;
            fs::write(&path, &bytes[..bytes.len() - 40]).expect("write");
            let loaded = load_session(&path).await.expect("loads").expect("exists");
            assert_eq!(loaded.len(), 1);
        }
    }
    table::check("session-deep-lines-on-disk", cases);
}
