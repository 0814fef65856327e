//! The vocabulary as a grammar sees it: each token's bytes and kind, and a prefix trie of the
//! text tokens' bytes, laid out flat in depth-first order so that a subtree is a contiguous
//! range of nodes (and of tokens) that a walk can skip or take whole.

use std::collections::HashMap;

use crate::TokenId;

/// How a token takes part in grammar matching.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenKind {
    /// Ordinary text: matched by its bytes.
    Text,
    /// Ends the generation (EOS, end of turn): allowed only where the grammar may end.
    EndOfGeneration,
    /// A control token that is not text: allowed only where the grammar names it (`<[id]>`).
    Special,
}

/// The tokens of a model for grammar matching. Build it once per model and share it (it is
/// immutable); building sorts the vocabulary (tens of milliseconds for 262k tokens).
#[derive(Debug)]
pub struct TokenVocab {
    offsets: Vec<u32>,
    bytes: Vec<u8>,
    kinds: Vec<TokenKind>,
    eog: Vec<TokenId>,
    by_bytes: HashMap<Box<[u8]>, TokenId>,
    pub(crate) trie: Trie,
}

impl TokenVocab {
    /// `tokens[id]` is the token's bytes (what it stands for in the output; for special tokens,
    /// their text, used only to resolve `<name>` references) and its kind.
    pub fn new<B: AsRef<[u8]>>(tokens: impl IntoIterator<Item = (B, TokenKind)>) -> Self {
        let mut offsets = vec![0u32];
        let mut bytes = Vec::new();
        let mut kinds = Vec::new();
        for (b, k) in tokens {
            bytes.extend_from_slice(b.as_ref());
            offsets.push(bytes.len() as u32);
            kinds.push(k);
        }
        let eog = (0..kinds.len() as u32)
            .filter(|&i| kinds[i as usize] == TokenKind::EndOfGeneration)
            .collect();
        let mut v = TokenVocab {
            offsets,
            bytes,
            kinds,
            eog,
            by_bytes: HashMap::new(),
            trie: Trie::default(),
        };
        // `<name>` resolves to the lowest id with exactly these bytes.
        for id in (0..v.n_tokens() as TokenId).rev() {
            v.by_bytes.insert(v.token_bytes(id).into(), id);
        }
        v.trie = Trie::build(&v);
        v
    }

    /// The grammar's view of a model's vocabulary: end-of-generation tokens end it; control,
    /// unknown and unused tokens are not text (llama.cpp lets a control token's text match, so
    /// `<start_of_turn>` could appear inside a JSON string there; here it cannot); normal,
    /// user-defined and byte tokens are their bytes.
    pub fn from_vocab(v: &crate::tokenizer::Vocab) -> Self {
        use crate::tokenizer::TokenType;
        TokenVocab::new((0..v.n_tokens() as TokenId).map(|id| {
            let kind = if v.is_eog(id) {
                TokenKind::EndOfGeneration
            } else {
                match v.token_type(id) {
                    TokenType::Normal | TokenType::UserDefined | TokenType::Byte | TokenType::Undefined => {
                        TokenKind::Text
                    }
                    TokenType::Control | TokenType::Unknown | TokenType::Unused => TokenKind::Special,
                }
            };
            (v.token_bytes(id), kind)
        }))
    }

    pub fn n_tokens(&self) -> usize {
        self.kinds.len()
    }

    pub fn token_bytes(&self, id: TokenId) -> &[u8] {
        let i = id as usize;
        &self.bytes[self.offsets[i] as usize..self.offsets[i + 1] as usize]
    }

    /// Nodes of the prefix trie of the text tokens (its size says what a full walk costs).
    pub fn trie_nodes(&self) -> usize {
        self.trie.n_nodes()
    }

    pub fn kind(&self, id: TokenId) -> TokenKind {
        self.kinds[id as usize]
    }

    pub fn eog_tokens(&self) -> &[TokenId] {
        &self.eog
    }

    pub(crate) fn find_token(&self, bytes: &[u8]) -> Option<TokenId> {
        self.by_bytes.get(bytes).copied()
    }
}

