//! What one more message costs a session: bytes written and time, appending to a transcript
//! of 10 and of 10,000 messages, beside the whole-file rewrite that sessions did before.
//!
//! Run: `cargo bench -p rebound-effects --bench session_append` (a plain `harness = false`
//! main; the argument, if any, is how many appends to time per case, default 50).
//!
//! Each case starts from a session of N messages of about 500 bytes and records the next
//! messages one at a time, as the runner does: through `SessionStore::append` (one line, one
//! fsync), or the way sessions were saved before transcripts (the whole conversation as
//! `{"version": 1, "messages": [...]}` pretty JSON into a temporary file, fsync, rename over
//! the session, fsync of the folder). Bytes written are the growth of the file for an append
//! and the size of the file for a rewrite. Times are wall times, fsyncs included: they
//! depend on the disk; compare rows of one run.

use rebound_core::{Conversation, Message};
use rebound_effects::session::{encode_session, SessionHeader, SessionStore};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

fn message(i: usize) -> Message {
    let text = format!("message {i}: {}", "lorem ipsum dolor sit amet ".repeat(18));
    if i.is_multiple_of(2) {
        Message::user_text(text)
    } else {
        Message::assistant_text(text)
    }
}

fn conversation(n: usize) -> Conversation {
    Conversation::from((1..=n).map(message).collect::<Vec<_>>())
}

struct Figures {
    bytes_per_write: u64,
    median: Duration,
    p90: Duration,
}

fn figures(mut times: Vec<Duration>, bytes: &[u64]) -> Figures {
    times.sort();
    let bytes_per_write = bytes.iter().sum::<u64>() / bytes.len() as u64;
    Figures {
        bytes_per_write,
        median: times[times.len() / 2],
        p90: times[times.len() * 9 / 10],
    }
}

/// Appends messages N+1 … N+runs to a transcript of N messages.
fn append(dir: &Path, n: usize, runs: usize) -> Figures {
    let path = dir.join(format!("transcript-{n}.jsonl"));
    std::fs::write(
        &path,
        encode_session(&SessionHeader::now(), &conversation(n)),
    )
    .expect("seed");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let (store, loaded) = SessionStore::open(&path).await.expect("open");
        assert_eq!(loaded.len(), n);
        let (mut times, mut bytes) = (Vec::new(), Vec::new());
        for i in n + 1..=n + runs {
            let next = message(i);
            let before = std::fs::metadata(&path).expect("meta").len();
            let start = Instant::now();
            store.append(&next).await.expect("append");
            times.push(start.elapsed());
            bytes.push(std::fs::metadata(&path).expect("meta").len() - before);
        }
        assert_eq!(store.load().await.expect("load").len(), n + runs);
        figures(times, &bytes)
    })
}

/// Saves conversations of N+1 … N+runs messages the way sessions were saved before
/// transcripts.
fn rewrite(dir: &Path, n: usize, runs: usize) -> Figures {
    #[derive(serde::Serialize)]
    struct WholeFile<'a> {
        version: u64,
        messages: &'a [std::sync::Arc<Message>],
    }
    let path = dir.join(format!("whole-{n}.json"));
    let mut conversation = conversation(n);
    let (mut times, mut bytes) = (Vec::new(), Vec::new());
    for i in n + 1..=n + runs {
        conversation.push(message(i));
        let start = Instant::now();
        let mut content = serde_json::to_vec_pretty(&WholeFile {
            version: 1,
            messages: conversation.messages(),
        })
        .expect("json");
        content.push(b'\n');
        let temp = dir.join(format!(".whole-{n}.json.tmp"));
        let mut file = std::fs::File::create(&temp).expect("temp");
        file.write_all(&content).expect("write");
        file.sync_all().expect("fsync");
        drop(file);
        std::fs::rename(&temp, &path).expect("rename");
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .expect("fsync folder");
        times.push(start.elapsed());
        bytes.push(content.len() as u64);
    }
    figures(times, &bytes)
}

/// `11th`, `10001st`.
fn ordinal(n: usize) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

fn main() {
    let runs: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(50);
    // Next to the target folder rather than in /tmp, which may be a RAM disk where fsync
    // costs nothing.
    let base = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| std::path::PathBuf::from("target"), Into::into);
    std::fs::create_dir_all(&base).expect("target folder");
    let dir = tempfile::tempdir_in(&base).expect("temp dir");
    println!("{runs} writes per case, in {}", dir.path().display());
    println!(
        "| how | session before | message | bytes written per message | median time | p90 time |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for n in [10, 10_000] {
        for (how, figures) in [
            ("append (transcript)", append(dir.path(), n, runs)),
            ("rewrite (before)", rewrite(dir.path(), n, runs)),
        ] {
            println!(
                "| {how} | {n} messages | {}–{} | {} | {:.2} ms | {:.2} ms |",
                ordinal(n + 1),
                ordinal(n + runs),
                figures.bytes_per_write,
                figures.median.as_secs_f64() * 1e3,
                figures.p90.as_secs_f64() * 1e3,
            );
        }
    }
}
