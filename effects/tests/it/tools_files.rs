//! The built-in file tools on real folders: successes, limits, and every way out of the root.

use rebound_core::{BatchOutcome, CallOutcome, ToolCall, ToolFailure, ToolResultPart};
use rebound_effects::tools::files::{self, ListTool, ReadTool, Root, RootError, WriteTool};
use rebound_effects::tools::ToolSet;
use serde_json::{json, Value};
use std::fs;
use std::path::Path;
use tempfile::TempDir;
use tokio_util::sync::CancellationToken;

/// A workspace root inside a temp dir, with a sibling `outside` folder holding a secret.
struct World {
    _dir: TempDir,
    root: std::path::PathBuf,
    outside: std::path::PathBuf,
    tools: ToolSet,
}

fn world() -> World {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("root");
    let outside = dir.path().join("outside");
    fs::create_dir_all(root.join("src")).expect("mkdir");
    fs::create_dir_all(&outside).expect("mkdir");
    fs::write(root.join("src/main.rs"), "fn main() {}\n").expect("write");
    fs::write(outside.join("secret.txt"), "TOP SECRET").expect("write");
    let tools = ToolSet::builder()
        .tools(files::tools(&root).expect("root"))
        .build()
        .expect("build");
    World {
        _dir: dir,
        root,
        outside,
        tools,
    }
}

async fn invoke(tools: &ToolSet, name: &str, input: Value) -> Result<String, String> {
    let calls = vec![ToolCall {
        id: "c".into(),
        name: name.into(),
        input: input.into(),
    }];
    let outcome = match tools.run_batch(calls, &CancellationToken::new()).await {
        BatchOutcome::PerCall(mut outcomes) => outcomes.remove(0),
        BatchOutcome::WholeBatch(f) => panic!("whole batch failed: {f:?}"),
    };
    match outcome {
        CallOutcome {
            result: Ok(output), ..
        } => match output.parts.as_slice() {
            [ToolResultPart::Text { text }] => Ok(text.clone()),
            parts => panic!("expected one text part: {parts:?}"),
        },
        CallOutcome {
            result: Err(ToolFailure::Model { message }),
            ..
        } => Err(message),
        CallOutcome {
            result: Err(ToolFailure::Host(h)),
            ..
        } => panic!("host failure from a file tool: {h:?}"),
    }
}

fn refused(result: Result<String, String>, expect: &str) -> String {
    match result {
        Ok(text) => panic!("expected a refusal containing {expect:?}, got success: {text}"),
        Err(message) => {
            assert!(message.contains(expect), "{message:?} lacks {expect:?}");
            assert!(!message.contains("TOP SECRET"), "leaked: {message}");
            message
        }
    }
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

// ----- root --------------------------------------------------------------------------------

#[test]
fn a_missing_root_or_a_file_root_is_a_typed_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    assert!(matches!(
        Root::new(dir.path().join("nope")),
        Err(RootError::Unusable { .. })
    ));
    let file = dir.path().join("f");
    fs::write(&file, "x").expect("write");
    assert!(matches!(
        Root::new(&file),
        Err(RootError::NotAFolder { .. })
    ));
}

// ----- read --------------------------------------------------------------------------------

#[tokio::test]
async fn read_returns_the_text_of_a_file() {
    let w = world();
    assert_eq!(
        invoke(&w.tools, "read", json!({"path": "src/main.rs"})).await,
        Ok("fn main() {}\n".to_owned())
    );
    assert_eq!(
        invoke(
            &w.tools,
            "read",
            json!({"path": "./src//main.rs", "offset": 3})
        )
        .await,
        Ok("main() {}\n".to_owned())
    );
}

#[tokio::test]
async fn read_of_a_missing_file_says_which() {
    let w = world();
    refused(
        invoke(&w.tools, "read", json!({"path": "src/foo.rs"})).await,
        "file not found: src/foo.rs",
    );
    refused(
        invoke(&w.tools, "read", json!({"path": "lib/foo.rs"})).await,
        "file not found: lib/foo.rs (there is no folder `lib`)",
    );
    refused(
        invoke(&w.tools, "read", json!({"path": "src"})).await,
        "is a folder, not a file: use `list`",
    );
}

