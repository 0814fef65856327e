//! Byte sizes of the block formats the kernels read (ggml's `block_*` structs) and the
//! non-linear IQ4 value table.

#![allow(dead_code)] // not every tier reads every size

use crate::quant::GgmlType;

pub const Q4_0_BYTES: usize = 18;
pub const Q4_1_BYTES: usize = 20;
pub const Q5_0_BYTES: usize = 22;
pub const Q5_1_BYTES: usize = 24;
pub const Q8_0_BYTES: usize = 34;
pub const Q8_1_BYTES: usize = 36;
pub const Q2_K_BYTES: usize = 84;
pub const Q3_K_BYTES: usize = 110;
pub const Q4_K_BYTES: usize = 144;
pub const Q5_K_BYTES: usize = 176;
pub const Q6_K_BYTES: usize = 210;
pub const Q8_K_BYTES: usize = 292;
pub const IQ4_NL_BYTES: usize = 18;
pub const IQ4_XS_BYTES: usize = 136;

/// `kvalues_iq4nl`: the 16 levels of IQ4_NL and IQ4_XS.
pub const IQ4NL_VALUES: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

/// Bytes of one block of `ty` (one element for the float types).
pub fn block_bytes(ty: GgmlType) -> usize {
    ty.type_size() as usize
}
