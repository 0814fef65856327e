//! `ollamars bench`: prompt-processing and generation speed of a model, by llama-bench's method.
//!
//! pp: one batch of `p` random tokens evaluated in one `decode` from an empty context (logits of
//! the last one only). tg: `n` tokens evaluated one at a time from an empty context, each
//! producing logits. One warm-up run of each, then `r` timed repetitions; tokens per second is
//! averaged over the repetitions (mean and sample standard deviation, as llama-bench reports).
//! With a depth `d` (llama-bench's `-d`), each test starts from a context that already holds `d`
//! random tokens, evaluated untimed: the speed at a long conversation's end, where attention
//! reads the whole KV cache.

use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::Args;
use engine::{Batch, Context, ContextParams, KvType, Model, ModelParams, Pos, TokenId};

#[derive(Args)]
pub struct BenchArgs {
    /// The GGUF model file.
    #[arg(short, long, value_name = "FILE")]
    model: PathBuf,
    /// Prompt tokens evaluated in one batch (0: skip the pp test).
    #[arg(short = 'p', long, default_value_t = 512)]
    n_prompt: usize,
    /// Tokens generated one at a time (0: skip the tg test).
    #[arg(short = 'n', long, default_value_t = 128)]
    n_gen: usize,
    /// Worker threads (0: one per CPU).
    #[arg(short, long, default_value_t = 0)]
    threads: usize,
    /// Timed repetitions of each test (after one warm-up run).
    #[arg(short, long, default_value_t = 5)]
    reps: usize,
    /// Tokens already in the context when each test starts (evaluated untimed).
    #[arg(short = 'd', long, default_value_t = 0)]
    n_depth: usize,
    /// Micro-batch size: tokens per forward pass within the pp batch.
    #[arg(short = 'b', long, default_value_t = 512)]
    batch_size: u32,
    /// KV cache type: f16 or q8_0 (llama-bench's `-ctk`/`-ctv`, both at once).
    #[arg(long, default_value = "f16", value_parser = super::generate::parse_kv_type)]
    cache_type: KvType,
    /// Print only {"pp_tps":..,"pp_std":..,"tg_tps":..,"tg_std":..,"read_bytes":..} (0 for a
    /// skipped test; read_bytes: tensor bytes one decoded token reads).
    #[arg(long)]
    json: bool,
}

/// Mean and sample standard deviation.
fn mean_std(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let std = if v.len() > 1 {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    (mean, std)
}

/// Random token ids (xorshift; the values do not matter for speed, only that they vary).
fn random_tokens(n: usize, n_vocab: usize, state: &mut u64) -> Vec<TokenId> {
    (0..n)
        .map(|_| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            (*state % n_vocab as u64) as TokenId
        })
        .collect()
}

/// Brings the context to `depth` random tokens (untimed). The previous test's tokens are
/// removed again when every layer still holds the first `depth` (then the cache is as the fill
/// left it); otherwise (a sliding-window layer forgot some, or nothing was filled yet) the cache
/// is emptied and filled anew.
fn at_depth(ctx: &mut Context, depth: usize, rng: &mut u64) -> anyhow::Result<()> {
    let d = depth as Pos;
    if depth > 0 && ctx.seq_pos_min(0) == Some(0) && ctx.seq_pos_max(0) >= Some(d - 1) {
        ctx.seq_rm(Some(0), d, -1);
        return Ok(());
    }
    ctx.clear();
    if depth > 0 {
        let tokens = random_tokens(depth, ctx.model().n_vocab(), rng);
        ctx.decode(&Batch::from_tokens(&tokens, 0, 0))?;
    }
    Ok(())
}

/// One pp run: seconds for a batch of `n` tokens after `depth`.
fn run_pp(ctx: &mut Context, depth: usize, n: usize, rng: &mut u64) -> anyhow::Result<f64> {
    at_depth(ctx, depth, rng)?;
    let tokens = random_tokens(n, ctx.model().n_vocab(), rng);
    let batch = Batch::from_tokens(&tokens, depth as Pos, 0);
    let t = Instant::now();
    ctx.decode(&batch)?;
    Ok(t.elapsed().as_secs_f64())
}

/// One tg run: seconds for `n` single-token decodes after `depth`.
fn run_tg(ctx: &mut Context, depth: usize, n: usize, rng: &mut u64) -> anyhow::Result<f64> {
    at_depth(ctx, depth, rng)?;
    let tokens = random_tokens(n, ctx.model().n_vocab(), rng);
    let t = Instant::now();
    for (i, &tok) in tokens.iter().enumerate() {
        ctx.decode(&Batch::from_tokens(&[tok], (depth + i) as Pos, 0))?;
    }
    Ok(t.elapsed().as_secs_f64())
}

