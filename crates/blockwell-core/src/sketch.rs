//! Frequency sketches and Bloom filters over block keys, shared by the W-TinyLFU policy
//! ([`crate::policy::wtinylfu`]) and the admission filters ([`crate::admission`]).
//!
//! - [`xxh64_u64`]: XXH64 of a key's 8 bytes, libCacheSim's hash (seeds [`SEED0`], [`SEED1`]); [`xxh3_u64`]:
//!   XXH3-64 of them, libCacheSim's object-id hash.
//! - [`CountingBloom`]: libCacheSim's `minimalIncrementCBF`, 32-bit counters, `k` double-hashed positions per
//!   key, halved every `period` ticks. W-TinyLFU's sketch, kept bit for bit as libcachesim 0.3.5 has it so that
//!   the policy stays miss-for-miss equal to libcachesim's `WTinyLFU`.
//! - [`FrequencySketch`]: a count-min sketch of 4-bit counters as Caffeine's `FrequencySketch` lays it out
//!   (16 counters per 64-bit word, 4 rows, halving by shift and mask). TinyLFU admission's main sketch.
//! - [`Bloom`]: a plain Bloom filter of bits. TinyLFU's doorkeeper and the `bloom` admission filter.
//!
//! Nothing here allocates after construction, and every size is fixed by the constructor's arguments: the
//! memory does not depend on how many distinct keys are seen.

/// libCacheSim's `HASH_SEED0` and `HASH_SEED1`.
pub const SEED0: u64 = 0x1234_5678;
pub const SEED1: u64 = 0x1234_4321;

const PRIME64_1: u64 = 0x9E37_79B1_85EB_CA87;
const PRIME64_2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const PRIME64_3: u64 = 0x1656_67B1_9E37_79F9;
const PRIME64_4: u64 = 0x85EB_CA77_C2B2_AE63;
const PRIME64_5: u64 = 0x27D4_EB2F_1656_67C5;

/// XXH64 of the 8 little-endian bytes of `x` with `seed` (xxHash's algorithm for an 8-byte input).
#[inline]
pub fn xxh64_u64(x: u64, seed: u64) -> u64 {
    let mut h = seed.wrapping_add(PRIME64_5).wrapping_add(8);
    let k = x.wrapping_mul(PRIME64_2).rotate_left(31).wrapping_mul(PRIME64_1);
    h ^= k;
    h = h.rotate_left(27).wrapping_mul(PRIME64_1).wrapping_add(PRIME64_4);
    h ^= h >> 33;
    h = h.wrapping_mul(PRIME64_2);
    h ^= h >> 29;
    h = h.wrapping_mul(PRIME64_3);
    h ^= h >> 32;
    h
}

/// XXH3-64 (seed 0) of the 8 little-endian bytes of `x`: xxHash's `XXH3_len_4to8_64b` with the default secret,
/// libCacheSim's object-id hash (`get_hash_value_int_64` with its default `HASH_TYPE XXHASH3`), which places
/// objects in its chained hash table (RANDOM's and Hyperbolic's samplers replay that table).
#[inline]
pub fn xxh3_u64(x: u64) -> u64 {
    // readLE64(kSecret + 8) ^ readLE64(kSecret + 16)
    const BITFLIP: u64 = 0x1cad_21f7_2c81_017c ^ 0xdb97_9083_e96d_d4de;
    const MX: u64 = 0x9fb2_1c65_1e98_df25;
    // input64 = readLE32(input + 4) + (readLE32(input) << 32).
    let mut h = x.rotate_left(32) ^ BITFLIP;
    h ^= h.rotate_left(49) ^ h.rotate_left(24);
    h = h.wrapping_mul(MX);
    h ^= (h >> 35).wrapping_add(8);
    h = h.wrapping_mul(MX);
    h ^ (h >> 28)
}

/// libCacheSim's `minimalIncrementCBF`: one array of 32-bit counters, `hashes` double-hashed positions per key
/// (positions `(h₀ + i·h₁) mod n` in 32-bit arithmetic, h₀ and h₁ the low halves of [`xxh64_u64`] with
/// [`SEED0`] and [`SEED1`]). An *add* increments every position (a position hit twice twice); the *estimate*
/// is the minimum. [`CountingBloom::tick`] counts toward aging and halves every counter each `period` ticks.
#[derive(Clone, Debug)]
pub struct CountingBloom {
    pub(crate) counters: Vec<u32>,
    pub(crate) hashes: u32,
    /// Ticks since the last aging, and the period.
    pub(crate) hits: u64,
    pub(crate) period: u64,
}

