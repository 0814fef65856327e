//! Writing GGUF v3 files that llama.cpp loads: metadata, tensor infos, aligned tensor data.
//!
//! The layout is the one llama.cpp's `gguf_write` produces and its reader requires: header,
//! metadata in insertion order, tensor infos, zero padding to the alignment, then the tensors
//! contiguously in the order they were added, each padded to the alignment. A model read by
//! [`Gguf`] and written back with [`GgufWriter::from_model`] is byte-identical to a file written
//! by llama.cpp.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use super::file::{split_path, Gguf, SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS_COUNT};
use super::reader::{align_up, tensor_size, DEFAULT_ALIGNMENT, MAGIC, MAX_NAME};
use super::value::{Array, Metadata, Value};
use crate::quant::GgmlType;
use crate::{Error, Result};

/// A tensor to be written: its bytes are produced later, in order, by the caller.
#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Size of the tensor data in bytes (checked when the tensor was added).
    pub size: u64,
}

/// How to cut a model into the parts of a split set, as llama.cpp's `gguf-split` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitBy {
    /// At most this many tensors per part (`--split-max-tensors`, 128 by default there).
    Tensors(usize),
    /// Start a new part before a tensor that would take the current one's tensor data past this
    /// many bytes (`--split-max-size`); a tensor bigger than that gets a part of its own.
    Bytes(u64),
}

/// Builds a GGUF v3 file. Tensors are laid out contiguously in the order they were added, each
/// padded to the alignment, as llama.cpp's `gguf_write` does.
#[derive(Default)]
#[must_use]
pub struct GgufWriter {
    /// Written as given, in order (including any `split.*` keys: see [`GgufWriter::from_model`]).
    pub metadata: Metadata,
    tensors: Vec<TensorSpec>,
}

