//! On-disk state of a blob download in progress, which makes it resumable across crashes.
//!
//! Data goes to `blobs/sha256-<hex>-partial`, a file of the blob's full size (sparse until
//! written); `blobs/sha256-<hex>-partial.json` records, for each chunk of the blob, how many bytes
//! from its start are written. The downloader holds an exclusive lock on the data file while it
//! runs. The state only ever claims bytes that were written to the data file before the state was
//! saved, and the whole blob is hashed before it is renamed to its final name, so a state file that
//! claims too much (say, after a power cut) costs a re-download, never a bad blob.

use std::fs;
use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::fsutil;

/// Suffix of the data file of a download in progress.
pub const DATA_SUFFIX: &str = "-partial";
/// Suffix of its state file.
pub const STATE_SUFFIX: &str = "-partial.json";

/// One chunk of a blob: `done` bytes from `offset` are on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chunk {
    pub offset: u64,
    pub size: u64,
    pub done: u64,
}

impl Chunk {
    pub fn end(&self) -> u64 {
        self.offset + self.size
    }

    pub fn is_complete(&self) -> bool {
        self.done == self.size
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartialState {
    pub digest: Digest,
    pub total: u64,
    pub chunks: Vec<Chunk>,
}

impl PartialState {
    /// A fresh state: `total` bytes split into chunks of `chunk_size` (the last may be shorter).
    pub fn new(digest: Digest, total: u64, chunk_size: u64) -> PartialState {
        let chunk_size = chunk_size.max(1);
        let mut chunks = Vec::new();
        let mut offset = 0;
        while offset < total {
            let size = chunk_size.min(total - offset);
            chunks.push(Chunk {
                offset,
                size,
                done: 0,
            });
            offset += size;
        }
        PartialState {
            digest,
            total,
            chunks,
        }
    }

    /// Reads a state file; `None` if it is missing, unreadable, or does not describe a download
    /// of `digest` with `total` bytes in well-formed chunks.
    pub fn load(path: &Path, digest: &Digest, total: u64) -> Option<PartialState> {
        let bytes = fs::read(path).ok()?;
        if bytes.len() > 16 << 20 {
            return None;
        }
        let s: PartialState = serde_json::from_slice(&bytes).ok()?;
        (s.digest == *digest && s.total == total && s.is_well_formed()).then_some(s)
    }

    /// Reads a state file for whatever download it describes (for cleanup).
    pub fn load_any(path: &Path) -> Option<PartialState> {
        let bytes = fs::read(path).ok()?;
        let s: PartialState = serde_json::from_slice(&bytes).ok()?;
        s.is_well_formed().then_some(s)
    }

    /// Chunks are in order, contiguous, cover exactly `0..total`, and claim no more than their size.
    fn is_well_formed(&self) -> bool {
        let mut offset = 0u64;
        for c in &self.chunks {
            if c.offset != offset || c.size == 0 || c.done > c.size {
                return false;
            }
            match offset.checked_add(c.size) {
                Some(o) => offset = o,
                None => return false,
            }
        }
        offset == self.total
    }

    pub fn save(&self, path: &Path) -> io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(io::Error::other)?;
        fsutil::write_atomic(path, &bytes)
    }

    /// Saves without fsync (temporary file and rename): frequent saves during a download must
    /// not stall it, and a state that claims unsynced data after a power cut only costs a
    /// re-download (the blob is hashed before it is kept).
    pub fn save_unsynced(&self, path: &Path) -> io::Result<()> {
        let bytes = serde_json::to_vec(self).map_err(io::Error::other)?;
        fsutil::write_atomic_unsynced(path, &bytes)
    }

    pub fn completed(&self) -> u64 {
        self.chunks.iter().map(|c| c.done).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_blob_and_round_trip() {
        let d = Digest::of_bytes(b"x");
        let s = PartialState::new(d, 10, 4);
        assert_eq!(
            s.chunks.iter().map(|c| (c.offset, c.size)).collect::<Vec<_>>(),
            [(0, 4), (4, 4), (8, 2)]
        );
        assert!(PartialState::new(d, 0, 4).chunks.is_empty());
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.json");
        let mut s2 = s.clone();
        s2.chunks[1].done = 3;
        s2.save(&p).unwrap();
        assert_eq!(PartialState::load(&p, &d, 10), Some(s2.clone()));
        assert_eq!(PartialState::load(&p, &d, 11), None);
        assert_eq!(PartialState::load(&p, &Digest::of_bytes(b"y"), 10), None);
        s2.chunks[2].done = 3; // claims more than the chunk holds
        s2.save(&p).unwrap();
        assert_eq!(PartialState::load(&p, &d, 10), None);
    }
}
