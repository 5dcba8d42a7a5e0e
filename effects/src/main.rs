//! The `rebound` command-line interface.

fn main() {
    eprintln!("rebound: the CLI is not built yet");
    std::process::exit(2);
}
