//! The workspace's shape, checked: no import circle between the top-level modules of any
//! crate, each crate depends only on the crates DESIGN.md's layout allows it, and the library
//! an agent embeds (`rebound-effects` without default features) pulls none of what only the
//! binary, the simulator or a server needs.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf()
}

/// `cargo metadata` of the workspace's own packages (no dependencies resolved).
fn metadata() -> Value {
    let out = Command::new(env!("CARGO"))
        .current_dir(workspace())
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata is JSON")
}

/// The workspace's packages, by name.
fn packages(metadata: &Value) -> BTreeMap<String, &Value> {
    metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| (p["name"].as_str().unwrap_or_default().to_owned(), p))
        .collect()
}

/// `package`'s dependencies of `kind` (`None`: normal, `Some("dev")`, `Some("build")`).
fn dependencies<'p>(package: &'p Value, kind: Option<&str>) -> Vec<&'p str> {
    package["dependencies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["kind"].as_str() == kind)
        .filter_map(|d| d["name"].as_str())
        .collect()
}

/// Every `.rs` file below `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The name (of a module or an item) at the start of `text`.
fn leading_name(text: &str) -> String {
    text.trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The first names of a path that starts at the crate root, at the start of `rest`: `a` of
/// `a::X`, `X` of `X`, and `a` and `b` of `{a::X, b::{Y, Z}}`.
fn root_names(rest: &str, names: &mut BTreeSet<String>) {
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 0usize;
        let mut start = 0;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    names.insert(leading_name(&group[start..i]));
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    names.insert(leading_name(&group[start..i]));
                    start = i + 1;
                }
                _ => {}
            }
        }
    } else {
        names.insert(leading_name(rest));
    }
    names.remove("");
}

/// The names (modules, or items of the root) that `code` reaches by a path from the crate
/// root: `module` of `crate::module::X`, `Item` of `crate::Item`, both of
/// `crate::{module::X, Item}`, and the same after `super::` in a file `depth` modules below
/// the root (1 for `src/a.rs` and `src/a/mod.rs`: its `super` is the root; 2 for
/// `src/a/b.rs`: its `super::super`).
fn root_paths(code: &str, depth: usize) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let starts_a_path = |at: usize| {
        let before = &code[..at];
        !before.ends_with("::")
            && !before
                .chars()
                .next_back()
                .is_some_and(|c| c.is_alphanumeric() || c == '_')
    };
    for (at, _) in code.match_indices("crate::") {
        if starts_a_path(at) {
            // not `rebound_crate::` nor `a::crate::`
            root_names(&code[at + "crate::".len()..], &mut names);
        }
    }
    for (at, _) in code.match_indices("super::") {
        if !starts_a_path(at) {
            continue; // the second `super` of `super::super::`, or `not_super::`
        }
        let mut rest = &code[at..];
        let mut up = 0;
        while let Some(after) = rest.strip_prefix("super::") {
            rest = after;
            up += 1;
        }
        if up == depth {
            root_names(rest, &mut names);
        }
    }
    names
}

/// The names the crate root (`lib.rs`, `main.rs`) re-exports from its modules, with the
/// module of each: `pub use driver::{simulate, SimConfig};` maps `simulate` and `SimConfig`
/// to `driver`, so that `crate::SimConfig` is a use of `driver`.
fn reexports(root: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for (at, _) in root.match_indices("pub use ") {
        let rest = &root[at + "pub use ".len()..];
        let module = leading_name(rest);
        let Some(items) = rest[module.len()..].strip_prefix("::") else {
            continue; // `pub use reqwest;`: another crate, not a module
        };
        let items = &items[..items.find(';').unwrap_or(items.len())];
        for name in items
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|n| !n.is_empty() && *n != "as" && *n != "self")
        {
            names.insert(name.to_owned(), module.clone());
        }
    }
    names
}

