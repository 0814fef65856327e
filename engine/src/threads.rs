//! A persistent thread pool for the forward pass, built for many small parallel steps.
//!
//! A decode step of a small model is a few hundred matmuls and attention calls of tens of
//! microseconds each, so the cost of starting and joining a parallel step must be well under a
//! microsecond. Workers spin on an epoch counter for a while after each step (so the next one
//! starts at once) and only then park on a condition variable; the calling thread takes part as
//! thread 0; work inside a step is handed out in chunks through an atomic counter (threads that
//! finish early take more, so a thread the OS preempts does not hold the others up); a spinning
//! barrier separates the phases of a step that depend on each other. Chunk-only steps
//! ([`ThreadPool::for_each_chunk`]) are elastic: workers join them through a gate that the caller
//! closes once its own chunks run out, so a worker the OS has not scheduled (a busy machine)
//! costs nothing instead of a time slice per step.
//!
//! A pool is made current for a closure with [`ThreadPool::install`]; the ops find it with
//! [`current`]. Steps started from inside a step run on the calling thread alone.

use std::cell::{Cell, UnsafeCell};
use std::ops::Range;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle worker spins before it parks (overridable with `OLLAMARS_SPIN_US`).
const DEFAULT_SPIN: Duration = Duration::from_micros(2000);
/// Steps running now, in every pool of the process. A worker waiting for its own pool's next
/// step parks at once while another pool runs one: with two models generating at the same time
/// (two daemon runners, each with a pool of one thread per core), each pool's waiting workers
/// would otherwise spin on the cores the other's step needs. One model alone keeps spinning
/// between its steps (the only step then is its own pool's, [`Shared::stepping`]) and pays two
/// atomic additions a step: an empty two-thread step took 420-510 ns instead of 320-380 in a
/// throwaway microbenchmark, ~0.4% of a Gemma 3 270M token, below what `ollamars bench`
/// resolves.
static STEPPING: AtomicUsize = AtomicUsize::new(0);
/// Independent work counters per step (one per phase that hands out chunks).
const COUNTERS: usize = 8;
/// The bit of `Shared::gate` that closes an elastic step to late workers.
const CLOSED: usize = 1 << (usize::BITS - 1);

type Job = dyn Fn(&Worker) + Sync;

#[repr(align(128))]
struct Padded<T>(T);

struct Shared {
    n_threads: usize,
    spin: Duration,
    /// Changed once per step (by 2, the low bit telling whether the step is elastic); workers
    /// wait for it to change.
    epoch: Padded<AtomicUsize>,
    /// The step's job, valid while the step runs (its lifetime is erased; `run` waits for every
    /// worker before the borrow ends).
    job: UnsafeCell<Option<*const Job>>,
    /// Workers that have not finished the current step (steps that need every thread).
    remaining: Padded<AtomicUsize>,
    /// Elastic steps (work handed out in chunks only, so any subset of the workers may take part
    /// and the caller need not wait for a worker the OS has not scheduled): workers that joined
    /// (low bits) and whether the step is closed to more ([`CLOSED`]); other steps keep it closed.
    gate: Padded<AtomicUsize>,
    /// Elastic steps: joined workers that have finished.
    finished: Padded<AtomicUsize>,
    counters: [Padded<AtomicUsize>; COUNTERS],
    barrier: Barrier,
    panicked: AtomicBool,
    sleepers: AtomicUsize,
    /// 1 while this pool's caller runs a step (counted in [`STEPPING`] too): a worker done with
    /// its part of the step waits for the next one without taking it for another pool's.
    stepping: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
    shutdown: AtomicBool,
    /// Serializes steps started from different threads.
    busy: Mutex<()>,
}

// SAFETY: `job` is written only by the thread holding `busy` while no worker reads it (between
// steps) and read by workers only during a step; everything else is atomics or locks.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

/// Most threads a pool runs (llama.cpp's `GGML_MAX_N_THREADS`). A count far past the CPUs only
/// slows the forward pass, and 100,000 asked for (a typo in `num_threads`) made the process abort
/// while its threads started, when memory for their stack guards ran out.
pub const MAX_THREADS: usize = 512;

