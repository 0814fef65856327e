//! Grammar tests: the parser (valid and malformed grammars), matching of strings, token masks
//! against a plain re-implementation of llama.cpp's stack algorithm, and token elements.

use std::sync::Arc;

use super::{Elem, Grammar, GrammarError, Matcher, TokenKind, TokenMask, TokenVocab};
use crate::TokenId;

fn byte_vocab() -> Arc<TokenVocab> {
    // One token per byte (like byte-fallback tokens), plus an end-of-generation token last.
    let mut toks: Vec<(Vec<u8>, TokenKind)> = (0..=255u8).map(|b| (vec![b], TokenKind::Text)).collect();
    toks.push((b"</s>".to_vec(), TokenKind::EndOfGeneration));
    Arc::new(TokenVocab::new(toks))
}

/// Whether the grammar accepts exactly the string `s`.
fn accepts(g: &Grammar, s: &str) -> bool {
    let mut m = Matcher::new(g, byte_vocab()).unwrap();
    m.accept_bytes(s.as_bytes()).is_ok() && m.can_end()
}

/// Whether `s` is a prefix of some string the grammar accepts.
fn accepts_prefix(g: &Grammar, s: &[u8]) -> bool {
    let mut m = Matcher::new(g, byte_vocab()).unwrap();
    m.accept_bytes(s).is_ok()
}

fn parse_err(text: &str) -> GrammarError {
    match Grammar::parse(text) {
        Ok(_) => panic!("grammar should not parse:\n{text}"),
        Err(e) => e,
    }
}

#[test]
fn parses_llama_cpp_grammar_syntax() {
    let g = Grammar::parse(
        r#"
        # a comment
        root  ::= greeting " " name ("!" | "?")? # trailing comment
        greeting ::= "hello" | "hi"
        name ::= [A-Z] [a-z]{1,5} ( "-" [A-Z] [a-z]* )*
        "#,
    )
    .unwrap();
    assert!(accepts(&g, "hello Bob!"));
    assert!(accepts(&g, "hi Ann-Marie"));
    assert!(accepts(&g, "hi Al"));
    assert!(!accepts(&g, "hi al"));
    assert!(!accepts(&g, "hello Bobbbbby"));
    assert!(!accepts(&g, "hello Bob!!"));
    assert!(!accepts(&g, "hello"));
}

