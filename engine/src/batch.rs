//! A batch of tokens for one forward call, in the spirit of `llama_batch`: each token carries its
//! position, its sequence, and whether its logits are wanted.

use crate::kv::{Pos, SeqId};
use crate::TokenId;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    tokens: Vec<TokenId>,
    pos: Vec<Pos>,
    seq: Vec<SeqId>,
    logits: Vec<bool>,
}

impl Batch {
    pub fn new() -> Batch {
        Batch::default()
    }

    pub fn with_capacity(n: usize) -> Batch {
        Batch {
            tokens: Vec::with_capacity(n),
            pos: Vec::with_capacity(n),
            seq: Vec::with_capacity(n),
            logits: Vec::with_capacity(n),
        }
    }

    /// Consecutive tokens of one sequence starting at `pos0`, with logits for the last one only
    /// (`llama_batch_get_one`).
    pub fn from_tokens(tokens: &[TokenId], pos0: Pos, seq: SeqId) -> Batch {
        let mut b = Batch::with_capacity(tokens.len());
        for (i, &t) in tokens.iter().enumerate() {
            b.add(t, pos0 + i as Pos, seq, i + 1 == tokens.len());
        }
        b
    }

    /// Appends a token of sequence `seq` at position `pos`; `logits`: whether to compute its
    /// logits.
    pub fn add(&mut self, token: TokenId, pos: Pos, seq: SeqId, logits: bool) -> &mut Batch {
        self.tokens.push(token);
        self.pos.push(pos);
        self.seq.push(seq);
        self.logits.push(logits);
        self
    }

    pub fn clear(&mut self) {
        self.tokens.clear();
        self.pos.clear();
        self.seq.clear();
        self.logits.clear();
    }

    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }

    pub fn tokens(&self) -> &[TokenId] {
        &self.tokens
    }

    pub fn positions(&self) -> &[Pos] {
        &self.pos
    }

    pub fn seqs(&self) -> &[SeqId] {
        &self.seq
    }

    pub fn wants_logits(&self, i: usize) -> bool {
        self.logits[i]
    }
}
