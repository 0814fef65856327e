//! Repacking a model's weight matrices at load into the kernels' 16-row interleaved layout
//! ([`crate::kernels::packed`]), on tiers that have packed kernels for the type (AVX-512 with
//! VNNI, and AVX2).
//!
//! A packed group feeds one 512-bit integer dot product for 16 rows and scales 16 rows with one
//! multiply-add, where the row-major kernels spend a scale conversion, a product and a reduction
//! per row and block: on this project's 2-core machine the packed kernels compute 2-3x faster
//! (`kernel_bench l2`), which decode of a small model and prompt processing both need.
//!
//! Packed matrices live in anonymous memory of their own ([`PackedWeights`]), read from the file
//! (not through its mapping, whose pages would then count twice) and packed there, so memory
//! stays the file's size and the file mapping keeps the file's bytes. That memory then moves to
//! transparent huge pages: decode streams every weight once per token, and on this project's
//! 2-core machine two threads stream the packed matrices at 83-91% of the `membw` probe on 4 KiB
//! pages and at 91-97% on 2 MiB pages (`PACKED=1 kernel_bench 2 stream`, `HUGE=0/1`, Q4_K and
//! Q6_K); whole models decode 3-6% faster (median of 12-16 alternated pairs). But the memory is
//! filled on 4 KiB pages and collapsed into huge pages by a background thread afterwards
//! ([`HugePages`]), freely while no model in the process loads or runs and slowly while one does
//! ([`Activity`]): on a VM whose host takes back the guest's free memory, faulting in fresh huge
//! pages was most of a load (Gemma 3 270M, after 15 s idle: first token 0.44-0.62 s with huge
//! pages at fill, 0.21-0.24 s with 4 KiB pages), and collapsing next to a running model slowed
//! its first tokens 4-6x (see [`Activity`]).
//!
//! A tensor is packed when every use of it reads whole groups: the whole matrix, or row ranges
//! that start and end on a group (phi3's fused Q/K/V and gate/up tensors, split at multiples of
//! 16 in real models), which are then packed matrices of their own (`WeightView::rows`). A tied
//! embedding is packed as the output layer and its rows are unpacked when looked up.
//! `OLLAMARS_PACK=0` keeps every matrix row-major.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memmap2::{MmapMut, MmapOptions};
use rayon::prelude::*;

use super::weights::Weight;
use super::Model;
use crate::kernels::matmul::can_use_packed;
use crate::kernels::{packed, Isa};
use crate::{Error, Result};

/// Whether packing is on (`OLLAMARS_PACK=0` turns it off).
fn enabled() -> bool {
    std::env::var("OLLAMARS_PACK").map_or(true, |v| v.trim() != "0")
}

/// A model's packed matrices: each in one anonymous mapping of their own, with the rows of each
/// tensor that are packed.
pub(super) struct PackedWeights {
    /// The thread moving `map` to huge pages, while it runs. Declared (so dropped) before
    /// `map`: dropping it waits for the thread.
    huge: Option<HugePages>,
    /// The packed tensors' bytes (`None` when nothing is packed).
    map: Option<MmapMut>,
    slots: Vec<Slot>,
}

/// Where a tensor is in [`PackedWeights::map`]; `rows == 0` for a tensor that is not packed.
#[derive(Clone, Copy, Default)]
struct Slot {
    rows: usize,
    at: usize,
    len: usize,
}

impl PackedWeights {
    /// Nothing packed, for a model of `n_tensors` tensors.
    pub(super) fn none(n_tensors: usize) -> PackedWeights {
        PackedWeights {
            map: None,
            slots: vec![Slot::default(); n_tensors],
            huge: None,
        }
    }

    /// Waits until the packed weights are on huge pages (or the system declined them), for
    /// measurements of the steady state.
    pub(super) fn wait_for_huge_pages(&self) {
        if let Some(h) = &self.huge {
            h.join();
        }
    }

    /// How many of tensor `t`'s first rows are packed.
    pub(super) fn rows(&self, t: usize) -> usize {
        self.slots[t].rows
    }

