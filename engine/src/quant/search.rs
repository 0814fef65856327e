//! The scale searches behind llama.cpp's K-quant and IQ4 reference quantizers (`ggml-quants.c`).
//!
//! To give the same bytes as llama.cpp these repeat its float arithmetic operation for operation:
//! same association (`w*x*l` is `(w*x)*l`), same int-to-float conversions, same comparisons and
//! tie-breaking, no fused multiply-add (Rust never contracts `a*b + c`; llama.cpp's `ggml-base`,
//! where these live, is built without FMA code generation). Do not "simplify" an expression here
//! without checking the fixture tests: a changed last bit flips a rare rounding tie.

// Index loops are kept where ggml has them, so the code can be checked against it line by line.
#![allow(clippy::needless_range_loop)]

/// Values smaller than this in magnitude make a group "all zero" (`GROUP_MAX_EPS`).
pub(crate) const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `nearest_int`: round to nearest, ties to even, by adding 1.5 * 2^23 and reading the
/// mantissa. Valid for |x| <= 2^22 (ggml asserts it); other inputs give an unspecified value.
#[inline]
pub(crate) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() & 0x007f_ffff) as i32 - 0x0040_0000
}

/// `make_qx_quants` with `rmse_type = 1` and no importance weights (the only way the reference
/// Q6_K quantizer calls it): a symmetric scale for `x`, quants `L[i] = l + nmax` with
/// `l in [-nmax, nmax)`, chosen to minimise Σ x²·(x - scale·l)² over 19 candidate scales.
pub(crate) fn make_qx_quants(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let mut iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (&v, lo) in x.iter().zip(l_out.iter_mut()) {
        let l = clamp(nearest_int(iscale * v));
        *lo = (l + nmax) as i8;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let l = clamp(nearest_int(iscale * v));
            let w = v * v;
            sumlx += w * v * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (&v, lo) in x.iter().zip(l_out.iter_mut()) {
                *lo = (nmax + clamp(nearest_int(iscale * v))) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `make_q3_quants` with `do_rmse = true`: a symmetric scale and quants `L[i] in [0, 2·nmax)`
/// (offset by nmax), refined by up to 5 rounds of coordinate descent on the x²-weighted error.
pub(crate) fn make_q3_quants(nmax: i32, x: &[f32], l_out: &mut [i8]) -> f32 {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out.fill(0);
        return 0.0;
    }
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (&v, lo) in x.iter().zip(l_out.iter_mut()) {
        let l = clamp(nearest_int(iscale * v));
        *lo = l as i8;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut n_changed = 0;
        for (&v, lo) in x.iter().zip(l_out.iter_mut()) {
            let w = v * v;
            let li = f32::from(*lo);
            let mut slx = sumlx - w * v * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = clamp(nearest_int(v * sl2 / slx));
                if new_l != i32::from(*lo) {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *lo = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed += 1;
                    }
                }
            }
        }
        if n_changed == 0 {
            break;
        }
    }
    for lo in l_out.iter_mut() {
        *lo += nmax as i8;
    }
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// Parameters of [`make_qkx2_quants`]'s scale search: candidate inverse scales are
/// `(rmin + rdelta·is + nmax) / (max - min)` for `is in 0..=nstep`.
pub(crate) struct Qkx2Search {
    pub nmax: i32,
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    /// Minimise the weighted absolute error instead of the squared one.
    pub use_mad: bool,
}

/// `make_qkx2_quants`: an asymmetric (scale, min) fit `x ≈ scale·L + min` with `L in [0, nmax]`
/// and `min <= 0`, choosing among candidate scales the one with the least weighted error and, for
/// each, the least-squares scale and min. Returns `(scale, -min)`.
pub(crate) fn make_qkx2_quants(p: &Qkx2Search, x: &[f32], weights: &[f32], l_out: &mut [u8]) -> (f32, f32) {
    let n = x.len();
    let nmax = p.nmax;
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out[..n].fill(0);
        return (0.0, -min);
    }
    let err = |diff: f32| if p.use_mad { diff.abs() } else { diff * diff };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min));
        l_out[i] = l.clamp(0, nmax) as u8;
        let diff = scale * f32::from(l_out[i]) + min - x[i];
        best_error += weights[i] * err(diff);
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    let laux = &mut laux[..n];
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = l as u8;
            let w = weights[i];
            let l = l as f32;
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                let diff = this_scale * f32::from(laux[i]) + this_min - x[i];
                cur_error += weights[i] * err(diff);
            }
            if cur_error < best_error {
                l_out[..n].copy_from_slice(laux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// `best_index_int8`: the index of the entry of the sorted table `values` nearest to `x` (the
/// upper one on an exact tie).
#[inline]
pub(crate) fn best_index_int8(values: &[i8; 16], x: f32) -> usize {
    let n = values.len();
    if x <= f32::from(values[0]) {
        return 0;
    }
    if x >= f32::from(values[n - 1]) {
        return n - 1;
    }
    let (mut ml, mut mu) = (0usize, n - 1);
    while mu - ml > 1 {
        let mav = (ml + mu) / 2;
        if x < f32::from(values[mav]) {
            mu = mav;
        } else {
            ml = mav;
        }
    }
    if x - f32::from(values[mu - 1]) < f32::from(values[mu]) - x {
        mu - 1
    } else {
        mu
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_half_to_even() {
        let cases = [
            (0.5, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (-2.5, -2),
            (0.49999997, 0),
            (3.7, 4),
            (-3.7, -4),
            (4194303.0, 4194303),
            (-4194303.0, -4194303),
        ];
        for (x, want) in cases {
            assert_eq!(nearest_int(x), want, "nearest_int({x})");
        }
    }

    #[test]
    fn best_index_picks_nearest_level() {
        let v = super::super::blocks::KVALUES_IQ4NL;
        assert_eq!(best_index_int8(&v, -200.0), 0);
        assert_eq!(best_index_int8(&v, 200.0), 15);
        assert_eq!(best_index_int8(&v, 0.0), 8);
        assert_eq!(best_index_int8(&v, -5.0), 7);
        // -4.5 is exactly between -10 and 1: the upper level wins.
        assert_eq!(best_index_int8(&v, -4.5), 8);
        for (i, &q) in v.iter().enumerate() {
            assert_eq!(best_index_int8(&v, f32::from(q)), i);
        }
    }
}
