//! The parts of Ollama's wire format (`api/types.go`) the CLI sends and reads.
//!
//! Responses are read leniently, as Go's `encoding/json` does: unknown fields are ignored and
//! missing or `null` fields take their empty value.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// `null` as the type's default (Go omits or nulls empty fields).
fn nullable<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A progress line of `/api/pull`, `/api/push` and `/api/create`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProgressResponse {
    #[serde(deserialize_with = "nullable")]
    pub status: String,
    #[serde(deserialize_with = "nullable")]
    pub digest: String,
    #[serde(deserialize_with = "nullable")]
    pub total: i64,
    #[serde(deserialize_with = "nullable")]
    pub completed: i64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Details {
    #[serde(deserialize_with = "nullable")]
    pub parent_model: String,
    #[serde(deserialize_with = "nullable")]
    pub format: String,
    #[serde(deserialize_with = "nullable")]
    pub family: String,
    #[serde(deserialize_with = "nullable")]
    pub parameter_size: String,
    #[serde(deserialize_with = "nullable")]
    pub quantization_level: String,
}

/// `GET /api/tags`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ListResponse {
    #[serde(deserialize_with = "nullable")]
    pub models: Vec<ListModel>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ListModel {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub model: String,
    #[serde(deserialize_with = "nullable")]
    pub modified_at: String,
    #[serde(deserialize_with = "nullable")]
    pub size: i64,
    #[serde(deserialize_with = "nullable")]
    pub digest: String,
    #[serde(deserialize_with = "nullable")]
    pub remote_model: String,
}

/// `GET /api/ps`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PsResponse {
    #[serde(deserialize_with = "nullable")]
    pub models: Vec<RunningModel>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RunningModel {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub model: String,
    #[serde(deserialize_with = "nullable")]
    pub size: i64,
    #[serde(deserialize_with = "nullable")]
    pub digest: String,
    #[serde(deserialize_with = "nullable")]
    pub expires_at: String,
    #[serde(deserialize_with = "nullable")]
    pub size_vram: i64,
    #[serde(deserialize_with = "nullable")]
    pub context_length: i64,
}

/// `POST /api/show`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ShowResponse {
    #[serde(deserialize_with = "nullable")]
    pub license: String,
    #[serde(deserialize_with = "nullable")]
    pub modelfile: String,
    #[serde(deserialize_with = "nullable")]
    pub parameters: String,
    #[serde(deserialize_with = "nullable")]
    pub template: String,
    #[serde(deserialize_with = "nullable")]
    pub system: String,
    #[serde(deserialize_with = "nullable")]
    pub details: Details,
    #[serde(deserialize_with = "nullable")]
    pub messages: Vec<Message>,
    pub model_info: Option<Map<String, Value>>,
    pub projector_info: Option<Map<String, Value>>,
    #[serde(deserialize_with = "nullable")]
    pub tensors: Vec<Tensor>,
    #[serde(deserialize_with = "nullable")]
    pub capabilities: Vec<String>,
    #[serde(deserialize_with = "nullable")]
    pub requires: String,
}

impl ShowResponse {
    pub fn has_capability(&self, c: &str) -> bool {
        self.capabilities.iter().any(|x| x == c)
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Tensor {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(rename = "type", deserialize_with = "nullable")]
    pub kind: String,
    #[serde(deserialize_with = "nullable")]
    pub shape: Vec<u64>,
}

/// A chat message, as sent and as streamed back.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Message {
    #[serde(deserialize_with = "nullable")]
    pub role: String,
    #[serde(deserialize_with = "nullable")]
    pub content: String,
    #[serde(skip_serializing_if = "String::is_empty", deserialize_with = "nullable")]
    pub thinking: String,
    #[serde(skip_serializing_if = "Vec::is_empty", deserialize_with = "nullable")]
    pub tool_calls: Vec<ToolCall>,
}

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            ..Message::default()
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ToolCall {
    pub function: ToolFunction,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ToolFunction {
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    #[serde(deserialize_with = "nullable")]
    pub arguments: Map<String, Value>,
}

/// The timings of a finished generation (nanoseconds and token counts).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Metrics {
    #[serde(deserialize_with = "nullable")]
    pub total_duration: i64,
    #[serde(deserialize_with = "nullable")]
    pub load_duration: i64,
    #[serde(deserialize_with = "nullable")]
    pub prompt_eval_count: i64,
    #[serde(deserialize_with = "nullable")]
    pub prompt_eval_duration: i64,
    #[serde(deserialize_with = "nullable")]
    pub eval_count: i64,
    #[serde(deserialize_with = "nullable")]
    pub eval_duration: i64,
}

