//! W-TinyLFU: a small LRU window in front of a segmented-LRU main cache, and a frequency sketch that decides
//! whether a block leaving the window may take the place of the main cache's victim.
//!
//! **Paper.** G. Einziger, R. Friedman and B. Manes, "TinyLFU: A Highly Efficient Cache Admission Policy", ACM
//! Transactions on Storage 13(4), article 35, 2017 (W-TinyLFU, §4), the design of Caffeine's cache. Implemented
//! as libCacheSim's `WTinyLFU` (libcachesim 0.3.5: `WTinyLFU.c`, `SLRU.c` with `seg-size=1:4`,
//! `minimalIncrementCBF.c`) defines it, which differs from Caffeine in ways listed below.
//!
//! **Semantics** (c = capacity, all sizes in blocks):
//! - *Sizes.* The window W is an LRU of nominal size w = ⌊c·`window_ratio`⌋; the main cache holds up to
//!   m = c − w blocks in two LRU segments, *probation* P of nominal size p = ⌊m·`probation_ratio`⌋ and *protected*
//!   Q of nominal size q = ⌊m·(1 − `probation_ratio`)⌋ (libCacheSim's `seg-size=1:4`: 0.2 and 0.8, each product
//!   rounded down, so p + q may be m − 1).
//! - *Sketch.* A counting Bloom filter (a count-min sketch with one shared row): n = ⌈b·min(m, 2³¹−1)⌉ 32-bit
//!   counters, b = −ln(`sketch_error`)/ln²2 counters per entry (14.38 at 0.001), k = ⌈b·ln 2⌉ hash functions
//!   (10). Key x's counters are (h₀ + i·h₁) mod n for i in 0..k, in 32-bit unsigned arithmetic, h₀ and h₁ the
//!   low 32 bits of XXH64 of x's 8 bytes (little-endian) with seeds `0x12345678` and `0x12344321`. An *add*
//!   increments all k counters (libCacheSim's "minimal increment" filter increments every one, not only the
//!   smallest); the *estimate* is their minimum. Every `sample_factor`·m hits in the main cache (aging), all
//!   counters are halved. x is the packed [`BlockKey`] (volume in the top 16 bits), which is
//!   libCacheSim's object id for the oracleGeneral traces Blockwell writes of one volume.
//! - *Demand hit in W*: the block moves to W's MRU end. The sketch is not touched.
//! - *Demand hit in the main cache*: in Q, the block moves to Q's MRU end; in P, it moves to Q's MRU end and,
//!   while |Q| > q, Q's LRU block moves to P's MRU end (and while then |P| > p, P's LRU block is evicted). Then the
//!   key is added to the sketch and the aging count goes up.
//! - *Demand miss*: while the cache is full, *evict* (below); then the block goes to W's MRU end and its key is
//!   added to the sketch. W may hold more than w blocks: before the cache first fills, every block is in W.
//! - *Evict* (one block): take W's LRU block v (if W is empty, evict the main cache's victim instead). While the
//!   main cache has a free slot, v moves into it, its key is added to the sketch, and the next W LRU block is
//!   taken. Then compare v with the main cache's victim u (P's LRU block, or Q's if P is empty): if
//!   estimate(v) > estimate(u), u is evicted and v moves into the main cache; else v is evicted. Either way v's key
//!   is then added to the sketch. A block *moves into the main cache* at P's MRU end if |P| < p, else at Q's if
//!   |Q| < q, else at P's (over p, see below).
//!
//! Version note: libCacheSim's source of October 2024 (`1a1a11a/libCacheSim` `WTinyLFU.c`, the newest available
//! to read) goes on after an admission, moving window blocks until one is rejected, so that one miss can evict
//! many blocks. The compiled libcachesim 0.3.5 stops after the admission (one eviction per *evict*), and Blockwell
//! follows 0.3.5.
//!
//! Differences from Caffeine (all libCacheSim's, followed for exact results): no doorkeeper Bloom filter; a
//! 4-hash 4-bit count-min sketch there, a 10-hash 32-bit counting Bloom filter here; hits in the window are not
//! counted; a window victim is counted once more when it leaves the window; aging after `sample_factor`·m main-
//! cache hits rather than 10·c accesses; the window is not capped at w until the cache is full; no hill-climbing
//! of the window size.
//!
//! **Tiny caches, and `libcachesim_quirks`** (on in the `Libcachesim` preset only). libCacheSim refuses every
//! block when w or p rounds down to 0 (its `WTinyLFU_can_insert` requires a block to fit in the window, and
//! `SLRU_can_insert` in probation): at the default 1 % window every access misses in caches of 5–99 blocks, and
//! below 5 blocks (p = 0) libcachesim 0.3.5 aborts the process ("Invalid segment size for segment 0"). With the
//! flag Blockwell admits nothing whenever w or p is 0. Without it (`Default`, `Butt05`) w is at least 1 block (at
//! most c: a 1-block cache has m = 0 and is a plain LRU window) and p at least 1 (at most m, with q ≤ m − p).
//! From 100 blocks up (at the default ratios) both modes are the same, and equal to libcachesim miss for miss.
//!
//! One more libCacheSim behaviour is kept in both modes, being harmless: since p + q may be m − 1, the main cache's
//! last free slot puts a block in P over p, and the next promotion out of P then evicts P's LRU block although
//! the main cache has that slot free.
//!
//! **Prefetch adaptation (seed `001_*` §4, see docs/policies.md "Prefetch adaptation").** A prefetched block goes
//! to W's MRU end, flagged *not yet accessed*, after making room as a demand miss does; a prefetch is not a
//! reference, so its key is **not** added to the sketch. Its first demand access clears the flag, reports
//! [`Outcome::PrefetchHit`], moves it to W's MRU end and adds its key to the sketch: the reference a demand miss
//! would have counted. A flagged block that reaches W's LRU end during *evict* is evicted there (reported as an
//! unused prefetch), never moved into the main cache nor added to the sketch, so the frequency history never
//! remembers it; that ends the eviction as any evicted window block does. The main cache holds only blocks
//! accessed on demand.
//!
//! **Parameters** ([`WTinyLfuConfig`]):
//!
//! | preset | `window_ratio` | `probation_ratio` | `sketch_error` | `sample_factor` | `libcachesim_quirks` |
//! |---|---|---|---|---|---|
//! | `Default` | 0.01 | 0.2 | 0.001 | 32 | false |
//! | `Libcachesim` | 0.01 | 0.2 | 0.001 | 32 | true |
//! | `Butt05` | 0.01 | 0.2 | 0.001 | 32 | false (seed `001_*` has no W-TinyLFU parameters) |
//!
//! They are libcachesim 0.3.5's `WTinyLFU(main_cache="SLRU", window_size=0.01)` defaults (`seg-size=1:4`, the
//! filter's error rate 0.001 and sample size 32 are fixed in its code).
//!
//! **Metadata.** One 20-byte arena entry per cached block (the key as two `u32`, two 31-bit links with the
//! prefetch flag, a segment byte) plus the handle index (11.4–22.9 bytes per block, sized for c up front), no
//! ghosts, and the sketch: n ≈ 14.38·m counters of 4 bytes, 57.5 bytes per main-cache block (56.9 per cached block
//! at m = 0.99·c). In all ≈ 88–100 bytes per cached block; `heap_bytes()` / c measured by a test: 97.4 at
//! c = 1000, 89.1 at c = 26921, 90.0 at c = 100000.
//!
//! **Cost.** O(1) per access and eviction: a sketch add or estimate is 2 XXH64 of 8 bytes and k = 10 counter
//! reads (and writes); aging halves n counters every 32·m main-cache hits, < 0.5 counter per hit amortized. A miss
//! may run the admission loop several times, each turn paid for by an earlier insertion into the window. No
//! allocation per access: the arena, the index and the sketch are sized up front.

