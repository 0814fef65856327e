//! `ollamars inspect FILE.gguf [--json]`: what is inside a GGUF file.
//!
//! Reads the file directly with the engine (no daemon). The text form is for people; `--json`
//! prints one JSON document whose fields stay stable for scripts (see `to_json`).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::PathBuf;

use engine::gguf::{Array, Gguf, ModelFileType, Value};
use serde_json::{json, Value as Json};

/// Array elements shown before an array is summarised by its length.
const ARRAY_HEAD: usize = 8;
/// String values longer than this are cut in the text form (the JSON form has them whole).
const TEXT_STRING_MAX: usize = 80;

#[derive(clap::Args)]
pub struct Args {
    /// The GGUF file; for a split model, its first part (`*-00001-of-0000N.gguf`).
    file: PathBuf,
    /// Print a JSON document instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let model = Gguf::open(&args.file)?;
    let file_type = model.file_type()?;
    let out = if args.json {
        serde_json::to_string_pretty(&to_json(&model, file_type))? + "\n"
    } else {
        to_text(&model, file_type)
    };
    crate::term::stdout().write_all(out.as_bytes())?;
    Ok(())
}

/// The JSON document. Its fields: `version`, `files` (each part: `path`, `size`, `alignment`,
/// `data_offset`, `tensor_count`), `size` (all parts), `file_type` (`name` as llama-quantize spells
/// it or null if unknown, `description` as llama.cpp prints it, `id`, `guessed`), `parameters`,
/// `metadata` (in file order: `key`, `type`, and `value`; arrays have `element_type`, `length` and
/// their first elements in `value`, with `truncated` when there are more), and `tensors` (in file
/// order: `name`, `type`, `shape` (ggml order, innermost first), `file` (index into `files`),
/// `offset` (absolute, in that file), `size` in bytes, `elements`).
fn to_json(model: &Gguf, file_type: ModelFileType) -> Json {
    let files: Vec<Json> = model
        .files()
        .iter()
        .map(|f| {
            json!({
                "path": f.path().display().to_string(),
                "size": f.len(),
                "alignment": f.header().alignment,
                "data_offset": f.header().data_offset,
                "tensor_count": f.header().tensors.len(),
            })
        })
        .collect();
    let metadata: Vec<Json> = model
        .metadata()
        .iter()
        .map(|(key, value)| {
            let mut entry = json!({ "key": key, "type": value.value_type().name() });
            match value {
                Value::Array(a) => {
                    entry["element_type"] = json!(a.elem_type().name());
                    entry["length"] = json!(a.len());
                    entry["value"] = array_json(a);
                    if a.len() > ARRAY_HEAD {
                        entry["truncated"] = json!(true);
                    }
                }
                v => entry["value"] = scalar_json(v),
            }
            entry
        })
        .collect();
    let tensors: Vec<Json> = model
        .tensors()
        .iter()
        .map(|t| {
            let header = model.files()[t.file].header();
            json!({
                "name": t.info.name,
                "type": t.info.ty.to_string(),
                "shape": t.info.dims,
                "file": t.file,
                "offset": header.data_offset + t.info.offset,
                "size": t.info.size,
                "elements": t.info.n_elements(),
            })
        })
        .collect();
    json!({
        "version": model.version(),
        "files": files,
        "size": model.total_size(),
        "file_type": {
            "name": file_type.ftype.map(|t| t.name()),
            "description": file_type.ftype.map(|t| t.long_name()),
            "id": file_type.id,
            "guessed": file_type.guessed,
        },
        "parameters": model.n_params(),
        "metadata": metadata,
        "tensors": tensors,
    })
}

fn scalar_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => f32_json(*x),
        Value::F64(x) => json!(x),
        Value::Bool(x) => json!(x),
        Value::String(s) => json!(s),
        Value::Array(a) => array_json(a),
    }
}

/// An f32 as the shortest decimal that reads back as the same f32 (`1e-6`, not
/// `9.999999974752427e-7`); NaN and infinities, which JSON lacks, as null.
fn f32_json(x: f32) -> Json {
    x.to_string().parse::<f64>().map_or(Json::Null, |v| json!(v))
}

/// The first elements of an array (inner arrays likewise).
fn array_json(a: &Array) -> Json {
    let n = a.len().min(ARRAY_HEAD);
    Json::Array(match a {
        Array::F32(v) => v[..n].iter().map(|&x| f32_json(x)).collect(),
        Array::Array(v) => v[..n].iter().map(array_json).collect(),
        a => (0..n).filter_map(|i| a.get(i)).map(|v| scalar_json(&v)).collect(),
    })
}

