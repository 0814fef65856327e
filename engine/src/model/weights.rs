//! Finding an architecture's tensors in a GGUF file by llama.cpp's names, checking their shapes.
//!
//! Matrices stay in the mapping, in their own format; a [`Weight`] only records where they are.
//! Small vectors (norm weights, biases, RoPE factors) are converted to f32 once at load.

use std::collections::HashMap;
use std::sync::Arc;

use super::arch::{Arch, Ffn, Presence};
use super::hparams::HParams;
use crate::gguf::Gguf;
use crate::ops::dot;
use crate::quant::GgmlType;
use crate::{Error, Result};

/// A weight matrix (or a range of its rows, for fused tensors) inside the model file.
#[derive(Clone, Debug)]
pub struct Weight {
    /// Index into `Gguf::tensors()`.
    pub tensor: usize,
    pub ty: GgmlType,
    pub n_in: usize,
    pub row0: usize,
    pub n_out: usize,
}

pub struct LayerWeights {
    pub attn_norm: Vec<f32>,
    pub wq: Weight,
    pub wk: Weight,
    pub wv: Weight,
    pub bq: Option<Vec<f32>>,
    pub bk: Option<Vec<f32>>,
    pub bv: Option<Vec<f32>>,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub wo: Weight,
    pub bo: Option<Vec<f32>>,
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    pub ffn_gate: Weight,
    pub ffn_up: Weight,
    pub ffn_down: Weight,
    pub ffn_gate_b: Option<Vec<f32>>,
    pub ffn_up_b: Option<Vec<f32>>,
    pub ffn_down_b: Option<Vec<f32>>,
    pub post_ffn_norm: Option<Vec<f32>>,
}

pub struct Weights {
    pub token_embd: Weight,
    pub output_norm: Vec<f32>,
    /// `output.weight`, or `token_embd.weight` when the file ties them.
    pub output: Weight,
    pub output_b: Option<Vec<f32>>,
    /// RoPE frequency divisors: Llama 3 scaling baked into `rope_freqs`, or LongRoPE's factors
    /// for contexts beyond (`long`) or within (`short`) the original training context.
    pub rope_freqs: Option<Arc<[f32]>>,
    pub rope_long: Option<Arc<[f32]>>,
    pub rope_short: Option<Arc<[f32]>>,
    pub layers: Vec<LayerWeights>,
}

struct Loader<'a> {
    gguf: &'a Gguf,
    index: HashMap<&'a str, usize>,
}

impl Loader<'_> {
    fn find(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    fn shape_error(&self, name: &str, want: &[usize]) -> Error {
        let got = &self.gguf.tensors()[self.find(name).unwrap_or(0)].info.dims;
        Error::BadTensor {
            tensor: name.to_string(),
            msg: format!("shape {got:?}, expected {want:?}"),
        }
    }

    /// A matrix `[n_in, n_out]`, `None` if absent.
    fn matrix_opt(&self, name: &str, n_in: usize, n_out: usize) -> Result<Option<Weight>> {
        let Some(i) = self.find(name) else {
            return Ok(None);
        };
        let info = &self.gguf.tensors()[i].info;
        if info.dims != [n_in as u64, n_out as u64] {
            return Err(self.shape_error(name, &[n_in, n_out]));
        }
        if !dot::can_multiply(info.ty) {
            return Err(Error::UnsupportedType {
                tensor: name.to_string(),
                ty: info.ty.to_string(),
            });
        }
        Ok(Some(Weight {
            tensor: i,
            ty: info.ty,
            n_in,
            row0: 0,
            n_out,
        }))
    }

    fn matrix(&self, name: &str, n_in: usize, n_out: usize) -> Result<Weight> {
        self.matrix_opt(name, n_in, n_out)?
            .ok_or_else(|| Error::MissingTensor(name.to_string()))
    }

    /// A vector of `n` values converted to f32, `None` if absent.
    fn vector_opt(&self, name: &str, n: usize) -> Result<Option<Vec<f32>>> {
        let Some(i) = self.find(name) else {
            return Ok(None);
        };
        let t = &self.gguf.tensors()[i];
        if t.info.n_elements() != n as u64 || t.info.dims.iter().skip(1).any(|&d| d != 1) {
            return Err(self.shape_error(name, &[n]));
        }
        if !dot::can_dequantize(t.info.ty) || t.info.ty.row_bytes(n as u64).is_none() {
            return Err(Error::UnsupportedType {
                tensor: name.to_string(),
                ty: t.info.ty.to_string(),
            });
        }
        let mut out = vec![0f32; n];
        dot::dequantize_row(t.info.ty, self.gguf.tensor_data(t), &mut out);
        Ok(Some(out))
    }

    fn vector(&self, name: &str, n: usize) -> Result<Vec<f32>> {
        self.vector_opt(name, n)?
            .ok_or_else(|| Error::MissingTensor(name.to_string()))
    }

    fn vector_if(&self, p: Presence, name: &str, n: usize) -> Result<Option<Vec<f32>>> {
        match p {
            Presence::Absent => Ok(None),
            Presence::Optional => self.vector_opt(name, n),
            Presence::Required => self.vector(name, n).map(Some),
        }
    }
}

fn split(w: &Weight, row0: usize, n_out: usize) -> Weight {
    Weight {
        row0: w.row0 + row0,
        n_out,
        ..w.clone()
    }
}

