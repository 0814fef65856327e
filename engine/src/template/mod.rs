//! Prompt templates: GGUF chat templates (Jinja, through minijinja) and Ollama's Modelfile
//! TEMPLATE language (Go `text/template`, our own implementation), plus the choice between them.

pub mod clock;
pub mod jinja;
pub mod pyjson;

pub use jinja::{JinjaInputs, JinjaTemplate};
