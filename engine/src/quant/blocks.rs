//! Block layouts of the quantized formats, byte for byte as ggml stores them (`ggml-common.h`).
//!
//! Every block is a `#[repr(C)]` struct made only of byte arrays, so it has alignment 1, no
//! padding, and exactly ggml's size (checked below). A tensor's bytes can therefore be viewed as a
//! slice of blocks wherever they lie (an mmap, a `Vec<u8>`) with [`bytemuck::try_cast_slice`], no
//! copy and no alignment requirement. Multi-byte scalars are little-endian, as in GGUF, and are read
//! through the accessor methods (`d()`, `bsum(i)` ...), which also makes the code endian-correct.
//!
//! A block covers `block_size` consecutive elements of one row; rows are whole numbers of blocks.
//! Comments give, for each format, which bits of which bytes hold element `i` of the block; the
//! dequantizers in the sibling modules are the executable statement of the same facts.

#![allow(non_camel_case_types)]

use bytemuck::{Pod, Zeroable};
use half::f16;

/// Elements per block of the legacy formats (Q4_0 ... Q8_1, IQ4_NL).
pub const QK: usize = 32;
/// Elements per super-block of the K-quants and IQ4_XS.
pub const QK_K: usize = 256;

/// The 16 non-linear levels of IQ4_NL and IQ4_XS (`kvalues_iq4nl`), in increasing order.
pub const KVALUES_IQ4NL: [i8; 16] = [
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
];

#[inline]
pub(crate) fn f16_to_f32(h: [u8; 2]) -> f32 {
    f16::from_bits(u16::from_le_bytes(h)).to_f32()
}

/// IEEE binary16 rounding to nearest even, as ggml's `GGML_FP32_TO_FP16` (F16C or its software twin).
#[inline]
pub(crate) fn f32_to_f16(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_bits().to_le_bytes()
}

/// Q4_0: `d` f16, 32 4-bit quants. Element `j < 16` is the low nibble of `qs[j]`, element `j + 16`
/// its high nibble; value `d * (q - 8)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_0 {
    pub d: [u8; 2],
    pub qs: [u8; 16],
}

/// Q4_1: `d`, `m` f16, nibbles as Q4_0; value `d * q + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qs: [u8; 16],
}

/// Q5_0: `d` f16; nibbles as Q4_0 plus a fifth bit per element: bit `j` of the little-endian u32
/// `qh` is the high bit of element `j` (0..32). Value `d * (q - 16)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_0 {
    pub d: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}

/// Q5_1: `d`, `m` f16, bits as Q5_0; value `d * q + m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_1 {
    pub d: [u8; 2],
    pub m: [u8; 2],
    pub qh: [u8; 4],
    pub qs: [u8; 16],
}

/// Q8_0: `d` f16, 32 signed bytes; value `d * q`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_0 {
    pub d: [u8; 2],
    pub qs: [i8; 32],
}

/// Q8_1 (activations paired with Q4_1/Q5_1): as Q8_0 plus `s` = f16(`d * Σ qs`), which lets the
/// dot product apply the weights' minimum `m` without touching the quants.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_1 {
    pub d: [u8; 2],
    pub s: [u8; 2],
    pub qs: [i8; 32],
}

/// IQ4_NL: `d` f16, nibbles placed as Q4_0; value `d * KVALUES_IQ4NL[q]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockIQ4_NL {
    pub d: [u8; 2],
    pub qs: [u8; 16],
}

/// Q2_K: 16 sub-blocks of 16. `scales[s]`: low nibble the sub-block's scale, high nibble its min.
/// Element `e = 128h + 32j + 16g + l` (h < 2, j < 4, g < 2, l < 16) is bits `2j..2j+2` of
/// `qs[32h + 16g + l]`, in sub-block `s = e / 16`; value `d * (scales[s] & 15) * q - dmin * (scales[s] >> 4)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ2_K {
    pub scales: [u8; 16],
    pub qs: [u8; 64],
    pub d: [u8; 2],
    pub dmin: [u8; 2],
}

