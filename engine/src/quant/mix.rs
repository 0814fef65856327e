//! Which type each tensor gets in a quantization mix: llama.cpp's `llama_tensor_get_type`
//! (`src/llama-quant.cpp`, at the commit the fixtures were made with), for the mixes we can write.
//!
//! A mix (`FileType`) names a default type; the rules then give more bits to the tensors that hurt
//! most when squeezed (the output/LM head, some `attn_v` and `ffn_down` layers, `attn_output` in the
//! 3-bit mixes), keep 1-D tensors and norms as they are, and fall back to a 32-element format when a
//! row is not a whole number of 256-element super-blocks. Some rules count tensors as they go (the
//! n-th `attn_v`), so tensors are planned in llama.cpp's order, which is also the order the output
//! file lists them in: tensors outside `blk.N.` first, then layer by layer, by name within each.

use super::{FileType, GgmlType};
use crate::gguf::{Metadata, TensorInfo};
use crate::{Error, Result};

/// The default tensor type of the mixes `ollamars quantize` can write (`llama_ftype_get_default_type`).
/// `None` for mixes that need an importance matrix or formats we cannot produce.
pub fn default_type(ftype: FileType) -> Option<GgmlType> {
    use FileType as F;
    use GgmlType as T;
    Some(match ftype {
        F::AllF32 => T::F32,
        F::F16 => T::F16,
        F::BF16 => T::BF16,
        F::Q4_0 => T::Q4_0,
        F::Q4_1 => T::Q4_1,
        F::Q5_0 => T::Q5_0,
        F::Q5_1 => T::Q5_1,
        F::Q8_0 => T::Q8_0,
        F::Q2_K => T::Q2_K,
        F::Q3_K_S | F::Q3_K_M | F::Q3_K_L => T::Q3_K,
        F::Q4_K_S | F::Q4_K_M => T::Q4_K,
        F::Q5_K_S | F::Q5_K_M => T::Q5_K,
        F::Q6_K => T::Q6_K,
        F::IQ4_NL => T::IQ4_NL,
        F::IQ4_XS => T::IQ4_XS,
        _ => return None,
    })
}

/// The model facts the rules look at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MixParams {
    /// `general.architecture`.
    pub arch: String,
    /// `{arch}.block_count`.
    pub n_layer: u32,
    /// Layer 0's `{arch}.attention.head_count` and `head_count_kv` (which defaults to it).
    pub n_head: u32,
    pub n_head_kv: u32,
    /// `{arch}.expert_count` (0 for dense models).
    pub n_expert: u32,
}

impl MixParams {
    pub fn from_metadata(meta: &Metadata) -> Result<MixParams> {
        let arch = meta
            .require("general.architecture", meta.get_str("general.architecture"))?
            .to_string();
        let key = |k: &str| format!("{arch}.{k}");
        let n_layer = meta.require(&key("block_count"), meta.get_u32(&key("block_count")))?;
        if n_layer == 0 {
            return Err(Error::BadKey {
                key: key("block_count"),
                msg: "must be at least 1".into(),
            });
        }
        let layer0 = |k: &str| -> Result<Option<u32>> {
            let Some(v) = meta.get_per_layer_u64(&key(k), n_layer as usize)? else {
                return Ok(None);
            };
            u32::try_from(v[0]).map(Some).map_err(|_| Error::BadKey {
                key: key(k),
                msg: format!("{} does not fit in 32 bits", v[0]),
            })
        };
        let n_head = layer0("attention.head_count")?.unwrap_or(0);
        let n_head_kv = layer0("attention.head_count_kv")?.unwrap_or(n_head);
        let n_expert = meta.get_u32(&key("expert_count"))?.unwrap_or(0);
        Ok(MixParams {
            arch,
            n_layer,
            n_head,
            n_head_kv,
            n_expert,
        })
    }

    /// `llama_hparams::n_gqa()`: query heads per KV head.
    fn n_gqa(&self) -> u32 {
        self.n_head.checked_div(self.n_head_kv).unwrap_or(0)
    }

    /// Whether llama.cpp classes the model as `LLM_TYPE_70B` (the only size class the rules test).
    fn is_70b(&self) -> bool {
        match self.arch.as_str() {
            "llama" => self.n_layer == 80 && self.n_head != self.n_head_kv,
            "qwen2" | "deci" | "olmo" => self.n_layer == 80,
            "jais2" => self.n_layer == 68,
            _ => false,
        }
    }