/// Bytes that, outside any multi-byte character, are "plain text": printable ASCII except the
/// quote and the backslash (the characters JSON strings treat specially), so a JSON string (or
/// any state that loops on all of them and on every non-ASCII character) accepts every token
/// made only of plain text.
pub(crate) fn is_plain_ascii(b: u8) -> bool {
    (0x20..=0x7E).contains(&b) && b != b'"' && b != b'\\'
}

/// The prefix trie of the text tokens, in depth-first preorder. Node 0 is the root.
#[derive(Debug, Default)]
pub(crate) struct Trie {
    /// The byte on the edge into each node.
    pub byte: Vec<u8>,
    /// One past the last node of each node's subtree.
    pub end: Vec<u32>,
    /// Text tokens in preorder; node `n`'s own tokens are `order[tok_start[n]..tok_start[n + 1]]`
    /// and its subtree's are `order[tok_start[n]..tok_start[end[n]]]`.
    pub order: Vec<TokenId>,
    pub tok_start: Vec<u32>,
    /// Whether every token below the node continues with plain text only (see `is_plain_ascii`;
    /// any well-formed non-ASCII character counts as plain), reading from a character boundary.
    pub plain: Vec<bool>,
}

impl Trie {
    fn build(v: &TokenVocab) -> Trie {
        let mut text: Vec<TokenId> = (0..v.n_tokens() as TokenId)
            .filter(|&i| v.kind(i) == TokenKind::Text && !v.token_bytes(i).is_empty())
            .collect();
        text.sort_by(|&a, &b| v.token_bytes(a).cmp(v.token_bytes(b)).then(a.cmp(&b)));

        let mut t = Trie {
            byte: vec![0],
            end: vec![0],
            order: Vec::with_capacity(text.len()),
            tok_start: vec![0],
            plain: Vec::new(),
        };
        let mut path: Vec<u32> = vec![0];
        let mut path_bytes: &[u8] = &[];
        for &id in &text {
            let b = v.token_bytes(id);
            let common = path_bytes.iter().zip(b).take_while(|(x, y)| x == y).count();
            while path.len() > common + 1 {
                let n = path.pop().unwrap_or(0);
                t.end[n as usize] = t.byte.len() as u32;
            }
            for &byte in &b[common..] {
                let n = t.byte.len() as u32;
                t.byte.push(byte);
                t.end.push(0);
                t.tok_start.push(t.order.len() as u32);
                path.push(n);
            }
            t.order.push(id);
            path_bytes = b;
        }
        let n_nodes = t.byte.len() as u32;
        for &n in &path {
            t.end[n as usize] = n_nodes;
        }
        t.tok_start.push(t.order.len() as u32);
        t.plain = plain_subtrees(&t);
        t
    }

    pub fn n_nodes(&self) -> usize {
        self.byte.len()
    }

    pub fn subtree_tokens(&self, n: usize) -> &[TokenId] {
        &self.order[self.tok_start[n] as usize..self.tok_start[self.end[n] as usize] as usize]
    }

    pub fn own_tokens(&self, n: usize) -> &[TokenId] {
        &self.order[self.tok_start[n] as usize..self.tok_start[n + 1] as usize]
    }
}

/// UTF-8 decoding contexts for the plain-text analysis: 0 is a character boundary; the others
/// are "inside a character, `remaining` continuation bytes to go, the next within a range".
const CONTEXTS: usize = 16;
/// Continuation byte ranges: any, then the restricted second bytes after E0, ED, F0 and F4.
const RANGES: [(u8, u8); 5] = [
    (0x80, 0xBF),
    (0xA0, 0xBF),
    (0x80, 0x9F),
    (0x90, 0xBF),
    (0x80, 0x8F),
];

fn context(remaining: usize, range: usize) -> usize {
    1 + (remaining - 1) * RANGES.len() + range
}

/// The context after byte `b` in context `ctx`, if the byte keeps the text plain and well-formed.
fn next_context(ctx: usize, b: u8) -> Option<usize> {
    if ctx == 0 {
        return match b {
            _ if is_plain_ascii(b) => Some(0),
            0xC2..=0xDF => Some(context(1, 0)),
            0xE0 => Some(context(2, 1)),
            0xE1..=0xEC | 0xEE | 0xEF => Some(context(2, 0)),
            0xED => Some(context(2, 2)),
            0xF0 => Some(context(3, 3)),
            0xF1..=0xF3 => Some(context(3, 0)),
            0xF4 => Some(context(3, 4)),
            _ => None,
        };
    }
    let remaining = (ctx - 1) / RANGES.len() + 1;
    let (lo, hi) = RANGES[(ctx - 1) % RANGES.len()];
    if b < lo || b > hi {
        None
    } else if remaining == 1 {
        Some(0)
    } else {
        Some(context(remaining - 1, 0))
    }
}

