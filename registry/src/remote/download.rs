//! Downloading one blob: parallel ranged GETs, resumable, verified before it becomes visible.
//!
//! The blob is split into chunks (see [`PartialState`]); up to `connections` workers take the
//! next unfinished chunk in order and fetch it with a `Range` request from the blob's direct URL
//! (the registry, or the CDN it redirects to, which never gets our token). A writer thread
//! writes the bytes at their offsets into `sha256-<hex>-partial` and records per-chunk progress
//! in the state file about once a second; a hasher thread, fed by the writer, hashes the blob in
//! order as the contiguous prefix grows (from memory when a write extends it, else reading back
//! what other workers wrote), so receiving, writing and hashing overlap and verification costs
//! little after the last byte. Only when the sha256 matches is the file
//! synced and renamed to `sha256-<hex>`.
//!
//! The writer holds an exclusive lock on the data file, so two processes never write the same
//! partial download; within a process, pulls of the same blob share one [`Shared`] download,
//! which is cancelled when the last interested pull goes away (its state stays for a resume).

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_RANGE, RANGE};
use reqwest::{Method, StatusCode, Url};
use tokio::sync::{mpsc, watch};

use super::{check, error_body, origin, Client, PullOptions, Repo};
use crate::digest::{Digest, Hasher};
use crate::error::{Error, Result};
use crate::fsutil;
use crate::store::partial::PartialState;
use crate::store::Store;

/// Progress and outcome of a shared download.
#[derive(Clone, Debug)]
pub(crate) struct DlState {
    pub completed: u64,
    pub total: u64,
    pub done: Option<std::result::Result<(), Error>>,
}

