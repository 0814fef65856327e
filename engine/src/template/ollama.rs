//! Ollama's Modelfile TEMPLATE: a Go template plus Ollama's rules for running it
//! (`template/template.go` in Ollama).
//!
//! - A template that mentions `.Messages` is run once with the whole conversation: system
//!   messages joined into `.System`, consecutive messages of one role merged (tool results
//!   excepted), `.Tools`, `.Think`, `.ThinkLevel`, `.IsThinkSet`.
//! - Otherwise it is a legacy template, run once per turn with `.System`, `.Prompt`,
//!   `.Response`; the last turn is cut right after `{{ .Response }}` so generation continues there.
//!   A template naming neither `.Messages` nor `.Response` gets `{{ .Response }}` appended.
//! - With both a prompt and a suffix (fill-in-the-middle) it runs once with `.Prompt`/`.Suffix`.
//!
//! The data has the shapes Ollama's templates expect: tool-call arguments and tool schemas print
//! as JSON (Go's encoding: sorted keys, `<` as `\u003c`), `json`, `currentDate`,
//! `yesterdayDate` and `toTypeScriptType` are available. One deliberate difference from
//! Ollama's current code: `{{ .Function }}` of a tool prints the function as JSON (what Qwen-style
//! templates expect and what Ollama did before its template types lost that method).

use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, SystemTime};

use serde_json::Value as Json;

use super::clock::DateTime;
use super::gotmpl::value::{go_json_string, List, Map, Struct};
use super::gotmpl::{Arg, Func, GoTemplate, Node, Pipe, Value};
use crate::chat::{Message, Think, Tool};
use crate::{Error, Result};

/// A parsed Modelfile TEMPLATE.
#[derive(Debug, Clone)]
pub struct OllamaTemplate {
    tmpl: GoTemplate,
    vars: Vec<String>,
}

/// What a template is run with.
#[derive(Debug, Clone)]
pub struct OllamaInputs<'a> {
    pub messages: &'a [Message],
    pub tools: &'a [Tool],
    /// `/api/generate`'s prompt and suffix; both non-empty selects fill-in-the-middle.
    pub prompt: &'a str,
    pub suffix: &'a str,
    pub think: Option<&'a Think>,
    pub now: SystemTime,
}

impl OllamaTemplate {
    pub fn parse(source: &str) -> Result<OllamaTemplate> {
        // Ollama normalizes line endings of its own templates; a Modelfile's text is taken as is.
        let mut tmpl = GoTemplate::parse(source)?;
        tmpl.check_functions(FUNCS)?;
        let vars = collect_vars(&tmpl)?;
        if !vars.iter().any(|v| v == "messages" || v == "response") {
            tmpl.root_mut().push(response_action());
        }
        let vars = collect_vars(&tmpl)?;
        Ok(OllamaTemplate { tmpl, vars })
    }

    /// The identifiers the template mentions, lower-cased and sorted (Ollama's `Vars`).
    pub fn vars(&self) -> &[String] {
        &self.vars
    }

    fn has_var(&self, v: &str) -> bool {
        self.vars.iter().any(|x| x == v)
    }

    /// Ollama's template capabilities: `tools` (mentions `.Tools`), `insert` (`.Suffix`),
    /// `thinking` (thinking tags can be inferred).
    pub fn supports_tools(&self) -> bool {
        self.has_var("tools")
    }

    pub fn supports_insert(&self) -> bool {
        self.has_var("suffix")
    }

    pub fn supports_thinking(&self) -> bool {
        self.thinking_tags().is_some()
    }

