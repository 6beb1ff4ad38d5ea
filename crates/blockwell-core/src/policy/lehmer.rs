//! Lemire's Lehmer64 generator, the generator behind libcachesim 0.3.5's `next_rand()` and
//! `hashtable_rand_obj`: a 128-bit state multiplied by `0xda942042e4dd58b5` at every draw, the draw being the
//! state's high 64 bits. libCacheSim keeps one state per thread (`g_lehmer64_state`), initially `0xdeadbeef`;
//! `set_rand_seed(s)` sets it to `s`. The random policies that replay libCacheSim's draws (LHD, Hyperbolic) each
//! own one, started at their `seed` parameter; no state is shared between instances.
//!
//! (libCacheSim's source of October 2024 still has Knuth's MMIX LCG in `next_rand()`; the compiled 0.3.5 draws
//! with Lehmer64, which is what its machine code multiplies by.)

/// The multiplier.
pub(crate) const MULT: u128 = 0xda94_2042_e4dd_58b5;

/// libCacheSim's initial state in every thread.
pub(crate) const LIBCACHESIM_SEED: u64 = 0xdead_beef;

/// The generator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lehmer64(pub(crate) u128);

impl Lehmer64 {
    /// The state `set_rand_seed(seed)` gives. A zero seed is a generator that draws 0 forever.
    pub(crate) const fn new(seed: u64) -> Self {
        Lehmer64(seed as u128)
    }

    /// The next draw (`next_rand()`).
    #[inline(always)]
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(MULT);
        (self.0 >> 64) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_the_high_half_of_the_product() {
        let mut g = Lehmer64::new(LIBCACHESIM_SEED);
        let s1 = 0xdead_beefu128 * MULT;
        assert_eq!(g.next(), (s1 >> 64) as u64);
        let s2 = s1.wrapping_mul(MULT);
        assert_eq!(g.next(), (s2 >> 64) as u64);
        // The first draws from 0xdeadbeef (computed with Python's integers).
        let mut g = Lehmer64::new(LIBCACHESIM_SEED);
        let want = [0xbe20_cd19u64, 0x5609_ca4d_13cd_b7ce];
        assert_eq!([g.next(), g.next()], want);
    }
}
