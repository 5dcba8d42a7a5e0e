//! The `rebound` command-line interface; see `rebound --help`.

fn main() {
    std::process::exit(rebound_cli::main());
}