use super::{evict, Access, Evicted, Outcome, Policy, Preset};
use crate::arena::{Arena, Handle, KeyIndex, Links, List, PackedKey};
use crate::key::BlockKey;
/// libCacheSim's `minimalIncrementCBF`, shared in [`crate::sketch`].
use crate::sketch::CountingBloom as Sketch;
#[cfg(test)]
use crate::sketch::{xxh64_u64, SEED0, SEED1};
use serde::{Deserialize, Serialize};

/// W-TinyLFU's parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WTinyLfuConfig {
    /// w / c: the window's share of the cache, in [0, 1).
    pub window_ratio: f64,
    /// p / m: the probation segment's share of the main cache, in (0, 1); protected gets 1 − this.
    pub probation_ratio: f64,
    /// The sketch's target false-positive rate, in (0, 1): sets counters per entry and hash functions.
    pub sketch_error: f64,
    /// Aging period in main-cache hits, as a multiple of the main cache's size (≥ 1).
    pub sample_factor: u32,
    /// Reproduce libcachesim 0.3.5: admit nothing when w or p rounds down to 0. Off: both are at least 1 block.
    #[serde(default)]
    pub libcachesim_quirks: bool,
}

impl Default for WTinyLfuConfig {
    fn default() -> Self {
        WTinyLfuConfig {
            window_ratio: 0.01,
            probation_ratio: 0.2,
            sketch_error: 0.001,
            sample_factor: 32,
            libcachesim_quirks: false,
        }
    }
}

/// Segment of an entry.
const WINDOW: u8 = 0;
const PROBATION: u8 = 1;
const PROTECTED: u8 = 2;
const NAMES: [&str; 3] = ["window", "probation", "protected"];

