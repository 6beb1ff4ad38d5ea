//! SIEVE: a FIFO with a visited bit and a hand that stays where it stopped.
//!
//! **Paper.** Y. Zhang, J. Yang, Y. Yue, Y. Vigfusson and K. V. Rashmi, "SIEVE is Simpler than LRU: an Efficient
//! Turn-Key Eviction Algorithm for Web Caches", 21st USENIX Symposium on Networked Systems Design and
//! Implementation (NSDI '24), 2024. New blocks enter at the head of a FIFO with the visited bit clear; a hit sets
//! the bit and moves nothing. To evict, the hand walks from where it last stopped (initially the tail) towards
//! the head, clearing visited bits, wrapping from the head back to the tail, and evicts the first unvisited
//! block; it then rests on the next newer block. Unlike CLOCK, survivors are not moved, so old popular blocks stay
//! behind the hand and new ones are sifted quickly ("quick demotion").
//!
//! **Prefetch adaptation (seed `001_*` §4, in its spirit; the seed does not study SIEVE).** A prefetched block is
//! inserted at the head like a missed block, visited bit clear, flagged *not yet accessed*. Its first demand
//! access clears the flag, returns [`Outcome::PrefetchHit`] and counts as the block's *first* reference, i.e.
//! the one that would have inserted it: the visited bit stays clear, exactly the state of a block inserted by a
//! demand miss at that moment; the next hit sets it. The block is not moved (SIEVE never moves a block on a
//! hit; it has been in the cache since its prefetch). If the hand evicts it with the flag still set, the eviction
//! is reported with `unused_prefetch: true`. SIEVE keeps no history, so there is no ghost list.
//!
//! **Parameters.** None; identical under every preset ([`Preset::Default`](super::Preset::Default),
//! [`Preset::Libcachesim`](super::Preset::Libcachesim), [`Preset::Butt05`](super::Preset::Butt05)). Matches
//! libcachesim 0.3.5's `Sieve` exactly: the hand runs (evicting one block) *before* the missed block is
//! inserted, the hand rests on the evicted block's newer neighbour (none when it evicted the head, which sends
//! the next sweep to the tail), and removing the block under the hand moves the hand to its newer neighbour.
//!
//! **Metadata.** 16 bytes per cached block in the arena: the 8-byte key (as two `u32`), two 31-bit links with the
//! prefetch flag and the visited bit in their two spare bits. Plus the handle index, 4 bytes + 1 tag byte per
//! bucket, reserved for twice the entries so that churn never makes it grow (`KeyIndex::with_capacity`): 11.4–22.9
//! bytes per entry depending on where the size falls between powers of two: 27.4–38.9 bytes per cached block. No
//! ghost entries.
//!
//! **Cost.** O(1) per hit and insert. An eviction is O(1) amortized: each step of the hand either evicts or
//! clears a visited bit, and only a hit sets one; a single eviction can walk the whole cache (n + 1 steps).
//! No allocation once the arena and index have grown to the capacity.

use super::onelist::OneList;
use super::{Access, Evicted, Outcome, Policy};
use crate::arena::{Handle, Keyed, Links, List, PackedKey};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// SIEVE has no parameters.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SieveConfig {}

#[derive(Clone, Debug)]
struct Node {
    key: PackedKey,
    /// Flag bit: prefetched, not yet accessed on demand. Second flag bit: visited.
    links: Links,
}

impl Node {
    #[inline]
    fn new(key: BlockKey) -> Self {
        Node { key: PackedKey::new(key), links: Links::default() }
    }

    #[inline]
    fn visited(&self) -> bool {
        self.links.flag2()
    }

    #[inline]
    fn set_visited(&mut self, on: bool) {
        self.links.set_flag2(on)
    }
}

crate::arena::linked_by_field!(Node);
crate::arena::keyed_by_field!(Node);

/// The SIEVE policy. The list's front is the head (newest), its back the tail; the hand walks back to front.
#[derive(Clone, Debug)]
pub struct Sieve {
    blocks: OneList<Node>,
    /// Where the next sweep starts; `None`: at the tail.
    hand: Option<Handle>,
}

