//! The models directory: content-addressed blobs and the manifests that name them.
//!
//! Layout (Ollama's, so an existing Ollama models directory works as it is):
//!
//! ```text
//! <root>/manifests/<host>/<namespace>/<model>/<tag>   manifest JSON
//! <root>/blobs/sha256-<64 hex>                        blob, named by the sha256 of its bytes
//! <root>/blobs/sha256-<64 hex>-partial[.json]         a download in progress (see `partial`)
//! <root>/blobs/.tmp-*                                 a blob being written (locked while it is)
//! <root>/.ollamars/lock                               serializes deletes and cleanups
//! <root>/.ollamars/pins/<id>/                         digests an operation in progress will use
//! ```
//!
//! Blob paths are built only from a [`Digest`] and manifest paths only from a validated [`Name`],
//! so nothing outside the root can be named. Every file is written atomically (see [`fsutil`]).
//! Blobs are verified before they get their final name and are never modified afterwards.

mod check;
mod cleanup;
pub mod partial;
mod pins;

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

pub use check::{CheckOptions, CheckReport, Debris, Problem};
pub use cleanup::{CleanupOptions, CleanupReport};
pub use pins::Pin;

use crate::digest::{Digest, Hasher};
use crate::error::{Error, Result};
use crate::fsutil::{self, AtomicFile};
use crate::manifest::{Manifest, ModelConfig, MAX_MANIFEST_BYTES};
use crate::name::Name;
use crate::progress::{Progress, ProgressFn};

/// Environment variable naming the models directory.
pub const MODELS_ENV: &str = "OLLAMARS_MODELS";

/// The models directory.
#[derive(Clone, Debug)]
pub struct Store {
    root: PathBuf,
    blobs: PathBuf,
    manifests: PathBuf,
    meta: PathBuf,
}

/// A manifest read from the store.
#[derive(Clone, Debug)]
pub struct StoredManifest {
    /// The name with the spelling it has on disk.
    pub name: Name,
    pub manifest: Manifest,
    /// The manifest file's bytes, exactly (what push sends and what its digest is computed over).
    pub bytes: Vec<u8>,
    /// sha256 of [`StoredManifest::bytes`]: the model's ID in `/api/tags` (`digest`, first 12 hex
    /// digits shown by `list`).
    pub digest: Digest,
    pub modified: SystemTime,
}

/// One model of [`Store::list`].
#[derive(Clone, Debug)]
pub struct ModelEntry {
    pub name: Name,
    /// sha256 of the manifest bytes.
    pub digest: Digest,
    /// Sum of the sizes of the layers and the config.
    pub size: u64,
    pub modified: SystemTime,
    pub config: ModelConfig,
    /// `from` of the model layer: the model this one was created from, if any.
    pub parent_model: Option<String>,
}

/// What happened to a blob written with [`Store::write_blob`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlobWrite {
    pub digest: Digest,
    pub size: u64,
    /// False if the store already had this blob (the new copy was dropped).
    pub created: bool,
}

impl Store {
    /// Opens (creating if needed) the models directory at `root`.
    pub fn open(root: impl Into<PathBuf>) -> Result<Store> {
        let root = root.into();
        let store = Store {
            blobs: root.join("blobs"),
            manifests: root.join("manifests"),
            meta: root.join(".ollamars"),
            root,
        };
        for dir in [&store.blobs, &store.manifests, &store.meta.join("pins")] {
            fs::create_dir_all(dir).map_err(|e| {
                Error::io(
                    format!(
                        "cannot create {} (check that every directory on the way is traversable and writable by this user)",
                        dir.display()
                    ),
                    e,
                )
            })?;
        }
        Ok(store)
    }

    /// Opens the models directory named by `OLLAMARS_MODELS`, or else [`Store::default_root`].
    pub fn open_default() -> Result<Store> {
        Store::open(Store::configured_root()?)
    }

    /// `OLLAMARS_MODELS` (surrounding quotes and spaces trimmed, as Ollama's `envconfig` does), or
    /// [`Store::default_root`].
    pub fn configured_root() -> Result<PathBuf> {
        match std::env::var_os(MODELS_ENV) {
            Some(v) => {
                let s = v.to_string_lossy();
                let s = s.trim().trim_matches(|c| c == '"' || c == '\'').trim();
                if s.is_empty() {
                    Store::default_root()
                } else {
                    Ok(PathBuf::from(s))
                }
            }
            None => Store::default_root(),
        }
    }

