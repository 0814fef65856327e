//! Row-interleaved ("packed") weight layouts, made at load.
//!
//! A decode step multiplies every weight matrix with one vector, and with the file's row-major
//! layout each block costs a scale conversion, a multiply and a reduction per row. Packing puts 16
//! rows side by side: for each block position, the 16 rows' scales together, then their quants
//! interleaved four elements at a time, so that one 64-byte load feeds a `vpdpbusd` (or four NEON
//! `sdot`) for all 16 rows and one f32 multiply-add scales 16 rows. A packed group of 16 rows takes
//! exactly the bytes of the 16 rows it replaces, so packing happens in place (in the model's copy
//! of the matrix, `model::pack`) and memory stays the file's size.
//!
//! Layouts, per group of 16 rows and per block (super-block for K-quants), "tile" for short.
//! `S[k]` is a step of four elements (4k..4k+4) for all rows: 64 bytes, row `r` at `4r..4r+4`.
//! A "nibble chunk" `c` is 64 bytes whose low nibbles are step `2c` and high nibbles step `2c+1`.
//! - Q8_0 (544 bytes): `d[16]` f16, then steps `S[0..8]` of signed bytes.
//! - Q4_0 and IQ4_NL (288): `d[16]`, then nibble chunks `0..4` of the 4-bit codes (IQ4_NL's
//!   indices into its levels).
//! - Q5_0 (352): `d[16]`, then per step a u64 whose bit `4r+i` is the 5th bit of that element,
//!   then nibble chunks `0..4`.
//! - Q4_1 (320) and Q5_1 (384): Q4_0's and Q5_0's tiles with the rows' f16 minimums `m[16]`
//!   after `d[16]`.
//! - Q4_K (2304): `d[16]`, `dmin[16]`, the 12 scale bytes of each row as 12 x 16 bytes (byte `i`
//!   of row `r` at `16i + r`), then nibble chunks `0..32`.
//! - Q2_K (1344): `d[16]`, `dmin[16]`, the 16 scale bytes of each row (low nibble the sub-block's
//!   scale, high nibble its min) as 4 steps (byte `j` of row `r` at `64(j/4) + 4r + j%4`: a
//!   32-bit lane holds one row's four, which a shift and a mask turn into i32s without widening
//!   bytes), then 16 chunks of the 2-bit values (chunk `h`, byte `4r+i`, bits `2s..2s+2` belong
//!   to step `4h+s`).
//! - Q3_K (1760): `d[16]`, the 12 scale bytes of each row as 12 x 16 bytes (`16i + r`), 16 chunks
//!   of the low 2 bits (chunk `h`, byte `4r+i`, bits `2s..2s+2` belong to step `4h+s`), then 8
//!   chunks of the 3rd bits (chunk `c`, byte `4r+i`, bit `s` belongs to step `8c+s`).
//! - Q5_K (2816): Q4_K's layout, then 8 chunks of the 5th bits: chunk `j` (sub-block `j`), byte
//!   `4r+i`, bit `s` belongs to step `8j+s`.
//! - IQ4_XS (2176): `d[16]`, the 6 scale bytes of each row (`scales_h`, `scales_l`) as 6 x 16
//!   bytes (`16i + r`), then nibble chunks `0..32` of the 4-bit table indices.
//! - Q6_K (3360): `d[16]`, the 16 sub-block scales as 16 x 16 bytes (`16j + r`), nibble chunks
//!   `0..32` of the low 4 bits, then 16 chunks of the top 2 bits: chunk `h`, byte `4r+i`, bits
//!   `2s..2s+2` belong to step `4h+s`.
//!
//! Rows past the last whole group of 16 stay row-major.

use crate::quant::GgmlType;

/// Rows per packed group.
pub const GROUP: usize = 16;

/// Whether rows `rows` of a matrix whose first `packed_rows` rows are packed hold only whole
/// groups of them: each end is on a group or past the packed rows. Such a part (of a fused
/// tensor) is a packed matrix of its own.
pub fn whole_groups(rows: &std::ops::Range<usize>, packed_rows: usize) -> bool {
    let on_group = |r: usize| r.is_multiple_of(GROUP) || r >= packed_rows;
    on_group(rows.start) && on_group(rows.end)
}

/// Whether `ty` has a packed layout.
pub fn has_layout(ty: GgmlType) -> bool {
    TYPES.contains(&ty)
}

/// The weight types with a packed layout.
pub const TYPES: [GgmlType; 12] = [
    GgmlType::Q8_0,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::IQ4_NL,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::IQ4_XS,
];

