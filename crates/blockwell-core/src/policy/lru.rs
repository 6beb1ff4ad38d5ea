//! LRU: least recently used.
//!
//! **Paper.** The classic stack algorithm (Mattson et al., "Evaluation techniques for storage hierarchies",
//! IBM Systems Journal 1970); the baseline of every study in seed `001_*` §4.
//!
//! **Prefetch adaptation (seed `001_*` §4, "LRU").** A prefetched block is inserted at the MRU position "just
//! like regular blocks", flagged *not yet accessed*. Its first demand access clears the flag, counts as a
//! [`Outcome::PrefetchHit`] and moves it to MRU; if it is evicted with the flag still set, the eviction is
//! reported as an unused prefetch.
//!
//! **Parameters.** None. Identical under every preset; matches libcachesim's `LRU` exactly (evict the LRU
//! block before inserting the missed one).
//!
//! **Metadata.** 16 bytes per cached block in the arena (8-byte key, two 31-bit links and the prefetch flag) plus
//! the handle index, 4 bytes + 1 tag byte per bucket, reserved for twice the entries so that churn never makes it
//! grow (`KeyIndex::with_capacity`): 11.4–22.9 bytes per entry depending on where the size falls between powers of
//! two: 27.4–38.9 bytes per cached block. No ghost entries.
//!
//! **Cost.** O(1) per access, insert and eviction.

use super::onelist::{Entry, OneList};
use super::{Access, Evicted, Outcome, Policy};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// LRU has no parameters.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LruConfig {}

/// The LRU policy. The list's front is the MRU end. An entry's flag bit is "prefetched, not yet accessed".
#[derive(Clone, Debug)]
pub struct Lru {
    blocks: OneList<Entry>,
}

impl Lru {
    #[inline]
    fn insert(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) {
        self.blocks.push_front_evicting_back(Entry::new(key), prefetched, out);
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

impl Policy for Lru {
    type Config = LruConfig;

    fn new(capacity: usize, _config: &LruConfig) -> Self {
        Lru { blocks: OneList::new(capacity) }
    }

    super::onelist::one_list_policy_methods!(list_only);

    /// Exact: the back of the list when the cache is full.
    fn victim(&self, incoming: BlockKey) -> super::Victim {
        self.blocks.back_victim(incoming)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testutil::k;

    fn acc(p: &mut Lru, b: u64) -> Outcome {
        let mut out = Vec::new();
        let o = p.access(Access::new(k(b)), &mut out);
        p.validate().unwrap();
        o
    }

    #[test]
    fn evicts_least_recently_used() {
        let mut p = Lru::new(3, &LruConfig::default());
        for b in [1, 2, 3] {
            assert_eq!(acc(&mut p, b), Outcome::Miss);
        }
        assert_eq!(acc(&mut p, 1), Outcome::Hit);
        let mut out = Vec::new();
        assert_eq!(p.access(Access::new(k(4)), &mut out), Outcome::Miss);
        assert_eq!(out, vec![Evicted { key: k(2), unused_prefetch: false }]);
        assert_eq!(p.keys_mru_first(), vec![k(4), k(1), k(3)]);
    }

    #[test]
    fn prefetched_blocks_go_to_mru_flagged() {
        let mut p = Lru::new(3, &LruConfig::default());
        acc(&mut p, 1);
        let mut out = Vec::new();
        assert_eq!(p.prefetch(&[Access::new(k(2)), Access::new(k(3)), Access::new(k(1))], &mut out), 2);
        assert_eq!(p.keys_mru_first(), vec![k(3), k(2), k(1)], "resident block 1 not touched by prefetch");
        assert_eq!(acc(&mut p, 2), Outcome::PrefetchHit);
        assert_eq!(acc(&mut p, 2), Outcome::Hit);
        // 1 is LRU, then 3 (prefetched, unused)
        p.access(Access::new(k(5)), &mut out);
        p.access(Access::new(k(6)), &mut out);
        assert_eq!(
            out,
            vec![Evicted { key: k(1), unused_prefetch: false }, Evicted { key: k(3), unused_prefetch: true }]
        );
    }

    #[test]
    fn remove_drops_a_block() {
        let mut p = Lru::new(2, &LruConfig::default());
        acc(&mut p, 1);
        assert!(p.remove(k(1)));
        assert!(!p.remove(k(1)));
        assert_eq!(p.len(), 0);
        assert_eq!(acc(&mut p, 1), Outcome::Miss);
    }
}
