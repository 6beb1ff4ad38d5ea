//! S3-FIFO: a small probationary FIFO, a main FIFO with re-insertion, and a ghost FIFO of keys.
//!
//! **Paper.** J. Yang, Y. Zhang, Z. Qiu, Y. Yue and K. V. Rashmi, "FIFO queues are all you need for cache
//! eviction", 29th ACM Symposium on Operating Systems Principles (SOSP '23), 2023. Implemented as libCacheSim's
//! `S3FIFO` (libcachesim 0.3.5) defines it:
//!
//! - Queues: *small* S holds ⌊c·`small_ratio`⌋ blocks (at least 1, see *Tiny caches*), *main* M the other
//!   c − |S| (c = capacity), *ghost* G remembers up to ⌊c·`ghost_ratio`⌋ keys (none when that is 0). Every block
//!   has a frequency counter.
//! - Demand hit (in S or M): the counter goes up by one. Nothing moves.
//! - Demand miss: first, while the cache is full, evict (below); then insert with counter 0 — into M if the key
//!   was in G (the ghost entry is consumed), otherwise into S, except that until the first eviction ever, a miss
//!   that finds S already full goes to M (libCacheSim's S3FIFO.c, which fills M during warm-up).
//! - Evict: if |M| exceeds its share or S is empty, evict from M, else from S.
//!   - From S: take S's oldest block; if its counter ≥ `move_to_main_threshold` move it to M's new end with
//!     counter 0 and look at the next one; otherwise evict it and put its key at G's new end (dropping G's oldest
//!     key if G is over its size). Stops after one eviction or when S is empty (then the next eviction is from M).
//!   - From M: take M's oldest block; if its counter is ≥ 1, re-insert it at M's new end with counter
//!     min(counter, 3) − 1 (a 2-bit CLOCK) and look at the next one; otherwise evict it (M's victims are not
//!     remembered in G).
//!
//! **Prefetch adaptation (seed `001_*` §4: prefetched blocks "not accessed yet", their first access counted as the
//! first reference, never moved to a ghost list if evicted unaccessed).** A prefetched block is inserted where a
//! missed block would be (S, or M during warm-up when S is full), counter 0, flagged *not yet accessed*. A
//! prefetch is not a reference, so:
//! - Its first demand access clears the flag, returns [`Outcome::PrefetchHit`] and counts as the *first*
//!   reference, the one that would have inserted it: the counter stays 0 (a later hit adds one as usual).
//! - A prefetch of a key that is in G takes the ghost entry (the key cannot be both resident and a ghost) and
//!   goes to S, not M, marked as *ghost-born*. If its first demand access comes, that access is what would have
//!   been the ghost hit, so the block then moves to M's new end with counter 0, exactly as the ghost hit would
//!   have put it there.
//! - An unaccessed prefetched block is never promoted from S to M (even with `move_to_main_threshold` 0), and when
//!   evicted it is reported with `unused_prefetch: true` and **not** put in G (nor does a ghost-born one get its
//!   old ghost entry back).
//!
//! **Parameters** ([`S3FifoConfig`]): `small_ratio` in (0, 1], default 0.1; `ghost_ratio` in [0, 1], default 0.9
//! (0: no ghost); `move_to_main_threshold`, 0..=255, default 2; `libcachesim_quirks` (below), default false.
//!
//! | preset | `small_ratio` | `ghost_ratio` | `move_to_main_threshold` | `libcachesim_quirks` |
//! |---|---|---|---|---|
//! | [`Default`](super::Preset::Default) | 0.1 | 0.9 | 2 | false |
//! | [`Libcachesim`](super::Preset::Libcachesim) | 0.1 | 0.9 | 2 | true |
//! | [`Butt05`](super::Preset::Butt05) | 0.1 | 1.0 (history = cache size, seed `001_*` §5.1) | 2 | false |
//!
//! The default ratios and threshold are libcachesim 0.3.5's `S3FIFO()` defaults (`small_size_ratio=0.1,
//! ghost_size_ratio=0.9, move_to_main_threshold=2`).
//!
//! **Tiny caches, and `libcachesim_quirks`.** Blockwell and libcachesim differ only when ⌊c·`small_ratio`⌋ < 2
//! (c < 20 at the default ratio). libcachesim 0.3.5 aborts the process when ⌊c·`small_ratio`⌋ is 0 or the main
//! queue would be empty (`small_ratio` 1), and with a 1-block small queue it admits nothing (it refuses an object
//! as large as the small queue, and a block is exactly that large), so the cache stays empty and every access
//! misses. Blockwell gives S max(1, ⌊c·`small_ratio`⌋) blocks, lets M be empty when S takes everything, and
//! admits normally. With `libcachesim_quirks` (the `Libcachesim` preset) it instead declines every block whenever
//! ⌊c·`small_ratio`⌋ ≤ 1, which is what libcachesim computes at 1 and what its admission rule gives at 0 where
//! it aborts instead. Everywhere else both modes agree with libcachesim exactly, including the order of
//! evictions and insertions.
//!
//! **Metadata.** 20 bytes per arena entry, resident or ghost: the 8-byte key (stored as two `u32` so the entry
//! aligns to 4 bytes), two 31-bit links with the prefetch flag in the spare bit, a 1-byte counter (saturating at
//! 255, exact for every allowed threshold), a 1-byte queue tag (S, M or G, plus the ghost-born bit), 2 bytes of
//! padding. Plus one shared handle index, 4 bytes + 1 tag byte per bucket, reserved for twice the entries so that
//! churn never grows it (11.4–22.9 bytes per entry): 31.4–42.9 bytes per cached block and the same per ghost
//! entry (60–82 bytes per cached block with the default 0.9 ghost).
//!
//! **Cost.** One index lookup per access (resident and ghost keys share the index). O(1) per hit, insert and
//! ghost operation. An eviction is O(1) amortized: every block moved from S to M or re-inserted in M was
//! inserted or hit before, and each re-insertion lowers a counter that only hits raise (a single eviction can
//! scan all of S and then M). No allocation once the arena and index have grown to capacity + ghost size.

