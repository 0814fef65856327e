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
    serde_json::from_slice(body).map_err(|e| ApiError::bad_request(e.to_string()))
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
