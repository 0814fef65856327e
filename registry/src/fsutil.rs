//! Filesystem primitives of the store: atomic files, advisory locks, directory sync.
//!
//! Every file that appears under a final name in the store was written to a temporary file in the
//! same directory, synced, and renamed (then the directory was synced), so a crash or a full disk
//! never leaves a half-written file under a final name. Temporary files are named `.tmp-…` and are
//! locked (flock) while they are written, which is how cleanup tells a live one from debris.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use fs4::fs_std::FileExt;

/// Prefix of every temporary file the store creates.
pub const TEMP_PREFIX: &str = ".tmp-";

/// A file being written under a temporary name, renamed into place by [`AtomicFile::commit`].
/// Dropped without commit, the temporary file is removed.
pub struct AtomicFile {
    file: Option<File>,
    temp: PathBuf,
}

impl AtomicFile {
    /// Creates a new locked temporary file in `dir`.
    pub fn new_in(dir: &Path) -> io::Result<AtomicFile> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        loop {
            let nanos = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let name = format!(
                "{TEMP_PREFIX}{}-{}-{nanos:08x}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            );
            let temp = dir.join(name);
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&temp)
            {
                Ok(file) => {
                    // Held until the file is renamed or removed: cleanup skips locked temporaries.
                    try_lock_exclusive(&file)?;
                    return Ok(AtomicFile {
                        file: Some(file),
                        temp,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    pub fn file(&mut self) -> &mut File {
        self.file.as_mut().expect("file present until commit")
    }

    #[cfg(test)]
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Syncs the data and renames the file to `dest` (which must be in the same directory),
    /// replacing any file there, then syncs the directory.
    pub fn commit(mut self, dest: &Path) -> io::Result<()> {
        let file = self.file.take().expect("file present until commit");
        file.sync_all()?;
        fs::rename(&self.temp, dest)?;
        drop(file);
        sync_dir(dest.parent().unwrap_or(Path::new(".")))
    }

    /// Like [`AtomicFile::commit`], but leaves an existing `dest` alone (and returns `false`):
    /// for content-addressed files, where an existing file already has the same content.
    pub fn commit_new(mut self, dest: &Path) -> io::Result<bool> {
        let file = self.file.take().expect("file present until commit");
        file.sync_all()?;
        // hard_link fails if dest exists, so two writers of the same blob cannot clobber each
        // other; then the temporary name is dropped.
        let created = match fs::hard_link(&self.temp, dest) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => false,
            // Filesystems without hard links: rename (same content, so replacing is harmless).
            Err(_) => {
                fs::rename(&self.temp, dest)?;
                drop(file);
                sync_dir(dest.parent().unwrap_or(Path::new(".")))?;
                return Ok(true);
            }
        };
        let _ = fs::remove_file(&self.temp);
        drop(file);
        sync_dir(dest.parent().unwrap_or(Path::new(".")))?;
        Ok(created)
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file().write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file().flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = fs::remove_file(&self.temp);
        }
    }
}

/// Writes `bytes` to `path` atomically (temporary file in the same directory, fsync, rename).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut f = AtomicFile::new_in(dir)?;
    f.write_all(bytes)?;
    f.commit(path)
}

/// Replaces `path` with `bytes` through a temporary file and a rename, without fsync: readers
/// see the old or the new content, never a mix, but a power cut may lose the update.
pub fn write_atomic_unsynced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut f = AtomicFile::new_in(dir)?;
    f.write_all(bytes)?;
    let file = f.file.take().expect("file present until commit");
    fs::rename(&f.temp, path)?;
    drop(file);
    Ok(())
}

/// Makes a rename or unlink in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Takes an exclusive advisory lock without waiting; `WouldBlock` if another holder has it.
pub fn try_lock_exclusive(file: &File) -> io::Result<()> {
    match FileExt::try_lock_exclusive(file) {
        Ok(true) => Ok(()),
        Ok(false) => Err(io::ErrorKind::WouldBlock.into()),
        Err(e) => Err(e),
    }
}

/// Whether some process holds a lock on the file at `path` (`false` if it does not exist).
pub fn is_locked(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    match FileExt::try_lock_shared(&file) {
        Ok(true) => {
            let _ = FileExt::unlock(&file);
            false
        }
        _ => true,
    }
}

/// Takes an exclusive advisory lock, waiting for it.
pub fn lock_exclusive(file: &File) -> io::Result<()> {
    FileExt::lock_exclusive(file)
}

/// How long ago `path` was last modified (zero if in the future or unknown).
pub fn age(meta: &fs::Metadata) -> Duration {
    meta.modified()
        .ok()
        .and_then(|m| SystemTime::now().duration_since(m).ok())
        .unwrap_or_default()
}

/// Sets a file's modification time to now (marks a reused blob as recently used).
pub fn touch(path: &Path) -> io::Result<()> {
    let f = OpenOptions::new().write(true).open(path)?;
    f.set_modified(SystemTime::now())
}

/// Bytes available to us on the filesystem holding `path`.
pub fn available_space(path: &Path) -> io::Result<u64> {
    fs4::available_space(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_file_commits_or_vanishes() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("x");
        {
            let mut f = AtomicFile::new_in(dir.path()).unwrap();
            f.write_all(b"half").unwrap();
            assert!(is_locked(f.temp_path()));
        }
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
        write_atomic(&dest, b"whole").unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"whole");
        write_atomic(&dest, b"again").unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"again");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);

        let mut f = AtomicFile::new_in(dir.path()).unwrap();
        f.write_all(b"other").unwrap();
        assert!(!f.commit_new(&dest).unwrap());
        assert_eq!(fs::read(&dest).unwrap(), b"again");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
