//! The interactive chat of `ollamars run`, with Ollama's commands and keys.
//!
//! rustyline edits the lines (history file, Emacs keys, bracketed paste, Ctrl-C/Ctrl-D); this
//! module turns lines into messages and `/` commands. Input is split from effects: [`Input`]
//! assembles lines (multi-line `"""` blocks included) into [`Entry`]s, which [`Repl`] carries out.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use registry::modelfile::{ParamType, Parameters};
use rustyline::error::ReadlineError;
use rustyline::history::{DefaultHistory, History};
use rustyline::{
    Cmd, ConditionalEventHandler, Editor, Event, EventContext, EventHandler, KeyEvent, RepeatCount,
};
use serde_json::{json, Value};

use super::run::{chat, load, show, Session};
use super::{block_on, list, show as show_cmd};
use crate::client::api::{Message, ProgressResponse, ShowResponse, Think};
use crate::client::{Client, Error};

/// One thing the user entered.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    /// A message for the model.
    Prompt(String),
    /// `/set system ...`, possibly spanning lines.
    System(String),
    /// Any other `/` command, as typed.
    Command(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Multiline {
    None,
    Prompt,
    System,
}

/// Assembles lines into entries: `"""` opens a block that ends at a line ending in `"""`.
pub struct Input {
    multiline: Multiline,
    buf: String,
}

impl Input {
    pub fn new() -> Input {
        Input {
            multiline: Multiline::None,
            buf: String::new(),
        }
    }

    /// Whether a block is open (the prompt is then `... `).
    pub fn continuing(&self) -> bool {
        self.multiline != Multiline::None
    }

    /// Drops a half-entered block (Ctrl-C).
    pub fn reset(&mut self) {
        self.multiline = Multiline::None;
        self.buf.clear();
    }

    /// The entry a line completes, if any.
    pub fn feed(&mut self, line: &str) -> Option<Entry> {
        if self.multiline != Multiline::None {
            let (before, done) = match line.strip_suffix(r#"""""#) {
                Some(b) => (b, true),
                None => (line, false),
            };
            self.buf.push_str(before);
            if !done {
                self.buf.push('\n');
                return None;
            }
            let text = std::mem::take(&mut self.buf);
            let kind = std::mem::replace(&mut self.multiline, Multiline::None);
            return match kind {
                Multiline::System => Some(Entry::System(text)),
                _ => (!text.is_empty()).then_some(Entry::Prompt(text)),
            };
        }
        if let Some(rest) = line.strip_prefix(r#"""""#) {
            return match rest.strip_suffix(r#"""""#) {
                Some(text) => (!text.is_empty()).then(|| Entry::Prompt(text.to_string())),
                None => {
                    self.buf = format!("{rest}\n");
                    self.multiline = Multiline::Prompt;
                    None
                }
            };
        }
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() > 2 && words[0] == "/set" && words[1] == "system" {
            let text = words[2..].join(" ");
            return match text.strip_prefix(r#"""""#) {
                None => Some(Entry::System(text)),
                Some(t) => match t.strip_suffix(r#"""""#) {
                    Some(t) => Some(Entry::System(t.to_string())),
                    None => {
                        self.buf = format!("{t}\n");
                        self.multiline = Multiline::System;
                        None
                    }
                },
            };
        }
        if line.starts_with('/') {
            return Some(Entry::Command(line.to_string()));
        }
        (!line.is_empty()).then(|| Entry::Prompt(line.to_string()))
    }
}

/// Whether to keep reading.
enum Flow {
    Continue,
    Exit,
}

struct Repl<'a> {
    client: &'a Client,
    session: Session,
    history: Option<PathBuf>,
}

