//! `ollamars tokenize`: how a model's tokenizer splits a text, printed as llama-tokenize does.

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use engine::gguf::Gguf;
use engine::tokenizer::Vocab;

#[derive(Args)]
pub struct TokenizeArgs {
    /// The GGUF model file whose tokenizer to use.
    #[arg(short, long, value_name = "FILE")]
    model: PathBuf,
    /// Print only the ids, as a list: [1, 15043, 3186].
    #[arg(long)]
    ids: bool,
    /// Keep special-token text such as <|im_start|> as plain text instead of turning it into
    /// the special token.
    #[arg(long)]
    no_parse_special: bool,
    /// Do not add the BOS (and EOS) tokens the model asks for.
    #[arg(long)]
    no_bos: bool,
    /// The text to tokenize; read from standard input when absent.
    text: Option<String>,
}

pub fn run(args: TokenizeArgs) -> anyhow::Result<()> {
    let gguf = Gguf::open(&args.model).with_context(|| format!("loading {}", args.model.display()))?;
    let vocab = Vocab::from_metadata(gguf.metadata())
        .with_context(|| format!("reading the tokenizer of {}", args.model.display()))?;
    for w in vocab.warnings() {
        eprintln!("warning: {w}");
    }
    let text = match args.text {
        Some(t) => t,
        None => {
            let mut bytes = Vec::new();
            std::io::stdin()
                .read_to_end(&mut bytes)
                .context("reading standard input")?;
            String::from_utf8_lossy(&bytes).into_owned()
        }
    };
    let tokens = vocab.tokenize(&text, !args.no_bos, !args.no_parse_special);

    let mut out = crate::term::stdout();
    if args.ids {
        let list: Vec<String> = tokens.iter().map(u32::to_string).collect();
        writeln!(out, "[{}]", list.join(", "))?;
    } else {
        for &id in &tokens {
            writeln!(out, "{id:6} -> '{}'", printable(vocab.token_to_piece(id, true)))?;
        }
    }
    Ok(())
}

/// A piece as text; bytes that are not UTF-8 on their own (one byte of a character split over
/// byte tokens) are shown as `\xNN`.
fn printable(piece: &[u8]) -> String {
    match std::str::from_utf8(piece) {
        Ok(s) => s.to_string(),
        Err(_) => piece
            .utf8_chunks()
            .map(|chunk| {
                let mut s = chunk.valid().to_string();
                for b in chunk.invalid() {
                    s.push_str(&format!("\\x{b:02x}"));
                }
                s
            })
            .collect(),
    }
}
