//! The interactive chat of `ollamars run MODEL`, driven through a pseudo-terminal as a user
//! types it, against a live daemon: `/set parameter`, a streamed answer with `--verbose` stats,
//! Ctrl-C in the middle of an answer (the chat stays), a `"""` multi-line message, `/show`,
//! `/save`, `/bye`; and with a tiny model `/set system`, Ctrl-C on an empty line, the other
//! `/` commands (`/?`, `/show`, `/set verbose|quiet|format`, `/clear`, `/load`), the history file
//! and Ctrl-D.
//!
//! `pull` on a terminal shows a bar per layer.
//!
//! Nothing here depends on timing: every step waits (with a generous bound, for a loaded
//! 2-core machine) for what the terminal shows, and input is typed only at a prompt.

use std::io::{Read, Write};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, Child, CommandBuilder, PtySize};
use serde_json::{json, Value};

use ollamars_tests::daemon::{ollamars_bin, sha256_file};
use ollamars_tests::registry::Registry;
use ollamars_tests::{models, Daemon};

/// How long one step (a load, an answer of 64 tokens of a real model) may take.
const STEP: Duration = Duration::from_secs(300);

/// `ollamars run MODEL` on a pseudo-terminal; everything it writes is collected by a thread.
struct Repl {
    child: Box<dyn Child + Send + Sync>,
    input: Box<dyn Write + Send>,
    output: Arc<(Mutex<Vec<u8>>, Condvar)>,
    /// Where in the plain text the next `expect` starts looking.
    pos: usize,
    /// Kept open so the terminal stays alive until the test ends.
    _master: Box<dyn portable_pty::MasterPty + Send>,
}

