//! Repacking a model's weight matrices at load into the kernels' 16-row interleaved layout
//! ([`crate::kernels::packed`]), on tiers that have packed kernels (AVX-512 with VNNI).
//!
//! A packed group feeds one 512-bit integer dot product for 16 rows and scales 16 rows with one
//! multiply-add, where the row-major kernels spend a scale conversion, a product and a reduction
//! per row and block: on this project's 2-core machine the packed kernels compute 2-3x faster
//! (`kernel_bench l2`), which decode of a small model and prompt processing both need.
//!
//! Packed matrices live in anonymous memory of their own ([`PackedWeights`]), read from the file
//! (not through its mapping, whose pages would then count twice) and packed there, so memory
//! stays the file's size and the file mapping keeps the file's bytes. That memory asks for
//! transparent huge pages: decode streams every weight once per token, and on this project's
//! 2-core machine two threads stream the packed matrices at 83-91% of the `membw` probe on 4 KiB
//! pages and at 91-97% on 2 MiB pages (`PACKED=1 kernel_bench 2 stream`, `HUGE=0/1`, Q4_K and
//! Q6_K); whole models decode 3-6% faster (median of 12-16 alternated pairs). Only
//! tensors used as whole matrices are packed (a fused tensor read as row ranges stays
//! row-major); a tied embedding is packed as the output layer and its rows are unpacked when
//! looked up. `OLLAMARS_PACK=0` keeps every matrix row-major.

use std::collections::BTreeMap;

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
    // Only a hint: where the system says `never` (or off Linux) the memory works the same and
    // decode reads it a little slower.
    #[cfg(target_os = "linux")]
    let _ = map.advise_range(memmap2::Advice::HugePage, base, total);
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
    out.map = Some(map);
    Ok(out)
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
}
