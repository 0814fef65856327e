//! The scheduler: which models are loaded, for how long, and who may use them.
//!
//! - A model loads on first use ([`Scheduler::acquire`]) and stays while requests hold a
//!   [`Lease`]; when the last one ends, its keep-alive starts (the request's, else the runner's
//!   last one, else the configured default): zero unloads at once, forever never.
//! - At most `max_loaded_models` are loaded, and together they stay within the memory budget
//!   (weights + KV cache + scratch, estimated from the file): to make room, the idle model whose
//!   keep-alive ends first is unloaded; if every model is busy, the load waits.
//! - Loads happen one at a time. Two names that share a weights file share one runner.
//! - A request asking for a larger context than the loaded one reloads the model; a smaller
//!   one uses it as it is.
//! - Requests waiting for a load or a slot are counted; past `max_queue` they get a 503.
//! - Each loaded model has `num_parallel` slots; a request takes one ([`Lease::slot`]) before
//!   it is handed to the runner, so the runner never holds more than it can serve.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use engine::generate::runner::{Command, Runner, RunnerHandle, RunnerParams};
use engine::tokenizer::Vocab;
use engine::{KvType, Model, ModelParams};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

use crate::error::ApiError;
use crate::keep_alive::KeepAlive;
use crate::util::lock;

#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    pub keep_alive: KeepAlive,
    pub num_parallel: u32,
    pub max_loaded_models: usize,
    pub max_queue: usize,
    pub max_memory: u64,
    pub kv_type: KvType,
    pub context_length: u32,
    pub num_threads: usize,
    /// Tokens of prompt evaluated per step of a runner.
    pub step_tokens: usize,
}

/// What a request needs loaded.
#[derive(Clone, Debug)]
pub struct Want {
    /// The weights file (the model blob).
    pub path: PathBuf,
    /// The name the request used, shown by `/api/ps`.
    pub name: String,
    /// The model's manifest digest (hex).
    pub digest: String,
    pub details: registry::Details,
    pub num_ctx: Option<u32>,
    pub keep_alive: Option<KeepAlive>,
}

/// A loaded model.
pub struct Loaded {
    pub path: PathBuf,
    pub model: Arc<Model>,
    pub vocab: Arc<Vocab>,
    /// Context length of each slot.
    pub n_ctx: u32,
    pub n_slots: u32,
    /// Estimated memory in bytes.
    pub size: u64,
    runner: Mutex<Option<RunnerHandle>>,
    slots: Arc<Semaphore>,
    state: Mutex<LoadedState>,
}

struct LoadedState {
    refs: usize,
    keep_alive: KeepAlive,
    /// When the model unloads, once idle (`None` while in use or kept forever).
    expires_at: Option<SystemTime>,
    /// Bumped whenever the model is used, so that an older expiry timer does nothing.
    generation: u64,
    /// Unload as soon as idle (evicted, replaced by a bigger context, or asked to).
    evicting: bool,
    /// Take no new requests and unload once idle, for a request waiting for room (see
    /// [`Draining`]); unlike `evicting`, undone if that request goes away first.
    draining: bool,
    name: String,
    digest: String,
    details: registry::Details,
}

impl Loaded {
    /// The name the model was last used by (as `/api/ps` shows it).
    pub fn name(&self) -> String {
        lock(&self.state).name.clone()
    }

    fn is_idle(&self) -> bool {
        lock(&self.state).refs == 0
    }
}

/// A model in use by one request. Dropping it ends the use.
pub struct Lease {
    pub loaded: Arc<Loaded>,
    /// The request's context (its `num_ctx`, or the default, within what the model was trained
    /// on): at most the loaded one's. A model loaded with a larger context is reused, and the
    /// request runs as in a context of this size.
    pub n_ctx: u32,
    sched: Arc<Scheduler>,
    /// The name the request used (the queue's count by model).
    name: String,
    /// How long the request waited for the model to load.
    pub load_duration: Duration,
}

/// The busy model a request waiting for room has stopped from taking new requests. If the
/// request goes away (its client left) before the model drains, the model takes requests again
/// and stays loaded; once it has unloaded, clearing the flag changes nothing.
struct Draining(Option<Arc<Loaded>>);

impl Drop for Draining {
    fn drop(&mut self) {
        if let Some(l) = &self.0 {
            lock(&l.state).draining = false;
        }
    }
}