/// `think`: a bool or a level (`low`, `medium`, `high`, `max`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Think {
    Bool(bool),
    Level(String),
}

/// What `/api/generate` and `/api/chat` share in a request.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Common {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub format: Option<Value>,
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub options: Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_alive: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub think: Option<Think>,
}

/// `POST /api/generate`.
#[derive(Debug, Default, Serialize)]
pub struct GenerateRequest {
    pub model: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub prompt: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub system: String,
    #[serde(flatten)]
    pub common: Common,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct GenerateResponse {
    #[serde(deserialize_with = "nullable")]
    pub response: String,
    #[serde(deserialize_with = "nullable")]
    pub thinking: String,
    #[serde(deserialize_with = "nullable")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(deserialize_with = "nullable")]
    pub done: bool,
    #[serde(deserialize_with = "nullable")]
    pub done_reason: String,
    #[serde(flatten)]
    pub metrics: Metrics,
}

/// `POST /api/chat`.
#[derive(Debug, Default, Serialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    #[serde(flatten)]
    pub common: Common,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ChatResponse {
    #[serde(deserialize_with = "nullable")]
    pub message: Message,
    #[serde(deserialize_with = "nullable")]
    pub done: bool,
    #[serde(deserialize_with = "nullable")]
    pub done_reason: String,
    #[serde(flatten)]
    pub metrics: Metrics,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nulls_and_unknown_fields_are_tolerated() {
        let r: ShowResponse = serde_json::from_value(json!({
            "license": null, "details": {"family": "gemma3", "families": null},
            "capabilities": ["completion"], "model_info": {"general.architecture": "gemma3"},
            "tensors": null, "something_new": 1
        }))
        .unwrap();
        assert_eq!(r.details.family, "gemma3");
        assert!(r.has_capability("completion"));
        assert!(r.license.is_empty() && r.tensors.is_empty());
    }

    #[test]
    fn final_chunks_carry_metrics() {
        let r: GenerateResponse = serde_json::from_str(
            r#"{"model":"m","created_at":"2025-01-01T00:00:00Z","response":"","done":true,
                "done_reason":"stop","context":[1,2],"total_duration":5,"eval_count":3}"#,
        )
        .unwrap();
        assert!(r.done);
        assert_eq!(r.metrics.total_duration, 5);
        assert_eq!(r.metrics.eval_count, 3);
        let c: ChatResponse = serde_json::from_str(
            r#"{"message":{"role":"assistant","content":"Hi","thinking":"hmm"},"done":false}"#,
        )
        .unwrap();
        assert_eq!(c.message.content, "Hi");
        assert_eq!(c.message.thinking, "hmm");
    }

    #[test]
    fn requests_leave_out_what_is_unset() {
        let req = ChatRequest {
            model: "m".into(),
            messages: vec![Message::new("user", "hi")],
            common: Common {
                think: Some(Think::Level("high".into())),
                format: Some(json!("json")),
                ..Common::default()
            },
        };
        assert_eq!(
            serde_json::to_value(&req).unwrap(),
            json!({"model":"m","messages":[{"role":"user","content":"hi"}],"think":"high","format":"json"})
        );
        let req = GenerateRequest {
            model: "m".into(),
            common: Common {
                keep_alive: Some(json!(0)),
                think: Some(Think::Bool(false)),
                ..Common::default()
            },
            ..GenerateRequest::default()
        };
        assert_eq!(
            serde_json::to_value(&req).unwrap(),
            json!({"model":"m","keep_alive":0,"think":false})
        );
    }
}
