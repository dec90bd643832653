//! Random streams: a fast generator for message workloads, and independent streams per node.
//!
//! Two generators serve two needs. The simulator draws from `rand`'s `StdRng` (ChaCha12), as it
//! always has, so that a seed keeps giving the same files. Message workloads for tests and
//! benchmarks draw millions of values per second, so they use [`SplitMix64`] (Steele, Lea and
//! Flood 2014): one addition and three multiply–xorshift steps per 64 bits, statistically sound
//! for simulation (it passes BigCrush), not for cryptography. It implements `rand`'s `RngCore`,
//! so the same distributions ([`network`](crate::network)) serve both.

use rand::SeedableRng;
use rand::rngs::StdRng;

/// SplitMix64's increment: the golden ratio as a 64-bit fraction.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function: a bijection of 64 bits with full avalanche.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A small, fast, deterministic generator (SplitMix64).
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator that gives the same sequence for the same seed.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn bits(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix(self.0)
    }

    /// Uniform in [0, 1): the top 53 bits, as `rand`'s `random::<f64>()` takes them.
    #[inline]
    pub fn unit(&mut self) -> f64 {
        (self.bits() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n) by one widening multiplication (Lemire), without the rejection step:
    /// a bias below n/2⁶⁴, far under anything a test can see, for no branch.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.bits() as u128 * n as u128) >> 64) as u64
    }
}

impl rand::RngCore for SplitMix64 {
    #[inline]
    fn next_u32(&mut self) -> u32 {
        (self.bits() >> 32) as u32
    }

    #[inline]
    fn next_u64(&mut self) -> u64 {
        self.bits()
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        rand::rand_core::impls::fill_bytes_via_next(self, dst)
    }
}

/// A random stream of its own for node `k` and `purpose`, derived from `seed` by SplitMix64
/// steps: what a node's kernel models draw leaves the simulation's main stream (traffic, and
/// `--clock linear`'s clocks) exactly as it was before those models existed.
pub fn substream(seed: u64, k: usize, purpose: u64) -> StdRng {
    let mut x = seed ^ 0x5349_4d55_4c41_5445; // "SIMULATE"
    for v in [k as u64, purpose] {
        x = mix(x.wrapping_add(v.wrapping_add(1).wrapping_mul(GOLDEN)));
    }
    StdRng::seed_from_u64(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_gives_the_reference_sequence() {
        // The first outputs for seed 0 of the reference implementation (Vigna's splitmix64.c).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.bits(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.bits(), 0x6E78_9E6A_A1B9_65F4);
        assert_eq!(r.bits(), 0x06C4_5D18_8009_454F);
    }

    #[test]
    fn unit_and_below_stay_in_range_and_cover_it() {
        let mut r = SplitMix64::new(42);
        let mut seen = [0u32; 10];
        for _ in 0..100_000 {
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
            seen[r.below(10) as usize] += 1;
        }
        assert!(
            seen.iter().all(|&n| (9_000..11_000).contains(&n)),
            "{seen:?}"
        );
    }

    #[test]
    fn substreams_differ_per_node_and_purpose() {
        use rand::Rng;
        let draw = |k, purpose| substream(1, k, purpose).random::<u64>();
        assert_ne!(draw(0, 1), draw(1, 1));
        assert_ne!(draw(1, 1), draw(1, 2));
        assert_eq!(draw(3, 2), draw(3, 2));
    }
}
