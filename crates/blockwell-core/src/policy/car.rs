//! CAR: CLOCK with adaptive replacement.
//!
//! **Paper.** S. Bansal and D. S. Modha, "CAR: Clock with Adaptive Replacement", 3rd USENIX Conference on File
//! and Storage Technologies (FAST '04), San Francisco, March–April 2004, pp. 187–200. ARC's structure with the two
//! resident LRU lists replaced by CLOCKs: T1 and T2 are circular lists with a reference bit per block, a hit only
//! sets the bit, and the hand (the head of T1 or T2) either demotes a block whose bit is 0 to the MRU end of its
//! ghost list (B1, B2) or clears the bit and moves the block to the tail of T2. We implement Figure 2 of the paper
//! line by line: on a miss with the cache full, `replace()` first, then the directory replacement (discard B1's LRU
//! key if the key is in no ghost list and |T1| + |B1| = c, else B2's LRU key if the directory holds 2c keys), then
//! insert at the tail of T1, or, for a ghost hit, adapt `p` (after `replace()`, with |B1| or |B2| still counting the
//! key) and move the key to the tail of T2. A new block's reference bit is 0.
//!
//! libCacheSim 0.3.5's Python package has no CAR (its C tree has an unreleased `CAR.c` that differs from the
//! paper: integer δ, and a directory replacement whose conditions do not match Figure 2), so there is nothing to
//! match exactly; the unit tests check hand-worked traces of the pseudocode instead. Like our ARC, `p` is a float
//! and δ = max(1, |B2|/|B1|) (resp. max(1, |B1|/|B2|)) a real quotient, as in the paper.
//!
//! **Prefetch adaptation (seed `001_*` §4, "ARC"; "analogous to ARC with CLOCK lists").** A prefetched block is
//! inserted at the tail of T1 with its reference bit 0, flagged *not yet accessed*. Its first demand access does
//! **not** set the reference bit (that would count the prefetch as a first reference and send the block to T2 at
//! the next sweep); it clears the flag and moves the block to the tail of T1, exactly where a demand miss would have
//! put it. A prefetched block whose key is in B1 or B2 goes to the tail of T1, not T2; the ghost key is consumed,
//! `p` is not adapted (a prefetch is not a demand reference), and the block is marked as coming from a ghost list:
//! its first demand access moves it to the tail of T2 with bit 0, as the demand ghost hit would have. When the hand
//! finds a prefetched block never accessed it is discarded, not demoted into B1 (it is "found" all the same).
//! Room for a prefetched block is made as for a demand miss on a key in no list.
//!
//! **Parameters.** None: ghost lists bounded as in the paper (|T1| + |B1| ≤ c, total ≤ 2c); every preset is the
//! same. After a [`Policy::remove`] the cache is not full, so `replace()` is skipped, but the directory replacement
//! still runs whenever the lists are at those bounds (the paper only runs it when the cache is full, which without
//! removals is the same thing), so removals never break the bounds.
//!
//! **Metadata.** One arena entry per resident block and per ghost key: 20 bytes (the 8-byte key stored as two `u32` so
//! the entry has 4-byte alignment, two 31-bit links plus the prefetch flag, one state byte: list, reference bit, "came
//! from a ghost list"), plus the handle index at 5 bytes a bucket (4-byte handle, 1 control byte). Every miss removes
//! and inserts keys, and under such churn hashbrown keeps at least twice as many slots as entries (we size it so from
//! the start), i.e. 16/7 to 32/7 buckets per entry after power-of-two rounding: ≈ 11–23 bytes per entry. In all ≈ 31–43
//! bytes per cached block and the same per ghost key; with the directory full (c blocks + c ghost keys) ≈ 63–86 bytes
//! per cached block. Measured on the CloudPhysics trace at c = 26921: `heap_bytes()` / c = 64.3.
//!
//! **Cost.** O(1) per hit (sets a bit); amortized O(1) per miss (each sweep step clears a bit that a hit set);
//! no allocation per access (the arena and the index are sized for the full directory, 2c entries, up front).

use super::multilist::{Adaptive, MultiList, Node, B1, B2, T1, T2};
use super::{Access, Evicted, Outcome, Policy, Victim};
use crate::arena::Keyed;
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// CAR has no parameters (the ghost lists are bounded by the cache size, as in the paper).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CarConfig {}