    pub fn execute(&self, inputs: &OllamaInputs<'_>) -> Result<String> {
        let funcs = funcs(inputs.now);
        let think = inputs.think.is_some_and(Think::enabled);
        let think_level = match inputs.think {
            Some(Think::On) => "medium",
            Some(Think::Level(l)) => l.as_str(),
            _ => "",
        };
        let think_set = inputs.think.is_some();
        let common = |m: &mut Vec<(String, Value)>| {
            m.push(("Think".into(), Value::Bool(think)));
            m.push(("ThinkLevel".into(), Value::str(think_level)));
            m.push(("IsThinkSet".into(), Value::Bool(think_set)));
        };
        if !inputs.prompt.is_empty() && !inputs.suffix.is_empty() {
            let mut m = vec![
                ("Prompt".into(), Value::str(inputs.prompt)),
                ("Suffix".into(), Value::str(inputs.suffix)),
                ("Response".into(), Value::str("")),
            ];
            common(&mut m);
            return self.tmpl.execute(&Value::map(m), &funcs);
        }
        let (system, collated) = collate(inputs.messages);
        if self.has_var("messages") {
            let mut m = vec![
                ("System".into(), Value::str(system)),
                (
                    "Messages".into(),
                    Value::list(collated.iter().map(message_value).collect()),
                ),
                ("Tools".into(), tools_value(inputs.tools)),
                ("Response".into(), Value::str("")),
            ];
            common(&mut m);
            return self.tmpl.execute(&Value::map(m), &funcs);
        }

        // Legacy: one run per completed turn, then the last turn cut after {{ .Response }}.
        let mut out = String::new();
        let (mut system, mut prompt, mut response) = (String::new(), String::new(), String::new());
        let turn = |system: &str, prompt: &str, response: &str| {
            let mut m = vec![
                ("System".into(), Value::str(system)),
                ("Prompt".into(), Value::str(prompt)),
                ("Response".into(), Value::str(response)),
            ];
            common(&mut m);
            Value::map(m)
        };
        for m in &collated {
            match m.role.as_str() {
                "system" => {
                    if !prompt.is_empty() || !response.is_empty() {
                        out.push_str(&self.tmpl.execute(&turn(&system, &prompt, &response), &funcs)?);
                        prompt.clear();
                        response.clear();
                    }
                    system = m.content.clone();
                }
                "user" => {
                    if !response.is_empty() {
                        out.push_str(&self.tmpl.execute(&turn(&system, &prompt, &response), &funcs)?);
                        system.clear();
                        response.clear();
                    }
                    prompt = m.content.clone();
                }
                "assistant" => response = m.content.clone(),
                _ => {}
            }
        }
        let mut cut = false;
        let nodes = cut_after_response(&self.tmpl.tree().root, &mut cut);
        out.push_str(
            &self
                .tmpl
                .execute_nodes(&nodes, &turn(&system, &prompt, &response), &funcs)?,
        );
        Ok(out)
    }

    /// The text a tool call starts with, inferred from the template the way Ollama does: the
    /// first text inside the `{{ if .ToolCalls }}` block, up to any `{`; `{` when there is none
    /// (calls are bare JSON objects).
    pub fn tool_call_tag(&self) -> String {
        let tag = find_tool_calls_if(&self.tmpl.tree().root)
            .and_then(first_text)
            .map(|t| t.replace("\r\n", "\n"))
            .unwrap_or_default();
        let tag = tag.split('{').next().unwrap_or("").trim().to_string();
        if tag.is_empty() {
            "{".into()
        } else {
            tag
        }
    }

    /// The tags around `{{ .Thinking }}` inside the range over `.Messages` (Ollama's
    /// `thinking.InferTags`), if the template has them.
    pub fn thinking_tags(&self) -> Option<(String, String)> {
        let mut open = String::new();
        let mut close = String::new();
        infer_thinking(&self.tmpl.tree().root, &mut Vec::new(), &mut open, &mut close);
        (!open.is_empty() && !close.is_empty()).then_some((open, close))
    }
}

fn response_action() -> Node {
    Node::Action(Pipe {
        cmds: vec![super::gotmpl::Cmd {
            args: vec![Arg::Field(vec!["Response".into()])],
        }],
        ..Pipe::default()
    })
}

// ---------------------------------------------------------------------------------------------
// Tree walks

fn collect_vars(t: &GoTemplate) -> Result<Vec<String>> {
    let mut names = Vec::new();
    let tree = t.tree();
    vars_in(&tree.root, &mut names)?;
    for body in tree.defines.values() {
        vars_in(body, &mut names)?;
    }
    let mut v: Vec<String> = names.into_iter().map(|s| s.to_lowercase()).collect();
    v.sort();
    v.dedup();
    Ok(v)
}

