//! `ggml_type`: the element type of a tensor, with its block geometry.

use std::fmt;

/// A tensor element type as numbered by ggml (`enum ggml_type`).
///
/// Every id that ggml has ever written into a GGUF file and still defines is listed, including types
/// this engine cannot compute with, so that a file holding them still opens and can be inspected;
/// [`GgmlType::is_supported`] tells which ones the kernels handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
    Q2_0,
}

/// (type, ggml id, name as `ggml_type_name` prints it, elements per block, bytes per block, supported)
const TABLE: &[(GgmlType, u32, &str, u64, u64, bool)] = {
    use GgmlType::*;
    &[
        (F32, 0, "f32", 1, 4, true),
        (F16, 1, "f16", 1, 2, true),
        (Q4_0, 2, "q4_0", 32, 18, true),
        (Q4_1, 3, "q4_1", 32, 20, true),
        (Q5_0, 6, "q5_0", 32, 22, true),
        (Q5_1, 7, "q5_1", 32, 24, true),
        (Q8_0, 8, "q8_0", 32, 34, true),
        (Q8_1, 9, "q8_1", 32, 36, true),
        (Q2_K, 10, "q2_K", 256, 84, true),
        (Q3_K, 11, "q3_K", 256, 110, true),
        (Q4_K, 12, "q4_K", 256, 144, true),
        (Q5_K, 13, "q5_K", 256, 176, true),
        (Q6_K, 14, "q6_K", 256, 210, true),
        (Q8_K, 15, "q8_K", 256, 292, true),
        (IQ2_XXS, 16, "iq2_xxs", 256, 66, false),
        (IQ2_XS, 17, "iq2_xs", 256, 74, false),
        (IQ3_XXS, 18, "iq3_xxs", 256, 98, false),
        (IQ1_S, 19, "iq1_s", 256, 50, false),
        (IQ4_NL, 20, "iq4_nl", 32, 18, true),
        (IQ3_S, 21, "iq3_s", 256, 110, false),
        (IQ2_S, 22, "iq2_s", 256, 82, false),
        (IQ4_XS, 23, "iq4_xs", 256, 136, true),
        (I8, 24, "i8", 1, 1, false),
        (I16, 25, "i16", 1, 2, false),
        (I32, 26, "i32", 1, 4, false),
        (I64, 27, "i64", 1, 8, false),
        (F64, 28, "f64", 1, 8, false),
        (IQ1_M, 29, "iq1_m", 256, 56, false),
        (BF16, 30, "bf16", 1, 2, true),
        (TQ1_0, 34, "tq1_0", 256, 54, false),
        (TQ2_0, 35, "tq2_0", 256, 66, false),
        (MXFP4, 39, "mxfp4", 32, 17, false),
        (NVFP4, 40, "nvfp4", 64, 36, false),
        (Q1_0, 41, "q1_0", 128, 18, false),
        (Q2_0, 42, "q2_0", 64, 18, false),
    ]
};

// The table lists the variants in their declared order, each once, so a type's row is at its
// discriminant: `row_bytes` and friends run in every matrix product's setup, where the linear
// search they did showed in profiles of a decode step (0.1-0.2% of a 1.1B Q4_0 token).
const _: () = {
    let mut i = 0;
    while i < TABLE.len() {
        assert!(TABLE[i].0 as usize == i, "TABLE is in the enum's order");
        i += 1;
    }
    assert!(
        GgmlType::Q2_0 as usize == TABLE.len() - 1,
        "TABLE ends with the last variant"
    );
};

impl GgmlType {
    fn row(self) -> &'static (GgmlType, u32, &'static str, u64, u64, bool) {
        &TABLE[self as usize]
    }

    /// The type with ggml id `id`, or `None` for ids ggml never defined or has removed.
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TABLE.iter().find(|r| r.1 == id).map(|r| r.0)
    }

    /// The type named `name` (ggml's spelling, case-insensitive: `q4_K`, `Q4_K`, `bf16`).
    pub fn from_name(name: &str) -> Option<GgmlType> {
        TABLE.iter().find(|r| r.2.eq_ignore_ascii_case(name)).map(|r| r.0)
    }

    pub fn id(self) -> u32 {
        self.row().1
    }

    /// ggml's name for the type (`ggml_type_name`), e.g. `q4_K`.
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Number of elements in one block.
    pub fn block_size(self) -> u64 {
        self.row().3
    }

    /// Number of bytes in one block.
    pub fn type_size(self) -> u64 {
        self.row().4
    }

    /// Whether the engine can dequantize and compute with tensors of this type.
    pub fn is_supported(self) -> bool {
        self.row().5
    }

    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes taken by a row of `n` elements, or `None` if `n` is not a whole number of blocks
    /// or the size overflows.
    pub fn row_bytes(self, n: u64) -> Option<u64> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.type_size())
    }

    pub fn all() -> impl Iterator<Item = GgmlType> {
        TABLE.iter().map(|r| r.0)
    }
}

impl fmt::Display for GgmlType {
    /// Upper case, as llama.cpp's tools print types in tables (`Q4_K`, `F32`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name().to_ascii_uppercase())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        let mut ids: Vec<u32> = TABLE.iter().map(|r| r.1).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), TABLE.len(), "duplicate ids");
        for t in GgmlType::all() {
            assert_eq!(GgmlType::from_id(t.id()), Some(t));
            assert_eq!(GgmlType::from_name(t.name()), Some(t));
        }
        for removed in [4, 5, 31, 32, 33, 36, 37, 38, 43, 1000] {
            assert_eq!(GgmlType::from_id(removed), None);
        }
        assert_eq!(GgmlType::Q4_K.row_bytes(512), Some(288));
        assert_eq!(GgmlType::Q4_K.row_bytes(640), None);
    }
}