/// A download in progress, shared by every pull waiting for it; dropping the last reference
/// cancels it.
pub(crate) struct Shared {
    rx: watch::Receiver<DlState>,
    task: tokio::task::AbortHandle,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Where to get a blob.
#[derive(Clone)]
pub(crate) struct BlobSource {
    pub repo: Repo,
    pub digest: Digest,
    pub size: u64,
}

impl Client {
    /// Makes sure the store has the blob, downloading it if needed (joining a download of the
    /// same blob already running in this process). `progress(completed, total)` is called about
    /// every 60 ms. Returns `true` if the blob was already there.
    pub(crate) async fn fetch_blob(
        &self,
        store: &Store,
        src: &BlobSource,
        opts: &PullOptions,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<bool> {
        if let Some(size) = store.blob_size(&src.digest) {
            progress(size, size);
            return Ok(true);
        }
        let key = (store.root().to_path_buf(), src.digest);
        let shared = {
            let mut map = self.inner.downloads.lock().unwrap_or_else(|e| e.into_inner());
            let running = map
                .get(&key)
                .and_then(std::sync::Weak::upgrade)
                .filter(|s| s.rx.borrow().done.is_none());
            match running {
                Some(s) => s,
                None => {
                    // A resumed download starts its progress where it stopped.
                    let already =
                        PartialState::load(&store.partial_state_path(&src.digest), &src.digest, src.size)
                            .map_or(0, |s| s.completed());
                    let (tx, rx) = watch::channel(DlState {
                        completed: already,
                        total: src.size,
                        done: None,
                    });
                    let (client, store, src, opts) = (self.clone(), store.clone(), src.clone(), opts.clone());
                    let task = tokio::spawn(async move {
                        let counter = Arc::new(AtomicU64::new(already));
                        let work = download(&client, &store, &src, &opts, counter.clone());
                        tokio::pin!(work);
                        let mut tick = tokio::time::interval(Duration::from_millis(60));
                        let result = loop {
                            tokio::select! {
                                r = &mut work => break r,
                                _ = tick.tick() => {
                                    let c = counter.load(Ordering::Relaxed);
                                    tx.send_modify(|s| s.completed = c);
                                }
                            }
                        };
                        let c = counter.load(Ordering::Relaxed);
                        tx.send_modify(|s| {
                            s.completed = if result.is_ok() { s.total } else { c };
                            s.done = Some(result);
                        });
                    });
                    let s = Arc::new(Shared {
                        rx,
                        task: task.abort_handle(),
                    });
                    map.insert(key, Arc::downgrade(&s));
                    s
                }
            }
        };
        let mut rx = shared.rx.clone();
        loop {
            let st = rx.borrow_and_update().clone();
            progress(st.completed, st.total);
            if let Some(done) = st.done {
                return done.map(|()| false);
            }
            if rx.changed().await.is_err() {
                return Err(Error::Cancelled);
            }
            // Progress at most every 60 ms, however fast the counter moves.
            tokio::time::sleep(Duration::from_millis(60)).await;
        }
    }
}

/// Opens and locks the partial data file, waiting while another process downloads the blob.
/// `None` if the blob appeared meanwhile.
async fn lock_partial(store: &Store, digest: &Digest) -> Result<Option<File>> {
    let path = store.partial_path(digest);
    let what = || format!("opening {}", relative(store, &path));
    let mut waited = false;
    loop {
        if store.has_blob(digest) {
            return Ok(None);
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| Error::io(what(), e))?;
        match fsutil::try_lock_exclusive(&file) {
            Ok(()) => {
                // The holder we waited for may have renamed this inode to the final blob: only
                // use the file if the partial path still names it.
                if same_file(&file, &path) {
                    if store.has_blob(digest) {
                        drop(file);
                        if waited {
                            let _ = std::fs::remove_file(&path);
                        }
                        return Ok(None);
                    }
                    return Ok(Some(file));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if !waited {
                    tracing::info!(digest = %digest, "another process is downloading this blob; waiting");
                }
                waited = true;
            }
            Err(e) => return Err(Error::io(what(), e)),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(unix)]
fn same_file(file: &File, path: &std::path::Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_file: &File, path: &std::path::Path) -> bool {
    path.exists()
}

fn relative(store: &Store, p: &std::path::Path) -> String {
    p.strip_prefix(store.root()).unwrap_or(p).display().to_string()
}

/// Downloads one blob into the store. `counter` tracks bytes on disk (including bytes of a
/// resumed download).
async fn download(
    client: &Client,
    store: &Store,
    src: &BlobSource,
    opts: &PullOptions,
    counter: Arc<AtomicU64>,
) -> Result<()> {
    let Some(file) = lock_partial(store, &src.digest).await? else {
        return Ok(());
    };
    let data_path = store.partial_path(&src.digest);
    let state_path = store.partial_state_path(&src.digest);
    let len = file
        .metadata()
        .map_err(|e| Error::io("reading a partial download", e))?
        .len();
    let resumed = if len == src.size {
        PartialState::load(&state_path, &src.digest, src.size)
    } else {
        None
    };
    let mut state = match resumed {
        Some(s) => {
            tracing::info!(digest = %src.digest, done = s.completed(), total = s.total, "resuming download");
            s
        }
        None => {
            // A fresh, sparse file of the blob's size: chunks are written at their offsets.
            file.set_len(0)
                .and_then(|()| file.set_len(src.size))
                .map_err(|e| Error::io("preparing a partial download", e))?;
            PartialState::new(src.digest, src.size, opts.chunk_size.max(1 << 20))
        }
    };
    store.check_space(src.size - state.completed())?;
    counter.store(state.completed(), Ordering::Relaxed);

    let fetcher = Fetcher {
        client,
        src,
        opts,
        direct: tokio::sync::Mutex::new(None),
    };
    if state.completed() < src.size {
        // Find the direct URL and whether it honours ranges; without ranges, fetch in one piece.
        let ranges = fetcher.resolve().await?;
        if !ranges && (state.chunks.len() > 1 || state.completed() > 0) {
            state = PartialState::new(src.digest, src.size, src.size.max(1));
            counter.store(0, Ordering::Relaxed);
        }
    }
    state
        .save(&state_path)
        .map_err(|e| Error::io("saving download state", e))?;

    // At most 32 + 32 batches (64 MiB) between the connections and the hasher.
    let (tx, rx) = mpsc::channel::<WriteMsg>(32);
    let (hash_tx, hash_rx) = std::sync::mpsc::sync_channel::<(u64, Batch)>(32);
    let clone = || {
        file.try_clone()
            .map_err(|e| Error::io("opening a partial download", e))
    };
    let hasher = {
        let (file, chunks) = (clone()?, state.chunks.clone());
        std::thread::Builder::new()
            .name("blob-hasher".into())
            .spawn(move || hash_loop(file, chunks, hash_rx))
            .map_err(|e| Error::io("starting the blob hasher", e))?
    };
    let writer = {
        let (file, state, counter, state_path) =
            (clone()?, state.clone(), counter.clone(), state_path.clone());
        std::thread::Builder::new()
            .name("blob-writer".into())
            .spawn(move || write_loop(file, state, state_path, rx, counter, hash_tx))
            .map_err(|e| Error::io("starting the blob writer", e))?
    };
    let queue: Mutex<VecDeque<(usize, u64, u64)>> = Mutex::new(
        state
            .chunks
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.is_complete())
            .map(|(i, c)| (i, c.offset + c.done, c.end()))
            .collect(),
    );
    let transferred = run_workers(&fetcher, &queue, &tx, &counter, opts.connections.clamp(1, 64)).await;
    drop(tx);
    drop(fetcher);
    // The writer's result says what reached the disk; report its error first (a full disk is
    // the cause, the workers' "writer gone" is the symptom).
    let joined = tokio::task::spawn_blocking(move || (writer.join(), hasher.join()))
        .await
        .map_err(|e| Error::io("blob writer", io::Error::other(e)))?;
    let panicked = |_| Error::io("blob writer", io::Error::other("a download thread panicked"));
    let (written, hashed) = (joined.0.map_err(panicked)?, joined.1.map_err(panicked)?);
    let state = written?;
    transferred?;
    let hasher = hashed?;

    if state.completed() != src.size {
        return Err(Error::SizeMismatch {
            digest: src.digest,
            want: src.size,
            got: state.completed(),
        });
    }
    let got = hasher.finish();
    if got != src.digest {
        drop(file);
        let _ = std::fs::remove_file(&data_path);
        let _ = std::fs::remove_file(&state_path);
        return Err(Error::DigestMismatch {
            want: src.digest,
            got,
        });
    }
    file.sync_data()
        .map_err(|e| Error::io("syncing a downloaded blob", e))?;
    let dest = store.blob_path(&src.digest);
    std::fs::rename(&data_path, &dest).map_err(|e| Error::io(format!("storing blob {}", src.digest), e))?;
    let _ = fsutil::sync_dir(store.blobs_dir());
    let _ = std::fs::remove_file(&state_path);
    drop(file);
    Ok(())
}

/// Runs the download workers, starting with one connection and adding one each second while
/// that raises the throughput by at least 10%, up to `max`. A fast link (a LAN, a nearby mirror)
/// stays at one or two connections, which is cheapest and keeps the data in order; a slow or
/// far one gets the parallelism it needs.
async fn run_workers(
    fetcher: &Fetcher<'_>,
    queue: &Mutex<VecDeque<(usize, u64, u64)>>,
    tx: &mpsc::Sender<WriteMsg>,
    counter: &AtomicU64,
    max: usize,
) -> Result<()> {
    use futures_util::stream::{FuturesUnordered, StreamExt};
    let mut running = FuturesUnordered::new();
    running.push(fetcher.work(queue, tx.clone()));
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let (mut last, mut best) = (counter.load(Ordering::Relaxed), 0u64);
    let mut ramping = max > 1;
    loop {
        tokio::select! {
            r = running.next() => match r {
                None => return Ok(()),
                Some(Err(e)) => return Err(e),
                Some(Ok(())) => {}
            },
            _ = tick.tick(), if ramping => {
                let now = counter.load(Ordering::Relaxed);
                let rate = now.saturating_sub(last);
                last = now;
                let queued = !queue.lock().unwrap_or_else(|e| e.into_inner()).is_empty();
                if rate > best + best / 10 && queued && running.len() < max {
                    best = rate;
                    running.push(fetcher.work(queue, tx.clone()));
                } else {
                    ramping = false;
                }
            }
        }
    }
}

/// Bytes for the writer: `data` goes at `offset`, in chunk `chunk`.
struct WriteMsg {
    chunk: usize,
    offset: u64,
    data: Batch,
}

/// Consecutive pieces of a response body, as the connection delivered them: batching them
/// costs no copy (the writer and the hasher take the pieces one by one).
#[derive(Default)]
struct Batch {
    pieces: Vec<Bytes>,
    len: usize,
}

impl Batch {
    fn push(&mut self, piece: Bytes) {
        self.len += piece.len();
        self.pieces.push(piece);
    }

    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn pieces(&self) -> impl Iterator<Item = &[u8]> {
        self.pieces.iter().map(|p| &p[..])
    }
}

/// Out-of-order bytes the hasher keeps in memory, at most; beyond it they are read back from disk
/// when the hash reaches them.
const HASH_BUFFER: u64 = 192 << 20;

/// The writer thread: writes at offsets, tracks per-chunk progress, hands the bytes to the hasher,
/// and saves the state about once a second and when it ends (error or not).
fn write_loop(
    file: File,
    mut state: PartialState,
    state_path: std::path::PathBuf,
    mut rx: mpsc::Receiver<WriteMsg>,
    counter: Arc<AtomicU64>,
    hash_tx: std::sync::mpsc::SyncSender<(u64, Batch)>,
) -> Result<PartialState> {
    let mut last_save = Instant::now();
    let result = (|| -> Result<()> {
        while let Some(msg) = rx.blocking_recv() {
            let c = &mut state.chunks[msg.chunk];
            let len = msg.data.len() as u64;
            if msg.offset != c.offset + c.done || c.done + len > c.size {
                return Err(Error::io(
                    "writing a download",
                    io::Error::other("out-of-order data for a chunk"),
                ));
            }
            let mut at = msg.offset;
            for piece in msg.data.pieces() {
                write_at(&file, piece, at).map_err(|e| Error::io("writing a download to blobs/", e))?;
                at += piece.len() as u64;
            }
            c.done += len;
            counter.fetch_add(len, Ordering::Relaxed);
            // The hasher only stops early if it failed, and then the download fails anyway.
            let _ = hash_tx.send((msg.offset, msg.data));
            if last_save.elapsed() >= Duration::from_secs(1) {
                state
                    .save_unsynced(&state_path)
                    .map_err(|e| Error::io("saving download state", e))?;
                start_writeback(&file);
                last_save = Instant::now();
            }
        }
        Ok(())
    })();
    // Whatever happened, record what is on disk so a later pull resumes from there.
    let saved = state.save_unsynced(&state_path);
    result?;
    saved.map_err(|e| Error::io("saving download state", e))?;
    Ok(state)
}

/// Bytes the hasher has been told about but cannot hash yet.
enum Pending {
    InMemory(Batch),
    OnDisk(u64),
}

/// The hasher thread: hashes the blob in order. Bytes that arrive in order are hashed from
/// memory; out-of-order ones are kept (up to [`HASH_BUFFER`]) or read back once the hash reaches
/// them. Bytes of a resumed download are read back first.
fn hash_loop(
    file: File,
    resumed: Vec<crate::store::partial::Chunk>,
    rx: std::sync::mpsc::Receiver<(u64, Batch)>,
) -> Result<Hasher> {
    let mut hasher = Hasher::new();
    let mut pending: std::collections::BTreeMap<u64, Pending> = resumed
        .iter()
        .filter(|c| c.done > 0)
        .map(|c| (c.offset, Pending::OnDisk(c.done)))
        .collect();
    let mut buffered = 0u64;
    let mut buf = Vec::new();
    let mut drain = |hasher: &mut Hasher,
                     pending: &mut std::collections::BTreeMap<u64, Pending>,
                     buffered: &mut u64|
     -> Result<()> {
        while let Some(p) = pending.remove(&hasher.len()) {
            match p {
                Pending::InMemory(data) => {
                    *buffered -= data.len() as u64;
                    data.pieces().for_each(|p| hasher.update(p));
                }
                Pending::OnDisk(len) => {
                    let mut at = hasher.len();
                    let end = at + len;
                    while at < end {
                        let n = ((end - at) as usize).min(1 << 20);
                        buf.resize(n, 0);
                        read_at(&file, &mut buf, at).map_err(|e| Error::io("reading back a download", e))?;
                        hasher.update(&buf);
                        at += n as u64;
                    }
                }
            }
        }
        Ok(())
    };
    drain(&mut hasher, &mut pending, &mut buffered)?;
    for (offset, data) in rx {
        let len = data.len() as u64;
        if offset == hasher.len() {
            data.pieces().for_each(|p| hasher.update(p));
        } else if buffered + len <= HASH_BUFFER {
            buffered += len;
            pending.insert(offset, Pending::InMemory(data));
        } else {
            pending.insert(offset, Pending::OnDisk(len));
        }
        drain(&mut hasher, &mut pending, &mut buffered)?;
    }
    Ok(hasher)
}

/// Asks the kernel to start writing the file's dirty pages back now, so the fsync before the
/// rename has little left to wait for (Linux; elsewhere the fsync does all of it).
fn start_writeback(file: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::io::AsRawFd;
        // SAFETY: sync_file_range only reads its integer arguments; the fd is valid while `file`
        // is borrowed. A failure only means writeback starts later.
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

#[cfg(unix)]
fn write_at(file: &File, data: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, data, offset)
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(windows)]
fn write_at(file: &File, mut data: &[u8], mut offset: u64) -> io::Result<()> {
    while !data.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_write(file, data, offset)?;
        data = &data[n..];
        offset += n as u64;
    }
    Ok(())
}

#[cfg(windows)]
fn read_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> io::Result<()> {
    while !buf.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_read(file, buf, offset)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf = &mut buf[n..];
        offset += n as u64;
    }
    Ok(())
}

/// Fetches byte ranges of one blob.
struct Fetcher<'a> {
    client: &'a Client,
    src: &'a BlobSource,
    opts: &'a PullOptions,
    /// The URL the registry sends blob requests to, whether our token goes there, and whether
    /// ranges work.
    direct: tokio::sync::Mutex<Option<Direct>>,
}

#[derive(Clone)]
struct Direct {
    url: Url,
    ranges: bool,
}

/// Why an attempt at a range failed.
enum Attempt {
    /// Worth retrying after a pause.
    Retry(Error),
    /// No data for `stall_timeout`: retry at once, without counting it as a failure.
    Stalled,
    /// The direct URL stopped working (e.g. an expired signature): resolve it again.
    Refresh(Error),
    /// Retrying cannot help.
    Fatal(Error),
}

impl Fetcher<'_> {
    fn blob_url(&self) -> Url {
        self.src.repo.url(&format!("blobs/{}", self.src.digest))
    }