pub fn run(client: &Client, session: Session) -> anyhow::Result<()> {
    let config = rustyline::Config::builder()
        .auto_add_history(false)
        .bracketed_paste(true)
        .max_history_size(1000)?
        .build();
    let mut editor: Editor<Helper, DefaultHistory> = Editor::with_config(config)?;
    editor.set_helper(Some(Helper { continuing: false }));
    // Ctrl-C on a line that has text clears it; on an empty line it says how to leave.
    let had_text = Arc::new(AtomicBool::new(false));
    editor.bind_sequence(
        KeyEvent::ctrl('C'),
        EventHandler::Conditional(Box::new(CtrlC(had_text.clone()))),
    );
    let history = history_path();
    if let Some(h) = &history {
        if h.exists() {
            let _ = editor.load_history(h);
        }
    }
    let mut repl = Repl {
        client,
        session,
        history,
    };
    let mut input = Input::new();
    loop {
        let prompt = if input.continuing() { "... " } else { ">>> " };
        if let Some(h) = editor.helper_mut() {
            h.continuing = input.continuing();
        }
        let line = match editor.readline(prompt) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                if !had_text.swap(false, Ordering::Relaxed) && !input.continuing() {
                    println!("Use Ctrl + d or /bye to exit.");
                }
                input.reset();
                continue;
            }
            Err(ReadlineError::Eof) => {
                println!();
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        if !line.trim().is_empty() {
            let _ = editor.add_history_entry(line.as_str());
            if let Some(h) = &repl.history {
                if let Some(dir) = h.parent() {
                    let _ = std::fs::create_dir_all(dir);
                }
                let _ = editor.append_history(h);
            }
        }
        let flow = match input.feed(&line) {
            None => Flow::Continue,
            Some(Entry::Prompt(text)) => repl.send(text)?,
            Some(Entry::System(text)) => {
                repl.set_system(text);
                Flow::Continue
            }
            Some(Entry::Command(line)) => repl.command(&line, &mut editor)?,
        };
        if let Flow::Exit = flow {
            return Ok(());
        }
    }
}

