//! ToolSet: building, validation, concurrency, timeouts, panics, cancellation, tool sources.

use async_trait::async_trait;
use rebound_core::{
    BatchOutcome, CallOutcome, HostFailure, HostFailureKind, ToolCall, ToolFailure, ToolOutput,
    ToolSpec,
};
use rebound_effects::tools::{
    FnTool, Tool, ToolContext, ToolError, ToolSet, ToolSetError, ToolSource,
};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Barrier};
use tokio_util::sync::CancellationToken;

fn spec(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: format!("the {name} tool"),
        input_schema: json!({
            "type": "object",
            "properties": {"n": {"type": "integer"}, "text": {"type": "string"}},
            "additionalProperties": false
        }),
    }
}

fn call(id: &str, name: &str, input: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        input: input.into(),
    }
}

/// A tool that answers with `name:input`.
fn echo(name: &str) -> FnTool {
    let tag = name.to_owned();
    FnTool::new(spec(name), move |input, _ctx| {
        let tag = tag.clone();
        async move { Ok(ToolOutput::text(format!("{tag}:{input}"))) }
    })
}

async fn run(tools: &ToolSet, calls: Vec<ToolCall>) -> Vec<CallOutcome> {
    match tools.run_batch(calls, &CancellationToken::new()).await {
        BatchOutcome::PerCall(outcomes) => outcomes,
        BatchOutcome::WholeBatch(f) => panic!("unexpected whole-batch failure: {f:?}"),
    }
}

fn model_error(outcome: &CallOutcome) -> &str {
    match &outcome.result {
        Err(ToolFailure::Model { message }) => message,
        other => panic!(
            "expected a model-visible error for {}, got {other:?}",
            outcome.tool_use_id
        ),
    }
}

fn text(outcome: &CallOutcome) -> String {
    match &outcome.result {
        Ok(output) => match output.parts.as_slice() {
            [rebound_core::ToolResultPart::Text { text }] => text.clone(),
            parts => panic!("expected one text part, got {parts:?}"),
        },
        Err(e) => panic!("expected success for {}, got {e:?}", outcome.tool_use_id),
    }
}

// ----- building --------------------------------------------------------------------------

#[test]
fn duplicate_native_names_are_refused() {
    let err = ToolSet::builder()
        .tool(echo("read"))
        .tool(echo("read"))
        .build()
        .expect_err("duplicate");
    assert!(
        matches!(&err, ToolSetError::DuplicateName { name, .. } if name == "read"),
        "{err:?}"
    );
}

#[test]
fn a_source_tool_colliding_with_a_native_tool_is_refused() {
    let source = ScriptedSource::new("mcp:x", &["list", "read"], |_| {
        BatchOutcome::PerCall(vec![])
    });
    let err = ToolSet::builder()
        .tool(echo("read"))
        .source(source)
        .build()
        .expect_err("duplicate");
    let ToolSetError::DuplicateName {
        name,
        first,
        second,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(name, "read");
    assert_eq!(first, "a native tool");
    assert_eq!(second, "tool source `mcp:x`");
    assert!(err.to_string().contains("rename or drop one"), "{err}");
}

#[test]
fn names_providers_would_refuse_are_refused() {
    for bad in ["", "has space", "dots.are.out", &"x".repeat(65)] {
        let err = ToolSet::builder()
            .tool(echo(bad))
            .build()
            .expect_err("invalid name");
        assert!(
            matches!(err, ToolSetError::InvalidName { .. }),
            "{bad}: {err:?}"
        );
    }
}

#[test]
fn an_invalid_schema_is_refused_at_build_time() {
    let tool = FnTool::new(
        ToolSpec {
            name: "bad".into(),
            description: String::new(),
            input_schema: json!({"type": "no-such-type"}),
        },
        |_, _| async { Ok(ToolOutput::text("never")) },
    );
    let err = ToolSet::builder()
        .tool(tool)
        .build()
        .expect_err("bad schema");
    assert!(
        matches!(&err, ToolSetError::InvalidSchema { tool, .. } if tool == "bad"),
        "{err:?}"
    );
}

#[test]
fn zero_concurrency_is_refused() {
    let err = ToolSet::builder()
        .tool(echo("a"))
        .concurrency(0)
        .build()
        .expect_err("zero");
    assert_eq!(err, ToolSetError::ZeroConcurrency);
}

#[test]
fn specs_list_native_tools_then_source_tools() {
    let source = ScriptedSource::new("src", &["s1", "s2"], |_| BatchOutcome::PerCall(vec![]));
    let tools = ToolSet::builder()
        .tool(echo("b"))
        .tool(echo("a"))
        .source(source)
        .build()
        .expect("build");
    let names: Vec<&str> = tools.specs().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["b", "a", "s1", "s2"]);
}

