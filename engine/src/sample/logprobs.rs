//! Log-probabilities of tokens under the model's own distribution: the log-softmax of the raw
//! logits, before any sampler, penalty or grammar (what Ollama reports as `logprobs`).

use super::steps::{select_top, Candidate};
use crate::{Error, Result, TokenId};

/// The most alternatives a request may ask for (Ollama's `top_logprobs` limit).
pub const MAX_TOP_LOGPROBS: usize = 20;

#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    pub token: TokenId,
    pub logprob: f32,
    /// The most likely tokens with their log-probabilities, most likely first.
    pub top: Vec<(TokenId, f32)>,
}

/// The log-normaliser of a logit row: `ln(sum(exp(l)))`, computed stably.
pub fn log_sum_exp(logits: &[f32]) -> f32 {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    if !max.is_finite() {
        return max;
    }
    // Eight independent f32 lanes vectorise; each lane sums at most n/8 terms no larger than 1,
    // and the lanes are added in f64.
    let mut lanes = [0f32; 8];
    let chunks = logits.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for (s, &x) in lanes.iter_mut().zip(c) {
            *s += (x - max).exp();
        }
    }
    let mut sum: f64 = lanes.iter().map(|&s| s as f64).sum();
    sum += tail.iter().map(|&x| ((x - max).exp()) as f64).sum::<f64>();
    max + sum.ln() as f32
}

/// The log-probability of `token` and of the `top_n` most likely tokens (0..=20).
pub fn token_logprobs(logits: &[f32], token: TokenId, top_n: usize) -> Result<TokenLogprobs> {
    if top_n > MAX_TOP_LOGPROBS {
        return Err(Error::InvalidArgument(format!(
            "top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}"
        )));
    }
    let Some(&l) = logits.get(token as usize) else {
        return Err(Error::InvalidArgument(format!(
            "token {token} is outside the vocabulary of {} tokens",
            logits.len()
        )));
    };
    let lse = log_sum_exp(logits);
    let mut top: Vec<Candidate> = Vec::with_capacity(top_n);
    select_top(logits, top_n, &mut top);
    Ok(TokenLogprobs {
        token,
        logprob: l - lse,
        top: top.iter().map(|c| (c.id, c.logit - lse)).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_logprobs() {
        let logits = [1.0f32, 3.0, 2.0, 3.0];
        let lse = (1f64.exp() + 2.0 * 3f64.exp() + 2f64.exp()).ln() as f32;
        let r = token_logprobs(&logits, 2, 3).unwrap();
        assert!((r.logprob - (2.0 - lse)).abs() < 1e-6);
        assert_eq!(r.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 3, 2]);
        assert!((r.top[0].1 - (3.0 - lse)).abs() < 1e-6);
        let total: f64 = logits.iter().map(|&l| ((l - lse) as f64).exp()).sum();
        assert!((total - 1.0).abs() < 1e-6);
    }

    #[test]
    fn zero_alternatives_and_bad_requests() {
        let logits = vec![0.0f32; 10];
        let r = token_logprobs(&logits, 0, 0).unwrap();
        assert!(r.top.is_empty());
        assert!((r.logprob - (0.1f32).ln()).abs() < 1e-6);
        assert!(token_logprobs(&logits, 10, 1).is_err());
        assert!(token_logprobs(&logits, 0, 21).is_err());
    }

    #[test]
    fn large_vocabulary_sums_to_one() {
        let logits: Vec<f32> = (0..262_144).map(|i| ((i * 7919) % 1000) as f32 / 50.0).collect();
        let lse = log_sum_exp(&logits);
        let total: f64 = logits.iter().map(|&l| ((l - lse) as f64).exp()).sum();
        assert!((total - 1.0).abs() < 1e-4, "{total}");
    }
}
