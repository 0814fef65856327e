//! The Modelfile: parsing with Ollama's syntax (`parser/parser.go`) and writing one back.
//!
//! ```text
//! # comment (only where an instruction could start)
//! FROM llama3.2                 # a model name, a GGUF file, or a directory of GGUF files
//! PARAMETER temperature 0.7     # typed and checked against Ollama's parameter list
//! PARAMETER stop <|eot_id|>     # repeated `stop` lines make a list
//! TEMPLATE """{{ .Prompt }}"""  # "..." and """...""" may span lines; no escapes
//! SYSTEM You are a pirate.      # unquoted values run to the end of the line
//! ADAPTER ./lora.gguf
//! LICENSE """..."""             # may repeat
//! MESSAGE user Hello            # roles: system, user, assistant
//! ```
//!
//! Instruction names are case-insensitive; parameter names and message roles are not. Values are
//! trimmed; a UTF-8 BOM (or a UTF-16 file with a BOM) is accepted; CR, LF and CRLF end lines.
//! Every error names its line. Unlike Ollama, a `PARAMETER` is checked when the file is parsed
//! (unknown names and mistyped values are errors with the line; deprecated names are warnings),
//! and ASCII control characters in values are dropped but other Unicode is kept as written.

pub mod params;

use std::fmt;

pub use params::{ParamError, ParamType, ParamValue, Parameters};

/// A parsed Modelfile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Modelfile {
    pub commands: Vec<Command>,
    /// Non-fatal findings (deprecated parameters), each with its line.
    pub warnings: Vec<ParseError>,
}

/// One instruction and the line it starts on (1-based; 0 for generated commands).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub line: usize,
    pub instruction: Instruction,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Instruction {
    /// A model name, or a path to a GGUF file or a directory of them.
    From(String),
    Parameter {
        name: String,
        value: String,
    },
    Template(String),
    System(String),
    Adapter(String),
    License(String),
    Message {
        role: Role,
        content: String,
    },
    /// Minimum Ollama version the model needs (semver).
    Requires(String),
    /// A draft model for speculative decoding (Ollama's newer `DRAFT`).
    Draft(String),
    Renderer(String),
    Parser(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    System,
    User,
    Assistant,
}

impl Role {
    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "system" => Some(Role::System),
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// A Modelfile error; `line` is 1-based, 0 when it concerns the whole file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    pub line: usize,
    pub msg: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "(line {}): {}", self.line, self.msg)
        } else {
            f.write_str(&self.msg)
        }
    }
}

const INSTRUCTIONS: &str =
    "FROM, PARAMETER, TEMPLATE, SYSTEM, ADAPTER, LICENSE, MESSAGE, REQUIRES, DRAFT, RENDERER, PARSER";

const PARAMETER_USAGE: &str = "PARAMETER needs a name and a value, e.g. PARAMETER temperature 0.7";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    From,
    Parameter,
    Template,
    System,
    Adapter,
    License,
    Message,
    Requires,
    Draft,
    Renderer,
    Parser,
}

impl Kind {
    fn parse(word: &str) -> Option<Kind> {
        Some(match word.to_ascii_lowercase().as_str() {
            "from" => Kind::From,
            "parameter" => Kind::Parameter,
            "template" => Kind::Template,
            "system" => Kind::System,
            "adapter" => Kind::Adapter,
            "license" => Kind::License,
            "message" => Kind::Message,
            "requires" => Kind::Requires,
            "draft" => Kind::Draft,
            "renderer" => Kind::Renderer,
            "parser" => Kind::Parser,
            _ => return None,
        })
    }
}

/// Reads characters, counting lines (CR, LF and CRLF each end one line).
struct Reader<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
    line: usize,
    after_cr: bool,
}