fn vars_in(nodes: &[Node], out: &mut Vec<String>) -> Result<()> {
    for n in nodes {
        match n {
            Node::Action(p) => vars_in_pipe(p, out),
            Node::If(b) | Node::Range(b) | Node::With(b) => {
                vars_in_pipe(&b.pipe, out);
                vars_in(&b.list, out)?;
                if let Some(e) = &b.else_list {
                    vars_in(e, out)?;
                }
            }
            Node::Template { pipe, .. } => match pipe {
                Some(p) => vars_in_pipe(p, out),
                None => return Err(Error::Template("undefined template specified".into())),
            },
            _ => {}
        }
    }
    Ok(())
}

fn vars_in_pipe(p: &Pipe, out: &mut Vec<String>) {
    for c in &p.cmds {
        for a in &c.args {
            match a {
                Arg::Field(idents) => out.extend(idents.iter().cloned()),
                Arg::Var(name, idents) => {
                    out.push(name.clone());
                    out.extend(idents.iter().cloned());
                }
                Arg::Pipe(p, _) => vars_in_pipe(p, out),
                _ => {}
            }
        }
    }
}

/// Ollama's `deleteNode` walk: keeps everything up to and including the first `.Response` field
/// (in tree order), dropping what follows it at every level.
fn cut_after_response(nodes: &[Node], cut: &mut bool) -> Vec<Node> {
    let mut out = Vec::new();
    for n in nodes {
        if *cut {
            break;
        }
        match n {
            Node::Action(p) => {
                if let Some(p) = cut_pipe(p, cut) {
                    out.push(Node::Action(p));
                }
            }
            Node::If(b) | Node::Range(b) | Node::With(b) => {
                let mut b = b.clone();
                b.list = cut_after_response(&b.list, cut);
                b.else_list = match (&b.else_list, *cut) {
                    (Some(e), false) => Some(cut_after_response(e, cut)),
                    _ => None,
                };
                out.push(match n {
                    Node::If(_) => Node::If(b),
                    Node::Range(_) => Node::Range(b),
                    _ => Node::With(b),
                });
            }
            other => out.push(other.clone()),
        }
    }
    out
}

fn cut_pipe(p: &Pipe, cut: &mut bool) -> Option<Pipe> {
    let mut cmds = Vec::new();
    for c in &p.cmds {
        let mut args = Vec::new();
        for a in &c.args {
            if *cut {
                continue;
            }
            if let Arg::Field(idents) = a {
                if idents.iter().any(|i| i == "Response") {
                    *cut = true;
                }
            }
            args.push(a.clone());
        }
        if args.is_empty() {
            return None;
        }
        cmds.push(super::gotmpl::Cmd { args });
    }
    if cmds.is_empty() {
        return None;
    }
    Some(Pipe { cmds, ..p.clone() })
}

fn pipe_has_field(p: &Pipe, name: &str) -> bool {
    p.cmds
        .iter()
        .flat_map(|c| &c.args)
        .any(|a| matches!(a, Arg::Field(idents) if idents.iter().any(|i| i == name)))
}

/// The body of the first `{{ if … .ToolCalls … }}`.
fn find_tool_calls_if(nodes: &[Node]) -> Option<&[Node]> {
    for n in nodes {
        match n {
            Node::If(b) => {
                if pipe_has_field(&b.pipe, "ToolCalls") {
                    return Some(&b.list);
                }
                if let Some(r) = find_tool_calls_if(&b.list) {
                    return Some(r);
                }
                if let Some(r) = b.else_list.as_deref().and_then(find_tool_calls_if) {
                    return Some(r);
                }
            }
            Node::Range(b) | Node::With(b) => {
                if let Some(r) = find_tool_calls_if(&b.list) {
                    return Some(r);
                }
                if let Some(r) = b.else_list.as_deref().and_then(find_tool_calls_if) {
                    return Some(r);
                }
            }
            _ => {}
        }
    }
    None
}