impl Repl<'_> {
    /// Sends a message and records the answer. Errors from the daemon are shown and the chat
    /// goes on; only a daemon that went away ends it.
    fn send(&mut self, text: String) -> anyhow::Result<Flow> {
        self.session.messages.push(Message::new("user", text));
        match chat(self.client, &self.session) {
            Ok(Some(answer)) => self.session.messages.push(answer),
            Ok(None) => {}
            Err(e @ Error::NotRunning(_)) => return Err(e.into()),
            Err(e) => {
                self.session.messages.pop();
                println!("Error: {e}\n");
            }
        }
        Ok(Flow::Continue)
    }

    fn set_system(&mut self, text: String) {
        let msg = Message::new("system", text.clone());
        self.session.system = text;
        match self.session.messages.last_mut() {
            Some(last) if last.role == "system" => *last = msg,
            _ => self.session.messages.push(msg),
        }
        println!("Set system message.");
    }

    fn command(&mut self, line: &str, editor: &mut Editor<Helper, DefaultHistory>) -> anyhow::Result<Flow> {
        let args: Vec<&str> = line.split_whitespace().collect();
        match args[0] {
            "/bye" | "/exit" => return Ok(Flow::Exit),
            "/?" | "/help" => match args.get(1).copied() {
                Some("set" | "/set") => eprint!("{USAGE_SET}"),
                Some("show" | "/show") => eprint!("{USAGE_SHOW}"),
                Some("shortcut" | "shortcuts") => eprint!("{USAGE_SHORTCUTS}"),
                _ => eprint!("{USAGE}"),
            },
            "/set" => self.set(&args, editor),
            "/show" => self.show(&args)?,
            "/load" => self.load(&args)?,
            "/save" => self.save(&args)?,
            "/clear" => {
                self.session.messages.clear();
                if !self.session.system.is_empty() {
                    self.session
                        .messages
                        .push(Message::new("system", self.session.system.clone()));
                }
                println!("Cleared session context");
            }
            "/list" => {
                let resp = block_on(self.client.get("/api/tags"))?;
                let prefix = args.get(1).copied();
                print!(
                    "{}",
                    list::list_table(&resp, prefix, time::OffsetDateTime::now_utc())
                );
            }
            other => println!("Unknown command '{other}'. Type /? for help"),
        }
        Ok(Flow::Continue)
    }

    fn set(&mut self, args: &[&str], editor: &mut Editor<Helper, DefaultHistory>) {
        let s = &mut self.session;
        let Some(&what) = args.get(1) else {
            eprint!("{USAGE_SET}");
            return;
        };
        match what {
            "history" => {
                self.history = history_path();
                println!("Set 'history' mode.");
            }
            "nohistory" => {
                self.history = None;
                let _ = editor.history_mut().clear();
                println!("Set 'nohistory' mode.");
            }
            "wordwrap" => {
                s.word_wrap = true;
                println!("Set 'wordwrap' mode.");
            }
            "nowordwrap" => {
                s.word_wrap = false;
                println!("Set 'nowordwrap' mode.");
            }
            "verbose" => {
                s.verbose = true;
                println!("Set 'verbose' mode.");
            }
            "quiet" => {
                s.verbose = false;
                println!("Set 'quiet' mode.");
            }
            "think" => {
                s.think_explicit = true;
                match args.get(2) {
                    Some(level) => {
                        s.think = Some(Think::Level(level.to_string()));
                        println!("Set 'think' mode to '{level}'.");
                    }
                    None => {
                        s.think = Some(Think::Bool(true));
                        println!("Set 'think' mode.");
                    }
                }
                self.warn_if_cannot_think();
            }
            "nothink" => {
                s.think_explicit = true;
                s.think = Some(Think::Bool(false));
                println!("Set 'nothink' mode.");
                self.warn_if_cannot_think();
            }
            "format" => match args.get(2) {
                Some(&"json") => {
                    s.format = Some(json!("json"));
                    println!("Set format to 'json' mode.");
                }
                _ => println!("Invalid or missing format. For 'json' mode use '/set format json'"),
            },
            "noformat" => {
                s.format = None;
                println!("Disabled format.");
            }
            "parameter" => {
                if args.len() < 4 {
                    eprint!("{USAGE_PARAMETERS}");
                    return;
                }
                let (name, values) = (args[2], &args[3..]);
                match parameter_value(name, values) {
                    Ok(v) => {
                        s.options.insert(name.to_string(), v);
                        println!("Set parameter '{name}' to '{}'", values.join(", "));
                    }
                    Err(e) => println!("Couldn't set parameter: {e}"),
                }
            }
            // `/set system` with text is an Entry::System; bare, it shows the usage.
            "system" => eprint!("{USAGE_SET}"),
            other => println!("Unknown command '/set {other}'. Type /? for help"),
        }
    }

    fn warn_if_cannot_think(&self) {
        if let Ok(info) = block_on(show(self.client, &self.session.model)) {
            if !info.has_capability("thinking") {
                eprintln!(
                    "warning: model {:?} does not support thinking output",
                    self.session.model
                );
            }
        }
    }

    fn show(&mut self, args: &[&str]) -> anyhow::Result<()> {
        let Some(&what) = args.get(1) else {
            eprint!("{USAGE_SHOW}");
            return Ok(());
        };
        let s = &self.session;
        let mut body = json!({"model": s.model});
        if !s.system.is_empty() {
            body["system"] = json!(s.system);
        }
        if !s.options.is_empty() {
            body["options"] = Value::Object(s.options.clone());
        }
        let resp: ShowResponse = match block_on(self.client.post("/api/show", &body)) {
            Ok(r) => r,
            Err(e @ Error::NotRunning(_)) => return Err(e.into()),
            Err(e) => {
                println!("error: couldn't get model: {e}");
                return Ok(());
            }
        };
        match what {
            "info" => eprint!("{}", show_cmd::info(&resp, false)),
            "license" if resp.license.is_empty() => println!("No license was specified for this model."),
            "license" => println!("{}", resp.license),
            "modelfile" => println!("{}", resp.modelfile),
            "parameters" => {
                println!("Model defined parameters:");
                if resp.parameters.is_empty() {
                    println!("  No additional parameters were specified for this model.");
                } else {
                    for l in resp.parameters.lines() {
                        println!("  {l}");
                    }
                }
                println!();
                if !s.options.is_empty() {
                    println!("User defined parameters:");
                    for (k, v) in &s.options {
                        println!("  {k:<30} {}", go_value(v));
                    }
                    println!();
                }
            }
            "system" if !s.system.is_empty() => println!("{}\n", s.system),
            "system" if !resp.system.is_empty() => println!("{}\n", resp.system),
            "system" => println!("No system message was specified for this model."),
            "template" if resp.template.is_empty() => {
                println!("No prompt template was specified for this model.")
            }
            "template" => println!("{}", resp.template),
            other => println!("Unknown command '/show {other}'. Type /? for help"),
        }
        Ok(())
    }

    fn load(&mut self, args: &[&str]) -> anyhow::Result<()> {
        if args.len() != 2 {
            println!("Usage:\n  /load <modelname>");
            return Ok(());
        }
        let name = args[1];
        println!("Loading model '{name}'");
        let info = match block_on(show(self.client, name)) {
            Ok(info) => info,
            Err(e) if e.is_not_found() => {
                println!("Couldn't find model '{name}'");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let previous = std::mem::replace(&mut self.session.model, name.to_string());
        let (old_messages, old_loaded, old_parent, old_think) = (
            std::mem::take(&mut self.session.messages),
            std::mem::take(&mut self.session.loaded_messages),
            self.session.parent_model.clone(),
            self.session.think.clone(),
        );
        self.session.adopt(&info);
        if let Err(e) = load(self.client, &self.session) {
            println!("error: {e}");
            self.session.model = previous;
            self.session.messages = old_messages;
            self.session.loaded_messages = old_loaded;
            self.session.parent_model = old_parent;
            self.session.think = old_think;
        }
        Ok(())
    }

    fn save(&mut self, args: &[&str]) -> anyhow::Result<()> {
        if args.len() != 2 {
            println!("Usage:\n  /save <modelname>");
            return Ok(());
        }
        let name = args[1];
        if registry::Name::parse(name).is_err() {
            println!("error: The model name '{name}' is invalid");
            return Ok(());
        }
        let s = &self.session;
        let from = if !s.parent_model.is_empty() && registry::Name::parse(&s.parent_model).is_ok() {
            s.parent_model.clone()
        } else {
            s.model.clone()
        };
        let mut body = json!({"model": name, "from": from, "stream": true});
        if !s.system.is_empty() {
            body["system"] = json!(s.system);
        }
        if !s.options.is_empty() {
            body["parameters"] = Value::Object(s.options.clone());
        }
        let messages: Vec<&Message> = s.loaded_messages.iter().chain(&s.messages).collect();
        if !messages.is_empty() {
            body["messages"] = json!(messages
                .iter()
                .map(|m| json!({"role": m.role, "content": m.content}))
                .collect::<Vec<_>>());
        }
        match block_on(
            self.client
                .stream("/api/create", &body, |_: ProgressResponse| Ok(())),
        ) {
            Ok(()) => println!("Created new model '{name}'"),
            Err(e @ Error::NotRunning(_)) => return Err(e.into()),
            Err(e) => println!("error: {e}"),
        }
        Ok(())
    }
}

/// A `/set parameter` value, typed as a Modelfile PARAMETER (`stop` takes several).
fn parameter_value(name: &str, values: &[&str]) -> Result<Value, String> {
    let list = registry::modelfile::params::param_type(name) == Some(ParamType::StringList);
    if !list && values.len() > 1 {
        return Err(format!("parameter '{name}' takes one value"));
    }
    let mut params = Parameters::new();
    for v in values {
        params.set_text(name, v).map_err(|e| e.to_string())?;
    }
    params
        .to_json()
        .get(name)
        .cloned()
        .ok_or_else(|| format!("parameter '{name}' has no value"))
}

/// A value as Go's `%v` prints it (numbers plain, lists in brackets).
fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(items) => format!("[{}]", items.iter().map(go_value).collect::<Vec<_>>().join(" ")),
        Value::Number(n) => n.as_f64().map_or_else(|| n.to_string(), show_cmd::go_float),
        other => other.to_string(),
    }
}

