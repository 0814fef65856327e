//! `ollamars`: run large language models locally.
//!
//! Thin by design: argument parsing, printing, and an HTTP client of the daemon, plus direct
//! engine tools that need no daemon. Each command lives in its own module under `cmd/`.

mod client;
mod cmd;
mod term;

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
        eprintln!("Error: {}", one_line(&e));
        std::process::exit(1);
    }
}

/// An error and its causes on one line, each cause once: many errors already include their
/// source in their own message, and anyhow's `{:#}` would repeat it.
fn one_line(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !msg.contains(&cause) {
            msg = format!("{msg}: {cause}");
        }
    }
    msg.replace('\n', " ")
}
