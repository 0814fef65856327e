//! The steps of the sampler chain, each with the semantics of the llama.cpp sampler of the same
//! name (`src/llama-sampling.cpp`): they filter and rescale a list of candidate tokens, and `dist`
//! (or a Mirostat step) picks one.
//!
//! Where llama.cpp leaves the order of equal logits unspecified (`std::partial_sort`), we put the
//! lower token id first, so every result is fully determined.

use std::cmp::Ordering;

use super::rng::Mt19937;
use crate::TokenId;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub id: TokenId,
    pub logit: f32,
    /// Probability, valid after a step that computes a softmax.
    pub p: f32,
}

/// A candidate list, as `llama_token_data_array`: `sorted` means by logit, largest first.
#[derive(Clone, Debug, Default)]
pub struct Candidates {
    pub data: Vec<Candidate>,
    pub sorted: bool,
}

/// NaN logits (a broken model) rank below everything, so the order is total.
fn key(x: f32) -> f32 {
    if x.is_nan() {
        f32::NEG_INFINITY
    } else {
        x
    }
}

/// Largest logit first; among equal logits, the lower id first.
pub fn by_logit_desc(a: &Candidate, b: &Candidate) -> Ordering {
    key(b.logit)
        .partial_cmp(&key(a.logit))
        .unwrap_or(Ordering::Equal)
        .then(a.id.cmp(&b.id))
}

/// Sorts the `n` best candidates to the front of `v` (largest logit first) and drops the rest.
pub fn keep_top_sorted(v: &mut Vec<Candidate>, n: usize) {
    let n = n.min(v.len());
    if n == 0 {
        v.clear();
        return;
    }
    if n < v.len() {
        v.select_nth_unstable_by(n - 1, by_logit_desc);
        v.truncate(n);
    }
    v.sort_unstable_by(by_logit_desc);
}

/// The `m` largest logits of `logits` as candidates, largest first (ties: lower id first).
///
/// One pass over the vocabulary that only looks closely at blocks holding a logit above the
/// current m-th best, so it costs little more than reading the logits once; no sort of the whole
/// vocabulary. (llama.cpp gets the same effect with its bucket sort.)
pub fn select_top(logits: &[f32], m: usize, out: &mut Vec<Candidate>) {
    out.clear();
    let m = m.min(logits.len());
    if m == 0 {
        return;
    }
    let cand = |i: usize, logit: f32| Candidate {
        id: i as TokenId,
        logit,
        p: 0.0,
    };
    out.extend(logits[..m].iter().enumerate().map(|(i, &l)| cand(i, l)));
    if m == logits.len() {
        out.sort_unstable_by(by_logit_desc);
        return;
    }
    // Every token scanned later has a higher id than everything in `out`, so it can only displace
    // the m-th best if its logit is strictly greater (a tie goes to the lower id).
    let mut threshold = out.iter().map(|c| key(c.logit)).fold(f32::INFINITY, f32::min);
    let compact_at = (2 * m).max(m + 256);

    const BLOCK: usize = 32;
    let rest = &logits[m..];
    let blocks = rest.chunks_exact(BLOCK);
    let tail = blocks.remainder();
    let tail_start = m + rest.len() - tail.len();
    let scan = |base: usize, block: &[f32], out: &mut Vec<Candidate>, threshold: &mut f32| {
        let t = *threshold;
        let mut any = false;
        for &x in block {
            any |= x > t;
        }
        if !any {
            return;
        }
        for (j, &x) in block.iter().enumerate() {
            if x > t {
                out.push(cand(base + j, x));
            }
        }
        if out.len() >= compact_at {
            out.select_nth_unstable_by(m - 1, by_logit_desc);
            out.truncate(m);
            *threshold = key(out[m - 1].logit);
        }
    };
    for (bi, block) in blocks.enumerate() {
        scan(m + bi * BLOCK, block, out, &mut threshold);
    }
    scan(tail_start, tail, out, &mut threshold);
    keep_top_sorted(out, m);
}

