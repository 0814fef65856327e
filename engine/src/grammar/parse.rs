//! The GBNF parser: grammar text as llama.cpp writes it (`grammars/README.md`) to [`Grammar`].
//!
//! Same language and same rewriting as `llama_grammar_parser`: `name ::= alternatives` rules,
//! string literals, character classes (ranges, negation, escapes), `.`, rule references, groups,
//! `*` `+` `?` `{m}` `{m,}` `{m,n}` (rewritten into helper rules), token references `<[id]>`,
//! `!<[id]>` and `<name>`, and `#` comments. Errors say where (line and column) and what.

use std::collections::HashMap;

use super::{Elem, Grammar, GrammarError};

/// llama.cpp's limit on `{m,n}` counts.
const MAX_REPETITIONS: u64 = 2000;

type PResult<T> = Result<T, (usize, String)>;

struct Parser<'a> {
    src: &'a [u8],
    symbols: HashMap<String, u32>,
    names: Vec<String>,
    rules: Vec<Option<Vec<Elem>>>,
    token_names: Vec<String>,
}

pub(super) fn parse(text: &str) -> Result<Grammar, GrammarError> {
    let mut p = Parser {
        src: text.as_bytes(),
        symbols: HashMap::new(),
        names: Vec::new(),
        rules: Vec::new(),
        token_names: Vec::new(),
    };
    p.parse_all().map_err(|(pos, message)| {
        let (line, column) = line_col(text, pos);
        GrammarError::Parse {
            line,
            column,
            message,
        }
    })?;
    let Parser {
        symbols,
        names,
        rules,
        token_names,
        ..
    } = p;
    let mut defined = Vec::with_capacity(rules.len());
    for (id, rule) in rules.into_iter().enumerate() {
        match rule {
            Some(r) => defined.push(r),
            None => {
                return Err(GrammarError::UndefinedRule(names[id].clone()));
            }
        }
    }
    let root = *symbols.get("root").ok_or(GrammarError::NoRoot)?;
    Grammar::from_rules(defined, names, root, token_names)
}

fn line_col(text: &str, pos: usize) -> (usize, usize) {
    let pos = pos.min(text.len());
    let before = &text.as_bytes()[..pos];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[line_start..]).chars().count() + 1;
    (line, column)
}

fn is_word_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

