//! `ollamars perplexity`: a model's perplexity on a text file, by llama-perplexity's method.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use engine::perplexity::{perplexity, PerplexityParams};
use engine::{Model, ModelParams};

#[derive(Args)]
pub struct PerplexityArgs {
    /// The GGUF model file.
    #[arg(short, long, value_name = "FILE")]
    model: PathBuf,
    /// The text to score.
    #[arg(short = 'f', long, value_name = "TEXT_FILE")]
    file: PathBuf,
    /// Chunk size: each chunk is evaluated alone and its second half scored.
    #[arg(short = 'c', long, default_value_t = 512)]
    ctx_size: usize,
    /// Tokens evaluated per forward pass.
    #[arg(short = 'b', long, default_value_t = 512)]
    batch_size: usize,
    /// Worker threads (0: one per CPU).
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
    /// Print only the result as JSON: {"ppl": .., "chunks": .., "tokens": ..} (tokens = tokens scored).
    #[arg(long)]
    json: bool,
}

pub fn run(args: PerplexityArgs) -> anyhow::Result<()> {
    let model = Model::load(&args.model, &ModelParams::default())
        .with_context(|| format!("loading {}", args.model.display()))?;
    let vocab = model
        .vocab()
        .with_context(|| format!("reading the tokenizer of {}", args.model.display()))?;
    let bytes = std::fs::read(&args.file).with_context(|| format!("reading {}", args.file.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    // As llama-perplexity: with the model's BOS, special-token text left as text.
    let tokens = vocab.tokenize(&text, true, false);
    let params = PerplexityParams {
        n_ctx: args.ctx_size,
        n_batch: args.batch_size,
        bos: vocab.bos().filter(|_| vocab.add_bos()),
        n_threads: args.threads,
    };
    let mut out = crate::term::stdout();
    if !args.json {
        writeln!(
            out,
            "{} tokens, {} chunks of {}",
            tokens.len(),
            tokens.len() / args.ctx_size.max(1),
            args.ctx_size
        )?;
    }
    let result = perplexity(&model, &tokens, &params, |p| {
        if !args.json {
            let _ = write!(out, "[{}]{:.4},", p.chunks, p.ppl);
            let _ = out.flush();
        }
    })?;
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({"ppl": result.ppl, "chunks": result.chunks, "tokens": result.tokens})
        )?;
    } else {
        writeln!(out)?;
        writeln!(
            out,
            "Final estimate: PPL = {:.4} +/- {:.5}",
            result.ppl, result.error
        )?;
    }
    Ok(())
}
