//! Executes a parsed Go template against a [`Value`], with Go's semantics: `missingkey=zero`
//! lookups, variables scoped to their control structure, `range` over slices and maps (sorted
//! keys), `break`/`continue`, and the builtin functions (`and`, `or`, `not`, `len`, `index`,
//! `slice`, `eq`…, `print`/`printf`/`println`, `html`, `js`, `urlquery`) plus the caller's.

use std::collections::HashMap;

use super::parse::{Arg, Branch, Cmd, Node, Pipe, Tree};
use super::value::Value;
use crate::{Error, Result};

/// A function callable from templates (besides the builtins).
pub type Func = Box<dyn Fn(&[Value]) -> std::result::Result<Value, String>>;

/// The functions every template has.
pub const BUILTINS: &[&str] = &[
    "and", "or", "not", "len", "index", "slice", "eq", "ne", "lt", "le", "gt", "ge", "print", "printf",
    "println", "html", "js", "urlquery",
];

/// Nesting of `template` calls Go allows before giving up (a template calling itself).
const MAX_TEMPLATE_DEPTH: usize = 100;
/// Bound on loop iterations and output size: templates come from downloaded models.
const MAX_STEPS: u64 = 10_000_000;
const MAX_OUTPUT: usize = 64 << 20;

pub struct Exec<'a> {
    tree: &'a Tree,
    funcs: &'a HashMap<&'static str, Func>,
    vars: Vec<(String, Value)>,
    out: String,
    depth: usize,
    steps: u64,
}

enum Flow {
    Normal,
    Break,
    Continue,
}

type R<T> = std::result::Result<T, String>;

impl<'a> Exec<'a> {
    pub fn run(
        tree: &'a Tree,
        root: &[Node],
        funcs: &'a HashMap<&'static str, Func>,
        data: &Value,
    ) -> Result<String> {
        let mut e = Exec {
            tree,
            funcs,
            vars: vec![("$".to_string(), data.clone())],
            out: String::new(),
            depth: 0,
            steps: 0,
        };
        e.list(root, data)
            .map_err(|m| Error::Template(format!("executing template: {m}")))?;
        Ok(e.out)
    }

    fn step(&mut self) -> R<()> {
        self.steps += 1;
        if self.steps > MAX_STEPS || self.out.len() > MAX_OUTPUT {
            return Err("template exceeds its execution budget".into());
        }
        Ok(())
    }

    fn list(&mut self, nodes: &[Node], dot: &Value) -> R<Flow> {
        for n in nodes {
            self.step()?;
            match n {
                Node::Text(t) => self.out.push_str(t),
                Node::Action(p) => {
                    let v = self.pipe(p, dot)?;
                    if p.decl.is_empty() {
                        self.out.push_str(&v.to_go_string());
                    }
                }
                Node::If(b) => {
                    let f = self.branch(b, dot, |_, v| Ok(v.truth()), false)?;
                    if !matches!(f, Flow::Normal) {
                        return Ok(f);
                    }
                }
                Node::With(b) => {
                    let f = self.branch(b, dot, |_, v| Ok(v.truth()), true)?;
                    if !matches!(f, Flow::Normal) {
                        return Ok(f);
                    }
                }
                Node::Range(b) => self.range(b, dot)?,
                Node::Template { name, pipe } => {
                    let body = self
                        .tree
                        .defines
                        .get(name)
                        .ok_or_else(|| format!("template: no such template {name:?}"))?;
                    let new_dot = match pipe {
                        Some(p) => self.pipe(p, dot)?,
                        None => Value::Nil,
                    };
                    if self.depth >= MAX_TEMPLATE_DEPTH {
                        return Err(format!("exceeded maximum template depth ({MAX_TEMPLATE_DEPTH})"));
                    }
                    self.depth += 1;
                    // A called template sees only `$` = its dot.
                    let saved = std::mem::replace(&mut self.vars, vec![("$".to_string(), new_dot.clone())]);
                    let r = self.list(body, &new_dot);
                    self.vars = saved;
                    self.depth -= 1;
                    r?;
                }
                Node::Break => return Ok(Flow::Break),
                Node::Continue => return Ok(Flow::Continue),
            }
        }
        Ok(Flow::Normal)
    }