impl Sieve {
    /// Runs the hand until one block is evicted.
    #[inline]
    fn evict_one(&mut self, out: &mut Vec<Evicted>) {
        let Some(mut h) = self.hand.or_else(|| self.blocks.list.back()) else {
            return;
        };
        loop {
            let n = &mut self.blocks.arena[h];
            if !n.visited() {
                break;
            }
            n.set_visited(false);
            h = match List::prev_of(&self.blocks.arena, h) {
                Some(p) => p,
                None => self.blocks.list.back().expect("non-empty list"),
            };
        }
        self.hand = List::prev_of(&self.blocks.arena, h);
        self.blocks.evict(h, out);
    }

    /// A hit on `h`: the visited bit; a prefetched block's first access.
    #[inline(always)]
    fn on_hit(&mut self, h: crate::arena::Handle) -> Outcome {
        let n = &mut self.blocks.arena[h];
        if n.links.flag() {
            n.links.set_flag(false);
            Outcome::PrefetchHit
        } else {
            n.set_visited(true);
            Outcome::Hit
        }
    }

    #[inline]
    fn insert(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) {
        while self.blocks.is_full() {
            self.evict_one(out);
        }
        self.blocks.push_front(Node::new(key), prefetched);
    }

    /// Resident (key, visited) pairs from head to tail (for tests and debugging).
    pub fn entries_newest_first(&self) -> Vec<(BlockKey, bool)> {
        self.blocks.iter().map(|(_, n)| (n.key(), n.visited())).collect()
    }

    /// The key under the hand (`None`: the next sweep starts at the tail).
    pub fn hand(&self) -> Option<BlockKey> {
        self.hand.map(|h| self.blocks.arena[h].key())
    }
}

impl Policy for Sieve {
    type Config = SieveConfig;

    fn new(capacity: usize, _config: &SieveConfig) -> Self {
        Sieve { blocks: OneList::new(capacity), hand: None }
    }

    super::onelist::one_list_policy_methods!();

    fn remove(&mut self, key: BlockKey) -> bool {
        match self.blocks.index.remove(&self.blocks.arena, key) {
            Some(h) => {
                if self.hand == Some(h) {
                    self.hand = List::prev_of(&self.blocks.arena, h);
                }
                self.blocks.arena.free_from(&mut self.blocks.list, h);
                true
            }
            None => false,
        }
    }

    fn validate(&self) -> Result<(), String> {
        self.blocks.validate()?;
        let mut hand_seen = self.hand.is_none();
        for (h, n) in self.blocks.iter() {
            if n.links.flag() && n.visited() {
                return Err(format!("key {}: unaccessed prefetched block marked visited", n.key()));
            }
            hand_seen |= self.hand == Some(h);
        }
        if !hand_seen {
            return Err("the hand points at a block that is not on the list".into());
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.blocks.heap_bytes()
    }

    /// Exact, on a read-only walk: the first block from the hand towards the head (wrapping to the tail) whose
    /// visited bit is clear; when every bit is set, the hand clears them all and comes back to where it started,
    /// which is then the victim. As long as the hand's own walk (up to every block).
    fn victim(&self, incoming: BlockKey) -> super::Victim {
        if !self.blocks.is_full() || self.blocks.contains(incoming) {
            return super::Victim::None;
        }
        let Some(start) = self.hand.or_else(|| self.blocks.list.back()) else { return super::Victim::None };
        let mut h = start;
        for _ in 0..self.blocks.len() {
            if !self.blocks.arena[h].visited() {
                return super::Victim::Block(self.blocks.arena[h].key());
            }
            h = match List::prev_of(&self.blocks.arena, h).or_else(|| self.blocks.list.back()) {
                Some(p) => p,
                None => break,
            };
        }
        super::Victim::Block(self.blocks.arena[start].key())
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::*;
    use crate::policy::testutil::{acc, ev, k};
    use proptest::prelude::*;

    fn sieve(cap: usize) -> Sieve {
        Sieve::new(cap, &SieveConfig::default())
    }
    fn entries(p: &Sieve) -> Vec<(u64, bool)> {
        p.entries_newest_first().into_iter().map(|(k, v)| (k.block(), v)).collect()
    }

    #[test]
    fn node_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Node>(), 16);
        let key = BlockKey::new(0xfedc, 0xba98_7654_3210).unwrap();
        assert_eq!(Node::new(key).key(), key);
    }

    #[test]
    fn metadata_is_as_documented() {
        for cap in [1_000, 10_000, 100_000, 1 << 20] {
            let per_block = sieve(cap).heap_bytes() as f64 / cap as f64;
            assert!((27.4..=39.0).contains(&per_block), "{per_block} bytes per block at {cap}");
        }
    }

