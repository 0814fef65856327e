//! Quantizing a whole GGUF file, as `llama-quantize IN OUT TYPE` does without an importance matrix:
//! same tensor order, same per-tensor types, same bytes, same metadata (the input's, with
//! `general.quantization_version` and `general.file_type` set and the `split.*` keys dropped).
//!
//! Tensors stream through one at a time: the input is memory-mapped, each tensor is converted to
//! f32 if needed, quantized in parallel over its rows, handed to the writer and dropped, so memory
//! stays around the size of the largest tensor. The output is written to a temporary file and
//! renamed into place only when complete.

use std::borrow::Cow;
use std::path::Path;

use rayon::prelude::*;

use super::mix::{self, MixParams, TensorPlan};
use super::{can_dequantize, can_quantize, dequantize_row, quantize_row, FileType, GgmlType};
use crate::gguf::{Gguf, GgufWriter, Value, SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS_COUNT};
use crate::{Error, Result};

/// `GGML_QNT_VERSION`, written to `general.quantization_version`.
pub const QUANTIZATION_VERSION: u32 = 2;

/// Work is handed to threads in pieces of whole rows of at least this many elements (llama.cpp's
/// `min_chunk_size`); blocks are independent, so the split does not change the bytes.
const MIN_CHUNK_ELEMENTS: usize = 32 * 512;

#[derive(Clone, Debug)]
pub struct QuantizeOptions {
    pub ftype: FileType,
    /// Worker threads; `None` uses every core.
    pub threads: Option<usize>,
    /// Allow re-quantizing tensors that are already quantized (llama-quantize's
    /// `--allow-requantize`): they are dequantized first, which compounds the error.
    pub allow_requantize: bool,
}

impl QuantizeOptions {
    pub fn new(ftype: FileType) -> QuantizeOptions {
        QuantizeOptions {
            ftype,
            threads: None,
            allow_requantize: false,
        }
    }
}

/// Reported after each tensor is written.
#[derive(Clone, Debug)]
pub struct QuantizeProgress<'a> {
    /// 0-based position in the output file.
    pub index: usize,
    pub count: usize,
    pub name: &'a str,
    pub dims: &'a [u64],
    pub from: GgmlType,
    pub to: GgmlType,
    /// Whether the mix's type did not fit the rows and a fallback type was used.
    pub fallback: bool,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Tensor bytes read so far, of `total_bytes_in`.
    pub done_bytes_in: u64,
    pub total_bytes_in: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuantizeReport {
    pub n_tensors: usize,
    /// Tensors whose type changed.
    pub n_converted: usize,
    /// Tensors that got a fallback type because their rows did not fit the mix's type.
    pub n_fallback: usize,
    pub n_elements: u64,
    /// Tensor data bytes before and after.
    pub bytes_in: u64,
    pub bytes_out: u64,
}

/// Quantizes the model at `input` (a file, or the first part of a split set) to `opts.ftype` and
/// writes it to `output` as one file. Refuses to write over the input, even through another path
/// to the same file. `progress` is called after each tensor.
pub fn quantize_file(
    input: &Path,
    output: &Path,
    opts: &QuantizeOptions,
    mut progress: impl FnMut(&QuantizeProgress),
) -> Result<QuantizeReport> {
    let model = Gguf::open(input)?;
    for part in model.files() {
        if same_file(part.path(), output) {
            return Err(Error::InvalidArgument(format!(
                "the output {} is the input file {}; choose another output path",
                output.display(),
                part.path().display()
            )));
        }
    }
    let params = MixParams::from_metadata(model.metadata())?;
    let infos: Vec<_> = model.tensors().iter().map(|t| t.info.clone()).collect();
    let plan = mix::plan(opts.ftype, &params, &infos)?;
    check_plan(&plan, opts)?;

    let mut writer = GgufWriter::new();
    for (k, v) in model.metadata().iter() {
        if ![SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS_COUNT].contains(&k) {
            writer.metadata.set(k, v.clone());
        }
    }
    // llama.cpp removes and re-appends these two keys, so they end the metadata.
    for (k, v) in [
        ("general.quantization_version", QUANTIZATION_VERSION),
        ("general.file_type", opts.ftype.id()),
    ] {
        writer.metadata.remove(k);
        writer.metadata.set(k, Value::U32(v));
    }
    for p in &plan {
        writer.add_tensor(p.name.clone(), p.to, &p.dims)?;
    }

    let total_bytes_in: u64 = plan.iter().map(|p| model.tensors()[p.input].info.size).sum();
    let mut report = QuantizeReport {
        n_tensors: plan.len(),
        ..QuantizeReport::default()
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads.unwrap_or(0))
        .build()
        .map_err(|e| Error::InvalidArgument(format!("cannot start worker threads: {e}")))?;
    writer.write_file(output, |i, spec| {
        let p = &plan[i];
        let t = &model.tensors()[p.input];
        let src = model.tensor_data(t);
        let data = pool
            .install(|| convert(p, src))
            .map_err(|e| e.for_tensor(&p.name))?;
        report.n_elements += t.info.n_elements();
        report.bytes_in += src.len() as u64;
        report.bytes_out += spec.size;
        report.n_converted += usize::from(p.from != p.to);
        report.n_fallback += usize::from(p.fallback);
        progress(&QuantizeProgress {
            index: i,
            count: plan.len(),
            name: &p.name,
            dims: &p.dims,
            from: p.from,
            to: p.to,
            fallback: p.fallback,
            bytes_in: src.len() as u64,
            bytes_out: spec.size,
            done_bytes_in: report.bytes_in,
            total_bytes_in,
        });
        Ok(data)
    })?;
    Ok(report)
}

