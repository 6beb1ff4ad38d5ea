//! `bloom`: admit a block on a miss if it missed before ("second hit"), remembered in a Bloom filter.
//!
//! **Source.** libcachesim 0.3.5's `BloomFilterAdmissioner` (`libCacheSim/cache/admission/bloomfilter.c`),
//! the "cache on second hit" rule of CDNs (B. M. Maggs and R. K. Sitaraman, "Algorithmic nuggets in content
//! delivery", SIGCOMM CCR 45(3), 2015). libcachesim remembers every missed object forever in a hash table;
//! this filter remembers them in a Bloom filter of fixed size, cleared when full.
//!
//! **Rule.** On a demand miss: if the block's key is (seemingly) in the filter, it is admitted (and stays in the
//! filter); otherwise it is inserted and rejected. When the filter holds 2 × capacity keys it is cleared before
//! the next insertion: the filter remembers between 0 and 2 × capacity recently missed blocks (on average as
//! many as the cache holds, like `n-hit`'s history). Hits are not recorded (a resident block's next miss comes
//! after its eviction, and it was remembered when it first missed). While the filter has never been cleared
//! and makes no false positive, the decisions are libcachesim's exactly.
//!
//! **Parameters.** None: 2 × capacity keys, 10 bits per key, 7 hashes. With n keys in it the false-positive rate
//! is (1 − e^(−7n/(20·capacity)))⁷: at most 0.82 % just before it is cleared, 0.01 % at half full.
//!
//! **State.** 20 × capacity bits, rounded up to 64: 2.5 B per cached block, fixed at construction.
//!
//! **Cost.** Per miss one XXH64 of the key and 7 bit reads (and writes on insertion); a clearing every 2 ×
//! capacity distinct misses zeroes 2.5 B × capacity (amortized about 1 B per miss). Nothing per hit.

use super::AdmissionFilter;
use crate::sketch::{xxh64_u64, Bloom};

/// Keys remembered per cached block before the filter is cleared.
pub const KEYS_PER_BLOCK: usize = 2;
const BITS_PER_KEY: u32 = 10;
const HASHES: u32 = 7;
const SEED: u64 = 0x626c_6f6f_6d21;

/// `bloom` admission (module docs).
#[derive(Clone, Debug)]
pub struct SecondHit {
    seen: Bloom,
    limit: usize,
}

impl SecondHit {
    /// For a cache of `capacity` blocks (at least 1).
    pub fn new(capacity: usize) -> Self {
        let limit = capacity.max(1).saturating_mul(KEYS_PER_BLOCK);
        SecondHit { seen: Bloom::new(limit, BITS_PER_KEY, HASHES), limit }
    }

    /// A demand miss of `key`: admitted if it missed before (since the last clearing).
    #[inline]
    pub fn admit(&mut self, key: u64) -> bool {
        let h = xxh64_u64(key, SEED);
        if self.seen.contains(h) {
            return true;
        }
        if self.seen.len() >= self.limit {
            self.seen.clear();
        }
        self.seen.insert(h);
        false
    }

    /// Keys remembered now.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// The false-positive rate with `keys` keys in the filter.
    pub fn false_positive_rate(&self, keys: usize) -> f64 {
        crate::sketch::bloom_false_positive_rate(self.seen.bits(), self.seen.hashes(), keys as u64)
    }

    pub fn heap_bytes(&self) -> usize {
        self.seen.heap_bytes()
    }
}

impl AdmissionFilter for SecondHit {
    fn admit(&mut self, key: u64) -> bool {
        SecondHit::admit(self, key)
    }
    fn heap_bytes(&self) -> usize {
        SecondHit::heap_bytes(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_the_second_miss_and_keeps_admitting() {
        let mut b = SecondHit::new(100);
        assert!(!b.admit(1));
        assert!(b.admit(1));
        assert!(b.admit(1), "remembered until the filter is cleared, as libcachesim's set");
        assert!(!b.admit(2));
        assert_eq!(b.len(), 2);
    }

    #[test]
    fn cleared_when_full_and_bounded() {
        let mut b = SecondHit::new(50);
        let bytes = b.heap_bytes();
        assert_eq!(bytes, 128, "100 keys x 10 bits, rounded up to 16 words");
        for k in 0..100 {
            assert!(!b.admit(k), "{k} is new (no false positive among the first 100 here)");
        }
        assert_eq!(b.len(), 100);
        assert!(b.admit(5), "full, and 5 is in it");
        assert!(!b.admit(1000), "full: cleared, then 1000 inserted");
        assert_eq!(b.len(), 1);
        assert!(!b.admit(5), "forgotten with the clearing");
        for k in 0..1_000_000u64 {
            b.admit(k * 7919);
        }
        assert!(b.len() <= 100 && b.heap_bytes() == bytes);
        assert!(b.false_positive_rate(100) < 0.0085 && b.false_positive_rate(50) < 0.0002);
    }

    #[test]
    fn false_positives_are_rare() {
        let mut b = SecondHit::new(10_000);
        for k in 0..20_000u64 {
            b.admit(k);
        }
        let fp = (1_000_000..1_100_000u64).filter(|&k| b.seen.contains(xxh64_u64(k, SEED))).count();
        assert!(fp < 1100, "{fp} of 100000 (expected about 820)");
    }
}