fn to_text(model: &Gguf, file_type: ModelFileType) -> String {
    let mut out = String::new();
    let files = model.files();
    let first = &files[0];
    let _ = writeln!(out, "file        {}", first.path().display());
    if files.len() > 1 {
        let _ = writeln!(out, "parts       {} (split model)", files.len());
    }
    let _ = writeln!(out, "format      GGUF v{}", model.version());
    let _ = writeln!(
        out,
        "size        {} ({} bytes)",
        human_bytes(model.total_size()),
        group(model.total_size())
    );
    // llama.cpp's description where it says more than the short name (`Q4_K - Medium`).
    let description = match file_type.ftype {
        Some(t) if t.long_name() != t.name() => format!(" ({})", t.long_name()),
        _ => String::new(),
    };
    let _ = writeln!(out, "file type   {file_type}{description}");
    let _ = writeln!(
        out,
        "parameters  {} ({})",
        human_count(model.n_params()),
        group(model.n_params())
    );
    let _ = writeln!(out, "alignment   {}", first.header().alignment);

    let meta = model.metadata();
    let _ = writeln!(out, "\nmetadata ({} keys)", meta.len());
    let key_width = meta.iter().map(|(k, _)| k.len()).max().unwrap_or(0).min(48);
    for (key, value) in meta.iter() {
        let ty = match value {
            Value::Array(a) => format!("{}[{}]", a.elem_type(), a.len()),
            v => v.value_type().to_string(),
        };
        let _ = writeln!(
            out,
            "  {:key_width$}  {ty:14}  {}",
            printable(key),
            text_value(value)
        );
    }

    let tensors = model.tensors();
    let _ = writeln!(out, "\ntensors ({})", tensors.len());
    let rows: Vec<[String; 6]> = tensors
        .iter()
        .map(|t| {
            let header = files[t.file].header();
            let shape = t.info.dims.iter().map(u64::to_string).collect::<Vec<_>>();
            [
                printable(&t.info.name).into_owned(),
                t.info.ty.to_string(),
                format!("[{}]", shape.join(", ")),
                (t.file + 1).to_string(),
                (header.data_offset + t.info.offset).to_string(),
                t.info.size.to_string(),
            ]
        })
        .collect();
    let header = ["name", "type", "shape", "part", "offset", "bytes"];
    let show_part = files.len() > 1;
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 6]| {
        let mut s = String::from(" ");
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i == 3 && !show_part {
                continue;
            }
            // Text columns left-aligned, numbers right-aligned.
            if i < 3 {
                let _ = write!(s, " {cell:<w$}");
            } else {
                let _ = write!(s, " {cell:>w$}");
            }
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(out, "{}", line(header));
    for row in &rows {
        let _ = writeln!(out, "{}", line(row.each_ref().map(String::as_str)));
    }
    out
}

/// A value for the text table: strings escaped and cut, arrays summarised.
fn text_value(v: &Value) -> String {
    match v {
        Value::String(s) => short_string(s),
        Value::Array(a) => {
            let n = a.len().min(ARRAY_HEAD);
            let head: Vec<String> = (0..n).filter_map(|i| a.get(i)).map(|v| text_value(&v)).collect();
            let more = if a.len() > n {
                format!(", ... ({} values)", a.len())
            } else {
                String::new()
            };
            format!("[{}{more}]", head.join(", "))
        }
        v => v.to_string(),
    }
}

fn short_string(s: &str) -> String {
    let quoted = format!("{s:?}");
    if quoted.chars().count() <= TEXT_STRING_MAX {
        return quoted;
    }
    let cut: String = quoted.chars().take(TEXT_STRING_MAX - 4).collect();
    format!("{cut}...\" ({} bytes)", s.len())
}

/// Names from the file as they are, unless they hold control characters (which could garble a
/// terminal): then escaped.
fn printable(s: &str) -> Cow<'_, str> {
    if s.chars().any(char::is_control) {
        Cow::Owned(s.escape_debug().to_string())
    } else {
        Cow::Borrowed(s)
    }
}

/// `253180160` -> `253,180,160`.
fn group(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Decimal units, as Ollama shows model sizes.
fn human_bytes(n: u64) -> String {
    scaled(n, &["B", "KB", "MB", "GB", "TB"])
}

/// Parameter counts as llama.cpp prints them (`268.10 M`).
fn human_count(n: u64) -> String {
    scaled(n, &["", "K", "M", "B", "T"])
}

fn scaled(n: u64, units: &[&str]) -> String {
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < units.len() {
        v /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} {}", units[0]).trim_end().to_string()
    } else {
        format!("{v:.2} {}", units[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_readable() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(253180160), "253,180,160");
        assert_eq!(human_bytes(253180160), "253.18 MB");
        assert_eq!(human_bytes(12), "12 B");
        assert_eq!(human_count(268098176), "268.10 M");
        assert_eq!(human_count(7), "7");
    }

    #[test]
    fn values_are_summarised() {
        let long = "x".repeat(200);
        let s = short_string(&long);
        assert!(s.ends_with("...\" (200 bytes)"), "{s}");
        assert_eq!(short_string("a\nb"), r#""a\nb""#);
        let a = Value::Array(Array::I32((0..20).collect()));
        assert_eq!(text_value(&a), "[0, 1, 2, 3, 4, 5, 6, 7, ... (20 values)]");
        assert_eq!(array_json(&Array::F32(vec![1e-6, f32::NAN])), json!([1e-6, null]));
        assert_eq!(printable("a\u{1b}[31m"), "a\\u{1b}[31m");
    }
}