    /// The per-user default: the platform data directory's `ollamars/models`
    /// (`~/.local/share/ollamars/models` on Linux, `~/Library/Application Support/ollamars/models`
    /// on macOS). The systemd service sets `OLLAMARS_MODELS=/var/lib/ollamars/models` with
    /// `StateDirectory=ollamars`.
    pub fn default_root() -> Result<PathBuf> {
        directories::ProjectDirs::from("", "", "ollamars")
            .map(|d| d.data_dir().join("models"))
            .ok_or_else(|| Error::request(format!("no home directory to put models in; set {MODELS_ENV}")))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(crate) fn blobs_dir(&self) -> &Path {
        &self.blobs
    }

    // ---- blobs ----

    /// The path of a blob. Built only from a validated digest, so always inside `blobs/`.
    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.blobs.join(digest.file_name())
    }

    /// The data file of a download of `digest` in progress (or resumable).
    pub fn partial_path(&self, digest: &Digest) -> PathBuf {
        self.blobs
            .join(format!("{}{}", digest.file_name(), partial::DATA_SUFFIX))
    }

    /// The state file of a download of `digest` (see [`partial::PartialState`]).
    pub fn partial_state_path(&self, digest: &Digest) -> PathBuf {
        self.blobs
            .join(format!("{}{}", digest.file_name(), partial::STATE_SUFFIX))
    }

    pub fn has_blob(&self, digest: &Digest) -> bool {
        self.blob_size(digest).is_some()
    }