/// For each node, whether its subtree is plain text read from a character boundary. Computed
/// bottom-up over all decoding contexts (a token may end inside a character: that is fine).
fn plain_subtrees(t: &Trie) -> Vec<bool> {
    let n = t.n_nodes();
    let mut ok = vec![0u16; n];
    for node in (0..n).rev() {
        let mut bits: u16 = u16::MAX; // CONTEXTS == 16: every context
        let mut c = node + 1;
        while c < t.end[node] as usize {
            for ctx in 0..CONTEXTS {
                if bits & (1 << ctx) == 0 {
                    continue;
                }
                let fine = next_context(ctx, t.byte[c]).is_some_and(|next| ok[c] & (1 << next) != 0);
                if !fine {
                    bits &= !(1 << ctx);
                }
            }
            c = t.end[c] as usize;
        }
        ok[node] = bits;
    }
    ok.iter().map(|b| b & 1 != 0).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(tokens: &[&[u8]]) -> TokenVocab {
        TokenVocab::new(tokens.iter().map(|t| (t.to_vec(), TokenKind::Text)))
    }

    #[test]
    fn trie_in_preorder_with_contiguous_subtrees() {
        let v = vocab(&[b"ab", b"a", b"b", b"abc", b"ab", b"x\"y"]);
        let t = &v.trie;
        // Nodes: root, a, ab, abc, b, x, x", x"y
        assert_eq!(t.byte, vec![0, b'a', b'b', b'c', b'b', b'x', b'"', b'y']);
        assert_eq!(t.end, vec![8, 4, 4, 4, 5, 8, 8, 8]);
        assert_eq!(t.own_tokens(1), &[1]);
        assert_eq!(t.own_tokens(2), &[0, 4]); // duplicates share a node
        assert_eq!(t.subtree_tokens(1), &[1, 0, 4, 3]);
        assert_eq!(t.subtree_tokens(0).len(), 6);
        assert!(t.plain[1]);
        assert!(!t.plain[0]); // x"y is below the root
        assert!(!t.plain[5]);
        assert!(t.plain[6]); // after x" only y follows
    }

    #[test]
    fn plain_analysis_follows_utf8() {
        // "é" = c3 a9; a lone continuation byte or an overlong form is not plain.
        let v = vocab(&[
            b"\xc3\xa9",
            b"\xc3",
            b"q\xa9",
            b"q\xc0\x80",
            b"r\xe0\xa0\x80",
            b"s\xe0\x80\x80",
        ]);
        let t = &v.trie;
        let node_of = |path: &[u8]| -> usize {
            let mut n = 0;
            'outer: for &b in path {
                let mut c = n + 1;
                while c < t.end[n] as usize {
                    if t.byte[c] == b {
                        n = c;
                        continue 'outer;
                    }
                    c = t.end[c] as usize;
                }
                panic!("no node for {path:?}");
            }
            n
        };
        assert!(!t.plain[node_of(b"q")]);
        assert!(t.plain[node_of(b"r")]);
        assert!(!t.plain[node_of(b"s")]);
        assert!(!t.plain[0]);
        let ok = vocab(&[b"\xc3\xa9", b"\xc3", b"ab"]);
        assert!(ok.trie.plain[0]);
    }

    #[test]
    fn kinds_and_lookup() {
        let v = TokenVocab::new([
            (b"<eos>".to_vec(), TokenKind::EndOfGeneration),
            (b"hi".to_vec(), TokenKind::Text),
            (b"<ctrl>".to_vec(), TokenKind::Special),
            (b"".to_vec(), TokenKind::Text),
        ]);
        assert_eq!(v.eog_tokens(), &[0]);
        assert_eq!(v.find_token(b"<ctrl>"), Some(2));
        assert_eq!(v.trie.order, vec![1]); // only non-empty text tokens are in the trie
    }
}
