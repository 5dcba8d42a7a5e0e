//! Each published crate's `rust-version` is true of what it builds with: no crate in its
//! normal or build dependency closure (all features on, every target platform, the versions
//! `Cargo.lock` pins) asks for a newer Rust than the crate states.
//!
//! It reads `cargo metadata`'s resolve graph. That graph is the workspace's, with features
//! unified across members, so a closure may hold a few crates that only another member's
//! features bring in: the check can only err on the strict side, never accept a version that
//! is too low. It cannot see what the crate's own code uses; that is set by hand (the
//! manifests say why).

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::process::Command;

/// A `rust-version` as comparable numbers: `1.85` is `[1, 85, 0]`.
fn parse_version(text: &str) -> [u64; 3] {
    let mut parts = [0; 3];
    for (slot, part) in parts.iter_mut().zip(text.split('.')) {
        *slot = part
            .parse()
            .unwrap_or_else(|_| panic!("`{text}` is not a rust-version"));
    }
    parts
}

fn str_field<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key]
        .as_str()
        .unwrap_or_else(|| panic!("cargo metadata: `{key}` missing in {value}"))
}

fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value[key]
        .as_array()
        .unwrap_or_else(|| panic!("cargo metadata: `{key}` missing"))
}

fn metadata() -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ lives in the workspace root");
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--all-features"])
        .current_dir(root)
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON")
}

/// Every dependency `package` builds with, each with the chain of names that brings it in.
fn closure(package: &str, edges: &BTreeMap<&str, Vec<&str>>) -> BTreeMap<String, Vec<String>> {
    let mut via: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut queue = VecDeque::from([(package.to_string(), Vec::new())]);
    let mut seen = BTreeSet::from([package.to_string()]);
    while let Some((id, path)) = queue.pop_front() {
        for &dep in edges
            .get(id.as_str())
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            if seen.insert(dep.to_string()) {
                let mut dep_path = path.clone();
                dep_path.push(dep.to_string());
                via.insert(dep.to_string(), dep_path.clone());
                queue.push_back((dep.to_string(), dep_path));
            }
        }
    }
    via
}

#[test]
fn no_published_crate_depends_on_a_newer_rust_than_its_rust_version() {
    let metadata = metadata();
    let packages: BTreeMap<&str, &Value> = array(&metadata, "packages")
        .iter()
        .map(|p| (str_field(p, "id"), p))
        .collect();
    let name = |id: &str| {
        let p = packages[id];
        format!("{} {}", str_field(p, "name"), str_field(p, "version"))
    };

    // Normal and build edges only: a dev-dependency is not built by those who depend on us.
    let mut edges: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for node in array(&metadata["resolve"], "nodes") {
        let from = str_field(node, "id");
        for dep in array(node, "deps") {
            let builds_with = array(dep, "dep_kinds")
                .iter()
                .any(|kind| kind["kind"].as_str() != Some("dev"));
            if builds_with {
                edges.entry(from).or_default().push(str_field(dep, "pkg"));
            }
        }
    }

    let mut checked = Vec::new();
    let mut too_low = Vec::new();
    for member in array(&metadata, "workspace_members") {
        let member = member.as_str().expect("member ids are strings");
        let package = packages[member];
        // `publish = false` is `[]`; anything else may reach crates.io.
        if package["publish"].as_array().is_some_and(Vec::is_empty) {
            continue;
        }
        let stated = package["rust_version"]
            .as_str()
            .unwrap_or_else(|| panic!("{} is published but states no rust-version", name(member)));
        let mut newer = Vec::new();
        for (dep, path) in closure(member, &edges) {
            let Some(needed) = packages[dep.as_str()]["rust_version"].as_str() else {
                continue; // states nothing: nothing to compare
            };
            if parse_version(needed) > parse_version(stated) {
                let chain: Vec<String> = path.iter().map(|id| name(id)).collect();
                newer.push((
                    parse_version(needed),
                    format!(
                        "  {} needs {needed} (via {})",
                        name(&dep),
                        chain.join(" -> ")
                    ),
                ));
            }
        }
        // The highest first: it is the version to state.
        newer.sort_by(|a, b| b.cmp(a));
        if let Some((highest, _)) = newer.first() {
            let [major, minor, patch] = highest;
            too_low.push(format!(
                "{} states rust-version {stated}, but its dependencies need {major}.{minor}.{patch}:",
                name(member)
            ));
            too_low.extend(newer.into_iter().map(|(_, line)| line));
        }
        checked.push(str_field(package, "name"));
    }
    checked.sort_unstable();
    assert_eq!(
        checked,
        [
            "rebound-cli",
            "rebound-core",
            "rebound-durable",
            "rebound-effects",
            "rebound-sim",
            "rebound-study"
        ],
        "the published crates changed: check this list and their rust-versions"
    );
    assert!(
        too_low.is_empty(),
        "rust-version too low: raise it in the crate's Cargo.toml\n{}",
        too_low.join("\n")
    );
}

#[test]
fn rust_versions_compare_by_number() {
    assert!(parse_version("1.85") > parse_version("1.9"));
    assert_eq!(parse_version("1.85"), parse_version("1.85.0"));
    assert!(parse_version("1.85.1") > parse_version("1.85"));
}
