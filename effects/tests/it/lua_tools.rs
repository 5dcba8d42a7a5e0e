//! Lua tools: loading, results, every failure becoming an error result, and the sandbox.

use rebound_core::{BatchOutcome, MediaSource, ToolCall, ToolFailure, ToolOutput, ToolResultPart};
use rebound_effects::tools::files::Root;
use rebound_effects::tools::lua::{self, LuaLimits, LuaLoadError, LuaTool};
use rebound_effects::tools::ToolSet;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/lua/tools")
}

/// A workspace root with one file in it, and a secret file beside (outside) it.
struct Workspace {
    _dir: tempfile::TempDir,
    root: Root,
    scripts: PathBuf,
}

fn workspace() -> Workspace {
    let dir = tempfile::tempdir().expect("temp dir");
    let root_path = dir.path().join("root");
    std::fs::create_dir(&root_path).expect("root");
    std::fs::write(root_path.join("hello.txt"), "hello from the root").expect("file");
    std::fs::write(dir.path().join("secret.txt"), "top secret").expect("secret");
    let scripts = dir.path().join("scripts");
    std::fs::create_dir(&scripts).expect("scripts");
    let root = Root::new(&root_path).expect("root");
    Workspace {
        _dir: dir,
        root,
        scripts,
    }
}

impl Workspace {
    /// Writes `source` as `name` and loads it with `limits`.
    fn tool(&self, name: &str, source: &str, limits: LuaLimits) -> LuaTool {
        let file = self.scripts.join(name);
        std::fs::write(&file, source).expect("script");
        LuaTool::load_file_with(&file, &self.root, limits).expect("the script loads")
    }

    fn load_error(&self, name: &str, source: &str) -> LuaLoadError {
        let file = self.scripts.join(name);
        std::fs::write(&file, source).expect("script");
        LuaTool::load_file(&file, &self.root).expect_err("the script must not load")
    }
}

fn short_limits() -> LuaLimits {
    LuaLimits::default()
        .with_time(Duration::from_millis(300))
        .with_memory_bytes(8 * 1024 * 1024)
}

/// Runs one call through a ToolSet; `Err` is the model-visible error text.
async fn call(tools: &ToolSet, name: &str, input: Value) -> Result<ToolOutput, String> {
    let calls = vec![ToolCall {
        id: "c1".into(),
        name: name.into(),
        input: input.into(),
    }];
    match tools.run_batch(calls, &CancellationToken::new()).await {
        BatchOutcome::PerCall(mut outcomes) => match outcomes.remove(0).result {
            Ok(output) => Ok(output),
            Err(ToolFailure::Model { message }) => Err(message),
            Err(ToolFailure::Host(host)) => panic!("a host failure: {host}"),
        },
        BatchOutcome::WholeBatch(failure) => panic!("the whole batch failed: {failure:?}"),
    }
}

async fn run_one(tool: LuaTool, input: Value) -> Result<ToolOutput, String> {
    let name = tool
        .file()
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let tools = ToolSet::builder().tool(tool).build().expect("tool set");
    call(&tools, &name, input).await
}

fn text_of(output: &ToolOutput) -> String {
    output
        .parts
        .iter()
        .filter_map(ToolResultPart::as_text)
        .collect()
}

#[tokio::test]
async fn a_folder_of_lua_files_becomes_tools_with_their_specs() {
    let ws = workspace();
    let tools = lua::load_dir(fixtures(), &ws.root).expect("fixtures load");
    let set = ToolSet::builder().tools(tools).build().expect("tool set");
    let names: Vec<&str> = set.specs().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["add", "note", "pixel"]);
    let add = &set.specs()[0];
    assert_eq!(add.description, "Adds two non-negative integers.");
    assert_eq!(
        add.input_schema,
        json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer", "description": "The first addend."},
                "b": {"type": "integer", "description": "The second addend."}
            },
            "required": ["a", "b"],
            "additionalProperties": false
        })
    );
    // `pixel.lua` has no `name` or `input_schema`: the file name and "any object".
    assert_eq!(set.specs()[2].input_schema, json!({"type": "object"}));
}