use super::{Access, Evicted, Outcome, Policy, Preset};
use crate::arena::{Arena, Handle, KeyIndex, Keyed, Links, List, PackedKey};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// S3-FIFO's parameters (libcachesim `S3FIFO(small_size_ratio, ghost_size_ratio, move_to_main_threshold)`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct S3FifoConfig {
    /// Share of the capacity given to the small FIFO, in (0, 1].
    pub small_ratio: f64,
    /// Ghost entries kept, as a share of the capacity, in [0, 1]; 0 disables the ghost.
    pub ghost_ratio: f64,
    /// Hits while in the small FIFO needed to move to the main FIFO instead of being evicted, 0..=255.
    pub move_to_main_threshold: u32,
    /// Decline every block when ⌊capacity·`small_ratio`⌋ ≤ 1, as libcachesim 0.3.5 does (see the module docs).
    pub libcachesim_quirks: bool,
}

impl Default for S3FifoConfig {
    fn default() -> Self {
        S3FifoConfig { small_ratio: 0.1, ghost_ratio: 0.9, move_to_main_threshold: 2, libcachesim_quirks: false }
    }
}

const SMALL: u8 = 0;
const MAIN: u8 = 1;
const GHOST: u8 = 2;
const QUEUE: u8 = 3;
/// A prefetched block that took a ghost entry when it was inserted (see the module docs).
const GHOST_BORN: u8 = 4;

#[derive(Clone, Debug)]
struct Node {
    /// 4-byte aligned, so the node is 20 bytes, not 24.
    key: PackedKey,
    /// Flag bit: prefetched, not yet accessed on demand.
    links: Links,
    /// Frequency counter (saturating).
    freq: u8,
    /// Queue (`SMALL`, `MAIN`, `GHOST`) in the low bits, plus `GHOST_BORN`.
    tag: u8,
}

impl Node {
    #[inline]
    fn new(key: BlockKey, tag: u8) -> Self {
        Node { key: PackedKey::new(key), links: Links::default(), freq: 0, tag }
    }

    #[inline]
    fn queue(&self) -> u8 {
        self.tag & QUEUE
    }
}

crate::arena::linked_by_field!(Node);
crate::arena::keyed_by_field!(Node);

/// The S3-FIFO policy. Each list's front is its new end, its back the oldest entry.
#[derive(Clone, Debug)]
pub struct S3Fifo {
    capacity: usize,
    small_cap: usize,
    main_cap: usize,
    ghost_cap: usize,
    threshold: u8,
    /// `libcachesim_quirks` with a small queue of at most one block: nothing is ever admitted.
    admit_nothing: bool,
    /// Has anything been evicted yet (ends the warm-up rule that sends misses to M when S is full)?
    has_evicted: bool,
    arena: Arena<Node>,
    index: KeyIndex,
    small: List,
    main: List,
    ghost: List,
}

