//! The grammar's pushdown stacks, turned lazily into a deterministic automaton over bytes.
//!
//! A position in the grammar is a set of stacks (llama.cpp's `llama_grammar_stacks`); each stack
//! is a path of return positions whose top is a terminal (a character class or a token element),
//! or empty when the grammar may end there. Stacks are interned as persistent linked lists and
//! sets of them as sorted id lists, so a position is one integer. An automaton state is a stack
//! set plus an unfinished UTF-8 character; its transition on each byte is computed once, on first
//! use, and then read from a table. Walking a token's bytes, or the vocabulary trie, is then
//! mostly array lookups.

use std::collections::HashMap;

use super::{Elem, Grammar};

/// The empty stack: the grammar may end here.
pub const EMPTY: u32 = u32::MAX;
/// The state with no stacks: nothing can follow.
pub const DEAD: u32 = 0;
const UNKNOWN: u32 = u32::MAX;

/// An unfinished UTF-8 character: its bits so far, how many continuation bytes remain, and the
/// range the next byte must be in (narrower than 80..BF right after E0, ED, F0 and F4, which is
/// what excludes overlong forms, surrogates and code points above U+10FFFF).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Partial {
    pub value: u32,
    pub remaining: u8,
    pub lo: u8,
    pub hi: u8,
}

impl Partial {
    fn complete(self) -> bool {
        self.remaining == 0
    }

    /// The code points this character can still become.
    fn range(self) -> (u32, u32) {
        let rest = 6 * (self.remaining as u32 - 1);
        let lo = ((self.value << 6) | (self.lo & 0x3F) as u32) << rest;
        let hi = (((self.value << 6) | (self.hi & 0x3F) as u32) << rest) | ((1 << rest) - 1);
        (lo, hi)
    }
}

#[derive(Clone, Copy, Debug)]
struct State {
    set: u32,
    partial: Partial,
    /// Where this state's transitions start in `table` (256 entries, or 64 for the continuation
    /// bytes of an unfinished character).
    table: u32,
    /// Cached: every plain-text character leads back to this state (see `TokenVocab`).
    plain_loop: Option<bool>,
}

pub struct Automaton {
    pub(crate) g: Grammar,
    /// Stack nodes: (element index of the top, parent stack or EMPTY).
    nodes: Vec<(u32, u32)>,
    node_ids: HashMap<(u32, u32), u32>,
    /// A stack whose top may be a rule reference, expanded into stacks with terminal tops.
    expanded: HashMap<u32, Box<[u32]>>,
    sets: Vec<Box<[u32]>>,
    set_ids: HashMap<Box<[u32]>, u32>,
    states: Vec<State>,
    state_ids: HashMap<(u32, Partial), u32>,
    table: Vec<u32>,
    /// The step being computed went past [`MAX_STACKS`]: its position counts as `DEAD`.
    over: bool,
    /// Some step went past [`MAX_STACKS`] (for the error the matcher reports).
    pub(crate) overflowed: bool,
}

/// Most stacks one position may hold. In a grammar this ambiguous (nested repetitions such as
/// `x++++`, or chains of rules each doubling the ways to go on) the stack sets, and the work per
/// byte, grow without bound: exponentially with the nesting. Grammars come from requests, so a
/// position past the bound counts as one the grammar cannot reach (`DEAD`): the output still
/// matches the grammar, generation stops there, and [`Automaton::overflowed`] says why.
/// Real grammars (JSON schemas, tool calls, llama.cpp's examples) stay below a hundred stacks.
pub const MAX_STACKS: usize = 1024;

/// Beyond this many transition-table entries (4 bytes each), the caches are rebuilt from the
/// current position so memory stays bounded on long generations with ever-new states.
pub const TABLE_LIMIT: usize = 16 << 20;
/// Likewise for stack nodes (about 40 bytes each with their index): a long generation in an
/// ambiguous grammar keeps making new ones.
pub const NODE_LIMIT: usize = 1 << 20;

impl Automaton {
    pub fn new(g: Grammar) -> Self {
        let mut a = Automaton {
            g,
            nodes: Vec::new(),
            node_ids: HashMap::new(),
            expanded: HashMap::new(),
            sets: Vec::new(),
            set_ids: HashMap::new(),
            states: Vec::new(),
            state_ids: HashMap::new(),
            table: Vec::new(),
            over: false,
            overflowed: false,
        };
        let empty_set = a.intern_set(Vec::new());
        let dead = a.state(empty_set, Partial::default());
        debug_assert_eq!(dead, DEAD);
        a
    }

