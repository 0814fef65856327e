//! Tests of the sampler chain: hand-computed distributions per step, statistics of the draw,
//! determinism, and token-for-token agreement with llama.cpp's own samplers.

use super::rng::Mt19937;
use super::steps::{self, Candidate, Candidates};
use super::{Sampler, SamplingOptions};
use crate::TokenId;

fn cands(logits: &[f32]) -> Candidates {
    Candidates {
        data: logits
            .iter()
            .enumerate()
            .map(|(i, &l)| Candidate {
                id: i as TokenId,
                logit: l,
                p: 0.0,
            })
            .collect(),
        sorted: false,
    }
}

fn ids(c: &Candidates) -> Vec<TokenId> {
    c.data.iter().map(|x| x.id).collect()
}

fn softmax64(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
    let e: Vec<f64> = logits.iter().map(|&l| (l as f64 - max).exp()).collect();
    let s: f64 = e.iter().sum();
    e.iter().map(|x| x / s).collect()
}

#[test]
fn top_k_keeps_the_k_largest_sorted() {
    let mut c = cands(&[0.1, 2.0, -1.0, 3.0, 2.0]);
    steps::top_k(&mut c, 3);
    assert_eq!(ids(&c), vec![3, 1, 4]); // the tie 1/4 goes to the lower id
    let mut c = cands(&[0.1, 2.0]);
    steps::top_k(&mut c, 0);
    assert_eq!(c.data.len(), 2);
    assert!(!c.sorted);
}

#[test]
fn top_p_keeps_the_smallest_prefix_reaching_p() {
    // Probabilities 0.5, 0.25, 0.125, 0.125 (logits ln of them).
    let logits = [0.5f32.ln(), 0.25f32.ln(), 0.125f32.ln(), 0.125f32.ln()];
    let mut c = cands(&logits);
    steps::top_p(&mut c, 0.7, 0);
    assert_eq!(ids(&c), vec![0, 1]); // 0.5 < 0.7 <= 0.75
    let mut c = cands(&logits);
    steps::top_p(&mut c, 0.75, 0);
    assert_eq!(ids(&c), vec![0, 1]);
    let mut c = cands(&logits);
    steps::top_p(&mut c, 0.76, 0);
    assert_eq!(ids(&c), vec![0, 1, 2]);
    let mut c = cands(&logits);
    steps::top_p(&mut c, 0.4, 0);
    assert_eq!(ids(&c), vec![0]);
}

#[test]
fn top_p_on_a_large_unsorted_list() {
    // 5000 candidates: the partial-sort shortcut must give the same set as a full sort.
    let logits: Vec<f32> = (0..5000).map(|i| ((i * 37) % 5000) as f32 / 500.0).collect();
    for p in [0.1, 0.5, 0.9, 0.999] {
        let mut c = cands(&logits);
        steps::top_p(&mut c, p, 0);
        let probs = softmax64(&logits);
        let mut order: Vec<usize> = (0..5000).collect();
        order.sort_by(|&a, &b| probs[b].partial_cmp(&probs[a]).unwrap().then(a.cmp(&b)));
        let mut cum = 0.0;
        let mut want = vec![];
        for &i in &order {
            cum += probs[i];
            want.push(i as TokenId);
            if cum >= p as f64 {
                break;
            }
        }
        assert_eq!(ids(&c), want, "p = {p}");
    }
}

#[test]
fn min_p_drops_tokens_below_a_fraction_of_the_best() {
    // p = 0.4, 0.3, 0.2, 0.1: min_p 0.5 keeps p >= 0.2.
    let logits = [0.4f32.ln(), 0.3f32.ln(), 0.2f32.ln(), 0.1f32.ln()];
    let mut c = cands(&logits);
    steps::min_p(&mut c, 0.5, 0);
    assert_eq!(ids(&c), vec![0, 1, 2]);
    let mut c = cands(&logits);
    steps::min_p(&mut c, 0.76, 0);
    assert_eq!(ids(&c), vec![0]);
    let mut c = cands(&logits);
    steps::min_p(&mut c, 0.0, 0);
    assert_eq!(c.data.len(), 4);
}