impl Weights {
    pub fn load(arch: &Arch, h: &HParams, gguf: &Gguf) -> Result<Weights> {
        let index = gguf
            .tensors()
            .iter()
            .enumerate()
            .map(|(i, t)| (t.info.name.as_str(), i))
            .collect();
        let l = Loader { gguf, index };
        let (n_embd, n_vocab) = (h.n_embd, h.n_vocab);
        let token_embd = l.matrix("token_embd.weight", n_embd, n_vocab)?;
        if !dot::can_dequantize(token_embd.ty) {
            return Err(Error::UnsupportedType {
                tensor: "token_embd.weight".into(),
                ty: token_embd.ty.to_string(),
            });
        }
        let output = match l.matrix_opt("output.weight", n_embd, n_vocab)? {
            Some(w) => w,
            None => token_embd.clone(),
        };
        let output_norm = l.vector("output_norm.weight", n_embd)?;
        let output_b = l.vector_opt("output.bias", n_vocab)?;
        let n_pairs = h.n_rot / 2;
        let factors =
            |name: &str| -> Result<Option<Arc<[f32]>>> { Ok(l.vector_opt(name, n_pairs)?.map(Arc::from)) };
        let rope_freqs = factors("rope_freqs.weight")?;
        // LongRoPE factors are used whenever present (phi3 files carry them without a scaling
        // type; llama.cpp loads them unconditionally too).
        let rope_long = factors("rope_factors_long.weight")?;
        let rope_short = factors("rope_factors_short.weight")?;
        let mut layers = Vec::with_capacity(h.n_layer);
        for il in 0..h.n_layer {
            let name = |s: &str| format!("blk.{il}.{s}");
            let (n_q, n_k, n_v) = (
                h.n_head[il] * h.head_dim_k,
                h.n_embd_k_gqa(il),
                h.n_embd_v_gqa(il),
            );
            let fused = if arch.fused_qkv {
                l.matrix_opt(&name("attn_qkv.weight"), n_embd, n_q + n_k + n_v)?
            } else {
                None
            };
            let (wq, wk, wv, bq, bk, bv) = match fused {
                Some(qkv) => {
                    let b = l.vector_opt(&name("attn_qkv.bias"), n_q + n_k + n_v)?;
                    let (bq, bk, bv) = match b {
                        Some(b) => (
                            Some(b[..n_q].to_vec()),
                            Some(b[n_q..n_q + n_k].to_vec()),
                            Some(b[n_q + n_k..].to_vec()),
                        ),
                        None => (None, None, None),
                    };
                    (
                        split(&qkv, 0, n_q),
                        split(&qkv, n_q, n_k),
                        split(&qkv, n_q + n_k, n_v),
                        bq,
                        bk,
                        bv,
                    )
                }
                None => (
                    l.matrix(&name("attn_q.weight"), n_embd, n_q)?,
                    l.matrix(&name("attn_k.weight"), n_embd, n_k)?,
                    l.matrix(&name("attn_v.weight"), n_embd, n_v)?,
                    l.vector_if(arch.qkv_bias, &name("attn_q.bias"), n_q)?,
                    l.vector_if(arch.qkv_bias, &name("attn_k.bias"), n_k)?,
                    l.vector_if(arch.qkv_bias, &name("attn_v.bias"), n_v)?,
                ),
            };
            let n_ff = h.n_ff[il];
            let (ffn_gate, ffn_up) = match arch.ffn {
                Ffn::SiluFusedUp => {
                    let up = l.matrix(&name("ffn_up.weight"), n_embd, 2 * n_ff)?;
                    (split(&up, 0, n_ff), split(&up, n_ff, n_ff))
                }
                Ffn::SiluGated | Ffn::GeluGated => (
                    l.matrix(&name("ffn_gate.weight"), n_embd, n_ff)?,
                    l.matrix(&name("ffn_up.weight"), n_embd, n_ff)?,
                ),
            };
            let qk_norm = |s: &str| {
                if arch.qk_norm {
                    l.vector(&name(s), h.head_dim_k).map(Some)
                } else {
                    Ok(None)
                }
            };
            let post = |s: &str| {
                if arch.post_norms {
                    l.vector(&name(s), n_embd).map(Some)
                } else {
                    Ok(None)
                }
            };
            layers.push(LayerWeights {
                attn_norm: l.vector(&name("attn_norm.weight"), n_embd)?,
                wq,
                wk,
                wv,
                bq,
                bk,
                bv,
                q_norm: qk_norm("attn_q_norm.weight")?,
                k_norm: qk_norm("attn_k_norm.weight")?,
                wo: l.matrix(&name("attn_output.weight"), h.n_head[il] * h.head_dim_v, n_embd)?,
                bo: l.vector_if(arch.out_bias, &name("attn_output.bias"), n_embd)?,
                post_attn_norm: post("post_attention_norm.weight")?,
                ffn_norm: l.vector(&name("ffn_norm.weight"), n_embd)?,
                ffn_gate,
                ffn_up,
                ffn_down: l.matrix(&name("ffn_down.weight"), n_ff, n_embd)?,
                ffn_gate_b: l.vector_if(arch.ffn_bias, &name("ffn_gate.bias"), n_ff)?,
                ffn_up_b: l.vector_if(arch.ffn_bias, &name("ffn_up.bias"), n_ff)?,
                ffn_down_b: l.vector_if(arch.ffn_bias, &name("ffn_down.bias"), n_embd)?,
                post_ffn_norm: post("post_ffw_norm.weight")?,
            });
        }
        Ok(Weights {
            token_embd,
            output_norm,
            output,
            output_b,
            rope_freqs,
            rope_long,
            rope_short,
            layers,
        })
    }
}