    #[test]
    fn the_hand_stays_where_it_stopped() {
        let mut p = sieve(4);
        for b in [1, 2, 3, 4] {
            acc(&mut p, b);
        }
        acc(&mut p, 1);
        acc(&mut p, 3);
        assert_eq!(entries(&p), vec![(4, false), (3, true), (2, false), (1, true)]);
        // Hand from the tail: 1 visited (cleared), 2 evicted; the hand rests on 3.
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![ev(2, false)]));
        assert_eq!(entries(&p), vec![(5, false), (4, false), (3, true), (1, false)], "survivors not moved");
        assert_eq!(p.hand(), Some(k(3)));
        // Hand from 3: cleared; 4 evicted; the hand rests on 5.
        assert_eq!(acc(&mut p, 6), (Outcome::Miss, vec![ev(4, false)]));
        assert_eq!(p.hand(), Some(k(5)));
        // 5 unvisited: evicted; the hand rests on 6 (inserted after 5).
        assert_eq!(acc(&mut p, 7), (Outcome::Miss, vec![ev(5, false)]));
        assert_eq!(p.hand(), Some(k(6)));
        assert_eq!(entries(&p), vec![(7, false), (6, false), (3, false), (1, false)]);
        // 6 visited: cleared; 7, the head, evicted: the next sweep starts at the tail.
        acc(&mut p, 6);
        assert_eq!(acc(&mut p, 8), (Outcome::Miss, vec![ev(7, false)]));
        assert_eq!(p.hand(), None);
        assert_eq!(acc(&mut p, 9), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(p.hand(), Some(k(3)));
    }

    #[test]
    fn all_visited_wraps_around_and_evicts_where_it_started() {
        let mut p = sieve(3);
        for b in [1, 2, 3, 1, 2, 3] {
            acc(&mut p, b);
        }
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(entries(&p), vec![(4, false), (3, false), (2, false)]);
        assert_eq!(p.hand(), Some(k(2)));
        acc(&mut p, 2);
        // Hand at 2 (visited: cleared, moves to 3), 3 evicted.
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![ev(3, false)]));
        assert_eq!(p.hand(), Some(k(4)));
    }

    #[test]
    fn capacity_one() {
        let mut p = sieve(1);
        acc(&mut p, 1);
        acc(&mut p, 1);
        assert_eq!(acc(&mut p, 2), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(p.hand(), None);
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, vec![ev(2, false)]));
    }

    #[test]
    fn prefetched_blocks_are_unvisited_until_their_second_access() {
        let mut p = sieve(3);
        acc(&mut p, 1);
        let mut out = Vec::new();
        assert_eq!(p.prefetch(&[Access::new(k(2)), Access::new(k(3)), Access::new(k(1))], &mut out), 2);
        p.validate().unwrap();
        assert_eq!(entries(&p), vec![(3, false), (2, false), (1, false)]);
        assert_eq!(acc(&mut p, 2).0, Outcome::PrefetchHit);
        assert_eq!(entries(&p), vec![(3, false), (2, false), (1, false)], "first access: not visited, not moved");
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        acc(&mut p, 1);
        assert_eq!(entries(&p), vec![(3, false), (2, true), (1, true)]);
        // Hand: 1 cleared, 2 cleared, 3 (prefetched, never accessed) evicted.
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(3, true)]));
        assert_eq!(p.hand(), None);
    }

    #[test]
    fn removing_the_block_under_the_hand_moves_the_hand_to_its_newer_neighbour() {
        let mut p = sieve(4);
        for b in [1, 2, 3, 4, 1] {
            acc(&mut p, b);
        }
        acc(&mut p, 5); // evicts 2, hand on 3
        assert_eq!(p.hand(), Some(k(3)));
        assert!(p.remove(k(3)));
        assert_eq!(p.hand(), Some(k(4)));
        p.validate().unwrap();
        assert!(!p.remove(k(3)));
        assert_eq!(acc(&mut p, 6), (Outcome::Miss, vec![]));
        assert_eq!(acc(&mut p, 7), (Outcome::Miss, vec![ev(4, false)]));
        assert_eq!(p.hand(), Some(k(5)));
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(cap in 1usize..9, ops in prop::collection::vec(model::op(), 1..300)) {
            model::run(sieve(cap), &ops)?;
        }
    }
}
