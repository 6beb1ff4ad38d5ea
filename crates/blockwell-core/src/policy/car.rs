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

use super::{Access, Evicted, Outcome, Policy};
use crate::arena::{Arena, Handle, KeyIndex, Keyed, Links, List};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// CAR has no parameters (the ghost lists are bounded by the cache size, as in the paper).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CarConfig {}

/// Which list an entry is on (the low two bits of [`Node::state`]).
const T1: u8 = 0;
const T2: u8 = 1;
const B1: u8 = 2;
const B2: u8 = 3;
const LIST_MASK: u8 = 0b11;
/// A prefetched, not yet accessed T1 block whose key was in B1 or B2: its first demand access moves it to T2.
const FROM_GHOST: u8 = 0b100;
/// The CLOCK reference bit.
const REF: u8 = 0b1000;

#[derive(Clone, Debug)]
struct Node {
    /// The key's raw `u64` split in two so that the entry is 4-byte aligned (20 bytes instead of 24).
    key: [u32; 2],
    /// The flag bit is "prefetched, not yet accessed" (only ever set on T1 blocks).
    links: Links,
    state: u8,
}

impl Node {
    #[inline]
    fn new(key: BlockKey, state: u8) -> Self {
        let raw = key.raw();
        Node { key: [raw as u32, (raw >> 32) as u32], links: Links::default(), state }
    }
    #[inline]
    fn list(&self) -> u8 {
        self.state & LIST_MASK
    }
}

crate::arena::linked_by_field!(Node);

impl Keyed for Node {
    #[inline]
    fn key(&self) -> BlockKey {
        BlockKey::from_raw(u64::from(self.key[0]) | (u64::from(self.key[1]) << 32))
    }
}

/// A CLOCK list's keys with their reference bits, as [`Car::lists`] returns them.
pub type ClockKeys = Vec<(BlockKey, bool)>;

/// The CAR policy. For T1 and T2 the list's back is the clock's head (the hand) and its front the tail (where
/// blocks are inserted); for B1 and B2 the front is the MRU end.
#[derive(Clone, Debug)]
pub struct Car {
    capacity: usize,
    /// Target size of T1, in blocks, 0 ≤ p ≤ c.
    p: f64,
    arena: Arena<Node>,
    /// Resident and ghost entries alike.
    index: KeyIndex,
    t1: List,
    t2: List,
    b1: List,
    b2: List,
}

impl Car {
    /// List `id` and the arena, borrowed together.
    #[inline]
    fn list_mut(&mut self, id: u8) -> (&mut List, &mut Arena<Node>) {
        let list = match id {
            T1 => &mut self.t1,
            T2 => &mut self.t2,
            B1 => &mut self.b1,
            _ => &mut self.b2,
        };
        (list, &mut self.arena)
    }

    #[inline]
    fn resident(&self) -> usize {
        self.t1.len() + self.t2.len()
    }

    /// Discards the LRU key of a ghost list (B1 or B2).
    #[inline]
    fn drop_ghost_lru(&mut self, id: u8) {
        let (list, arena) = self.list_mut(id);
        if let Some(h) = list.pop_back(arena) {
            let key = self.arena[h].key();
            self.index.remove(&self.arena, key);
            self.arena.free(h);
        }
    }

    /// The paper's `replace()`: sweeps the hand until a block with reference bit 0 is demoted.
    fn replace(&mut self, out: &mut Vec<Evicted>) {
        loop {
            let from_t1 = self.t1.len() as f64 >= self.p.max(1.0) || self.t2.is_empty();
            let list = if from_t1 { &mut self.t1 } else { &mut self.t2 };
            let Some(h) = list.pop_back(&mut self.arena) else { return };
            let n = &mut self.arena[h];
            if n.state & REF != 0 {
                // Second chance: bit to 0, to the tail of T2 (from T1, or around T2's clock).
                n.state = T2;
                self.t2.push_front(&mut self.arena, h);
                continue;
            }
            let key = n.key();
            if n.links.flag() {
                // A prefetched block never accessed: forgotten, not demoted into B1.
                self.index.remove(&self.arena, key);
                self.arena.free(h);
                out.push(Evicted { key, unused_prefetch: true });
            } else if from_t1 {
                n.state = B1;
                self.b1.push_front(&mut self.arena, h);
                out.push(Evicted { key, unused_prefetch: false });
            } else {
                n.state = B2;
                self.b2.push_front(&mut self.arena, h);
                out.push(Evicted { key, unused_prefetch: false });
            }
            return;
        }
    }

    /// Lines 4–11 of Figure 2 for a key in no list: `replace()` if the cache is full, then the directory
    /// replacement.
    #[inline]
    fn make_room_for_t1(&mut self, out: &mut Vec<Evicted>) {
        let c = self.capacity;
        if self.resident() >= c {
            self.replace(out);
        }
        if self.t1.len() + self.b1.len() >= c && !self.b1.is_empty() {
            self.drop_ghost_lru(B1);
        } else if self.resident() + self.b1.len() + self.b2.len() >= 2 * c && !self.b2.is_empty() {
            self.drop_ghost_lru(B2);
        }
    }

