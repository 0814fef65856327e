//! One module per subcommand.

use clap::Subcommand;

mod bench;
mod generate;
mod inspect;
mod perplexity;
mod quantize;
mod serve;
mod tokenize;

#[derive(Subcommand)]
pub enum Command {
    /// Prompt-processing and generation speed of a model (llama-bench's method)
    Bench(bench::BenchArgs),
    /// Run a model on a prompt directly (no daemon), streaming the text; greedy by default
    Generate(generate::GenerateArgs),
    /// Show what a GGUF file holds: version, metadata, tensors, file type
    Inspect(inspect::Args),
    /// Quantize a GGUF model to a llama.cpp mix (q4_K_M, q8_0, ...), as llama-quantize does
    Quantize(quantize::QuantizeArgs),
    /// A model's perplexity on a text file (llama-perplexity's method)
    Perplexity(perplexity::PerplexityArgs),
    /// Show how a model's tokenizer splits a text (ids and pieces, as llama-tokenize).
    Tokenize(tokenize::TokenizeArgs),
    /// Run the daemon: the Ollama- and OpenAI-compatible HTTP API (see --help for settings)
    Serve(serve::Args),
}

pub fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Bench(args) => bench::run(args),
        Command::Generate(args) => generate::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Quantize(args) => quantize::run(args),
        Command::Perplexity(args) => perplexity::run(args),
        Command::Tokenize(args) => tokenize::run(args),
        Command::Serve(args) => serve::run(args),
    }
}