    /// Tensor `t`'s bytes with its first [`PackedWeights::rows`] rows packed (the rest as in the
    /// file), if it was packed.
    pub(super) fn data(&self, t: usize) -> Option<&[u8]> {
        let s = self.slots[t];
        let map = self.map.as_ref().filter(|_| s.rows > 0)?;
        Some(&map[s.at..s.at + s.len])
    }
}

/// Packs every matrix of `model` that can be.
pub(super) fn pack_weights(model: &Model) -> Result<PackedWeights> {
    let isa = Isa::active();
    let tensors = model.gguf.tensors();
    let mut out = PackedWeights::none(tensors.len());
    if !enabled() {
        return Ok(out);
    }
    // Tensor -> whether every use of it reads whole groups: a part of a fused tensor that
    // started or ended inside a group would need the rows of another's.
    let mut whole: BTreeMap<usize, bool> = BTreeMap::new();
    let mut note = |w: &Weight| {
        let dims = &tensors[w.tensor].info.dims;
        let ok = dims.len() == 2 && packed::whole_groups(&(w.row0..w.row0 + w.n_out), packed_rows(dims));
        *whole.entry(w.tensor).or_insert(true) &= ok;
    };
    for l in &model.w.layers {
        for w in [&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down] {
            note(w);
        }
    }
    note(&model.w.output);
    let todo: Vec<(usize, Weight)> = whole
        .into_iter()
        .filter(|&(_, ok)| ok)
        .filter_map(|(t, _)| {
            let w = find(model, t)?;
            (packed_rows(&tensors[t].info.dims) > 0 && packed::has_layout(w.ty) && can_use_packed(isa, w.ty))
                .then(|| (t, w.clone()))
        })
        .collect();
    if todo.is_empty() {
        return Ok(out);
    }
    // Reading the metadata and the vectors left their pages mapped, and with the kernel's
    // fault-around pages of tensors about to be packed, which would count twice: packing reads
    // the file with positioned reads, and only what is read through the mapping later (rows of
    // an embedding that is not packed) is mapped again.
    model.gguf.release_pages();
    // Each tensor 64-byte aligned (the kernels' loads), from a 2 MiB boundary of the mapping.
    let slot_len = |t: usize| (tensors[t].info.size as usize).next_multiple_of(64);
    let total: usize = todo.iter().map(|&(t, _)| slot_len(t)).sum();
    let path = model.gguf.files()[0].path();
    let mut map = MmapOptions::new()
        .len(total + HUGE_PAGE)
        .map_anon()
        .map_err(|e| Error::io(path, e))?;
    let addr = map.as_ptr() as usize;
    let base = addr.next_multiple_of(HUGE_PAGE) - addr;
    // Filled on 4 KiB pages, even where the system gives huge pages to all memory (see above).
    #[cfg(target_os = "linux")]
    let _ = map.advise_range(memmap2::Advice::NoHugePage, base, total);
    let mut at = base;
    for (t, w) in todo {
        let len = tensors[t].info.size as usize;
        let rb = w.ty.row_bytes(w.n_in as u64).expect("checked at load") as usize;
        // The tensor's rows, not the use's: `w` may be one part of a fused tensor.
        let rows = packed_rows(&tensors[t].info.dims);
        let group_bytes = packed::GROUP * rb;
        let chunk = CHUNK_BYTES.div_ceil(group_bytes) * group_bytes;
        map[at..at + len]
            .par_chunks_mut(chunk)
            .enumerate()
            .try_for_each_init(Vec::new, |scratch, (i, dst)| {
                model.gguf.read_tensor_data(&tensors[t], i * chunk, dst)?;
                let packed_len = (rows * rb).saturating_sub(i * chunk).min(dst.len());
                packed::pack_in_place(w.ty, w.n_in, &mut dst[..packed_len], packed_len / rb, scratch);
                Ok::<_, Error>(())
            })?;
        out.slots[t] = Slot { rows, at, len };
        at += slot_len(t);
    }
    // Only a hint: where the system says `never` (or off Linux) the memory works the same and
    // decode reads it a little slower.
    #[cfg(target_os = "linux")]
    {
        let _ = map.advise_range(memmap2::Advice::HugePage, base, total);
        out.huge = HugePages::collapse(&map, base, total, PROCESS.clone());
    }
    out.map = Some(map);
    Ok(out)
}