#[tokio::test]
async fn a_lua_tool_returns_text() {
    let ws = workspace();
    let set = ToolSet::builder()
        .tools(lua::load_dir(fixtures(), &ws.root).unwrap())
        .build()
        .unwrap();
    let output = call(&set, "add", json!({"a": 2, "b": 40})).await.unwrap();
    assert_eq!(output, ToolOutput::text("42"));
    // The converted schema is enforced before Lua runs.
    let refused = call(&set, "add", json!({"a": 2})).await.unwrap_err();
    assert!(
        refused.contains("\"b\" is a required property"),
        "{refused}"
    );
}

#[tokio::test]
async fn nil_and_a_message_is_an_explicit_error_result() {
    let ws = workspace();
    let set = ToolSet::builder()
        .tools(lua::load_dir(fixtures(), &ws.root).unwrap())
        .build()
        .unwrap();
    let error = call(&set, "add", json!({"a": -1, "b": 1}))
        .await
        .unwrap_err();
    assert_eq!(error, "add.lua:14: both numbers must be non-negative");
}

#[tokio::test]
async fn a_lua_tool_returns_text_and_image_parts() {
    let ws = workspace();
    let set = ToolSet::builder()
        .tools(lua::load_dir(fixtures(), &ws.root).unwrap())
        .build()
        .unwrap();
    let output = call(&set, "pixel", json!({})).await.unwrap();
    assert_eq!(output.parts.len(), 2);
    assert_eq!(output.parts[0], ToolResultPart::text("a red pixel:"));
    match &output.parts[1] {
        ToolResultPart::Image {
            source: MediaSource::Base64 { media_type, data },
        } => {
            assert_eq!(media_type, "image/png");
            assert!(data.starts_with("iVBORw0KGgo"));
        }
        other => panic!("not an inline image: {other:?}"),
    }
}

#[tokio::test]
async fn a_runtime_error_names_the_file_and_line() {
    let ws = workspace();
    let tool = ws.tool(
        "boom.lua",
        "return {\n  description = 'fails',\n  run = function(input)\n    local t = nil\n    return t.field\n  end,\n}\n",
        LuaLimits::default(),
    );
    let error = run_one(tool, json!({})).await.unwrap_err();
    assert!(
        error.starts_with("boom.lua:5: attempt to index a nil value"),
        "{error}"
    );
}

#[tokio::test]
async fn error_with_a_message_names_where_it_was_raised_and_what_was_printed() {
    let ws = workspace();
    let tool = ws.tool(
        "raise.lua",
        "local function check(x)\n  if x ~= 1 then error('x must be 1, got ' .. tostring(x)) end\nend\nreturn {\n  description = 'raises',\n  run = function(input)\n    print('checking', input.x)\n    check(input.x)\n    return 'ok'\n  end,\n}\n",
        LuaLimits::default(),
    );
    let error = run_one(tool, json!({"x": 2})).await.unwrap_err();
    assert!(
        error.starts_with("raise.lua:2: x must be 1, got 2"),
        "{error}"
    );
    assert!(
        error.contains("raise.lua:8"),
        "the traceback shows the caller: {error}"
    );
    assert!(
        error.contains("(the script printed: checking\t2)"),
        "{error}"
    );
}

#[tokio::test]
async fn a_wrong_return_shape_is_an_error_result_naming_the_function() {
    let ws = workspace();
    for (source, expected) in [
        ("return true", "`run` returned a boolean"),
        ("return", "`run` returned nothing"),
        (
            "return { text = 'x' }",
            "a table with named fields, not a list of parts",
        ),
        (
            "return { { type = 'audio' } }",
            "part 1 has the unknown type `audio`",
        ),
        (
            "return { { type = 'image', media_type = 'image/png' } }",
            "without a string `data`",
        ),
        ("return { print }", "function"),
    ] {
        let tool = ws.tool(
            "shape.lua",
            &format!("return {{\n  description = 'wrong',\n  run = function(input)\n    {source}\n  end,\n}}\n"),
            LuaLimits::default(),
        );
        let error = run_one(tool, json!({})).await.unwrap_err();
        assert!(error.starts_with("shape.lua:3: "), "{source}: {error}");
        assert!(error.contains(expected), "{source}: {error}");
        assert!(
            error.contains("return a string, a list of parts"),
            "{error}"
        );
    }
}

