//! Fuzzes the GGUF header parser with arbitrary bytes.
//!
//! Beyond "no panic, no crash, bounded memory" (libFuzzer's -rss_limit_mb and -malloc_limit_mb),
//! it checks what a successful parse promises: every tensor's bytes lie inside the input, and the
//! header written back by our writer parses again and writes back to the same bytes.
#![no_main]

use engine::gguf::{parse, GgufWriter, Header};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains('\n'), "multi-line error: {msg}");
        }
        Ok(h) => {
            for t in &h.tensors {
                let start = h.data_offset + t.offset;
                let end = start + t.size;
                assert!(end <= data.len() as u64, "tensor {:?} outside the input", t.name);
                let _ = &data[start as usize..end as usize];
            }
            for (k, v) in h.metadata.iter() {
                let _ = format!("{k} = {v}");
            }
            round_trip(&h, data);
        }
    }
});

/// Writes the parsed header (and its tensor data) and checks that the result parses and writes
/// back to the same bytes.
fn round_trip(h: &Header, data: &[u8]) {
    let Some(w) = writer_for(h) else { return };
    let tensor = |i: usize| {
        let t = &h.tensors[i];
        let start = (h.data_offset + t.offset) as usize;
        &data[start..start + t.size as usize]
    };
    let mut first = Vec::new();
    w.write(&mut first, |i, _| Ok(tensor(i).into()))
        .expect("writing a parsed header");
    let again = parse(&first).expect("our own output parses");
    let w2 = writer_for(&again).expect("same tensors");
    let mut second = Vec::new();
    w2.write(&mut second, |i, _| {
        let t = &again.tensors[i];
        let start = (again.data_offset + t.offset) as usize;
        Ok(first[start..start + t.size as usize].to_vec().into())
    })
    .expect("writing it again");
    assert!(first == second, "write(parse(write(x))) != write(x)");
}

/// A writer for the header, or `None` for what the writer rightly refuses and the reader accepts
/// (tensors with no dimensions, which only ggml's scalars have).
fn writer_for(h: &Header) -> Option<GgufWriter> {
    let mut w = GgufWriter::new();
    w.metadata = h.metadata.clone();
    for t in &h.tensors {
        if t.dims.is_empty() {
            return None;
        }
        w.add_tensor(t.name.clone(), t.ty, &t.dims)
            .expect("a parsed tensor is a valid tensor");
    }
    Some(w)
}