/// What the packed kernels add to a stored value to make it unsigned (for `vpdpbusd`): each
/// integer sum then starts at `-offset · Σa` (see `gemm::ActSide::osum`).
pub const fn value_offset(ty: GgmlType) -> i32 {
    use GgmlType::*;
    match ty {
        Q8_0 => 128,
        Q4_0 => 8,
        Q5_0 => 16,
        Q3_K => 4,
        Q6_K => 32,
        IQ4_NL | IQ4_XS => 128,
        _ => 0,
    }
}

/// Raw codes of one block (the small integers the format stores per element) and its header
/// bytes (everything but the quants), so that packing and unpacking are one generic transposition.
struct Codes {
    /// Element codes: 2-bit (Q2_K), 3-bit (Q3_K), 4-bit (Q4_0, Q4_K, IQ4_NL's and IQ4_XS's table indices), 5-bit (Q5_0,
    /// Q5_K), 6-bit (Q6_K), or raw bytes (Q8_0).
    codes: [u8; 256],
    /// Header: the f16 scale(s) and, for K-quants, the scale bytes, in the block's own order.
    header: [u8; 32],
}

#[cfg(test)]
fn decode(ty: GgmlType, b: &[u8]) -> Codes {
    let mut c = Codes {
        codes: [0; 256],
        header: [0; 32],
    };
    use GgmlType::*;
    match ty {
        Q8_0 => {
            c.header[..2].copy_from_slice(&b[..2]);
            c.codes[..32].copy_from_slice(&b[2..34]);
        }
        Q4_0 | IQ4_NL | Q4_1 => {
            let h = head_bytes(ty);
            c.header[..h].copy_from_slice(&b[..h]);
            for j in 0..16 {
                c.codes[j] = b[h + j] & 15;
                c.codes[j + 16] = b[h + j] >> 4;
            }
        }
        Q5_0 | Q5_1 => {
            let h = head_bytes(ty);
            c.header[..h].copy_from_slice(&b[..h]);
            let qh = u32::from_le_bytes([b[h], b[h + 1], b[h + 2], b[h + 3]]);
            for j in 0..16 {
                c.codes[j] = (b[h + 4 + j] & 15) | ((((qh >> j) & 1) as u8) << 4);
                c.codes[j + 16] = (b[h + 4 + j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
            }
        }
        Q4_K => {
            c.header[..16].copy_from_slice(&b[..16]);
            for k in 0..4 {
                for l in 0..32 {
                    c.codes[64 * k + l] = b[16 + 32 * k + l] & 15;
                    c.codes[64 * k + 32 + l] = b[16 + 32 * k + l] >> 4;
                }
            }
        }
        IQ4_XS => {
            c.header[..8].copy_from_slice(&b[..8]);
            for e in 0..256 {
                let (ib, l) = (e / 32, e % 32);
                let q = b[8 + 16 * ib + l % 16];
                c.codes[e] = if l < 16 { q & 15 } else { q >> 4 };
            }
        }
        Q2_K => {
            c.header[..16].copy_from_slice(&b[..16]);
            c.header[16..20].copy_from_slice(&b[80..84]);
            for e in 0..256 {
                let (n, j, l) = (e / 128, e % 128 / 32, e % 32);
                c.codes[e] = (b[16 + 32 * n + l] >> (2 * j)) & 3;
            }
        }
        Q3_K => {
            c.header[..14].copy_from_slice(&b[96..110]);
            let (hm, qs) = (&b[..32], &b[32..96]);
            for e in 0..256 {
                let (n, j, l) = (e / 128, e % 128 / 32, e % 32);
                let low = (qs[32 * n + l] >> (2 * j)) & 3;
                c.codes[e] = low | (((hm[l] >> (4 * n + j)) & 1) << 2);
            }
        }
        Q5_K => {
            c.header[..16].copy_from_slice(&b[..16]);
            let (qh, qs) = (&b[16..48], &b[48..176]);
            for k in 0..4 {
                for l in 0..32 {
                    let bit = |j: usize| ((qh[l] >> j) & 1) << 4;
                    c.codes[64 * k + l] = (qs[32 * k + l] & 15) | bit(2 * k);
                    c.codes[64 * k + 32 + l] = (qs[32 * k + l] >> 4) | bit(2 * k + 1);
                }
            }
        }
        Q6_K => {
            c.header[..16].copy_from_slice(&b[192..208]);
            c.header[16..18].copy_from_slice(&b[208..210]);
            for h in 0..2 {
                let (ql, qh) = (&b[64 * h..], &b[128 + 32 * h..]);
                for l in 0..32 {
                    c.codes[128 * h + l] = (ql[l] & 15) | ((qh[l] & 3) << 4);
                    c.codes[128 * h + l + 32] = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4);
                    c.codes[128 * h + l + 64] = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4);
                    c.codes[128 * h + l + 96] = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4);
                }
            }
        }
        _ => unreachable!("no packed layout for {ty}"),
    }
    c
}

