//! OPT: Belady's optimal offline policy (MIN): evict the block whose next use is farthest in the future.
//!
//! **Paper.** L. A. Belady, "A study of replacement algorithms for a virtual-storage computer", IBM Systems
//! Journal 5(2), 1966. The upper bound of seed `001_*` §4 ("OPT").
//!
//! **Future knowledge.** Each [`Access`] carries `next_use`, the logical time of the key's next demand access
//! (or [`NEVER`](super::NEVER)); the simulator and the `replay` example fill it with a reverse pass over the trace. A resident
//! block's next use is replaced on every demand access to it. The times must be the true future: a stored
//! `next_use` that has already passed makes a block look needed soon forever. With no future knowledge
//! (everything [`NEVER`](super::NEVER)) OPT degrades to "evict the largest key".
//!
//! **Eviction.** On a demand miss with a full cache the resident block with the largest `(next_use,
//! prefetched-not-yet-accessed, key)` is evicted, then the missed block is inserted: classic demand-paging MIN,
//! the same rule as libcachesim's `Belady` (which always inserts; its `EVICT_IMMEDIATELY_IF_NO_FUTURE_ACCESS`
//! switch is commented out in its source). Blocks never used again all tie at [`NEVER`](super::NEVER); which of them goes does not change
//! the miss count, and breaking the tie on the prefetched flag, then on the key, makes it deterministic. With
//! `bypass = true` a missed block whose next use is at least as far as every resident block's (in particular
//! one never used again) is not inserted at all, which is optimal for a cache that may decline a block.
//!
//! **Prefetch adaptation (seed `001_*` §4, "OPT").** Prefetched blocks are inserted by the OPT rule with their
//! own `next_use`, flagged *not yet accessed*; the first demand access clears the flag ([`Outcome::PrefetchHit`]).
//! A prefetched block is *immediately evictable* when it is a wrong prefetch (`next_use` = [`NEVER`](super::NEVER)) or will be
//! used later than every block it could displace: if the cache is full it displaces nothing and is reported at
//! once as an evicted unused prefetch (it was read, so it counts in the return value of [`Policy::prefetch`]);
//! if there is room it is kept and, being the farthest, is the first victim. Blocks of one prefetch group (one
//! [`Policy::prefetch`] call, i.e. one device request) do not evict each other: members join the priority heap
//! only when the whole group has been placed, so victims are chosen among the blocks resident before the call.
//!
//! **Parameters** ([`OptConfig`]): `bypass` (decline a missed block used farthest), `false` under every preset:
//! `Preset::Libcachesim` and `Preset::Default` because that is libcachesim 0.3.5's `Belady`, `Preset::Butt05`
//! because the seed caches every demand block and states the immediate-eviction rule only for prefetches.
//!
//! **Metadata.** 32 bytes per cached block in the arena (8-byte key, links with the prefetch flag, 8-byte next
//! use, 4-byte heap position, padding), 4 bytes in the heap, plus the handle index (4 bytes + 1 tag byte per
//! bucket, reserved for twice the entries so that churn never grows it: 11.4–22.9 bytes per block): 47–59 bytes
//! per cached block.
//! No ghost entries.
//!
//! **Cost.** O(log n) per access, insert and eviction (an indexed binary heap; no allocation after
//! construction).

use super::handle_heap::{HandleHeap, HeapSlot};
use super::{Access, Evicted, Outcome, Policy};
use crate::arena::{Arena, Handle, KeyIndex, Links};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// OPT's parameters.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct OptConfig {
    /// On a demand miss, do not insert a block whose next use is at least as far as every resident block's.
    pub bypass: bool,
}

#[derive(Clone, Debug)]
struct Node {
    key: BlockKey,
    links: Links,
    next_use: u64,
    pos: u32,
}

crate::arena::linked_by_field!(Node);
crate::arena::keyed_by_field!(Node);

impl HeapSlot for Node {
    #[inline]
    fn heap_pos(&self) -> u32 {
        self.pos
    }
    #[inline]
    fn set_heap_pos(&mut self, pos: u32) {
        self.pos = pos
    }
}

/// `a` is evicted before `b`: farther next use, then prefetched-not-accessed, then larger key.
#[inline]
fn before(a: &Node, b: &Node) -> bool {
    (a.next_use, a.links.flag(), a.key) > (b.next_use, b.links.flag(), b.key)
}

/// The OPT policy.
#[derive(Clone, Debug)]
pub struct Opt {
    capacity: usize,
    bypass: bool,
    arena: Arena<Node>,
    index: KeyIndex,
    heap: HandleHeap,
    /// Members of the prefetch group being placed; they join the heap when the group is done. Empty between calls.
    pending: Vec<Handle>,
}

