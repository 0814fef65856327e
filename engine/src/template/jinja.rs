//! GGUF chat templates (`tokenizer.chat_template`): Jinja, rendered with minijinja.
//!
//! The goal is the prompt Hugging Face's `apply_chat_template` makes, byte for byte, because that
//! is what the models were trained on. So the environment copies HF's: `trim_blocks` and
//! `lstrip_blocks` on, loop controls, a `tojson` that is Python's `json.dumps`, `raise_exception`,
//! `strftime_now`, Python's string and dict methods (`.strip()`, `.split()`, `.items()`…) through
//! minijinja-contrib's pycompat, and values printed the way Python's `str()` prints them.
//!
//! Messages are given to templates in the OpenAI shape llama.cpp uses (`role`, `content`,
//! `reasoning_content`, `tool_calls[].function.{name, arguments}`, `tool_call_id`, `name`), with
//! arguments as objects. Templates that ignore a system message get it merged into the first
//! user message, as llama.cpp does.

use std::time::SystemTime;

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, ErrorKind, State};

use super::clock::DateTime;
use super::pyjson::{self, DumpOptions};
use crate::chat::{Message, Think, Tool};
use crate::{Error, Result};

/// Upper bound on template work (minijinja "fuel" units, roughly instructions): a template from a
/// downloaded file must not be able to hang the server. Real templates use a few thousand.
const FUEL: u64 = 5_000_000;

const TEMPLATE_NAME: &str = "chat_template";

/// Bound on a rendered prompt (fuel bounds the steps, not the size of what each step writes:
/// `'x' * 100000000` in a loop must not exhaust memory).
const MAX_OUTPUT: usize = 64 << 20;

/// The rendering's output, refusing to grow past [`MAX_OUTPUT`].
struct CappedOutput {
    buf: Vec<u8>,
    overflowed: bool,
}

impl std::io::Write for CappedOutput {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > MAX_OUTPUT {
            self.overflowed = true;
            return Err(std::io::Error::other("the rendered prompt is too large"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A compiled chat template.
pub struct JinjaTemplate {
    env: Environment<'static>,
    supports_system_role: bool,
}

impl std::fmt::Debug for JinjaTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JinjaTemplate")
            .field("supports_system_role", &self.supports_system_role)
            .finish_non_exhaustive()
    }
}

/// Everything a chat template sees.
#[derive(Debug, Clone)]
pub struct JinjaInputs<'a> {
    pub messages: &'a [Message],
    pub tools: &'a [Tool],
    pub add_generation_prompt: bool,
    /// The text of the vocabulary's BOS/EOS tokens (templates print `bos_token` themselves).
    pub bos_token: &'a str,
    pub eos_token: &'a str,
    /// `None` leaves `enable_thinking` undefined (the template's default); otherwise it is set.
    pub think: Option<&'a Think>,
    /// The clock for `strftime_now` and `date_string`.
    pub now: SystemTime,
}

impl JinjaTemplate {
    /// Compiles a template. Fails with a clear error on syntax minijinja does not accept.
    pub fn new(source: &str) -> Result<JinjaTemplate> {
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(template_error)?,
        );
        env.set_fuel(Some(FUEL));
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(|out, _state, value| {
            out.write_str(&pyjson::python_str(value))
                .map_err(|_| minijinja::Error::from(ErrorKind::WriteFailure))
        });
        env.add_filter("tojson", tojson);
        env.add_filter("indent", indent);
        // Python: None is not iterable (minijinja iterates it as empty); Undefined is.
        env.add_test("iterable", |v: &Value| {
            !v.is_none() && (v.is_undefined() || v.try_iter().is_ok())
        });
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned(TEMPLATE_NAME, strip_generation_tags(source))
            .map_err(template_error)?;
        let mut t = JinjaTemplate {
            env,
            supports_system_role: true,
        };
        t.supports_system_role = t.probe_system_role();
        Ok(t)
    }

    /// Whether the template renders a leading system message (Gemma 2, Mistral v0.1 and others
    /// drop it or refuse it).
    pub fn supports_system_role(&self) -> bool {
        self.supports_system_role
    }

    /// Renders the prompt. Errors raised by the template itself (`raise_exception`) come back as
    /// [`Error::Template`] with the template's message.
    pub fn render(&self, inputs: &JinjaInputs<'_>) -> Result<String> {
        let merged;
        let messages = if self.supports_system_role {
            inputs.messages
        } else {
            merged = merge_system_into_first_user(inputs.messages);
            &merged
        };
        self.render_raw(messages, inputs)
    }

