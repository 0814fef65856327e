//! Prompt templates: GGUF chat templates (Jinja, through minijinja) and Ollama's Modelfile
//! TEMPLATE language (Go `text/template`, our own implementation), plus the choice between them.

pub mod clock;
pub mod gotmpl;
pub mod jinja;
pub mod ollama;
pub mod prompt;
pub mod pyjson;

pub use jinja::{JinjaInputs, JinjaTemplate};
pub use ollama::{OllamaInputs, OllamaTemplate};
pub use prompt::{
    render_prompt, ChatFormat, ModelTemplates, PromptRequest, TemplateCapabilities, TemplateSource,
    FALLBACK_TEMPLATE,
};
