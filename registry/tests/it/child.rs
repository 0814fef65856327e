//! A pull run in a child process (re-executing this test binary), for tests that kill the
//! puller or give it another environment.

use std::process::{Child, Command, Stdio};

use registry::{Client, Name, PullOptions, Store};

const ENV: &str = "OLLAMARS_TEST_CHILD_PULL";

/// Starts `pull name into root` in a child process with extra environment variables.
pub fn spawn_pull(root: &std::path::Path, name: &str, env: &[(&str, &str)]) -> Child {
    let spec = serde_json::json!({ "root": root, "name": name }).to_string();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "child::child_pull",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(ENV, spec)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "helper: runs in a child process started by other tests"]
async fn child_pull() {
    let spec: serde_json::Value =
        serde_json::from_str(&std::env::var(ENV).expect("started by spawn_pull")).unwrap();
    let store = Store::open(spec["root"].as_str().unwrap()).unwrap();
    let name = Name::parse(spec["name"].as_str().unwrap()).unwrap();
    let opts = PullOptions {
        insecure: true,
        connections: 2,
        chunk_size: 4 << 20,
        ..PullOptions::default()
    };
    if let Err(e) = Client::new().unwrap().pull(&store, &name, &opts, &|_| {}).await {
        eprintln!("CHILD PULL FAILED: {e}");
        std::process::exit(3);
    }
}