    fn is_falcon(&self) -> bool {
        self.arch == "falcon"
    }
}

/// One tensor of the output file: where it comes from and what it becomes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorPlan {
    /// Index into the input tensor list.
    pub input: usize,
    pub name: String,
    pub dims: Vec<u64>,
    pub from: GgmlType,
    pub to: GgmlType,
    /// The mix's type did not fit the row length and a fallback type was used.
    pub fallback: bool,
}

/// Broad tensor roles (`tensor_category` in llama.cpp).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Category {
    TokenEmbd,
    AttnQ,
    AttnV,
    AttnK,
    AttnQkv,
    AttnKvB,
    AttnOutput,
    FfnUp,
    FfnGate,
    FfnDown,
    Output,
    Other,
}

impl Category {
    fn of(name: &str) -> Category {
        use Category::*;
        if name == "output.weight" {
            return Output;
        }
        if name == "token_embd.weight" || name == "per_layer_token_embd.weight" {
            return TokenEmbd;
        }
        for (pat, cat) in [
            ("attn_qkv.weight", AttnQkv),
            ("attn_kv_b.weight", AttnKvB),
            ("attn_v.weight", AttnV),
            ("attn_k.weight", AttnK),
            ("attn_q.weight", AttnQ),
            ("attn_output.weight", AttnOutput),
            ("ffn_up", FfnUp),
            ("ffn_gate", FfnGate),
            ("ffn_down", FfnDown),
        ] {
            if name.contains(pat) {
                return cat;
            }
        }
        Other
    }

    /// The attention-value-like tensors that get the `attn_v` rules.
    fn is_attn_v(self) -> bool {
        matches!(self, Category::AttnV | Category::AttnQkv | Category::AttnKvB)
    }
}

/// `tensor_allows_quantization`: only 2-D and 3-D `*weight` tensors, and not the small or
/// sensitive ones (norms, MoE routers, positional and token-type embeddings, conv1d kernels ...).
fn allows_quantization(arch: &str, name: &str, n_dims: usize) -> bool {
    if n_dims < 2 || !name.ends_with("weight") {
        return false;
    }
    const NEVER: &[&str] = &[
        "_norm.weight",
        "ffn_gate_inp.weight",
        "ffn_gate_tid2eid.weight",
        "altup",
        "laurel",
        "per_layer_model_proj",
        "ssm_conv1d",
        "shortconv.conv.weight",
        "indexer.k_proj.weight",
        "indexer.q_proj.weight",
        "time_mix_first.weight",
        "time_mix_w0.weight",
        "time_mix_w1.weight",
        "time_mix_w2.weight",
        "time_mix_v0.weight",
        "time_mix_v1.weight",
        "time_mix_v2.weight",
        "time_mix_a0.weight",
        "time_mix_a1.weight",
        "time_mix_a2.weight",
        "time_mix_g1.weight",
        "time_mix_g2.weight",
        "time_mix_decay_w1.weight",
        "time_mix_decay_w2.weight",
        "time_mix_lerp_fused.weight",
        "attn_rel_b.weight",
        ".position_embd",
        "sam.pos_embd",
        "sam.neck.",
        "sam.net_",
        ".rel_pos",
        ".patch_embd",
        ".patch_merger",
        "a.rvq.codebook",
        "mm.a.code_embd",
    ];
    const GLM5_NEXT_NEVER: &[&str] = &[
        "hc_",
        "indexer.attn_q_b",
        "indexer.attn_k",
        "indexer.proj",
        "indexer_compressor_gate",
        "indexer_compressor_ape",
        "ssm_f_a.weight",
        "ssm_f_b.weight",
        "ssm_g_a.weight",
        "ssm_g_b.weight",
        "ssm_beta.weight",
        "attn_kv_a_mqa.weight",
        "attn_k_b.weight",
        "attn_v_b.weight",
    ];
    if name == "position_embd.weight" || name == "token_types.weight" {
        return false;
    }
    if NEVER.iter().any(|p| name.contains(p)) {
        return false;
    }
    !(arch == "glm5-next" && GLM5_NEXT_NEVER.iter().any(|p| name.contains(p)))
}

