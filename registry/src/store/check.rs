//! The store's consistency check (`ollamars doctor`).
//!
//! What a crash, a full disk or a hand edit can leave, and what is done about it:
//!
//! - **Problems** (the store is not consistent; exit non-zero): a manifest that cannot be read or
//!   parsed, a manifest naming a blob the store lacks, a blob whose size is not the size its
//!   manifest gives, a blob whose bytes do not hash to its name (half-written or damaged). Only the
//!   last is repaired, by removing the bad blob (its content is wrong, so nothing is lost; the
//!   report names the models to pull or create again). Manifests are never changed.
//! - **Debris** (harmless but taking space): temporary files and dead partial downloads nobody is
//!   writing, pins of operations that crashed (with their scratch files), blobs no manifest uses.
//!   Repair removes it through [`Store::cleanup`]'s rules, so a file being written, a download in
//!   progress, a resumable download and a blob younger than the grace period are never touched.
//!
//! Resumable downloads are reported as such: they are neither a problem nor debris.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::time::Duration;

use serde::Serialize;

use super::partial::{PartialState, DATA_SUFFIX, STATE_SUFFIX};
use super::{CleanupOptions, Store};
use crate::digest::Digest;
use crate::error::{Error, Result};
use crate::fsutil::{self, TEMP_PREFIX};

#[derive(Clone, Debug)]
pub struct CheckOptions {
    /// Hash every referenced blob (slow for large stores); otherwise sizes only.
    pub verify_hashes: bool,
    /// Remove corrupt blobs and debris (see the module docs for what is never removed).
    pub repair: bool,
    /// Grace periods for debris removed by `repair`.
    pub cleanup: CleanupOptions,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            verify_hashes: true,
            repair: false,
            cleanup: CleanupOptions {
                // Our writers lock temporary files for their whole life, so an unlocked one a
                // minute old is debris; unreferenced blobs keep the hour Ollama gives them (an
                // upload waiting for its create).
                temp_grace: Duration::from_secs(60),
                ..CleanupOptions::default()
            },
        }
    }
}

/// Something that makes the store inconsistent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// `model` is the manifest's path under `manifests/`.
    UnreadableManifest {
        model: String,
        error: String,
    },
    MissingBlob {
        model: String,
        digest: Digest,
    },
    SizeMismatch {
        model: String,
        digest: Digest,
        manifest_size: u64,
        file_size: u64,
    },
    /// The blob's bytes hash to `actual`. `removed` if repair removed it.
    CorruptBlob {
        digest: Digest,
        actual: Digest,
        models: Vec<String>,
        removed: bool,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::UnreadableManifest { model, error } => {
                write!(f, "manifest of {model} is unreadable: {error}")
            }
            Problem::MissingBlob { model, digest } => {
                write!(f, "{model}: blob {digest} is missing (pull or create it again)")
            }
            Problem::SizeMismatch {
                model,
                digest,
                manifest_size,
                file_size,
            } => write!(
                f,
                "{model}: blob {digest} has {file_size} bytes, the manifest says {manifest_size}"
            ),
            Problem::CorruptBlob {
                digest,
                actual,
                models,
                removed,
            } => {
                write!(f, "blob {digest} is corrupt (its bytes hash to {actual})")?;
                if *removed {
                    write!(f, "; removed")?;
                }
                if !models.is_empty() {
                    write!(f, "; pull or create again: {}", models.join(", "))?;
                }
                Ok(())
            }
        }
    }
}

/// Harmless leftovers, counted (and removed with `repair`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Debris {
    /// Unlocked `.tmp-*` files in `blobs/` and `manifests/`.
    pub temp_files: usize,
    /// Partial downloads that nobody is writing and that cannot be resumed.
    pub dead_partials: usize,
    /// Pins left by operations that are gone (their scratch files included).
    pub stale_pins: usize,
    /// Blobs no manifest references (kept for the grace period in case a create is coming).
    pub unreferenced_blobs: usize,
    pub bytes: u64,
}

