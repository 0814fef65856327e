//! Model parameters (`PARAMETER` lines, the `params` layer, create's `parameters`): Ollama's
//! option names and types (`api/types.go: Options, Runner`).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

/// The type a parameter's value must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    Int,
    Float,
    Bool,
    /// A list of strings; each `PARAMETER` line appends one (`stop`).
    StringList,
}

impl ParamType {
    fn expected(self) -> &'static str {
        match self {
            ParamType::Int => "an integer",
            ParamType::Float => "a number",
            ParamType::Bool => "true or false",
            ParamType::StringList => "a string",
        }
    }
}

/// Every parameter Ollama accepts in a Modelfile, with its type.
pub const PARAMETERS: &[(&str, ParamType)] = &[
    // load-time (`Runner`)
    ("num_ctx", ParamType::Int),
    ("num_batch", ParamType::Int),
    ("num_gpu", ParamType::Int),
    ("main_gpu", ParamType::Int),
    ("use_mmap", ParamType::Bool),
    ("num_thread", ParamType::Int),
    ("draft_num_predict", ParamType::Int),
    // per request
    ("num_keep", ParamType::Int),
    ("seed", ParamType::Int),
    ("num_predict", ParamType::Int),
    ("top_k", ParamType::Int),
    ("top_p", ParamType::Float),
    ("min_p", ParamType::Float),
    ("typical_p", ParamType::Float),
    ("repeat_last_n", ParamType::Int),
    ("temperature", ParamType::Float),
    ("repeat_penalty", ParamType::Float),
    ("presence_penalty", ParamType::Float),
    ("frequency_penalty", ParamType::Float),
    ("stop", ParamType::StringList),
];

/// Parameters Ollama removed: accepted with a warning and dropped. The first nine are Ollama's
/// `deprecatedParameters`; `numa` and `tfs_z` went in the same change (Ollama now rejects them,
/// which breaks old Modelfiles for no benefit).
pub const DEPRECATED: &[&str] = &[
    "penalize_newline",
    "low_vram",
    "f16_kv",
    "logits_all",
    "vocab_only",
    "use_mlock",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
    "numa",
    "tfs_z",
];

pub fn param_type(name: &str) -> Option<ParamType> {
    PARAMETERS.iter().find(|p| p.0 == name).map(|p| p.1)
}

pub fn is_deprecated(name: &str) -> bool {
    DEPRECATED.contains(&name)
}

/// A typed parameter value.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamValue {
    Int(i64),
    Float(f32),
    Bool(bool),
    List(Vec<String>),
    /// A value read from a stored params layer that is not one we know how to type (an unknown
    /// name or an unexpected JSON type): kept as it is, so pulled models round-trip.
    Other(Value),
}

/// What went wrong with a parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamError {
    Unknown(String),
    Deprecated(String),
    BadValue {
        name: String,
        value: String,
        expected: &'static str,
    },
}

impl std::fmt::Display for ParamError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamError::Unknown(n) => write!(
                f,
                "unknown parameter '{n}' (known parameters: {})",
                PARAMETERS.iter().map(|p| p.0).collect::<Vec<_>>().join(", ")
            ),
            ParamError::Deprecated(n) => write!(f, "parameter {n} is deprecated"),
            ParamError::BadValue {
                name,
                value,
                expected,
            } => write!(
                f,
                "invalid value {value:?} for parameter '{name}': expected {expected}"
            ),
        }
    }
}

/// Parameters by name, in name order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parameters(BTreeMap<String, ParamValue>);

