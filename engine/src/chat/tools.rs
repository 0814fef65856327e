//! Tool calls in a model's output, parsed incrementally as tokens arrive.
//!
//! Text before a call streams out as content at once; a possible start of a call is held back
//! until it is decided, and a call is emitted whole (name and arguments as a JSON object) when its
//! JSON is complete, as Ollama does on `/api/chat`. Formats:
//!
//! - **Tagged**: a marker, then JSON: Qwen/Hermes `<tool_call>{…}</tool_call>` (repeated for
//!   parallel calls), Mistral `[TOOL_CALLS] [{…}, {…}]` (or `[TOOL_CALLS]{…}`). The marker is
//!   what Ollama infers from the template (the text that opens `{{ if .ToolCalls }}`), or found in
//!   a Jinja chat template.
//! - **Json**: Llama 3 style bare JSON, `{"name": …, "parameters": {…}}` (optionally after
//!   `<|python_tag|>`, one or more, separated by `;` or whitespace). Only output that *starts* with
//!   JSON is taken as a call, and only when it names one of the request's tools, so ordinary JSON
//!   answers are left alone.
//!
//! A tagged format also takes a reply that *starts* with a bare JSON call naming one of the
//! request's tools (and the bare calls right after it): small models (Qwen2.5-Coder 0.5B, say)
//! often leave out the marker their template asks for, and their users expect the calls, not
//! JSON in the content.
//!
//! A call object may spell its arguments `arguments` or `parameters`, as an object or as a JSON
//! string holding one, or nest them under `function`.

use serde_json::{Map, Value};

use super::ToolCall;

/// How a model writes tool calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolCallFormat {
    /// A marker opens the calls; an optional marker closes each.
    Tagged { open: String, close: Option<String> },
    /// Bare JSON at the start of the reply.
    Json,
}

const PYTHON_TAG: &str = "<|python_tag|>";

impl ToolCallFormat {
    /// From the tag Ollama infers from a Go template (`<tool_call>`, `[TOOL_CALLS] [`, `{`).
    pub fn from_tag(tag: &str) -> ToolCallFormat {
        let tag = tag.trim();
        // The JSON's own opening bracket is not part of the marker: `[TOOL_CALLS] [` → `[TOOL_CALLS]`.
        let open = tag.trim_end_matches(['[', '{']).trim_end();
        if open.is_empty() || open == PYTHON_TAG {
            return ToolCallFormat::Json;
        }
        let close = open
            .strip_prefix('<')
            .filter(|rest| rest.ends_with('>') && !rest.starts_with('/') && !rest.starts_with('|'))
            .map(|rest| format!("</{rest}"));
        ToolCallFormat::Tagged {
            open: open.to_string(),
            close,
        }
    }

    /// From a Jinja chat template's text.
    pub fn infer_from_chat_template(source: &str) -> ToolCallFormat {
        if source.contains("<tool_call>") {
            ToolCallFormat::Tagged {
                open: "<tool_call>".into(),
                close: Some("</tool_call>".into()),
            }
        } else if source.contains("[TOOL_CALLS]") {
            ToolCallFormat::Tagged {
                open: "[TOOL_CALLS]".into(),
                close: None,
            }
        } else {
            ToolCallFormat::Json
        }
    }
}

/// What one piece of output turned into.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolParse {
    pub content: String,
    pub calls: Vec<ToolCall>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Json format: nothing but whitespace seen yet.
    Start,
    /// Looking for the marker in content.
    Content,
    /// After a marker (or at JSON start): expecting a JSON value.
    Call,
    /// After a call: the closing marker, another call, or content.
    AfterCall,
    /// Json format, not a call: everything is content.
    Passthrough,
}

/// The incremental parser; one per reply.
#[derive(Debug, Clone)]
pub struct ToolCallParser {
    format: ToolCallFormat,
    tools: Vec<String>,
    state: State,
    buf: String,
    /// For Json format: the text since the reply started, given back if it is not a call.
    pending: String,
    /// A tagged format is trying a bare JSON call at the start of the reply (or after one).
    bare: bool,
    /// The reply started with a bare call, so more may follow: a model that leaves out the
    /// marker leaves it out of its parallel calls too.
    bare_run: bool,
    /// A call has been parsed from this reply.
    called: bool,
}