/// The first non-blank text, depth first, stopping at the first action or nested block.
fn first_text(nodes: &[Node]) -> Option<String> {
    for n in nodes {
        match n {
            Node::Text(t) if t.trim().is_empty() => continue,
            Node::Text(t) => return Some(t.clone()),
            Node::If(b) | Node::Range(b) | Node::With(b) => {
                return first_text(&b.list).or_else(|| b.else_list.as_deref().and_then(first_text));
            }
            Node::Action(_) => return None,
            _ => {}
        }
    }
    None
}

enum Anc<'a> {
    List(&'a [Node]),
    Range(&'a Pipe),
    Other,
}

fn infer_thinking<'a>(nodes: &'a [Node], anc: &mut Vec<Anc<'a>>, open: &mut String, close: &mut String) {
    anc.push(Anc::List(nodes));
    for n in nodes {
        match n {
            Node::Action(p) => {
                anc.push(Anc::Other);
                thinking_in_pipe(p, anc, open, close);
                anc.pop();
            }
            Node::If(b) | Node::With(b) | Node::Range(b) => {
                anc.push(if matches!(n, Node::Range(_)) {
                    Anc::Range(&b.pipe)
                } else {
                    Anc::Other
                });
                thinking_in_pipe(&b.pipe, anc, open, close);
                infer_thinking(&b.list, anc, open, close);
                if let Some(e) = &b.else_list {
                    infer_thinking(e, anc, open, close);
                }
                anc.pop();
            }
            Node::Template { pipe: Some(p), .. } => thinking_in_pipe(p, anc, open, close),
            _ => {}
        }
    }
    anc.pop();
}

