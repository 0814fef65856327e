//! Perplexity by llama.cpp's `llama-perplexity` method: the tokens are cut into non-overlapping
//! chunks of `n_ctx`, each evaluated from an empty cache with its first token replaced by BOS (when
//! the vocabulary adds one), and the second half of each chunk is scored (so every scored token
//! has at least `n_ctx / 2` tokens of context). The error estimate is llama.cpp's: the standard
//! error of the mean negative log-likelihood, carried to the perplexity.

use std::sync::Arc;

use crate::batch::Batch;
use crate::context::{Context, ContextParams};
use crate::model::Model;
use crate::{Error, Result, TokenId};

#[derive(Clone, Debug)]
pub struct PerplexityParams {
    pub n_ctx: usize,
    pub n_batch: usize,
    /// Put at the start of every chunk (`None` if the vocabulary adds no BOS).
    pub bos: Option<TokenId>,
    pub n_threads: usize,
}

/// Where a perplexity run stands after a chunk, and at the end.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Perplexity {
    pub ppl: f64,
    /// llama.cpp's `+/-` figure.
    pub error: f64,
    pub chunks: usize,
    /// Tokens scored.
    pub tokens: usize,
}

struct Accumulator {
    nll: f64,
    nll2: f64,
    count: usize,
}

impl Accumulator {
    fn add(&mut self, logits: &[f32], tok: TokenId) {
        // llama.cpp's `log_softmax`: max in f32, sum of f32 exponentials in f64.
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = logits.iter().map(|&l| f64::from((l - max).exp())).sum();
        let logprob = f64::from(logits[tok as usize] - max) - sum.ln();
        self.nll -= logprob;
        self.nll2 += logprob * logprob;
        self.count += 1;
    }

    fn result(&self, chunks: usize) -> Perplexity {
        let n = self.count as f64;
        let mean = self.nll / n;
        let ppl = mean.exp();
        let var = self.nll2 / n - mean * mean;
        let error = if var > 0.0 && self.count > 1 {
            (var / (n - 1.0)).sqrt() * ppl
        } else {
            0.0
        };
        Perplexity {
            ppl,
            error,
            chunks,
            tokens: self.count,
        }
    }
}

/// Computes the perplexity of `tokens`, calling `on_chunk` with the running figure after each
/// chunk. Needs at least two chunks' worth of tokens, as llama.cpp does.
pub fn perplexity(
    model: &Arc<Model>,
    tokens: &[TokenId],
    params: &PerplexityParams,
    mut on_chunk: impl FnMut(&Perplexity),
) -> Result<Perplexity> {
    let n_ctx = params.n_ctx;
    if n_ctx < 4 {
        return Err(Error::InvalidArgument(format!(
            "context of {n_ctx} tokens is too small"
        )));
    }
    if tokens.len() < 2 * n_ctx {
        return Err(Error::InvalidArgument(format!(
            "{} tokens: perplexity with a context of {n_ctx} needs at least {}",
            tokens.len(),
            2 * n_ctx
        )));
    }
    let mut ctx = Context::new(
        model.clone(),
        ContextParams {
            n_ctx: n_ctx as u32,
            n_batch: params.n_batch.min(n_ctx) as u32,
            n_seq_max: 1,
            n_threads: params.n_threads,
            ..Default::default()
        },
    )?;
    let n_chunks = tokens.len() / n_ctx;
    let first = n_ctx / 2;
    let mut acc = Accumulator {
        nll: 0.0,
        nll2: 0.0,
        count: 0,
    };
    let mut last = None;
    for c in 0..n_chunks {
        let chunk = &tokens[c * n_ctx..(c + 1) * n_ctx];
        ctx.clear();
        let mut batch = Batch::with_capacity(n_ctx);
        for (i, &t) in chunk.iter().enumerate() {
            let t = if i == 0 { params.bos.unwrap_or(t) } else { t };
            batch.add(t, i as i32, 0, i >= first);
        }
        ctx.decode(&batch)?;
        for i in first..n_ctx - 1 {
            let logits = ctx.logits(i).expect("logits were asked for");
            acc.add(logits, chunk[i + 1]);
        }
        let p = acc.result(c + 1);
        on_chunk(&p);
        last = Some(p);
    }
    Ok(last.expect("at least two chunks"))
}
