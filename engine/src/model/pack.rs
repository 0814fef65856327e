//! Repacking a model's weight matrices at load into the kernels' 16-row interleaved layout
//! ([`crate::kernels::packed`]), on tiers that have packed kernels (AVX-512 with VNNI).
//!
//! A packed group feeds one 512-bit integer dot product for 16 rows and scales 16 rows with one
//! multiply-add, where the row-major kernels spend a scale conversion, a product and a reduction
//! per row and block: on this project's 2-core machine the packed kernels compute 2-3x faster
//! (`kernel_bench l2`), which decode of a small model and prompt processing both need.
//!
//! The file is remapped copy-on-write and packed in place, so memory stays the file's size (the
//! packed pages become private to the process, the others stay shared with the page cache) and
//! the file is never written. Only tensors used as whole matrices are packed (a fused tensor read
//! as row ranges stays row-major); a tied embedding is packed as the output layer and its rows
//! are unpacked when looked up. `OLLAMARS_PACK=0` keeps every matrix row-major.

use std::collections::BTreeMap;

use rayon::prelude::*;

use super::weights::Weight;
use super::Model;
use crate::kernels::matmul::can_use_packed;
use crate::kernels::{packed, Isa};
use crate::Result;

/// Whether packing is on (`OLLAMARS_PACK=0` turns it off).
fn enabled() -> bool {
    std::env::var("OLLAMARS_PACK").map_or(true, |v| v.trim() != "0")
}

/// Packs every matrix of `model` that can be, recording the packed rows of each tensor.
pub(super) fn pack_weights(model: &mut Model) -> Result<()> {
    let isa = Isa::active();
    if !enabled() {
        return Ok(());
    }
    // Tensor -> whether every use of it reads the whole matrix.
    let mut whole: BTreeMap<usize, bool> = BTreeMap::new();
    let tensors = model.gguf.tensors();
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
        return Ok(());
    }
    model.gguf.make_writable()?;
    for (t, w) in todo {
        let data = model.gguf.tensor_data_mut(t).expect("made writable above");
        let rb = w.ty.row_bytes(w.n_in as u64).expect("checked at load") as usize;
        let rows = w.n_out / packed::GROUP * packed::GROUP;
        let group_bytes = packed::GROUP * rb;
        let chunk = CHUNK_BYTES.div_ceil(group_bytes) * group_bytes;
        data[..rows * rb]
            .par_chunks_mut(chunk)
            .for_each_init(Vec::new, |scratch, part| {
                prefault_for_write(part);
                packed::pack_in_place(w.ty, w.n_in, part, part.len() / rb, scratch);
            });
        model.packed_rows[t] = rows;
    }
    Ok(())
}

/// Bytes packed per task: large enough that one `madvise` covers many pages, small enough that
/// the pages it copied are still in cache when they are packed.
const CHUNK_BYTES: usize = 256 << 10;

/// Makes the pages of `part` private copies in one call, rather than one copy-on-write
/// fault per page when it is first read and then written (each of those also flushes TLBs
/// across threads). It only saves time: kernels without `MADV_POPULATE_WRITE` (before 5.14)
/// refuse it and the faults happen as before.
fn prefault_for_write(part: &mut [u8]) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize;
        // Rounded outwards: a page shared with the neighbouring part, read before it is
        // populated, would map its neighbours read-only (fault-around), and each of those would
        // then cost a write fault and a TLB flush.
        let start = part.as_ptr() as usize / page * page;
        let end = (part.as_ptr() as usize + part.len()).next_multiple_of(page);
        // SAFETY: [start, end) holds `part` and at most a page of the same private mapping on
        // each side; populating pages for write never changes their contents.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_POPULATE_WRITE) };
    }
    #[cfg(not(target_os = "linux"))]
    let _ = part;
}

/// A use of tensor `t` as a matrix.
fn find(model: &Model, t: usize) -> Option<&Weight> {
    let w = &model.w;
    w.layers
        .iter()
        .flat_map(|l| [&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down])
        .chain([&w.output])
        .find(|x| x.tensor == t)
}
