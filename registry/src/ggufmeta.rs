//! What the registry reads from GGUF files: the kind of a file (model, adapter, projector), the
//! config details (family, parameter count, file type), and the metadata as JSON for `show`.

use engine::gguf::{Array, GgufFile, Metadata, Value as GgufValue};
use engine::quant::FileType;
use serde_json::{Map, Number, Value};

use crate::manifest::{media, ModelConfig};

/// The layer media type a GGUF file belongs under, from its metadata (Ollama's classification).
pub fn media_type(meta: &Metadata) -> &'static str {
    let kind = meta.get_str("general.type").ok().flatten().unwrap_or("");
    if kind == "adapter" {
        media::ADAPTER
    } else if is_projector(meta) {
        media::PROJECTOR
    } else {
        media::MODEL
    }
}

fn arch(meta: &Metadata) -> &str {
    meta.get_str("general.architecture").ok().flatten().unwrap_or("")
}

/// A key under the architecture's prefix (`<arch>.block_count`), as Ollama's `KV` looks them up.
fn arch_key(meta: &Metadata, key: &str) -> String {
    format!("{}.{key}", arch(meta))
}

fn arch_u64(meta: &Metadata, key: &str) -> u64 {
    meta.get(&arch_key(meta, key))
        .and_then(GgufValue::as_u64)
        .unwrap_or(0)
}

fn is_projector(meta: &Metadata) -> bool {
    let kind = meta.get_str("general.type").ok().flatten().unwrap_or("");
    if kind == "projector" || kind == "mmproj" {
        return true;
    }
    if arch_u64(meta, "block_count") == 0 && arch_u64(meta, "vision.block_count") > 0 {
        return true;
    }
    let flag = |k: &str| {
        meta.get(&arch_key(meta, k))
            .and_then(GgufValue::as_bool)
            .unwrap_or(false)
    };
    arch(meta) == "clip"
        && arch_u64(meta, "block_count") == 0
        && (flag("has_vision_encoder") || flag("has_audio_encoder"))
}

/// The parameter count: `general.parameter_count` if recorded, else the sum of tensor sizes.
pub fn parameter_count<'a>(
    meta: &Metadata,
    tensors: impl IntoIterator<Item = &'a engine::gguf::TensorInfo>,
) -> u64 {
    match meta.get("general.parameter_count").and_then(GgufValue::as_u64) {
        Some(n) if n > 0 => n,
        _ => tensors.into_iter().map(|t| t.n_elements()).sum(),
    }
}