/// The layer number of a `blk.N.` tensor as C's `sscanf(name, "blk.%d.", &n)` reads it.
fn layer_of(name: &str) -> Option<i64> {
    let rest = name.strip_prefix("blk.")?;
    let rest = rest.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, digits) = match rest.as_bytes().first() {
        Some(b'-') => (true, &rest[1..]),
        Some(b'+') => (false, &rest[1..]),
        _ => (false, rest),
    };
    let len = digits.bytes().take_while(u8::is_ascii_digit).count();
    if len == 0 {
        return None;
    }
    let v: i64 = digits[..len].parse().unwrap_or(i64::MAX);
    Some(if neg { -v } else { v })
}

/// llama.cpp's tensor order (`weight_name_comparer`): by layer (-1 for tensors outside `blk.N.`),
/// then by name.
fn llama_order(a: &str, b: &str) -> std::cmp::Ordering {
    let la = layer_of(a).unwrap_or(-1);
    let lb = layer_of(b).unwrap_or(-1);
    la.cmp(&lb).then_with(|| a.cmp(b))
}

fn use_more_bits(i_layer: i32, n_layers: i32) -> bool {
    i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2
}

/// The running state of `llama_tensor_get_type` over one file.
struct Chooser<'a> {
    ftype: FileType,
    p: &'a MixParams,
    has_tied_embeddings: bool,
    n_attention_wv: i32,
    i_attention_wv: i32,
    i_ffn_down: i32,
    i_ffn_gate: i32,
    i_ffn_up: i32,
}

