//! The sampler: options, the chain's state (penalty window, random generator, Mirostat's mu) and
//! the per-token `sample` / `accept` cycle.

use super::options::SamplingOptions;
use super::penalties::Penalties;
use super::rng::Mt19937;
use super::steps::{self, Candidates};
use crate::{Error, Result, TokenId};

/// Picks tokens from logits. One per generation: it remembers what was generated (penalties) and
/// carries the random generator from token to token.
pub struct Sampler {
    opts: SamplingOptions,
    seed: u32,
    rng: Mt19937,
    penalties: Penalties,
    mirostat_mu: f32,
    n_vocab: usize,
    /// Penalised copy of the logits, when penalties are on.
    scratch: Vec<f32>,
    cands: Candidates,
}

impl Sampler {
    /// A sampler for a vocabulary of `n_vocab` tokens; `num_ctx` resolves `repeat_last_n = -1`.
    pub fn new(opts: &SamplingOptions, n_vocab: usize, num_ctx: usize) -> Result<Self> {
        opts.validate()?;
        if n_vocab == 0 {
            return Err(Error::InvalidArgument("empty vocabulary".into()));
        }
        let seed = opts.resolved_seed();
        Ok(Sampler {
            opts: opts.clone(),
            seed,
            rng: Mt19937::new(seed),
            penalties: Penalties::new(
                opts.penalty_window(num_ctx),
                opts.repeat_penalty,
                opts.frequency_penalty,
                opts.presence_penalty,
            ),
            mirostat_mu: 2.0 * opts.mirostat_tau,
            n_vocab,
            scratch: Vec::new(),
            cands: Candidates::default(),
        })
    }

    /// The seed actually in use (the random one, when the options asked for -1).
    pub fn seed(&self) -> u32 {
        self.seed
    }

    pub fn options(&self) -> &SamplingOptions {
        &self.opts
    }

    /// Feeds prompt tokens to the penalty window (as llama.cpp does), without sampling them.
    pub fn accept_prompt(&mut self, tokens: &[TokenId]) {
        for &t in tokens {
            self.penalties.accept(t);
        }
    }

    /// Records a generated token: it now counts for the penalties.
    pub fn accept(&mut self, token: TokenId) -> Result<()> {
        self.check_token(token)?;
        self.penalties.accept(token);
        Ok(())
    }

    fn check_token(&self, token: TokenId) -> Result<()> {
        if (token as usize) < self.n_vocab {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "token {token} is outside the vocabulary of {} tokens",
                self.n_vocab
            )))
        }
    }

    /// Picks the next token from one row of logits (one per vocabulary entry). Call
    /// [`accept`](Self::accept) with the token that is actually used.
    pub fn sample(&mut self, logits: &[f32]) -> Result<TokenId> {
        if logits.len() != self.n_vocab {
            return Err(Error::InvalidArgument(format!(
                "{} logits for a vocabulary of {} tokens",
                logits.len(),
                self.n_vocab
            )));
        }
        let logits = if self.penalties.active() {
            self.scratch.clear();
            self.scratch.extend_from_slice(logits);
            self.penalties.apply(&mut self.scratch);
            &self.scratch[..]
        } else {
            logits
        };
        let picked = run_chain(
            &self.opts,
            logits,
            &mut self.cands,
            &mut self.rng,
            &mut self.mirostat_mu,
        );
        picked.ok_or_else(|| Error::InvalidArgument("no token can be sampled".into()))
    }
}

/// How many of the best tokens the chain can possibly pick from, when that is known before
/// looking at the probabilities: top-k, or 1 for greedy decoding (top-p and min-p always keep the
/// best token). `None` means every token is a candidate.
pub(crate) fn candidate_limit(opts: &SamplingOptions) -> Option<usize> {
    if opts.mirostat != 0 {
        None
    } else if opts.top_k > 0 {
        Some(opts.top_k as usize)
    } else if opts.temperature <= 0.0 && opts.typical_p >= 1.0 {
        Some(1)
    } else {
        None
    }
}

/// The chain after the penalties, from (penalised) logits to a token.
fn run_chain(
    opts: &SamplingOptions,
    logits: &[f32],
    cands: &mut Candidates,
    rng: &mut Mt19937,
    mu: &mut f32,
) -> Option<TokenId> {
    match candidate_limit(opts) {
        Some(k) => {
            steps::select_top(logits, k, &mut cands.data);
            cands.sorted = true;
        }
        None => {
            steps::all_candidates(logits, true, &mut cands.data);
            cands.sorted = false;
        }
    }
    finish_chain(opts, cands, rng, mu, logits.len())
}

/// The chain from the candidate list (already cut to top-k when top-k is on) to a token.
pub(crate) fn finish_chain(
    opts: &SamplingOptions,
    c: &mut Candidates,
    rng: &mut Mt19937,
    mu: &mut f32,
    n_vocab: usize,
) -> Option<TokenId> {
    const MIN_KEEP: usize = 0;
    let idx = match opts.mirostat {
        1 => {
            steps::temperature(c, opts.temperature);
            steps::mirostat_v1(c, rng, mu, opts.mirostat_tau, opts.mirostat_eta, n_vocab)
        }
        2 => {
            steps::temperature(c, opts.temperature);
            steps::mirostat_v2(c, rng, mu, opts.mirostat_tau, opts.mirostat_eta)
        }
        _ => {
            steps::top_k(c, opts.top_k);
            steps::typical(c, opts.typical_p, MIN_KEEP);
            steps::top_p(c, opts.top_p, MIN_KEEP);
            steps::min_p(c, opts.min_p, MIN_KEEP);
            steps::temperature(c, opts.temperature);
            steps::dist(c, rng)
        }
    }?;
    Some(c.data[idx].id)
}