impl Parameters {
    pub fn new() -> Parameters {
        Parameters::default()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn get(&self, name: &str) -> Option<&ParamValue> {
        self.0.get(name)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &ParamValue)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Sets a parameter from its Modelfile text, as Ollama's `FormatParams` parses it: integers in
    /// base 10, floats as Go's `ParseFloat`, booleans as Go's `ParseBool`; a list parameter gets
    /// the value appended. A later scalar value replaces an earlier one.
    pub fn set_text(&mut self, name: &str, text: &str) -> Result<(), ParamError> {
        if is_deprecated(name) {
            return Err(ParamError::Deprecated(name.to_string()));
        }
        let ty = param_type(name).ok_or_else(|| ParamError::Unknown(name.to_string()))?;
        let bad = || ParamError::BadValue {
            name: name.to_string(),
            value: text.to_string(),
            expected: ty.expected(),
        };
        let value = match ty {
            ParamType::Int => ParamValue::Int(parse_go_int(text).ok_or_else(bad)?),
            ParamType::Float => ParamValue::Float(parse_go_float(text).ok_or_else(bad)?),
            ParamType::Bool => ParamValue::Bool(parse_go_bool(text).ok_or_else(bad)?),
            ParamType::StringList => {
                match self.0.get_mut(name) {
                    Some(ParamValue::List(items)) => items.push(text.to_string()),
                    _ => {
                        self.0
                            .insert(name.to_string(), ParamValue::List(vec![text.to_string()]));
                    }
                }
                return Ok(());
            }
        };
        self.0.insert(name.to_string(), value);
        Ok(())
    }

    /// Parameters from a JSON object sent by a client (create's `parameters`): names must be
    /// known and values well typed (an integer field takes any number, truncated, as Ollama's
    /// option decoding does; a list field takes a string or a list of strings). Deprecated names
    /// are dropped; their names are returned as warnings.
    pub fn from_request(obj: &Map<String, Value>) -> Result<(Parameters, Vec<String>), ParamError> {
        let mut out = Parameters::new();
        let mut warnings = Vec::new();
        for (name, v) in obj {
            if is_deprecated(name) {
                warnings.push(format!("parameter {name} is deprecated"));
                continue;
            }
            let ty = param_type(name).ok_or_else(|| ParamError::Unknown(name.clone()))?;
            let value = typed_json(ty, v).ok_or_else(|| ParamError::BadValue {
                name: name.clone(),
                value: v.to_string(),
                expected: ty.expected(),
            })?;
            out.0.insert(name.clone(), value);
        }
        Ok((out, warnings))
    }

    /// Parameters from a stored params layer: known names are typed when their JSON fits, all
    /// else is kept as [`ParamValue::Other`].
    pub fn from_layer(obj: &Map<String, Value>) -> Parameters {
        let mut out = Parameters::new();
        for (name, v) in obj {
            let value = param_type(name)
                .and_then(|ty| typed_json(ty, v))
                .unwrap_or_else(|| ParamValue::Other(v.clone()));
            out.0.insert(name.clone(), value);
        }
        out
    }

    /// Adds `base`'s parameters that `self` does not set (create merges new parameters over the
    /// inherited ones; new names win).
    pub fn inherit(&mut self, base: &Parameters) {
        for (k, v) in &base.0 {
            self.0.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }

    /// The JSON object of the params layer. Numbers are written as Go writes them (a float32 in
    /// its shortest form, integral floats without a fraction), so digests match Ollama's.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        for (k, v) in &self.0 {
            m.insert(k.clone(), v.to_json());
        }
        Value::Object(m)
    }

    /// `/api/show`'s `parameters` text: one `name value` line per value (list values one line
    /// each), the name padded to 30 columns and the value in Go syntax (Ollama's `%-30s %#v`).
    pub fn show_text(&self) -> String {
        let mut lines = Vec::new();
        for (k, v) in &self.0 {
            for s in v.show_values() {
                lines.push(format!("{k:<30} {s}"));
            }
        }
        lines.join("\n")
    }

    /// `PARAMETER` lines' values in Modelfile text (list values one each).
    pub fn modelfile_values(&self) -> Vec<(&str, String)> {
        let mut out = Vec::new();
        for (k, v) in &self.0 {
            match v {
                ParamValue::List(items) => {
                    out.extend(items.iter().map(|s| (k.as_str(), s.clone())));
                }
                ParamValue::Other(Value::Array(items)) => {
                    out.extend(items.iter().map(|s| (k.as_str(), plain_json(s))));
                }
                ParamValue::Int(i) => out.push((k, i.to_string())),
                ParamValue::Float(f) => out.push((k, f.to_string())),
                ParamValue::Bool(b) => out.push((k, b.to_string())),
                ParamValue::Other(v) => out.push((k, plain_json(v))),
            }
        }
        out
    }
}

