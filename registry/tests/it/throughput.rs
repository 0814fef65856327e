//! Pull throughput against `curl` from the same loopback registry (issue 6: at least 90%).
//!
//! A benchmark, not a unit test: `#[ignore]`d, run by `scripts/bench-pull.sh`. Everything lives
//! on /dev/shm (tmpfs) so that the disk, which neither tool controls, does not decide the
//! figures: the registry's storage, curl's output and our store. The runs alternate (curl, pull,
//! curl, pull, ...) so that load from other processes hits both alike; each figure is the median.
//! Each run also reports the CPU time spent by the client (curl, or this process for the pull)
//! and by the registry, which says what bounds the figures on a busy machine.

use std::process::Command;
use std::time::{Duration, Instant};

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

/// CPU time (user + system) of this process, or of its waited-for children.
fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: getrusage writes one `rusage` into the zeroed struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        assert_eq!(libc::getrusage(who, &mut ru), 0);
        ru
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time (user + system) of another process, from /proc/<pid>/stat.
fn proc_cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which is in parentheses and may hold spaces).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf only reads its argument.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// One timed transfer: MiB/s, and the CPU seconds per GiB of the client and of the registry.
struct Run {
    mib_s: f64,
    client_cpu: f64,
    registry_cpu: f64,
}

fn report(what: &str, r: &Run) -> String {
    format!(
        "{what} {:.0} MiB/s (CPU s/GiB: client {:.2}, registry {:.2})",
        r.mib_s, r.client_cpu, r.registry_cpu
    )
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: scripts/bench-pull.sh"]
async fn pull_throughput_vs_curl() {
    let size = env_u64("BENCH_PULL_MIB", 1024) << 20;
    let runs = env_u64("BENCH_PULL_RUNS", 5);
    let connections = env_u64(
        "BENCH_PULL_CONNECTIONS",
        PullOptions::default().connections as u64,
    );
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let reg = RegistryServer::start_in(shm.path(), false);

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
        connections: connections as usize,
        ..PullOptions::default()
    };
    let client = Client::new().unwrap();
    let gib = size as f64 / (1u64 << 30) as f64;
    let timed = |secs: f64, client_cpu: Duration, registry_cpu: Duration| Run {
        mib_s: gib * 1024.0 / secs,
        client_cpu: client_cpu.as_secs_f64() / gib,
        registry_cpu: registry_cpu.as_secs_f64() / gib,
    };
    let (mut curl, mut ours) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let out = shm.path().join("curl.out");
        let (cpu, reg_cpu, t) = (rusage(libc::RUSAGE_CHILDREN), proc_cpu(reg.pid()), Instant::now());
        let ok = Command::new("curl")
            .args(["-sSfL", "-o"])
            .arg(&out)
            .arg(&url)
            .status()
            .unwrap()
            .success();
        let c = timed(
            t.elapsed().as_secs_f64(),
            rusage(libc::RUSAGE_CHILDREN) - cpu,
            proc_cpu(reg.pid()) - reg_cpu,
        );
        assert!(ok, "curl failed");
        assert_eq!(std::fs::metadata(&out).unwrap().len(), size);
        std::fs::remove_file(&out).unwrap();

        let store = Store::open(shm.path().join("store")).unwrap();
        let (cpu, reg_cpu, t) = (rusage(libc::RUSAGE_SELF), proc_cpu(reg.pid()), Instant::now());
        client.pull(&store, &name, &opts, &|_| {}).await.unwrap();
        let o = timed(
            t.elapsed().as_secs_f64(),
            rusage(libc::RUSAGE_SELF) - cpu,
            proc_cpu(reg.pid()) - reg_cpu,
        );
        assert!(store.has_blob(&digest));
        std::fs::remove_dir_all(store.root()).unwrap();
        eprintln!(
            "run {run}: {}; {}",
            report("curl", &c),
            report("ollamars pull", &o)
        );
        curl.push(c);
        ours.push(o);
    }
    let med = |v: &[Run], f: fn(&Run) -> f64| median(v.iter().map(f).collect());
    let (c, o) = (med(&curl, |r| r.mib_s), med(&ours, |r| r.mib_s));
    eprintln!(
        "{:.0} MiB blob, {runs} runs, medians: curl {c:.0} MiB/s, ollamars pull {o:.0} MiB/s, ratio {:.2}",
        gib * 1024.0,
        o / c
    );
    eprintln!(
        "median CPU s/GiB: curl {:.2} + registry {:.2}; ollamars pull {:.2} + registry {:.2}",
        med(&curl, |r| r.client_cpu),
        med(&curl, |r| r.registry_cpu),
        med(&ours, |r| r.client_cpu),
        med(&ours, |r| r.registry_cpu),
    );
    assert!(
        o >= 0.9 * c,
        "pull reached {:.0}% of curl's throughput",
        100.0 * o / c
    );
}