/// An entry: a cached block. The links' flag is "prefetched, not yet accessed" (only ever set in the window).
#[derive(Clone, Debug)]
struct Node {
    key: PackedKey,
    links: Links,
    seg: u8,
}

crate::arena::linked_by_field!(Node);
crate::arena::keyed_by_field!(Node);

/// The W-TinyLFU policy. Every list's front is its MRU end.
#[derive(Clone, Debug)]
pub struct WTinyLfu {
    capacity: usize,
    /// w, m, p, q (see the module docs).
    window: usize,
    main: usize,
    seg_max: [usize; 3],
    /// False when libcachesim would refuse every block (quirks mode, w or p = 0).
    admits: bool,
    arena: Arena<Node>,
    index: KeyIndex,
    lists: [List; 3],
    sketch: Sketch,
}

/// ⌊x · ratio⌋ as libCacheSim computes it (a `double` product truncated to an integer).
fn scaled(x: usize, ratio: f64) -> usize {
    (x as f64 * ratio) as usize
}

impl WTinyLfu {
    /// w, m, p and q, in blocks.
    pub fn sizes(&self) -> (usize, usize, usize, usize) {
        (self.window, self.main, self.seg_max[PROBATION as usize], self.seg_max[PROTECTED as usize])
    }

    /// Keys of the window, probation and protected segments, each MRU first (for tests and debugging).
    pub fn segments(&self) -> [Vec<BlockKey>; 3] {
        [WINDOW, PROBATION, PROTECTED].map(|s| self.lists[s as usize].iter(&self.arena).map(|h| self.key(h)).collect())
    }

    /// The sketch's estimate for `key` (for tests).
    pub fn frequency(&self, key: BlockKey) -> u32 {
        self.sketch.estimate(key)
    }

    #[inline]
    fn key(&self, h: Handle) -> BlockKey {
        self.arena[h].key.get()
    }

    #[inline]
    fn main_len(&self) -> usize {
        self.lists[PROBATION as usize].len() + self.lists[PROTECTED as usize].len()
    }

    #[inline]
    fn push(&mut self, h: Handle, seg: u8) {
        self.arena[h].seg = seg;
        self.lists[seg as usize].push_front(&mut self.arena, h);
    }

    #[inline]
    fn unlink(&mut self, h: Handle) {
        let seg = self.arena[h].seg;
        self.lists[seg as usize].remove(&mut self.arena, h);
    }

    /// The main cache's victim: P's LRU block, or Q's if P is empty.
    #[inline]
    fn main_victim(&self) -> Option<Handle> {
        self.lists[PROBATION as usize].back().or_else(|| self.lists[PROTECTED as usize].back())
    }

    /// Evicts the main cache's victim (libCacheSim's `SLRU_evict`).
    #[inline]
    fn main_evict(&mut self, out: &mut Vec<Evicted>) {
        if let Some(h) = self.main_victim() {
            self.unlink(h);
            evict(&mut self.arena, &mut self.index, h, out);
        }
    }

    /// Moves `h` (on no list) into the main cache (libCacheSim's `SLRU_insert`).
    #[inline]
    fn main_insert(&mut self, h: Handle, out: &mut Vec<Evicted>) {
        let seg = if self.lists[PROBATION as usize].len() < self.seg_max[PROBATION as usize] {
            PROBATION
        } else if self.lists[PROTECTED as usize].len() < self.seg_max[PROTECTED as usize] {
            PROTECTED
        } else {
            while self.main_len() >= self.main && self.main_len() > 0 {
                self.main_evict(out);
            }
            PROBATION
        };
        self.push(h, seg);
    }

    /// A demand hit on `h` in the main cache (libCacheSim's `SLRU_find`).
    #[inline]
    fn main_hit(&mut self, h: Handle, out: &mut Vec<Evicted>) {
        if self.arena[h].seg == PROTECTED {
            self.lists[PROTECTED as usize].move_to_front(&mut self.arena, h);
            return;
        }
        self.unlink(h);
        self.push(h, PROTECTED);
        while self.lists[PROTECTED as usize].len() > self.seg_max[PROTECTED as usize] {
            let Some(t) = self.lists[PROTECTED as usize].pop_back(&mut self.arena) else { break };
            self.push(t, PROBATION);
            while self.lists[PROBATION as usize].len() > self.seg_max[PROBATION as usize] {
                self.main_evict(out);
            }
        }
    }

