//! `llama_ftype`: the whole-file quantization mix recorded in `general.file_type`.

use std::fmt;

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
    ]
};

/// llama.cpp ORs this into `general.file_type` when the type was guessed rather than recorded.
pub const GUESSED_FLAG: u32 = 1024;

impl FileType {
    fn row(self) -> &'static (FileType, u32, &'static str, &'static str) {
        TABLE
            .iter()
            .find(|r| r.0 == self)
            .expect("every FileType is in TABLE")
    }

    /// The file type with `llama_ftype` id `id` (the GUESSED flag is ignored).
    pub fn from_id(id: u32) -> Option<FileType> {
        let id = id & !GUESSED_FLAG;
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
        assert_eq!(FileType::from_id(15 | GUESSED_FLAG), Some(FileType::Q4_K_M));
        assert_eq!(FileType::from_name("q4_k_m"), Some(FileType::Q4_K_M));
        assert_eq!(FileType::from_id(4), None);
    }
}