    fn branch(
        &mut self,
        b: &Branch,
        dot: &Value,
        test: impl Fn(&mut Self, &Value) -> R<bool>,
        set_dot: bool,
    ) -> R<Flow> {
        let mark = self.vars.len();
        let v = self.pipe(&b.pipe, dot)?;
        let r = if test(self, &v)? {
            let d = if set_dot { v } else { dot.clone() };
            self.list(&b.list, &d)
        } else if let Some(el) = &b.else_list {
            self.list(el, dot)
        } else {
            Ok(Flow::Normal)
        };
        self.vars.truncate(mark);
        r
    }

    fn range(&mut self, b: &Branch, dot: &Value) -> R<()> {
        let mark = self.vars.len();
        // The pipeline's value, without declaring its variables (range assigns them per item).
        let decl = b.pipe.decl.clone();
        let plain = Pipe {
            decl: Vec::new(),
            is_assign: false,
            cmds: b.pipe.cmds.clone(),
        };
        let v = self.pipe(&plain, dot)?;
        let items: Vec<(Value, Value)> = match &v {
            Value::List(l) => l
                .items
                .iter()
                .enumerate()
                .map(|(i, x)| (Value::Int(i as i64), x.clone()))
                .collect(),
            Value::Map(m) => m
                .entries
                .iter()
                .map(|(k, x)| (Value::str(k.as_str()), x.clone()))
                .collect(),
            Value::Int(n) => (0..*n).map(|i| (Value::Int(i), Value::Int(i))).collect(),
            Value::Missing | Value::Nil => Vec::new(),
            other => return Err(format!("range can't iterate over {}", other.to_go_string())),
        };
        if items.is_empty() {
            if let Some(el) = &b.else_list {
                self.list(el, dot)?;
            }
            self.vars.truncate(mark);
            return Ok(());
        }
        for (k, item) in items {
            self.step()?;
            let inner = self.vars.len();
            match decl.len() {
                1 => self.vars.push((decl[0].clone(), item.clone())),
                2 => {
                    self.vars.push((decl[0].clone(), k));
                    self.vars.push((decl[1].clone(), item.clone()));
                }
                _ => {}
            }
            let f = self.list(&b.list, &item)?;
            self.vars.truncate(inner);
            if matches!(f, Flow::Break) {
                break;
            }
        }
        self.vars.truncate(mark);
        Ok(())
    }

    fn pipe(&mut self, p: &Pipe, dot: &Value) -> R<Value> {
        let mut last: Option<Value> = None;
        for cmd in &p.cmds {
            last = Some(self.cmd(cmd, dot, last)?);
        }
        let v = last.unwrap_or(Value::Missing);
        for name in &p.decl {
            if p.is_assign {
                let slot = self
                    .vars
                    .iter_mut()
                    .rev()
                    .find(|(n, _)| n == name)
                    .ok_or_else(|| format!("undefined variable: {name}"))?;
                slot.1 = v.clone();
            } else {
                self.vars.push((name.clone(), v.clone()));
            }
        }
        Ok(v)
    }

    fn cmd(&mut self, c: &Cmd, dot: &Value, piped: Option<Value>) -> R<Value> {
        let first = &c.args[0];
        match first {
            Arg::Ident(name) => {
                let name = name.clone();
                self.call(&name, &c.args[1..], dot, piped)
            }
            _ => {
                if c.args.len() > 1 || piped.is_some() {
                    return Err(format!("can't give argument to non-function {}", describe(first)));
                }
                self.arg(first, dot)
            }
        }
    }