impl Repl {
    /// Starts `ollamars args…` (`run MODEL`, `pull …`) against `daemon`, with `home` as HOME
    /// (history file) and no other `OLLAMARS_*` setting.
    fn start(daemon: &Daemon, home: &Path, args: &[&str]) -> Repl {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: 50,
                cols: 200,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("a pseudo-terminal");
        let mut cmd = CommandBuilder::new(ollamars_bin());
        cmd.args(args);
        cmd.env_clear();
        cmd.env("HOME", home);
        cmd.env("TERM", "xterm-256color");
        cmd.env("LANG", "C.UTF-8");
        cmd.env("OLLAMARS_HOST", daemon.host());
        cmd.env("NO_PROXY", "127.0.0.1,localhost");
        let child = pair.slave.spawn_command(cmd).expect("starting ollamars");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().expect("the terminal's output");
        let input = pair.master.take_writer().expect("the terminal's input");
        let output = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let sink = output.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends when the terminal closes (EIO once the child is gone and the master dropped).
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.0.lock().unwrap().extend_from_slice(&buf[..n]);
                sink.1.notify_all();
            }
        });
        Repl {
            child,
            input,
            output,
            pos: 0,
            _master: pair.master,
        }
    }

    /// Everything shown so far, as plain text (escape sequences and carriage returns removed).
    fn screen(&self) -> String {
        plain(&self.output.0.lock().unwrap())
    }

    /// Waits until `needle` appears after the current position, moves past it, and returns the
    /// text between the old position and the end of `needle`.
    #[track_caller]
    fn expect(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + STEP;
        let (lock, cvar) = &*self.output;
        let mut raw = lock.lock().unwrap();
        loop {
            let text = plain(&raw);
            if let Some(i) = text.get(self.pos..).and_then(|t| t.find(needle)) {
                let end = self.pos + i + needle.len();
                let seen = text[self.pos..end].to_string();
                self.pos = end;
                return seen;
            }
            let now = Instant::now();
            assert!(
                now < deadline,
                "{needle:?} did not appear within {STEP:?}; the terminal shows (from the end of the last \
                 match, marked <<<HERE>>>):\n{}<<<HERE>>>{}",
                tail(&text[..self.pos], 3000),
                text.get(self.pos..).unwrap_or("")
            );
            raw = cvar.wait_timeout(raw, deadline - now).unwrap().0;
        }
    }

    /// Waits for the next `>>> ` prompt (the chat reads a new entry) and returns what came
    /// before it.
    #[track_caller]
    fn prompt(&mut self) -> String {
        self.expect(">>> ")
    }

    /// Types `text` and Enter.
    fn line(&mut self, text: &str) {
        self.keys(&format!("{text}\r"));
    }

    fn keys(&mut self, keys: &str) {
        self.input.write_all(keys.as_bytes()).unwrap();
        self.input.flush().unwrap();
    }

    /// Types `text` and Enter at a prompt, and waits until the line is echoed back: what the
    /// program prints next comes after this position.
    #[track_caller]
    fn enter(&mut self, text: &str) {
        self.line(text);
        // rustyline redraws the line while it is typed and once more on Enter; only that last
        // copy is followed by the newline.
        self.expect(&format!("{text}\n"));
    }

    /// Caps the answer at `num_predict` tokens, then sends one message typed over two lines
    /// between `"""` (the second prompt is `... `).
    #[track_caller]
    fn send_two_line_message(&mut self, num_predict: u32) {
        self.enter(&format!("/set parameter num_predict {num_predict}"));
        self.prompt();
        self.enter(r#""""Say hello"#);
        self.expect("... ");
        self.enter(r#"in French.""""#);
    }

    /// Waits for the program to exit (bounded) and returns whether it exited with status 0.
    #[track_caller]
    fn exit_status(&mut self) -> portable_pty::ExitStatus {
        let deadline = Instant::now() + STEP;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "ollamars run did not exit:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Repl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Terminal output as plain text: CSI (`ESC [ … final`), OSC (`ESC ] … BEL|ST`) and other
/// two-byte escapes removed, carriage returns dropped, the rest decoded leniently.
fn plain(raw: &[u8]) -> String {
    // A character cut in two at the end is left for the next look, so that positions in the
    // text stay valid as it grows.
    let raw = match std::str::from_utf8(raw) {
        Err(e) if e.error_len().is_none() => &raw[..e.valid_up_to()],
        _ => raw,
    };
    let text = String::from_utf8_lossy(raw);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => match chars.next() {
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('\x40'..='\x7e').contains(&c) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    while let Some(c) = chars.next() {
                        if c == '\x07' || (c == '\x1b' && chars.next_if_eq(&'\\').is_some()) {
                            break;
                        }
                    }
                }
                _ => {}
            },
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

/// The last `n` bytes of `text` (or a little more, to a character boundary).
fn tail(text: &str, n: usize) -> &str {
    let mut start = text.len().saturating_sub(n);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    &text[start..]
}

/// The `eval count:` of a `--verbose` stats block, if the text has one.
fn eval_count(text: &str) -> Option<u32> {
    let line = text.lines().find(|l| l.starts_with("eval count:"))?;
    line.trim_start_matches("eval count:")
        .trim()
        .trim_end_matches("token(s)")
        .trim()
        .parse()
        .ok()
}

/// Whether a model's answer (not the spinner, which is braille, nor blank lines) is in `text`.
fn has_words(text: &str) -> bool {
    text.chars().any(|c| c.is_ascii_alphanumeric())
}

#[test]
fn chat_with_a_real_model_through_a_terminal() {
    let d = Daemon::start();
    d.create_model("gemma", &models::gemma());
    let home = tempfile::tempdir().unwrap();
    let mut repl = Repl::start(&d, home.path(), &["run", "gemma", "--verbose"]);
    repl.prompt();

    for (line, shown) in [
        (
            "/set parameter num_predict 64",
            "Set parameter 'num_predict' to '64'",
        ),
        ("/set parameter seed 42", "Set parameter 'seed' to '42'"),
        (
            "/set parameter temperature 0.7",
            "Set parameter 'temperature' to '0.7'",
        ),
    ] {
        repl.enter(line);
        repl.expect(shown);
        repl.prompt();
    }

    // A question, a streamed answer, the stats block (--verbose), a new prompt.
    repl.enter("Why is the sky blue?");
    let answer = repl.expect("eval count:");
    assert!(has_words(&answer), "no answer text before the stats:\n{answer}");
    let stats = repl.prompt();
    let n = eval_count(&format!("eval count:{stats}")).expect("an eval count");
    assert!((1..=64).contains(&n), "num_predict 64 gave {n} tokens:\n{stats}");
    for line in ["eval duration:", "eval rate:"] {
        assert!(stats.contains(line), "{line:?} missing:\n{stats}");
    }

    // A long answer, stopped by Ctrl-C once its first words are on the screen: the chat goes
    // on at a new prompt, without the stats of a finished answer nor the "how to leave" hint.
    repl.enter("/set parameter num_predict 2000");
    repl.prompt();
    repl.enter("Write a long story about a dragon who learns to bake bread.");
    let start = repl.pos;
    let deadline = Instant::now() + STEP;
    while !repl.screen().get(start..).is_some_and(has_words) {
        assert!(Instant::now() < deadline, "no answer:\n{}", repl.screen());
        std::thread::sleep(Duration::from_millis(20));
    }
    repl.keys("\x03");
    let stopped = repl.prompt();
    assert!(
        !stopped.contains("eval count:"),
        "the answer ran to its end before Ctrl-C:\n{stopped}"
    );
    assert!(!stopped.contains("Use Ctrl + d"), "{stopped}");

    // The chat still works: a multi-line message with """, answered in full.
    repl.send_two_line_message(64);
    let answer = repl.expect("eval count:");
    assert!(has_words(&answer), "{answer}");
    repl.prompt();

    // The parameters set in this session, after the model's own.
    repl.enter("/show parameters");
    let shown = repl.prompt();
    assert!(shown.contains("User defined parameters:"), "{shown}");
    for (name, value) in [("num_predict", "64"), ("seed", "42"), ("temperature", "0.7")] {
        assert!(
            shown
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == [name, value]),
            "{name} {value} missing:\n{shown}"
        );
    }

    // /save keeps the conversation: the multi-line message is one message, and the answer
    // stopped by Ctrl-C is kept as it was.
    repl.enter("/save gemma-chat");
    repl.expect("Created new model 'gemma-chat'");
    repl.prompt();
    let saved = d.post_ok("/api/show", &json!({"model": "gemma-chat"}));
    let messages = saved["messages"].as_array().cloned().unwrap_or_default();
    let users: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(
        users,
        [
            "Why is the sky blue?",
            "Write a long story about a dragon who learns to bake bread.",
            "Say hello\nin French."
        ],
        "{saved}"
    );
    let answers: Vec<&Value> = messages.iter().filter(|m| m["role"] == "assistant").collect();
    assert_eq!(answers.len(), 3, "{saved}");
    assert_eq!(
        saved["parameters"].as_str().map(|p| p.contains("seed")),
        Some(true),
        "{saved}"
    );

    repl.enter("/bye");
    let status = repl.exit_status();
    assert!(status.success(), "/bye exited with {status:?}");
}

#[test]
fn system_message_history_and_ctrl_d() {
    let d = Daemon::start();
    d.create_model("tiny", &models::tiny_llama());
    let home = tempfile::tempdir().unwrap();
    let mut repl = Repl::start(&d, home.path(), &["run", "tiny"]);
    repl.prompt();

    repl.enter("/set system You are terse.");
    repl.expect("Set system message.");
    repl.prompt();
    repl.enter("/show system");
    repl.expect("You are terse.");
    repl.prompt();

    // Ctrl-C on an empty line says how to leave and stays.
    repl.keys("\x03");
    repl.expect("Use Ctrl + d or /bye to exit.");
    repl.prompt();
    // Ctrl-C on a line being typed drops it, silently.
    repl.keys("half a line\x03");
    let after = repl.prompt();
    assert!(!after.contains("Use Ctrl + d"), "{after}");

    // A multi-line message is one message: the model answers once, then the prompt is back.
    repl.send_two_line_message(3);
    repl.prompt();

    // The other commands, each with what it shows.
    d.create_model("tiny2", &models::tiny_llama());
    for (line, shown) in [
        ("/?", "Available Commands:"),
        ("/? set", "/set parameter ...     Set a parameter"),
        ("/show info", "architecture        llama"),
        ("/show modelfile", "FROM "),
        ("/show license", "No license was specified for this model."),
        ("/set verbose", "Set 'verbose' mode."),
        ("hello", "eval count:"),
        ("/set format json", "Set format to 'json' mode."),
        ("hello again", "eval count:"),
        ("/set noformat", "Disabled format."),
        ("/set quiet", "Set 'quiet' mode."),
        ("/clear", "Cleared session context"),
        ("/load nosuch", "Couldn't find model 'nosuch'"),
        ("/load tiny2", "Loading model 'tiny2'"),
    ] {
        repl.enter(line);
        repl.expect(shown);
        repl.prompt();
    }
    // After /set quiet and /load, an answer comes without the stats.
    repl.enter("bye now");
    let answer = repl.prompt();
    assert!(!answer.contains("eval count:"), "{answer}");

    repl.enter("/show nonsense");
    repl.expect("Unknown command '/show nonsense'");
    repl.prompt();

    // Ctrl-D on an empty line leaves, with status 0.
    repl.keys("\x04");
    let status = repl.exit_status();
    assert!(status.success(), "Ctrl-D exited with {status:?}");

    // Every entered line is in the history file, in order; the dropped one is not.
    let history =
        std::fs::read_to_string(home.path().join(".local/share/ollamars/history")).expect("the history file");
    let entered = [
        "/set system You are terse.",
        "/show system",
        "/set parameter num_predict 3",
        r#""""Say hello"#,
        r#"in French.""""#,
        "/show nonsense",
    ];
    let lines: Vec<&str> = history
        .lines()
        .filter(|l| entered.contains(l) || l.contains("half"))
        .collect();
    assert_eq!(lines, entered, "{history}");
}

/// Lines typed before the chat is ready (while the model loads) and several lines arriving at
/// once (pasted without bracketed paste, or typed during an answer) are each entered, in
/// order: the line editor keeps what it read past the first line for the next one.
#[test]
fn lines_typed_ahead_are_all_entered() {
    let d = Daemon::start();
    d.create_model("tiny", &models::tiny_llama());
    let home = tempfile::tempdir().unwrap();
    let mut repl = Repl::start(&d, home.path(), &["run", "tiny"]);
    // Before the first prompt: the terminal is still in cooked mode and holds the lines.
    repl.line("/set system Typed ahead.");
    repl.line("/show system");
    repl.expect("Set system message.");
    repl.expect("Typed ahead.");
    repl.prompt();
    // At a prompt, two lines in one write.
    repl.keys("/set parameter num_predict 2\r/show parameters\r");
    repl.expect("Set parameter 'num_predict' to '2'");
    repl.expect("User defined parameters:");
    repl.expect("num_predict");
    repl.prompt();
    repl.line("/bye");
    let status = repl.exit_status();
    assert!(status.success(), "/bye exited with {status:?}");
}

#[test]
fn pull_shows_a_bar_per_layer_on_a_terminal() {
    let reg = Registry::start();
    let d = Daemon::start();
    d.create_model("tiny", &models::tiny_llama());
    let name = format!("{}/library/tiny:latest", reg.host());
    let copied = d.post("/api/copy", &json!({"source": "tiny", "destination": name}));
    assert_eq!(copied.status(), 200);
    let pushed = d.post_ok(
        "/api/push",
        &json!({"model": name, "insecure": true, "stream": false}),
    );
    assert_eq!(pushed["status"], "success", "{pushed}");
    for model in ["tiny", name.as_str()] {
        assert_eq!(d.delete_model(model).status(), 200);
    }

    let home = tempfile::tempdir().unwrap();
    let mut pull = Repl::start(&d, home.path(), &["pull", "--insecure", &name]);
    pull.expect("pulling manifest");
    // The model layer's bar: its short digest, the percentage, the bar, the size.
    let digest = sha256_file(&models::tiny_llama());
    let short = &digest["sha256:".len().."sha256:".len() + 12];
    pull.expect(&format!("pulling {short}: 100% \u{2595}"));
    let rest = pull.expect("\u{258f} ");
    assert!(rest.contains('\u{2588}'), "no filled bar: {rest:?}");
    pull.expect("verifying sha256 digest");
    pull.expect("writing manifest");
    pull.expect("success");
    let status = pull.exit_status();
    assert!(
        status.success(),
        "pull exited with {status:?}:\n{}",
        pull.screen()
    );
    let tags = d.get("/api/tags").text().unwrap();
    assert!(tags.contains(&name), "{tags}");
}