impl CountingBloom {
    /// For `entries` keys at false-positive rate `error` (libCacheSim's `minimalIncrementCBF_init`, with its
    /// truncated literals for ln²2 and ln 2, not `std::f64::consts::LN_2`, so that sizes agree exactly).
    #[allow(clippy::approx_constant)]
    pub fn new(entries: usize, error: f64, period: u64) -> Self {
        let entries = entries.min(i32::MAX as usize) as f64;
        let bpe = -error.ln() / 0.480453013918201; // ln(2)^2
        let hashes = (0.693147180559945 * bpe).ceil() as u32;
        let mut n = (bpe * entries).ceil().min(i32::MAX as f64) as u32;
        if n < hashes {
            n = hashes * 2;
        }
        CountingBloom { counters: vec![0; n as usize], hashes, hits: 0, period }
    }

    #[inline]
    fn positions(&self, raw: u64) -> impl Iterator<Item = usize> {
        let a = xxh64_u64(raw, SEED0) as u32;
        let b = xxh64_u64(raw, SEED1) as u32;
        let n = (self.counters.len() as u32).max(1);
        (0..self.hashes).map(move |i| (a.wrapping_add(i.wrapping_mul(b)) % n) as usize)
    }

    /// The smallest of `key`'s counters.
    #[inline]
    pub fn estimate(&self, key: crate::BlockKey) -> u32 {
        self.positions(key.raw()).map(|x| self.counters.get(x).copied().unwrap_or(0)).min().unwrap_or(0)
    }

    /// Increments every counter of `key` (a position hit twice is incremented twice, as in libCacheSim).
    #[inline]
    pub fn add(&mut self, key: crate::BlockKey) {
        let raw = key.raw();
        let a = xxh64_u64(raw, SEED0) as u32;
        let b = xxh64_u64(raw, SEED1) as u32;
        let n = (self.counters.len() as u32).max(1);
        for i in 0..self.hashes {
            let x = (a.wrapping_add(i.wrapping_mul(b)) % n) as usize;
            if let Some(c) = self.counters.get_mut(x) {
                *c = c.wrapping_add(1);
            }
        }
    }

    /// How [`CountingBloom::estimate`] of `key` would read after `added` keys were each [`CountingBloom::add`]ed
    /// once more, changing nothing (W-TinyLFU's [`crate::Policy::victim`] looks ahead this way).
    pub fn estimate_after(&self, key: crate::BlockKey, added: &[crate::BlockKey]) -> u32 {
        let extra = |x: usize| -> u32 {
            added.iter().map(|&k| self.positions(k.raw()).filter(|&y| y == x).count() as u32).sum()
        };
        self.positions(key.raw())
            .map(|x| self.counters.get(x).copied().unwrap_or(0).wrapping_add(extra(x)))
            .min()
            .unwrap_or(0)
    }

    /// One tick toward aging; every `period` ticks all counters are halved.
    #[inline]
    pub fn tick(&mut self) {
        self.hits += 1;
        if self.hits >= self.period {
            self.hits = 0;
            for c in &mut self.counters {
                *c >>= 1;
            }
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.counters.capacity() * std::mem::size_of::<u32>()
    }
}

/// Caffeine's seeds for the four rows of its count-min sketch.
const CM_SEEDS: [u64; 4] = [0xc3a5_c85c_97cb_3127, 0xb492_b66f_be98_f273, 0x9ae1_6a3b_2f90_404f, 0xcbf2_9ce4_8422_2325];
/// Every 4-bit counter's top bit cleared, after a shift right by one: halves 16 counters at once.
const RESET_MASK: u64 = 0x7777_7777_7777_7777;
/// Largest table, in 64-bit words (2 GiB; a cache of 2²⁸ blocks and more shares counters).
const MAX_WORDS: usize = 1 << 28;

/// A count-min sketch of 4-bit counters laid out as Caffeine's `FrequencySketch` (version 2): a power-of-two
/// table of 64-bit words, 16 counters each, at least as many words as the expected number of keys. A key's hash
/// `h` picks one word per row `i` (of 4) with `((h + sᵢ)·sᵢ) + (that >> 32)`, masked, and in it the counter
/// `4·(h mod 4) + i`, so the 4 rows interleave in the same table. An increment raises each of the 4 counters
/// that is below 15; the estimate is their minimum; [`FrequencySketch::halve`] halves all counters (shift and
/// mask, 16 at a time).
#[derive(Clone, Debug)]
pub struct FrequencySketch {
    table: Vec<u64>,
}

impl FrequencySketch {
    /// For about `keys` keys: the next power of two ≥ `keys` words (at least 8, at most 2²⁸), 8–16 bytes per key.
    pub fn new(keys: usize) -> Self {
        let words = keys.clamp(8, MAX_WORDS).next_power_of_two();
        FrequencySketch { table: vec![0; words] }
    }

