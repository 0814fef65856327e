//! `format`: structured output. `"json"` asks for any JSON object, an object is a JSON schema;
//! both constrain decoding with the engine's grammar sampler, so the reply always parses (and,
//! for a schema, validates). A schema the engine cannot enforce is refused with a 400 naming the
//! keyword, never answered unconstrained.

use std::sync::{Arc, Mutex, Weak};

use engine::chat::Tool;
use engine::grammar::{tool_call_grammar, Grammar, Matcher, TokenVocab};
use engine::sample::Sampler;
use engine::template::ChatFormat;
use engine::tokenizer::Vocab;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::scheduler::Loaded;

/// The request's format, if it asks for one (`null`, `""` and `{}`-less absence mean none).
pub fn requested(format: Option<&Value>) -> ApiResult<Option<Value>> {
    match format {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(Value::String(s.clone()))),
        Some(v @ Value::Object(_)) => Ok(Some(v.clone())),
        Some(other) => Err(ApiError::bad_request(format!(
            "invalid format {other}: expected \"json\" or a JSON schema object"
        ))),
    }
}

/// The grammar for a format [`requested`] accepted: any JSON object for `"json"` (whitespace
/// bounded as llama.cpp bounds it),
/// llama.cpp's conversion of the schema otherwise.
pub fn grammar(format: &Value) -> ApiResult<Grammar> {
    match format {
        Value::String(s) if s == "json" => Ok(Grammar::json()),
        schema => Grammar::from_json_schema(schema)
            .map_err(|e| ApiError::bad_request(format!("invalid format: {e}"))),
    }
}

/// Constrains `sampler` to `format`.
pub fn constrain(sampler: Sampler, loaded: &Loaded, format: &Value) -> ApiResult<Sampler> {
    let grammar = grammar(format)?;
    let matcher = Matcher::new(&grammar, grammar_vocab(&loaded.vocab))
        .map_err(|e| ApiError::bad_request(format!("invalid format: {e}")))?;
    sampler
        .with_grammar(matcher)
        .map_err(|e| ApiError::internal(format!("structured output: {e}")))
}

/// Constrains `sampler` so that the reply is tool calls only, in the model's tool-call syntax
/// (`format` decides it), each naming one of `tools` with arguments that follow its
/// `parameters` schema: OpenAI's `tool_choice: "required"`, or a named function when `tools`
/// holds just that one. A parameters schema that cannot be enforced is a 400.
pub fn constrain_tool_calls(
    sampler: Sampler,
    loaded: &Loaded,
    format: &ChatFormat,
    tools: &[Tool],
) -> ApiResult<Sampler> {
    let vocab = grammar_vocab(&loaded.vocab);
    let grammar = tool_call_grammar(tools, &format.tool_call_format(), &vocab)
        .map_err(|e| ApiError::bad_request(format!("invalid tools: {e}")))?;
    let matcher =
        Matcher::new(&grammar, vocab).map_err(|e| ApiError::bad_request(format!("invalid tools: {e}")))?;
    sampler
        .with_grammar(matcher)
        .map_err(|e| ApiError::internal(format!("tool calls: {e}")))
}

/// The vocabulary as grammars see it, built once per loaded vocabulary (a prefix trie over every
/// token: tens of milliseconds for a 262k-token vocabulary) and shared by its requests. Entries
/// of unloaded models are dropped as they are noticed.
fn grammar_vocab(vocab: &Arc<Vocab>) -> Arc<TokenVocab> {
    static BUILT: Mutex<Vec<(Weak<Vocab>, Arc<TokenVocab>)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    built.retain(|(v, _)| v.strong_count() > 0);
    if let Some((_, g)) = built.iter().find(|(v, _)| v.as_ptr() == Arc::as_ptr(vocab)) {
        return g.clone();
    }
    let g = Arc::new(TokenVocab::from_vocab(vocab));
    built.push((Arc::downgrade(vocab), g.clone()));
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    use engine::grammar::{TokenKind, TokenMask};
    use serde_json::json;

    /// Whether `grammar` accepts exactly `text` (one token per byte).
    fn accepts(grammar: &Grammar, text: &str) -> bool {
        let mut toks: Vec<(Vec<u8>, TokenKind)> = (0..=255u8).map(|b| (vec![b], TokenKind::Text)).collect();
        toks.push((b"<eos>".to_vec(), TokenKind::EndOfGeneration));
        let vocab = Arc::new(TokenVocab::new(toks));
        let mut m = Matcher::new(grammar, vocab.clone()).unwrap();
        if m.accept_bytes(text.as_bytes()).is_err() {
            return false;
        }
        let mut mask = TokenMask::new(vocab.n_tokens());
        m.fill_mask(&mut mask);
        mask.contains(256)
    }

    #[test]
    fn formats_become_grammars() {
        assert_eq!(requested(None).unwrap(), None);
        assert_eq!(requested(Some(&json!(""))).unwrap(), None);
        assert!(requested(Some(&json!("yaml"))).is_err());
        assert!(requested(Some(&json!([1]))).is_err());

        let json = grammar(&requested(Some(&json!("json"))).unwrap().unwrap()).unwrap();
        assert!(accepts(&json, r#"{"a": [1, "x"]}"#));
        assert!(!accepts(&json, "[1]"), "format json is an object");

        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let g = grammar(&requested(Some(&schema)).unwrap().unwrap()).unwrap();
        assert!(accepts(&g, r#"{"n": 3}"#));
        assert!(!accepts(&g, r#"{"n": "3"}"#));
        assert!(!accepts(&g, "{}"));
    }

    #[test]
    fn unenforceable_schemas_are_bad_requests() {
        let e = grammar(&json!({"type": "array", "uniqueItems": true})).unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        assert!(e.message.contains("uniqueItems"), "{}", e.message);
    }
}