// ----- validation ------------------------------------------------------------------------

fn counting_tool(name: &str, count: Arc<AtomicUsize>) -> FnTool {
    FnTool::new(
        ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: json!({
                "type": "object",
                "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
                "required": ["path"],
                "additionalProperties": false
            }),
        },
        move |_, _| {
            count.fetch_add(1, Ordering::SeqCst);
            async { Ok(ToolOutput::text("ran")) }
        },
    )
}

#[tokio::test]
async fn inputs_that_violate_the_schema_are_refused_without_invoking_the_tool() {
    let count = Arc::new(AtomicUsize::new(0));
    let tools = ToolSet::builder()
        .tool(counting_tool("t", count.clone()))
        .build()
        .expect("build");
    let outcomes = run(
        &tools,
        vec![
            call("missing", "t", json!({})),
            call("wrong-type", "t", json!({"path": 12})),
            call("unknown-prop", "t", json!({"path": "a", "colour": "red"})),
            call("ok", "t", json!({"path": "a", "n": 3})),
        ],
    )
    .await;
    let ids: Vec<&str> = outcomes.iter().map(|o| o.tool_use_id.as_str()).collect();
    assert_eq!(ids, ["missing", "wrong-type", "unknown-prop", "ok"]);

    let missing = model_error(&outcomes[0]);
    assert!(
        missing.contains("\"path\" is a required property"),
        "{missing}"
    );
    let wrong = model_error(&outcomes[1]);
    assert!(
        wrong.contains("at `/path`") && wrong.contains("not of type"),
        "{wrong}"
    );
    let unknown = model_error(&outcomes[2]);
    assert!(unknown.contains("colour"), "{unknown}");
    assert_eq!(text(&outcomes[3]), "ran");
    assert_eq!(count.load(Ordering::SeqCst), 1, "only the valid call ran");
}

#[tokio::test]
async fn schema_errors_stay_short_for_huge_inputs() {
    let count = Arc::new(AtomicUsize::new(0));
    let tools = ToolSet::builder()
        .tool(counting_tool("t", count))
        .build()
        .expect("build");
    let many: serde_json::Map<String, Value> = (0..500)
        .map(|i| (format!("extra{i}"), json!("x".repeat(10_000))))
        .collect();
    let mut input = Value::Object(many);
    input["path"] = json!(["x".repeat(100_000)]);
    let outcomes = run(&tools, vec![call("c", "t", input)]).await;
    let message = model_error(&outcomes[0]);
    assert!(message.len() < 2000, "{} bytes", message.len());
    assert!(
        message.contains("more problems") || message.contains("extra"),
        "{message}"
    );
}

#[tokio::test]
async fn an_unknown_tool_gets_an_error_result_naming_the_tools() {
    let tools = ToolSet::builder().tool(echo("a")).build().expect("build");
    let outcomes = run(&tools, vec![call("c", "nope", json!({}))]).await;
    let message = model_error(&outcomes[0]);
    assert!(
        message.contains("unknown tool `nope`") && message.contains("a"),
        "{message}"
    );
}

// ----- outcomes of native tools ----------------------------------------------------------

