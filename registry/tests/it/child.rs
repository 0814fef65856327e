//! Registry operations run in a child process (re-executing this test binary), for tests that
//! kill the operation or give it another environment.

use std::process::{Child, Command, Stdio};

use registry::{
    create_from_modelfile, Client, CreateOptions, Modelfile, Name, PullOptions, PushOptions, Store,
};

const ENV: &str = "OLLAMARS_TEST_CHILD_OP";

/// An operation for the child.
#[derive(Clone, Debug)]
pub enum Op {
    Pull,
    /// Chunked (1 MiB) when blobs are larger.
    Push,
    /// Create from the Modelfile `text`, relative paths from `dir`, quantizing to `quantize`.
    Create {
        dir: std::path::PathBuf,
        text: String,
        quantize: Option<String>,
    },
}

/// Starts `pull name into root` in a child process with extra environment variables.
pub fn spawn_pull(root: &std::path::Path, name: &str, env: &[(&str, &str)]) -> Child {
    spawn(&Op::Pull, root, name, env)
}

/// Starts `op` on the model `name` of the store at `root` in a child process.
pub fn spawn(op: &Op, root: &std::path::Path, name: &str, env: &[(&str, &str)]) -> Child {
    let spec = match op {
        Op::Pull => serde_json::json!({ "op": "pull", "root": root, "name": name }),
        Op::Push => serde_json::json!({ "op": "push", "root": root, "name": name }),
        Op::Create { dir, text, quantize } => serde_json::json!({
            "op": "create", "root": root, "name": name, "dir": dir, "text": text, "quantize": quantize
        }),
    };
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child::child_op",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ENV, spec.to_string())
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    // Only the proxy settings a test gives apply to the child.
    for k in [
        "http_proxy",
        "HTTP_PROXY",
        "https_proxy",
        "HTTPS_PROXY",
        "all_proxy",
        "ALL_PROXY",
        "no_proxy",
        "NO_PROXY",
    ] {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().unwrap()
}

/// Runs `op` in this process, as the child does.
pub async fn run(op: &Op, store: &Store, name: &Name) -> registry::Result<()> {
    match op {
        Op::Pull => {
            let opts = PullOptions {
                insecure: true,
                connections: 2,
                chunk_size: 4 << 20,
                ..PullOptions::default()
            };
            Client::new()?.pull(store, name, &opts, &|_| {}).await
        }
        Op::Push => {
            let opts = PushOptions {
                insecure: true,
                chunk_size: 1 << 20,
                ..PushOptions::default()
            };
            Client::new()?.push(store, name, &opts, &|_| {}).await
        }
        Op::Create { dir, text, quantize } => {
            let mf = Modelfile::parse(text)?;
            create_from_modelfile(
                store,
                name,
                &mf,
                dir,
                quantize.as_deref(),
                CreateOptions::default(),
                &|_| {},
            )
            .await
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper: runs in a child process started by other tests"]
async fn child_op() {
    let spec: serde_json::Value =
        serde_json::from_str(&std::env::var(ENV).expect("started by child::spawn")).unwrap();
    let store = Store::open(spec["root"].as_str().unwrap()).unwrap();
    let name = Name::parse(spec["name"].as_str().unwrap()).unwrap();
    let op = match spec["op"].as_str().unwrap() {
        "pull" => Op::Pull,
        "push" => Op::Push,
        _ => Op::Create {
            dir: spec["dir"].as_str().unwrap().into(),
            text: spec["text"].as_str().unwrap().to_string(),
            quantize: spec["quantize"].as_str().map(str::to_string),
        },
    };
    if let Err(e) = run(&op, &store, &name).await {
        eprintln!("CHILD {op:?} FAILED: {e}");
        std::process::exit(3);
    }
}