/// Q3_K: 16 sub-blocks of 16 with signed 6-bit scales (see [`q3_k_scales`]). Element `e` (walked as
/// in Q2_K) has its low two bits in `qs` exactly where Q2_K has them and its third bit in bit
/// `e / 32` of `hmask[e % 32]`; a clear bit means "subtract 4": value `d * sc[e / 16] * (q - 4·!hi)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ3_K {
    pub hmask: [u8; 32],
    pub qs: [u8; 64],
    pub scales: [u8; 12],
    pub d: [u8; 2],
}

/// Q4_K: 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes (see [`scale_min_k4`]).
/// Element `e = 64c + 32k + l` (c < 4, k < 2, l < 32) is the low (k = 0) or high (k = 1) nibble of
/// `qs[32c + l]`, in sub-block `2c + k`; value `d * sc * q - dmin * m`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ4_K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qs: [u8; 128],
}

/// Q5_K: as Q4_K plus a fifth bit: element `e = 64c + 32k + l` has it in bit `2c + k` of `qh[l]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ5_K {
    pub d: [u8; 2],
    pub dmin: [u8; 2],
    pub scales: [u8; 12],
    pub qh: [u8; 32],
    pub qs: [u8; 128],
}

/// Q6_K: 16 sub-blocks of 16 with signed 8-bit scales. Element `e = 128h + 32r + l` (h < 2, r < 4,
/// l < 32): low 4 bits are the low (r = 0, 1) or high (r = 2, 3) nibble of `ql[64h + 32(r & 1) + l]`,
/// high 2 bits are bits `2r..2r+2` of `qh[32h + l]`; value `d * scales[e / 16] * (q - 32)`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ6_K {
    pub ql: [u8; 128],
    pub qh: [u8; 64],
    pub scales: [i8; 16],
    pub d: [u8; 2],
}

/// Q8_K (activations paired with the K-quants and IQ4_XS): `d` is an f32 (and may be negative),
/// `bsums[i]` the i16 sum of `qs[16i..16i+16]`, used to apply mins and offsets per 16 elements.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockQ8_K {
    pub d: [u8; 4],
    pub qs: [i8; 256],
    pub bsums: [u8; 32],
}

/// IQ4_XS: 8 sub-blocks of 32, each with a 6-bit scale `ls` (low 4 bits in the nibble `ib % 2` of
/// `scales_l[ib / 2]`, high 2 bits at bits `2ib` of the u16 `scales_h`); the 16 bytes
/// `qs[16ib..16ib+16]` hold the sub-block's nibbles placed as in IQ4_NL. Value
/// `d * (ls - 32) * KVALUES_IQ4NL[q]`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct BlockIQ4_XS {
    pub d: [u8; 2],
    pub scales_h: [u8; 2],
    pub scales_l: [u8; 4],
    pub qs: [u8; 128],
}

macro_rules! f16_fields {
    ($ty:ty: $($field:ident),*) => {
        impl $ty {
            $(
                #[inline]
                pub fn $field(&self) -> f32 {
                    f16_to_f32(self.$field)
                }
            )*
        }
    };
}

f16_fields!(BlockQ4_0: d);
f16_fields!(BlockQ4_1: d, m);
f16_fields!(BlockQ5_0: d);
f16_fields!(BlockQ5_1: d, m);
f16_fields!(BlockQ8_0: d);
f16_fields!(BlockQ8_1: d, s);
f16_fields!(BlockIQ4_NL: d);
f16_fields!(BlockQ2_K: d, dmin);
f16_fields!(BlockQ3_K: d);
f16_fields!(BlockQ4_K: d, dmin);
f16_fields!(BlockQ5_K: d, dmin);
f16_fields!(BlockQ6_K: d);
f16_fields!(BlockIQ4_XS: d);

impl BlockQ5_0 {
    #[inline]
    pub fn qh(&self) -> u32 {
        u32::from_le_bytes(self.qh)
    }
}

impl BlockQ5_1 {
    #[inline]
    pub fn qh(&self) -> u32 {
        u32::from_le_bytes(self.qh)
    }
}

impl BlockQ8_K {
    #[inline]
    pub fn d(&self) -> f32 {
        f32::from_le_bytes(self.d)
    }

