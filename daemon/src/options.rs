//! Ollama's `options`: defaults, then the model's Modelfile parameters, then the request's
//! options, decoded as Ollama's `Options.FromMap` does (unknown keys are logged and ignored,
//! a wrongly typed value is a 400, a float is truncated for an integer option).

use engine::sample::SamplingOptions;
use serde_json::{Map, Value};

/// The options of one request.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub sampling: SamplingOptions,
    pub num_predict: i64,
    pub num_keep: i64,
    pub stop: Vec<String>,
    /// Context length asked for (model or request); `None`: the server's default.
    pub num_ctx: Option<u32>,
    pub num_batch: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sampling: SamplingOptions::default(),
            num_predict: -1,
            num_keep: 4,
            stop: Vec::new(),
            num_ctx: None,
            num_batch: 512,
        }
    }
}

enum Kind {
    Int,
    Float,
    Bool,
    Strings,
}

/// Every option Ollama's client may send, with its type; the ones without an effect here
/// (GPU placement, mmap, removed samplers) are accepted and ignored.
const KNOWN: &[(&str, Kind)] = &[
    ("num_ctx", Kind::Int),
    ("num_batch", Kind::Int),
    ("num_gpu", Kind::Int),
    ("main_gpu", Kind::Int),
    ("use_mmap", Kind::Bool),
    ("num_thread", Kind::Int),
    ("draft_num_predict", Kind::Int),
    ("num_keep", Kind::Int),
    ("seed", Kind::Int),
    ("num_predict", Kind::Int),
    ("top_k", Kind::Int),
    ("top_p", Kind::Float),
    ("min_p", Kind::Float),
    ("typical_p", Kind::Float),
    ("repeat_last_n", Kind::Int),
    ("temperature", Kind::Float),
    ("repeat_penalty", Kind::Float),
    ("presence_penalty", Kind::Float),
    ("frequency_penalty", Kind::Float),
    ("stop", Kind::Strings),
    ("mirostat", Kind::Int),
    ("mirostat_tau", Kind::Float),
    ("mirostat_eta", Kind::Float),
    ("penalize_newline", Kind::Bool),
    ("tfs_z", Kind::Float),
    ("numa", Kind::Bool),
    ("low_vram", Kind::Bool),
    ("f16_kv", Kind::Bool),
    ("logits_all", Kind::Bool),
    ("vocab_only", Kind::Bool),
    ("use_mlock", Kind::Bool),
];

enum Typed {
    Int(i64),
    Float(f32),
    Bool,
    Strings(Vec<String>),
}

fn typed(key: &str, kind: &Kind, v: &Value) -> Result<Typed, String> {
    let err = |t: &str| format!("option {key:?} must be of type {t}");
    Ok(match kind {
        Kind::Int => match v {
            Value::Number(n) => Typed::Int(n.as_i64().unwrap_or_else(|| n.as_f64().unwrap_or(0.0) as i64)),
            _ => return Err(err("integer")),
        },
        Kind::Float => match v {
            Value::Number(n) => Typed::Float(n.as_f64().unwrap_or(0.0) as f32),
            _ => return Err(err("float32")),
        },
        Kind::Bool => match v {
            Value::Bool(_) => Typed::Bool,
            _ => return Err(err("boolean")),
        },
        Kind::Strings => match v {
            Value::Array(items) => Typed::Strings(
                items
                    .iter()
                    .map(|i| i.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| format!("option {key:?} must be of an array of strings"))?,
            ),
            // Modelfile layers and some clients write one stop string bare.
            Value::String(s) => Typed::Strings(vec![s.clone()]),
            _ => return Err(err("array")),
        },
    })
}

impl Options {
    /// Defaults, then `model` (the params layer), then `request`.
    pub fn resolve(
        model: Option<&Map<String, Value>>,
        request: Option<&Map<String, Value>>,
    ) -> Result<Options, String> {
        let mut o = Options::default();
        if let Some(m) = model {
            // A stored model's parameters were checked when it was created; skip what does not fit.
            let _ = o.apply(m, true);
        }
        if let Some(r) = request {
            o.apply(r, false)?;
        }
        Ok(o)
    }

    fn apply(&mut self, map: &Map<String, Value>, lenient: bool) -> Result<(), String> {
        for (key, v) in map {
            if v.is_null() {
                continue;
            }
            let Some((_, kind)) = KNOWN.iter().find(|(k, _)| k == key) else {
                tracing::warn!(option = %key, "invalid option provided");
                continue;
            };
            let t = match typed(key, kind, v) {
                Ok(t) => t,
                Err(_) if lenient => continue,
                Err(e) => return Err(e),
            };
            let s = &mut self.sampling;
            match (key.as_str(), t) {
                ("num_ctx", Typed::Int(n)) => self.num_ctx = Some(n.clamp(4, u32::MAX as i64) as u32),
                ("num_batch", Typed::Int(n)) => self.num_batch = n.clamp(1, 1 << 16) as u32,
                ("num_keep", Typed::Int(n)) => self.num_keep = n,
                ("seed", Typed::Int(n)) => s.seed = n,
                ("num_predict", Typed::Int(n)) => self.num_predict = n,
                ("top_k", Typed::Int(n)) => s.top_k = n.clamp(i32::MIN as i64, i32::MAX as i64) as i32,
                ("top_p", Typed::Float(f)) => s.top_p = f,
                ("min_p", Typed::Float(f)) => s.min_p = f,
                ("typical_p", Typed::Float(f)) => s.typical_p = f,
                ("repeat_last_n", Typed::Int(n)) => {
                    s.repeat_last_n = n.clamp(i32::MIN as i64, i32::MAX as i64) as i32
                }
                ("temperature", Typed::Float(f)) => s.temperature = f,
                ("repeat_penalty", Typed::Float(f)) => s.repeat_penalty = f,
                ("presence_penalty", Typed::Float(f)) => s.presence_penalty = f,
                ("frequency_penalty", Typed::Float(f)) => s.frequency_penalty = f,
                ("mirostat", Typed::Int(n)) => s.mirostat = n.clamp(i32::MIN as i64, i32::MAX as i64) as i32,
                ("mirostat_tau", Typed::Float(f)) => s.mirostat_tau = f,
                ("mirostat_eta", Typed::Float(f)) => s.mirostat_eta = f,
                ("stop", Typed::Strings(v)) => self.stop = v,
                _ => {} // accepted, no effect here
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn layers_and_types() {
        let model = obj(json!({"temperature": 0.2, "stop": ["<|im_end|>"], "num_ctx": 2048}));
        let req = obj(
            json!({"temperature": 0, "num_predict": 12.7, "penalize_newline": true, "bogus": 1, "seed": null}),
        );
        let o = Options::resolve(Some(&model), Some(&req)).unwrap();
        assert_eq!(o.sampling.temperature, 0.0);
        assert_eq!(o.num_predict, 12);
        assert_eq!(o.stop, vec!["<|im_end|>"]);
        assert_eq!(o.num_ctx, Some(2048));
        assert_eq!(o.sampling.seed, -1);
        assert_eq!(o.sampling.top_k, 40);
    }

    #[test]
    fn wrong_types_are_errors() {
        let e = Options::resolve(None, Some(&obj(json!({"top_k": "many"})))).unwrap_err();
        assert_eq!(e, "option \"top_k\" must be of type integer");
        let e = Options::resolve(None, Some(&obj(json!({"stop": [1]})))).unwrap_err();
        assert!(e.contains("array of strings"));
        let e = Options::resolve(None, Some(&obj(json!({"use_mmap": 1})))).unwrap_err();
        assert!(e.contains("boolean"));
    }
}
