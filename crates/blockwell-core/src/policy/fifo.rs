//! FIFO: first in, first out.
//!
//! **Paper.** The oldest replacement rule there is; analysed as a paging algorithm by L. A. Belady, "A study of
//! replacement algorithms for a virtual-storage computer", IBM Systems Journal 5(2):78–101, 1966 (and, for its
//! anomaly, L. A. Belady, R. A. Nelson and G. S. Shedler, "An anomaly in space-time characteristics of certain
//! programs running in a paging machine", CACM 12(6):349–353, 1969). Blocks leave in the order they entered;
//! hits change nothing.
//!
//! **Prefetch adaptation (seed `001_*` §4, in its spirit; the seed does not study FIFO).** A prefetched block is
//! inserted at the newest end "just like regular blocks", flagged *not yet accessed*. Its first demand access
//! clears the flag and returns [`Outcome::PrefetchHit`]; it does **not** move the block: FIFO orders blocks by
//! when they entered the cache, and a prefetched block entered when it was prefetched (moving it on first access
//! would turn FIFO into something that reorders on access). If it reaches the old end with the flag still set, the
//! eviction is reported with `unused_prefetch: true`. FIFO keeps no history, so there is no ghost list to keep
//! it out of.
//!
//! **Parameters.** None; identical under every preset ([`Preset::Default`](super::Preset::Default),
//! [`Preset::Libcachesim`](super::Preset::Libcachesim), [`Preset::Butt05`](super::Preset::Butt05)). Matches
//! libcachesim 0.3.5's `FIFO` exactly: on a miss in a full cache the oldest block is evicted *before* the missed
//! block is inserted.
//!
//! **Metadata.** 16 bytes per cached block in the arena (8-byte key, two 31-bit links, the prefetch flag in the
//! spare link bit) plus the handle index, 4 bytes + 1 tag byte per bucket, reserved for twice the entries so that
//! churn never makes it grow (`KeyIndex::with_capacity`): 11.4–22.9 bytes per entry depending on where the size
//! falls between powers of two: 27.4–38.9 bytes per cached block. No ghost entries.
//!
//! **Cost.** O(1) per access, insert and eviction; no allocation once the arena and index have grown to the
//! capacity (both are sized for it up front).

use super::onelist::{Entry, OneList};
use super::{Access, Evicted, Outcome, Policy};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// FIFO has no parameters.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FifoConfig {}

/// The FIFO policy. The list's front is the newest block, its back the next victim. An entry's flag bit is "prefetched, not yet accessed".
#[derive(Clone, Debug)]
pub struct Fifo {
    blocks: OneList<Entry>,
}

impl Fifo {
    #[inline]
    fn insert(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) {
        self.blocks.push_front_evicting_back(Entry::new(key), prefetched, out);
    }

    /// A hit on `h`: FIFO order does not change; a prefetched block's first access.
    #[inline(always)]
    fn on_hit(&mut self, h: crate::arena::Handle) -> Outcome {
        self.blocks.first_use(h)
    }

    /// Resident keys from newest to oldest (for tests and debugging).
    pub fn keys_newest_first(&self) -> Vec<BlockKey> {
        self.blocks.keys()
    }
}

impl Policy for Fifo {
    type Config = FifoConfig;

    fn new(capacity: usize, _config: &FifoConfig) -> Self {
        Fifo { blocks: OneList::new(capacity) }
    }

    super::onelist::one_list_policy_methods!(list_only);

    /// Exact: the back of the list when the cache is full.
    fn victim(&self, incoming: BlockKey) -> super::Victim {
        self.blocks.back_victim(incoming)
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::*;
    use crate::policy::testutil::{acc, ev, k};
    use proptest::prelude::*;

    #[test]
    fn node_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<super::super::onelist::Entry>(), 16);
    }

    #[test]
    fn metadata_is_as_documented() {
        for cap in [1_000, 10_000, 100_000, 1 << 20] {
            let per_block = Fifo::new(cap, &FifoConfig::default()).heap_bytes() as f64 / cap as f64;
            assert!((27.4..=39.0).contains(&per_block), "{per_block} bytes per block at {cap}");
        }
    }

    #[test]
    fn evicts_in_insertion_order_regardless_of_hits() {
        let mut p = Fifo::new(3, &FifoConfig::default());
        for b in [1, 2, 3] {
            assert_eq!(acc(&mut p, b).0, Outcome::Miss);
        }
        // Hits on 1 do not save it.
        assert_eq!(acc(&mut p, 1).0, Outcome::Hit);
        assert_eq!(acc(&mut p, 1).0, Outcome::Hit);
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, vec![ev(2, false)]));
        assert_eq!(acc(&mut p, 3).0, Outcome::Hit);
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![ev(3, false)]));
        assert_eq!(p.keys_newest_first(), vec![k(5), k(1), k(4)]);
    }

    #[test]
    fn capacity_one() {
        let mut p = Fifo::new(1, &FifoConfig::default());
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, vec![]));
        assert_eq!(acc(&mut p, 1), (Outcome::Hit, vec![]));
        assert_eq!(acc(&mut p, 2), (Outcome::Miss, vec![ev(1, false)]));
    }

    #[test]
    fn prefetched_blocks_enter_at_the_new_end_flagged_and_keep_their_place() {
        let mut p = Fifo::new(3, &FifoConfig::default());
        acc(&mut p, 1);
        let mut out = Vec::new();
        assert_eq!(p.prefetch(&[Access::new(k(2)), Access::new(k(3)), Access::new(k(1))], &mut out), 2);
        assert!(out.is_empty());
        p.validate().unwrap();
        assert_eq!(p.keys_newest_first(), vec![k(3), k(2), k(1)], "resident block 1 not touched by prefetch");
        assert_eq!(acc(&mut p, 2).0, Outcome::PrefetchHit);
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        assert_eq!(p.keys_newest_first(), vec![k(3), k(2), k(1)], "first access does not move it");
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![ev(2, false)]));
        assert_eq!(acc(&mut p, 6), (Outcome::Miss, vec![ev(3, true)]), "3 was never accessed");
    }

    #[test]
    fn a_prefetch_group_larger_than_the_cache_pushes_itself_out() {
        let mut p = Fifo::new(2, &FifoConfig::default());
        let mut out = Vec::new();
        let g: Vec<_> = (10..14).map(|b| Access::new(k(b))).collect();
        assert_eq!(p.prefetch(&g, &mut out), 4);
        assert_eq!(out, vec![ev(10, true), ev(11, true)]);
        assert_eq!(p.keys_newest_first(), vec![k(13), k(12)]);
    }

    #[test]
    fn remove_drops_a_block() {
        let mut p = Fifo::new(2, &FifoConfig::default());
        acc(&mut p, 1);
        acc(&mut p, 2);
        assert!(p.remove(k(1)));
        assert!(!p.remove(k(1)));
        p.validate().unwrap();
        assert_eq!(p.len(), 1);
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, vec![]));
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, vec![ev(2, false)]));
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(cap in 1usize..9, ops in prop::collection::vec(model::op(), 1..300)) {
            model::run(Fifo::new(cap, &FifoConfig::default()), &ops)?;
        }
    }
}
