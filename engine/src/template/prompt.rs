//! Choosing a model's prompt template and rendering a request with it.
//!
//! Precedence, as in Ollama: the request's `template` > the Modelfile TEMPLATE > the GGUF chat
//! template (`tokenizer.chat_template`) > a plain fallback (`{{ .Prompt }}`, Ollama's default for
//! imported models). Request and Modelfile templates are Go templates; a text that does not
//! parse as Go but reads as Jinja (`{%`) is taken as Jinja, so a chat template pasted into a
//! Modelfile works too.
//!
//! What stays with the caller (the daemon):
//! - Raw mode (`raw: true`): no template at all; the request's prompt is the prompt. Do not call
//!   [`ChatFormat::render`].
//! - The old `context` continuation of `/api/generate`: detokenize the given tokens, build the
//!   messages with [`crate::chat::generate_messages`] (`continues_context = true`, which leaves
//!   out the model's MESSAGE history), render, and put the detokenized text in front of the
//!   rendered prompt, as Ollama does.
//! - Tokenizing: the prompt contains special tokens as text (`<|im_start|>`…) and is meant to be
//!   tokenized with special-token parsing on and the vocabulary's own BOS rule. A Jinja template
//!   that prints `bos_token` itself has that leading BOS text removed when the vocabulary adds
//!   one, as llama.cpp does, so the model never sees two.
//! - Truncation to `num_ctx`: render repeatedly with fewer old messages (keeping system messages
//!   and the last message) and count tokens, as Ollama's `chatPrompt` does.

use std::time::SystemTime;

use super::jinja::{JinjaInputs, JinjaTemplate};
use super::ollama::{OllamaInputs, OllamaTemplate};
use crate::chat::{Message, ReplyParser, Think, ThinkingParser, Tool, ToolCallFormat, ToolCallParser};
use crate::gguf::Metadata;
use crate::{Error, Result};

/// The template a model brings: its Modelfile TEMPLATE and what its GGUF says.
#[derive(Debug, Clone, Default)]
pub struct ModelTemplates {
    /// The Modelfile TEMPLATE (Go syntax), if the model has one.
    pub modelfile_template: Option<String>,
    /// `tokenizer.chat_template` (Jinja).
    pub chat_template: Option<String>,
    /// The text of the BOS and EOS tokens, which Jinja templates print.
    pub bos_token: String,
    pub eos_token: String,
    /// Whether the tokenizer adds BOS itself (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
}

impl ModelTemplates {
    /// Reads the chat template and special tokens from GGUF metadata.
    pub fn from_gguf(md: &Metadata, modelfile_template: Option<String>) -> Result<ModelTemplates> {
        let chat_template = md.get_str("tokenizer.chat_template")?.map(str::to_string);
        let tokens = md.get_str_array("tokenizer.ggml.tokens")?;
        let token_text = |key: &str| -> Result<String> {
            let Some(id) = md.get_u32(key)? else {
                return Ok(String::new());
            };
            Ok(tokens
                .and_then(|t| t.get(id as usize))
                .map(str::to_string)
                .unwrap_or_default())
        };
        // llama.cpp's default when the key is absent: SPM vocabularies add BOS, BPE ones do not.
        let add_bos = match md.get_bool("tokenizer.ggml.add_bos_token")? {
            Some(b) => b,
            None => md.get_str("tokenizer.ggml.model")? == Some("llama"),
        };
        Ok(ModelTemplates {
            modelfile_template,
            chat_template,
            bos_token: token_text("tokenizer.ggml.bos_token_id")?,
            eos_token: token_text("tokenizer.ggml.eos_token_id")?,
            add_bos,
        })
    }
}

/// Which template won.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateSource {
    Request,
    Modelfile,
    Gguf,
    Fallback,
}

/// Ollama's default template for models without one.
pub const FALLBACK_TEMPLATE: &str = "{{ .Prompt }}";

#[derive(Debug)]
enum Engine {
    Go(OllamaTemplate),
    Jinja(Box<JinjaTemplate>, String),
}

/// A model's prompt format, chosen and compiled once; render per request.
#[derive(Debug)]
pub struct ChatFormat {
    engine: Engine,
    source: TemplateSource,
    bos_token: String,
    eos_token: String,
    add_bos: bool,
}