fn encode(ty: GgmlType, c: &Codes, b: &mut [u8]) {
    use GgmlType::*;
    match ty {
        Q8_0 => {
            b[..2].copy_from_slice(&c.header[..2]);
            b[2..34].copy_from_slice(&c.codes[..32]);
        }
        Q4_0 | IQ4_NL | Q4_1 => {
            let h = head_bytes(ty);
            b[..h].copy_from_slice(&c.header[..h]);
            for j in 0..16 {
                b[h + j] = c.codes[j] | (c.codes[j + 16] << 4);
            }
        }
        Q5_0 | Q5_1 => {
            let h = head_bytes(ty);
            b[..h].copy_from_slice(&c.header[..h]);
            let mut qh = 0u32;
            for j in 0..32 {
                qh |= u32::from(c.codes[j] >> 4) << j;
            }
            b[h..h + 4].copy_from_slice(&qh.to_le_bytes());
            for j in 0..16 {
                b[h + 4 + j] = (c.codes[j] & 15) | ((c.codes[j + 16] & 15) << 4);
            }
        }
        Q4_K => {
            b[..16].copy_from_slice(&c.header[..16]);
            for k in 0..4 {
                for l in 0..32 {
                    b[16 + 32 * k + l] = c.codes[64 * k + l] | (c.codes[64 * k + 32 + l] << 4);
                }
            }
        }
        IQ4_XS => {
            b[..8].copy_from_slice(&c.header[..8]);
            for ib in 0..8 {
                for l in 0..16 {
                    b[8 + 16 * ib + l] = c.codes[32 * ib + l] | (c.codes[32 * ib + 16 + l] << 4);
                }
            }
        }
        Q2_K => {
            b[..16].copy_from_slice(&c.header[..16]);
            b[80..84].copy_from_slice(&c.header[16..20]);
            b[16..80].fill(0);
            for e in 0..256 {
                let (n, j, l) = (e / 128, e % 128 / 32, e % 32);
                b[16 + 32 * n + l] |= c.codes[e] << (2 * j);
            }
        }
        Q3_K => {
            b[96..110].copy_from_slice(&c.header[..14]);
            b[..96].fill(0);
            for e in 0..256 {
                let (n, j, l) = (e / 128, e % 128 / 32, e % 32);
                b[32 + 32 * n + l] |= (c.codes[e] & 3) << (2 * j);
                b[l] |= (c.codes[e] >> 2) << (4 * n + j);
            }
        }
        Q5_K => {
            b[..16].copy_from_slice(&c.header[..16]);
            b[16..48].fill(0);
            for k in 0..4 {
                for l in 0..32 {
                    let (lo, hi) = (c.codes[64 * k + l], c.codes[64 * k + 32 + l]);
                    b[48 + 32 * k + l] = (lo & 15) | ((hi & 15) << 4);
                    b[16 + l] |= ((lo >> 4) << (2 * k)) | ((hi >> 4) << (2 * k + 1));
                }
            }
        }
        Q6_K => {
            b[192..208].copy_from_slice(&c.header[..16]);
            b[208..210].copy_from_slice(&c.header[16..18]);
            for h in 0..2 {
                for l in 0..32 {
                    let q = |e: usize| c.codes[128 * h + e];
                    b[64 * h + l] = (q(l) & 15) | ((q(l + 64) & 15) << 4);
                    b[64 * h + l + 32] = (q(l + 32) & 15) | ((q(l + 96) & 15) << 4);
                    b[128 + 32 * h + l] = (q(l) >> 4)
                        | ((q(l + 32) >> 4) << 2)
                        | ((q(l + 64) >> 4) << 4)
                        | ((q(l + 96) >> 4) << 6);
                }
            }
        }
        _ => unreachable!("no packed layout for {ty}"),
    }
}

/// Header bytes of a 32-element block: `d`, and `m` for Q4_1 and Q5_1. In a tile the 16 rows'
/// `d` come first, then their `m`: the tile's header is `16 x` the block's.
fn head_bytes(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q4_1 | GgmlType::Q5_1 => 4,
        _ => 2,
    }
}

/// Bytes of one tile (16 rows x one block).
pub fn tile_bytes(ty: GgmlType) -> usize {
    GROUP * ty.type_size() as usize
}

