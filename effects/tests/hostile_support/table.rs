//! Keeps `docs/robustness.md` true: each hostile test reports how many cases it ran under a
//! row id, and the row's "how many" column must say exactly that.
//!
//! Run with `REBOUND_UPDATE_ROBUSTNESS=1` to rewrite the numbers instead of checking them
//! (the rows themselves, with their prose, are written by hand).

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Mutex;

static FILE: Mutex<()> = Mutex::new(());

fn doc_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/robustness.md")
}

/// The cells of the table row whose first cell is `` `id` ``, and its line number.
fn find_row(text: &str, id: &str) -> Option<(usize, Vec<String>)> {
    let key = format!("`{id}`");
    text.lines().enumerate().find_map(|(n, line)| {
        let cells: Vec<String> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect();
        (line.trim_start().starts_with('|') && cells.first() == Some(&key)).then_some((n, cells))
    })
}

/// Asserts that the row `id` of docs/robustness.md says `count` in its "how many" column
/// (the fourth), or rewrites it when `REBOUND_UPDATE_ROBUSTNESS` is set.
pub fn check(id: &str, count: usize) {
    let _guard = FILE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let path = doc_path();
    let text = std::fs::read_to_string(&path).expect("docs/robustness.md reads");
    let Some((line, mut cells)) = find_row(&text, id) else {
        panic!("docs/robustness.md has no row `{id}`: add one (id | input class | cases tried | how many | result)");
    };
    assert_eq!(cells.len(), 5, "row `{id}` must have 5 cells");
    if cells[3] == count.to_string() {
        return;
    }
    if std::env::var_os("REBOUND_UPDATE_ROBUSTNESS").is_some() {
        cells[3] = count.to_string();
        let row = format!("| {} |", cells.join(" | "));
        let mut lines: Vec<&str> = text.lines().collect();
        lines[line] = &row;
        let mut out = lines.join("\n");
        out.push('\n');
        std::fs::write(&path, out).expect("docs/robustness.md writes");
        return;
    }
    panic!(
        "docs/robustness.md row `{id}` says {} cases, the test ran {count}: rerun with \
         REBOUND_UPDATE_ROBUSTNESS=1 to update it",
        cells[3]
    );
}
