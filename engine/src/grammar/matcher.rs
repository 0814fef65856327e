//! One generation's position in a grammar: which tokens may come next, and advancing on the
//! token that was chosen.

use std::sync::Arc;

use super::automaton::{Automaton, DEAD, EMPTY, NODE_LIMIT, TABLE_LIMIT};
use super::vocab::{TokenKind, TokenVocab};
use super::{Elem, Grammar, GrammarError};
use crate::TokenId;

/// A set of token ids (a bitset over the vocabulary).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenMask {
    words: Vec<u64>,
    n: usize,
}

impl TokenMask {
    pub fn new(n_tokens: usize) -> Self {
        TokenMask {
            words: vec![0; n_tokens.div_ceil(64)],
            n: n_tokens,
        }
    }

    pub fn clear(&mut self) {
        self.words.iter_mut().for_each(|w| *w = 0);
    }

    #[inline]
    pub fn insert(&mut self, id: TokenId) {
        self.words[id as usize >> 6] |= 1 << (id & 63);
    }

    #[inline]
    pub fn contains(&self, id: TokenId) -> bool {
        self.words
            .get(id as usize >> 6)
            .is_some_and(|w| w & (1 << (id & 63)) != 0)
    }

    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn n_tokens(&self) -> usize {
        self.n
    }

    /// The ids in the set, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = TokenId> + '_ {
        self.words.iter().enumerate().flat_map(|(wi, &w)| {
            let mut bits = w;
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let b = bits.trailing_zeros();
                bits &= bits - 1;
                Some((wi as u32) * 64 + b)
            })
        })
    }
}

/// A generation's position in a grammar. See the module documentation of `grammar`.
pub struct Matcher {
    auto: Automaton,
    vocab: Arc<TokenVocab>,
    state: u32,
    /// An end-of-generation token was accepted: nothing may follow.
    finished: bool,
    /// Scratch for the trie walk: (subtree end, state) per depth.
    walk: Vec<(u32, u32)>,
    /// The last few masks computed, by automaton state: inside a JSON string the state is the
    /// same for token after token, and its mask (nearly the whole vocabulary) is the dearest.
    mask_cache: Vec<(u32, TokenMask)>,
}

const MASK_CACHE: usize = 4;

impl Matcher {
    /// Starts matching `grammar` over `vocab`. Fails if the grammar names tokens the vocabulary
    /// does not have.
    pub fn new(grammar: &Grammar, vocab: Arc<TokenVocab>) -> Result<Self, GrammarError> {
        let g = grammar.resolve_tokens(&vocab)?;
        let mut auto = Automaton::new(g);
        let state = auto.start();
        Ok(Matcher {
            auto,
            vocab,
            state,
            finished: false,
            walk: Vec::new(),
            mask_cache: Vec::new(),
        })
    }

    /// Some continuation was cut because the grammar is too ambiguous there (see
    /// [`MAX_STACKS`](super::MAX_STACKS)): why no token may be allowed.
    pub fn too_ambiguous(&self) -> bool {
        self.auto.overflowed
    }

    pub fn vocab(&self) -> &TokenVocab {
        &self.vocab
    }

    /// The grammar may end here (an end-of-generation token is allowed).
    pub fn can_end(&self) -> bool {
        !self.finished && self.auto.can_end(self.state)
    }

    /// The grammar is complete: only ending is possible.
    pub fn is_complete(&self) -> bool {
        self.finished || (self.auto.is_complete(self.state) && self.auto.stacks(self.state) == [EMPTY])
    }

    /// Whether `token` may come next.
    pub fn allows(&mut self, token: TokenId) -> bool {
        if self.finished || token as usize >= self.vocab.n_tokens() {
            return false;
        }
        if self.token_element_allows(token) {
            return true;
        }
        match self.vocab.kind(token) {
            TokenKind::EndOfGeneration => self.auto.can_end(self.state),
            TokenKind::Special => false,
            TokenKind::Text => self.walk_text(token) != DEAD,
        }
    }

    fn token_element_allows(&self, token: TokenId) -> bool {
        self.auto.is_complete(self.state)
            && self.auto.stacks(self.state).iter().any(|&s| {
                s != EMPTY
                    && match self.auto.top(s) {
                        Elem::Token(t) => t == token,
                        Elem::TokenNot(t) => {
                            t != token && self.vocab.kind(token) != TokenKind::EndOfGeneration
                        }
                        _ => false,
                    }
            })
    }

    /// The state after the token's bytes, as text.
    fn walk_text(&mut self, token: TokenId) -> u32 {
        let vocab = Arc::clone(&self.vocab);
        let bytes = vocab.token_bytes(token);
        if bytes.is_empty() {
            return DEAD;
        }
        let mut s = self.state;
        for &b in bytes {
            s = self.auto.next(s, b);
            if s == DEAD {
                break;
            }
        }
        s
    }

