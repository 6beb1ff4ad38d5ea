//! LRFU: least recently/frequently used, a continuum between LRU and LFU.
//!
//! **Paper.** D. Lee, J. Choi, J.-H. Kim, S. H. Noh, S. L. Min, Y. Cho, C. S. Kim, "LRFU: a spectrum of
//! policies that subsumes the least recently used and least frequently used policies", IEEE Transactions on
//! Computers 50(12), 2001. Seed `001_*` §4 ("LRFU").
//!
//! **Rule.** Every resident block `x` has a combined recency and frequency value `C(x)`; a reference at time `t`
//! sets `C(x) = 1 + 2^(-λ·(t - t_last))·C(x)` (a first reference gives `C(x) = 1`), and between references
//! `C(x)` decays by `2^(-λ·Δt)`. The block with the smallest `C` at the current time is evicted. Time is the
//! policy's own logical clock: the number of demand accesses so far. `λ = 0` is LFU (`C` counts references;
//! ties go to the least recently referenced block) and `λ = 1` is exactly LRU. The CRF of an evicted block is
//! forgotten (no history of non-resident blocks is kept).
//!
//! **Implementation.** All values decay by the same factor, so the order at any time is the order of
//! `log2 C(x) + λ·t_last(x)` (the value at the last reference, in the log domain so nothing overflows or
//! underflows). Blocks sit in an indexed binary heap keyed by that `f64`, ties broken by the time of the last
//! reference and then by the key (a strict total order, so runs are deterministic). For `λ = 1` the
//! log-domain key never puts an older reference above a newer one (`C < 2`, so `log2 C ≤ 1` even after
//! rounding, the times of last reference are distinct integers, and an exact tie goes to the older one): the
//! run equals LRU's, victim for victim.
//!
//! **Prefetch adaptation (seed `001_*` §4, "LRFU").** "Prefetched blocks are treated as the most recently
//! accessed": a prefetched block gets `C = 1` at the current time (as if first referenced now) and is flagged
//! *not yet accessed*. On its first demand access the flag is cleared and `C` is reset to the initial value 1
//! at that time instead of applying the update, so a block once prefetched and once used counts as seen once
//! ([`Outcome::PrefetchHit`]). Evicted with the flag set, it is reported as an unused prefetch.
//!
//! **Parameters** ([`LrfuConfig`]): `lambda` ∈ [0, 1], 0.001 under every preset. That is Table 4 of seed `001_*`
//! (`Preset::Butt05`); libcachesim 0.3.5 has no LRFU, so `Preset::Libcachesim` and `Preset::Default` use the
//! seed's value too.
//!
//! **Metadata.** 48 bytes per cached block in the arena (8-byte key, links with the prefetch flag, `C` and the
//! heap key as `f64`, 8-byte time of last reference, 4-byte heap position, padding), 4 bytes in the heap, plus
//! the handle index (4 bytes + 1 tag byte per bucket, reserved for twice the entries so that churn never grows
//! it: 11.4–22.9 bytes per block): 63–75 bytes per cached block. No ghost entries.
//!
//! **Cost.** O(log n) per access, insert and eviction (one `exp2` and one `log2` per hit); no allocation after
//! construction.

use super::handle_heap::{HandleHeap, HeapSlot};
use super::{Access, Evicted, Outcome, Policy};
use crate::arena::{Arena, KeyIndex, Links};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;

/// LRFU's parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LrfuConfig {
    /// Decay rate λ in [0, 1]: 0 is LFU, 1 is LRU.
    pub lambda: f64,
}

impl Default for LrfuConfig {
    fn default() -> Self {
        LrfuConfig { lambda: 0.001 }
    }
}

