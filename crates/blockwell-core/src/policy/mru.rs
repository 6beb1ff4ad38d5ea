//! MRU: most recently used.
//!
//! **Paper.** H.-T. Chou and D. J. DeWitt, "An Evaluation of Buffer Management Strategies for Relational Database
//! Systems", 11th International Conference on Very Large Data Bases (VLDB '85), 1985: for a file scanned
//! repeatedly in a loop larger than the buffer (their "looping sequential" reference pattern), MRU is the right
//! replacement, since the block just used is the one needed last. Blocks are kept in recency order as in LRU (a
//! hit moves the block to the MRU end); to evict, the *most* recently used block goes, before the missed block is
//! inserted at the MRU end. In a loop over n > c blocks LRU misses every access; MRU settles to n − c misses per
//! round (40 per round of 100 blocks in 60, as in the unit test), what even Belady's OPT cannot much improve.
//!
//! **Prefetch adaptation (seed `001_*` §4, in its spirit; the seed does not study MRU).** A prefetched block is
//! inserted at the MRU end like a missed block (where a demand-fetched block goes), flagged *not yet accessed*.
//! Its first demand access clears the flag, returns [`Outcome::PrefetchHit`] and counts as the block's first
//! reference: it moves to the MRU end, as the demand miss would have put it. If it is evicted with the flag still
//! set, the eviction is reported with `unused_prefetch: true`. MRU keeps no history, so there is no ghost list.
//! A consequence of MRU itself: in a full cache the blocks of one prefetch group evict each other (each is the
//! MRU block when the next arrives), so only the group's last block stays.
//!
//! **Parameters.** None; identical under every preset. libcachesim 0.3.5 has `MRU.c` in its C sources but the
//! Python package neither builds nor exports it; Blockwell follows that file (evict the head of the recency
//! list, then insert at the head; a hit moves the block to the head), checked against a Python transcription of
//! it run inside libcachesim (`scripts/crosscheck_libcachesim.py`, docs/correctness.md).
//!
//! **Metadata.** 16 bytes per cached block in the arena (8-byte key, two 31-bit links and the prefetch flag) plus
//! the handle index, 4 bytes + 1 tag byte per bucket, reserved for twice the entries so that churn never makes it
//! grow (`KeyIndex::with_capacity`): 11.4–22.9 bytes per entry depending on where the size falls between powers of
//! two: 27.4–38.9 bytes per cached block. No ghost entries.
//!
//! **Cost.** O(1) per access, insert and eviction. No allocation once the arena and index have grown to the
//! capacity.

use super::onelist::{Entry, OneList};
use super::{Access, Evicted, Outcome, Policy, Victim};
use crate::arena::Keyed;
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// MRU has no parameters.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MruConfig {}

/// The MRU policy. The list's front is the MRU end, where blocks are inserted and evicted. An entry's flag bit is
/// "prefetched, not yet accessed".
#[derive(Clone, Debug)]
pub struct Mru {
    blocks: OneList<Entry>,
}

impl Mru {
    #[inline]
    fn insert(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) {
        while self.blocks.is_full() {
            let Some(h) = self.blocks.list.front() else { break };
            self.blocks.evict(h, out);
        }
        self.blocks.push_front(Entry::new(key), prefetched);
    }

    /// A hit on `h`: to the MRU end; a prefetched block's first access.
    #[inline(always)]
    fn on_hit(&mut self, h: crate::arena::Handle) -> Outcome {
        self.blocks.hit_to_front(h)
    }

    /// Resident keys from MRU to LRU (for tests and debugging).
    pub fn keys_mru_first(&self) -> Vec<BlockKey> {
        self.blocks.keys()
    }
}

impl Policy for Mru {
    type Config = MruConfig;

    fn new(capacity: usize, _config: &MruConfig) -> Self {
        Mru { blocks: OneList::new(capacity) }
    }

    super::onelist::one_list_policy_methods!(list_only);

    fn victim(&self, incoming: BlockKey) -> Victim {
        if self.blocks.contains(incoming) || !self.blocks.is_full() {
            return Victim::None;
        }
        match self.blocks.list.front() {
            Some(h) => Victim::Block(self.blocks.arena[h].key()),
            None => Victim::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::*;
    use crate::policy::testutil::{acc, ev, k, keys, pf};
    use blockwell_testkit::Rng;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    fn mru(cap: usize) -> Mru {
        Mru::new(cap, &MruConfig::default())
    }

    #[test]
    fn evicts_the_most_recently_used_block_before_inserting() {
        let mut p = mru(3);
        for b in [1, 2, 3] {
            assert_eq!(acc(&mut p, b), (Outcome::Miss, vec![]));
        }
        assert_eq!(acc(&mut p, 1).0, Outcome::Hit);
        assert_eq!(p.keys_mru_first(), keys(&[1, 3, 2]));
        assert_eq!(p.victim(k(4)), Victim::Block(k(1)));
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![ev(4, false)]));
        assert_eq!(p.keys_mru_first(), keys(&[5, 3, 2]));
        assert_eq!(p.victim(k(3)), Victim::None, "resident: no miss");
    }

