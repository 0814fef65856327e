//! `llama_ftype`: the whole-file quantization mix recorded in `general.file_type`.

use std::collections::HashMap;
use std::fmt;

use super::GgmlType;

/// A quantization mix as numbered by llama.cpp (`enum llama_ftype`).
///
/// Informational in a file (kernels dispatch on each tensor's own type); chosen by `quantize`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum FileType {
    AllF32,
    F16,
    Q4_0,
    Q4_1,
    Q8_0,
    Q5_0,
    Q5_1,
    Q2_K,
    Q3_K_S,
    Q3_K_M,
    Q3_K_L,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
    IQ2_XXS,
    IQ2_XS,
    Q2_K_S,
    IQ3_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ3_M,
    IQ2_S,
    IQ2_M,
    IQ4_XS,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4_MOE,
    NVFP4,
    Q1_0,
    Q2_0,
}

/// (file type, llama_ftype id, short name as llama-quantize takes it, long name as llama.cpp prints it)
const TABLE: &[(FileType, u32, &str, &str)] = {
    use FileType::*;
    &[
        (AllF32, 0, "F32", "all F32"),
        (F16, 1, "F16", "F16"),
        (Q4_0, 2, "Q4_0", "Q4_0"),
        (Q4_1, 3, "Q4_1", "Q4_1"),
        (Q8_0, 7, "Q8_0", "Q8_0"),
        (Q5_0, 8, "Q5_0", "Q5_0"),
        (Q5_1, 9, "Q5_1", "Q5_1"),
        (Q2_K, 10, "Q2_K", "Q2_K - Medium"),
        (Q3_K_S, 11, "Q3_K_S", "Q3_K - Small"),
        (Q3_K_M, 12, "Q3_K_M", "Q3_K - Medium"),
        (Q3_K_L, 13, "Q3_K_L", "Q3_K - Large"),
        (Q4_K_S, 14, "Q4_K_S", "Q4_K - Small"),
        (Q4_K_M, 15, "Q4_K_M", "Q4_K - Medium"),
        (Q5_K_S, 16, "Q5_K_S", "Q5_K - Small"),
        (Q5_K_M, 17, "Q5_K_M", "Q5_K - Medium"),
        (Q6_K, 18, "Q6_K", "Q6_K"),
        (IQ2_XXS, 19, "IQ2_XXS", "IQ2_XXS - 2.0625 bpw"),
        (IQ2_XS, 20, "IQ2_XS", "IQ2_XS - 2.3125 bpw"),
        (Q2_K_S, 21, "Q2_K_S", "Q2_K - Small"),
        (IQ3_XS, 22, "IQ3_XS", "IQ3_XS - 3.3 bpw"),
        (IQ3_XXS, 23, "IQ3_XXS", "IQ3_XXS - 3.0625 bpw"),
        (IQ1_S, 24, "IQ1_S", "IQ1_S - 1.5625 bpw"),
        (IQ4_NL, 25, "IQ4_NL", "IQ4_NL - 4.5 bpw"),
        (IQ3_S, 26, "IQ3_S", "IQ3_S - 3.4375 bpw"),
        (IQ3_M, 27, "IQ3_M", "IQ3_S mix - 3.66 bpw"),
        (IQ2_S, 28, "IQ2_S", "IQ2_S - 2.5 bpw"),
        (IQ2_M, 29, "IQ2_M", "IQ2_M - 2.7 bpw"),
        (IQ4_XS, 30, "IQ4_XS", "IQ4_XS - 4.25 bpw"),
        (IQ1_M, 31, "IQ1_M", "IQ1_M - 1.75 bpw"),
        (BF16, 32, "BF16", "BF16"),
        (TQ1_0, 36, "TQ1_0", "TQ1_0 - 1.69 bpw ternary"),
        (TQ2_0, 37, "TQ2_0", "TQ2_0 - 2.06 bpw ternary"),
        (MXFP4_MOE, 38, "MXFP4_MOE", "MXFP4 MoE"),
        (NVFP4, 39, "NVFP4", "NVFP4"),
        (Q1_0, 40, "Q1_0", "Q1_0"),
        (Q2_0, 41, "Q2_0", "Q2_0"),
    ]
};

impl FileType {
    /// llama.cpp ORs this into a file type it guessed rather than read from `general.file_type`.
    pub const GUESSED_FLAG: u32 = 1024;