impl Reader<'_> {
    fn peek(&mut self) -> Option<char> {
        self.chars.peek().copied()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.chars.next()?;
        match c {
            '\n' if self.after_cr => {} // second half of CRLF
            '\n' | '\r' => self.line += 1,
            _ => {}
        }
        self.after_cr = c == '\r';
        Some(c)
    }

    fn take_while(&mut self, f: impl Fn(char) -> bool) -> String {
        let mut s = String::new();
        while let Some(c) = self.peek().filter(|&c| f(c)) {
            s.push(c);
            self.next();
        }
        s
    }
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t'
}

fn is_newline(c: char) -> bool {
    c == '\n' || c == '\r'
}

fn err(line: usize, msg: impl Into<String>) -> ParseError {
    ParseError {
        line,
        msg: msg.into(),
    }
}

/// Ollama's `unquote`: a value in `"""…"""` or `"…"` loses its quotes; an opened quote that is not
/// closed yet gives `None`.
fn unquote(s: &str) -> Option<&str> {
    if let Some(rest) = s.strip_prefix("\"\"\"") {
        return (s.len() >= 6 && s.ends_with("\"\"\"")).then(|| &rest[..rest.len() - 3]);
    }
    if let Some(rest) = s.strip_prefix('"') {
        return (s.len() >= 2 && s.ends_with('"')).then(|| &rest[..rest.len() - 1]);
    }
    Some(s)
}

impl Modelfile {
    /// Parses Modelfile bytes: UTF-8 (a BOM is skipped), or UTF-16 with a BOM.
    pub fn parse_bytes(bytes: &[u8]) -> Result<Modelfile, ParseError> {
        let utf16 = |be: bool| {
            let units: Vec<u16> = bytes[2..]
                .chunks(2)
                .map(|c| {
                    let pair = [c[0], *c.get(1).unwrap_or(&0)];
                    if be {
                        u16::from_be_bytes(pair)
                    } else {
                        u16::from_le_bytes(pair)
                    }
                })
                .collect();
            String::from_utf16(&units).map_err(|_| err(0, "the Modelfile is not valid UTF-16"))
        };
        let text = match bytes {
            [0xFF, 0xFE, ..] => utf16(false)?,
            [0xFE, 0xFF, ..] => utf16(true)?,
            _ => match std::str::from_utf8(bytes) {
                Ok(s) => s.to_string(),
                Err(e) => {
                    let line = 1 + bytes[..e.valid_up_to()].iter().filter(|&&b| b == b'\n').count();
                    return Err(err(line, "the Modelfile is not valid UTF-8"));
                }
            },
        };
        Modelfile::parse(&text)
    }