/// The history file, `history` in the per-user data directory (`~/.local/share/ollamars` on
/// Linux), unless `OLLAMARS_NOHISTORY` is set.
fn history_path() -> Option<PathBuf> {
    if std::env::var_os("OLLAMARS_NOHISTORY").is_some_and(|v| !v.is_empty() && v != "0" && v != "false") {
        return None;
    }
    directories::ProjectDirs::from("", "", "ollamars").map(|d| d.data_dir().join("history"))
}

/// The placeholder hints shown on an empty line.
struct Helper {
    continuing: bool,
}

impl rustyline::hint::Hinter for Helper {
    type Hint = String;
    fn hint(&self, line: &str, _pos: usize, _ctx: &rustyline::Context<'_>) -> Option<String> {
        if !line.is_empty() {
            return None;
        }
        Some(
            if self.continuing {
                "Press Enter to send"
            } else {
                "Send a message (/? for help)"
            }
            .into(),
        )
    }
}

impl rustyline::highlight::Highlighter for Helper {
    fn highlight_hint<'h>(&self, hint: &'h str) -> std::borrow::Cow<'h, str> {
        std::borrow::Cow::Owned(format!("\x1b[38;5;245m{hint}\x1b[0m"))
    }
}

impl rustyline::completion::Completer for Helper {
    type Candidate = String;
}
impl rustyline::validate::Validator for Helper {}
impl rustyline::Helper for Helper {}

/// Ctrl-C: notes whether the line had text, then interrupts the read.
struct CtrlC(Arc<AtomicBool>);

impl ConditionalEventHandler for CtrlC {
    fn handle(&self, _: &Event, _: RepeatCount, _: bool, ctx: &EventContext<'_>) -> Option<Cmd> {
        self.0.store(!ctx.line().is_empty(), Ordering::Relaxed);
        Some(Cmd::Interrupt)
    }
}

const USAGE: &str = "Available Commands:
  /set            Set session variables
  /show           Show model information
  /load <model>   Load a session or model
  /save <model>   Save your current session
  /clear          Clear session context
  /bye            Exit
  /?, /help       Help for a command
  /? shortcuts    Help for keyboard shortcuts

Use \"\"\" to begin a multi-line message.

";