    #[inline]
    fn word(&self, h: u64, i: usize) -> usize {
        let s = CM_SEEDS[i];
        let mut x = h.wrapping_add(s).wrapping_mul(s);
        x = x.wrapping_add(x >> 32);
        (x as usize) & (self.table.len() - 1)
    }

    /// The estimated count of hash `h`, 0..=15.
    #[inline]
    pub fn frequency(&self, h: u64) -> u32 {
        let start = ((h & 3) << 2) as u32;
        (0..4)
            .map(|i| {
                let shift = (start + i as u32) << 2;
                ((self.table[self.word(h, i)] >> shift) & 0xF) as u32
            })
            .min()
            .unwrap_or(0)
    }

    /// Raises the counters of hash `h` that are below 15. True when one was raised.
    #[inline]
    pub fn increment(&mut self, h: u64) -> bool {
        let start = ((h & 3) << 2) as u32;
        let mut added = false;
        for i in 0..4 {
            let w = self.word(h, i);
            let shift = (start + i as u32) << 2;
            if (self.table[w] >> shift) & 0xF != 0xF {
                self.table[w] += 1 << shift;
                added = true;
            }
        }
        added
    }

    /// Halves every counter (rounding down).
    pub fn halve(&mut self) {
        for w in &mut self.table {
            *w = (*w >> 1) & RESET_MASK;
        }
    }

    pub fn heap_bytes(&self) -> usize {
        self.table.capacity() * std::mem::size_of::<u64>()
    }
}

/// Largest Bloom filter, in bits (512 MiB).
const MAX_BITS: u64 = 1 << 32;

/// A Bloom filter of `m` bits (a multiple of 64) and `k` positions per key. Positions come from one 64-bit
/// hash `h` by double hashing (`a + i·b`, `a = h`, `b` = `h` with its halves swapped, made odd), each mapped onto
/// `0..m` by a multiply-shift. With `n` keys in it, the false-positive rate is about `(1 − e^(−k·n/m))^k`.
#[derive(Clone, Debug)]
pub struct Bloom {
    words: Vec<u64>,
    bits: u64,
    hashes: u32,
    /// Keys inserted that were not (seemingly) in the filter yet.
    len: usize,
}

impl Bloom {
    /// Room for `keys` keys at `bits_per_key` bits each (at least 64 bits in all), `hashes` positions per key.
    pub fn new(keys: usize, bits_per_key: u32, hashes: u32) -> Self {
        let bits = (keys as u64).saturating_mul(u64::from(bits_per_key.max(1))).clamp(64, MAX_BITS).div_ceil(64) * 64;
        Bloom { words: vec![0; (bits / 64) as usize], bits, hashes: hashes.max(1), len: 0 }
    }

    #[inline]
    fn positions(&self, h: u64) -> impl Iterator<Item = u64> {
        let b = h.rotate_left(32) | 1;
        let m = self.bits;
        (0..u64::from(self.hashes))
            .map(move |i| ((u128::from(h.wrapping_add(i.wrapping_mul(b))) * u128::from(m)) >> 64) as u64)
    }

    #[inline]
    fn bit(&self, p: u64) -> bool {
        self.words[(p / 64) as usize] & (1 << (p % 64)) != 0
    }