#[tokio::test]
async fn an_infinite_loop_is_stopped_by_the_time_limit() {
    let ws = workspace();
    let tool = ws.tool(
        "spin.lua",
        "return {\n  description = 'spins',\n  run = function(input)\n    local n = 0\n    while true do n = n + 1 end\n  end,\n}\n",
        short_limits(),
    );
    let started = Instant::now();
    let error = run_one(tool, json!({})).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        error.starts_with("spin.lua:5: the script was stopped after 300ms (the time limit)"),
        "{error}"
    );
}

#[tokio::test]
async fn pcall_and_coroutines_cannot_swallow_the_time_limit() {
    let ws = workspace();
    for body in [
        "while true do pcall(function() while true do end end) end",
        "while true do xpcall(function() while true do end end, function(e) return e end) end",
        "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
        "local co = coroutine.wrap(function() while true do end end)\n    while true do pcall(co) end",
    ] {
        let tool = ws.tool(
            "sneaky.lua",
            &format!("return {{\n  description = 'sneaky',\n  run = function(input)\n    {body}\n  end,\n}}\n"),
            short_limits(),
        );
        let started = Instant::now();
        let error = run_one(tool, json!({})).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "{body}");
        assert!(error.contains("the time limit"), "{body}: {error}");
    }
}

#[tokio::test]
async fn a_memory_blow_up_is_stopped_by_the_memory_limit() {
    let ws = workspace();
    for body in [
        "local t = {}\n    for i = 1, 1e9 do t[i] = string.rep('x', 100) .. i end",
        "return string.rep('x', 1024 * 1024 * 1024)",
    ] {
        let tool = ws.tool(
            "hog.lua",
            &format!("return {{\n  description = 'hog',\n  run = function(input)\n    {body}\n  end,\n}}\n"),
            short_limits().with_time(Duration::from_secs(20)),
        );
        let error = run_one(tool, json!({})).await.unwrap_err();
        assert!(
            error.starts_with("hog.lua: the script ran out of memory (the limit is 8 MiB)"),
            "{body}: {error}"
        );
    }
}

#[tokio::test]
async fn the_tool_set_timeout_stops_a_busy_script_without_stalling_the_runtime() {
    let ws = workspace();
    let tool = ws.tool(
        "busy.lua",
        "return {\n  description = 'busy',\n  run = function(input)\n    while true do end\n  end,\n}\n",
        LuaLimits::default(),
    );
    let tools = ToolSet::builder()
        .tool(tool)
        .call_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    // A single-threaded runtime: if Lua ran on it, the timer could never fire.
    let error = tokio::task::spawn(async move { call(&tools, "busy", json!({})).await })
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(error, "timed out after 200ms");
}

#[tokio::test]
async fn the_sandbox_has_no_process_file_module_or_debug_access() {
    let ws = workspace();
    let tool = ws.tool(
        "probe.lua",
        r#"return {
  description = 'probes',
  run = function(input)
    local found = {}
    local function probe(name, value) if value ~= nil then found[#found + 1] = name end end
    probe('io', io)
    probe('os.execute', os.execute)
    probe('os.getenv', os.getenv)
    probe('os.remove', os.remove)
    probe('os.exit', os.exit)
    probe('require', require)
    probe('package', package)
    probe('debug', debug)
    probe('dofile', dofile)
    probe('loadfile', loadfile)
    probe('string.dump', string.dump)
    probe('collectgarbage is there', nil)
    if #found > 0 then return nil, 'reachable: ' .. table.concat(found, ', ') end
    return 'sealed; time works: ' .. tostring(os.time() > 0)
  end,
}
"#,
        LuaLimits::default(),
    );
    assert_eq!(
        run_one(tool, json!({})).await.map(|o| text_of(&o)),
        Ok("sealed; time works: true".to_owned())
    );
}

