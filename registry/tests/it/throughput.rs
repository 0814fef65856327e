//! Pull throughput against `curl` from the same loopback registry (issue 6: at least 90%).
//!
//! A benchmark, not a unit test: `#[ignore]`d, run by `scripts/bench-pull.sh`. Everything lives
//! on /dev/shm (tmpfs) so that the disk, which neither tool controls, does not decide the
//! figures: the registry's storage, curl's output and our store. The runs alternate (curl, pull,
//! curl, pull, ...) so that load from other processes hits both alike; each figure is the median.

use std::process::Command;
use std::time::Instant;

use registry::manifest::media;
use registry::{Client, Layer, Manifest, Name, PullOptions, PushOptions, Store};

use crate::common::{self, RegistryServer};

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: scripts/bench-pull.sh"]
async fn pull_throughput_vs_curl() {
    let size = env_u64("BENCH_PULL_MIB", 1024) << 20;
    let runs = env_u64("BENCH_PULL_RUNS", 5);
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    std::env::set_var("TMPDIR", shm.path()); // the registry's tempdir goes there too
    let reg = RegistryServer::start();

    // One model with one `size`-byte random layer, pushed once.
    let name = Name::parse(&format!("{}/bench/big:1", reg.host())).unwrap();
    let digest = {
        let src = Store::open(shm.path().join("src")).unwrap();
        let blob = common::random_bytes(size as usize, 77);
        let w = src.write_blob_bytes(&blob, None).unwrap();
        drop(blob);
        let config = src.write_blob_bytes(b"{}", None).unwrap();
        let m = Manifest::new(
            Layer::new(media::DOCKER_CONFIG, config.digest, config.size),
            vec![Layer::new(media::MODEL, w.digest, w.size)],
        );
        src.write_manifest(&name, &m.to_bytes()).unwrap();
        let push = PushOptions {
            insecure: true,
            ..PushOptions::default()
        };
        Client::new()
            .unwrap()
            .push(&src, &name, &push, &|_| {})
            .await
            .unwrap();
        std::fs::remove_dir_all(shm.path().join("src")).unwrap();
        w.digest
    };
    let url = format!("http://{}/v2/bench/big/blobs/{digest}", reg.host());
    let opts = PullOptions {
        insecure: true,
        ..PullOptions::default()
    };
    let client = Client::new().unwrap();
    let (mut curl, mut ours) = (Vec::new(), Vec::new());
    let mib = size as f64 / (1 << 20) as f64;
    for run in 0..runs {
        let out = shm.path().join("curl.out");
        let t = Instant::now();
        let ok = Command::new("curl")
            .args(["-sSfL", "-o"])
            .arg(&out)
            .arg(&url)
            .status()
            .unwrap()
            .success();
        let secs = t.elapsed().as_secs_f64();
        assert!(ok, "curl failed");
        assert_eq!(std::fs::metadata(&out).unwrap().len(), size);
        std::fs::remove_file(&out).unwrap();
        curl.push(mib / secs);

        let store = Store::open(shm.path().join("store")).unwrap();
        let t = Instant::now();
        client.pull(&store, &name, &opts, &|_| {}).await.unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert!(store.has_blob(&digest));
        std::fs::remove_dir_all(store.root()).unwrap();
        ours.push(mib / secs);
        eprintln!(
            "run {run}: curl {:.0} MiB/s, ollamars pull {:.0} MiB/s",
            curl[run as usize], ours[run as usize]
        );
    }
    let (c, o) = (median(curl), median(ours));
    eprintln!(
        "{mib:.0} MiB blob, {runs} runs, medians: curl {c:.0} MiB/s, ollamars pull {o:.0} MiB/s, ratio {:.2}",
        o / c
    );
    assert!(
        o >= 0.9 * c,
        "pull reached {:.0}% of curl's throughput",
        100.0 * o / c
    );
}
