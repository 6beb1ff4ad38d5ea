//! LRU-K: evict the block whose K-th most recent reference is the oldest.
//!
//! **Paper.** E. J. O'Neil, P. E. O'Neil and G. Weikum, "The LRU-K Page Replacement Algorithm For Database Disk
//! Buffering", SIGMOD 1993. Each block keeps `HIST(p, 1..K)`, the times of its K most recent (uncorrelated)
//! references, and `LAST(p)`, the time of its most recent reference. The victim is the block with the largest
//! backward K-distance `t − HIST(p, K)`, i.e. the smallest `HIST(p, K)`; a block with fewer than K references
//! has an infinite distance and goes first. Among those the paper leaves the choice to a *subsidiary policy* and
//! suggests classical LRU: here, the smallest `LAST(p)` (`subsidiary = "lru"`).
//!
//! *Correlated reference period* (CRP): a reference within `crp` accesses of `LAST(p)` is correlated with the
//! previous one: only `LAST(p)` moves. An uncorrelated reference at time `t` shifts the history and shifts the
//! older entries by the length of the closed correlated period (`LAST(p) − HIST(p, 1)`), as in the paper's
//! pseudo-code (`HIST(p, i) := HIST(p, i − 1) + correl_period` for i = K down to 2, then `HIST(p, 1) := t`).
//! A block referenced within the last `crp` accesses (`t − LAST(p) ≤ crp`) is not eligible for replacement: it
//! sits on the *ineligible list* (an LRU list ordered by `LAST`) and enters the priority structure only when
//! its CRP has passed. If every resident block is ineligible, the one with the oldest `LAST` is evicted (the
//! paper's loop would find no victim).
//!
//! *Retained information*: when a block is evicted its history is kept (a ghost entry) so that a block coming
//! back soon is judged by its earlier references (the paper's "retained information period"); here it is
//! bounded by a count, `history × capacity` entries, dropping the entries evicted longest ago. On a miss of a
//! block with a ghost entry its history shifts (`HIST(p, i) := HIST(p, i − 1)`, no correlation adjustment).
//!
//! **Prefetch adaptation (seed `001_*` §4, "LRU-2").** A prefetched block is inserted *without any access
//! history* (a ghost entry it had is discarded, and the prefetch is not a reference), flagged *not yet
//! accessed*, with `LAST` = the prefetch time. Like every block within its CRP it goes on the ineligible list,
//! so it cannot be replaced during the CRP, as if just accessed; afterwards it competes with an infinite
//! backward distance. Its first demand access ([`Outcome::PrefetchHit`]) is its first reference
//! (`HIST(p, 1) := t`, the rest empty). Evicted unaccessed, it leaves no ghost entry.
//!
//! **Parameters** ([`LruKConfig`]).
//!
//! | preset | `k` | `crp` (accesses) | `history` (× capacity) | `subsidiary` |
//! |---|---|---|---|---|
//! | `Preset::Default` | 2 | 0 | 1 | `lru` |
//! | `Preset::Libcachesim` | 2 | 0 | 0 | `fifo` |
//! | `Preset::Butt05` (Table 4: "CRP = 20, history size = cache size") | 2 | 20 | 1 | `lru` |
//!
//! **libCacheSim 0.3.5 (`cache/eviction/cpp/LRU_K.cpp`, `lcs.LRUK(cache_size, k=2)`).** No correlated
//! reference period and no retained history (a block's history is dropped when it is evicted). Blocks with
//! fewer than K references are kept in a FIFO queue in order of insertion and are all evicted before any block
//! with K references; those are ordered by `HIST(p, K)`. `Preset::Libcachesim` reproduces it exactly
//! (`subsidiary = "fifo"`: among blocks with an infinite distance the one with the oldest recorded reference
//! goes first, which without retained history is the insertion order). For K = 2 and no CRP, FIFO and LRU
//! order coincide (such a block has exactly one reference); they differ for K ≥ 3.
//!
//! **Metadata.** 24 bytes per entry in the arena (8-byte key, list links with the prefetch flag, heap
//! position), `8 × (K + 1)` bytes of times (`LAST`, `HIST(1..K)`) in a side table indexed by handle, 16 bytes
//! per entry of the priority heap (eligible blocks), and the handle index (4 bytes + 1 tag byte per bucket,
//! reserved for twice the entries so that churn never grows it: 11.4–22.9 bytes per entry). For K = 2: 75–87
//! bytes per cached block, 59–71 bytes per ghost entry.
//!
//! **Cost.** O(log n) per access, prefetch and eviction (an indexed binary min-heap over arena handles keyed
//! on the priority above; the ineligible list and the ghost list are O(1)). No allocation per access once the
//! tables have grown to their working size.

