//! Parsing the GGUF header (metadata and tensor infos) from bytes, trusting nothing.
//!
//! Every count, length and offset is checked against the bytes that remain before anything is
//! allocated for it, and all arithmetic on file values is overflow-checked, so a hostile file costs
//! at most time and memory proportional to its size (and metadata values are capped in number).

use std::collections::HashSet;

use super::value::{Metadata, Value, ValueType};
use crate::quant::GgmlType;
use crate::{Error, Result};

pub const MAGIC: &[u8; 4] = b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;
/// ggml's `GGML_MAX_NAME`: a tensor name must be shorter than this many bytes.
pub const MAX_NAME: usize = 64;
/// Arrays may nest (the spec allows it), but not deeper than this.
const MAX_ARRAY_DEPTH: usize = 4;
/// Total metadata values (array elements included) we accept in one file. The largest real
/// vocabularies hold a few hundred thousand tokens and merges; this bounds the memory a lying
/// file can make us allocate for `Value`s to a few hundred MiB.
pub const MAX_METADATA_VALUES: u64 = 8 << 20;

/// What a tensor is and where its bytes are, as recorded in a GGUF file.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ggml's `ne`: `dims[0]` is the contiguous (row) dimension.
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    /// Offset of the first byte relative to the start of the file's data section.
    pub offset: u64,
    /// Size of the tensor data in bytes.
    pub size: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Length of one row (`dims[0]`).
    pub fn row_len(&self) -> u64 {
        self.dims.first().copied().unwrap_or(1)
    }

    /// Number of rows (product of all dimensions but the first).
    pub fn n_rows(&self) -> u64 {
        self.dims.iter().skip(1).product()
    }
}

/// The parsed header of one GGUF file.
#[derive(Clone, Debug)]
pub struct Header {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Offset of the data section from the start of the file.
    pub data_offset: u64,
}

