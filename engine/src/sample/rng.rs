//! The sampler's random numbers: a 32-bit Mersenne Twister (`std::mt19937`) and the uniform
//! doubles libstdc++ draws from it.
//!
//! llama.cpp seeds one `std::mt19937` per sampler and draws `std::uniform_real_distribution<double>`
//! (which is `std::generate_canonical<double, 53>`: two 32-bit outputs per double). Doing exactly the
//! same here means that, given the same logits, options and seed, we pick the same token as
//! llama.cpp does; and, being plain integer arithmetic, it is the same on every machine and at any
//! thread count.

const N: usize = 624;
const M: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER_MASK: u32 = 0x8000_0000;
const LOWER_MASK: u32 = 0x7fff_ffff;

/// `std::mt19937`: MT19937 with the C++ standard's seeding (`seed(s)`).
#[derive(Clone)]
pub struct Mt19937 {
    state: Box<[u32; N]>,
    index: usize,
}

impl Mt19937 {
    pub fn new(seed: u32) -> Self {
        let mut state = Box::new([0u32; N]);
        state[0] = seed;
        for i in 1..N {
            let prev = state[i - 1];
            state[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 { state, index: N }
    }

    fn twist(&mut self) {
        let s = &mut self.state;
        for i in 0..N {
            let y = (s[i] & UPPER_MASK) | (s[(i + 1) % N] & LOWER_MASK);
            let mut v = s[(i + M) % N] ^ (y >> 1);
            if y & 1 != 0 {
                v ^= MATRIX_A;
            }
            s[i] = v;
        }
        self.index = 0;
    }

    /// The next 32-bit output (`operator()`).
    pub fn next_u32(&mut self) -> u32 {
        if self.index >= N {
            self.twist();
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^= y >> 18;
        y
    }

    /// A uniform double in [0, 1), as libstdc++'s `generate_canonical<double, 53>` makes it from
    /// a 32-bit engine: `(x1 + x2 * 2^32) / 2^64`, clamped below 1.
    pub fn next_f64(&mut self) -> f64 {
        const R: f64 = 4_294_967_296.0; // 2^32
        let lo = self.next_u32() as f64;
        let hi = self.next_u32() as f64;
        let v = (lo + hi * R) / (R * R);
        if v >= 1.0 {
            // The largest double below 1 (libstdc++ uses nextafter(1, 0)).
            1.0 - f64::EPSILON / 2.0
        } else {
            v
        }
    }
}

/// A seed for a request whose `seed` is "random" (-1): different on every call, from the
/// operating system's randomness as std's hasher keys get it, mixed with the clock.
pub fn random_seed() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    let x = h.finish();
    (x ^ (x >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_cxx_standard_reference_values() {
        // [rand.predef]: the 10000th output of a default-constructed mt19937 (seed 5489).
        let mut rng = Mt19937::new(5489);
        assert_eq!(rng.next_u32(), 3_499_211_612);
        for _ in 1..9999 {
            rng.next_u32();
        }
        assert_eq!(rng.next_u32(), 4_123_659_995);
    }

    #[test]
    fn doubles_are_in_unit_interval_and_reproducible() {
        let mut a = Mt19937::new(42);
        let mut b = Mt19937::new(42);
        for _ in 0..10_000 {
            let x = a.next_f64();
            assert!((0.0..1.0).contains(&x));
            assert_eq!(x.to_bits(), b.next_f64().to_bits());
        }
        // First double for seed 42: outputs 1608637542 and 3421126067 (mt19937 reference).
        let mut c = Mt19937::new(42);
        let (lo, hi) = (c.next_u32(), c.next_u32());
        assert_eq!((lo, hi), (1_608_637_542, 3_421_126_067));
        let mut d = Mt19937::new(42);
        assert_eq!(
            d.next_f64(),
            (1_608_637_542f64 + 3_421_126_067f64 * 4_294_967_296.0) / 18_446_744_073_709_551_616.0
        );
        // What g++'s `std::uniform_real_distribution<double>(0, 1)` prints for `std::mt19937(42)`.
        assert_eq!(Mt19937::new(42).next_f64(), 0.796_542_984_287_846);
    }

    #[test]
    fn random_seeds_differ() {
        let seeds: std::collections::HashSet<u32> = (0..16).map(|_| random_seed()).collect();
        assert!(seeds.len() > 1);
    }
}