    /// Advances past `token`, which must be allowed.
    pub fn accept(&mut self, token: TokenId) -> Result<(), GrammarError> {
        if !self.allows(token) {
            return Err(GrammarError::Rejected(token));
        }
        if self.vocab.kind(token) == TokenKind::EndOfGeneration && !self.token_element_allows(token) {
            self.finished = true;
            return Ok(());
        }
        let by_element = self.auto.after_token_elements(self.state, token);
        let by_text = match self.vocab.kind(token) {
            TokenKind::Text => self.walk_text(token),
            _ => DEAD,
        };
        self.state = match (by_text, by_element) {
            (DEAD, Some(stacks)) => {
                let empty = self.auto.union(DEAD, Vec::new());
                self.auto.union(empty, stacks)
            }
            (s, Some(stacks)) if self.auto.is_complete(s) => self.auto.union(s, stacks),
            // Text ending inside a character: the token-element paths cannot continue it.
            (s, _) => s,
        };
        self.maybe_compact();
        Ok(())
    }

    /// Advances over raw text (for tests and for text forced into the output).
    pub fn accept_bytes(&mut self, bytes: &[u8]) -> Result<(), GrammarError> {
        let mut s = self.state;
        for &b in bytes {
            s = self.auto.next(s, b);
            if s == DEAD {
                return Err(GrammarError::Schema(format!(
                    "text {:?} does not match the grammar",
                    String::from_utf8_lossy(bytes)
                )));
            }
        }
        self.state = s;
        Ok(())
    }

    /// Rebuilds the automaton's caches when they grow past their bound.
    fn maybe_compact(&mut self) {
        if self.auto.table_len() <= TABLE_LIMIT && self.auto.node_count() <= NODE_LIMIT {
            return;
        }
        let (stacks, partial) = self.auto.export(self.state);
        let (g, overflowed) = (self.auto.g.clone(), self.auto.overflowed);
        self.auto = Automaton::new(g);
        self.auto.overflowed = overflowed;
        self.state = self.auto.import(&stacks, partial);
        self.mask_cache.clear(); // keyed by the old state numbers
    }

    /// Fills `mask` with every token allowed next.
    ///
    /// Walks the vocabulary trie in step with the automaton: a byte the grammar rejects prunes
    /// the whole subtree below it, and in states that take any plain text (inside a JSON string)
    /// a subtree of plain-text tokens is taken whole without looking at its bytes.
    pub fn fill_mask(&mut self, mask: &mut TokenMask) {
        mask.clear();
        if self.finished {
            return;
        }
        if let Some(i) = self.mask_cache.iter().position(|(s, _)| *s == self.state) {
            let entry = self.mask_cache.remove(i);
            mask.clone_from(&entry.1);
            self.mask_cache.push(entry);
            return;
        }
        self.compute_mask(mask);
        if self.mask_cache.len() == MASK_CACHE {
            self.mask_cache.remove(0);
        }
        self.mask_cache.push((self.state, mask.clone()));
        self.maybe_compact();
    }

    fn compute_mask(&mut self, mask: &mut TokenMask) {
        let vocab = Arc::clone(&self.vocab);
        if self.auto.can_end(self.state) {
            for &t in vocab.eog_tokens() {
                mask.insert(t);
            }
        }
        self.add_token_elements(mask);

        let trie = &vocab.trie;
        let n_nodes = trie.n_nodes() as u32;
        let walk = &mut self.walk;
        walk.clear();
        walk.push((n_nodes, self.state));
        let mut i = 1u32;
        while i < n_nodes {
            while walk.last().is_some_and(|&(end, _)| i >= end) {
                walk.pop();
            }
            let Some(&(_, parent)) = walk.last() else {
                break;
            };
            let s = self.auto.next(parent, trie.byte[i as usize]);
            let end = trie.end[i as usize];
            if s == DEAD {
                i = end;
                continue;
            }
            if trie.plain[i as usize] && self.auto.is_complete(s) && self.auto.plain_loop(s) {
                for &t in trie.subtree_tokens(i as usize) {
                    mask.insert(t);
                }
                i = end;
                continue;
            }
            for &t in trie.own_tokens(i as usize) {
                mask.insert(t);
            }
            walk.push((end, s));
            i += 1;
        }
    }

    fn add_token_elements(&self, mask: &mut TokenMask) {
        if !self.auto.is_complete(self.state) {
            return;
        }
        for &s in self.auto.stacks(self.state) {
            if s == EMPTY {
                continue;
            }
            match self.auto.top(s) {
                Elem::Token(t) => mask.insert(t),
                Elem::TokenNot(t) => {
                    for id in 0..self.vocab.n_tokens() as TokenId {
                        let usable = match self.vocab.kind(id) {
                            TokenKind::EndOfGeneration => false,
                            TokenKind::Special => true,
                            TokenKind::Text => !self.vocab.token_bytes(id).is_empty(),
                        };
                        if id != t && usable {
                            mask.insert(id);
                        }
                    }
                }
                _ => {}
            }
        }
    }
}
