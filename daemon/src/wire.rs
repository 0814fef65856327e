//! Ollama's request bodies (`api/types.go`) and their conversion to engine types.
//!
//! Unknown fields are ignored and `null` counts as absent, as Go's `encoding/json` does.
//! Bodies are parsed by [`parse_body`], never by an extractor, so that every malformed request
//! gets Ollama's 400 `{"error": ...}` (including an empty body: "missing request body").

use engine::chat::{Message, Think, Tool, ToolCall};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::ApiError;
use crate::keep_alive::KeepAlive;

/// Parses a JSON request body.
pub fn parse_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::bad_request("missing request body"));
    }
    from_json(body).map_err(|e| ApiError::bad_request(e.to_string()))
}

/// Reads JSON as Go's `encoding/json` (Ollama) does, where serde_json is stricter: invalid
/// UTF-8 and lone UTF-16 surrogate escapes in strings become U+FFFD. Clients send lone
/// surrogates (`\ud83d`) when they cut a text in the middle of an emoji (JavaScript's
/// `JSON.stringify` and Python's `json.dumps` both write them); the error is the strict
/// parser's if the text is still not JSON.
pub fn from_json<T: DeserializeOwned>(body: &[u8]) -> serde_json::Result<T> {
    serde_json::from_slice(body).or_else(|e| match replace_invalid_text(body) {
        Some(text) => serde_json::from_str(&text).map_err(|_| e),
        None => Err(e),
    })
}

/// `body` with invalid UTF-8 and lone surrogate escapes replaced by U+FFFD (escaped as
/// `\ufffd`); `None` if it has neither.
fn replace_invalid_text(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(body);
    let mut changed = matches!(text, std::borrow::Cow::Owned(_));
    let b = text.as_bytes();
    let hex4 = |at: usize| -> Option<u32> {
        let h = std::str::from_utf8(b.get(at..at + 4)?).ok()?;
        u32::from_str_radix(h, 16).ok()
    };
    let is_escape_u = |at: usize| b.get(at) == Some(&b'\\') && b.get(at + 1) == Some(&b'u');
    let mut out = String::with_capacity(text.len());
    let (mut i, mut copied) = (0, 0);
    while i < b.len() {
        if b[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(u) = is_escape_u(i).then(|| hex4(i + 2)).flatten() else {
            // Any other escape: the escaped character is not the start of one.
            i += 2;
            continue;
        };
        let paired = (0xD800..0xDC00).contains(&u)
            && is_escape_u(i + 6)
            && hex4(i + 8).is_some_and(|l| (0xDC00..0xE000).contains(&l));
        if paired {
            i += 12;
        } else if (0xD800..0xE000).contains(&u) {
            out.push_str(&text[copied..i]);
            out.push_str("\\ufffd");
            i += 6;
            copied = i;
            changed = true;
        } else {
            i += 6;
        }
    }
    out.push_str(&text[copied..]);
    changed.then_some(out)
}

/// The fields `/api/generate` and `/api/chat` share, flattened into both bodies.
#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct CommonRequest {
    pub model: Option<String>,
    pub stream: Option<bool>,
    pub format: Option<Value>,
    pub keep_alive: Option<Value>,
    pub options: Option<Map<String, Value>>,
    pub think: Option<Value>,
    pub truncate: Option<bool>,
    pub shift: Option<bool>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<i64>,
    #[serde(rename = "_debug_render_only")]
    pub debug_render_only: Option<bool>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct GenerateRequest {
    #[serde(flatten)]
    pub common: CommonRequest,
    pub prompt: Option<String>,
    pub suffix: Option<String>,
    pub system: Option<String>,
    pub template: Option<String>,
    pub context: Option<Vec<i64>>,
    pub raw: Option<bool>,
    pub images: Option<Vec<Value>>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct ChatRequest {
    #[serde(flatten)]
    pub common: CommonRequest,
    pub messages: Option<Vec<WireMessage>>,
    pub tools: Option<Vec<Value>>,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub struct WireMessage {
    pub role: Option<String>,
    pub content: Option<String>,
    pub thinking: Option<String>,
    pub images: Option<Vec<Value>>,
    pub tool_calls: Option<Vec<WireToolCall>>,
    pub tool_name: Option<String>,
    pub tool_call_id: Option<String>,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub struct WireToolCall {
    pub id: Option<String>,
    pub function: WireFunction,
}

#[derive(Deserialize, Default, Debug, Clone)]
#[serde(default)]
pub struct WireFunction {
    pub index: Option<i64>,
    pub name: Option<String>,
    pub arguments: Option<Value>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct EmbedRequest {
    pub model: Option<String>,
    pub input: Option<Value>,
    pub keep_alive: Option<Value>,
    pub truncate: Option<bool>,
    pub dimensions: Option<i64>,
    pub options: Option<Map<String, Value>>,
}

#[derive(Deserialize, Default, Debug)]
#[serde(default)]
pub struct EmbeddingsRequest {
    pub model: Option<String>,
    pub prompt: Option<String>,
    pub keep_alive: Option<Value>,
    pub options: Option<Map<String, Value>>,
}

/// The request's `think`: a bool or a level.
pub fn parse_think(v: Option<&Value>) -> Result<Option<Think>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(true)) => Ok(Some(Think::On)),
        Some(Value::Bool(false)) => Ok(Some(Think::Off)),
        Some(Value::String(s)) if matches!(s.as_str(), "low" | "medium" | "high" | "max") => {
            Ok(Some(Think::Level(s.clone())))
        }
        Some(Value::String(s)) => Err(ApiError::bad_request(format!(
            "invalid think value: {s:?} (must be \"high\", \"medium\", \"low\", \"max\", true, or false)"
        ))),
        Some(_) => Err(ApiError::bad_request(
            "think must be a boolean or string (\"high\", \"medium\", \"low\", \"max\", true, or false)",
        )),
    }
}

pub fn parse_keep_alive(v: Option<&Value>) -> Result<Option<KeepAlive>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => KeepAlive::from_json(v).map(Some).map_err(ApiError::bad_request),
    }
}

