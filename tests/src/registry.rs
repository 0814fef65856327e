//! A plain-HTTP OCI registry (Debian's `docker-registry`, distribution 2.8) on loopback for push
//! and pull tests, killed on drop. scripts/test.sh installs it, so a missing binary is a failure
//! that says how to install it. (registry/tests has the fuller harness with token auth.)

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

pub struct Registry {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Registry {
    pub fn start() -> Registry {
        let bin = ["/usr/bin/docker-registry", "/usr/local/bin/docker-registry"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap_or_else(|| {
                panic!("docker-registry is not installed: run `apt-get install -y docker-registry` (scripts/test.sh does)")
            });
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n",
                dir.path().join("data").display()
            ),
        )
        .expect("writing the registry config");
        let log = std::fs::File::create(dir.path().join("registry.log")).expect("a log file");
        let child = Command::new(bin)
            .arg("serve")
            .arg(&config)
            .stdout(log.try_clone().expect("a log file"))
            .stderr(log)
            .spawn()
            .expect("starting docker-registry");
        let r = Registry { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "docker-registry did not start:\n{}",
                std::fs::read_to_string(r.dir.path().join("registry.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        r
    }

    /// The registry's storage (distribution's filesystem driver layout), for tests that tamper
    /// with what it serves.
    pub fn data_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("data")
    }

    /// `127.0.0.1:PORT`, the host part of model names pushed to it.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