impl Parser<'_> {
    fn at(&self, pos: usize) -> u8 {
        self.src.get(pos).copied().unwrap_or(0)
    }

    fn symbol(&mut self, name: &str) -> u32 {
        if let Some(&id) = self.symbols.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.symbols.insert(name.to_string(), id);
        self.names.push(name.to_string());
        self.rules.push(None);
        id
    }

    /// A fresh helper rule named after the rule it was made for (`name_N`, as llama.cpp).
    fn generated_symbol(&mut self, base: &str) -> u32 {
        let id = self.names.len() as u32;
        let name = format!("{base}_{id}");
        self.symbols.insert(name.clone(), id);
        self.names.push(name);
        self.rules.push(None);
        id
    }

    fn set_rule(&mut self, id: u32, rule: Vec<Elem>) {
        self.rules[id as usize] = Some(rule);
    }

    fn skip_space(&self, mut pos: usize, newline_ok: bool) -> usize {
        loop {
            match self.at(pos) {
                b' ' | b'\t' => pos += 1,
                b'\r' | b'\n' if newline_ok => pos += 1,
                b'#' => {
                    while !matches!(self.at(pos), 0 | b'\r' | b'\n') {
                        pos += 1;
                    }
                }
                _ => return pos,
            }
        }
    }

    fn parse_name(&self, pos: usize) -> PResult<usize> {
        let mut end = pos;
        while is_word_char(self.at(end)) {
            end += 1;
        }
        if end == pos {
            return Err((pos, "expecting a rule name".into()));
        }
        Ok(end)
    }

    fn parse_int(&self, pos: usize) -> PResult<(u64, usize)> {
        let mut end = pos;
        while self.at(end).is_ascii_digit() {
            end += 1;
        }
        if end == pos {
            return Err((pos, "expecting an integer".into()));
        }
        let text = std::str::from_utf8(&self.src[pos..end]).unwrap_or("0");
        let v = text
            .parse::<u64>()
            .map_err(|_| (pos, format!("integer {text} is too large")))?;
        Ok((v, end))
    }

    fn parse_hex(&self, pos: usize, digits: usize) -> PResult<(u32, usize)> {
        let mut v: u32 = 0;
        for i in 0..digits {
            let c = self.at(pos + i);
            let d = (c as char)
                .to_digit(16)
                .ok_or_else(|| (pos, format!("expecting {digits} hex digits")))?;
            v = v.wrapping_shl(4) | d;
        }
        Ok((v, pos + digits))
    }

    /// One character of a literal or class: an escape or one UTF-8 encoded code point.
    fn parse_char(&self, pos: usize) -> PResult<(u32, usize)> {
        match self.at(pos) {
            0 if pos >= self.src.len() => Err((pos, "unexpected end of input".into())),
            b'\\' => {
                let c = match self.at(pos + 1) {
                    b'x' => return self.parse_hex(pos + 2, 2),
                    b'u' => return self.parse_hex(pos + 2, 4),
                    b'U' => return self.parse_hex(pos + 2, 8),
                    b't' => '\t' as u32,
                    b'r' => '\r' as u32,
                    b'n' => '\n' as u32,
                    c @ (b'\\' | b'"' | b'[' | b']') => c as u32,
                    _ => return Err((pos, "unknown escape".into())),
                };
                Ok((c, pos + 2))
            }
            _ => {
                // The source is a &str, so this is a valid UTF-8 sequence.
                let rest = std::str::from_utf8(&self.src[pos..]).unwrap_or("");
                match rest.chars().next() {
                    Some(ch) => Ok((ch as u32, pos + ch.len_utf8())),
                    None => Err((pos, "unexpected end of input".into())),
                }
            }
        }
    }

    fn parse_all(&mut self) -> PResult<()> {
        let mut pos = self.skip_space(0, true);
        while pos < self.src.len() {
            pos = self.parse_rule(pos)?;
        }
        Ok(())
    }

    fn parse_rule(&mut self, start: usize) -> PResult<usize> {
        let name_end = self.parse_name(start)?;
        let name = String::from_utf8_lossy(&self.src[start..name_end]).into_owned();
        let pos = self.skip_space(name_end, false);
        let id = self.symbol(&name);
        if !self.src[pos..].starts_with(b"::=") {
            return Err((pos, "expecting ::=".into()));
        }
        let pos = self.skip_space(pos + 3, true);
        let mut pos = self.parse_alternates(pos, &name, id, false)?;
        match self.at(pos) {
            b'\r' => pos += if self.at(pos + 1) == b'\n' { 2 } else { 1 },
            b'\n' => pos += 1,
            _ if pos >= self.src.len() => {}
            _ => return Err((pos, "expecting newline or end of input".into())),
        }
        Ok(self.skip_space(pos, true))
    }

    fn parse_alternates(&mut self, pos: usize, rule_name: &str, id: u32, nested: bool) -> PResult<usize> {
        let mut rule = Vec::new();
        let mut pos = self.parse_sequence(pos, rule_name, &mut rule, nested)?;
        while self.at(pos) == b'|' {
            rule.push(Elem::Alt);
            pos = self.skip_space(pos + 1, true);
            pos = self.parse_sequence(pos, rule_name, &mut rule, nested)?;
        }
        rule.push(Elem::End);
        self.set_rule(id, rule);
        Ok(pos)
    }

    fn parse_sequence(
        &mut self,
        mut pos: usize,
        rule_name: &str,
        rule: &mut Vec<Elem>,
        nested: bool,
    ) -> PResult<usize> {
        // Where the last item starts in `rule`: what a following */+/?/{} repeats.
        let mut last_start = rule.len();
        while pos < self.src.len() {
            let c = self.at(pos);
            if c == b'"' {
                pos += 1;
                last_start = rule.len();
                while self.at(pos) != b'"' {
                    if pos >= self.src.len() {
                        return Err((pos, "unexpected end of input in a string literal".into()));
                    }
                    let (ch, next) = self.parse_char(pos)?;
                    rule.push(Elem::Char(ch));
                    pos = next;
                }
                pos = self.skip_space(pos + 1, nested);
            } else if c == b'[' {
                pos += 1;
                let negated = self.at(pos) == b'^';
                if negated {
                    pos += 1;
                }
                last_start = rule.len();
                while self.at(pos) != b']' {
                    if pos >= self.src.len() {
                        return Err((pos, "unexpected end of input in a character class".into()));
                    }
                    let (ch, next) = self.parse_char(pos)?;
                    pos = next;
                    rule.push(if last_start < rule.len() {
                        Elem::CharAlt(ch)
                    } else if negated {
                        Elem::CharNot(ch)
                    } else {
                        Elem::Char(ch)
                    });
                    if self.at(pos) == b'-' && self.at(pos + 1) != b']' {
                        if pos + 1 >= self.src.len() {
                            return Err((pos + 1, "unexpected end of input in a character class".into()));
                        }
                        let (hi, next) = self.parse_char(pos + 1)?;
                        pos = next;
                        rule.push(Elem::RngUpper(hi));
                    }
                }
                pos = self.skip_space(pos + 1, nested);
            } else if c == b'<' || c == b'!' {
                let negated = c == b'!';
                if negated {
                    pos += 1;
                }
                let (elem, next) = self.parse_token(pos, negated)?;
                last_start = rule.len();
                rule.push(elem);
                pos = self.skip_space(next, nested);
            } else if is_word_char(c) {
                let end = self.parse_name(pos)?;
                let name = String::from_utf8_lossy(&self.src[pos..end]).into_owned();
                let id = self.symbol(&name);
                pos = self.skip_space(end, nested);
                last_start = rule.len();
                rule.push(Elem::RuleRef(id));
            } else if c == b'(' {
                let open = pos;
                pos = self.skip_space(pos + 1, true);
                let sub = self.generated_symbol(rule_name);
                pos = self.parse_alternates(pos, rule_name, sub, true)?;
                last_start = rule.len();
                rule.push(Elem::RuleRef(sub));
                if self.at(pos) != b')' {
                    return Err((pos, format!("expecting ')' to close the '(' at byte {open}")));
                }
                pos = self.skip_space(pos + 1, nested);
            } else if c == b'.' {
                last_start = rule.len();
                rule.push(Elem::CharAny);
                pos = self.skip_space(pos + 1, nested);
            } else if c == b'*' || c == b'+' || c == b'?' {
                let at = pos;
                pos = self.skip_space(pos + 1, nested);
                let (min, max) = match c {
                    b'*' => (0, None),
                    b'+' => (1, None),
                    _ => (0, Some(1)),
                };
                self.repeat(rule, last_start, min, max, rule_name, at)?;
            } else if c == b'{' {
                let at = pos;
                pos = self.skip_space(pos + 1, nested);
                if !self.at(pos).is_ascii_digit() {
                    return Err((pos, "expecting an integer".into()));
                }
                let (min, end) = self.parse_int(pos)?;
                pos = self.skip_space(end, nested);
                let max = if self.at(pos) == b'}' {
                    pos = self.skip_space(pos + 1, nested);
                    Some(min)
                } else if self.at(pos) == b',' {
                    pos = self.skip_space(pos + 1, nested);
                    let mut max = None;
                    if self.at(pos).is_ascii_digit() {
                        let (m, end) = self.parse_int(pos)?;
                        max = Some(m);
                        pos = self.skip_space(end, nested);
                    }
                    if self.at(pos) != b'}' {
                        return Err((pos, "expecting '}'".into()));
                    }
                    pos = self.skip_space(pos + 1, nested);
                    max
                } else {
                    return Err((pos, "expecting ',' or '}'".into()));
                };
                if min > MAX_REPETITIONS || max.is_some_and(|m| m > MAX_REPETITIONS) {
                    return Err((at, format!("more than {MAX_REPETITIONS} repetitions")));
                }
                if max.is_some_and(|m| m < min) {
                    return Err((at, "repetition maximum below its minimum".into()));
                }
                self.repeat(rule, last_start, min, max, rule_name, at)?;
            } else {
                break;
            }
        }
        Ok(pos)
    }

    /// `<[id]>`, `<name>` (resolved against the vocabulary later), with `!` for "any token but".
    fn parse_token(&mut self, pos: usize, negated: bool) -> PResult<(Elem, usize)> {
        if self.at(pos) != b'<' {
            return Err((pos, "expecting '<'".into()));
        }
        if self.at(pos + 1) == b'[' {
            let (id, end) = self.parse_int(pos + 2)?;
            if self.at(end) != b']' || self.at(end + 1) != b'>' {
                return Err((end, "expecting ']>'".into()));
            }
            let id = u32::try_from(id).map_err(|_| (pos, "token id too large".to_string()))?;
            let e = if negated {
                Elem::TokenNot(id)
            } else {
                Elem::Token(id)
            };
            return Ok((e, end + 2));
        }
        let close = self.src[pos..]
            .iter()
            .position(|&b| b == b'>')
            .ok_or((pos, "expecting '>'".to_string()))?;
        let text = String::from_utf8_lossy(&self.src[pos..pos + close + 1]).into_owned();
        let idx = self.token_names.len() as u32;
        self.token_names.push(text);
        let e = if negated {
            Elem::TokenNameNot(idx)
        } else {
            Elem::TokenName(idx)
        };
        Ok((e, pos + close + 1))
    }

    /// Applies `{min,max}` to the item `rule[last_start..]`, as llama.cpp rewrites it:
    /// `S{m,n}` is `S` m times then `S'(n-m)` with `S'(x) ::= S S'(x-1) |`; an open maximum is
    /// `S' ::= S S' |`.
    fn repeat(
        &mut self,
        rule: &mut Vec<Elem>,
        last_start: usize,
        min: u64,
        max: Option<u64>,
        rule_name: &str,
        at: usize,
    ) -> PResult<()> {
        if last_start == rule.len() {
            return Err((at, "expecting an item before */+/?/{".into()));
        }
        let item: Vec<Elem> = rule[last_start..].to_vec();
        if min == 0 {
            rule.truncate(last_start);
        } else {
            for _ in 1..min {
                rule.extend_from_slice(&item);
            }
        }
        let n_opt = match max {
            None => 1,
            Some(m) => m - min,
        };
        let mut last_rec = 0;
        for i in 0..n_opt {
            let id = self.generated_symbol(rule_name);
            let mut rec = item.clone();
            if max.is_none() {
                rec.push(Elem::RuleRef(id));
            } else if i > 0 {
                rec.push(Elem::RuleRef(last_rec));
            }
            rec.push(Elem::Alt);
            rec.push(Elem::End);
            self.set_rule(id, rec);
            last_rec = id;
        }
        if n_opt > 0 {
            rule.push(Elem::RuleRef(last_rec));
        }
        Ok(())
    }
}
