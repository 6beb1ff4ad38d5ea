//! ARC: adaptive replacement cache.
//!
//! **Paper.** N. Megiddo and D. S. Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", 2nd USENIX
//! Conference on File and Storage Technologies (FAST '03), San Francisco, March 2003, pp. 115–130. Two LRU lists
//! of resident blocks, T1 (seen once recently) and T2 (seen at least twice), each followed by a ghost list of
//! evicted keys, B1 and B2; a target size `p` for T1 grows on a hit in B1 and shrinks on a hit in B2.
//!
//! **Prefetch adaptation (seed `001_*` §4, "ARC").** A prefetched block goes to the MRU end of T1, flagged *not
//! yet accessed*. Its first demand access clears the flag and keeps it in T1 (it moves to T1's MRU end, as a demand
//! miss would have put it there): the prefetch is not counted as a reference, so the block reaches T2 only on its
//! second demand access. A prefetched block whose key is in B1 or B2 goes to T1, not T2: the ghost entry is
//! consumed, `p` is **not** adapted (a prefetch is not a demand reference and says nothing about whether recency or
//! frequency is winning), and the block is marked as coming from a ghost list, so that its first demand access
//! moves it to T2 ("if the block is prefetched correctly, it will be moved to the second queue upon the subsequent
//! on-demand access"). A prefetched block evicted before any demand access is discarded, never put into B1.
//! Room for a prefetched block is made exactly as for a demand miss that is in no list (case IV).
//!
//! **Parameters.** None; the ghost lists hold up to `c` keys in all (|T1|+|B1| ≤ c, total ≤ 2c), which is both
//! standard ARC and seed `001_*` Table 4 ("ghost cache = cache size"). Every preset is the same and matches
//! libcachesim 0.3.5's `ARC` exactly (miss ratios equal on every trace and size we compared). Where libCacheSim
//! and the paper leave room, we follow libCacheSim:
//! - `p` is a float and δ = max(|B2|/|B1|, 1) (resp. max(|B1|/|B2|, 1)) is a real quotient; `p` is adapted
//!   before REPLACE, and |B1| (resp. |B2|) still counts the key that hit.
//! - REPLACE takes T1's LRU block if T1 is non-empty and (|T1| > p or (|T1| = p and the key hit in B2)), **or if T2
//!   is empty** (the paper would pick T2's LRU block, which does not exist, when |T1| = p = c).
//! - Case IV: if |T1| + |B1| ≥ c, drop B1's LRU key and REPLACE when B1 is non-empty, else evict T1's LRU block
//!   without a ghost; otherwise drop B2's LRU key if the directory holds 2c keys, then REPLACE. The victim is
//!   chosen before the missed block is inserted.
//! - A ghost hit evicts (REPLACE) only when the cache is full. Without [`Policy::remove`] the cache is always full
//!   once ghosts exist, so this is the paper's behaviour; after a removal the freed slot is used instead.
//!   Likewise the directory trimming of case IV is done whenever the lists are at their bounds, and REPLACE only
//!   when the cache is full, so removals never break |T1|+|B1| ≤ c or total ≤ 2c.
//!
//! **Metadata.** One arena entry per resident block *and* per ghost key: 20 bytes (the 8-byte key stored as two `u32`
//! so the entry has 4-byte alignment, two 31-bit links plus the prefetch flag, one state byte: list and "came from a
//! ghost list"), plus the handle index at 5 bytes a bucket (4-byte handle, 1 control byte). Every miss removes and
//! inserts keys, and under such churn hashbrown keeps at least twice as many slots as entries (we size it so from the
//! start), i.e. 16/7 to 32/7 buckets per entry after power-of-two rounding: ≈ 11–23 bytes per entry. In all ≈ 31–43
//! bytes per cached block and the same per ghost key; with the directory full (c blocks + c ghost keys) ≈ 63–86 bytes
//! per cached block. Measured on the CloudPhysics trace at c = 26921: `heap_bytes()` / c = 64.3 (LRU: 28.2).
//!
//! **Cost.** O(1) per access, prefetched block, eviction and removal. No allocation per access: the arena and the
//! index are sized for the full directory (2c entries) up front, and a ghost hit reuses the ghost's arena slot and
//! index entry.

use super::multilist::{Adaptive, MultiList, B1, B2, T1, T2};
use super::{Access, Evicted, Outcome, Policy, Victim};
use crate::arena::Handle;
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// ARC has no parameters (the ghost lists are bounded by the cache size, as in the paper).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ArcConfig {}