fn thinking_in_pipe(p: &Pipe, anc: &[Anc<'_>], open: &mut String, close: &mut String) {
    for a in p.cmds.iter().flat_map(|c| &c.args) {
        match a {
            Arg::Field(idents) if idents.first().is_some_and(|i| i == "Thinking") => {
                let in_messages_range =
                    anc.iter().rev().find_map(|a| match a {
                        Anc::Range(p) => Some(p.cmds.iter().flat_map(|c| &c.args).any(
                            |a| matches!(a, Arg::Field(i) if i.first().is_some_and(|f| f == "Messages")),
                        )),
                        _ => None,
                    });
                if in_messages_range != Some(true) {
                    continue;
                }
                if let Some(list) = anc.iter().rev().find_map(|a| match a {
                    Anc::List(l) => Some(*l),
                    _ => None,
                }) {
                    if let Some(Node::Text(t)) = list.first() {
                        *open = t.trim().to_string();
                    }
                    if let Some(Node::Text(t)) = list.last() {
                        *close = t.trim().to_string();
                    }
                }
            }
            Arg::Pipe(p, _) => thinking_in_pipe(p, anc, open, close),
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Data

/// Ollama's `collate`: system messages joined into one system prompt; consecutive messages of
/// the same role (except tool results) merged with a blank line.
pub fn collate(msgs: &[Message]) -> (String, Vec<Message>) {
    let mut system = Vec::new();
    let mut out: Vec<Message> = Vec::new();
    for m in msgs {
        if m.role == "system" {
            system.push(m.content.as_str());
        }
        match out.last_mut() {
            Some(last) if last.role == m.role && m.role != "tool" => {
                last.content.push_str("\n\n");
                last.content.push_str(&m.content);
            }
            _ => out.push(m.clone()),
        }
    }
    (system.join("\n\n"), out)
}

fn nil_list() -> Value {
    Value::List(Rc::new(List {
        items: Vec::new(),
        stringer: None,
        json: Some("null".into()),
    }))
}

fn json_obj(fields: &[(&str, Option<String>)]) -> String {
    let mut s = String::from("{");
    let mut first = true;
    for (k, v) in fields {
        let Some(v) = v else { continue };
        if !first {
            s.push(',');
        }
        first = false;
        go_json_string(&mut s, k);
        s.push(':');
        s.push_str(v);
    }
    s.push('}');
    s
}

fn message_value(m: &Message) -> Value {
    let calls: Vec<Value> = m
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let args = Value::map(
                c.arguments
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from_json(v)))
                    .collect(),
            );
            let args_json = args.to_json();
            let args = match args {
                Value::Map(m) => Value::Map(Rc::new(Map {
                    entries: m.entries.clone(),
                    stringer: Some(args_json.clone()),
                    json: Some(args_json.clone()),
                })),
                other => other,
            };
            let id = c.id.clone().unwrap_or_default();
            let fjson = json_obj(&[
                ("Index", Some(i.to_string())),
                ("Name", Some(Value::str(c.name.as_str()).to_json())),
                ("Arguments", Some(args_json)),
            ]);
            let function = Value::Struct(Rc::new(Struct {
                type_name: "templateToolCallFunction",
                fields: vec![
                    ("Index", Value::Int(i as i64)),
                    ("Name", Value::str(c.name.as_str())),
                    ("Arguments", args),
                ],
                stringer: None,
                json: fjson.clone(),
            }));
            Value::Struct(Rc::new(Struct {
                type_name: "templateToolCall",
                fields: vec![("ID", Value::str(id.as_str())), ("Function", function)],
                stringer: None,
                json: json_obj(&[
                    ("ID", Some(Value::str(id.as_str()).to_json())),
                    ("Function", Some(fjson)),
                ]),
            }))
        })
        .collect();
    let tool_calls = if calls.is_empty() {
        nil_list()
    } else {
        Value::list(calls)
    };
    let images = if m.images == 0 {
        nil_list()
    } else {
        Value::list((0..m.images).map(|_| Value::str("")).collect())
    };
    let s = |x: &str| Value::str(x);
    let fields = vec![
        ("Role", s(&m.role)),
        ("Content", s(&m.content)),
        ("Thinking", s(&m.thinking)),
        ("Images", images.clone()),
        ("ToolCalls", tool_calls.clone()),
        ("ToolName", s(m.tool_name.as_deref().unwrap_or(""))),
        ("ToolCallID", s(m.tool_call_id.as_deref().unwrap_or(""))),
    ];
    let json = json_obj(
        &fields
            .iter()
            .map(|(k, v)| (*k, Some(v.to_json())))
            .collect::<Vec<_>>(),
    );
    Value::Struct(Rc::new(Struct {
        type_name: "templateMessage",
        fields,
        stringer: None,
        json,
    }))
}

fn tools_value(tools: &[Tool]) -> Value {
    if tools.is_empty() {
        return Value::List(Rc::new(List {
            items: Vec::new(),
            stringer: Some("null".into()),
            json: Some("null".into()),
        }));
    }
    let items: Vec<Value> = tools.iter().map(tool_value).collect();
    let json = format!(
        "[{}]",
        items.iter().map(Value::to_json).collect::<Vec<_>>().join(",")
    );
    Value::List(Rc::new(List {
        items,
        stringer: Some(json.clone()),
        json: Some(json),
    }))
}

fn get<'a>(v: &'a Json, k: &str) -> Option<&'a Json> {
    v.get(k).filter(|x| !x.is_null())
}

fn str_of(v: &Json, k: &str) -> String {
    get(v, k).and_then(Json::as_str).unwrap_or("").to_string()
}

