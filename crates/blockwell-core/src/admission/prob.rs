//! `prob:P[:seed=S]`: admit a missed block with probability P.
//!
//! **Source.** libcachesim 0.3.5's `ProbAdmissioner` (`libCacheSim/cache/admission/prob.c`): a draw
//! `r mod 10⁷ < ⌊P × 10⁷⌋` per miss. The compiled libcachesim 0.3.5 (the PyPI wheel) draws `r` from a
//! Lehmer generator, `state ← state × 0xda942042e4dd58b5 mod 2¹²⁸, r = state >> 64`, whose thread-local state
//! starts at `0xdeadbeef` (its `next_rand`; the source's `mymath.h` shows an older 64-bit LCG instead). This
//! filter has its own generator of that form, so `prob:P` (seed 0) draws exactly what a fresh libcachesim
//! thread draws, miss for miss.
//!
//! **Rule.** On a demand miss, one draw; admitted if `r mod 10⁷ < ⌊P × 10⁷⌋`. Hits draw nothing.
//!
//! **Parameters.** P, 10⁻⁷ ≤ P ≤ 1, kept as ⌊P × 10⁷⌋ (libcachesim's resolution). `seed` S (default 0): the
//! generator starts at `S × 2⁶⁴ + 0xdeadbeef` (odd, as a Lehmer generator needs; seed 0 is libcachesim's start).
//!
//! **State.** 16 B (the 128-bit generator), plus the 4-byte threshold.
//!
//! **Cost.** One 128-bit multiplication and one 64-bit remainder per miss.

use super::AdmissionFilter;
use crate::lehmer::Lehmer64;

/// Draws are compared modulo this (libcachesim's `MAX_MODULE`).
pub const SCALE: u32 = 10_000_000;
/// libcachesim 0.3.5's initial generator state.
pub const LIBCACHESIM_STATE: u128 = 0xdead_beef;

/// ⌊P × 10⁷⌋ for 0 < P ≤ 1, as libcachesim computes it (a `double` product truncated to an `int`); `None` when it
/// is 0 (P below 10⁻⁷ would admit nothing).
pub fn threshold(p: f64) -> Option<u32> {
    if !(p > 0.0 && p <= 1.0) {
        return None;
    }
    let t = (p * f64::from(SCALE)) as u32;
    (t > 0).then_some(t)
}

/// `prob` admission (module docs).
#[derive(Clone, Debug)]
pub struct ProbAdmission {
    threshold: u32,
    rng: Lehmer64,
}

impl ProbAdmission {
    /// Admits a miss when its draw modulo 10⁷ is below `threshold` (10⁷ admits all); the generator starts from
    /// `seed` (module docs).
    pub fn new(threshold: u32, seed: u64) -> Self {
        ProbAdmission { threshold, rng: Lehmer64::from_state((u128::from(seed) << 64) | LIBCACHESIM_STATE) }
    }

    /// The next draw (libcachesim 0.3.5's `next_rand`).
    #[inline]
    pub fn next_draw(&mut self) -> u64 {
        self.rng.next()
    }

    /// A demand miss: admitted with probability threshold / 10⁷.
    #[inline]
    pub fn admit(&mut self, _key: u64) -> bool {
        self.next_draw() % u64::from(SCALE) < u64::from(self.threshold)
    }

    pub fn heap_bytes(&self) -> usize {
        0
    }
}

impl AdmissionFilter for ProbAdmission {
    fn admit(&mut self, key: u64) -> bool {
        ProbAdmission::admit(self, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MULTIPLIER: u128 = 0xda94_2042_e4dd_58b5;

    #[test]
    fn draws_are_libcachesims() {
        // libcachesim 0.3.5: state 0xdeadbeef, state *= 0xda942042e4dd58b5 (mod 2^128), draw = state >> 64.
        let mut p = ProbAdmission::new(1, 0);
        let first = ((0xdead_beef_u128 * MULTIPLIER) >> 64) as u64;
        assert_eq!(p.next_draw(), first);
        let mut s = 0xdead_beef_u128;
        let mut q = ProbAdmission::new(1, 0);
        for _ in 0..1000 {
            s = s.wrapping_mul(MULTIPLIER);
            assert_eq!(q.next_draw(), (s >> 64) as u64);
        }
    }

    #[test]
    fn admits_about_p_and_is_deterministic() {
        for (p, seed) in [(0.1, 0), (0.5, 7), (0.9, 123)] {
            let t = threshold(p).unwrap();
            let run = || {
                let mut a = ProbAdmission::new(t, seed);
                (0..100_000u64).map(|k| a.admit(k)).collect::<Vec<_>>()
            };
            let v = run();
            assert_eq!(v, run(), "same seed, same draws");
            let share = v.iter().filter(|&&x| x).count() as f64 / v.len() as f64;
            assert!((share - p).abs() < 0.01, "P = {p}: admitted {share}");
        }
        let a: Vec<bool> = {
            let mut a = ProbAdmission::new(threshold(0.5).unwrap(), 1);
            (0..64).map(|k| a.admit(k)).collect()
        };
        let b: Vec<bool> = {
            let mut b = ProbAdmission::new(threshold(0.5).unwrap(), 2);
            (0..64).map(|k| b.admit(k)).collect()
        };
        assert_ne!(a, b, "seeds differ");
        let mut all = ProbAdmission::new(threshold(1.0).unwrap(), 0);
        assert!((0..10_000u64).all(|k| all.admit(k)), "P = 1 admits everything");
        assert_eq!(threshold(0.0), None);
        assert_eq!(threshold(1e-8), None);
        assert_eq!(threshold(0.3), Some(3_000_000));
    }
}