/// How long the model must have left its weights alone before the collapse runs freely: longer
/// than the gaps inside a generation (sampling and sending a token take well under a
/// millisecond), short enough that the pause after an answer moves the pages.
const QUIET: Duration = Duration::from_millis(50);

/// While the model runs, the collapse takes at most about one part in `BUSY_SHARE + 1` of a
/// core: after each range it waits `BUSY_SHARE` times as long as that range took. So a model kept
/// busy without a pause still gets its huge pages (decode on them is ~9% faster here), slowly
/// where they are dear (this VM: ~29 ms a range, one range per ~0.6 s) and at once where they
/// are cheap.
const BUSY_SHARE: u32 = 20;

/// The pause before the first range, whatever the model does: a model is usually set up (its
/// KV cache faulted in, which takes the memory-map lock a collapse holds) and asked for tokens
/// right after its load, and a range's cost is not known yet. (In the daemon, with the collapse
/// free 50 ms after the load, loading TinyLlama-1.1B took 0.8-2.6 s instead of 0.3.)
const FIRST_PAUSE: Duration = Duration::from_secs(1);

/// Waits until the next range may be collapsed: `pause` has passed since `since`, or (if
/// `early`) the model has been idle for [`QUIET`]. False when `stop` is set (the thread is woken
/// for it).
fn wait_turn(activity: &Activity, stop: &AtomicBool, since: Instant, pause: Duration, early: bool) -> bool {
    loop {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let owed = pause.saturating_sub(since.elapsed());
        if owed.is_zero() {
            return true;
        }
        let quiet_left = match activity.idle_for() {
            Some(idle) if idle >= QUIET && early => return true,
            Some(idle) if idle < QUIET => QUIET - idle,
            _ => owed,
        };
        std::thread::park_timeout(quiet_left.min(owed));
    }
}

/// Every model's reads in this process, and every load: what each model's collapse waits for.
/// The memory-map lock a collapse holds is the process's, so one model's collapse stalls
/// another model's load and first tokens as much as its own: in the daemon, Gemma 3 270M loaded
/// in 1.7-4.4 s instead of 0.2 s while the Qwen2.5 0.5B model loaded 1.5-3 s before it moved to
/// huge pages (its own model idle, so freely).
static PROCESS: LazyLock<Arc<Activity>> = LazyLock::new(|| Arc::new(Activity::new()));

/// Marks the process as reading model weights until the guard is dropped (a forward pass, the
/// output layer, and a load with what sets a model up: its allocations and page faults wait for
/// the same lock): meanwhile, and for [`QUIET`] after, every model's ranges move to huge pages
/// only at the slow pace of [`BUSY_SHARE`].
pub fn reading() -> Reading<'static> {
    PROCESS.reading()
}

/// Whether, and since when, the models have been reading their weights. Collapsing a 2 MiB range
/// unmaps it and copies it under the process's memory-map lock, so a forward pass that reads the
/// range (or takes any page fault) waits for the copy, and on a VM whose host takes back the
/// guest's free memory every copy into a fresh huge page is slow: there, after 20 s idle, the
/// collapse of TinyLlama-1.1B Q4_0's 599 MB took 7.4 s of one core (`perf`: 91% of it in the
/// copy), and the decode running beside it made 10.9 tokens/s against 48.5 once it was done
/// (Gemma 3 270M: 19.6 against 128 for its first 3 s). The collapse therefore waits for the
/// model to be idle, or takes a small share of a core while it runs ([`BUSY_SHARE`]).
pub(super) struct Activity {
    /// Readers now.
    running: AtomicUsize,
    /// When the last reader finished, in nanoseconds after `epoch`.
    last: AtomicU64,
    epoch: Instant,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            running: AtomicUsize::new(0),
            last: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn reading(&self) -> Reading<'_> {
        self.running.fetch_add(1, Ordering::SeqCst);
        Reading(self)
    }

    /// Counts the idle time from now.
    fn touch(&self) {
        let now = self.epoch.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        self.last.fetch_max(now, Ordering::SeqCst);
    }

    /// How long the model has been idle (`None` while it reads).
    fn idle_for(&self) -> Option<Duration> {
        if self.running.load(Ordering::SeqCst) > 0 {
            return None;
        }
        let last = Duration::from_nanos(self.last.load(Ordering::SeqCst));
        Some(self.epoch.elapsed().saturating_sub(last))
    }
}

