//! The workspace's shape, checked: no import circle between the top-level modules of any
//! crate, and the library an agent embeds (`rebound-effects` without default features) pulls
//! none of what only the binary, the simulator or a server needs.

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

/// The top-level modules that `code` names as `crate::module`.
fn named_modules(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let preceded_by_ident = code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_');
        if preceded_by_ident {
            continue; // `rebound_crate::`, not `crate::`
        }
        let name: String = code[at + "crate::".len()..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if !name.is_empty() {
            names.insert(name);
        }
    }
    names
}

/// Which top-level module of `src` uses which others, outside comments and test modules.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    sources(src, &mut files);
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
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        let code: String = text
            .split("#[cfg(test)]")
            .next()
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let uses = named_modules(&code);
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

#[test]
fn no_crate_has_an_import_circle_between_its_modules() {
    let mut circles = Vec::new();
    for krate in ["core", "effects", "sim", "cli"] {
        let graph = module_graph(&workspace().join(krate).join("src"));
        assert!(graph.len() > 1, "{krate}: no modules found");
        for module in graph.keys() {
            if let Some(circle) = circle_through(&graph, module) {
                circles.push(format!("{krate}: {}", circle.join(" -> ")));
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
    assert_eq!(
        named_modules("use crate::runner::X; rebound_crate::y; crate::tools::bounded"),
        ["runner", "tools"].into_iter().map(str::to_owned).collect()
    );
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

#[test]
fn core_depends_only_on_what_it_is_allowed() {
    let allowed = ["serde", "serde_json", "thiserror", "fastrand", "memchr"];
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
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata is JSON");
    let core = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == "rebound-core")
        .expect("rebound-core is a member");
    for dep in core["dependencies"].as_array().into_iter().flatten() {
        if dep["kind"].is_null() {
            let name = dep["name"].as_str().unwrap_or_default();
            assert!(allowed.contains(&name), "rebound-core depends on {name}");
        }
    }
}
