//! `rebound replay`: check that a recorded trace replays identically.

use super::{ReplayArgs, EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use rebound_sim::{replay as replay_trace, Trace};

/// Runs `rebound replay`: 0 identical, 1 diverged (the first divergence is printed), 2 the
/// trace is unreadable, truncated or of an unknown version.
pub fn replay(args: &ReplayArgs) -> i32 {
    let file = match std::fs::File::open(&args.trace) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rebound: cannot open trace {}: {e}", args.trace.display());
            return EXIT_USAGE;
        }
    };
    let trace = match Trace::read(std::io::BufReader::new(file)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("rebound: {}: {e}", args.trace.display());
            return EXIT_USAGE;
        }
    };
    match replay_trace(&trace) {
        Ok(report) => {
            println!("{report}");
            EXIT_OK
        }
        Err(e) => {
            println!("{e}");
            EXIT_FAILED
        }
    }
}