impl S3Fifo {
    /// Queue sizes in blocks (small, main, ghost) for a capacity.
    pub fn sizes(capacity: usize, config: &S3FifoConfig) -> (usize, usize, usize) {
        let small = ((capacity as f64 * config.small_ratio) as usize).clamp(1, capacity);
        let ghost = (capacity as f64 * config.ghost_ratio) as usize;
        (small, capacity - small, ghost)
    }

    #[inline]
    fn resident(&self) -> usize {
        self.small.len() + self.main.len()
    }

    /// Evicts one block (libCacheSim's `S3FIFO_evict`).
    #[inline]
    fn evict(&mut self, out: &mut Vec<Evicted>) {
        self.has_evicted = true;
        if self.main.len() > self.main_cap || self.small.is_empty() {
            self.evict_main(out);
        } else {
            self.evict_small(out);
        }
    }

    fn evict_small(&mut self, out: &mut Vec<Evicted>) {
        while let Some(h) = self.small.pop_back(&mut self.arena) {
            let n = &mut self.arena[h];
            let unused = n.links.flag();
            if !unused && n.freq >= self.threshold {
                n.freq = 0;
                n.tag = MAIN;
                self.main.push_front(&mut self.arena, h);
                continue;
            }
            if unused || self.ghost_cap == 0 {
                super::evict(&mut self.arena, &mut self.index, h, out);
            } else {
                out.push(Evicted { key: n.key(), unused_prefetch: false });
                n.freq = 0;
                n.tag = GHOST;
                self.ghost.push_front(&mut self.arena, h);
                if self.ghost.len() > self.ghost_cap {
                    let old = self.ghost.pop_back(&mut self.arena).expect("ghost over its size is not empty");
                    self.index.forget(&mut self.arena, old);
                }
            }
            return;
        }
    }

    fn evict_main(&mut self, out: &mut Vec<Evicted>) {
        while let Some(h) = self.main.back() {
            let n = &mut self.arena[h];
            if n.freq >= 1 {
                n.freq = n.freq.min(3) - 1;
                self.main.move_to_front(&mut self.arena, h);
                continue;
            }
            self.main.remove(&mut self.arena, h);
            super::evict(&mut self.arena, &mut self.index, h, out);
            return;
        }
    }

    /// Makes room for one block, then inserts `key`, re-using `ghost`, the key's ghost node (already unlinked
    /// from the ghost list), if it had one.
    #[inline]
    fn insert(&mut self, key: BlockKey, ghost: Option<Handle>, prefetched: bool, out: &mut Vec<Evicted>) {
        while self.resident() >= self.capacity {
            self.evict(out);
        }
        let tag = match ghost {
            // A demand miss on a ghost key: the ghost hit sends it to M.
            Some(_) if !prefetched => MAIN,
            // A prefetch over a ghost entry: to S, remembered as ghost-born (see the module docs).
            Some(_) => SMALL | GHOST_BORN,
            // Warm-up: until the first eviction, a miss that finds S full goes to M.
            None if !self.has_evicted && self.small.len() >= self.small_cap => MAIN,
            None => SMALL,
        };
        let h = match ghost {
            Some(h) => {
                let n = &mut self.arena[h];
                n.freq = 0;
                n.tag = tag;
                h
            }
            None => {
                let h = self.arena.alloc(Node::new(key, tag));
                self.index.insert(&self.arena, h);
                h
            }
        };
        self.arena[h].links.set_flag(prefetched);
        if tag & QUEUE == MAIN {
            self.main.push_front(&mut self.arena, h);
        } else {
            self.small.push_front(&mut self.arena, h);
        }
    }

    /// Resident (key, counter) pairs of the small and the main FIFO, newest first, and the ghost keys, newest
    /// first (for tests and debugging).
    #[allow(clippy::type_complexity)]
    pub fn queues(&self) -> (Vec<(BlockKey, u8)>, Vec<(BlockKey, u8)>, Vec<BlockKey>) {
        let q = |l: &List| l.iter(&self.arena).map(|h| (self.arena[h].key(), self.arena[h].freq)).collect();
        (q(&self.small), q(&self.main), self.ghost.iter(&self.arena).map(|h| self.arena[h].key()).collect())
    }
}

impl Policy for S3Fifo {
    type Config = S3FifoConfig;

