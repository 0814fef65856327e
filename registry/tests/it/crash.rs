//! kill -9 of a pull, a push and a create (with quantize) at random points, 20 times each:
//! afterwards the store passes the consistency check (`ollamars doctor`), and the operation,
//! run again, succeeds and gives the right result.

use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use registry::manifest::media;
use registry::store::{CheckOptions, CleanupOptions};
use registry::{Digest, Layer, Manifest, Name, Store};

use crate::child::{self, Op};
use crate::common::{self, Proxy, RegistryServer};
use crate::resume::addr;

const ROUNDS: u64 = 20;

/// The store is consistent (every manifest's blobs exist and hash right), and the only partial
/// downloads are resumable ones.
fn assert_consistent(store: &Store, when: &str) {
    let r = store.check(&CheckOptions::default()).unwrap();
    assert!(r.is_consistent(), "{when}: {:?}", r.problems);
    for m in store.list().unwrap() {
        let stored = store.read_manifest(&m.name).unwrap();
        for d in stored.manifest.digests() {
            assert!(store.has_blob(&d), "{when}: {} lacks {d}", m.name);
        }
    }
}

/// How long `op` takes in a child process when nothing kills it (the window to kill it in).
fn calibrate(op: &Op, root: &Path, name: &str) -> Duration {
    let start = Instant::now();
    let out = child::spawn(op, root, name, &[]).wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    start.elapsed()
}

