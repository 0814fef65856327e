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
//! ([`HugePages`]): on a VM whose host takes back the guest's free memory, faulting in fresh huge
//! pages was most of a load (Gemma 3 270M, after 15 s idle: first token 0.44-0.62 s with huge
//! pages at fill, 0.21-0.24 s with 4 KiB pages).
//!
//! Only tensors used as whole matrices are packed (a fused tensor read as row ranges stays
//! row-major); a tied embedding is packed as the output layer and its rows are unpacked when
//! looked up. `OLLAMARS_PACK=0` keeps every matrix row-major.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

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
    // Tensor -> whether every use of it reads the whole matrix.
    let mut whole: BTreeMap<usize, bool> = BTreeMap::new();
    let mut note = |w: &Weight| {
        let rows = tensors[w.tensor].info.dims.get(1).copied().unwrap_or(0) as usize;
        let full = w.row0 == 0 && w.n_out == rows && tensors[w.tensor].info.dims.len() == 2;
        *whole.entry(w.tensor).or_insert(true) &= full;
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
            (w.n_out >= packed::GROUP && packed::has_layout(w.ty) && can_use_packed(isa, w.ty))
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
        let rows = w.n_out / packed::GROUP * packed::GROUP;
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
        out.huge = HugePages::collapse(&map, base, total);
    }
    out.map = Some(map);
    Ok(out)
}

/// A thread that collapses the packed weights' 4 KiB pages into huge pages
/// (`MADV_COLLAPSE`, Linux 6.1 and later), 2 MiB at a time, while the model already runs: for
/// Gemma 3 270M's 234 MB about 0.7 s of one core (a fresh huge page costs that much on this
/// project's VM). The contents never change, so readers see the same bytes throughout. The
/// thread stops early when the weights are dropped, which waits for it: the mapping outlives it.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
struct HugePages {
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl HugePages {
    #[cfg(target_os = "linux")]
    fn collapse(map: &MmapMut, base: usize, total: usize) -> Option<HugePages> {
        /// From Linux's uapi `mman-common.h` (not in every libc target's bindings).
        const MADV_COLLAPSE: libc::c_int = 25;
        let stop = Arc::new(AtomicBool::new(false));
        let start = map.as_ptr() as usize + base;
        let thread = std::thread::Builder::new()
            .name("ollamars-hugepages".into())
            .spawn({
                let stop = stop.clone();
                move || {
                    for at in (start..start + total).step_by(HUGE_PAGE) {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        let len = HUGE_PAGE.min(start + total - at);
                        // SAFETY: the range is inside the mapping, which `Drop` keeps mapped
                        // until this thread has returned; collapsing changes no byte of it.
                        let r = unsafe { libc::madvise(at as *mut libc::c_void, len, MADV_COLLAPSE) };
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
        self.stop.store(true, Ordering::Relaxed);
        self.join();
    }
}

/// Bytes read and packed per task: small enough that they are still in cache when they are
/// packed.
const CHUNK_BYTES: usize = 256 << 10;

/// The transparent huge page size (x86-64, and arm64 with 4 KiB pages).
const HUGE_PAGE: usize = 2 << 20;

/// A use of tensor `t` as a matrix.
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
        let huge = HugePages::collapse(&map, base, len).expect("a thread");
        huge.join();
        huge.join();
        drop(huge);
        assert!(map[base..base + len]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == byte(i)));
        for _ in 0..4 {
            drop(HugePages::collapse(&map, base, len).expect("a thread"));
        }
        assert!(map[base..base + len]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == byte(i)));
    }
}
