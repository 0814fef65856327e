//! Sampling options: Ollama's names and defaults, checked once before generation starts.

use crate::{Error, Result};

/// How to pick each next token. Field names and defaults are Ollama's (`api/types.go:
/// DefaultOptions`); the meaning of each is llama.cpp's sampler of the same name.
///
/// Ollama also accepts options it no longer implements (`penalize_newline`, `tfs_z`, `numa`,
/// `low_vram`, ...): llama.cpp dropped those samplers, so they have no field here and a caller
/// that receives them drops them. `mirostat`, `mirostat_tau` and `mirostat_eta` were removed from
/// Ollama's documentation too, but llama.cpp still implements them and so do we.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingOptions {
    /// Divides the logits after the filters; 0 (or less) picks the most likely token (greedy).
    pub temperature: f32,
    /// Keep the `top_k` most likely tokens; 0 or less keeps all.
    pub top_k: i32,
    /// Keep the smallest set of most likely tokens whose probabilities add up to `top_p`; 1 is off.
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one; 0 is off.
    pub min_p: f32,
    /// Locally typical sampling; 1 is off.
    pub typical_p: f32,
    /// How many of the last tokens the penalties look at: 0 off, -1 the whole context.
    pub repeat_last_n: i32,
    /// Divides positive (multiplies negative) logits of recently seen tokens; 1 is off.
    pub repeat_penalty: f32,
    /// Subtracted once from the logit of every recently seen token.
    pub presence_penalty: f32,
    /// Subtracted from the logit of a recently seen token once per occurrence.
    pub frequency_penalty: f32,
    /// The random seed; -1 picks a new random seed for every generation.
    pub seed: i64,
    /// 0 off, 1 Mirostat, 2 Mirostat 2.0. Replaces top-k/top-p/min-p/typical when on.
    pub mirostat: i32,
    /// Mirostat's target surprise (tau).
    pub mirostat_tau: f32,
    /// Mirostat's learning rate (eta).
    pub mirostat_eta: f32,
}

impl Default for SamplingOptions {
    fn default() -> Self {
        SamplingOptions {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.0,
            typical_p: 1.0,
            repeat_last_n: 64,
            repeat_penalty: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            seed: -1,
            mirostat: 0,
            mirostat_tau: 5.0,
            mirostat_eta: 0.1,
        }
    }
}

impl SamplingOptions {
    /// Greedy decoding: always the most likely token.
    pub fn greedy() -> Self {
        SamplingOptions {
            temperature: 0.0,
            ..Self::default()
        }
    }

    /// Rejects values llama.cpp's server rejects (or would abort on), with a message a user can
    /// act on.
    pub fn validate(&self) -> Result<()> {
        let finite = [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("typical_p", self.typical_p),
            ("repeat_penalty", self.repeat_penalty),
            ("presence_penalty", self.presence_penalty),
            ("frequency_penalty", self.frequency_penalty),
            ("mirostat_tau", self.mirostat_tau),
            ("mirostat_eta", self.mirostat_eta),
        ];
        for (name, v) in finite {
            if !v.is_finite() {
                return Err(Error::InvalidArgument(format!(
                    "option \"{name}\" must be a finite number"
                )));
            }
        }
        if self.repeat_last_n < -1 {
            return Err(Error::InvalidArgument(
                "option \"repeat_last_n\" must be -1 (whole context), 0 (off) or positive".into(),
            ));
        }
        if !(0..=2).contains(&self.mirostat) {
            return Err(Error::InvalidArgument(
                "option \"mirostat\" must be 0 (off), 1 or 2".into(),
            ));
        }
        Ok(())
    }

    /// The window of the penalties in tokens, with -1 resolved to the context size.
    pub(crate) fn penalty_window(&self, num_ctx: usize) -> usize {
        match self.repeat_last_n {
            -1 => num_ctx,
            n => n.max(0) as usize,
        }
    }

    /// The seed the random generator starts from: `seed` itself (truncated to 32 bits, as llama.cpp
    /// takes it), or a fresh random one for -1 (and for llama.cpp's own "random" value, 2^32 - 1).
    pub(crate) fn resolved_seed(&self) -> u32 {
        let s = self.seed as u32;
        if self.seed == -1 || s == u32::MAX {
            super::rng::random_seed()
        } else {
            s
        }
    }
}
