//! Removing what nothing uses: unreferenced blobs, temporary files left by crashed writers, and
//! partial downloads that cannot be resumed.
//!
//! Never removed: a blob referenced by a manifest or a live pin, a blob younger than the grace
//! period (it may belong to a create or pull that has not pinned it yet), a locked temporary file
//! (being written), a locked partial download (in progress), and a resumable partial download
//! (valid state file) unless the caller sets [`CleanupOptions::resumable_max_age`]. Files whose
//! names are not ours are left alone. If any manifest is unreadable, no blob is removed.

use std::fs;
use std::io;
use std::time::Duration;

use super::partial::{PartialState, DATA_SUFFIX, STATE_SUFFIX};
use super::Store;
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::fsutil::{self, TEMP_PREFIX};

#[derive(Clone, Debug)]
pub struct CleanupOptions {
    /// Unreferenced blobs younger than this are kept (Ollama uses one hour).
    pub blob_grace: Duration,
    /// Unlocked temporary files and broken partial downloads younger than this are kept.
    pub temp_grace: Duration,
    /// Resumable partial downloads untouched for longer than this are removed; `None` keeps them
    /// until the pull is resumed.
    pub resumable_max_age: Option<Duration>,
}

impl Default for CleanupOptions {
    fn default() -> Self {
        CleanupOptions {
            blob_grace: Duration::from_secs(3600),
            temp_grace: Duration::from_secs(3600),
            resumable_max_age: None,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CleanupReport {
    pub blobs_removed: Vec<Digest>,
    pub temp_files_removed: usize,
    pub partials_removed: usize,
    /// Partial downloads kept because they are in progress or resumable.
    pub partials_kept: usize,
    pub bytes_freed: u64,
    /// True if an unreadable manifest stopped unreferenced blobs from being removed.
    pub blobs_skipped_unreadable_manifest: bool,
}

impl Store {
    /// Removes unreferenced blobs, stale temporary files and dead partial downloads.
    pub fn cleanup(&self, opts: &CleanupOptions) -> Result<CleanupReport> {
        let _lock = self.lock()?;
        let mut report = CleanupReport::default();
        let blobs_dir = self.blobs_dir();
        // List blobs before reading pins: a pin is registered before its blob is renamed into
        // place, so any blob seen here whose pin was missed had its pin taken before the listing.
        let entries: Vec<fs::DirEntry> = fs::read_dir(blobs_dir)
            .map_err(|e| Error::io("listing blobs", e))?
            .flatten()
            .collect();
        let referenced = self.referenced_digests()?;
        let pinned = self.pinned_digests()?;
        let remove = |path: &std::path::Path, len: u64, report: &mut CleanupReport| -> Result<bool> {
            match fs::remove_file(path) {
                Ok(()) => {
                    report.bytes_freed += len;
                    Ok(true)
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
                Err(e) => Err(Error::io("cleanup", e)),
            }
        };
        for entry in &entries {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let path = entry.path();
            let age = fsutil::age(&meta);
            if let Some(d) = Digest::from_file_name(&name) {
                let Some(referenced) = &referenced else {
                    report.blobs_skipped_unreadable_manifest = true;
                    continue;
                };
                if referenced.contains(&d) || pinned.contains(&d) || age < opts.blob_grace {
                    continue;
                }
                if remove(&path, meta.len(), &mut report)? {
                    report.blobs_removed.push(d);
                }
            } else if name.starts_with(TEMP_PREFIX) {
                if age >= opts.temp_grace
                    && !fsutil::is_locked(&path)
                    && remove(&path, meta.len(), &mut report)?
                {
                    report.temp_files_removed += 1;
                }
            } else if let Some(stem) = name.strip_suffix(DATA_SUFFIX) {
                let Some(d) = Digest::from_file_name(stem) else {
                    continue;
                };
                let state_path = self.partial_state_path(&d);
                if fsutil::is_locked(&path) {
                    report.partials_kept += 1;
                    continue;
                }
                let resumable = PartialState::load(&state_path, &d, meta.len()).is_some();
                let state_age = fs::metadata(&state_path).map(|m| fsutil::age(&m)).unwrap_or(age);
                let expired = if resumable {
                    opts.resumable_max_age.is_some_and(|max| state_age >= max)
                } else {
                    age >= opts.temp_grace
                };
                if !expired {
                    report.partials_kept += 1;
                    continue;
                }
                remove(&path, meta.len(), &mut report)?;
                let state_len = fs::metadata(&state_path).map(|m| m.len()).unwrap_or(0);
                remove(&state_path, state_len, &mut report)?;
                report.partials_removed += 1;
            } else if let Some(stem) = name.strip_suffix(STATE_SUFFIX) {
                // A state file whose data file is gone.
                let Some(d) = Digest::from_file_name(stem) else {
                    continue;
                };
                if !self.partial_path(&d).exists()
                    && age >= opts.temp_grace
                    && remove(&path, meta.len(), &mut report)?
                {
                    report.partials_removed += 1;
                }
            }
        }
        self.prune_empty_manifest_dirs();
        Ok(report)
    }

    /// Removes empty directories under `manifests/` (left by crashes or by hand).
    fn prune_empty_manifest_dirs(&self) {
        fn prune(dir: &std::path::Path, depth: usize) -> bool {
            let Ok(rd) = fs::read_dir(dir) else {
                return false;
            };
            let mut empty = true;
            for entry in rd.flatten() {
                let is_dir = entry.file_type().map(|t| t.is_dir()).unwrap_or(false);
                if is_dir && depth < 3 && prune(&entry.path(), depth + 1) {
                    let _ = fs::remove_dir(entry.path());
                    continue;
                }
                empty = false;
            }
            empty
        }
        prune(&self.manifests, 0);
    }
}