    fn row(self) -> &'static (FileType, u32, &'static str, &'static str) {
        TABLE
            .iter()
            .find(|r| r.0 == self)
            .expect("every FileType is in TABLE")
    }

    /// The file type with `llama_ftype` id `id` (the GUESSED flag is ignored).
    pub fn from_id(id: u32) -> Option<FileType> {
        let id = id & !Self::GUESSED_FLAG;
        TABLE.iter().find(|r| r.1 == id).map(|r| r.0)
    }

    /// Parses a name as llama-quantize and Ollama's `--quantize` take it (`q4_K_M`, `Q8_0`, `f16`).
    pub fn from_name(name: &str) -> Option<FileType> {
        TABLE.iter().find(|r| r.2.eq_ignore_ascii_case(name)).map(|r| r.0)
    }

    pub fn id(self) -> u32 {
        self.row().1
    }

    /// Short name, e.g. `Q4_K_M`.
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// llama.cpp's descriptive name (`llama_model_ftype_name`), e.g. `Q4_K - Medium`.
    pub fn long_name(self) -> &'static str {
        self.row().3
    }

    /// The file type llama.cpp's loader assumes for a file without `general.file_type`: the one
    /// named after the most common tensor type. Tensors are counted in the loader's order (by
    /// layer number, `blk.N.`, then by name) and a tie goes to the type that reached the count
    /// first; a most common type with no file type of its own gives `AllF32`, as in llama.cpp.
    pub fn guess<'a>(tensors: impl IntoIterator<Item = (&'a str, GgmlType)>) -> FileType {
        let mut tensors: Vec<(&str, GgmlType)> = tensors.into_iter().collect();
        tensors.sort_by(|a, b| (blk_layer(a.0), a.0).cmp(&(blk_layer(b.0), b.0)));
        let mut counts: HashMap<GgmlType, u32> = HashMap::new();
        let (mut n_max, mut type_max) = (0, GgmlType::F32);
        for (_, ty) in tensors {
            let n = counts.entry(ty).or_default();
            *n += 1;
            if *n > n_max {
                (n_max, type_max) = (*n, ty);
            }
        }
        use FileType as F;
        use GgmlType as G;
        match type_max {
            G::F32 => F::AllF32,
            G::F16 => F::F16,
            G::BF16 => F::BF16,
            G::Q4_0 => F::Q4_0,
            G::Q4_1 => F::Q4_1,
            G::Q5_0 => F::Q5_0,
            G::Q5_1 => F::Q5_1,
            G::Q8_0 => F::Q8_0,
            G::Q2_K => F::Q2_K,
            G::Q3_K => F::Q3_K_M,
            G::Q4_K => F::Q4_K_M,
            G::Q5_K => F::Q5_K_M,
            G::Q6_K => F::Q6_K,
            G::TQ1_0 => F::TQ1_0,
            G::TQ2_0 => F::TQ2_0,
            G::IQ2_XXS => F::IQ2_XXS,
            G::IQ2_XS => F::IQ2_XS,
            G::IQ2_S => F::IQ2_S,
            G::IQ3_XXS => F::IQ3_XXS,
            G::IQ1_S => F::IQ1_S,
            G::IQ1_M => F::IQ1_M,
            G::IQ4_NL => F::IQ4_NL,
            G::IQ4_XS => F::IQ4_XS,
            G::IQ3_S => F::IQ3_S,
            G::MXFP4 => F::MXFP4_MOE,
            G::NVFP4 => F::NVFP4,
            G::Q1_0 => F::Q1_0,
            G::Q2_0 => F::Q2_0,
            G::Q8_1 | G::Q8_K | G::I8 | G::I16 | G::I32 | G::I64 | G::F64 => F::AllF32,
        }
    }
}

/// The layer number llama.cpp's loader sorts a tensor name by (`sscanf(name, "blk.%d.")`), or -1.
fn blk_layer(name: &str) -> i64 {
    let Some(rest) = name.strip_prefix("blk.") else {
        return -1;
    };
    let (sign, digits) = match rest.as_bytes().first() {
        Some(b'-') => (-1, &rest[1..]),
        Some(b'+') => (1, &rest[1..]),
        _ => (1, rest),
    };
    let end = digits.bytes().take_while(u8::is_ascii_digit).count();
    if end == 0 {
        return -1;
    }
    // %d into an int: clamp what does not fit rather than wrap.
    let n: i64 = digits[..end].parse().unwrap_or(i64::MAX);
    (sign * n).clamp(i32::MIN.into(), i32::MAX.into())
}

impl fmt::Display for FileType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for r in TABLE {
            assert_eq!(FileType::from_id(r.1), Some(r.0));
            assert_eq!(FileType::from_name(r.2), Some(r.0));
        }
        assert_eq!(
            FileType::from_id(15 | FileType::GUESSED_FLAG),
            Some(FileType::Q4_K_M)
        );
        assert_eq!(FileType::from_name("q4_k_m"), Some(FileType::Q4_K_M));
        assert_eq!(FileType::from_id(4), None);
    }

    #[test]
    fn guess_follows_llama_cpp() {
        use GgmlType as G;
        let names = |tys: &[(&'static str, GgmlType)]| tys.to_vec();
        // The most common type wins; norms (F32) are usually outnumbered.
        let t = names(&[
            ("token_embd.weight", G::Q6_K),
            ("blk.0.attn_norm.weight", G::F32),
            ("blk.0.attn_q.weight", G::Q4_K),
            ("blk.0.ffn_down.weight", G::Q4_K),
        ]);
        assert_eq!(FileType::guess(t), FileType::Q4_K_M);
        // A tie goes to the type that got there first in the loader's order: blk.2 sorts before
        // blk.10 (by number), and untagged tensors before both.
        let t = names(&[
            ("blk.10.a", G::Q8_0),
            ("blk.2.a", G::Q5_0),
            ("blk.2.b", G::Q8_0),
            ("output.weight", G::Q5_0),
        ]);
        assert_eq!(FileType::guess(t), FileType::Q5_0);
        assert_eq!(FileType::guess([("x", G::Q3_K)]), FileType::Q3_K_M);
        assert_eq!(FileType::guess([("x", G::I32)]), FileType::AllF32);
        assert_eq!(FileType::guess([]), FileType::AllF32);
        assert_eq!(blk_layer("blk.17.attn_q.weight"), 17);
        assert_eq!(blk_layer("blk.x"), -1);
        assert_eq!(blk_layer("token_embd.weight"), -1);
    }
}