use super::{Access, Evicted, Outcome, Policy, Preset};
use crate::arena::{Arena, Handle, KeyIndex, Links, List};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// How blocks with fewer than K references (infinite backward K-distance) are ordered among themselves.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Subsidiary {
    /// Oldest `LAST(p)` first: classical LRU, the paper's suggestion.
    #[default]
    Lru,
    /// Oldest recorded reference first (insertion order without retained history): libCacheSim.
    Fifo,
}

/// LRU-K parameters (see the module docs for the presets).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LruKConfig {
    /// References remembered per block, 1..=64 (K = 1 is LRU).
    pub k: u32,
    /// Correlated reference period, in demand accesses.
    pub crp: u64,
    /// Ghost entries (histories of evicted blocks) kept, as a multiple of the capacity.
    pub history: f64,
    /// Order among blocks with fewer than K references.
    pub subsidiary: Subsidiary,
}

impl Default for LruKConfig {
    fn default() -> Self {
        LruKConfig { k: 2, crp: 0, history: 1.0, subsidiary: Subsidiary::Lru }
    }
}

/// `Node::pos` of a resident block on the ineligible list.
const INELIGIBLE: u32 = u32::MAX;
/// `Node::pos` of a ghost entry.
const GHOST: u32 = u32::MAX - 1;
/// Priority bit of blocks with a finite backward K-distance (they go after all infinite ones).
const FINITE: u64 = 1 << 63;

#[derive(Clone, Debug)]
struct Node {
    key: BlockKey,
    /// Ineligible list or ghost list; the flag is "prefetched, not yet accessed".
    links: Links,
    /// Index in the heap, or [`INELIGIBLE`], or [`GHOST`].
    pos: u32,
}

crate::arena::linked_by_field!(Node);
crate::arena::keyed_by_field!(Node);

#[derive(Clone, Copy, Debug)]
struct HeapEntry {
    prio: u64,
    h: Handle,
}

/// The LRU-K policy.
#[derive(Clone, Debug)]
pub struct LruK {
    capacity: usize,
    k: usize,
    crp: u64,
    max_ghosts: usize,
    fifo: bool,
    arena: Arena<Node>,
    index: KeyIndex,
    /// Per arena slot: `[LAST, HIST(1), ..., HIST(K)]`; 0 = no such reference.
    times: Vec<u64>,
    /// Min-heap of the eligible resident blocks on (priority, key).
    heap: Vec<HeapEntry>,
    /// Resident blocks within their CRP, front = most recent `LAST`.
    ineligible: List,
    /// Ghost entries, front = most recently evicted.
    ghosts: List,
    /// Demand accesses so far (the logical clock; the first access is time 1).
    now: u64,
    resident: usize,
}

impl LruK {
    #[inline]
    fn stride(&self) -> usize {
        self.k + 1
    }

    #[inline]
    fn times(&self, h: Handle) -> &[u64] {
        let s = self.stride();
        let i = (h.get() as usize - 1) * s;
        &self.times[i..i + s]
    }

    #[inline]
    fn times_mut(&mut self, h: Handle) -> &mut [u64] {
        let s = self.stride();
        let i = (h.get() as usize - 1) * s;
        &mut self.times[i..i + s]
    }

    /// Allocates an entry and makes sure its row of times exists.
    fn alloc(&mut self, key: BlockKey) -> Handle {
        let h = self.arena.alloc(Node { key, links: Links::default(), pos: INELIGIBLE });
        let need = h.get() as usize * self.stride();
        if self.times.len() < need {
            self.times.resize(need, 0);
        }
        self.index.insert(&self.arena, h);
        h
    }

    /// Eviction priority: smaller goes first.
    #[inline]
    fn prio(&self, h: Handle) -> u64 {
        let t = self.times(h);
        let kth = t[self.k];
        if kth != 0 {
            FINITE | kth
        } else if self.fifo {
            t[1..].iter().rev().copied().find(|&x| x != 0).unwrap_or(t[0])
        } else {
            t[0]
        }
    }

    #[inline]
    fn less(&self, a: HeapEntry, b: HeapEntry) -> bool {
        a.prio < b.prio || (a.prio == b.prio && self.arena[a.h].key < self.arena[b.h].key)
    }

    #[inline]
    fn place(&mut self, i: usize, e: HeapEntry) {
        self.heap[i] = e;
        self.arena[e.h].pos = i as u32;
    }

    fn sift_up(&mut self, mut i: usize) {
        let e = self.heap[i];
        while i > 0 {
            let parent = (i - 1) / 2;
            let p = self.heap[parent];
            if !self.less(e, p) {
                break;
            }
            self.place(i, p);
            i = parent;
        }
        self.place(i, e);
    }