/// Everything that can be known to fail is checked before the output is created.
fn check_plan(plan: &[TensorPlan], opts: &QuantizeOptions) -> Result<()> {
    for p in plan.iter().filter(|p| p.from != p.to) {
        let bad = |msg: String| Error::BadTensor {
            tensor: p.name.clone(),
            msg,
        };
        if p.from.is_quantized() && !opts.allow_requantize {
            return Err(bad(format!(
                "is already quantized ({}); re-quantizing loses quality and needs --allow-requantize",
                p.from
            )));
        }
        if !can_dequantize(p.from) {
            return Err(bad(format!("has type {}, which ollamars cannot convert", p.from)));
        }
        if !can_quantize(p.to) {
            return Err(bad(format!("would become {}, which ollamars cannot write", p.to)));
        }
    }
    Ok(())
}

/// The output bytes of one tensor: its input bytes when the type does not change, else the input
/// as f32 (converted in parallel unless it is F32 already) quantized in parallel.
fn convert<'a>(p: &TensorPlan, src: &'a [u8]) -> Result<Cow<'a, [u8]>> {
    if p.from == p.to {
        return Ok(Cow::Borrowed(src));
    }
    let n_per_row = p.dims[0] as usize;
    let n: usize = p.dims.iter().product::<u64>() as usize;
    let rows_per_chunk = MIN_CHUNK_ELEMENTS.div_ceil(n_per_row.max(1)).max(1);
    let chunk = rows_per_chunk * n_per_row;

    let owned;
    let x: &[f32] = match (p.from, bytemuck::try_cast_slice::<u8, f32>(src)) {
        (GgmlType::F32, Ok(x)) => x,
        _ => {
            let in_chunk = p.from.row_bytes((rows_per_chunk * n_per_row) as u64).unwrap_or(0) as usize;
            let mut x = vec![0f32; n];
            x.par_chunks_mut(chunk)
                .zip(src.par_chunks(in_chunk.max(1)))
                .try_for_each(|(x, s)| dequantize_row(p.from, s, x))?;
            owned = x;
            &owned
        }
    };
    let out_chunk = p.to.row_bytes(chunk as u64).unwrap_or(0) as usize;
    let mut out = vec![0u8; p.to.row_bytes(n as u64).unwrap_or(0) as usize];
    out.par_chunks_mut(out_chunk.max(1))
        .zip(x.par_chunks(chunk))
        .enumerate()
        .try_for_each(|(c, (o, x))| {
            if let Some(i) = x.iter().position(|v| !v.is_finite()) {
                return Err(Error::BadTensor {
                    tensor: p.name.clone(),
                    msg: format!(
                        "element {} is {}; only finite values can be quantized",
                        c * chunk + i,
                        x[i]
                    ),
                });
            }
            quantize_row(p.to, x, o)
        })?;
    if !super::validate_row_data(p.to, &out) {
        return Err(Error::BadTensor {
            tensor: p.name.clone(),
            msg: format!("values too large for {}: its scales overflow", p.to),
        });
    }
    Ok(Cow::Owned(out))
}

/// Whether `a` and `b` name the same existing file (through links or different spellings).
fn same_file(a: &Path, b: &Path) -> bool {
    let (Ok(ma), Ok(mb)) = (std::fs::metadata(a), std::fs::metadata(b)) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        ma.dev() == mb.dev() && ma.ino() == mb.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (ma, mb);
        matches!((std::fs::canonicalize(a), std::fs::canonicalize(b)), (Ok(x), Ok(y)) if x == y)
    }
}