/// Byte offset of step `k`'s byte `i` of row `r` inside a run of steps.
#[inline]
fn step_at(k: usize, r: usize, i: usize) -> usize {
    64 * k + 4 * r + i
}

/// Writes the 16 rows' blocks `blocks[r]` as one tile (the reference for [`pack_group`]).
#[cfg(test)]
fn pack_tile(ty: GgmlType, blocks: &[Codes; GROUP], t: &mut [u8]) {
    use GgmlType::*;
    let nib_chunks = |t: &mut [u8], base: usize, n_el: usize| {
        for r in 0..GROUP {
            for e in 0..n_el {
                let (k, i) = (e / 4, e % 4);
                let o = base + 64 * (k / 2) + 4 * r + i;
                let v = blocks[r].codes[e] & 15;
                if k % 2 == 0 {
                    t[o] = (t[o] & 0xf0) | v;
                } else {
                    t[o] = (t[o] & 0x0f) | (v << 4);
                }
            }
        }
    };
    for r in 0..GROUP {
        t[2 * r..2 * r + 2].copy_from_slice(&blocks[r].header[..2]);
        if head_bytes(ty) == 4 {
            t[32 + 2 * r..34 + 2 * r].copy_from_slice(&blocks[r].header[2..4]);
        }
    }
    match ty {
        Q8_0 => {
            for r in 0..GROUP {
                for e in 0..32 {
                    t[32 + step_at(e / 4, r, e % 4)] = blocks[r].codes[e];
                }
            }
        }
        Q4_0 | IQ4_NL | Q4_1 => nib_chunks(t, 16 * head_bytes(ty), 32),
        Q5_0 | Q5_1 => {
            let h = 16 * head_bytes(ty);
            for k in 0..8 {
                let mut m = 0u64;
                for r in 0..GROUP {
                    for i in 0..4 {
                        m |= u64::from(blocks[r].codes[4 * k + i] >> 4) << (4 * r + i);
                    }
                }
                t[h + 8 * k..h + 8 + 8 * k].copy_from_slice(&m.to_le_bytes());
            }
            nib_chunks(t, h + 64, 32);
        }
        IQ4_XS => {
            for r in 0..GROUP {
                for i in 0..6 {
                    t[32 + 16 * i + r] = blocks[r].header[2 + i];
                }
            }
            nib_chunks(t, 128, 256);
        }
        Q2_K => {
            for r in 0..GROUP {
                t[2 * r..2 * r + 2].copy_from_slice(&blocks[r].header[16..18]);
                t[32 + 2 * r..34 + 2 * r].copy_from_slice(&blocks[r].header[18..20]);
                for j in 0..16 {
                    t[64 + step_at(j / 4, r, j % 4)] = blocks[r].header[j];
                }
                for e in 0..256 {
                    plane_set(t, 320, 2, r, e, blocks[r].codes[e]);
                }
            }
        }
        Q3_K => {
            for r in 0..GROUP {
                t[2 * r..2 * r + 2].copy_from_slice(&blocks[r].header[12..14]);
                for i in 0..12 {
                    t[32 + 16 * i + r] = blocks[r].header[i];
                }
                for e in 0..256 {
                    let code = blocks[r].codes[e];
                    plane_set(t, 224, 2, r, e, code & 3);
                    plane_set(t, 1248, 1, r, e, code >> 2);
                }
            }
        }
        Q4_K | Q5_K => {
            for r in 0..GROUP {
                t[32 + 2 * r..34 + 2 * r].copy_from_slice(&blocks[r].header[2..4]);
                for i in 0..12 {
                    t[64 + 16 * i + r] = blocks[r].header[4 + i];
                }
            }
            nib_chunks(t, 256, 256);
            if ty == Q5_K {
                for r in 0..GROUP {
                    for e in 0..256 {
                        plane_set(t, 2304, 1, r, e, blocks[r].codes[e] >> 4);
                    }
                }
            }
        }
        Q6_K => {
            // The f16 d is at header[16..18] for Q6_K.
            for r in 0..GROUP {
                t[2 * r..2 * r + 2].copy_from_slice(&blocks[r].header[16..18]);
                for j in 0..16 {
                    t[32 + 16 * j + r] = blocks[r].header[j];
                }
            }
            nib_chunks(t, 288, 256);
            for r in 0..GROUP {
                for e in 0..256 {
                    plane_set(t, 2336, 2, r, e, blocks[r].codes[e] >> 4);
                }
            }
        }
        _ => unreachable!(),
    }
}

