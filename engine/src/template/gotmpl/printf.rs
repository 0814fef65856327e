//! `fmt.Sprintf` for the verbs templates use: `%v %s %d %q %f %e %g %x %X %t %c %%`, with flags
//! (`-`, `+`, `0`, space), width and precision. Go's error markers (`%!d(string=x)`,
//! `%!v(MISSING)`, `%!(EXTRA …)`) are kept so a template bug shows the way it does in Go.

use super::value::{go_float, Value};

/// Widths and precisions beyond this are clamped: a template must not make us allocate gigabytes.
const MAX_WIDTH: usize = 4096;

pub fn sprintf(format: &str, args: &[Value]) -> String {
    let mut out = String::new();
    let mut next = 0;
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut minus = false;
        let mut plus = false;
        let mut zero = false;
        let mut space = false;
        while let Some(&f) = chars.peek() {
            match f {
                '-' => minus = true,
                '+' => plus = true,
                '0' => zero = true,
                ' ' => space = true,
                '#' => {}
                _ => break,
            }
            chars.next();
        }
        let mut width: Option<usize> = None;
        while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
            width = Some((width.unwrap_or(0) * 10 + d as usize).min(MAX_WIDTH));
            chars.next();
        }
        let mut prec: Option<usize> = None;
        if chars.peek() == Some(&'.') {
            chars.next();
            let mut p = 0;
            while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                p = (p * 10 + d as usize).min(MAX_WIDTH);
                chars.next();
            }
            prec = Some(p);
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.get(next) else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        next += 1;
        let body = match (verb, arg) {
            ('v', v) => match (v, prec) {
                (Value::Float(f), Some(p)) => format_g(*f, p),
                _ => v.to_go_string(),
            },
            ('s', Value::Str(s)) => match prec {
                Some(p) => s.chars().take(p).collect(),
                None => s.to_string(),
            },
            ('s', v @ (Value::List(_) | Value::Map(_) | Value::Struct(_))) => v.to_go_string(),
            ('q', Value::Str(s)) => go_quote(s),
            ('d', Value::Int(i)) => sign(i.to_string(), plus, space, *i >= 0),
            ('c', Value::Int(i)) => char::from_u32(*i as u32)
                .map(String::from)
                .unwrap_or_else(|| "\u{FFFD}".into()),
            ('x', Value::Int(i)) => format!("{i:x}"),
            ('X', Value::Int(i)) => format!("{i:X}"),
            ('x', Value::Str(s)) => s.bytes().map(|b| format!("{b:02x}")).collect(),
            ('t', Value::Bool(b)) => b.to_string(),
            ('f' | 'F', Value::Float(f)) => {
                sign(format!("{:.*}", prec.unwrap_or(6), f), plus, space, *f >= 0.0)
            }
            ('f' | 'F', Value::Int(i)) => format!("%!f(int={i})"),
            ('e', Value::Float(f)) => sign(format_e(*f, prec.unwrap_or(6)), plus, space, *f >= 0.0),
            ('g', Value::Float(f)) => match prec {
                Some(p) => format_g(*f, p),
                None => go_float(*f),
            },
            (verb, v) => format!("%!{verb}({}={})", v.type_name(), v.to_go_string()),
        };
        let len = body.chars().count();
        match width {
            Some(w) if w > len => {
                let pad = w - len;
                if minus {
                    out.push_str(&body);
                    out.push_str(&" ".repeat(pad));
                } else if zero && matches!(arg, Value::Int(_) | Value::Float(_)) {
                    let (sgn, digits) = match body.strip_prefix('-') {
                        Some(d) => ("-", d),
                        None => ("", body.as_str()),
                    };
                    out.push_str(sgn);
                    out.push_str(&"0".repeat(pad));
                    out.push_str(digits);
                } else {
                    out.push_str(&" ".repeat(pad));
                    out.push_str(&body);
                }
            }
            _ => out.push_str(&body),
        }
    }
    if next < args.len() {
        let extra: Vec<String> = args[next..]
            .iter()
            .map(|v| format!("{}={}", v.type_name(), v.to_go_string()))
            .collect();
        out.push_str(&format!("%!(EXTRA {})", extra.join(", ")));
    }
    out
}

fn sign(s: String, plus: bool, space: bool, nonneg: bool) -> String {
    if nonneg && plus {
        format!("+{s}")
    } else if nonneg && space {
        format!(" {s}")
    } else {
        s
    }
}

fn format_e(f: f64, prec: usize) -> String {
    let s = format!("{f:.prec$e}");
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

fn format_g(f: f64, prec: usize) -> String {
    let p = prec.max(1);
    if f == 0.0 {
        return "0".into();
    }
    let exp = format!("{f:e}")
        .split_once('e')
        .and_then(|(_, e)| e.parse::<i32>().ok())
        .unwrap_or(0);
    if exp < -4 || exp >= p as i32 {
        let s = format_e(f, p - 1);
        let (m, e) = s.split_once('e').unwrap_or((&s, ""));
        let m = if m.contains('.') {
            m.trim_end_matches('0').trim_end_matches('.')
        } else {
            m
        };
        format!("{m}e{e}")
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        let s = format!("{f:.decimals$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    }
}

/// `strconv.Quote`.
pub fn go_quote(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            '\u{7}' => o.push_str("\\a"),
            '\u{8}' => o.push_str("\\b"),
            '\u{c}' => o.push_str("\\f"),
            '\u{b}' => o.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => o.push_str(&format!("\\x{:02x}", c as u32)),
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_verbs() {
        let a = [
            Value::str("x"),
            Value::Int(42),
            Value::Float(1.23456),
            Value::Bool(true),
        ];
        assert_eq!(
            sprintf(
                "%s|%d|%.2f|%t|%v",
                &[
                    a[0].clone(),
                    a[1].clone(),
                    a[2].clone(),
                    a[3].clone(),
                    a[1].clone()
                ]
            ),
            "x|42|1.23|true|42"
        );
        assert_eq!(
            sprintf(
                "%5d|%-4s|%05d|%q",
                &[
                    Value::Int(7),
                    Value::str("ab"),
                    Value::Int(-3),
                    Value::str("a\"b\n")
                ]
            ),
            "    7|ab  |-0003|\"a\\\"b\\n\""
        );
        assert_eq!(sprintf("%d %d", &[Value::Int(1)]), "1 %!d(MISSING)");
        assert_eq!(sprintf("%d", &[Value::str("s")]), "%!d(string=s)");
        assert_eq!(sprintf("\n\n", &[]), "\n\n");
        assert_eq!(
            sprintf("%99999999999999999999d", &[Value::Int(1)]).len(),
            MAX_WIDTH
        );
        assert_eq!(
            sprintf(
                "%e|%g|%.3g",
                &[Value::Float(1234.5), Value::Float(1e6), Value::Float(1.23456)]
            ),
            "1.234500e+03|1e+06|1.23"
        );
    }
}