    /// libCacheSim's `WTinyLFU_evict`: evicts exactly one block (none if the cache is empty).
    fn evict_one(&mut self, out: &mut Vec<Evicted>) {
        loop {
            let Some(v) = self.lists[WINDOW as usize].back() else {
                self.main_evict(out);
                return;
            };
            if self.arena[v].links.flag() {
                // An unused prefetch: forgotten, neither admitted nor counted.
                self.unlink(v);
                evict(&mut self.arena, &mut self.index, v, out);
                return;
            }
            let vkey = self.key(v);
            if self.main_len() < self.main {
                self.unlink(v);
                self.main_insert(v, out);
                self.sketch.add(vkey);
                continue;
            }
            let admit = match self.main_victim() {
                Some(u) => self.sketch.estimate(vkey) > self.sketch.estimate(self.key(u)),
                None => false,
            };
            self.unlink(v);
            if admit {
                self.main_evict(out);
                self.main_insert(v, out);
            } else {
                evict(&mut self.arena, &mut self.index, v, out);
            }
            self.sketch.add(vkey);
            return;
        }
    }

    /// A block not in the cache into the window's MRU end, after making room.
    #[inline]
    fn insert(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) {
        while self.arena.len() >= self.capacity {
            self.evict_one(out);
        }
        let h = self.arena.alloc(Node { key: PackedKey::new(key), links: Links::default(), seg: WINDOW });
        self.arena[h].links.set_flag(prefetched);
        self.index.insert(&self.arena, h);
        self.lists[WINDOW as usize].push_front(&mut self.arena, h);
    }
}

impl Policy for WTinyLfu {
    type Config = WTinyLfuConfig;

    fn preset(preset: Preset) -> WTinyLfuConfig {
        match preset {
            Preset::Libcachesim => WTinyLfuConfig { libcachesim_quirks: true, ..WTinyLfuConfig::default() },
            Preset::Default | Preset::Butt05 => WTinyLfuConfig::default(),
        }
    }

    fn check_config(c: &WTinyLfuConfig) -> Result<(), String> {
        if !(c.window_ratio >= 0.0 && c.window_ratio < 1.0) {
            return Err(format!("window_ratio must be in [0, 1), got {}", c.window_ratio));
        }
        if !(c.probation_ratio > 0.0 && c.probation_ratio < 1.0) {
            return Err(format!("probation_ratio must be in (0, 1), got {}", c.probation_ratio));
        }
        if !(c.sketch_error > 0.0 && c.sketch_error < 1.0) {
            return Err(format!("sketch_error must be in (0, 1), got {}", c.sketch_error));
        }
        if c.sample_factor == 0 {
            return Err("sample_factor must be at least 1".into());
        }
        Ok(())
    }

    fn libcachesim_quirks(c: &WTinyLfuConfig) -> bool {
        c.libcachesim_quirks
    }

    fn new(capacity: usize, config: &WTinyLfuConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        if let Err(e) = Self::check_config(config) {
            panic!("invalid W-TinyLFU configuration: {e}");
        }
        let quirks = config.libcachesim_quirks;
        let mut window = scaled(capacity, config.window_ratio).min(capacity);
        if !quirks {
            window = window.max(1);
        }
        let main = capacity - window;
        let mut p = scaled(main, config.probation_ratio);
        if !quirks {
            p = p.max(1).min(main);
        }
        let q = scaled(main, 1.0 - config.probation_ratio).min(main - p);
        let admits = !quirks || (window >= 1 && p >= 1);
        let period = (config.sample_factor as u64).saturating_mul(main as u64);
        WTinyLfu {
            capacity,
            window,
            main,
            seg_max: [window, p, q],
            admits,
            arena: Arena::with_capacity(capacity),
            index: KeyIndex::with_capacity(capacity),
            lists: [List::new(); 3],
            sketch: Sketch::new(main, config.sketch_error, period),
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
            Some(h) => self.touch(h, access.key, out),
            None => {
                if self.admits {
                    self.insert(access.key, false, out);
                    self.sketch.add(access.key);
                }
                Outcome::Miss
            }
        }
    }

    #[inline]
    fn hit(&mut self, access: Access, out: &mut Vec<Evicted>) -> Option<Outcome> {
        let h = self.index.get(&self.arena, access.key)?;
        Some(self.touch(h, access.key, out))
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        if !self.admits {
            return 0;
        }
        let mut n = 0;
        for a in group {
            if !self.contains(a.key) {
                self.insert(a.key, true, out);
                n += 1;
            }
        }
        n
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        let Some(h) = self.index.remove(&self.arena, key) else { return false };
        let seg = self.arena[h].seg;
        self.arena.free_from(&mut self.lists[seg as usize], h);
        true
    }