    fn preset(preset: Preset) -> S3FifoConfig {
        match preset {
            Preset::Default => S3FifoConfig::default(),
            Preset::Libcachesim => S3FifoConfig { libcachesim_quirks: true, ..S3FifoConfig::default() },
            Preset::Butt05 => S3FifoConfig { ghost_ratio: 1.0, ..S3FifoConfig::default() },
        }
    }

    fn check_config(c: &S3FifoConfig) -> Result<(), String> {
        if !(c.small_ratio > 0.0 && c.small_ratio <= 1.0) {
            return Err(format!("small_ratio must be in (0, 1], not {}", c.small_ratio));
        }
        if !(c.ghost_ratio >= 0.0 && c.ghost_ratio <= 1.0) {
            return Err(format!("ghost_ratio must be in [0, 1], not {}", c.ghost_ratio));
        }
        if c.move_to_main_threshold > u8::MAX as u32 {
            return Err(format!("move_to_main_threshold must be 0..=255, not {}", c.move_to_main_threshold));
        }
        Ok(())
    }

    fn libcachesim_quirks(c: &S3FifoConfig) -> bool {
        c.libcachesim_quirks
    }

    fn new(capacity: usize, config: &S3FifoConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        if let Err(e) = Self::check_config(config) {
            panic!("invalid S3-FIFO configuration: {e}");
        }
        let (small_cap, main_cap, ghost_cap) = Self::sizes(capacity, config);
        S3Fifo {
            capacity,
            small_cap,
            main_cap,
            ghost_cap,
            threshold: config.move_to_main_threshold as u8,
            admit_nothing: config.libcachesim_quirks && ((capacity as f64 * config.small_ratio) as usize) <= 1,
            has_evicted: false,
            arena: Arena::with_capacity(capacity + ghost_cap),
            index: KeyIndex::with_capacity(capacity + ghost_cap),
            small: List::new(),
            main: List::new(),
            ghost: List::new(),
        }
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.resident()
    }