    fn arg(&mut self, a: &Arg, dot: &Value) -> R<Value> {
        Ok(match a {
            Arg::Dot => dot.clone(),
            Arg::Nil => Value::Nil,
            Arg::Bool(b) => Value::Bool(*b),
            Arg::Int(i) => Value::Int(*i),
            Arg::Float(f) => Value::Float(*f),
            Arg::Str(s) => Value::str(s.as_str()),
            Arg::Field(idents) => fields(dot, idents)?,
            Arg::Var(name, idents) => {
                let v = self
                    .vars
                    .iter()
                    .rev()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .ok_or_else(|| format!("undefined variable: {name}"))?;
                fields(&v, idents)?
            }
            Arg::Pipe(p, idents) => {
                let mark = self.vars.len();
                let v = self.pipe(p, dot)?;
                self.vars.truncate(mark);
                fields(&v, idents)?
            }
            Arg::Ident(name) => self.call(name, &[], dot, None)?,
        })
    }

    fn call(&mut self, name: &str, args: &[Arg], dot: &Value, piped: Option<Value>) -> R<Value> {
        // `and` and `or` evaluate lazily.
        if name == "and" || name == "or" {
            let mut vals: Vec<&Arg> = args.iter().collect();
            if vals.is_empty() && piped.is_none() {
                return Err(format!("wrong number of args for {name}: want at least 1 got 0"));
            }
            let mut last = Value::Missing;
            let mut piped = piped;
            let total = vals.len() + usize::from(piped.is_some());
            for i in 0..total {
                let v = if i < vals.len() {
                    let a = vals[i];
                    self.arg(a, dot)?
                } else {
                    piped.take().unwrap_or_default()
                };
                let t = v.truth();
                last = v;
                if (name == "and" && !t) || (name == "or" && t) {
                    return Ok(last);
                }
            }
            vals.clear();
            return Ok(last);
        }
        let mut vals = Vec::with_capacity(args.len() + 1);
        for a in args {
            vals.push(self.arg(a, dot)?);
        }
        if let Some(p) = piped {
            vals.push(p);
        }
        match builtin(name, &vals) {
            Some(r) => r.map_err(|e| format!("error calling {name}: {e}")),
            None => match self.funcs.get(name) {
                Some(f) => f(&vals).map_err(|e| format!("error calling {name}: {e}")),
                None => Err(format!("function {name:?} not defined")),
            },
        }
    }
}

fn describe(a: &Arg) -> String {
    match a {
        Arg::Field(f) => format!(".{}", f.join(".")),
        Arg::Var(v, f) if f.is_empty() => v.clone(),
        Arg::Var(v, f) => format!("{v}.{}", f.join(".")),
        Arg::Dot => ".".into(),
        Arg::Str(s) => format!("{s:?}"),
        other => format!("{other:?}"),
    }
}

/// `.A.B` on a value: struct fields, map keys (`missingkey=zero`: a missing key gives no value).
pub fn fields(v: &Value, idents: &[String]) -> R<Value> {
    let mut cur = v.clone();
    for id in idents {
        cur = match &cur {
            Value::Struct(s) => match s.fields.iter().find(|(n, _)| n == id) {
                Some((_, v)) => v.clone(),
                None => return Err(format!("can't evaluate field {id} in type {}", s.type_name)),
            },
            Value::Map(m) => m
                .entries
                .binary_search_by(|(k, _)| k.as_str().cmp(id))
                .map(|i| m.entries[i].1.clone())
                .unwrap_or(Value::Missing),
            Value::Missing | Value::Nil => {
                return Err(format!("nil pointer evaluating {}.{id}", cur.type_name()))
            }
            other => return Err(format!("can't evaluate field {id} in type {}", other.type_name())),
        };
    }
    Ok(cur)
}