/// Element `e` of row `r` in a plane of `bits`-bit fields at `base` (Q2_K's, Q3_K's, Q5_K's and Q6_K's
/// bit planes): each 64-byte chunk holds `8 / bits` steps, step `s` of it at bits `bits·s` of
/// byte `4r + i` for the step's element `i`.
fn plane_at(base: usize, bits: usize, r: usize, e: usize) -> (usize, usize) {
    let (k, i) = (e / 4, e % 4);
    let per = 8 / bits;
    (base + 64 * (k / per) + 4 * r + i, bits * (k % per))
}

fn plane_get(t: &[u8], base: usize, bits: usize, r: usize, e: usize) -> u8 {
    let (o, shift) = plane_at(base, bits, r, e);
    (t[o] >> shift) & ((1 << bits) - 1)
}

#[cfg(test)]
fn plane_set(t: &mut [u8], base: usize, bits: usize, r: usize, e: usize, v: u8) {
    let (o, shift) = plane_at(base, bits, r, e);
    let mask = ((1u8 << bits) - 1) << shift;
    t[o] = (t[o] & !mask) | ((v << shift) & mask);
}

/// Reads row `r`'s block back out of a tile.
fn unpack_tile_row(ty: GgmlType, t: &[u8], r: usize) -> Codes {
    use GgmlType::*;
    let mut c = Codes {
        codes: [0; 256],
        header: [0; 32],
    };
    let nib = |base: usize, e: usize| {
        let (k, i) = (e / 4, e % 4);
        let b = t[base + 64 * (k / 2) + 4 * r + i];
        if k % 2 == 0 {
            b & 15
        } else {
            b >> 4
        }
    };
    c.header[..2].copy_from_slice(&t[2 * r..2 * r + 2]);
    if head_bytes(ty) == 4 {
        c.header[2..4].copy_from_slice(&t[32 + 2 * r..34 + 2 * r]);
    }
    match ty {
        Q8_0 => {
            for e in 0..32 {
                c.codes[e] = t[32 + step_at(e / 4, r, e % 4)];
            }
        }
        Q4_0 | IQ4_NL | Q4_1 => {
            let h = 16 * head_bytes(ty);
            for e in 0..32 {
                c.codes[e] = nib(h, e);
            }
        }
        Q5_0 | Q5_1 => {
            let h = 16 * head_bytes(ty);
            for e in 0..32 {
                let at = h + 8 * (e / 4);
                let m = u64::from_le_bytes(t[at..at + 8].try_into().expect("8 bytes"));
                c.codes[e] = nib(h + 64, e) | ((((m >> (4 * r + e % 4)) & 1) as u8) << 4);
            }
        }
        IQ4_XS => {
            for i in 0..6 {
                c.header[2 + i] = t[32 + 16 * i + r];
            }
            for e in 0..256 {
                c.codes[e] = nib(128, e);
            }
        }
        Q2_K => {
            c.header[16..18].copy_from_slice(&t[2 * r..2 * r + 2]);
            c.header[18..20].copy_from_slice(&t[32 + 2 * r..34 + 2 * r]);
            for j in 0..16 {
                c.header[j] = t[64 + step_at(j / 4, r, j % 4)];
            }
            for e in 0..256 {
                c.codes[e] = plane_get(t, 320, 2, r, e);
            }
        }
        Q3_K => {
            c.header[12..14].copy_from_slice(&t[2 * r..2 * r + 2]);
            for i in 0..12 {
                c.header[i] = t[32 + 16 * i + r];
            }
            for e in 0..256 {
                c.codes[e] = plane_get(t, 224, 2, r, e) | (plane_get(t, 1248, 1, r, e) << 2);
            }
        }
        Q4_K | Q5_K => {
            c.header[2..4].copy_from_slice(&t[32 + 2 * r..34 + 2 * r]);
            for i in 0..12 {
                c.header[4 + i] = t[64 + 16 * i + r];
            }
            for e in 0..256 {
                c.codes[e] = nib(256, e);
                if ty == Q5_K {
                    c.codes[e] |= plane_get(t, 2304, 1, r, e) << 4;
                }
            }
        }
        Q6_K => {
            c.header[16..18].copy_from_slice(&t[2 * r..2 * r + 2]);
            for j in 0..16 {
                c.header[j] = t[32 + 16 * j + r];
            }
            for e in 0..256 {
                c.codes[e] = nib(288, e) | (plane_get(t, 2336, 2, r, e) << 4);
            }
        }
        _ => unreachable!(),
    }
    c
}