/// A source file's code, without its comment lines and its test module (everything from
/// the first `#[cfg(test)]` on).
fn code_of(file: &Path) -> String {
    let text = std::fs::read_to_string(file).expect("a readable source file");
    text.split("#[cfg(test)]")
        .next()
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// How many modules below the crate root the file at `relative` (to `src`) is.
fn module_depth(relative: &Path) -> usize {
    let parts = relative.components().count();
    let is_mod_rs = relative.file_name().is_some_and(|n| n == "mod.rs");
    if is_mod_rs {
        parts - 1
    } else {
        parts
    }
}

/// Which top-level module of `src` uses which others, outside comments and test modules:
/// by a path through the module, or through an item the root re-exports from it.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut reexported = BTreeMap::new();
    for root in ["lib.rs", "main.rs"] {
        let root = src.join(root);
        if root.is_file() {
            reexported.extend(reexports(&code_of(&root)));
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let relative = file.strip_prefix(src).expect("below src");
        let first = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .expect("a file name");
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let uses = root_paths(&code_of(&file), module_depth(relative))
            .into_iter()
            .map(|name| reexported.get(&name).cloned().unwrap_or(name));
        graph.entry(module.clone()).or_default().extend(uses);
    }
    let known: BTreeSet<String> = graph.keys().cloned().collect();
    for (module, uses) in &mut graph {
        uses.retain(|u| u != module && known.contains(u));
    }
    graph
}

/// A circle through `start`, if there is one: `start -> … -> start`.
fn circle_through(graph: &BTreeMap<String, BTreeSet<String>>, start: &str) -> Option<Vec<String>> {
    let mut stack = vec![(start.to_owned(), vec![start.to_owned()])];
    let mut seen = BTreeSet::new();
    while let Some((at, path)) = stack.pop() {
        for next in graph.get(&at).into_iter().flatten() {
            if next == start {
                let mut circle = path.clone();
                circle.push(start.to_owned());
                return Some(circle);
            }
            if seen.insert(next.clone()) {
                let mut longer = path.clone();
                longer.push(next.clone());
                stack.push((next.clone(), longer));
            }
        }
    }
    None
}

/// The source folders of every workspace member's library and binaries, by package.
fn crate_sources(metadata: &Value) -> BTreeMap<String, BTreeSet<PathBuf>> {
    let mut folders: BTreeMap<String, BTreeSet<PathBuf>> = BTreeMap::new();
    for (name, package) in packages(metadata) {
        for target in package["targets"].as_array().into_iter().flatten() {
            let kinds: Vec<&str> = target["kind"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let is_crate = kinds
                .iter()
                .any(|k| matches!(*k, "lib" | "rlib" | "cdylib" | "proc-macro" | "bin"));
            if let (true, Some(root)) = (is_crate, target["src_path"].as_str()) {
                let folder = Path::new(root).parent().expect("a root file in a folder");
                folders
                    .entry(name.clone())
                    .or_default()
                    .insert(folder.to_path_buf());
            }
        }
    }
    folders
}

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let metadata = metadata();
    let crates = crate_sources(&metadata);
    for member in [
        "rebound-core",
        "rebound-sim",
        "rebound-study",
        "rebound-effects",
        "rebound-durable",
        "rebound-cli",
        "rebound-tests",
    ] {
        assert!(crates.contains_key(member), "{member} is not checked");
    }
    let mut circles = Vec::new();
    for (krate, folders) in &crates {
        for src in folders {
            let graph = module_graph(src);
            let mut files = Vec::new();
            sources(src, &mut files);
            assert!(
                graph.len() > 1 || files.len() <= 2,
                "{krate}: {} source files but {} modules found",
                files.len(),
                graph.len()
            );
            for module in graph.keys() {
                if let Some(circle) = circle_through(&graph, module) {
                    circles.push(format!("{krate}: {}", circle.join(" -> ")));
                }
            }
        }
    }
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_circle_finder_finds_a_circle() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec!["a"]),
    ]
    .into_iter()
    .map(|(m, uses)| (m.to_owned(), uses.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(
        circle_through(&graph, "a").map(|c| c.join(" -> ")),
        Some("a -> b -> c -> a".to_owned())
    );
    assert_eq!(circle_through(&graph, "d"), None);
    let names =
        |code: &str, depth: usize| -> Vec<String> { root_paths(code, depth).into_iter().collect() };
    assert_eq!(
        names(
            "use crate::runner::X; rebound_crate::y; crate::tools::bounded",
            1
        ),
        ["runner", "tools"]
    );
    assert_eq!(
        names("use crate::{driver::X, scenario::{Y, Z}, Root};", 2),
        ["Root", "driver", "scenario"]
    );
    // `super` is the crate root in a top-level module's file, and one level further up
    // below it.
    assert_eq!(names("super::agent::unix_ms()", 1), ["agent"]);
    assert_eq!(
        names("use super::{agent::X, clock};", 1),
        ["agent", "clock"]
    );
    assert_eq!(names("use super::peers::Peer;", 2), Vec::<String>::new());
    assert_eq!(names("use super::super::peers::Peer;", 2), ["peers"]);
    assert_eq!(
        names("use super::super::peers::Peer;", 1),
        Vec::<String>::new()
    );
    assert_eq!(
        reexports("pub use driver::{simulate, SimConfig as Config};\npub use reqwest;")
            .into_iter()
            .collect::<Vec<_>>(),
        [
            ("Config".to_owned(), "driver".to_owned()),
            ("SimConfig".to_owned(), "driver".to_owned()),
            ("simulate".to_owned(), "driver".to_owned()),
        ]
    );
    assert_eq!(module_depth(Path::new("journal.rs")), 1);
    assert_eq!(module_depth(Path::new("compare/mod.rs")), 1);
    assert_eq!(module_depth(Path::new("compare/peers.rs")), 2);
}

/// The normal (not dev) dependency closure of `package` built with `features`, as
/// `(name, enabled features)`.
fn normal_closure(package: &str, features: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let mut command = Command::new(env!("CARGO"));
    command
        .current_dir(workspace())
        .args([
            "tree",
            "-p",
            package,
            "-e",
            "normal,features",
            "--prefix",
            "none",
        ])
        .arg("--no-default-features");
    if !features.is_empty() {
        command.args(["--features", &features.join(",")]);
    }
    let out = command.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut closure: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        // `name v1.2.3 (...)` or `name feature "f"`
        let mut words = line.split_whitespace();
        let Some(name) = words.next() else { continue };
        let entry = closure.entry(name.to_owned()).or_default();
        if words.next() == Some("feature") {
            if let Some(feature) = words.next() {
                entry.insert(feature.trim_matches('"').to_owned());
            }
        }
    }
    closure
}