/// The bytes of tensor `i` (in the order added), asked for once each, in order.
pub trait TensorData<'d>: FnMut(usize, &TensorSpec) -> Result<Cow<'d, [u8]>> {}
impl<'d, F: FnMut(usize, &TensorSpec) -> Result<Cow<'d, [u8]>>> TensorData<'d> for F {}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// A writer holding a model's metadata and tensor list, ready to write it out again (as one
    /// file, or split): the metadata of the first part without the `split.*` keys, which describe
    /// the files the model was read from, and the tensors of all parts in order. The tensor data is
    /// `model.tensor_data(&model.tensors()[i])`.
    pub fn from_model(model: &Gguf) -> Result<Self> {
        let mut w = GgufWriter::new();
        for (k, v) in model.metadata().iter() {
            if ![SPLIT_NO, SPLIT_COUNT, SPLIT_TENSORS_COUNT].contains(&k) {
                w.metadata.set(k, v.clone());
            }
        }
        for t in model.tensors() {
            w.add_tensor(t.info.name.clone(), t.info.ty, &t.info.dims)?;
        }
        Ok(w)
    }

    pub fn set(&mut self, key: impl Into<String>, value: Value) -> &mut Self {
        self.metadata.set(key, value);
        self
    }

    pub fn add_tensor(&mut self, name: impl Into<String>, ty: GgmlType, dims: &[u64]) -> Result<&mut Self> {
        let name = name.into();
        let bad = |msg: String| Error::BadTensor {
            tensor: name.clone(),
            msg,
        };
        if name.len() >= MAX_NAME {
            return Err(bad(format!(
                "name is {} bytes, the limit is {}",
                name.len(),
                MAX_NAME - 1
            )));
        }
        if dims.is_empty() {
            return Err(bad("a tensor needs at least one dimension".into()));
        }
        let size = tensor_size(ty, dims).map_err(bad)?;
        if self.tensors.iter().any(|t| t.name == name) {
            return Err(bad("added twice".into()));
        }
        self.tensors.push(TensorSpec {
            name,
            dims: dims.to_vec(),
            ty,
            size,
        });
        Ok(self)
    }

    pub fn tensors(&self) -> &[TensorSpec] {
        &self.tensors
    }

    /// The alignment of the data section: `general.alignment`, which must then be a power-of-two
    /// u32 (llama.cpp rejects anything else), or 32.
    fn alignment(&self) -> Result<u64> {
        match self.metadata.get("general.alignment") {
            None => Ok(DEFAULT_ALIGNMENT),
            Some(Value::U32(a)) if a.is_power_of_two() => Ok(u64::from(*a)),
            Some(v) => Err(Error::BadKey {
                key: "general.alignment".into(),
                msg: format!("must be a power-of-two u32, found {} {v}", v.value_type()),
            }),
        }
    }

    /// Writes the file to `out`, asking `data(i, spec)` for the bytes of tensor `i` in order.
    pub fn write<'d, W: Write>(&self, out: W, mut data: impl TensorData<'d>) -> Result<()> {
        let align = self.alignment()?;
        if let Some((k, _)) = self.metadata.iter().find(|(k, _)| k.is_empty()) {
            return Err(Error::BadKey {
                key: k.to_string(),
                msg: "metadata keys must not be empty".into(),
            });
        }
        let io = |e| Error::io("<gguf output>", e);
        let mut w = Counting { inner: out, n: 0 };
        (|| {
            w.write_all(MAGIC)?;
            w.write_all(&3u32.to_le_bytes())?;
            w.write_all(&(self.tensors.len() as u64).to_le_bytes())?;
            w.write_all(&(self.metadata.len() as u64).to_le_bytes())?;
            for (k, v) in self.metadata.iter() {
                write_str(&mut w, k)?;
                w.write_all(&v.value_type().id().to_le_bytes())?;
                write_value(&mut w, v)?;
            }
            Ok(())
        })()
        .map_err(io)?;
        let mut offset = 0u64;
        for t in &self.tensors {
            (|| {
                write_str(&mut w, &t.name)?;
                w.write_all(&(t.dims.len() as u32).to_le_bytes())?;
                for d in &t.dims {
                    w.write_all(&d.to_le_bytes())?;
                }
                w.write_all(&t.ty.id().to_le_bytes())?;
                w.write_all(&offset.to_le_bytes())
            })()
            .map_err(io)?;
            offset = offset
                .checked_add(t.size)
                .and_then(|end| align_up(end, align))
                .ok_or_else(|| Error::BadTensor {
                    tensor: t.name.clone(),
                    msg: "data offset overflows".into(),
                })?;
        }
        // The data section starts aligned. A file without tensors has none, and llama.cpp's Python
        // writer (which makes vocabulary-only files) then leaves the padding out; so do we.
        if !self.tensors.is_empty() {
            pad(&mut w, align).map_err(io)?;
        }
        for (i, t) in self.tensors.iter().enumerate() {
            let bytes = data(i, t)?;
            if bytes.len() as u64 != t.size {
                return Err(Error::BadTensor {
                    tensor: t.name.clone(),
                    msg: format!(
                        "got {} bytes of data, its shape and type need {}",
                        bytes.len(),
                        t.size
                    ),
                });
            }
            w.write_all(&bytes).map_err(io)?;
            pad(&mut w, align).map_err(io)?;
        }
        w.flush().map_err(io)?;
        Ok(())
    }

    /// Writes the file atomically: into a temporary file beside `path`, synced, then renamed, so a
    /// half-written file never appears under `path`.
    pub fn write_file<'d>(&self, path: impl AsRef<Path>, data: impl TensorData<'d>) -> Result<()> {
        let path = path.as_ref();
        let tmp = self.write_temp(path, data)?;
        commit(&tmp, path)
    }

    /// Writes the model as a split set, `{prefix}-00001-of-0000N.gguf` and so on, laid out as
    /// llama.cpp's `gguf-split` does: all metadata in the first part, and in every part
    /// `split.no` (u16, 0-based), `split.count` (u16) and `split.tensors.count` (i32, the total).
    /// The parts are written to temporary files first and renamed only once all are complete.
    /// Returns the paths of the parts.
    pub fn write_split<'d>(
        &self,
        prefix: impl AsRef<Path>,
        by: SplitBy,
        mut data: impl TensorData<'d>,
    ) -> Result<Vec<PathBuf>> {
        let parts = self.plan_split(by)?;
        let count = parts.len();
        let n_tensors = i32::try_from(self.tensors.len()).map_err(|_| {
            Error::InvalidArgument(format!("{} tensors is too many to split", self.tensors.len()))
        })?;
        let count16 = u16::try_from(count)
            .map_err(|_| Error::InvalidArgument(format!("{count} parts is too many to split into")))?;
        let mut written: Vec<(PathBuf, PathBuf)> = Vec::new();
        let result = (|| {
            for (no, range) in parts.iter().enumerate() {
                let mut part = GgufWriter::new();
                if no == 0 {
                    part.metadata = self.metadata.clone();
                }
                part.set(SPLIT_NO, Value::U16(no as u16));
                part.set(SPLIT_COUNT, Value::U16(count16));
                part.set(SPLIT_TENSORS_COUNT, Value::I32(n_tensors));
                // gguf-split gives the other parts only the split keys; we keep a non-default
                // alignment too, so that every part's tensor data is aligned the same way.
                if no != 0 {
                    if let Some(a) = self.metadata.get("general.alignment") {
                        part.set("general.alignment", a.clone());
                    }
                }
                part.tensors = self.tensors[range.clone()].to_vec();
                let path = split_path(prefix.as_ref(), no as u64, count as u64);
                let tmp = part.write_temp(&path, |i, t| data(range.start + i, t))?;
                written.push((tmp, path));
            }
            Ok(())
        })();
        if let Err(e) = result {
            for (tmp, _) in &written {
                let _ = std::fs::remove_file(tmp);
            }
            return Err(e);
        }
        let mut paths = Vec::with_capacity(count);
        for (i, (tmp, path)) in written.iter().enumerate() {
            if let Err(e) = commit(tmp, path) {
                for (tmp, _) in &written[i + 1..] {
                    let _ = std::fs::remove_file(tmp);
                }
                return Err(e);
            }
            paths.push(path.clone());
        }
        Ok(paths)
    }

    /// The tensor index ranges of the parts of a split (never an empty part, except the only one
    /// of a model without tensors).
    fn plan_split(&self, by: SplitBy) -> Result<Vec<std::ops::Range<usize>>> {
        let n = self.tensors.len();
        match by {
            SplitBy::Tensors(0) | SplitBy::Bytes(0) => {
                Err(Error::InvalidArgument("a split limit must be at least 1".into()))
            }
            SplitBy::Tensors(max) => Ok((0..n.div_ceil(max).max(1))
                .map(|p| p * max..((p + 1) * max).min(n))
                .collect()),
            SplitBy::Bytes(max) => {
                let align = self.alignment()?;
                let mut parts = Vec::new();
                let (mut start, mut size) = (0, 0u64);
                for (i, t) in self.tensors.iter().enumerate() {
                    let padded = align_up(t.size, align).unwrap_or(u64::MAX);
                    let next = size.saturating_add(padded);
                    if next > max && i > start {
                        parts.push(start..i);
                        (start, size) = (i, padded);
                    } else {
                        size = next;
                    }
                }
                parts.push(start..n);
                Ok(parts)
            }
        }
    }

    /// Writes the file to a temporary path beside `path` (synced) and returns that path; on error
    /// nothing is left behind.
    fn write_temp<'d>(&self, path: &Path, data: impl TensorData<'d>) -> Result<PathBuf> {
        // Known before the (possibly long) write, not at the rename after it.
        if path.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "{} is a directory; name the file to write",
                path.display()
            )));
        }
        let tmp = temp_path(path);
        let result = (|| {
            let file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
            let mut buf = BufWriter::with_capacity(1 << 20, file);
            self.write(&mut buf, data).map_err(|e| match e {
                Error::Io { source, .. } => Error::io(&tmp, source),
                e => e,
            })?;
            let file = buf.into_inner().map_err(|e| Error::io(&tmp, e.into_error()))?;
            file.sync_all().map_err(|e| Error::io(&tmp, e))
        })();
        match result {
            Ok(()) => Ok(tmp),
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }
}