fn builtin(name: &str, a: &[Value]) -> Option<R<Value>> {
    Some(match name {
        "not" => arity(name, a, 1).map(|_| Value::Bool(!a[0].truth())),
        "len" => arity(name, a, 1).and_then(|_| length(&a[0]).map(|n| Value::Int(n as i64))),
        "index" => index(a),
        "slice" => slice(a),
        "eq" => eq(a),
        "ne" => arity(name, a, 2)
            .and_then(|_| compare(&a[0], &a[1]).map(|o| Value::Bool(o != Some(std::cmp::Ordering::Equal)))),
        "lt" | "le" | "gt" | "ge" => arity(name, a, 2).and_then(|_| {
            let o = compare(&a[0], &a[1])?.ok_or("incompatible types for comparison")?;
            use std::cmp::Ordering::*;
            Ok(Value::Bool(match name {
                "lt" => o == Less,
                "le" => o != Greater,
                "gt" => o == Greater,
                _ => o != Less,
            }))
        }),
        "print" => Ok(Value::str(sprint(a))),
        "println" => Ok(Value::str({
            let mut s = a.iter().map(Value::to_go_string).collect::<Vec<_>>().join(" ");
            s.push('\n');
            s
        })),
        "printf" => match a.first() {
            Some(Value::Str(f)) => Ok(Value::str(super::printf::sprintf(f, &a[1..]))),
            _ => Err("printf needs a format string".into()),
        },
        "html" => Ok(Value::str(html_escape(&sprint(a)))),
        "js" => Ok(Value::str(js_escape(&sprint(a)))),
        "urlquery" => Ok(Value::str(url_escape(&sprint(a)))),
        _ => return None,
    })
}

fn arity(name: &str, a: &[Value], n: usize) -> R<()> {
    if a.len() == n {
        Ok(())
    } else {
        Err(format!(
            "wrong number of args for {name}: want {n} got {}",
            a.len()
        ))
    }
}

/// `fmt.Sprint`: spaces between operands when neither side is a string.
pub fn sprint(a: &[Value]) -> String {
    let mut out = String::new();
    for (i, v) in a.iter().enumerate() {
        if i > 0 && !matches!(v, Value::Str(_)) && !matches!(a[i - 1], Value::Str(_)) {
            out.push(' ');
        }
        out.push_str(&v.to_go_string());
    }
    out
}

fn length(v: &Value) -> R<usize> {
    match v {
        Value::Str(s) => Ok(s.len()),
        Value::List(l) => Ok(l.items.len()),
        Value::Map(m) => Ok(m.entries.len()),
        Value::Nil => Ok(0),
        other => Err(format!("len of type {}", other.type_name())),
    }
}

fn as_index(v: &Value) -> R<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::Float(f) if f.fract() == 0.0 => Ok(*f as i64),
        other => Err(format!(
            "cannot index slice/array with type {}",
            other.type_name()
        )),
    }
}

fn index(a: &[Value]) -> R<Value> {
    let (first, keys) = a
        .split_first()
        .ok_or("wrong number of args for index: want at least 1 got 0")?;
    let mut cur = first.clone();
    for k in keys {
        cur = match &cur {
            Value::List(l) => {
                let i = as_index(k)?;
                usize::try_from(i)
                    .ok()
                    .and_then(|i| l.items.get(i))
                    .cloned()
                    .ok_or_else(|| format!("index out of range: {i}"))?
            }
            Value::Str(s) => {
                let i = as_index(k)?;
                let b = usize::try_from(i)
                    .ok()
                    .and_then(|i| s.as_bytes().get(i))
                    .ok_or_else(|| format!("index out of range: {i}"))?;
                Value::Int(i64::from(*b))
            }
            Value::Map(m) => {
                let key = match k {
                    Value::Str(s) => s.to_string(),
                    other => other.to_go_string(),
                };
                m.entries
                    .iter()
                    .find(|(n, _)| *n == key)
                    .map(|(_, v)| v.clone())
                    .unwrap_or(Value::Missing)
            }
            Value::Nil | Value::Missing => return Err("index of untyped nil".into()),
            other => return Err(format!("can't index item of type {}", other.type_name())),
        };
    }
    Ok(cur)
}

