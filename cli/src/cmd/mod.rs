//! One module per subcommand.

use clap::Subcommand;

mod inspect;
mod quantize;
mod tokenize;

#[derive(Subcommand)]
pub enum Command {
    /// Show what a GGUF file holds: version, metadata, tensors, file type
    Inspect(inspect::Args),
    /// Quantize a GGUF model to a llama.cpp mix (q4_K_M, q8_0, ...), as llama-quantize does
    Quantize(quantize::QuantizeArgs),
    /// Show how a model's tokenizer splits a text (ids and pieces, as llama-tokenize).
    Tokenize(tokenize::TokenizeArgs),
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Inspect(args) => inspect::run(args),
        Command::Quantize(args) => quantize::run(args),
        Command::Tokenize(args) => tokenize::run(args),
    }
}