/// Parses and validates a whole GGUF file image (header and tensor bounds).
pub fn parse(bytes: &[u8]) -> Result<Header> {
    check_magic(bytes)?;
    let mut c = Cursor {
        bytes,
        pos: 4,
        values: 0,
    };
    let version = c.u32()?;
    match version {
        2 | 3 => {}
        1 => {
            return Err(Error::UnsupportedFormat(
                "GGUF version 1 is no longer supported; re-convert the model".into(),
            ))
        }
        v if v & 0xFFFF == 0 => {
            return Err(Error::UnsupportedFormat(
                "big-endian GGUF files are not supported".into(),
            ))
        }
        v => {
            return Err(Error::UnsupportedFormat(format!(
                "GGUF version {v} is newer than this reader (2 and 3)"
            )))
        }
    }
    let n_tensors = c.u64()?;
    let n_kv = c.u64()?;

    // A key/value pair takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least
    // 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset).
    c.check_count(n_kv, 13, "metadata key/value pairs")?;
    let mut metadata = Metadata::new();
    for _ in 0..n_kv {
        let at = c.pos as u64;
        let key = c.string("metadata key")?;
        if key.is_empty() {
            return Err(Error::corrupt(at, "empty metadata key"));
        }
        let ty = c.value_type()?;
        let value = c.value(ty, 0)?;
        if !metadata.insert_new(key.clone(), value) {
            return Err(Error::corrupt(at, format!("duplicate metadata key '{key}'")));
        }
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
        Some(v) => {
            return Err(Error::BadKey {
                key: "general.alignment".into(),
                msg: format!("must be a power-of-two u32, found {} {v}", v.value_type().name()),
            })
        }
    };

    c.check_count(n_tensors, 24, "tensor infos")?;
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    let mut names = HashSet::new();
    for i in 0..n_tensors {
        let at = c.pos as u64;
        let t = c.tensor_info(i, alignment)?;
        if !names.insert(t.name.clone()) {
            return Err(Error::corrupt(at, format!("duplicate tensor name '{}'", t.name)));
        }
        tensors.push(t);
    }

    let data_offset = align_up(c.pos as u64, alignment)
        .ok_or_else(|| Error::corrupt(c.pos as u64, "data section offset overflows"))?;
    let file_len = bytes.len() as u64;
    if !tensors.is_empty() && data_offset > file_len {
        return Err(Error::corrupt(
            file_len,
            format!("file ends before its data section at byte {data_offset}"),
        ));
    }
    let data_len = file_len.saturating_sub(data_offset);
    for t in &tensors {
        let end = t.offset.checked_add(t.size);
        if end.is_none_or(|end| end > data_len) {
            return Err(Error::corrupt(
                data_offset.saturating_add(t.offset),
                format!(
                    "tensor '{}' ({} bytes at data offset {}) extends past the end of the file ({} data bytes)",
                    t.name, t.size, t.offset, data_len
                ),
            ));
        }
    }
    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

fn check_magic(bytes: &[u8]) -> Result<()> {
    let Some(magic) = bytes.get(..4) else {
        return Err(Error::UnsupportedFormat(format!(
            "file too short ({} bytes) to be GGUF",
            bytes.len()
        )));
    };
    if magic == MAGIC {
        return Ok(());
    }
    // The pre-GGUF formats, as their magics appear on disk (little-endian u32s).
    let old = match magic {
        b"lmgg" => Some("GGML (unversioned)"),
        b"fmgg" => Some("GGMF"),
        b"tjgg" => Some("GGJT"),
        b"FUGG" => {
            return Err(Error::UnsupportedFormat(
                "big-endian GGUF files are not supported".into(),
            ))
        }
        _ => None,
    };
    Err(Error::UnsupportedFormat(match old {
        Some(name) => format!("old {name} model format; convert it to GGUF with llama.cpp's tools"),
        None => format!("not a GGUF file (magic {:02x?})", magic),
    }))
}

pub(crate) fn align_up(x: u64, align: u64) -> Option<u64> {
    let rem = x % align;
    if rem == 0 {
        Some(x)
    } else {
        x.checked_add(align - rem)
    }
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// Metadata values read so far (see [`MAX_METADATA_VALUES`]).
    values: u64,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::corrupt(
                self.pos as u64,
                format!("{what} needs {n} bytes but only {} remain", self.remaining()),
            ));
        }
        let s = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self) -> Result<u32> {
        self.array("u32").map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64> {
        self.array("u64").map(u64::from_le_bytes)
    }

    /// Rejects a count whose elements (each at least `min_size` bytes) cannot fit in what remains.
    fn check_count(&self, count: u64, min_size: u64, what: &str) -> Result<()> {
        let need = count.checked_mul(min_size);
        if need.is_none_or(|need| need > self.remaining()) {
            return Err(Error::corrupt(
                self.pos as u64,
                format!(
                    "claims {count} {what}, more than the {} remaining bytes can hold",
                    self.remaining()
                ),
            ));
        }
        Ok(())
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let at = self.pos as u64;
        let len = self.u64()?;
        if len > self.remaining() {
            return Err(Error::corrupt(
                at,
                format!("{what} claims {len} bytes but only {} remain", self.remaining()),
            ));
        }
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| Error::corrupt(at, format!("{what} is not valid UTF-8")))
    }

    fn value_type(&mut self) -> Result<ValueType> {
        let at = self.pos as u64;
        let id = self.u32()?;
        ValueType::from_id(id).ok_or_else(|| Error::corrupt(at, format!("unknown metadata value type {id}")))
    }

    fn count_value(&mut self, n: u64) -> Result<()> {
        self.values = self.values.saturating_add(n);
        if self.values > MAX_METADATA_VALUES {
            return Err(Error::corrupt(
                self.pos as u64,
                format!("more than {MAX_METADATA_VALUES} metadata values"),
            ));
        }
        Ok(())
    }

    fn value(&mut self, ty: ValueType, depth: usize) -> Result<Value> {
        self.count_value(1)?;
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>("u8")?[0]),
            ValueType::I8 => Value::I8(self.array::<1>("i8")?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array("u16")?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array("i16")?)),
            ValueType::U32 => Value::U32(self.u32()?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array("i32")?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array("f32")?)),
            ValueType::U64 => Value::U64(self.u64()?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("i64")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("f64")?)),
            ValueType::Bool => {
                let at = self.pos as u64;
                match self.array::<1>("bool")?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => return Err(Error::corrupt(at, format!("bool value {b} is neither 0 nor 1"))),
                }
            }
            ValueType::String => Value::String(self.string("string value")?),
            ValueType::Array => {
                let at = self.pos as u64;
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(Error::corrupt(
                        at,
                        format!("arrays nested deeper than {MAX_ARRAY_DEPTH}"),
                    ));
                }
                let elem = self.value_type()?;
                let count = self.u64()?;
                // Strings take at least their 8-byte length; arrays their type and count.
                let min = elem
                    .fixed_size()
                    .unwrap_or(if elem == ValueType::Array { 12 } else { 8 });
                self.check_count(count, min, "array elements")?;
                self.count_value(count)?;
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(elem, depth + 1)?);
                }
                Value::Array(elem, items)
            }
        })
    }

    fn tensor_info(&mut self, index: u64, alignment: u64) -> Result<TensorInfo> {
        let at = self.pos as u64;
        let name = self.string("tensor name")?;
        let bad = |msg: String| Error::corrupt(at, format!("tensor {index} '{name}': {msg}"));
        if name.len() >= MAX_NAME {
            return Err(bad(format!(
                "name is {} bytes, the limit is {}",
                name.len(),
                MAX_NAME - 1
            )));
        }
        let n_dims = self.u32()?;
        if n_dims as usize > MAX_DIMS {
            return Err(bad(format!(
                "{n_dims} dimensions, at most {MAX_DIMS} are allowed"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64()?);
        }
        let type_at = self.pos;
        let type_id = self.u32()?;
        let offset = self.u64()?;
        let Some(ty) = GgmlType::from_id(type_id) else {
            return Err(Error::corrupt(
                type_at as u64,
                format!("tensor {index} '{name}': unknown tensor type {type_id}"),
            ));
        };
        // ggml keeps element counts in int64.
        let n_elements = dims
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad(format!("shape {dims:?} has too many elements")))?;
        let row = dims.first().copied().unwrap_or(1);
        if row % ty.block_size() != 0 {
            return Err(bad(format!(
                "row length {row} is not a multiple of the {} block size {}",
                ty.name(),
                ty.block_size()
            )));
        }
        let size = (n_elements / ty.block_size())
            .checked_mul(ty.type_size())
            .ok_or_else(|| bad("byte size overflows".into()))?;
        if offset % alignment != 0 {
            return Err(bad(format!(
                "data offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        Ok(TensorInfo {
            name,
            dims,
            ty,
            offset,
            size,
        })
    }
}