#[tokio::test]
async fn read_truncates_a_huge_file_and_says_where_to_continue() {
    let w = world();
    let big: String = (0..200_000).map(|i| format!("line {i}\n")).collect();
    fs::write(w.root.join("big.txt"), &big).expect("write");
    let first = invoke(&w.tools, "read", json!({"path": "big.txt"}))
        .await
        .expect("read");
    let cap = files::DEFAULT_READ_MAX_BYTES;
    assert!(first.starts_with("line 0\nline 1\n"));
    let note = format!(
        "[truncated: showed bytes 0..{cap} of {}; call `read` with `offset` {cap} to see more]",
        big.len()
    );
    assert!(first.ends_with(&note), "{}", &first[first.len() - 200..]);
    assert_eq!(&first[..cap], &big[..cap]);

    let next = invoke(&w.tools, "read", json!({"path": "big.txt", "offset": cap}))
        .await
        .expect("read on");
    assert!(next.starts_with(&big[cap..cap + 100]));
    refused(
        invoke(
            &w.tools,
            "read",
            json!({"path": "big.txt", "offset": big.len() + 1}),
        )
        .await,
        "past the end",
    );
}

#[tokio::test]
async fn read_never_splits_a_character() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("u.txt"), "aé€😀b").expect("write");
    let tools = ToolSet::builder()
        .tool(ReadTool::new(Root::new(dir.path()).expect("root")).with_max_bytes(4))
        .build()
        .expect("build");
    // "aé" is 3 bytes; the euro sign would be cut at 4.
    let first = invoke(&tools, "read", json!({"path": "u.txt"}))
        .await
        .expect("read");
    assert!(
        first.starts_with("aé\n[truncated: showed bytes 0..3 of 11;"),
        "{first}"
    );
    // An offset inside the euro sign starts at the next whole character.
    let mid = invoke(&tools, "read", json!({"path": "u.txt", "offset": 4}))
        .await
        .expect("read");
    assert_eq!(
        mid,
        "\n[truncated: showed bytes 6..6 of 11; call `read` with `offset` 6 to see more]"
    );
    let end = invoke(&tools, "read", json!({"path": "u.txt", "offset": 6}))
        .await
        .expect("read");
    assert!(end.starts_with("😀"), "{end}");
}

