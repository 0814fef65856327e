//! `ollamars run MODEL [PROMPT]`: answer one prompt, or chat in the REPL.
//!
//! As Ollama's `run`: the model is pulled when the store does not have it; a prompt on the
//! command line or piped in gets one streamed answer (`/api/generate`); otherwise the model is
//! loaded and the REPL starts (`/api/chat`). Ctrl-C stops an answer; the connection is closed and
//! the daemon cancels the generation.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Map, Value};

use super::{block_on, repl, transfer};
use crate::client::api::{
    ChatRequest, ChatResponse, Common, GenerateRequest, GenerateResponse, Message, ShowResponse, Think,
};
use crate::client::{Client, Error};
use crate::term::format::{go_duration, parse_go_duration, summary};
use crate::term::progress::waiting_spinner;
use crate::term::stream::Answer;

const RUN_HELP: &str = "\
The interactive chat (no PROMPT, nothing piped in) takes /? for help. Type \"\"\" to start a \
multi-line message; Ctrl-C stops an answer, Ctrl-D or /bye leaves.

Environment:
  OLLAMARS_HOST         The daemon's address: host:port, http(s)://host:port[/path] or \
unix:///path/to.sock (default 127.0.0.1:11434)
  OLLAMARS_NOHISTORY    Do not keep the chat history in a file";

#[derive(clap::Args)]
#[command(after_help = RUN_HELP)]
pub struct Args {
    /// The model to run; it is pulled first if the store does not have it.
    model: String,
    /// The prompt. Input piped in comes before it. Without either, an interactive chat starts.
    prompt: Vec<String>,
    /// The answer's format: `json`, or a JSON schema (as JSON text) the answer must follow.
    #[arg(long, value_name = "FORMAT")]
    format: Option<String>,
    /// How long the model stays loaded once idle (e.g. 30s, 5m, 1h, or seconds; 0 unloads at
    /// once, a negative value keeps it loaded).
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true)]
    keepalive: Option<String>,
    /// Print timings after each answer: durations, token counts and rates.
    #[arg(long)]
    verbose: bool,
    /// Pull over plain HTTP if the model has to be pulled.
    #[arg(long)]
    insecure: bool,
    /// Do not wrap words at the terminal's edge.
    #[arg(long)]
    nowordwrap: bool,
    /// For thinking models: think before answering (`--think`, `--think=false`, or a level:
    /// `--think=low|medium|high|max`). By default models that can think do.
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "true", value_name = "LEVEL")]
    think: Option<String>,
    /// For thinking models: do not print the thinking.
    #[arg(long)]
    hidethinking: bool,
    /// Start `ollamars serve` in the background if no daemon answers (as Ollama's desktop app
    /// does); its log goes to the per-user data directory (ollamars/serve.log).
    #[arg(long)]
    start_daemon: bool,
}

/// What a chat or an answer is made of: the model, the conversation and the settings the REPL's
/// `/set` commands change.
pub struct Session {
    pub model: String,
    /// The model this one was built from (`/save` builds on it).
    pub parent_model: String,
    /// The model's own MESSAGE history, shown at the start and kept by `/save`.
    pub loaded_messages: Vec<Message>,
    pub messages: Vec<Message>,
    pub system: String,
    pub options: Map<String, Value>,
    pub format: Option<Value>,
    pub think: Option<Think>,
    /// Whether `think` was asked for (else it follows the model's capabilities).
    pub think_explicit: bool,
    pub hide_thinking: bool,
    pub word_wrap: bool,
    pub verbose: bool,
    pub keep_alive: Option<Value>,
}

impl Session {
    fn common(&self) -> Common {
        Common {
            format: self.format.clone(),
            options: self.options.clone(),
            keep_alive: self.keep_alive.clone(),
            think: self.think.clone(),
        }
    }

    /// Takes the model's details from `show`: its parent and its MESSAGE history, and whether
    /// it thinks by default.
    pub fn adopt(&mut self, info: &ShowResponse) {
        self.parent_model = info.details.parent_model.clone();
        self.loaded_messages = info.messages.clone();
        if !self.think_explicit {
            self.think = info.has_capability("thinking").then_some(Think::Bool(true));
        }
    }

