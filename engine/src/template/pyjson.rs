//! Python-compatible text for template values.
//!
//! Hugging Face renders chat templates with Python's jinja2 and replaces its `tojson` filter with
//! `json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)`.
//! Models were trained on prompts made that way, so the exact bytes matter: `{"a": 1, "b": [1, 2]}`
//! with a space after `:` and `,`, not minijinja's compact form, and no HTML escaping. Printing a
//! value with `{{ x }}` follows Python's `str()` (`None`, `True`, `['a', 1]`).

use minijinja::value::{Value, ValueKind};

/// Options of Python's `json.dumps` that templates pass to `tojson`.
#[derive(Debug, Clone, Default)]
pub struct DumpOptions {
    pub indent: Option<String>,
    pub item_separator: Option<String>,
    pub key_separator: Option<String>,
    pub sort_keys: bool,
}

/// `json.dumps(value, ensure_ascii=False, ...)`.
pub fn dumps(value: &Value, opts: &DumpOptions) -> String {
    let mut out = String::new();
    let item_sep = opts.item_separator.clone().unwrap_or_else(|| {
        if opts.indent.is_some() {
            ",".into()
        } else {
            ", ".into()
        }
    });
    let key_sep = opts.key_separator.clone().unwrap_or_else(|| ": ".into());
    let d = Dumper {
        indent: opts.indent.as_deref(),
        item_sep: &item_sep,
        key_sep: &key_sep,
        sort_keys: opts.sort_keys,
    };
    d.value(&mut out, value, 0);
    out
}

struct Dumper<'a> {
    indent: Option<&'a str>,
    item_sep: &'a str,
    key_sep: &'a str,
    sort_keys: bool,
}

impl Dumper<'_> {
    fn newline(&self, out: &mut String, level: usize) {
        if let Some(ind) = self.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(ind);
            }
        }
    }

    fn value(&self, out: &mut String, v: &Value, level: usize) {
        match v.kind() {
            ValueKind::Undefined | ValueKind::None | ValueKind::Invalid => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => number(out, v, true),
            ValueKind::String => json_string(out, v.as_str().unwrap_or_default()),
            ValueKind::Bytes => json_string(out, &String::from_utf8_lossy(v.as_bytes().unwrap_or_default())),
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter().map(|it| it.collect()).unwrap_or_default();
                if self.sort_keys {
                    keys.sort();
                }
                if keys.is_empty() {
                    out.push_str("{}");
                    return;
                }
                out.push('{');
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(out, level + 1);
                    match k.as_str() {
                        Some(s) => json_string(out, s),
                        // Python converts int/float/bool/None keys to strings.
                        None => json_string(out, &python_str(k)),
                    }
                    out.push_str(self.key_sep);
                    let item = v.get_item(k).unwrap_or_default();
                    self.value(out, &item, level + 1);
                }
                self.newline(out, level);
                out.push('}');
            }
            _ => {
                let items: Vec<Value> = v.try_iter().map(|it| it.collect()).unwrap_or_default();
                if items.is_empty() {
                    out.push_str("[]");
                    return;
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(out, level + 1);
                    self.value(out, item, level + 1);
                }
                self.newline(out, level);
                out.push(']');
            }
        }
    }
}

/// A JSON string literal as Python writes it with `ensure_ascii=False`.
pub fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

fn number(out: &mut String, v: &Value, json: bool) {
    if v.is_integer() {
        if let Ok(i) = i128::try_from(v.clone()) {
            out.push_str(&i.to_string());
            return;
        }
    }
    let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
    out.push_str(&python_float(f, json));
}