/// Kills `child` with SIGKILL at a random point of `window`; `true` if it was still running
/// (if not, it must have succeeded).
fn kill_at_random(mut child: Child, window: Duration) -> bool {
    let at = Duration::from_micros(common::rand_u64() % window.as_micros().max(1) as u64);
    std::thread::sleep(at);
    if let Some(status) = child.try_wait().unwrap() {
        assert!(status.success(), "the operation failed on its own: {status}");
        return false;
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    true
}

/// After the rounds: repair removes every leftover of the killed processes.
fn assert_repairable(store: &Store) {
    let opts = CheckOptions {
        repair: true,
        cleanup: CleanupOptions {
            blob_grace: Duration::ZERO,
            temp_grace: Duration::ZERO,
            resumable_max_age: Some(Duration::ZERO),
        },
        ..CheckOptions::default()
    };
    store.check(&opts).unwrap();
    let r = store.check(&CheckOptions::default()).unwrap();
    assert!(r.is_consistent(), "{:?}", r.problems);
    assert_eq!(r.debris.temp_files + r.debris.dead_partials, 0, "{:?}", r.debris);
    assert_eq!(r.partial_downloads, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_pull() {
    let reg = RegistryServer::start();
    let (_src_dir, src) = common::store();
    let source = Name::parse(&format!("{}/test/crash:1", reg.host())).unwrap();
    let mut layers = Vec::new();
    for (i, size) in [(0u64, 6usize << 20), (1, 1 << 20)] {
        let w = src
            .write_blob_bytes(&common::random_bytes(size, 100 + i), None)
            .unwrap();
        layers.push(Layer::new(media::MODEL, w.digest, w.size));
    }
    let config = src
        .write_blob_bytes(b"{\"model_format\":\"gguf\"}", None)
        .unwrap();
    let m = Manifest::new(
        Layer::new(media::DOCKER_CONFIG, config.digest, config.size),
        layers,
    );
    src.write_manifest(&source, &m.to_bytes()).unwrap();
    child::run(&Op::Push, &src, &source).await.unwrap();

    // Through a throttled proxy, so a pull takes a while to kill.
    let slow = Proxy::start(addr(&reg), Some(24 << 20)).await;
    let name_text = format!("127.0.0.1:{}/test/crash:1", slow.port);
    let name = Name::parse(&name_text).unwrap();
    let (_dir, store) = common::store();
    let window = calibrate(&Op::Pull, store.root(), &name_text);
    store.delete(&name).unwrap();
    assert!(!store.has_blob(&m.layers[0].digest));
    let mut killed = 0;
    for round in 0..ROUNDS {
        let child = child::spawn(&Op::Pull, store.root(), &name_text, &[]);
        killed += u64::from(kill_at_random(child, window));
        assert_consistent(&store, &format!("pull round {round}, after the kill"));
        child::run(&Op::Pull, &store, &name).await.unwrap();
        assert_consistent(&store, &format!("pull round {round}, after pulling again"));
        assert_eq!(store.read_manifest(&name).unwrap().manifest, m);
        for d in m.digests() {
            let (got, _) = Digest::of_reader(std::fs::File::open(store.blob_path(&d)).unwrap()).unwrap();
            assert_eq!(got, d);
        }
        // Delete keeps blobs that a killed pull's pin still names (pins of dead processes are
        // honoured for a minute); remove them, so that the next pull downloads everything.
        store.delete(&name).unwrap();
        for d in m.digests() {
            let _ = std::fs::remove_file(store.blob_path(&d));
        }
    }
    assert!(
        killed >= ROUNDS / 2,
        "only {killed} of {ROUNDS} pulls were killed before they ended"
    );
    assert_repairable(&store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_push() {
    let reg = RegistryServer::start();
    // Uploads through a throttled proxy, so a push takes a while to kill.
    let slow = Proxy::start_rates(addr(&reg), None, Some(16 << 20)).await;
    let (_dir, store) = common::store();
    // A new model per round (new blobs), so every push has everything to upload.
    let model = |round: u64| {
        let name = Name::parse(&format!("127.0.0.1:{}/test/push{round}:1", slow.port)).unwrap();
        let w = store
            .write_blob_bytes(&common::random_bytes(5 << 20, 200 + round), None)
            .unwrap();
        let config = store.write_blob_bytes(b"{}", None).unwrap();
        let m = Manifest::new(
            Layer::new(media::DOCKER_CONFIG, config.digest, config.size),
            vec![Layer::new(media::MODEL, w.digest, w.size)],
        );
        store.write_manifest(&name, &m.to_bytes()).unwrap();
        (name, m)
    };
    let (calib, _) = model(ROUNDS);
    let window = calibrate(&Op::Push, store.root(), &calib.to_string());
    let mut killed = 0;
    for round in 0..ROUNDS {
        let (name, m) = model(round);
        let before = store.read_manifest(&name).unwrap().bytes;
        let child = child::spawn(&Op::Push, store.root(), &name.to_string(), &[]);
        killed += u64::from(kill_at_random(child, window));
        assert_consistent(&store, &format!("push round {round}, after the kill"));
        child::run(&Op::Push, &store, &name).await.unwrap();
        // The registry has the model whole: pull it into a fresh store.
        let (_d, fresh) = common::store();
        child::run(&Op::Pull, &fresh, &name).await.unwrap();
        assert_eq!(fresh.read_manifest(&name).unwrap().bytes, before);
        for d in m.digests() {
            let (got, _) = Digest::of_reader(std::fs::File::open(fresh.blob_path(&d)).unwrap()).unwrap();
            assert_eq!(got, d);
        }
        assert_consistent(&store, &format!("push round {round}, after pushing again"));
    }
    assert!(
        killed >= ROUNDS / 2,
        "only {killed} of {ROUNDS} pushes were killed before they ended"
    );
    assert_repairable(&store);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_create_with_quantize() {
    let (dir, store) = common::store();
    // 3 tensors of 64 x 32768 f32 (24 MiB): imported, then quantized to Q8_0.
    common::float_gguf(&dir.path().join("big.gguf"), 32768);
    let op = Op::Create {
        dir: dir.path().to_path_buf(),
        text: "FROM ./big.gguf\nSYSTEM be brief\n".into(),
        quantize: Some("q8_0".into()),
    };
    let name = Name::parse("crash:q8").unwrap();
    let window = calibrate(&op, store.root(), "crash:q8");
    let want = store.read_manifest(&name).unwrap().bytes;
    store.delete(&name).unwrap();
    let mut killed = 0;
    for round in 0..ROUNDS {
        let child = child::spawn(&op, store.root(), "crash:q8", &[]);
        killed += u64::from(kill_at_random(child, window));
        assert_consistent(&store, &format!("create round {round}, after the kill"));
        child::run(&op, &store, &name).await.unwrap();
        assert_consistent(&store, &format!("create round {round}, after creating again"));
        // Same inputs, same model, byte for byte.
        assert_eq!(store.read_manifest(&name).unwrap().bytes, want);
        let info = registry::show(&store, &name, false).unwrap();
        assert_eq!(info.details.quantization_level, "Q8_0");
        store.delete(&name).unwrap();
    }
    assert!(
        killed >= ROUNDS / 2,
        "only {killed} of {ROUNDS} creates were killed before they ended"
    );
    assert_repairable(&store);
}