/// All tokens as candidates, in id order (unsorted), skipping those masked out with -inf when
/// `skip_neg_inf` (a grammar's rejections: they could never be picked).
pub fn all_candidates(logits: &[f32], skip_neg_inf: bool, out: &mut Vec<Candidate>) {
    out.clear();
    out.reserve(logits.len());
    for (i, &l) in logits.iter().enumerate() {
        if skip_neg_inf && l == f32::NEG_INFINITY {
            continue;
        }
        out.push(Candidate {
            id: i as TokenId,
            logit: l,
            p: 0.0,
        });
    }
}

/// `llama_sampler_softmax_impl`: probabilities from the logits (f32, max subtracted), optionally
/// sorting first.
pub fn softmax(c: &mut Candidates, do_sort: bool) {
    if c.data.is_empty() {
        return;
    }
    if do_sort && !c.sorted {
        c.data.sort_unstable_by(by_logit_desc);
        c.sorted = true;
    }
    let max_l = if c.sorted {
        c.data[0].logit
    } else {
        c.data.iter().fold(f32::NEG_INFINITY, |m, x| m.max(x.logit))
    };
    let mut sum = 0.0f32;
    for x in c.data.iter_mut() {
        x.p = (x.logit - max_l).exp();
        sum += x.p;
    }
    for x in c.data.iter_mut() {
        x.p /= sum;
    }
}

/// `top-k`: keep the `k` largest logits (k <= 0 keeps all).
pub fn top_k(c: &mut Candidates, k: i32) {
    if k <= 0 {
        return;
    }
    let k = (k as usize).min(c.data.len());
    if !c.sorted {
        keep_top_sorted(&mut c.data, k);
        c.sorted = true;
    }
    c.data.truncate(k);
}

/// `typical`: locally typical sampling (Meister et al.).
pub fn typical(c: &mut Candidates, p: f32, min_keep: usize) {
    if p >= 1.0 || c.data.is_empty() {
        return;
    }
    softmax(c, true);
    let entropy: f32 = c.data.iter().map(|x| -x.p * x.p.ln()).sum();
    let shifted: Vec<f32> = c.data.iter().map(|x| (-x.p.ln() - entropy).abs()).collect();
    let mut idx: Vec<usize> = (0..c.data.len()).collect();
    idx.sort_by(|&a, &b| shifted[a].partial_cmp(&shifted[b]).unwrap_or(Ordering::Equal));
    let mut cum = 0.0f32;
    let mut last = idx.len();
    for (i, &j) in idx.iter().enumerate() {
        cum += c.data[j].p;
        if cum > p && (min_keep == 0 || i + 1 >= min_keep) {
            last = i + 1;
            break;
        }
    }
    c.data = idx[..last].iter().map(|&j| c.data[j]).collect();
    c.sorted = false;
}

/// `top-p` (nucleus): keep the smallest prefix (by probability) whose sum reaches `p`.
pub fn top_p(c: &mut Candidates, p: f32, min_keep: usize) {
    if p >= 1.0 || c.data.is_empty() {
        return;
    }
    softmax(c, false);
    if !c.sorted {
        nucleus_sort(c, p, min_keep);
    }
    let mut cum = 0.0f32;
    let mut last = c.data.len();
    for (i, x) in c.data.iter().enumerate() {
        cum += x.p;
        if cum >= p && i + 1 >= min_keep {
            last = i + 1;
            break;
        }
    }
    c.data.truncate(last);
}

/// Puts the candidates top-p needs first and in order, without sorting the whole list: a
/// histogram of the probability mass over logit buckets finds the bucket where the cumulative
/// mass crosses `p`; only the candidates in that bucket and above (plus one bucket of margin for
/// rounding) are sorted. Falls back to a full sort if that was not enough. The result equals a
/// full sort's prefix, so top-p keeps exactly what llama.cpp keeps.
fn nucleus_sort(c: &mut Candidates, p: f32, min_keep: usize) {
    const BUCKETS: usize = 1024;
    const RANGE: f32 = 32.0; // logits further below the best hold < e^-32 of its mass each
    let max_l = c.data.iter().fold(f32::NEG_INFINITY, |m, x| m.max(x.logit));
    let scale = BUCKETS as f32 / RANGE;
    let bucket = |l: f32| -> usize {
        let b = (max_l - l) * scale;
        if b.is_nan() || b >= (BUCKETS - 1) as f32 {
            BUCKETS - 1
        } else {
            b.max(0.0) as usize
        }
    };
    let mut mass = vec![0f64; BUCKETS];
    let mut count = vec![0usize; BUCKETS];
    for x in &c.data {
        let b = bucket(x.logit);
        mass[b] += x.p as f64;
        count[b] += 1;
    }
    let mut cum = 0.0f64;
    let mut kept = 0usize;
    let mut last_bucket = BUCKETS - 1;
    for b in 0..BUCKETS {
        cum += mass[b];
        kept += count[b];
        if cum >= p as f64 && kept >= min_keep {
            last_bucket = (b + 1).min(BUCKETS - 1);
            break;
        }
    }
    if last_bucket < BUCKETS - 1 {
        let mut head: Vec<Candidate> = c
            .data
            .iter()
            .copied()
            .filter(|x| bucket(x.logit) <= last_bucket)
            .collect();
        head.sort_unstable_by(by_logit_desc);
        if reaches(&head, p, min_keep) {
            c.data = head;
            c.sorted = true;
            return;
        }
    }
    c.data.sort_unstable_by(by_logit_desc);
    c.sorted = true;
}

