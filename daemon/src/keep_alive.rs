//! `keep_alive`: how long a model stays loaded after its last request, in Ollama's notations.
//!
//! - A JSON number is seconds (`300`, `1.5`); any negative number means forever.
//! - A string is a Go duration (`"5m"`, `"1h30m"`, `"0"`, `"-1m"`); negative means forever. A bare
//!   `"3600"` is not a Go duration, so a request must not send it (400), but the environment
//!   variable and the config file accept a bare integer as seconds, as Ollama's does.
//! - Zero unloads the model as soon as it is idle.

use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepAlive {
    /// Unload when idle for this long (zero: at once).
    For(Duration),
    Forever,
}

impl KeepAlive {
    pub const DEFAULT: KeepAlive = KeepAlive::For(Duration::from_secs(300));

    /// From a request's JSON value.
    pub fn from_json(v: &serde_json::Value) -> Result<KeepAlive, String> {
        match v {
            serde_json::Value::Number(n) => {
                let secs = n.as_f64().ok_or("keep_alive: not a number")?;
                Ok(Self::from_secs_f64(secs))
            }
            serde_json::Value::String(s) => parse_go_duration(s).map(Self::from_nanos),
            other => Err(format!("keep_alive: unsupported type {}", json_type(other))),
        }
    }

    /// From the environment or the config file: a Go duration or a whole number of seconds.
    pub fn parse_setting(s: &str) -> Result<KeepAlive, String> {
        let s = s.trim();
        if let Ok(n) = s.parse::<i64>() {
            return Ok(Self::from_secs_f64(n as f64));
        }
        parse_go_duration(s).map(Self::from_nanos)
    }

    fn from_secs_f64(secs: f64) -> KeepAlive {
        if secs < 0.0 || !secs.is_finite() || secs > 1e9 {
            KeepAlive::Forever
        } else {
            KeepAlive::For(Duration::from_secs_f64(secs))
        }
    }

    fn from_nanos(ns: i128) -> KeepAlive {
        if ns < 0 {
            KeepAlive::Forever
        } else {
            KeepAlive::For(Duration::from_nanos(ns.min(u64::MAX as i128) as u64))
        }
    }

    pub fn is_zero(&self) -> bool {
        *self == KeepAlive::For(Duration::ZERO)
    }

    /// Go's `Duration.String()` form (`5m0s`), or `-1` for forever.
    pub fn display(&self) -> String {
        match self {
            KeepAlive::Forever => "-1".into(),
            KeepAlive::For(d) => go_duration_string(*d),
        }
    }
}

fn json_type(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "array",
        serde_json::Value::Object(_) => "object",
    }
}

/// Parses a Go duration (`time.ParseDuration`): an optional sign, then one or more decimal
/// numbers each with a unit (`ns`, `us`, `µs`, `ms`, `s`, `m`, `h`); `0` alone is allowed.
/// Returns nanoseconds.
pub fn parse_go_duration(text: &str) -> Result<i128, String> {
    let bad = || format!("time: invalid duration {text:?}");
    let mut s = text;
    let neg = if let Some(r) = s.strip_prefix('-') {
        s = r;
        true
    } else {
        s = s.strip_prefix('+').unwrap_or(s);
        false
    };
    if s == "0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(bad());
    }
    let mut total: f64 = 0.0;
    while !s.is_empty() {
        let num_len = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        if num_len == 0 {
            return Err(bad());
        }
        let num: f64 = s[..num_len].parse().map_err(|_| bad())?;
        s = &s[num_len..];
        let unit_len = s
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(s.len());
        let unit = match &s[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            "" => return Err(format!("time: missing unit in duration {text:?}")),
            u => return Err(format!("time: unknown unit {u:?} in duration {text:?}")),
        };
        s = &s[unit_len..];
        total += num * unit;
    }
    if total > i64::MAX as f64 {
        return Err(format!("time: invalid duration {text:?} (too large)"));
    }
    let ns = total as i128;
    Ok(if neg { -ns } else { ns })
}

/// Go's `Duration.String()`: `1h2m3.5s`, `5m0s`, `0s`, `300ms`.
pub fn go_duration_string(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return format!("{}µs", trim_float(ns as f64 / 1e3));
    }
    if ns < 1_000_000_000 {
        return format!("{}ms", trim_float(ns as f64 / 1e6));
    }
    let h = ns / 3_600_000_000_000;
    let m = (ns / 60_000_000_000) % 60;
    let s = (ns % 60_000_000_000) as f64 / 1e9;
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&format!("{}s", trim_float(s)));
    out
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.9}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn request_values() {
        let f = |v| KeepAlive::from_json(&v);
        assert_eq!(f(json!(300)), Ok(KeepAlive::For(Duration::from_secs(300))));
        assert_eq!(f(json!(1.5)), Ok(KeepAlive::For(Duration::from_millis(1500))));
        assert_eq!(f(json!(0)), Ok(KeepAlive::For(Duration::ZERO)));
        assert_eq!(f(json!(-1)), Ok(KeepAlive::Forever));
        assert_eq!(f(json!("5m")), Ok(KeepAlive::For(Duration::from_secs(300))));
        assert_eq!(f(json!("1h30m")), Ok(KeepAlive::For(Duration::from_secs(5400))));
        assert_eq!(f(json!("0")), Ok(KeepAlive::For(Duration::ZERO)));
        assert_eq!(f(json!("-1m")), Ok(KeepAlive::Forever));
        assert_eq!(f(json!("250ms")), Ok(KeepAlive::For(Duration::from_millis(250))));
        assert!(f(json!("3600")).is_err(), "Go needs a unit");
        assert!(f(json!("5 minutes")).is_err());
        assert!(f(json!(true)).is_err());
        assert!(f(json!("")).is_err());
    }

    #[test]
    fn settings_accept_bare_seconds() {
        assert_eq!(
            KeepAlive::parse_setting("3600"),
            Ok(KeepAlive::For(Duration::from_secs(3600)))
        );
        assert_eq!(KeepAlive::parse_setting("-1"), Ok(KeepAlive::Forever));
        assert_eq!(
            KeepAlive::parse_setting("10m"),
            Ok(KeepAlive::For(Duration::from_secs(600)))
        );
        assert!(KeepAlive::parse_setting("soon").is_err());
    }

    #[test]
    fn go_strings() {
        assert_eq!(go_duration_string(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration_string(Duration::from_secs(3723)), "1h2m3s");
        assert_eq!(go_duration_string(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration_string(Duration::from_millis(300)), "300ms");
        assert_eq!(go_duration_string(Duration::ZERO), "0s");
    }
}
