//! `tinylfu[:sample=N]`: TinyLFU admission in front of any policy.
//!
//! **Paper.** G. Einziger, R. Friedman and B. Manes, "TinyLFU: A Highly Efficient Cache Admission Policy", ACM
//! Transactions on Storage 13(4), article 35, 2017, §3: a frequency sketch over a sample of recent accesses
//! decides whether a newcomer may replace the cache's victim. The sketch is laid out as Caffeine's
//! `FrequencySketch` ([`crate::sketch::FrequencySketch`]); the doorkeeper is the paper's (§3.4.2).
//!
//! **Rule.** Every demand access, hit or miss, is *recorded*: the key's hash goes into the *doorkeeper*, a Bloom
//! filter; if it was already there, the 4-bit count-min sketch counts it. A key's estimated frequency is its
//! sketch count plus one if the doorkeeper holds it. After W = N × capacity recordings (*aging*, the paper's
//! reset) every sketch counter is halved, the doorkeeper is cleared, and the recording count is halved too,
//! so the sketch keeps counts over a sliding sample of about W accesses. On a demand miss the level asks the
//! policy which block the miss would evict ([`crate::Policy::victim`]): the newcomer is admitted only if its
//! estimate is greater than the victim's. When the policy would evict nothing (the cache has room) or cannot
//! say exactly (`Unknown`, see [`super`]), it is admitted. Unlike Caffeine, no random admissions guard against
//! hash flooding: the rule is deterministic.
//!
//! **Parameters.** `sample` N (default 10, Caffeine's `10 × maximumSize`), 1..=10⁶: the aging period W in
//! multiples of the capacity.
//!
//! **State.** The sketch: the next power of two ≥ capacity 64-bit words (at least 8), 16 counters per word,
//! 8–16 B per cached block. The doorkeeper: W/2 keys × 8 bits = N/2 B per cached block (5 B at N = 10), 4
//! hashes; with W/2 distinct keys in it (the most between two agings after the first) its false-positive rate is
//! (1 − e^(−1/2))⁴ ≈ 2.4 %, with W (the first period, when every access is new) ≈ 16 %. In all 13–21 B per
//! cached block at N = 10, fixed at construction (no allocation afterwards, whatever the keys).
//!
//! **Cost.** Per access one XXH64 of the key, 4 doorkeeper bits and up to 4 counter updates; per aging one pass
//! over both tables (amortized: 16 counters per word, one word per capacity block, every N × capacity accesses).
//! Per miss two estimates (two hashes) and the policy's victim query: O(1) for list policies, a read-only walk as
//! long as the eviction's own for CLOCK, SIEVE, CAR and S3-FIFO (a rejected miss does not advance the hand, so
//! the next miss may walk the same blocks again).

use super::AdmissionFilter;
use crate::policy::Victim;
use crate::sketch::{xxh64_u64, Bloom, FrequencySketch};

/// The aging period's default multiple of the capacity (Caffeine's).
pub const DEFAULT_SAMPLE: u32 = 10;

/// The hash seed of the sketch and the doorkeeper.
const SEED: u64 = 0x7469_6e79_6c66_7521;

/// TinyLFU admission: a count-min sketch of 4-bit counters behind a doorkeeper Bloom filter (module docs).
#[derive(Clone, Debug)]
pub struct TinyLfu {
    sketch: FrequencySketch,
    door: Bloom,
    /// Recordings since the last aging (halved at each), and the period W.
    additions: u64,
    period: u64,
}

impl TinyLfu {
    /// For a cache of `capacity` blocks (at least 1), aging every `sample` × capacity accesses.
    pub fn new(capacity: usize, sample: u32) -> Self {
        let capacity = capacity.max(1);
        let period = u64::from(sample.max(1)).saturating_mul(capacity as u64);
        let door_keys = usize::try_from(period / 2).unwrap_or(usize::MAX).max(1);
        TinyLfu { sketch: FrequencySketch::new(capacity), door: Bloom::new(door_keys, 8, 4), additions: 0, period }
    }

    #[inline]
    fn hash(key: u64) -> u64 {
        xxh64_u64(key, SEED)
    }

    /// A demand access to `key`.
    #[inline]
    pub fn record(&mut self, key: u64) {
        let h = Self::hash(key);
        if !self.door.insert(h) {
            self.sketch.increment(h);
        }
        self.additions += 1;
        if self.additions >= self.period {
            self.sketch.halve();
            self.door.clear();
            self.additions /= 2;
        }
    }