/// A pool of `n_threads - 1` workers plus the calling thread.
pub struct ThreadPool {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

/// One thread's view of a running step.
pub struct Worker<'a> {
    /// This thread's index, `0..count` (the caller of `run` is 0).
    pub index: usize,
    /// Threads taking part in the step.
    pub count: usize,
    shared: Option<&'a Shared>,
}

thread_local! {
    static CURRENT: Cell<*const ThreadPool> = const { Cell::new(std::ptr::null()) };
    static IN_STEP: Cell<bool> = const { Cell::new(false) };
}

impl ThreadPool {
    /// A pool of `n_threads` threads in all (0: one per available CPU).
    pub fn new(n_threads: usize) -> std::io::Result<ThreadPool> {
        let spin = std::env::var("OLLAMARS_SPIN_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(DEFAULT_SPIN, Duration::from_micros);
        ThreadPool::with_spin(n_threads, spin)
    }

    /// A pool whose idle workers spin for `spin` before parking.
    pub fn with_spin(n_threads: usize, spin: Duration) -> std::io::Result<ThreadPool> {
        let n = if n_threads == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            n_threads
        };
        if n > MAX_THREADS {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{n} threads asked for, at most {MAX_THREADS}"),
            ));
        }
        let shared = Arc::new(Shared {
            n_threads: n,
            spin,
            epoch: Padded(AtomicUsize::new(0)),
            job: UnsafeCell::new(None),
            remaining: Padded(AtomicUsize::new(0)),
            gate: Padded(AtomicUsize::new(CLOSED)),
            finished: Padded(AtomicUsize::new(0)),
            counters: std::array::from_fn(|_| Padded(AtomicUsize::new(0))),
            barrier: Barrier::new(n),
            panicked: AtomicBool::new(false),
            sleepers: AtomicUsize::new(0),
            stepping: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
            busy: Mutex::new(()),
        });
        let mut handles = Vec::with_capacity(n - 1);
        for i in 1..n {
            let s = shared.clone();
            let h = std::thread::Builder::new()
                .name(format!("ollamars-worker-{i}"))
                .spawn(move || worker_loop(&s, i));
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    // Stop the ones already started before reporting.
                    drop(ThreadPool { shared, handles });
                    return Err(e);
                }
            }
        }
        Ok(ThreadPool { shared, handles })
    }

    pub fn n_threads(&self) -> usize {
        self.shared.n_threads
    }

    /// Runs `f` on every thread of the pool at once and returns when all have finished.
    /// A panic in any thread is re-raised here after all threads are done.
    pub fn run<F: Fn(&Worker) + Sync>(&self, f: F) {
        self.run_step(f, false)
    }

    /// Runs a step; an elastic one (`f` only takes chunks, never barriers or static shares) does
    /// not wait for workers that have not started it: on a loaded machine a descheduled worker
    /// would otherwise stall every step for a whole time slice, while here the threads that
    /// are running take all the chunks.
    fn run_step<F: Fn(&Worker) + Sync>(&self, f: F, elastic: bool) {
        let s = &*self.shared;
        if s.n_threads == 1 || IN_STEP.with(|c| c.get()) {
            f(&Worker {
                index: 0,
                count: 1,
                shared: None,
            });
            return;
        }
        let _busy = s.busy.lock().unwrap_or_else(|e| e.into_inner());
        let job: &(dyn Fn(&Worker) + Sync + '_) = &f;
        // SAFETY: only the lifetime is erased: workers only read `job` after seeing the new epoch
        // (Release below / Acquire there) and `Finish` below waits for all of them before `f`
        // goes out of scope.
        unsafe {
            *s.job.get() = Some(std::mem::transmute::<&(dyn Fn(&Worker) + Sync + '_), *const Job>(
                job,
            ));
        }
        for c in &s.counters {
            c.0.store(0, Ordering::Relaxed);
        }
        s.panicked.store(false, Ordering::Relaxed);
        s.remaining
            .0
            .store(if elastic { 0 } else { s.n_threads - 1 }, Ordering::Relaxed);
        s.finished.0.store(0, Ordering::Relaxed);
        s.gate
            .0
            .store(if elastic { 0 } else { CLOSED }, Ordering::Release);
        let e = s.epoch.0.load(Ordering::Relaxed);
        s.epoch
            .0
            .store((e & !1) + 2 + usize::from(elastic), Ordering::SeqCst);
        // The flag before the count (and the count's decrement before the flag's clearing): a
        // waiting worker of this pool never sees its own step counted as another pool's.
        s.stepping.store(1, Ordering::SeqCst);
        STEPPING.fetch_add(1, Ordering::SeqCst);
        if s.sleepers.load(Ordering::SeqCst) > 0 {
            let _g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        struct Finish<'a>(&'a Shared);
        impl Drop for Finish<'_> {
            fn drop(&mut self) {
                STEPPING.fetch_sub(1, Ordering::SeqCst);
                self.0.stepping.store(0, Ordering::SeqCst);
                let mut spins = 0u32;
                while self.0.remaining.0.load(Ordering::Acquire) != 0 {
                    spin_or_yield(&mut spins);
                }
                // Elastic: no worker joins from now on; wait for those that did.
                let joined = self.0.gate.0.fetch_or(CLOSED, Ordering::AcqRel) & !CLOSED;
                while self.0.finished.0.load(Ordering::Acquire) != joined {
                    spin_or_yield(&mut spins);
                }
                // SAFETY: no worker reads the job any more.
                unsafe { *self.0.job.get() = None };
            }
        }
        let finish = Finish(s);
        IN_STEP.with(|c| c.set(true));
        let r = catch_unwind(AssertUnwindSafe(|| {
            f(&Worker {
                index: 0,
                count: s.n_threads,
                shared: Some(s),
            })
        }));
        IN_STEP.with(|c| c.set(false));
        if r.is_err() {
            // Let the other threads out of any barrier they are waiting in.
            s.barrier.poison();
        }
        drop(finish);
        s.barrier.reset();
        if let Err(p) = r {
            resume_unwind(p);
        }
        if s.panicked.load(Ordering::Relaxed) {
            panic!("a worker thread panicked");
        }
    }

    /// Calls `f` on chunks of `0..n` of `chunk` items (the last may be shorter), spread over the
    /// threads with work stealing.
    pub fn for_each_chunk<F: Fn(Range<usize>) + Sync>(&self, n: usize, chunk: usize, f: F) {
        if n == 0 {
            return;
        }
        if n <= chunk || self.n_threads() == 1 {
            let mut s = 0;
            while s < n {
                f(s..(s + chunk).min(n));
                s += chunk;
            }
            return;
        }
        self.run_step(
            |w| {
                for r in w.chunks(0, n, chunk) {
                    f(r);
                }
            },
            true,
        );
    }

    /// [`ThreadPool::for_each_chunk`] for streaming work: `0..n` is cut into one contiguous share
    /// per thread, which that thread takes chunk by chunk in order, so its reads run on from one
    /// chunk into the next (prefetched ahead, the hardware prefetcher already up to speed)
    /// instead of starting cold at every chunk, as chunks dealt out in turn do. A thread done
    /// with its share takes what is left of the others', in their order: a late or descheduled
    /// thread holds nobody up. Shares are counted on the step's eight work counters (more threads
    /// than that start two to a share).
    pub fn for_each_chunk_in_shares<F: Fn(Range<usize>) + Sync>(&self, n: usize, chunk: usize, f: F) {
        if n <= chunk || self.n_threads() == 1 {
            return self.for_each_chunk(n, chunk, f);
        }
        let units = n.div_ceil(chunk);
        let shares = self.n_threads().min(COUNTERS);
        self.run_step(
            |w| {
                for k in 0..shares {
                    let share = (w.index + k) % shares;
                    let (a, b) = (units * share / shares, units * (share + 1) / shares);
                    for u in w.chunks(share, b - a, 1) {
                        let start = (a + u.start) * chunk;
                        f(start..(start + chunk).min(n));
                    }
                }
            },
            true,
        );
    }

    /// Makes this pool the one [`current`] returns on this thread while `f` runs.
    pub fn install<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Restore(*const ThreadPool);
        impl Drop for Restore {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(CURRENT.with(|c| c.replace(self)));
        f()
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        {
            let _g = self.shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// Runs `f` with the pool installed on this thread (by [`ThreadPool::install`]), or with a
/// process-wide pool of one thread per CPU if none is.
pub fn with_current<R>(f: impl FnOnce(&ThreadPool) -> R) -> R {
    let p = CURRENT.with(|c| c.get());
    if p.is_null() {
        static GLOBAL: OnceLock<ThreadPool> = OnceLock::new();
        let g = GLOBAL.get_or_init(|| ThreadPool::new(0).unwrap_or_else(|_| ThreadPool::serial()));
        f(g)
    } else {
        // SAFETY: `install` keeps the pool alive while the pointer is set.
        f(unsafe { &*p })
    }
}

impl ThreadPool {
    /// A pool without workers: every step runs on the caller.
    pub fn serial() -> ThreadPool {
        ThreadPool::new(1).expect("a pool of one thread spawns nothing")
    }
}

impl Worker<'_> {
    /// Waits until every thread of the step has reached this point.
    pub fn barrier(&self) {
        if let Some(s) = self.shared {
            s.barrier.wait();
        }
    }

    /// The chunks of `0..n` this thread takes, handed out through counter `slot`
    /// (`0..8`; each phase of a step that splits work needs its own).
    pub fn chunks(&self, slot: usize, n: usize, chunk: usize) -> Chunks<'_> {
        assert!(chunk > 0);
        Chunks {
            counter: self.shared.map(|s| &s.counters[slot].0),
            next_local: 0,
            n,
            chunk,
        }
    }

    /// A static share of `0..n` for this thread, in units of `align` (for work whose cost is
    /// known to be even, where chunking would only cost synchronization).
    pub fn share(&self, n: usize, align: usize) -> Range<usize> {
        let units = n.div_ceil(align);
        let (i, k) = (self.index, self.count);
        let a = (units * i / k * align).min(n);
        let b = (units * (i + 1) / k * align).min(n);
        a..b
    }
}

