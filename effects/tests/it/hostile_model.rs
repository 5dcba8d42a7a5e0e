//! A hostile model: tool calls that try to escape the tool root, huge or ill-typed inputs,
//! duplicate ids, hundreds of calls in one message, names that collide with built-ins.
//! Each must become an error result the model can read (or a bounded, clear behaviour),
//! through the real path: `AgentMachine` decides, `ToolSet::run_batch` executes.

use crate::table;

use rebound_core::{
    AgentMachine, AssistantResponse, Command, ContentBlock, Event, MachineConfig, Message, Millis,
    ToolOutput, ToolResultBlock, ToolSpec,
};
use rebound_effects::tools::{files, FnTool, ToolSet, ToolSetError};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A root with one file and one folder, plus secrets just outside it.
fn workspace() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("secret.txt"), "OUTSIDE-SECRET").expect("secret");
    let root = dir.path().join("root");
    std::fs::create_dir_all(root.join("sub")).expect("root");
    std::fs::write(root.join("inside.txt"), "inside").expect("file");
    (dir, root)
}

fn file_tools(root: &Path) -> ToolSet {
    ToolSet::builder()
        .tools(files::tools(root).expect("root"))
        .build()
        .expect("tool set")
}

/// Drives one assistant message of `calls` through the machine and the tool set; returns the
/// tool results the machine appended, in order.
async fn answer(set: &ToolSet, calls: Vec<ContentBlock>) -> Vec<ToolResultBlock> {
    let config = MachineConfig::default().with_tools(set.specs().to_vec());
    let mut machine = AgentMachine::new(config, 1);
    let now = Millis(0);
    let commands = machine.step(
        now,
        Event::UserMessage {
            content: vec![ContentBlock::text("go")],
        },
    );
    let request = commands
        .iter()
        .find_map(|c| match c {
            Command::SendRequest { request, .. } => Some(*request),
            _ => None,
        })
        .expect("a request");
    let response = AssistantResponse::tool_use(Message::assistant(calls));
    let mut commands = machine.step(now, Event::ProviderSucceeded { request, response });
    let cancel = CancellationToken::new();
    if let Some((batch, calls)) = commands.iter().find_map(|c| match c {
        Command::RunTools { batch, calls } => Some((*batch, calls.clone())),
        _ => None,
    }) {
        let started = Instant::now();
        let outcome = tokio::time::timeout(Duration::from_secs(60), set.run_batch(calls, &cancel))
            .await
            .expect("the batch ends");
        assert!(started.elapsed() < Duration::from_secs(30));
        commands = machine.step(now, Event::ToolsFinished { batch, outcome });
    }
    machine
        .conversation()
        .check_tool_pairing(false)
        .expect("every call is answered, in order");
    assert!(
        commands
            .iter()
            .any(|c| matches!(c, Command::SendRequest { .. })),
        "the loop goes on: {commands:?}"
    );
    let last = machine.conversation().messages().last().expect("results");
    last.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolResult(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

fn text_of(result: &ToolResultBlock) -> String {
    serde_json::to_string(&result.parts).expect("parts serialize")
}

fn call(id: &str, name: &str, input: Value) -> ContentBlock {
    ContentBlock::tool_use(id, name, input)
}

#[tokio::test]
async fn path_traversal_and_symlinks_out_of_the_root_are_error_results() {
    let (dir, root) = workspace();
    let outside = dir.path().join("secret.txt");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&outside, root.join("link-file")).expect("symlink");
        std::os::unix::fs::symlink(dir.path(), root.join("link-dir")).expect("symlink");
        std::os::unix::fs::symlink("/", root.join("sub/link-root")).expect("symlink");
    }
    let set = file_tools(&root);
    let escapes = [
        "../secret.txt",
        "sub/../../secret.txt",
        "./sub/../../secret.txt",
        outside.to_str().expect("utf-8 path"),
        "/etc/passwd",
        "..",
        "../",
        "..\\secret.txt",
        "sub/../../root/../secret.txt",
        "link-file",
        "link-dir/secret.txt",
        "link-dir",
        "sub/link-root/etc/passwd",
        "sub/link-root",
        "inside.txt\u{0}/../../secret.txt",
        "~/secret.txt",
    ];
    let mut cases = 0;
    for path in escapes {
        let calls = vec![
            call("r", "read", json!({ "path": path })),
            call("l", "list", json!({ "path": path })),
            call("w", "write", json!({ "path": path, "content": "pwned" })),
            call(
                "w2",
                "write",
                json!({ "path": format!("{path}/new.txt"), "content": "pwned" }),
            ),
        ];
        for result in answer(&set, calls).await {
            cases += 1;
            let text = text_of(&result);
            assert!(!text.contains("OUTSIDE-SECRET"), "{path}: {text}");
            if !result.is_error {
                // A harmless reading of the path inside the root is fine (e.g. `~/x` is a
                // folder named `~`); escaping is not.
                assert!(
                    !text.contains("passwd") && !text.contains("root:"),
                    "{path}: {text}"
                );
            }
        }
    }
    assert_eq!(
        std::fs::read_to_string(&outside).expect("secret"),
        "OUTSIDE-SECRET",
        "a write escaped the root"
    );
    assert!(!dir.path().join("new.txt").exists());
    // Inside the root, the same tools work.
    let ok = answer(&set, vec![call("r", "read", json!({"path": "inside.txt"}))]).await;
    assert!(!ok[0].is_error, "{}", text_of(&ok[0]));
    table::check("model-escapes", cases);
}

