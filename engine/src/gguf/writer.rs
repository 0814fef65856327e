//! Writing GGUF v3 files that llama.cpp loads: metadata, tensor infos, aligned tensor data.

use std::borrow::Cow;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use super::reader::{align_up, DEFAULT_ALIGNMENT, MAX_DIMS, MAX_NAME};
use super::value::{Metadata, Value};
use crate::quant::GgmlType;
use crate::{Error, Result};

/// A tensor to be written: its bytes are produced later, in order, by the caller.
#[derive(Clone, Debug)]
pub struct TensorSpec {
    pub name: String,
    pub dims: Vec<u64>,
    pub ty: GgmlType,
}

impl TensorSpec {
    pub fn size(&self) -> Option<u64> {
        let row = *self.dims.first()?;
        let rows = self
            .dims
            .iter()
            .skip(1)
            .try_fold(1u64, |a, &d| a.checked_mul(d))?;
        self.ty.row_bytes(row)?.checked_mul(rows)
    }
}

/// Builds a GGUF v3 file. Tensors are laid out contiguously in the order they were added, each
/// padded to the alignment, as llama.cpp's `gguf_write` does.
#[derive(Default)]
#[must_use]
pub struct GgufWriter {
    pub metadata: Metadata,
    tensors: Vec<TensorSpec>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set(&mut self, key: impl Into<String>, value: Value) -> &mut Self {
        self.metadata.set(key, value);
        self
    }

    pub fn add_tensor(&mut self, name: impl Into<String>, ty: GgmlType, dims: &[u64]) -> Result<&mut Self> {
        let spec = TensorSpec {
            name: name.into(),
            dims: dims.to_vec(),
            ty,
        };
        let bad = |msg: String| Error::BadTensor {
            tensor: spec.name.clone(),
            msg,
        };
        if spec.name.len() >= MAX_NAME {
            return Err(bad(format!("name longer than {} bytes", MAX_NAME - 1)));
        }
        if spec.dims.is_empty() || spec.dims.len() > MAX_DIMS {
            return Err(bad(format!(
                "{} dimensions (1 to {MAX_DIMS} allowed)",
                spec.dims.len()
            )));
        }
        if spec.size().is_none() {
            return Err(bad(format!(
                "shape {:?} does not fit type {}",
                spec.dims,
                ty.name()
            )));
        }
        if self.tensors.iter().any(|t| t.name == spec.name) {
            return Err(bad("added twice".into()));
        }
        self.tensors.push(spec);
        Ok(self)
    }

    pub fn tensors(&self) -> &[TensorSpec] {
        &self.tensors
    }

    fn alignment(&self) -> u64 {
        match self.metadata.get("general.alignment") {
            Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
            _ => DEFAULT_ALIGNMENT,
        }
    }

    /// Writes the file to `out`, asking `data(i, spec)` for the bytes of tensor `i` in order.
    pub fn write<'d, W: Write>(
        &self,
        out: W,
        mut data: impl FnMut(usize, &TensorSpec) -> Result<Cow<'d, [u8]>>,
    ) -> Result<()> {
        let io = |e| Error::io("<gguf output>", e);
        let mut w = Counting { inner: out, n: 0 };
        let align = self.alignment();
        w.write_all(super::reader::MAGIC).map_err(io)?;
        w.write_all(&3u32.to_le_bytes()).map_err(io)?;
        w.write_all(&(self.tensors.len() as u64).to_le_bytes())
            .map_err(io)?;
        w.write_all(&(self.metadata.len() as u64).to_le_bytes())
            .map_err(io)?;
        for (k, v) in self.metadata.iter() {
            write_str(&mut w, k).map_err(io)?;
            w.write_all(&v.value_type().id().to_le_bytes()).map_err(io)?;
            write_value(&mut w, v).map_err(io)?;
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            write_str(&mut w, &t.name).map_err(io)?;
            w.write_all(&(t.dims.len() as u32).to_le_bytes()).map_err(io)?;
            for d in &t.dims {
                w.write_all(&d.to_le_bytes()).map_err(io)?;
            }
            w.write_all(&t.ty.id().to_le_bytes()).map_err(io)?;
            w.write_all(&offset.to_le_bytes()).map_err(io)?;
            let size = t.size().unwrap_or(0);
            offset = align_up(offset + size, align).unwrap_or(u64::MAX);
        }
        pad(&mut w, align).map_err(io)?;
        for (i, t) in self.tensors.iter().enumerate() {
            let bytes = data(i, t)?;
            let want = t.size().unwrap_or(0);
            if bytes.len() as u64 != want {
                return Err(Error::BadTensor {
                    tensor: t.name.clone(),
                    msg: format!(
                        "got {} bytes of data, its shape and type need {want}",
                        bytes.len()
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
    pub fn write_file<'d>(
        &self,
        path: impl AsRef<Path>,
        data: impl FnMut(usize, &TensorSpec) -> Result<Cow<'d, [u8]>>,
    ) -> Result<()> {
        let path = path.as_ref();
        let tmp = temp_path(path);
        let result = (|| {
            let file = File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
            let mut buf = BufWriter::with_capacity(1 << 20, file);
            self.write(&mut buf, data).map_err(|e| match e {
                Error::Io { source, .. } => Error::io(&tmp, source),
                e => e,
            })?;
            let file = buf.into_inner().map_err(|e| Error::io(&tmp, e.into_error()))?;
            file.sync_all().map_err(|e| Error::io(&tmp, e))?;
            std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }
}

fn temp_path(path: &Path) -> std::path::PathBuf {
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
    let rem = w.n % align;
    if rem != 0 {
        w.write_all(&vec![0u8; (align - rem) as usize])?;
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
        Value::Array(ty, items) => {
            w.write_all(&ty.id().to_le_bytes())?;
            w.write_all(&(items.len() as u64).to_le_bytes())?;
            // A nested array element carries its own element type and count (written by the
            // recursive call), exactly as the reader expects.
            for item in items {
                write_value(w, item)?;
            }
            Ok(())
        }
    }
}