/// One request to render.
#[derive(Debug, Clone)]
pub struct PromptRequest<'a> {
    pub messages: &'a [Message],
    pub tools: &'a [Tool],
    /// `None`: the request did not set `think`.
    pub think: Option<&'a Think>,
    /// `/api/generate`'s prompt and suffix when the request is fill-in-the-middle (both set).
    pub prompt: &'a str,
    pub suffix: &'a str,
    /// For Jinja templates: end with the assistant header (true for every chat request).
    pub add_generation_prompt: bool,
    pub now: SystemTime,
}

impl<'a> PromptRequest<'a> {
    /// A chat request rendered now.
    pub fn chat(messages: &'a [Message], tools: &'a [Tool], think: Option<&'a Think>) -> PromptRequest<'a> {
        PromptRequest {
            messages,
            tools,
            think,
            prompt: "",
            suffix: "",
            add_generation_prompt: true,
            now: SystemTime::now(),
        }
    }
}

/// Model capabilities a template grants (Ollama's `tools`, `thinking`, `insert`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TemplateCapabilities {
    pub tools: bool,
    pub thinking: bool,
    pub insert: bool,
}

/// A template of Ollama's kind (a Modelfile's TEMPLATE or a request's `template`): Go, or Jinja
/// when it does not parse as Go but holds `{%` (a chat template pasted into a Modelfile).
fn compile_ollama(text: String) -> Result<Engine> {
    match OllamaTemplate::parse(&text) {
        Ok(t) => Ok(Engine::Go(t)),
        Err(go_err) if text.contains("{%") => match JinjaTemplate::new(&text) {
            Ok(j) => Ok(Engine::Jinja(Box::new(j), text)),
            Err(_) => Err(go_err),
        },
        Err(e) => Err(e),
    }
}

impl ChatFormat {
    /// Picks and compiles the template by precedence.
    pub fn select(model: &ModelTemplates, request_template: Option<&str>) -> Result<ChatFormat> {
        let (text, source) = if let Some(t) = non_empty(request_template) {
            (t.to_string(), TemplateSource::Request)
        } else if let Some(t) = non_empty(model.modelfile_template.as_deref()) {
            (t.to_string(), TemplateSource::Modelfile)
        } else if let Some(t) = non_empty(model.chat_template.as_deref()) {
            (t.to_string(), TemplateSource::Gguf)
        } else {
            (FALLBACK_TEMPLATE.to_string(), TemplateSource::Fallback)
        };
        let engine = if source == TemplateSource::Gguf {
            Engine::Jinja(Box::new(JinjaTemplate::new(&text)?), text)
        } else {
            compile_ollama(text)?
        };
        Ok(ChatFormat {
            engine,
            source,
            bos_token: model.bos_token.clone(),
            eos_token: model.eos_token.clone(),
            add_bos: model.add_bos,
        })
    }

    /// Checks a Modelfile's TEMPLATE as [`ChatFormat::select`] will compile it, so `create` can
    /// refuse one that would fail every request to the model (Ollama's "template error").
    pub fn check_template(text: &str) -> Result<()> {
        compile_ollama(text.to_string()).map(drop)
    }

    pub fn source(&self) -> TemplateSource {
        self.source
    }

    pub fn is_jinja(&self) -> bool {
        matches!(self.engine, Engine::Jinja(..))
    }

    pub fn capabilities(&self) -> TemplateCapabilities {
        match &self.engine {
            Engine::Go(t) => TemplateCapabilities {
                tools: t.supports_tools(),
                thinking: t.supports_thinking(),
                insert: t.supports_insert(),
            },
            // Ollama's tests on the chat template's text.
            Engine::Jinja(_, src) => TemplateCapabilities {
                tools: src.contains("tools") || src.contains("tool_call"),
                thinking: (src.contains("<think>") && src.contains("</think>"))
                    || ((src.contains("content.split('</think>')")
                        || src.contains("content.split(\"</think>\")"))
                        && !src.contains("reasoning_content")),
                insert: false,
            },
        }
    }

    /// The tags around the model's reasoning, when the template has them.
    pub fn thinking_tags(&self) -> Option<(String, String)> {
        match &self.engine {
            Engine::Go(t) => t.thinking_tags(),
            Engine::Jinja(..) => self
                .capabilities()
                .thinking
                .then(|| ("<think>".to_string(), "</think>".to_string())),
        }
    }