/// The ARC policy. Every list's front is its MRU end. An entry's state is its list (T1, T2, B1, B2) plus, on
/// a prefetched T1 block, "came from a ghost list"; its flag bit is "prefetched, not yet accessed" (only ever set
/// on T1 blocks).
#[derive(Clone, Debug)]
pub struct Arc {
    /// Target size of T1, in blocks, 0 ≤ p ≤ c.
    p: f64,
    lists: MultiList<4>,
}

impl Arc {
    /// The paper's REPLACE: evicts the LRU block of T1 (to B1) or of T2 (to B2). A prefetched block that was never
    /// accessed is discarded instead of becoming a ghost.
    #[inline]
    fn replace(&mut self, hit_in_b2: bool, out: &mut Vec<Evicted>) {
        let l = &mut self.lists;
        let t1 = l.len(T1) as f64;
        let from_t1 = (!l.is_empty(T1) && (t1 > self.p || (t1 == self.p && hit_in_b2))) || l.is_empty(T2);
        if from_t1 {
            let Some(h) = l.pop_back(T1) else { return };
            l.retire(h, B1, out);
        } else if let Some(h) = l.pop_back(T2) {
            l.demote(h, B2, out);
        }
    }

    /// The block [`Arc::replace`] would take with target `p`, changing nothing.
    fn replace_victim(&self, p: f64, hit_in_b2: bool) -> Victim {
        let l = &self.lists;
        let t1 = l.len(T1) as f64;
        let from_t1 = (!l.is_empty(T1) && (t1 > p || (t1 == p && hit_in_b2))) || l.is_empty(T2);
        l.back_victim(if from_t1 { T1 } else { T2 })
    }

    /// A demand access to a key found in B1 (`in_b2 == false`) or B2: adapt `p`, make room, move it to T2.
    #[inline]
    fn ghost_hit(&mut self, h: Handle, in_b2: bool, out: &mut Vec<Evicted>) {
        self.p = self.lists.adapt(self.p, in_b2);
        self.lists.unlink(h);
        if self.lists.resident() >= self.lists.capacity() {
            self.replace(in_b2, out);
        }
        self.lists.push_front(h, T2);
    }

    /// Target size of T1 (for tests and reports).
    pub fn p(&self) -> f64 {
        self.p
    }

    /// Keys of T1, T2, B1 and B2, each from MRU to LRU (for tests and debugging).
    pub fn lists(&self) -> [Vec<BlockKey>; 4] {
        [T1, T2, B1, B2].map(|l| self.lists.keys(l))
    }
}

impl Adaptive for Arc {
    #[inline]
    fn lists_mut(&mut self) -> &mut MultiList<4> {
        &mut self.lists
    }

    /// Case IV of the paper: makes room for a block that is in none of the four lists and will go to T1.
    #[inline]
    fn make_room_for_t1(&mut self, out: &mut Vec<Evicted>) {
        let c = self.lists.capacity();
        let full = self.lists.resident() >= c;
        if self.lists.len(T1) + self.lists.len(B1) >= c {
            if !self.lists.is_empty(B1) {
                self.lists.drop_back(B1);
                if full {
                    self.replace(false, out);
                }
            } else if let Some(h) = self.lists.pop_back(T1) {
                // |T1| = c: the LRU block of T1 leaves without a ghost.
                self.lists.evict(h, out);
            }
        } else {
            let l = &self.lists;
            if l.resident() + l.len(B1) + l.len(B2) >= 2 * c && !l.is_empty(B2) {
                self.lists.drop_back(B2);
            }
            if full {
                self.replace(false, out);
            }
        }
    }
}

impl Policy for Arc {
    type Config = ArcConfig;

    fn new(capacity: usize, _config: &ArcConfig) -> Self {
        Arc { p: 0.0, lists: MultiList::adaptive(capacity) }
    }

    fn capacity(&self) -> usize {
        self.lists.capacity()
    }

