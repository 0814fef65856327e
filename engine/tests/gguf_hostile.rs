//! Hostile GGUF files: every one must be rejected with a clear error naming what is wrong and
//! where, without a panic, and without allocating memory out of proportion to its size.
//!
//! The corpus is built here byte by byte (our writer refuses to write most of it): a table of
//! files that lie (counts, lengths, types, offsets, shapes, alignment, formats), every truncation
//! of a small valid file, and every single-byte corruption of it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::PathBuf;

use engine::gguf::{parse, Array, Gguf, GgufWriter, Header, Value};
use engine::quant::GgmlType;
use engine::Error;

// ---------------------------------------------------------------------------------------------
// Measuring the memory a parse allocates: a global allocator that counts, per thread, the bytes
// currently allocated and the peak since the last reset.

struct CountingAlloc;

thread_local! {
    static CURRENT: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    // try_with: the thread may be tearing down its locals; those allocations need no counting.
    let _ = CURRENT.try_with(|c| {
        let now = c.get() + delta;
        c.set(now);
        let _ = PEAK.try_with(|p| p.set(p.get().max(now)));
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the bookkeeping touches only
// const-initialised thread-locals without destructors, which never allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Parses `bytes`, returning the result and the peak number of bytes allocated meanwhile.
fn parse_measured(bytes: &[u8]) -> (engine::Result<Header>, usize) {
    let start = CURRENT.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let result = parse(bytes);
    let peak = PEAK.with(Cell::get) - start;
    (result, peak.max(0) as usize)
}

// ---------------------------------------------------------------------------------------------
// Building GGUF bytes by hand.

const T_U8: u32 = 0;
const T_U32: u32 = 4;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;

const F32: u32 = 0;
const Q4_K: u32 = 12;
const F64: u32 = 28;

fn header(version: u32, n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(version.to_le_bytes());
    b.extend(n_tensors.to_le_bytes());
    b.extend(n_kv.to_le_bytes());
    b
}

fn string(s: &[u8]) -> Vec<u8> {
    let mut b = (s.len() as u64).to_le_bytes().to_vec();
    b.extend(s);
    b
}

/// A key/value pair: key, value type, the value's bytes.
fn kv(key: &str, ty: u32, value: &[u8]) -> Vec<u8> {
    let mut b = string(key.as_bytes());
    b.extend(ty.to_le_bytes());
    b.extend(value);
    b
}

/// An array value: element type, length, the elements' bytes.
fn array(elem: u32, len: u64, elems: &[u8]) -> Vec<u8> {
    let mut b = elem.to_le_bytes().to_vec();
    b.extend(len.to_le_bytes());
    b.extend(elems);
    b
}

fn tensor(name: &str, dims: &[u64], ty: u32, offset: u64) -> Vec<u8> {
    let mut b = string(name.as_bytes());
    b.extend((dims.len() as u32).to_le_bytes());
    for d in dims {
        b.extend(d.to_le_bytes());
    }
    b.extend(ty.to_le_bytes());
    b.extend(offset.to_le_bytes());
    b
}

/// A whole file: header with the true counts, key/values, tensor infos, padding to `align`, and
/// `data_len` bytes of tensor data.
fn file_aligned(align: usize, kvs: &[Vec<u8>], tensors: &[Vec<u8>], data_len: usize) -> Vec<u8> {
    let mut b = header(3, tensors.len() as u64, kvs.len() as u64);
    b.extend(kvs.concat());
    b.extend(tensors.concat());
    if !tensors.is_empty() {
        b.resize(b.len().next_multiple_of(align), 0);
    }
    b.resize(b.len() + data_len, 0x5a);
    b
}

fn file(kvs: &[Vec<u8>], tensors: &[Vec<u8>], data_len: usize) -> Vec<u8> {
    file_aligned(32, kvs, tensors, data_len)
}

fn arch() -> Vec<u8> {
    kv("general.architecture", T_STRING, &string(b"llama"))
}

/// One F32 tensor of 8 elements (32 bytes) at offset 0.
fn one_tensor() -> Vec<Vec<u8>> {
    vec![tensor("t", &[8], F32, 0)]
}

fn nested(depth: usize) -> Vec<u8> {
    if depth == 1 {
        array(T_U8, 1, &[7])
    } else {
        array(T_ARRAY, 1, &nested(depth - 1))
    }
}

struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    /// Substrings the error message must contain.
    expect: &'static [&'static str],
}

fn case(name: &'static str, bytes: Vec<u8>, expect: &'static [&'static str]) -> Case {
    Case { name, bytes, expect }
}

fn hostile_cases() -> Vec<Case> {
    let lie_tensors = {
        let mut b = header(3, 1 << 60, 0);
        b.extend([0u8; 64]);
        b
    };
    let lie_kv = {
        let mut b = header(3, 0, u64::MAX);
        b.extend(arch());
        b
    };
    let big_endian = {
        let mut b = b"GGUF".to_vec();
        b.extend(3u32.to_be_bytes());
        b.extend(1u64.to_be_bytes());
        b.extend(0u64.to_be_bytes());
        b
    };
    let key_4gib = {
        let mut b = header(3, 0, 1);
        b.extend((4u64 << 30).to_le_bytes());
        b.extend(b"general.architecture");
        b
    };
    let value_4gib = {
        let mut b = header(3, 0, 1);
        b.extend(string(b"general.name"));
        b.extend(T_STRING.to_le_bytes());
        b.extend((4u64 << 30).to_le_bytes());
        b.extend(b"llama");
        b
    };
    let name_4gib = {
        let mut b = header(3, 1, 0);
        b.extend((4u64 << 30).to_le_bytes());
        b.extend(b"token_embd.weight");
        b
    };
    let long_name = tensor(&"n".repeat(64), &[8], F32, 0);
    vec![
        // Not GGUF at all, or a format we do not read.
        case("empty file", vec![], &["too short"]),
        case("three bytes", b"GGU".to_vec(), &["too short"]),
        case("magic only", b"GGUF".to_vec(), &["version", "needs 4 bytes"]),
        case(
            "wrong magic",
            b"PK\x03\x04rest-of-a-zip".to_vec(),
            &["not a GGUF file"],
        ),
        case("GGML magic", b"lmgg\x01\0\0\0".to_vec(), &["GGML"]),
        case("GGMF magic", b"fmgg\x01\0\0\0".to_vec(), &["GGMF"]),
        case("GGJT magic", b"tjgg\x03\0\0\0".to_vec(), &["GGJT"]),
        case("byte-swapped magic", b"FUGG\0\0\0\x03".to_vec(), &["big-endian"]),
        case("big-endian version", big_endian, &["big-endian"]),
        case("GGUF v1", header(1, 0, 0), &["version 1"]),
        case("GGUF v0", header(0, 0, 0), &["version 0"]),
        case("GGUF v4", header(4, 0, 0), &["version 4"]),
        // Lying counts and lengths.
        case("2^60 tensors", lie_tensors, &["1152921504606846976 tensor infos"]),
        case(
            "u64::MAX key/value pairs",
            lie_kv,
            &["18446744073709551615 metadata key/value pairs"],
        ),
        case(
            "4 GiB key",
            key_4gib,
            &["metadata key 0", "4294967296 bytes", "at byte 24"],
        ),
        case(
            "4 GiB string value",
            value_4gib,
            &["\"general.name\"", "4294967296 bytes"],
        ),
        case(
            "4 GiB tensor name",
            name_4gib,
            &["name of tensor 0", "4294967296 bytes"],
        ),
        case(
            "2^62 u32 array elements",
            file(&[kv("a", T_ARRAY, &array(T_U32, 1 << 62, &[0; 16]))], &[], 0),
            &["\"a\"", "4611686018427387904 u32 array elements"],
        ),
        case(
            "2^61 string array elements",
            file(&[kv("a", T_ARRAY, &array(T_STRING, 1 << 61, &[0; 16]))], &[], 0),
            &["\"a\"", "string array elements"],
        ),
        case(
            "array string element past the end",
            {
                // Two strings, the second claiming 1000 bytes: enough bytes remain for two
                // lengths, so only reading the second finds the lie.
                let elems = [string(b"x"), 1000u64.to_le_bytes().to_vec(), b"yz".to_vec()].concat();
                file(&[kv("a", T_ARRAY, &array(T_STRING, 2, &elems))], &[], 0)
            },
            &["\"a\"", "string array element claims 1000 bytes"],
        ),
        // Unknown types.
        case(
            "metadata type 13",
            file(&[kv("a", 13, &[0; 8])], &[], 0),
            &["\"a\"", "unknown metadata value type 13"],
        ),
        case(
            "array element type 99",
            file(&[kv("a", T_ARRAY, &array(99, 1, &[0; 8]))], &[], 0),
            &["\"a\"", "unknown metadata value type 99"],
        ),
        case(
            "removed tensor type 4 (q4_2)",
            file(&[arch()], &[tensor("t", &[32], 4, 0)], 64),
            &["tensor 0 \"t\"", "unknown tensor type 4"],
        ),
        case(
            "tensor type 1000",
            file(&[arch()], &[tensor("t", &[32], 1000, 0)], 64),
            &["unknown tensor type 1000"],
        ),
        // Malformed values.
        case(
            "bool 2",
            file(&[kv("b", T_BOOL, &[2])], &[], 0),
            &["\"b\"", "bool value 2"],
        ),
        case(
            "empty key",
            file(&[kv("", T_U8, &[1])], &[], 0),
            &["metadata key 0 is empty"],
        ),
        case(
            "key not UTF-8",
            file(
                &[kv("a\u{0}", T_U8, &[1])].map(|mut b| {
                    b[9] = 0xff;
                    b
                }),
                &[],
                0,
            ),
            &["metadata key 0 is not valid UTF-8"],
        ),
        case(
            "duplicate key",
            file(&[arch(), kv("x", T_U8, &[1]), kv("x", T_U8, &[2])], &[], 0),
            &["duplicate metadata key \"x\""],
        ),
        case(
            "arrays nested 5 deep",
            file(&[kv("deep", T_ARRAY, &nested(5))], &[], 0),
            &["\"deep\"", "nested more than 4 deep"],
        ),
        // Alignment.
        case(
            "general.alignment is a u64",
            file(
                &[kv("general.alignment", T_U64, &64u64.to_le_bytes())],
                &one_tensor(),
                32,
            ),
            &["general.alignment", "power-of-two u32"],
        ),
        case(
            "general.alignment 0",
            file(
                &[kv("general.alignment", T_U32, &0u32.to_le_bytes())],
                &one_tensor(),
                32,
            ),
            &["general.alignment", "power-of-two u32"],
        ),
        case(
            "general.alignment 48",
            file(
                &[kv("general.alignment", T_U32, &48u32.to_le_bytes())],
                &one_tensor(),
                32,
            ),
            &["general.alignment", "power-of-two u32"],
        ),
        case(
            "misaligned tensor offset",
            file(
                &[arch()],
                &[tensor("a", &[8], F32, 0), tensor("b", &[8], F32, 40)],
                128,
            ),
            &[
                "tensor 1 \"b\"",
                "data offset 40 is not a multiple of the alignment 32",
            ],
        ),
        case(
            "offset aligned to 32 but not to general.alignment 64",
            file_aligned(
                64,
                &[kv("general.alignment", T_U32, &64u32.to_le_bytes())],
                &[tensor("a", &[8], F32, 0), tensor("b", &[8], F32, 32)],
                128,
            ),
            &["data offset 32 is not a multiple of the alignment 64"],
        ),
        // Shapes.
        case(
            "5 dimensions",
            file(&[arch()], &[tensor("t", &[1, 1, 1, 1, 8], F32, 0)], 32),
            &["tensor 0 \"t\"", "5 dimensions, at most 4"],
        ),
        case(
            "u32::MAX dimensions",
            {
                let mut t = string(b"t");
                t.extend(u32::MAX.to_le_bytes());
                t.extend([0u8; 16]);
                file(&[arch()], &[t], 0)
            },
            &["4294967295 dimensions"],
        ),
        case(
            "row not a multiple of the block size",
            file(
                &[arch()],
                &[tensor("blk.0.ffn_up.weight", &[100, 4], Q4_K, 0)],
                1024,
            ),
            &[
                "\"blk.0.ffn_up.weight\"",
                "row length 100 is not a multiple of the q4_K block size 256",
            ],
        ),
        case(
            "element count overflows u64",
            file(&[arch()], &[tensor("t", &[1 << 32, 1 << 32], F32, 0)], 32),
            &["more than 2^63 elements"],
        ),
        case(
            "element count over i64::MAX",
            file(&[arch()], &[tensor("t", &[1 << 61, 4], F32, 0)], 32),
            &["more than 2^63 elements"],
        ),
        case(
            "dimension over i64::MAX (with a zero dimension)",
            file(&[arch()], &[tensor("t", &[1 << 63, 0], F32, 0)], 32),
            &["dimension 9223372036854775808 does not fit in an i64"],
        ),
        case(
            "byte size overflows u64",
            file(&[arch()], &[tensor("t", &[1 << 62], F64, 0)], 32),
            &["overflows a u64 byte size"],
        ),
        // Tensor data placement.
        case(
            "tensor past the end",
            file(&[arch()], &[tensor("t", &[64], F32, 0)], 255),
            &[
                "tensor \"t\"",
                "at byte 69:",
                "256 bytes at data offset 0",
                "extends past the end",
            ],
        ),
        case(
            "tensor offset far past the end",
            file(&[arch()], &[tensor("t", &[8], F32, 1 << 40)], 32),
            &["extends past the end"],
        ),
        case(
            "tensor offset + size overflows",
            file(&[arch()], &[tensor("t", &[8], F32, u64::MAX - 31)], 32),
            &["extends past the end"],
        ),
        case(
            "data section past the end",
            {
                let mut b = header(3, 1, 0);
                b.extend(tensor("t", &[0], F32, 0));
                b
            },
            &["file ends before its data section"],
        ),
        case(
            "overlapping tensors",
            file(
                &[arch()],
                &[tensor("a", &[16], F32, 0), tensor("b", &[8], F32, 32)],
                96,
            ),
            &["tensor \"b\" (data bytes 32..64) overlaps tensor \"a\" (data bytes 0..64)"],
        ),
        case(
            "two tensors at one offset",
            file(
                &[arch()],
                &[tensor("a", &[8], F32, 0), tensor("b", &[8], F32, 0)],
                32,
            ),
            &["overlaps"],
        ),
        case(
            "duplicate tensor names",
            file(
                &[arch()],
                &[tensor("w", &[8], F32, 0), tensor("w", &[8], F32, 32)],
                64,
            ),
            &["tensor 1: duplicate tensor name \"w\""],
        ),
        case(
            "tensor name of 64 bytes",
            file(&[arch()], &[long_name], 32),
            &["name is 64 bytes, the limit is 63"],
        ),
        case(
            "tensor name with a newline is quoted",
            file(&[arch()], &[tensor("a\nb", &[8], F32, 1)], 32),
            &["\"a\\nb\""],
        ),
    ]
}

#[test]
fn hostile_files_are_rejected_cleanly() {
    let mut failures = Vec::new();
    for c in hostile_cases() {
        let (result, peak) = parse_measured(&c.bytes);
        let err = match result {
            Ok(_) => {
                failures.push(format!("{}: parsed without error", c.name));
                continue;
            }
            Err(e) => e,
        };
        let msg = err.to_string();
        for want in c.expect {
            if !msg.contains(want) {
                failures.push(format!("{}: error {msg:?} does not mention {want:?}", c.name));
            }
        }
        if msg.contains('\n') {
            failures.push(format!("{}: error {msg:?} is not one line", c.name));
        }
        if let Error::Corrupt { offset, .. } = err {
            if offset > c.bytes.len() as u64 {
                failures.push(format!("{}: error at byte {offset}, past the end", c.name));
            }
        }
        // A rejected file costs memory in proportion to its size, whatever it claims.
        let limit = 64 * 1024 + 4 * c.bytes.len();
        if peak > limit {
            failures.push(format!("{}: allocated {peak} bytes (limit {limit})", c.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_hostile_table_is_really_hostile_only_where_it_says() {
    // Sanity for the builders: the same shapes without the lie parse.
    let ok = [
        file(&[arch()], &one_tensor(), 32),
        file(&[kv("deep", T_ARRAY, &nested(4))], &[], 0),
        file(
            &[arch()],
            &[tensor("a", &[8], F32, 0), tensor("b", &[8], F32, 32)],
            64,
        ),
        file(
            &[arch()],
            &[tensor("t", &[1 << 63, 0], F32, 0)].map(|mut t| {
                // i64::MAX fits; with a zero dimension it has no elements.
                t[13..21].copy_from_slice(&(i64::MAX as u64).to_le_bytes());
                t
            }),
            0,
        ),
        file(
            &[arch()],
            &[tensor("blk.0.ffn_up.weight", &[256, 4], Q4_K, 0)],
            576,
        ),
        file_aligned(
            64,
            &[kv("general.alignment", T_U32, &64u32.to_le_bytes())],
            &[tensor("a", &[8], F32, 0), tensor("b", &[8], F32, 64)],
            96,
        ),
    ];
    for (i, bytes) in ok.iter().enumerate() {
        if let Err(e) = parse(bytes) {
            panic!("valid file {i} rejected: {e}");
        }
    }
    let h = parse(&ok[1]).unwrap();
    let expect = Array::Array(vec![Array::Array(vec![Array::Array(vec![Array::U8(vec![7])])])]);
    assert_eq!(h.metadata.get("deep"), Some(&Value::Array(expect)));
}

/// A lie within the real size: 33M empty strings (264 MiB of file) would take 264 MiB of string
/// offsets, more than the header budget. The parser refuses before allocating them.
#[test]
fn header_memory_is_budgeted() {
    let n: u64 = 33 << 20;
    let mut bytes = file(&[], &[], 0);
    bytes.extend(kv("tokenizer.ggml.tokens", T_ARRAY, &array(T_STRING, n, &[])));
    bytes.resize(bytes.len() + (n * 8) as usize, 0);
    bytes[16..24].copy_from_slice(&1u64.to_le_bytes()); // n_kv = 1
    let (result, peak) = parse_measured(&bytes);
    let msg = result.unwrap_err().to_string();
    assert!(msg.contains("more than 256 MiB of memory"), "{msg}");
    assert!(msg.contains("tokenizer.ggml.tokens"), "{msg}");
    assert!(peak < 1 << 20, "allocated {peak} bytes");
}

/// A small valid file with every kind of value and three tensor types, written by our writer.
fn valid_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.set("general.architecture", Value::String("llama".into()));
    w.set("general.name", Value::String("tiny ünïcode".into()));
    w.set("u8", Value::U8(1));
    w.set("i8", Value::I8(-2));
    w.set("u16", Value::U16(3));
    w.set("i16", Value::I16(-4));
    w.set("u32", Value::U32(5));
    w.set("i32", Value::I32(-6));
    w.set("f32", Value::F32(0.5));
    w.set("bool", Value::Bool(true));
    w.set("u64", Value::U64(1 << 40));
    w.set("i64", Value::I64(-1 << 40));
    w.set("f64", Value::F64(-0.25));
    w.set(
        "tokens",
        Value::Array(Array::String(["<s>", "", "▁a"].into_iter().collect())),
    );
    w.set("scores", Value::Array(Array::F32(vec![0.0, -1.0, -2.5])));
    w.set("flags", Value::Array(Array::Bool(vec![true, false])));
    w.set("empty", Value::Array(Array::I64(vec![])));
    w.set(
        "nested",
        Value::Array(Array::Array(vec![
            Array::U16(vec![1, 2]),
            Array::String(["x"].into_iter().collect()),
        ])),
    );
    w.add_tensor("token_embd.weight", GgmlType::Q8_0, &[32, 3])
        .unwrap();
    w.add_tensor("norm", GgmlType::F32, &[5]).unwrap();
    w.add_tensor("w", GgmlType::Q4_K, &[256, 1]).unwrap();
    let mut out = Vec::new();
    w.write(&mut out, |_, t| Ok(vec![0x11; t.size as usize].into()))
        .unwrap();
    out
}

#[test]
fn every_truncation_is_rejected() {
    let bytes = valid_file();
    let h = parse(&bytes).unwrap();
    assert_eq!(h.tensors.len(), 3);
    let data_end = h
        .tensors
        .iter()
        .map(|t| h.data_offset + t.offset + t.size)
        .max()
        .unwrap() as usize;
    // Cutting off only the padding after the last tensor loses nothing (llama.cpp accepts it too).
    let mut sections = [0usize; 3]; // cuts in the header and metadata, the tensor infos, the data
    for n in 0..bytes.len() {
        let (result, peak) = parse_measured(&bytes[..n]);
        if n >= data_end {
            assert!(result.is_ok(), "cut at {n} (after the data) rejected");
            continue;
        }
        let err = match result {
            Ok(_) => panic!("file cut at byte {n} of {} parsed", bytes.len()),
            Err(e) => e,
        };
        let msg = err.to_string();
        assert!(!msg.contains('\n'), "{msg}");
        match err {
            Error::Corrupt { offset, .. } => assert!(offset <= n as u64, "cut at {n}: {msg}"),
            Error::UnsupportedFormat(_) => assert!(n < 8, "cut at {n}: {msg}"),
            e => panic!("cut at {n}: unexpected error kind {e}"),
        }
        assert!(peak <= 64 * 1024, "cut at {n}: allocated {peak} bytes");
        let section = if n < 24 + kv_end(&bytes) {
            0
        } else if n < h.data_offset as usize {
            1
        } else {
            2
        };
        sections[section] += 1;
    }
    assert!(sections.iter().all(|&n| n > 0), "{sections:?}");
}

/// Where the metadata of `valid_file()` ends (relative to the end of the 24-byte header): at the
/// first tensor name.
fn kv_end(bytes: &[u8]) -> usize {
    let name = b"token_embd.weight";
    bytes.windows(name.len()).position(|w| w == name).unwrap() - 8 - 24
}

#[test]
fn every_single_byte_corruption_is_handled() {
    let bytes = valid_file();
    let mut rejected = 0;
    for i in 0..bytes.len() {
        for v in [0x00, 0xff, bytes[i].wrapping_add(1), bytes[i] ^ 0x80] {
            if v == bytes[i] {
                continue;
            }
            let mut b = bytes.clone();
            b[i] = v;
            let (result, peak) = parse_measured(&b);
            assert!(peak <= 64 * 1024, "byte {i} = {v:#x}: allocated {peak} bytes");
            if let Err(e) = result {
                assert!(!e.to_string().contains('\n'));
                rejected += 1;
            }
        }
    }
    // Most corruptions of the header are caught (those in tensor data cannot be).
    assert!(rejected > 0);
}

#[test]
fn opening_a_hostile_file_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("bad.gguf");
    std::fs::write(&path, file(&[arch()], &[tensor("t", &[64], F32, 0)], 8)).unwrap();
    let err = Gguf::open(&path).err().expect("rejected");
    let msg = err.to_string();
    assert!(msg.starts_with(&path.display().to_string()), "{msg}");
    assert!(msg.contains("extends past the end"), "{msg}");
    assert!(matches!(err.without_path(), Error::Corrupt { .. }));
}