#[test]
fn the_embedded_library_pulls_no_cli_simulator_or_server_crate() {
    let closure = normal_closure("rebound-effects", &[]);
    assert!(closure.contains_key("reqwest"), "{closure:?}");
    for banned in [
        "clap",
        "plotters",
        "mlua",
        "rmcp",
        "redis",
        "jsonschema",
        "rebound-sim",
        "rebound-study",
        "rebound-cli",
        "rebound-durable",
        "restate-sdk",
    ] {
        assert!(
            !closure.contains_key(banned),
            "rebound-effects without default features depends on {banned}"
        );
    }
    let hyper = closure.get("hyper").cloned().unwrap_or_default();
    assert!(
        !hyper.contains("server"),
        "hyper's server feature is on: {hyper:?}"
    );
    // The features still bring what they name.
    assert!(normal_closure("rebound-effects", &["redis"]).contains_key("redis"));
    assert!(normal_closure("rebound-effects", &["schema"]).contains_key("jsonschema"));
}

/// `cargo tree -p package -e normal --prefix none` of `package` built with `features` (no
/// default features), with `more` arguments.
fn tree_lines(package: &str, features: &[&str], more: &[&str]) -> Vec<String> {
    let mut command = Command::new(env!("CARGO"));
    command
        .current_dir(workspace())
        .args(["tree", "-p", package, "-e", "normal", "--prefix", "none"])
        .arg("--no-default-features")
        .args(more);
    if !features.is_empty() {
        command.args(["--features", &features.join(",")]);
    }
    let out = command.output().expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The versions of `name` in the normal dependencies of `package` built with `features`.
fn versions_of(name: &str, package: &str, features: &[&str]) -> BTreeSet<String> {
    tree_lines(package, features, &[])
        .iter()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some(name)).then(|| words.next().unwrap_or_default().to_owned())
        })
        .collect()
}