    fn validate(&self) -> Result<(), String> {
        let mut total = 0;
        for (s, name) in NAMES.iter().enumerate() {
            let list = &self.lists[s];
            list.check(&self.arena).map_err(|e| format!("{name}: {e}"))?;
            total += list.len();
            for h in list.iter(&self.arena) {
                let n = &self.arena[h];
                let key = n.key.get();
                if n.seg as usize != s {
                    return Err(format!("key {key} on {name} but its segment byte says {}", n.seg));
                }
                if s != WINDOW as usize && n.links.flag() {
                    return Err(format!("key {key} on {name} carries the prefetch flag"));
                }
                if self.index.get(&self.arena, key) != Some(h) {
                    return Err(format!("key {key} on {name} but not indexed to its entry"));
                }
            }
        }
        if self.index.len() != total || self.arena.len() != total {
            return Err(format!("lists hold {total} blocks, index {}, arena {}", self.index.len(), self.arena.len()));
        }
        if total > self.capacity {
            return Err(format!("{total} blocks over capacity {}", self.capacity));
        }
        if self.main_len() > self.main {
            return Err(format!("main cache holds {} > m = {}", self.main_len(), self.main));
        }
        let q = self.lists[PROTECTED as usize].len();
        if q > self.seg_max[PROTECTED as usize] {
            return Err(format!("|protected| = {q} > q = {}", self.seg_max[PROTECTED as usize]));
        }
        let p = self.lists[PROBATION as usize].len();
        let slack = self.main - self.seg_max[PROBATION as usize] - self.seg_max[PROTECTED as usize];
        if p > self.seg_max[PROBATION as usize] + slack {
            return Err(format!(
                "|probation| = {p} > p = {} plus m - p - q = {slack}",
                self.seg_max[PROBATION as usize]
            ));
        }
        if !self.admits && total > 0 {
            return Err(format!("admits nothing (w or p rounds to 0), yet {total} blocks"));
        }
        if self.sketch.hits >= self.sketch.period.max(1) {
            return Err(format!("aging count {} not below its period {}", self.sketch.hits, self.sketch.period));
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes() + self.index.heap_bytes() + self.sketch.heap_bytes()
    }

    /// Exact: *evict* replayed on a read-only walk of the window from its LRU end. Window blocks that would move
    /// into free main-cache slots are counted (segment sizes, P's LRU end) and their sketch additions applied
    /// to the two estimates compared ([`Sketch::estimate_after`]).
    fn victim(&self, incoming: BlockKey) -> super::Victim {
        use super::Victim;
        if !self.admits || self.arena.len() < self.capacity || self.contains(incoming) {
            return Victim::None;
        }
        let (p, q) = (self.seg_max[PROBATION as usize], self.seg_max[PROTECTED as usize]);
        let mut lens = [self.lists[PROBATION as usize].len(), self.lists[PROTECTED as usize].len()];
        let mut backs = [self.lists[PROBATION as usize].back(), self.lists[PROTECTED as usize].back()];
        let mut moved: Vec<BlockKey> = Vec::new();
        let mut w = self.lists[WINDOW as usize].back();
        loop {
            let main_victim = backs[0].or(backs[1]);
            let Some(v) = w else {
                return main_victim.map_or(Victim::None, |u| Victim::Block(self.key(u)));
            };
            if self.arena[v].links.flag() {
                return Victim::Block(self.key(v));
            }
            let vkey = self.key(v);
            if lens[0] + lens[1] < self.main {
                // main_insert into a free slot: P if it has room (or Q is full too), else Q; nothing evicted.
                let s = if lens[0] < p || lens[1] >= q { 0 } else { 1 };
                if lens[s] == 0 {
                    backs[s] = Some(v);
                }
                lens[s] += 1;
                moved.push(vkey);
                w = List::prev_of(&self.arena, v);
                continue;
            }
            return match main_victim {
                Some(u)
                    if self.sketch.estimate_after(vkey, &moved) > self.sketch.estimate_after(self.key(u), &moved) =>
                {
                    Victim::Block(self.key(u))
                }
                _ => Victim::Block(vkey),
            };
        }
    }
}

impl WTinyLfu {
    /// A demand access to resident block `h`.
    #[inline]
    fn touch(&mut self, h: Handle, key: BlockKey, out: &mut Vec<Evicted>) -> Outcome {
        if self.arena[h].seg == WINDOW {
            self.lists[WINDOW as usize].move_to_front(&mut self.arena, h);
            let links = &mut self.arena[h].links;
            if links.flag() {
                links.set_flag(false);
                self.sketch.add(key); // the first reference, which a demand miss would have counted
                return Outcome::PrefetchHit;
            }
            return Outcome::Hit;
        }
        self.main_hit(h, out);
        self.sketch.add(key);
        self.sketch.tick();
        Outcome::Hit
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model::{self as model, Reference};
    use super::*;
    use crate::policy::testutil::{acc, ev, k, keys, pf, skewed};
    use proptest::prelude::*;
    use std::collections::VecDeque;

    fn lcs(c: usize) -> WTinyLfu {
        WTinyLfu::new(c, &WTinyLfu::preset(Preset::Libcachesim))
    }

    fn misses(p: &mut WTinyLfu, ids: &[u64]) -> usize {
        let mut out = Vec::new();
        ids.iter().filter(|&&b| !p.access(Access::new(k(b)), &mut out).is_hit()).count()
    }

    #[test]
    fn xxh64_matches_libcachesims_xxhash() {
        // XXH64(&obj_id, 8, seed) from libCacheSim's xxhash.h.
        for (x, h0, h1) in [
            (0u64, 0x67bb774d39f5d473u64, 0xc2a64453b85a5e79u64),
            (1, 0x071b9484a2374097, 0x83e9f36fcb5854bf),
            (12345, 0xd580abe2e1f3f1ea, 0x17961751b717f515),
            (0xdead_beef_cafe, 0xc85b7aab84af1980, 0x7c6b78d4e3605fb5),
            ((1 << 48) | 7, 0xb7ca9a49ab220d52, 0xd31083928da34a8d),
        ] {
            assert_eq!((xxh64_u64(x, SEED0), xxh64_u64(x, SEED1)), (h0, h1), "{x}");
        }
    }

    #[test]
    fn sizes_and_sketch_like_libcachesim() {
        assert_eq!(lcs(100).sizes(), (1, 99, 19, 79), "p + q = m - 1");
        assert_eq!(lcs(1000).sizes(), (10, 990, 198, 792));
        assert_eq!(lcs(99).sizes().0, 0);
        let s = Sketch::new(99, 0.001, 0);
        assert_eq!((s.hashes, s.counters.len()), (10, 1424), "⌈14.3775·99⌉ counters, 10 hashes");
        assert_eq!(Sketch::new(0, 0.001, 0).counters.len(), 20, "too few counters: 2k");
        let d = |c| WTinyLfu::new(c, &WTinyLfuConfig::default()).sizes();
        assert_eq!(d(1), (1, 0, 0, 0));
        assert_eq!(d(2), (1, 1, 1, 0));
        assert_eq!(d(6), (1, 5, 1, 4));
        assert_eq!(d(7), (1, 6, 1, 4), "p at least 1; p + q = m - 1 as in libcachesim");
        assert_eq!(d(100), lcs(100).sizes(), "equal from 100 blocks up");
    }

    #[test]
    fn miss_counts_equal_libcachesim() {
        // libcachesim 0.3.5: WTinyLFU(cache_size=c).get(Request(obj_size=1, obj_id=b)) over the same sequence.
        let ids = skewed(20_000, 600);
        for (c, expect) in [(100, 14935), (150, 12702), (300, 6565)] {
            assert_eq!(misses(&mut lcs(c), &ids), expect, "c = {c}");
        }
    }

    #[test]
    fn libcachesim_admits_nothing_below_a_one_block_window() {
        let mut p = lcs(99);
        for b in [1, 1, 2, 1] {
            assert_eq!(acc(&mut p, b).0, Outcome::Miss);
        }
        assert_eq!(pf(&mut p, &[5]).0, 0);
        assert_eq!(p.len(), 0);
        let mut d = WTinyLfu::new(3, &WTinyLfuConfig::default());
        acc(&mut d, 1);
        assert_eq!(acc(&mut d, 1).0, Outcome::Hit);
    }

    /// c = 5 with a 20 % window: w = 1, m = 4, p = 1 (max(1, ⌊0.8⌋)), q = 3. The sketch (58 counters) happens to
    /// counts the keys used here exactly, except where a test says otherwise.
    fn five() -> WTinyLfu {
        let p = WTinyLfu::new(5, &WTinyLfuConfig { window_ratio: 0.2, ..WTinyLfuConfig::default() });
        assert_eq!(p.sizes(), (1, 4, 1, 3));
        p
    }

    #[test]
    fn window_fills_first_then_drains_into_the_main_cache() {
        let mut p = five();
        for b in 1..=5 {
            assert_eq!(acc(&mut p, b), (Outcome::Miss, vec![]));
        }
        assert_eq!(p.segments(), [keys(&[5, 4, 3, 2, 1]), vec![], vec![]], "every block in the window");
        assert_eq!(p.frequency(k(1)), 1);
        // Full: window victims move into the main cache while it has room (1 → P, then 2, 3, 4 → Q), each counted
        // again; then 5 (counted once) is compared with P's victim 1 (twice): not more frequent, so 5 goes.
        assert_eq!(acc(&mut p, 6), (Outcome::Miss, vec![ev(5, false)]));
        assert_eq!(p.segments(), [keys(&[6]), keys(&[1]), keys(&[4, 3, 2])]);
        assert_eq!([1, 2, 5, 6].map(|b| p.frequency(k(b))), [2, 2, 2, 1]);
        // A hit in P promotes to Q, whose LRU block goes back to P; the hit is counted.
        assert_eq!(acc(&mut p, 1), (Outcome::Hit, vec![]));
        assert_eq!(p.segments(), [keys(&[6]), keys(&[2]), keys(&[1, 4, 3])]);
        assert_eq!(p.frequency(k(1)), 3);
        // Window hits are not counted: 6 stays at 1 and loses to P's victim 2.
        for _ in 0..4 {
            assert_eq!(acc(&mut p, 6).0, Outcome::Hit);
        }
        assert_eq!(p.frequency(k(6)), 1);
        assert_eq!(acc(&mut p, 7), (Outcome::Miss, vec![ev(6, false)]));
    }

    #[test]
    fn frequent_window_victim_displaces_the_main_victim() {
        let mut p = five();
        for b in 1..=6 {
            acc(&mut p, b);
        }
        assert_eq!(p.segments(), [keys(&[6]), keys(&[1]), keys(&[4, 3, 2])]);
        // 7 and 8 take turns in the window, each counted on its miss and again when it leaves.
        assert_eq!(acc(&mut p, 7).1, vec![ev(6, false)]);
        assert_eq!(acc(&mut p, 8).1, vec![ev(7, false)]);
        assert_eq!(acc(&mut p, 7).1, vec![ev(8, false)]);
        let (f7, f1) = (p.frequency(k(7)), p.frequency(k(1)));
        assert!(f7 >= 3 && f1 == 2, "7 counted three times (more with collisions): {f7}, 1 twice: {f1}");
        // Now 7 leaving the window is more frequent than P's victim 1: 1 is evicted and 7 enters P.
        assert_eq!(acc(&mut p, 8).1, vec![ev(1, false)]);
        assert_eq!(p.segments(), [keys(&[8]), keys(&[7]), keys(&[4, 3, 2])]);
    }

    #[test]
    fn prefetched_blocks_are_not_counted_until_used_and_never_admitted_unused() {
        let cfg = WTinyLfuConfig { window_ratio: 0.2, ..WTinyLfuConfig::default() };
        let mut p = WTinyLfu::new(5, &cfg);
        assert_eq!(pf(&mut p, &[1, 2]).0, 2);
        assert_eq!(p.frequency(k(1)), 0, "a prefetch is not a reference");
        assert_eq!(acc(&mut p, 1).0, Outcome::PrefetchHit);
        assert_eq!(p.frequency(k(1)), 1, "the first demand access counts");
        assert_eq!(acc(&mut p, 1).0, Outcome::Hit);
        for b in 3..=5 {
            acc(&mut p, b);
        }
        // Window (MRU first): 5 4 3 1 2. The unused prefetch 2 is at the LRU end: evicted, not moved to main.
        let (_, out) = acc(&mut p, 6);
        assert_eq!(out, vec![ev(2, true)]);
        assert_eq!(p.frequency(k(2)), 0, "never remembered");
        assert_eq!(p.segments()[1..], [vec![], vec![]]);
        // A prefetch of a resident block does nothing.
        assert_eq!(pf(&mut p, &[1, 6]).0, 0);
    }

    #[test]
    fn remove_frees_a_slot() {
        let mut p = WTinyLfu::new(5, &WTinyLfuConfig { window_ratio: 0.2, ..WTinyLfuConfig::default() });
        for b in 1..=6 {
            acc(&mut p, b);
        }
        assert!(p.remove(k(3)) && !p.remove(k(3)));
        assert_eq!(acc(&mut p, 9), (Outcome::Miss, vec![]));
        p.validate().unwrap();
    }

    #[test]
    fn bytes_per_cached_block() {
        for c in [1000usize, 26921, 100_000] {
            let mut p = WTinyLfu::new(c, &WTinyLfuConfig::default());
            let mut out = Vec::new();
            for b in 0..(2 * c as u64) {
                p.access(Access::new(k(b % (c as u64 + 7))), &mut out);
            }
            let per_block = p.heap_bytes() as f64 / c as f64;
            eprintln!("W-TinyLFU at c = {c}: {per_block:.1} bytes per cached block");
            assert!((88.0..=100.0).contains(&per_block), "{per_block} bytes per cached block at {c}");
        }
    }

    /// A plain transcription of the algorithm over `VecDeque`s (front = MRU), sharing only [`Sketch`].
    struct Slow {
        c: usize,
        m: usize,
        pq: [usize; 2],
        admits: bool,
        w: VecDeque<(u64, bool)>,
        segs: [VecDeque<u64>; 2],
        sk: Sketch,
    }

    impl Slow {
        fn new(c: usize, cfg: &WTinyLfuConfig) -> Self {
            let p = WTinyLfu::new(c, cfg);
            let (_, m, pp, q) = p.sizes();
            Slow { c, m, pq: [pp, q], admits: p.admits, w: VecDeque::new(), segs: Default::default(), sk: p.sketch }
        }
        fn mlen(&self) -> usize {
            self.segs[0].len() + self.segs[1].len()
        }
        fn mevict(&mut self, ev: &mut Vec<u64>) {
            let s = if self.segs[0].is_empty() { 1 } else { 0 };
            if let Some(x) = self.segs[s].pop_back() {
                ev.push(x);
            }
        }
        fn minsert(&mut self, x: u64, ev: &mut Vec<u64>) {
            if self.segs[0].len() < self.pq[0] {
                self.segs[0].push_front(x);
            } else if self.segs[1].len() < self.pq[1] {
                self.segs[1].push_front(x);
            } else {
                while self.mlen() >= self.m && self.mlen() > 0 {
                    self.mevict(ev);
                }
                self.segs[0].push_front(x);
            }
        }
        fn evict(&mut self, ev: &mut Vec<u64>) {
            loop {
                let Some(&(v, unused)) = self.w.back() else { return self.mevict(ev) };
                if unused {
                    self.w.pop_back();
                    ev.push(v);
                    return;
                }
                self.w.pop_back();
                let fv = self.sk.estimate(k(v));
                if self.mlen() < self.m {
                    self.minsert(v, ev);
                    self.sk.add(k(v));
                    continue;
                }
                let u = self.segs[0].back().or(self.segs[1].back()).copied();
                if u.is_some_and(|u| fv > self.sk.estimate(k(u))) {
                    self.mevict(ev);
                    self.minsert(v, ev);
                } else {
                    ev.push(v);
                }
                self.sk.add(k(v));
                return;
            }
        }
        fn insert(&mut self, b: u64, unused: bool, ev: &mut Vec<u64>) {
            while self.len() >= self.c {
                self.evict(ev);
            }
            self.w.push_front((b, unused));
        }
    }

    impl Reference for Slow {
        fn access(&mut self, b: u64, ev: &mut Vec<u64>) -> Outcome {
            if let Some(i) = self.w.iter().position(|e| e.0 == b) {
                let (_, unused) = self.w.remove(i).unwrap();
                self.w.push_front((b, false));
                if unused {
                    self.sk.add(k(b));
                    return Outcome::PrefetchHit;
                }
                return Outcome::Hit;
            }
            if let Some(i) = self.segs[1].iter().position(|&x| x == b) {
                self.segs[1].remove(i);
                self.segs[1].push_front(b);
            } else if let Some(i) = self.segs[0].iter().position(|&x| x == b) {
                self.segs[0].remove(i);
                self.segs[1].push_front(b);
                while self.segs[1].len() > self.pq[1] {
                    let t = self.segs[1].pop_back().unwrap();
                    self.segs[0].push_front(t);
                    while self.segs[0].len() > self.pq[0] {
                        self.mevict(ev);
                    }
                }
            } else {
                if self.admits {
                    self.insert(b, false, ev);
                    self.sk.add(k(b));
                }
                return Outcome::Miss;
            }
            self.sk.add(k(b));
            self.sk.tick();
            Outcome::Hit
        }
        fn prefetch(&mut self, b: u64, ev: &mut Vec<u64>) -> bool {
            let resident = self.w.iter().any(|e| e.0 == b) || self.segs.iter().any(|s| s.contains(&b));
            if resident || !self.admits {
                return false;
            }
            self.insert(b, true, ev);
            true
        }
        fn remove(&mut self, b: u64) -> bool {
            if let Some(i) = self.w.iter().position(|e| e.0 == b) {
                self.w.remove(i);
                return true;
            }
            for s in &mut self.segs {
                if let Some(i) = s.iter().position(|&x| x == b) {
                    s.remove(i);
                    return true;
                }
            }
            false
        }
        fn len(&self) -> usize {
            self.w.len() + self.mlen()
        }
    }

    fn config() -> impl Strategy<Value = WTinyLfuConfig> {
        (prop_oneof![Just(0.01), Just(0.2), Just(0.5)], prop_oneof![Just(0.2), Just(0.5)], any::<bool>()).prop_map(
            |(window_ratio, probation_ratio, libcachesim_quirks)| WTinyLfuConfig {
                window_ratio,
                probation_ratio,
                sample_factor: 2,
                libcachesim_quirks,
                ..WTinyLfuConfig::default()
            },
        )
    }

    proptest! {
        #[test]
        fn agrees_with_a_slow_transcription(
            ops in prop::collection::vec(model::op(), 1..300),
            c in 1usize..20,
            cfg in config(),
        ) {
            let mut p = WTinyLfu::new(c, &cfg);
            let mut m = Slow::new(c, &cfg);
            for (i, op) in ops.iter().enumerate() {
                model::check_step(&mut p, &mut m, i, op)?;
            }
        }

        #[test]
        fn matches_the_resident_set_model(ops in prop::collection::vec(model::op(), 1..300), c in 1usize..20) {
            model::run(WTinyLfu::new(c, &WTinyLfuConfig::default()), &ops)?;
            model::run_with(WTinyLfu::new(c.max(100), &WTinyLfu::preset(Preset::Libcachesim)), &ops, false)?;
        }
    }
}