impl Chooser<'_> {
    /// `layer_info`: the counter for dense models; for MoE models the layer in the tensor's name.
    fn layer(&self, counter: i32, name: &str) -> Result<(i32, i32)> {
        let n_layer = self.p.n_layer as i32;
        if self.p.n_expert <= 1 {
            return Ok((counter, n_layer));
        }
        let bad = |msg: String| Error::BadTensor {
            tensor: name.to_string(),
            msg,
        };
        let l = layer_of(name).ok_or_else(|| bad("cannot tell which layer it belongs to".into()))?;
        if l < 0 || l >= i64::from(n_layer) {
            return Err(bad(format!("layer {l} is not in [0, {n_layer})")));
        }
        Ok((l as i32, n_layer))
    }

    /// `llama_tensor_get_type_impl` for the mixes of [`default_type`].
    fn impl_type(
        &mut self,
        mut new_type: GgmlType,
        name: &str,
        dims: &[u64],
        cat: Category,
    ) -> Result<GgmlType> {
        use FileType as F;
        use GgmlType as T;
        let ftype = self.ftype;
        let p = self.p;
        if p.arch == "glm5-next"
            && ["attn_q_a", "attn_q_b", "nextn.eh_proj"]
                .iter()
                .any(|s| name.contains(s))
            && !matches!(new_type, T::F32 | T::F16 | T::BF16)
        {
            return Ok(T::Q8_0);
        }
        if cat == Category::Output || (self.has_tied_embeddings && cat == Category::TokenEmbd) {
            // The output (LM head), and a token embedding that doubles as it, get more bits.
            let nx = dims[0];
            if p.is_falcon() || !nx.is_multiple_of(new_type.block_size()) {
                new_type = T::Q8_0;
            } else if new_type != T::Q8_0 {
                new_type = T::Q6_K;
            }
        } else if cat == Category::TokenEmbd {
            // Only the IQ1/IQ2/IQ3 and ternary mixes change the token embedding.
        } else if cat.is_attn_v() {
            let n_gqa = p.n_gqa();
            if ftype == F::Q2_K {
                new_type = if n_gqa >= 4 { T::Q4_K } else { T::Q3_K };
            } else if ftype == F::Q3_K_M {
                new_type = if self.i_attention_wv < 2 { T::Q5_K } else { T::Q4_K };
            } else if ftype == F::Q3_K_L || (matches!(ftype, F::IQ4_NL | F::IQ4_XS) && n_gqa >= 4) {
                new_type = T::Q5_K;
            } else if matches!(ftype, F::Q4_K_M | F::Q5_K_M)
                && use_more_bits(self.i_attention_wv, self.n_attention_wv)
            {
                new_type = T::Q6_K;
            } else if ftype == F::Q4_K_S && self.i_attention_wv < 4 {
                new_type = T::Q5_K;
            }
            if p.is_70b() && matches!(new_type, T::Q3_K | T::Q4_K) {
                // 70B models share each attn_v among 8 heads: more bits there cost little.
                new_type = T::Q5_K;
            }
            if p.n_expert == 8 {
                new_type = T::Q8_0;
            }
            self.i_attention_wv += 1;
        } else if cat == Category::AttnK {
            if p.n_expert == 8 {
                new_type = T::Q8_0;
            }
        } else if cat == Category::AttnQ {
            // Only the IQ3 mixes change attn_q.
        } else if cat == Category::FfnDown {
            let (i_layer, n_layer) = self.layer(self.i_ffn_down, name)?;
            if ftype == F::Q2_K {
                new_type = T::Q3_K;
            } else if ftype == F::Q3_K_M {
                new_type = if i_layer < n_layer / 16 {
                    T::Q5_K
                } else if !p.is_falcon() || use_more_bits(i_layer, n_layer) {
                    T::Q4_K
                } else {
                    T::Q3_K
                };
            } else if ftype == F::Q3_K_L {
                new_type = if p.is_falcon() { T::Q4_K } else { T::Q5_K };
            } else if ftype == F::Q4_K_M {
                if p.is_falcon() {
                    new_type = if i_layer < n_layer / 16 {
                        T::Q6_K
                    } else if use_more_bits(i_layer, n_layer) {
                        T::Q5_K
                    } else {
                        T::Q4_K
                    };
                } else if use_more_bits(i_layer, n_layer) {
                    new_type = T::Q6_K;
                }
            } else if i_layer < n_layer / 8 && matches!(ftype, F::IQ4_NL | F::IQ4_XS) {
                new_type = T::Q5_K;
            } else if ftype == F::Q5_K_M && use_more_bits(i_layer, n_layer) {
                new_type = T::Q6_K;
            } else if ftype == F::Q4_K_S && !p.is_falcon() && i_layer < n_layer / 8 {
                new_type = T::Q5_K;
            }
            self.i_ffn_down += 1;
        } else if cat == Category::AttnOutput {
            if !p.is_falcon() {
                if p.n_expert == 8 {
                    if matches!(
                        ftype,
                        F::Q2_K | F::Q3_K_S | F::Q3_K_M | F::IQ4_NL | F::Q4_K_S | F::Q4_K_M | F::IQ4_XS
                    ) {
                        new_type = T::Q5_K;
                    }
                } else if ftype == F::Q2_K {
                    new_type = T::Q3_K;
                } else if ftype == F::Q3_K_M {
                    new_type = T::Q4_K;
                } else if ftype == F::Q3_K_L {
                    new_type = T::Q5_K;
                }
            } else if ftype == F::Q3_K_L {
                new_type = T::Q4_K;
            }
        } else if cat == Category::FfnGate {
            // Only IQ3_XS changes ffn_gate; the counter advances all the same.
            self.layer(self.i_ffn_gate, name)?;
            self.i_ffn_gate += 1;
        } else if cat == Category::FfnUp {
            self.layer(self.i_ffn_up, name)?;
            self.i_ffn_up += 1;
        }
        Ok(new_type)
    }
}

/// `tensor_type_fallback`: a type whose block does not divide the row length is replaced by a
/// 32-element one (and by F16 when even that does not fit). Returns the type and whether it changed.
fn fallback(ty: GgmlType, name: &str, ncols: u64) -> Result<(GgmlType, bool)> {
    use GgmlType as T;
    if ncols.is_multiple_of(ty.block_size()) {
        return Ok((ty, false));
    }
    let mut to = match ty {
        T::IQ1_S | T::IQ1_M | T::IQ2_XXS | T::IQ2_XS | T::IQ2_S | T::IQ3_XXS | T::IQ3_S | T::IQ4_XS => {
            T::IQ4_NL
        }
        T::Q2_0 | T::Q2_K | T::Q3_K | T::TQ1_0 | T::TQ2_0 => T::Q4_0,
        T::Q4_K => T::Q5_0,
        T::Q5_K => T::Q5_1,
        T::Q6_K => T::Q8_0,
        t if t.block_size() <= 32 => t,
        t => {
            return Err(Error::BadTensor {
                tensor: name.to_string(),
                msg: format!("rows of {ncols} do not fit {t}, which has no fallback type"),
            })
        }
    };
    if !ncols.is_multiple_of(to.block_size()) {
        to = T::F16;
    }
    Ok((to, true))
}