fn reaches(sorted: &[Candidate], p: f32, min_keep: usize) -> bool {
    let mut cum = 0.0f32;
    for (i, x) in sorted.iter().enumerate() {
        cum += x.p;
        if cum >= p && i + 1 >= min_keep {
            return true;
        }
    }
    false
}

/// `min-p`: keep tokens with `p >= min_p * p_max`, i.e. `logit >= max_logit + ln(min_p)`.
pub fn min_p(c: &mut Candidates, p: f32, min_keep: usize) {
    if p <= 0.0 || c.data.is_empty() {
        return;
    }
    if !c.sorted {
        let max_logit = c.data.iter().fold(-f32::MAX, |m, x| m.max(x.logit));
        let min_logit = max_logit + p.ln();
        let kept: Vec<Candidate> = c.data.iter().copied().filter(|x| x.logit >= min_logit).collect();
        if !kept.is_empty() && kept.len() >= min_keep {
            c.data = kept;
            return;
        }
        c.data.sort_unstable_by(by_logit_desc);
        c.sorted = true;
    }
    let min_logit = c.data[0].logit + p.ln();
    let mut i = 1;
    while i < c.data.len() {
        if c.data[i].logit < min_logit && i >= min_keep {
            break;
        }
        i += 1;
    }
    c.data.truncate(i);
}

/// `temp`: divide the logits by `t`; `t <= 0` keeps only the first largest logit (greedy).
pub fn temperature(c: &mut Candidates, t: f32) {
    if c.data.is_empty() {
        return;
    }
    if t <= 0.0 {
        let mut max_i = 0;
        let mut max_l = c.data[0].logit;
        for i in 1..c.data.len() {
            if c.data[i].logit > max_l {
                c.data[max_i].logit = f32::NEG_INFINITY;
                max_i = i;
                max_l = c.data[i].logit;
            } else {
                c.data[i].logit = f32::NEG_INFINITY;
            }
        }
        return;
    }
    for x in c.data.iter_mut() {
        x.logit /= t;
    }
}

/// `dist`: draw from the softmax of the candidates. Returns an index into `c.data`.
///
/// As llama.cpp: f32 probabilities summed in f64, one uniform double `u`, the first candidate
/// where the running sum reaches `u * sum`; a single candidate is picked without a draw.
pub fn dist(c: &mut Candidates, rng: &mut Mt19937) -> Option<usize> {
    match c.data.len() {
        0 => return None,
        1 => {
            c.data[0].p = 1.0;
            return Some(0);
        }
        _ => {}
    }
    let max_l = if c.sorted {
        c.data[0].logit
    } else {
        c.data.iter().fold(f32::NEG_INFINITY, |m, x| m.max(x.logit))
    };
    let mut sum = 0.0f64;
    for x in c.data.iter_mut() {
        x.p = (x.logit - max_l).exp();
        sum += x.p as f64;
    }
    let target = sum * rng.next_f64();
    let mut run = 0.0f64;
    let mut selected = None;
    for (i, x) in c.data.iter_mut().enumerate() {
        if selected.is_none() {
            run += x.p as f64;
            // `x.p > 0`: a draw of exactly 0 must not pick an impossible (masked) token.
            if run >= target && x.p > 0.0 {
                selected = Some(i);
            }
        }
        x.p = (x.p as f64 / sum) as f32;
    }
    Some(selected.unwrap_or(c.data.len() - 1))
}