impl ToolCallParser {
    /// `tools` are the names of the request's tools (bare-JSON calls must name one of them).
    pub fn new(format: ToolCallFormat, tools: Vec<String>) -> ToolCallParser {
        let state = match format {
            ToolCallFormat::Tagged { .. } if tools.is_empty() => State::Content,
            _ => State::Start,
        };
        ToolCallParser {
            format,
            tools,
            state,
            buf: String::new(),
            pending: String::new(),
            bare: false,
            bare_run: false,
            called: false,
        }
    }

    /// Feeds more output; returns the content that can be shown now and any completed calls.
    pub fn push(&mut self, text: &str) -> ToolParse {
        self.buf.push_str(text);
        let mut out = ToolParse::default();
        self.drive(&mut out, false);
        out
    }

    /// End of output: whatever is still held back is content, except an unfinished call (cut by
    /// the token limit) that a marker opened or that follows other calls: that is dropped, as
    /// Ollama does, so no half call reaches the conversation's history as text. A reply that is
    /// only the start of a bare JSON call stays content (it may be a JSON answer).
    pub fn finish(&mut self) -> ToolParse {
        let mut out = ToolParse::default();
        self.drive(&mut out, true);
        out.content.push_str(&std::mem::take(&mut self.pending));
        out.content.push_str(&std::mem::take(&mut self.buf));
        self.state = State::Passthrough;
        out
    }

    fn drive(&mut self, out: &mut ToolParse, eof: bool) {
        loop {
            match self.state {
                State::Passthrough => {
                    out.content.push_str(&std::mem::take(&mut self.pending));
                    out.content.push_str(&std::mem::take(&mut self.buf));
                    return;
                }
                State::Start => {
                    let trimmed = self.buf.trim_start();
                    if trimmed.is_empty() && !eof {
                        return;
                    }
                    if matches!(self.format, ToolCallFormat::Tagged { .. }) {
                        // Only an object: a marker may itself start with `[`.
                        self.bare = trimmed.starts_with('{');
                        self.state = if self.bare { State::Call } else { State::Content };
                        continue;
                    }
                    if trimmed.is_empty() {
                        return;
                    }
                    if let Some(rest) = trimmed.strip_prefix(PYTHON_TAG) {
                        let consumed = self.buf.len() - rest.len();
                        self.pending.push_str(&self.buf[..consumed]);
                        self.buf.drain(..consumed);
                        self.state = State::Call;
                        continue;
                    }
                    if PYTHON_TAG.starts_with(trimmed) && !eof {
                        return;
                    }
                    if trimmed.starts_with(['{', '[']) {
                        self.state = State::Call;
                    } else {
                        self.state = State::Passthrough;
                    }
                }
                State::Content => {
                    let ToolCallFormat::Tagged { open, .. } = &self.format else {
                        self.state = State::Passthrough;
                        continue;
                    };
                    if let Some(i) = self.buf.find(open.as_str()) {
                        out.content.push_str(&self.buf[..i]);
                        self.buf.drain(..i + open.len());
                        self.state = State::Call;
                        continue;
                    }
                    let keep = if eof { 0 } else { partial_suffix(&self.buf, open) };
                    let emit = self.buf.len() - keep;
                    out.content.push_str(&self.buf[..emit]);
                    self.buf.drain(..emit);
                    return;
                }
                State::Call => {
                    let ws = self.buf.len() - self.buf.trim_start().len();
                    let body = &self.buf[ws..];
                    if body.is_empty() {
                        return;
                    }
                    if !body.starts_with(['{', '[']) {
                        self.not_a_call(out);
                        continue;
                    }
                    // Bare JSON that plainly is no call of the request's tools streams at once
                    // rather than being held back until it is complete.
                    if self.bare_attempt() && !may_be_call(body, &self.tools) {
                        self.not_a_call(out);
                        continue;
                    }
                    let Some(end) = json_value_end(body) else {
                        if !eof {
                            return;
                        }
                        // Not bare: a marker opened it.
                        if !self.bare_attempt() || self.called {
                            self.buf.clear();
                            self.pending.clear();
                            self.state = State::Passthrough;
                            return;
                        }
                        self.not_a_call(out);
                        continue;
                    };
                    let raw = &body[..end];
                    match serde_json::from_str::<Value>(raw)
                        .ok()
                        .and_then(|v| self.calls_from(&v))
                    {
                        Some(calls) => {
                            out.calls.extend(calls);
                            self.called = true;
                            self.bare_run |= std::mem::take(&mut self.bare);
                            self.pending.clear();
                            self.buf.drain(..ws + end);
                            self.state = State::AfterCall;
                        }
                        None => self.not_a_call(out),
                    }
                }
                State::AfterCall => {
                    let trimmed = self
                        .buf
                        .trim_start_matches(|c: char| c.is_whitespace() || c == ';');
                    let skipped = self.buf.len() - trimmed.len();
                    if trimmed.is_empty() {
                        if eof {
                            self.buf.clear();
                        }
                        return;
                    }
                    match &self.format {
                        ToolCallFormat::Tagged { open, close } => {
                            if let Some(c) = close {
                                if trimmed.starts_with(c.as_str()) {
                                    self.buf.drain(..skipped + c.len());
                                    continue;
                                }
                                if c.starts_with(trimmed) && !eof {
                                    return;
                                }
                            }
                            if trimmed.starts_with(open.as_str()) {
                                self.buf.drain(..skipped + open.len());
                                self.state = State::Call;
                                continue;
                            }
                            if open.starts_with(trimmed) && !eof {
                                return;
                            }
                            // A Mistral array may be followed by more calls without a marker.
                            if trimmed.starts_with('{') && close.is_none() {
                                self.buf.drain(..skipped);
                                self.state = State::Call;
                                continue;
                            }
                            // A bare call by more bare calls (what is not one stays content,
                            // the whitespace before it included).
                            if trimmed.starts_with('{') && self.bare_run {
                                self.bare = true;
                                self.state = State::Call;
                                continue;
                            }
                            // Plain text follows: it keeps its leading whitespace.
                            self.state = State::Content;
                        }
                        ToolCallFormat::Json => {
                            if let Some(rest) = trimmed.strip_prefix(PYTHON_TAG) {
                                let n = self.buf.len() - rest.len();
                                self.buf.drain(..n);
                                self.state = State::Call;
                                continue;
                            }
                            if PYTHON_TAG.starts_with(trimmed) && !eof {
                                return;
                            }
                            if trimmed.starts_with(['{', '[']) {
                                self.buf.drain(..skipped);
                                self.state = State::Call;
                            } else {
                                self.buf.drain(..skipped);
                                self.state = State::Passthrough;
                            }
                        }
                    }
                }
            }
        }
    }