/// The process reads (or loads) model weights while this lives ([`reading`]).
pub struct Reading<'a>(&'a Activity);

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        // The time first, so that a collapse that sees no reader also sees this one's end.
        self.0.touch();
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A thread that collapses the packed weights' 4 KiB pages into huge pages
/// (`MADV_COLLAPSE`, Linux 6.1 and later), 2 MiB at a time: freely once every model in the
/// process has been idle for [`QUIET`], a small share of a core while one runs ([`wait_turn`]).
/// For Gemma 3 270M's 234 MB that is 0.5 s to 3 s of one core on this project's VM, depending on
/// how long ago the host took its free memory back. The contents never change, so readers see the same bytes
/// throughout. The thread stops early when the weights are dropped, which wakes it and waits for
/// it: the mapping outlives it.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
struct HugePages {
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// 2 MiB ranges handled so far (collapsed, or declined by the system); the tests read it.
    #[cfg_attr(not(test), allow(dead_code))]
    done: Arc<AtomicUsize>,
}

impl HugePages {
    #[cfg(target_os = "linux")]
    fn collapse(map: &MmapMut, base: usize, total: usize, activity: Arc<Activity>) -> Option<HugePages> {
        /// From Linux's uapi `mman-common.h` (not in every libc target's bindings).
        const MADV_COLLAPSE: libc::c_int = 25;
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicUsize::new(0));
        let start = map.as_ptr() as usize + base;
        let thread = std::thread::Builder::new()
            .name("ollamars-hugepages".into())
            .spawn({
                let (stop, done) = (stop.clone(), done.clone());
                move || {
                    // How long a running model is spared after a range (see `BUSY_SHARE`).
                    let (mut since, mut pause) = (Instant::now(), FIRST_PAUSE);
                    for at in (start..start + total).step_by(HUGE_PAGE) {
                        let early = at > start;
                        if !wait_turn(&activity, &stop, since, pause, early) {
                            return;
                        }
                        let t = Instant::now();
                        let len = HUGE_PAGE.min(start + total - at);
                        // SAFETY: the range is inside the mapping, which `Drop` keeps mapped
                        // until this thread has returned; collapsing changes no byte of it.
                        let r = unsafe { libc::madvise(at as *mut libc::c_void, len, MADV_COLLAPSE) };
                        since = Instant::now();
                        pause = (since - t) * BUSY_SHARE;
                        done.fetch_add(1, Ordering::SeqCst);
                        // An older kernel does not know the advice; other failures (no free
                        // huge page just now, a partial last page) leave that range as it is.
                        if r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                            return;
                        }
                    }
                }
            })
            .ok()?;
        Some(HugePages {
            stop,
            thread: Mutex::new(Some(thread)),
            done,
        })
    }

    fn join(&self) {
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(t) = thread {
            let _ = t.join();
        }
    }
}

impl Drop for HugePages {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = &*self.thread.lock().unwrap_or_else(|e| e.into_inner()) {
            t.thread().unpark();
        }
        self.join();
    }
}

/// Bytes read and packed per task: small enough that they are still in cache when they are
/// packed.
const CHUNK_BYTES: usize = 256 << 10;

/// The transparent huge page size (x86-64, and arm64 with 4 KiB pages).
const HUGE_PAGE: usize = 2 << 20;