/// Python's `repr(float)` (and `json.dumps` of a float, which spells infinities differently).
pub fn python_float(f: f64, json: bool) -> String {
    if f.is_nan() {
        return if json { "NaN" } else { "nan" }.into();
    }
    if f.is_infinite() {
        let s = if json { "Infinity" } else { "inf" };
        return if f < 0.0 { format!("-{s}") } else { s.into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    // Shortest round-trip digits, then Python's layout rule: positional when -4 <= exp < 16.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp < 0 {
            s.push_str("0.");
            for _ in 0..(-exp - 1) {
                s.push('0');
            }
            s.push_str(&digits);
        } else {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                s.push_str(&digits);
                for _ in digits.len()..int_len {
                    s.push('0');
                }
                s.push_str(".0");
            } else {
                s.push_str(&digits[..int_len]);
                s.push('.');
                s.push_str(&digits[int_len..]);
            }
        }
    } else {
        s.push_str(&digits[..1]);
        if digits.len() > 1 {
            s.push('.');
            s.push_str(&digits[1..]);
        }
        s.push('e');
        s.push(if exp < 0 { '-' } else { '+' });
        s.push_str(&format!("{:02}", exp.abs()));
    }
    s
}

/// Python's `str()` of a value, which is what jinja2 prints for `{{ x }}`.
pub fn python_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::String => v.as_str().unwrap_or_default().to_string(),
        _ => python_repr(v),
    }
}

/// Python's `repr()`: strings in quotes, containers with their items' reprs.
pub fn python_repr(v: &Value) -> String {
    let mut out = String::new();
    repr_into(&mut out, v);
    out
}

fn repr_into(out: &mut String, v: &Value) {
    match v.kind() {
        ValueKind::Undefined => {}
        ValueKind::None | ValueKind::Invalid => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number => number(out, v, false),
        ValueKind::String => repr_string(out, v.as_str().unwrap_or_default()),
        ValueKind::Bytes => out.push_str(&format!("{v}")),
        ValueKind::Map => {
            out.push('{');
            let keys: Vec<Value> = v.try_iter().map(|it| it.collect()).unwrap_or_default();
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr_into(out, k);
                out.push_str(": ");
                repr_into(out, &v.get_item(k).unwrap_or_default());
            }
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let tuple = v.is_tuple();
            out.push(if tuple { '(' } else { '[' });
            let items: Vec<Value> = v.try_iter().map(|it| it.collect()).unwrap_or_default();
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr_into(out, item);
            }
            if tuple && items.len() == 1 {
                out.push(',');
            }
            out.push(if tuple { ')' } else { ']' });
        }
        _ => out.push_str(&format!("{v}")),
    }
}

/// Python's string repr: single quotes unless the text has a single quote and no double quote.
fn repr_string(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push(quote);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_follow_python_repr() {
        for (f, want) in [
            (1.5, "1.5"),
            (3.0, "3.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5e-7, "-2.5e-07"),
            (123456.789, "123456.789"),
            (0.1, "0.1"),
        ] {
            assert_eq!(python_float(f, true), want, "{f}");
        }
        assert_eq!(python_float(f64::INFINITY, true), "Infinity");
        assert_eq!(python_float(f64::NEG_INFINITY, false), "-inf");
    }

    #[test]
    fn dumps_matches_python_defaults_and_indent() {
        let v = Value::from_pairs([
            ("a", Value::from(1)),
            ("b", Value::from(vec![Value::from("x\"y"), Value::from(())])),
            ("c", Value::from_pairs(Vec::<(&str, Value)>::new())),
        ]);
        assert_eq!(
            dumps(&v, &DumpOptions::default()),
            r#"{"a": 1, "b": ["x\"y", null], "c": {}}"#
        );
        let opts = DumpOptions {
            indent: Some("  ".into()),
            ..DumpOptions::default()
        };
        assert_eq!(
            dumps(&v, &opts),
            "{\n  \"a\": 1,\n  \"b\": [\n    \"x\\\"y\",\n    null\n  ],\n  \"c\": {}\n}"
        );
        assert_eq!(
            dumps(&Value::from("é<\u{1}"), &DumpOptions::default()),
            "\"é<\\u0001\""
        );
    }

    #[test]
    fn repr_matches_python() {
        let v = Value::from(vec![
            Value::from("it's"),
            Value::from(true),
            Value::from(()),
            Value::from(2),
        ]);
        assert_eq!(python_repr(&v), r#"["it's", True, None, 2]"#);
        assert_eq!(python_str(&Value::from("plain")), "plain");
    }
}