    fn render_raw(&self, messages: &[Message], inputs: &JinjaInputs<'_>) -> Result<String> {
        let now = DateTime::from_system_time(inputs.now);
        let mut ctx: Vec<(&str, Value)> = vec![
            (
                "messages",
                Value::from(messages.iter().map(message_value).collect::<Vec<_>>()),
            ),
            (
                "tools",
                if inputs.tools.is_empty() {
                    Value::from(())
                } else {
                    Value::from(inputs.tools.iter().map(|t| json_value(&t.0)).collect::<Vec<_>>())
                },
            ),
            ("add_generation_prompt", Value::from(inputs.add_generation_prompt)),
            ("bos_token", Value::from(inputs.bos_token)),
            ("eos_token", Value::from(inputs.eos_token)),
            // llama.cpp passes today's date; Llama 3.x templates print it.
            ("date_string", Value::from(now.strftime("%d %b %Y"))),
            (
                "strftime_now",
                Value::from_function(
                    move |fmt: &str| -> std::result::Result<String, minijinja::Error> {
                        Ok(now.strftime(fmt))
                    },
                ),
            ),
        ];
        if let Some(think) = inputs.think {
            ctx.push(("enable_thinking", Value::from(think.enabled())));
            if !think.level().is_empty() {
                ctx.push(("reasoning_effort", Value::from(think.level())));
            }
        }
        let tmpl = self.env.get_template(TEMPLATE_NAME).map_err(template_error)?;
        let mut out = CappedOutput {
            buf: Vec::new(),
            overflowed: false,
        };
        let rendered = tmpl.render_captured_to(Value::from_pairs(ctx), &mut out);
        if out.overflowed {
            return Err(Error::Template("the rendered prompt is too large".into()));
        }
        rendered.map_err(template_error)?;
        String::from_utf8(out.buf).map_err(|_| Error::Template("the rendered prompt is not UTF-8".into()))
    }

    fn probe_system_role(&self) -> bool {
        const NEEDLE: &str = "<<ollamars system probe 7f3a>>";
        let msgs = [Message::new("system", NEEDLE), Message::new("user", "hello")];
        // Templates written for tool use only fail without tools: probe again with a dummy one.
        let dummy = [Tool(serde_json::json!({
            "type": "function",
            "function": {"name": "probe", "description": "probe", "parameters": {"type": "object", "properties": {}, "required": []}}
        }))];
        for tools in [&[][..], &dummy[..]] {
            let inputs = JinjaInputs {
                messages: &msgs,
                tools,
                add_generation_prompt: true,
                bos_token: "",
                eos_token: "",
                think: None,
                now: SystemTime::UNIX_EPOCH,
            };
            if let Ok(s) = self.render_raw(&msgs, &inputs) {
                return s.contains(NEEDLE);
            }
        }
        false
    }
}

/// llama.cpp's workaround for templates without a system role: prepend the system text to the
/// next message (joined by a newline), or drop it when it is alone.
fn merge_system_into_first_user(messages: &[Message]) -> Vec<Message> {
    let mut out = messages.to_vec();
    if out.first().is_some_and(|m| m.role == "system") {
        let sys = out.remove(0);
        if let Some(next) = out.first_mut() {
            next.content = format!("{}\n{}", sys.content, next.content);
        }
    }
    out
}

/// A message in the OpenAI/llama.cpp shape. Keys are present only when they carry something, so
/// templates' `'tool_calls' in message` and `is defined` tests behave as with HF.
pub(crate) fn message_value(m: &Message) -> Value {
    let mut fields: Vec<(&str, Value)> = vec![
        ("role", Value::from(m.role.as_str())),
        ("content", Value::from(m.content.as_str())),
    ];
    if !m.thinking.is_empty() {
        fields.push(("reasoning_content", Value::from(m.thinking.as_str())));
    }
    if let Some(name) = &m.tool_name {
        fields.push(("name", Value::from(name.as_str())));
    }
    if let Some(id) = &m.tool_call_id {
        fields.push(("tool_call_id", Value::from(id.as_str())));
    }
    if !m.tool_calls.is_empty() {
        let calls = m
            .tool_calls
            .iter()
            .map(|c| {
                let mut call: Vec<(&str, Value)> = Vec::new();
                if let Some(id) = &c.id {
                    call.push(("id", Value::from(id.as_str())));
                }
                call.push(("type", Value::from("function")));
                call.push((
                    "function",
                    Value::from_pairs([
                        ("name", Value::from(c.name.as_str())),
                        (
                            "arguments",
                            Value::from_pairs(c.arguments.iter().map(|(k, v)| (k.as_str(), json_value(v)))),
                        ),
                    ]),
                ));
                Value::from_pairs(call)
            })
            .collect::<Vec<_>>();
        fields.push(("tool_calls", Value::from(calls)));
    }
    Value::from_pairs(fields)
}