#[test]
fn literals_escapes_and_utf8() {
    let g = Grammar::parse(r#"root ::= "a\tb\n\"\\" [\x41-\x43] "\u00e9" "\U0001F600" "日本""#).unwrap();
    assert!(accepts(&g, "a\tb\n\"\\Bé😀日本"));
    assert!(!accepts(&g, "a\tb\n\"\\Dé😀日本"));
    let g = Grammar::parse(r#"root ::= [\[\]] | "\x2D""#).unwrap();
    assert!(accepts(&g, "["));
    assert!(accepts(&g, "]"));
    assert!(accepts(&g, "-"));
}

#[test]
fn classes_negation_any_and_repetitions() {
    let g = Grammar::parse(
        r#"root ::= [^abc\n]+ "." . [a-c0-9_]? x{2} y{1,3} z{2,}
x ::= "x"
y ::= "y"
z ::= "z""#,
    )
    .unwrap();
    assert!(accepts(&g, "dé.\u{1F600}xxyzz"));
    assert!(accepts(&g, "q.q5xxyyyzzzz"));
    assert!(!accepts(&g, "a.qxxyzz"));
    assert!(!accepts(&g, "q.qxyzz"));
    assert!(!accepts(&g, "q.qxxyyyyzz"));
    assert!(!accepts(&g, "q.qxxyz"));
    let g = Grammar::parse(r#"root ::= "ab"{0,2} "c"{3}"#).unwrap();
    assert!(accepts(&g, "ccc"));
    assert!(accepts(&g, "ababccc"));
    assert!(!accepts(&g, "abababccc"));
    assert!(!accepts(&g, "cc"));
}

#[test]
fn newlines_end_rules_except_inside_groups() {
    let g = Grammar::parse("root ::= (\n  \"a\"\n  | \"b\"\n)\n\n\nother ::= \"c\"\r\n").unwrap();
    assert!(accepts(&g, "a"));
    assert!(accepts(&g, "b"));
    assert_eq!(g.n_rules(), 3);
}

#[test]
fn malformed_grammars_have_positioned_errors() {
    let cases: &[(&str, usize, usize, &str)] = &[
        ("root ::= \"abc", 1, 14, "end of input"),
        ("root ::= [abc", 1, 14, "end of input"),
        ("root := \"a\"", 1, 6, "expecting ::="),
        ("root ::= \"\\q\"", 1, 11, "unknown escape"),
        ("root ::= (\"a\" | \"b\"", 1, 20, "expecting ')'"),
        ("root ::= \"a\" )", 1, 14, "expecting newline"),
        ("root ::= * \"a\"", 1, 10, "expecting an item"),
        ("root ::= \"a\"{3,1}", 1, 13, "below its minimum"),
        ("root ::= \"a\"{2001}", 1, 13, "2000"),
        ("root ::= \"a\"{x}", 1, 14, "expecting an integer"),
        ("\nroot ::= \"a\"\n  @", 3, 3, "rule name"),
        ("root ::= \"\\x4\"", 1, 13, "hex"),
        ("root ::= [\\-]", 1, 11, "unknown escape"),
        ("root ::= <[12", 1, 14, "]>"),
    ];
    for &(text, line, column, what) in cases {
        match parse_err(text) {
            GrammarError::Parse {
                line: l,
                column: c,
                message,
            } => {
                assert_eq!((l, c), (line, column), "{text:?}: {message}");
                assert!(message.contains(what), "{text:?}: {message}");
            }
            other => panic!("{text:?}: {other}"),
        }
    }
    assert_eq!(
        parse_err("root ::= foo"),
        GrammarError::UndefinedRule("foo".into())
    );
    assert_eq!(parse_err("start ::= \"a\""), GrammarError::NoRoot);
    assert_eq!(parse_err(""), GrammarError::NoRoot);
    let msg = parse_err("root ::= \"a\"{x}").to_string();
    assert!(msg.starts_with("grammar error at line 1, column 14"), "{msg}");
}

#[test]
fn left_recursion_is_rejected() {
    for (text, rule) in [
        ("root ::= root \"a\" | \"b\"", "root"),
        ("root ::= x\nx ::= y \"a\"\ny ::= x | \"b\"", "x"),
        // Through a rule that can match nothing, which llama.cpp's own check misses.
        ("root ::= e root \"a\" | \"b\"\ne ::= f\nf ::= \"\"", "root"),
        ("root ::= (\"\" | \"c\") root \"a\" | \"b\"", "root"),
    ] {
        match parse_err(text) {
            GrammarError::LeftRecursion(r) => assert_eq!(r, rule, "{text}"),
            other => panic!("{text}: {other}"),
        }
    }
    // Right recursion is fine.
    let g = Grammar::parse("root ::= \"(\" root \")\" | \"\"").unwrap();
    assert!(accepts(&g, "((()))"));
    assert!(!accepts(&g, "(()"));
}

#[test]
fn invalid_utf8_never_matches() {
    let g = Grammar::parse("root ::= .*").unwrap();
    assert!(accepts_prefix(&g, "é".as_bytes()));
    assert!(accepts_prefix(&g, &[0xC3])); // a character may be split across tokens
    for bad in [
        &[0x80][..],
        &[0xC0, 0x80],
        &[0xE0, 0x80, 0x80],
        &[0xED, 0xA0, 0x80],
        &[0xF4, 0x90, 0x80, 0x80],
        &[0xFF],
        &[0xC3, 0x41],
    ] {
        assert!(!accepts_prefix(&g, bad), "{bad:x?}");
    }
    let ascii = Grammar::parse("root ::= [a-z]*").unwrap();
    assert!(!accepts_prefix(&ascii, &[0xC3]));
}

// --- a plain reference implementation --------------------------------------------------------

/// llama.cpp's algorithm, written as plainly as possible: stacks are vectors of element indices,
/// and a string is accepted code point by code point.
struct Reference<'g> {
    g: &'g Grammar,
}

impl Reference<'_> {
    fn ends(&self, i: usize) -> bool {
        matches!(self.g.elems[i], Elem::End | Elem::Alt)
    }

    fn alts(&self, rule: u32) -> Vec<usize> {
        let mut pos = self.g.rule_start[rule as usize] as usize;
        let mut out = vec![pos];
        loop {
            while !self.ends(pos) {
                pos += 1;
            }
            if self.g.elems[pos] == Elem::Alt {
                pos += 1;
                out.push(pos);
            } else {
                return out;
            }
        }
    }

    fn advance(&self, stack: Vec<usize>, out: &mut Vec<Vec<usize>>) {
        let Some(&top) = stack.last() else {
            if !out.contains(&stack) {
                out.push(stack);
            }
            return;
        };
        if let Elem::RuleRef(r) = self.g.elems[top] {
            for a in self.alts(r) {
                let mut s = stack[..stack.len() - 1].to_vec();
                if !self.ends(top + 1) {
                    s.push(top + 1);
                }
                if !self.ends(a) {
                    s.push(a);
                }
                self.advance(s, out);
            }
        } else if !out.contains(&stack) {
            out.push(stack);
        }
    }

    fn start(&self) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        for a in self.alts(self.g.root) {
            let s = if self.ends(a) { vec![] } else { vec![a] };
            self.advance(s, &mut out);
        }
        out
    }

    fn step(&self, stacks: &[Vec<usize>], c: u32) -> Vec<Vec<usize>> {
        let mut out = Vec::new();
        for st in stacks {
            let Some(&top) = st.last() else { continue };
            let Some(class) = self.g.class_at[top] else {
                continue;
            };
            if self.g.classes[class as usize].contains(c) {
                let mut s = st[..st.len() - 1].to_vec();
                let after = self.g.class_end[top] as usize;
                if !self.ends(after) {
                    s.push(after);
                }
                self.advance(s, &mut out);
            }
        }
        out
    }

    /// Accepts the text of a token (valid UTF-8 only): Some(stacks) if alive.
    fn run(&self, stacks: &[Vec<usize>], text: &str) -> Option<Vec<Vec<usize>>> {
        let mut cur = stacks.to_vec();
        for ch in text.chars() {
            cur = self.step(&cur, ch as u32);
            if cur.is_empty() {
                return None;
            }
        }
        Some(cur)
    }
}