    /// The wrap width for answers: the terminal's, unless wrapping is off or output is piped.
    fn wrap_width(&self) -> Option<usize> {
        (self.word_wrap && std::io::stdout().is_terminal()).then(crate::term::width)
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let client = Client::from_env()?;
    if args.start_daemon {
        start_daemon(&client)?;
    }
    let think = args.think.as_deref().map(parse_think).transpose()?;
    let keep_alive = args.keepalive.as_deref().map(keep_alive_value).transpose()?;
    let format = args.format.as_deref().map(parse_format).transpose()?;

    let mut prompts = args.prompt;
    let stdin_is_tty = std::io::stdin().is_terminal();
    if !stdin_is_tty {
        let mut input = Vec::new();
        std::io::stdin()
            .read_to_end(&mut input)
            .context("reading standard input")?;
        let input = String::from_utf8_lossy(&input).into_owned();
        if !input.is_empty() {
            prompts.insert(0, input);
        }
    }
    let interactive = prompts.is_empty() && stdin_is_tty && std::io::stdout().is_terminal();

    let info = show_or_pull(&client, &args.model, args.insecure)?;
    let mut session = Session {
        model: args.model,
        parent_model: String::new(),
        loaded_messages: Vec::new(),
        messages: Vec::new(),
        system: String::new(),
        options: Map::new(),
        format,
        think_explicit: think.is_some(),
        think,
        hide_thinking: args.hidethinking,
        word_wrap: !args.nowordwrap,
        verbose: args.verbose,
        keep_alive,
    };
    session.adopt(&info);

    if info.has_capability("embedding") {
        return embed(&client, &session, &prompts.join(" "));
    }
    if !interactive {
        return generate(&client, &session, &prompts.join(" "));
    }
    load(&client, &session)?;
    for m in &session.loaded_messages {
        match m.role.as_str() {
            "user" => println!(">>> {}", m.content),
            "assistant" => {
                let mut answer = Answer::new(session.wrap_width(), false, true);
                print!("{}\n\n", answer.chunk("", &m.content, &[]));
            }
            _ => {}
        }
    }
    repl::run(&client, session)
}

/// The model's details, pulling it first if the daemon does not have it.
fn show_or_pull(client: &Client, model: &str, insecure: bool) -> anyhow::Result<ShowResponse> {
    match block_on(show(client, model)) {
        Err(Error::Status { code: 404, .. }) => {
            block_on(transfer::pull_model(client, model, insecure))?;
            Ok(block_on(show(client, model))?)
        }
        r => Ok(r?),
    }
}

pub async fn show(client: &Client, model: &str) -> Result<ShowResponse, Error> {
    client.post("/api/show", &json!({ "model": model })).await
}

/// Loads the model (an empty generate request), with a spinner.
pub fn load(client: &Client, session: &Session) -> anyhow::Result<()> {
    let spinner = waiting_spinner();
    let req = GenerateRequest {
        model: session.model.clone(),
        common: Common {
            keep_alive: session.keep_alive.clone(),
            // Sent so that a model that cannot think fails here, before the first prompt.
            think: session.think.clone(),
            ..Common::default()
        },
        ..GenerateRequest::default()
    };
    let result = block_on(cancellable(client.stream(
        "/api/generate",
        &req,
        |_: GenerateResponse| Ok(()),
    )));
    spinner.finish_and_clear();
    match result {
        Some(r) => Ok(r?),
        None => std::process::exit(130),
    }
}

/// Runs `f` unless Ctrl-C comes first (`None` then). Dropping `f` closes its connection, and
/// the daemon stops the work.
pub async fn cancellable<F: std::future::Future>(f: F) -> Option<F::Output> {
    tokio::select! {
        r = f => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    }
}

/// One prompt, one streamed answer.
fn generate(client: &Client, session: &Session, prompt: &str) -> anyhow::Result<()> {
    let req = GenerateRequest {
        model: session.model.clone(),
        prompt: prompt.to_string(),
        system: session.system.clone(),
        common: session.common(),
    };
    let terminal = std::io::stdout().is_terminal();
    let mut answer = Answer::new(session.wrap_width(), !terminal, session.hide_thinking);
    let spinner = waiting_spinner();
    let mut last = None;
    let mut out = crate::term::stdout();
    let result = block_on(cancellable(client.stream(
        "/api/generate",
        &req,
        |r: GenerateResponse| {
            if !r.response.is_empty() || !session.hide_thinking {
                spinner.finish_and_clear();
            }
            let text = answer.chunk(&r.thinking, &r.response, &r.tool_calls);
            write_out(&mut out, &text)?;
            if r.done {
                last = Some(r.metrics);
            }
            Ok(())
        },
    )));
    spinner.finish_and_clear();
    let _ = write_out(&mut out, &answer.finish());
    match result {
        None => {
            let _ = writeln!(out);
            std::process::exit(130);
        }
        Some(r) => r?,
    }
    if !prompt.is_empty() {
        // A blank line after the answer on a terminal, as Ollama; one newline for pipes.
        write_out(&mut out, if terminal { "\n\n" } else { "\n" })?;
    }
    if let (true, Some(m)) = (session.verbose, last) {
        eprint!("{}", summary(&m));
    }
    Ok(())
}

/// The next answer in the chat: streamed to the terminal, returned for the history. `None` if
/// Ctrl-C stopped it before any text came (a partial answer is kept, as chat apps do).
pub fn chat(client: &Client, session: &Session) -> Result<Option<Message>, Error> {
    let req = ChatRequest {
        model: session.model.clone(),
        messages: session.messages.clone(),
        common: session.common(),
    };
    let mut answer = Answer::new(session.wrap_width(), false, session.hide_thinking);
    let spinner = waiting_spinner();
    let mut last = None;
    let mut role = "assistant".to_string();
    let mut out = crate::term::stdout();
    let result = block_on(cancellable(client.stream(
        "/api/chat",
        &req,
        |r: ChatResponse| {
            if !r.message.content.is_empty() || !session.hide_thinking {
                spinner.finish_and_clear();
            }
            if !r.message.role.is_empty() {
                role = r.message.role.clone();
            }
            let text = answer.chunk(&r.message.thinking, &r.message.content, &r.message.tool_calls);
            write_out(&mut out, &text)?;
            if r.done {
                last = Some(r.metrics);
            }
            Ok(())
        },
    )));
    spinner.finish_and_clear();
    let _ = write_out(&mut out, &answer.finish());
    let cancelled = match result {
        Some(r) => {
            r?;
            false
        }
        None => true,
    };
    let _ = write_out(&mut out, "\n\n");
    drop(out);
    if let (true, Some(m)) = (session.verbose, last) {
        eprint!("{}", summary(&m));
    }
    if cancelled && answer.content.is_empty() {
        return Ok(None);
    }
    Ok(Some(Message {
        role,
        content: answer.content,
        thinking: answer.thinking,
        tool_calls: Vec::new(),
    }))
}

fn write_out(out: &mut impl Write, text: &str) -> Result<(), Error> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| Error::Transport(format!("writing the answer: {e}")))
}