/// A JSON value as a template value (objects keep their key order).
pub(crate) fn json_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                Value::from(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => Value::from(a.iter().map(json_value).collect::<Vec<_>>()),
        serde_json::Value::Object(o) => Value::from_pairs(o.iter().map(|(k, v)| (k.as_str(), json_value(v)))),
    }
}

/// HF's `tojson`: `json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
/// sort_keys=sort_keys)`.
fn tojson(value: Value, kwargs: Kwargs) -> std::result::Result<Value, minijinja::Error> {
    let mut opts = DumpOptions::default();
    if let Some(indent) = kwargs.get::<Option<Value>>("indent")? {
        opts.indent = match indent.as_str() {
            Some(s) => Some(s.to_string()),
            None => indent.as_usize().map(|n| " ".repeat(n.min(64))),
        };
    }
    if let Some(seps) = kwargs.get::<Option<Value>>("separators")? {
        if !seps.is_none() {
            let parts: Vec<Value> = seps.try_iter()?.collect();
            if parts.len() != 2 {
                return Err(minijinja::Error::new(
                    ErrorKind::InvalidOperation,
                    "tojson: separators must be a pair of strings",
                ));
            }
            opts.item_separator = parts[0].as_str().map(str::to_string);
            opts.key_separator = parts[1].as_str().map(str::to_string);
        }
    }
    opts.sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    // Python's default for HF's filter is ensure_ascii=False; ours always keeps UTF-8.
    let _ = kwargs.get::<Option<bool>>("ensure_ascii")?;
    kwargs.assert_all_used()?;
    Ok(Value::from_safe_string(pyjson::dumps(&value, &opts)))
}

/// jinja2's `indent(s, width=4, first=False, blank=False)`, including its handling of a trailing
/// newline (kept) and of blank lines (not indented unless `blank`).
fn indent(s: String, width: Option<Value>, kwargs: Kwargs) -> std::result::Result<String, minijinja::Error> {
    let pad = match &width {
        Some(w) if w.as_str().is_some() => w.as_str().unwrap_or_default().to_string(),
        Some(w) => " ".repeat(w.as_usize().unwrap_or(4).min(256)),
        None => "    ".to_string(),
    };
    let first = kwargs.get::<Option<bool>>("first")?.unwrap_or(false);
    let blank = kwargs.get::<Option<bool>>("blank")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    let text = format!("{s}\n");
    // Python's splitlines on text that ends with a newline: no empty last element.
    let lines: Vec<&str> = text.strip_suffix('\n').unwrap_or(&text).split('\n').collect();
    let mut rv = if blank {
        lines.join(&format!("\n{pad}"))
    } else {
        let mut rv = lines[0].to_string();
        for line in &lines[1..] {
            rv.push('\n');
            if !line.is_empty() {
                rv.push_str(&pad);
            }
            rv.push_str(line);
        }
        rv
    };
    if first {
        rv.insert_str(0, &pad);
    }
    Ok(rv)
}

fn raise_exception(_state: &State, msg: String) -> std::result::Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, msg))
}

fn template_error(e: minijinja::Error) -> Error {
    // The detail (a template's own raise_exception text, or the failing expression) is what a
    // user can act on; the kind alone ("invalid operation") is not.
    match e.detail() {
        Some(detail) => Error::Template(detail.to_string()),
        None => Error::Template(e.to_string()),
    }
}

