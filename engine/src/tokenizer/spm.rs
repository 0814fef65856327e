//! SentencePiece-style BPE by scores (llama.cpp's `llm_tokenizer_spm`): Llama 2, Mistral, Gemma,
//! Phi-3.
//!
//! The text (already space-escaped to `▁`) starts as one symbol per UTF-8 character; the adjacent
//! pair whose concatenation is the highest-scoring token (leftmost on ties) is merged until no
//! pair forms a token. A final symbol that is not a token falls back to byte tokens `<0xXX>`.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::Vocab;
use crate::TokenId;

#[derive(Clone, Copy)]
struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

struct Bigram {
    left: usize,
    right: usize,
    score: f32,
    size: usize,
}

impl Ord for Bigram {
    /// The heap's top is the highest score, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
    }
}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl PartialEq for Bigram {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Bigram {}

/// The byte length of the UTF-8 sequence a lead byte starts (llama.cpp's `unicode_len_utf8`).
fn utf8_len(lead: u8) -> usize {
    match lead >> 4 {
        0xC | 0xD => 2,
        0xE => 3,
        0xF => 4,
        _ => 1,
    }
}

struct Session<'a> {
    vocab: &'a Vocab,
    text: &'a str,
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Bigram>,
    /// For each merged text, the pair it was last merged from (to re-split a symbol that is not
    /// itself a token).
    rev_merge: HashMap<&'a str, (usize, usize)>,
}

pub(super) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<TokenId>) {
    let bytes = text.as_bytes();
    let mut symbols = Vec::with_capacity(text.len());
    let mut offs = 0;
    while offs < bytes.len() {
        let len = utf8_len(bytes[offs]).min(bytes.len() - offs);
        let index = symbols.len();
        symbols.push(Symbol {
            start: offs,
            len,
            prev: index.checked_sub(1),
            next: (offs + len < bytes.len()).then_some(index + 1),
        });
        offs += len;
    }
    let mut s = Session {
        vocab,
        text,
        symbols,
        queue: BinaryHeap::new(),
        rev_merge: HashMap::new(),
    };
    for i in 1..s.symbols.len() {
        s.try_add_bigram(Some(i - 1), Some(i));
    }
    while let Some(bigram) = s.queue.pop() {
        let (left, right) = (s.symbols[bigram.left], s.symbols[bigram.right]);
        // Skip pairs that went stale when one side was merged into something else.
        if left.len == 0 || right.len == 0 || left.len + right.len != bigram.size {
            continue;
        }
        s.symbols[bigram.left].len += right.len;
        s.symbols[bigram.right].len = 0;
        s.symbols[bigram.left].next = right.next;
        if let Some(next) = right.next {
            s.symbols[next].prev = Some(bigram.left);
        }
        s.try_add_bigram(left.prev, Some(bigram.left));
        s.try_add_bigram(Some(bigram.left), right.next);
    }
    let mut i = (!s.symbols.is_empty()).then_some(0);
    while let Some(at) = i {
        s.resegment(at, out);
        i = s.symbols[at].next;
    }
}

impl<'a> Session<'a> {
    fn symbol_text(&self, i: usize) -> &'a str {
        let sym = self.symbols[i];
        &self.text[sym.start..sym.start + sym.len]
    }

    fn try_add_bigram(&mut self, left: Option<usize>, right: Option<usize>) {
        let (Some(left), Some(right)) = (left, right) else {
            return;
        };
        let start = self.symbols[left].start;
        let size = self.symbols[left].len + self.symbols[right].len;
        let text = &self.text[start..start + size];
        let Some(id) = self.vocab.token_id(text) else {
            return;
        };
        self.queue.push(Bigram {
            left,
            right,
            score: self.vocab.score(id),
            size,
        });
        self.rev_merge.insert(text, (left, right));
    }

    fn resegment(&self, i: usize, out: &mut Vec<TokenId>) {
        let text = self.symbol_text(i);
        if let Some(id) = self.vocab.token_id(text) {
            out.push(id);
            return;
        }
        match self.rev_merge.get(text) {
            Some(&(left, right)) => {
                self.resegment(left, out);
                self.resegment(right, out);
            }
            None => out.extend(text.bytes().filter_map(|b| self.vocab.byte_to_token(b))),
        }
    }
}
