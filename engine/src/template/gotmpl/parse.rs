//! Lexer and parser of Go's `text/template` syntax, into a small tree.
//!
//! Covers what Ollama templates use and the rest of the language around it: text and actions,
//! trim markers (`{{-` / `-}}`), comments, pipelines with `|`, variables (`$x := …`, `$x = …`,
//! `$`), fields and chains (`.A.B`, `$x.A`, `(…).A`), literals (strings, raw strings, chars,
//! numbers, `true`/`false`/`nil`), `if`/`else if`/`else`, `range` (with `$i, $v :=` and `else`),
//! `with` (and `else with`), `define`/`template`/`block`, `break`/`continue`.

use std::collections::HashMap;

use crate::{Error, Result};

/// A template: its main body and the templates it `define`s.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    pub root: Vec<Node>,
    pub defines: HashMap<String, Vec<Node>>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Text(String),
    Action(Pipe),
    If(Branch),
    Range(Branch),
    With(Branch),
    Template { name: String, pipe: Option<Pipe> },
    Break,
    Continue,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Branch {
    pub pipe: Pipe,
    pub list: Vec<Node>,
    pub else_list: Option<Vec<Node>>,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Pipe {
    /// Variables declared (`:=`) or assigned (`=`) by this pipeline.
    pub decl: Vec<String>,
    pub is_assign: bool,
    pub cmds: Vec<Cmd>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Cmd {
    pub args: Vec<Arg>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// `.A.B` (empty idents would be `.`, which is [`Arg::Dot`]).
    Field(Vec<String>),
    /// `$name.A.B`; the name includes the `$`.
    Var(String, Vec<String>),
    Dot,
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// A function name.
    Ident(String),
    /// A parenthesized pipeline, optionally followed by fields: `(…).A.B`.
    Pipe(Box<Pipe>, Vec<String>),
}

// ---------------------------------------------------------------------------------------------
// Lexer

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Text(String),
    Open,
    Close,
    Field(String),
    Var(String),
    Ident(String),
    Str(String),
    Char(i64),
    Num(String),
    Dot,
    LParen,
    RParen,
    Pipe,
    Declare,
    Assign,
    Comma,
    Space,
}

struct Lexed {
    tok: Tok,
    line: usize,
}

fn lex(src: &str) -> Result<Vec<Lexed>> {
    let mut out: Vec<Lexed> = Vec::new();
    let b = src.as_bytes();
    let mut i = 0;
    let mut line = 1;
    let mut trim_next_text = false;
    while i < b.len() {
        // Text up to the next "{{".
        let start = i;
        let open = src[i..].find("{{").map(|p| i + p).unwrap_or(b.len());
        let mut text = &src[start..open];
        let left_trim =
            open + 2 < b.len() && b[open + 2] == b'-' && b.get(open + 3).is_some_and(|c| is_space(*c));
        if trim_next_text {
            text = text.trim_start_matches(is_space_char);
        }
        if left_trim {
            text = text.trim_end_matches(is_space_char);
        }
        line += src[start..open].matches('\n').count();
        if !text.is_empty() {
            out.push(Lexed {
                tok: Tok::Text(text.to_string()),
                line,
            });
        }
        trim_next_text = false;
        if open >= b.len() {
            break;
        }
        i = open + 2;
        if left_trim {
            i += 2;
        }
        // Comment: {{/* ... */}} (possibly with trim markers around).
        let after_ws = skip_spaces(b, i);
        if src[if left_trim { after_ws } else { i }..].starts_with("/*") {
            let cstart = if left_trim { after_ws } else { i };
            let end = src[cstart..]
                .find("*/")
                .map(|p| cstart + p + 2)
                .ok_or_else(|| parse_err(line, "unclosed comment"))?;
            line += src[cstart..end].matches('\n').count();
            let mut j = end;
            if src[j..].starts_with(" -}}") || src[j..].starts_with("\t-}}") || src[j..].starts_with("\n-}}")
            {
                trim_next_text = true;
                j += 4;
            } else if src[j..].starts_with("}}") {
                j += 2;
            } else {
                return Err(parse_err(line, "comment ends before closing delimiter"));
            }
            i = j;
            continue;
        }
        out.push(Lexed { tok: Tok::Open, line });
        // Inside an action.
        loop {
            if i >= b.len() {
                return Err(parse_err(line, "unclosed action"));
            }
            let c = b[i];
            // Right delimiter, with or without trim marker.
            if is_space(c) {
                let j = skip_spaces(b, i);
                if src[j..].starts_with("-}}") {
                    line += src[i..j].matches('\n').count();
                    out.push(Lexed {
                        tok: Tok::Close,
                        line,
                    });
                    trim_next_text = true;
                    i = j + 3;
                    break;
                }
                line += src[i..j].matches('\n').count();
                out.push(Lexed {
                    tok: Tok::Space,
                    line,
                });
                i = j;
                continue;
            }
            if src[i..].starts_with("}}") {
                out.push(Lexed {
                    tok: Tok::Close,
                    line,
                });
                i += 2;
                break;
            }
            let (tok, next) = match c {
                b'(' => (Tok::LParen, i + 1),
                b')' => (Tok::RParen, i + 1),
                b'|' => (Tok::Pipe, i + 1),
                b',' => (Tok::Comma, i + 1),
                b'=' => (Tok::Assign, i + 1),
                b':' if b.get(i + 1) == Some(&b'=') => (Tok::Declare, i + 2),
                b'"' => {
                    let (s, n) = lex_quoted(src, i, line)?;
                    (Tok::Str(s), n)
                }
                b'`' => {
                    let end = src[i + 1..]
                        .find('`')
                        .map(|p| i + 1 + p)
                        .ok_or_else(|| parse_err(line, "unterminated raw quoted string"))?;
                    line += src[i..end].matches('\n').count();
                    (Tok::Str(src[i + 1..end].to_string()), end + 1)
                }
                b'\'' => {
                    let (c, n) = lex_char(src, i, line)?;
                    (Tok::Char(c), n)
                }
                b'$' => {
                    let n = ident_end(b, i + 1);
                    (Tok::Var(src[i..n].to_string()), n)
                }
                b'.' => {
                    if b.get(i + 1).is_some_and(|c| c.is_ascii_digit()) {
                        let n = number_end(b, i);
                        (Tok::Num(src[i..n].to_string()), n)
                    } else {
                        let n = ident_end(b, i + 1);
                        if n == i + 1 {
                            (Tok::Dot, n)
                        } else {
                            (Tok::Field(src[i + 1..n].to_string()), n)
                        }
                    }
                }
                b'0'..=b'9' | b'-' | b'+' => {
                    let n = number_end(b, i);
                    if n == i || (n == i + 1 && !c.is_ascii_digit()) {
                        return Err(parse_err(line, &format!("unexpected {:?} in command", c as char)));
                    }
                    (Tok::Num(src[i..n].to_string()), n)
                }
                c if c == b'_' || c.is_ascii_alphabetic() || c >= 0x80 => {
                    let n = ident_end(b, i);
                    (Tok::Ident(src[i..n].to_string()), n)
                }
                _ => {
                    let ch = src[i..].chars().next().unwrap_or('?');
                    return Err(parse_err(line, &format!("unexpected {ch:?} in command")));
                }
            };
            out.push(Lexed { tok, line });
            i = next;
        }
    }
    Ok(out)
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_space_char(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

fn skip_spaces(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is_space(b[i]) {
        i += 1;
    }
    i
}

fn ident_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i] == b'_' || b[i].is_ascii_alphanumeric() || b[i] >= 0x80) {
        i += 1;
    }
    i
}