#[tokio::test]
async fn read_refuses_binary_and_non_utf8_files_clearly() {
    let w = world();
    fs::write(w.root.join("image.png"), b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").expect("write");
    fs::write(w.root.join("latin1.txt"), b"caf\xe9 au lait").expect("write");
    refused(
        invoke(&w.tools, "read", json!({"path": "image.png"})).await,
        "looks like a binary file",
    );
    refused(
        invoke(&w.tools, "read", json!({"path": "latin1.txt"})).await,
        "is not UTF-8 text (invalid byte at offset 3)",
    );
}

#[tokio::test]
async fn read_of_an_empty_file_says_so() {
    let w = world();
    fs::write(w.root.join("empty"), "").expect("write");
    assert_eq!(
        invoke(&w.tools, "read", json!({"path": "empty"})).await,
        Ok("(`empty` is empty)".to_owned())
    );
}

// ----- ways out of the root ----------------------------------------------------------------

#[tokio::test]
async fn paths_with_dot_dot_are_refused_by_every_tool() {
    let w = world();
    for path in [
        "../outside/secret.txt",
        "src/../../outside/secret.txt",
        "..",
    ] {
        refused(
            invoke(&w.tools, "read", json!({ "path": path })).await,
            "`..` is not allowed",
        );
        refused(
            invoke(&w.tools, "list", json!({ "path": path })).await,
            "`..` is not allowed",
        );
        refused(
            invoke(&w.tools, "write", json!({"path": path, "content": "x"})).await,
            "`..` is not allowed",
        );
    }
    assert_eq!(
        fs::read_to_string(w.outside.join("secret.txt")).expect("read"),
        "TOP SECRET"
    );
}

#[tokio::test]
async fn absolute_paths_are_refused_even_inside_the_root() {
    let w = world();
    let secret = w.outside.join("secret.txt");
    let inside = w.root.join("src/main.rs");
    for path in [secret.to_string_lossy(), inside.to_string_lossy()] {
        refused(
            invoke(&w.tools, "read", json!({ "path": path })).await,
            "absolute paths are not allowed",
        );
    }
    refused(
        invoke(&w.tools, "list", json!({"path": "/"})).await,
        "absolute paths are not allowed",
    );
    let target = w.outside.join("new.txt");
    refused(
        invoke(
            &w.tools,
            "write",
            json!({"path": target.to_string_lossy(), "content": "x"}),
        )
        .await,
        "absolute paths are not allowed",
    );
    assert!(!target.exists());
}

#[cfg(unix)]
#[tokio::test]
async fn symlinks_out_of_the_root_are_refused_not_followed() {
    let w = world();
    symlink(&w.outside.join("secret.txt"), &w.root.join("innocent.txt"));
    symlink(&w.outside, &w.root.join("docs"));
    symlink(Path::new("../../outside"), &w.root.join("src/rel"));
    for path in ["innocent.txt", "docs/secret.txt", "src/rel/secret.txt"] {
        refused(
            invoke(&w.tools, "read", json!({ "path": path })).await,
            "symbolic link to a place outside the root folder",
        );
    }
    for path in ["docs", "src/rel"] {
        refused(
            invoke(&w.tools, "list", json!({ "path": path })).await,
            "symbolic link to a place outside the root folder",
        );
    }
}

#[cfg(unix)]
#[tokio::test]
async fn symlinks_inside_the_root_are_followed_for_reading() {
    let w = world();
    symlink(Path::new("src/main.rs"), &w.root.join("main-link.rs"));
    symlink(Path::new("src"), &w.root.join("code"));
    assert_eq!(
        invoke(&w.tools, "read", json!({"path": "main-link.rs"})).await,
        Ok("fn main() {}\n".to_owned())
    );
    assert_eq!(
        invoke(&w.tools, "read", json!({"path": "code/main.rs"})).await,
        Ok("fn main() {}\n".to_owned())
    );
    symlink(Path::new("nowhere"), &w.root.join("broken"));
    refused(
        invoke(&w.tools, "read", json!({"path": "broken"})).await,
        "broken symbolic link",
    );
}

#[cfg(unix)]
#[tokio::test]
async fn write_refuses_a_symlinked_parent_and_a_symlinked_target() {
    let w = world();
    symlink(&w.outside, &w.root.join("out"));
    symlink(&w.outside.join("secret.txt"), &w.root.join("target.txt"));
    // Even a link that stays inside the root is not written through.
    symlink(Path::new("src"), &w.root.join("code"));
    for (path, shown) in [
        ("out/new.txt", "`out`"),
        ("out/deeper/new.txt", "`out`"),
        ("target.txt", "`target.txt`"),
        ("code/new.rs", "`code`"),
    ] {
        let message = refused(
            invoke(&w.tools, "write", json!({"path": path, "content": "pwned"})).await,
            "is a symbolic link",
        );
        assert!(message.contains(shown), "{message}");
    }
    assert_eq!(
        fs::read_to_string(w.outside.join("secret.txt")).expect("read"),
        "TOP SECRET"
    );
    assert!(!w.outside.join("new.txt").exists());
    assert!(!w.outside.join("deeper").exists());
    assert!(!w.root.join("src/new.rs").exists());
}

// ----- write -------------------------------------------------------------------------------

#[tokio::test]
async fn write_creates_parent_folders_and_replaces_files() {
    let w = world();
    assert_eq!(
        invoke(
            &w.tools,
            "write",
            json!({"path": "notes/2026/todo.md", "content": "- ship it\n"})
        )
        .await,
        Ok("wrote 10 bytes to `notes/2026/todo.md` (new file)".to_owned())
    );
    assert_eq!(
        fs::read_to_string(w.root.join("notes/2026/todo.md")).expect("read"),
        "- ship it\n"
    );
    assert_eq!(
        invoke(
            &w.tools,
            "write",
            json!({"path": "src/main.rs", "content": "fn main() { run() }\n"})
        )
        .await,
        Ok("wrote 20 bytes to `src/main.rs` (replaced its previous content)".to_owned())
    );
    assert_eq!(
        invoke(&w.tools, "read", json!({"path": "src/main.rs"})).await,
        Ok("fn main() { run() }\n".to_owned())
    );
}

#[tokio::test]
async fn write_refuses_folders_files_in_the_way_and_oversized_content() {
    let w = world();
    refused(
        invoke(&w.tools, "write", json!({"path": "src", "content": "x"})).await,
        "is a folder",
    );
    refused(
        invoke(&w.tools, "write", json!({"path": "src/", "content": "x"})).await,
        "names a folder",
    );
    refused(
        invoke(
            &w.tools,
            "write",
            json!({"path": "src/main.rs/x", "content": "x"}),
        )
        .await,
        "`src/main.rs` is not a folder",
    );
    refused(
        invoke(&w.tools, "write", json!({"path": ".", "content": "x"})).await,
        "names the root folder",
    );
    let small = ToolSet::builder()
        .tool(WriteTool::new(Root::new(&w.root).expect("root")).with_max_bytes(8))
        .build()
        .expect("build");
    refused(
        invoke(
            &small,
            "write",
            json!({"path": "big", "content": "123456789"}),
        )
        .await,
        "the content is 9 bytes; `write` accepts at most 8 bytes",
    );
    assert!(!w.root.join("big").exists());
}

#[tokio::test]
async fn write_inputs_of_the_wrong_type_are_refused_by_the_schema() {
    let w = world();
    refused(
        invoke(&w.tools, "write", json!({"path": "a.txt", "content": 42})).await,
        "not of type",
    );
    refused(
        invoke(&w.tools, "write", json!({"path": "a.txt"})).await,
        "\"content\" is a required property",
    );
    refused(
        invoke(
            &w.tools,
            "write",
            json!({"path": "a.txt", "content": "x", "mode": "0777"}),
        )
        .await,
        "mode",
    );
    assert!(!w.root.join("a.txt").exists());
}

// ----- list --------------------------------------------------------------------------------

#[tokio::test]
async fn list_shows_sorted_entries_with_kinds_and_sizes() {
    let w = world();
    fs::write(w.root.join("b.txt"), "12345").expect("write");
    fs::create_dir(w.root.join("a-dir")).expect("mkdir");
    #[cfg(unix)]
    symlink(&w.outside, &w.root.join("c-link"));
    let listing = invoke(&w.tools, "list", json!({})).await.expect("list");
    let mut expected = vec!["a-dir/", "b.txt (5 bytes)"];
    if cfg!(unix) {
        expected.push("c-link@ (symbolic link)");
    }
    expected.push("src/");
    assert_eq!(listing, expected.join("\n"));
    assert_eq!(
        invoke(&w.tools, "list", json!({"path": "src"})).await,
        Ok("main.rs (13 bytes)".to_owned())
    );
    assert_eq!(
        invoke(&w.tools, "list", json!({"path": "a-dir"})).await,
        Ok("(`a-dir` is an empty folder)".to_owned())
    );
    refused(
        invoke(&w.tools, "list", json!({"path": "src/main.rs"})).await,
        "is a file, not a folder: use `read`",
    );
    refused(
        invoke(&w.tools, "list", json!({"path": "nope"})).await,
        "folder not found: nope",
    );
}

#[tokio::test]
async fn list_caps_the_number_of_entries() {
    let w = world();
    let many = w.root.join("many");
    fs::create_dir(&many).expect("mkdir");
    for i in 0..25 {
        fs::write(many.join(format!("f{i:02}")), "").expect("write");
    }
    let tools = ToolSet::builder()
        .tool(ListTool::new(Root::new(&w.root).expect("root")).with_max_entries(10))
        .build()
        .expect("build");
    let listing = invoke(&tools, "list", json!({"path": "many"}))
        .await
        .expect("list");
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), 11);
    assert_eq!(lines[0], "f00 (0 bytes)");
    assert_eq!(lines[9], "f09 (0 bytes)");
    assert_eq!(lines[10], "[15 more entries not shown]");
}

#[cfg(unix)]
#[tokio::test]
async fn read_refuses_a_fifo_instead_of_blocking_on_it() {
    let w = world();
    let status = std::process::Command::new("mkfifo")
        .arg(w.root.join("pipe"))
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        eprintln!("mkfifo unavailable; skipping");
        return;
    }
    refused(
        invoke(&w.tools, "read", json!({"path": "pipe"})).await,
        "is not a regular file",
    );
}
