//! `ollamars generate`: run a model on a prompt directly, without the daemon, streaming the text.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context as _;
use clap::Args;
use engine::generate::{argmax, generate, GenerateParams};
use engine::sample::{Sampler, SamplingOptions};
use engine::tokenizer::Detokenizer;
use engine::{Context, ContextParams, KvType, Model, ModelParams};

#[derive(Args)]
pub struct GenerateArgs {
    /// The GGUF model file.
    #[arg(short, long, value_name = "FILE")]
    model: PathBuf,
    /// The prompt (raw text: no chat template is applied).
    #[arg(short, long)]
    prompt: String,
    /// Most tokens to generate.
    #[arg(short = 'n', long, default_value_t = 128)]
    n_predict: usize,
    /// Sampling temperature; 0 picks the most likely token every time (greedy).
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    /// Random seed for sampling (with --temp > 0).
    #[arg(long, default_value_t = -1)]
    seed: i64,
    /// Context size in tokens; when it fills up, the context is shifted and generation goes on.
    #[arg(short = 'c', long, default_value_t = 4096)]
    ctx_size: u32,
    /// Tokens evaluated per forward pass.
    #[arg(short = 'b', long, default_value_t = 512)]
    batch_size: u32,
    /// Tokens at the start that a context shift keeps.
    #[arg(long, default_value_t = 4)]
    keep: usize,
    /// KV cache type: f16 or q8_0.
    #[arg(long, default_value = "f16", value_parser = parse_kv_type)]
    cache_type: KvType,
    /// Worker threads (0: one per CPU).
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
    /// Print timings to standard error at the end.
    #[arg(long)]
    verbose: bool,
}

pub(super) fn parse_kv_type(s: &str) -> Result<KvType, String> {
    KvType::from_name(s).ok_or_else(|| format!("unknown cache type '{s}' (f16 or q8_0)"))
}

pub fn run(args: GenerateArgs) -> anyhow::Result<()> {
    let t_load = Instant::now();
    let model = Model::load(&args.model, &ModelParams::default())
        .with_context(|| format!("loading {}", args.model.display()))?;
    let vocab = model
        .vocab()
        .with_context(|| format!("reading the tokenizer of {}", args.model.display()))?;
    let mut ctx = Context::new(
        model.clone(),
        ContextParams {
            n_ctx: args.ctx_size,
            n_batch: args.batch_size,
            kv_type: args.cache_type,
            n_threads: args.threads,
            ..Default::default()
        },
    )?;
    let load_time = t_load.elapsed();
    let prompt = vocab.tokenize(&args.prompt, true, true);
    if prompt.is_empty() {
        anyhow::bail!("the prompt is empty and the model adds no BOS token");
    }
    let mut sampler = if args.temp > 0.0 {
        let opts = SamplingOptions {
            temperature: args.temp,
            seed: args.seed,
            ..SamplingOptions::default()
        };
        opts.validate()?;
        let mut s = Sampler::new(&opts, model.n_vocab(), args.ctx_size as usize)?;
        s.accept_prompt(&prompt);
        Some(s)
    } else {
        None
    };
    let params = GenerateParams {
        n_predict: args.n_predict,
        n_keep: args.keep,
        seq: 0,
    };

    let mut out = crate::term::stdout();
    let mut detok = Detokenizer::new(&vocab, false);
    let mut io_error = None;
    let t_gen = Instant::now();
    let mut t_first = None;
    let tokens = generate(
        &mut ctx,
        &prompt,
        &params,
        |logits| match &mut sampler {
            Some(s) => {
                let t = s.sample(logits)?;
                s.accept(t)?;
                Ok(t)
            }
            None => Ok(argmax(logits)),
        },
        |tok| {
            t_first.get_or_insert_with(Instant::now);
            if vocab.is_eog(tok) {
                return false;
            }
            let text = detok.push(tok);
            if let Err(e) = out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
                io_error = Some(e);
                return false;
            }
            true
        },
    )?;
    if let Some(e) = io_error {
        return Err(e).context("writing to standard output");
    }
    let rest = detok.finish();
    writeln!(out, "{rest}")?;
    if args.verbose {
        let total = t_gen.elapsed();
        let first = t_first.map_or(total, |t| t - t_gen);
        let n_gen = tokens.len().saturating_sub(1).max(1);
        eprintln!(
            "load {:.2} s, prompt {} tokens in {:.2} s ({:.1} t/s), generated {} tokens ({:.1} t/s)",
            load_time.as_secs_f64(),
            prompt.len(),
            first.as_secs_f64(),
            prompt.len() as f64 / first.as_secs_f64(),
            tokens.len(),
            n_gen as f64 / (total - first).as_secs_f64().max(1e-9),
        );
    }
    Ok(())
}