#[tokio::test]
async fn wrong_types_and_huge_inputs_get_short_schema_errors() {
    let (_dir, root) = workspace();
    let set = file_tools(&root);
    let huge = "x".repeat(5 << 20);
    let inputs = vec![
        ("read", json!({ "path": 12 })),
        ("read", json!({ "path": null })),
        ("read", json!({})),
        ("read", json!([])),
        ("read", json!("inside.txt")),
        ("read", json!({ "path": ["inside.txt"] })),
        ("read", json!({ "path": { "nested": true } })),
        ("list", json!({ "path": 1.5 })),
        ("write", json!({ "path": "a.txt" })),
        ("write", json!({ "path": "a.txt", "content": 7 })),
        ("write", json!({ "path": "a.txt", "content": ["a"] })),
        ("read", json!({ "path": huge })),
        ("write", json!({ "path": huge, "content": "x" })),
        ("read", json!({ "path": "inside.txt", "unexpected": huge })),
    ];
    let mut cases = 0;
    let calls: Vec<ContentBlock> = inputs
        .iter()
        .enumerate()
        .map(|(i, (name, input))| call(&format!("c{i}"), name, input.clone()))
        .collect();
    let results = answer(&set, calls).await;
    assert_eq!(results.len(), inputs.len());
    for ((name, input), result) in inputs.iter().zip(&results) {
        cases += 1;
        let text = text_of(result);
        assert!(text.len() < 8_000, "{name}: a {} byte error", text.len());
        // The last input is well-typed with an extra field: either read or refused, briefly.
        if input.get("unexpected").is_none() {
            assert!(result.is_error, "{name} {}: {text}", bounded(input));
        }
    }
    // A write of 5 MiB is refused or bounded, never a 5 MiB echo.
    let big = answer(
        &set,
        vec![call(
            "big",
            "write",
            json!({ "path": "big.txt", "content": huge }),
        )],
    )
    .await;
    cases += 1;
    assert!(text_of(&big[0]).len() < 8_000);

    // A tool whose error text is huge is capped like its output would be.
    let spec = ToolSpec {
        name: "loud".into(),
        description: "fails loudly".into(),
        input_schema: json!({"type": "object"}),
    };
    let loud = ToolSet::builder()
        .tool(FnTool::new(spec, |_i, _c| async {
            Err(rebound_effects::tools::ToolError::model(
                "e".repeat(5 << 20),
            ))
        }))
        .max_output_bytes(1_000)
        .build()
        .expect("tool set");
    let results = answer(&loud, vec![call("l", "loud", json!({}))]).await;
    cases += 1;
    assert!(results[0].is_error);
    assert!(
        text_of(&results[0]).len() < 2_000,
        "{} bytes",
        text_of(&results[0]).len()
    );
    table::check("model-inputs", cases);
}

