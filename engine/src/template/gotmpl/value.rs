//! Values a Go template works on, with Go's printing (`fmt`'s `%v`), truth and JSON encoding.
//!
//! Go templates see Go types; ours are dynamic. Structs carry their field names (what
//! `.Field` looks up) and, like Ollama's types, can print as JSON through a `String()` method
//! (`stringer`) and encode with their own JSON field names (`json`).

use std::rc::Rc;

#[derive(Debug, Clone, Default)]
pub enum Value {
    /// No value at all (a missing map key under `missingkey=zero` with an interface element
    /// type): prints `<no value>`.
    #[default]
    Missing,
    /// A nil interface, pointer or slice: prints `<nil>`.
    Nil,
    Bool(bool),
    Int(i64),
    /// JSON numbers are float64 in Go, as are Ollama's tool-call arguments.
    Float(f64),
    Str(Rc<str>),
    List(Rc<List>),
    Map(Rc<Map>),
    Struct(Rc<Struct>),
}

#[derive(Debug, Default)]
pub struct List {
    pub items: Vec<Value>,
    /// `String()` output when the Go type has one.
    pub stringer: Option<String>,
    /// JSON encoding when it is not the generic one (a typed nil slice encodes as `null`).
    pub json: Option<String>,
}

/// A Go map: keys are iterated and printed in sorted order, as Go does.
#[derive(Debug, Default)]
pub struct Map {
    pub entries: Vec<(String, Value)>,
    pub stringer: Option<String>,
    pub json: Option<String>,
}

#[derive(Debug)]
pub struct Struct {
    pub type_name: &'static str,
    pub fields: Vec<(&'static str, Value)>,
    pub stringer: Option<String>,
    /// The struct's JSON encoding (its json tags decide the names, so it is built with it).
    pub json: String,
}

impl Value {
    pub fn str(s: impl Into<Rc<str>>) -> Value {
        Value::Str(s.into())
    }

    pub fn list(items: Vec<Value>) -> Value {
        Value::List(Rc::new(List {
            items,
            ..List::default()
        }))
    }

    /// A Go map from entries in any order (sorted here).
    pub fn map(mut entries: Vec<(String, Value)>) -> Value {
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        Value::Map(Rc::new(Map {
            entries,
            ..Map::default()
        }))
    }