    /// Parses Modelfile text.
    pub fn parse(text: &str) -> Result<Modelfile, ParseError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut r = Reader {
            chars: text.chars().peekable(),
            line: 1,
            after_cr: false,
        };
        let mut mf = Modelfile::default();
        let mut checked = Parameters::new();
        loop {
            r.take_while(|c| is_blank(c) || is_newline(c));
            let Some(c) = r.peek() else { break };
            if c == '#' {
                r.take_while(|c| !is_newline(c));
                continue;
            }
            let line = r.line;
            let word = r.take_while(|c| c.is_ascii_alphabetic());
            let kind = match r.peek() {
                Some(c) if is_blank(c) => Kind::parse(&word),
                Some(c) if !is_newline(c) => None,
                _ => match Kind::parse(&word) {
                    Some(Kind::Parameter) => return Err(err(line, PARAMETER_USAGE)),
                    Some(_) => {
                        return Err(err(
                            line,
                            format!("{} needs an argument", word.to_ascii_uppercase()),
                        ))
                    }
                    None => None,
                },
            };
            let Some(kind) = kind else {
                let rest = r.take_while(|c| !is_blank(c) && !is_newline(c));
                let shown: String = format!("{word}{rest}").chars().take(40).collect();
                return Err(err(
                    line,
                    format!("unknown instruction {shown:?}; instructions are {INSTRUCTIONS}"),
                ));
            };
            r.take_while(is_blank);
            let instruction = match kind {
                Kind::Parameter => {
                    let name = r.take_while(|c| c.is_ascii_alphanumeric() || c == '_');
                    if name.is_empty() || !r.peek().is_some_and(is_blank) {
                        let rest = r.take_while(|c| !is_blank(c) && !is_newline(c));
                        return Err(err(
                            line,
                            if name.is_empty() && rest.is_empty() {
                                PARAMETER_USAGE.to_string()
                            } else if r.peek().is_some_and(is_blank) || !rest.is_empty() {
                                format!(
                                    "invalid parameter name {:?}: use letters, digits and '_'",
                                    format!("{name}{rest}")
                                )
                            } else {
                                format!("PARAMETER {name} needs a value")
                            },
                        ));
                    }
                    r.take_while(is_blank);
                    let value = read_value(&mut r, line)?;
                    match checked.set_text(&name, &value) {
                        Ok(()) => {}
                        Err(ParamError::Deprecated(_)) => {
                            mf.warnings
                                .push(err(line, format!("parameter {name} is deprecated")));
                            continue;
                        }
                        Err(e) => return Err(err(line, e.to_string())),
                    }
                    Instruction::Parameter { name, value }
                }
                Kind::Message => {
                    let role = r.take_while(|c| c.is_ascii_alphabetic());
                    let role = match (Role::parse(&role), r.peek()) {
                        (Some(role), Some(c)) if is_blank(c) => role,
                        _ => {
                            return Err(err(
                                line,
                                "message role must be one of \"system\", \"user\", or \"assistant\"",
                            ))
                        }
                    };
                    r.take_while(is_blank);
                    Instruction::Message {
                        role,
                        content: read_value(&mut r, line)?,
                    }
                }
                _ => {
                    let value = read_value(&mut r, line)?;
                    match kind {
                        Kind::From => Instruction::From(value),
                        Kind::Template => Instruction::Template(value),
                        Kind::System => Instruction::System(value),
                        Kind::Adapter => Instruction::Adapter(value),
                        Kind::License => Instruction::License(value),
                        Kind::Requires => {
                            if !is_semver(&value) {
                                return Err(err(
                                    line,
                                    format!(
                                        "REQUIRES {value:?} must be a valid semver version (e.g. 0.14.0)"
                                    ),
                                ));
                            }
                            Instruction::Requires(value.trim_start_matches('v').to_string())
                        }
                        Kind::Draft => Instruction::Draft(value),
                        Kind::Renderer => Instruction::Renderer(value),
                        Kind::Parser => Instruction::Parser(value),
                        Kind::Parameter | Kind::Message => unreachable!("handled above"),
                    }
                }
            };
            mf.commands.push(Command { line, instruction });
        }
        if !mf
            .commands
            .iter()
            .any(|c| matches!(c.instruction, Instruction::From(_)))
        {
            return Err(err(0, "no FROM line"));
        }
        Ok(mf)
    }

    /// The `FROM` values, in order.
    pub fn from(&self) -> impl Iterator<Item = &str> {
        self.commands.iter().filter_map(|c| match &c.instruction {
            Instruction::From(s) => Some(s.as_str()),
            _ => None,
        })
    }

    /// The parameters of all `PARAMETER` lines (already checked by [`Modelfile::parse`]).
    pub fn parameters(&self) -> Result<Parameters, ParseError> {
        let mut p = Parameters::new();
        for c in &self.commands {
            if let Instruction::Parameter { name, value } = &c.instruction {
                p.set_text(name, value).map_err(|e| err(c.line, e.to_string()))?;
            }
        }
        Ok(p)
    }
}

