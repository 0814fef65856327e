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
    // Sixteen independent lanes of a branch-free exp vectorise; each lane sums at most n/16
    // terms no larger than 1, and the lanes are added in f64.
    const LANES: usize = 16;
    let mut lanes = [0f32; LANES];
    let chunks = logits.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (s, &x) in lanes.iter_mut().zip(c) {
            *s += exp_nonpositive(x - max);
        }
    }
    let mut sum: f64 = lanes.iter().map(|&s| s as f64).sum();
    sum += tail.iter().map(|&x| exp_nonpositive(x - max) as f64).sum::<f64>();
    max + sum.ln() as f32
}

/// `exp(x)` for `x <= 0` without branches or calls, so loops over it vectorise: `x = n ln 2 + r`
/// with `|r| <= ln 2 / 2`, a degree-6 polynomial for `e^r`, and `2^n` built in the exponent bits.
/// Within 4 ulp of `f32::exp`; 0 below -87 (where `e^x` is subnormal) and for NaN.
#[inline]
fn exp_nonpositive(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    let xc = x.max(-87.0);
    // Round to nearest by adding and removing 1.5 * 2^23 (`round` is a libm call without SSE4.1,
    // and a call would stop the loop from vectorising).
    const MAGIC: f32 = 12_582_912.0;
    let n = (xc * LOG2E + MAGIC) - MAGIC;
    let r = (xc - n * LN2_HI) - n * LN2_LO;
    let p = 1.0
        + r * (1.0 + r * (0.5 + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    // x < -87 and NaN (max(NaN, -87) is -87, but NaN compares false) give 0.
    if x >= -87.0 {
        p * scale
    } else {
        0.0
    }
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
    fn fast_exp_is_within_four_ulp() {
        let mut x = 0.0f32;
        while x > -87.0 {
            let want = x.exp();
            let got = exp_nonpositive(x);
            let ulp = (want.to_bits() as i64 - got.to_bits() as i64).abs();
            assert!(ulp <= 4, "exp({x}) = {want}, got {got}");
            x -= 0.0137;
        }
        assert_eq!(exp_nonpositive(0.0), 1.0);
        assert_eq!(exp_nonpositive(-100.0), 0.0);
        assert_eq!(exp_nonpositive(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_nonpositive(f32::NAN), 0.0);
    }

    #[test]
    fn large_vocabulary_sums_to_one() {
        let logits: Vec<f32> = (0..262_144).map(|i| ((i * 7919) % 1000) as f32 / 50.0).collect();
        let lse = log_sum_exp(&logits);
        let total: f64 = logits.iter().map(|&l| ((l - lse) as f64).exp()).sum();
        assert!((total - 1.0).abs() < 1e-4, "{total}");
    }
}