fn tool_value(t: &Tool) -> Value {
    let f = get(&t.0, "function").cloned().unwrap_or(Json::Null);
    let params = get(&f, "parameters").cloned().unwrap_or(Json::Null);
    let props = properties_value(get(&params, "properties"), true);
    let required: Vec<String> = get(&params, "required")
        .and_then(Json::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let opt_json = |v: Option<&Json>| v.map(|x| Value::from_json(x).to_json());
    let params_json = json_obj(&[
        ("type", Some(Value::str(str_of(&params, "type")).to_json())),
        ("$defs", opt_json(get(&params, "$defs"))),
        ("items", opt_json(get(&params, "items"))),
        (
            "required",
            (!required.is_empty())
                .then(|| Value::list(required.iter().map(|r| Value::str(r.as_str())).collect()).to_json()),
        ),
        ("properties", Some(props.to_json())),
    ]);
    let parameters = Value::Struct(Rc::new(Struct {
        type_name: "templateToolFunctionParameters",
        fields: vec![
            ("Type", Value::str(str_of(&params, "type"))),
            (
                "Defs",
                get(&params, "$defs").map(Value::from_json).unwrap_or(Value::Nil),
            ),
            (
                "Items",
                get(&params, "items").map(Value::from_json).unwrap_or(Value::Nil),
            ),
            (
                "Required",
                Value::list(required.iter().map(|r| Value::str(r.as_str())).collect()),
            ),
            ("Properties", props),
        ],
        stringer: Some(params_json.clone()),
        json: params_json.clone(),
    }));
    let name = str_of(&f, "name");
    let description = str_of(&f, "description");
    let fn_json = json_obj(&[
        ("name", Some(Value::str(name.as_str()).to_json())),
        ("description", Some(Value::str(description.as_str()).to_json())),
        ("parameters", Some(params_json.clone())),
    ]);
    // api.ToolFunction's String(): description omitted when empty.
    let fn_string = json_obj(&[
        ("name", Some(Value::str(name.as_str()).to_json())),
        (
            "description",
            (!description.is_empty()).then(|| Value::str(description.as_str()).to_json()),
        ),
        ("parameters", Some(params_json)),
    ]);
    let function = Value::Struct(Rc::new(Struct {
        type_name: "templateToolFunction",
        fields: vec![
            ("Name", Value::str(name)),
            ("Description", Value::str(description)),
            ("Parameters", parameters),
        ],
        stringer: Some(fn_string),
        json: fn_json.clone(),
    }));
    let ty = str_of(&t.0, "type");
    let tool_json = json_obj(&[
        ("type", Some(Value::str(ty.as_str()).to_json())),
        ("items", opt_json(get(&t.0, "items"))),
        ("function", Some(fn_json)),
    ]);
    Value::Struct(Rc::new(Struct {
        type_name: "templateTool",
        fields: vec![
            ("Type", Value::str(ty)),
            (
                "Items",
                get(&t.0, "items").map(Value::from_json).unwrap_or(Value::Nil),
            ),
            ("Function", function),
        ],
        stringer: Some(tool_json.clone()),
        json: tool_json,
    }))
}

/// Properties: a map from name to `ToolProperty`. The top level is a Go map (sorted JSON);
/// nested ones keep their order, as Ollama's ordered map does.
fn properties_value(props: Option<&Json>, top: bool) -> Value {
    let Some(obj) = props.and_then(Json::as_object) else {
        return Value::Map(Rc::new(Map {
            entries: Vec::new(),
            stringer: Some("{}".into()),
            json: Some("null".into()),
        }));
    };
    let entries: Vec<(String, Value)> = obj.iter().map(|(k, v)| (k.clone(), property_value(v))).collect();
    let mut json = String::from("{");
    let mut ordered: Vec<&(String, Value)> = entries.iter().collect();
    if top {
        ordered.sort_by(|a, b| a.0.cmp(&b.0));
    }
    for (i, (k, v)) in ordered.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        go_json_string(&mut json, k);
        json.push(':');
        json.push_str(&v.to_json());
    }
    json.push('}');
    let mut sorted = entries;
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    Value::Map(Rc::new(Map {
        entries: sorted,
        stringer: Some(json.clone()),
        json: Some(json),
    }))
}

