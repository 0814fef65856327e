//! Kill a pull mid-blob; the next pull fetches only what is missing.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use registry::manifest::media;
use registry::store::partial::PartialState;
use registry::{Client, Digest, Layer, Manifest, Name, PullOptions, PushOptions, Store};

use crate::common::{self, Proxy, RegistryServer};

/// Pushes a model with one `size`-byte random layer to `reg` as `test/<model>:1`; returns the
/// layer's digest.
pub async fn push_random_model(reg: &RegistryServer, model: &str, size: usize, seed: u64) -> Digest {
    let (_d, src) = common::store();
    let blob = common::random_bytes(size, seed);
    let layer = src.write_blob_bytes(&blob, None).unwrap();
    let config = src
        .write_blob_bytes(b"{\"model_format\":\"gguf\"}", None)
        .unwrap();
    let m = Manifest::new(
        Layer::new(media::DOCKER_CONFIG, config.digest, config.size),
        vec![Layer::new(media::MODEL, layer.digest, layer.size)],
    );
    let name = Name::parse(&format!("{}/test/{model}:1", reg.host())).unwrap();
    src.write_manifest(&name, &m.to_bytes()).unwrap();
    let opts = PushOptions {
        insecure: true,
        ..PushOptions::default()
    };
    Client::new()
        .unwrap()
        .push(&src, &name, &opts, &|_| {})
        .await
        .unwrap();
    layer.digest
}

pub fn state(store: &Store, d: &Digest, size: u64) -> Option<PartialState> {
    PartialState::load(&store.partial_state_path(d), d, size)
}

pub fn addr(reg: &RegistryServer) -> SocketAddr {
    format!("127.0.0.1:{}", reg.port).parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_mid_blob_and_resume() {
    const SIZE: usize = 48 << 20;
    let reg = RegistryServer::start();
    let d = push_random_model(&reg, "big", SIZE, 42).await;

    // Pull through a slow link in a child process, and kill it once a good part is on disk.
    let slow = Proxy::start(addr(&reg), Some(8 << 20)).await;
    let (_dir, store) = common::store();
    let mut child =
        crate::child::spawn_pull(store.root(), &format!("127.0.0.1:{}/test/big:1", slow.port), &[]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if state(&store, &d, SIZE as u64).is_some_and(|s| s.completed() >= 12 << 20) {
            break;
        }
        assert!(Instant::now() < deadline, "the child made no progress");
        assert!(child.try_wait().unwrap().is_none(), "the child ended early");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let done = state(&store, &d, SIZE as u64).unwrap().completed();
    assert!(done >= 12 << 20 && done < SIZE as u64, "{done}");
    assert!(!store.has_blob(&d));
    assert!(store.list().unwrap().is_empty());

    // Resume through a counting proxy: only the missing ranges cross the wire.
    let counting = Proxy::start(addr(&reg), None).await;
    let name = Name::parse(&format!("127.0.0.1:{}/test/big:1", counting.port)).unwrap();
    let opts = PullOptions {
        insecure: true,
        ..PullOptions::default()
    };
    let resumed_from = std::sync::Mutex::new(None);
    Client::new()
        .unwrap()
        .pull(&store, &name, &opts, &|p| {
            if let registry::Progress::Pulling {
                digest, completed, ..
            } = p
            {
                if digest == d {
                    resumed_from.lock().unwrap().get_or_insert(completed);
                }
            }
        })
        .await
        .unwrap();
    let fetched = counting.bytes();
    let missing = SIZE as u64 - done;
    assert!(
        fetched <= missing + (256 << 10),
        "fetched {fetched} bytes, only {missing} were missing"
    );
    assert!(fetched >= missing, "fetched {fetched} < missing {missing}?");
    assert_eq!(resumed_from.into_inner().unwrap(), Some(done));
    let (got, n) = Digest::of_reader(std::fs::File::open(store.blob_path(&d)).unwrap()).unwrap();
    assert_eq!((got, n), (d, SIZE as u64));
    assert!(!store.partial_path(&d).exists() && !store.partial_state_path(&d).exists());
    assert_eq!(store.list().unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_pulls_share_one_download() {
    const SIZE: usize = 16 << 20;
    let reg = RegistryServer::start();
    let d = push_random_model(&reg, "shared", SIZE, 7).await;
    let counting = Proxy::start(addr(&reg), Some(32 << 20)).await;
    let (_dir, store) = common::store();
    let client = Client::new().unwrap();
    let opts = PullOptions {
        insecure: true,
        ..PullOptions::default()
    };
    let a = Name::parse(&format!("127.0.0.1:{}/test/shared:1", counting.port)).unwrap();
    let b = Name::parse(&format!("127.0.0.1:{}/test/shared:1", counting.port)).unwrap();
    let (ra, rb) = tokio::join!(
        client.pull(&store, &a, &opts, &|_| {}),
        client.pull(&store, &b, &opts, &|_| {})
    );
    ra.unwrap();
    rb.unwrap();
    assert!(store.has_blob(&d));
    let fetched = counting.bytes();
    assert!(
        fetched < SIZE as u64 + (1 << 20),
        "{fetched} bytes for a {SIZE}-byte blob pulled twice at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adds_connections_while_they_help() {
    const SIZE: usize = 36 << 20;
    let reg = RegistryServer::start();
    let d = push_random_model(&reg, "parallel", SIZE, 9).await;
    // Each connection is limited to 3 MB/s: more connections, more throughput.
    let slow = Proxy::start(addr(&reg), Some(3 << 20)).await;
    let (_dir, store) = common::store();
    let name = Name::parse(&format!("127.0.0.1:{}/test/parallel:1", slow.port)).unwrap();
    let opts = PullOptions {
        insecure: true,
        connections: 6,
        chunk_size: 1 << 20,
        ..PullOptions::default()
    };
    Client::new()
        .unwrap()
        .pull(&store, &name, &opts, &|_| {})
        .await
        .unwrap();
    assert!(store.has_blob(&d));
    let connections = slow.accepted.load(std::sync::atomic::Ordering::Relaxed);
    assert!(connections >= 4, "only {connections} connections");
}