impl Opt {
    #[inline]
    fn evict_top(&mut self, out: &mut Vec<Evicted>) {
        if let Some(h) = self.heap.pop(&mut self.arena, before) {
            super::evict(&mut self.arena, &mut self.index, h, out);
        }
    }

    #[inline]
    fn alloc(&mut self, a: Access, prefetched: bool) -> Handle {
        let h = self.arena.alloc(Node { key: a.key, links: Links::default(), next_use: a.next_use, pos: 0 });
        self.arena[h].links.set_flag(prefetched);
        self.index.insert(&self.arena, h);
        h
    }

    /// The next use of a resident block (for tests).
    pub fn next_use_of(&self, key: BlockKey) -> Option<u64> {
        self.index.get(&self.arena, key).map(|h| self.arena[h].next_use)
    }
}

impl Policy for Opt {
    type Config = OptConfig;
    const NEEDS_NEXT_USE: bool = true;

    fn new(capacity: usize, config: &OptConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        Opt {
            capacity,
            bypass: config.bypass,
            arena: Arena::with_capacity(capacity),
            index: KeyIndex::with_capacity(capacity),
            heap: HandleHeap::with_capacity(capacity),
            pending: Vec::new(),
        }
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.arena.len()
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.index.get(&self.arena, key).is_some()
    }

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        match self.index.get(&self.arena, access.key) {
            Some(h) => {
                let n = &mut self.arena[h];
                let was_prefetched = n.links.flag();
                n.links.set_flag(false);
                n.next_use = access.next_use;
                self.heap.update(&mut self.arena, h, before);
                if was_prefetched {
                    Outcome::PrefetchHit
                } else {
                    Outcome::Hit
                }
            }
            None => {
                if self.arena.len() >= self.capacity && self.bypass {
                    if let Some(top) = self.heap.peek() {
                        if access.next_use >= self.arena[top].next_use {
                            return Outcome::Miss;
                        }
                    }
                }
                while self.arena.len() >= self.capacity {
                    self.evict_top(out);
                }
                let h = self.alloc(access, false);
                self.heap.push(&mut self.arena, h, before);
                Outcome::Miss
            }
        }
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        debug_assert!(self.pending.is_empty());
        let mut n = 0;
        for &a in group {
            if self.contains(a.key) {
                continue;
            }
            n += 1;
            if self.arena.len() >= self.capacity {
                // Only blocks resident before this group are on the heap, so the group cannot evict itself.
                match self.heap.peek() {
                    Some(top) if self.arena[top].next_use > a.next_use => self.evict_top(out),
                    _ => {
                        // Used no sooner than anything it could displace (or never): evictable at once.
                        out.push(Evicted { key: a.key, unused_prefetch: true });
                        continue;
                    }
                }
            }
            let h = self.alloc(a, true);
            self.pending.push(h);
        }
        for i in 0..self.pending.len() {
            let h = self.pending[i];
            self.heap.push(&mut self.arena, h, before);
        }
        self.pending.clear();
        n
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        match self.index.remove(&self.arena, key) {
            Some(h) => {
                self.heap.remove(&mut self.arena, h, before);
                self.arena.free(h);
                true
            }
            None => false,
        }
    }

    fn validate(&self) -> Result<(), String> {
        if !self.pending.is_empty() {
            return Err(format!("{} prefetched blocks left off the heap", self.pending.len()));
        }
        self.heap.check(&self.arena, before)?;
        if self.heap.len() != self.arena.len() || self.index.len() != self.arena.len() {
            return Err(format!(
                "heap {} / index {} / arena {} disagree",
                self.heap.len(),
                self.index.len(),
                self.arena.len()
            ));
        }
        if self.arena.len() > self.capacity {
            return Err(format!("{} blocks over capacity {}", self.arena.len(), self.capacity));
        }
        for h in self.heap.iter() {
            if self.index.get(&self.arena, self.arena[h].key) != Some(h) {
                return Err(format!("key {} on the heap but not indexed", self.arena[h].key));
            }
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes()
            + self.index.heap_bytes()
            + self.heap.heap_bytes()
            + self.pending.capacity() * std::mem::size_of::<Handle>()
    }

    /// Exact without `bypass`: the block used farthest in the future when the cache is full. With `bypass` the
    /// choice depends on the missed block's own next use, which a victim query does not carry: `Unknown` when
    /// the cache is full.
    fn victim(&self, incoming: BlockKey) -> super::Victim {
        if self.arena.len() < self.capacity || self.contains(incoming) {
            return super::Victim::None;
        }
        if self.bypass {
            return super::Victim::Unknown;
        }
        self.heap.peek().map_or(super::Victim::None, |h| super::Victim::Block(self.arena[h].key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::lru::{Lru, LruConfig};
    use crate::policy::testutil::k;
    use crate::policy::NEVER;
    use blockwell_testkit::Rng;
    use proptest::prelude::*;

    fn a(b: u64, next: u64) -> Access {
        Access::with_next_use(k(b), next)
    }

    /// Next-use times of a trace by a reverse pass.
    fn next_uses(ids: &[u64]) -> Vec<u64> {
        let mut next = vec![NEVER; ids.len()];
        let mut seen = std::collections::HashMap::new();
        for i in (0..ids.len()).rev() {
            if let Some(&j) = seen.get(&ids[i]) {
                next[i] = j;
            }
            seen.insert(ids[i], i as u64);
        }
        next
    }

    fn misses<P: Policy>(p: &mut P, ids: &[u64]) -> u64 {
        let next = next_uses(ids);
        let mut out = Vec::new();
        let mut m = 0;
        for (i, &id) in ids.iter().enumerate() {
            if !p.access(a(id, next[i]), &mut out).is_hit() {
                m += 1;
            }
        }
        m
    }

    #[test]
    fn node_is_32_bytes_as_documented() {
        assert_eq!(std::mem::size_of::<Node>(), 32);
    }

    #[test]
    fn belady_is_an_alias_and_metadata_is_as_documented() {
        use crate::policy::PolicyKind;
        assert_eq!(PolicyKind::from_name("Belady").unwrap(), PolicyKind::Opt);
        let per_block = Opt::new(10_000, &OptConfig::default()).heap_bytes() as f64 / 10_000.0;
        assert!((47.0..=59.0).contains(&per_block), "{per_block} bytes per block");
    }

    #[test]
    fn evicts_the_block_used_farthest() {
        // Trace 1 2 3 4 1 2 5 1 2 3 4 5 at capacity 3: Belady's textbook example, 7 misses.
        let ids = [1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5];
        let mut p = Opt::new(3, &OptConfig::default());
        assert_eq!(misses(&mut p, &ids), 7);
        p.validate().unwrap();
        let mut lru = Lru::new(3, &LruConfig::default());
        assert_eq!(misses(&mut lru, &ids), 10);
    }

    #[test]
    fn demand_miss_inserts_then_bypass_declines() {
        let mut out = Vec::new();
        let mut p = Opt::new(2, &OptConfig::default());
        p.access(a(1, 10), &mut out);
        p.access(a(2, 20), &mut out);
        assert_eq!(p.access(a(3, NEVER), &mut out), Outcome::Miss);
        assert_eq!(out, vec![Evicted { key: k(2), unused_prefetch: false }], "classic MIN evicts a resident block");
        assert!(p.contains(k(3)));

        out.clear();
        let mut p = Opt::new(2, &OptConfig { bypass: true });
        p.access(a(1, 10), &mut out);
        p.access(a(2, 20), &mut out);
        assert_eq!(p.access(a(3, NEVER), &mut out), Outcome::Miss);
        assert!(out.is_empty() && !p.contains(k(3)), "bypass declines a block never used again");
        assert_eq!(p.access(a(4, 15), &mut out), Outcome::Miss);
        assert_eq!(out, vec![Evicted { key: k(2), unused_prefetch: false }]);
        p.validate().unwrap();
    }

    #[test]
    fn wrong_or_late_prefetches_are_evicted_at_once_when_full() {
        let mut out = Vec::new();
        let mut p = Opt::new(3, &OptConfig::default());
        p.access(a(1, 10), &mut out);
        p.access(a(2, 20), &mut out);
        // Room for one: the wrong prefetch is kept for now but is the first victim.
        assert_eq!(p.prefetch(&[a(7, NEVER)], &mut out), 1);
        assert!(p.contains(k(7)) && out.is_empty());
        // Full: a prefetch used later than everything resident displaces nothing...
        assert_eq!(p.prefetch(&[a(8, NEVER)], &mut out), 1);
        assert_eq!(out, vec![Evicted { key: k(8), unused_prefetch: true }]);
        out.clear();
        // ...and a useful one displaces the farthest (the wrong prefetch 7, reported unused).
        assert_eq!(p.prefetch(&[a(9, 5)], &mut out), 1);
        assert_eq!(out, vec![Evicted { key: k(7), unused_prefetch: true }]);
        out.clear();
        assert_eq!(p.access(a(9, 30), &mut out), Outcome::PrefetchHit);
        assert_eq!(p.access(a(9, 40), &mut out), Outcome::Hit);
        assert_eq!(p.next_use_of(k(9)), Some(40));
        p.validate().unwrap();
    }

    #[test]
    fn one_group_does_not_evict_itself() {
        let mut out = Vec::new();
        let mut p = Opt::new(3, &OptConfig::default());
        p.access(a(1, 3), &mut out);
        // A group of three: each member may evict only blocks resident before the group (just 1, needed
        // soonest), never a sibling, even though sibling 11 (next use 90) is used later than 12 (next use 60).
        assert_eq!(p.prefetch(&[a(10, 50), a(11, 90), a(12, 60)], &mut out), 3);
        assert_eq!(out, vec![Evicted { key: k(12), unused_prefetch: true }], "no sibling displaced for 12");
        assert!(p.contains(k(1)) && p.contains(k(10)) && p.contains(k(11)));
        out.clear();
        // Once placed, the group's blocks compete like any other; resident blocks are left alone by a prefetch.
        assert_eq!(p.prefetch(&[a(1, 1), a(13, 7)], &mut out), 1);
        assert_eq!(out, vec![Evicted { key: k(11), unused_prefetch: true }], "11 (next use 90) is farthest");
        assert_eq!(p.next_use_of(k(1)), Some(3), "a prefetch is not a reference");
        p.validate().unwrap();
    }

    #[test]
    fn remove_drops_a_block() {
        let mut out = Vec::new();
        let mut p = Opt::new(2, &OptConfig::default());
        p.access(a(1, 5), &mut out);
        p.access(a(2, 6), &mut out);
        assert!(p.remove(k(1)));
        assert!(!p.remove(k(1)));
        p.validate().unwrap();
        assert_eq!(p.len(), 1);
    }

    #[test]
    fn never_worse_than_lru_on_random_traces() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for (n_keys, cap) in [(50u64, 1usize), (50, 5), (200, 20), (1000, 100), (64, 63)] {
            let ids: Vec<u64> = (0..20_000).map(|_| rng.below(n_keys)).collect();
            for bypass in [false, true] {
                let opt = misses(&mut Opt::new(cap, &OptConfig { bypass }), &ids);
                let lru = misses(&mut Lru::new(cap, &LruConfig::default()), &ids);
                assert!(opt <= lru, "keys {n_keys} cap {cap} bypass {bypass}: opt {opt} > lru {lru}");
            }
            let classic = misses(&mut Opt::new(cap, &OptConfig { bypass: false }), &ids);
            let bypass = misses(&mut Opt::new(cap, &OptConfig { bypass: true }), &ids);
            assert!(bypass <= classic, "declining can only help: {bypass} > {classic}");
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Access(u64, u64),
        Prefetch(Vec<(u64, u64)>),
        Remove(u64),
    }

    fn next(n: u64) -> u64 {
        if n == 0 {
            NEVER
        } else {
            n
        }
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u64..24, 0u64..40).prop_map(|(b, n)| Op::Access(b, next(n))),
            2 => proptest::collection::vec((0u64..24, 0u64..40), 1..6)
                .prop_map(|g| Op::Prefetch(g.into_iter().map(|(b, n)| (b, next(n))).collect())),
            1 => (0u64..24).prop_map(Op::Remove),
        ]
    }

    proptest! {
        #[test]
        fn invariants_hold_under_random_operations(
            cap in 1usize..8,
            bypass in any::<bool>(),
            ops in proptest::collection::vec(op(), 1..200),
        ) {
            let mut p = Opt::new(cap, &OptConfig { bypass });
            let mut out = Vec::new();
            for o in ops {
                match o {
                    Op::Access(b, n) => {
                        let was = p.contains(k(b));
                        let r = p.access(a(b, n), &mut out);
                        prop_assert_eq!(r.is_hit(), was);
                    }
                    Op::Prefetch(g) => {
                        let g: Vec<Access> = g.into_iter().map(|(b, n)| a(b, n)).collect();
                        p.prefetch(&g, &mut out);
                    }
                    Op::Remove(b) => {
                        let was = p.contains(k(b));
                        prop_assert_eq!(p.remove(k(b)), was);
                    }
                }
                prop_assert!(p.validate().is_ok(), "{:?}", p.validate());
                prop_assert!(p.len() <= cap);
            }
        }
    }
}