    fn sift_down(&mut self, mut i: usize) {
        let e = self.heap[i];
        let n = self.heap.len();
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            let r = l + 1;
            let c = if r < n && self.less(self.heap[r], self.heap[l]) { r } else { l };
            if !self.less(self.heap[c], e) {
                break;
            }
            let ce = self.heap[c];
            self.place(i, ce);
            i = c;
        }
        self.place(i, e);
    }

    fn heap_push(&mut self, h: Handle) {
        let e = HeapEntry { prio: self.prio(h), h };
        self.heap.push(e);
        self.sift_up(self.heap.len() - 1);
    }

    fn heap_remove(&mut self, h: Handle) {
        let i = self.arena[h].pos as usize;
        let last = self.heap.pop().expect("block is on the heap");
        if i < self.heap.len() {
            self.place(i, last);
            self.sift_up(i);
            let j = self.arena[last.h].pos as usize;
            self.sift_down(j);
        }
        self.arena[h].pos = INELIGIBLE;
    }

    /// Re-keys `h` after its times changed.
    fn heap_update(&mut self, h: Handle) {
        let i = self.arena[h].pos as usize;
        self.heap[i].prio = self.prio(h);
        self.sift_up(i);
        let j = self.arena[h].pos as usize;
        self.sift_down(j);
    }

    /// Files a resident block that was just referenced (or prefetched) as ineligible, or on the heap when there
    /// is no CRP.
    #[inline]
    fn file(&mut self, h: Handle) {
        if self.crp == 0 {
            self.heap_push(h);
        } else {
            self.arena[h].pos = INELIGIBLE;
            self.ineligible.push_front(&mut self.arena, h);
        }
    }

    /// Takes a resident block out of the heap or the ineligible list.
    #[inline]
    fn unfile(&mut self, h: Handle) {
        if self.arena[h].pos == INELIGIBLE {
            self.ineligible.remove(&mut self.arena, h);
        } else {
            self.heap_remove(h);
        }
    }

    /// Moves blocks whose CRP has passed from the ineligible list to the heap.
    #[inline]
    fn age(&mut self) {
        while let Some(b) = self.ineligible.back() {
            if self.now - self.times(b)[0] <= self.crp {
                break;
            }
            self.ineligible.remove(&mut self.arena, b);
            self.heap_push(b);
        }
    }

    /// Turns a block that left the cache into a ghost entry (or forgets it).
    fn retire(&mut self, h: Handle) {
        if self.arena[h].links.flag() || self.max_ghosts == 0 {
            self.index.forget(&mut self.arena, h);
            return;
        }
        self.arena[h].pos = GHOST;
        self.ghosts.push_front(&mut self.arena, h);
        while self.ghosts.len() > self.max_ghosts {
            let g = self.ghosts.pop_back(&mut self.arena).expect("over the bound");
            self.index.forget(&mut self.arena, g);
        }
    }

    fn evict_one(&mut self, out: &mut Vec<Evicted>) {
        let victim = match self.heap.first() {
            Some(e) => e.h,
            // Every resident block is within its CRP: the one referenced longest ago goes.
            None => match self.ineligible.back() {
                Some(b) => b,
                None => return,
            },
        };
        self.unfile(victim);
        self.resident -= 1;
        let n = &self.arena[victim];
        out.push(Evicted { key: n.key, unused_prefetch: n.links.flag() });
        self.retire(victim);
    }

    /// Makes room for one more block. `h`, a ghost being revived, must already be off the ghost list.
    #[inline]
    fn make_room(&mut self, out: &mut Vec<Evicted>) {
        while self.resident >= self.capacity {
            self.evict_one(out);
        }
    }

    /// The block's `(LAST, HIST(1..=K))`, for tests.
    #[cfg(test)]
    fn history_of(&self, b: u64) -> Option<Vec<u64>> {
        self.index.get(&self.arena, BlockKey::new(0, b).unwrap()).map(|h| self.times(h).to_vec())
    }

    /// The block the next eviction would take, for tests.
    #[cfg(test)]
    fn next_victim(&self) -> Option<u64> {
        self.heap.first().map(|e| e.h).or(self.ineligible.back()).map(|h| self.arena[h].key.block())
    }
}

impl Policy for LruK {
    type Config = LruKConfig;

    fn preset(preset: Preset) -> LruKConfig {
        match preset {
            Preset::Default => LruKConfig::default(),
            Preset::Libcachesim => LruKConfig { k: 2, crp: 0, history: 0.0, subsidiary: Subsidiary::Fifo },
            Preset::Butt05 => LruKConfig { k: 2, crp: 20, history: 1.0, subsidiary: Subsidiary::Lru },
        }
    }

