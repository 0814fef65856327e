//! Parsing the GGUF header (metadata and tensor infos) from bytes, trusting nothing.
//!
//! Every count, length and offset is checked against the bytes that remain before anything is
//! allocated for it, and all arithmetic on file values is overflow-checked. Parsing takes time
//! linear in the file's header, and the memory it allocates is charged to a fixed budget
//! ([`MAX_HEADER_MEMORY`]) before it is allocated, so a hostile file is rejected quickly and
//! cheaply whatever it claims. Errors name what is wrong and the byte where it was found.

use std::collections::HashSet;
use std::mem::size_of;

use super::value::{Array, Metadata, Strings, Value, ValueType};
use crate::quant::GgmlType;
use crate::{Error, Result};

pub const MAGIC: &[u8; 4] = b"GGUF";
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: usize = 4;
/// ggml's `GGML_MAX_NAME`: a tensor name must be shorter than this many bytes.
pub const MAX_NAME: usize = 64;
/// Arrays may nest (the spec allows it; llama.cpp does not), at most this many levels deep, so
/// that parsing never recurses deeply.
pub const MAX_ARRAY_DEPTH: usize = 4;
/// The most memory (in bytes, as counted by the parser) that the parsed metadata and tensor
/// infos of one file may take. Real models need far less: Gemma 3's 262k-token vocabulary, the
/// biggest part of any header, takes about 15 MiB, and a model with thousands of tensors a few
/// MiB of tensor infos. A file that would need more is rejected before the memory is allocated.
pub const MAX_HEADER_MEMORY: u64 = 256 << 20;

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

/// The number of bytes a tensor of type `ty` and shape `dims` takes, with the checks ggml makes
/// when it reads a tensor info (`gguf.cpp`): every dimension fits in an `i64`, so does the element
/// count, the row length is a whole number of blocks, and the byte size does not overflow.
pub fn tensor_size(ty: GgmlType, dims: &[u64]) -> std::result::Result<u64, String> {
    if dims.len() > MAX_DIMS {
        return Err(format!(
            "{} dimensions, at most {MAX_DIMS} are allowed",
            dims.len()
        ));
    }
    if let Some(d) = dims.iter().find(|&&d| d > i64::MAX as u64) {
        return Err(format!("dimension {d} does not fit in an i64"));
    }
    // ggml keeps element counts in an i64.
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| format!("shape {dims:?} has more than 2^63 elements"))?;
    let row = dims.first().copied().unwrap_or(1);
    if !row.is_multiple_of(ty.block_size()) {
        return Err(format!(
            "row length {row} is not a multiple of the {} block size {}",
            ty.name(),
            ty.block_size()
        ));
    }
    (n_elements / ty.block_size())
        .checked_mul(ty.type_size())
        .ok_or_else(|| format!("shape {dims:?} of type {} overflows a u64 byte size", ty.name()))
}

