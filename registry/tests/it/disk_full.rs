//! A full disk: the models directory on a small tmpfs. The pull fails with a clear error, no
//! blob or manifest appears, and once space is freed the pull resumes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use registry::{Client, Error, Name, PullOptions, Store};

use crate::common::{self, Events, Proxy, RegistryServer};
use crate::resume::{addr, push_random_model, state};

/// A tmpfs of `mib` MiB, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(mib: u64) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("running mount");
        assert!(
            out.status.success(),
            "this test needs to mount a small tmpfs (root with CAP_SYS_ADMIN, as in CI): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

fn files(root: &Path) -> Vec<String> {
    common::tree(root)
}

fn opts() -> PullOptions {
    PullOptions {
        insecure: true,
        connections: 2,
        chunk_size: 2 << 20,
        retry_delay: Duration::from_millis(10),
        ..PullOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_fails_cleanly_and_resumes_after_space_is_freed() {
    let reg = RegistryServer::start();
    let big = push_random_model(&reg, "toobig", 40 << 20, 11).await;
    let d = push_random_model(&reg, "fits", 20 << 20, 12).await;
    let fs = Tmpfs::mount(32);
    let store = Store::open(fs.path().join("models")).unwrap();
    let client = Client::new().unwrap();

    // Too big from the start: refused before a byte is downloaded.
    let name = Name::parse(&format!("{}/test/toobig:1", reg.host())).unwrap();
    let err = client.pull(&store, &name, &opts(), &|_| {}).await.unwrap_err();
    assert!(matches!(err, Error::NoSpace { .. }), "{err}");
    assert!(err.is_no_space());
    assert!(!store.has_blob(&big));
    assert!(files(store.root()).is_empty(), "{:?}", files(store.root()));

    // The disk fills up during the download (another program takes the space).
    let slow = Proxy::start(addr(&reg), Some(4 << 20)).await;
    let name = Name::parse(&format!("127.0.0.1:{}/test/fits:1", slow.port)).unwrap();
    let events = Events::default();
    let pull = {
        let (client, store, name, events) = (client.clone(), store.clone(), name.clone(), events.clone());
        tokio::spawn(async move { client.pull(&store, &name, &opts(), &|p| events.push(p)).await })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !events
        .all()
        .iter()
        .any(|p| p.completed().is_some_and(|c| c >= 3 << 20))
    {
        assert!(Instant::now() < deadline, "no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ballast = fs.path().join("ballast");
    fill(&ballast);
    let err = pull.await.unwrap().unwrap_err();
    assert!(err.is_no_space(), "{err}");
    assert!(err.to_string().contains("No space left on device"), "{err}");
    // Consistent: no blob, no manifest, no temporary files; the partial download is kept.
    assert!(!store.has_blob(&d));
    assert!(store.list().unwrap().is_empty());
    let left = files(store.root());
    assert!(
        left.iter()
            .all(|f| f.contains("-partial") || f.ends_with(".ollamars/lock")),
        "{left:?}"
    );
    let done_before = state(&store, &d, 20 << 20).map_or(0, |s| s.completed());

    // Space comes back: the pull resumes and completes.
    std::fs::remove_file(&ballast).unwrap();
    let fast = Name::parse(&format!("{}/test/fits:1", reg.host())).unwrap();
    let resumed = Events::default();
    client
        .pull(&store, &fast, &opts(), &|p| resumed.push(p))
        .await
        .unwrap();
    assert!(store.has_blob(&d));
    let first = resumed.all().into_iter().find_map(|p| match p {
        registry::Progress::Pulling {
            digest, completed, ..
        } if digest == d => Some(completed),
        _ => None,
    });
    assert_eq!(first, Some(done_before));
    assert_eq!(store.list().unwrap().len(), 1);
}

/// Writes zeros to `path` until the filesystem is full.
fn fill(path: &PathBuf) {
    use std::io::Write;
    let mut f = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 64 << 10];
    while f.write_all(&block).is_ok() {}
    let _ = f.sync_all();
}