/// One `getrandom` in the library an agent embeds: ring's (rustls's crypto, 0.17, depends on
/// getrandom 0.2), which the runner's seeds come from too. The one exception is `schema`:
/// jsonschema (every release to 0.61) depends on ahash with its default `runtime-rng`, which
/// takes getrandom 0.3; docs/performance.md says so, and this test fails when it is no longer
/// true.
#[test]
fn the_embedded_library_has_one_getrandom_but_for_json_schema() {
    let without_schema = ["lua", "mcp", "redis", "otel"];
    let one = versions_of("getrandom", "rebound-effects", &without_schema);
    assert_eq!(
        one.len(),
        1,
        "rebound-effects with {without_schema:?} has getrandom {one:?}"
    );
    let with_schema = versions_of("getrandom", "rebound-effects", &["schema"]);
    for version in with_schema.difference(&one) {
        let spec = format!("getrandom@{}", version.trim_start_matches('v'));
        let dependents: BTreeSet<String> = tree_lines(
            "rebound-effects",
            &["schema"],
            &["-i", &spec, "--depth", "1"],
        )
        .iter()
        .skip(1)
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect();
        assert_eq!(
            dependents,
            BTreeSet::from(["ahash".to_owned()]),
            "getrandom {version} with `schema` is there for {dependents:?}, not only jsonschema's \
             ahash: see docs/performance.md's dependency section"
        );
    }
}

#[test]
fn core_depends_only_on_what_it_is_allowed() {
    // crc32fast: the checksums of AWS event-stream frames (Bedrock), which the Bedrock issue
    // allows core.
    let allowed = [
        "serde",
        "serde_json",
        "thiserror",
        "fastrand",
        "memchr",
        "crc32fast",
    ];
    let metadata = metadata();
    let core = packages(&metadata)["rebound-core"];
    for name in dependencies(core, None) {
        assert!(allowed.contains(&name), "rebound-core depends on {name}");
    }
}

/// DESIGN.md's layout: which of the workspace's crates each may depend on (normal
/// dependencies; a crate's own tests may use more).
const MAY_DEPEND_ON: [(&str, &[&str]); 8] = [
    ("rebound-core", &[]),
    ("rebound-sim", &["rebound-core"]),
    ("rebound-study", &["rebound-core", "rebound-sim"]),
    ("rebound-effects", &["rebound-core"]),
    ("rebound-durable", &["rebound-core", "rebound-effects"]),
    (
        "rebound-cli",
        &[
            "rebound-core",
            "rebound-sim",
            "rebound-study",
            "rebound-effects",
            "rebound-durable",
        ],
    ),
    (
        "rebound-js",
        &["rebound-core", "rebound-sim", "rebound-study"],
    ),
    (
        "rebound-tests",
        &[
            "rebound-core",
            "rebound-sim",
            "rebound-study",
            "rebound-effects",
            "rebound-durable",
            "rebound-cli",
        ],
    ),
];

#[test]
fn each_crate_depends_only_on_the_crates_beneath_it() {
    let metadata = metadata();
    let packages = packages(&metadata);
    let members: BTreeSet<&str> = packages.keys().map(String::as_str).collect();
    let ruled: BTreeSet<&str> = MAY_DEPEND_ON.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        members, ruled,
        "every member has a rule, every rule a member"
    );
    for (name, allowed) in MAY_DEPEND_ON {
        for dep in dependencies(packages[name], None) {
            assert!(
                !members.contains(dep) || allowed.contains(&dep),
                "{name} depends on {dep}"
            );
        }
    }
}

