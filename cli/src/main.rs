//! `ollamars`: run large language models locally.
//!
//! Thin by design: argument parsing, printing, and an HTTP client of the daemon, plus direct
//! engine tools that need no daemon. Each command lives in its own module under `cmd/`.

mod cmd;

use clap::Parser;

#[derive(Parser)]
#[command(
    name = "ollamars",
    version,
    about = "Run large language models locally",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: cmd::Command,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = cmd::run(cli.command) {
        eprintln!("Error: {e:#}");
        std::process::exit(1);
    }
}
