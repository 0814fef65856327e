//! RMS normalization, as ggml computes it: the sum of squares accumulated in f64, the scale
//! `1/sqrt(mean + eps)` in f32, then an element-wise product with the weight.

/// Normalizes each row of `x` (rows of `weight.len()` values) into `out`, times `weight`.
pub fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let n = weight.len();
    assert!(n > 0 && x.len().is_multiple_of(n) && out.len() == x.len());
    for (xr, yr) in x.chunks_exact(n).zip(out.chunks_exact_mut(n)) {
        let scale = rms_scale(xr, eps);
        for ((y, v), w) in yr.iter_mut().zip(xr).zip(weight) {
            *y = (v * scale) * w;
        }
    }
}

/// [`rms_norm`] in place.
pub fn rms_norm_inplace(x: &mut [f32], weight: &[f32], eps: f32) {
    let n = weight.len();
    assert!(n > 0 && x.len().is_multiple_of(n));
    for xr in x.chunks_exact_mut(n) {
        let scale = rms_scale(xr, eps);
        for (v, w) in xr.iter_mut().zip(weight) {
            *v = (*v * scale) * w;
        }
    }
}

fn rms_scale(x: &[f32], eps: f32) -> f32 {
    // Squares in f32 summed in f64, as llama.cpp does; in eight running sums rather than one,
    // so that the compiler can vectorize it (the one sequential f64 chain made `rms_norm` 1.5%
    // of a TinyLlama pp512). f64 holds 29 more bits than the f32 result: the order practically
    // never shows.
    let mut lanes = [0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|v| f64::from(v * v)).sum();
    for c in chunks {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l += f64::from(v * v);
        }
    }
    let sum = lanes.iter().sum::<f64>() + tail;
    let mean = (sum / x.len() as f64) as f32;
    1.0 / (mean + eps).sqrt()
}

/// Scales `x` to unit Euclidean length (pooled embeddings, as Ollama's /api/embed returns them).
pub fn l2_normalize(x: &mut [f32]) {
    let norm = x
        .iter()
        .map(|v| f64::from(*v) * f64::from(*v))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        let inv = (1.0 / norm) as f32;
        x.iter_mut().for_each(|v| *v *= inv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_matches_definition() {
        let x = [1.0f32, -2.0, 3.0, 0.5, 4.0, 4.0, 4.0, 4.0];
        let w = [1.0f32, 2.0, 0.5, 1.0];
        let mut out = [0f32; 8];
        rms_norm(&x, &w, 1e-6, &mut out);
        let ms = (1.0 + 4.0 + 9.0 + 0.25) / 4.0f32;
        let s = 1.0 / (ms + 1e-6f32).sqrt();
        assert!((out[1] - (-2.0 * s * 2.0)).abs() < 1e-6);
        assert!((out[4] - 1.0).abs() < 1e-5, "constant row normalizes to 1");
        let mut y = x;
        rms_norm_inplace(&mut y, &w, 1e-6);
        assert_eq!(y, out);
    }

    #[test]
    fn l2_normalize_gives_unit_length() {
        let mut v = [3.0f32, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut z = [0f32; 3];
        l2_normalize(&mut z);
        assert_eq!(z, [0.0; 3]);
    }
}