    /// The held text was not a call after all: give it back as content.
    fn not_a_call(&mut self, out: &mut ToolParse) {
        if std::mem::take(&mut self.bare) {
            // No marker was taken: the held text is content, searched for a marker as usual.
            self.state = State::Content;
            return;
        }
        match &self.format {
            ToolCallFormat::Tagged { open, .. } => {
                // The marker was taken from the text: it goes back, and the rest is content
                // searched for the next marker (one only begun at the end is held as usual).
                out.content.push_str(open);
                self.state = State::Content;
            }
            ToolCallFormat::Json => self.state = State::Passthrough,
        }
    }

    /// Whether the call being read is bare JSON (no marker opened it), which must name one of
    /// the request's tools.
    fn bare_attempt(&self) -> bool {
        self.bare || self.format == ToolCallFormat::Json
    }

    fn calls_from(&self, v: &Value) -> Option<Vec<ToolCall>> {
        let items: Vec<&Value> = match v {
            Value::Array(a) if !a.is_empty() => a.iter().collect(),
            Value::Object(_) => vec![v],
            _ => return None,
        };
        let calls: Option<Vec<ToolCall>> = items.into_iter().map(call_from).collect();
        let calls = calls?;
        if self.bare_attempt() && !calls.iter().all(|c| self.tools.contains(&c.name)) {
            return None;
        }
        Some(calls)
    }
}

fn call_from(v: &Value) -> Option<ToolCall> {
    let obj = v.as_object()?;
    let inner = match obj.get("function") {
        Some(Value::Object(f)) if f.contains_key("name") => f,
        _ => obj,
    };
    let name = inner.get("name")?.as_str()?.to_string();
    if name.is_empty() {
        return None;
    }
    let args = inner.get("arguments").or_else(|| inner.get("parameters"));
    let arguments = match args {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => m,
            _ => return None,
        },
        Some(_) => return None,
    };
    let id = obj.get("id").and_then(Value::as_str).map(str::to_string);
    Some(ToolCall { id, name, arguments })
}