impl ParamValue {
    fn to_json(&self) -> Value {
        match self {
            ParamValue::Int(i) => Value::from(*i),
            ParamValue::Float(f) => float32_json(*f),
            ParamValue::Bool(b) => Value::Bool(*b),
            ParamValue::List(items) => Value::Array(items.iter().map(|s| Value::String(s.clone())).collect()),
            ParamValue::Other(v) => v.clone(),
        }
    }

    /// Each value as Go's `%#v` prints what `json.Unmarshal` made of it (numbers are float64).
    fn show_values(&self) -> Vec<String> {
        match self {
            ParamValue::Int(i) => vec![go_format_float(*i as f64)],
            ParamValue::Float(f) => vec![go_format_float(shortest_f32_as_f64(*f))],
            ParamValue::Bool(b) => vec![b.to_string()],
            ParamValue::List(items) => items.iter().map(|s| go_quote(s)).collect(),
            ParamValue::Other(Value::Array(items)) => items.iter().map(go_value).collect(),
            ParamValue::Other(v) => vec![go_value(v)],
        }
    }
}

fn typed_json(ty: ParamType, v: &Value) -> Option<ParamValue> {
    Some(match ty {
        ParamType::Int => ParamValue::Int(match v {
            Value::Number(n) => match n.as_i64() {
                Some(i) => i,
                None => {
                    let f = n.as_f64()?;
                    if !f.is_finite() || f.abs() > 9.2e18 {
                        return None;
                    }
                    f.trunc() as i64
                }
            },
            _ => return None,
        }),
        ParamType::Float => ParamValue::Float(v.as_f64()? as f32),
        ParamType::Bool => ParamValue::Bool(v.as_bool()?),
        ParamType::StringList => ParamValue::List(match v {
            Value::String(s) => vec![s.clone()],
            Value::Array(items) => items
                .iter()
                .map(|i| i.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()?,
            _ => return None,
        }),
    })
}

fn plain_json(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The f64 nearest the shortest decimal that round-trips `f` as an f32 (what Go's JSON encoder
/// writes for a float32, read back).
fn shortest_f32_as_f64(f: f32) -> f64 {
    f.to_string().parse().unwrap_or(f as f64)
}

fn float32_json(f: f32) -> Value {
    let v = shortest_f32_as_f64(f);
    if v.fract() == 0.0 && v.abs() < 1e15 {
        Value::Number(Number::from(v as i64))
    } else {
        Number::from_f64(v).map(Value::Number).unwrap_or(Value::Null)
    }
}

/// Go's `strconv.ParseInt(s, 10, 64)`: optional sign, decimal digits, no spaces.
fn parse_go_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Go's `strconv.ParseFloat(s, 32)` for the forms people write: decimal with optional exponent,
/// `inf`/`infinity`/`nan` in any case, `_` digit separators are not accepted. Out-of-range values
/// are an error, as in Go.
fn parse_go_float(s: &str) -> Option<f32> {
    let t = s.strip_prefix(['+', '-']).unwrap_or(s);
    let lower = t.to_ascii_lowercase();
    if matches!(lower.as_str(), "inf" | "infinity" | "nan") {
        return s.to_ascii_lowercase().parse().ok();
    }
    if t.is_empty()
        || !t
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
    {
        return None;
    }
    let v: f32 = s.parse().ok()?;
    v.is_finite().then_some(v)
}

/// Go's `strconv.ParseBool`.
fn parse_go_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go's `%v` of a float64 (`%g` with the shortest digits): the `%e` form, with at least two
/// exponent digits, when the decimal exponent is below -4 or at least 6, so `1e+06` and `1e-05`
/// get exponents while `123456` and `0.0001` do not.
pub fn go_format_float(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf".into() } else { "-Inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let e = format!("{v:e}"); // shortest round-trip digits, e.g. "-1.5e-5"
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let (sign, digits) = match exp {
            x if x < 0 => ('-', -x),
            x => ('+', x),
        };
        format!("{mantissa}e{sign}{digits:02}")
    } else {
        format!("{v}")
    }
}

/// Go's `%#v` of a string: double-quoted with Go escapes.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Number(n) => go_format_float(n.as_f64().unwrap_or(0.0)),
        Value::Bool(b) => b.to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modelfile_text_is_typed_like_ollama() {
        let mut p = Parameters::new();
        p.set_text("temperature", "0.6").unwrap();
        p.set_text("num_ctx", "8192").unwrap();
        p.set_text("use_mmap", "T").unwrap();
        p.set_text("stop", "<|eot_id|>").unwrap();
        p.set_text("stop", "<|end|>").unwrap();
        p.set_text("top_p", "1").unwrap();
        p.set_text("seed", "-1").unwrap();
        assert_eq!(
            String::from_utf8(crate::gojson::to_vec(&p.to_json())).unwrap(),
            "{\"num_ctx\":8192,\"seed\":-1,\"stop\":[\"\\u003c|eot_id|\\u003e\",\"\\u003c|end|\\u003e\"],\"temperature\":0.6,\"top_p\":1,\"use_mmap\":true}\n"
        );
        let bad = [
            ("temperature", "hot"),
            ("temperature", "0,6"),
            ("temperature", "1e99"),
            ("num_ctx", "8k"),
            ("num_ctx", "1.5"),
            ("num_ctx", " 8"),
            ("use_mmap", "yes"),
        ];
        for (k, v) in bad {
            assert!(
                matches!(p.set_text(k, v), Err(ParamError::BadValue { .. })),
                "{k} {v}"
            );
        }
        assert!(matches!(p.set_text("topk", "1"), Err(ParamError::Unknown(_))));
        assert!(matches!(
            p.set_text("mirostat", "1"),
            Err(ParamError::Deprecated(_))
        ));
    }

    #[test]
    fn request_json_is_checked() {
        let obj = serde_json::json!({"temperature": 0.7, "num_ctx": 4096.9, "stop": "x", "tfs_z": 1});
        let (p, warnings) = Parameters::from_request(obj.as_object().unwrap()).unwrap();
        assert_eq!(p.get("num_ctx"), Some(&ParamValue::Int(4096)));
        assert_eq!(p.get("stop"), Some(&ParamValue::List(vec!["x".into()])));
        assert_eq!(warnings.len(), 1);
        let bad = serde_json::json!({"temperature": "hot"});
        assert!(Parameters::from_request(bad.as_object().unwrap()).is_err());
        let unknown = serde_json::json!({"nope": 1});
        assert!(Parameters::from_request(unknown.as_object().unwrap()).is_err());
        // Stored layers are read leniently.
        let layer = serde_json::json!({"nope": [1, 2], "temperature": 0.5});
        let p = Parameters::from_layer(layer.as_object().unwrap());
        assert_eq!(p.get("temperature"), Some(&ParamValue::Float(0.5)));
        assert!(matches!(p.get("nope"), Some(ParamValue::Other(_))));
    }

    #[test]
    fn show_text_matches_go_formatting() {
        let mut p = Parameters::new();
        p.set_text("stop", "<|eot_id|>").unwrap();
        p.set_text("temperature", "0.6").unwrap();
        p.set_text("num_ctx", "1048576").unwrap();
        assert_eq!(
            p.show_text(),
            format!(
                "{:<30} 1.048576e+06\n{:<30} \"<|eot_id|>\"\n{:<30} 0.6",
                "num_ctx", "stop", "temperature"
            )
        );
        assert_eq!(go_format_float(123456.0), "123456");
        assert_eq!(go_format_float(0.0001), "0.0001");
        assert_eq!(go_format_float(0.00001), "1e-05");
        assert_eq!(go_format_float(-1.0), "-1");
        assert_eq!(go_quote("a\"b\n\u{1}"), "\"a\\\"b\\n\\x01\"");
    }
}
