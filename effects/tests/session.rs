//! Session files on a real filesystem: round trips, older forms, corrupt files, atomic saves.

use rebound_core::{ContentBlock, Conversation, MediaSource, Message, Role, ToolResultPart};
use rebound_effects::session::{
    decode_session, encode_session, load_session, SessionError, SessionFormatError, SessionStore,
    SESSION_VERSION,
};
use serde_json::{json, Value};
use std::fs;
use std::path::Path;

fn rich_conversation() -> Conversation {
    Conversation::from(vec![
        Message::user_text("read src/main.rs and fix it"),
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "look first".into(),
                    signature: "sig".into(),
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
        Message::assistant_text("Done — ünïcödé and \"quotes\" survive."),
    ])
}

fn session_path(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("session.json")
}

#[tokio::test]
async fn a_saved_session_loads_back_equal_in_the_documented_shape() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let (store, empty) = SessionStore::open(&path).await.expect("open");
    assert!(empty.is_empty(), "a missing file opens as a new session");
    assert!(!path.exists(), "opening does not create the file");

    let conversation = rich_conversation();
    store.save(&conversation).await.expect("save");
    let (_, loaded) = SessionStore::open(&path).await.expect("reopen");
    assert_eq!(loaded, conversation);

    let on_disk: Value = serde_json::from_slice(&fs::read(&path).expect("read")).expect("json");
    assert_eq!(on_disk["version"], json!(1));
    assert_eq!(on_disk["messages"][0]["role"], json!("user"));
    assert_eq!(
        on_disk["messages"][1]["content"][2]["type"],
        json!("tool_use")
    );
    assert_eq!(
        on_disk["messages"][2]["content"][1]["is_error"],
        json!(true)
    );
    assert_eq!(
        on_disk["messages"][2]["content"][0]["content"][1]["type"],
        json!("image")
    );
    assert!(on_disk["messages"][2]["content"][0]
        .get("is_error")
        .is_none());
}

#[tokio::test]
async fn every_save_replaces_the_whole_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let (store, mut conversation) = SessionStore::open(&path).await.expect("open");
    for i in 0..20 {
        conversation.push(Message::user_text(format!("message {i}")));
        store.save(&conversation).await.expect("save");
        assert_eq!(store.load().await.expect("load"), conversation);
    }
    let names: Vec<_> = fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["session.json"], "no temp files are left behind");
}

#[tokio::test]
async fn older_forms_load() {
    let dir = tempfile::tempdir().expect("temp dir");
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
    for (name, file) in [
        ("bare-array.json", messages.clone()),
        ("no-version.json", json!({ "messages": messages })),
        (
            "v1-extra-fields.json",
            json!({"version": 1, "messages": messages, "title": "later field"}),
        ),
    ] {
        let path = dir.path().join(name);
        fs::write(&path, serde_json::to_vec(&file).expect("json")).expect("write");
        let (store, loaded) = SessionStore::open(&path).await.expect(name);
        assert_eq!(loaded, expected, "{name}");
        // The next save writes the current form.
        store.save(&loaded).await.expect("save");
        let upgraded: Value =
            serde_json::from_slice(&fs::read(&path).expect("read")).expect("json");
        assert_eq!(upgraded["version"], json!(SESSION_VERSION), "{name}");
    }
}

fn assert_untouched(path: &Path, before: &[u8]) {
    assert_eq!(
        fs::read(path).expect("read"),
        before,
        "the file was changed"
    );
}

#[tokio::test]
async fn a_corrupt_file_is_reported_with_its_path_and_left_untouched() {
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
        message.contains("session.json") && message.contains("left untouched"),
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
async fn a_newer_version_is_a_typed_error_and_the_file_is_untouched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let bytes = br#"{"version": 7, "messages": [{"role": "user", "content": "from the future"}]}"#;
    fs::write(&path, bytes).expect("write");
    let err = SessionStore::open(&path).await.expect_err("too new");
    assert!(
        matches!(
            err,
            SessionError::UnsupportedVersion {
                found: 7,
                supported: 1,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("upgrade rebound"), "{err}");
    assert_untouched(&path, bytes);
}

#[tokio::test]
async fn a_crash_before_the_rename_leaves_the_old_session_loadable() {
    // What a save killed midway leaves: the complete old file and a partial temp file.
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let (store, mut conversation) = SessionStore::open(&path).await.expect("open");
    conversation.push(Message::user_text("kept"));
    store.save(&conversation).await.expect("save");
    let complete = encode_session(&rich_conversation());
    fs::write(
        dir.path().join(".session.json.99999.0.tmp"),
        &complete[..complete.len() / 2],
    )
    .expect("write partial temp");

    let (store, loaded) = SessionStore::open(&path).await.expect("old file loads");
    assert_eq!(loaded, conversation);
    store
        .save(&rich_conversation())
        .await
        .expect("saving still works");
    assert_eq!(store.load().await.expect("load"), rich_conversation());
}

#[tokio::test]
async fn a_failed_save_reports_the_path_and_keeps_the_previous_content() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let (store, mut conversation) = SessionStore::open(&path).await.expect("open");
    conversation.push(Message::user_text("first"));
    store.save(&conversation).await.expect("save");
    let before = fs::read(&path).expect("read");

    // A read-only folder: creating the temp file fails. Root ignores permissions, so the
    // test checks the permission is effective before relying on it.
    let mut perms = fs::metadata(dir.path()).expect("meta").permissions();
    perms.set_readonly(true);
    fs::set_permissions(dir.path(), perms.clone()).expect("chmod");
    let privileged = fs::write(dir.path().join("probe"), "x").is_ok();
    if !privileged {
        conversation.push(Message::assistant_text("second"));
        let err = store
            .save(&conversation)
            .await
            .expect_err("read-only folder");
        assert!(matches!(err, SessionError::Write { .. }), "{err:?}");
        assert!(err.to_string().contains("session.json"), "{err}");
        assert_untouched(&path, &before);
    }
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    fs::set_permissions(dir.path(), perms).expect("chmod back");

    // A folder that does not exist fails the same way, with the path.
    let missing = SessionStore::open(dir.path().join("no/such/dir/s.json"))
        .await
        .expect("open of a missing file works")
        .0;
    let err = missing.save(&conversation).await.expect_err("no folder");
    assert!(matches!(err, SessionError::Write { .. }), "{err:?}");
    assert!(err.to_string().contains("no/such/dir/s.json"), "{err}");
}

#[cfg(unix)]
#[tokio::test]
async fn a_new_session_file_is_private_and_an_existing_files_mode_is_kept() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let (store, conversation) = SessionStore::open(&path).await.expect("open");
    store.save(&conversation).await.expect("save");
    let mode = |p: &Path| fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).expect("chmod");
    store.save(&rich_conversation()).await.expect("save");
    assert_eq!(mode(&path), 0o640);
}