    /// How this model writes tool calls.
    pub fn tool_call_format(&self) -> ToolCallFormat {
        match &self.engine {
            Engine::Go(t) => ToolCallFormat::from_tag(&t.tool_call_tag()),
            Engine::Jinja(_, src) => ToolCallFormat::infer_from_chat_template(src),
        }
    }

    /// Renders the prompt for one request.
    pub fn render(&self, req: &PromptRequest<'_>) -> Result<String> {
        match &self.engine {
            Engine::Go(t) => t.execute(&OllamaInputs {
                messages: req.messages,
                tools: req.tools,
                prompt: req.prompt,
                suffix: req.suffix,
                think: req.think,
                now: req.now,
            }),
            Engine::Jinja(t, _) => {
                if !req.suffix.is_empty() {
                    return Err(Error::InvalidArgument(
                        "this model's template does not support insert (suffix)".into(),
                    ));
                }
                // A chat that ends in an assistant message asks for that message's
                // continuation ("prefill", as llama.cpp's server and Ollama's own templates do):
                // the turns before it are rendered up to the assistant header, then its text
                // follows, left open. Not for tool calls, nor for an assistant message alone.
                let (messages, prefill) = match req.messages.split_last() {
                    Some((last, before))
                        if req.add_generation_prompt
                            && last.role == "assistant"
                            && last.tool_calls.is_empty()
                            && !before.is_empty() =>
                    {
                        (before, last.content.as_str())
                    }
                    _ => (req.messages, ""),
                };
                let mut rendered = t.render(&JinjaInputs {
                    messages,
                    tools: req.tools,
                    add_generation_prompt: req.add_generation_prompt,
                    bos_token: &self.bos_token,
                    eos_token: &self.eos_token,
                    think: req.think,
                    now: req.now,
                })?;
                rendered.push_str(prefill);
                Ok(match rendered.strip_prefix(self.bos_token.as_str()) {
                    Some(rest) if self.add_bos && !self.bos_token.is_empty() => rest.to_string(),
                    _ => rendered,
                })
            }
        }
    }
}

impl ChatFormat {
    /// The `think` a request runs with, as Ollama decides it: unset means on for a model whose
    /// template can think; asking a model that cannot think to think is an error (the daemon
    /// answers 400 "does not support thinking"); `false` is passed on either way.
    pub fn resolve_think(&self, requested: Option<Think>) -> Result<Option<Think>> {
        let capable = self.capabilities().thinking;
        match requested {
            None if capable => Ok(Some(Think::On)),
            Some(t) if t.enabled() && !capable => Err(Error::InvalidArgument(
                "this model does not support thinking".into(),
            )),
            other => Ok(other),
        }
    }

    /// The parser for the reply to `prompt` (what [`ChatFormat::render`] made for this request):
    /// thinking is split out when the request enables it (or the prompt itself opened the
    /// thinking tag, in which case a request that turned thinking off gets it dropped), and tool
    /// calls are parsed when the request has tools.
    pub fn reply_parser(&self, prompt: &str, think: Option<&Think>, tools: &[Tool]) -> ReplyParser {
        let wants = think.is_some_and(Think::enabled);
        let thinking = self.thinking_tags().and_then(|(open, close)| {
            let parser = ThinkingParser::for_prompt(open, close, prompt);
            (wants || parser.in_thinking()).then_some(parser)
        });
        let tool_parser = (!tools.is_empty()).then(|| {
            ToolCallParser::new(
                self.tool_call_format(),
                tools.iter().map(|t| t.name().to_string()).collect(),
            )
        });
        ReplyParser::new(thinking, wants, tool_parser)
    }
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|t| !t.trim().is_empty())
}

