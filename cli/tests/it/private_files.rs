//! What rebound writes holds the conversation, so only its owner may read it: every file the
//! CLI creates is 0600 even under the usual 022 umask, and a file it overwrites keeps the mode
//! it had.

use crate::table;

use rebound_sim::fake::{FakeServer, FakeServerConfig};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_rebound");

/// `rebound ARGS` under `umask 022`, as most shells have it.
fn rebound_with_umask_022(args: &[&str]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "umask 022 && exec \"$@\"", "sh", BIN])
        .args(args)
        .env("ANTHROPIC_API_KEY", "sk-ant-private-files-test")
        .stdin(Stdio::null());
    cmd
}

async fn output(mut cmd: Command) -> Output {
    tokio::task::spawn_blocking(move || cmd.output().expect("the binary runs"))
        .await
        .expect("join")
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

/// Every file directly in `dir`, with its mode in octal, sorted by name.
fn files_and_modes(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .expect("list")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, format!("{:o}", mode(&p)))
        })
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_file_run_and_sim_create_is_owner_only_and_an_overwritten_file_keeps_its_mode() {
    let dir = tempfile::tempdir().expect("temp dir");
    // The umask is in force: a file made the ordinary way in it is world-readable.
    let probe = dir.path().join("probe");
    let made = Command::new("sh")
        .args(["-c", "umask 022 && : > \"$0\"", probe.to_str().unwrap()])
        .status()
        .expect("sh");
    assert!(made.success());
    assert_eq!(mode(&probe), 0o644);
    std::fs::remove_file(&probe).expect("rm");

    let scenario = rebound_sim::Scenario::from_json(
        // Each run is a conversation of its own, played from the scenario's start.
        r#"{"turns": [{"answer": {"text": "Hi there."}}]}"#,
    )
    .expect("scenario");
    let fake = FakeServer::start(FakeServerConfig::new(scenario, 1))
        .await
        .expect("fake provider starts");
    let run = |session: &Path, trace: &Path| {
        rebound_with_umask_022(&[
            "run",
            "hello",
            "--base-url",
            &fake.base_url(),
            "--model",
            "m",
            "--events",
            "json",
            "--session",
            session.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
        ])
    };

    // New files: created 0600.
    let new = dir.path().join("new");
    std::fs::create_dir(&new).expect("mkdir");
    let out = output(run(&new.join("session.json"), &new.join("run.trace"))).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let sim = output(rebound_with_umask_022(&[
        "sim",
        "--scenario",
        "demo",
        "--trace-out",
        new.join("sim.trace").to_str().unwrap(),
    ]))
    .await;
    assert_eq!(sim.status.code(), Some(0), "{sim:?}");
    let created = files_and_modes(&new);
    assert_eq!(
        created,
        [
            ("run.trace".to_owned(), "600".to_owned()),
            ("session.json".to_owned(), "600".to_owned()),
            ("session.json.lock".to_owned(), "600".to_owned()),
            ("sim.trace".to_owned(), "600".to_owned()),
        ],
        "every file written, and no other (no temporary file left)"
    );

    // Existing files the user opened up on purpose: rewritten, mode kept (an old session is
    // converted to a transcript and kept as a backup, both with its mode).
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).expect("mkdir");
    let (session, trace) = (shared.join("session.json"), shared.join("run.trace"));
    std::fs::write(&session, r#"{"version":1,"messages":[]}"#).expect("seed session");
    std::fs::write(&trace, "old").expect("seed trace");
    std::fs::set_permissions(&session, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    std::fs::set_permissions(&trace, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = output(run(&session, &trace)).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    fake.shutdown().await;
    assert!(std::fs::read_to_string(&session)
        .unwrap()
        .contains("Hi there."));
    assert!(std::fs::read_to_string(&trace)
        .unwrap()
        .contains("rebound-trace"));
    let kept = files_and_modes(&shared);
    assert_eq!(
        kept,
        [
            ("run.trace".to_owned(), "644".to_owned()),
            ("session.json".to_owned(), "640".to_owned()),
            ("session.json.lock".to_owned(), "600".to_owned()),
            ("session.json.v1.bak".to_owned(), "640".to_owned()),
        ]
    );

    table::check("privilege-files", created.len() + kept.len());
}
