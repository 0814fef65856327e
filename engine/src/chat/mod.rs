//! Chat: the conversation types the engine renders into prompts, and the parsers that turn a
//! model's raw output back into structured replies (thinking text, tool calls).
//!
//! The daemon converts the Ollama/OpenAI wire JSON into these types; nothing here knows the wire
//! formats. Tool definitions and tool-call arguments stay JSON values (`serde_json`), because they
//! are JSON Schema and free-form objects that templates print back as JSON.

pub mod reply;
pub mod thinking;
pub mod tools;

pub use reply::{ReplyDelta, ReplyParser};
pub use thinking::{Phase, ThinkingParser};
pub use tools::{ToolCallFormat, ToolCallParser};

use serde_json::{Map, Value};

/// One message of a conversation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Message {
    /// `system`, `user`, `assistant` or `tool` (lower case; the daemon lowercases on decode).
    pub role: String,
    pub content: String,
    /// The reasoning text of an earlier assistant turn (what was inside `<think>`), if any.
    pub thinking: String,
    /// How many images the message carries; the image data itself stays with the daemon.
    pub images: usize,
    pub tool_calls: Vec<ToolCall>,
    /// For `tool` messages: the name of the tool whose result this is.
    pub tool_name: Option<String>,
    /// For `tool` messages: the id of the call this answers (OpenAI style).
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            role: role.into(),
            content: content.into(),
            ..Message::default()
        }
    }
}

/// A call of a tool, as the model wrote it or as a client sends it back in the history.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCall {
    pub id: Option<String>,
    pub name: String,
    /// Always a JSON object (Ollama sends objects, not strings); key order is kept.
    pub arguments: Map<String, Value>,
}

/// A tool the model may call: an OpenAI-style definition,
/// `{"type": "function", "function": {"name", "description", "parameters": <JSON Schema>}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Tool(pub Value);

impl Tool {
    /// The function name, or "" for a malformed definition.
    pub fn name(&self) -> &str {
        self.0
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// The request's `think` setting: Ollama accepts a bool or a level string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Think {
    Off,
    On,
    /// `"low"`, `"medium"`, `"high"`, `"max"`: thinking on, with a level for templates that use it.
    Level(String),
}

impl Think {
    pub fn enabled(&self) -> bool {
        !matches!(self, Think::Off)
    }

    /// The level string templates see as `.ThinkLevel` (empty unless a level was given).
    pub fn level(&self) -> &str {
        match self {
            Think::Level(l) => l,
            _ => "",
        }
    }
}

/// Builds the message list of an `/api/generate` request the way Ollama does: the system prompt
/// (the request's `system`, else the model's SYSTEM), then the model's MESSAGE history unless the
/// request continues an old `context`, then the prompt as a user message.
pub fn generate_messages(
    request_system: Option<&str>,
    model_system: Option<&str>,
    model_messages: &[Message],
    prompt: &str,
    images: usize,
    continues_context: bool,
) -> Vec<Message> {
    let mut msgs = Vec::new();
    match (
        request_system.filter(|s| !s.is_empty()),
        model_system.filter(|s| !s.is_empty()),
    ) {
        (Some(s), _) | (None, Some(s)) => msgs.push(Message::new("system", s)),
        (None, None) => {}
    }
    if !continues_context {
        msgs.extend_from_slice(model_messages);
    }
    let mut user = Message::new("user", prompt);
    user.images = images;
    msgs.push(user);
    msgs
}

/// Builds the message list of an `/api/chat` request the way Ollama does: the model's SYSTEM
/// first unless the request starts with its own system message, then the model's MESSAGE history,
/// then the request's messages.
pub fn chat_messages(
    model_system: Option<&str>,
    model_messages: &[Message],
    request: &[Message],
) -> Vec<Message> {
    let mut msgs = Vec::with_capacity(request.len() + model_messages.len() + 1);
    if let Some(s) = model_system.filter(|s| !s.is_empty()) {
        if request.first().is_none_or(|m| m.role != "system") {
            msgs.push(Message::new("system", s));
        }
    }
    msgs.extend_from_slice(model_messages);
    msgs.extend_from_slice(request);
    msgs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generate_messages_prefers_request_system_and_skips_history_on_context() {
        let hist = [Message::new("user", "hi"), Message::new("assistant", "hello")];
        let m = generate_messages(Some("req sys"), Some("model sys"), &hist, "q", 1, false);
        assert_eq!(m.len(), 4);
        assert_eq!(m[0], Message::new("system", "req sys"));
        assert_eq!(m[3].content, "q");
        assert_eq!(m[3].images, 1);
        let m = generate_messages(None, Some("model sys"), &hist, "q", 0, true);
        assert_eq!(
            m,
            vec![Message::new("system", "model sys"), Message::new("user", "q")]
        );
        let m = generate_messages(Some(""), None, &[], "q", 0, false);
        assert_eq!(m, vec![Message::new("user", "q")]);
    }

    #[test]
    fn chat_messages_adds_model_system_only_when_request_has_none() {
        let req = [Message::new("user", "q")];
        let m = chat_messages(Some("sys"), &[], &req);
        assert_eq!(m[0], Message::new("system", "sys"));
        let req = [Message::new("system", "mine"), Message::new("user", "q")];
        let m = chat_messages(Some("sys"), &[], &req);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].content, "mine");
    }
}