    #[inline]
    pub fn bsum(&self, i: usize) -> i16 {
        i16::from_le_bytes([self.bsums[2 * i], self.bsums[2 * i + 1]])
    }

    #[inline]
    pub(crate) fn set_bsum(&mut self, i: usize, v: i16) {
        self.bsums[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
    }
}

impl BlockIQ4_XS {
    #[inline]
    pub fn scales_h(&self) -> u16 {
        u16::from_le_bytes(self.scales_h)
    }

    /// The 6-bit scale of sub-block `ib` (0..8), before subtracting 32.
    #[inline]
    pub fn scale(&self, ib: usize) -> u8 {
        let lo = (self.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF;
        let hi = ((self.scales_h() >> (2 * ib)) & 3) as u8;
        lo | (hi << 4)
    }
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K / Q5_K block (`get_scale_min_k4`):
/// sub-blocks 0-3 keep theirs in the low 6 bits of bytes `j` and `j + 4`; sub-blocks 4-7 have their
/// low 4 bits in the nibbles of byte `j + 4` and their top 2 bits in the spare top bits of bytes
/// `j - 4` (scale) and `j` (min).
#[inline]
pub fn scale_min_k4(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

/// The 16 signed scales of a Q3_K block (already minus 32). Scale `j` has its low 4 bits in the low
/// (j < 8) or high (j >= 8) nibble of byte `j % 8`, and its top 2 bits at bits `2(j / 4)` of byte
/// `8 + j % 4`.
#[inline]
pub fn q3_k_scales(b: &[u8; 12]) -> [i8; 16] {
    let mut sc = [0i8; 16];
    for (j, s) in sc.iter_mut().enumerate() {
        let lo = if j < 8 { b[j] & 0xF } else { b[j - 8] >> 4 };
        let hi = (b[8 + j % 4] >> (2 * (j / 4))) & 3;
        *s = (lo | (hi << 4)) as i8 - 32;
    }
    sc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::GgmlType;
    use std::mem::size_of;

    #[test]
    fn sizes_match_ggml() {
        let cases: [(GgmlType, usize); 13] = [
            (GgmlType::Q4_0, size_of::<BlockQ4_0>()),
            (GgmlType::Q4_1, size_of::<BlockQ4_1>()),
            (GgmlType::Q5_0, size_of::<BlockQ5_0>()),
            (GgmlType::Q5_1, size_of::<BlockQ5_1>()),
            (GgmlType::Q8_0, size_of::<BlockQ8_0>()),
            (GgmlType::Q8_1, size_of::<BlockQ8_1>()),
            (GgmlType::Q2_K, size_of::<BlockQ2_K>()),
            (GgmlType::Q3_K, size_of::<BlockQ3_K>()),
            (GgmlType::Q4_K, size_of::<BlockQ4_K>()),
            (GgmlType::Q5_K, size_of::<BlockQ5_K>()),
            (GgmlType::Q6_K, size_of::<BlockQ6_K>()),
            (GgmlType::Q8_K, size_of::<BlockQ8_K>()),
            (GgmlType::IQ4_XS, size_of::<BlockIQ4_XS>()),
        ];
        for (ty, size) in cases {
            assert_eq!(ty.type_size() as usize, size, "{ty}");
        }
        assert_eq!(GgmlType::IQ4_NL.type_size() as usize, size_of::<BlockIQ4_NL>());
        assert_eq!(std::mem::align_of::<BlockQ8_K>(), 1);
    }

    #[test]
    fn q3_k_scales_round_trip() {
        // Pack 16 arbitrary 6-bit values the way quantize_q3_k does and read them back.
        let vals: [u8; 16] = [0, 1, 63, 32, 17, 45, 2, 60, 31, 33, 8, 50, 12, 44, 7, 63];
        let mut b = [0u8; 12];
        for (j, &l) in vals.iter().enumerate() {
            if j < 8 {
                b[j] = l & 0xF;
            } else {
                b[j - 8] |= (l & 0xF) << 4;
            }
            b[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
        }
        let got = q3_k_scales(&b);
        for j in 0..16 {
            assert_eq!(got[j], vals[j] as i8 - 32);
        }
    }
}