#[tokio::test]
async fn load_refuses_bytecode_but_runs_source_text() {
    let ws = workspace();
    let tool = ws.tool(
        "loader.lua",
        r#"return {
  description = 'loads',
  run = function(input)
    local f = load('return 1 + 1')
    local bytecode = '\27Lua\84\0' .. string.rep('x', 40)
    local g, err = load(bytecode, 'blob', 'b')
    if g then return nil, 'bytecode loaded' end
    return tostring(f()) .. ' / ' .. err
  end,
}
"#,
        LuaLimits::default(),
    );
    let text = text_of(&run_one(tool, json!({})).await.unwrap());
    assert!(text.starts_with("2 / "), "{text}");
    assert!(text.contains("binary chunk"), "{text}");
}

#[tokio::test]
async fn fs_reads_inside_the_root_and_refuses_to_leave_it() {
    let ws = workspace();
    let set = ToolSet::builder()
        .tools(lua::load_dir(fixtures(), &ws.root).unwrap())
        .build()
        .unwrap();
    let ok = call(&set, "note", json!({"path": "hello.txt"}))
        .await
        .unwrap();
    assert_eq!(ok, ToolOutput::text("note: hello from the root"));
    let up = call(&set, "note", json!({"path": "../secret.txt"}))
        .await
        .unwrap_err();
    assert!(up.contains("`..` is not allowed"), "{up}");
    let absolute = ws.root.path().parent().unwrap().join("secret.txt");
    let abs = call(&set, "note", json!({"path": absolute.to_str().unwrap()}))
        .await
        .unwrap_err();
    assert!(abs.contains("absolute paths are not allowed"), "{abs}");
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&absolute, ws.root.path().join("link.txt")).unwrap();
        let link = call(&set, "note", json!({"path": "link.txt"}))
            .await
            .unwrap_err();
        assert!(link.contains("outside the root folder"), "{link}");
    }
}

#[tokio::test]
async fn fs_list_shows_the_root() {
    let ws = workspace();
    let tool = ws.tool(
        "ls.lua",
        "return {\n  description = 'lists',\n  run = function(input)\n    return fs.list()\n  end,\n}\n",
        LuaLimits::default(),
    );
    let text = text_of(&run_one(tool, json!({})).await.unwrap());
    assert_eq!(text, "hello.txt (19 bytes)");
}

#[tokio::test]
async fn no_state_survives_between_calls() {
    let ws = workspace();
    let tool = ws.tool(
        "counter.lua",
        "count = (count or 0) + 1\nreturn {\n  description = 'counts',\n  run = function(input)\n    return tostring(count)\n  end,\n}\n",
        LuaLimits::default(),
    );
    let tools = ToolSet::builder().tool(tool).build().unwrap();
    for _ in 0..2 {
        assert_eq!(
            call(&tools, "counter", json!({})).await,
            Ok(ToolOutput::text("1"))
        );
    }
}