/// Iterator over the chunks one thread takes.
pub struct Chunks<'a> {
    counter: Option<&'a AtomicUsize>,
    next_local: usize,
    n: usize,
    chunk: usize,
}

impl Iterator for Chunks<'_> {
    type Item = Range<usize>;
    fn next(&mut self) -> Option<Range<usize>> {
        let i = match self.counter {
            Some(c) => c.fetch_add(1, Ordering::Relaxed),
            None => {
                self.next_local += 1;
                self.next_local - 1
            }
        };
        let start = i.checked_mul(self.chunk)?;
        (start < self.n).then(|| start..(start + self.chunk).min(self.n))
    }
}

fn spin_or_yield(spins: &mut u32) {
    *spins += 1;
    if *spins < 2000 {
        std::hint::spin_loop();
    } else {
        // Another process may hold the CPU the awaited thread needs.
        std::thread::yield_now();
    }
}

fn worker_loop(s: &Shared, index: usize) {
    // Epoch 0 is "no step yet": a step may already have been published before this thread ran.
    let mut seen = 0;
    loop {
        // Spin for a while, then park.
        let start = Instant::now();
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(Ordering::Relaxed) {
                return;
            }
            if s.epoch.0.load(Ordering::Acquire) != seen {
                break;
            }
            spins += 1;
            std::hint::spin_loop();
            if spins.is_multiple_of(256)
                && (start.elapsed() >= s.spin
                    || STEPPING.load(Ordering::Relaxed) > s.stepping.load(Ordering::Relaxed))
            {
                s.sleepers.fetch_add(1, Ordering::SeqCst);
                let mut g = s.sleep.lock().unwrap_or_else(|e| e.into_inner());
                while s.epoch.0.load(Ordering::SeqCst) == seen && !s.shutdown.load(Ordering::SeqCst) {
                    g = s.wake.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                drop(g);
                s.sleepers.fetch_sub(1, Ordering::SeqCst);
            }
        }
        seen = s.epoch.0.load(Ordering::Acquire);
        // An elastic step is joined through the gate, unless the caller already closed it (the
        // step may even be a later one than `seen`: joining keeps its job alive all the same,
        // and running an elastic job twice only finds its chunks taken).
        let elastic = seen & 1 == 1;
        if elastic {
            let mut g = s.gate.0.load(Ordering::Acquire);
            loop {
                if g & CLOSED != 0 {
                    break;
                }
                match s
                    .gate
                    .0
                    .compare_exchange_weak(g, g + 1, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => break,
                    Err(x) => g = x,
                }
            }
            if g & CLOSED != 0 {
                continue;
            }
        }
        // SAFETY: the epoch changed, so `run` published a job and waits for us (we count in
        // `remaining`, or joined the open elastic step) before clearing it.
        let job = unsafe { (*s.job.get()).expect("a step's job is set before its epoch") };
        IN_STEP.with(|c| c.set(true));
        let w = Worker {
            index,
            count: s.n_threads,
            shared: Some(s),
        };
        // SAFETY: see above; the pointer is valid until `remaining` reaches 0.
        if catch_unwind(AssertUnwindSafe(|| unsafe { (*job)(&w) })).is_err() {
            s.panicked.store(true, Ordering::Relaxed);
            s.barrier.poison();
        }
        IN_STEP.with(|c| c.set(false));
        if elastic {
            s.finished.0.fetch_add(1, Ordering::Release);
        } else {
            s.remaining.0.fetch_sub(1, Ordering::Release);
        }
    }
}

