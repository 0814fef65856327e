//! Grammar-constrained decoding: GBNF grammars (llama.cpp's language), JSON schemas compiled to
//! them, and a matcher that says which tokens may come next.
//!
//! - [`Grammar`]: a parsed, checked grammar (`parse`), or one made from a JSON schema
//!   (`json_schema`) or Ollama's `format: "json"` ([`Grammar::json`]), or the tool calls a reply
//!   must consist of ([`tool_call_grammar`]).
//! - [`TokenVocab`]: the vocabulary as the grammar sees it (each token's bytes, which tokens end a
//!   generation), with a prefix trie of the token bytes built once per model.
//! - [`Matcher`]: one generation's position in the grammar. It advances on accepted tokens and
//!   computes the set of allowed next tokens ([`TokenMask`]) by walking the trie together with
//!   the grammar, pruning whole subtrees at the first byte the grammar rejects.
//!
//! The matching semantics are llama.cpp's (`src/llama-grammar.cpp`: a set of pushdown stacks, an
//! element at the top of each; code points decoded from token bytes, tokens may end inside a
//! UTF-8 character), with two deliberate differences: byte sequences that are not valid UTF-8
//! (overlong forms, surrogates) never match, and special (control) tokens never match text, so
//! a constrained output is always valid UTF-8 text of the language.

mod automaton;
pub mod json_schema;
mod matcher;
mod parse;
mod tool_calls;
mod vocab;

#[cfg(test)]
mod tests;

pub use automaton::MAX_STACKS;
pub use matcher::{Matcher, TokenMask};
pub use tool_calls::tool_call_grammar;
pub use vocab::{TokenKind, TokenVocab};

/// What can go wrong with a grammar or a schema.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrammarError {
    #[error("grammar error at line {line}, column {column}: {message}")]
    Parse {
        line: usize,
        column: usize,
        message: String,
    },
    #[error("grammar uses rule '{0}', which it does not define")]
    UndefinedRule(String),
    #[error("grammar has no 'root' rule")]
    NoRoot,
    #[error("grammar rule '{0}' is left-recursive (it can reach itself without consuming input), which llama.cpp grammars do not allow")]
    LeftRecursion(String),
    #[error("grammar token {0}: no such token in the model's vocabulary")]
    UnknownToken(String),
    #[error("JSON schema: {0}")]
    Schema(String),
    #[error("token {0} is not allowed by the grammar here")]
    Rejected(crate::TokenId),
}

/// One element of a compiled rule: llama.cpp's `llama_grammar_element`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Elem {
    /// End of the rule.
    End,
    /// Start of another alternative.
    Alt,
    RuleRef(u32),
    /// A character class starts: this code point (or range, with `RngUpper` after it)...
    Char(u32),
    /// ...or a negated class starts.
    CharNot(u32),
    /// Makes the preceding char the lower end of an inclusive range.
    RngUpper(u32),
    /// Another char (or range) of the same class.
    CharAlt(u32),
    /// `.`: any code point.
    CharAny,
    /// A whole token by id (`<[id]>`), or any token but this one (`!<[id]>`).
    Token(u32),
    TokenNot(u32),
    /// `<name>` before it is resolved against a vocabulary (index into `token_names`).
    TokenName(u32),
    TokenNameNot(u32),
}

impl Elem {
    fn ends_sequence(self) -> bool {
        matches!(self, Elem::End | Elem::Alt)
    }
}

/// A set of code points, as sorted, disjoint, inclusive ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CharClass {
    ranges: Vec<(u32, u32)>,
}

pub(crate) const MAX_CODE_POINT: u32 = 0x10FFFF;

impl CharClass {
    fn new(mut ranges: Vec<(u32, u32)>, negated: bool) -> Self {
        ranges.retain(|&(lo, hi)| lo <= hi);
        ranges.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            match merged.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        if negated {
            let mut complement = Vec::with_capacity(merged.len() + 1);
            let mut next = 0u32;
            for &(lo, hi) in &merged {
                if lo > next {
                    complement.push((next, lo - 1));
                }
                next = hi.saturating_add(1);
            }
            if next <= MAX_CODE_POINT {
                complement.push((next, MAX_CODE_POINT));
            }
            merged = complement;
        }
        CharClass { ranges: merged }
    }

