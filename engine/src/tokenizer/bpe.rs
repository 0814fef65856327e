//! Byte-level BPE (llama.cpp's `llm_tokenizer_bpe`): GPT-2, Llama 3, Qwen, DeepSeek, StarCoder...
//!
//! The pre-tokenizer splits text into words; each word's UTF-8 bytes are mapped to GPT-2's
//! printable characters, then the adjacent pair with the lowest merge rank (leftmost on ties) is
//! merged until no pair has a rank. A final symbol that is not a token is emitted byte by byte.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::pre::PreTokenizer;
use super::unicode::byte_to_char;
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
    rank: u32,
    size: usize,
}

impl Ord for Bigram {
    /// The heap's top is the lowest rank, then the leftmost pair.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .cmp(&self.rank)
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

pub(super) fn tokenize(vocab: &Vocab, pre: &PreTokenizer, text: &str, out: &mut Vec<TokenId>) {
    let mut word_buf = String::new();
    let mut key = String::new();
    let mut symbols = Vec::new();
    let mut queue = BinaryHeap::new();
    pre.split(text, |word| {
        word_buf.clear();
        word_buf.extend(word.bytes().map(byte_to_char));
        let word = word_buf.as_str();
        if pre.ignore_merges {
            if let Some(id) = vocab.token_id(word) {
                out.push(id);
                return;
            }
        }
        symbols.clear();
        queue.clear();
        for (start, c) in word.char_indices() {
            let index = symbols.len();
            symbols.push(Symbol {
                start,
                len: c.len_utf8(),
                prev: index.checked_sub(1),
                next: (start + c.len_utf8() < word.len()).then_some(index + 1),
            });
        }
        let text_of = |symbols: &[Symbol], i: usize| {
            let s: Symbol = symbols[i];
            &word[s.start..s.start + s.len]
        };
        let mut add_bigram = |symbols: &[Symbol],
                              queue: &mut BinaryHeap<Bigram>,
                              l: Option<usize>,
                              r: Option<usize>| {
            let (Some(left), Some(right)) = (l, r) else {
                return;
            };
            if let Some(rank) = vocab.merge_rank(text_of(symbols, left), text_of(symbols, right), &mut key) {
                queue.push(Bigram {
                    left,
                    right,
                    rank,
                    size: symbols[left].len + symbols[right].len,
                });
            }
        };
        for i in 1..symbols.len() {
            add_bigram(&symbols, &mut queue, Some(i - 1), Some(i));
        }
        while let Some(bigram) = queue.pop() {
            let (left, right) = (symbols[bigram.left], symbols[bigram.right]);
            // Both sides still alive and of the same extent means the same text (they stay
            // adjacent while both are alive), so this checks staleness as llama.cpp's text
            // comparison does.
            if left.len == 0 || right.len == 0 || left.len + right.len != bigram.size {
                continue;
            }
            symbols[bigram.left].len += right.len;
            symbols[bigram.right].len = 0;
            symbols[bigram.left].next = right.next;
            if let Some(next) = right.next {
                symbols[next].prev = Some(bigram.left);
            }
            add_bigram(&symbols, &mut queue, left.prev, Some(bigram.left));
            add_bigram(&symbols, &mut queue, Some(bigram.left), right.next);
        }
        for (i, sym) in symbols.iter().enumerate() {
            if sym.len == 0 {
                continue;
            }
            let piece = text_of(&symbols, i);
            match vocab.token_id(piece) {
                Some(id) => out.push(id),
                // Not a token: each byte of the (mapped) text on its own, where that is a token.
                None => out.extend(piece.bytes().filter_map(|b| vocab.single_byte_token(b))),
            }
        }
    });
}