const USAGE_SET: &str = "Available Commands:
  /set parameter ...     Set a parameter
  /set system <string>   Set system message
  /set history           Enable history
  /set nohistory         Disable history
  /set wordwrap          Enable wordwrap
  /set nowordwrap        Disable wordwrap
  /set format json       Enable JSON mode
  /set noformat          Disable formatting
  /set verbose           Show LLM stats
  /set quiet             Disable LLM stats
  /set think             Enable thinking
  /set nothink           Disable thinking

";

const USAGE_SHORTCUTS: &str = "Available keyboard shortcuts:
  Ctrl + a            Move to the beginning of the line (Home)
  Ctrl + e            Move to the end of the line (End)
   Alt + b            Move back (left) one word
   Alt + f            Move forward (right) one word
  Ctrl + k            Delete the sentence after the cursor
  Ctrl + u            Delete the sentence before the cursor
  Ctrl + w            Delete the word before the cursor

  Ctrl + l            Clear the screen
  Ctrl + c            Stop the model from responding
  Ctrl + d            Exit ollamars (/bye)

";

const USAGE_SHOW: &str = "Available Commands:
  /show info         Show details for this model
  /show license      Show model license
  /show modelfile    Show Modelfile for this model
  /show parameters   Show parameters for this model
  /show system       Show system message
  /show template     Show prompt template

";

const USAGE_PARAMETERS: &str = "Available Parameters:
  /set parameter seed <int>             Random number seed
  /set parameter num_predict <int>      Max number of tokens to predict
  /set parameter top_k <int>            Pick from top k num of tokens
  /set parameter top_p <float>          Pick token based on sum of probabilities
  /set parameter min_p <float>          Pick token based on top token probability * min_p
  /set parameter num_ctx <int>          Set the context size
  /set parameter temperature <float>    Set creativity level
  /set parameter repeat_penalty <float> How strongly to penalize repetitions
  /set parameter repeat_last_n <int>    Set how far back to look for repetitions
  /set parameter stop <string> <string> ...   Set the stop parameters

";

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(lines: &[&str]) -> Vec<Entry> {
        let mut input = Input::new();
        lines.iter().filter_map(|l| input.feed(l)).collect()
    }

    #[test]
    fn single_lines() {
        assert_eq!(feed_all(&["hello"]), [Entry::Prompt("hello".into())]);
        assert_eq!(feed_all(&[""]), []);
        assert_eq!(feed_all(&["/show info"]), [Entry::Command("/show info".into())]);
        assert_eq!(
            feed_all(&[r#""""one line""""#]),
            [Entry::Prompt("one line".into())]
        );
    }

    #[test]
    fn multiline_blocks() {
        assert_eq!(
            feed_all(&[r#""""first"#, "second", r#"third""""#]),
            [Entry::Prompt("first\nsecond\nthird".into())]
        );
        let mut input = Input::new();
        assert_eq!(input.feed(r#"""""#), None);
        assert!(input.continuing());
        assert_eq!(input.feed("/bye"), None, "a command inside a block is text");
        assert_eq!(input.feed(r#"""""#), Some(Entry::Prompt("\n/bye\n".into())));
        assert!(!input.continuing());
    }

    #[test]
    fn system_messages() {
        assert_eq!(
            feed_all(&["/set system You are   a pirate."]),
            [Entry::System("You are a pirate.".into())]
        );
        assert_eq!(
            feed_all(&[r#"/set system """Be"#, "brief.", r#"""""#]),
            [Entry::System("Be\nbrief.\n".into())]
        );
        assert_eq!(
            feed_all(&[r#"/set system """Short.""""#]),
            [Entry::System("Short.".into())]
        );
        assert_eq!(feed_all(&["/set system"]), [Entry::Command("/set system".into())]);
    }

    #[test]
    fn ctrl_c_drops_a_block() {
        let mut input = Input::new();
        input.feed(r#""""half"#);
        input.reset();
        assert_eq!(input.feed("new"), Some(Entry::Prompt("new".into())));
    }

    #[test]
    fn parameters_are_typed() {
        assert_eq!(parameter_value("temperature", &["0.5"]), Ok(json!(0.5)));
        assert_eq!(parameter_value("num_predict", &["100"]), Ok(json!(100)));
        assert_eq!(
            parameter_value("stop", &["<a>", "<b>"]),
            Ok(json!(["<a>", "<b>"]))
        );
        assert!(parameter_value("temperature", &["hot"]).is_err());
        assert!(parameter_value("temperature", &["1", "2"]).is_err());
        assert!(parameter_value("nonsense", &["1"]).is_err());
        assert_eq!(go_value(&json!(["<a>", "<b>"])), "[<a> <b>]");
        assert_eq!(go_value(&json!(0.5)), "0.5");
    }
}