fn bounded(v: &Value) -> String {
    v.to_string().chars().take(60).collect()
}

#[tokio::test]
async fn duplicate_ids_and_hundreds_of_calls_are_each_answered_in_order() {
    let (_dir, root) = workspace();
    let set = file_tools(&root);
    let mut cases = 0;

    // Duplicate and empty ids: the machine makes them unique; each call gets its own answer.
    let dupes = vec![
        call("same", "read", json!({"path": "inside.txt"})),
        call("same", "read", json!({"path": "missing.txt"})),
        call("", "list", json!({})),
        call("", "nope", json!({})),
        call("same", "list", json!({"path": "sub"})),
    ];
    let results = answer(&set, dupes).await;
    cases += results.len();
    assert_eq!(results.len(), 5);
    let ids: std::collections::BTreeSet<_> = results.iter().map(|r| &r.tool_use_id).collect();
    assert_eq!(ids.len(), 5, "ids are unique: {results:?}");
    let errors: Vec<bool> = results.iter().map(|r| r.is_error).collect();
    assert_eq!(errors, [false, true, false, true, false]);
    assert!(text_of(&results[0]).contains("inside"));

    // Five hundred calls in one message, a mix of good and bad.
    let many: Vec<ContentBlock> = (0..500)
        .map(|i| match i % 4 {
            0 => call(&format!("t{i}"), "read", json!({"path": "inside.txt"})),
            1 => call(&format!("t{i}"), "read", json!({"path": format!("../{i}")})),
            2 => call(&format!("t{i}"), "list", json!({})),
            _ => call(&format!("t{i}"), "bogus", json!({"i": i})),
        })
        .collect();
    let started = Instant::now();
    let results = answer(&set, many).await;
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(results.len(), 500);
    for (i, r) in results.iter().enumerate() {
        cases += 1;
        assert_eq!(r.tool_use_id, format!("t{i}"));
        assert_eq!(r.is_error, i % 4 == 1 || i % 4 == 3, "call {i}");
    }
    table::check("model-batches", cases);
}

#[tokio::test]
async fn names_colliding_with_built_ins_are_refused_or_unknown() {
    let (_dir, root) = workspace();
    let mut cases = 0;
    // A host tool named like a built-in cannot be registered beside it.
    for name in ["read", "list", "write"] {
        cases += 1;
        let spec = ToolSpec {
            name: name.into(),
            description: "shadow".into(),
            input_schema: json!({"type": "object"}),
        };
        let shadow = FnTool::new(spec, |_i, _c| async { Ok(ToolOutput::text("shadowed")) });
        let built = ToolSet::builder()
            .tools(files::tools(&root).expect("root"))
            .tool(shadow)
            .build();
        assert!(
            matches!(built, Err(ToolSetError::DuplicateName { ref name, .. }) if name == name),
            "{name}: {built:?}"
        );
    }
    // The model calling near-misses of a built-in name gets "unknown tool", listing the tools.
    let set = file_tools(&root);
    let names = [
        "Read",
        "read ",
        " read",
        "READ",
        "read\u{200b}",
        "files.read",
        "read/../write",
    ];
    let calls: Vec<ContentBlock> = names
        .iter()
        .enumerate()
        .map(|(i, n)| call(&format!("n{i}"), n, json!({"path": "inside.txt"})))
        .collect();
    for result in answer(&set, calls).await {
        cases += 1;
        assert!(result.is_error);
        let text = text_of(&result);
        assert!(text.contains("read") && text.contains("write"), "{text}");
    }
    let _ = Arc::new(());
    table::check("model-names", cases);
}