    /// The estimated frequency of `key` in the current sample: its sketch count, plus one if the doorkeeper
    /// holds it.
    #[inline]
    pub fn estimate(&self, key: u64) -> u32 {
        let h = Self::hash(key);
        self.sketch.frequency(h) + u32::from(self.door.contains(h))
    }

    /// A demand miss of `key` that would evict `victim`: admit it if more frequent (always when the policy would
    /// evict nothing or cannot say).
    #[inline]
    pub fn admit_over(&self, key: u64, victim: Victim) -> bool {
        match victim {
            Victim::Block(v) => self.estimate(key) > self.estimate(v.raw()),
            Victim::None | Victim::Unknown => true,
        }
    }

    /// The aging period W, in recorded accesses.
    pub fn period(&self) -> u64 {
        self.period
    }

    pub fn heap_bytes(&self) -> usize {
        self.sketch.heap_bytes() + self.door.heap_bytes()
    }
}

impl AdmissionFilter for TinyLfu {
    fn admit(&mut self, key: u64) -> bool {
        self.admit_over(key, Victim::Unknown)
    }
    fn needs_victim(&self) -> bool {
        true
    }
    fn admit_over(&mut self, key: u64, victim: Victim) -> bool {
        TinyLfu::admit_over(self, key, victim)
    }
    fn record(&mut self, key: u64) {
        TinyLfu::record(self, key)
    }
    fn heap_bytes(&self) -> usize {
        TinyLfu::heap_bytes(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BlockKey;

    fn block(k: u64) -> Victim {
        Victim::Block(BlockKey::from_raw(k))
    }

    #[test]
    fn counts_every_access_behind_the_doorkeeper() {
        let mut t = TinyLfu::new(1000, 10);
        assert_eq!(t.estimate(7), 0);
        t.record(7);
        assert_eq!(t.estimate(7), 1, "the doorkeeper holds a key seen once");
        for n in 2..=16 {
            t.record(7);
            assert_eq!(t.estimate(7), n, "doorkeeper + sketch");
        }
        t.record(7);
        assert_eq!(t.estimate(7), 16, "4-bit counters saturate at 15");
    }

    #[test]
    fn admits_only_the_more_frequent_and_when_the_victim_is_not_known() {
        let mut t = TinyLfu::new(1000, 10);
        for _ in 0..3 {
            t.record(1);
        }
        t.record(2);
        assert!(!t.admit_over(2, block(1)), "once against three times");
        assert!(t.admit_over(1, block(2)));
        t.record(2);
        t.record(2);
        assert!(!t.admit_over(2, block(1)), "a tie keeps the victim");
        assert!(t.admit_over(99, Victim::None), "room in the cache");
        assert!(t.admit_over(99, Victim::Unknown), "the policy cannot say");
        assert!(AdmissionFilter::needs_victim(&t));
    }

    #[test]
    fn ages_by_halving_every_sample_times_capacity_accesses() {
        let mut t = TinyLfu::new(10, 2);
        assert_eq!(t.period(), 20);
        for _ in 0..9 {
            t.record(5);
        }
        assert_eq!(t.estimate(5), 9);
        for k in 100..111 {
            t.record(k); // the 20th access ages: 5's sketch count 8 -> 4, the doorkeeper is cleared
        }
        assert_eq!(t.estimate(5), 4);
        // The recording count was halved too: the next aging comes after W/2 = 10 more accesses.
        for k in 200..209 {
            t.record(k);
        }
        assert_eq!(t.estimate(5), 4);
        t.record(300);
        assert_eq!(t.estimate(5), 2);
    }

    #[test]
    fn deterministic_and_bounded() {
        let run = || {
            let mut t = TinyLfu::new(500, 10);
            let mut x = 1u64;
            let mut admitted = Vec::new();
            for i in 0..100_000u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let k = (x >> 33) % if i % 2 == 0 { 50 } else { 1_000_000 };
                t.record(k);
                admitted.push(t.admit_over(k, block(k ^ 1)));
            }
            (admitted, t.heap_bytes())
        };
        let (a, bytes) = run();
        assert_eq!(run(), (a, bytes), "same accesses, same decisions");
        assert_eq!(bytes, TinyLfu::new(500, 10).heap_bytes(), "no growth with a million distinct keys");
        assert_eq!(bytes, 512 * 8 + 20_032 / 8, "sketch: 512 words; doorkeeper: 2500 keys x 8 bits, in words");
    }
}
