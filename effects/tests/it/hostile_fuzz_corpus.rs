//! Every fuzz entry point over its committed seed corpus, on stable, as an ordinary test.
//!
//! The entry points live in `fuzz/src/lib.rs` (the cargo-fuzz crate, which needs nightly) and
//! are included here by path, so the fuzzers and this test run the very same code. A corpus
//! file is anything the fuzzers kept plus every crash they ever found (after its fix): a
//! panic here is a regression.

#[allow(dead_code, clippy::all, clippy::pedantic)]
#[path = "../../../fuzz/src/lib.rs"]
mod entries;

use crate::table;

use std::path::PathBuf;

fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

#[test]
fn every_fuzz_target_survives_its_seed_corpus() {
    let mut total = 0;
    for (name, entry) in entries::TARGETS {
        let dir = corpus_dir(name);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
            .map(|e| e.expect("corpus entry").path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "the {name} corpus is empty");
        for file in &files {
            let bytes = std::fs::read(file).expect("corpus file reads");
            let result = std::panic::catch_unwind(|| entry(&bytes));
            assert!(
                result.is_ok(),
                "fuzz target {name} panicked on {}",
                file.display()
            );
        }
        table::check(&format!("fuzz-{name}"), files.len());
        total += files.len();
    }
    assert!(total > 0);
}

#[test]
fn the_committed_corpus_stays_small() {
    let mut bytes = 0u64;
    for (name, _) in entries::TARGETS {
        for entry in std::fs::read_dir(corpus_dir(name)).expect("corpus dir") {
            bytes += entry.expect("entry").metadata().expect("metadata").len();
        }
    }
    assert!(bytes < 600 * 1024, "the seed corpus is {bytes} bytes");
}
