//! Generation over a context: the prompt is evaluated in chunks, then a token is picked from the
//! logits at every step (the most likely one for greedy decoding, or by a sampler). When a
//! sequence reaches its context limit, the context is shifted ([`Context::make_room`]) so that
//! long prompts and long generations go on.
//!
//! [`runner`] is the serving loop: many requests on one context with continuous batching.

pub mod runner;

use crate::batch::Batch;
use crate::context::Context;
use crate::kv::{Pos, SeqId};
use crate::{Error, Result, TokenId};

#[derive(Clone, Debug)]
pub struct GenerateParams {
    /// Most tokens to generate.
    pub n_predict: usize,
    /// Tokens at the start of the sequence that a context shift keeps (e.g. the BOS token or a
    /// system prompt); Ollama's `num_keep`.
    pub n_keep: usize,
    pub seq: SeqId,
}

impl Default for GenerateParams {
    fn default() -> Self {
        GenerateParams {
            n_predict: 128,
            n_keep: 4,
            seq: 0,
        }
    }
}

/// The index of the largest value (the first one on ties).
pub fn argmax(logits: &[f32]) -> TokenId {
    let mut best = 0;
    for (i, &v) in logits.iter().enumerate() {
        if v > logits[best] {
            best = i;
        }
    }
    best as TokenId
}

/// Appends `tokens` to sequence `seq`, shifting the context whenever it fills up, with logits
/// for the last token. Returns the batch index of the last token in the final decode.
pub fn eval_tokens(ctx: &mut Context, seq: SeqId, tokens: &[TokenId], n_keep: usize) -> Result<usize> {
    if tokens.is_empty() {
        return Err(Error::InvalidArgument("nothing to evaluate".into()));
    }
    let n_ctx = ctx.n_ctx_seq() as usize;
    let n_keep = n_keep.min(n_ctx / 2);
    // Chunks no larger than half of what a shift frees, so one shift always makes room.
    let chunk = (ctx.n_batch() as usize).min(((n_ctx - n_keep) / 2).max(1));
    let mut last = 0;
    for part in tokens.chunks(chunk) {
        ctx.make_room(seq, n_keep, part.len(), n_ctx)?;
        let pos0 = ctx.seq_pos_max(seq).map_or(0, |p| p + 1);
        ctx.decode(&Batch::from_tokens(part, pos0 as Pos, seq))?;
        last = part.len() - 1;
    }
    Ok(last)
}

/// Evaluates `prompt` and generates greedily, calling `on_token` with each new token; stops
/// after `n_predict` tokens or when `on_token` returns `false` (e.g. at an end-of-generation
/// token). Returns the generated tokens.
pub fn generate_greedy(
    ctx: &mut Context,
    prompt: &[TokenId],
    params: &GenerateParams,
    on_token: impl FnMut(TokenId) -> bool,
) -> Result<Vec<TokenId>> {
    generate(ctx, prompt, params, |logits| Ok(argmax(logits)), on_token)
}

/// Evaluates `prompt` and generates, picking each token from the logits with `pick`; otherwise
/// as [`generate_greedy`].
pub fn generate(
    ctx: &mut Context,
    prompt: &[TokenId],
    params: &GenerateParams,
    mut pick: impl FnMut(&[f32]) -> Result<TokenId>,
    mut on_token: impl FnMut(TokenId) -> bool,
) -> Result<Vec<TokenId>> {
    let seq = params.seq;
    let mut idx = eval_tokens(ctx, seq, prompt, params.n_keep)?;
    let mut out = Vec::new();
    while out.len() < params.n_predict {
        let logits = ctx
            .logits(idx)
            .ok_or_else(|| Error::InvalidArgument("no logits for the last token".into()))?;
        let tok = pick(logits)?;
        out.push(tok);
        if !on_token(tok) || out.len() == params.n_predict {
            break;
        }
        idx = eval_tokens(ctx, seq, &[tok], params.n_keep)?;
    }
    Ok(out)
}