/// Moves a finished temporary file to its final name.
fn commit(tmp: &Path, path: &Path) -> Result<()> {
    std::fs::rename(tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(tmp);
        Error::io(path, e)
    })
}

fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

struct Counting<W> {
    inner: W,
    n: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.n += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn pad<W: Write>(w: &mut Counting<W>, align: u64) -> std::io::Result<()> {
    const ZEROS: [u8; 256] = [0; 256];
    let mut rem = (align - w.n % align) % align;
    while rem > 0 {
        let n = rem.min(ZEROS.len() as u64);
        w.write_all(&ZEROS[..n as usize])?;
        rem -= n;
    }
    Ok(())
}

fn write_str(w: &mut impl Write, s: &str) -> std::io::Result<()> {
    w.write_all(&(s.len() as u64).to_le_bytes())?;
    w.write_all(s.as_bytes())
}

fn write_value(w: &mut impl Write, v: &Value) -> std::io::Result<()> {
    match v {
        Value::U8(x) => w.write_all(&[*x]),
        Value::I8(x) => w.write_all(&x.to_le_bytes()),
        Value::U16(x) => w.write_all(&x.to_le_bytes()),
        Value::I16(x) => w.write_all(&x.to_le_bytes()),
        Value::U32(x) => w.write_all(&x.to_le_bytes()),
        Value::I32(x) => w.write_all(&x.to_le_bytes()),
        Value::F32(x) => w.write_all(&x.to_le_bytes()),
        Value::Bool(x) => w.write_all(&[u8::from(*x)]),
        Value::String(s) => write_str(w, s),
        Value::U64(x) => w.write_all(&x.to_le_bytes()),
        Value::I64(x) => w.write_all(&x.to_le_bytes()),
        Value::F64(x) => w.write_all(&x.to_le_bytes()),
        Value::Array(a) => write_array(w, a),
    }
}

/// An array value: element type, length, elements. An inner array of an array of arrays is
/// written the same way, with its own element type and length.
fn write_array(w: &mut impl Write, a: &Array) -> std::io::Result<()> {
    w.write_all(&a.elem_type().id().to_le_bytes())?;
    w.write_all(&(a.len() as u64).to_le_bytes())?;
    macro_rules! all {
        ($v:expr) => {{
            for x in $v {
                w.write_all(&x.to_le_bytes())?;
            }
            Ok(())
        }};
    }
    match a {
        Array::U8(v) => w.write_all(v),
        Array::I8(v) => all!(v),
        Array::U16(v) => all!(v),
        Array::I16(v) => all!(v),
        Array::U32(v) => all!(v),
        Array::I32(v) => all!(v),
        Array::F32(v) => all!(v),
        Array::U64(v) => all!(v),
        Array::I64(v) => all!(v),
        Array::F64(v) => all!(v),
        Array::Bool(v) => {
            for &b in v {
                w.write_all(&[u8::from(b)])?;
            }
            Ok(())
        }
        Array::String(v) => {
            for s in v.iter() {
                write_str(w, s)?;
            }
            Ok(())
        }
        Array::Array(v) => {
            for inner in v {
                write_array(w, inner)?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writer(sizes: &[u64]) -> GgufWriter {
        let mut w = GgufWriter::new();
        for (i, &n) in sizes.iter().enumerate() {
            w.add_tensor(format!("t{i}"), GgmlType::I8, &[n]).unwrap();
        }
        w
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)]
    fn split_plans_follow_gguf_split() {
        let w = writer(&[10, 10, 10, 10, 10]);
        assert_eq!(w.plan_split(SplitBy::Tensors(2)).unwrap(), [0..2, 2..4, 4..5]);
        assert_eq!(w.plan_split(SplitBy::Tensors(5)).unwrap(), [0..5]);
        // Each tensor takes 32 padded bytes.
        assert_eq!(w.plan_split(SplitBy::Bytes(64)).unwrap(), [0..2, 2..4, 4..5]);
        assert_eq!(
            w.plan_split(SplitBy::Bytes(1)).unwrap(),
            [0..1, 1..2, 2..3, 3..4, 4..5]
        );
        let big = writer(&[100, 10, 10]);
        assert_eq!(big.plan_split(SplitBy::Bytes(64)).unwrap(), [0..1, 1..3]);
        assert_eq!(writer(&[]).plan_split(SplitBy::Tensors(3)).unwrap(), [0..0]);
        assert!(w.plan_split(SplitBy::Tensors(0)).is_err());
    }

    #[test]
    fn bad_alignment_is_refused() {
        let mut w = writer(&[1]);
        w.set("general.alignment", Value::U64(64));
        let err = w.write(Vec::new(), |_, _| Ok(vec![0u8].into())).unwrap_err();
        assert!(err.to_string().contains("general.alignment"), "{err}");
    }

    #[test]
    fn wrong_data_length_is_refused() {
        let w = writer(&[4]);
        let err = w.write(Vec::new(), |_, _| Ok(vec![0u8; 3].into())).unwrap_err();
        assert!(err.to_string().contains("'t0'"), "{err}");
    }
}