    /// Puts `h` (on no list) at the tail of T1 with reference bit 0.
    #[inline]
    fn push_t1(&mut self, h: Handle, prefetched: bool, from_ghost: bool) {
        let n = &mut self.arena[h];
        n.state = if from_ghost { T1 | FROM_GHOST } else { T1 };
        n.links.set_flag(prefetched);
        self.t1.push_front(&mut self.arena, h);
    }

    /// Target size of T1 (for tests and reports).
    pub fn p(&self) -> f64 {
        self.p
    }

    /// Keys of T1 and T2 from tail (newest) to head (the hand), with their reference bits, and of B1 and B2 from
    /// MRU to LRU (for tests and debugging).
    pub fn lists(&self) -> ([ClockKeys; 2], [Vec<BlockKey>; 2]) {
        let clock =
            |l: &List| l.iter(&self.arena).map(|h| (self.arena[h].key(), self.arena[h].state & REF != 0)).collect();
        let ghost = |l: &List| l.iter(&self.arena).map(|h| self.arena[h].key()).collect();
        ([clock(&self.t1), clock(&self.t2)], [ghost(&self.b1), ghost(&self.b2)])
    }
}

impl Policy for Car {
    type Config = CarConfig;

    fn new(capacity: usize, _config: &CarConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        let directory = capacity.saturating_mul(2);
        // Every miss removes and inserts keys, and hashbrown rehashes in place only while at most half full
        // (else it grows), so under churn the index settles at twice its entries: size it so from the start.
        Car {
            capacity,
            p: 0.0,
            arena: Arena::with_capacity(directory),
            index: KeyIndex::with_capacity(directory),
            t1: List::new(),
            t2: List::new(),
            b1: List::new(),
            b2: List::new(),
        }
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.resident()
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.index.get(&self.arena, key).is_some_and(|h| self.arena[h].list() <= T2)
    }

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        let Some(h) = self.index.get(&self.arena, access.key) else {
            self.make_room_for_t1(out);
            let h = self.arena.alloc(Node::new(access.key, T1));
            self.index.insert(&self.arena, h);
            self.push_t1(h, false, false);
            return Outcome::Miss;
        };
        let n = &mut self.arena[h];
        let list = n.list();
        if list <= T2 {
            if !n.links.flag() {
                n.state |= REF;
                return Outcome::Hit;
            }
            // First demand access to a prefetched block (always on T1): its first reference.
            n.links.set_flag(false);
            let to_t2 = n.state & FROM_GHOST != 0;
            n.state = if to_t2 { T2 } else { T1 };
            self.t1.remove(&mut self.arena, h);
            let dest = if to_t2 { &mut self.t2 } else { &mut self.t1 };
            dest.push_front(&mut self.arena, h);
            return Outcome::PrefetchHit;
        }
        // A ghost hit: lines 4–5, then 14–19.
        if self.resident() >= self.capacity {
            self.replace(out);
        }
        let (b1, b2) = (self.b1.len() as f64, self.b2.len() as f64);
        if list == B1 {
            self.p = (self.p + (b2 / b1).max(1.0)).min(self.capacity as f64);
            self.b1.remove(&mut self.arena, h);
        } else {
            self.p = (self.p - (b1 / b2).max(1.0)).max(0.0);
            self.b2.remove(&mut self.arena, h);
        }
        self.arena[h].state = T2;
        self.t2.push_front(&mut self.arena, h);
        Outcome::Miss
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        let mut n = 0;
        for a in group {
            match self.index.get(&self.arena, a.key) {
                Some(h) => {
                    let list = self.arena[h].list();
                    if list <= T2 {
                        continue; // resident: a prefetch is not a reference
                    }
                    // In B1 or B2: consume the ghost (no adaptation of p), bring the block into T1.
                    let (l, arena) = self.list_mut(list);
                    l.remove(arena, h);
                    self.make_room_for_t1(out);
                    self.push_t1(h, true, true);
                }
                None => {
                    self.make_room_for_t1(out);
                    let h = self.arena.alloc(Node::new(a.key, T1));
                    self.index.insert(&self.arena, h);
                    self.push_t1(h, true, false);
                }
            }
            n += 1;
        }
        n
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        let Some(h) = self.index.get(&self.arena, key) else { return false };
        let list = self.arena[h].list();
        if list > T2 {
            return false; // ghost history is kept
        }
        let (l, arena) = self.list_mut(list);
        l.remove(arena, h);
        self.index.remove(&self.arena, key);
        self.arena.free(h);
        true
    }

    fn validate(&self) -> Result<(), String> {
        let c = self.capacity;
        let lists = [(T1, &self.t1, "T1"), (T2, &self.t2, "T2"), (B1, &self.b1, "B1"), (B2, &self.b2, "B2")];
        let mut total = 0;
        for (id, list, name) in lists {
            list.check(&self.arena).map_err(|e| format!("{name}: {e}"))?;
            total += list.len();
            for h in list.iter(&self.arena) {
                let n = &self.arena[h];
                let key = n.key();
                if n.list() != id {
                    return Err(format!("key {key} on {name} but its state says list {}", n.list()));
                }
                if id > T2 && n.state & REF != 0 {
                    return Err(format!("ghost key {key} on {name} has its reference bit set"));
                }
                if id != T1 && (n.links.flag() || n.state & FROM_GHOST != 0) {
                    return Err(format!("key {key} on {name} carries a T1-only prefetch mark"));
                }
                if n.links.flag() && n.state & REF != 0 {
                    return Err(format!("prefetched, never accessed key {key} has its reference bit set"));
                }
                if n.state & FROM_GHOST != 0 && !n.links.flag() {
                    return Err(format!("key {key}: came-from-ghost mark without the prefetch flag"));
                }
                if self.index.get(&self.arena, key) != Some(h) {
                    return Err(format!("key {key} on {name} but not indexed to its entry"));
                }
            }
        }
        let (t1, t2, b1, b2) = (self.t1.len(), self.t2.len(), self.b1.len(), self.b2.len());
        if t1 + t2 > c {
            return Err(format!("|T1| + |T2| = {t1} + {t2} > c = {c}"));
        }
        if t1 + b1 > c {
            return Err(format!("|T1| + |B1| = {t1} + {b1} > c = {c}"));
        }
        if t2 + b2 > 2 * c {
            return Err(format!("|T2| + |B2| = {t2} + {b2} > 2c = {}", 2 * c));
        }
        if total > 2 * c {
            return Err(format!("directory holds {total} > 2c = {} keys", 2 * c));
        }
        if !(0.0..=c as f64).contains(&self.p) {
            return Err(format!("p = {} outside [0, {c}]", self.p));
        }
        if self.index.len() != total || self.arena.len() != total {
            return Err(format!(
                "lists hold {total} entries, index {}, arena {} (|T1|={t1} |T2|={t2} |B1|={b1} |B2|={b2})",
                self.index.len(),
                self.arena.len()
            ));
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes() + self.index.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn k(b: u64) -> BlockKey {
        BlockKey::new(0, b).unwrap()
    }
    fn new(c: usize) -> Car {
        Car::new(c, &CarConfig::default())
    }
    fn acc(p: &mut Car, b: u64) -> (Outcome, Vec<u64>) {
        let mut out = Vec::new();
        let o = p.access(Access::new(k(b)), &mut out);
        p.validate().unwrap();
        (o, out.iter().map(|e| e.key.block()).collect())
    }
    fn pf(p: &mut Car, bs: &[u64]) -> (usize, Vec<Evicted>) {
        let mut out = Vec::new();
        let g: Vec<Access> = bs.iter().map(|&b| Access::new(k(b))).collect();
        let n = p.prefetch(&g, &mut out);
        p.validate().unwrap();
        (n, out)
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
        assert_eq!(std::mem::size_of::<Node>(), 20, "the module docs state the metadata per entry");
    }

    #[derive(Clone, Debug)]
    enum Op {
        Access(u64),
        Prefetch(Vec<u64>),
        Remove(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u64..24).prop_map(Op::Access),
            2 => proptest::collection::vec(0u64..24, 1..5).prop_map(Op::Prefetch),
            1 => (0u64..24).prop_map(Op::Remove),
        ]
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
        fn invariants_hold(cap in 1usize..9, ops in proptest::collection::vec(op(), 1..300)) {
            let mut p = new(cap);
            let mut out = Vec::new();
            for o in ops {
                out.clear();
                match o {
                    Op::Access(b) => {
                        let was = p.contains(k(b));
                        let r = p.access(Access::new(k(b)), &mut out);
                        prop_assert_eq!(r.is_hit(), was);
                        prop_assert!(p.contains(k(b)));
                        prop_assert!(out.len() <= 1);
                        for e in &out {
                            prop_assert!(e.key != k(b) && !p.contains(e.key), "evicted {:?}", e.key);
                        }
                    }
                    Op::Prefetch(bs) => {
                        let g: Vec<Access> = bs.iter().map(|&b| Access::new(k(b))).collect();
                        p.prefetch(&g, &mut out);
                    }
                    Op::Remove(b) => {
                        let was = p.contains(k(b));
                        prop_assert_eq!(p.remove(k(b)), was);
                        prop_assert!(!p.contains(k(b)));
                    }
                }
                p.validate().map_err(TestCaseError::fail)?;
                prop_assert!(p.len() <= cap);
            }
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