    pub(crate) fn contains(&self, c: u32) -> bool {
        self.ranges
            .binary_search_by(|&(lo, hi)| {
                if hi < c {
                    std::cmp::Ordering::Less
                } else if lo > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok()
    }

    /// Whether some code point in `lo..=hi` is in the class.
    pub(crate) fn intersects(&self, lo: u32, hi: u32) -> bool {
        self.ranges.iter().any(|&(a, b)| a <= hi && lo <= b)
    }

    /// How many code points of `lo..=hi` are in the class.
    pub(crate) fn count_in(&self, lo: u32, hi: u32) -> u64 {
        self.ranges
            .iter()
            .map(|&(a, b)| {
                let (a, b) = (a.max(lo), b.min(hi));
                if a <= b {
                    (b - a) as u64 + 1
                } else {
                    0
                }
            })
            .sum()
    }
}

/// A compiled grammar: every rule's elements in one array, each rule ending with `End`.
#[derive(Clone, Debug)]
pub struct Grammar {
    pub(crate) elems: Vec<Elem>,
    pub(crate) rule_start: Vec<u32>,
    pub(crate) root: u32,
    /// For each element index that starts a character class, the class; else `None`.
    pub(crate) class_at: Vec<Option<u32>>,
    pub(crate) classes: Vec<CharClass>,
    /// For each class start, the index of the element after the class.
    pub(crate) class_end: Vec<u32>,
    pub(crate) token_names: Vec<String>,
}

impl Grammar {
    /// Parses GBNF text. The start rule is `root`.
    pub fn parse(text: &str) -> Result<Grammar, GrammarError> {
        parse::parse(text)
    }

    /// The grammar of `format: "json"`: a JSON object, with whitespace bounded as in llama.cpp's
    /// `json.gbnf` (see [`json_schema::JSON_OBJECT_GRAMMAR`]).
    pub fn json() -> Grammar {
        Grammar::parse(json_schema::JSON_OBJECT_GRAMMAR).expect("the built-in JSON grammar parses")
    }

    /// The grammar llama.cpp's `json_schema_to_grammar` makes for this schema.
    pub fn from_json_schema(schema: &serde_json::Value) -> Result<Grammar, GrammarError> {
        let text = json_schema::schema_to_gbnf(schema)?;
        Grammar::parse(&text).map_err(|e| GrammarError::Schema(format!("generated grammar is invalid ({e})")))
    }

    /// Number of rules, including the helper rules of groups and repetitions.
    pub fn n_rules(&self) -> usize {
        self.rule_start.len()
    }

    fn from_rules(
        rules: Vec<Vec<Elem>>,
        names: Vec<String>,
        root: u32,
        token_names: Vec<String>,
    ) -> Result<Grammar, GrammarError> {
        if let Some(i) = find_left_recursion(&rules) {
            return Err(GrammarError::LeftRecursion(names[i].clone()));
        }
        let mut elems = Vec::new();
        let mut rule_start = Vec::with_capacity(rules.len());
        for r in &rules {
            rule_start.push(elems.len() as u32);
            elems.extend_from_slice(r);
        }
        let mut class_at = vec![None; elems.len()];
        let mut class_end = vec![0u32; elems.len()];
        let mut classes = Vec::new();
        let mut i = 0;
        while i < elems.len() {
            let (negated, any) = match elems[i] {
                Elem::Char(_) => (false, false),
                Elem::CharNot(_) => (true, false),
                Elem::CharAny => (false, true),
                _ => {
                    i += 1;
                    continue;
                }
            };
            let start = i;
            let mut ranges = Vec::new();
            loop {
                let lo = match elems[i] {
                    Elem::Char(c) | Elem::CharNot(c) | Elem::CharAlt(c) => c,
                    _ => 0,
                };
                if let Some(Elem::RngUpper(hi)) = elems.get(i + 1) {
                    ranges.push((lo, *hi));
                    i += 2;
                } else {
                    if !matches!(elems[i], Elem::CharAny) {
                        ranges.push((lo, lo));
                    }
                    i += 1;
                }
                if !matches!(elems.get(i), Some(Elem::CharAlt(_))) {
                    break;
                }
            }
            let class = if any {
                CharClass::new(vec![(0, MAX_CODE_POINT)], false)
            } else {
                CharClass::new(ranges, negated)
            };
            class_at[start] = Some(classes.len() as u32);
            class_end[start] = i as u32;
            classes.push(class);
        }
        Ok(Grammar {
            elems,
            rule_start,
            root,
            class_at,
            classes,
            class_end,
            token_names,
        })
    }

    /// Replaces `<name>` token references with ids from `vocab`.
    fn resolve_tokens(&self, vocab: &TokenVocab) -> Result<Grammar, GrammarError> {
        let mut g = self.clone();
        for e in g.elems.iter_mut() {
            let (idx, negated) = match *e {
                Elem::TokenName(i) => (i, false),
                Elem::TokenNameNot(i) => (i, true),
                Elem::Token(id) | Elem::TokenNot(id) => {
                    if id as usize >= vocab.n_tokens() {
                        return Err(GrammarError::UnknownToken(format!("<[{id}]>")));
                    }
                    continue;
                }
                _ => continue,
            };
            let name = &self.token_names[idx as usize];
            let id = vocab
                .find_token(name.as_bytes())
                .ok_or_else(|| GrammarError::UnknownToken(name.clone()))?;
            *e = if negated {
                Elem::TokenNot(id)
            } else {
                Elem::Token(id)
            };
        }
        Ok(g)
    }
}

/// Finds a left-recursive rule: one that can reach itself through references each preceded only
/// by references that can match nothing. llama.cpp rejects these (`detect_left_recursion`); its
/// check only counts a rule as able to match nothing when an alternative is literally empty,
/// while this one computes it, so a grammar it accepts can never send the matcher into endless
/// expansion.
fn find_left_recursion(rules: &[Vec<Elem>]) -> Option<usize> {
    let alternatives = |r: &Vec<Elem>| -> Vec<Vec<Elem>> {
        r.split(|e| e.ends_sequence())
            .map(|a| a.to_vec())
            .collect::<Vec<_>>()
    };
    let alts: Vec<Vec<Vec<Elem>>> = rules
        .iter()
        .map(|r| {
            let mut a = alternatives(r);
            a.pop(); // the empty slice after the final `End`
            a
        })
        .collect();
    // Which rules can match the empty string (fixpoint).
    let mut nullable = vec![false; rules.len()];
    loop {
        let mut changed = false;
        for (i, rule_alts) in alts.iter().enumerate() {
            if nullable[i] {
                continue;
            }
            let n = rule_alts.iter().any(|alt| {
                alt.iter()
                    .all(|e| matches!(e, Elem::RuleRef(r) if nullable[*r as usize]))
            });
            if n {
                nullable[i] = true;
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    // Edges to the rules each rule can start with.
    let leftmost: Vec<Vec<usize>> = alts
        .iter()
        .map(|rule_alts| {
            let mut out = Vec::new();
            for alt in rule_alts {
                for e in alt {
                    match *e {
                        Elem::RuleRef(r) => {
                            out.push(r as usize);
                            if !nullable[r as usize] {
                                break;
                            }
                        }
                        _ => break,
                    }
                }
            }
            out
        })
        .collect();
    // A cycle in that graph (iterative DFS: white 0, grey 1, black 2).
    let mut color = vec![0u8; rules.len()];
    for start in 0..rules.len() {
        if color[start] != 0 {
            continue;
        }
        let mut stack = vec![(start, 0usize)];
        color[start] = 1;
        while let Some(&mut (node, ref mut next)) = stack.last_mut() {
            if let Some(&succ) = leftmost[node].get(*next) {
                *next += 1;
                match color[succ] {
                    0 => {
                        color[succ] = 1;
                        stack.push((succ, 0));
                    }
                    1 => return Some(succ),
                    _ => {}
                }
            } else {
                color[node] = 2;
                stack.pop();
            }
        }
    }
    None
}