    /// Asks the registry for the blob (a one-byte range), following redirects, to learn the direct
    /// URL and whether ranges are honoured.
    async fn resolve(&self) -> Result<bool> {
        let mut headers = HeaderMap::new();
        headers.insert(RANGE, HeaderValue::from_static("bytes=0-0"));
        let mut attempt = 0;
        loop {
            let res = self
                .client
                .send(
                    &self.src.repo,
                    Method::GET,
                    self.blob_url(),
                    headers.clone(),
                    None,
                    true,
                )
                .await;
            let resp = match res {
                Ok(r) if r.status() == StatusCode::NOT_FOUND => {
                    return Err(Error::Registry {
                        status: 404,
                        body: format!(
                            "blob {} not found in {}: {}",
                            self.src.digest,
                            self.src.repo.path,
                            error_body(r).await
                        ),
                    })
                }
                Ok(r) if r.status().is_server_error() && attempt < self.opts.max_retries => {
                    attempt += 1;
                    tokio::time::sleep(self.opts.backoff(attempt)).await;
                    continue;
                }
                Ok(r) => check(r).await?,
                Err(e @ Error::Http { .. }) if attempt < self.opts.max_retries => {
                    attempt += 1;
                    tracing::info!(error = %e, "resolving blob URL failed; retrying");
                    tokio::time::sleep(self.opts.backoff(attempt)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let ranges = resp.status() == StatusCode::PARTIAL_CONTENT;
            *self.direct.lock().await = Some(Direct {
                url: resp.url().clone(),
                ranges,
            });
            drop(resp);
            return Ok(ranges);
        }
    }

    async fn direct(&self, refresh: bool) -> Result<Direct> {
        if refresh {
            self.resolve().await?;
        }
        let d = self.direct.lock().await.clone();
        match d {
            Some(d) => Ok(d),
            None => {
                self.resolve().await?;
                self.direct
                    .lock()
                    .await
                    .clone()
                    .ok_or_else(|| Error::io("downloading", io::Error::other("no blob URL")))
            }
        }
    }

    /// A worker: takes chunks from the queue until it is empty.
    async fn work(
        &self,
        queue: &Mutex<VecDeque<(usize, u64, u64)>>,
        tx: mpsc::Sender<WriteMsg>,
    ) -> Result<()> {
        loop {
            let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
            let Some((chunk, start, end)) = next else {
                return Ok(());
            };
            self.fetch_range(chunk, start, end, &tx).await?;
        }
    }

    /// Fetches `start..end` of chunk `chunk`, retrying failures with backoff and stalls at once.
    async fn fetch_range(
        &self,
        chunk: usize,
        start: u64,
        end: u64,
        tx: &mpsc::Sender<WriteMsg>,
    ) -> Result<()> {
        let mut pos = start;
        let mut failures = 0;
        let mut stalls = 0;
        let mut refresh = false;
        while pos < end {
            match self.attempt(chunk, &mut pos, end, tx, refresh).await {
                Ok(()) => {}
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Stalled) => {
                    stalls += 1;
                    tracing::info!(digest = %self.src.digest.short(), chunk, "download stalled; retrying");
                    if stalls > 10 * self.opts.max_retries.max(1) {
                        return Err(Error::io(
                            format!("downloading {}", self.src.digest),
                            io::Error::new(io::ErrorKind::TimedOut, "stalled too many times"),
                        ));
                    }
                }
                Err(Attempt::Retry(e) | Attempt::Refresh(e)) if failures >= self.opts.max_retries => {
                    return Err(e)
                }
                Err(Attempt::Refresh(e)) => {
                    failures += 1;
                    tracing::info!(error = %e, "blob URL stopped working; asking the registry again");
                    refresh = true;
                    continue;
                }
                Err(Attempt::Retry(e)) => {
                    failures += 1;
                    tracing::info!(digest = %self.src.digest.short(), chunk, attempt = failures, error = %e, "download failed; retrying");
                    tokio::time::sleep(self.opts.backoff(failures)).await;
                }
            }
            refresh = false;
        }
        Ok(())
    }

    /// One request for `pos..end`; advances `pos` by what was handed to the writer.
    async fn attempt(
        &self,
        chunk: usize,
        pos: &mut u64,
        end: u64,
        tx: &mpsc::Sender<WriteMsg>,
        refresh: bool,
    ) -> std::result::Result<(), Attempt> {
        let direct = self.direct(refresh).await.map_err(Attempt::Retry)?;
        let mut headers = HeaderMap::new();
        let whole = !direct.ranges;
        if !whole {
            let range = format!("bytes={}-{}", *pos, end - 1);
            headers.insert(
                RANGE,
                HeaderValue::from_str(&range)
                    .map_err(|e| Attempt::Fatal(Error::io("range", io::Error::other(e))))?,
            );
        }
        let on_registry = origin(&direct.url) == origin(&self.src.repo.base);
        let resp = if on_registry {
            self.client
                .send(
                    &self.src.repo,
                    Method::GET,
                    direct.url.clone(),
                    headers,
                    None,
                    false,
                )
                .await
        } else {
            // A CDN or storage URL: no token, plain request.
            self.client
                .inner
                .http
                .get(direct.url.clone())
                .headers(headers)
                .send()
                .await
                .map_err(|e| Error::http("downloading a blob", e))
        };
        let mut resp = match resp {
            Ok(r) => r,
            Err(e @ Error::Unauthorized(_)) => return Err(Attempt::Fatal(e)),
            Err(e) => return Err(Attempt::Retry(e)),
        };
        let status = resp.status();
        let expected = if whole {
            StatusCode::OK
        } else {
            StatusCode::PARTIAL_CONTENT
        };
        if status != expected {
            let e = Error::Registry {
                status: status.as_u16(),
                body: error_body(resp).await,
            };
            return Err(match status.as_u16() {
                401 | 403 | 404 | 410 | 307 | 302 | 301 | 303 | 308 if !on_registry => Attempt::Refresh(e),
                408 | 429 | 500..=599 => Attempt::Retry(e),
                200 => Attempt::Fatal(Error::Registry {
                    status: 200,
                    body: "the server ignored a range request mid-download".into(),
                }),
                _ => Attempt::Fatal(e),
            });
        }
        if !whole {
            if let Some(cr) = resp.headers().get(CONTENT_RANGE).and_then(|v| v.to_str().ok()) {
                let starts_right = cr
                    .strip_prefix("bytes ")
                    .and_then(|r| r.split('-').next())
                    .and_then(|s| s.parse::<u64>().ok())
                    == Some(*pos);
                if !starts_right {
                    return Err(Attempt::Retry(Error::Registry {
                        status: 206,
                        body: format!("unexpected Content-Range {cr:?}"),
                    }));
                }
            }
        }
        // The body arrives in pieces of a few KiB to a few hundred; they go to the writer in
        // batches of `WRITE_BATCH`, so the threads downstream wake once per batch, not per piece.
        let mut batch = Batch::default();
        let outcome = loop {
            let next = tokio::time::timeout(self.opts.stall_timeout, resp.chunk()).await;
            let data = match next {
                Err(_) => break Err(Attempt::Stalled),
                Ok(Err(e)) => break Err(Attempt::Retry(Error::http("downloading a blob", e))),
                Ok(Ok(None)) => break Ok(()),
                Ok(Ok(Some(d))) => d,
            };
            let want = (end - *pos) as usize - batch.len();
            let data = if data.len() > want {
                data.slice(..want)
            } else {
                data
            };
            batch.push(data);
            if batch.len() >= WRITE_BATCH {
                send(tx, chunk, pos, std::mem::take(&mut batch)).await?;
            }
            if *pos + batch.len() as u64 == end {
                break Ok(());
            }
        };
        // What arrived before a failure is kept: the retry asks only for the rest.
        if !batch.is_empty() {
            send(tx, chunk, pos, batch).await?;
        }
        outcome?;
        if *pos < end {
            return Err(Attempt::Retry(Error::io(
                format!("downloading {}", self.src.digest),
                io::Error::new(io::ErrorKind::UnexpectedEof, "the connection closed early"),
            )));
        }
        Ok(())
    }
}

/// Bytes handed to the writer at a time (at most; the last piece of a range may be shorter).
const WRITE_BATCH: usize = 1 << 20;

/// Hands `data` (the bytes at `*pos` of chunk `chunk`) to the writer and advances `*pos`.
async fn send(
    tx: &mpsc::Sender<WriteMsg>,
    chunk: usize,
    pos: &mut u64,
    data: Batch,
) -> std::result::Result<(), Attempt> {
    let len = data.len() as u64;
    tx.send(WriteMsg {
        chunk,
        offset: *pos,
        data,
    })
    .await
    .map_err(|_| Attempt::Fatal(Error::Cancelled))?;
    *pos += len;
    Ok(())
}