/// Whether `body`, the start of a JSON value, may still become a call of one of `tools`: an array,
/// or an object whose first key is one a call has, and whose `name`, if that comes first and is
/// complete, names one of the tools.
fn may_be_call(body: &str, tools: &[String]) -> bool {
    let Some(rest) = body.strip_prefix('{') else {
        return true;
    };
    let Some((key, rest)) = json_string_start(rest.trim_start()) else {
        return true;
    };
    if !["name", "function", "arguments", "parameters", "id", "type"].contains(&key.as_str()) {
        return false;
    }
    let Some(rest) = rest.trim_start().strip_prefix(':') else {
        return true;
    };
    match json_string_start(rest.trim_start()) {
        Some((name, _)) if key == "name" => tools.contains(&name),
        _ => true,
    }
}

/// The JSON string at the start of `s` and the text after it, once the string is complete.
fn json_string_start(s: &str) -> Option<(String, &str)> {
    let body = s.strip_prefix('"')?;
    let mut esc = false;
    let end = body.bytes().position(|b| {
        let closes = !esc && b == b'"';
        esc = !esc && b == b'\\';
        closes
    })?;
    let text = serde_json::from_str(&s[..end + 2]).ok()?;
    Some((text, &body[end + 1..]))
}

/// The length of the longest suffix of `s` that is a proper prefix of `tag`.
pub(crate) fn partial_suffix(s: &str, tag: &str) -> usize {
    let max = tag.len().saturating_sub(1).min(s.len());
    (1..=max)
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && tag.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

/// Where the JSON object or array at the start of `s` ends (exclusive), or `None` if it is not
/// complete yet. Only brackets outside strings count.
fn json_value_end(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    let mut in_str = false;
    let mut esc = false;
    for (i, b) in s.bytes().enumerate() {
        if in_str {
            match (esc, b) {
                (true, _) => esc = false,
                (false, b'\\') => esc = true,
                (false, b'"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::kernels::tests::Rng;

    /// Up to `max` random `pieces` joined: model output for the randomized parser tests.
    pub(crate) fn random_text(rng: &mut Rng, pieces: &[&str], max: usize) -> String {
        let n = 1 + rng.next() as usize % max;
        (0..n)
            .map(|_| pieces[rng.next() as usize % pieces.len()])
            .collect()
    }

    fn tools() -> Vec<String> {
        vec!["get_weather".into(), "get_time".into()]
    }

    #[test]
    fn bare_calls_after_a_bare_call_are_calls_too() {
        let hermes = || ToolCallFormat::from_tag("<tool_call>");
        let text = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n\
            {\"name\": \"get_time\", \"arguments\": {}}\n{\"name\": \"get_w";
        for n in [1, 3, 100] {
            let r = run(hermes(), text, n);
            let names: Vec<&str> = r.calls.iter().map(|c| c.name.as_str()).collect();
            assert_eq!(names, ["get_weather", "get_time"], "chunk {n}");
            // The unfinished third (cut by the token limit) is dropped, not left as content.
            assert_eq!(r.content, "", "chunk {n}");
            // JSON naming no tool of the request after a call is content.
            let r = run(hermes(), "{\"name\": \"get_time\"}\n{\"a\": 1} done", n);
            assert_eq!(r.calls.len(), 1, "chunk {n}");
            assert_eq!(r.content, "\n{\"a\": 1} done", "chunk {n}");
        }
        // After a marked call, bare JSON is still content (only a bare start opens a bare run).
        let r = run(
            hermes(),
            "<tool_call>{\"name\": \"get_time\"}</tool_call>\n{\"name\": \"get_weather\"}",
            5,
        );
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.content, "\n{\"name\": \"get_weather\"}");
    }

    /// Output cut by the token limit inside a call: a marked call, or one after other calls, is
    /// dropped (as Ollama drops it); a reply that is only the start of bare JSON stays content.
    #[test]
    fn unfinished_calls_at_the_end() {
        let llama = || ToolCallFormat::from_tag("{");
        for n in [1, 4, 100] {
            let r = run(qwen(), "Sure. <tool_call>\n{\"name\": \"get_wea", n);
            assert_eq!((r.content.as_str(), r.calls.len()), ("Sure. ", 0), "chunk {n}");
            let text = "<tool_call>{\"name\": \"get_time\"}</tool_call>\n<tool_call>{\"na";
            let r = run(qwen(), text, n);
            assert_eq!((r.content.as_str(), r.calls.len()), ("", 1), "chunk {n}");
            let r = run(llama(), "{\"name\": \"get_time\"}; {\"name\": \"get_w", n);
            assert_eq!((r.content.as_str(), r.calls.len()), ("", 1), "chunk {n}");
            let r = run(llama(), "{\"name\": \"get_w", n);
            assert_eq!(
                (r.content.as_str(), r.calls.len()),
                ("{\"name\": \"get_w", 0),
                "chunk {n}"
            );
            let r = run(qwen(), "{\"name\": \"get_w", n);
            assert_eq!(
                (r.content.as_str(), r.calls.len()),
                ("{\"name\": \"get_w", 0),
                "chunk {n}"
            );
        }
    }

    #[test]
    fn tagged_format_takes_a_bare_call_at_the_start() {
        let hermes = || ToolCallFormat::from_tag("<tool_call>");
        for n in [1, 3, 100] {
            let r = run(
                hermes(),
                " {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
                n,
            );
            assert_eq!(r.calls.len(), 1, "chunk {n}: {r:?}");
            assert_eq!(r.calls[0].name, "get_weather");
            assert_eq!(r.calls[0].arguments["city"], "Paris");
            assert_eq!(r.content.trim(), "");
            // JSON that names no tool of the request stays content, whole.
            let text = "{\"name\": \"other\", \"arguments\": {}} and <tool_call>{\"name\": \"get_time\"}</tool_call>";
            let r = run(hermes(), text, n);
            assert_eq!(
                r.content, "{\"name\": \"other\", \"arguments\": {}} and ",
                "chunk {n}"
            );
            assert_eq!(r.calls.len(), 1);
            assert_eq!(r.calls[0].name, "get_time");
            // Plain text and the marker still work as before.
            let r = run(
                hermes(),
                "Sure. <tool_call>{\"name\": \"get_time\"}</tool_call>",
                n,
            );
            assert_eq!(r.content, "Sure. ");
            assert_eq!(r.calls[0].name, "get_time");
        }
        // A JSON answer with no tools in the request is never held or taken.
        let mut p = ToolCallParser::new(hermes(), Vec::new());
        assert_eq!(
            p.push("{\"name\": \"get_weather\"").content,
            "{\"name\": \"get_weather\""
        );
    }

    /// Random output made of the pieces calls are made of, fed whole and in random chunks: every
    /// format gives the same content and calls however the output arrives (streamed tokens or
    /// one piece), and the content never loses text that is not part of a call.
    #[test]
    fn chunking_never_changes_the_result() {
        const PIECES: [&str; 22] = [
            "<tool_call>",
            "</tool_call>",
            "[TOOL_CALLS]",
            "<|python_tag|>",
            "{",
            "}",
            "[",
            "]",
            "\"name\"",
            "\"arguments\"",
            "\"parameters\"",
            "\"function\"",
            "\"get_time\"",
            "\"other\"",
            ": ",
            ", ",
            "\"",
            "\\",
            "\n",
            " ",
            "x",
            "; ",
        ];
        let formats = [
            qwen(),
            ToolCallFormat::from_tag("[TOOL_CALLS] ["),
            ToolCallFormat::from_tag("{"),
        ];
        let mut rng = Rng::new(5);
        for case in 0..3000 {
            let text = random_text(&mut rng, &PIECES, 24);
            for format in &formats {
                let whole = run(format.clone(), &text, text.len());
                for _ in 0..3 {
                    let got = run_cut(format.clone(), &text, &mut || 1 + rng.next() as usize % 6);
                    assert_eq!(got, whole, "case {case}, {format:?}: {text:?}");
                }
            }
        }
    }

    /// Feeds the output in chunks of `n` bytes (on char boundaries) and collects everything.
    fn run(format: ToolCallFormat, text: &str, n: usize) -> ToolParse {
        run_cut(format, text, &mut || n)
    }

    /// As [`run`], with each chunk's size from `size` (at least 1).
    fn run_cut(format: ToolCallFormat, text: &str, size: &mut dyn FnMut() -> usize) -> ToolParse {
        let mut p = ToolCallParser::new(format, tools());
        let mut all = ToolParse::default();
        let mut rest = text;
        while !rest.is_empty() {
            let mut k = size().min(rest.len());
            while !rest.is_char_boundary(k) {
                k += 1;
            }
            let r = p.push(&rest[..k]);
            all.content.push_str(&r.content);
            all.calls.extend(r.calls);
            rest = &rest[k..];
        }
        let r = p.finish();
        all.content.push_str(&r.content);
        all.calls.extend(r.calls);
        all
    }

    fn qwen() -> ToolCallFormat {
        ToolCallFormat::from_tag("<tool_call>")
    }

    #[test]
    fn formats_from_tags_and_templates() {
        assert_eq!(
            qwen(),
            ToolCallFormat::Tagged {
                open: "<tool_call>".into(),
                close: Some("</tool_call>".into())
            }
        );
        assert_eq!(
            ToolCallFormat::from_tag("[TOOL_CALLS] ["),
            ToolCallFormat::Tagged {
                open: "[TOOL_CALLS]".into(),
                close: None
            }
        );
        assert_eq!(ToolCallFormat::from_tag("{"), ToolCallFormat::Json);
        assert_eq!(
            ToolCallFormat::infer_from_chat_template("{{ '[TOOL_CALLS]' }}"),
            ToolCallFormat::from_tag("[TOOL_CALLS]")
        );
    }

    #[test]
    fn hermes_calls_with_text_before_at_any_chunking() {
        let text = "Let me check. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"n\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}\n</tool_call>";
        for n in [1, 2, 3, 7, 1000] {
            let r = run(qwen(), text, n);
            assert_eq!(r.content, "Let me check. ", "chunk {n}");
            assert_eq!(r.calls.len(), 2, "chunk {n}");
            assert_eq!(r.calls[0].name, "get_weather");
            assert_eq!(r.calls[0].arguments["location"], "Paris");
            assert_eq!(r.calls[1].arguments["tz"], "CET");
        }
    }

    /// A JSON answer streams as soon as it plainly is no call: its first key is not one a call
    /// has, or its leading `name` names none of the request's tools.
    #[test]
    fn json_answers_stream_once_they_are_no_call() {
        for format in [qwen(), ToolCallFormat::from_tag("{")] {
            let mut p = ToolCallParser::new(format.clone(), tools());
            assert_eq!(p.push("{\"na").content, "");
            assert_eq!(p.push("me\": \"get_w").content, "");
            assert_eq!(
                p.push("\\\"ho\", \"age\"").content,
                "{\"name\": \"get_w\\\"ho\", \"age\""
            );
            assert_eq!(p.push(": 3}").content, ": 3}");
            let mut p = ToolCallParser::new(format.clone(), tools());
            assert_eq!(p.push(" {\"colo").content, "");
            assert_eq!(p.push("r\": ").content, " {\"color\": ");
            // A call's own keys, and a tool's name, are held until the JSON is complete.
            let mut p = ToolCallParser::new(format, tools());
            assert_eq!(p.push("{\"name\": \"get_time\", \"x\": ").content, "");
            assert_eq!(p.push("1}").calls.len(), 1);
        }
    }

    #[test]
    fn content_streams_before_the_call_is_complete() {
        let mut p = ToolCallParser::new(qwen(), tools());
        assert_eq!(p.push("Sure <tool").content, "Sure ");
        let r = p.push("_call>{\"name\": \"get_time\", \"argu");
        assert!(r.content.is_empty() && r.calls.is_empty());
        let r = p.push("ments\": {}}</tool_call> done");
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.content, " done");
    }

    #[test]
    fn mistral_array() {
        let f = ToolCallFormat::from_tag("[TOOL_CALLS] [");
        let text = "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"UTC\"}, \"id\": \"abc123DEF\"}]";
        for n in [1, 5, 1000] {
            let r = run(f.clone(), text, n);
            assert_eq!(r.content, "");
            assert_eq!(r.calls.len(), 2);
            assert_eq!(r.calls[1].id.as_deref(), Some("abc123DEF"));
        }
    }

    #[test]
    fn llama_json_calls_and_non_calls() {
        let r = run(
            ToolCallFormat::Json,
            "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}",
            3,
        );
        assert_eq!(r.calls.len(), 1);
        assert_eq!(r.content, "");
        let r = run(ToolCallFormat::Json, "<|python_tag|>{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": {}}", 4);
        assert_eq!(
            r.calls.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["get_time", "get_weather"]
        );
        // JSON that is not a call of a known tool is content, untouched.
        let text = "{\"name\": \"search\", \"parameters\": {\"q\": 1}}";
        let r = run(ToolCallFormat::Json, text, 2);
        assert!(r.calls.is_empty());
        assert_eq!(r.content, text);
        let r = run(ToolCallFormat::Json, "  The answer is {x}.", 2);
        assert_eq!(r.content, "  The answer is {x}.");
    }

    #[test]
    fn broken_calls_come_back_as_content() {
        let r = run(qwen(), "a <tool_call>not json</tool_call> b", 3);
        assert!(r.calls.is_empty());
        assert_eq!(r.content, "a <tool_call>not json</tool_call> b");
        let r = run(qwen(), "x <tool_ca", 2);
        assert_eq!(r.content, "x <tool_ca");
    }
}