/// A place in the queue of requests waiting for a model (named) or a slot, held only while
/// the request waits: one served at once is never counted, so a small queue bound refuses
/// only requests that would wait.
struct Ticket {
    sched: Arc<Scheduler>,
    model: String,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.sched.waiting.fetch_sub(1, Ordering::Relaxed);
        let mut by = lock(&self.sched.waiting_by_model);
        if let Some(n) = by.get_mut(&self.model) {
            *n -= 1;
            if *n == 0 {
                by.remove(&self.model);
            }
        }
    }
}

impl Lease {
    /// A free slot of the model, waiting for one (in the queue: 503 when it is full) if none
    /// is free; holding the permit keeps the slot.
    pub async fn slot(&self) -> Result<OwnedSemaphorePermit, ApiError> {
        let slots = self.loaded.slots.clone();
        if let Ok(permit) = slots.clone().try_acquire_owned() {
            return Ok(permit);
        }
        let _waiting = self.sched.enqueue(&self.name)?;
        slots
            .acquire_owned()
            .await
            .map_err(|_| match self.sched.check_taking() {
                Err(stopping) => stopping,
                Ok(()) => ApiError::unloaded(),
            })
    }

    /// Hands work to the model's runner.
    pub fn submit(&self, cmd: Command) -> Result<(), ApiError> {
        match lock(&self.loaded.runner).as_ref() {
            Some(r) => r
                .submit(cmd)
                .map_err(|_| ApiError::internal("the model's runner has stopped")),
            None => Err(ApiError::unloaded()),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.sched.release(&self.loaded);
    }
}

/// A loaded model as `/api/ps` shows it.
pub struct Status {
    pub name: String,
    pub digest: String,
    pub details: registry::Details,
    pub size: u64,
    pub expires_at: SystemTime,
    pub context_length: u32,
}

pub struct Scheduler {
    cfg: SchedulerConfig,
    loaded: Mutex<HashMap<PathBuf, Arc<Loaded>>>,
    changed: Notify,
    load_lock: tokio::sync::Mutex<()>,
    waiting: AtomicUsize,
    /// The same, by the model they want (for `/metrics`).
    waiting_by_model: Mutex<std::collections::BTreeMap<String, usize>>,
    /// The server is shutting down (see [`Scheduler::stop_taking`]).
    stopping: std::sync::atomic::AtomicBool,
}

/// Far enough ahead to read as "forever" (Ollama's CLI says Forever past 20 years).
const FOREVER: Duration = Duration::from_secs(100 * 365 * 86_400);

impl Scheduler {
    pub fn new(cfg: SchedulerConfig) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            cfg,
            loaded: Mutex::new(HashMap::new()),
            changed: Notify::new(),
            load_lock: tokio::sync::Mutex::new(()),
            waiting: AtomicUsize::new(0),
            waiting_by_model: Mutex::default(),
            stopping: Default::default(),
        })
    }

    /// The server is shutting down: requests being served finish (within its grace period);
    /// those waiting for a load or a slot, and any that come, are turned away at once (503)
    /// rather than at the end of the grace period.
    pub fn stop_taking(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        for l in lock(&self.loaded).values() {
            l.slots.close();
        }
        self.changed.notify_waiters();
    }

    fn check_taking(&self) -> Result<(), ApiError> {
        if self.stopping.load(Ordering::SeqCst) {
            Err(ApiError::shutting_down())
        } else {
            Ok(())
        }
    }

    pub fn config(&self) -> &SchedulerConfig {
        &self.cfg
    }

    /// Joins the queue of requests waiting for `model`, or 503 when it is full.
    fn enqueue(self: &Arc<Self>, model: &str) -> Result<Ticket, ApiError> {
        let n = self.waiting.fetch_add(1, Ordering::Relaxed);
        *lock(&self.waiting_by_model).entry(model.to_string()).or_insert(0) += 1;
        let ticket = Ticket {
            sched: self.clone(),
            model: model.to_string(),
        };
        if n >= self.cfg.max_queue {
            return Err(ApiError::busy());
        }
        Ok(ticket)
    }

    /// Requests waiting for a model or a slot.
    pub fn queued(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Requests waiting, by the model they want (models nobody waits for left out).
    pub fn queued_by_model(&self) -> Vec<(String, usize)> {
        lock(&self.waiting_by_model)
            .iter()
            .map(|(m, n)| (m.clone(), *n))
            .collect()
    }

    /// The model loaded for `want` (loading it first if needed).
    pub async fn acquire(self: &Arc<Self>, want: &Want) -> Result<Lease, ApiError> {
        let t0 = Instant::now();
        self.check_taking()?;
        if let Some(l) = self.try_use(want) {
            return Ok(self.lease(l, want, t0));
        }
        let _waiting = self.enqueue(&want.name)?;
        let _one_load = self.load_lock.lock().await;
        // A load and the setting up after it (vocabulary, context, threads) count as reading
        // weights, so other models' weights move to huge pages only slowly meanwhile: each move
        // holds the memory-map lock that the load's allocations and page faults wait for.
        let _loading = engine::model::reading();
        let mut opened: Option<Arc<Model>> = None;
        let mut draining = Draining(None);
        loop {
            self.check_taking()?;
            if let Some(l) = self.try_use(want) {
                return Ok(self.lease(l, want, t0));
            }
            let waiter = self.changed.notified();
            tokio::pin!(waiter);
            waiter.as_mut().enable();
            // The same weights with too small a context: replace once idle.
            let old = lock(&self.loaded).get(&want.path).cloned();
            if let Some(old) = old {
                lock(&old.state).evicting = true;
                if old.is_idle() {
                    self.unload(&old).await;
                } else {
                    waiter.await;
                }
                continue;
            }
            let model = match &opened {
                Some(m) => m.clone(),
                None => {
                    let path = want.path.clone();
                    let m = tokio::task::spawn_blocking(move || Model::load(&path, &ModelParams::default()))
                        .await
                        .map_err(|e| ApiError::internal(e.to_string()))?
                        .map_err(|e| {
                            ApiError::internal(format!("loading the model: {}", e.without_path()))
                        })?;
                    opened = Some(m.clone());
                    m
                }
            };
            let n_ctx = self.context_for(&model, want.num_ctx);
            let n_slots = self.cfg.num_parallel.max(1);
            let est = model
                .estimate_memory(n_ctx * n_slots, 512, n_slots, self.cfg.kv_type)
                .total();
            let (over, victim) = {
                let loaded = lock(&self.loaded);
                let used: u64 = loaded.values().map(|l| l.size).sum();
                let over = loaded.len() >= self.cfg.max_loaded_models || used + est > self.cfg.max_memory;
                if over && loaded.is_empty() {
                    return Err(ApiError::internal(format!(
                        "model requires more system memory ({}) than is available ({}); lower num_ctx or OLLAMARS_NUM_PARALLEL, or raise OLLAMARS_MAX_MEMORY",
                        human_bytes(est),
                        human_bytes(self.cfg.max_memory)
                    )));
                }
                // The idle model whose keep-alive ends first; else the busy one with the fewest
                // requests, to go once they end.
                let victim = loaded
                    .values()
                    .filter(|l| l.is_idle())
                    .min_by_key(|l| lock(&l.state).expires_at.unwrap_or(SystemTime::now() + FOREVER))
                    .cloned()
                    .ok_or_else(|| loaded.values().min_by_key(|l| lock(&l.state).refs).cloned());
                (over, victim)
            };
            if over {
                match victim {
                    Ok(v) => {
                        tracing::info!(model = %lock(&v.state).name, "unloading to make room");
                        self.unload(&v).await;
                    }
                    Err(busy) => {
                        // Every model is busy. The chosen one takes no new requests (they wait
                        // behind this one), so that it drains and unloads: a steady stream of
                        // requests for a loaded model must not starve one for another.
                        if let Some(b) = busy {
                            let mut st = lock(&b.state);
                            if !st.draining {
                                st.draining = true;
                                tracing::info!(model = %st.name, "unloading to make room once its requests end");
                                drop(st);
                                draining.0 = Some(b);
                            }
                        }
                        waiter.await
                    }
                }
                continue;
            }
            let loaded = self.load(model, n_ctx, n_slots, est, want).await?;
            lock(&self.loaded).insert(want.path.clone(), loaded.clone());
            crate::metrics::METRICS.model_loaded(&want.name);
            tracing::info!(model = %want.name, n_ctx, n_slots, size = est, "model loaded");
            return Ok(self.lease(loaded, want, t0));
        }
    }

    fn context_for(&self, model: &Model, asked: Option<u32>) -> u32 {
        let mut n = asked.unwrap_or(self.cfg.context_length);
        if model.n_ctx_train() > 0 {
            n = n.min(model.n_ctx_train());
        }
        n.max(4)
    }

    /// A loaded model that serves `want`, with a use counted; `None` if it must be loaded.
    fn try_use(&self, want: &Want) -> Option<Arc<Loaded>> {
        let loaded = lock(&self.loaded);
        let l = loaded.get(&want.path)?;
        let mut st = lock(&l.state);
        if st.evicting || st.draining {
            return None;
        }
        let asked = self.context_for(&l.model, want.num_ctx);
        if asked > l.n_ctx {
            return None;
        }
        st.refs += 1;
        st.generation += 1;
        st.expires_at = None;
        if let Some(k) = want.keep_alive {
            st.keep_alive = k;
        }
        st.name = want.name.clone();
        st.digest = want.digest.clone();
        st.details = want.details.clone();
        Some(l.clone())
    }

    fn lease(self: &Arc<Self>, loaded: Arc<Loaded>, want: &Want, t0: Instant) -> Lease {
        Lease {
            n_ctx: self.context_for(&loaded.model, want.num_ctx).min(loaded.n_ctx),
            name: want.name.clone(),
            loaded,
            sched: self.clone(),
            load_duration: t0.elapsed(),
        }
    }

    async fn load(
        &self,
        model: Arc<Model>,
        n_ctx: u32,
        n_slots: u32,
        size: u64,
        want: &Want,
    ) -> Result<Arc<Loaded>, ApiError> {
        let params = RunnerParams {
            n_ctx,
            n_slots,
            n_batch: 512,
            step_tokens: self.cfg.step_tokens,
            kv_type: self.cfg.kv_type,
            n_threads: self.cfg.num_threads,
        };
        let path = want.path.clone();
        let (vocab, runner) = tokio::task::spawn_blocking(move || -> Result<_, engine::Error> {
            let vocab = Arc::new(model.vocab()?);
            let runner = Runner::new(model.clone(), vocab.clone(), params)?
                .spawn("ollamars-runner")
                .map_err(|source| engine::Error::Io {
                    path: path.clone(),
                    source,
                })?;
            Ok((vocab, (runner, model)))
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(format!("loading the model: {}", e.without_path())))?;
        let (runner, model) = runner;
        Ok(Arc::new(Loaded {
            path: want.path.clone(),
            model,
            vocab,
            n_ctx,
            n_slots,
            size,
            runner: Mutex::new(Some(runner)),
            slots: Arc::new(Semaphore::new(n_slots as usize)),
            state: Mutex::new(LoadedState {
                refs: 1,
                keep_alive: want.keep_alive.unwrap_or(self.cfg.keep_alive),
                expires_at: None,
                generation: 0,
                evicting: false,
                draining: false,
                name: want.name.clone(),
                digest: want.digest.clone(),
                details: want.details.clone(),
            }),
        }))
    }

    /// A request is done with `l`.
    fn release(self: &Arc<Self>, l: &Arc<Loaded>) {
        let mut st = lock(&l.state);
        st.refs = st.refs.saturating_sub(1);
        if st.refs == 0 {
            st.generation += 1;
            let now_unload = st.evicting || st.draining || st.keep_alive.is_zero();
            match st.keep_alive {
                _ if now_unload => {
                    drop(st);
                    self.unload_in_background(l.clone());
                }
                KeepAlive::Forever => st.expires_at = None,
                KeepAlive::For(d) => {
                    st.expires_at = Some(SystemTime::now() + d);
                    let generation = st.generation;
                    drop(st);
                    if let Ok(rt) = tokio::runtime::Handle::try_current() {
                        let (sched, l) = (self.clone(), l.clone());
                        rt.spawn(async move {
                            tokio::time::sleep(d).await;
                            // Still loaded (not evicted or replaced meanwhile) and unused since.
                            let expired = sched.holds(&l) && {
                                let st = lock(&l.state);
                                st.refs == 0 && st.generation == generation
                            };
                            if expired {
                                tracing::info!(model = %lock(&l.state).name, "keep-alive expired, unloading");
                                sched.unload(&l).await;
                            }
                        });
                    }
                }
            }
        }
        self.changed.notify_waiters();
    }

    fn unload_in_background(self: &Arc<Self>, l: Arc<Loaded>) {
        let sched = self.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move { sched.unload(&l).await });
            }
            Err(_) => sched.remove(&l).into_iter().for_each(RunnerHandle::shutdown),
        }
    }

    /// Whether `l` is the model loaded for its file (not one unloaded or replaced since).
    fn holds(&self, l: &Arc<Loaded>) -> bool {
        lock(&self.loaded).get(&l.path).is_some_and(|x| Arc::ptr_eq(x, l))
    }

    fn remove(&self, l: &Arc<Loaded>) -> Option<RunnerHandle> {
        let mut loaded = lock(&self.loaded);
        if loaded.get(&l.path).is_some_and(|x| Arc::ptr_eq(x, l)) {
            loaded.remove(&l.path);
        }
        drop(loaded);
        let runner = lock(&l.runner).take();
        if runner.is_some() {
            crate::metrics::METRICS.model_unloaded(&l.name());
        }
        runner
    }

    /// Unloads a model and waits until its memory is free.
    async fn unload(&self, l: &Arc<Loaded>) {
        if let Some(h) = self.remove(l) {
            let _ = tokio::task::spawn_blocking(move || h.shutdown()).await;
            tracing::info!(model = %lock(&l.state).name, "model unloaded");
        }
        self.changed.notify_waiters();
    }

    /// `keep_alive: 0` with an empty prompt (Ollama's `expireRunner`): the model's keep-alive
    /// becomes zero, so it unloads now if idle, else when its requests end. Requests that come
    /// meanwhile are served by it, and one that brings its own keep-alive keeps it loaded:
    /// the last request's keep-alive wins, as for any request.
    pub async fn expire(&self, path: &Path) {
        self.unload_when_idle(path, false).await
    }

    /// A deleted model: unloaded now if idle, else when its requests end, taking no new ones.
    pub async fn evict(&self, path: &Path) {
        self.unload_when_idle(path, true).await
    }

    async fn unload_when_idle(&self, path: &Path, evict: bool) {
        let l = lock(&self.loaded).get(path).cloned();
        if let Some(l) = l {
            let idle = {
                let mut st = lock(&l.state);
                st.keep_alive = KeepAlive::For(Duration::ZERO);
                st.evicting |= evict;
                st.refs == 0
            };
            if idle {
                self.unload(&l).await;
            }
        }
    }

    /// Slots serving a request now, over all loaded models.
    pub fn busy_slots(&self) -> usize {
        lock(&self.loaded)
            .values()
            .map(|l| (l.n_slots as usize).saturating_sub(l.slots.available_permits()))
            .sum()
    }

    /// Slots of all loaded models.
    pub fn total_slots(&self) -> usize {
        lock(&self.loaded).values().map(|l| l.n_slots as usize).sum()
    }

    /// Each loaded model's name, busy slots and slots.
    pub fn slot_usage(&self) -> Vec<(String, usize, usize)> {
        let mut out: Vec<_> = lock(&self.loaded)
            .values()
            .map(|l| {
                let total = l.n_slots as usize;
                (l.name(), total.saturating_sub(l.slots.available_permits()), total)
            })
            .collect();
        out.sort();
        out
    }

    /// The loaded models, longest remaining time first.
    pub fn status(&self) -> Vec<Status> {
        let now = SystemTime::now();
        let mut out: Vec<Status> = lock(&self.loaded)
            .values()
            .map(|l| {
                let st = lock(&l.state);
                let expires_at = match (st.expires_at, st.keep_alive) {
                    (Some(t), _) => t,
                    (None, KeepAlive::Forever) => now + FOREVER,
                    (None, KeepAlive::For(d)) => now + d,
                };
                Status {
                    name: st.name.clone(),
                    digest: st.digest.clone(),
                    details: st.details.clone(),
                    size: l.size,
                    expires_at,
                    context_length: l.n_ctx,
                }
            })
            .collect();
        out.sort_by_key(|s| std::cmp::Reverse(s.expires_at));
        out
    }

    /// Unloads every model; `abort` ends their requests at once, else they are let finish.
    pub async fn shutdown(&self, abort: bool) {
        let all: Vec<Arc<Loaded>> = lock(&self.loaded).drain().map(|(_, l)| l).collect();
        for l in all {
            let handle = lock(&l.runner).take();
            if let Some(h) = handle {
                let _ =
                    tokio::task::spawn_blocking(move || if abort { h.abort() } else { h.shutdown() }).await;
            }
        }
        self.changed.notify_waiters();
    }
}

/// Bytes as people read them: `1.5 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