    fn contains(&self, key: BlockKey) -> bool {
        matches!(self.index.get(&self.arena, key), Some(h) if self.arena[h].queue() != GHOST)
    }

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        match self.index.get(&self.arena, access.key) {
            Some(h) if self.arena[h].queue() != GHOST => {
                let n = &mut self.arena[h];
                if !n.links.flag() {
                    n.freq = n.freq.saturating_add(1);
                    return Outcome::Hit;
                }
                n.links.set_flag(false);
                if n.tag & GHOST_BORN != 0 {
                    // The access that would have been a ghost hit: to M's new end, counter 0.
                    n.tag = MAIN;
                    self.small.remove(&mut self.arena, h);
                    self.main.push_front(&mut self.arena, h);
                }
                Outcome::PrefetchHit
            }
            Some(h) => {
                self.ghost.remove(&mut self.arena, h);
                self.insert(access.key, Some(h), false, out);
                Outcome::Miss
            }
            None if self.admit_nothing => Outcome::Miss,
            None => {
                self.insert(access.key, None, false, out);
                Outcome::Miss
            }
        }
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        if self.admit_nothing {
            return 0;
        }
        let mut n = 0;
        for a in group {
            match self.index.get(&self.arena, a.key) {
                Some(h) if self.arena[h].queue() != GHOST => {}
                Some(h) => {
                    self.ghost.remove(&mut self.arena, h);
                    self.insert(a.key, Some(h), true, out);
                    n += 1;
                }
                None => {
                    self.insert(a.key, None, true, out);
                    n += 1;
                }
            }
        }
        n
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        match self.index.get(&self.arena, key) {
            Some(h) if self.arena[h].queue() != GHOST => {
                if self.arena[h].queue() == MAIN {
                    self.main.remove(&mut self.arena, h);
                } else {
                    self.small.remove(&mut self.arena, h);
                }
                self.index.forget(&mut self.arena, h);
                true
            }
            _ => false,
        }
    }

    fn validate(&self) -> Result<(), String> {
        self.small.check(&self.arena).map_err(|e| format!("small: {e}"))?;
        self.main.check(&self.arena).map_err(|e| format!("main: {e}"))?;
        self.ghost.check(&self.arena).map_err(|e| format!("ghost: {e}"))?;
        let lists = self.small.len() + self.main.len() + self.ghost.len();
        if lists != self.arena.len() || self.index.len() != self.arena.len() {
            return Err(format!(
                "lists {} (small {}, main {}, ghost {}) / index {} / arena {} disagree",
                lists,
                self.small.len(),
                self.main.len(),
                self.ghost.len(),
                self.index.len(),
                self.arena.len()
            ));
        }
        if self.resident() > self.capacity {
            return Err(format!("{} blocks over capacity {}", self.resident(), self.capacity));
        }
        if self.small_cap + self.main_cap != self.capacity || self.small_cap == 0 {
            return Err(format!("queue sizes {} + {} vs capacity {}", self.small_cap, self.main_cap, self.capacity));
        }
        if self.ghost.len() > self.ghost_cap {
            return Err(format!("{} ghost entries over the ghost size {}", self.ghost.len(), self.ghost_cap));
        }
        if !self.has_evicted && !self.ghost.is_empty() {
            return Err("ghost entries before any eviction".into());
        }
        if self.admit_nothing && !self.arena.is_empty() {
            return Err(format!("{} entries in a cache that admits nothing", self.arena.len()));
        }
        for (name, list, queue) in
            [("small", &self.small, SMALL), ("main", &self.main, MAIN), ("ghost", &self.ghost, GHOST)]
        {
            for h in list.iter(&self.arena) {
                let n = &self.arena[h];
                if self.index.get(&self.arena, n.key()) != Some(h) {
                    return Err(format!("{name}: key {} not indexed", n.key()));
                }
                if n.queue() != queue {
                    return Err(format!("{name}: key {} tagged with queue {}", n.key(), n.queue()));
                }
                if n.links.flag() && (queue == GHOST || n.freq != 0) {
                    return Err(format!("{name}: key {}: unaccessed prefetched block, counter {}", n.key(), n.freq));
                }
                if n.tag & GHOST_BORN != 0 && !(queue == SMALL && n.links.flag()) {
                    return Err(format!("{name}: key {}: ghost-born mark outside an unaccessed prefetch", n.key()));
                }
                if n.tag & !(QUEUE | GHOST_BORN) != 0 {
                    return Err(format!("{name}: key {}: stray tag bits {:#x}", n.key(), n.tag));
                }
            }
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes() + self.index.heap_bytes()
    }

    /// Exact, replaying *evict* on read-only walks. From S: the first block from S's oldest end that is an unused
    /// prefetch or below the threshold (the others would move to M). From M (or when every S block moves): M's
    /// oldest block with counter 0; failing that the first block moved in from S (counter 0, behind M's own
    /// blocks); failing that the first block with the smallest min(counter, 3), since each pass of the hand lowers
    /// every counter by one. As long as the eviction's own walks.
    fn victim(&self, incoming: BlockKey) -> super::Victim {
        use super::Victim;
        if self.resident() < self.capacity || self.contains(incoming) {
            return Victim::None;
        }
        let block = |h: Handle| Victim::Block(self.arena[h].key());
        let mut moved = None;
        if !(self.main.len() > self.main_cap || self.small.is_empty()) {
            let mut s = self.small.back();
            while let Some(h) = s {
                let n = &self.arena[h];
                if n.links.flag() || n.freq < self.threshold {
                    return block(h);
                }
                moved.get_or_insert(h);
                s = List::prev_of(&self.arena, h);
            }
        }
        let mut best: Option<(u8, Handle)> = None;
        let mut m = self.main.back();
        while let Some(h) = m {
            let f = self.arena[h].freq.min(3);
            if f == 0 {
                return block(h);
            }
            if best.map_or(true, |(b, _)| f < b) {
                best = Some((f, h));
            }
            m = List::prev_of(&self.arena, h);
        }
        match moved.or(best.map(|(_, h)| h)) {
            Some(h) => block(h),
            None => Victim::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::super::{PolicyKind, PolicySpec};
    use super::*;
    use crate::policy::testutil::{acc, ev, k, pf};
    use proptest::prelude::*;

    fn s3(cap: usize) -> S3Fifo {
        S3Fifo::new(cap, &S3FifoConfig::default())
    }
    type Q = (Vec<(u64, u8)>, Vec<(u64, u8)>, Vec<u64>);
    fn queues(p: &S3Fifo) -> Q {
        let (s, m, g) = p.queues();
        let f = |v: Vec<(BlockKey, u8)>| v.into_iter().map(|(k, c)| (k.block(), c)).collect();
        (f(s), f(m), g.into_iter().map(|k| k.block()).collect())
    }

    #[test]
    fn node_is_twenty_bytes() {
        assert_eq!(std::mem::size_of::<Node>(), 20);
        let key = BlockKey::new(0xfedc, 0xba98_7654_3210).unwrap();
        assert_eq!(Node::new(key, 0).key(), key);
    }

    #[test]
    fn metadata_is_as_documented() {
        for cap in [1_000, 10_000, 100_000, 1 << 20] {
            let p = s3(cap);
            let entries = cap + p.ghost_cap;
            let per_entry = p.heap_bytes() as f64 / entries as f64;
            assert!((31.4..=43.0).contains(&per_entry), "{per_entry} bytes per entry at {cap}");
            let per_block = p.heap_bytes() as f64 / cap as f64;
            assert!((59.6..=81.6).contains(&per_block), "{per_block} bytes per cached block at {cap}");
        }
    }

    #[test]
    fn sizes_follow_libcachesim_and_keep_one_small_slot() {
        let c = S3FifoConfig::default();
        assert_eq!(S3Fifo::sizes(100, &c), (10, 90, 90));
        assert_eq!(S3Fifo::sizes(2692, &c), (269, 2423, 2422));
        assert_eq!(S3Fifo::sizes(25, &c), (2, 23, 22));
        assert_eq!(S3Fifo::sizes(3, &c), (1, 2, 2));
        assert_eq!(S3Fifo::sizes(1, &c), (1, 0, 0));
        let all = S3FifoConfig { small_ratio: 1.0, ghost_ratio: 0.0, ..c.clone() };
        assert_eq!(S3Fifo::sizes(7, &all), (7, 0, 0));
    }

    /// Capacity 20: S holds 2, M 18, G 18.
    #[test]
    fn warm_up_fills_main_then_small_filters_with_a_ghost() {
        let mut p = s3(20);
        for b in 1..=20 {
            assert_eq!(acc(&mut p, b), (Outcome::Miss, vec![]));
        }
        let (s, m, g) = queues(&p);
        assert_eq!(s, vec![(2, 0), (1, 0)], "S takes the first two");
        assert_eq!(m.len(), 18, "then, before any eviction, misses go to M");
        assert_eq!(m[0], (20, 0));
        assert!(g.is_empty());
        // 1 gets two hits in S, 2 none.
        acc(&mut p, 1);
        acc(&mut p, 1);
        // Evict from S: 1 (counter 2) moves to M with counter 0, 2 is evicted into G; 21 enters S.
        assert_eq!(acc(&mut p, 21), (Outcome::Miss, vec![ev(2, false)]));
        let (s, m, g) = queues(&p);
        assert_eq!(s, vec![(21, 0)]);
        assert_eq!((m.len(), m[0]), (19, (1, 0)));
        assert_eq!(g, vec![2]);
        // M is over its 18: the next eviction is from M's oldest, 3 (never hit).
        assert_eq!(acc(&mut p, 22), (Outcome::Miss, vec![ev(3, false)]));
        // A miss on the ghost key 2: M is at its size, so S evicts 21 (into G); 2 goes to M.
        assert_eq!(acc(&mut p, 2), (Outcome::Miss, vec![ev(21, false)]));
        let (s, m, g) = queues(&p);
        assert_eq!(s, vec![(22, 0)]);
        assert_eq!((m.len(), m[0]), (19, (2, 0)));
        assert_eq!(g, vec![21], "the ghost entry of 2 was consumed");
    }

    #[test]
    fn main_is_a_two_bit_clock() {
        // Capacity 20: fill (S: 1, 2; M: 3..=20), hit 3 five times and 4 once.
        let mut p = s3(20);
        for b in 1..=20 {
            acc(&mut p, b);
        }
        for _ in 0..5 {
            acc(&mut p, 3);
        }
        acc(&mut p, 4);
        // First eviction: S (M is at its size, S non-empty): 1 (counter 0) evicted into G.
        assert_eq!(acc(&mut p, 21), (Outcome::Miss, vec![ev(1, false)]));
        // Next: S holds 2 and 21; 2 evicted into G.
        assert_eq!(acc(&mut p, 22), (Outcome::Miss, vec![ev(2, false)]));
        // Make M overflow: a ghost hit on 1 goes to M. M (3..=20) is at 18, so the eviction is from S: 21.
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, vec![ev(21, false)]));
        // M now 19 > 18: evict from M: 3 (counter 5 → min(5,3)−1 = 2, re-inserted), 4 (1 → 0, re-inserted),
        // 5 evicted.
        assert_eq!(acc(&mut p, 23), (Outcome::Miss, vec![ev(5, false)]));
        let (_, m, _) = queues(&p);
        assert_eq!(&m[..3], &[(4, 0), (3, 2), (1, 0)]);
    }

    #[test]
    fn capacity_one_and_two() {
        let mut p = s3(1);
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, vec![]));
        assert_eq!(acc(&mut p, 1), (Outcome::Hit, vec![]));
        assert_eq!(acc(&mut p, 2), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(acc(&mut p, 2), (Outcome::Hit, vec![]));
        let mut p = s3(2);
        for b in [1, 2, 1, 1, 3, 4, 1] {
            acc(&mut p, b);
        }
        p.validate().unwrap();
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn prefetched_blocks_are_never_promoted_or_ghosted_unaccessed() {
        // Threshold 0: any accessed block leaving S moves to M.
        let cfg = S3FifoConfig { move_to_main_threshold: 0, ..S3FifoConfig::default() };
        let mut p = S3Fifo::new(20, &cfg);
        for b in 1..=20 {
            acc(&mut p, b);
        }
        assert!(p.remove(k(1)) && p.remove(k(2)), "empty S");
        assert_eq!(pf(&mut p, &[30, 31, 5]), (2, vec![]));
        assert_eq!(queues(&p).0, vec![(31, 0), (30, 0)]);
        // Evicting from S: 30, unused, is evicted, not promoted, not ghosted.
        assert_eq!(acc(&mut p, 40), (Outcome::Miss, vec![ev(30, true)]));
        assert_eq!(acc(&mut p, 41), (Outcome::Miss, vec![ev(31, true)]));
        let (s, m, g) = queues(&p);
        assert_eq!(s, vec![(41, 0), (40, 0)]);
        assert_eq!(m.len(), 18);
        assert!(g.is_empty());
        // Demand-inserted blocks are promoted at threshold 0; then M, over its size, evicts its oldest.
        assert_eq!(acc(&mut p, 42), (Outcome::Miss, vec![ev(3, false)]));
        assert_eq!(&queues(&p).1[..2], &[(41, 0), (40, 0)]);
    }

    #[test]
    fn first_access_of_a_prefetched_block_is_its_first_reference() {
        let mut p = s3(20);
        for b in 1..=20 {
            acc(&mut p, b);
        }
        acc(&mut p, 21); // evicts 1 into G; S: 21, 2
        assert_eq!(queues(&p).2, vec![1]);
        assert_eq!(pf(&mut p, &[50]), (1, vec![ev(2, false)]));
        assert_eq!(queues(&p).0, vec![(50, 0), (21, 0)]);
        assert_eq!(acc(&mut p, 50).0, Outcome::PrefetchHit);
        assert_eq!(queues(&p).0, vec![(50, 0), (21, 0)], "counter still 0 after the first access");
        assert_eq!(acc(&mut p, 50).0, Outcome::Hit);
        assert_eq!(acc(&mut p, 50).0, Outcome::Hit);
        // 21 (never hit) evicted to G; 50 stays in S (it is not the oldest).
        assert_eq!(acc(&mut p, 51), (Outcome::Miss, vec![ev(21, false)]));
        // Now 50 (counter 2) is the oldest in S: moved to M; 51 evicted.
        assert_eq!(acc(&mut p, 52), (Outcome::Miss, vec![ev(51, false)]));
        assert_eq!(queues(&p).1[0], (50, 0));
    }

    #[test]
    fn prefetch_of_a_ghost_key_goes_to_small_and_moves_to_main_on_first_access() {
        let mut p = s3(20);
        for b in 1..=20 {
            acc(&mut p, b);
        }
        acc(&mut p, 21); // 1 into G
        acc(&mut p, 22); // 2 into G
        assert_eq!(queues(&p).2, vec![2, 1]);
        // Prefetch 1 and 2: both take their ghost entry and go to S (S: 22, 21 → evictions from S first).
        let (n, out) = pf(&mut p, &[1, 2]);
        assert_eq!(n, 2);
        assert_eq!(out, vec![ev(21, false), ev(22, false)]);
        let (s, _, g) = queues(&p);
        assert_eq!(s, vec![(2, 0), (1, 0)]);
        assert_eq!(g, vec![22, 21]);
        assert!(!p.contains(k(21)));
        // First access of 1: what would have been a ghost hit: to M's new end, counter 0.
        assert_eq!(acc(&mut p, 1).0, Outcome::PrefetchHit);
        let (s, m, _) = queues(&p);
        assert_eq!(s, vec![(2, 0)]);
        assert_eq!(m[0], (1, 0));
        // M is over its size: M evicts first; then 2 is evicted from S unaccessed: unused, and it does not get
        // a ghost entry back.
        assert_eq!(acc(&mut p, 23), (Outcome::Miss, vec![ev(3, false)]));
        assert_eq!(acc(&mut p, 24), (Outcome::Miss, vec![ev(2, true)]));
        assert_eq!(queues(&p).2, vec![22, 21]);
    }

    #[test]
    fn remove_keeps_ghost_history() {
        let mut p = s3(20);
        for b in 1..=21 {
            acc(&mut p, b);
        }
        assert_eq!(queues(&p).2, vec![1]);
        assert!(!p.remove(k(1)), "a ghost is not resident");
        assert!(p.remove(k(21)));
        assert!(p.remove(k(5)));
        assert!(!p.remove(k(5)));
        p.validate().unwrap();
        assert_eq!(p.len(), 18);
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, vec![]));
        assert_eq!(queues(&p).1[0], (1, 0), "ghost hit after a remove still goes to M");
    }

    #[test]
    fn libcachesim_quirks_decline_everything_with_a_one_block_small_queue() {
        let quirks = S3FifoConfig { libcachesim_quirks: true, ..S3FifoConfig::default() };
        for cap in [1, 9, 10, 19] {
            let mut p = S3Fifo::new(cap, &quirks);
            for b in [1, 2, 1, 1, 3, 1] {
                assert_eq!(acc(&mut p, b), (Outcome::Miss, vec![]), "capacity {cap}");
            }
            assert_eq!(pf(&mut p, &[7, 8]), (0, vec![]));
            assert!(p.is_empty());
        }
        // From a 2-block small queue on, quirks change nothing.
        let mut p = S3Fifo::new(20, &quirks);
        let mut q = s3(20);
        for b in [1, 2, 3, 1, 1, 4, 5, 6, 2, 7, 8, 1, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 2, 23] {
            assert_eq!(acc(&mut p, b), acc(&mut q, b));
        }
        assert_eq!(queues(&p), queues(&q));
    }

    #[test]
    fn config_is_checked_and_presets_differ_only_in_ghost_size_and_quirks() {
        assert!(PolicySpec::parse("s3-fifo(small_ratio=0.25,ghost_ratio=0,move_to_main_threshold=1)").is_ok());
        for bad in [
            "s3fifo(small_ratio=0)",
            "s3fifo(small_ratio=1.5)",
            "s3fifo(ghost_ratio=-0.1)",
            "s3fifo(ghost_ratio=2)",
            "s3fifo(move_to_main_threshold=256)",
        ] {
            assert!(PolicySpec::parse(bad).is_err(), "{bad}");
        }
        let spec = PolicySpec::new(PolicyKind::S3Fifo);
        let mut d = serde_json::json!({
            "small_ratio": 0.1, "ghost_ratio": 0.9, "move_to_main_threshold": 2, "libcachesim_quirks": false
        });
        assert_eq!(spec.config(Preset::Default).unwrap(), d);
        let mut s = d.clone();
        s["ghost_ratio"] = 1.0.into();
        assert_eq!(spec.config(Preset::Butt05).unwrap(), s);
        d["libcachesim_quirks"] = true.into();
        assert_eq!(spec.config(Preset::Libcachesim).unwrap(), d);
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(
            cap in 1usize..30,
            small in 0.05f64..1.0,
            ghost in 0.0f64..1.0,
            threshold in 0u32..4,
            ops in prop::collection::vec(model::op(), 1..300),
        ) {
            let c = S3FifoConfig {
                small_ratio: small,
                ghost_ratio: ghost,
                move_to_main_threshold: threshold,
                libcachesim_quirks: false,
            };
            model::run(S3Fifo::new(cap, &c), &ops)?;
        }

        #[test]
        fn quirks_mode_agrees_with_a_set_model(
            cap in 1usize..40,
            ops in prop::collection::vec(model::op(), 1..200),
        ) {
            let c = S3FifoConfig { libcachesim_quirks: true, ..S3FifoConfig::default() };
            model::run_with(S3Fifo::new(cap, &c), &ops, cap < 20)?;
        }
    }
}