#[test]
fn typical_keeps_tokens_near_the_entropy() {
    // p = 0.5, 0.25, 0.125, 0.125: entropy H = 1.2130 nats; |-ln p - H| = 0.520, 0.173, 0.866,
    // 0.866. Sorted by that: [1, 0, 2, 3]; cumulative 0.25, 0.75, ... so p = 0.5 keeps [1, 0].
    let logits = [0.5f32.ln(), 0.25f32.ln(), 0.125f32.ln(), 0.125f32.ln()];
    let mut c = cands(&logits);
    steps::typical(&mut c, 0.5, 0);
    assert_eq!(ids(&c), vec![1, 0]);
    let mut c = cands(&logits);
    steps::typical(&mut c, 0.2, 0);
    assert_eq!(ids(&c), vec![1]);
}

#[test]
fn temperature_scales_and_zero_is_greedy() {
    let mut c = cands(&[1.0, 4.0, -2.0]);
    steps::temperature(&mut c, 2.0);
    assert_eq!(
        c.data.iter().map(|x| x.logit).collect::<Vec<_>>(),
        vec![0.5, 2.0, -1.0]
    );
    let mut c = cands(&[1.0, 4.0, 4.0, -2.0]);
    steps::temperature(&mut c, 0.0);
    let l: Vec<f32> = c.data.iter().map(|x| x.logit).collect();
    assert_eq!(
        l,
        vec![f32::NEG_INFINITY, 4.0, f32::NEG_INFINITY, f32::NEG_INFINITY]
    );
}

#[test]
fn greedy_picks_the_lowest_id_among_equal_maxima() {
    let mut logits = vec![0.0f32; 1000];
    logits[700] = 5.0;
    logits[300] = 5.0;
    logits[900] = 5.0;
    for top_k in [0, 1, 40] {
        let opts = SamplingOptions {
            top_k,
            ..SamplingOptions::greedy()
        };
        let mut s = Sampler::new(&opts, 1000, 4096).unwrap();
        assert_eq!(s.sample(&logits).unwrap(), 300, "top_k {top_k}");
    }
}

#[test]
fn temperature_one_matches_the_softmax() {
    // Sampling with every filter off must reproduce the softmax: 400k draws, each frequency
    // within 4.5 standard deviations of its probability.
    let logits = [1.0f32, 0.0, 2.5, -1.0, 0.5, 2.0, -3.0, 1.5];
    let probs = softmax64(&logits);
    let opts = SamplingOptions {
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
        seed: 2024,
        ..SamplingOptions::default()
    };
    let mut s = Sampler::new(&opts, logits.len(), 4096).unwrap();
    const N: usize = 400_000;
    let mut counts = [0usize; 8];
    for _ in 0..N {
        counts[s.sample(&logits).unwrap() as usize] += 1;
    }
    for (i, (&c, &p)) in counts.iter().zip(&probs).enumerate() {
        let f = c as f64 / N as f64;
        let sd = (p * (1.0 - p) / N as f64).sqrt();
        assert!(
            (f - p).abs() < 4.5 * sd,
            "token {i}: frequency {f}, probability {p}"
        );
    }
}

#[test]
fn temperature_sharpens_as_the_softmax_of_scaled_logits() {
    let logits = [1.0f32, 0.0, 2.0, -1.0];
    let scaled: Vec<f32> = logits.iter().map(|l| l / 0.5).collect();
    let probs = softmax64(&scaled);
    let opts = SamplingOptions {
        temperature: 0.5,
        top_k: 0,
        top_p: 1.0,
        seed: 9,
        ..SamplingOptions::default()
    };
    let mut s = Sampler::new(&opts, 4, 4096).unwrap();
    const N: usize = 200_000;
    let mut counts = [0usize; 4];
    for _ in 0..N {
        counts[s.sample(&logits).unwrap() as usize] += 1;
    }
    for (&c, &p) in counts.iter().zip(&probs) {
        let sd = (p * (1.0 - p) / N as f64).sqrt();
        assert!((c as f64 / N as f64 - p).abs() < 4.5 * sd);
    }
}