/// The CLOCK reference bit, in an entry's state (above its list and the came-from-ghost mark).
const REF: u8 = 0b1000;

/// A CLOCK list's keys with their reference bits, as [`Car::lists`] returns them.
pub type ClockKeys = Vec<(BlockKey, bool)>;

/// The CAR policy. For T1 and T2 the list's back is the clock's head (the hand) and its front the tail (where
/// blocks are inserted); for B1 and B2 the front is the MRU end. An entry's state is its list, the reference
/// bit and, on a prefetched T1 block, "came from a ghost list"; its flag bit is "prefetched, not yet accessed"
/// (only ever set on T1 blocks).
#[derive(Clone, Debug)]
pub struct Car {
    /// Target size of T1, in blocks, 0 ≤ p ≤ c.
    p: f64,
    lists: MultiList<4>,
}

impl Car {
    /// The paper's `replace()`: sweeps the hand until a block with reference bit 0 is demoted.
    fn replace(&mut self, out: &mut Vec<Evicted>) {
        loop {
            let l = &mut self.lists;
            let from_t1 = l.len(T1) as f64 >= self.p.max(1.0) || l.is_empty(T2);
            let Some(h) = l.pop_back(if from_t1 { T1 } else { T2 }) else { return };
            if l.node(h).state & REF != 0 {
                // Second chance: bit to 0, to the tail of T2 (from T1, or around T2's clock).
                l.push_front(h, T2);
                continue;
            }
            // A prefetched block never accessed is forgotten, not demoted into B1.
            l.retire(h, if from_t1 { B1 } else { B2 }, out);
            return;
        }
    }

    /// The block [`Car::replace`] would demote or forget, changing nothing: the sweep replayed over T1 and T2
    /// from their heads, counting the blocks it would move to T2's tail (reference bit cleared, so the first of
    /// them is the victim once T2's own blocks are passed).
    fn replace_victim(&self) -> Victim {
        let l = &self.lists;
        let p = self.p.max(1.0);
        let (mut t1, mut t2) = (l.len(T1), l.len(T2));
        let (mut c1, mut c2) = (l.back(T1), l.back(T2));
        // The first block moved to T2's tail (the others follow it).
        let mut moved: Option<crate::arena::Handle> = None;
        loop {
            let h = if t1 as f64 >= p || t2 == 0 {
                let Some(h) = c1 else { return Victim::None };
                c1 = l.newer(h);
                t1 -= 1;
                h
            } else if let Some(h) = c2 {
                c2 = l.newer(h);
                t2 -= 1;
                h
            } else {
                // T2's own blocks all had their second chance: the first block moved behind them goes.
                return moved.map_or(Victim::None, |h| Victim::Block(l.key_of(h)));
            };
            if l.node(h).state & REF == 0 {
                return Victim::Block(l.key_of(h));
            }
            moved.get_or_insert(h);
            t2 += 1;
        }
    }

    /// Target size of T1 (for tests and reports).
    pub fn p(&self) -> f64 {
        self.p
    }

    /// Keys of T1 and T2 from tail (newest) to head (the hand), with their reference bits, and of B1 and B2 from
    /// MRU to LRU (for tests and debugging).
    pub fn lists(&self) -> ([ClockKeys; 2], [Vec<BlockKey>; 2]) {
        let clock = |l| self.lists.iter(l).map(|n: &Node| (n.key(), n.state & REF != 0)).collect();
        ([clock(T1), clock(T2)], [self.lists.keys(B1), self.lists.keys(B2)])
    }
}

impl Adaptive for Car {
    #[inline]
    fn lists_mut(&mut self) -> &mut MultiList<4> {
        &mut self.lists
    }

    /// Lines 4–11 of Figure 2 for a key in no list: `replace()` if the cache is full, then the directory
    /// replacement.
    #[inline]
    fn make_room_for_t1(&mut self, out: &mut Vec<Evicted>) {
        let c = self.lists.capacity();
        if self.lists.resident() >= c {
            self.replace(out);
        }
        let l = &self.lists;
        if l.len(T1) + l.len(B1) >= c && !l.is_empty(B1) {
            self.lists.drop_back(B1);
        } else if l.resident() + l.len(B1) + l.len(B2) >= 2 * c && !l.is_empty(B2) {
            self.lists.drop_back(B2);
        }
    }
}

