//! Lemire's Lehmer64 generator, the generator behind libcachesim 0.3.5's `next_rand()` and `hashtable_rand_obj`, and
//! the one generator of the engine's random choices:
//! a 128-bit state multiplied by `0xda942042e4dd58b5` at every draw, the draw being the state's high 64 bits.
//! libCacheSim keeps one state per thread (`g_lehmer64_state`), initially `0xdeadbeef`; `set_rand_seed(s)` sets it
//! to `s` (read from the wheel's `.tdata` section and machine code; libCacheSim's source of October 2024 still has
//! Knuth's MMIX LCG in `next_rand()`). The policies that draw random numbers (LeCaR, CACHEUS, LHD, Hyperbolic,
//! RANDOM) and `prob` admission each own one, started at their `seed` parameter: no state is shared between instances, no clock, so the same
//! trace and configuration give bit-identical results, and a policy seeded with libCacheSim's state makes its
//! draws.

/// libCacheSim's initial state in every thread.
pub(crate) const LIBCACHESIM_SEED: u64 = Lehmer64::LIBCACHESIM_SEED;

/// `x ← x · 0xda942042e4dd58b5 (mod 2¹²⁸)`; a draw is the new state's high 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lehmer64(pub(crate) u128);

/// The multiplier.
pub(crate) const MULT: u128 = Lehmer64::MUL;

impl Lehmer64 {
    const MUL: u128 = 0xda94_2042_e4dd_58b5;

    /// libCacheSim's initial state.
    pub const LIBCACHESIM_SEED: u64 = 0xdead_beef;

    /// A generator whose state is `seed`, as `set_rand_seed(seed)` leaves libCacheSim's (0 makes every draw 0).
    pub const fn new(seed: u64) -> Self {
        Lehmer64(seed as u128)
    }

    /// A generator whose 128-bit state is `state`.
    pub const fn from_state(state: u128) -> Self {
        Lehmer64(state)
    }

    /// The next draw (`next_rand()`), advancing the state.
    #[inline(always)]
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

/// Lemire's multipliers for [`small_mod`]: `⌊(2¹²⁸ − 1) / d⌋ + 1` for every divisor `d` of 1..=255 (index 0 unused; for
/// `d = 1` the sum wraps to 0, which gives the right remainder, 0).
const MOD_MULTIPLIERS: [u128; 256] = {
    let mut m = [0u128; 256];
    let mut d = 1;
    while d < 256 {
        m[d] = (u128::MAX / d as u128).wrapping_add(1);
        d += 1;
    }
    m
};

/// `a mod d` for a divisor of 1..=255 without a division instruction: D. Lemire, O. Kaser and N. Kurz, "Faster
/// Remainder by Direct Computation", Software: Practice and Experience 49(6), 2019 (`fastmod_u64`), exact for every
/// 64-bit `a`. Four multiplications that pipeline, where a 64-bit division waits for the one before: the samplers
/// take the position of a draw in a hash chain (`draw mod chain length`) many times per eviction.
#[inline(always)]
pub(crate) fn small_mod(a: u64, d: u8) -> u64 {
    let low = MOD_MULTIPLIERS[d as usize].wrapping_mul(a as u128);
    let d = d as u128;
    // The high 64 bits of the 192-bit product low · d, over 2^64: (low · d) >> 128.
    let hi = (low >> 64) * d;
    let lo = ((low as u64) as u128 * d) >> 64;
    ((hi + lo) >> 64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_mod_is_the_remainder() {
        let mut r = Lehmer64::new(LIBCACHESIM_SEED);
        let edges = [0, 1, 2, 254, 255, 256, u32::MAX as u64, u64::MAX - 1, u64::MAX, 1 << 63, (1 << 63) - 1];
        for d in 1..=255u8 {
            for &a in &edges {
                assert_eq!(small_mod(a, d), a % d as u64, "{a} mod {d}");
            }
            for _ in 0..2000 {
                let a = r.next();
                assert_eq!(small_mod(a, d), a % d as u64, "{a} mod {d}");
                let a = a >> (a % 64);
                assert_eq!(small_mod(a, d), a % d as u64, "{a} mod {d}");
            }
        }
    }

    #[test]
    fn draws_are_the_high_half_of_the_product() {
        let mut g = Lehmer64::new(LIBCACHESIM_SEED);
        let s1 = 0xdead_beefu128 * Lehmer64::MUL;
        assert_eq!(g.next(), (s1 >> 64) as u64);
        let s2 = s1.wrapping_mul(Lehmer64::MUL);
        assert_eq!(g.next(), (s2 >> 64) as u64);
        // The first draws from 0xdeadbeef (computed with Python's integers).
        let mut g = Lehmer64::new(LIBCACHESIM_SEED);
        assert_eq!([g.next(), g.next()], [0xbe20_cd19u64, 0x5609_ca4d_13cd_b7ce]);
    }

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