    /// The state at the start of the grammar.
    pub fn start(&mut self) -> u32 {
        let root = self.g.root as usize;
        let mut out = Vec::new();
        self.over = false;
        for alt in self.alternatives(root) {
            let stack = if self.g.elems[alt as usize].ends_sequence() {
                EMPTY
            } else {
                self.push(EMPTY, alt)
            };
            self.expand(stack, &mut out);
        }
        self.complete_state(out)
    }

    /// The complete state of the stacks one step gave (`DEAD` if none, or past [`MAX_STACKS`]).
    fn complete_state(&mut self, mut stacks: Vec<u32>) -> u32 {
        stacks.sort_unstable();
        stacks.dedup();
        if self.over || stacks.len() > MAX_STACKS {
            self.overflowed = true;
            return DEAD;
        }
        if stacks.is_empty() {
            return DEAD;
        }
        let set = self.intern_set(stacks);
        self.state(set, Partial::default())
    }

    pub fn table_len(&self) -> usize {
        self.table.len()
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The stacks of a state, each as its element indices from the bottom up (to rebuild it in a
    /// fresh automaton).
    pub fn export(&self, s: u32) -> (Vec<Vec<u32>>, Partial) {
        let st = self.states[s as usize];
        let stacks = self.sets[st.set as usize]
            .iter()
            .map(|&mut_id| {
                let mut path = Vec::new();
                let mut id = mut_id;
                while id != EMPTY {
                    let (e, parent) = self.nodes[id as usize];
                    path.push(e);
                    id = parent;
                }
                path.reverse();
                path
            })
            .collect();
        (stacks, st.partial)
    }

    pub fn import(&mut self, stacks: &[Vec<u32>], partial: Partial) -> u32 {
        let ids: Vec<u32> = stacks
            .iter()
            .map(|path| path.iter().fold(EMPTY, |parent, &e| self.push(parent, e)))
            .collect();
        let set = self.intern_set(ids);
        self.state(set, partial)
    }

    fn alternatives(&self, rule: usize) -> Vec<u32> {
        let mut pos = self.g.rule_start[rule] as usize;
        let mut out = vec![pos as u32];
        loop {
            while !self.g.elems[pos].ends_sequence() {
                pos += 1;
            }
            if self.g.elems[pos] == Elem::Alt {
                pos += 1;
                out.push(pos as u32);
            } else {
                return out;
            }
        }
    }

    fn push(&mut self, parent: u32, elem: u32) -> u32 {
        if let Some(&id) = self.node_ids.get(&(elem, parent)) {
            return id;
        }
        let id = self.nodes.len() as u32;
        self.nodes.push((elem, parent));
        self.node_ids.insert((elem, parent), id);
        id
    }

    /// `llama_grammar_advance_stack`: the stacks with a terminal (or nothing) on top that `stack`
    /// stands for, appended to `out`.
    /// Stops early (without caching) once a step holds more than [`MAX_STACKS`] stacks, setting
    /// `over`: the bound is checked as the expansion goes, because one expansion alone can be
    /// exponential in the grammar's size.
    fn expand(&mut self, stack: u32, out: &mut Vec<u32>) {
        if self.over {
            return;
        }
        if stack == EMPTY {
            out.push(EMPTY);
            return;
        }
        if let Some(done) = self.expanded.get(&stack) {
            out.extend_from_slice(done);
            return;
        }
        let (elem, parent) = self.nodes[stack as usize];
        let mut result = Vec::new();
        match self.g.elems[elem as usize] {
            Elem::RuleRef(rule) => {
                let after = elem + 1;
                let base = if self.g.elems[after as usize].ends_sequence() {
                    parent
                } else {
                    self.push(parent, after)
                };
                for alt in self.alternatives(rule as usize) {
                    let s = if self.g.elems[alt as usize].ends_sequence() {
                        base
                    } else {
                        self.push(base, alt)
                    };
                    self.expand(s, &mut result);
                    if result.len() > MAX_STACKS {
                        result.sort_unstable();
                        result.dedup();
                    }
                    if self.over || result.len() > MAX_STACKS {
                        self.over = true;
                        return;
                    }
                }
            }
            _ => result.push(stack),
        }
        result.sort_unstable();
        result.dedup();
        out.extend_from_slice(&result);
        if out.len() > 2 * MAX_STACKS {
            out.sort_unstable();
            out.dedup();
            self.over |= out.len() > MAX_STACKS;
        }
        self.expanded.insert(stack, result.into_boxed_slice());
    }

    fn intern_set(&mut self, mut stacks: Vec<u32>) -> u32 {
        stacks.sort_unstable();
        stacks.dedup();
        if let Some(&id) = self.set_ids.get(stacks.as_slice()) {
            return id;
        }
        let id = self.sets.len() as u32;
        let boxed: Box<[u32]> = stacks.into_boxed_slice();
        self.sets.push(boxed.clone());
        self.set_ids.insert(boxed, id);
        id
    }

    fn state(&mut self, set: u32, partial: Partial) -> u32 {
        if let Some(&id) = self.state_ids.get(&(set, partial)) {
            return id;
        }
        let id = self.states.len() as u32;
        let width = if partial.complete() { 256 } else { 64 };
        let table = self.table.len() as u32;
        self.table.resize(self.table.len() + width, UNKNOWN);
        self.states.push(State {
            set,
            partial,
            table,
            plain_loop: None,
        });
        self.state_ids.insert((set, partial), id);
        id
    }

    pub fn stacks(&self, s: u32) -> &[u32] {
        &self.sets[self.states[s as usize].set as usize]
    }

    /// The element on top of a (non-empty) stack.
    pub fn top(&self, stack: u32) -> Elem {
        self.g.elems[self.nodes[stack as usize].0 as usize]
    }

    pub fn is_complete(&self, s: u32) -> bool {
        self.states[s as usize].partial.complete()
    }

    /// The grammar may end here.
    pub fn can_end(&self, s: u32) -> bool {
        self.is_complete(s) && self.stacks(s).binary_search(&EMPTY).is_ok()
    }

    /// The state after one more byte (`DEAD` if the grammar cannot take it).
    #[inline]
    pub fn next(&mut self, s: u32, b: u8) -> u32 {
        let st = &self.states[s as usize];
        let idx = if st.partial.complete() {
            st.table as usize + b as usize
        } else {
            if b & 0xC0 != 0x80 {
                return DEAD;
            }
            st.table as usize + (b & 0x3F) as usize
        };
        let t = self.table[idx];
        if t != UNKNOWN {
            return t;
        }
        let t = self.compute_next(s, b);
        self.table[idx] = t;
        t
    }

    fn compute_next(&mut self, s: u32, b: u8) -> u32 {
        let st = self.states[s as usize];
        let p = st.partial;
        if p.complete() {
            let start = |value: u32, remaining: u8, lo: u8, hi: u8| Partial {
                value,
                remaining,
                lo,
                hi,
            };
            let partial = match b {
                0x00..=0x7F => return self.after_char(st.set, b as u32),
                0xC2..=0xDF => start((b & 0x1F) as u32, 1, 0x80, 0xBF),
                0xE0 => start(0, 2, 0xA0, 0xBF),
                0xE1..=0xEC | 0xEE | 0xEF => start((b & 0x0F) as u32, 2, 0x80, 0xBF),
                0xED => start(0x0D, 2, 0x80, 0x9F),
                0xF0 => start(0, 3, 0x90, 0xBF),
                0xF1..=0xF3 => start((b & 0x07) as u32, 3, 0x80, 0xBF),
                0xF4 => start(4, 3, 0x80, 0x8F),
                _ => return DEAD,
            };
            return self.partial_state(st.set, partial);
        }
        if b < p.lo || b > p.hi {
            return DEAD;
        }
        let value = (p.value << 6) | (b & 0x3F) as u32;
        if p.remaining == 1 {
            return self.after_char(st.set, value);
        }
        self.partial_state(
            st.set,
            Partial {
                value,
                remaining: p.remaining - 1,
                lo: 0x80,
                hi: 0xBF,
            },
        )
    }

    /// The stacks of `set` that could take some completion of the unfinished character.
    fn partial_state(&mut self, set: u32, partial: Partial) -> u32 {
        let (lo, hi) = partial.range();
        let kept: Vec<u32> = self.sets[set as usize]
            .iter()
            .copied()
            .filter(|&stack| {
                stack != EMPTY
                    && self.g.class_at[self.nodes[stack as usize].0 as usize]
                        .is_some_and(|c| self.g.classes[c as usize].intersects(lo, hi))
            })
            .collect();
        if kept.is_empty() {
            return DEAD;
        }
        let set = self.intern_set(kept);
        self.state(set, partial)
    }

    /// `llama_grammar_accept`: the state after the code point `c` (complete).
    fn after_char(&mut self, set: u32, c: u32) -> u32 {
        let mut out = Vec::new();
        self.over = false;
        let stacks = self.sets[set as usize].clone();
        for &stack in stacks.iter() {
            if stack == EMPTY {
                continue;
            }
            let (elem, parent) = self.nodes[stack as usize];
            let Some(class) = self.g.class_at[elem as usize] else {
                continue; // a token element: matched by whole tokens only
            };
            if !self.g.classes[class as usize].contains(c) {
                continue;
            }
            let after = self.g.class_end[elem as usize];
            let raw = if self.g.elems[after as usize].ends_sequence() {
                parent
            } else {
                self.push(parent, after)
            };
            self.expand(raw, &mut out);
        }
        self.complete_state(out)
    }

    /// The state after a whole token matched by token elements (`<[id]>`, `!<[id]>`) on top of
    /// some stacks; `None` if no stack takes it this way.
    pub fn after_token_elements(&mut self, s: u32, token: u32) -> Option<Vec<u32>> {
        if !self.is_complete(s) {
            return None;
        }
        let stacks = self.stacks(s).to_vec();
        let mut out = Vec::new();
        let mut any = false;
        self.over = false;
        for stack in stacks {
            if stack == EMPTY {
                continue;
            }
            let (elem, parent) = self.nodes[stack as usize];
            let matched = match self.g.elems[elem as usize] {
                Elem::Token(t) => t == token,
                Elem::TokenNot(t) => t != token,
                _ => false,
            };
            if !matched {
                continue;
            }
            any = true;
            let after = elem + 1;
            let raw = if self.g.elems[after as usize].ends_sequence() {
                parent
            } else {
                self.push(parent, after)
            };
            self.expand(raw, &mut out);
        }
        if self.over {
            // Past the bound: this way leads nowhere (see `MAX_STACKS`).
            self.overflowed = true;
            out.clear();
        }
        any.then_some(out)
    }

    /// The union of a state's stacks with more stacks (a token that matched both as text and
    /// as a token element). Only for complete states.
    pub fn union(&mut self, s: u32, more: Vec<u32>) -> u32 {
        let mut all = self.stacks(s).to_vec();
        all.extend(more);
        self.over = false;
        self.complete_state(all)
    }

    /// Whether every plain-text character (see `vocab::is_plain_ascii`, plus every non-ASCII
    /// character) leads from `s` straight back to `s`: then every token made of plain text is
    /// allowed, whatever it is, and a vocabulary walk can take such subtrees whole.
    pub fn plain_loop(&mut self, s: u32) -> bool {
        if let Some(v) = self.states[s as usize].plain_loop {
            return v;
        }
        let v = self.compute_plain_loop(s);
        self.states[s as usize].plain_loop = Some(v);
        v
    }

    fn compute_plain_loop(&mut self, s: u32) -> bool {
        if !self.is_complete(s) || s == DEAD {
            return false;
        }
        // Plain text: 20-21, 23-5B, 5D-7E and everything from 80 up.
        const PLAIN: [(u32, u32); 4] = [
            (0x20, 0x21),
            (0x23, 0x5B),
            (0x5D, 0x7E),
            (0x80, super::MAX_CODE_POINT),
        ];
        let total: u64 = PLAIN.iter().map(|&(a, b)| (b - a) as u64 + 1).sum();
        for &stack in self.stacks(s) {
            if stack == EMPTY {
                return false; // the plain character would not lead back to a set holding it
            }
            let Some(class) = self.g.class_at[self.nodes[stack as usize].0 as usize] else {
                return false;
            };
            let c = &self.g.classes[class as usize];
            let n: u64 = PLAIN.iter().map(|&(a, b)| c.count_in(a, b)).sum();
            if n != 0 && n != total {
                return false; // some plain characters match and others do not
            }
        }
        // All plain characters now act alike; one of them decides.
        self.next(s, b'a') == s
    }
}
