//! `n-hit:N`: admit a block on its N-th miss.
//!
//! **Source.** The "admit on second hit" rules of CacheLib and bcache, generalised to N.
//!
//! **Rule.** Every demand miss of a block is counted in a bounded history of recently missed blocks; the miss
//! that brings its count to N admits it, and the block is forgotten (a later miss after its eviction starts
//! from zero). The history holds at most `capacity` blocks, forgetting the block first remembered (FIFO).
//!
//! **Parameters.** N ≥ 2 (`n-hit:1` is `always`). The history's length is the cache's capacity in blocks.
//!
//! **State.** Per remembered block 8 B of key and 16 B of (count, sequence) in a hash map (about 25 B per slot
//! with its control byte), plus 16 B in the FIFO; at most `capacity` blocks and `2 × capacity + 1` FIFO entries:
//! at most about 40 B × capacity plus the hash map's spare slots.
//!
//! **Cost.** O(1) amortized per miss: one hash-map lookup and insert, FIFO trimming paid for by insertions.
//! Nothing per hit.

use super::AdmissionFilter;
use crate::prefetch::U64Map;
use std::collections::VecDeque;

/// The bounded recent-miss history of `n-hit` admission.
pub struct MissHistory {
    n: u32,
    cap: usize,
    seq: u64,
    counts: U64Map<(u32, u64)>,
    fifo: VecDeque<(u64, u64)>,
}

impl MissHistory {
    /// Admit on the `n`-th miss, remembering at most `capacity` blocks (at least one).
    pub fn new(n: u32, capacity: usize) -> Self {
        MissHistory { n: n.max(1), cap: capacity.max(1), seq: 0, counts: U64Map::default(), fifo: VecDeque::new() }
    }

    /// Records a miss of `key`; true when it is the N-th (the block is then forgotten and admitted).
    pub fn admit(&mut self, key: u64) -> bool {
        self.seq += 1;
        let seq = self.seq;
        let e = self.counts.entry(key).or_insert_with(|| {
            self.fifo.push_back((key, seq));
            (0, seq)
        });
        e.0 += 1;
        if e.0 >= self.n {
            self.counts.remove(&key);
            return true;
        }
        while self.counts.len() > self.cap {
            let Some((b, s)) = self.fifo.pop_front() else { break };
            if self.counts.get(&b).is_some_and(|e| e.1 == s) {
                self.counts.remove(&b);
            }
        }
        // Entries of forgotten blocks linger in the FIFO; keep it bounded too.
        while self.fifo.len() > 2 * self.cap + 1 {
            let Some((b, s)) = self.fifo.pop_front() else { break };
            if self.counts.get(&b).is_some_and(|e| e.1 == s) {
                self.counts.remove(&b);
            }
        }
        false
    }

    pub fn heap_bytes(&self) -> usize {
        self.counts.capacity() * 25 + self.fifo.capacity() * 16
    }
}

impl AdmissionFilter for MissHistory {
    fn admit(&mut self, key: u64) -> bool {
        MissHistory::admit(self, key)
    }
    fn heap_bytes(&self) -> usize {
        MissHistory::heap_bytes(self)
    }
}

#[cfg(test)]
mod tests {
    use super::super::AdmissionSpec;
    use crate::policy::Victim;

    #[test]
    fn n_hit_admits_on_the_nth_miss_and_forgets_old_misses() {
        let mut a = AdmissionSpec::NHit(2).build(2);
        let mut admit = |k| a.admit(k, Victim::Unknown);
        assert!(!admit(1));
        assert!(admit(1), "second miss of 1");
        assert!(!admit(1), "admission forgets the block");
        // A history of two blocks forgets the oldest.
        assert!(!admit(2));
        assert!(!admit(3));
        assert!(!admit(4));
        assert!(!admit(2), "2 was forgotten: this is its first remembered miss");
        assert!(admit(4));
    }

    #[test]
    fn n_hit_memory_is_bounded_by_the_capacity() {
        let mut h = super::MissHistory::new(3, 100);
        for k in 0..100_000u64 {
            h.admit(k % 5_000);
        }
        assert!(h.counts.len() <= 100 && h.fifo.len() <= 201, "{} {}", h.counts.len(), h.fifo.len());
    }
}