#[tokio::test]
async fn model_and_host_errors_keep_their_kind() {
    let failing = FnTool::new(spec("fails"), |input, _| async move {
        if input["n"] == json!(1) {
            Err(ToolError::model("file not found: src/foo.rs"))
        } else {
            Err(ToolError::Host(HostFailure::new(
                HostFailureKind::OutOfMemory,
                "allocation failed",
            )))
        }
    });
    let tools = ToolSet::builder().tool(failing).build().expect("build");
    let outcomes = run(
        &tools,
        vec![
            call("m", "fails", json!({"n": 1})),
            call("h", "fails", json!({"n": 2})),
        ],
    )
    .await;
    assert_eq!(model_error(&outcomes[0]), "file not found: src/foo.rs");
    assert!(matches!(
        &outcomes[1].result,
        Err(ToolFailure::Host(HostFailure {
            kind: HostFailureKind::OutOfMemory,
            ..
        }))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_call_running_past_its_timeout_gets_a_timeout_error() {
    let slow = FnTool::new(spec("slow"), |_, _| async {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(ToolOutput::text("too late"))
    });
    let tools = ToolSet::builder()
        .tool(slow)
        .tool(echo("fast"))
        .call_timeout(Duration::from_secs(30))
        .build()
        .expect("build");
    let outcomes = run(
        &tools,
        vec![call("s", "slow", json!({})), call("f", "fast", json!({}))],
    )
    .await;
    assert_eq!(model_error(&outcomes[0]), "timed out after 30s");
    assert_eq!(text(&outcomes[1]), "fast:{}");
}

#[tokio::test]
async fn a_panicking_tool_becomes_an_error_result_and_the_others_finish() {
    let panicky = FnTool::new(spec("panicky"), |_, _| async {
        if true {
            panic!("index out of bounds: the len is 0");
        }
        Ok(ToolOutput::text("unreachable"))
    });
    let tools = ToolSet::builder()
        .tool(panicky)
        .tool(echo("ok"))
        .build()
        .expect("build");
    let outcomes = run(
        &tools,
        vec![call("p", "panicky", json!({})), call("o", "ok", json!({}))],
    )
    .await;
    let message = model_error(&outcomes[0]);
    assert!(
        message.contains("crashed") && message.contains("index out of bounds"),
        "{message}"
    );
    assert_eq!(text(&outcomes[1]), "ok:{}");
}

// ----- concurrency -----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn independent_calls_run_at_the_same_time() {
    // Each call waits until all three are inside the tool: only concurrent calls get past it.
    let barrier = Arc::new(Barrier::new(3));
    let tool = FnTool::new(spec("meet"), move |_, _| {
        let barrier = barrier.clone();
        async move {
            match tokio::time::timeout(Duration::from_secs(10), barrier.wait()).await {
                Ok(_) => Ok(ToolOutput::text("met")),
                Err(_) => Err(ToolError::model("the other calls never arrived")),
            }
        }
    });
    let tools = ToolSet::builder()
        .tool(tool)
        .concurrency(3)
        .build()
        .expect("build");
    let outcomes = run(
        &tools,
        (0..3)
            .map(|i| call(&format!("c{i}"), "meet", json!({})))
            .collect(),
    )
    .await;
    for outcome in &outcomes {
        assert_eq!(text(outcome), "met");
    }
}

/// Records how many calls are inside the tool at once, and the order they started in.
#[derive(Default)]
struct Overlap {
    inside: AtomicUsize,
    max_inside: AtomicUsize,
    started: Mutex<Vec<i64>>,
}

fn overlap_tool(overlap: Arc<Overlap>) -> FnTool {
    FnTool::new(spec("work"), move |input, _| {
        let overlap = overlap.clone();
        async move {
            let now = overlap.inside.fetch_add(1, Ordering::SeqCst) + 1;
            overlap.max_inside.fetch_max(now, Ordering::SeqCst);
            overlap
                .started
                .lock()
                .expect("lock")
                .push(input["n"].as_i64().unwrap_or(-1));
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_millis(2)).await;
                tokio::task::yield_now().await;
            }
            overlap.inside.fetch_sub(1, Ordering::SeqCst);
            Ok(ToolOutput::text(input["n"].to_string()))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_one_runs_the_batch_sequentially_in_call_order() {
    let overlap = Arc::new(Overlap::default());
    let tools = ToolSet::builder()
        .tool(overlap_tool(overlap.clone()))
        .concurrency(1)
        .build()
        .expect("build");
    let outcomes = run(
        &tools,
        (0..6)
            .map(|n| call(&format!("c{n}"), "work", json!({ "n": n })))
            .collect(),
    )
    .await;
    assert_eq!(overlap.max_inside.load(Ordering::SeqCst), 1);
    assert_eq!(*overlap.started.lock().expect("lock"), [0, 1, 2, 3, 4, 5]);
    let texts: Vec<String> = outcomes.iter().map(text).collect();
    assert_eq!(texts, ["0", "1", "2", "3", "4", "5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_concurrency_limit_is_never_exceeded() {
    let overlap = Arc::new(Overlap::default());
    let tools = ToolSet::builder()
        .tool(overlap_tool(overlap.clone()))
        .concurrency(2)
        .build()
        .expect("build");
    let outcomes = run(
        &tools,
        (0..8)
            .map(|n| call(&format!("c{n}"), "work", json!({ "n": n })))
            .collect(),
    )
    .await;
    assert_eq!(outcomes.len(), 8);
    assert!(overlap.max_inside.load(Ordering::SeqCst) <= 2);
}

// ----- cancellation ----------------------------------------------------------------------

/// Sends on `dropped` when dropped: shows that a call's future was really stopped.
struct DropSignal(Option<oneshot::Sender<()>>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_returns_a_canceled_host_failure_and_stops_running_calls() {
    let (started_tx, started_rx) = oneshot::channel::<()>();
    let (dropped_tx, dropped_rx) = oneshot::channel::<()>();
    let hooks = Arc::new(Mutex::new(Some((started_tx, dropped_tx))));
    let stuck = FnTool::new(spec("stuck"), move |_, _| {
        let hooks = hooks.lock().expect("lock").take();
        async move {
            let Some((started, dropped)) = hooks else {
                return Err(ToolError::model("called twice"));
            };
            let _signal = DropSignal(Some(dropped));
            let _ = started.send(());
            std::future::pending::<()>().await;
            Ok(ToolOutput::text("never"))
        }
    });
    let tools = Arc::new(ToolSet::builder().tool(stuck).build().expect("build"));
    let cancel = CancellationToken::new();
    let batch = tokio::spawn({
        let tools = tools.clone();
        let cancel = cancel.clone();
        async move {
            tools
                .run_batch(vec![call("c", "stuck", json!({}))], &cancel)
                .await
        }
    });
    started_rx.await.expect("the call started");
    cancel.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), batch)
        .await
        .expect("run_batch returns promptly after cancel")
        .expect("no panic");
    assert!(
        matches!(
            &outcome,
            BatchOutcome::WholeBatch(ToolFailure::Host(HostFailure {
                kind: HostFailureKind::Canceled,
                ..
            }))
        ),
        "{outcome:?}"
    );
    tokio::time::timeout(Duration::from_secs(5), dropped_rx)
        .await
        .expect("the running call is dropped")
        .expect("signal sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_keeps_the_outcomes_of_the_calls_that_finished() {
    let (started_tx, started_rx) = oneshot::channel::<()>();
    let started = Arc::new(Mutex::new(Some(started_tx)));
    let stuck = FnTool::new(spec("stuck"), move |_, _| {
        let started = started.lock().expect("lock").take();
        async move {
            if let Some(started) = started {
                let _ = started.send(());
            }
            std::future::pending::<()>().await;
            Ok(ToolOutput::text("never"))
        }
    });
    let forever = FnTool::new(spec("forever"), |_, _| async {
        std::future::pending::<()>().await;
        Ok(ToolOutput::text("never"))
    });
    let count = Arc::new(AtomicUsize::new(0));
    // Two at a time: `quick` and `stuck` start, `forever` takes `quick`'s place when it
    // ends, and `later` waits for a place it never gets.
    let tools = Arc::new(
        ToolSet::builder()
            .tool(echo("quick"))
            .tool(stuck)
            .tool(forever)
            .tool(counting_tool("later", count.clone()))
            .concurrency(2)
            .build()
            .expect("build"),
    );
    let cancel = CancellationToken::new();
    let batch = tokio::spawn({
        let tools = tools.clone();
        let cancel = cancel.clone();
        async move {
            let calls = vec![
                call("a", "quick", json!({"n": 1})),
                call("b", "stuck", json!({})),
                call("c", "forever", json!({})),
                call("d", "later", json!({"path": "x"})),
            ];
            tools.run_batch(calls, &cancel).await
        }
    });
    started_rx.await.expect("the stuck call started");
    // `quick` answers at once; give its task the time to end before the cancel.
    tokio::time::sleep(Duration::from_millis(50)).await;
    cancel.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), batch)
        .await
        .expect("run_batch returns promptly after cancel")
        .expect("no panic");
    let BatchOutcome::PerCall(outcomes) = outcome else {
        panic!("the finished call was forgotten: {outcome:?}");
    };
    let ids: Vec<&str> = outcomes.iter().map(|o| o.tool_use_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c", "d"]);
    assert_eq!(text(&outcomes[0]), r#"quick:{"n":1}"#);
    for stopped in &outcomes[1..] {
        assert!(
            matches!(
                &stopped.result,
                Err(ToolFailure::Host(HostFailure {
                    kind: HostFailureKind::Canceled,
                    ..
                }))
            ),
            "{stopped:?}"
        );
    }
    assert_eq!(
        count.load(Ordering::SeqCst),
        0,
        "nothing starts after a cancel"
    );
}

#[tokio::test]
async fn a_batch_canceled_before_it_starts_runs_nothing() {
    let count = Arc::new(AtomicUsize::new(0));
    let tools = ToolSet::builder()
        .tool(counting_tool("t", count.clone()))
        .build()
        .expect("build");
    let cancel = CancellationToken::new();
    cancel.cancel();
    let outcome = tools
        .run_batch(vec![call("c", "t", json!({"path": "a"}))], &cancel)
        .await;
    assert!(matches!(
        outcome,
        BatchOutcome::WholeBatch(ToolFailure::Host(HostFailure {
            kind: HostFailureKind::Canceled,
            ..
        }))
    ));
    assert_eq!(count.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn the_tool_context_token_fires_when_the_run_is_canceled() {
    let (tx, rx) = oneshot::channel::<bool>();
    let tx = Arc::new(Mutex::new(Some(tx)));
    let watcher = FnTool::new(spec("watch"), move |_, ctx: ToolContext| {
        // Work started outside the call's future, watching the token.
        let tx = tx.lock().expect("lock").take();
        let token = ctx.cancel().clone();
        tokio::spawn(async move {
            let fired = tokio::time::timeout(Duration::from_secs(5), token.cancelled())
                .await
                .is_ok();
            if let Some(tx) = tx {
                let _ = tx.send(fired);
            }
        });
        async { std::future::pending::<Result<ToolOutput, ToolError>>().await }
    });
    let tools = ToolSet::builder().tool(watcher).build().expect("build");
    let cancel = CancellationToken::new();
    let canceler = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        canceler.cancel();
    });
    let outcome = tools
        .run_batch(vec![call("c", "watch", json!({}))], &cancel)
        .await;
    assert!(matches!(
        outcome,
        BatchOutcome::WholeBatch(ToolFailure::Host(_))
    ));
    assert!(
        rx.await.expect("watcher reported"),
        "the context token fired"
    );
}

// ----- tool sources ----------------------------------------------------------------------

type Script = dyn Fn(&[ToolCall]) -> BatchOutcome + Send + Sync;

/// A tool source whose answers come from a closure; records the batches it was given.
struct ScriptedSource {
    name: String,
    tools: Vec<String>,
    script: Box<Script>,
    batches: Arc<Mutex<Vec<Vec<String>>>>,
}

impl ScriptedSource {
    fn new(
        name: &str,
        tools: &[&str],
        script: impl Fn(&[ToolCall]) -> BatchOutcome + Send + Sync + 'static,
    ) -> Self {
        ScriptedSource {
            name: name.into(),
            tools: tools.iter().map(|t| (*t).to_owned()).collect(),
            script: Box::new(script),
            batches: Arc::default(),
        }
    }
}

#[async_trait]
impl ToolSource for ScriptedSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|t| spec(t)).collect()
    }

    async fn run_batch(&self, calls: Vec<ToolCall>, _ctx: ToolContext) -> BatchOutcome {
        self.batches
            .lock()
            .expect("lock")
            .push(calls.iter().map(|c| c.id.clone()).collect());
        tokio::task::yield_now().await;
        (self.script)(&calls)
    }
}

#[tokio::test]
async fn a_mixed_batch_maps_per_call_and_whole_batch_source_failures_to_each_call() {
    // Source A answers `a_ok` calls, fails `a_bad` calls, and forgets `a_lost` calls.
    let a = ScriptedSource::new("a", &["a_ok", "a_bad", "a_lost"], |calls| {
        BatchOutcome::PerCall(
            calls
                .iter()
                .filter(|c| c.name != "a_lost")
                .map(|c| CallOutcome {
                    tool_use_id: c.id.clone(),
                    result: if c.name == "a_ok" {
                        Ok(ToolOutput::text(format!("a answered {}", c.id)))
                    } else {
                        Err(ToolFailure::model("isError: no such row"))
                    },
                })
                .rev() // any order: matched by id
                .collect(),
        )
    });
    let a_batches = a.batches.clone();
    // Source B's server crashed: the whole batch fails.
    let b = ScriptedSource::new("b", &["b_one", "b_two"], |_| {
        BatchOutcome::WholeBatch(ToolFailure::model("server exited with status 1"))
    });
    let b_batches = b.batches.clone();
    let tools = ToolSet::builder()
        .tool(echo("native"))
        .source(a)
        .source(b)
        .build()
        .expect("build");

    let outcomes = run(
        &tools,
        vec![
            call("1", "a_ok", json!({})),
            call("2", "b_one", json!({})),
            call("3", "native", json!({})),
            call("4", "a_bad", json!({})),
            call("5", "b_two", json!({})),
            call("6", "a_lost", json!({})),
            call("7", "a_ok", json!({"n": "not a number"})),
        ],
    )
    .await;

    let ids: Vec<&str> = outcomes.iter().map(|o| o.tool_use_id.as_str()).collect();
    assert_eq!(ids, ["1", "2", "3", "4", "5", "6", "7"]);
    assert_eq!(text(&outcomes[0]), "a answered 1");
    assert_eq!(model_error(&outcomes[1]), "server exited with status 1");
    assert_eq!(text(&outcomes[2]), "native:{}");
    assert_eq!(model_error(&outcomes[3]), "isError: no such row");
    assert_eq!(model_error(&outcomes[4]), "server exited with status 1");
    assert!(model_error(&outcomes[5]).contains("tool source `a` returned no result"));
    assert!(
        model_error(&outcomes[6]).contains("at `/n`"),
        "validated before the source"
    );

    // One batch per source, holding only that source's valid calls, in call order.
    assert_eq!(*a_batches.lock().expect("lock"), [vec!["1", "4", "6"]]);
    assert_eq!(*b_batches.lock().expect("lock"), [vec!["2", "5"]]);
}

#[tokio::test]
async fn a_source_host_failure_reaches_every_call_it_was_given() {
    let source = ScriptedSource::new("s", &["s1", "s2"], |_| {
        BatchOutcome::WholeBatch(ToolFailure::Host(HostFailure::new(
            HostFailureKind::OutOfMemory,
            "child killed by the OOM killer",
        )))
    });
    let tools = ToolSet::builder()
        .source(source)
        .tool(echo("n"))
        .build()
        .expect("build");
    let outcomes = run(
        &tools,
        vec![
            call("1", "s1", json!({})),
            call("2", "n", json!({})),
            call("3", "s2", json!({})),
        ],
    )
    .await;
    for i in [0, 2] {
        assert!(matches!(
            &outcomes[i].result,
            Err(ToolFailure::Host(HostFailure {
                kind: HostFailureKind::OutOfMemory,
                ..
            }))
        ));
    }
    assert_eq!(text(&outcomes[1]), "n:{}");
}

/// A source that never answers, or panics.
struct BrokenSource {
    panics: bool,
}

#[async_trait]
impl ToolSource for BrokenSource {
    fn name(&self) -> &str {
        if self.panics {
            "panicky"
        } else {
            "hung"
        }
    }

    fn specs(&self) -> Vec<ToolSpec> {
        vec![spec(&format!("{}_tool", self.name()))]
    }

    async fn run_batch(&self, _calls: Vec<ToolCall>, _ctx: ToolContext) -> BatchOutcome {
        if self.panics {
            panic!("source state poisoned");
        }
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn a_hung_source_times_out_and_a_panicking_source_becomes_error_results() {
    let tools = ToolSet::builder()
        .source(BrokenSource { panics: false })
        .source(BrokenSource { panics: true })
        .source_timeout(Duration::from_secs(60))
        .build()
        .expect("build");
    let outcomes = run(
        &tools,
        vec![
            call("1", "hung_tool", json!({})),
            call("2", "panicky_tool", json!({})),
            call("3", "hung_tool", json!({})),
        ],
    )
    .await;
    for i in [0, 2] {
        assert_eq!(
            model_error(&outcomes[i]),
            "tool source `hung` timed out after 60s"
        );
    }
    let message = model_error(&outcomes[1]);
    assert!(
        message.contains("tool source `panicky` crashed") && message.contains("poisoned"),
        "{message}"
    );
}

// ----- object safety ---------------------------------------------------------------------

#[tokio::test]
async fn tools_are_usable_as_shared_trait_objects() {
    let shared: Arc<dyn Tool> = Arc::new(echo("shared"));
    let a = ToolSet::builder()
        .shared_tool(shared.clone())
        .build()
        .expect("build");
    let b = ToolSet::builder().tools([shared]).build().expect("build");
    for tools in [&a, &b] {
        let outcomes = run(tools, vec![call("c", "shared", json!({"n": 1}))]).await;
        assert_eq!(text(&outcomes[0]), "shared:{\"n\":1}");
    }
}

// ----- output bounds ---------------------------------------------------------------------

#[tokio::test]
async fn an_oversized_output_is_cut_with_a_note() {
    let flood = FnTool::new(spec("flood"), |_, _| async {
        Ok(ToolOutput {
            parts: vec![
                rebound_core::ToolResultPart::text("é".repeat(10)),
                rebound_core::ToolResultPart::text("x".repeat(100)),
            ],
        })
    });
    let tools = ToolSet::builder()
        .tool(flood)
        .max_output_bytes(15)
        .build()
        .expect("build");
    let outcomes = run(&tools, vec![call("c", "flood", json!({}))]).await;
    let Ok(output) = &outcomes[0].result else {
        panic!("{:?}", outcomes[0])
    };
    assert_eq!(
        output.parts,
        vec![
            // 14 bytes of "é" (the 8th would cross 15), then 1 byte of the second part.
            rebound_core::ToolResultPart::text("é".repeat(7)),
            rebound_core::ToolResultPart::text("x"),
            rebound_core::ToolResultPart::text(
                "[output truncated: the tool returned 120 bytes of text; the first 15 are shown]"
            ),
        ]
    );
}

// ----- runner integration ----------------------------------------------------------------

#[tokio::test]
async fn a_tool_set_runs_batches_for_the_runner() {
    use rebound_effects::runner::ToolExecutor;
    let tools: Arc<dyn ToolExecutor> = Arc::new(
        ToolSet::builder()
            .tool(echo("a"))
            .tool(echo("b"))
            .build()
            .expect("build"),
    );
    let names: Vec<String> = tools.specs().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["a", "b"]);
    let cancel = CancellationToken::new();
    let BatchOutcome::PerCall(outcomes) = tools
        .run_batch(vec![call("1", "b", json!({"n": 2}))], &cancel)
        .await
    else {
        panic!("whole batch")
    };
    assert_eq!(text(&outcomes[0]), "b:{\"n\":2}");
}