pub fn run(args: BenchArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    if args.reps == 0 {
        bail!("--reps must be at least 1");
    }
    if args.n_prompt == 0 && args.n_gen == 0 {
        bail!("nothing to measure: -p and -n are both 0");
    }
    let model = Model::load(&args.model, &ModelParams::default())
        .with_context(|| format!("loading {}", args.model.display()))?;
    let read_bytes = model.decode_read_bytes();
    // Positions are `Pos` (i32): the depth and the longest test must fit in one.
    let n_ctx = Pos::try_from(args.n_depth.saturating_add(args.n_prompt.max(args.n_gen).max(1)))
        .context("--n-depth plus the longest test is too many tokens")? as u32;
    let mut ctx = Context::new(
        model,
        ContextParams {
            n_ctx,
            n_batch: args.batch_size,
            n_seq_max: 1,
            kv_type: args.cache_type,
            n_threads: args.threads,
            embeddings: false,
            kv_unified: false,
        },
    )?;
    // Time to first token: from the start of the command (model load included) to the logits of
    // one token.
    ctx.decode(&Batch::from_tokens(&[0], 0, 0))?;
    let first_token = start.elapsed().as_secs_f64();
    // The speeds are the steady state's, after the load's background work (under a second).
    ctx.model().wait_for_huge_pages();
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut pp = Vec::new();
    if args.n_prompt > 0 {
        run_pp(&mut ctx, args.n_depth, args.n_prompt, &mut rng)?;
        for _ in 0..args.reps {
            pp.push(args.n_prompt as f64 / run_pp(&mut ctx, args.n_depth, args.n_prompt, &mut rng)?);
        }
    }
    let mut tg = Vec::new();
    if args.n_gen > 0 {
        run_tg(&mut ctx, args.n_depth, 1, &mut rng)?;
        for _ in 0..args.reps {
            tg.push(args.n_gen as f64 / run_tg(&mut ctx, args.n_depth, args.n_gen, &mut rng)?);
        }
    }
    let (pp_tps, pp_std) = mean_std(&pp);
    let (tg_tps, tg_std) = mean_std(&tg);
    let mut out = crate::term::stdout();
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "pp_tps": pp_tps, "pp_std": pp_std, "tg_tps": tg_tps, "tg_std": tg_std,
                "read_bytes": read_bytes,
            })
        )?;
        return Ok(());
    }
    let threads = if args.threads == 0 {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    } else {
        args.threads
    };
    writeln!(
        out,
        "{}: {} threads, kernels {}, first token after {:.3} s",
        args.model.display(),
        threads,
        engine::kernels::Isa::active(),
        first_token
    )?;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let file = std::fs::metadata(&args.model).map_or(0, |m| m.len());
    writeln!(
        out,
        "memory: peak RSS {}, file {:.1} MiB, KV cache {:.1} MiB",
        peak_rss().map_or("unknown".to_string(), |b| format!("{:.1} MiB", mib(b))),
        mib(file),
        mib(ctx.kv_size_bytes() as u64)
    )?;
    // llama-bench's test names: "pp512", "tg128 @ d4096".
    let name = |test: &str, n: usize| match args.n_depth {
        0 => format!("{test}{n}"),
        d => format!("{test}{n} @ d{d}"),
    };
    if args.n_prompt > 0 {
        writeln!(
            out,
            "{:<8} {pp_tps:10.2} ± {pp_std:.2} t/s",
            name("pp", args.n_prompt)
        )?;
    }
    if args.n_gen > 0 {
        writeln!(
            out,
            "{:<8} {tg_tps:10.2} ± {tg_std:.2} t/s ({:.1} MiB of weights read per token: {:.1} GB/s)",
            name("tg", args.n_gen),
            mib(read_bytes),
            read_bytes as f64 * tg_tps / 1e9
        )?;
    }
    Ok(())
}

/// This process's peak resident set size in bytes (`VmHWM`, Linux only).
fn peak_rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_sample_std() {
        assert_eq!(mean_std(&[]), (0.0, 0.0));
        assert_eq!(mean_std(&[3.0]), (3.0, 0.0));
        let (m, s) = mean_std(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!(m, 5.0);
        assert!((s - (32.0f64 / 7.0).sqrt()).abs() < 1e-12);
    }

    #[test]
    fn random_tokens_stay_in_the_vocabulary_and_vary() {
        let mut s = 1;
        let t = random_tokens(1000, 37, &mut s);
        assert!(t.iter().all(|&x| x < 37));
        assert!(t.iter().collect::<std::collections::HashSet<_>>().len() > 20);
    }
}