fn property_value(p: &Json) -> Value {
    let types: Vec<String> = match get(p, "type") {
        Some(Json::String(s)) => vec![s.clone()],
        Some(Json::Array(a)) => a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    };
    let any_of: Vec<Value> = get(p, "anyOf")
        .and_then(Json::as_array)
        .map(|a| a.iter().map(property_value).collect())
        .unwrap_or_default();
    let type_string = match types.len() {
        0 => String::new(),
        1 => types[0].clone(),
        _ => format!("[{}]", types.join(" ")),
    };
    let type_json = match types.len() {
        0 => None,
        1 => Some(Value::str(types[0].as_str()).to_json()),
        _ => Some(Value::list(types.iter().map(|t| Value::str(t.as_str())).collect()).to_json()),
    };
    let enum_vals: Vec<Value> = get(p, "enum")
        .and_then(Json::as_array)
        .map(|a| a.iter().map(Value::from_json).collect())
        .unwrap_or_default();
    let required: Vec<Value> = get(p, "required")
        .and_then(Json::as_array)
        .map(|a| a.iter().filter_map(|x| x.as_str().map(Value::str)).collect())
        .unwrap_or_default();
    let nested = get(p, "properties").map(|x| properties_value(Some(x), false));
    let description = str_of(p, "description");
    let json = json_obj(&[
        (
            "anyOf",
            (!any_of.is_empty()).then(|| {
                format!(
                    "[{}]",
                    any_of.iter().map(Value::to_json).collect::<Vec<_>>().join(",")
                )
            }),
        ),
        ("type", type_json),
        ("items", get(p, "items").map(|x| Value::from_json(x).to_json())),
        (
            "description",
            (!description.is_empty()).then(|| Value::str(description.as_str()).to_json()),
        ),
        (
            "enum",
            (!enum_vals.is_empty()).then(|| Value::list(enum_vals.clone()).to_json()),
        ),
        ("properties", nested.as_ref().map(Value::to_json)),
        (
            "required",
            (!required.is_empty()).then(|| Value::list(required.clone()).to_json()),
        ),
    ]);
    Value::Struct(Rc::new(Struct {
        type_name: "ToolProperty",
        fields: vec![
            ("AnyOf", Value::list(any_of)),
            ("Type", Value::str(type_string)),
            (
                "Items",
                get(p, "items").map(Value::from_json).unwrap_or(Value::Nil),
            ),
            ("Description", Value::str(description)),
            ("Enum", Value::list(enum_vals)),
            ("Properties", nested.unwrap_or(Value::Nil)),
            ("Required", Value::list(required)),
            // Not a Go field: the raw type list, for toTypeScriptType.
            (
                "_types",
                Value::list(types.iter().map(|t| Value::str(t.as_str())).collect()),
            ),
        ],
        stringer: None,
        json,
    }))
}