    /// Is hash `h` (seemingly) in the filter?
    #[inline]
    pub fn contains(&self, h: u64) -> bool {
        self.positions(h).all(|p| self.bit(p))
    }

    /// Adds hash `h`. True when it was not (seemingly) there yet.
    #[inline]
    pub fn insert(&mut self, h: u64) -> bool {
        let mut new = false;
        for p in self.positions(h) {
            let w = &mut self.words[(p / 64) as usize];
            let mask = 1 << (p % 64);
            new |= *w & mask == 0;
            *w |= mask;
        }
        if new {
            self.len += 1;
        }
        new
    }

    /// Keys inserted since the last [`Bloom::clear`] that were new to the filter.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bits.
    pub fn bits(&self) -> u64 {
        self.bits
    }

    pub fn hashes(&self) -> u32 {
        self.hashes
    }

    /// Forgets every key.
    pub fn clear(&mut self) {
        self.words.fill(0);
        self.len = 0;
    }

    pub fn heap_bytes(&self) -> usize {
        self.words.capacity() * std::mem::size_of::<u64>()
    }
}

/// The false-positive rate of a Bloom filter of `bits` bits and `hashes` positions holding `keys` keys:
/// `(1 − e^(−k·n/m))^k`.
pub fn bloom_false_positive_rate(bits: u64, hashes: u32, keys: u64) -> f64 {
    let k = f64::from(hashes);
    (1.0 - (-k * keys as f64 / bits.max(1) as f64).exp()).powf(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xxh3_matches_libcachesims_hash() {
        // XXH3_64bits(&obj_id, 8) from libCacheSim's xxh3.h (and xxhash-rust 0.8's xxh3_64).
        for (x, h) in [
            (0u64, 14374147212387527897u64),
            (1, 3439722301264460078),
            (2, 2343778756980564547),
            (42, 15395265915043915720),
            (12345, 11234342765698724289),
            (123456789, 2817400364357085909),
            (0xdead_beef_1234, 2955804462178003),
            (0xfedcba9876543210, 5120852969840722371),
            ((1 << 48) - 1, 16525179420693705522),
        ] {
            assert_eq!(xxh3_u64(x), h, "{x}");
        }
    }

    #[test]
    fn frequency_sketch_counts_saturates_and_halves() {
        let mut s = FrequencySketch::new(64);
        let h = xxh64_u64(42, 1);
        assert_eq!(s.frequency(h), 0);
        for i in 1..=20u32 {
            assert_eq!(s.increment(h), i <= 15, "raised while below 15");
            assert_eq!(s.frequency(h), i.min(15));
        }
        s.halve();
        assert_eq!(s.frequency(h), 7);
        s.halve();
        assert_eq!(s.frequency(h), 3);
        // Other keys are not counted (the table is large enough that 100 keys rarely all collide).
        let others = (0..100u64).filter(|&x| s.frequency(xxh64_u64(x + 1000, 1)) > 0).count();
        assert!(others < 10, "{others} of 100 unrelated keys see counts");
        assert_eq!(FrequencySketch::new(0).heap_bytes(), 64, "at least 8 words");
        assert_eq!(FrequencySketch::new(1000).heap_bytes(), 1024 * 8);
    }

    #[test]
    fn bloom_has_no_false_negatives_and_about_its_false_positive_rate() {
        let n = 10_000u64;
        let mut b = Bloom::new(n as usize, 10, 7);
        assert_eq!(b.bits(), 100_032);
        for x in 0..n {
            assert!(b.insert(xxh64_u64(x, 3)) || b.contains(xxh64_u64(x, 3)));
        }
        assert!((0..n).all(|x| b.contains(xxh64_u64(x, 3))), "no false negatives");
        let fp = (n..11 * n).filter(|&x| b.contains(xxh64_u64(x, 3))).count() as f64 / (10 * n) as f64;
        let expect = bloom_false_positive_rate(b.bits(), 7, n);
        assert!(expect < 0.0085 && (fp - expect).abs() < 0.003, "measured {fp}, expected {expect}");
        assert!(b.len() as u64 > n - 100 && b.len() as u64 <= n, "{}", b.len());
        b.clear();
        assert!(b.is_empty() && !b.contains(xxh64_u64(1, 3)));
        assert_eq!(Bloom::new(0, 10, 7).bits(), 64);
    }
}
