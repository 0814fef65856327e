//! The `ollamars` client commands run as a user runs them, against a live daemon: create from a
//! Modelfile (and `-q`), list and ps tables, show sections and flags, cp/rm/stop messages,
//! one-shot run (argument and stdin, `--verbose` stats, `--start-daemon`), push and pull through
//! a local registry (and `run` pulling a missing model) with plain progress lines, errors for
//! unknown models and for a daemon that is not running, and `OLLAMARS_HOST=unix://`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use ollamars_tests::daemon::ollamars_bin;
use ollamars_tests::registry::Registry;
use ollamars_tests::{models, Daemon};

/// `ollamars ARGS` with `OLLAMARS_HOST=host` (nothing else of the test's `OLLAMARS_*`) and
/// `stdin` piped in; stdout and stderr are not terminals, so output is plain.
fn cli_at(host: &str, args: &[&str], stdin: &str) -> Output {
    cli_env(host, args, stdin, &[])
}

/// As [`cli_at`], with more environment variables.
fn cli_env(host: &str, args: &[&str], stdin: &str, env: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(ollamars_bin());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("OLLAMARS_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .args(args)
        .env("OLLAMARS_HOST", host)
        .env("OLLAMARS_NOHISTORY", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running ollamars");
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn cli(d: &Daemon, args: &[&str]) -> Output {
    cli_at(&d.host(), args, "")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn ok(o: Output) -> String {
    assert!(
        o.status.success(),
        "status {}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

/// Fails with exit status 1 and exactly one line on stderr, which is returned.
#[track_caller]
fn fails_with_one_line(o: Output) -> String {
    assert_eq!(o.status.code(), Some(1), "{}\n{}", stdout(&o), stderr(&o));
    let err = stderr(&o);
    assert_eq!(err.lines().count(), 1, "{err:?}");
    err.trim_end().to_string()
}

/// Columns of a table line (separated by two or more spaces).
fn columns(line: &str) -> Vec<String> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(String::from)
        .collect()
}

fn write_modelfile(dir: &Path, gguf: &Path, extra: &str) -> String {
    let path = dir.join("Modelfile");
    std::fs::write(&path, format!("FROM {}\n{extra}", gguf.display())).unwrap();
    path.to_string_lossy().into_owned()
}

#[test]
fn create_list_show_cp_rm_against_a_live_daemon() {
    let d = Daemon::start();
    let modelfile = write_modelfile(
        d.temp_dir(),
        &models::tiny_llama(),
        "PARAMETER temperature 0.25\nPARAMETER num_predict 4\nSYSTEM \"\"\"You are terse.\"\"\"\nLICENSE \"\"\"Tiny License 1.0\"\"\"\nTEMPLATE \"\"\"{{ .System }} USER: {{ .Prompt }} ASSISTANT:\"\"\"\n",
    );
    let out = cli(&d, &["create", "tiny", "-f", &modelfile]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Not a terminal: plain progress lines on stderr, ending in success.
    let progress = stderr(&out);
    assert!(
        progress
            .lines()
            .any(|l| l.starts_with("gathering model components")),
        "{progress}"
    );
    assert_eq!(progress.lines().last(), Some("success"), "{progress}");

    // list: Ollama's columns, the model with a 12-digit id, a human size and time.
    let list = ok(cli(&d, &["list"]));
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(columns(lines[0]), ["NAME", "ID", "SIZE", "MODIFIED"], "{list}");
    let row = columns(lines[1]);
    assert_eq!(row[0], "tiny:latest", "{list}");
    assert_eq!(row[1].len(), 12);
    assert!(row[1].chars().all(|c| c.is_ascii_hexdigit()), "{list}");
    assert!(row[2].ends_with(" KB") || row[2].ends_with(" MB"), "{list}");
    assert!(row[3].ends_with(" ago"), "{list}");
    // Columns line up: each header starts where its cells start.
    let id_col = lines[0].find("ID").unwrap();
    assert_eq!(lines[1].find(&row[1]), Some(id_col), "{list}");
    assert_eq!(ok(cli(&d, &["ls"])), list);

    // show: the sections, then each flag alone.
    let show = ok(cli(&d, &["show", "tiny"]));
    for section in ["  Model\n", "  Parameters\n", "  System\n", "  License\n"] {
        assert!(show.contains(section), "{section:?} missing:\n{show}");
    }
    assert!(show.contains("    architecture        llama"), "{show}");
    assert!(show.contains("    quantization        Q8_0"), "{show}");
    assert!(show.contains("    temperature    0.25"), "{show}");
    assert!(show.contains("    You are terse."), "{show}");
    assert!(show.contains("    Tiny License 1.0"), "{show}");
    let params = ok(cli(&d, &["show", "tiny", "--parameters"]));
    assert!(
        params.lines().any(|l| columns(l) == ["temperature", "0.25"]),
        "{params}"
    );
    assert!(
        params.lines().any(|l| columns(l) == ["num_predict", "4"]),
        "{params}"
    );
    assert_eq!(ok(cli(&d, &["show", "tiny", "--system"])), "You are terse.");
    assert_eq!(ok(cli(&d, &["show", "tiny", "--license"])), "Tiny License 1.0\n");
    let mf = ok(cli(&d, &["show", "tiny", "--modelfile"]));
    assert!(mf.lines().any(|l| l.starts_with("FROM ")), "{mf}");
    assert!(mf.contains("PARAMETER temperature 0.25"), "{mf}");
    assert_eq!(
        ok(cli(&d, &["show", "tiny", "--template"])),
        "{{ .System }} USER: {{ .Prompt }} ASSISTANT:"
    );
    let verbose = ok(cli(&d, &["show", "-v", "tiny"]));
    assert!(verbose.contains("  Metadata\n"), "{verbose}");
    assert!(verbose.contains("    general.architecture"), "{verbose}");
    assert!(verbose.contains("  Tensors\n"), "{verbose}");
    assert!(verbose.contains("    token_embd.weight"), "{verbose}");
    assert!(!show.contains("  Tensors\n"), "{show}");
    let both = cli(&d, &["show", "tiny", "--system", "--license"]);
    assert_eq!(both.status.code(), Some(2), "clap refuses two parts");

    // cp and rm, with Ollama's messages.
    assert_eq!(
        ok(cli(&d, &["cp", "tiny", "tiny2"])),
        "copied 'tiny' to 'tiny2'\n"
    );
    let list = ok(cli(&d, &["list"]));
    assert_eq!(list.lines().count(), 3, "{list}");
    let ids: Vec<String> = list.lines().skip(1).map(|l| columns(l)[1].clone()).collect();
    assert_eq!(ids[0], ids[1], "a copy has the same manifest digest:\n{list}");
    assert_eq!(ok(cli(&d, &["rm", "tiny2"])), "deleted 'tiny2'\n");
    let list = ok(cli(&d, &["list"]));
    assert_eq!(list.lines().count(), 2, "{list}");
    assert!(list.contains("tiny:latest") && !list.contains("tiny2"), "{list}");
    assert_eq!(ok(cli(&d, &["list", "nomatch"])).lines().count(), 1);
}

#[test]
fn run_ps_and_stop() {
    let d = Daemon::start();
    d.create_model_with(
        "tiny",
        &models::tiny_llama(),
        serde_json::json!({"parameters": {"num_predict": 5, "seed": 7}}),
    );
    // Nothing loaded yet: just the header.
    assert_eq!(
        columns(ok(cli(&d, &["ps"])).lines().next().unwrap()),
        ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"]
    );

    // One-shot with a prompt argument: the answer on stdout, the stats on stderr.
    let out = cli(&d, &["run", "--verbose", "tiny", "hello"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).trim().is_empty(), "no answer: {out:?}");
    let stats = stderr(&out);
    for line in [
        "total duration:",
        "load duration:",
        "prompt eval count:",
        "prompt eval rate:",
        "eval count:           5 token(s)",
        "eval duration:",
        "eval rate:",
    ] {
        assert!(stats.contains(line), "{line:?} missing:\n{stats}");
    }
    // The same seed and prompt piped in give the same answer (greedy or seeded sampling).
    let piped = cli_at(&d.host(), &["run", "tiny"], "hello");
    assert_eq!(ok(piped), stdout(&out));

    // ps: the loaded model with Ollama's columns.
    let ps = ok(cli(&d, &["ps"]));
    let lines: Vec<&str> = ps.lines().collect();
    assert_eq!(lines.len(), 2, "{ps}");
    let row = columns(lines[1]);
    assert_eq!(row[0], "tiny:latest", "{ps}");
    assert_eq!(row[3], "100% CPU", "{ps}");
    assert!(row[4].parse::<u32>().unwrap() > 0, "{ps}");
    assert!(row[5].ends_with("from now"), "{ps}");

    // stop unloads it.
    ok(cli(&d, &["stop", "tiny"]));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let ps = ok(cli(&d, &["ps"]));
        if ps.lines().count() == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "still loaded after stop:\n{ps}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn unknown_models_are_one_line_errors() {
    let d = Daemon::start();
    assert_eq!(
        fails_with_one_line(cli(&d, &["show", "nosuch"])),
        "Error: model 'nosuch' not found"
    );
    assert_eq!(
        fails_with_one_line(cli(&d, &["rm", "nosuch"])),
        "Error: model 'nosuch' not found"
    );
    assert_eq!(
        fails_with_one_line(cli(&d, &["stop", "nosuch"])),
        "Error: couldn't find model \"nosuch\" to stop"
    );
    let err = fails_with_one_line(cli(&d, &["cp", "nosuch", "other"]));
    assert!(err.contains("nosuch"), "{err}");
    let err = fails_with_one_line(cli(&d, &["create", "../../etc/passwd", "-f", "/dev/null"]));
    assert_eq!(err.matches("invalid model name").count(), 1, "{err}");
    // A Modelfile's file that is not there: named with the Modelfile and its line, as its
    // parse errors are.
    let dir = tempfile::tempdir().unwrap();
    let modelfile = dir.path().join("Modelfile");
    std::fs::write(&modelfile, "FROM ./nofile.gguf\n").unwrap();
    let o = cli(&d, &["create", "m", "-f", &modelfile.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(
        stderr(&o).lines().last().unwrap_or_default(),
        format!(
            "Error: {}: (line 1): ./nofile.gguf: no such file or directory",
            modelfile.display()
        )
    );
    // Neither a file nor a directory; an endless Modelfile is read only so far.
    std::fs::write(&modelfile, "FROM /dev/null\n").unwrap();
    let o = cli(&d, &["create", "m", "-f", &modelfile.to_string_lossy()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(
        err.trim_end()
            .ends_with("(line 1): /dev/null: not a regular file or a directory"),
        "{err}"
    );
    let err = fails_with_one_line(cli(&d, &["create", "m", "-f", "/dev/zero"]));
    assert_eq!(err, "Error: the Modelfile /dev/zero is larger than 64 MiB");
    // Deprecated parameters are dropped with a warning, as Ollama prints one.
    std::fs::write(
        &modelfile,
        format!("FROM {}\nPARAMETER mirostat 1\n", models::tiny_llama().display()),
    )
    .unwrap();
    let o = cli(&d, &["create", "m", "-f", &modelfile.to_string_lossy()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "warning: {} (line 2): parameter mirostat is deprecated",
            modelfile.display()
        )),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_stopped_daemon_is_one_clear_line() {
    // A port nothing listens on (the daemon that had it is gone).
    let mut d = Daemon::start();
    let host = d.host();
    d.terminate(Duration::from_secs(30)).expect("the daemon stops");
    for args in [
        &["list"][..],
        &["ps"],
        &["show", "m"],
        &["run", "m", "hi"],
        &["pull", "m"],
        &["push", "h.example/n/m"],
        &["rm", "m"],
        &["cp", "a", "b"],
        &["stop", "m"],
    ] {
        let err = fails_with_one_line(cli_at(&host, args, ""));
        assert_eq!(
            err,
            format!(
                "Error: could not connect to ollamars at {host}: is the daemon running? Start it with \"ollamars serve\""
            ),
            "{args:?}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let modelfile = write_modelfile(dir.path(), &models::tiny_llama(), "");
    let err = fails_with_one_line(cli_at(&host, &["create", "m", "-f", &modelfile], ""));
    assert!(err.contains("is the daemon running?"), "{err}");
}

#[test]
fn clients_reach_a_daemon_on_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("ollamars.sock");
    let host = format!("unix://{}", socket.display());
    // No daemon yet: the same one-line error, naming the socket.
    let err = fails_with_one_line(cli_at(&host, &["list"], ""));
    assert!(err.contains(&host) && err.contains("ollamars serve"), "{err}");

    let log = std::fs::File::create(dir.path().join("serve.log")).unwrap();
    let mut cmd = Command::new(ollamars_bin());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("OLLAMARS_") {
            cmd.env_remove(k);
        }
    }
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, "").unwrap();
    let mut serve = cmd
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .env("OLLAMARS_HOST", &host)
        .env("OLLAMARS_MODELS", dir.path().join("models"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    struct Kill<'a>(&'a mut std::process::Child);
    impl Drop for Kill<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let serve = Kill(&mut serve);
    let deadline = Instant::now() + Duration::from_secs(60);
    let list = loop {
        let out = cli_at(&host, &["list"], "");
        if out.status.success() {
            break stdout(&out);
        }
        let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "no answer on {host}:\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        columns(list.lines().next().unwrap()),
        ["NAME", "ID", "SIZE", "MODIFIED"]
    );
    let modelfile = write_modelfile(dir.path(), &models::tiny_llama(), "PARAMETER num_predict 3\n");
    ok(cli_at(&host, &["create", "tiny", "-f", &modelfile], ""));
    assert!(ok(cli_at(&host, &["list"], "")).contains("tiny:latest"));
    // Every other client command goes over the socket too.
    assert!(ok(cli_at(&host, &["show", "tiny"], "")).contains("  Model\n"));
    ok(cli_at(&host, &["cp", "tiny", "tiny2"], ""));
    let answer = ok(cli_at(&host, &["run", "tiny2", "--verbose"], "hello"));
    assert!(!answer.trim().is_empty(), "no answer");
    assert!(ok(cli_at(&host, &["ps"], "")).contains("tiny2:latest"));
    ok(cli_at(&host, &["stop", "tiny2"], ""));
    assert_eq!(ok(cli_at(&host, &["rm", "tiny2"], "")), "deleted 'tiny2'\n");
    // pull and push reach the daemon too: it refuses an invalid name (no network needed).
    for args in [&["pull", "../etc/passwd"][..], &["push", "../etc/passwd"]] {
        let err = fails_with_one_line(cli_at(&host, args, ""));
        assert_eq!(err.matches("invalid model name").count(), 1, "{args:?}: {err}");
    }
    drop(serve);
}

#[test]
fn create_quantizes_with_q() {
    let d = Daemon::start();
    let f16 = models::tiny("tiny-llama-spm-e64-f16.gguf");
    let modelfile = write_modelfile(d.temp_dir(), &f16, "");
    let out = cli(&d, &["create", "tinyq", "-f", &modelfile, "-q", "q4_0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).lines().any(|l| l.contains("quantizing")),
        "{}",
        stderr(&out)
    );
    let show = ok(cli(&d, &["show", "tinyq"]));
    assert!(show.contains("    quantization        Q4_0"), "{show}");
    let out = cli(&d, &["create", "tinybad", "-f", &modelfile, "-q", "q9_9"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
}

/// Lines of plain progress (not a terminal): no cursor movements, the last one `success`.
#[track_caller]
fn plain_progress(out: &Output) -> Vec<String> {
    let err = stderr(out);
    assert!(
        !err.contains('\x1b'),
        "escape sequences in plain progress:\n{err}"
    );
    let lines: Vec<String> = err.lines().map(String::from).collect();
    assert_eq!(lines.last().map(String::as_str), Some("success"), "{err}");
    lines
}

#[test]
fn push_pull_and_run_pull_through_a_registry() {
    let reg = Registry::start();
    let d = Daemon::start();
    d.create_model_with(
        "tiny",
        &models::tiny_llama(),
        serde_json::json!({"parameters": {"num_predict": 3, "seed": 1}}),
    );
    let name = format!("{}/library/tiny:latest", reg.host());
    ok(cli(&d, &["cp", "tiny", &name]));

    let out = cli(&d, &["push", "--insecure", &name]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines = plain_progress(&out);
    assert_eq!(lines[0], "retrieving manifest", "{lines:?}");
    assert!(lines.iter().any(|l| l == "pushing manifest"), "{lines:?}");
    assert!(
        stdout(&out).contains(&format!("You can find your model at:\n\n\t{name}")),
        "{}",
        stdout(&out)
    );

    // rm takes several names; then the store has none.
    assert_eq!(
        ok(cli(&d, &["rm", &name, "tiny"])),
        format!("deleted '{name}'\ndeleted 'tiny'\n")
    );
    assert_eq!(ok(cli(&d, &["list"])).lines().count(), 1);

    let out = cli(&d, &["pull", "--insecure", &name]);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines = plain_progress(&out);
    assert_eq!(lines[0], "pulling manifest", "{lines:?}");
    // The model blob gets a line per tenth at most, the last one at 100% with its size.
    let size = std::fs::metadata(models::tiny_llama()).unwrap().len();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("pulling ") && l.contains(": 100% (")),
        "{lines:?}"
    );
    assert!(
        lines.len() < 40,
        "too many progress lines for a {size} byte model: {lines:?}"
    );
    for status in ["verifying sha256 digest", "writing manifest"] {
        assert!(lines.iter().any(|l| l == status), "{status} missing: {lines:?}");
    }
    assert!(ok(cli(&d, &["list"])).contains(&name));

    // run pulls a model the store does not have, then answers.
    ok(cli(&d, &["rm", &name]));
    let out = cli(&d, &["run", "--insecure", &name, "hello"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).lines().next() == Some("pulling manifest"),
        "{}",
        stderr(&out)
    );
    assert!(!stdout(&out).trim().is_empty(), "no answer");

    // A name the registry does not have: one line, exit 1.
    let missing = format!("{}/library/nosuch:latest", reg.host());
    let out = cli(&d, &["pull", "--insecure", &missing]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let last = stderr(&out).lines().last().unwrap_or("").to_string();
    assert!(last.starts_with("Error: "), "{}", stderr(&out));
}

#[test]
fn run_starts_a_daemon_when_asked() {
    // A store with a model, and no daemon on its port any more.
    let mut d = Daemon::start();
    d.create_model_with(
        "tiny",
        &models::tiny_llama(),
        serde_json::json!({"parameters": {"num_predict": 3}}),
    );
    d.terminate(Duration::from_secs(30)).expect("the daemon stops");
    let host = d.host();
    let home = tempfile::tempdir().unwrap();
    let env = [("HOME", home.path()), ("OLLAMARS_MODELS", d.models_dir())];
    // Without the flag: the one-line error.
    let err = fails_with_one_line(cli_env(&host, &["run", "tiny", "hi"], "", &env));
    assert!(err.contains("is the daemon running?"), "{err}");

    let out = cli_env(&host, &["run", "--start-daemon", "tiny", "hi"], "", &env);
    // The daemon runs on in its own process group: find it to stop it whatever happens next.
    let pid = stderr(&out)
        .split("(pid ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|p| p.parse::<u32>().ok());
    struct KillOnDrop(Option<u32>);
    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            if let Some(pid) = self.0 {
                let _ = Command::new("kill").arg(pid.to_string()).status();
            }
        }
    }
    let _daemon = KillOnDrop(pid);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(pid.is_some(), "{}", stderr(&out));
    assert!(!stdout(&out).trim().is_empty(), "no answer");
    let log = home.path().join(".local/share/ollamars/serve.log");
    assert!(log.exists(), "no daemon log at {}", log.display());
    // It is still there for the next command, which needs no flag.
    assert!(ok(cli_env(&host, &["list"], "", &env)).contains("tiny:latest"));
    // A second --start-daemon finds it and starts nothing.
    let out = cli_env(&host, &["run", "--start-daemon", "tiny", "hi"], "", &env);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("Started"), "{}", stderr(&out));
}

/// `ollamars show m --modelfile | head -1` and the like: output to a reader that has gone away
/// ends the command quietly with status 0, not a panic (status 101 and a backtrace) or an
/// error line.
#[test]
fn output_to_a_closed_pipe_ends_quietly() {
    let d = Daemon::start();
    d.create_model("m", &models::tiny_llama());
    let tiny = models::tiny_llama();
    for args in [
        &["show", "m", "--modelfile"][..],
        &["show", "m"],
        &["list"],
        &["tokenize", "-m", &tiny.to_string_lossy(), "hello world"],
        &["inspect", &tiny.to_string_lossy()],
    ] {
        let mut child = Command::new(ollamars_bin())
            .args(args)
            .env("OLLAMARS_HOST", d.host())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running ollamars");
        // The reading end closes before anything is written.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert_eq!(stderr(&o), "", "{args:?}");
    }
}
