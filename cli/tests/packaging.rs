//! packaging/: the systemd unit passes `systemd-analyze verify`, the launchd plist is a valid
//! property list, install.sh is shellcheck-clean and installs the real binary into a temporary
//! prefix (twice: idempotent), refuses the service steps without root, and uninstalls.
//! scripts/test.sh installs systemd, shellcheck and python3 when they are missing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn packaging() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../packaging")
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("running {cmd:?}: {e}"))
}

fn text(out: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
#[cfg(target_os = "linux")]
fn systemd_unit_verifies() {
    // verify checks that ExecStart exists: point it at the binary under test, as install.sh does.
    let unit = std::fs::read_to_string(packaging().join("systemd/ollamars.service")).unwrap();
    for needed in [
        "User=ollamars",
        "StateDirectory=ollamars",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "ReadWritePaths=/var/lib/ollamars",
        "Restart=on-failure",
        "EnvironmentFile=-/etc/ollamars/ollamars.env",
        "ExecStart=/usr/local/bin/ollamars serve",
    ] {
        assert!(unit.lines().any(|l| l == needed), "the unit lacks {needed}");
    }
    let dir = tempfile::tempdir().unwrap();
    let unit = unit.replace(
        "ExecStart=/usr/local/bin/ollamars",
        &format!("ExecStart={}", env!("CARGO_BIN_EXE_ollamars")),
    );
    let path = dir.path().join("ollamars.service");
    std::fs::write(&path, unit).unwrap();
    let out = run(Command::new("systemd-analyze").arg("verify").arg(&path));
    assert!(out.status.success() && out.stderr.is_empty(), "{}", text(&out));
}

#[test]
fn launchd_plist_parses() {
    let plist = packaging().join("launchd/ai.ollamars.serve.plist");
    let check = "import plistlib, sys\n\
                 p = plistlib.load(open(sys.argv[1], 'rb'))\n\
                 assert p['Label'] == 'ai.ollamars.serve', p\n\
                 assert p['ProgramArguments'][1:] == ['serve'], p\n\
                 assert p['RunAtLoad'] is True and p['KeepAlive'] == {'SuccessfulExit': False}, p\n";
    let out = run(Command::new("python3").arg("-c").arg(check).arg(&plist));
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn install_script_is_shellcheck_clean() {
    let out = run(Command::new("shellcheck").arg(packaging().join("install.sh")));
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn install_into_a_prefix_is_idempotent_and_uninstalls() {
    let prefix = tempfile::tempdir().unwrap();
    let install = |extra: &[&str]| {
        run(Command::new("sh")
            .arg(packaging().join("install.sh"))
            .arg("--prefix")
            .arg(prefix.path())
            .args(["--binary", env!("CARGO_BIN_EXE_ollamars"), "--no-service"])
            .args(extra))
    };
    let target = prefix.path().join("bin/ollamars");
    for _ in 0..2 {
        let out = install(&[]);
        assert!(out.status.success(), "{}", text(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains("installed"));
    }
    assert_eq!(
        std::fs::read(&target).unwrap(),
        std::fs::read(env!("CARGO_BIN_EXE_ollamars")).unwrap()
    );
    // The installed binary runs.
    let out = run(Command::new(&target).arg("--version"));
    assert!(out.status.success(), "{}", text(&out));
    // Nothing but the binary was left in the prefix (no temporary files).
    let names: Vec<_> = std::fs::read_dir(prefix.path().join("bin"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["ollamars"]);

    let out = install(&["--uninstall"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!target.exists());
}

#[test]
fn install_script_refuses_bad_input_and_says_why() {
    let prefix = tempfile::tempdir().unwrap();
    let out = run(Command::new("sh")
        .arg(packaging().join("install.sh"))
        .arg("--prefix")
        .arg(prefix.path())
        .args(["--binary", "/nonexistent/ollamars", "--no-service"]));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not an executable file"),
        "{}",
        text(&out)
    );
    let out = run(Command::new("sh")
        .arg(packaging().join("install.sh"))
        .arg("--frobnicate"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown option"));
}

/// Without root, the service steps (a system user, /var/lib, /etc/systemd) are refused up front
/// with the reason, and nothing is installed.
#[test]
#[cfg(target_os = "linux")]
fn install_script_refuses_the_service_without_root() {
    let prefix = tempfile::tempdir().unwrap();
    let script = packaging().join("install.sh");
    let is_root = run(Command::new("id").arg("-u")).stdout == b"0\n";
    let mut cmd = if is_root {
        // Drop to nobody for this run; the script and the binary must be readable by it.
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh"]);
        c
    } else {
        Command::new("sh")
    };
    // A prefix nobody may write to, so that only the service check can fail first.
    std::fs::set_permissions(prefix.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let out = run(cmd
        .arg(&script)
        .arg("--prefix")
        .arg(prefix.path())
        .args(["--binary", "/bin/sh"]));
    if is_root && String::from_utf8_lossy(&out.stderr).contains("Permission denied") {
        panic!("cannot run install.sh as nobody here: {}", text(&out));
    }
    assert!(!out.status.success(), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the system service needs root") && err.contains("--no-service"),
        "{}",
        text(&out)
    );
    assert!(!prefix.path().join("bin").exists());
}