#[tokio::test]
async fn json_input_arrives_as_lua_tables() {
    let ws = workspace();
    let tool = ws.tool(
        "shape_in.lua",
        r#"return {
  description = 'echoes',
  run = function(input)
    return { string.format('%d items, first %s, nested %s, flag %s, missing %s',
      #input.items, input.items[1], input.nested.deep, tostring(input.flag), tostring(input.none)) }
  end,
}
"#,
        LuaLimits::default(),
    );
    let output = run_one(
        tool,
        json!({"items": ["a", "b"], "nested": {"deep": "yes"}, "flag": false, "none": null}),
    )
    .await
    .unwrap();
    assert_eq!(
        text_of(&output),
        "2 items, first a, nested yes, flag false, missing nil"
    );
}

#[test]
fn load_errors_name_the_file_and_what_to_fix() {
    let ws = workspace();
    let syntax = ws.load_error(
        "syntax.lua",
        "return {\n  description = 'x',\n  run = function( end,\n}\n",
    );
    let text = syntax.to_string();
    assert!(matches!(syntax, LuaLoadError::Script { .. }), "{text}");
    assert!(text.contains("syntax.lua:3:"), "{text}");

    let not_table = ws.load_error("number.lua", "return 7");
    assert!(
        not_table
            .to_string()
            .contains("returned a integer instead of a table")
            || not_table
                .to_string()
                .contains("returned a number instead of a table"),
        "{not_table}"
    );

    let no_description = ws.load_error("nodesc.lua", "return { run = function() end }");
    assert!(
        no_description
            .to_string()
            .contains("`description` is missing"),
        "{no_description}"
    );
    assert!(
        no_description.to_string().contains("nodesc.lua"),
        "{no_description}"
    );

    let no_run = ws.load_error("norun.lua", "return { description = 'x' }");
    assert!(no_run.to_string().contains("`run` is missing"), "{no_run}");

    let bad_name = ws.load_error(
        "bad.lua",
        "return { name = 'a b', description = 'x', run = print }",
    );
    assert!(
        bad_name.to_string().contains("is not allowed"),
        "{bad_name}"
    );

    let bad_schema = ws.load_error(
        "schema.lua",
        "return { description = 'x', input_schema = { type = 12 }, run = print }",
    );
    assert!(
        bad_schema.to_string().contains("not a valid JSON Schema"),
        "{bad_schema}"
    );

    let mixed = ws.load_error(
        "mixed.lua",
        "return { description = 'x', input_schema = { 'a', type = 'object' }, run = print }",
    );
    assert!(
        mixed
            .to_string()
            .contains("mixes list items and named fields at `input_schema`"),
        "{mixed}"
    );

    let spin = ws.scripts.join("spin_load.lua");
    std::fs::write(&spin, "while true do end").unwrap();
    let error = LuaTool::load_file_with(&spin, &ws.root, short_limits()).unwrap_err();
    assert!(error.to_string().contains("the time limit"), "{error}");
}

fn load_error<T>(result: Result<T, LuaLoadError>) -> LuaLoadError {
    match result {
        Ok(_) => panic!("the folder must not load"),
        Err(e) => e,
    }
}

#[test]
fn a_folder_without_lua_files_or_with_two_tools_of_one_name_is_refused() {
    let ws = workspace();
    let empty = load_error(lua::load_dir(&ws.scripts, &ws.root));
    assert!(matches!(empty, LuaLoadError::NoTools { .. }), "{empty}");
    for file in ["a.lua", "b.lua"] {
        std::fs::write(
            ws.scripts.join(file),
            "return { name = 'same', description = 'x', run = print }",
        )
        .unwrap();
    }
    let twice = load_error(lua::load_dir(&ws.scripts, &ws.root));
    assert!(
        matches!(&twice, LuaLoadError::DuplicateName { name, .. } if name == "same"),
        "{twice}"
    );
    let missing = load_error(lua::load_dir(ws.scripts.join("nope"), &ws.root));
    assert!(matches!(missing, LuaLoadError::ReadDir { .. }), "{missing}");
}

#[tokio::test]
async fn lua_tools_are_shareable_trait_objects() {
    let ws = workspace();
    let tools: Vec<Arc<dyn rebound_effects::tools::Tool>> =
        lua::load_dir(fixtures(), &ws.root).unwrap();
    assert_eq!(tools.len(), 3);
}

#[tokio::test]
async fn a_lua_image_the_provider_cannot_take_is_dropped_with_a_note() {
    let ws = workspace();
    let tool = ws.tool(
        "tiff.lua",
        "return {\n  description = 'tiff',\n  run = function(input)\n    return { 'picture:', { type = 'image', media_type = 'image/tiff', data = 'SUkqAA==' } }\n  end,\n}\n",
        LuaLimits::default(),
    );
    let output = run_one(tool, json!({})).await.unwrap();
    assert_eq!(output.parts.len(), 2);
    assert_eq!(output.parts[0], ToolResultPart::text("picture:"));
    assert!(
        text_of(&output).contains("[image dropped: its bytes are not a PNG, JPEG, GIF or WebP image (declared as `image/tiff`)"),
        "{output:?}"
    );
}

/// The machine asks for `add` with a bad input, the Lua tool's error reaches the model as an
/// error result, the model corrects itself, and the run finishes.
#[tokio::test]
async fn the_model_reads_a_lua_tools_error_and_then_succeeds() {
    use rebound_core::{
        AgentMachine, AssistantResponse, Command, ContentBlock, Event, MachineConfig, Message,
        Millis,
    };

    let ws = workspace();
    let tools = ToolSet::builder()
        .tools(lua::load_dir(fixtures(), &ws.root).unwrap())
        .build()
        .unwrap();
    let config = MachineConfig::default().with_tools(tools.specs().to_vec());
    let mut machine = AgentMachine::new(config, 1);
    let now = Millis(0);
    let model_turns = [
        Some(json!({"a": -1, "b": 1})),
        Some(json!({"a": 2, "b": 40})),
        None,
    ];
    let mut turns = model_turns.iter();
    let mut appended: Vec<std::sync::Arc<Message>> = Vec::new();
    let mut commands = machine.step(
        now,
        Event::UserMessage {
            content: vec![ContentBlock::text("add some numbers")],
        },
    );
    let mut finished = false;
    for _ in 0..20 {
        let mut next = Vec::new();
        for command in commands.drain(..) {
            match command {
                Command::AppendMessage { message } => appended.push(message),
                Command::SendRequest { request, .. } => {
                    let turn = turns
                        .next()
                        .expect("the model is asked at most three times");
                    let response = match turn {
                        Some(input) => AssistantResponse::tool_use(Message::assistant(vec![
                            ContentBlock::tool_use(
                                format!("call{}", appended.len()),
                                "add",
                                input.clone(),
                            ),
                        ])),
                        None => AssistantResponse::end_turn(Message::assistant_text("42 it is")),
                    };
                    next.extend(machine.step(now, Event::ProviderSucceeded { request, response }));
                }
                Command::RunTools { batch, calls } => {
                    let outcome = tools.run_batch(calls, &CancellationToken::new()).await;
                    next.extend(machine.step(now, Event::ToolsFinished { batch, outcome }));
                }
                Command::Finish { .. } => finished = true,
                Command::Fail { error } => panic!("the run failed: {error:?}"),
                _ => {}
            }
        }
        if next.is_empty() {
            break;
        }
        commands = next;
    }
    assert!(finished, "the run finished");
    let results: Vec<(bool, String)> = appended
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|block| match block {
            ContentBlock::ToolResult(result) => Some((result.is_error, result.text())),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{appended:#?}");
    assert!(results[0].0, "the first result is an error");
    assert!(
        results[0].1.contains(
            "Tool execution failed for `add`: add.lua:14: both numbers must be non-negative"
        ),
        "{}",
        results[0].1
    );
    assert_eq!(results[1], (false, "42".to_owned()));
}

#[tokio::test]
async fn runaway_recursion_and_looping_finalizers_end_as_error_results() {
    let ws = workspace();
    let recursion = ws.tool(
        "deep.lua",
        "local function f(n) return f(n + 1) + 1 end\nreturn {\n  description = 'deep',\n  run = function(input)\n    return f(1)\n  end,\n}\n",
        LuaLimits::default(),
    );
    let error = run_one(recursion, json!({})).await.unwrap_err();
    assert!(error.starts_with("deep.lua:1: stack overflow"), "{error}");
}

#[tokio::test]
async fn a_finalizer_that_never_ends_is_stopped_too() {
    let ws = workspace();
    // Lua runs finalizers with hooks off: a looping `__gc` could never be stopped.
    let finalizer = ws.tool(
        "gc.lua",
        "return {\n  description = 'gc',\n  run = function(input)\n    setmetatable({}, { __gc = function() while true do end end })\n    return 'unreachable'\n  end,\n}\n",
        short_limits(),
    );
    let error = run_one(finalizer, json!({})).await.unwrap_err();
    assert!(
        error.starts_with("gc.lua:4: `__gc` metamethods are not allowed in tool scripts"),
        "{error}"
    );
}
