//! One module per subcommand.

use clap::Subcommand;

mod inspect;

#[derive(Subcommand)]
pub enum Command {
    /// Show what a GGUF file holds: version, metadata, tensors, file type
    Inspect(inspect::Args),
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Inspect(args) => inspect::run(args),
    }
}