/// How many rows of a matrix of `dims` a packed copy packs: its whole groups.
fn packed_rows(dims: &[u64]) -> usize {
    let rows = dims.get(1).copied().unwrap_or(0) as usize;
    rows / packed::GROUP * packed::GROUP
}

/// A use of tensor `t` as a matrix (one of them, for a fused tensor: they share its type and
/// width).
fn find(model: &Model, t: usize) -> Option<&Weight> {
    let w = &model.w;
    w.layers
        .iter()
        .flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down])
        .chain([&w.output])
        .find(|x| x.tensor == t)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::quant::GgmlType;
    use crate::ModelParams;

    /// Packed matrices live in memory of their own: the model's file mapping still holds the
    /// file's bytes, and every row of a packed copy (the packed groups and the row-major tail)
    /// gives back the file's row. Also for a tied embedding, packed as the output layer.
    #[test]
    fn packed_copies_hold_the_files_rows_and_leave_the_mapping_as_the_file() {
        let tiny = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/tiny");
        for name in [
            "tiny-llama-spm-e256-q4_k_m.gguf",
            "tiny-llama-spm-e256-tied-q6_k.gguf",
        ] {
            let path = tiny.join(name);
            let file = std::fs::read(&path).unwrap();
            let model = Model::load(&path, &ModelParams::default()).unwrap();
            model.wait_for_huge_pages();
            let mut n_packed = 0;
            for (t, tensor) in model.gguf.tensors().iter().enumerate() {
                let start =
                    (model.gguf.files()[tensor.file].header().data_offset + tensor.info.offset) as usize;
                let in_file = &file[start..start + tensor.info.size as usize];
                assert!(
                    model.gguf.tensor_data(tensor) == in_file,
                    "{name}: {}",
                    tensor.info.name
                );
                let rows = model.packed.rows(t);
                let Some(data) = model.packed.data(t) else {
                    assert_eq!(rows, 0);
                    continue;
                };
                n_packed += 1;
                let (ty, n) = (tensor.info.ty, tensor.info.dims[0] as usize);
                let rb = ty.row_bytes(n as u64).unwrap() as usize;
                assert_eq!(data.len(), in_file.len());
                let mut row = vec![0u8; rb];
                for r in 0..rows {
                    let g = r / packed::GROUP * packed::GROUP * rb;
                    packed::unpack_row(
                        ty,
                        n,
                        &data[g..g + packed::GROUP * rb],
                        r % packed::GROUP,
                        &mut row,
                    );
                    assert!(
                        row == in_file[r * rb..(r + 1) * rb],
                        "{name}: {} row {r}",
                        tensor.info.name
                    );
                }
                assert!(
                    data[rows * rb..] == in_file[rows * rb..],
                    "{name}: {} tail",
                    tensor.info.name
                );
            }
            let packs = can_use_packed(Isa::active(), GgmlType::Q4_K) && enabled();
            assert_eq!(n_packed > 0, packs, "{name}: {n_packed} tensors packed");
        }
    }

    /// Moving memory to huge pages leaves every byte as it was, and dropping the mover while it
    /// works stops it before the memory can go (the drop waits for the thread).
    #[cfg(target_os = "linux")]
    #[test]
    fn collapsing_into_huge_pages_keeps_the_bytes_and_stops_on_drop() {
        let len = 8 * HUGE_PAGE + 4096;
        let mut map = MmapOptions::new().len(len + HUGE_PAGE).map_anon().unwrap();
        let base = (map.as_ptr() as usize).next_multiple_of(HUGE_PAGE) - map.as_ptr() as usize;
        let byte = |i: usize| (i * 7 % 251) as u8;
        for (i, b) in map[base..base + len].iter_mut().enumerate() {
            *b = byte(i);
        }
        let _ = map.advise_range(memmap2::Advice::HugePage, base, len);
        let idle = Arc::new(Activity::new());
        let huge = HugePages::collapse(&map, base, len, idle.clone()).expect("a thread");
        huge.join();
        huge.join();
        drop(huge);
        assert!(map[base..base + len]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == byte(i)));
        for _ in 0..4 {
            drop(HugePages::collapse(&map, base, len, idle.clone()).expect("a thread"));
        }
        assert!(map[base..base + len]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == byte(i)));
    }

    /// No range is collapsed before `FIRST_PAUSE`, nor later while the model reads its weights
    /// until it has been idle for `QUIET` or `BUSY_SHARE` times the last range's time has passed:
    /// every range is, also while it reads. Dropping the mover while it waits stops it.
    #[cfg(target_os = "linux")]
    #[test]
    fn collapsing_waits_for_the_model_to_be_idle_or_takes_a_share() {
        let len = 4 * HUGE_PAGE;
        let mut map = MmapOptions::new().len(len + HUGE_PAGE).map_anon().unwrap();
        let base = (map.as_ptr() as usize).next_multiple_of(HUGE_PAGE) - map.as_ptr() as usize;
        map[base..base + len].fill(1);
        let activity = Arc::new(Activity::new());

        // Idle from the start: nothing before FIRST_PAUSE.
        let t = Instant::now();
        let huge = HugePages::collapse(&map, base, len, activity.clone()).expect("a thread");
        std::thread::sleep(3 * QUIET);
        assert_eq!(
            huge.done.load(Ordering::SeqCst),
            0,
            "collapsed before FIRST_PAUSE"
        );
        huge.join();
        assert!(t.elapsed() >= FIRST_PAUSE);
        assert_eq!(huge.done.load(Ordering::SeqCst), 4);

        let reading = activity.reading();
        let t = Instant::now();
        let huge = HugePages::collapse(&map, base, len, activity.clone()).expect("a thread");
        huge.join();
        assert!(
            t.elapsed() >= FIRST_PAUSE,
            "collapsed at once while the model read"
        );
        assert_eq!(huge.done.load(Ordering::SeqCst), 4);
        assert!(map[base..base + len].iter().all(|&b| b == 1));

        // Stopped while it waits, having collapsed nothing.
        let huge = HugePages::collapse(&map, base, len, activity.clone()).expect("a thread");
        let done = huge.done.clone();
        drop(huge);
        assert_eq!(done.load(Ordering::SeqCst), 0);
        drop(reading);
    }

    /// Every model's collapse waits on the process's activity, which the guard of a load or a
    /// forward pass ([`reading`]) marks, whichever model it is for: a collapse that waited only
    /// for its own model ran freely through another model's load (1.7-4.4 s instead of 0.2 s in
    /// the daemon). Other tests' forward passes only lengthen the wait, so the bound holds.
    #[test]
    fn any_reading_in_the_process_holds_back_every_collapse() {
        let (go, pause) = (AtomicBool::new(false), Duration::from_millis(200));
        let other_model = reading();
        let t = Instant::now();
        assert!(wait_turn(&PROCESS, &go, t, pause, true));
        assert!(
            t.elapsed() >= pause,
            "a collapse ran while the process read weights"
        );
        drop(other_model);
    }

    /// A wait for a turn ends after `pause`, or early once the model has been idle for `QUIET`
    /// (only when allowed), or at a stop.
    #[test]
    fn a_turn_comes_after_the_pause_or_early_when_idle() {
        let (go, stopped) = (AtomicBool::new(false), AtomicBool::new(true));
        let pause = Duration::from_millis(200);
        let long = Duration::from_secs(60);
        let activity = Activity::new();
        let reading = activity.reading();
        let t = Instant::now();
        assert!(wait_turn(&activity, &go, t, pause, true));
        assert!(t.elapsed() >= pause, "a reading model's pause was cut short");
        assert!(!wait_turn(&activity, &stopped, Instant::now(), long, true));
        drop(reading);

        activity.touch();
        let t = Instant::now();
        assert!(wait_turn(&activity, &go, t, long, true));
        assert!(
            t.elapsed() >= QUIET && t.elapsed() < long / 2,
            "idle: {:?}",
            t.elapsed()
        );
        let t = Instant::now();
        assert!(wait_turn(&activity, &go, t, pause, false));
        assert!(t.elapsed() >= pause, "ended early where that was not allowed");
    }
}