/// Plans a file's quantization to `ftype`: every tensor in output order with its target type, as
/// `llama-quantize` (no importance matrix, no overrides) would choose it.
pub fn plan(ftype: FileType, params: &MixParams, tensors: &[TensorInfo]) -> Result<Vec<TensorPlan>> {
    let default = default_type(ftype).ok_or_else(|| {
        Error::InvalidArgument(format!(
            "cannot quantize to {ftype}: it needs an importance matrix or a format ollamars cannot write"
        ))
    })?;
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| llama_order(&tensors[a].name, &tensors[b].name));
    let cats: Vec<Category> = tensors.iter().map(|t| Category::of(&t.name)).collect();
    let mut c = Chooser {
        ftype,
        p: params,
        has_tied_embeddings: !cats.contains(&Category::Output),
        n_attention_wv: cats.iter().filter(|c| c.is_attn_v()).count() as i32,
        i_attention_wv: 0,
        i_ffn_down: 0,
        i_ffn_gate: 0,
        i_ffn_up: 0,
    };
    let mut out = Vec::with_capacity(tensors.len());
    for i in order {
        let t = &tensors[i];
        let (to, fallback_used) = if !allows_quantization(&params.arch, &t.name, t.dims.len()) {
            (t.ty, false)
        } else if !default.is_quantized() {
            (default, false)
        } else {
            let ty = c.impl_type(default, &t.name, &t.dims, cats[i])?;
            fallback(ty, &t.name, t.dims[0])?
        };
        out.push(TensorPlan {
            input: i,
            name: t.name.clone(),
            dims: t.dims.clone(),
            from: t.ty,
            to,
            fallback: fallback_used,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str, dims: &[u64]) -> TensorInfo {
        TensorInfo {
            name: name.into(),
            dims: dims.to_vec(),
            ty: GgmlType::F32,
            offset: 0,
            size: 0,
        }
    }

    fn params(arch: &str, n_layer: u32, n_head: u32, n_head_kv: u32) -> MixParams {
        MixParams {
            arch: arch.into(),
            n_layer,
            n_head,
            n_head_kv,
            n_expert: 0,
        }
    }

    /// A llama-style model: `n_layer` layers of the usual tensors, rows of `n_embd`/`n_ff`.
    fn model(n_layer: usize, n_embd: u64, n_ff: u64, tied: bool) -> Vec<TensorInfo> {
        let mut t = vec![
            info("token_embd.weight", &[n_embd, 1000]),
            info("output_norm.weight", &[n_embd]),
        ];
        if !tied {
            t.push(info("output.weight", &[n_embd, 1000]));
        }
        for l in 0..n_layer {
            let b = |s: &str| format!("blk.{l}.{s}");
            t.push(info(&b("attn_norm.weight"), &[n_embd]));
            t.push(info(&b("attn_q.weight"), &[n_embd, n_embd]));
            t.push(info(&b("attn_k.weight"), &[n_embd, n_embd / 4]));
            t.push(info(&b("attn_v.weight"), &[n_embd, n_embd / 4]));
            t.push(info(&b("attn_output.weight"), &[n_embd, n_embd]));
            t.push(info(&b("ffn_norm.weight"), &[n_embd]));
            t.push(info(&b("ffn_gate.weight"), &[n_embd, n_ff]));
            t.push(info(&b("ffn_up.weight"), &[n_embd, n_ff]));
            t.push(info(&b("ffn_down.weight"), &[n_ff, n_embd]));
        }
        t
    }

    /// The types of the tensors named `name` or `blk.N.name`, in order.
    fn types(plan: &[TensorPlan], name: &str) -> Vec<GgmlType> {
        let dotted = format!(".{name}");
        plan.iter()
            .filter(|p| p.name == name || p.name.ends_with(&dotted))
            .map(|p| p.to)
            .collect()
    }

    #[test]
    fn order_is_llama_cpps() {
        let t = model(11, 256, 512, false);
        let p = plan(FileType::Q8_0, &params("llama", 11, 8, 2), &t).unwrap();
        let names: Vec<&str> = p.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            &names[..4],
            [
                "output.weight",
                "output_norm.weight",
                "token_embd.weight",
                "blk.0.attn_k.weight"
            ]
        );
        // blk.10 sorts after blk.9 (by number), not after blk.1.
        let first10 = names.iter().position(|n| n.starts_with("blk.10.")).unwrap();
        assert!(names[first10 - 1].starts_with("blk.9."));
        assert_eq!(layer_of("blk.12.attn_q.weight"), Some(12));
        assert_eq!(layer_of("blk.x"), None);
        assert_eq!(layer_of("output.weight"), None);
    }

    #[test]
    fn q4_k_m_uses_more_bits_where_llama_cpp_does() {
        // 24 layers: use_more_bits is true for 0-2, 21-23 and every third layer from 5.
        let p = plan(
            FileType::Q4_K_M,
            &params("qwen2", 24, 14, 2),
            &model(24, 896, 4864, false),
        )
        .unwrap();
        let more: Vec<usize> = (0..24).filter(|&i| use_more_bits(i as i32, 24)).collect();
        assert_eq!(more, [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]);
        for (i, ty) in types(&p, "attn_v.weight").into_iter().enumerate() {
            // 896 is not a multiple of 256: Q6_K falls back to Q8_0 and Q4_K to Q5_0.
            let want = if more.contains(&i) {
                GgmlType::Q8_0
            } else {
                GgmlType::Q5_0
            };
            assert_eq!(ty, want, "attn_v {i}");
        }
        for (i, ty) in types(&p, "ffn_down.weight").into_iter().enumerate() {
            let want = if more.contains(&i) {
                GgmlType::Q6_K
            } else {
                GgmlType::Q4_K
            };
            assert_eq!(ty, want, "ffn_down {i} (rows of 4864 = 19 x 256)");
        }
        assert_eq!(types(&p, "output.weight"), [GgmlType::Q8_0]);
        assert_eq!(types(&p, "token_embd.weight"), [GgmlType::Q5_0]);
        assert!(p
            .iter()
            .filter(|p| p.dims.len() == 1)
            .all(|p| p.to == GgmlType::F32));
        assert!(p.iter().filter(|p| p.to == GgmlType::Q5_0).all(|p| p.fallback));
    }

    #[test]
    fn tied_embeddings_get_the_output_rule() {
        let p = plan(
            FileType::Q4_0,
            &params("llama", 2, 4, 2),
            &model(2, 256, 512, true),
        )
        .unwrap();
        assert_eq!(types(&p, "token_embd.weight"), [GgmlType::Q6_K]);
        let p = plan(
            FileType::Q4_0,
            &params("llama", 2, 4, 2),
            &model(2, 64, 128, true),
        )
        .unwrap();
        assert_eq!(types(&p, "token_embd.weight"), [GgmlType::Q8_0]);
        let p = plan(
            FileType::Q4_0,
            &params("llama", 2, 4, 2),
            &model(2, 256, 512, false),
        )
        .unwrap();
        assert_eq!(types(&p, "token_embd.weight"), [GgmlType::Q4_0]);
        assert_eq!(types(&p, "output.weight"), [GgmlType::Q6_K]);
        let p = plan(
            FileType::Q8_0,
            &params("llama", 2, 4, 2),
            &model(2, 256, 512, false),
        )
        .unwrap();
        assert_eq!(types(&p, "output.weight"), [GgmlType::Q8_0]);
    }

    #[test]
    fn three_bit_mixes() {
        let t = model(8, 256, 512, false);
        let pr = params("llama", 8, 8, 2);
        let s = plan(FileType::Q3_K_S, &pr, &t).unwrap();
        assert!(types(&s, "attn_output.weight")
            .iter()
            .all(|&t| t == GgmlType::Q3_K));
        let m = plan(FileType::Q3_K_M, &pr, &t).unwrap();
        assert_eq!(
            &types(&m, "attn_v.weight")[..3],
            [GgmlType::Q5_K, GgmlType::Q5_K, GgmlType::Q4_K]
        );
        assert!(types(&m, "attn_output.weight")
            .iter()
            .all(|&t| t == GgmlType::Q4_K));
        assert!(types(&m, "ffn_down.weight").iter().all(|&t| t == GgmlType::Q4_K));
        let l = plan(FileType::Q3_K_L, &pr, &t).unwrap();
        assert!(types(&l, "attn_v.weight").iter().all(|&t| t == GgmlType::Q5_K));
        assert!(types(&l, "ffn_down.weight").iter().all(|&t| t == GgmlType::Q5_K));
        let q2 = plan(FileType::Q2_K, &pr, &t).unwrap();
        // n_gqa = 4: attn_v gets Q4_K in Q2_K.
        assert!(types(&q2, "attn_v.weight").iter().all(|&t| t == GgmlType::Q4_K));
        assert!(types(&q2, "ffn_down.weight").iter().all(|&t| t == GgmlType::Q3_K));
        assert!(types(&q2, "attn_output.weight")
            .iter()
            .all(|&t| t == GgmlType::Q3_K));
    }

    #[test]
    fn fallbacks_for_rows_that_are_not_whole_super_blocks() {
        use GgmlType::*;
        for (from, to) in [
            (Q2_K, Q4_0),
            (Q3_K, Q4_0),
            (Q4_K, Q5_0),
            (Q5_K, Q5_1),
            (Q6_K, Q8_0),
            (IQ4_XS, IQ4_NL),
        ] {
            assert_eq!(fallback(from, "t", 640).unwrap(), (to, true), "{from}");
            assert_eq!(fallback(from, "t", 512).unwrap(), (from, false), "{from}");
        }
        // Not even a multiple of 32: F16.
        assert_eq!(fallback(Q4_K, "t", 100).unwrap(), (F16, true));
        assert_eq!(fallback(Q4_0, "t", 100).unwrap(), (F16, true));
        assert_eq!(fallback(Q4_0, "t", 96).unwrap(), (Q4_0, false));
    }

    #[test]
    fn moe_rules_use_the_layer_in_the_name() {
        let mut t = vec![
            info("token_embd.weight", &[256, 100]),
            info("output.weight", &[256, 100]),
        ];
        for l in 0..2 {
            t.push(info(&format!("blk.{l}.attn_v.weight"), &[256, 64]));
            t.push(info(&format!("blk.{l}.attn_k.weight"), &[256, 64]));
            t.push(info(&format!("blk.{l}.ffn_down_exps.weight"), &[512, 256, 8]));
            t.push(info(&format!("blk.{l}.ffn_gate_inp.weight"), &[256, 8]));
        }
        let mut pr = params("llama", 2, 8, 8);
        pr.n_expert = 8;
        let p = plan(FileType::Q4_K_M, &pr, &t).unwrap();
        assert!(types(&p, "attn_v.weight").iter().all(|&t| t == GgmlType::Q8_0));
        assert!(types(&p, "attn_k.weight").iter().all(|&t| t == GgmlType::Q8_0));
        assert!(types(&p, "ffn_gate_inp.weight")
            .iter()
            .all(|&t| t == GgmlType::F32));
        // With 2 layers use_more_bits holds for layer 1 only (i >= 7 * 2 / 8).
        assert_eq!(
            types(&p, "ffn_down_exps.weight"),
            [GgmlType::Q4_K, GgmlType::Q6_K]
        );
        // A layer number outside the model is an error, as in llama.cpp.
        t.push(info("blk.7.ffn_down_exps.weight", &[512, 256, 8]));
        assert!(plan(FileType::Q4_K_M, &pr, &t).is_err());
    }

    #[test]
    fn float_mixes_and_unsupported_mixes() {
        let t = model(2, 256, 512, false);
        let p = plan(FileType::F16, &params("llama", 2, 4, 2), &t).unwrap();
        for x in &p {
            let want = if x.dims.len() == 1 {
                GgmlType::F32
            } else {
                GgmlType::F16
            };
            assert_eq!(x.to, want, "{}", x.name);
        }
        assert!(plan(FileType::IQ2_XXS, &params("llama", 2, 4, 2), &t).is_err());
        assert!(plan(FileType::Q2_K_S, &params("llama", 2, 4, 2), &t).is_err());
    }
}