fn number_end(b: &[u8], mut i: usize) -> usize {
    if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
        i += 1;
    }
    while i < b.len() {
        let c = b[i];
        let exp_sign = (c == b'-' || c == b'+') && i > 0 && matches!(b[i - 1], b'e' | b'E' | b'p' | b'P');
        if c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || exp_sign {
            i += 1;
        } else {
            break;
        }
    }
    i
}

fn lex_quoted(src: &str, start: usize, line: usize) -> Result<(String, usize)> {
    let mut out = String::new();
    let mut chars = src[start + 1..].char_indices();
    while let Some((off, c)) = chars.next() {
        match c {
            '"' => return Ok((out, start + 1 + off + 1)),
            '\n' => break,
            '\\' => {
                let (_, e) = chars
                    .next()
                    .ok_or_else(|| parse_err(line, "unterminated quoted string"))?;
                match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'a' => out.push('\u{7}'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'v' => out.push('\u{b}'),
                    '\\' => out.push('\\'),
                    '"' => out.push('"'),
                    '\'' => out.push('\''),
                    'x' | 'u' | 'U' => {
                        let n = match e {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let hex: String = (0..n).filter_map(|_| chars.next().map(|(_, c)| c)).collect();
                        let v = u32::from_str_radix(&hex, 16)
                            .map_err(|_| parse_err(line, "bad escape in string"))?;
                        out.push(char::from_u32(v).ok_or_else(|| parse_err(line, "bad escape in string"))?);
                    }
                    _ => return Err(parse_err(line, "unknown escape sequence in string")),
                }
            }
            c => out.push(c),
        }
    }
    Err(parse_err(line, "unterminated quoted string"))
}

fn lex_char(src: &str, start: usize, line: usize) -> Result<(i64, usize)> {
    let rest = &src[start + 1..];
    let end = rest
        .find('\'')
        .ok_or_else(|| parse_err(line, "unterminated character constant"))?;
    let body = &rest[..end];
    let c = if let Some(esc) = body.strip_prefix('\\') {
        match esc {
            "n" => '\n',
            "t" => '\t',
            "r" => '\r',
            "\\" => '\\',
            "'" => '\'',
            "0" => '\0',
            _ => return Err(parse_err(line, "unsupported character escape")),
        }
    } else {
        let mut it = body.chars();
        match (it.next(), it.next()) {
            (Some(c), None) => c,
            _ => return Err(parse_err(line, "malformed character constant")),
        }
    };
    Ok((c as i64, start + 1 + end + 1))
}

fn parse_err(line: usize, msg: &str) -> Error {
    Error::Template(format!("line {line}: {msg}"))
}

// ---------------------------------------------------------------------------------------------
// Parser

/// Parses a template.
pub fn parse(src: &str) -> Result<Tree> {
    let toks = lex(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        defines: HashMap::new(),
        depth: 0,
    };
    let (root, end) = p.list(false)?;
    if let Some(end) = end {
        return Err(parse_err(end.1, &format!("unexpected {{{{{}}}}}", end.0)));
    }
    Ok(Tree {
        root,
        defines: p.defines,
    })
}

/// Deepest nesting of blocks and parentheses accepted: templates come from downloaded models,
/// and the parser and executor recurse once per level.
const MAX_DEPTH: usize = 200;

struct Parser {
    toks: Vec<Lexed>,
    pos: usize,
    defines: HashMap<String, Vec<Node>>,
    depth: usize,
}

/// How a list ended: `end`, `else`, … (with the line), or the end of input.
type ListEnd = Option<(String, usize)>;

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|l| &l.tok)
    }

    fn line(&self) -> usize {
        self.toks
            .get(self.pos)
            .or(self.toks.last())
            .map(|l| l.line)
            .unwrap_or(1)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|l| l.tok.clone());
        self.pos += 1;
        t
    }

    fn skip_space(&mut self) {
        while self.peek() == Some(&Tok::Space) {
            self.pos += 1;
        }
    }

    fn expect_close(&mut self, ctx: &str) -> Result<()> {
        self.skip_space();
        match self.next() {
            Some(Tok::Close) => Ok(()),
            _ => Err(parse_err(self.line(), &format!("unexpected token in {ctx}"))),
        }
    }

    /// Parses nodes until `{{end}}`/`{{else}}` (returned, not consumed beyond the keyword) or EOF.
    fn list(&mut self, in_control: bool) -> Result<(Vec<Node>, ListEnd)> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(parse_err(self.line(), "template nests too deeply"));
        }
        let r = self.list_inner(in_control);
        self.depth -= 1;
        r
    }

    fn list_inner(&mut self, in_control: bool) -> Result<(Vec<Node>, ListEnd)> {
        let mut nodes = Vec::new();
        while let Some(tok) = self.next() {
            match tok {
                Tok::Text(t) => nodes.push(Node::Text(t)),
                Tok::Open => {
                    self.skip_space();
                    let line = self.line();
                    match self.peek().cloned() {
                        Some(Tok::Ident(kw)) => match kw.as_str() {
                            "end" | "else" => {
                                self.pos += 1;
                                if !in_control {
                                    return Err(parse_err(line, &format!("unexpected {{{{{kw}}}}}")));
                                }
                                if kw == "end" {
                                    self.expect_close("end")?;
                                }
                                return Ok((nodes, Some((kw, line))));
                            }
                            "if" | "range" | "with" => {
                                self.pos += 1;
                                nodes.push(self.control(&kw)?);
                            }
                            "define" => {
                                self.pos += 1;
                                self.define()?;
                            }
                            "block" => {
                                self.pos += 1;
                                nodes.push(self.block()?);
                            }
                            "template" => {
                                self.pos += 1;
                                nodes.push(self.template_call()?);
                            }
                            "break" | "continue" => {
                                self.pos += 1;
                                self.expect_close(&kw)?;
                                nodes.push(if kw == "break" {
                                    Node::Break
                                } else {
                                    Node::Continue
                                });
                            }
                            _ => nodes.push(Node::Action(self.pipeline("command", true)?)),
                        },
                        Some(Tok::Close) => return Err(parse_err(line, "missing value for command")),
                        _ => nodes.push(Node::Action(self.pipeline("command", true)?)),
                    }
                }
                _ => return Err(parse_err(self.line(), "unexpected token")),
            }
        }
        Ok((nodes, None))
    }

    fn control(&mut self, kw: &str) -> Result<Node> {
        let line = self.line();
        let pipe = self.pipeline(kw, true)?;
        if pipe.cmds.is_empty() {
            return Err(parse_err(line, &format!("missing value for {kw}")));
        }
        let (list, end) = self.list(true)?;
        let mut else_list = None;
        match end {
            Some((ref e, _)) if e == "end" => {}
            Some((ref e, eline)) if e == "else" => {
                self.skip_space();
                // `else if …` / `else with …`: a nested control node that shares our {{end}}.
                if let Some(Tok::Ident(k)) = self.peek().cloned() {
                    if (k == "if" && kw == "if") || (k == "with" && kw == "with") {
                        self.pos += 1;
                        let nested = self.control(&k)?;
                        else_list = Some(vec![nested]);
                        return Ok(make_branch(kw, pipe, list, else_list));
                    }
                }
                self.expect_close("else")?;
                let (el, end2) = self.list(true)?;
                match end2 {
                    Some((ref e, _)) if e == "end" => {}
                    _ => return Err(parse_err(eline, &format!("expected end; found {end2:?}"))),
                }
                else_list = Some(el);
            }
            _ => return Err(parse_err(line, &format!("unexpected EOF in {kw}"))),
        }
        Ok(make_branch(kw, pipe, list, else_list))
    }

    fn template_name(&mut self, ctx: &str) -> Result<String> {
        self.skip_space();
        match self.next() {
            Some(Tok::Str(s)) => Ok(s),
            _ => Err(parse_err(
                self.line(),
                &format!("unexpected token in {ctx} clause"),
            )),
        }
    }

    fn define(&mut self) -> Result<()> {
        let line = self.line();
        let name = self.template_name("define")?;
        self.expect_close("define")?;
        let (body, end) = self.list(true)?;
        if !matches!(end, Some((ref e, _)) if e == "end") {
            return Err(parse_err(line, "unexpected EOF in define"));
        }
        self.defines.insert(name, body);
        Ok(())
    }

    fn block(&mut self) -> Result<Node> {
        let line = self.line();
        let name = self.template_name("block")?;
        let pipe = self.pipeline("block", false)?;
        let (body, end) = self.list(true)?;
        if !matches!(end, Some((ref e, _)) if e == "end") {
            return Err(parse_err(line, "unexpected EOF in block"));
        }
        self.defines.insert(name.clone(), body);
        Ok(Node::Template {
            name,
            pipe: Some(pipe).filter(|p| !p.cmds.is_empty()),
        })
    }

    fn template_call(&mut self) -> Result<Node> {
        let name = self.template_name("template")?;
        let pipe = self.pipeline("template", false)?;
        Ok(Node::Template {
            name,
            pipe: Some(pipe).filter(|p| !p.cmds.is_empty()),
        })
    }

    /// A pipeline up to the closing delimiter (consumed). `decl_ok` allows `$x :=` prefixes.
    fn pipeline(&mut self, ctx: &str, decl_ok: bool) -> Result<Pipe> {
        let mut pipe = Pipe::default();
        self.skip_space();
        if decl_ok {
            // Lookahead for `$a :=`, `$a =`, `$a, $b :=`.
            let save = self.pos;
            let mut vars = Vec::new();
            loop {
                self.skip_space();
                match self.peek().cloned() {
                    Some(Tok::Var(v)) => {
                        self.pos += 1;
                        self.skip_space();
                        match self.peek() {
                            Some(Tok::Declare) | Some(Tok::Assign) => {
                                pipe.is_assign = self.peek() == Some(&Tok::Assign);
                                self.pos += 1;
                                vars.push(v);
                                break;
                            }
                            Some(Tok::Comma) if ctx == "range" && vars.is_empty() => {
                                self.pos += 1;
                                vars.push(v);
                                continue;
                            }
                            _ => {
                                vars.clear();
                                self.pos = save;
                                break;
                            }
                        }
                    }
                    _ => {
                        vars.clear();
                        self.pos = save;
                        break;
                    }
                }
            }
            if vars.len() > 2 || (vars.len() == 2 && ctx != "range") {
                return Err(parse_err(self.line(), "too many declarations"));
            }
            pipe.decl = vars;
        }
        loop {
            self.skip_space();
            match self.peek() {
                Some(Tok::Close) => {
                    self.pos += 1;
                    break;
                }
                None => return Err(parse_err(self.line(), "unclosed action")),
                _ => {}
            }
            let cmd = self.command(false)?;
            pipe.cmds.push(cmd);
            self.skip_space();
            match self.peek() {
                Some(Tok::Pipe) => {
                    self.pos += 1;
                }
                Some(Tok::Close) => {}
                _ => return Err(parse_err(self.line(), &format!("unexpected token in {ctx}"))),
            }
        }
        if !pipe.decl.is_empty() && pipe.cmds.is_empty() {
            return Err(parse_err(self.line(), "missing value for declaration"));
        }
        Ok(pipe)
    }

    /// One command: operands up to `|`, `)` or the closing delimiter (not consumed).
    fn command(&mut self, in_paren: bool) -> Result<Cmd> {
        let mut args = Vec::new();
        loop {
            self.skip_space();
            match self.peek() {
                Some(Tok::Close) | Some(Tok::Pipe) | None => break,
                Some(Tok::RParen) if in_paren => break,
                _ => {}
            }
            args.push(self.operand()?);
        }
        if args.is_empty() {
            return Err(parse_err(self.line(), "empty command"));
        }
        Ok(Cmd { args })
    }

    fn operand(&mut self) -> Result<Arg> {
        let line = self.line();
        let tok = self.next().ok_or_else(|| parse_err(line, "unexpected EOF"))?;
        let mut arg = match tok {
            Tok::Field(f) => {
                let mut idents = vec![f];
                self.fields(&mut idents);
                return Ok(Arg::Field(idents));
            }
            Tok::Var(v) => {
                let mut idents = Vec::new();
                self.fields(&mut idents);
                return Ok(Arg::Var(v, idents));
            }
            Tok::Dot => Arg::Dot,
            Tok::Str(s) => Arg::Str(s),
            Tok::Char(c) => Arg::Int(c),
            Tok::Num(n) => {
                number(&n).ok_or_else(|| parse_err(line, &format!("illegal number syntax: {n:?}")))?
            }
            Tok::Ident(id) => match id.as_str() {
                "true" => Arg::Bool(true),
                "false" => Arg::Bool(false),
                "nil" => Arg::Nil,
                _ => Arg::Ident(id),
            },
            Tok::LParen => {
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return Err(parse_err(line, "template nests too deeply"));
                }
                let mut pipe = Pipe::default();
                loop {
                    pipe.cmds.push(self.command(true)?);
                    self.skip_space();
                    match self.next() {
                        Some(Tok::Pipe) => continue,
                        Some(Tok::RParen) => break,
                        _ => return Err(parse_err(line, "unclosed left paren")),
                    }
                }
                self.depth -= 1;
                Arg::Pipe(Box::new(pipe), Vec::new())
            }
            other => return Err(parse_err(line, &format!("unexpected {other:?} in operand"))),
        };
        if let Arg::Pipe(_, ref mut idents) = arg {
            self.fields(idents);
        }
        Ok(arg)
    }

    /// Field chain continuing an operand: `.A.B` immediately following.
    fn fields(&mut self, idents: &mut Vec<String>) {
        while let Some(Tok::Field(f)) = self.peek().cloned() {
            self.pos += 1;
            idents.push(f);
        }
    }
}

