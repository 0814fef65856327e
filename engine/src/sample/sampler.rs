//! The sampler: options, the chain's state (penalty window, random generator, Mirostat's mu) and
//! the per-token `sample` / `accept` cycle.

use super::options::SamplingOptions;
use super::penalties::Penalties;
use super::rng::Mt19937;
use super::steps::{self, Candidate, Candidates};
use crate::grammar::{Matcher, TokenMask};
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
    grammar: Option<Constraint>,
}

/// A grammar the output must follow, with its buffers.
struct Constraint {
    matcher: Matcher,
    mask: TokenMask,
    ranked: Vec<Candidate>,
    gate: GrammarGate,
}

/// Whether the grammar constrains the next token. A grammar constrains a reply's content: while
/// a model thinks it waits (see the runner, which sets the gate from the reply's phase).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrammarGate {
    On,
    /// The next token is free and does not move the grammar.
    Paused,
    /// The grammar's tokens, or this one (a thinking model's opening tag), which does not move
    /// the grammar.
    OnOrExempt(TokenId),
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
            grammar: None,
        })
    }

    /// Constrains every sampled token to `matcher`'s grammar (structured output, `grammar`).
    /// The grammar comes first in the chain, as in llama.cpp: the other samplers only see the
    /// tokens it allows, and every pick keeps the output inside the grammar.
    pub fn with_grammar(mut self, matcher: Matcher) -> Result<Self> {
        if matcher.vocab().n_tokens() != self.n_vocab {
            return Err(Error::InvalidArgument(format!(
                "grammar vocabulary has {} tokens, the model {}",
                matcher.vocab().n_tokens(),
                self.n_vocab
            )));
        }
        self.grammar = Some(Constraint {
            mask: TokenMask::new(self.n_vocab),
            matcher,
            ranked: Vec::new(),
            gate: GrammarGate::On,
        });
        Ok(self)
    }

    /// Sets how the grammar (if any) applies to the next token.
    pub fn gate_grammar(&mut self, gate: GrammarGate) {
        if let Some(c) = &mut self.grammar {
            c.gate = gate;
        }
    }

    /// Moves the grammar (if any) past `text` that was generated while it was paused: the part
    /// of the token that ended a model's thinking after its closing tag.
    pub fn grammar_accept_text(&mut self, text: &str) -> Result<()> {
        if let Some(c) = &mut self.grammar {
            c.matcher.accept_bytes(text.as_bytes())?;
        }
        Ok(())
    }

    /// The grammar's matcher, if the output is constrained.
    pub fn grammar(&self) -> Option<&Matcher> {
        self.grammar.as_ref().map(|c| &c.matcher)
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

    /// Records a generated token: it now counts for the penalties, and the grammar (if any)
    /// moves past it (an error if the grammar does not allow it).
    pub fn accept(&mut self, token: TokenId) -> Result<()> {
        self.check_token(token)?;
        if let Some(c) = &mut self.grammar {
            let exempt = match c.gate {
                GrammarGate::On => false,
                GrammarGate::Paused => true,
                GrammarGate::OnOrExempt(t) => t == token,
            };
            if !exempt {
                c.matcher.accept(token)?;
            }
        }
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
        let picked = match &mut self.grammar {
            None
            | Some(Constraint {
                gate: GrammarGate::Paused,
                ..
            }) => run_chain(
                &self.opts,
                logits,
                &mut self.cands,
                &mut self.rng,
                &mut self.mirostat_mu,
            ),
            Some(c) => {
                constrained_candidates(&self.opts, logits, c, &mut self.cands);
                if let GrammarGate::OnOrExempt(t) = c.gate {
                    add_candidate(&self.opts, logits, t, &mut self.cands);
                }
                if self.cands.data.is_empty() {
                    let why = if c.matcher.too_ambiguous() {
                        format!(
                            "the grammar allows no token here: it is too ambiguous (more than {} ways to parse the text so far)",
                            crate::grammar::MAX_STACKS
                        )
                    } else {
                        "the grammar allows no token here".to_string()
                    };
                    return Err(Error::InvalidArgument(why));
                }
                finish_chain(
                    &self.opts,
                    &mut self.cands,
                    &mut self.rng,
                    &mut self.mirostat_mu,
                    logits.len(),
                )
            }
        };
        picked.ok_or_else(|| Error::InvalidArgument("no token can be sampled".into()))
    }
}

/// The candidates the chain starts from under a grammar: the grammar's allowed tokens, cut to
/// the best `k` when the chain can only pick among the best `k` anyway.
///
/// Masking the whole vocabulary and then taking the top k gives the same set as checking tokens
/// one by one from the most likely down until k are allowed. The second is what runs first: the
/// best tokens are usually allowed, so a handful of checks replaces a mask over 262k tokens. Only
/// when the grammar rejects most of the best tokens (then it allows few, and the trie walk that
/// computes the mask prunes early) is the full mask computed.
fn constrained_candidates(opts: &SamplingOptions, logits: &[f32], c: &mut Constraint, out: &mut Candidates) {
    out.data.clear();
    let n = logits.len();
    if let Some(k) = candidate_limit(opts) {
        let mut examined = 0;
        for batch in [(2 * k).max(64), (16 * k).max(1024)] {
            let batch = batch.min(n);
            if batch <= examined {
                continue;
            }
            steps::select_top(logits, batch, &mut c.ranked);
            for cand in &c.ranked[examined..] {
                if c.matcher.allows(cand.id) {
                    out.data.push(*cand);
                    if out.data.len() == k {
                        break;
                    }
                }
            }
            examined = batch;
            if out.data.len() == k || examined == n {
                out.sorted = true;
                return;
            }
            // The grammar rejects nearly everything the model wants: it allows few tokens, and
            // the mask, which prunes at the first byte, is cheaper than checking more.
            if out.data.len() * 8 < examined {
                break;
            }
        }
        out.data.clear();
        c.matcher.fill_mask(&mut c.mask);
        allowed_candidates(logits, &c.mask, &mut out.data);
        steps::keep_top_sorted(&mut out.data, k);
        out.sorted = true;
        return;
    }
    c.matcher.fill_mask(&mut c.mask);
    allowed_candidates(logits, &c.mask, &mut out.data);
    out.sorted = false;
}

/// Adds token `t` to the candidates a grammar allowed, keeping them the best `k` when the chain
/// can only pick among those.
fn add_candidate(opts: &SamplingOptions, logits: &[f32], t: TokenId, out: &mut Candidates) {
    let Some(&logit) = logits.get(t as usize) else {
        return;
    };
    if out.data.iter().any(|c| c.id == t) {
        return;
    }
    out.data.push(Candidate { id: t, logit, p: 0.0 });
    match candidate_limit(opts) {
        Some(k) => {
            steps::keep_top_sorted(&mut out.data, k);
            out.sorted = true;
        }
        None => out.sorted = false,
    }
}

fn allowed_candidates(logits: &[f32], mask: &TokenMask, out: &mut Vec<Candidate>) {
    out.clear();
    out.extend(mask.iter().map(|id| Candidate {
        id,
        logit: logits[id as usize],
        p: 0.0,
    }));
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