/// Removes HF's `{% generation %}` / `{% endgeneration %}` markers (an HF-only extension that
/// marks assistant text for training masks; it renders its body unchanged).
fn strip_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let after = &rest[start + 2..];
        let inner_start = after.strip_prefix(['-', '+']).unwrap_or(after).trim_start();
        let word = ["endgeneration", "generation"].into_iter().find(|w| {
            inner_start.starts_with(w) && {
                let tail = inner_start[w.len()..].trim_start();
                tail.starts_with("%}") || tail.starts_with("-%}") || tail.starts_with("+%}")
            }
        });
        match word.and_then(|_| after.find("%}")) {
            Some(end) => {
                out.push_str(&rest[..start]);
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[..start + 2]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(src: &str, msgs: &[Message]) -> Result<String> {
        let t = JinjaTemplate::new(src)?;
        t.render(&JinjaInputs {
            messages: msgs,
            tools: &[],
            add_generation_prompt: true,
            bos_token: "<s>",
            eos_token: "</s>",
            think: None,
            now: SystemTime::UNIX_EPOCH,
        })
    }

    #[test]
    fn python_flavoured_rendering() {
        let msgs = [Message::new("user", "  Hi there  ")];
        let out = render(
            "{{ bos_token }}{% for m in messages %}{{ m.content.strip() | upper }}|{{ m['role'].startswith('us') }}|{{ none }}|{{ [1, 'a'] }}{% endfor %}",
            &msgs,
        )
        .unwrap();
        assert_eq!(out, "<s>HI THERE|True|None|[1, 'a']");
        let out = render(
            "{{ {'b': [1, 2.0], 'a': 'x'} | tojson }}|{{ {'b': 1} | tojson(indent=2) }}",
            &msgs,
        )
        .unwrap();
        assert_eq!(out, "{\"b\": [1, 2.0], \"a\": \"x\"}|{\n  \"b\": 1\n}");
        let out = render("{{ strftime_now('%d %b %Y') }} {{ date_string }}", &msgs).unwrap();
        assert_eq!(out, "01 Jan 1970 01 Jan 1970");
    }

    #[test]
    fn indent_and_iterable_behave_like_jinja2() {
        let out = render("{{ '{\\n' | indent(4, first=true) }}|{{ 'a\\n\\nb' | indent(2) }}|{{ none is iterable }}{{ [] is iterable }}{{ 'x' is iterable }}{{ nothing is iterable }}", &[]).unwrap();
        assert_eq!(out, "    {\n|a\n\n  b|FalseTrueTrueTrue");
    }

    #[test]
    fn raise_exception_reports_the_templates_message() {
        let err = render("{{ raise_exception('roles must alternate') }}", &[]).unwrap_err();
        assert!(err.to_string().contains("roles must alternate"), "{err}");
    }

    #[test]
    fn trim_and_lstrip_blocks_like_hf() {
        let out = render(
            "{% for m in messages %}\n    {% if true %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}\n",
            &[Message::new("user", "a")],
        )
        .unwrap();
        assert_eq!(out, "a\n");
    }

    #[test]
    fn system_role_is_merged_when_the_template_ignores_it() {
        let src = "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}[{{ m.role }}]{{ m.content }}{% endfor %}";
        let t = JinjaTemplate::new(src).unwrap();
        assert!(!t.supports_system_role());
        let out = render(src, &[Message::new("system", "S"), Message::new("user", "U")]).unwrap();
        assert_eq!(out, "[user]S\nU");
        assert!(
            JinjaTemplate::new("{% for m in messages %}{{ m.content }}{% endfor %}")
                .unwrap()
                .supports_system_role()
        );
    }

    #[test]
    fn generation_markers_are_ignored() {
        assert_eq!(
            strip_generation_tags("a{% generation %}b{%- endgeneration -%}c{% if x %}"),
            "abc{% if x %}"
        );
    }

    #[test]
    fn runaway_templates_stop() {
        let err = render(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            &[],
        )
        .unwrap_err();
        assert!(matches!(err, Error::Template(_)));
    }

    #[test]
    fn hostile_templates_error_instead_of_crashing() {
        let deep = format!(
            "{}x{}",
            "{% if true %}".repeat(50_000),
            "{% endif %}".repeat(50_000)
        );
        assert!(JinjaTemplate::new(&deep).is_err());
        let deep = format!("{{{{ {}1{} }}}}", "(".repeat(50_000), ")".repeat(50_000));
        assert!(JinjaTemplate::new(&deep).is_err());
        let recursive = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
        assert!(render(recursive, &[]).is_err());
        let huge = "{% for i in range(1000) %}{{ 'x' * 1000000 }}{% endfor %}";
        let err = render(huge, &[]).unwrap_err().to_string();
        assert!(err.contains("too large"), "{err}");
    }

    #[test]
    fn syntax_errors_are_template_errors() {
        assert!(matches!(JinjaTemplate::new("{% if %}"), Err(Error::Template(_))));
    }
}