    fn len(&self) -> usize {
        self.lists.resident()
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.lists.contains(key)
    }

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        let Some(h) = self.lists.get(access.key) else {
            self.make_room_for_t1(out);
            self.lists.insert(access.key, T1, false);
            return Outcome::Miss;
        };
        let n = self.lists.node(h);
        match n.list() {
            T1 if n.links.flag() => {
                // First demand access to a prefetched block: its first reference.
                self.lists.first_access(h);
                Outcome::PrefetchHit
            }
            T1 => {
                self.lists.unlink(h);
                self.lists.push_front(h, T2);
                Outcome::Hit
            }
            T2 => {
                self.lists.move_to_front(h);
                Outcome::Hit
            }
            B1 => {
                self.ghost_hit(h, false, out);
                Outcome::Miss
            }
            _ => {
                self.ghost_hit(h, true, out);
                Outcome::Miss
            }
        }
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        self.prefetch_to_t1(group, out)
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        self.lists.remove(key)
    }

    fn validate(&self) -> Result<(), String> {
        self.lists.validate_adaptive(self.p, |_, _| Ok(()))
    }

    fn heap_bytes(&self) -> usize {
        self.lists.heap_bytes()
    }

    /// Exact: the paper's cases. A key in B1 or B2 adapts `p` first and REPLACE runs with the new target (and
    /// whether the key is in B2); a key in no list runs case IV: REPLACE with the current `p` when the cache is
    /// full, or T1's LRU block when |T1| = c.
    fn victim(&self, incoming: BlockKey) -> Victim {
        let l = &self.lists;
        let c = l.capacity();
        let full = l.resident() >= c;
        match l.get(incoming).map(|h| l.node(h).list()) {
            Some(T1 | T2) => Victim::None,
            Some(list) => {
                let in_b2 = list == B2;
                if full {
                    self.replace_victim(l.adapt(self.p, in_b2), in_b2)
                } else {
                    Victim::None
                }
            }
            None if l.len(T1) + l.len(B1) >= c && l.is_empty(B1) => l.back_victim(T1),
            None if full => self.replace_victim(self.p, false),
            None => Victim::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::*;
    use crate::policy::testutil::{k, keys, pf};
    use proptest::prelude::*;

    fn new(c: usize) -> Arc {
        Arc::new(c, &ArcConfig::default())
    }
    /// Demand access; returns the outcome and the evicted keys.
    fn acc(p: &mut Arc, b: u64) -> (Outcome, Vec<BlockKey>) {
        let mut out = Vec::new();
        let o = p.access(Access::new(k(b)), &mut out);
        p.validate().unwrap();
        (o, out.iter().map(|e| e.key).collect())
    }
    fn assert_lists(p: &Arc, t1: &[u64], t2: &[u64], b1: &[u64], b2: &[u64]) {
        assert_eq!(p.lists(), [keys(t1), keys(t2), keys(b1), keys(b2)], "[T1, T2, B1, B2] MRU first");
    }

    #[test]
    fn second_access_promotes_to_t2_and_replace_follows_p() {
        let mut p = new(3);
        for b in [1, 2, 3] {
            assert_eq!(acc(&mut p, b), (Outcome::Miss, vec![]));
        }
        assert_eq!(acc(&mut p, 1).0, Outcome::Hit);
        assert_lists(&p, &[3, 2], &[1], &[], &[]);
        // Case IV.B, cache full, p = 0 < |T1| = 2: REPLACE evicts T1's LRU (2) into B1.
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, keys(&[2])));
        assert_lists(&p, &[4, 3], &[1], &[2], &[]);
        // Ghost hit in B1: p += max(|B2|/|B1|, 1) = 1; |T1| = 2 > 1 so T1's LRU (3) goes to B1; 2 enters T2.
        assert_eq!(acc(&mut p, 2), (Outcome::Miss, keys(&[3])));
        assert_eq!(p.p(), 1.0);
        assert_lists(&p, &[4], &[2, 1], &[3], &[]);
        // |T1| = 1 = p, not a B2 hit: REPLACE takes T2's LRU (1) into B2.
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, keys(&[1])));
        assert_lists(&p, &[5, 4], &[2], &[3], &[1]);
        // |T1| + |B1| = 3 = c: case IV.A drops B1's LRU (3) and REPLACE evicts T1's LRU (4): |T1| = 2 > p = 1.
        assert_eq!(acc(&mut p, 6), (Outcome::Miss, keys(&[4])));
        assert_lists(&p, &[6, 5], &[2], &[4], &[1]);
        // Ghost hit in B2: p -= max(|B1|/|B2|, 1) = 1 → 0; |T1| = 2 > 0: T1's LRU (5) goes to B1.
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, keys(&[5])));
        assert_eq!(p.p(), 0.0);
        assert_lists(&p, &[6], &[1, 2], &[5, 4], &[]);
    }

    #[test]
    fn b1_hit_with_t1_equal_to_p_evicts_from_t2() {
        let mut p = new(2);
        acc(&mut p, 1);
        acc(&mut p, 1); // T2 = [1]
        acc(&mut p, 2); // T1 = [2]
                        // |T1| = 1 > p = 0: 2 → B1.
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, keys(&[2])));
        // B1 hit: p = 1; |T1| = 1 = p, not in B2: T2's LRU (1) → B2.
        assert_eq!(acc(&mut p, 2), (Outcome::Miss, keys(&[1])));
        assert_lists(&p, &[3], &[2], &[], &[1]);
        // B2 hit: p = max(1 - max(0/1, 1), 0) = 0 first, then |T1| = 1 > 0: T1's LRU (3) → B1.
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, keys(&[3])));
        assert_lists(&p, &[], &[1, 2], &[3], &[]);
    }

    #[test]
    fn t1_full_without_ghosts_evicts_lru_of_t1_without_ghost() {
        let mut p = new(2);
        acc(&mut p, 1);
        acc(&mut p, 2);
        // |T1| + |B1| = 2 = c and B1 empty: 1 leaves with no ghost.
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, keys(&[1])));
        assert_lists(&p, &[3, 2], &[], &[], &[]);
        assert_eq!(acc(&mut p, 1).0, Outcome::Miss, "no ghost, so a plain miss");
    }

    #[test]
    fn capacity_one() {
        let mut p = new(1);
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, vec![]));
        assert_eq!(acc(&mut p, 1), (Outcome::Hit, vec![]));
        assert_eq!(acc(&mut p, 2), (Outcome::Miss, keys(&[1]))); // T2 LRU → B2
        assert_lists(&p, &[2], &[], &[], &[1]);
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, keys(&[2]))); // B2 hit; T2 empty so T1 → B1
        assert_lists(&p, &[], &[1], &[2], &[]);
    }

    #[test]
    fn prefetched_block_stays_in_t1_on_first_access() {
        let mut p = new(4);
        acc(&mut p, 1);
        assert_eq!(pf(&mut p, &[2, 3, 1]).0, 2, "resident 1 untouched");
        assert_lists(&p, &[3, 2, 1], &[], &[], &[]);
        assert_eq!(acc(&mut p, 2).0, Outcome::PrefetchHit);
        assert_lists(&p, &[2, 3, 1], &[], &[], &[]);
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        assert_lists(&p, &[3, 1], &[2], &[], &[]);
    }

    #[test]
    fn unaccessed_prefetched_block_leaves_no_ghost() {
        let mut p = new(2);
        acc(&mut p, 1);
        acc(&mut p, 1); // T2 = [1]
        pf(&mut p, &[2]); // T1 = [2*]
        let mut out = Vec::new();
        p.access(Access::new(k(3)), &mut out);
        assert_eq!(out, vec![Evicted { key: k(2), unused_prefetch: true }]);
        assert_lists(&p, &[3], &[1], &[], &[]);
        assert_eq!(acc(&mut p, 2).0, Outcome::Miss);
        assert_eq!(p.p(), 0.0, "not a ghost hit");
    }

    #[test]
    fn prefetched_ghost_goes_to_t1_then_t2_on_demand() {
        let mut p = new(2);
        acc(&mut p, 1);
        acc(&mut p, 1);
        acc(&mut p, 2);
        acc(&mut p, 3); // 2 → B1
        assert_lists(&p, &[3], &[1], &[2], &[]);
        // Prefetch of 2 (in B1): T1, p unchanged; case IV.B makes room: REPLACE evicts 3 (|T1| = 1 > p = 0).
        let (n, out) = pf(&mut p, &[2]);
        assert_eq!(n, 1);
        assert_eq!(out, vec![Evicted { key: k(3), unused_prefetch: false }]);
        assert_eq!(p.p(), 0.0);
        assert_lists(&p, &[2], &[1], &[3], &[]);
        assert_eq!(acc(&mut p, 2).0, Outcome::PrefetchHit);
        assert_lists(&p, &[], &[2, 1], &[3], &[]);
        // And one from B2, evicted unaccessed: discarded, not a ghost again.
        acc(&mut p, 4); // REPLACE: T1 empty → T2's LRU (1) → B2 ; 4 → T1
        assert_lists(&p, &[4], &[2], &[3], &[1]);
        let (_, out) = pf(&mut p, &[1]);
        assert_eq!(out, vec![Evicted { key: k(4), unused_prefetch: false }]);
        // Case IV.A: |T1| + |B1| = 2 = c drops B1's LRU (3), then REPLACE evicts 4 into B1.
        assert_lists(&p, &[1], &[2], &[4], &[]);
        let mut out = Vec::new();
        p.access(Access::new(k(5)), &mut out);
        p.validate().unwrap();
        assert_eq!(out, vec![Evicted { key: k(1), unused_prefetch: true }]);
        assert!(!p.lists().iter().flatten().any(|&x| x == k(1)), "no ghost for an unused prefetch");
    }

    #[test]
    fn remove_keeps_ghosts_and_bounds() {
        let mut p = new(2);
        acc(&mut p, 1);
        acc(&mut p, 2);
        acc(&mut p, 2);
        acc(&mut p, 3); // 1 → B1
        assert!(p.remove(k(2)));
        assert!(!p.remove(k(1)), "ghosts are not resident");
        assert_eq!(p.len(), 1);
        // Free slot: a B1 hit needs no REPLACE.
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, vec![]));
        assert_lists(&p, &[3], &[1], &[], &[]);
    }

    #[test]
    fn config_rejects_unknown_fields() {
        assert!(serde_json::from_str::<ArcConfig>(r#"{"p":1}"#).is_err());
    }

    #[test]
    fn entry_is_20_bytes() {
        assert_eq!(
            std::mem::size_of::<super::super::multilist::Node>(),
            20,
            "the module docs state the metadata per entry"
        );
    }

    /// The paper's pseudocode with libCacheSim's choices, on plain vectors (index 0 = MRU), O(n) per step.
    struct Model {
        c: usize,
        p: f64,
        l: [Vec<u64>; 4], // T1, T2, B1, B2
    }

    impl Model {
        fn pos(&self, i: usize, x: u64) -> Option<usize> {
            self.l[i].iter().position(|&y| y == x)
        }
        fn replace(&mut self, in_b2: bool) {
            let t1 = self.l[0].len() as f64;
            if (t1 > 0.0 && (t1 > self.p || (t1 == self.p && in_b2))) || self.l[1].is_empty() {
                let y = self.l[0].pop().unwrap();
                self.l[2].insert(0, y);
            } else {
                let y = self.l[1].pop().unwrap();
                self.l[3].insert(0, y);
            }
        }
        fn access(&mut self, x: u64) -> bool {
            for i in 0..2 {
                if let Some(j) = self.pos(i, x) {
                    self.l[i].remove(j);
                    self.l[1].insert(0, x);
                    return true;
                }
            }
            let full = self.l[0].len() + self.l[1].len() == self.c;
            let (b1, b2) = (self.l[2].len() as f64, self.l[3].len() as f64);
            if let Some(j) = self.pos(2, x) {
                self.p = (self.p + (b2 / b1).max(1.0)).min(self.c as f64);
                self.l[2].remove(j);
                if full {
                    self.replace(false);
                }
                self.l[1].insert(0, x);
            } else if let Some(j) = self.pos(3, x) {
                self.p = (self.p - (b1 / b2).max(1.0)).max(0.0);
                self.l[3].remove(j);
                if full {
                    self.replace(true);
                }
                self.l[1].insert(0, x);
            } else {
                if full {
                    if self.l[0].len() + self.l[2].len() == self.c {
                        if self.l[2].pop().is_some() {
                            self.replace(false);
                        } else {
                            self.l[0].pop();
                        }
                    } else {
                        if self.l.iter().map(Vec::len).sum::<usize>() == 2 * self.c {
                            self.l[3].pop();
                        }
                        self.replace(false);
                    }
                }
                self.l[0].insert(0, x);
            }
            false
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(cap in 1usize..9, ops in proptest::collection::vec(model::op(), 1..300)) {
            model::run(new(cap), &ops)?;
        }

        #[test]
        fn agrees_with_a_naive_model(cap in 1usize..10, trace in proptest::collection::vec(0u64..30, 1..400)) {
            let mut p = new(cap);
            let mut m = Model { c: cap, p: 0.0, l: Default::default() };
            let mut out = Vec::new();
            for (i, &b) in trace.iter().enumerate() {
                let hit = p.access(Access::new(k(b)), &mut out).is_hit();
                prop_assert_eq!(hit, m.access(b), "access {} to {}", i, b);
                prop_assert_eq!(p.p(), m.p);
            }
            prop_assert_eq!(p.lists(), m.l.clone().map(|v| keys(&v)));
        }
    }
}