/// Parses and validates a whole GGUF file image (header and tensor bounds).
pub fn parse(bytes: &[u8]) -> Result<Header> {
    check_magic(bytes)?;
    let mut c = Cursor {
        bytes,
        pos: 4,
        budget: MAX_HEADER_MEMORY,
    };
    let version = c.u32("version")?;
    match version {
        2 | 3 => {}
        1 => {
            return Err(Error::UnsupportedFormat(
                "GGUF version 1 is no longer supported; re-convert the model with a current llama.cpp".into(),
            ))
        }
        0 => {
            return Err(Error::UnsupportedFormat(
                "GGUF version 0 is not a valid version".into(),
            ))
        }
        v if v & 0xFFFF == 0 => {
            return Err(Error::UnsupportedFormat(format!(
                "GGUF version field {v:#010x} looks byte-swapped: big-endian GGUF files are not supported"
            )))
        }
        v => {
            return Err(Error::UnsupportedFormat(format!(
                "GGUF version {v} is not supported (this reader knows versions 2 and 3)"
            )))
        }
    }
    let n_tensors = c.u64("tensor count")?;
    let n_kv = c.u64("metadata count")?;

    // A key/value pair takes at least 8 (key length) + 4 (type) + 1 (value) bytes.
    c.check_count(n_kv, 13, "metadata key/value pairs")?;
    let mut metadata = Metadata::new();
    for i in 0..n_kv {
        let at = c.pos as u64;
        let key = c.str(&format!("metadata key {i}"))?;
        if key.is_empty() {
            return Err(Error::corrupt(at, format!("metadata key {i} is empty")));
        }
        // The key is stored twice (the ordered entries and the index) next to its value.
        c.charge(2 * (key.len() + size_of::<String>()) + size_of::<(String, Value)>() + size_of::<usize>())?;
        let value = c
            .value_type()
            .and_then(|ty| c.value(ty, 0))
            .map_err(|e| in_context(e, &format!("metadata key {key:?}")))?;
        if !metadata.insert_new(key.to_string(), value) {
            return Err(Error::corrupt(at, format!("duplicate metadata key {key:?}")));
        }
    }

    let alignment = match metadata.get("general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
        Some(v) => {
            return Err(Error::BadKey {
                key: "general.alignment".into(),
                msg: format!("must be a power-of-two u32, found {} {v}", v.value_type()),
            })
        }
    };

    // A tensor info takes at least 8 (name length) + 4 (n_dims) + 4 (type) + 8 (offset) bytes.
    c.check_count(n_tensors, 24, "tensor infos")?;
    c.charge_n(
        n_tensors,
        size_of::<TensorInfo>() + size_of::<&str>() + size_of::<u64>(),
    )?;
    let mut tensors = Vec::with_capacity(n_tensors as usize);
    // Where each tensor info starts, to say where a tensor whose data is misplaced is described.
    let mut info_at = Vec::with_capacity(n_tensors as usize);
    let mut names = HashSet::with_capacity(n_tensors as usize);
    for i in 0..n_tensors {
        let at = c.pos as u64;
        let (name, t) = c.tensor_info(i, alignment)?;
        if !names.insert(name) {
            return Err(Error::corrupt(
                at,
                format!("tensor {i}: duplicate tensor name {name:?}"),
            ));
        }
        tensors.push(t);
        info_at.push(at);
    }

    let data_offset = align_up(c.pos as u64, alignment)
        .ok_or_else(|| Error::corrupt(c.pos as u64, "data section offset overflows"))?;
    let file_len = bytes.len() as u64;
    if !tensors.is_empty() && data_offset > file_len {
        return Err(Error::corrupt(
            file_len,
            format!("file ends before its data section, which starts at byte {data_offset}"),
        ));
    }
    check_tensor_data(&tensors, &info_at, data_offset, file_len)?;
    Ok(Header {
        version,
        metadata,
        tensors,
        alignment,
        data_offset,
    })
}

/// Every tensor's bytes lie inside the file and no two tensors share a byte. Errors point at the
/// tensor info (`info_at[i]`) of the tensor at fault.
fn check_tensor_data(tensors: &[TensorInfo], info_at: &[u64], data_offset: u64, file_len: u64) -> Result<()> {
    let data_len = file_len.saturating_sub(data_offset);
    for (t, &at) in tensors.iter().zip(info_at) {
        if t.offset.checked_add(t.size).is_none_or(|end| end > data_len) {
            return Err(Error::corrupt(
                at,
                format!(
                    "tensor {:?} ({} bytes at data offset {}) extends past the end of the file ({} data bytes)",
                    t.name, t.size, t.offset, data_len
                ),
            ));
        }
    }
    // llama.cpp requires tensors to be laid out contiguously in info order; we accept any
    // order (as older readers did) but never overlapping data.
    let mut by_offset: Vec<usize> = (0..tensors.len()).collect();
    by_offset.sort_by_key(|&i| (tensors[i].offset, tensors[i].size));
    for pair in by_offset.windows(2) {
        let (a, b) = (&tensors[pair[0]], &tensors[pair[1]]);
        if a.offset + a.size > b.offset {
            return Err(Error::corrupt(
                info_at[pair[1]],
                format!(
                    "tensor {:?} (data bytes {}..{}) overlaps tensor {:?} (data bytes {}..{})",
                    b.name,
                    b.offset,
                    b.offset + b.size,
                    a.name,
                    a.offset,
                    a.offset + a.size
                ),
            ));
        }
    }
    Ok(())
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
        b"lmgg" => "GGML (unversioned)",
        b"fmgg" => "GGMF",
        b"tjgg" => "GGJT",
        b"FUGG" => {
            return Err(Error::UnsupportedFormat(
                "byte-swapped GGUF magic: big-endian GGUF files are not supported".into(),
            ))
        }
        _ => {
            return Err(Error::UnsupportedFormat(format!(
                "not a GGUF file (it starts with \"{}\", not \"GGUF\")",
                magic.escape_ascii()
            )))
        }
    };
    Err(Error::UnsupportedFormat(format!(
        "old {old} model format; convert the model to GGUF with llama.cpp's tools"
    )))
}