/// The file type's short name (`Q4_K_M`), or `unknown` as Ollama says when it is not recorded.
pub fn file_type_name(meta: &Metadata) -> String {
    meta.get("general.file_type")
        .and_then(GgufValue::as_u64)
        .and_then(|id| u32::try_from(id).ok())
        .and_then(FileType::from_id)
        .map(|t| t.name().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// Ollama's `format.HumanNumber`: `268.10M`, `8B`, `1.5B`, `12K`.
pub fn human_number(n: u64) -> String {
    let f = n as f64;
    if n >= 1_000_000_000 {
        let v = f / 1e9;
        if v == v.floor() {
            format!("{v:.0}B")
        } else {
            format!("{v:.1}B")
        }
    } else if n >= 1_000_000 {
        let v = f / 1e6;
        if v == v.floor() {
            format!("{v:.0}M")
        } else {
            format!("{v:.2}M")
        }
    } else if n >= 1_000 {
        format!("{:.0}K", f / 1e3)
    } else {
        n.to_string()
    }
}

/// Fills the config's details from a model layer's GGUF, as Ollama's create does: existing
/// values win, the family is appended to the families.
pub fn fill_config(config: &mut ModelConfig, file: &GgufFile) {
    let meta = &file.header().metadata;
    let arch = arch(meta).to_string();
    if config.model_format.is_empty() {
        config.model_format = "gguf".into();
    }
    if config.model_family.is_empty() {
        config.model_family = arch.clone();
    }
    if config.model_type.is_empty() {
        config.model_type = human_number(parameter_count(meta, &file.header().tensors));
    }
    if config.file_type.is_empty() {
        config.file_type = file_type_name(meta);
    }
    config.model_families.get_or_insert_with(Vec::new).push(arch);
}

/// One metadata value as JSON. Floats are written with the digits of their own precision (an
/// f32 `1e-6` stays `1e-6`); arrays longer than `max_array` become empty unless `max_array` is
/// `None` (Ollama empties arrays longer than 5 in non-verbose `show`).
pub fn value_json(v: &GgufValue, max_array: Option<usize>) -> Value {
    match v {
        GgufValue::U8(x) => Value::from(*x),
        GgufValue::I8(x) => Value::from(*x),
        GgufValue::U16(x) => Value::from(*x),
        GgufValue::I16(x) => Value::from(*x),
        GgufValue::U32(x) => Value::from(*x),
        GgufValue::I32(x) => Value::from(*x),
        GgufValue::U64(x) => Value::from(*x),
        GgufValue::I64(x) => Value::from(*x),
        GgufValue::F32(x) => f32_json(*x),
        GgufValue::F64(x) => Number::from_f64(*x).map(Value::Number).unwrap_or(Value::Null),
        GgufValue::Bool(b) => Value::Bool(*b),
        GgufValue::String(s) => Value::String(s.clone()),
        GgufValue::Array(a) => {
            if max_array.is_some_and(|max| a.len() > max) {
                Value::Array(Vec::new())
            } else {
                Value::Array(array_json(a, max_array))
            }
        }
    }
}

fn f32_json(x: f32) -> Value {
    // The shortest decimal that reads back as this f32, not the f64 nearest to it.
    x.to_string()
        .parse::<f64>()
        .ok()
        .and_then(Number::from_f64)
        .map(Value::Number)
        .unwrap_or(Value::Null)
}

fn array_json(a: &Array, max_array: Option<usize>) -> Vec<Value> {
    fn all<T: Copy>(v: &[T], f: impl Fn(T) -> Value) -> Vec<Value> {
        v.iter().map(|&x| f(x)).collect()
    }
    match a {
        Array::U8(v) => all(v, Value::from),
        Array::I8(v) => all(v, Value::from),
        Array::U16(v) => all(v, Value::from),
        Array::I16(v) => all(v, Value::from),
        Array::U32(v) => all(v, Value::from),
        Array::I32(v) => all(v, Value::from),
        Array::U64(v) => all(v, Value::from),
        Array::I64(v) => all(v, Value::from),
        Array::F32(v) => all(v, f32_json),
        Array::F64(v) => all(v, |x| {
            Number::from_f64(x).map(Value::Number).unwrap_or(Value::Null)
        }),
        Array::Bool(v) => all(v, Value::Bool),
        Array::String(v) => v.iter().map(|s| Value::String(s.to_string())).collect(),
        Array::Array(v) => v
            .iter()
            .map(|inner| {
                if max_array.is_some_and(|max| inner.len() > max) {
                    Value::Array(Vec::new())
                } else {
                    Value::Array(array_json(inner, max_array))
                }
            })
            .collect(),
    }
}

/// The metadata map for `show`'s `model_info`: every key but `general.name` and
/// `tokenizer.chat_template` (which Ollama leaves out), plus `general.parameter_count`.
pub fn model_info(file: &GgufFile, verbose: bool) -> Map<String, Value> {
    let meta = &file.header().metadata;
    let max = if verbose { None } else { Some(5) };
    let mut out = Map::new();
    for (k, v) in meta.iter() {
        if k == "general.name" || k == "tokenizer.chat_template" {
            continue;
        }
        out.insert(k.to_string(), value_json(v, max));
    }
    out.entry("general.parameter_count")
        .or_insert_with(|| Value::from(parameter_count(meta, &file.header().tensors)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_numbers_like_ollama() {
        assert_eq!(human_number(268_098_176), "268.10M");
        assert_eq!(human_number(8_000_000_000), "8B");
        assert_eq!(human_number(8_030_261_248), "8.0B");
        assert_eq!(human_number(1_500_000_000), "1.5B");
        assert_eq!(human_number(494_032_768), "494.03M");
        assert_eq!(human_number(7_000_000), "7M");
        assert_eq!(human_number(12_345), "12K");
        assert_eq!(human_number(999), "999");
    }

    #[test]
    fn metadata_to_json() {
        let arr = GgufValue::Array(Array::U32((0..6).collect()));
        assert_eq!(value_json(&arr, Some(5)), serde_json::json!([]));
        assert_eq!(value_json(&arr, None).as_array().unwrap().len(), 6);
        assert_eq!(
            value_json(&GgufValue::F32(1e-6), None).to_string(),
            serde_json::json!(0.000001).to_string()
        );
    }
}