impl Policy for Car {
    type Config = CarConfig;

    fn new(capacity: usize, _config: &CarConfig) -> Self {
        Car { p: 0.0, lists: MultiList::adaptive(capacity) }
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
        let n = self.lists.node_mut(h);
        let list = n.list();
        if list <= T2 {
            if !n.links.flag() {
                n.state |= REF;
                return Outcome::Hit;
            }
            // First demand access to a prefetched block (always on T1): its first reference.
            self.lists.first_access(h);
            return Outcome::PrefetchHit;
        }
        // A ghost hit: lines 4–5, then 14–19.
        if self.lists.resident() >= self.lists.capacity() {
            self.replace(out);
        }
        self.p = self.lists.adapt(self.p, list == B2);
        self.lists.unlink(h);
        self.lists.push_front(h, T2);
        Outcome::Miss
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        self.prefetch_to_t1(group, out)
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        self.lists.remove(key)
    }

    fn validate(&self) -> Result<(), String> {
        self.lists.validate_adaptive(self.p, |id, n| {
            if id > T2 && n.state & REF != 0 {
                return Err("ghost key with its reference bit set".into());
            }
            if n.links.flag() && n.state & REF != 0 {
                return Err("prefetched, never accessed, with its reference bit set".into());
            }
            Ok(())
        })?;
        let (t2, b2, c) = (self.lists.len(T2), self.lists.len(B2), self.lists.capacity());
        if t2 + b2 > 2 * c {
            return Err(format!("|T2| + |B2| = {t2} + {b2} > 2c = {}", 2 * c));
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.lists.heap_bytes()
    }

    /// Exact: `replace()` runs first when the cache is full, for a ghost hit as for a key in no list (before
    /// `p` adapts), and is replayed read-only (`Car::replace_victim`); as long as the sweep itself.
    fn victim(&self, incoming: BlockKey) -> Victim {
        if self.lists.contains(incoming) || self.lists.resident() < self.lists.capacity() {
            return Victim::None;
        }
        self.replace_victim()
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::*;
    use crate::policy::testutil::{k, pf};
    use proptest::prelude::*;

    fn new(c: usize) -> Car {
        Car::new(c, &CarConfig::default())
    }
    fn acc(p: &mut Car, b: u64) -> (Outcome, Vec<u64>) {
        let mut out = Vec::new();
        let o = p.access(Access::new(k(b)), &mut out);
        p.validate().unwrap();
        (o, out.iter().map(|e| e.key.block()).collect())
    }
    /// Checks T1 and T2 (tail first, `*` after a block whose reference bit is 1) and B1 and B2 (MRU first).
    fn assert_lists(p: &Car, t1: &str, t2: &str, b1: &[u64], b2: &[u64]) {
        let (clocks, ghosts) = p.lists();
        let show = |v: &Vec<(BlockKey, bool)>| {
            v.iter()
                .map(|(key, r)| format!("{}{}", key.block(), if *r { "*" } else { "" }))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let g = |v: &Vec<BlockKey>| v.iter().map(|x| x.block()).collect::<Vec<_>>();
        assert_eq!(
            (show(&clocks[0]).as_str(), show(&clocks[1]).as_str(), g(&ghosts[0]), g(&ghosts[1])),
            (t1, t2, b1.to_vec(), b2.to_vec()),
            "(T1, T2, B1, B2)"
        );
    }

    #[test]
    fn figure_2_by_hand() {
        let mut p = new(3);
        for b in [1, 2, 3] {
            assert_eq!(acc(&mut p, b), (Outcome::Miss, vec![]));
        }
        assert_eq!(acc(&mut p, 1), (Outcome::Hit, vec![]));
        assert_lists(&p, "3 2 1*", "", &[], &[]);
        // replace(): |T1| = 3 >= max(1, p = 0); head 1 has its bit set: bit cleared, to the tail of T2; head 2 has
        // bit 0: demoted to B1. Directory: |T1| + |B1| = 1 + 1 < c, total 3 < 2c: nothing discarded.
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![2]));
        assert_lists(&p, "4 3", "1", &[2], &[]);
        // 3 demoted to B1; now |T1| + |B1| = 1 + 2 = c: B1's LRU (2) is discarded.
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![3]));
        assert_lists(&p, "5 4", "1", &[3], &[]);
        // Ghost hit in B1: replace() demotes 4 first, then p = min(0 + max(1, 0/2), 3) = 1, 3 to the tail of T2.
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, vec![4]));
        assert_eq!(p.p(), 1.0);
        assert_lists(&p, "5", "3 1", &[4], &[]);
        assert_eq!(acc(&mut p, 1), (Outcome::Hit, vec![]));
        assert_eq!(acc(&mut p, 6), (Outcome::Miss, vec![5]));
        assert_lists(&p, "6", "3 1*", &[5, 4], &[]);
        // |T1| + |B1| = 0 + 3 = c after replace(): B1's LRU (4) is discarded.
        assert_eq!(acc(&mut p, 7), (Outcome::Miss, vec![6]));
        assert_lists(&p, "7", "3 1*", &[6, 5], &[]);
        // B1 hit: replace() takes 7 (|T1| = 1 >= max(1, 1)); p = min(1 + max(1, 0/3), 3) = 2.
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![7]));
        assert_eq!(p.p(), 2.0);
        assert_lists(&p, "", "5 3 1*", &[7, 6], &[]);
        // |T1| = 0 < max(1, 2): T2's hand: 1 has its bit set → cleared, around the clock; 3 has bit 0 → B2.
        assert_eq!(acc(&mut p, 8), (Outcome::Miss, vec![3]));
        assert_lists(&p, "8", "1 5", &[7, 6], &[3]);
        // B2 hit: |T1| = 1 < 2: 5 → B2; then p = max(2 - max(1, 2/2), 0) = 1; 3 to the tail of T2.
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, vec![5]));
        assert_eq!(p.p(), 1.0);
        assert_lists(&p, "8", "3 1", &[7, 6], &[5]);
    }

    #[test]
    fn directory_full_discards_lru_of_b2() {
        // Line 8: |T1| + |B1| < c but the directory holds 2c keys.
        let mut p = new(2);
        for b in [1, 1, 2, 2] {
            acc(&mut p, b);
        }
        // Both T1 blocks have their bit set: both go to T2 (bits cleared), then T2's hand demotes 1.
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, vec![1]));
        assert_lists(&p, "3", "2", &[], &[1]);
        assert_eq!(acc(&mut p, 2), (Outcome::Hit, vec![]));
        assert_eq!(acc(&mut p, 3), (Outcome::Hit, vec![]));
        // |T1| = 1 >= 1: 3 has its bit set → tail of T2; |T1| = 0: T2's hand: 2* → cleared, around; 3 → B2.
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![3]));
        assert_lists(&p, "4", "2", &[], &[3, 1]);
        // replace() demotes 4 into B1; then |T1| + |B1| = 0 + 1 < c but |T2| + |B1| + |B2| = 1 + 1 + 2 = 2c:
        // B2's LRU key (1) is discarded.
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![4]));
        assert_lists(&p, "5", "2", &[4], &[3]);
    }

    #[test]
    fn prefetched_block_stays_in_t1_without_reference_bit() {
        let mut p = new(3);
        acc(&mut p, 1);
        assert_eq!(pf(&mut p, &[2, 3, 1]).0, 2);
        assert_lists(&p, "3 2 1", "", &[], &[]);
        assert_eq!(acc(&mut p, 2).0, Outcome::PrefetchHit);
        assert_lists(&p, "2 3 1", "", &[], &[]);
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        assert_lists(&p, "2* 3 1", "", &[], &[]);
        // The hand: 1 → B1 (demand block, bit 0); directory: |T1| + |B1| = 3: 1 discarded again.
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![1]));
        // 3 is an unused prefetch: forgotten, not put into B1.
        let mut out = Vec::new();
        p.access(Access::new(k(5)), &mut out);
        p.validate().unwrap();
        assert_eq!(out, vec![Evicted { key: k(3), unused_prefetch: true }]);
        assert_lists(&p, "5 4 2*", "", &[], &[]);
    }

    #[test]
    fn prefetched_ghost_goes_to_t1_then_t2_on_demand() {
        let mut p = new(2);
        for b in [1, 1, 2, 2, 3] {
            acc(&mut p, b);
        }
        assert_lists(&p, "3", "2", &[], &[1]);
        // 1 is in B2: prefetched into T1 (p unchanged); replace() demotes 3 into B1 to make room.
        let (n, out) = pf(&mut p, &[1]);
        assert_eq!((n, out), (1, vec![Evicted { key: k(3), unused_prefetch: false }]));
        assert_eq!(p.p(), 0.0);
        assert_lists(&p, "1", "2", &[3], &[]);
        assert_eq!(acc(&mut p, 1).0, Outcome::PrefetchHit);
        assert_lists(&p, "", "1 2", &[3], &[]);
    }

    #[test]
    fn remove_keeps_ghosts_and_bounds() {
        let mut p = new(2);
        for b in [1, 1, 2, 2, 3] {
            acc(&mut p, b);
        }
        assert!(p.remove(k(3)));
        assert!(!p.remove(k(1)), "ghost");
        // A B2 hit with a free slot: no replace().
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, vec![]));
        assert_lists(&p, "", "1 2", &[], &[]);
    }

    #[test]
    fn entry_is_20_bytes() {
        assert_eq!(
            std::mem::size_of::<super::super::multilist::Node>(),
            20,
            "the module docs state the metadata per entry"
        );
    }

    /// Figure 2 of the paper on plain vectors, O(n) per step. Clocks: index 0 = head (the hand), last = tail;
    /// ghosts: index 0 = LRU, last = MRU.
    struct Model {
        c: usize,
        p: f64,
        t: [Vec<(u64, bool)>; 2],
        b: [Vec<u64>; 2],
    }

    impl Model {
        fn replace(&mut self) {
            loop {
                let i = if self.t[0].len() as f64 >= self.p.max(1.0) { 0 } else { 1 };
                let (x, r) = self.t[i].remove(0);
                if r {
                    self.t[1].push((x, false));
                } else {
                    self.b[i].push(x);
                    return;
                }
            }
        }
        fn access(&mut self, x: u64) -> bool {
            for t in &mut self.t {
                if let Some(e) = t.iter_mut().find(|e| e.0 == x) {
                    e.1 = true;
                    return true;
                }
            }
            let in_b = [self.b[0].contains(&x), self.b[1].contains(&x)];
            let ghost = in_b[0] || in_b[1];
            if self.t[0].len() + self.t[1].len() == self.c {
                self.replace();
                let total = self.t[0].len() + self.t[1].len() + self.b[0].len() + self.b[1].len();
                if !ghost && self.t[0].len() + self.b[0].len() == self.c {
                    self.b[0].remove(0);
                } else if total == 2 * self.c && !ghost {
                    self.b[1].remove(0);
                }
            }
            let (b1, b2) = (self.b[0].len() as f64, self.b[1].len() as f64);
            if !ghost {
                self.t[0].push((x, false));
            } else {
                if in_b[0] {
                    self.p = (self.p + (b2 / b1).max(1.0)).min(self.c as f64);
                } else {
                    self.p = (self.p - (b1 / b2).max(1.0)).max(0.0);
                }
                let i = if in_b[0] { 0 } else { 1 };
                self.b[i].retain(|&y| y != x);
                self.t[1].push((x, false));
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
            let mut m = Model { c: cap, p: 0.0, t: Default::default(), b: Default::default() };
            let mut out = Vec::new();
            for (i, &b) in trace.iter().enumerate() {
                let hit = p.access(Access::new(k(b)), &mut out).is_hit();
                prop_assert_eq!(hit, m.access(b), "access {} to {}", i, b);
                prop_assert_eq!(p.p(), m.p);
            }
            let (clocks, ghosts) = p.lists();
            for i in 0..2 {
                let mut t: Vec<(u64, bool)> = clocks[i].iter().map(|&(x, r)| (x.block(), r)).collect();
                t.reverse();
                prop_assert_eq!(&t, &m.t[i]);
                let mut g: Vec<u64> = ghosts[i].iter().map(|x| x.block()).collect();
                g.reverse();
                prop_assert_eq!(&g, &m.b[i]);
            }
        }
    }
}