/// Packs the first `rows / 16 * 16` rows of a matrix (`rows` rows of `n` values of `ty`,
/// back to back) in place; returns how many rows are packed. `scratch` holds one group.
pub fn pack_in_place(ty: GgmlType, n: usize, data: &mut [u8], rows: usize, scratch: &mut Vec<u8>) -> usize {
    assert!(has_layout(ty));
    let rb = ty.row_bytes(n as u64).expect("whole blocks") as usize;
    let groups = rows / GROUP;
    for group in data[..groups * GROUP * rb].chunks_exact_mut(GROUP * rb) {
        scratch.clear();
        scratch.extend_from_slice(group);
        pack_group(ty, rb, scratch, group);
    }
    groups * GROUP
}

/// Writes the 16 row-major rows `src` (`rb` bytes each) as packed tiles into `dst`.
///
/// Each type moves whole words straight from the file's block to their places in the tile (the
/// nibble and bit shuffles done four rows' bytes at a time in a `u32`), so packing a model runs
/// near memory speed; [`pack_tile`] is the element-by-element reference it must match.
fn pack_group(ty: GgmlType, rb: usize, src: &[u8], dst: &mut [u8]) {
    use GgmlType::*;
    match ty {
        Q8_0 => pack_tiles(ty, rb, src, dst, pack_q8_0),
        Q4_0 | IQ4_NL => pack_tiles(ty, rb, src, dst, pack_q4_0),
        Q4_1 => pack_tiles(ty, rb, src, dst, pack_q4_1),
        Q5_0 => pack_tiles(ty, rb, src, dst, pack_q5_0),
        Q5_1 => pack_tiles(ty, rb, src, dst, pack_q5_1),
        Q2_K => pack_tiles(ty, rb, src, dst, pack_q2_k),
        Q3_K => pack_tiles(ty, rb, src, dst, pack_q3_k),
        Q4_K => pack_tiles(ty, rb, src, dst, pack_q4_k),
        Q5_K => pack_tiles(ty, rb, src, dst, pack_q5_k),
        Q6_K => pack_tiles(ty, rb, src, dst, pack_q6_k),
        IQ4_XS => pack_tiles(ty, rb, src, dst, pack_iq4_xs),
        _ => unreachable!("no packed layout for {ty}"),
    }
}

/// Calls `row_block(block, r, tile)` for every row `r` of every tile of a group.
#[inline(always)]
fn pack_tiles(
    ty: GgmlType,
    rb: usize,
    src: &[u8],
    dst: &mut [u8],
    row_block: impl Fn(&[u8], usize, &mut [u8]),
) {
    let bb = ty.type_size() as usize;
    let tb = tile_bytes(ty);
    for (b, t) in dst[..rb / bb * tb].chunks_exact_mut(tb).enumerate() {
        for r in 0..GROUP {
            row_block(&src[r * rb + b * bb..r * rb + (b + 1) * bb], r, t);
        }
    }
}

#[inline(always)]
fn word(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"))
}

#[inline(always)]
fn put(t: &mut [u8], o: usize, w: u32) {
    t[o..o + 4].copy_from_slice(&w.to_le_bytes());
}

/// Moves the 4-bit codes `qs` (`len` bytes, the format's runs of `len` low nibbles then `len`
/// high nibbles, repeated) of row `r` into the nibble chunks at `base`. Each 8 source bytes give
/// the row's 4 bytes of two chunks: one holding their low nibbles, one their high nibbles.
#[inline(always)]
fn put_nibbles(qs: &[u8], run: usize, r: usize, t: &mut [u8], base: usize) {
    const LO: u32 = 0x0f0f_0f0f;
    for g in 0..qs.len() / 8 {
        let (a, b) = (word(qs, 8 * g), word(qs, 8 * g + 4));
        let (k, s) = (g / (run / 8), g % (run / 8));
        let c = k * (run / 4) + s;
        put(t, base + 64 * c + 4 * r, (a & LO) | ((b & LO) << 4));
        put(t, base + 64 * (c + run / 8) + 4 * r, ((a >> 4) & LO) | (b & !LO));
    }
}

/// Moves the 2-bit fields of a block's 256 elements (`q`: 64 bytes in ggml's K-quant order,
/// element 128n + 32j + l at bits 2j of byte 32n + l; Q2_K's values, Q3_K's low bits, Q6_K's top bits) of row
/// `r` into the 16 chunks at `base`: chunk h holds elements 16h..16h+16, which come from bytes
/// 32(h/8) + 16(h%2) + 4s + i at bits 2((h%8)/2); step 4h+s goes to bits 2s.
#[inline(always)]
fn put_pairs(q: &[u8], r: usize, t: &mut [u8], base: usize) {
    const M: u32 = 0x0303_0303;
    for h in 0..16 {
        let (at, shift) = (32 * (h / 8) + 16 * (h % 2), 2 * ((h % 8) / 2));
        let mut w = 0;
        for s in 0..4 {
            w |= ((word(q, at + 4 * s) >> shift) & M) << (2 * s);
        }
        put(t, base + 64 * h + 4 * r, w);
    }
}

