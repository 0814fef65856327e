//! Pull, push and import with the registry library directly, for benchmarks and manual checks
//! (the `ollamars` CLI does these through the daemon).
//!
//! ```text
//! cargo run --release -p registry --example transfer -- pull --models DIR [--insecure] [--connections N] [--chunk-mib M] NAME
//! cargo run --release -p registry --example transfer -- push --models DIR [--insecure] NAME
//! cargo run --release -p registry --example transfer -- import --models DIR NAME FILE
//! ```
//!
//! `import` stores FILE as the single model layer of NAME (any bytes, not only GGUF), so blobs of
//! any size can be pushed and pulled. Each command prints one line: bytes, seconds, MB/s.

use std::path::PathBuf;
use std::time::Instant;

use registry::manifest::media;
use registry::{Client, Layer, Manifest, Name, Progress, PullOptions, PushOptions, Store};

fn usage() -> ! {
    eprintln!(
        "usage: transfer pull|push --models DIR [--insecure] [--connections N] [--chunk-mib M] NAME\n       transfer import --models DIR NAME FILE"
    );
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let cmd = args.next().unwrap_or_else(|| usage());
    let (mut models, mut insecure, mut connections, mut chunk_mib, mut rest) =
        (None, false, None, None, Vec::new());
    while let Some(a) = args.next() {
        match a.as_str() {
            "--models" => models = args.next().map(PathBuf::from),
            "--insecure" => insecure = true,
            "--connections" => connections = args.next().and_then(|v| v.parse().ok()),
            "--chunk-mib" => chunk_mib = args.next().and_then(|v| v.parse::<u64>().ok()),
            _ => rest.push(a),
        }
    }
    let store = match models {
        Some(m) => Store::open(m),
        None => Store::open_default(),
    }
    .unwrap_or_else(|e| fail(e));
    let name = Name::parse(rest.first().unwrap_or_else(|| usage())).unwrap_or_else(|e| fail(e));
    let client = Client::new().unwrap_or_else(|e| fail(e));
    let start = Instant::now();
    let quiet = |_: Progress| {};
    let bytes = match cmd.as_str() {
        "pull" => {
            let mut opts = PullOptions {
                insecure,
                ..PullOptions::default()
            };
            if let Some(c) = connections {
                opts.connections = c;
            }
            if let Some(m) = chunk_mib {
                opts.chunk_size = m << 20;
            }
            client
                .pull(&store, &name, &opts, &quiet)
                .await
                .unwrap_or_else(|e| fail(e));
            store
                .read_manifest(&name)
                .map(|m| m.manifest.total_size())
                .unwrap_or(0)
        }
        "push" => {
            let opts = PushOptions {
                insecure,
                ..PushOptions::default()
            };
            client
                .push(&store, &name, &opts, &quiet)
                .await
                .unwrap_or_else(|e| fail(e));
            store
                .read_manifest(&name)
                .map(|m| m.manifest.total_size())
                .unwrap_or(0)
        }
        "import" => {
            let file = PathBuf::from(rest.get(1).unwrap_or_else(|| usage()));
            let layer = store.import_file(&file, None).unwrap_or_else(|e| fail(e));
            let config = store.write_blob_bytes(b"{}", None).unwrap_or_else(|e| fail(e));
            let m = Manifest::new(
                Layer::new(media::DOCKER_CONFIG, config.digest, config.size),
                vec![Layer::new(media::MODEL, layer.digest, layer.size)],
            );
            store
                .write_manifest(&name, &m.to_bytes())
                .unwrap_or_else(|e| fail(e));
            println!("{}", layer.digest);
            layer.size
        }
        _ => usage(),
    };
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "{cmd} {bytes} bytes in {secs:.3} s: {:.1} MB/s",
        bytes as f64 / secs / 1e6
    );
}

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("error: {e}");
    std::process::exit(1)
}
