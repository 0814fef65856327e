//! Repetition, frequency and presence penalties over the last `repeat_last_n` tokens
//! (`llama_sampler_penalties`).

use std::collections::{HashMap, VecDeque};

use crate::TokenId;

#[derive(Clone, Debug)]
pub struct Penalties {
    window: usize,
    repeat: f32,
    frequency: f32,
    presence: f32,
    last: VecDeque<TokenId>,
    counts: HashMap<TokenId, u32>,
}

impl Penalties {
    pub fn new(window: usize, repeat: f32, frequency: f32, presence: f32) -> Self {
        Penalties {
            window,
            repeat,
            frequency,
            presence,
            last: VecDeque::with_capacity(window.min(1 << 16)),
            counts: HashMap::new(),
        }
    }

    /// Whether `apply` would change anything (llama.cpp skips the step otherwise).
    pub fn active(&self) -> bool {
        self.window > 0 && (self.repeat != 1.0 || self.frequency != 0.0 || self.presence != 0.0)
    }

    pub fn accept(&mut self, token: TokenId) {
        if self.window == 0 {
            return;
        }
        *self.counts.entry(token).or_insert(0) += 1;
        if self.last.len() >= self.window {
            if let Some(old) = self.last.pop_front() {
                if let Some(c) = self.counts.get_mut(&old) {
                    *c -= 1;
                    if *c == 0 {
                        self.counts.remove(&old);
                    }
                }
            }
        }
        self.last.push_back(token);
    }

    /// Penalises the logits of the tokens in the window, in place.
    pub fn apply(&self, logits: &mut [f32]) {
        if !self.active() {
            return;
        }
        for (&token, &count) in &self.counts {
            let Some(l) = logits.get_mut(token as usize) else {
                continue;
            };
            // Dividing a negative logit would make the token more likely: multiply it instead.
            if *l <= 0.0 {
                *l *= self.repeat;
            } else {
                *l /= self.repeat;
            }
            *l -= count as f32 * self.frequency + if count > 0 { self.presence } else { 0.0 };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hand_computed_penalties() {
        let mut p = Penalties::new(3, 2.0, 0.5, 0.25);
        for t in [1, 2, 1, 3] {
            p.accept(t);
        }
        // Window holds [2, 1, 3]: the first 1 fell out, so every token counts once.
        let mut logits = vec![1.0, 4.0, -1.0, 0.0, 5.0];
        p.apply(&mut logits);
        assert_eq!(logits, vec![1.0, 4.0 / 2.0 - 0.75, -2.0 - 0.75, 0.0 - 0.75, 5.0]);

        let mut p = Penalties::new(8, 1.0, 0.5, 0.25);
        for t in [1, 1, 1] {
            p.accept(t);
        }
        let mut logits = vec![0.0, 3.0];
        p.apply(&mut logits);
        assert_eq!(logits, vec![0.0, 3.0 - 1.5 - 0.25]);
    }

    #[test]
    fn off_when_neutral_or_windowless() {
        assert!(!Penalties::new(64, 1.0, 0.0, 0.0).active());
        let mut p = Penalties::new(0, 1.5, 1.0, 1.0);
        p.accept(0);
        let mut logits = vec![2.0];
        p.apply(&mut logits);
        assert_eq!(logits, vec![2.0]);
    }
}
