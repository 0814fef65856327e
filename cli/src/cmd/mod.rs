//! One module per subcommand.

use clap::Subcommand;

mod bench;
mod create;
mod doctor;
mod generate;
mod inspect;
mod list;
mod manage;
mod perplexity;
mod quantize;
mod repl;
mod run;
mod serve;
mod show;
mod tokenize;
mod transfer;

#[derive(Subcommand)]
pub enum Command {
    /// Prompt-processing and generation speed of a model (llama-bench's method)
    Bench(bench::BenchArgs),
    /// Check the models directory (manifests, blobs, leftovers); --repair removes what is safe
    Doctor(doctor::Args),
    /// Run a model on a prompt directly (no daemon), streaming the text; greedy by default
    Generate(generate::GenerateArgs),
    /// Create a model from a Modelfile
    Create(create::Args),
    /// Show information for a model
    Show(show::Args),
    /// Run a model: answer a prompt, or chat interactively
    Run(run::Args),
    /// Stop a running model (unload it from memory)
    Stop(manage::StopArgs),
    /// Pull a model from a registry
    Pull(transfer::PullArgs),
    /// Push a model to a registry
    Push(transfer::PushArgs),
    /// List models
    #[command(visible_alias = "ls")]
    List(list::ListArgs),
    /// List running models
    Ps(list::PsArgs),
    /// Copy a model
    Cp(manage::CopyArgs),
    /// Remove a model
    Rm(manage::RemoveArgs),
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
        Command::Doctor(args) => doctor::run(args),
        Command::Generate(args) => generate::run(args),
        Command::Create(args) => create::run(args),
        Command::Show(args) => show::run(args),
        Command::Run(args) => run::run(args),
        Command::Stop(args) => manage::stop(args),
        Command::Pull(args) => transfer::pull(args),
        Command::Push(args) => transfer::push(args),
        Command::List(args) => list::list(args),
        Command::Ps(args) => list::ps(args),
        Command::Cp(args) => manage::copy(args),
        Command::Rm(args) => manage::remove(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Quantize(args) => quantize::run(args),
        Command::Perplexity(args) => perplexity::run(args),
        Command::Tokenize(args) => tokenize::run(args),
        Command::Serve(args) => serve::run(args),
    }
}

/// Runs a client command's async work. One runtime serves the whole process, so the HTTP
/// client's pooled connections stay valid from one request to the next (the REPL makes many).
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime on the current thread")
        })
        .block_on(f)
}

/// `OLLAMARS_HOST`, shown at the end of every client command's `--help`.
const HOST_HELP: &str =
    "Environment:\n  OLLAMARS_HOST    The daemon's address: host:port, http(s)://host:port[/path] or \
                         unix:///path/to.sock (default 127.0.0.1:11434)";