/// Prefixes the message of a parse error with what was being read (a metadata key's name).
fn in_context(e: Error, what: &str) -> Error {
    match e {
        Error::Corrupt { offset, msg } => Error::Corrupt {
            offset,
            msg: format!("{what}: {msg}"),
        },
        e => e,
    }
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
    /// Memory the header may still allocate (see [`MAX_HEADER_MEMORY`]).
    budget: u64,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(Error::corrupt(
                self.pos as u64,
                format!(
                    "{what} needs {n} bytes but the file ends {} bytes later",
                    self.remaining()
                ),
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

    fn u32(&mut self, what: &str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
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

    /// Reserves `bytes` of the memory budget for something about to be allocated.
    fn charge(&mut self, bytes: usize) -> Result<()> {
        self.charge_n(1, bytes)
    }

    fn charge_n(&mut self, n: u64, each: usize) -> Result<()> {
        match n.checked_mul(each as u64) {
            Some(cost) if cost <= self.budget => {
                self.budget -= cost;
                Ok(())
            }
            _ => Err(Error::corrupt(
                self.pos as u64,
                format!(
                    "metadata and tensor infos would take more than {} MiB of memory",
                    MAX_HEADER_MEMORY >> 20
                ),
            )),
        }
    }

    /// A length-prefixed UTF-8 string, borrowed from the input.
    fn str(&mut self, what: &str) -> Result<&'a str> {
        let at = self.pos as u64;
        let len = self.u64(&format!("length of {what}"))?;
        if len > self.remaining() {
            return Err(Error::corrupt(
                at,
                format!("{what} claims {len} bytes but only {} remain", self.remaining()),
            ));
        }
        let bytes = self.take(len, what)?;
        std::str::from_utf8(bytes).map_err(|e| Error::corrupt(at, format!("{what} is not valid UTF-8 ({e})")))
    }

    /// A string value: charged to the budget, then copied.
    fn string(&mut self, what: &str) -> Result<String> {
        let s = self.str(what)?;
        self.charge(s.len())?;
        Ok(s.to_string())
    }

    fn value_type(&mut self) -> Result<ValueType> {
        let at = self.pos as u64;
        let id = self.u32("value type")?;
        ValueType::from_id(id).ok_or_else(|| Error::corrupt(at, format!("unknown metadata value type {id}")))
    }

    fn value(&mut self, ty: ValueType, depth: usize) -> Result<Value> {
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>("u8")?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array("i8")?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array("u16")?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array("i16")?)),
            ValueType::U32 => Value::U32(self.u32("u32")?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array("i32")?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array("f32")?)),
            ValueType::U64 => Value::U64(self.u64("u64")?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array("i64")?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array("f64")?)),
            ValueType::Bool => Value::Bool(self.bool()?),
            ValueType::String => Value::String(self.string("string value")?),
            ValueType::Array => Value::Array(self.array_value(depth)?),
        })
    }

    fn bool(&mut self) -> Result<bool> {
        let at = self.pos as u64;
        match self.array::<1>("bool")?[0] {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(Error::corrupt(at, format!("bool value {b} is neither 0 nor 1"))),
        }
    }

    /// An array value (element type, count, elements); `depth` is how many arrays enclose it.
    fn array_value(&mut self, depth: usize) -> Result<Array> {
        let at = self.pos as u64;
        if depth >= MAX_ARRAY_DEPTH {
            return Err(Error::corrupt(
                at,
                format!("arrays nested more than {MAX_ARRAY_DEPTH} deep"),
            ));
        }
        let elem = self.value_type()?;
        let count = self.u64("array length")?;
        // Strings take at least their 8-byte length, arrays their type and length.
        let min_size = match elem {
            ValueType::String => 8,
            ValueType::Array => 12,
            fixed => fixed.fixed_size().unwrap_or(1),
        };
        self.check_count(count, min_size, &format!("{elem} array elements"))?;
        let n = count as usize;
        macro_rules! fixed {
            ($variant:ident, $t:ty) => {{
                const SIZE: usize = size_of::<$t>();
                self.charge_n(count, SIZE)?;
                let bytes = self.take(count * SIZE as u64, "array elements")?;
                let v = bytes
                    .chunks_exact(SIZE)
                    .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk of SIZE bytes")))
                    .collect();
                Array::$variant(v)
            }};
        }
        Ok(match elem {
            ValueType::U8 => fixed!(U8, u8),
            ValueType::I8 => fixed!(I8, i8),
            ValueType::U16 => fixed!(U16, u16),
            ValueType::I16 => fixed!(I16, i16),
            ValueType::U32 => fixed!(U32, u32),
            ValueType::I32 => fixed!(I32, i32),
            ValueType::F32 => fixed!(F32, f32),
            ValueType::U64 => fixed!(U64, u64),
            ValueType::I64 => fixed!(I64, i64),
            ValueType::F64 => fixed!(F64, f64),
            ValueType::Bool => {
                self.charge_n(count, 1)?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.bool()?);
                }
                Array::Bool(v)
            }
            ValueType::String => {
                self.charge_n(count, size_of::<usize>())?;
                let mut v = Strings::with_capacity(n, 0);
                for _ in 0..n {
                    v.push(&self.string("string array element")?);
                }
                Array::String(v)
            }
            ValueType::Array => {
                self.charge_n(count, size_of::<Array>())?;
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array_value(depth + 1)?);
                }
                Array::Array(v)
            }
        })
    }

    /// One tensor info; the name is returned borrowed too, for the duplicate check.
    fn tensor_info(&mut self, index: u64, alignment: u64) -> Result<(&'a str, TensorInfo)> {
        let at = self.pos as u64;
        let name = self.str(&format!("name of tensor {index}"))?;
        let bad = |msg: String| Error::corrupt(at, format!("tensor {index} {name:?}: {msg}"));
        if name.len() >= MAX_NAME {
            return Err(bad(format!(
                "name is {} bytes, the limit is {}",
                name.len(),
                MAX_NAME - 1
            )));
        }
        self.charge(name.len() + MAX_DIMS * size_of::<u64>())?;
        let n_dims = self.u32("dimension count")?;
        if n_dims as usize > MAX_DIMS {
            return Err(bad(format!(
                "{n_dims} dimensions, at most {MAX_DIMS} are allowed"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(self.u64("dimension")?);
        }
        let type_at = self.pos as u64;
        let type_id = self.u32("tensor type")?;
        let Some(ty) = GgmlType::from_id(type_id) else {
            return Err(Error::corrupt(
                type_at,
                format!("tensor {index} {name:?}: unknown tensor type {type_id}"),
            ));
        };
        let offset = self.u64("tensor data offset")?;
        let size = tensor_size(ty, &dims).map_err(bad)?;
        if !offset.is_multiple_of(alignment) {
            return Err(bad(format!(
                "data offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        let info = TensorInfo {
            name: name.to_string(),
            dims,
            ty,
            offset,
            size,
        };
        Ok((name, info))
    }
}