#[derive(Clone, Debug)]
struct Node {
    key: BlockKey,
    links: Links,
    /// `C(x)` at the time of the last reference.
    crf: f64,
    /// Heap key: `log2(crf) + λ·last`.
    prio: f64,
    /// Logical time of the last reference (or of the prefetch).
    last: u64,
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

/// `a` is evicted before `b`: smaller CRF now, then older last reference, then smaller key.
#[inline]
fn before(a: &Node, b: &Node) -> bool {
    a.prio.total_cmp(&b.prio).then(a.last.cmp(&b.last)).then(a.key.cmp(&b.key)) == Ordering::Less
}

/// The LRFU policy.
#[derive(Clone, Debug)]
pub struct Lrfu {
    capacity: usize,
    lambda: f64,
    /// Demand accesses so far.
    now: u64,
    arena: Arena<Node>,
    index: KeyIndex,
    heap: HandleHeap,
}

impl Lrfu {
    #[inline]
    fn evict_one(&mut self, out: &mut Vec<Evicted>) {
        if let Some(h) = self.heap.pop(&mut self.arena, before) {
            super::evict(&mut self.arena, &mut self.index, h, out);
        }
    }

    #[inline]
    fn insert(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) {
        while self.arena.len() >= self.capacity {
            self.evict_one(out);
        }
        let t = self.now;
        let node = Node { key, links: Links::default(), crf: 1.0, prio: self.lambda * t as f64, last: t, pos: 0 };
        let h = self.arena.alloc(node);
        self.arena[h].links.set_flag(prefetched);
        self.index.insert(&self.arena, h);
        self.heap.push(&mut self.arena, h, before);
    }

    /// `C(key)` at the current time, if resident (for tests and debugging).
    pub fn crf(&self, key: BlockKey) -> Option<f64> {
        let h = self.index.get(&self.arena, key)?;
        let n = &self.arena[h];
        Some(n.crf * (-self.lambda * (self.now - n.last) as f64).exp2())
    }
}

impl Policy for Lrfu {
    type Config = LrfuConfig;

    fn check_config(c: &LrfuConfig) -> Result<(), String> {
        if (0.0..=1.0).contains(&c.lambda) {
            Ok(())
        } else {
            Err(format!("lambda must be in [0, 1] (0 = LFU, 1 = LRU), got {}", c.lambda))
        }
    }