/// A string field of a JSON object, if it is one.
pub(crate) fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// `top_logprobs` must be in 0..=20.
pub fn check_top_logprobs(n: Option<i64>) -> Result<usize, ApiError> {
    match n.unwrap_or(0) {
        n @ 0..=20 => Ok(n as usize),
        _ => Err(ApiError::bad_request("top_logprobs must be between 0 and 20")),
    }
}

/// The model name, which every inference request needs.
pub fn model_name(m: &Option<String>) -> Result<&str, ApiError> {
    match m.as_deref() {
        Some(s) if !s.trim().is_empty() => Ok(s),
        _ => Err(ApiError::bad_request("model is required")),
    }
}

/// Tool-call arguments: an object, or a string holding one (as OpenAI sends them).
fn arguments(v: Option<Value>) -> Result<Map<String, Value>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(m),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(Map::new()),
        Some(Value::String(s)) => match serde_json::from_str(&s) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(ApiError::bad_request("invalid tool call arguments")),
        },
        Some(_) => Err(ApiError::bad_request("invalid tool call arguments")),
    }
}

impl WireMessage {
    pub fn to_engine(&self) -> Result<Message, ApiError> {
        let tool_calls = self
            .tool_calls
            .iter()
            .flatten()
            .map(|tc| {
                Ok(ToolCall {
                    id: tc.id.clone().filter(|s| !s.is_empty()),
                    name: tc.function.name.clone().unwrap_or_default(),
                    arguments: arguments(tc.function.arguments.clone())?,
                })
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
        Ok(Message {
            role: self.role.clone().unwrap_or_default().to_lowercase(),
            content: self.content.clone().unwrap_or_default(),
            thinking: self.thinking.clone().unwrap_or_default(),
            images: self.images.as_ref().map_or(0, Vec::len),
            tool_calls,
            tool_name: self.tool_name.clone().filter(|s| !s.is_empty()),
            tool_call_id: self.tool_call_id.clone().filter(|s| !s.is_empty()),
        })
    }
}

pub fn tools(v: &Option<Vec<Value>>) -> Vec<Tool> {
    v.iter().flatten().cloned().map(Tool).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lone_surrogates_and_invalid_utf8_read_as_replacement_characters() {
        let read = |body: &[u8]| -> String {
            let v: Value = parse_body(body).unwrap_or_else(|e| panic!("{body:?}: {}", e.message));
            v["s"].as_str().unwrap().to_string()
        };
        assert_eq!(read(br#"{"s": "cut \ud83d"}"#), "cut \u{fffd}");
        assert_eq!(read(br#"{"s": "\udc00 low"}"#), "\u{fffd} low");
        assert_eq!(read(br#"{"s": "\ud83d\ud83d\ude00"}"#), "\u{fffd}\u{1f600}");
        assert_eq!(read(b"{\"s\": \"bad \xff\xfe!\"}"), "bad \u{fffd}\u{fffd}!");
        // Pairs, other escapes and an escaped backslash before "u" are left as they are.
        assert_eq!(
            read(br#"{"s": "\ud83d\ude00 \\ud83d \n"}"#),
            "\u{1f600} \\ud83d \n"
        );
        // Still not JSON: the strict parser's error.
        let e = parse_body::<Value>(br#"{"s": "\ud83d"#).unwrap_err();
        assert!(e.message.contains("EOF"), "{}", e.message);
    }
}