#[test]
fn dist_follows_the_cumulative_sum() {
    // p = 0.1, 0.2, 0.3, 0.4; u from the generator decides by cumulative sums 0.1, 0.3, 0.6, 1.
    let logits = [0.1f32.ln(), 0.2f32.ln(), 0.3f32.ln(), 0.4f32.ln()];
    let mut rng = Mt19937::new(77);
    let mut shadow = Mt19937::new(77);
    for _ in 0..1000 {
        let mut c = cands(&logits);
        let got = steps::dist(&mut c, &mut rng).unwrap();
        let u = shadow.next_f64();
        let want = [0.1, 0.3, 0.6, 1.0]
            .iter()
            .position(|&cum| cum >= u + 1e-6)
            .unwrap_or(3);
        let near_edge = [0.1, 0.3, 0.6].iter().any(|&cum| (cum - u).abs() < 1e-6);
        if !near_edge {
            assert_eq!(got, want, "u = {u}");
        }
    }
}

#[test]
fn mirostat_v1_hand_computed() {
    // A Zipf distribution p_i ~ i^-s with s = 1.5 over 1000 tokens: mirostat's estimate s_hat is
    // exactly s, so k = (eps * 2^mu / (1 - N^-eps))^(1/s) with eps = s - 1.
    let n = 1000usize;
    let s = 1.5f64;
    let logits: Vec<f32> = (1..=n).map(|i| (-s * (i as f64).ln()) as f32).collect();
    let (tau, eta) = (5.0f32, 0.1f32);
    let mut mu = 2.0 * tau;
    let eps = s - 1.0;
    let k = ((eps * 2f64.powf(mu as f64)) / (1.0 - (n as f64).powf(-eps))).powf(1.0 / s);
    let k = k as usize; // (512 / 0.96838)^(2/3) = 65.4
    assert_eq!(k, 65);
    let mut c = cands(&logits);
    let mut rng = Mt19937::new(1);
    let idx = steps::mirostat_v1(&mut c, &mut rng, &mut mu, tau, eta, n).unwrap();
    assert_eq!(c.data.len(), k);
    assert_eq!(ids(&c), (0..k as TokenId).collect::<Vec<_>>());
    // The pick's probability renormalised over the k survivors, and the update of mu.
    let z: f64 = (1..=k).map(|i| (i as f64).powf(-s)).sum();
    let p = ((idx + 1) as f64).powf(-s) / z;
    let want_mu = 10.0 - 0.1 * (-p.log2() - 5.0);
    assert!((mu as f64 - want_mu).abs() < 1e-4, "mu {mu}, want {want_mu}");
}

#[test]
fn mirostat_v2_hand_computed() {
    // p = 0.5, 0.25, 0.125, 0.0625, 0.0625: surprises 1, 2, 3, 4, 4 bits. With mu = 2.5 only the
    // first two survive, renormalised to 2/3 and 1/3.
    let logits: Vec<f32> = [0.5f32, 0.25, 0.125, 0.0625, 0.0625]
        .iter()
        .map(|p| p.ln())
        .collect();
    let mut rng = Mt19937::new(3);
    let mut shadow = Mt19937::new(3);
    let mut mu = 2.5f32;
    let mut c = cands(&logits);
    let idx = steps::mirostat_v2(&mut c, &mut rng, &mut mu, 2.0, 0.5).unwrap();
    assert_eq!(ids(&c), vec![0, 1]);
    let u = shadow.next_f64();
    let want_idx = if u <= 2.0 / 3.0 { 0 } else { 1 };
    assert_eq!(idx, want_idx);
    let p: f64 = [2.0 / 3.0, 1.0 / 3.0][idx];
    let want_mu = 2.5 - 0.5 * (-p.log2() - 2.0);
    assert!((mu as f64 - want_mu).abs() < 1e-5);
    // mu below every surprise: the best token alone.
    let mut mu = 0.1f32;
    let mut c = cands(&logits);
    let idx = steps::mirostat_v2(&mut c, &mut rng, &mut mu, 2.0, 0.5).unwrap();
    assert_eq!((ids(&c), idx), (vec![0], 0));
}