#[test]
fn decoding_is_a_pure_function_of_the_bytes() {
    let bytes = encode_session(&rich_conversation());
    assert!(bytes.ends_with(b"\n"));
    assert_eq!(decode_session(&bytes), Ok(rich_conversation()));
    assert!(matches!(
        decode_session(b"\xff\xfe"),
        Err(SessionFormatError::Json { .. })
    ));
    let deep = "[".repeat(10_000);
    assert!(
        decode_session(deep.as_bytes()).is_err(),
        "deep nesting is an error, not a crash"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_saves_through_one_store_end_with_the_last_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let (store, _) = SessionStore::open(&path).await.expect("open");
    let versions: Vec<Conversation> = (1..=4)
        .map(|n| {
            Conversation::from(
                (0..n)
                    .map(|i| Message::user_text(format!("m{i}")))
                    .collect::<Vec<_>>(),
            )
        })
        .collect();
    let clone = store.clone();
    let (a, b, c, d) = tokio::join!(
        store.save(&versions[0]),
        clone.save(&versions[1]),
        store.save(&versions[2]),
        clone.save(&versions[3]),
    );
    for r in [a, b, c, d] {
        r.expect("save");
    }
    assert_eq!(store.load().await.expect("load"), versions[3]);
}

/// Set in the child process of the kill test: the session file to save to, forever.
const CHILD_ENV: &str = "REBOUND_TEST_SESSION_SAVER";

/// Not a test on its own: when started by the kill test, saves ever-growing conversations to
/// the file named in [`CHILD_ENV`] until it is killed.
#[tokio::test]
async fn session_saver_child_process() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let (store, mut conversation) = SessionStore::open(&path).await.expect("open");
    loop {
        conversation.push(Message::user_text("x".repeat(conversation.len() * 100)));
        store.save(&conversation).await.expect("save");
    }
}

#[cfg(unix)]
#[test]
fn a_process_killed_while_saving_leaves_a_complete_session() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let exe = std::env::current_exe().expect("test binary");
    let mut last_len = 0;
    for round in 0..8u64 {
        let mut child = Command::new(&exe)
            .args(["session_saver_child_process", "--exact", "--nocapture"])
            .env(CHILD_ENV, &path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn child");
        // Wait until the child has saved something this round, then kill it mid-stream.
        let start = Instant::now();
        let before = fs::metadata(&path)
            .map(|m| m.modified().ok())
            .ok()
            .flatten();
        while start.elapsed() < Duration::from_secs(20) {
            let now = fs::metadata(&path)
                .map(|m| m.modified().ok())
                .ok()
                .flatten();
            if now.is_some() && now != before {
                break;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(5 + round * 7));
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");

        let loaded = decode_session(&fs::read(&path).expect("the file exists"))
            .unwrap_or_else(|e| panic!("round {round}: torn session file: {e}"));
        assert!(
            loaded.len() >= last_len,
            "round {round}: the session went backwards"
        );
        last_len = loaded.len();
    }
    assert!(last_len > 0);
}

#[tokio::test]
async fn a_session_store_persists_for_the_runner() {
    use rebound_effects::runner::Persist;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = session_path(&dir);
    let (store, _) = SessionStore::open(&path).await.expect("open");
    let persist: Box<dyn Persist> = Box::new(store.clone());
    persist.save(&rich_conversation()).await.expect("save");
    assert_eq!(store.load().await.expect("load"), rich_conversation());

    let broken: Box<dyn Persist> = Box::new(
        SessionStore::open(dir.path().join("missing/s.json"))
            .await
            .expect("open")
            .0,
    );
    let err = broken
        .save(&rich_conversation())
        .await
        .expect_err("no folder");
    assert!(err.contains("missing/s.json"), "{err}");
}