    /// The size of a blob the store has.
    pub fn blob_size(&self, digest: &Digest) -> Option<u64> {
        fs::metadata(self.blob_path(digest))
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len())
    }

    /// Reads a whole blob (text and JSON layers), refusing blobs larger than `max` bytes.
    pub fn read_blob(&self, digest: &Digest, max: u64) -> Result<Vec<u8>> {
        let path = self.blob_path(digest);
        let f = File::open(&path).map_err(|e| self.blob_error(digest, e))?;
        let len = f.metadata().map_err(|e| self.blob_error(digest, e))?.len();
        if len > max {
            return Err(Error::request(format!(
                "blob {digest} is {len} bytes, more than the {max} expected for its kind"
            )));
        }
        let mut buf = Vec::with_capacity(len as usize);
        f.take(max + 1)
            .read_to_end(&mut buf)
            .map_err(|e| Error::io(format!("reading blob {digest}"), e))?;
        Ok(buf)
    }

    fn blob_error(&self, digest: &Digest, e: io::Error) -> Error {
        if e.kind() == io::ErrorKind::NotFound {
            Error::BlobNotFound(*digest)
        } else {
            Error::io(format!("reading blob {digest}"), e)
        }
    }

    /// Writes a blob from `reader`, hashing as it goes. If `expected` is given and the bytes do not
    /// hash to it, nothing is stored and the error is [`Error::DigestMismatch`]. The digest is
    /// added to `pin` before the blob gets its final name, so cleanup cannot remove it before the
    /// caller's manifest refers to it.
    pub fn write_blob(
        &self,
        mut reader: impl Read,
        expected: Option<&Digest>,
        pin: Option<&Pin>,
    ) -> Result<BlobWrite> {
        let mut tmp = self.temp_blob()?;
        let mut hasher = Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("reading blob content", e)),
            };
            hasher.update(&buf[..n]);
            tmp.write_all(&buf[..n])
                .map_err(|e| Error::io("writing a blob to the store", e))?;
        }
        let size = hasher.len();
        self.finish_blob(tmp, hasher.finish(), size, expected, pin)
    }

    /// Stores `bytes` as a blob.
    pub fn write_blob_bytes(&self, bytes: &[u8], pin: Option<&Pin>) -> Result<BlobWrite> {
        self.write_blob(bytes, None, pin)
    }

    /// Stores a blob received as a stream (the daemon's `POST /api/blobs/:digest`), verifying it
    /// against `expected`. Disk writes run on a blocking thread.
    pub async fn write_blob_stream<S, E>(&self, expected: Digest, stream: S) -> Result<BlobWrite>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(16);
        let store = self.clone();
        let writer = tokio::task::spawn_blocking(move || -> Result<(AtomicFile, Hasher)> {
            let mut tmp = store.temp_blob()?;
            let mut hasher = Hasher::new();
            while let Some(chunk) = rx.blocking_recv() {
                hasher.update(&chunk);
                tmp.write_all(&chunk)
                    .map_err(|e| Error::io("writing a blob to the store", e))?;
            }
            Ok((tmp, hasher))
        });
        let mut stream = stream;
        let mut read_err = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(chunk) => {
                    if tx.send(chunk).await.is_err() {
                        break; // the writer failed; its error is reported below
                    }
                }
                Err(e) => {
                    read_err = Some(e.to_string());
                    break;
                }
            }
        }
        drop(tx);
        let (tmp, hasher) = writer
            .await
            .map_err(|e| Error::io("blob writer", io::Error::other(e)))??;
        if let Some(e) = read_err {
            return Err(Error::io("receiving blob", io::Error::other(e)));
        }
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            let size = hasher.len();
            store.finish_blob(tmp, hasher.finish(), size, Some(&expected), None)
        })
        .await
        .map_err(|e| Error::io("blob writer", io::Error::other(e)))?
    }

    /// Copies a local file into the store (hashing it on the way) and returns its digest.
    pub fn import_file(&self, path: &Path, pin: Option<&Pin>) -> Result<BlobWrite> {
        let f = File::open(path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        if let Ok(m) = f.metadata() {
            self.check_space(m.len())?;
        }
        self.write_blob(f, None, pin)
    }

    /// Moves a finished file (a scratch file of `pin`, on any filesystem) into the store as a
    /// blob: hashed, pinned, then hard-linked under its final name (copied if the blobs live on
    /// another filesystem). The source is removed.
    pub(crate) fn adopt_file(&self, path: &Path, pin: &Pin) -> Result<BlobWrite> {
        let what = || format!("reading {}", path.display());
        let (digest, size) = Digest::of_reader(File::open(path).map_err(|e| Error::io(what(), e))?)
            .map_err(|e| Error::io(what(), e))?;
        pin.add(&digest)?;
        let dest = self.blob_path(&digest);
        let created = match fs::hard_link(path, &dest) {
            Ok(()) => true,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let _ = fsutil::touch(&dest);
                false
            }
            Err(_) => {
                let f = File::open(path).map_err(|e| Error::io(what(), e))?;
                let w = self.write_blob(f, Some(&digest), Some(pin))?;
                let _ = fs::remove_file(path);
                return Ok(w);
            }
        };
        let _ = fs::remove_file(path);
        fsutil::sync_dir(&self.blobs).map_err(|e| Error::io(format!("storing blob {digest}"), e))?;
        Ok(BlobWrite {
            digest,
            size,
            created,
        })
    }

    pub(crate) fn temp_blob(&self) -> Result<AtomicFile> {
        AtomicFile::new_in(&self.blobs).map_err(|e| Error::io("creating a temporary file in blobs/", e))
    }

    /// Gives a fully written temporary blob its final name (or drops it if the store already has
    /// the blob).
    pub(crate) fn finish_blob(
        &self,
        mut tmp: AtomicFile,
        digest: Digest,
        size: u64,
        expected: Option<&Digest>,
        pin: Option<&Pin>,
    ) -> Result<BlobWrite> {
        if let Some(want) = expected {
            if *want != digest {
                return Err(Error::DigestMismatch {
                    want: *want,
                    got: digest,
                });
            }
        }
        tmp.flush()
            .map_err(|e| Error::io("writing a blob to the store", e))?;
        if let Some(pin) = pin {
            pin.add(&digest)?;
        }
        let dest = self.blob_path(&digest);
        let created = tmp
            .commit_new(&dest)
            .map_err(|e| Error::io(format!("storing blob {digest}"), e))?;
        if !created {
            // Mark as recently used: cleanup's grace period protects it while a manifest is made.
            let _ = fsutil::touch(&dest);
        }
        Ok(BlobWrite {
            digest,
            size,
            created,
        })
    }

    /// Fails with [`Error::NoSpace`] if the filesystem cannot take `need` more bytes.
    pub fn check_space(&self, need: u64) -> Result<()> {
        match fsutil::available_space(&self.blobs) {
            Ok(available) if available < need => Err(Error::NoSpace { need, available }),
            _ => Ok(()),
        }
    }

    // ---- names and manifests ----

    fn manifest_path_exact(&self, name: &Name) -> PathBuf {
        let mut p = self.manifests.clone();
        for part in name.parts() {
            p.push(part);
        }
        p
    }

    /// The spelling of `name` on disk if a manifest matches it ignoring case (an exact match is
    /// preferred), or `None`.
    pub fn resolve(&self, name: &Name) -> Result<Option<Name>> {
        if self.manifest_path_exact(name).is_file() {
            return Ok(Some(name.clone()));
        }
        let mut found: Vec<String> = Vec::with_capacity(4);
        let mut dir = self.manifests.clone();
        for (level, part) in name.parts().iter().enumerate() {
            let want_file = level == 3;
            let Some(entry) = find_entry_ignore_case(&dir, part, want_file)? else {
                return Ok(None);
            };
            dir.push(&entry);
            found.push(entry);
        }
        let parts = [
            found[0].as_str(),
            found[1].as_str(),
            found[2].as_str(),
            found[3].as_str(),
        ];
        Ok(Some(name.with_parts(parts)))
    }

    /// The name a new manifest for `name` is written under: each directory level that already
    /// exists with another spelling keeps its spelling on disk (so `Llama3:new` lands next to
    /// `llama3:latest`), new levels take the spelling given.
    pub fn canonical(&self, name: &Name) -> Result<Name> {
        if let Some(existing) = self.resolve(name)? {
            return Ok(existing);
        }
        let given = name.parts();
        let mut parts: Vec<String> = Vec::with_capacity(4);
        let mut dir = self.manifests.clone();
        let mut adopting = true;
        for (level, part) in given.iter().enumerate() {
            let entry = if adopting && level < 3 {
                find_entry_ignore_case(&dir, part, false)?
            } else {
                None
            };
            match entry {
                Some(e) => {
                    dir.push(&e);
                    parts.push(e);
                }
                None => {
                    adopting = false;
                    parts.push(part.to_string());
                }
            }
        }
        Ok(name.with_parts([&parts[0], &parts[1], &parts[2], &parts[3]]))
    }

    /// Reads the manifest of a model (matched ignoring case).
    pub fn read_manifest(&self, name: &Name) -> Result<StoredManifest> {
        let resolved = self
            .resolve(name)?
            .ok_or_else(|| Error::ModelNotFound(name.display_shortest()))?;
        self.read_manifest_exact(&resolved)
    }

    /// Like [`Store::read_manifest`], but `None` when the model does not exist.
    pub fn find_manifest(&self, name: &Name) -> Result<Option<StoredManifest>> {
        match self.read_manifest(name) {
            Ok(m) => Ok(Some(m)),
            Err(Error::ModelNotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn read_manifest_exact(&self, name: &Name) -> Result<StoredManifest> {
        let path = self.manifest_path_exact(name);
        let what = || format!("reading manifest of {}", name.display_shortest());
        let f = File::open(&path).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                Error::ModelNotFound(name.display_shortest())
            } else {
                Error::io(what(), e)
            }
        })?;
        let meta = f.metadata().map_err(|e| Error::io(what(), e))?;
        let mut bytes = Vec::new();
        f.take(MAX_MANIFEST_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io(what(), e))?;
        let manifest = Manifest::parse(&bytes).map_err(|e| match e {
            Error::InvalidManifest(m) => Error::manifest(format!("{}: {m}", name.display_shortest())),
            e => e,
        })?;
        Ok(StoredManifest {
            name: name.clone(),
            digest: Digest::of_bytes(&bytes),
            manifest,
            bytes,
            modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        })
    }

    /// Writes manifest bytes for `name` atomically (under the on-disk spelling of existing
    /// levels). The bytes must parse as a manifest whose blobs are all in the store.
    pub fn write_manifest(&self, name: &Name, bytes: &[u8]) -> Result<Name> {
        let manifest = Manifest::parse(bytes)?;
        for d in manifest.digests() {
            if !self.has_blob(&d) {
                return Err(Error::BlobNotFound(d));
            }
        }
        let name = self.canonical(name)?;
        let path = self.manifest_path_exact(&name);
        let what = || format!("writing manifest of {}", name.display_shortest());
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir).map_err(|e| Error::io(what(), e))?;
        }
        fsutil::write_atomic(&path, bytes).map_err(|e| Error::io(what(), e))?;
        Ok(name)
    }

    /// Every model in the store, most recently modified first. Files under `manifests/` that are
    /// not valid names or manifests are skipped (and logged).
    pub fn list(&self) -> Result<Vec<ModelEntry>> {
        let mut out = Vec::new();
        for name in self.manifest_names()? {
            let m = match self.read_manifest_exact(&name) {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(model = %name, error = %e, "skipping unreadable manifest");
                    continue;
                }
            };
            let config = self
                .read_blob(&m.manifest.config.digest, 1 << 20)
                .map(|b| ModelConfig::parse_lenient(&b))
                .unwrap_or_default();
            let parent_model = m
                .manifest
                .layers_of(crate::manifest::media::MODEL)
                .find_map(|l| l.from.clone());
            out.push(ModelEntry {
                name: m.name,
                digest: m.digest,
                size: m.manifest.total_size(),
                modified: m.modified,
                config,
                parent_model,
            });
        }
        out.sort_by_key(|e| std::cmp::Reverse(e.modified));
        Ok(out)
    }

    /// Names of all manifest files (`manifests/*/*/*/*` whose four parts are valid).
    pub(crate) fn manifest_names(&self) -> Result<Vec<Name>> {
        let mut names = Vec::new();
        let read = |dir: &Path| -> Result<Vec<(String, fs::FileType)>> {
            let rd = match fs::read_dir(dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(Error::io("listing manifests", e)),
            };
            let mut v = Vec::new();
            for entry in rd {
                let entry = entry.map_err(|e| Error::io("listing manifests", e))?;
                let Ok(name) = entry.file_name().into_string() else {
                    continue;
                };
                if let Ok(ft) = entry.file_type() {
                    v.push((name, ft));
                }
            }
            Ok(v)
        };
        for (host, ft) in read(&self.manifests)? {
            if !ft.is_dir() {
                continue;
            }
            let hp = self.manifests.join(&host);
            for (ns, ft) in read(&hp)? {
                if !ft.is_dir() {
                    continue;
                }
                let np = hp.join(&ns);
                for (model, ft) in read(&np)? {
                    if !ft.is_dir() {
                        continue;
                    }
                    for (tag, ft) in read(&np.join(&model))? {
                        if !ft.is_file() {
                            continue;
                        }
                        if let Some(n) = Name::from_parts(&host, &ns, &model, &tag) {
                            names.push(n);
                        }
                    }
                }
            }
        }
        Ok(names)
    }

    /// Copies a model: the manifest only (the blobs are shared). `dst` is replaced if it exists.
    pub fn copy(&self, src: &Name, dst: &Name) -> Result<Name> {
        let m = self.read_manifest(src)?;
        let dst = self.canonical(dst)?;
        if dst.parts() == m.name.parts() {
            return Ok(dst);
        }
        self.write_manifest(&dst, &m.bytes)
    }

    /// Deletes a model: removes its manifest, then those of its blobs that no other manifest
    /// (and no operation in progress) uses. Returns the removed blobs.
    pub fn delete(&self, name: &Name) -> Result<Vec<Digest>> {
        let _lock = self.lock()?;
        let resolved = self
            .resolve(name)?
            .ok_or_else(|| Error::ModelNotFound(name.display_shortest()))?;
        let digests = match self.read_manifest_exact(&resolved) {
            Ok(m) => m.manifest.digests(),
            Err(Error::ModelNotFound(n)) => return Err(Error::ModelNotFound(n)),
            // A corrupt manifest can still be deleted; its blobs are left to cleanup.
            Err(_) => Vec::new(),
        };
        let path = self.manifest_path_exact(&resolved);
        fs::remove_file(&path)
            .map_err(|e| Error::io(format!("deleting {}", resolved.display_shortest()), e))?;
        let _ = fsutil::sync_dir(path.parent().unwrap_or(&self.manifests));
        self.prune_empty_dirs(&path);
        self.remove_unused_locked(&digests)
    }

    /// Writes `name`'s manifest (as [`Store::write_manifest`]) in place of `old`, the one it had
    /// before a pull or create, then removes the blobs only `old` used (those no manifest and no
    /// live pin references), announcing that through `progress` when there are any.
    pub(crate) fn replace_manifest(
        &self,
        name: &Name,
        bytes: &[u8],
        old: Option<&Manifest>,
        progress: &ProgressFn<'_>,
    ) -> Result<()> {
        let keep = Manifest::parse(bytes)?.digests();
        self.write_manifest(name, bytes)?;
        let unused: Vec<Digest> = old
            .map(Manifest::digests)
            .unwrap_or_default()
            .into_iter()
            .filter(|d| !keep.contains(d))
            .collect();
        if !unused.is_empty() {
            progress(Progress::RemovingUnusedLayers);
            self.remove_unused(&unused)?;
        }
        Ok(())
    }

    /// Removes those of `candidates` that no manifest and no live pin references.
    pub(crate) fn remove_unused(&self, candidates: &[Digest]) -> Result<Vec<Digest>> {
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let _lock = self.lock()?;
        self.remove_unused_locked(candidates)
    }

    fn remove_unused_locked(&self, candidates: &[Digest]) -> Result<Vec<Digest>> {
        let Some(mut used) = self.referenced_digests()? else {
            tracing::warn!("a manifest is unreadable; keeping blobs that may belong to it");
            return Ok(Vec::new());
        };
        used.extend(self.pinned_digests()?);
        let mut removed = Vec::new();
        for d in candidates {
            if used.contains(d) {
                continue;
            }
            match fs::remove_file(self.blob_path(d)) {
                Ok(()) => removed.push(*d),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(format!("removing blob {d}"), e)),
            }
        }
        Ok(removed)
    }

    /// Digests referenced by any manifest; `None` if some manifest cannot be read (then nothing
    /// may be deleted, since the unreadable manifest may reference anything).
    pub(crate) fn referenced_digests(&self) -> Result<Option<std::collections::HashSet<Digest>>> {
        let mut used = std::collections::HashSet::new();
        for name in self.manifest_names()? {
            match self.read_manifest_exact(&name) {
                Ok(m) => used.extend(m.manifest.digests()),
                Err(Error::ModelNotFound(_)) => {} // deleted meanwhile
                Err(e) => {
                    tracing::warn!(model = %name, error = %e, "unreadable manifest");
                    return Ok(None);
                }
            }
        }
        Ok(Some(used))
    }

    /// Removes the empty directories left above a deleted manifest (up to `manifests/`).
    fn prune_empty_dirs(&self, manifest_path: &Path) {
        let mut dir = manifest_path.parent();
        while let Some(d) = dir {
            if d == self.manifests || !d.starts_with(&self.manifests) {
                break;
            }
            // remove_dir fails on a non-empty directory, which ends the walk.
            if fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }

    /// Takes the store lock: held by deletes and cleanups while they decide what is unused.
    pub(crate) fn lock(&self) -> Result<File> {
        let path = self.meta.join("lock");
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io("opening the store lock", e))?;
        fsutil::lock_exclusive(&f).map_err(|e| Error::io("locking the store", e))?;
        Ok(f)
    }

    /// Registers an operation in progress (pull, create): blobs added to the returned pin are
    /// not removed by delete or cleanup until it is dropped, even if no manifest uses them yet.
    pub fn pin(&self) -> Result<Pin> {
        Pin::new(&self.meta.join("pins"))
    }

    pub(crate) fn pinned_digests(&self) -> Result<std::collections::HashSet<Digest>> {
        pins::live_digests(&self.meta.join("pins"))
    }
}

/// The entry of `dir` named `want`, matched exactly or else ignoring ASCII case; `want_file`
/// selects files, otherwise directories.
fn find_entry_ignore_case(dir: &Path, want: &str, want_file: bool) -> Result<Option<String>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io("reading the manifests directory", e)),
    };
    let mut fallback = None;
    for entry in rd.flatten() {
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let is_kind = entry
            .file_type()
            .map(|t| if want_file { t.is_file() } else { t.is_dir() })
            .unwrap_or(false);
        if !is_kind {
            continue;
        }
        if name == want {
            return Ok(Some(name));
        }
        if fallback.is_none() && name.eq_ignore_ascii_case(want) {
            fallback = Some(name);
        }
    }
    Ok(fallback)
}

#[cfg(test)]
mod tests;