impl Debris {
    pub fn is_empty(&self) -> bool {
        self.temp_files + self.dead_partials + self.stale_pins + self.unreferenced_blobs == 0
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct CheckReport {
    pub models: usize,
    pub blobs: usize,
    /// Bytes of blobs hashed.
    pub bytes_verified: u64,
    pub problems: Vec<Problem>,
    pub debris: Debris,
    /// Downloads in progress (locked) or resumable.
    pub partial_downloads: usize,
    /// What `repair` removed (`None` without repair).
    pub repaired: Option<super::CleanupReport>,
}

impl CheckReport {
    pub fn is_consistent(&self) -> bool {
        self.problems.is_empty()
    }
}

impl Store {
    /// Checks the store (see the module docs); with [`CheckOptions::repair`], removes corrupt
    /// blobs and debris.
    pub fn check(&self, opts: &CheckOptions) -> Result<CheckReport> {
        let mut report = CheckReport::default();
        // Blob -> models using it, and the size each manifest gives.
        let mut used: BTreeMap<Digest, (u64, Vec<String>)> = BTreeMap::new();
        let mut problems = Vec::new();
        for path in self.manifest_files()? {
            let shown = crate::name::Name::from_parts(&path[0], &path[1], &path[2], &path[3])
                .map_or_else(|| path.join("/"), |n| n.display_shortest());
            report.models += 1;
            let bytes = match read_limited(&self.manifests.join(path.iter().collect::<std::path::PathBuf>()))
            {
                Ok(b) => b,
                Err(e) => {
                    problems.push(Problem::UnreadableManifest {
                        model: shown,
                        error: e,
                    });
                    continue;
                }
            };
            let manifest = match crate::manifest::Manifest::parse(&bytes) {
                Ok(m) => m,
                Err(e) => {
                    problems.push(Problem::UnreadableManifest {
                        model: shown,
                        error: e.to_string(),
                    });
                    continue;
                }
            };
            for l in manifest.all_blobs() {
                let entry = used.entry(l.digest).or_insert((l.size, Vec::new()));
                if !entry.1.contains(&shown) {
                    entry.1.push(shown.clone());
                }
                match self.blob_size(&l.digest) {
                    None => problems.push(Problem::MissingBlob {
                        model: shown.clone(),
                        digest: l.digest,
                    }),
                    Some(n) if n != l.size => problems.push(Problem::SizeMismatch {
                        model: shown.clone(),
                        digest: l.digest,
                        manifest_size: l.size,
                        file_size: n,
                    }),
                    Some(_) => {}
                }
            }
        }
        problems.dedup();

        // Every blob under its final name, referenced or not, must hash to its name.
        let mut blob_names = BTreeSet::new();
        for entry in fs::read_dir(&self.blobs)
            .map_err(|e| Error::io("listing blobs", e))?
            .flatten()
        {
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            if let Some(d) = Digest::from_file_name(&name) {
                report.blobs += 1;
                blob_names.insert(d);
                if !used.contains_key(&d) {
                    report.debris.unreferenced_blobs += 1;
                    report.debris.bytes += meta.len();
                }
                if !opts.verify_hashes {
                    continue;
                }
                let actual = match fs::File::open(entry.path()).and_then(Digest::of_reader) {
                    Ok((actual, n)) => {
                        report.bytes_verified += n;
                        actual
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue, // removed meanwhile
                    Err(e) => return Err(Error::io(format!("reading blob {d}"), e)),
                };
                if actual != d {
                    let models = used.get(&d).map(|u| u.1.clone()).unwrap_or_default();
                    let mut removed = false;
                    if opts.repair {
                        let _lock = self.lock()?;
                        removed = fs::remove_file(entry.path()).is_ok();
                    }
                    problems.push(Problem::CorruptBlob {
                        digest: d,
                        actual,
                        models,
                        removed,
                    });
                }
            } else if name.starts_with(TEMP_PREFIX) {
                if !fsutil::is_locked(&entry.path()) {
                    report.debris.temp_files += 1;
                    report.debris.bytes += meta.len();
                }
            } else if let Some(stem) = name.strip_suffix(DATA_SUFFIX) {
                let Some(d) = Digest::from_file_name(stem) else {
                    continue;
                };
                let resumable = PartialState::load(&self.partial_state_path(&d), &d, meta.len()).is_some();
                if fsutil::is_locked(&entry.path()) || resumable {
                    report.partial_downloads += 1;
                } else {
                    report.debris.dead_partials += 1;
                    report.debris.bytes += meta.len();
                }
            } else if name.ends_with(STATE_SUFFIX) {
                // Counted with its data file.
            }
        }
        let (n, bytes) = self.manifest_temp_files(opts.repair.then_some(opts.cleanup.temp_grace));
        report.debris.temp_files += n;
        report.debris.bytes += bytes;
        report.debris.stale_pins += super::pins::stale_count(&self.meta.join("pins"));
        report.problems = problems;
        if opts.repair {
            // Cleanup removes stale pins too (while reading the live ones).
            report.repaired = Some(self.cleanup(&opts.cleanup)?);
        }
        Ok(report)
    }

    /// Paths (`[host, namespace, model, tag]`) of every file four levels under `manifests/`,
    /// valid name or not, except temporary files.
    fn manifest_files(&self) -> Result<Vec<[String; 4]>> {
        let mut out = Vec::new();
        let list = |dir: &std::path::Path, dirs: bool| -> Vec<String> {
            let mut v: Vec<String> = fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| {
                    e.file_type()
                        .map(|t| if dirs { t.is_dir() } else { t.is_file() })
                        .unwrap_or(false)
                })
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| !n.starts_with(TEMP_PREFIX))
                .collect();
            v.sort();
            v
        };
        let root = &self.manifests;
        for h in list(root, true) {
            for n in list(&root.join(&h), true) {
                for m in list(&root.join(&h).join(&n), true) {
                    for t in list(&root.join(&h).join(&n).join(&m), false) {
                        out.push([h.clone(), n.clone(), m.clone(), t]);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Counts unlocked temporary files left in manifest directories, and their bytes; with
    /// `remove_after`, removes those at least that old.
    fn manifest_temp_files(&self, remove_after: Option<Duration>) -> (usize, u64) {
        fn walk(dir: &std::path::Path, depth: usize, remove_after: Option<Duration>, n: &mut (usize, u64)) {
            for e in fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = e.path();
                let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
                if is_dir && depth < 4 {
                    walk(&path, depth + 1, remove_after, n);
                } else if !is_dir
                    && e.file_name().to_string_lossy().starts_with(TEMP_PREFIX)
                    && !fsutil::is_locked(&path)
                {
                    let Ok(meta) = e.metadata() else { continue };
                    *n = (n.0 + 1, n.1 + meta.len());
                    if remove_after.is_some_and(|grace| fsutil::age(&meta) >= grace) {
                        let _ = fs::remove_file(&path);
                    }
                }
            }
        }
        let mut n = (0, 0);
        walk(&self.manifests, 0, remove_after, &mut n);
        n
    }
}

fn read_limited(path: &std::path::Path) -> std::result::Result<Vec<u8>, String> {
    use std::io::Read;
    let f = fs::File::open(path).map_err(|e| e.to_string())?;
    let mut bytes = Vec::new();
    f.take(crate::manifest::MAX_MANIFEST_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    Ok(bytes)
}
