//! A grammar for replies that must be tool calls (OpenAI's `tool_choice: "required"` or a named
//! function): the model's tool-call syntax around JSON calls whose `name` is one of the request's
//! tools and whose arguments follow that tool's `parameters` schema.
//!
//! The call syntax is the one the reply parser reads ([`ToolCallFormat`]): a tagged format's
//! opening marker before each call (and its closing marker after, Qwen/Hermes `<tool_call>`), or
//! the marker once before a JSON array of calls (Mistral `[TOOL_CALLS]`), or bare JSON calls
//! (Llama 3, with `parameters` for the arguments as that format writes them). A marker that is a
//! control token of the vocabulary is matched as that token; text markers as text.

use serde_json::{json, Value};

use super::json_schema::schema_to_gbnf;
use super::{Grammar, GrammarError, TokenKind, TokenVocab};
use crate::chat::{Tool, ToolCallFormat};

/// The grammar of one or more calls of `tools` in `format`, for a model with `vocab`.
pub fn tool_call_grammar(
    tools: &[Tool],
    format: &ToolCallFormat,
    vocab: &TokenVocab,
) -> Result<Grammar, GrammarError> {
    if tools.is_empty() {
        return Err(GrammarError::Schema(
            "tool calls are required but no tools were given".into(),
        ));
    }
    let args_key = match format {
        ToolCallFormat::Json => "parameters",
        ToolCallFormat::Tagged { .. } => "arguments",
    };
    let mut calls = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let name = tool.name();
        if name.is_empty() {
            return Err(GrammarError::Schema(format!("tool {i} has no function name")));
        }
        let mut params = tool
            .0
            .get("function")
            .and_then(|f| f.get("parameters"))
            .cloned()
            .unwrap_or_else(|| json!({"type": "object"}));
        // The parameters are embedded in a larger schema: their local references must now point
        // below where they sit.
        rebase_refs(&mut params, &format!("#/anyOf/{i}/properties/{args_key}"));
        calls.push(json!({
            "type": "object",
            "properties": {"name": {"const": name}, args_key: params},
            "required": ["name", args_key],
            "additionalProperties": false,
        }));
    }
    let call_schema = json!({ "anyOf": calls });
    let rules = schema_to_gbnf(&call_schema).map_err(|e| match e {
        GrammarError::Schema(m) => GrammarError::Schema(format!("tool parameters: {m}")),
        other => other,
    })?;
    // The converter names the call `root`; nothing else refers to it (every reference was
    // rebased below it), so it can be renamed and wrapped.
    let mut text = String::new();
    for line in rules.lines() {
        match line.strip_prefix("root ::= ") {
            Some(body) => text.push_str(&format!("tool-call ::= {body}\n")),
            None => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    let root = match format {
        ToolCallFormat::Json => r#"root ::= tool-call ( ";" space tool-call )*"#.to_string(),
        ToolCallFormat::Tagged {
            open,
            close: Some(close),
        } => {
            let (open, close) = (marker(open, vocab), marker(close, vocab));
            format!(r#"root ::= ( {open} "\n"? space tool-call {close} space )+"#)
        }
        ToolCallFormat::Tagged { open, close: None } => {
            let open = marker(open, vocab);
            format!(r#"root ::= {open} space "[" space tool-call ( "," space tool-call )* "]" space"#)
        }
    };
    text.push_str(&root);
    text.push('\n');
    Grammar::parse(&text).map_err(|e| GrammarError::Schema(format!("tool-call grammar is invalid ({e})")))
}

/// A marker as a grammar element: the control token that spells it, or its text.
fn marker(text: &str, vocab: &TokenVocab) -> String {
    match vocab.find_token(text.as_bytes()) {
        Some(id) if vocab.kind(id) == TokenKind::Special => format!("<[{id}]>"),
        _ => super::json_schema::format_literal(text),
    }
}

/// Prefixes every local `$ref` (`#...`) inside `schema` with `base`.
fn rebase_refs(schema: &mut Value, base: &str) {
    match schema {
        Value::Object(o) => {
            for (k, v) in o.iter_mut() {
                match v {
                    Value::String(r) if k == "$ref" && r.starts_with('#') => {
                        *r = format!("{base}{}", &r[1..]);
                    }
                    _ => rebase_refs(v, base),
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|v| rebase_refs(v, base)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::grammar::{Matcher, TokenMask};
    use crate::TokenId;

    const EOS: TokenId = 256;
    const CTRL: TokenId = 257;

    /// One token per byte, an end token and a control token `[TOOL_CALLS]`.
    fn vocab() -> Arc<TokenVocab> {
        let mut toks: Vec<(Vec<u8>, TokenKind)> = (0..=255u8).map(|b| (vec![b], TokenKind::Text)).collect();
        toks.push((b"<eos>".to_vec(), TokenKind::EndOfGeneration));
        toks.push((b"[TOOL_CALLS]".to_vec(), TokenKind::Special));
        Arc::new(TokenVocab::new(toks))
    }

    fn tools() -> Vec<Tool> {
        vec![
            Tool(
                json!({"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
                "required": ["city"]}}}),
            ),
            Tool(
                json!({"type": "function", "function": {"name": "add", "parameters": {
                "$defs": {"n": {"type": "integer"}},
                "type": "object",
                "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"$ref": "#/$defs/n"}},
                "required": ["a", "b"]}}}),
            ),
        ]
    }

    /// Whether the grammar accepts exactly these tokens (bytes of text, or a control token).
    fn accepts(g: &Grammar, parts: &[Result<&str, TokenId>]) -> bool {
        let vocab = vocab();
        let mut m = Matcher::new(g, vocab.clone()).unwrap();
        for p in parts {
            let ok = match p {
                Ok(text) => text.bytes().all(|b| m.accept(b as TokenId).is_ok()),
                Err(id) => m.accept(*id).is_ok(),
            };
            if !ok {
                return false;
            }
        }
        let mut mask = TokenMask::new(vocab.n_tokens());
        m.fill_mask(&mut mask);
        mask.contains(EOS)
    }

    fn hermes() -> ToolCallFormat {
        ToolCallFormat::Tagged {
            open: "<tool_call>".into(),
            close: Some("</tool_call>".into()),
        }
    }

    #[test]
    fn hermes_calls_follow_the_tools_schemas() {
        let g = tool_call_grammar(&tools(), &hermes(), &vocab()).unwrap();
        let call = r#"<tool_call>
{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}</tool_call>"#;
        assert!(accepts(&g, &[Ok(call)]));
        let two = format!(
            "{call}\n<tool_call>{{\"name\": \"add\", \"arguments\": {{\"a\": 1, \"b\": 2}}}}</tool_call>"
        );
        assert!(accepts(&g, &[Ok(&two)]));
        // Unknown tool, argument of the wrong type, missing required argument, plain text.
        assert!(!accepts(
            &g,
            &[Ok(r#"<tool_call>{"name": "rm", "arguments": {}}</tool_call>"#)]
        ));
        assert!(!accepts(
            &g,
            &[Ok(
                r#"<tool_call>{"name": "add", "arguments": {"a": "1", "b": 2}}</tool_call>"#
            )]
        ));
        assert!(!accepts(
            &g,
            &[Ok(
                r#"<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>"#
            )]
        ));
        assert!(!accepts(&g, &[Ok("Sure! Let me check.")]));
        assert!(!accepts(&g, &[]), "at least one call");
    }

    #[test]
    fn mistral_marker_is_its_control_token() {
        let format = ToolCallFormat::Tagged {
            open: "[TOOL_CALLS]".into(),
            close: None,
        };
        let g = tool_call_grammar(&tools(), &format, &vocab()).unwrap();
        let calls = r#" [{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "get_weather", "arguments": {"city": "Oslo"}}]"#;
        assert!(accepts(&g, &[Err(CTRL), Ok(calls)]));
        assert!(
            !accepts(&g, &[Ok("[TOOL_CALLS]"), Ok(calls)]),
            "the marker's text is not the marker"
        );
    }

    #[test]
    fn llama3_bare_json_uses_parameters() {
        let g = tool_call_grammar(&tools(), &ToolCallFormat::Json, &vocab()).unwrap();
        assert!(accepts(
            &g,
            &[Ok(r#"{"name": "add", "parameters": {"a": 1, "b": 2}}"#)]
        ));
        assert!(!accepts(
            &g,
            &[Ok(r#"{"name": "add", "arguments": {"a": 1, "b": 2}}"#)]
        ));
    }

    #[test]
    fn bad_tools_are_errors() {
        assert!(tool_call_grammar(&[], &hermes(), &vocab()).is_err());
        let nameless = Tool(json!({"type": "function", "function": {"parameters": {}}}));
        assert!(tool_call_grammar(&[nameless], &hermes(), &vocab()).is_err());
        let unenforceable = Tool(
            json!({"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"xs": {"type": "array", "uniqueItems": true}}}}}),
        );
        let e = tool_call_grammar(&[unenforceable], &hermes(), &vocab()).unwrap_err();
        assert!(e.to_string().contains("uniqueItems"), "{e}");
    }
}