#[test]
fn same_seed_same_tokens_different_seed_different_tokens() {
    let logits: Vec<Vec<f32>> = (0..50).map(reference_logits).collect();
    let run = |seed: i64| {
        let opts = SamplingOptions {
            seed,
            temperature: 1.2,
            ..SamplingOptions::default()
        };
        let mut s = Sampler::new(&opts, REF_VOCAB, 4096).unwrap();
        logits
            .iter()
            .map(|l| {
                let t = s.sample(l).unwrap();
                s.accept(t).unwrap();
                t
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(42), run(42));
    assert_ne!(run(42), run(43));
    // -1 draws a fresh seed each time.
    let a = Sampler::new(&SamplingOptions::default(), 10, 10).unwrap().seed();
    let b = Sampler::new(&SamplingOptions::default(), 10, 10).unwrap().seed();
    let c = Sampler::new(&SamplingOptions::default(), 10, 10).unwrap().seed();
    assert!(a != b || b != c);
    let fixed = SamplingOptions {
        seed: 5,
        ..SamplingOptions::default()
    };
    assert_eq!(Sampler::new(&fixed, 10, 10).unwrap().seed(), 5);
}

#[test]
fn bad_options_and_inputs_are_errors() {
    let bad = [
        SamplingOptions {
            mirostat: 3,
            ..SamplingOptions::default()
        },
        SamplingOptions {
            repeat_last_n: -2,
            ..SamplingOptions::default()
        },
        SamplingOptions {
            temperature: f32::NAN,
            ..SamplingOptions::default()
        },
    ];
    for o in bad {
        assert!(Sampler::new(&o, 10, 10).is_err(), "{o:?}");
    }
    let mut s = Sampler::new(&SamplingOptions::default(), 10, 10).unwrap();
    assert!(s.sample(&[0.0; 9]).is_err());
    assert!(s.accept(10).is_err());
}

#[test]
fn repeat_last_n_minus_one_covers_the_context() {
    let opts = SamplingOptions {
        repeat_last_n: -1,
        repeat_penalty: 100.0,
        ..SamplingOptions::greedy()
    };
    let mut s = Sampler::new(&opts, 3, 1000).unwrap();
    s.accept_prompt(&[0]);
    for _ in 0..500 {
        s.accept(2).unwrap();
    }
    // Token 0 was seen 501 tokens ago: still inside a 1000-token window, so still penalised.
    assert_eq!(s.sample(&[10.0, 1.0, -50.0]).unwrap(), 1);
}

// --- agreement with llama.cpp -------------------------------------------------------------

const REF_VOCAB: usize = 4096;

/// `logits(step)` of scripts/sampling-reference.py: a permutation of 0..4096 through a strictly
/// increasing curve, every operation an exactly rounded f32 one.
fn reference_logits(step: usize) -> Vec<f32> {
    (0..REF_VOCAB as u64)
        .map(|i| {
            let a = ((i * 2_654_435_761 + step as u64 * 977) % REF_VOCAB as u64) as f32;
            let x = a / REF_VOCAB as f32;
            x * x * (20 + step % 5) as f32 - 5.0
        })
        .collect()
}

/// Tokens llama.cpp's samplers pick on `reference_logits(0..24)` (scripts/sampling-reference.py,
/// llama-cpp-python 0.3.36).
const LLAMA_CPP_REFERENCE: &[(&str, &[TokenId])] = &[
    (
        "ollama-defaults",
        &[
            804, 4089, 2611, 329, 2318, 3432, 379, 2718, 611, 2529, 2068, 940, 1458, 2818, 3790, 108, 3147,
            2686, 1629, 3372, 1615, 2729, 3351, 1490,
        ],
    ),
    (
        "plain-dist",
        &[
            875, 1284, 4011, 1866, 1126, 1081, 374, 1701, 48, 2179, 3557, 1361, 1529, 2851, 2773, 2804, 1382,
            3840, 1170, 3017, 981, 3528, 754, 3169,
        ],
    ),
    (
        "top-p-min-p-hot",
        &[
            1679, 376, 440, 958, 601, 561, 3950, 1701, 1311, 3825, 1893, 1815, 2929, 3026, 2461, 1229, 101,
            2861, 158, 2672, 73, 766, 584, 1490,
        ],
    ),
    (
        "typical",
        &[
            3533, 1393, 861, 4075, 3997, 561, 412, 2926, 3619, 3579, 3397, 3669, 3979, 3797, 1165, 1683, 801,
            2090, 366, 1551, 319, 1816, 376, 1769,
        ],
    ),
    (
        "penalties",
        &[
            175, 1743, 3207, 154, 218, 211, 3075, 2368, 3061, 1304, 3818, 3461, 479, 1172, 1936, 1229, 4093,
            1390, 3204, 1972, 1790, 2554, 1672, 3065,
        ],
    ),
    (
        "greedy-penalties",
        &[
            175, 3214, 2157, 1100, 43, 3082, 2025, 968, 4007, 2950, 1893, 836, 3875, 2818, 1761, 704, 3743,
            2686, 1629, 572, 3611, 2554, 1497, 440,
        ],
    ),
    (
        "mirostat-1",
        &[
            175, 3214, 2157, 1100, 3997, 3257, 3666, 968, 2186, 708, 3118, 1711, 1633, 1522, 640, 2454, 801,
            1390, 1733, 1376, 1090, 66, 1497, 2923,
        ],
    ),
    (
        "mirostat-2",
        &[
            3779, 688, 3207, 1762, 322, 3432, 1779, 1843, 2919, 2879, 3326, 552, 583, 1730, 3161, 1754, 205,
            4015, 1487, 3372, 2665, 3358, 3351, 1490,
        ],
    ),
];

fn reference_options(name: &str) -> SamplingOptions {
    let d = SamplingOptions::default();
    match name {
        "ollama-defaults" => SamplingOptions { seed: 42, ..d },
        "plain-dist" => SamplingOptions {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 7,
            ..d
        },
        "top-p-min-p-hot" => SamplingOptions {
            temperature: 1.5,
            top_k: 0,
            top_p: 0.5,
            min_p: 0.05,
            seed: 1234,
            ..d
        },
        "typical" => SamplingOptions {
            temperature: 1.0,
            top_k: 100,
            top_p: 1.0,
            typical_p: 0.7,
            seed: 99,
            ..d
        },
        "penalties" => SamplingOptions {
            temperature: 0.9,
            top_k: 20,
            top_p: 0.95,
            repeat_last_n: 16,
            repeat_penalty: 1.3,
            frequency_penalty: 0.2,
            presence_penalty: 0.4,
            seed: 5,
            ..d
        },
        "greedy-penalties" => SamplingOptions {
            temperature: 0.0,
            repeat_last_n: 8,
            repeat_penalty: 1.5,
            seed: 3,
            ..d
        },
        "mirostat-1" => SamplingOptions {
            mirostat: 1,
            seed: 11,
            ..d
        },
        "mirostat-2" => SamplingOptions {
            mirostat: 2,
            seed: 12,
            ..d
        },
        other => panic!("unknown reference configuration {other}"),
    }
}

#[test]
fn picks_the_same_tokens_as_llama_cpp() {
    for &(name, want) in LLAMA_CPP_REFERENCE {
        let mut s = Sampler::new(&reference_options(name), REF_VOCAB, 4096).unwrap();
        let got: Vec<TokenId> = (0..want.len())
            .map(|step| {
                let t = s.sample(&reference_logits(step)).unwrap();
                s.accept(t).unwrap();
                t
            })
            .collect();
        assert_eq!(got, want, "configuration {name}");
    }
}

#[test]
fn select_top_agrees_with_a_full_sort() {
    let logits: Vec<f32> = (0..70_000u64)
        .map(|i| ((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) % 5000) as f32 / 100.0)
        .collect();
    let mut full: Vec<Candidate> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| Candidate {
            id: i as TokenId,
            logit: l,
            p: 0.0,
        })
        .collect();
    full.sort_by(steps::by_logit_desc);
    for m in [1, 2, 40, 41, 256, 1000, 69_999, 70_000, 80_000] {
        let mut out = vec![];
        steps::select_top(&logits, m, &mut out);
        assert_eq!(out, full[..m.min(70_000)], "m = {m}");
    }
}

// --- with a grammar --------------------------------------------------------------------------

mod constrained {
    use std::sync::Arc;

    use super::super::{Sampler, SamplingOptions};
    use crate::grammar::{Grammar, Matcher, TokenKind, TokenMask, TokenVocab};
    use crate::TokenId;

    fn vocab() -> Arc<TokenVocab> {
        let mut toks: Vec<(Vec<u8>, TokenKind)> = (0..=255u8).map(|b| (vec![b], TokenKind::Text)).collect();
        for t in ["{\"", "\": ", "\", \"", "true", "12", "ab", "\"}", "é", "  "] {
            toks.push((t.as_bytes().to_vec(), TokenKind::Text));
        }
        toks.push((b"<eos>".to_vec(), TokenKind::EndOfGeneration));
        Arc::new(TokenVocab::new(toks))
    }

    struct Noise(u64);
    impl Noise {
        fn logits(&mut self, n: usize) -> Vec<f32> {
            (0..n)
                .map(|_| {
                    self.0 ^= self.0 << 13;
                    self.0 ^= self.0 >> 7;
                    self.0 ^= self.0 << 17;
                    ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 12.0 - 6.0
                })
                .collect()
        }
    }

    const GRAMMAR: &str = r#"root ::= "{" "\"" [a-z]+ "\": " ( "true" | [0-9]+ | "\"" [^"]* "\"" ) "}""#;

    #[test]
    fn every_option_set_stays_inside_the_grammar() {
        let vocab = vocab();
        let n = vocab.n_tokens();
        let eos = (n - 1) as TokenId;
        let g = Grammar::parse(GRAMMAR).unwrap();
        let opts = [
            SamplingOptions::default(),
            SamplingOptions::greedy(),
            SamplingOptions {
                top_k: 0,
                ..SamplingOptions::default()
            },
            SamplingOptions {
                top_k: 0,
                temperature: 0.0,
                ..SamplingOptions::default()
            },
            SamplingOptions {
                top_k: 3,
                min_p: 0.1,
                typical_p: 0.8,
                ..SamplingOptions::default()
            },
            SamplingOptions {
                mirostat: 1,
                ..SamplingOptions::default()
            },
            SamplingOptions {
                mirostat: 2,
                ..SamplingOptions::default()
            },
            SamplingOptions {
                repeat_penalty: 1.5,
                presence_penalty: 1.0,
                ..SamplingOptions::default()
            },
        ];
        let mut noise = Noise(99);
        for (i, o) in opts.iter().enumerate() {
            for run in 0..10 {
                let o = SamplingOptions {
                    seed: (i * 100 + run) as i64,
                    ..o.clone()
                };
                let m = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
                let mut s = Sampler::new(&o, n, 4096).unwrap().with_grammar(m).unwrap();
                let mut text = Vec::new();
                let mut ended = false;
                for _ in 0..300 {
                    let mut logits = noise.logits(n);
                    logits[eos as usize] += 3.0; // a model that wants to stop early
                    let t = s.sample(&logits).unwrap();
                    s.accept(t).unwrap();
                    if t == eos {
                        ended = true;
                        break;
                    }
                    text.extend_from_slice(vocab.token_bytes(t));
                }
                let mut check = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
                let shown = String::from_utf8_lossy(&text);
                assert!(check.accept_bytes(&text).is_ok(), "{o:?}: {shown:?}");
                if ended {
                    assert!(check.can_end(), "{o:?}: {shown:?}");
                    assert!(std::str::from_utf8(&text).is_ok());
                }
            }
        }
    }

    #[test]
    fn lazy_checks_pick_what_a_full_mask_would() {
        // The sampler checks the best tokens one by one; the reference masks every token first
        // (as llama.cpp's grammar sampler does) and runs the plain chain. Same seed, same picks.
        let vocab = vocab();
        let n = vocab.n_tokens();
        let g = Grammar::parse(GRAMMAR).unwrap();
        for (i, o) in [
            SamplingOptions::default(),
            SamplingOptions::greedy(),
            SamplingOptions {
                top_k: 5,
                top_p: 0.5,
                ..SamplingOptions::default()
            },
            SamplingOptions {
                top_k: 200,
                min_p: 0.02,
                temperature: 1.3,
                ..SamplingOptions::default()
            },
        ]
        .into_iter()
        .enumerate()
        {
            let o = SamplingOptions {
                seed: 17 + i as i64,
                ..o
            };
            let mut lazy = Sampler::new(&o, n, 4096)
                .unwrap()
                .with_grammar(Matcher::new(&g, Arc::clone(&vocab)).unwrap())
                .unwrap();
            let mut plain = Sampler::new(&o, n, 4096).unwrap();
            let mut reference = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
            let mut mask = TokenMask::new(n);
            let mut noise = Noise(5 + i as u64);
            for _ in 0..60 {
                let logits = noise.logits(n);
                reference.fill_mask(&mut mask);
                if mask.count() == 0 {
                    break;
                }
                let masked: Vec<f32> = logits
                    .iter()
                    .enumerate()
                    .map(|(t, &l)| {
                        if mask.contains(t as TokenId) {
                            l
                        } else {
                            f32::NEG_INFINITY
                        }
                    })
                    .collect();
                let want = plain.sample(&masked).unwrap();
                let got = lazy.sample(&logits).unwrap();
                assert_eq!(got, want, "{o:?}");
                lazy.accept(got).unwrap();
                plain.accept(want).unwrap();
                reference.accept(want).unwrap();
            }
        }
    }

    #[test]
    fn accepting_a_forbidden_token_is_an_error() {
        let vocab = vocab();
        let g = Grammar::parse(GRAMMAR).unwrap();
        let m = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
        let mut s = Sampler::new(&SamplingOptions::default(), vocab.n_tokens(), 64)
            .unwrap()
            .with_grammar(m)
            .unwrap();
        assert!(s.accept(b'x' as TokenId).is_err());
        assert!(s.accept(b'{' as TokenId).is_ok());
        let small = Arc::new(TokenVocab::new([(b"a".to_vec(), TokenKind::Text)]));
        let m = Matcher::new(&Grammar::parse("root ::= \"a\"").unwrap(), small).unwrap();
        assert!(Sampler::new(&SamplingOptions::default(), 10, 64)
            .unwrap()
            .with_grammar(m)
            .is_err());
    }

    /// The gate a runner sets while a model thinks: paused, the best token is picked and the
    /// grammar does not move; `OnOrExempt` adds one token to the grammar's (without moving it);
    /// text generated while paused moves it at once.
    #[test]
    fn a_gated_grammar_waits_and_lets_one_token_through() {
        use super::super::GrammarGate;
        let vocab = vocab();
        let n = vocab.n_tokens();
        let g = Grammar::parse(GRAMMAR).unwrap();
        let greedy = SamplingOptions {
            temperature: 0.0,
            ..SamplingOptions::default()
        };
        let mut logits = vec![0.0f32; n];
        logits[b'x' as usize] = 5.0;
        logits[b'{' as usize] = 1.0;
        for (gate, picked) in [
            (GrammarGate::On, b'{'),
            (GrammarGate::Paused, b'x'),
            (GrammarGate::OnOrExempt(b'x' as TokenId), b'x'),
            (GrammarGate::OnOrExempt(b'y' as TokenId), b'{'),
        ] {
            let m = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
            let mut s = Sampler::new(&greedy, n, 64).unwrap().with_grammar(m).unwrap();
            s.gate_grammar(gate);
            let t = s.sample(&logits).unwrap();
            assert_eq!(t, picked as TokenId, "{gate:?}");
            s.accept(t).unwrap();
            // The grammar is still at its start unless it took the token.
            s.gate_grammar(GrammarGate::On);
            let moved = picked == b'{';
            assert_eq!(s.accept(b'{' as TokenId).is_ok(), !moved, "{gate:?}");
        }
        let m = Matcher::new(&g, Arc::clone(&vocab)).unwrap();
        let mut s = Sampler::new(&greedy, n, 64).unwrap().with_grammar(m).unwrap();
        s.grammar_accept_text("{\"ab").unwrap();
        assert!(s.grammar_accept_text("{").is_err());
    }
}