/// Reads a value: to the end of the line, or, if it opens a quote, to the line where the quote
/// closes. Trimmed and unquoted.
fn read_value(r: &mut Reader<'_>, start_line: usize) -> Result<String, ParseError> {
    let mut buf = String::new();
    loop {
        match r.next() {
            None => {
                return match unquote(buf.trim()) {
                    Some(v) => Ok(v.to_string()),
                    None => Err(err(
                        start_line,
                        format!(
                            "unterminated {} quote: the value that starts here never ends",
                            if buf.trim_start().starts_with("\"\"\"") {
                                "\"\"\""
                            } else {
                                "\""
                            }
                        ),
                    )),
                }
            }
            Some(c) if is_newline(c) => {
                if let Some(v) = unquote(buf.trim()) {
                    return Ok(v.to_string());
                }
                buf.push(c);
            }
            Some(c) if c.is_ascii_control() && c != '\t' => {}
            Some(c) => buf.push(c),
        }
    }
}

/// golang.org/x/mod/semver's `IsValid` (with the leading `v` optional): `MAJOR[.MINOR[.PATCH
/// [-pre][+build]]]`, numbers without leading zeros.
fn is_semver(s: &str) -> bool {
    let s = s.strip_prefix('v').unwrap_or(s);
    let (core, build) = match s.split_once('+') {
        Some((c, b)) => (c, Some(b)),
        None => (s, None),
    };
    let (core, pre) = match core.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (core, None),
    };
    let nums: Vec<&str> = core.split('.').collect();
    let num_ok =
        |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'));
    let ident_ok = |s: &str| {
        !s.is_empty()
            && s.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
    };
    nums.len() <= 3
        && nums.iter().all(|n| num_ok(n))
        && (pre.is_none() && build.is_none() || nums.len() == 3)
        && pre.is_none_or(|p| {
            ident_ok(p)
                && p.split('.')
                    .all(|id| !id.bytes().all(|b| b.is_ascii_digit()) || num_ok(id))
        })
        && build.is_none_or(ident_ok)
}

/// Ollama's `quote` for writing a value back, made safe for more values: a value that would
/// not read back as itself unquoted (it has a line break, leading or trailing whitespace, starts
/// with a quote, or is empty) is wrapped in `"…"`, or in `"""…"""` if it contains a `"`.
pub fn quote(s: &str) -> String {
    let needs = s.is_empty()
        || s.contains(['\n', '\r'])
        || s.starts_with(char::is_whitespace)
        || s.ends_with(char::is_whitespace)
        || s.starts_with('"');
    if !needs {
        s.to_string()
    } else if s.contains('"') {
        format!("\"\"\"{s}\"\"\"")
    } else {
        format!("\"{s}\"")
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.instruction {
            Instruction::From(v) => write!(f, "FROM {}", quote(v)),
            Instruction::Parameter { name, value } => write!(f, "PARAMETER {name} {}", quote(value)),
            Instruction::Template(v) => write!(f, "TEMPLATE {}", quote(v)),
            Instruction::System(v) => write!(f, "SYSTEM {}", quote(v)),
            Instruction::Adapter(v) => write!(f, "ADAPTER {}", quote(v)),
            Instruction::License(v) => write!(f, "LICENSE {}", quote(v)),
            Instruction::Message { role, content } => {
                write!(f, "MESSAGE {} {}", role.as_str(), quote(content))
            }
            Instruction::Requires(v) => write!(f, "REQUIRES {}", quote(v)),
            Instruction::Draft(v) => write!(f, "DRAFT {}", quote(v)),
            Instruction::Renderer(v) => write!(f, "RENDERER {}", quote(v)),
            Instruction::Parser(v) => write!(f, "PARSER {}", quote(v)),
        }
    }
}

impl fmt::Display for Modelfile {
    /// The Modelfile as text, one instruction per line; parsing it gives the same commands
    /// (except for values no quoting can express: a line inside the value ending in `"""`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in &self.commands {
            writeln!(f, "{c}")?;
        }
        Ok(())
    }
}

impl Command {
    pub fn new(instruction: Instruction) -> Command {
        Command { line: 0, instruction }
    }
}

#[cfg(test)]
mod tests;
