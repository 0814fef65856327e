//! Writes one of the tiny random-weight test models (see `engine/tests/models/tiny_model.rs`)
//! and prints the fixture prompt's token ids: `cargo run -p engine --example tiny_model -- NAME OUT.gguf`.
//! Used by `scripts/measure-logits.py` to record llama.cpp's logits for our own fixtures.

#[path = "../tests/models/tiny_model.rs"]
mod tiny_model;

use std::path::PathBuf;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, name, out] = args.as_slice() else {
        eprintln!("usage: tiny_model NAME OUT.gguf");
        std::process::exit(2);
    };
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    tiny_model::write(tiny_model::spec(name), &fixtures, out.as_ref());
    let ids: Vec<String> = tiny_model::prompt().iter().map(u32::to_string).collect();
    println!("{}", ids.join(","));
}