fn ts_type(v: &Value) -> String {
    let Value::Struct(s) = v else { return "any".into() };
    if s.type_name != "ToolProperty" {
        return "any".into();
    }
    let field = |n: &str| s.fields.iter().find(|(k, _)| *k == n).map(|(_, v)| v.clone());
    if let Some(Value::List(any_of)) = field("AnyOf") {
        if !any_of.items.is_empty() {
            return any_of.items.iter().map(ts_type).collect::<Vec<_>>().join(" | ");
        }
    }
    let types: Vec<String> = match field("_types") {
        Some(Value::List(l)) => l.items.iter().map(Value::to_go_string).collect(),
        _ => Vec::new(),
    };
    if types.is_empty() {
        return "any".into();
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            "string" => "string",
            "number" | "integer" => "number",
            "boolean" => "boolean",
            "array" => "any[]",
            "object" => "Record<string, any>",
            "null" => "null",
            _ => "any",
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Ollama's template functions.
const FUNCS: &[&str] = &["json", "currentDate", "yesterdayDate", "toTypeScriptType"];

fn funcs(now: SystemTime) -> HashMap<&'static str, Func> {
    let mut f: HashMap<&'static str, Func> = HashMap::new();
    f.insert(
        "json",
        Box::new(|a: &[Value]| {
            Ok(Value::str(
                a.first().map(Value::to_json).unwrap_or_else(|| "null".into()),
            ))
        }),
    );
    let today = DateTime::from_system_time(now).strftime("%Y-%m-%d");
    let yesterday = DateTime::from_system_time(now.checked_sub(Duration::from_secs(86_400)).unwrap_or(now))
        .strftime("%Y-%m-%d");
    f.insert(
        "currentDate",
        Box::new(move |_: &[Value]| Ok(Value::str(today.as_str()))),
    );
    f.insert(
        "yesterdayDate",
        Box::new(move |_: &[Value]| Ok(Value::str(yesterday.as_str()))),
    );
    f.insert(
        "toTypeScriptType",
        Box::new(|a: &[Value]| Ok(Value::str(a.first().map(ts_type).unwrap_or_else(|| "any".into())))),
    );
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ToolCall;

    fn run(src: &str, msgs: &[Message]) -> String {
        OllamaTemplate::parse(src)
            .unwrap()
            .execute(&OllamaInputs {
                messages: msgs,
                tools: &[],
                prompt: "",
                suffix: "",
                think: None,
                now: SystemTime::UNIX_EPOCH,
            })
            .unwrap()
    }

    #[test]
    fn vars_and_response_append() {
        let t = OllamaTemplate::parse("{{ .System }} {{ .Prompt }}").unwrap();
        assert_eq!(t.vars(), ["prompt", "response", "system"]);
        let t = OllamaTemplate::parse("{{ range .Messages }}{{ .Role }} {{ .Content }}{{ end }}").unwrap();
        assert_eq!(t.vars(), ["content", "messages", "role"]);
        assert!(OllamaTemplate::parse(r#"{{define "x"}}{{template "x"}}{{end}}{{template "x"}}"#).is_err());
    }

    #[test]
    fn legacy_mode_runs_per_turn_and_cuts_after_response() {
        let t = "{{ if .System }}S:{{ .System }} {{ end }}U:{{ .Prompt }} A:{{ .Response }}|";
        let msgs = [
            Message::new("system", "sys"),
            Message::new("user", "q1"),
            Message::new("assistant", "a1"),
            Message::new("user", "q2"),
        ];
        assert_eq!(run(t, &msgs), "S:sys U:q1 A:a1|U:q2 A:");
        assert_eq!(run("{{ .Prompt }}", &msgs), "q1a1q2");
    }

    #[test]
    fn messages_mode_collates() {
        let msgs = [
            Message::new("system", "a"),
            Message::new("system", "b"),
            Message::new("user", "x"),
            Message::new("user", "y"),
        ];
        let out = run(
            "[{{ .System }}]{{ range .Messages }}<{{ .Role }}:{{ .Content }}>{{ end }}",
            &msgs,
        );
        assert_eq!(out, "[a\n\nb]<system:a\n\nb><user:x\n\ny>");
    }

    #[test]
    fn tool_call_arguments_print_as_go_json() {
        let mut m = Message::new("assistant", "");
        m.tool_calls.push(ToolCall {
            id: None,
            name: "f".into(),
            arguments: serde_json::from_str(r#"{"b": 1, "a": "<x>"}"#).unwrap(),
        });
        let out = run(
            "{{ range .Messages }}{{ range .ToolCalls }}{{ .Function.Arguments }}|{{ json .Function.Arguments }}|{{ range $k, $v := .Function.Arguments }}{{ $k }}={{ $v }};{{ end }}{{ end }}{{ end }}",
            &[m],
        );
        assert_eq!(
            out,
            r#"{"a":"\u003cx\u003e","b":1}|{"a":"\u003cx\u003e","b":1}|a=<x>;b=1;"#
        );
    }

    #[test]
    fn tags_are_inferred_from_templates() {
        let t = OllamaTemplate::parse(
            r#"{{ range .Messages }}{{ if .Content }}{{ .Content }}{{ else if .ToolCalls }}<tool_call>
{{ range .ToolCalls }}{"name": "{{ .Function.Name }}"}{{ end }}</tool_call>{{ end }}{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ end }}"#,
        )
        .unwrap();
        assert_eq!(t.tool_call_tag(), "<tool_call>");
        assert_eq!(t.thinking_tags(), Some(("<think>".into(), "</think>".into())));
        let t = OllamaTemplate::parse("{{ range .Messages }}{{ if .ToolCalls }}{{ range .ToolCalls }}{\"name\": 1}{{ end }}{{ end }}{{ end }}").unwrap();
        assert_eq!(t.tool_call_tag(), "{");
        assert!(!t.supports_thinking());
    }
}