    fn check_config(c: &LruKConfig) -> Result<(), String> {
        if !(1..=64).contains(&c.k) {
            return Err(format!("k must be in 1..=64, got {}", c.k));
        }
        if !(c.history.is_finite() && c.history >= 0.0) {
            return Err(format!("history must be a finite multiple of the capacity >= 0, got {}", c.history));
        }
        if c.crp >= FINITE {
            return Err(format!("crp {} is too large", c.crp));
        }
        Ok(())
    }

    fn new(capacity: usize, config: &LruKConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        let k = config.k.clamp(1, 64) as usize;
        let max_ghosts = (config.history.max(0.0) * capacity as f64) as usize;
        let n = capacity + max_ghosts.min(1 << 20);
        LruK {
            capacity,
            k,
            crp: config.crp,
            max_ghosts,
            fifo: config.subsidiary == Subsidiary::Fifo,
            arena: Arena::with_capacity(n),
            index: KeyIndex::with_capacity(n),
            times: Vec::with_capacity(n * (k + 1)),
            heap: Vec::with_capacity(capacity.min(1 << 24)),
            ineligible: List::new(),
            ghosts: List::new(),
            now: 0,
            resident: 0,
        }
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.resident
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.index.get(&self.arena, key).is_some_and(|h| self.arena[h].pos != GHOST)
    }

    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        self.now += 1;
        let t = self.now;
        if self.crp > 0 {
            self.age();
        }
        let k = self.k;
        match self.index.get(&self.arena, access.key) {
            Some(h) if self.arena[h].pos != GHOST => {
                let first = self.arena[h].links.flag();
                let crp = self.crp;
                let times = self.times_mut(h);
                if first {
                    // The prefetch was not a reference: this is the first one.
                    times.fill(0);
                    times[0] = t;
                    times[1] = t;
                } else if t - times[0] > crp {
                    let correl = times[0] - times[1];
                    for i in (2..=k).rev() {
                        times[i] = if times[i - 1] != 0 { times[i - 1] + correl } else { 0 };
                    }
                    times[1] = t;
                    times[0] = t;
                } else {
                    times[0] = t; // correlated reference
                }
                if self.crp == 0 {
                    self.heap_update(h);
                } else if self.arena[h].pos == INELIGIBLE {
                    self.ineligible.move_to_front(&mut self.arena, h);
                } else {
                    self.heap_remove(h);
                    self.ineligible.push_front(&mut self.arena, h);
                }
                if first {
                    self.arena[h].links.set_flag(false);
                    Outcome::PrefetchHit
                } else {
                    Outcome::Hit
                }
            }
            Some(h) => {
                // A ghost: take it off the ghost list first so that making room cannot drop it.
                self.ghosts.remove(&mut self.arena, h);
                self.arena[h].pos = INELIGIBLE;
                self.make_room(out);
                let times = self.times_mut(h);
                for i in (2..=k).rev() {
                    times[i] = times[i - 1];
                }
                times[1] = t;
                times[0] = t;
                self.resident += 1;
                self.file(h);
                Outcome::Miss
            }
            None => {
                self.make_room(out);
                let h = self.alloc(access.key);
                let times = self.times_mut(h);
                times.fill(0);
                times[0] = t;
                times[1] = t;
                self.resident += 1;
                self.file(h);
                Outcome::Miss
            }
        }
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        let mut inserted = 0;
        for a in group {
            let h = match self.index.get(&self.arena, a.key) {
                Some(h) if self.arena[h].pos != GHOST => continue,
                Some(h) => {
                    self.ghosts.remove(&mut self.arena, h);
                    self.arena[h].pos = INELIGIBLE;
                    self.make_room(out);
                    h
                }
                None => {
                    self.make_room(out);
                    self.alloc(a.key)
                }
            };
            let now = self.now;
            let times = self.times_mut(h);
            times.fill(0);
            times[0] = now;
            self.arena[h].links.set_flag(true);
            self.resident += 1;
            self.file(h);
            inserted += 1;
        }
        inserted
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        match self.index.get(&self.arena, key) {
            Some(h) if self.arena[h].pos != GHOST => {
                self.unfile(h);
                self.resident -= 1;
                self.retire(h);
                true
            }
            _ => false,
        }
    }

    fn validate(&self) -> Result<(), String> {
        self.ineligible.check(&self.arena).map_err(|e| format!("ineligible list: {e}"))?;
        self.ghosts.check(&self.arena).map_err(|e| format!("ghost list: {e}"))?;
        if self.resident > self.capacity {
            return Err(format!("{} blocks over capacity {}", self.resident, self.capacity));
        }
        if self.heap.len() + self.ineligible.len() != self.resident {
            return Err(format!(
                "heap {} + ineligible {} != {} resident",
                self.heap.len(),
                self.ineligible.len(),
                self.resident
            ));
        }
        if self.ghosts.len() > self.max_ghosts {
            return Err(format!("{} ghost entries over the bound {}", self.ghosts.len(), self.max_ghosts));
        }
        if self.arena.len() != self.resident + self.ghosts.len() || self.index.len() != self.arena.len() {
            return Err(format!(
                "arena {} / index {} / resident {} + ghosts {} disagree",
                self.arena.len(),
                self.index.len(),
                self.resident,
                self.ghosts.len()
            ));
        }
        if self.crp == 0 && !self.ineligible.is_empty() {
            return Err("ineligible blocks without a CRP".into());
        }
        let check_times = |h: Handle| -> Result<(), String> {
            let t = self.times(h);
            let key = self.arena[h].key;
            if self.index.get(&self.arena, key) != Some(h) {
                return Err(format!("{key} not indexed"));
            }
            let hist = &t[1..];
            if hist.windows(2).any(|w| w[1] > w[0] || (w[0] == 0 && w[1] != 0)) || hist[0] > t[0] || t[0] > self.now {
                return Err(format!("{key}: times {t:?} out of order (now {})", self.now));
            }
            if self.arena[h].links.flag() && hist[0] != 0 {
                return Err(format!("{key}: prefetched, not accessed, but has a history"));
            }
            Ok(())
        };
        for (i, e) in self.heap.iter().enumerate() {
            if self.arena[e.h].pos as usize != i {
                return Err(format!("heap slot {i}: entry says position {}", self.arena[e.h].pos));
            }
            if e.prio != self.prio(e.h) {
                return Err(format!("heap slot {i}: stale priority"));
            }
            if i > 0 && self.less(*e, self.heap[(i - 1) / 2]) {
                return Err(format!("heap order broken at slot {i}"));
            }
            if self.crp > 0 && self.now - self.times(e.h)[0] <= self.crp {
                return Err(format!("{} on the heap within its CRP", self.arena[e.h].key));
            }
            check_times(e.h)?;
        }
        let mut prev = u64::MAX;
        for h in self.ineligible.iter(&self.arena) {
            let last = self.times(h)[0];
            if self.arena[h].pos != INELIGIBLE || last > prev || self.now - last > self.crp {
                return Err(format!("{} misfiled on the ineligible list", self.arena[h].key));
            }
            prev = last;
            check_times(h)?;
        }
        for h in self.ghosts.iter(&self.arena) {
            if self.arena[h].pos != GHOST || self.arena[h].links.flag() {
                return Err(format!("{} misfiled on the ghost list", self.arena[h].key));
            }
            check_times(h)?;
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes()
            + self.index.heap_bytes()
            + self.times.capacity() * std::mem::size_of::<u64>()
            + self.heap.capacity() * std::mem::size_of::<HeapEntry>()
    }

    /// Exact: the access's clock tick first moves the ineligible blocks whose CRP then ends onto the heap (a
    /// read-only walk from the ineligible list's oldest end, compared with the heap's top); the victim is the
    /// smallest of them and the heap's top, or, with every block still within its CRP, the oldest ineligible
    /// one.
    fn victim(&self, incoming: BlockKey) -> super::Victim {
        if self.resident < self.capacity || self.contains(incoming) {
            return super::Victim::None;
        }
        let now = self.now + 1;
        let mut best = self.heap.first().copied();
        let mut b = self.ineligible.back();
        while let Some(h) = b.filter(|_| self.crp > 0) {
            if now - self.times(h)[0] <= self.crp {
                break;
            }
            let e = HeapEntry { prio: self.prio(h), h };
            if best.map_or(true, |x| self.less(e, x)) {
                best = Some(e);
            }
            b = List::prev_of(&self.arena, h);
        }
        match best.map(|e| e.h).or(b) {
            Some(h) => super::Victim::Block(self.arena[h].key),
            None => super::Victim::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model::{self as model, Op, Reference};
    use super::*;
    use crate::policy::testutil::k;
    use proptest::prelude::*;

    fn cfg(k: u32, crp: u64, history: f64, subsidiary: Subsidiary) -> LruKConfig {
        LruKConfig { k, crp, history, subsidiary }
    }

    fn acc(p: &mut LruK, b: u64) -> (Outcome, Vec<u64>) {
        let mut out = Vec::new();
        let o = p.access(Access::new(k(b)), &mut out);
        p.validate().unwrap_or_else(|e| panic!("after access {b}: {e}"));
        (o, out.iter().map(|e| e.key.block()).collect())
    }

    use Outcome::{Hit, Miss, PrefetchHit};

    #[test]
    fn evicts_oldest_penultimate_reference() {
        let mut p = LruK::new(3, &cfg(2, 0, 0.0, Subsidiary::Lru));
        // t = 1..6: HIST(2) of 1 is 1, of 2 is 2, of 3 is 4; 1 is the most recently referenced block.
        for b in [1, 2, 2, 3, 3, 1] {
            acc(&mut p, b);
        }
        assert_eq!(p.history_of(1), Some(vec![6, 6, 1]));
        assert_eq!(p.history_of(2), Some(vec![3, 3, 2]));
        // LRU would evict 2; LRU-2 evicts 1, whose penultimate reference is the oldest.
        assert_eq!(p.next_victim(), Some(1));
        assert_eq!(acc(&mut p, 4), (Miss, vec![1]));
        // 4 has one reference: infinite distance, it goes before any block with two.
        assert_eq!(acc(&mut p, 5), (Miss, vec![4]));
        assert_eq!(acc(&mut p, 2).0, Hit);
    }

    #[test]
    fn infinite_distance_blocks_follow_the_subsidiary_policy() {
        // K = 3: blocks 1 and 2 have fewer than 3 references. LRU: 1 (referenced last at t=3) goes before 2
        // (t=4) although 2 came in first... FIFO (libcachesim): 2 came in first (t=1), it goes.
        for (sub, victim) in [(Subsidiary::Lru, 1), (Subsidiary::Fifo, 2)] {
            let mut p = LruK::new(2, &cfg(3, 0, 0.0, sub));
            for b in [2, 1, 1, 2] {
                acc(&mut p, b);
            }
            assert_eq!(acc(&mut p, 3), (Miss, vec![victim]), "{sub:?}");
        }
    }

    #[test]
    fn k1_is_lru() {
        let mut p = LruK::new(3, &cfg(1, 0, 0.0, Subsidiary::Lru));
        for b in [1, 2, 3, 1] {
            acc(&mut p, b);
        }
        assert_eq!(acc(&mut p, 4), (Miss, vec![2]));
        assert_eq!(acc(&mut p, 5), (Miss, vec![3]));
    }

    #[test]
    fn retained_history_gives_a_returning_block_a_finite_distance() {
        let mut p = LruK::new(2, &cfg(2, 0, 1.0, Subsidiary::Lru));
        acc(&mut p, 1); // t=1
        acc(&mut p, 2); // t=2
        assert_eq!(acc(&mut p, 3), (Miss, vec![1])); // t=3, 1 becomes a ghost
        assert_eq!(p.history_of(1), Some(vec![1, 1, 0]));
        assert!(!p.contains(k(1)));
        assert_eq!(acc(&mut p, 1), (Miss, vec![2])); // t=4: HIST = (4, 1): finite
        assert_eq!(p.history_of(1), Some(vec![4, 4, 1]));
        assert_eq!(p.next_victim(), Some(3), "3 has one reference, 1 has two");
        // The ghost list is bounded by history × capacity = 2 entries.
        for b in 10..20 {
            acc(&mut p, b);
        }
        assert_eq!(p.ghosts.len(), 2);
    }

    #[test]
    fn correlated_references_collapse_and_protect() {
        let mut p = LruK::new(3, &cfg(2, 2, 0.0, Subsidiary::Lru));
        acc(&mut p, 1); // t=1
        acc(&mut p, 1); // t=2: correlated (2 - 1 <= CRP), only LAST moves
        assert_eq!(p.history_of(1), Some(vec![2, 1, 0]));
        acc(&mut p, 2); // t=3
        acc(&mut p, 3); // t=4
                        // t=5: uncorrelated (5 - 2 > 2); the closed correlated period (2 - 1 = 1) shifts the old HIST(1).
        acc(&mut p, 1);
        assert_eq!(p.history_of(1), Some(vec![5, 5, 2]));
        // t=6: only 2 (LAST 3) is out of its CRP; 3 (LAST 4) and 1 (LAST 5) are protected.
        assert_eq!(acc(&mut p, 4), (Miss, vec![2]));
        // t=7: only 3 (LAST 4) is eligible, although 1 has the finite distance.
        assert_eq!(acc(&mut p, 5), (Miss, vec![3]));
        // t=8: 1 (LAST 5) is eligible; 4 and 5 are not.
        assert_eq!(acc(&mut p, 6), (Miss, vec![1]));
    }

    #[test]
    fn all_ineligible_evicts_oldest_last() {
        let mut p = LruK::new(2, &cfg(2, 100, 0.0, Subsidiary::Lru));
        acc(&mut p, 1);
        acc(&mut p, 2);
        acc(&mut p, 1);
        assert_eq!(acc(&mut p, 3), (Miss, vec![2]));
    }

    #[test]
    fn prefetched_blocks_have_no_history_and_are_ineligible_within_the_crp() {
        let mut p = LruK::new(5, &LruK::preset(Preset::Butt05)); // K = 2, CRP = 20
        acc(&mut p, 5);
        for _ in 0..25 {
            acc(&mut p, 1);
            acc(&mut p, 2);
        }
        let mut out = Vec::new();
        let group = [Access::new(k(7)), Access::new(k(8)), Access::new(k(1))];
        assert_eq!(p.prefetch(&group, &mut out), 2, "1 is resident: not prefetched again");
        p.validate().unwrap();
        assert!(out.is_empty());
        assert_eq!(p.history_of(8).unwrap()[1..], [0, 0], "the prefetch is not a reference");
        // 5 is the only block out of its CRP: the prefetched blocks (infinite distance) are protected.
        assert_eq!(acc(&mut p, 9), (Miss, vec![5]));
        for _ in 0..11 {
            acc(&mut p, 1);
            acc(&mut p, 2);
        }
        // Their CRP has passed: with no reference they are the first victims (ties by key).
        assert_eq!(acc(&mut p, 10), (Miss, vec![7]));
        let t = p.now;
        assert_eq!(acc(&mut p, 8), (PrefetchHit, vec![]));
        assert_eq!(p.history_of(8), Some(vec![t + 1, t + 1, 0]), "first reference");
        assert_eq!(acc(&mut p, 8).0, Hit);
    }

    #[test]
    fn unaccessed_prefetch_leaves_no_ghost_and_ghost_history_is_dropped() {
        let mut p = LruK::new(2, &cfg(2, 0, 1.0, Subsidiary::Lru));
        acc(&mut p, 1);
        acc(&mut p, 1);
        let mut out = Vec::new();
        p.prefetch(&[Access::new(k(5))], &mut out);
        acc(&mut p, 2); // infinite: 5 (prefetched at t=2) is the oldest infinite one
        let mut out = Vec::new();
        p.access(Access::new(k(3)), &mut out);
        assert_eq!(out[0], Evicted { key: k(2), unused_prefetch: false });
        acc(&mut p, 4);
        p.validate().unwrap();
        let mut out = Vec::new();
        let mut q = LruK::new(1, &cfg(2, 0, 1.0, Subsidiary::Lru));
        q.prefetch(&[Access::new(k(9))], &mut out);
        q.access(Access::new(k(10)), &mut out);
        assert_eq!(out, vec![Evicted { key: k(9), unused_prefetch: true }]);
        assert_eq!(q.history_of(9), None, "no ghost for an unused prefetch");
        // A ghost's history is discarded when the block is prefetched.
        q.access(Access::new(k(11)), &mut out);
        assert!(q.history_of(10).is_some());
        q.prefetch(&[Access::new(k(10))], &mut out);
        assert_eq!(q.history_of(10).unwrap()[1..], [0, 0]);
        q.validate().unwrap();
    }

    #[test]
    fn remove_keeps_history() {
        let mut p = LruK::new(2, &cfg(2, 0, 1.0, Subsidiary::Lru));
        acc(&mut p, 1);
        assert!(p.remove(k(1)));
        assert!(!p.remove(k(1)));
        p.validate().unwrap();
        assert_eq!(p.len(), 0);
        assert_eq!(acc(&mut p, 1).0, Miss);
        assert_eq!(p.history_of(1), Some(vec![2, 2, 1]));
    }

    #[test]
    fn entry_sizes_match_the_module_docs() {
        assert_eq!(std::mem::size_of::<Node>(), 24);
        assert_eq!(std::mem::size_of::<HeapEntry>(), 16);
    }

    #[test]
    fn config_is_checked() {
        use crate::policy::{PolicyError, PolicySpec};
        assert!(matches!(PolicySpec::parse("lru-k(k=0)"), Err(PolicyError::Invalid { .. })));
        assert!(matches!(PolicySpec::parse("lruk(history=-1)"), Err(PolicyError::Invalid { .. })));
        assert!(PolicySpec::parse("lru2(k=3,crp=20,subsidiary=fifo)").is_ok());
        assert!(PolicySpec::parse("lru-k(subsidiary=mru)").is_err());
    }

    /// An obviously-correct LRU-K: scans for the victim.
    struct Model {
        cap: usize,
        k: usize,
        crp: u64,
        max_ghosts: usize,
        fifo: bool,
        now: u64,
        seq: u64,
        /// key -> (times [LAST, HIST..], prefetched, seq of the last reference or prefetch)
        res: Vec<(u64, Vec<u64>, bool, u64)>,
        /// Most recently evicted first.
        ghosts: Vec<(u64, Vec<u64>)>,
    }

    impl Model {
        fn prio(&self, t: &[u64]) -> (u64, u64) {
            let kth = t[self.k];
            if kth != 0 {
                (1, kth)
            } else if self.fifo {
                (0, t[1..].iter().rev().copied().find(|&x| x != 0).unwrap_or(t[0]))
            } else {
                (0, t[0])
            }
        }
        fn evict(&mut self, out: &mut Vec<u64>) {
            let now = self.now;
            let crp = self.crp;
            let eligible = |e: &(u64, Vec<u64>, bool, u64)| crp == 0 || now - e.1[0] > crp;
            let i = if self.res.iter().any(eligible) {
                (0..self.res.len())
                    .filter(|&i| eligible(&self.res[i]))
                    .min_by_key(|&i| (self.prio(&self.res[i].1), self.res[i].0))
                    .unwrap()
            } else {
                (0..self.res.len()).min_by_key(|&i| self.res[i].3).unwrap()
            };
            let (key, times, pf, _) = self.res.remove(i);
            out.push(key);
            if !pf && self.max_ghosts > 0 {
                self.ghosts.insert(0, (key, times));
                self.ghosts.truncate(self.max_ghosts);
            }
        }
        fn take_ghost(&mut self, b: u64) -> Option<Vec<u64>> {
            let i = self.ghosts.iter().position(|g| g.0 == b)?;
            Some(self.ghosts.remove(i).1)
        }
    }

    impl Reference for Model {
        fn len(&self) -> usize {
            self.res.len()
        }
        fn access(&mut self, b: u64, out: &mut Vec<u64>) -> Outcome {
            self.now += 1;
            self.seq += 1;
            let (t, k, crp, seq) = (self.now, self.k, self.crp, self.seq);
            if let Some(e) = self.res.iter_mut().find(|e| e.0 == b) {
                let times = &mut e.1;
                let o = if e.2 {
                    *times = vec![0; k + 1];
                    times[0] = t;
                    times[1] = t;
                    e.2 = false;
                    Outcome::PrefetchHit
                } else {
                    if t - times[0] > crp {
                        let c = times[0] - times[1];
                        for i in (2..=k).rev() {
                            times[i] = if times[i - 1] != 0 { times[i - 1] + c } else { 0 };
                        }
                        times[1] = t;
                    }
                    times[0] = t;
                    Outcome::Hit
                };
                e.3 = seq;
                return o;
            }
            let ghost = self.take_ghost(b);
            while self.res.len() >= self.cap {
                self.evict(out);
            }
            let times = match ghost {
                Some(mut g) => {
                    for i in (2..=k).rev() {
                        g[i] = g[i - 1];
                    }
                    g[1] = t;
                    g[0] = t;
                    g
                }
                None => {
                    let mut g = vec![0; k + 1];
                    g[0] = t;
                    g[1] = t;
                    g
                }
            };
            self.res.push((b, times, false, seq));
            Outcome::Miss
        }
        fn prefetch(&mut self, b: u64, out: &mut Vec<u64>) -> bool {
            if self.res.iter().any(|e| e.0 == b) {
                return false;
            }
            self.take_ghost(b);
            while self.res.len() >= self.cap {
                self.evict(out);
            }
            self.seq += 1;
            let mut g = vec![0; self.k + 1];
            g[0] = self.now;
            self.res.push((b, g, true, self.seq));
            true
        }
        fn remove(&mut self, b: u64) -> bool {
            let Some(i) = self.res.iter().position(|e| e.0 == b) else { return false };
            let (key, times, pf, _) = self.res.remove(i);
            if !pf && self.max_ghosts > 0 {
                self.ghosts.insert(0, (key, times));
                self.ghosts.truncate(self.max_ghosts);
            }
            true
        }
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            8 => (0u64..20).prop_map(Op::Access),
            1 => proptest::collection::vec(0u64..20, 1..4).prop_map(Op::Prefetch),
            1 => (0u64..20).prop_map(Op::Remove),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn agrees_with_scanning_model(
            cap in 1usize..8,
            kk in 1u32..4,
            crp in prop_oneof![Just(0u64), Just(1), Just(3), Just(10)],
            history in prop_oneof![Just(0.0), Just(0.5), Just(1.0), Just(2.0)],
            fifo in any::<bool>(),
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            let sub = if fifo { Subsidiary::Fifo } else { Subsidiary::Lru };
            let mut p = LruK::new(cap, &cfg(kk, crp, history, sub));
            let mut m = Model {
                cap, k: kk as usize, crp, max_ghosts: p.max_ghosts, fifo, now: 0, seq: 0,
                res: Vec::new(), ghosts: Vec::new(),
            };
            for (i, op) in ops.iter().enumerate() {
                model::check_step(&mut p, &mut m, i, op)?;
                for e in &m.res {
                    prop_assert_eq!(p.history_of(e.0), Some(e.1.clone()));
                }
                for g in &m.ghosts {
                    prop_assert_eq!(p.history_of(g.0), Some(g.1.clone()));
                }
            }
        }
    }
}