/// The one call for the daemon: choose the template by precedence and render the request.
pub fn render_prompt(
    model: &ModelTemplates,
    request_template: Option<&str>,
    req: &PromptRequest<'_>,
) -> Result<String> {
    ChatFormat::select(model, request_template)?.render(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> ModelTemplates {
        ModelTemplates {
            modelfile_template: Some("MF {{ range .Messages }}{{ .Content }}{{ end }}".into()),
            chat_template: Some(
                "{{ bos_token }}GG {% for m in messages %}{{ m.content }}{% endfor %}".into(),
            ),
            bos_token: "<s>".into(),
            eos_token: "</s>".into(),
            add_bos: true,
        }
    }

    fn render(m: &ModelTemplates, req_tmpl: Option<&str>) -> String {
        let msgs = [Message::new("user", "hi")];
        render_prompt(m, req_tmpl, &PromptRequest::chat(&msgs, &[], None)).unwrap()
    }

    #[test]
    fn precedence() {
        let mut m = model();
        assert_eq!(render(&m, Some("REQ {{ .Prompt }}")), "REQ hi");
        assert_eq!(render(&m, None), "MF hi");
        m.modelfile_template = None;
        // BOS printed by the template is dropped: the tokenizer adds it.
        assert_eq!(render(&m, None), "GG hi");
        m.add_bos = false;
        assert_eq!(render(&m, None), "<s>GG hi");
        m.chat_template = None;
        assert_eq!(render(&m, None), "hi");
        assert_eq!(
            ChatFormat::select(&m, None).unwrap().source(),
            TemplateSource::Fallback
        );
    }

    #[test]
    fn jinja_in_a_modelfile_is_accepted() {
        let m = ModelTemplates {
            modelfile_template: Some(
                "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}".into(),
            ),
            ..ModelTemplates::default()
        };
        assert_eq!(render(&m, None), "[user]hi");
        assert!(ChatFormat::select(&m, Some("{{ .Prompt ")).is_err());
    }

    #[test]
    fn think_defaults_on_for_thinking_templates_only() {
        let thinking = ModelTemplates {
            chat_template: Some(
                "{% for m in messages %}{{ m.content }}{% endfor %}<think>\n{# </think> #}".into(),
            ),
            ..ModelTemplates::default()
        };
        let f = ChatFormat::select(&thinking, None).unwrap();
        assert_eq!(f.resolve_think(None).unwrap(), Some(Think::On));
        assert_eq!(f.resolve_think(Some(Think::Off)).unwrap(), Some(Think::Off));
        let plain = ChatFormat::select(&model(), None).unwrap();
        assert_eq!(plain.resolve_think(None).unwrap(), None);
        assert!(plain.resolve_think(Some(Think::Level("high".into()))).is_err());
        assert_eq!(plain.resolve_think(Some(Think::Off)).unwrap(), Some(Think::Off));
    }

    #[test]
    fn a_chat_ending_in_an_assistant_message_continues_it() {
        let chatml = ModelTemplates {
            chat_template: Some(
                "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}\
                 {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
                    .into(),
            ),
            ..ModelTemplates::default()
        };
        let f = ChatFormat::select(&chatml, None).unwrap();
        let render = |msgs: &[Message]| f.render(&PromptRequest::chat(msgs, &[], None)).unwrap();
        let user = Message::new("user", "2+2?");
        assert_eq!(
            render(&[user.clone(), Message::new("assistant", "{\"answer\": ")]),
            "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n{\"answer\": "
        );
        // A finished turn before the user's is rendered closed, as before.
        assert_eq!(
            render(&[Message::new("assistant", "Hi."), user.clone()]),
            "<|im_start|>assistant\nHi.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
        );
        // An assistant message alone, or one with tool calls, is a closed turn.
        assert_eq!(
            render(&[Message::new("assistant", "Hi.")]),
            "<|im_start|>assistant\nHi.<|im_end|>\n<|im_start|>assistant\n"
        );
        let mut call = Message::new("assistant", "");
        call.tool_calls.push(crate::chat::ToolCall {
            id: None,
            name: "f".into(),
            arguments: Default::default(),
        });
        assert!(render(&[user, call]).ends_with("<|im_end|>\n<|im_start|>assistant\n"));
    }

    #[test]
    fn jinja_templates_refuse_suffix() {
        let m = ModelTemplates {
            chat_template: Some("{% for m in messages %}{{ m.content }}{% endfor %}".into()),
            ..ModelTemplates::default()
        };
        let f = ChatFormat::select(&m, None).unwrap();
        let req = PromptRequest {
            prompt: "a",
            suffix: "b",
            ..PromptRequest::chat(&[], &[], None)
        };
        assert!(matches!(f.render(&req), Err(Error::InvalidArgument(_))));
        assert!(!f.capabilities().insert);
    }
}