/// An embedding model prints the prompt's vector as a JSON array.
fn embed(client: &Client, session: &Session, input: &str) -> anyhow::Result<()> {
    if input.is_empty() {
        anyhow::bail!(
            "embedding models require input text. Usage: ollamars run {} \"your text here\"",
            session.model
        );
    }
    let mut body = json!({"model": session.model, "input": input});
    if let Some(k) = &session.keep_alive {
        body["keep_alive"] = k.clone();
    }
    let resp: Value = block_on(client.post("/api/embed", &body))?;
    let first = resp
        .get("embeddings")
        .and_then(|e| e.get(0))
        .cloned()
        .unwrap_or(Value::Array(Vec::new()));
    writeln!(crate::term::stdout(), "{first}")?;
    Ok(())
}

/// `--think`: true/false or a level.
pub fn parse_think(s: &str) -> anyhow::Result<Think> {
    match s {
        "" | "true" => Ok(Think::Bool(true)),
        "false" => Ok(Think::Bool(false)),
        "low" | "medium" | "high" | "max" => Ok(Think::Level(s.to_string())),
        _ => {
            anyhow::bail!("invalid value for --think: {s:?} (must be true, false, high, medium, low, or max)")
        }
    }
}

/// `--keepalive` as the API takes it: a Go duration string or a number of seconds, or -1 for
/// "forever".
fn keep_alive_value(s: &str) -> anyhow::Result<Value> {
    let s = s.trim();
    if let Ok(seconds) = s.parse::<i64>() {
        return Ok(json!(seconds.max(-1)));
    }
    let ns = parse_go_duration(s).map_err(anyhow::Error::msg)?;
    Ok(if ns < 0 { json!(-1) } else { json!(go_duration(ns)) })
}