    /// Go's truth: false, 0, nil, and empty strings, slices and maps are false.
    pub fn truth(&self) -> bool {
        match self {
            Value::Missing | Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(i) => *i != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.items.is_empty(),
            Value::Map(m) => !m.entries.is_empty(),
            Value::Struct(_) => true,
        }
    }

    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Missing => "invalid",
            Value::Nil => "nil",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float64",
            Value::Str(_) => "string",
            Value::List(_) => "slice",
            Value::Map(_) => "map",
            Value::Struct(s) => s.type_name,
        }
    }

    /// `fmt.Sprint(v)`.
    pub fn to_go_string(&self) -> String {
        let mut out = String::new();
        self.fmt_into(&mut out, true);
        out
    }

    fn fmt_into(&self, out: &mut String, top: bool) {
        match self {
            Value::Missing => out.push_str(if top { "<no value>" } else { "<nil>" }),
            Value::Nil => out.push_str("<nil>"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Int(i) => out.push_str(&i.to_string()),
            Value::Float(f) => out.push_str(&go_float(*f)),
            Value::Str(s) => out.push_str(s),
            Value::List(l) => {
                if let Some(s) = &l.stringer {
                    out.push_str(s);
                    return;
                }
                out.push('[');
                for (i, v) in l.items.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    v.fmt_into(out, false);
                }
                out.push(']');
            }
            Value::Map(m) => {
                if let Some(s) = &m.stringer {
                    out.push_str(s);
                    return;
                }
                out.push_str("map[");
                for (i, (k, v)) in m.entries.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    out.push_str(k);
                    out.push(':');
                    v.fmt_into(out, false);
                }
                out.push(']');
            }
            Value::Struct(s) => {
                if let Some(st) = &s.stringer {
                    out.push_str(st);
                    return;
                }
                out.push('{');
                for (i, (_, v)) in s.fields.iter().enumerate() {
                    if i > 0 {
                        out.push(' ');
                    }
                    v.fmt_into(out, false);
                }
                out.push('}');
            }
        }
    }

    /// `json.Marshal(v)` (Go escapes `<`, `>` and `&`; maps have sorted keys).
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        self.json_into(&mut out);
        out
    }

    fn json_into(&self, out: &mut String) {
        match self {
            Value::Missing | Value::Nil => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Int(i) => out.push_str(&i.to_string()),
            Value::Float(f) => out.push_str(&go_json_float(*f)),
            Value::Str(s) => go_json_string(out, s),
            Value::List(l) => {
                if let Some(j) = &l.json {
                    out.push_str(j);
                    return;
                }
                out.push('[');
                for (i, v) in l.items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.json_into(out);
                }
                out.push(']');
            }
            Value::Map(m) => {
                if let Some(j) = &m.json {
                    out.push_str(j);
                    return;
                }
                out.push('{');
                for (i, (k, v)) in m.entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    go_json_string(out, k);
                    out.push(':');
                    v.json_into(out);
                }
                out.push('}');
            }
            Value::Struct(s) => out.push_str(&s.json),
        }
    }

    /// A JSON value as Go decodes it into `any`: objects become maps, numbers float64.
    pub fn from_json(v: &serde_json::Value) -> Value {
        match v {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            serde_json::Value::String(s) => Value::str(s.as_str()),
            serde_json::Value::Array(a) => Value::list(a.iter().map(Value::from_json).collect()),
            serde_json::Value::Object(o) => {
                Value::map(o.iter().map(|(k, v)| (k.clone(), Value::from_json(v))).collect())
            }
        }
    }
}

/// Go's JSON string encoding (`encoding/json` with HTML escaping, the default).
pub fn go_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `encoding/json`'s float64: like ES6, exponent form below 1e-6 and from 1e21.
pub fn go_json_float(f: f64) -> String {
    if !f.is_finite() {
        return "null".into();
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        // Rust's `{:e}` is the shortest round-trip digits: "1e-7" / "1.5e21".
        let s = format!("{f:e}");
        match s.split_once('e') {
            Some((m, e)) if !e.starts_with('-') => format!("{m}e+{e}"),
            _ => s,
        }
    } else {
        format!("{f}")
    }
}

/// `fmt.Sprint` of a float64: `%g` with the shortest digits, so the exponent form is used below
/// 1e-4 and from 1e6 (`1e+06`), as Go prints.
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let s = format!("{f:e}");
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = e.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        format!("{m}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
    } else {
        format!("{f}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_number_formats() {
        assert_eq!(go_float(22.0), "22");
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(1234567.0), "1.234567e+06");
        assert_eq!(go_float(0.0001), "0.0001");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_json_float(22.0), "22");
        assert_eq!(go_json_float(1e-7), "1e-7");
        assert_eq!(go_json_float(1e21), "1e+21");
        assert_eq!(go_json_float(0.000001), "0.000001");
    }

    #[test]
    fn printing_and_json() {
        let m = Value::map(vec![
            ("b".into(), Value::Float(2.0)),
            ("a".into(), Value::str("<x>")),
        ]);
        assert_eq!(m.to_go_string(), "map[a:<x> b:2]");
        assert_eq!(m.to_json(), r#"{"a":"\u003cx\u003e","b":2}"#);
        assert_eq!(
            Value::list(vec![Value::Int(1), Value::Nil]).to_go_string(),
            "[1 <nil>]"
        );
        assert_eq!(Value::Missing.to_go_string(), "<no value>");
        assert!(!Value::list(vec![]).truth());
    }
}
