//! Pins: digests that an operation in progress (a pull, a create) is about to reference.
//!
//! A blob becomes visible before the manifest that uses it is written; without pins a concurrent
//! delete or cleanup could remove it in between. A pin is a directory
//! `.ollamars/pins/<pid>-<n>-<nanos>/` holding a `lock` file, locked by the owner for the pin's
//! whole life, and one empty file per pinned digest (created before the blob gets its final name).
//! The lock dies with the process, so a crashed operation's pin is recognised as stale and
//! removed. Across processes this needs only the filesystem. The directory also holds the scratch
//! files of the operation ([`Pin::scratch_path`]), so a crash leaves no debris in `blobs/`.

use std::collections::HashSet;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::fsutil;

/// A pin younger than this is live even if its lock is not (yet) held: it may be being created.
const SETUP_GRACE: Duration = Duration::from_secs(60);

/// A set of digests protected from delete and cleanup while this value lives.
#[derive(Debug)]
pub struct Pin {
    dir: PathBuf,
    _lock: File,
}

impl Pin {
    pub(super) fn new(pins: &Path) -> Result<Pin> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = pins.join(format!(
            "{}-{}-{nanos}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let err = |e| Error::io("creating a pin in .ollamars/pins", e);
        fs::create_dir_all(&dir).map_err(err)?;
        let lock = File::create(dir.join("lock")).map_err(err)?;
        fsutil::try_lock_exclusive(&lock).map_err(err)?;
        Ok(Pin { dir, _lock: lock })
    }

    /// Protects `digest` until the pin is dropped.
    pub fn add(&self, digest: &Digest) -> Result<()> {
        File::create(self.dir.join(digest.file_name()))
            .map(drop)
            .map_err(|e| Error::io("adding to a pin in .ollamars/pins", e))
    }

    /// A path inside the pin's directory for a file the operation writes before it becomes a
    /// blob (e.g. a quantized model): removed with the pin, and with a stale pin after a crash.
    /// `name` must not look like a blob file name (those are the pinned digests).
    pub(crate) fn scratch_path(&self, name: &str) -> PathBuf {
        debug_assert!(Digest::from_file_name(name).is_none());
        self.dir.join(name)
    }

    /// Protects every digest in `digests`.
    pub fn add_all<'a>(&self, digests: impl IntoIterator<Item = &'a Digest>) -> Result<()> {
        digests.into_iter().try_for_each(|d| self.add(d))
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A pin whose owner is gone: its lock is free and it is past its setup grace.
fn is_stale(entry: &fs::DirEntry) -> bool {
    let young = entry
        .metadata()
        .map(|m| fsutil::age(&m) < SETUP_GRACE)
        .unwrap_or(true);
    !young && !fsutil::is_locked(&entry.path().join("lock"))
}

/// How many pins are stale (left by operations that crashed).
pub(super) fn stale_count(pins: &Path) -> usize {
    fs::read_dir(pins)
        .into_iter()
        .flatten()
        .flatten()
        .filter(is_stale)
        .count()
}

/// Digests of all live pins; stale pins (owner gone) are removed on the way.
pub(super) fn live_digests(pins: &Path) -> Result<HashSet<Digest>> {
    let mut out = HashSet::new();
    let rd = match fs::read_dir(pins) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(Error::io("reading .ollamars/pins", e)),
    };
    for entry in rd.flatten() {
        let dir = entry.path();
        if is_stale(&entry) {
            let _ = fs::remove_dir_all(&dir);
            continue;
        }
        if let Ok(files) = fs::read_dir(&dir) {
            for f in files.flatten() {
                if let Some(d) = f.file_name().to_str().and_then(Digest::from_file_name) {
                    out.insert(d);
                }
            }
        }
    }
    Ok(out)
}