/// `--format`: `json`, or a JSON schema.
fn parse_format(s: &str) -> anyhow::Result<Value> {
    if s == "json" {
        return Ok(json!("json"));
    }
    match serde_json::from_str::<Value>(s) {
        Ok(v @ Value::Object(_)) => Ok(v),
        _ => anyhow::bail!("invalid format {s:?}: use json, or a JSON schema object"),
    }
}

/// Starts `ollamars serve` in the background unless a daemon already answers, and waits until
/// it does.
fn start_daemon(client: &Client) -> anyhow::Result<()> {
    match block_on(client.heartbeat()) {
        Ok(()) => return Ok(()),
        Err(Error::NotRunning(_)) => {}
        Err(e) => return Err(e.into()),
    }
    if !client.host().is_local() {
        anyhow::bail!(
            "no daemon answers at {}, and --start-daemon only starts one on this machine",
            client.host()
        );
    }
    let log_path = daemon_log_path()?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("opening {}", log_path.display()))?;
    let exe = std::env::current_exe().context("finding the ollamars executable")?;
    let mut command = std::process::Command::new(exe);
    command
        .arg("serve")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // Its own process group: Ctrl-C in this terminal must not stop the daemon.
        command.process_group(0);
    }
    let mut child = command.spawn().context("starting ollamars serve")?;
    eprintln!(
        "Started the ollamars daemon in the background (pid {}, log {}); stop it with: kill {}",
        child.id(),
        log_path.display(),
        child.id()
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if block_on(client.heartbeat()).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("the daemon exited ({status}); see {}", log_path.display());
        }
        if Instant::now() > deadline {
            anyhow::bail!(
                "the daemon did not answer within a minute; see {}",
                log_path.display()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn daemon_log_path() -> anyhow::Result<PathBuf> {
    let dirs = directories::ProjectDirs::from("", "", "ollamars")
        .context("finding the per-user data directory (is HOME set?)")?;
    let dir = dirs.data_dir();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir.join("serve.log"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values() {
        assert_eq!(parse_think("true").unwrap(), Think::Bool(true));
        assert_eq!(parse_think("false").unwrap(), Think::Bool(false));
        assert_eq!(parse_think("high").unwrap(), Think::Level("high".into()));
        assert!(parse_think("very").is_err());
        assert_eq!(keep_alive_value("5m").unwrap(), json!("5m0s"));
        assert_eq!(keep_alive_value("0").unwrap(), json!(0));
        assert_eq!(keep_alive_value("300").unwrap(), json!(300));
        assert_eq!(keep_alive_value("-1").unwrap(), json!(-1));
        assert_eq!(keep_alive_value("-1m").unwrap(), json!(-1));
        assert!(keep_alive_value("forever").is_err());
        assert_eq!(parse_format("json").unwrap(), json!("json"));
        assert_eq!(
            parse_format(r#"{"type":"object"}"#).unwrap(),
            json!({"type":"object"})
        );
        assert!(parse_format("yaml").is_err());
    }

    /// `--keepalive -1m` takes its value as Ollama's flag parser does, not as another flag.
    #[test]
    fn a_negative_keepalive_is_a_value() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            run: Args,
        }
        let cli = Cli::try_parse_from(["ollamars", "m", "--keepalive", "-1m"]).unwrap();
        assert_eq!(cli.run.keepalive.as_deref(), Some("-1m"));
    }
}