fn make_branch(kw: &str, pipe: Pipe, list: Vec<Node>, else_list: Option<Vec<Node>>) -> Node {
    let b = Branch {
        pipe,
        list,
        else_list,
    };
    match kw {
        "if" => Node::If(b),
        "range" => Node::Range(b),
        _ => Node::With(b),
    }
}

fn number(s: &str) -> Option<Arg> {
    let clean: String = s.chars().filter(|c| *c != '_').collect();
    let (neg, body) = match clean.strip_prefix('-') {
        Some(b) => (true, b.to_string()),
        None => (false, clean.trim_start_matches('+').to_string()),
    };
    let int = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()
    } else if let Some(o) = body.strip_prefix("0o").or_else(|| body.strip_prefix("0O")) {
        i64::from_str_radix(o, 8).ok()
    } else if let Some(bin) = body.strip_prefix("0b").or_else(|| body.strip_prefix("0B")) {
        i64::from_str_radix(bin, 2).ok()
    } else if body.len() > 1 && body.starts_with('0') && body.bytes().all(|c| c.is_ascii_digit()) {
        i64::from_str_radix(&body[1..], 8).ok()
    } else {
        body.parse::<i64>().ok()
    };
    if let Some(i) = int {
        return Some(Arg::Int(if neg { -i } else { i }));
    }
    let f: f64 = body.parse().ok()?;
    Some(Arg::Float(if neg { -f } else { f }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trim_markers_and_comments() {
        let t = parse("a  {{- .X -}}  b {{/* c */}} d {{- /* e */ -}} f").unwrap();
        assert_eq!(
            t.root,
            vec![
                Node::Text("a".into()),
                Node::Action(Pipe {
                    cmds: vec![Cmd {
                        args: vec![Arg::Field(vec!["X".into()])]
                    }],
                    ..Pipe::default()
                }),
                Node::Text("b ".into()),
                Node::Text(" d".into()),
                Node::Text("f".into()),
            ]
        );
    }

    #[test]
    fn declarations_chains_and_else_if() {
        let t = parse(r#"{{ range $i, $m := .Messages }}{{ if eq $m.Role "user" }}u{{ else if (index $.X 1).Y }}x{{ else }}o{{ end }}{{ end }}"#).unwrap();
        let Node::Range(r) = &t.root[0] else { panic!() };
        assert_eq!(r.pipe.decl, vec!["$i".to_string(), "$m".to_string()]);
        let Node::If(i) = &r.list[0] else { panic!() };
        let Some(els) = &i.else_list else { panic!() };
        assert!(matches!(&els[0], Node::If(b) if b.else_list.is_some()));
    }

    #[test]
    fn numbers_and_strings() {
        assert_eq!(number("0x1F"), Some(Arg::Int(31)));
        assert_eq!(number("-3"), Some(Arg::Int(-3)));
        assert_eq!(number("1.5e3"), Some(Arg::Float(1500.0)));
        let t = parse(r#"{{ "a\n\"b\"" }}{{ `raw\n` }}{{ 'x' }}"#).unwrap();
        assert_eq!(t.root.len(), 3);
        let Node::Action(p) = &t.root[0] else { panic!() };
        assert_eq!(p.cmds[0].args[0], Arg::Str("a\n\"b\"".into()));
    }

    #[test]
    fn errors_carry_lines() {
        let e = parse("ok\n{{ .Prompt ").unwrap_err().to_string();
        assert!(e.contains("unclosed action"), "{e}");
        let e = parse("{{ if .X }}\nno end").unwrap_err().to_string();
        assert!(e.contains("unexpected EOF"), "{e}");
        assert!(parse("{{ end }}").is_err());
        assert!(parse("{{ }}").is_err());
    }

    #[test]
    fn hostile_nesting_is_an_error_not_a_crash() {
        let deep_if = "{{ if 1 }}".repeat(100_000);
        assert!(parse(&deep_if)
            .unwrap_err()
            .to_string()
            .contains("nests too deeply"));
        let deep_paren = format!("{{{{ {}1{} }}}}", "(".repeat(100_000), ")".repeat(100_000));
        assert!(parse(&deep_paren)
            .unwrap_err()
            .to_string()
            .contains("nests too deeply"));
        assert!(parse(&"{{ (1) }}".repeat(1000)).is_ok());
    }

    #[test]
    fn define_and_block() {
        let t = parse(r#"{{ define "x" }}X{{ end }}{{ block "y" . }}Y{{ end }}{{ template "x" }}"#).unwrap();
        assert!(t.defines.contains_key("x") && t.defines.contains_key("y"));
        assert_eq!(t.root.len(), 2);
    }
}
