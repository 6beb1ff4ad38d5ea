//! The random numbers of the policies that draw them (LeCaR, CACHEUS): Lehmer's multiplicative generator with a
//! 128-bit state (D. H. Lemire's `lehmer64`), the one behind `next_rand()` in the libCacheSim that libcachesim
//! 0.3.5 is built from: a thread-local `__uint128_t g_lehmer64_state` that starts at `0xdeadbeef` in every thread
//! and that `set_rand_seed(s)` sets to `s` (the wheel's `.tdata` section and its `set_rand_seed`, read from the
//! binary). A policy seeded with the same state makes the same draws. Each policy owns its generator: no global
//! state, no clock, so the same trace and configuration give bit-identical results.

/// `x ← x · 0xda942042e4dd58b5 (mod 2¹²⁸)`; a draw is the new state's high 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lehmer64(u128);

impl Lehmer64 {
    const MUL: u128 = 0xda94_2042_e4dd_58b5;

    /// libCacheSim's initial state.
    pub const LIBCACHESIM_SEED: u64 = 0xdead_beef;

    /// A generator whose state is `seed`, as `set_rand_seed(seed)` leaves libCacheSim's (0 makes every draw 0).
    pub const fn new(seed: u64) -> Self {
        Lehmer64(seed as u128)
    }

    /// The next draw, advancing the state.
    #[inline]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(Self::MUL);
        (self.0 >> 64) as u64
    }

    /// The draw [`Lehmer64::next`] would return, without advancing.
    #[inline]
    pub const fn peek(&self) -> u64 {
        (self.0.wrapping_mul(Self::MUL) >> 64) as u64
    }

    /// `(draw mod 100) / 100`, the expert choice of LeCaR and CACHEUS: the LRU expert's victim is taken when it is
    /// below LRU's weight.
    #[inline]
    pub fn percent(draw: u64) -> f64 {
        (draw % 100) as f64 / 100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_like_libcachesim() {
        // The first draws of a fresh libcachesim 0.3.5 process, observed through LeCaR's `to_evict` (x mod 100 < 50
        // picks LRU's victim, "R"), match these.
        let mut g = Lehmer64::new(Lehmer64::LIBCACHESIM_SEED);
        let bits: String = (0..24).map(|_| if g.next() % 100 < 50 { 'R' } else { 'F' }).collect();
        assert_eq!(bits, "FFRRFFRFRRRFFFFRRFRFFRFR");
        let mut g = Lehmer64::new(7);
        let p = g.peek();
        assert_eq!(g.next(), p);
        assert_ne!(g.peek(), p);
        assert_eq!(Lehmer64::percent(1234), 0.34);
        assert_eq!(Lehmer64::new(0).next(), 0);
    }
}