/// A sense-reversing spin barrier for the threads of one step.
struct Barrier {
    n: usize,
    arrived: Padded<AtomicUsize>,
    generation: Padded<AtomicUsize>,
    poisoned: AtomicBool,
}

impl Barrier {
    fn new(n: usize) -> Barrier {
        Barrier {
            n,
            arrived: Padded(AtomicUsize::new(0)),
            generation: Padded(AtomicUsize::new(0)),
            poisoned: AtomicBool::new(false),
        }
    }

    fn wait(&self) {
        if self.poisoned.load(Ordering::Relaxed) {
            panic!("another thread of the step panicked");
        }
        let gen = self.generation.0.load(Ordering::Acquire);
        if self.arrived.0.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.arrived.0.store(0, Ordering::Relaxed);
            self.generation.0.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.0.load(Ordering::Acquire) == gen {
            if self.poisoned.load(Ordering::Relaxed) {
                panic!("another thread of the step panicked");
            }
            spin_or_yield(&mut spins);
        }
    }

    fn poison(&self) {
        self.poisoned.store(true, Ordering::Relaxed);
    }

    /// Back to a clean state between steps (after a panic left it poisoned or half-passed).
    fn reset(&self) {
        if self.poisoned.swap(false, Ordering::Relaxed) {
            self.arrived.0.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn more_threads_than_the_limit_are_an_error() {
        let e = ThreadPool::new(MAX_THREADS + 1).err().expect("refused");
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("at most 512"), "{e}");
    }

    #[test]
    fn every_chunk_is_done_once() {
        let pool = ThreadPool::new(3).unwrap();
        for n in [0, 1, 7, 100, 1001] {
            let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
            pool.for_each_chunk(n, 16, |r| {
                for i in r {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                }
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n={n}");
        }
    }

    /// Shares: every chunk once, whole chunks from multiples of `chunk`, for fewer threads than
    /// work counters and for more (two to a share), and ranges shorter than one chunk.
    #[test]
    fn shares_do_every_chunk_once() {
        for threads in [2, 3, 9] {
            let pool = ThreadPool::new(threads).unwrap();
            for (n, chunk) in [(0, 4), (3, 4), (64, 4), (1001, 16), (5, 1)] {
                let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
                pool.for_each_chunk_in_shares(n, chunk, |r| {
                    assert_eq!(r.start % chunk, 0);
                    assert!(r.len() == chunk || r.end == n, "{r:?}");
                    for i in r {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    }
                });
                let ok = hits.iter().all(|h| h.load(Ordering::Relaxed) == 1);
                assert!(ok, "threads={threads} n={n} chunk={chunk}");
            }
        }
    }

    #[test]
    fn phases_separated_by_barriers_see_each_others_writes() {
        let pool = ThreadPool::new(4).unwrap();
        let n = 1000;
        let a: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
        let b: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
        for round in 0..50u64 {
            pool.run(|w| {
                for r in w.chunks(0, n, 7) {
                    for i in r {
                        a[i].store(i as u64 + round, Ordering::Relaxed);
                    }
                }
                w.barrier();
                for r in w.chunks(1, n, 13) {
                    for i in r {
                        // Reads an element another thread may have written.
                        let j = n - 1 - i;
                        b[i].store(a[j].load(Ordering::Relaxed) * 2, Ordering::Relaxed);
                    }
                }
            });
            for (i, v) in b.iter().enumerate() {
                assert_eq!(v.load(Ordering::Relaxed), 2 * ((n - 1 - i) as u64 + round));
            }
        }
    }

    /// Many short elastic steps mixed with steps that need every thread (barriers): the two
    /// protocols hand over to each other without losing or repeating work, or hanging.
    #[test]
    fn elastic_and_full_steps_interleave() {
        for spin in [Duration::ZERO, Duration::from_millis(1)] {
            let pool = ThreadPool::with_spin(3, spin).unwrap();
            for round in 0..2000usize {
                let n = 1 + round % 37;
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                pool.for_each_chunk(n, 1 + round % 3, |r| {
                    for i in r {
                        hits[i].fetch_add(1, Ordering::Relaxed);
                    }
                });
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                    "round {round}"
                );
                if round % 50 == 0 {
                    let seen = AtomicUsize::new(0);
                    pool.run(|w| {
                        seen.fetch_add(1, Ordering::SeqCst);
                        w.barrier();
                        assert_eq!(seen.load(Ordering::SeqCst), w.count);
                    });
                }
            }
        }
    }

    #[test]
    fn static_shares_cover_the_range() {
        let pool = ThreadPool::new(3).unwrap();
        let seen = Mutex::new(Vec::new());
        pool.run(|w| seen.lock().unwrap().push(w.share(100, 16)));
        let mut v = seen.into_inner().unwrap();
        v.sort_by_key(|r| r.start);
        assert_eq!(v.first().unwrap().start, 0);
        assert_eq!(v.last().unwrap().end, 100);
        for p in v.windows(2) {
            assert_eq!(p[0].end, p[1].start);
            assert_eq!(p[0].start % 16, 0);
        }
    }

    #[test]
    fn a_panic_in_a_worker_reaches_the_caller_and_the_pool_still_works() {
        let pool = ThreadPool::new(2).unwrap();
        let r = catch_unwind(AssertUnwindSafe(|| {
            pool.run(|w| {
                if w.index == 1 {
                    panic!("boom");
                }
                w.barrier();
            })
        }));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        pool.run(|w| {
            w.barrier();
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn nested_steps_run_on_the_calling_thread_and_install_sets_current() {
        let pool = ThreadPool::new(2).unwrap();
        let total = AtomicUsize::new(0);
        pool.install(|| {
            with_current(|p| {
                assert!(std::ptr::eq(p, &pool));
                p.run(|_| {
                    with_current(|q| {
                        q.for_each_chunk(10, 3, |r| _ = total.fetch_add(r.len(), Ordering::Relaxed))
                    });
                });
            })
        });
        assert_eq!(total.load(Ordering::Relaxed), 20);
    }

    /// A worker waiting for its pool's next step parks as soon as another pool runs one (two
    /// models generating at once) instead of spinning out its time; steps of other tests only
    /// make it park sooner.
    #[test]
    fn waiting_workers_park_while_another_pool_steps() {
        let a = ThreadPool::with_spin(2, Duration::from_secs(600)).unwrap();
        a.for_each_chunk(4, 1, |_| {});
        let b = ThreadPool::with_spin(2, Duration::from_secs(600)).unwrap();
        let parked = AtomicBool::new(false);
        b.run(|w| {
            if w.index == 0 {
                let t = Instant::now();
                while t.elapsed() < Duration::from_secs(5) && !parked.load(Ordering::SeqCst) {
                    parked.store(a.shared.sleepers.load(Ordering::SeqCst) == 1, Ordering::SeqCst);
                }
            }
        });
        assert!(parked.load(Ordering::SeqCst), "a's worker spun through b's step");
        let count = AtomicUsize::new(0);
        a.run(|_| _ = count.fetch_add(1, Ordering::Relaxed));
        assert_eq!(
            count.load(Ordering::Relaxed),
            2,
            "a's parked worker woke for its step"
        );
    }

    #[test]
    fn workers_that_parked_wake_up() {
        let pool = ThreadPool::with_spin(2, Duration::from_micros(1)).unwrap();
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(2));
            let count = AtomicUsize::new(0);
            pool.run(|_| _ = count.fetch_add(1, Ordering::Relaxed));
            assert_eq!(count.load(Ordering::Relaxed), 2);
        }
    }
}