/// A small deterministic generator for the randomised tests.
pub(crate) struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

const MASK_GRAMMARS: &[&str] = &[
    r#"root ::= "{" ws ( pair ( "," ws pair )* )? "}"
pair ::= str ws ":" ws ( str | num )
str ::= "\"" [^"\\]* "\""
num ::= "-"? [0-9]+
ws ::= [ \n]*"#,
    r#"root ::= ( [a-c]{2,3} | "é" | "日本語" | [^a-z]{1,2} )* "."?"#,
    r#"root ::= ("ab" | "a" "b"? "c")+ | x
x ::= "x" x? "y""#,
    r#"root ::= [€-€] .? [\u00e0-\u00ff]+"#,
];

fn mask_vocab() -> Vec<String> {
    let base = [
        "a",
        "b",
        "c",
        "ab",
        "abc",
        "ca",
        "{",
        "}",
        "{\"",
        "\"",
        "\":",
        ",",
        ", ",
        " ",
        "\n",
        "\n\n",
        "-",
        "1",
        "12",
        "-3",
        "x",
        "xy",
        "y",
        "yy",
        "é",
        "日",
        "本語",
        "日本語",
        ".",
        "€",
        "ü",
        "àé",
        "a.",
        "\"a\"",
        "q",
        "Z",
        ":",
        "\\",
    ];
    base.iter().map(|s| s.to_string()).collect()
}

#[test]
fn masks_agree_with_the_reference_on_random_paths() {
    let texts = mask_vocab();
    let mut toks: Vec<(Vec<u8>, TokenKind)> = texts
        .iter()
        .map(|t| (t.as_bytes().to_vec(), TokenKind::Text))
        .collect();
    // Tokens that split multi-byte characters: "é" = c3 a9, "€" = e2 82 ac.
    toks.push((vec![0xC3], TokenKind::Text));
    toks.push((vec![0xA9], TokenKind::Text));
    toks.push((vec![0xE2, 0x82], TokenKind::Text));
    toks.push((vec![0xAC, b'a'], TokenKind::Text));
    toks.push((b"</s>".to_vec(), TokenKind::EndOfGeneration));
    toks.push((b"<ctrl>".to_vec(), TokenKind::Special));
    let vocab = Arc::new(TokenVocab::new(toks.clone()));
    let n = toks.len();
    let eos = (n - 2) as TokenId;

    let mut rng = Lcg(7);
    for text in MASK_GRAMMARS {
        let g = Grammar::parse(text).unwrap();
        let r = Reference { g: &g };
        for _walk in 0..40 {
            let mut m = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
            let mut stacks = r.start();
            let mut pending: Vec<u8> = Vec::new(); // bytes of an unfinished character
            let mut mask = TokenMask::new(n);
            for _step in 0..12 {
                m.fill_mask(&mut mask);
                // The reference decision for every token.
                let mut want = Vec::new();
                for (id, (bytes, kind)) in toks.iter().enumerate() {
                    let ok = match kind {
                        TokenKind::EndOfGeneration => {
                            pending.is_empty() && stacks.iter().any(|s| s.is_empty())
                        }
                        TokenKind::Special => false,
                        TokenKind::Text => {
                            let mut all = pending.clone();
                            all.extend_from_slice(bytes);
                            let valid = std::str::from_utf8(&all).map(|s| s.to_string()).or_else(|e| {
                                let ok = &all[..e.valid_up_to()];
                                match e.error_len() {
                                    None => Ok::<String, ()>(
                                        String::from_utf8_lossy(ok).into_owned() + "\u{0}PARTIAL",
                                    ),
                                    Some(_) => Err(()),
                                }
                            });
                            match valid {
                                Err(()) => false,
                                Ok(s) => match s.strip_suffix("\u{0}PARTIAL") {
                                    None => r.run(&stacks, &s).is_some(),
                                    // Ends inside a character: the complete part must be accepted and some
                                    // stack must take a code point the rest can become.
                                    Some(done) => match r.run(&stacks, done) {
                                        None => false,
                                        Some(st) => partial_possible(&r, &st, &all[done.len()..]),
                                    },
                                },
                            }
                        }
                    };
                    want.push(ok);
                    assert_eq!(
                        m.allows(id as TokenId),
                        ok,
                        "grammar {text:?}, token {id} {:?}",
                        String::from_utf8_lossy(bytes)
                    );
                    assert_eq!(
                        mask.contains(id as TokenId),
                        ok,
                        "mask: grammar {text:?}, token {id}"
                    );
                }
                let allowed: Vec<usize> = (0..n).filter(|&i| want[i] && i != eos as usize).collect();
                if allowed.is_empty() {
                    break;
                }
                let pick = allowed[rng.below(allowed.len())];
                m.accept(pick as TokenId).unwrap();
                pending.extend_from_slice(&toks[pick].0);
                let (done, rest) = match std::str::from_utf8(&pending) {
                    Ok(s) => (s.to_string(), Vec::new()),
                    Err(e) => (
                        String::from_utf8_lossy(&pending[..e.valid_up_to()]).into_owned(),
                        pending[e.valid_up_to()..].to_vec(),
                    ),
                };
                stacks = r.run(&stacks, &done).unwrap();
                pending = rest;
            }
        }
    }
}

/// Whether some code point starting with these bytes matches a stack top (the reference's
/// `match_partial_char`, by trying every completion).
fn partial_possible(r: &Reference, stacks: &[Vec<usize>], tail: &[u8]) -> bool {
    let len = match tail[0] {
        0xC0..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF7 => 4,
        _ => return false,
    };
    fn complete(r: &Reference, stacks: &[Vec<usize>], buf: &mut Vec<u8>, len: usize) -> bool {
        if buf.len() == len {
            return match std::str::from_utf8(buf) {
                Ok(s) => s
                    .chars()
                    .next()
                    .is_some_and(|c| !r.step(stacks, c as u32).is_empty()),
                Err(_) => false,
            };
        }
        for b in 0x80..=0xBFu8 {
            buf.push(b);
            let found = complete(r, stacks, buf, len);
            buf.pop();
            if found {
                return true;
            }
        }
        false
    }
    complete(r, stacks, &mut tail.to_vec(), len)
}

#[test]
fn eog_only_where_the_grammar_can_end() {
    let g = Grammar::parse(r#"root ::= "ab" "c"?"#).unwrap();
    let vocab = byte_vocab();
    let eos = 256;
    let mut m = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
    assert!(!m.allows(eos));
    m.accept(b'a' as TokenId).unwrap();
    assert!(!m.allows(eos));
    assert!(m.accept(eos).is_err());
    m.accept(b'b' as TokenId).unwrap();
    assert!(m.allows(eos) && m.allows(b'c' as TokenId) && !m.is_complete());
    m.accept(b'c' as TokenId).unwrap();
    assert!(m.is_complete());
    let mut mask = TokenMask::new(vocab.n_tokens());
    m.fill_mask(&mut mask);
    assert_eq!(mask.iter().collect::<Vec<_>>(), vec![eos]);
    m.accept(eos).unwrap();
    m.fill_mask(&mut mask);
    assert_eq!(mask.count(), 0);
}

#[test]
fn token_elements_match_whole_tokens() {
    let toks = vec![
        (b"<think>".to_vec(), TokenKind::Special),
        (b"</think>".to_vec(), TokenKind::Special),
        (b"a".to_vec(), TokenKind::Text),
        (b"b".to_vec(), TokenKind::Text),
        (b"<eos>".to_vec(), TokenKind::EndOfGeneration),
    ];
    let vocab = Arc::new(TokenVocab::new(toks));
    let g = Grammar::parse("root ::= <think> thought <[1]> \"a\"\nthought ::= !<[1]>*").unwrap();
    let mut m = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
    let mut mask = TokenMask::new(5);
    m.fill_mask(&mut mask);
    assert_eq!(mask.iter().collect::<Vec<_>>(), vec![0]);
    m.accept(0).unwrap();
    m.fill_mask(&mut mask);
    // Any token but </think> (and not the end), or </think> itself.
    assert_eq!(mask.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    m.accept(3).unwrap();
    m.accept(2).unwrap();
    m.accept(1).unwrap();
    m.fill_mask(&mut mask);
    assert_eq!(mask.iter().collect::<Vec<_>>(), vec![2]);
    m.accept(2).unwrap();
    assert!(m.can_end());
    // Unknown names and ids are errors.
    let bad = Grammar::parse("root ::= <nope>").unwrap();
    assert!(matches!(
        Matcher::new(&bad, Arc::clone(&vocab)),
        Err(GrammarError::UnknownToken(_))
    ));
    let bad = Grammar::parse("root ::= <[99]>").unwrap();
    assert!(matches!(
        Matcher::new(&bad, vocab),
        Err(GrammarError::UnknownToken(_))
    ));
}

#[test]
fn special_tokens_never_match_text() {
    let toks = vec![
        (b"ab".to_vec(), TokenKind::Special),
        (b"ab".to_vec(), TokenKind::Text),
    ];
    let vocab = Arc::new(TokenVocab::new(toks));
    let g = Grammar::parse("root ::= \"ab\"").unwrap();
    let mut m = Matcher::new(&g, vocab).unwrap();
    assert!(!m.allows(0));
    assert!(m.allows(1));
}

#[test]
fn json_format_grammar_accepts_objects_with_bounded_whitespace() {
    let g = Grammar::json();
    assert!(accepts(
        &g,
        r#"{"a": [1, 2.5e-3, {"b": null}], "c": "x\u00e9\"", "d": true}"#
    ));
    assert!(accepts(&g, "{ }"));
    assert!(accepts(&g, "{\n\t\"a\": 1\n}"));
    assert!(accepts(&g, "{\"a\" : 1 , \"b\" : [ 2 , 3 ] }"));
    assert!(!accepts(&g, "{\"a\": 1} ")); // the output ends at the closing brace
                                          // Whitespace is bounded as in llama.cpp's json.gbnf: one space, or one newline and at most
                                          // 20 spaces or tabs; never blank lines or runs of spaces.
    let indent = |n: usize| format!("{{\n{}\"a\": 1}}", " ".repeat(n));
    assert!(accepts(&g, &indent(20)));
    assert!(!accepts(&g, &indent(21)));
    assert!(!accepts(&g, "{\n\n\"a\": 1}"));
    assert!(!accepts(&g, "{\"a\":  1}"));
    assert!(!accepts(&g, "[1]"));
    assert!(!accepts(&g, "\"a\""));
    assert!(!accepts(&g, "{\"a\":01}x"));
    assert!(!accepts(&g, "{\"a\":\"\n\"}"));
}

#[test]
fn long_generations_stay_bounded() {
    // Ever-new states (a counter) must not grow the caches without bound.
    let g = Grammar::parse("root ::= [0-9a-f]{2000} \"!\"").unwrap();
    let vocab = byte_vocab();
    let mut m = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
    let mut mask = TokenMask::new(vocab.n_tokens());
    for i in 0..2000 {
        m.fill_mask(&mut mask);
        assert_eq!(mask.count(), 16);
        m.accept(b"0123456789abcdef"[i % 16] as TokenId).unwrap();
    }
    m.fill_mask(&mut mask);
    assert_eq!(mask.iter().collect::<Vec<_>>(), vec![b'!' as TokenId]);
}

#[test]
fn cached_masks_equal_fresh_ones() {
    // A string's body returns to the same state after every letter, so its mask is served from
    // the cache; alternating between states (body, after an escape, after the key) must never
    // hand out another state's mask.
    let g = Grammar::parse(r#"root ::= "{" "\"" ( [a-z] | "\\" ["n] )* "\"" ":" [0-9]+ "}""#).unwrap();
    let vocab = byte_vocab();
    let mut cached = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
    let mut mask = TokenMask::new(vocab.n_tokens());
    let mut fresh_mask = TokenMask::new(vocab.n_tokens());
    let text = br#"{"ab\ncd\"e\nf":12}"#;
    for i in 0..=text.len() {
        cached.fill_mask(&mut mask);
        cached.fill_mask(&mut mask); // twice in the same state: the second from the cache
        let mut fresh = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
        fresh.accept_bytes(&text[..i]).unwrap();
        fresh.fill_mask(&mut fresh_mask);
        assert_eq!(
            mask.iter().collect::<Vec<_>>(),
            fresh_mask.iter().collect::<Vec<_>>(),
            "after {:?}",
            String::from_utf8_lossy(&text[..i])
        );
        if i < text.len() {
            cached.accept(text[i] as TokenId).unwrap();
        }
    }
    assert!(mask.contains(256), "the end token after the closing brace");
}

/// Nested repetitions make the stack sets grow exponentially with the nesting (every split of
/// the text between the levels is a parse). Grammars come from requests: past `MAX_STACKS`
/// stacks a position counts as unreachable, so matching stays cheap and says why it stopped.
#[test]
fn nested_repetitions_are_bounded() {
    let g = Grammar::parse(&format!("root ::= \"a\"{}", "+".repeat(40))).unwrap();
    let mut m = Matcher::new(&g, byte_vocab()).unwrap();
    let mut accepted = 0;
    for _ in 0..200 {
        if m.accept(u32::from(b'a')).is_err() {
            break;
        }
        accepted += 1;
    }
    assert!(accepted >= 1, "the first 'a' is always fine");
    assert!(
        accepted < 200,
        "a 40-deep nesting cannot stay under the bound for 200 bytes"
    );
    assert!(m.too_ambiguous());
    // No more 'a' (the next position is past the bound); the text so far may still end.
    let mut mask = TokenMask::new(257);
    m.fill_mask(&mut mask);
    assert_eq!(mask.iter().collect::<Vec<_>>(), [256]);

    // Ambiguity of a usual size stays far below the bound.
    let g = Grammar::parse("root ::= (\"a\"+ \" \"?)+ \"b\"").unwrap();
    let mut m = Matcher::new(&g, byte_vocab()).unwrap();
    m.accept_bytes("a a aa ".repeat(100).as_bytes()).unwrap();
    m.accept_bytes(b"b").unwrap();
    assert!(m.can_end() && !m.too_ambiguous());
}