fn slice(a: &[Value]) -> R<Value> {
    let (first, idx) = a
        .split_first()
        .ok_or("wrong number of args for slice: want at least 1 got 0")?;
    if idx.len() > 3 {
        return Err(format!("too many slice indexes: {}", idx.len()));
    }
    let len = length(first)?;
    let bounds: Vec<usize> = idx
        .iter()
        .map(|v| as_index(v).and_then(|i| usize::try_from(i).map_err(|_| format!("index out of range: {i}"))))
        .collect::<R<_>>()?;
    let lo = bounds.first().copied().unwrap_or(0);
    let hi = bounds.get(1).copied().unwrap_or(len);
    if lo > hi || hi > len {
        return Err(format!("invalid slice index: {lo} > {hi}"));
    }
    match first {
        Value::Str(s) => s
            .get(lo..hi)
            .map(Value::str)
            .ok_or_else(|| "slice of a string splits a character".to_string()),
        Value::List(l) => Ok(Value::list(l.items[lo..hi].to_vec())),
        other => Err(format!("can't slice item of type {}", other.type_name())),
    }
}

/// Go's `eq arg1 arg2 ...`: true if arg1 equals any of the others.
fn eq(a: &[Value]) -> R<Value> {
    if a.len() < 2 {
        return Err(format!(
            "wrong number of args for eq: want at least 2 got {}",
            a.len()
        ));
    }
    for other in &a[1..] {
        if compare(&a[0], other)? == Some(std::cmp::Ordering::Equal) {
            return Ok(Value::Bool(true));
        }
    }
    Ok(Value::Bool(false))
}

/// Ordering of two basic values; `Ok(None)` for equal-kinded values that are unordered (bools
/// that differ). Different kinds are an error, as in Go.
fn compare(a: &Value, b: &Value) -> R<Option<std::cmp::Ordering>> {
    use Value::*;
    Ok(match (a, b) {
        (Int(x), Int(y)) => Some(x.cmp(y)),
        (Float(x), Float(y)) => x.partial_cmp(y),
        // Untyped constants compare with floats in practice (`eq .N 2` on a JSON number).
        (Int(x), Float(y)) => (*x as f64).partial_cmp(y),
        (Float(x), Int(y)) => x.partial_cmp(&(*y as f64)),
        (Str(x), Str(y)) => Some(x.cmp(y)),
        (Bool(x), Bool(y)) => {
            if x == y {
                Some(std::cmp::Ordering::Equal)
            } else {
                None
            }
        }
        (Nil | Missing, Nil | Missing) => Some(std::cmp::Ordering::Equal),
        (Nil | Missing, _) | (_, Nil | Missing) => None,
        _ => {
            return Err(format!(
                "incompatible types for comparison: {} and {}",
                a.type_name(),
                b.type_name()
            ))
        }
    })
}

fn html_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '&' => o.push_str("&amp;"),
            '\'' => o.push_str("&#39;"),
            '"' => o.push_str("&#34;"),
            '\0' => o.push('\u{FFFD}'),
            c => o.push(c),
        }
    }
    o
}

fn js_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => o.push_str("\\\\"),
            '\'' => o.push_str("\\'"),
            '"' => o.push_str("\\\""),
            '<' => o.push_str("\\u003C"),
            '>' => o.push_str("\\u003E"),
            '&' => o.push_str("\\u0026"),
            '=' => o.push_str("\\u003D"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 => o.push_str(&format!("\\u{:04X}", c as u32)),
            c => o.push(c),
        }
    }
    o
}

fn url_escape(s: &str) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => o.push(b as char),
            b' ' => o.push('+'),
            b => o.push_str(&format!("%{b:02X}")),
        }
    }
    o
}
