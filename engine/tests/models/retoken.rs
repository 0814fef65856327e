//! A copy of a GGUF model with some tokens' texts and types replaced: the weights are the same,
//! so the model picks the same token ids, and the replaced texts decide what the code under test
//! makes of them (a media marker, an end of turn, a thinking tag). Shared by the engine's tests
//! and, through `#[path]`, by the end-to-end tests.

use std::borrow::Cow;
use std::path::Path;

use engine::gguf::{Array, Gguf, GgufWriter, Value};

/// GGUF token type of an ordinary token.
pub const NORMAL: i32 = 1;
/// GGUF token type of a user-defined token (as Gemma 3's `<start_of_image>` is).
pub const USER_DEFINED: i32 = 4;

/// Writes a copy of the GGUF at `src` to `out` with `(token id, text, type)` replaced.
pub fn retoken(src: &Path, out: &Path, edits: &[(u32, &str, i32)]) {
    let g = Gguf::open(src).unwrap();
    let mut w = GgufWriter::from_model(&g).unwrap();
    let md = g.metadata();
    let mut texts = md
        .get_str_array("tokenizer.ggml.tokens")
        .unwrap()
        .unwrap()
        .to_vec();
    let mut types: Vec<i32> = md
        .get_i64_array("tokenizer.ggml.token_type")
        .unwrap()
        .unwrap()
        .iter()
        .map(|&t| t as i32)
        .collect();
    for &(id, text, ty) in edits {
        texts[id as usize] = text.to_string();
        types[id as usize] = ty;
    }
    w.set("tokenizer.ggml.tokens", Value::Array(Array::String(texts.into())));
    w.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)));
    let tensors = g.tensors();
    w.write_file(out, |i, _| Ok(Cow::Borrowed(g.tensor_data(&tensors[i]))))
        .unwrap();
}