    #[test]
    fn a_loop_larger_than_the_cache_misses_n_minus_c_per_round() {
        let mut p = mru(60);
        let mut per_round = Vec::new();
        for _ in 0..10 {
            let misses = (0..100).filter(|&b| acc(&mut p, b).0 == Outcome::Miss).count();
            per_round.push(misses);
        }
        assert_eq!(per_round[0], 100);
        assert!(per_round[3..].iter().all(|&m| m == 40), "{per_round:?}");
    }

    #[test]
    fn capacity_one() {
        let mut p = mru(1);
        acc(&mut p, 1);
        assert_eq!(acc(&mut p, 2), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        assert_eq!(p.victim(k(9)), Victim::Block(k(2)));
    }

    #[test]
    fn prefetched_blocks_go_to_the_mru_end_and_evict_each_other_when_full() {
        let mut p = mru(4);
        for b in [1, 2] {
            acc(&mut p, b);
        }
        assert_eq!(pf(&mut p, &[3, 1, 4]), (2, vec![]));
        assert_eq!(p.keys_mru_first(), keys(&[4, 3, 2, 1]), "resident 1 untouched by the prefetch");
        // Full: each block of the next group evicts the MRU block, the previous one of the group.
        assert_eq!(pf(&mut p, &[5, 6, 7]), (3, vec![ev(4, true), ev(5, true), ev(6, true)]));
        assert_eq!(acc(&mut p, 3), (Outcome::PrefetchHit, vec![]));
        assert_eq!(p.keys_mru_first(), keys(&[3, 7, 2, 1]), "first access moves it to the MRU end");
        assert_eq!(acc(&mut p, 3).0, Outcome::Hit);
        assert_eq!(acc(&mut p, 8), (Outcome::Miss, vec![ev(3, false)]));
        assert_eq!(acc(&mut p, 9), (Outcome::Miss, vec![ev(8, false)]));
        assert!(p.remove(k(7)));
        assert_eq!(acc(&mut p, 7), (Outcome::Miss, vec![]));
    }

    #[test]
    fn metadata_is_as_documented() {
        for cap in [1_000, 10_000, 100_000, 1 << 20] {
            let per_block = mru(cap).heap_bytes() as f64 / cap as f64;
            assert!((27.4..=39.0).contains(&per_block), "{per_block} bytes per block at {cap}");
        }
    }

    #[test]
    fn victim_is_what_the_next_miss_evicts() {
        let mut rng = Rng(7);
        for cap in [1usize, 2, 5, 16] {
            let mut p = mru(cap);
            let mut out = Vec::new();
            for _ in 0..3000 {
                let b = rng.next() % 40;
                let v = p.victim(k(b));
                out.clear();
                if rng.next() % 5 == 0 {
                    p.prefetch(&[Access::new(k(b))], &mut out);
                    continue;
                }
                let o = p.access(Access::new(k(b)), &mut out);
                match v {
                    Victim::Block(x) => assert_eq!(out.iter().map(|e| e.key).collect::<Vec<_>>(), vec![x]),
                    Victim::None => assert!(out.is_empty() && (o.is_hit() || p.len() <= cap)),
                    Victim::Unknown => panic!("MRU always knows"),
                }
            }
        }
    }

    /// Reference model: a deque from MRU (front) to LRU, transcribing libCacheSim's MRU.c.
    struct Model {
        cap: usize,
        q: VecDeque<u64>,
        unused: Vec<u64>,
    }

    impl model::Reference for Model {
        fn access(&mut self, b: u64, evicted: &mut Vec<u64>) -> Outcome {
            if let Some(i) = self.q.iter().position(|&x| x == b) {
                self.q.remove(i);
                self.q.push_front(b);
                if let Some(j) = self.unused.iter().position(|&x| x == b) {
                    self.unused.remove(j);
                    return Outcome::PrefetchHit;
                }
                return Outcome::Hit;
            }
            self.prefetch(b, evicted);
            self.unused.retain(|&x| x != b);
            Outcome::Miss
        }
        fn prefetch(&mut self, b: u64, evicted: &mut Vec<u64>) -> bool {
            if self.q.contains(&b) {
                return false;
            }
            if self.q.len() == self.cap {
                let v = self.q.pop_front().unwrap();
                self.unused.retain(|&x| x != v);
                evicted.push(v);
            }
            self.q.push_front(b);
            self.unused.push(b);
            true
        }
        fn remove(&mut self, b: u64) -> bool {
            self.unused.retain(|&x| x != b);
            match self.q.iter().position(|&x| x == b) {
                Some(i) => {
                    self.q.remove(i);
                    true
                }
                None => false,
            }
        }
        fn len(&self) -> usize {
            self.q.len()
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(cap in 1usize..9, ops in prop::collection::vec(model::op(), 1..300)) {
            model::run(mru(cap), &ops)?;
        }

        #[test]
        fn agrees_with_the_reference_model(cap in 1usize..9, ops in prop::collection::vec(model::op(), 1..300)) {
            let mut p = mru(cap);
            let mut m = Model { cap, q: VecDeque::new(), unused: Vec::new() };
            for (i, op) in ops.iter().enumerate() {
                model::check_step(&mut p, &mut m, i, op)?;
            }
        }
    }
}