/// Moves the 1-bit fields of a block's 256 elements (`m`: 32 bytes, element 32c + 4s + i at bit
/// c of byte 4s + i; Q3_K's `hmask`, Q5_K's `qh`) of row `r` into the 8 chunks at `base`: chunk
/// c, bit s of byte `4r + i`.
#[inline(always)]
fn put_bits(m: &[u8], r: usize, t: &mut [u8], base: usize) {
    const M: u32 = 0x0101_0101;
    for c in 0..8 {
        let mut w = 0;
        for s in 0..8 {
            w |= ((word(m, 4 * s) >> c) & M) << s;
        }
        put(t, base + 64 * c + 4 * r, w);
    }
}

// Each of these writes row `r`'s block `blk` (the file's layout) into its places in tile `t`.

fn pack_q8_0(blk: &[u8], r: usize, t: &mut [u8]) {
    t[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
    for k in 0..8 {
        put(t, 32 + 64 * k + 4 * r, word(blk, 2 + 4 * k));
    }
}

fn pack_q4_0(blk: &[u8], r: usize, t: &mut [u8]) {
    t[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
    put_nibbles(&blk[2..18], 16, r, t, 32);
}

/// Row `r`'s two leading f16s (`d` and `m` of Q4_1/Q5_1, `d` and `dmin` of Q4_K/Q5_K) into the
/// tile's `d[16]` and the 16 halves after it.
fn put_two_f16(blk: &[u8], r: usize, t: &mut [u8]) {
    t[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
    t[32 + 2 * r..34 + 2 * r].copy_from_slice(&blk[2..4]);
}

fn pack_q4_1(blk: &[u8], r: usize, t: &mut [u8]) {
    put_two_f16(blk, r, t);
    put_nibbles(&blk[4..20], 16, r, t, 64);
}

fn pack_q5_0(blk: &[u8], r: usize, t: &mut [u8]) {
    t[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
    put_q5(&blk[2..22], r, t, 32);
}

fn pack_q5_1(blk: &[u8], r: usize, t: &mut [u8]) {
    put_two_f16(blk, r, t);
    put_q5(&blk[4..24], r, t, 64);
}

/// Moves a Q5_0/Q5_1 block's `qh` and nibbles (`q`: the 20 bytes after its header) of row `r`
/// into the tile's 5th-bit masks at `base` and its nibble chunks after them.
fn put_q5(q: &[u8], r: usize, t: &mut [u8], base: usize) {
    // Step k's u64 holds at bit `4r + i` the 5th bit of element 4k+i: qh's bits 4k..4k+4.
    let qh = word(q, 0);
    for k in 0..8 {
        let o = base + 8 * k + r / 2;
        let v = ((qh >> (4 * k)) & 15) as u8;
        t[o] = if r.is_multiple_of(2) {
            (t[o] & 0xf0) | v
        } else {
            (t[o] & 0x0f) | (v << 4)
        };
    }
    put_nibbles(&q[4..20], 16, r, t, base + 64);
}

fn pack_q2_k(blk: &[u8], r: usize, t: &mut [u8]) {
    t[2 * r..2 * r + 2].copy_from_slice(&blk[80..82]);
    t[32 + 2 * r..34 + 2 * r].copy_from_slice(&blk[82..84]);
    for k in 0..4 {
        put(t, 64 + 64 * k + 4 * r, word(blk, 4 * k));
    }
    put_pairs(&blk[16..80], r, t, 320);
}

fn pack_q3_k(blk: &[u8], r: usize, t: &mut [u8]) {
    t[2 * r..2 * r + 2].copy_from_slice(&blk[108..110]);
    for i in 0..12 {
        t[32 + 16 * i + r] = blk[96 + i];
    }
    put_pairs(&blk[32..96], r, t, 224);
    put_bits(&blk[..32], r, t, 1248);
}

/// Row `r`'s `d`, `dmin` and 12 scale bytes, which Q4_K and Q5_K blocks and tiles place alike.
fn put_k4_head(blk: &[u8], r: usize, t: &mut [u8]) {
    put_two_f16(blk, r, t);
    for i in 0..12 {
        t[64 + 16 * i + r] = blk[4 + i];
    }
}

fn pack_q4_k(blk: &[u8], r: usize, t: &mut [u8]) {
    put_k4_head(blk, r, t);
    put_nibbles(&blk[16..144], 32, r, t, 256);
}

fn pack_q5_k(blk: &[u8], r: usize, t: &mut [u8]) {
    put_k4_head(blk, r, t);
    put_nibbles(&blk[48..176], 32, r, t, 256);
    put_bits(&blk[16..48], r, t, 2304);
}

fn pack_q6_k(blk: &[u8], r: usize, t: &mut [u8]) {
    t[2 * r..2 * r + 2].copy_from_slice(&blk[208..210]);
    for j in 0..16 {
        t[32 + 16 * j + r] = blk[192 + j];
    }
    // Low 4 bits: per half, 64 low nibbles then 64 high nibbles of `ql`.
    put_nibbles(&blk[..128], 64, r, t, 288);
    put_pairs(&blk[128..192], r, t, 2336);
}

fn pack_iq4_xs(blk: &[u8], r: usize, t: &mut [u8]) {
    t[2 * r..2 * r + 2].copy_from_slice(&blk[..2]);
    for i in 0..6 {
        t[32 + 16 * i + r] = blk[2 + i];
    }
    put_nibbles(&blk[8..136], 16, r, t, 128);
}

/// The element-by-element packer [`pack_group`] must match byte for byte.
#[cfg(test)]
fn pack_in_place_reference(ty: GgmlType, n: usize, data: &mut [u8], rows: usize) -> usize {
    let rb = ty.row_bytes(n as u64).expect("whole blocks") as usize;
    let bb = ty.type_size() as usize;
    let tb = tile_bytes(ty);
    let groups = rows / GROUP;
    for group in data[..groups * GROUP * rb].chunks_exact_mut(GROUP * rb) {
        let src = group.to_vec();
        for b in 0..rb / bb {
            let blocks: [Codes; GROUP] =
                std::array::from_fn(|r| decode(ty, &src[r * rb + b * bb..r * rb + (b + 1) * bb]));
            pack_tile(ty, &blocks, &mut group[b * tb..(b + 1) * tb]);
        }
    }
    groups * GROUP
}

/// Row `r` of a packed group (`group` holds the 16 rows' bytes) in the file's own layout.
pub fn unpack_row(ty: GgmlType, n: usize, group: &[u8], r: usize, out: &mut [u8]) {
    let bb = ty.type_size() as usize;
    let nb = n / ty.block_size() as usize;
    let tb = tile_bytes(ty);
    for b in 0..nb {
        let c = unpack_tile_row(ty, &group[b * tb..(b + 1) * tb], r);
        encode(ty, &c, &mut out[b * bb..(b + 1) * bb]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::tests::{random_rows, Rng};

    #[test]
    fn fast_packer_matches_reference() {
        let mut rng = Rng::new(11);
        for ty in TYPES {
            for (n, rows) in [(ty.block_size() as usize, 16), (3 * ty.block_size() as usize, 53)] {
                let orig = random_rows(&mut rng, ty, n, rows);
                let (mut fast, mut reference) = (orig.clone(), orig.clone());
                let mut scratch = Vec::new();
                assert_eq!(
                    pack_in_place(ty, n, &mut fast, rows, &mut scratch),
                    pack_in_place_reference(ty, n, &mut reference, rows)
                );
                assert!(fast == reference, "{ty} n={n} rows={rows}: packed bytes differ");
            }
        }
    }

    #[test]
    fn packing_is_lossless_and_size_preserving() {
        let mut rng = Rng::new(3);
        for ty in TYPES {
            let n = if ty.block_size() == 256 { 512 } else { 96 };
            let rows = 37;
            let orig = random_rows(&mut rng, ty, n, rows);
            let mut data = orig.clone();
            let mut scratch = Vec::new();
            let packed = pack_in_place(ty, n, &mut data, rows, &mut scratch);
            assert_eq!(packed, 32);
            assert_ne!(data[..packed], orig[..packed], "{ty}: nothing moved");
            let rb = orig.len() / rows;
            // The tail stays as it was.
            assert_eq!(data[packed * rb..], orig[packed * rb..]);
            let mut row = vec![0u8; rb];
            for r in 0..packed {
                let g = r / GROUP;
                unpack_row(
                    ty,
                    n,
                    &data[g * GROUP * rb..(g + 1) * GROUP * rb],
                    r % GROUP,
                    &mut row,
                );
                assert_eq!(row, orig[r * rb..(r + 1) * rb], "{ty} row {r}");
            }
        }
    }
}
