//! One module per subcommand.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum Command {}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {}
}