#[test]
fn the_study_sits_between_the_simulator_and_the_binary() {
    let metadata = metadata();
    let packages = packages(&metadata);
    // The study: core, the simulator and plotters, and the small crates core itself uses.
    let allowed = [
        "rebound-core",
        "rebound-sim",
        "plotters",
        "serde",
        "serde_json",
        "thiserror",
        "fastrand",
    ];
    for dep in dependencies(packages["rebound-study"], None) {
        assert!(allowed.contains(&dep), "rebound-study depends on {dep}");
    }
    // Only the binary, the JavaScript binding and the cross-crate tests use it, in any kind
    // of dependency.
    for (name, package) in &packages {
        for kind in [None, Some("dev"), Some("build")] {
            if dependencies(package, kind).contains(&"rebound-study") {
                assert!(
                    ["rebound-cli", "rebound-js", "rebound-tests"].contains(&name.as_str()),
                    "{name} depends on rebound-study ({kind:?})"
                );
            }
        }
    }
    // The simulator draws no charts: no plotters, whatever its features.
    for kind in [None, Some("dev"), Some("build")] {
        assert!(
            !dependencies(packages["rebound-sim"], kind).contains(&"plotters"),
            "rebound-sim depends on plotters ({kind:?})"
        );
    }
    // The study runs the simulator, not the fake server; its charts come with `charts`.
    let charts = normal_closure("rebound-study", &["charts"]);
    assert!(charts.contains_key("plotters"), "{charts:?}");
    for banned in ["tokio", "hyper", "reqwest", "rebound-effects"] {
        assert!(
            !charts.contains_key(banned),
            "rebound-study depends on {banned}"
        );
    }
    assert!(!normal_closure("rebound-study", &[]).contains_key("plotters"));
}

/// The JavaScript binding is WebAssembly for browsers and edge runtimes: no runtime, socket,
/// HTTP client, chart library or anything of the fake server's enters it, and it builds the
/// study without its charts.
#[test]
fn the_javascript_binding_takes_only_what_runs_in_a_browser() {
    let closure = normal_closure("rebound-js", &[]);
    for banned in [
        "tokio",
        "hyper",
        "reqwest",
        "plotters",
        "rebound-effects",
        "getrandom",
        "mio",
    ] {
        assert!(
            !closure.contains_key(banned),
            "rebound-js depends on {banned}"
        );
    }
    assert!(closure.contains_key("wasm-bindgen"), "{closure:?}");
}