/// `std::discrete_distribution` as libstdc++ draws it (Mirostat uses it): cumulative
/// probabilities in f64 normalised by their sum, the last forced to 1, and the first index whose
/// cumulative value is >= a uniform double. With fewer than two weights it returns 0 without
/// drawing, which keeps the generator in step with llama.cpp's.
pub fn discrete(c: &Candidates, rng: &mut Mt19937) -> usize {
    if c.data.len() < 2 {
        return 0;
    }
    let sum: f64 = c.data.iter().map(|x| x.p as f64).sum();
    let u = rng.next_f64();
    let mut cum = 0.0f64;
    let last = c.data.len().saturating_sub(1);
    for (i, x) in c.data.iter().enumerate() {
        cum += x.p as f64 / sum;
        if i == last || cum >= u {
            return i;
        }
    }
    last
}

/// Mirostat 1.0 (`llama_sampler_mirostat_apply`, m = 100). Returns an index into `c.data`.
pub fn mirostat_v1(
    c: &mut Candidates,
    rng: &mut Mt19937,
    mu: &mut f32,
    tau: f32,
    eta: f32,
    n_vocab: usize,
) -> Option<usize> {
    const M: usize = 100;
    if c.data.is_empty() {
        return None;
    }
    // Probabilities over every candidate, but only the head needs to be in order.
    softmax(c, false);
    let head = M.min(c.data.len());
    if !c.sorted {
        sort_head(&mut c.data, head);
    }
    let mut sum_ti_bi = 0.0f32;
    let mut sum_ti_sq = 0.0f32;
    let mut i = 0;
    while i < M - 1 && i + 1 < c.data.len() {
        let t_i = ((i + 2) as f32 / (i + 1) as f32).ln();
        let b_i = (c.data[i].p / c.data[i + 1].p).ln();
        sum_ti_bi += t_i * b_i;
        sum_ti_sq += t_i * t_i;
        i += 1;
    }
    let s_hat = sum_ti_bi / sum_ti_sq;
    let epsilon_hat = s_hat - 1.0;
    let k = ((epsilon_hat * 2f32.powf(*mu)) / (1.0 - (n_vocab as f32).powf(-epsilon_hat))).powf(1.0 / s_hat);
    // C++ `int(k)`; NaN and out-of-range values end up at 1 either way.
    let k = (k as i32).max(1);
    let k = (k as usize).min(c.data.len());
    if !c.sorted {
        sort_head(&mut c.data, k);
    }
    c.data.truncate(k);
    c.sorted = true;
    softmax(c, true);
    let idx = discrete(c, rng);
    let observed = -c.data[idx].p.log2();
    *mu -= eta * (observed - tau);
    Some(idx)
}

/// Mirostat 2.0 (`llama_sampler_mirostat_v2_apply`). Returns an index into `c.data`.
pub fn mirostat_v2(c: &mut Candidates, rng: &mut Mt19937, mu: &mut f32, tau: f32, eta: f32) -> Option<usize> {
    if c.data.is_empty() {
        return None;
    }
    softmax(c, false);
    // Keep the tokens whose surprise is at most mu: a prefix of the sorted list.
    let limit = *mu;
    let mut kept: Vec<Candidate> = c.data.iter().copied().filter(|x| -x.p.log2() <= limit).collect();
    if kept.is_empty() {
        let best = c.data.iter().copied().min_by(by_logit_desc);
        kept.extend(best);
    }
    kept.sort_unstable_by(by_logit_desc);
    c.data = kept;
    c.sorted = true;
    softmax(c, true);
    let idx = discrete(c, rng);
    let observed = -c.data[idx].p.log2();
    *mu -= eta * (observed - tau);
    Some(idx)
}

/// Sorts the `n` best candidates to the front, leaving the rest after them in any order.
fn sort_head(v: &mut [Candidate], n: usize) {
    let n = n.min(v.len());
    if n == 0 {
        return;
    }
    if n < v.len() {
        v.select_nth_unstable_by(n - 1, by_logit_desc);
    }
    v[..n].sort_unstable_by(by_logit_desc);
}
