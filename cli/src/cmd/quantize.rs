//! `ollamars quantize IN.gguf OUT.gguf TYPE`: llama-quantize's job (same tensor types, same bytes),
//! done by the engine's `quantize_file`; this module parses arguments and reports progress.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use clap::Args;
use engine::quant::{mix, quantize_file, FileType, QuantizeOptions, QuantizeProgress};

#[derive(Args)]
pub struct QuantizeArgs {
    /// The model to quantize (F32, F16 or BF16; the first part of a split set opens them all).
    input: PathBuf,
    /// Where to write the quantized model (one file; never the input).
    output: PathBuf,
    /// The quantization mix: q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K_S, q3_K_M, q3_K_L, q4_K_S,
    /// q4_K_M, q5_K_S, q5_K_M, q6_K, iq4_nl, iq4_xs, f16, bf16 or f32 (case does not matter).
    #[arg(value_name = "TYPE")]
    ftype: String,
    /// Worker threads (default: all cores).
    #[arg(short, long, value_name = "N")]
    threads: Option<usize>,
    /// Also convert tensors that are already quantized (they are dequantized first, which adds
    /// the two quantizations' errors).
    #[arg(long)]
    allow_requantize: bool,
}

const MIB: f64 = 1024.0 * 1024.0;

fn parse_ftype(s: &str) -> anyhow::Result<FileType> {
    let ftype = s
        .parse::<u32>()
        .ok()
        .and_then(FileType::from_id)
        .or_else(|| FileType::from_name(s));
    match ftype {
        Some(f) if mix::default_type(f).is_some() => Ok(f),
        _ => bail!(
            "unknown or unsupported quantization type '{s}'; choose one of q4_0, q4_1, q5_0, q5_1, q8_0, \
             q2_K, q3_K_S, q3_K_M, q3_K_L, q4_K_S, q4_K_M, q5_K_S, q5_K_M, q6_K, iq4_nl, iq4_xs, f16, \
             bf16, f32"
        ),
    }
}

pub fn run(args: QuantizeArgs) -> anyhow::Result<()> {
    let ftype = parse_ftype(&args.ftype)?;
    if args.threads == Some(0) {
        bail!("--threads must be at least 1");
    }
    let opts = QuantizeOptions {
        ftype,
        threads: args.threads,
        allow_requantize: args.allow_requantize,
    };
    let start = Instant::now();
    let tty = std::io::stderr().is_terminal();
    let mut err = std::io::stderr().lock();
    let report = quantize_file(&args.input, &args.output, &opts, |p: &QuantizeProgress| {
        let pct = 100.0 * p.done_bytes_in as f64 / p.total_bytes_in.max(1) as f64;
        let what = if p.from == p.to {
            format!("{} (kept)", p.to.name())
        } else {
            let fb = if p.fallback { ", fallback" } else { "" };
            format!("{} -> {}{fb}", p.from.name(), p.to.name())
        };
        let line = format!(
            "[{:>w$}/{}] {pct:5.1}% {:<40} {:<22} {:8.2} MiB -> {:8.2} MiB",
            p.index + 1,
            p.count,
            p.name,
            what,
            p.bytes_in as f64 / MIB,
            p.bytes_out as f64 / MIB,
            w = p.count.to_string().len(),
        );
        // On a terminal one line is rewritten in place; in a log every tensor gets its line.
        let _ = if tty {
            write!(err, "\r\x1b[2K{line}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    })
    .with_context(|| format!("quantizing {} to {}", args.input.display(), ftype))?;
    if tty {
        let _ = writeln!(err);
    }
    drop(err);
    writeln!(
        crate::term::stdout(),
        "{} -> {}: {} ({}), {} tensors ({} converted, {} fallbacks), {:.2} MiB -> {:.2} MiB ({:.2} bits per weight), {:.1} s",
        args.input.display(),
        args.output.display(),
        ftype,
        ftype.long_name(),
        report.n_tensors,
        report.n_converted,
        report.n_fallback,
        report.bytes_in as f64 / MIB,
        report.bytes_out as f64 / MIB,
        report.bytes_out as f64 * 8.0 / report.n_elements.max(1) as f64,
        start.elapsed().as_secs_f64(),
    )?;
    Ok(())
}