/// Every crate that is published ships both license texts beside its manifest (a crate's
/// package holds only its own folder), and one with features asks docs.rs to document them
/// all (docs.rs builds the default features only unless told) and to say on each item behind
/// a feature which one it needs: `--cfg docsrs` to rustdoc, and `doc_cfg` turned on by it in
/// the library's root (nightly's `doc_cfg` badges every `#[cfg(feature = …)]` item by
/// itself).
#[test]
fn each_published_crate_ships_its_licenses_and_documents_every_feature() {
    let metadata = metadata();
    let mut problems = Vec::new();
    for (name, package) in packages(&metadata) {
        let unpublished = package["publish"]
            .as_array()
            .is_some_and(std::vec::Vec::is_empty);
        if unpublished {
            continue;
        }
        let manifest = PathBuf::from(package["manifest_path"].as_str().unwrap_or_default());
        let dir = manifest.parent().unwrap_or(Path::new("."));
        for license in ["LICENSE-MIT", "LICENSE-APACHE"] {
            if !dir.join(license).is_file() {
                problems.push(format!("{name}: no {license}"));
            }
        }
        let features = package["features"].as_object().map_or(0, |f| f.len());
        let all = package["metadata"]["docs"]["rs"]["all-features"].as_bool() == Some(true);
        if features > 0 && !all {
            problems.push(format!(
                "{name}: has features, no [package.metadata.docs.rs] all-features = true"
            ));
        }
        let rustdoc_args: Vec<&str> = package["metadata"]["docs"]["rs"]["rustdoc-args"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if features > 0 && !rustdoc_args.windows(2).any(|w| w == ["--cfg", "docsrs"]) {
            problems.push(format!(
                "{name}: has features, no [package.metadata.docs.rs] rustdoc-args = [\"--cfg\", \"docsrs\"]"
            ));
        }
        let lib = package["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.contains(&"lib".into()))
            });
        if let (true, Some(lib)) = (features > 0, lib) {
            let root = lib["src_path"].as_str().unwrap_or_default();
            let code = std::fs::read_to_string(root).unwrap_or_default();
            if !code.contains("#![cfg_attr(docsrs, feature(doc_cfg))]") {
                problems.push(format!(
                    "{name}: has features, no #![cfg_attr(docsrs, feature(doc_cfg))] in {root}"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Every published library's front page (docs.rs's crate page, crates.io's README) is its
/// README, so its code blocks run as doc tests of the crate, and no doc test of it may warn.
#[test]
fn each_published_library_is_documented_by_its_readme_with_doc_tests_that_do_not_warn() {
    let metadata = metadata();
    let mut problems = Vec::new();
    for (name, package) in packages(&metadata) {
        let unpublished = package["publish"]
            .as_array()
            .is_some_and(std::vec::Vec::is_empty);
        let lib = package["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|t| {
                t["kind"]
                    .as_array()
                    .is_some_and(|k| k.contains(&"lib".into()))
            });
        let (false, Some(lib)) = (unpublished, lib) else {
            continue;
        };
        let root = lib["src_path"].as_str().unwrap_or_default();
        let code = std::fs::read_to_string(root).unwrap_or_default();
        for attribute in [
            r#"#![doc = include_str!("../README.md")]"#,
            "#![doc(test(attr(deny(warnings))))]",
        ] {
            if !code.contains(attribute) {
                problems.push(format!("{name}: no {attribute} in {root}"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The `match` statements of a Rust code block of `markdown` that have an arm for a `Command`
/// variant and a catch-all arm (`_ =>`), as (line number, the `match` line).
fn command_matches_with_a_catch_all(markdown: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = markdown.lines().collect();
    let mut found = Vec::new();
    let (mut in_block, mut in_rust) = (false, false);
    for (i, line) in lines.iter().enumerate() {
        let fence = line.trim_start();
        if let Some(info) = fence.strip_prefix("```") {
            in_block = !in_block;
            in_rust = in_block && (info.is_empty() || info.starts_with("rust"));
            continue;
        }
        if !in_rust || !fence.starts_with("match ") || !fence.ends_with('{') {
            continue;
        }
        let indent = line.len() - fence.len();
        let arm_indent = " ".repeat(indent + 4);
        let arms = lines[i + 1..]
            .iter()
            .take_while(|l| {
                let t = l.trim_start();
                (l.len() - t.len() != indent || !t.starts_with('}')) && !t.starts_with("```")
            })
            .filter_map(|l| l.strip_prefix(arm_indent.as_str()))
            .filter(|arm| !arm.starts_with(' '));
        let (mut command, mut catch_all) = (false, false);
        for arm in arms {
            command |= arm.starts_with("Command::");
            catch_all |= arm.starts_with("_ =>") || arm.starts_with("_ if");
        }
        if command && catch_all {
            found.push((i + 1, fence.to_owned()));
        }
    }
    found
}

/// `Command` is exhaustive so that a new command breaks a driver at compile time (the
/// README's "Stability" section): no driver the READMEs or the docs pages show has a
/// catch-all arm that would swallow it.
#[test]
fn no_readme_or_docs_page_matches_command_with_a_catch_all() {
    let root = workspace();
    let mut pages = vec![root.join("README.md")];
    for dir in ["core", "sim", "study", "effects", "durable", "cli", "docs"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        pages.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "md")),
        );
    }
    pages.sort();
    let mut problems = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap_or_default();
        for (line, code) in command_matches_with_a_catch_all(&text) {
            problems.push(format!("{}:{line}: {code}", page.display()));
        }
    }
    assert!(
        problems.is_empty(),
        "a match over Command with a catch-all arm:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_catch_all_finder_finds_a_catch_all_over_command_only() {
    let block = |arms: &str| format!("```rust\nmatch command {{\n{arms}}}\n```\n");
    let swallowing = block("    Command::Sleep { timer, .. } => {}\n    _ => {}\n");
    assert_eq!(
        command_matches_with_a_catch_all(&swallowing),
        [(2, "match command {".to_owned())]
    );
    let complete = block("    Command::Sleep { timer, .. } => {\n        match n {\n            _ => {}\n        }\n    }\n    Command::Fail { .. } => {}\n");
    assert!(command_matches_with_a_catch_all(&complete).is_empty());
    let other = block("    1 => {}\n    _ => {}\n");
    assert!(command_matches_with_a_catch_all(&other).is_empty());
    let python = "```python\nmatch command {\n    Command::Sleep => {}\n    _ => {}\n}\n```\n";
    assert!(command_matches_with_a_catch_all(python).is_empty());
    // The end of a block of another language does not start a Rust block.
    let after_shell = format!("```sh\nrebound demo\n```\n{}", &python[10..]);
    assert!(command_matches_with_a_catch_all(&after_shell).is_empty());
}

/// The `[dependencies]` of the README's telemetry section, as (crate, version): what an agent
/// adds to export as `effects/examples/otlp.rs` does.
fn telemetry_snippet(readme: &str) -> Vec<(String, String)> {
    let section = readme
        .split("\n## ")
        .find(|s| s.starts_with("Telemetry\n"))
        .expect("the README has a Telemetry section");
    let block = section
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the Telemetry section has a toml block");
    block
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with('[') && l.contains('='))
        .map(|line| {
            let (name, spec) = line.split_once('=').expect("name = spec");
            let spec = spec.trim();
            let version = spec
                .strip_prefix('"')
                .or_else(|| spec.split("version = \"").nth(1))
                .and_then(|v| v.split('"').next())
                .unwrap_or_default();
            (name.trim().to_owned(), version.to_owned())
        })
        .collect()
}

/// The README's telemetry snippet names the versions the example is built with: each crate
/// is one of rebound-effects' dependencies (the example's) with the same requirement, or
/// rebound-effects itself at its version.
#[test]
fn the_readmes_telemetry_crates_are_the_ones_the_otlp_example_is_built_with() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README.md");
    let snippet = telemetry_snippet(&readme);
    assert!(snippet.len() >= 8, "{snippet:?}");
    let metadata = metadata();
    let effects = packages(&metadata)["rebound-effects"];
    let version = effects["version"].as_str().unwrap_or_default();
    let mut problems = Vec::new();
    for (name, wanted) in &snippet {
        if name == "rebound-effects" {
            if !version.starts_with(wanted.as_str()) {
                problems.push(format!("rebound-effects {wanted}: the crate is {version}"));
            }
            continue;
        }
        let reqs: BTreeSet<&str> = effects["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["name"].as_str() == Some(name.as_str()))
            .filter_map(|d| d["req"].as_str())
            .collect();
        if !reqs.contains(format!("^{wanted}").as_str()) {
            problems.push(format!(
                "{name} {wanted}: rebound-effects (and its example) use {reqs:?}"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(
        telemetry_snippet("# x\n\n## Telemetry\n\n```toml\n[dependencies]\n# a\na = \"1\"\nb = { version = \"0.3\", features = [] }\n```\n"),
        [("a".to_owned(), "1".to_owned()), ("b".to_owned(), "0.3".to_owned())]
    );
}