    fn new(capacity: usize, config: &LrfuConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        if let Err(e) = Self::check_config(config) {
            panic!("lrfu: {e}");
        }
        Lrfu {
            capacity,
            lambda: config.lambda,
            now: 0,
            arena: Arena::with_capacity(capacity),
            index: KeyIndex::with_capacity(capacity),
            heap: HandleHeap::with_capacity(capacity),
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
        self.now += 1;
        let t = self.now;
        match self.index.get(&self.arena, access.key) {
            Some(h) => {
                let lambda = self.lambda;
                let n = &mut self.arena[h];
                let outcome = if n.links.flag() {
                    n.links.set_flag(false);
                    n.crf = 1.0;
                    Outcome::PrefetchHit
                } else {
                    n.crf = 1.0 + (-lambda * (t - n.last) as f64).exp2() * n.crf;
                    Outcome::Hit
                };
                n.last = t;
                n.prio = n.crf.log2() + lambda * t as f64;
                self.heap.update(&mut self.arena, h, before);
                outcome
            }
            None => {
                self.insert(access.key, false, out);
                Outcome::Miss
            }
        }
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        super::prefetch_missing(self, group, out, |p, key, out| p.insert(key, true, out))
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
        // The bound of C: 1 <= C < 1 / (1 - 2^-λ) (the geometric series), or any count when λ = 0.
        let bound = if self.lambda > 0.0 { 1.0 / (1.0 - (-self.lambda).exp2()) } else { f64::INFINITY };
        for h in self.heap.iter() {
            let n = &self.arena[h];
            if self.index.get(&self.arena, n.key) != Some(h) {
                return Err(format!("key {} on the heap but not indexed", n.key));
            }
            if n.last > self.now {
                return Err(format!("key {}: last reference {} after now {}", n.key, n.last, self.now));
            }
            if !(n.crf >= 1.0 && n.crf <= bound * (1.0 + 1e-9)) {
                return Err(format!("key {}: C = {} outside [1, {bound}]", n.key, n.crf));
            }
            if n.links.flag() && n.crf != 1.0 {
                return Err(format!("key {}: prefetched, not accessed, but C = {}", n.key, n.crf));
            }
            let want = n.crf.log2() + self.lambda * n.last as f64;
            if n.prio != want {
                return Err(format!("key {}: heap key {} but C and time give {want}", n.key, n.prio));
            }
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes() + self.index.heap_bytes() + self.heap.heap_bytes()
    }

    /// Exact: the top of the heap (smallest CRF now) when the cache is full.
    fn victim(&self, incoming: BlockKey) -> super::Victim {
        if self.arena.len() < self.capacity || self.contains(incoming) {
            return super::Victim::None;
        }
        self.heap.peek().map_or(super::Victim::None, |h| super::Victim::Block(self.arena[h].key))
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::*;
    use crate::policy::lru::{Lru, LruConfig};
    use crate::policy::testutil::{acc, k};
    use blockwell_testkit::Rng;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn lrfu(cap: usize, lambda: f64) -> Lrfu {
        Lrfu::new(cap, &LrfuConfig { lambda })
    }
    fn ev(b: u64) -> Vec<Evicted> {
        vec![Evicted { key: k(b), unused_prefetch: false }]
    }
    fn trace(n: usize, keys: u64, seed: u64) -> Vec<u64> {
        let mut rng = Rng(seed | 1);
        (0..n)
            .map(|_| {
                let x = rng.next();
                // Skewed: half the accesses go to an eighth of the keys.
                if x & 1 == 0 {
                    (x >> 8) % (keys / 8).max(1)
                } else {
                    (x >> 8) % keys
                }
            })
            .collect()
    }

    #[test]
    fn node_is_48_bytes_as_documented() {
        assert_eq!(std::mem::size_of::<Node>(), 48);
    }

    #[test]
    fn metadata_is_as_documented() {
        let per_block = lrfu(10_000, 0.001).heap_bytes() as f64 / 10_000.0;
        assert!((63.0..=75.0).contains(&per_block), "{per_block} bytes per block");
    }

    #[test]
    fn hand_worked_crf_values_pick_the_victim() {
        // λ = 0.5, capacity 2. t1: A, t2: A  -> C(A) = 1 + 2^-0.5 = 1.7071 at t2.
        // t3: B -> C(B) = 1. t4: C misses: C(A) = 1.7071·2^-1 = 0.8536, C(B) = 2^-0.5 = 0.7071 -> evict B.
        // t5: D misses: C(A) = 1.7071·2^-1.5 = 0.6036, C(C) = 2^-0.5 = 0.7071 -> evict A.
        let mut p = lrfu(2, 0.5);
        acc(&mut p, 1);
        assert_eq!(acc(&mut p, 1).0, Outcome::Hit);
        assert!((p.crf(k(1)).unwrap() - (1.0 + 0.5f64.sqrt())).abs() < 1e-12);
        acc(&mut p, 2);
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, ev(2)));
        assert!((p.crf(k(1)).unwrap() - (1.0 + 0.5f64.sqrt()) / 2.0).abs() < 1e-12);
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, ev(1)));
        // With λ = 0.1 frequency wins: C(A) at t5 = (1 + 2^-0.1)·2^-0.3 = 1.5226 > C(C) = 2^-0.1 -> evict C.
        let mut p = lrfu(2, 0.1);
        for b in [1, 1, 2] {
            acc(&mut p, b);
        }
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, ev(2)));
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, ev(3)));
        assert!((p.crf(k(1)).unwrap() - (1.0 + 2f64.powf(-0.1)) * 2f64.powf(-0.3)).abs() < 1e-12);
    }

    #[test]
    fn lambda_one_is_lru() {
        for (cap, keys, seed) in [(1usize, 10u64, 1u64), (3, 20, 2), (10, 100, 3), (100, 1000, 4), (50, 60, 5)] {
            let ids = trace(30_000, keys, seed);
            let mut p = lrfu(cap, 1.0);
            let mut q = Lru::new(cap, &LruConfig::default());
            let (mut out_p, mut out_q) = (Vec::new(), Vec::new());
            for (i, &b) in ids.iter().enumerate() {
                let a = Access::new(k(b));
                assert_eq!(p.access(a, &mut out_p), q.access(a, &mut out_q), "cap {cap} access {i}");
                assert_eq!(out_p, out_q, "cap {cap} access {i}: same victims");
            }
        }
    }

    #[test]
    fn lambda_zero_is_lfu_with_lru_tie_break() {
        // Model: evict the smallest (count since insertion, last access, key).
        for (cap, keys, seed) in [(1usize, 10u64, 7u64), (4, 30, 8), (20, 200, 9)] {
            let ids = trace(20_000, keys, seed);
            let mut p = lrfu(cap, 0.0);
            let mut model: HashMap<u64, (u64, u64)> = HashMap::new();
            let mut out = Vec::new();
            for (t, &b) in ids.iter().enumerate() {
                out.clear();
                let hit = p.access(Access::new(k(b)), &mut out).is_hit();
                assert_eq!(hit, model.contains_key(&b));
                if let Some(e) = model.get_mut(&b) {
                    *e = (e.0 + 1, t as u64);
                } else {
                    if model.len() == cap {
                        let (&v, _) = model.iter().min_by_key(|(&key, &(c, l))| (c, l, key)).unwrap();
                        model.remove(&v);
                        assert_eq!(out, ev(v), "access {t}");
                    }
                    model.insert(b, (1, t as u64));
                }
            }
        }
    }

    #[test]
    fn small_lambda_evicts_a_least_frequent_block() {
        // λ = 1e-9 over 20k accesses decays C by at most 0.002%: the victim always has the smallest count.
        let ids = trace(20_000, 100, 11);
        let mut p = lrfu(10, 1e-9);
        let mut count: HashMap<u64, u64> = HashMap::new();
        let mut out = Vec::new();
        for &b in &ids {
            out.clear();
            p.access(Access::new(k(b)), &mut out);
            for v in &out {
                let c = count.remove(&v.key.block()).unwrap();
                assert!(count.values().all(|&o| o >= c), "victim count {c} not minimal");
            }
            *count.entry(b).or_default() += 1;
        }
    }

    #[test]
    fn prefetched_block_counts_its_first_use_as_a_first_reference() {
        let mut p = lrfu(3, 0.5);
        let mut out = Vec::new();
        assert_eq!(p.prefetch(&[Access::new(k(1)), Access::new(k(2))], &mut out), 2);
        assert_eq!(p.crf(k(1)), Some(1.0), "C = 1 at the current time, as if just referenced");
        acc(&mut p, 3);
        assert_eq!(acc(&mut p, 1).0, Outcome::PrefetchHit);
        assert_eq!(p.crf(k(1)), Some(1.0), "reset to the initial value, not 1 + decayed C");
        assert_eq!(acc(&mut p, 1).0, Outcome::Hit);
        assert!((p.crf(k(1)).unwrap() - (1.0 + 0.5f64.sqrt())).abs() < 1e-12);
        // 2 was prefetched at t0 and never used: the smallest C, reported unused.
        let (_, out) = acc(&mut p, 4);
        assert_eq!(out, vec![Evicted { key: k(2), unused_prefetch: true }]);
    }

    #[test]
    fn bad_lambda_is_rejected_by_the_spec() {
        use crate::policy::PolicySpec;
        for bad in ["lrfu(lambda=-0.1)", "lrfu(lambda=1.5)", "lrfu(lambda=x)", "lrfu(alpha=1)"] {
            assert!(PolicySpec::parse(bad).is_err(), "{bad}");
        }
        assert!(PolicySpec::parse("lrfu(lambda=0)").is_ok());
    }

    #[test]
    fn remove_drops_a_block() {
        let mut p = lrfu(2, 0.001);
        acc(&mut p, 1);
        assert!(p.remove(k(1)));
        assert!(!p.remove(k(1)));
        p.validate().unwrap();
        assert_eq!(acc(&mut p, 1).0, Outcome::Miss);
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(
            cap in 1usize..8,
            lambda in prop_oneof![Just(0.0), Just(1.0), 0.0f64..1.0],
            ops in proptest::collection::vec(model::op(), 1..200),
        ) {
            model::run(lrfu(cap, lambda), &ops)?;
        }
    }
}
