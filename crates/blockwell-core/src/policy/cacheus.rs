//! CACHEUS: two experts, scan-resistant LRU and churn-resistant LFU, weighted by regret minimisation with an
//! adaptive learning rate.
//!
//! **Paper.** L. V. Rodriguez, F. Yusuf, S. Lyons, E. Paz, R. Rangaswami, J. Liu, M. Zhao and G. Narasimhan,
//! "Learning Cache Replacement with CACHEUS", 19th USENIX Conference on File and Storage Technologies (FAST '21),
//! 2021. LeCaR's scheme (see [`lecar`](super::lecar)) with better experts and no hand-set learning rate:
//! - *SR-LRU* splits the cache into SR (scan-resistant: blocks not yet reused, and blocks demoted from R) and R
//!   (reused blocks), both LRU, plus a history H of blocks it evicted. A new block enters SR; a hit in SR moves
//!   the block to R, whose LRU block is demoted to SR's MRU end while R is over its size; a miss on a key in H
//!   goes straight to R. SR-LRU's victim is SR's LRU block. The split adapts: a hit on a demoted block shrinks
//!   SR (R was too small), a history hit on a block evicted before any reuse grows it.
//! - *CR-LFU* is LFU that breaks ties among the least frequent blocks by evicting the **most** recently used one
//!   (a churn of equally cold blocks then keeps the older ones), and a block coming back from H resumes the
//!   frequency it left with.
//! - Each expert has a history of the blocks it chose; a miss on a key in expert E's history multiplies w_E by
//!   e^(−λ), and the weights are normalised. Every c requests the learning rate λ moves in the direction that
//!   raised the hit rate, and is drawn afresh when it stalls.
//!
//! Implemented as libcachesim 0.3.5's `Cacheus` class (libCacheSim `Cacheus.c`, `SR_LRU.c`, `CR_LFU.c`) does it;
//! `libcachesim_quirks` (the `Libcachesim` preset) reproduces it miss for miss, defects included (below). Common
//! to both modes (c = capacity, sizes in blocks):
//! - *Eviction* (a miss when |SR| + |R| = c): SR-LRU's victim is SR's LRU block (R's if SR is empty), CR-LFU's the
//!   last block to reach the least frequency. One draw x of the generator is made every time (libCacheSim draws
//!   even when the experts agree): SR-LRU's victim is taken if (x mod 100)/100 < w_LRU, else CR-LFU's. When the
//!   experts name the same block it is evicted and goes to no expert history; otherwise the taken block's key goes
//!   to its expert's history (each an LRU list of ⌊c·`history_ratio`⌋ keys, libCacheSim's ⌊c/2⌋). Either way the
//!   block goes to H with its frequency.
//! - *Histories.* On a demand miss: w_E ← w_E·e^(−λ) if the key is in expert E's history (and taken out of it),
//!   then w_LRU ← w_LRU/(w_LRU + w_LFU) and w_LFU ← 1 − w_LRU, on every miss. H holds at most c − 1 keys (LRU).
//! - *Learning rate.* λ starts at 0.001 + (x mod 1000)/1000 for the generator's first draw x. After every c-th
//!   demand access, with h the hit rate of those c accesses: if λ changed since the previous period, λ moves by
//!   ±|λ·Δλ|, up when Δh/Δλ > 0, down otherwise, to 0.0001 if that is not above 0.001; if it did not change, a
//!   stall counter counts periods with h = 0 or Δh ≤ 0, and λ is drawn afresh (as at the start) when it reaches 10.
//! - *Generator.* libcachesim 0.3.5's thread-local 128-bit Lehmer generator (`policy/lehmer.rs`), state `seed`:
//!   see [`lecar`](super::lecar); a comparison needs a fresh libcachesim process.
//!
//! **`libcachesim_quirks`** (on in the `Libcachesim` preset): libCacheSim's defects, which make it a different
//! cache from the paper's, kept for exact comparisons. SR and R start at ⌊c/2⌋ blocks each.
//! - SR is capped at its size s, and its overflow is evicted to H (and from CR-LFU) *even when the cache has
//!   room*: the cache holds c blocks only once enough of them have been reused, and a miss may evict two blocks
//!   (the experts' victim, then SR's LRU block).
//! - SR only grows. A demand miss on an H key evicted before any reuse ("new") grows s by δ = max(1, ⌊D/N⌋ + ½),
//!   truncated, to at most |SR| + |R| − 1, and r = c − s (D: demotions from R not yet evicted, N: new keys ever
//!   sent to H; N never decreases). The shrinking step never fires: libCacheSim makes a fresh object when a block
//!   moves from SR to R, losing its demoted mark (and D is then never decreased for it).
//! - SR-LRU refuses a block bound for a list of size 0 (`SR_LRU_can_insert`, asked after the eviction): a cache of
//!   1 block caches nothing (s = r = 0), and s reaches 0 when grown while |SR| + |R| = 1 (after removals), after
//!   which only H keys are cached.
//! - The hit rate of a period is an integer division, 0 unless every access of the period hit.
//! - λ is drawn afresh only in a period that *improves* after 10 or more stalled ones (`else if`).
//!
//! These are libcachesim 0.3.5's behaviour as compiled (the wheel's `SR_LRU_insert` carries the new mark from H
//! to R, which the October 2024 source of `SR_LRU.c` does not; read from the binary and confirmed miss for miss).
//! Without the flag (`Default`, `Butt05`) the defects are fixed: SR takes whatever R leaves (the cache fills to c,
//! one eviction per miss); R is capped at r = c − s (at least 1), s starting at ⌊c/2⌋; the marks stay with the
//! block, so a hit in SR on a demoted block also shrinks s by δ = max(1, ⌊N/D⌋ + ½), truncated, to no less than 1;
//! N counts the new keys *in* H; the hit rate is a fraction; λ is drawn afresh after 10 stalled periods in a row.
//!
//! **Prefetch adaptation (seed `001_*` §4, in its spirit; the seed does not study CACHEUS).** A prefetched block
//! is inserted as a new block (SR's MRU end, frequency 1, after making room as a miss does, which draws), flagged
//! *not yet accessed*; a prefetch is not a reference, so a key of it found in an expert history or in H is dropped
//! without learning or resuming its frequency. Its first demand access clears the flag, returns
//! [`Outcome::PrefetchHit`] and counts as the block's *first* reference: SR's MRU end, the tail of frequency 1's
//! FIFO, marked new, the state a demand miss would have left; it is not counted as a hit for the learning rate. A
//! prefetched block evicted unused is reported with `unused_prefetch: true` and goes to no history.
//! [`Policy::remove`] moves a cached block to H with its frequency, as libCacheSim's `Cacheus_remove` does.
//!
//! **Parameters** ([`CacheusConfig`]): `history_ratio` 0.5, `seed` `0xdeadbeef` (3735928559) under every preset;
//! `libcachesim_quirks` true under `Libcachesim` only. libcachesim 0.3.5's `Cacheus(cache_size=c)` has no
//! parameters; seed `001_*` none for CACHEUS.
//!
//! **Metadata.** Cached blocks and H keys share one arena of 28-byte entries (the key as two `u32`, two 31-bit list
//! links with the prefetch flag, and `FreqLinks` (`policy/freqlist.rs`): frequency FIFO links and bucket, or the
//! saved frequency of an H key, and 4 bits of list and marks), indexed for 2c entries; the expert histories are a
//! second arena of 16-byte entries (key and links) with their own index. With H and both histories full (c blocks,
//! c − 1 H keys, c history keys) ≈ 106–141 bytes per cached block; `heap_bytes()` / c measured by a test: 134.7 at
//! c = 1000, 108.6 at c = 26921, 111.3 at c = 100000.
//!
//! **Cost.** O(1) per hit, eviction and removal; a miss on an H key puts the block at its saved frequency, found by
//! walking the frequency list from the least frequency (O(distinct frequencies below it), usually a few). A miss
//! costs one `exp` when the key is in an expert history. No allocation per access once the arenas, the indexes and
//! the frequency buckets have grown.

use super::freqlist::{FreqEntry, FreqLinks, FreqLists};
use super::{evict, Access, Evicted, Outcome, Policy, Preset, Victim};
use crate::arena::{Arena, Handle, KeyIndex, Links, List, PackedKey};
use crate::key::BlockKey;
use crate::lehmer::Lehmer64;
use serde::{Deserialize, Serialize};

/// CACHEUS's parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CacheusConfig {
    /// Each expert history holds ⌊c · this⌋ keys, in [0, 4].
    pub history_ratio: f64,
    /// The random generator's initial state (not 0, which makes every draw 0).
    pub seed: u64,
    /// Reproduce libcachesim 0.3.5's defects (see the module docs).
    #[serde(default)]
    pub libcachesim_quirks: bool,
}

impl Default for CacheusConfig {
    fn default() -> Self {
        CacheusConfig { history_ratio: 0.5, seed: Lehmer64::LIBCACHESIM_SEED, libcachesim_quirks: false }
    }
}

/// SR-LRU's lists, also the low two owner bits of an entry.
const SR: u8 = 0;
const R: u8 = 1;
const H: u8 = 2;
const LIST: u8 = 0b0011;
const NAMES: [&str; 3] = ["SR", "R", "H"];
/// Inserted by a demand miss and not hit since (kept into H).
const NEW: u8 = 0b0100;
/// Demoted from R to SR and not hit since.
const DEMOTED: u8 = 0b1000;

/// The experts, also the index of their histories and weights.
const LRU: usize = 0;
const LFU: usize = 1;

/// A cached block (on SR or R, in the frequency lists) or an H key (its saved frequency in `freq`'s 28 bits).
/// The links' flag is "prefetched, not yet accessed" (cached blocks only).
type Node = FreqEntry;

impl Node {
    #[inline]
    fn list(&self) -> u8 {
        self.freq.bits() & LIST
    }
    #[inline]
    fn has(&self, mark: u8) -> bool {
        self.freq.bits() & mark != 0
    }
    #[inline]
    fn set(&mut self, mark: u8, on: bool) {
        let b = self.freq.bits();
        self.freq.set_bits(if on { b | mark } else { b & !mark });
    }
    #[inline]
    fn set_list(&mut self, list: u8) {
        let b = self.freq.bits();
        self.freq.set_bits((b & !LIST) | list);
    }
}

/// A key in an expert history; the links' second flag says LFU's.
#[derive(Clone, Debug)]
struct Ghost {
    key: PackedKey,
    links: Links,
}

crate::arena::linked_by_field!(Ghost);
crate::arena::keyed_by_field!(Ghost);

/// δ of SR's adjustment: 1 when ⌊a/b⌋ = 0, else ⌊a/b⌋ + ½ (libCacheSim's `(int)(a / b) + 0.5`).
#[inline]
fn step(a: u64, b: u64) -> f64 {
    let q = (a / b.max(1)).min(i32::MAX as u64);
    if q == 0 {
        1.0
    } else {
        q as f64 + 0.5
    }
}

/// The CACHEUS policy. Every list's front is its MRU (newest) end.
#[derive(Clone, Debug)]
pub struct Cacheus {
    capacity: usize,
    quirks: bool,
    arena: Arena<Node>,
    index: KeyIndex,
    lists: [List; 3],
    lfu: FreqLists,
    /// SR's size s and R's size r (quirks: both ⌊c/2⌋, fixed).
    sr_size: usize,
    r_size: usize,
    /// Most keys H holds (c − 1).
    h_size: usize,
    ghosts: Arena<Ghost>,
    ghost_index: KeyIndex,
    ghost_lists: [List; 2],
    ghost_size: usize,
    /// [w_LRU, w_LFU].
    w: [f64; 2],
    lr: f64,
    lr_prev: f64,
    hit_rate_prev: f64,
    stalls: u64,
    hits: u64,
    /// Demand accesses so far.
    now: u64,
    /// Never-reused keys in H, demoted cached blocks (fixed mode only).
    n_new: u64,
    n_demoted: u64,
    rng: Lehmer64,
}

impl Cacheus {
    /// [w_LRU, w_LFU].
    pub fn weights(&self) -> [f64; 2] {
        self.w
    }

    /// The learning rate.
    pub fn learning_rate(&self) -> f64 {
        self.lr
    }

    /// SR's and R's sizes s and r.
    pub fn sizes(&self) -> (usize, usize) {
        (self.sr_size, self.r_size)
    }

    /// Keys of SR, R and H, each MRU first (for tests and debugging).
    pub fn lists(&self) -> [Vec<BlockKey>; 3] {
        [SR, R, H].map(|l| self.lists[l as usize].iter(&self.arena).map(|h| self.key(h)).collect())
    }

    /// Cached keys with their frequencies, least frequent first, each frequency from the block that reached it
    /// first (for tests).
    pub fn lfu_order(&self) -> Vec<(BlockKey, u32)> {
        self.lfu.entries(&self.arena).into_iter().map(|(h, f)| (self.key(h), f)).collect()
    }

    /// The keys of the LRU and LFU experts' histories, newest first (for tests).
    pub fn histories(&self) -> [Vec<BlockKey>; 2] {
        [LRU, LFU].map(|e| self.ghost_lists[e].iter(&self.ghosts).map(|g| self.ghosts[g].key.get()).collect())
    }

    #[inline]
    fn key(&self, h: Handle) -> BlockKey {
        self.arena[h].key.get()
    }

    #[inline]
    fn cached(&self) -> usize {
        self.lists[SR as usize].len() + self.lists[R as usize].len()
    }

    /// Whether nothing can be cached (libCacheSim's 1-block cache).
    #[inline]
    fn refuses(&self) -> bool {
        self.quirks && self.capacity == 1
    }

    /// libCacheSim's `SR_LRU_can_insert`: a block bound for R (an H key on a demand miss) needs r ≥ 1, any other
    /// needs s ≥ 1. With the quirks, s can reach 0 (SR grown to |SR| + |R| − 1 when that was 0, after removals),
    /// and a 1-block cache has s = r = 0. Without them, always.
    #[inline]
    fn can_insert(&self, key: BlockKey, prefetched: bool) -> bool {
        if !self.quirks {
            return true;
        }
        let to_r = !prefetched && self.index.get(&self.arena, key).is_some();
        if to_r {
            self.r_size >= 1
        } else {
            self.sr_size >= 1
        }
    }

    /// The most blocks SR holds before its LRU block is evicted: quirks ⌊c/2⌋, else what R leaves.
    #[inline]
    fn sr_limit(&self) -> usize {
        if self.quirks {
            self.sr_size
        } else {
            self.capacity - self.lists[R as usize].len()
        }
    }

    #[inline]
    fn push(&mut self, h: Handle, list: u8) {
        self.arena[h].set_list(list);
        self.lists[list as usize].push_front(&mut self.arena, h);
    }

    #[inline]
    fn unlink(&mut self, h: Handle) {
        let l = self.arena[h].list();
        self.lists[l as usize].remove(&mut self.arena, h);
    }

    /// The weights after the history check of a demand miss on `key`, and the history entry to drop.
    #[inline]
    fn learned(&self, key: BlockKey) -> ([f64; 2], Option<Handle>) {
        let mut w = self.w;
        let g = self.ghost_index.get(&self.ghosts, key);
        if let Some(g) = g {
            let e = if self.ghosts[g].links.flag2() { LFU } else { LRU };
            w[e] *= (-self.lr).exp();
        }
        w[LRU] /= w[LRU] + w[LFU];
        w[LFU] = 1.0 - w[LRU];
        (w, g)
    }

    /// The experts' victims, SR-LRU's first (the cache is not empty).
    #[inline]
    fn candidates(&self) -> Option<(Handle, Handle)> {
        let by_lru = self.lists[SR as usize].back().or_else(|| self.lists[R as usize].back())?;
        Some((by_lru, self.lfu.min_newest()?))
    }

    /// Takes block `h` (not an unused prefetch) out of the cache into H with its frequency, reporting it.
    #[inline]
    fn retire(&mut self, h: Handle, out: &mut Vec<Evicted>) {
        if self.arena[h].links.flag() {
            self.unlink(h);
            self.lfu.remove(&mut self.arena, h);
            evict(&mut self.arena, &mut self.index, h, out);
            return;
        }
        out.push(Evicted { key: self.key(h), unused_prefetch: false });
        self.send_to_history(h);
    }

    /// Moves cached block `h` (not an unused prefetch) to H's MRU end with its frequency, and trims H.
    #[inline]
    fn send_to_history(&mut self, h: Handle) {
        self.unlink(h);
        let f = self.lfu.freq(&self.arena, h);
        self.lfu.remove(&mut self.arena, h);
        let n = &mut self.arena[h];
        if n.has(NEW) {
            self.n_new += 1;
        }
        if n.has(DEMOTED) {
            n.set(DEMOTED, false);
            self.n_demoted -= 1;
        }
        if self.h_size == 0 {
            self.forget_history_key(h);
            return;
        }
        self.arena[h].freq.set_stash28(f);
        self.push(h, H);
        self.trim_history();
    }

    /// Forgets H's LRU keys while it is over its size.
    #[inline]
    fn trim_history(&mut self) {
        while self.lists[H as usize].len() > self.h_size {
            let Some(old) = self.lists[H as usize].pop_back(&mut self.arena) else { break };
            self.forget_history_key(old);
        }
    }

    /// Forgets H key `h`, which is on no list.
    #[inline]
    fn forget_history_key(&mut self, h: Handle) {
        if !self.quirks && self.arena[h].has(NEW) {
            self.n_new -= 1;
        }
        self.index.forget(&mut self.arena, h);
    }

    /// Remembers `key` in expert `e`'s history.
    #[inline]
    fn remember(&mut self, key: BlockKey, e: usize) {
        if self.ghost_size == 0 {
            return;
        }
        // libCacheSim's LRU history makes room first too (and the arena stays within its reservation).
        if self.ghost_lists[e].len() >= self.ghost_size {
            if let Some(old) = self.ghost_lists[e].pop_back(&mut self.ghosts) {
                self.ghost_index.forget(&mut self.ghosts, old);
            }
        }
        let g = self.ghosts.alloc(Ghost { key: PackedKey::new(key), links: Links::default() });
        self.ghosts[g].links.set_flag2(e == LFU);
        self.ghost_index.insert(&self.ghosts, g);
        self.ghost_lists[e].push_front(&mut self.ghosts, g);
    }

    /// Drops history entry `g`.
    #[inline]
    fn drop_ghost(&mut self, g: Handle) {
        let e = if self.ghosts[g].links.flag2() { LFU } else { LRU };
        self.ghost_lists[e].remove(&mut self.ghosts, g);
        self.ghost_index.forget(&mut self.ghosts, g);
    }

    /// libCacheSim's `Cacheus_evict`: one draw, then the experts' victim.
    #[inline]
    fn evict_one(&mut self, out: &mut Vec<Evicted>) {
        let draw = self.rng.next();
        let Some((by_lru, by_lfu)) = self.candidates() else { return };
        let (victim, expert) = if by_lru == by_lfu {
            (by_lru, None)
        } else if Lehmer64::percent(draw) < self.w[LRU] {
            (by_lru, Some(LRU))
        } else {
            (by_lfu, Some(LFU))
        };
        let unused = self.arena[victim].links.flag();
        let key = self.key(victim);
        self.retire(victim, out);
        if let (Some(e), false) = (expert, unused) {
            self.remember(key, e);
        }
    }

    /// SR's size after a demand miss on an H key evicted before any reuse, with `occupied` blocks cached once it
    /// is in R: s + δ, δ = max(1, ⌊D/N⌋ + ½), truncated, and at most `occupied` − 1.
    #[inline]
    fn grown_sr(&self, occupied: usize, n_demoted: u64) -> usize {
        let grown = self.sr_size as f64 + step(n_demoted, self.n_new);
        if grown > (occupied as f64) - 1.0 {
            occupied.saturating_sub(1)
        } else {
            grown as usize
        }
    }

    /// Demotes R's LRU block to SR's MRU end.
    #[inline]
    fn demote(&mut self) {
        let Some(t) = self.lists[R as usize].pop_back(&mut self.arena) else { return };
        self.push(t, SR);
        if !self.arena[t].has(DEMOTED) {
            self.arena[t].set(DEMOTED, true);
            self.n_demoted += 1;
        }
    }

    /// Inserts `key` (not cached) after the cache made room: CR-LFU's insert (resuming an H key's frequency), then
    /// SR-LRU's (an H key to R, anything else to SR), then SR's overflow and H's trim.
    fn insert(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) {
        let mut h_key = self.index.get(&self.arena, key);
        if let (Some(h), true) = (h_key, prefetched) {
            // A prefetch is not a reference: the history of the key is dropped.
            self.unlink(h);
            self.forget_history_key(h);
            h_key = None;
        }
        match h_key {
            Some(h) => {
                let f = self.arena[h].freq.stash28().saturating_add(1);
                self.unlink(h);
                let was_new = self.arena[h].has(NEW);
                self.arena[h].freq = FreqLinks::default();
                while self.lists[R as usize].len() + 1 > self.r_size {
                    self.demote();
                }
                self.push(h, R);
                self.lfu.push(&mut self.arena, h, f);
                if was_new {
                    self.sr_size = self.grown_sr(self.cached(), self.n_demoted);
                    self.r_size = (self.capacity - self.sr_size).max(1);
                    if !self.quirks {
                        self.n_new -= 1;
                    }
                }
            }
            None => {
                let node = Node::new(key);
                let h = self.arena.alloc(node);
                self.index.insert(&self.arena, h);
                self.arena[h].links.set_flag(prefetched);
                self.arena[h].set(NEW, !prefetched);
                self.push(h, SR);
                self.lfu.push(&mut self.arena, h, 1);
            }
        }
        while self.lists[SR as usize].len() > self.sr_limit() {
            let Some(v) = self.lists[SR as usize].back() else { break };
            self.retire(v, out);
        }
        self.trim_history();
    }

    /// A demand miss, or a prefetch (`prefetched`), of `key`, which is not cached: makes room, then inserts it
    /// unless SR-LRU refuses it (libCacheSim evicts before it asks). Returns whether it was inserted.
    #[inline]
    fn admit(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) -> bool {
        while self.cached() >= self.capacity {
            self.evict_one(out);
        }
        if !self.can_insert(key, prefetched) {
            return false;
        }
        self.insert(key, prefetched, out);
        true
    }

    /// A demand access to cached block `h`.
    #[inline]
    fn touch(&mut self, h: Handle) -> Outcome {
        if self.arena[h].links.flag() {
            // The first reference: as a demand miss would have left it (a prefetched block is always in SR).
            let n = &mut self.arena[h];
            n.links.set_flag(false);
            n.set(NEW, true);
            self.lists[SR as usize].move_to_front(&mut self.arena, h);
            self.lfu.requeue(&mut self.arena, h);
            return Outcome::PrefetchHit;
        }
        if self.arena[h].list() == R {
            self.lists[R as usize].move_to_front(&mut self.arena, h);
        } else {
            self.unlink(h);
            self.push(h, R);
            while self.lists[R as usize].len() > self.r_size {
                self.demote();
            }
            // Reused: no longer new. libCacheSim loses the demoted mark here too (its count stays up, and SR never
            // shrinks); without the quirks a demoted block shrinks SR.
            if !self.quirks && self.arena[h].has(DEMOTED) {
                let d = step(self.n_new, self.n_demoted);
                let s = self.sr_size as f64 - d;
                self.sr_size = if s > 1.0 { s as usize } else { 1 };
                self.r_size = self.capacity.saturating_sub(self.sr_size).max(1);
                self.n_demoted -= 1;
            }
            self.arena[h].set(NEW | DEMOTED, false);
        }
        self.lfu.bump(&mut self.arena, h);
        self.hits += 1;
        Outcome::Hit
    }

    /// The end of a period of c demand accesses: libCacheSim's `update_lr`.
    fn update_learning_rate(&mut self) {
        let c = self.capacity as u64;
        let rate = if self.quirks { (self.hits / c) as f64 } else { self.hits as f64 / c as f64 };
        let delta_rate = rate - self.hit_rate_prev;
        let delta_lr = self.lr - self.lr_prev;
        self.lr_prev = self.lr;
        self.hit_rate_prev = rate;
        if delta_lr != 0.0 {
            let sign = if delta_rate / delta_lr > 0.0 { 1.0 } else { -1.0 };
            let lr = self.lr + sign * (self.lr * delta_lr).abs();
            self.lr = if lr > 0.001 { lr } else { 0.0001 };
            self.stalls = 0;
        } else if rate == 0.0 || delta_rate <= 0.0 {
            self.stalls += 1;
            if !self.quirks && self.stalls >= 10 {
                self.stalls = 0;
                self.lr = 0.001 + (self.rng.next() % 1000) as f64 / 1000.0;
            }
        } else if !self.quirks {
            self.stalls = 0;
        } else if self.stalls >= 10 {
            self.stalls = 0;
            self.lr = 0.001 + (self.rng.next() % 1000) as f64 / 1000.0;
        }
        self.hits = 0;
    }

    /// Counts a demand access; ends a period every c of them.
    #[inline]
    fn tick(&mut self) {
        if self.now % self.capacity as u64 == 0 {
            self.update_learning_rate();
        }
    }
}

impl Policy for Cacheus {
    type Config = CacheusConfig;

    fn preset(preset: Preset) -> CacheusConfig {
        match preset {
            Preset::Libcachesim => CacheusConfig { libcachesim_quirks: true, ..CacheusConfig::default() },
            Preset::Default | Preset::Butt05 => CacheusConfig::default(),
        }
    }

    fn check_config(c: &CacheusConfig) -> Result<(), String> {
        if !(0.0..=4.0).contains(&c.history_ratio) {
            return Err(format!("history_ratio must be in [0, 4], got {}", c.history_ratio));
        }
        if c.seed == 0 {
            return Err("seed must not be 0 (a multiplicative generator stays at 0)".into());
        }
        Ok(())
    }

    fn libcachesim_quirks(c: &CacheusConfig) -> bool {
        c.libcachesim_quirks
    }

    fn new(capacity: usize, config: &CacheusConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        if let Err(e) = Self::check_config(config) {
            panic!("invalid CACHEUS configuration: {e}");
        }
        let quirks = config.libcachesim_quirks;
        let half = capacity / 2;
        let (sr_size, r_size) = if quirks { (half, half) } else { (half, (capacity - half).max(1)) };
        let h_size = capacity - 1;
        let ghost_size = (capacity as f64 * config.history_ratio) as usize;
        let mut rng = Lehmer64::new(config.seed);
        let lr = 0.001 + (rng.next() % 1000) as f64 / 1000.0;
        let entries = capacity.saturating_add(h_size);
        let ghost_entries = ghost_size.saturating_mul(2);
        Cacheus {
            capacity,
            quirks,
            arena: Arena::with_capacity(entries),
            index: KeyIndex::with_capacity(entries),
            lists: [List::new(); 3],
            lfu: FreqLists::with_capacity(64),
            sr_size,
            r_size,
            h_size,
            ghosts: Arena::with_capacity(ghost_entries),
            ghost_index: KeyIndex::with_capacity(ghost_entries),
            ghost_lists: [List::new(); 2],
            ghost_size,
            w: [0.5, 0.5],
            lr,
            lr_prev: 0.0,
            hit_rate_prev: 0.0,
            stalls: 0,
            hits: 0,
            now: 0,
            n_new: 0,
            n_demoted: 0,
            rng,
        }
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.cached()
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.index.get(&self.arena, key).is_some_and(|h| self.arena[h].list() != H)
    }

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        self.now += 1;
        let outcome = match self.index.get(&self.arena, access.key) {
            Some(h) if self.arena[h].list() != H => self.touch(h),
            _ => {
                let (w, g) = self.learned(access.key);
                self.w = w;
                if let Some(g) = g {
                    self.drop_ghost(g);
                }
                self.admit(access.key, false, out);
                Outcome::Miss
            }
        };
        self.tick();
        outcome
    }

    #[inline]
    fn hit(&mut self, access: Access, _out: &mut Vec<Evicted>) -> Option<Outcome> {
        let h = self.index.get(&self.arena, access.key)?;
        if self.arena[h].list() == H {
            return None;
        }
        self.now += 1;
        let outcome = self.touch(h);
        self.tick();
        Some(outcome)
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        if self.refuses() {
            return 0;
        }
        let mut n = 0;
        for a in group {
            if self.contains(a.key) {
                continue;
            }
            if let Some(g) = self.ghost_index.get(&self.ghosts, a.key) {
                self.drop_ghost(g);
            }
            n += usize::from(self.admit(a.key, true, out));
        }
        n
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        match self.index.get(&self.arena, key) {
            Some(h) if self.arena[h].list() != H => {
                if self.arena[h].links.flag() {
                    self.unlink(h);
                    self.lfu.remove(&mut self.arena, h);
                    self.index.forget(&mut self.arena, h);
                } else {
                    self.send_to_history(h);
                }
                true
            }
            _ => false,
        }
    }

    fn victim(&self, incoming: BlockKey) -> Victim {
        // With libCacheSim's quirks (SR capped at its size, a missed block that can evict itself) the evicted
        // block depends on more than this state shows: say so rather than guess.
        if self.quirks {
            return Victim::Unknown;
        }
        let entry = self.index.get(&self.arena, incoming);
        if entry.is_some_and(|h| self.arena[h].list() != H) {
            return Victim::None;
        }
        if self.cached() >= self.capacity {
            let Some((by_lru, by_lfu)) = self.candidates() else { return Victim::None };
            let (w, _) = self.learned(incoming);
            let v = if by_lru == by_lfu || Lehmer64::percent(self.rng.peek()) < w[LRU] { by_lru } else { by_lfu };
            return Victim::Block(self.key(v));
        }
        Victim::None // room in the cache, and SR takes what R leaves
    }

    fn validate(&self) -> Result<(), String> {
        let mut new = 0u64;
        let mut demoted = 0u64;
        for l in [SR, R, H] {
            let name = NAMES[l as usize];
            let list = &self.lists[l as usize];
            list.check(&self.arena).map_err(|e| format!("{name}: {e}"))?;
            for h in list.iter(&self.arena) {
                let n = &self.arena[h];
                let key = n.key.get();
                if n.list() != l {
                    return Err(format!("key {key} on {name} but marked list {}", n.list()));
                }
                if self.index.get(&self.arena, key) != Some(h) {
                    return Err(format!("key {key} on {name} not indexed to its entry"));
                }
                new += u64::from(l == H && n.has(NEW));
                demoted += u64::from(n.has(DEMOTED));
                if l == H {
                    if n.links.flag() || n.has(DEMOTED) || n.freq.stash28() == 0 {
                        return Err(format!("H key {key}: flag {} marks {:#b}", n.links.flag(), n.freq.bits()));
                    }
                    continue;
                }
                let f = self.lfu.freq(&self.arena, h);
                if f == 0 || (n.links.flag() && (f != 1 || l != SR || n.has(NEW) || n.has(DEMOTED))) {
                    return Err(format!("key {key} on {name}: frequency {f}, prefetched {}", n.links.flag()));
                }
                if l == R && n.has(NEW | DEMOTED) {
                    return Err(format!("key {key} on R marked {:#b}", n.freq.bits()));
                }
            }
        }
        self.lfu.check(&self.arena)?;
        let (sr, r, h) = (self.lists[0].len(), self.lists[1].len(), self.lists[2].len());
        if self.lfu.len() != sr + r {
            return Err(format!("{} blocks in the frequency lists, {} cached", self.lfu.len(), sr + r));
        }
        if sr + r > self.capacity || h > self.h_size {
            return Err(format!("|SR| = {sr}, |R| = {r}, |H| = {h} for c = {}", self.capacity));
        }
        // R may be over r for a while: growing SR shrinks r without demoting.
        if self.quirks && sr > self.sr_size {
            return Err(format!("|SR| = {sr} over s = {}", self.sr_size));
        }
        let (s, rs, c) = (self.sr_size, self.r_size, self.capacity);
        let sizes_ok = if self.quirks {
            (s, rs) == (c / 2, c / 2) || (rs >= 1 && s + rs == c)
        } else {
            rs >= 1 && s + rs == c.max(s + 1)
        };
        if !sizes_ok {
            return Err(format!("s = {s}, r = {rs} for c = {c}"));
        }
        if self.refuses() && sr + r + h > 0 {
            return Err("a 1-block libcachesim cache holds something".into());
        }
        // libCacheSim never lowers N, and loses demoted marks without lowering D.
        let counts_ok = if self.quirks {
            new <= self.n_new && demoted <= self.n_demoted
        } else {
            new == self.n_new && demoted == self.n_demoted
        };
        if !counts_ok {
            return Err(format!(
                "{new} new H keys and {demoted} demoted blocks, counted {} and {}",
                self.n_new, self.n_demoted
            ));
        }
        if self.arena.len() != sr + r + h || self.index.len() != sr + r + h {
            return Err(format!(
                "{} entries on lists, {} in the arena, {} indexed",
                sr + r + h,
                self.arena.len(),
                self.index.len()
            ));
        }
        let mut ghosts = 0;
        for (e, name) in [(LRU, "LRU history"), (LFU, "LFU history")] {
            let list = &self.ghost_lists[e];
            list.check(&self.ghosts).map_err(|x| format!("{name}: {x}"))?;
            if list.len() > self.ghost_size {
                return Err(format!("{name} holds {} keys, more than {}", list.len(), self.ghost_size));
            }
            for g in list.iter(&self.ghosts) {
                let key = self.ghosts[g].key.get();
                if self.ghosts[g].links.flag2() != (e == LFU) || self.ghost_index.get(&self.ghosts, key) != Some(g) {
                    return Err(format!("key {key} on the {name} misfiled"));
                }
                if self.contains(key) {
                    return Err(format!("key {key} cached and on the {name}"));
                }
            }
            ghosts += list.len();
        }
        if self.ghosts.len() != ghosts || self.ghost_index.len() != ghosts {
            return Err(format!(
                "{ghosts} history keys, {} in the arena, {} indexed",
                self.ghosts.len(),
                self.ghost_index.len()
            ));
        }
        let [a, b] = self.w;
        if !(a.is_finite() && b.is_finite() && a >= 0.0 && b >= 0.0 && (a + b - 1.0).abs() < 1e-9) {
            return Err(format!("weights {a}, {b}"));
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(format!("learning rate {}", self.lr));
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes()
            + self.index.heap_bytes()
            + self.lfu.heap_bytes()
            + self.ghosts.heap_bytes()
            + self.ghost_index.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::*;
    use crate::policy::testutil::{acc, ev, k, keys, pf, skewed};
    use blockwell_testkit::Rng;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn lcs(c: usize) -> Cacheus {
        Cacheus::new(c, &Cacheus::preset(Preset::Libcachesim))
    }

    fn fixed(c: usize) -> Cacheus {
        Cacheus::new(c, &CacheusConfig::default())
    }

    fn lfu(p: &Cacheus) -> Vec<(u64, u32)> {
        p.lfu_order().into_iter().map(|(k, f)| (k.block(), f)).collect()
    }

    fn lists(p: &Cacheus) -> [Vec<u64>; 3] {
        p.lists().map(|l| l.into_iter().map(|k| k.block()).collect())
    }

    #[test]
    fn node_is_28_bytes_and_a_history_key_16() {
        assert_eq!(std::mem::size_of::<Node>(), 28);
        assert_eq!(std::mem::size_of::<Ghost>(), 16);
    }

    #[test]
    fn miss_counts_equal_libcachesim() {
        // libcachesim 0.3.5, a fresh process per run: Cacheus(cache_size=c).get(Request(obj_size=1, obj_id=b)).
        let ids = skewed(20_000, 600);
        for (c, expect) in [(2, 19923), (3, 19864), (10, 19529), (100, 15165), (301, 6335)] {
            let mut p = lcs(c);
            let mut out = Vec::new();
            let misses = ids.iter().filter(|&&b| !p.access(Access::new(k(b)), &mut out).is_hit()).count();
            assert_eq!(misses, expect, "c = {c}");
        }
    }

    /// libcachesim 0.3.5 in a fresh process leaves the same blocks cached after every step of this example. Its
    /// generator's first draws from `0xdeadbeef` are 697 (mod 1000: λ = 0.698), then 82, 21, 32, 60, 93 (mod 100).
    #[test]
    fn libcachesim_worked_by_hand() {
        let mut p = lcs(4);
        assert_eq!(p.learning_rate(), 0.698);
        assert_eq!(p.sizes(), (2, 2));
        acc(&mut p, 1);
        acc(&mut p, 2);
        // SR holds s = 2 blocks: its LRU block goes to H although the cache has room.
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(lists(&p), [vec![3, 2], vec![], vec![1]]);
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        assert_eq!(acc(&mut p, 3).0, Outcome::Hit);
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![]));
        assert_eq!(lists(&p), [vec![4], vec![3, 2], vec![1]]);
        // 1 is in H and was never reused: back into R with frequency 1 + 1, R's LRU block 2 demoted to SR, and SR
        // grows by δ = ⌊D/N⌋ + ½ = 1.5 to s = min(3.5, 4 − 1) = 3, r = 1 (R is now over r).
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, vec![]));
        assert_eq!(lists(&p), [vec![2, 4], vec![1, 3], vec![]]);
        assert_eq!(p.sizes(), (3, 1));
        assert_eq!(lfu(&p), vec![(4, 1), (2, 2), (3, 2), (1, 2)]);
        // Full. Draw 82: CR-LFU, but both experts name 4 (SR's LRU block, the only one of frequency 1).
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![ev(4, false)]));
        assert_eq!(p.histories(), [vec![], vec![]]);
        // Draw 21 < w_LRU = 0.5: SR-LRU's victim 2 (CR-LFU's would be 5), remembered in LRU's history.
        assert_eq!(acc(&mut p, 6), (Outcome::Miss, vec![ev(2, false)]));
        assert_eq!(p.histories(), [keys(&[2]), vec![]]);
        // 2 again: LRU's regret, w_LRU = e^−λ / (1 + e^−λ), λ having gone down twice (every c = 4 accesses, no
        // hit rate change in integer arithmetic): 0.698 · (1 − 0.698) = 0.2108, then 0.2108 · (1 − 0.4872) =
        // 0.1081; w_LRU ≈ 0.473. Draw 32 < w_LRU: SR-LRU's victim 5 (CR-LFU's would be 6, the *last* block to
        // reach frequency 1). 2 comes back from H at frequency 2 + 1, into R, demoting both 3 and 1 (r = 1).
        let lr = p.learning_rate();
        assert!((lr - 0.1081).abs() < 1e-4, "{lr}");
        assert_eq!(acc(&mut p, 2), (Outcome::Miss, vec![ev(5, false)]));
        let w = (-lr).exp();
        let w_lru = (0.5 * w) / (0.5 * w + 0.5);
        assert_eq!(p.weights(), [w_lru, 1.0 - w_lru]);
        assert_eq!(lists(&p), [vec![1, 3, 6], vec![2], vec![5, 4]]);
        assert_eq!(lfu(&p)[3], (2, 3));
        // Draw 60 ≥ w_LRU (≈ 0.473), but both name 6.
        assert_eq!(acc(&mut p, 7), (Outcome::Miss, vec![ev(6, false)]));
        // 7 reused: to R, 2 demoted; 7 is now the last block to reach frequency 2, the least.
        assert_eq!(acc(&mut p, 7).0, Outcome::Hit);
        assert_eq!(lists(&p), [vec![2, 1, 3], vec![7], vec![6, 5, 4]]);
        // Draw 93: CR-LFU's victim 7, in R; then 8 enters SR, over s = 3: SR's LRU block 3 goes too.
        assert_eq!(acc(&mut p, 8), (Outcome::Miss, vec![ev(7, false), ev(3, false)]));
        assert_eq!(p.histories(), [keys(&[5]), keys(&[7])], "2 left LRU's history on its miss");
        assert_eq!(lists(&p), [vec![8, 2, 1], vec![], vec![3, 7, 6]]);
    }

    #[test]
    fn libcachesim_caches_nothing_in_one_block() {
        let mut p = lcs(1);
        for b in [1, 1, 2] {
            assert_eq!(acc(&mut p, b), (Outcome::Miss, vec![]));
        }
        assert_eq!(pf(&mut p, &[3]), (0, vec![]));
        assert_eq!(p.victim(k(4)), Victim::Unknown, "quirks: not named");
        let mut d = fixed(1);
        acc(&mut d, 1);
        assert_eq!(acc(&mut d, 1).0, Outcome::Hit);
        assert_eq!(acc(&mut d, 2), (Outcome::Miss, vec![ev(1, false)]));
    }

    #[test]
    fn libcachesim_can_grow_sr_to_nothing_after_a_removal() {
        // libcachesim 0.3.5 gives the same: get 13, remove 13, get 13, get 0, get 0, get 13 → miss, removed, miss,
        // miss, miss, hit, 1 object cached.
        let mut p = lcs(2);
        acc(&mut p, 13);
        assert!(p.remove(k(13)));
        // Back from H, never reused: s grows to |SR| + |R| − 1 = 0, r = 2; SR refuses everything from now on.
        assert_eq!(acc(&mut p, 13), (Outcome::Miss, vec![]));
        assert_eq!(p.sizes(), (0, 2));
        assert_eq!(p.victim(k(0)), Victim::Unknown, "quirks: not named");
        assert_eq!(acc(&mut p, 0), (Outcome::Miss, vec![]));
        assert!(!p.contains(k(0)));
        assert_eq!(acc(&mut p, 0).0, Outcome::Miss);
        assert_eq!(acc(&mut p, 13).0, Outcome::Hit);
        assert_eq!(pf(&mut p, &[5]), (0, vec![]));
        assert_eq!(p.len(), 1);
    }

    #[test]
    fn fixed_sr_fills_the_cache_and_the_split_adapts_both_ways() {
        let mut p = fixed(4);
        assert_eq!(p.sizes(), (2, 2));
        for b in 1..=4 {
            assert_eq!(acc(&mut p, b), (Outcome::Miss, vec![]), "SR takes what R leaves");
        }
        acc(&mut p, 2);
        acc(&mut p, 3);
        acc(&mut p, 4); // R over r = 2: its LRU block 2 is demoted
        assert_eq!(lists(&p), [vec![2, 1], vec![4, 3], vec![]]);
        // A hit on the demoted 2: R was too small. 3 is demoted, then s shrinks by δ = 1 (⌊N/D⌋ = 0) to 1.
        acc(&mut p, 2);
        assert_eq!(lists(&p), [vec![3, 1], vec![2, 4], vec![]]);
        assert_eq!(p.sizes(), (1, 3));
        // Full: draw 82 (CR-LFU), both name 1, a never-reused block: to H, marked new.
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![ev(1, false)]));
        // Full: draw 21 (SR-LRU's 3, demoted; CR-LFU's would be 5). Then 1 comes back from H into R (room for
        // 3): it was new, so SR grows by δ = 1 (D = 0 after 3 left) to s = 2.
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, vec![ev(3, false)]));
        assert_eq!(lists(&p), [vec![5], vec![1, 2, 4], vec![3]]);
        assert_eq!(p.sizes(), (2, 2));
        assert_eq!(lfu(&p), vec![(5, 1), (4, 2), (1, 2), (2, 3)]);
    }

    #[test]
    fn learning_rate_follows_the_hit_rate() {
        for quirks in [true, false] {
            let mut p = Cacheus::new(10, &CacheusConfig { libcachesim_quirks: quirks, ..CacheusConfig::default() });
            p.lr = 0.5;
            p.hits = 7;
            p.update_learning_rate();
            // λ went from 0 to 0.5; the hit rate from 0 to 0.7 (quirks: ⌊7/10⌋ = 0, no change: down).
            assert_eq!(p.lr, if quirks { 0.25 } else { 0.75 }, "quirks {quirks}");
            assert_eq!(p.hits, 0);
            // λ does not change from now on while nothing hits: stalls.
            p.lr_prev = p.lr;
            p.hit_rate_prev = 0.0;
            let mut redrawn = false;
            for _ in 0..12 {
                let before = p.lr;
                p.lr_prev = p.lr;
                p.update_learning_rate();
                redrawn |= p.lr != before;
            }
            assert_eq!(redrawn, !quirks, "quirks {quirks}: libcachesim redraws only after an improvement");
        }
    }

    #[test]
    fn prefetched_blocks_count_from_their_first_access_and_leave_no_history() {
        for mut p in [fixed(4), lcs(4)] {
            acc(&mut p, 1);
            acc(&mut p, 1); // 1 to R
            assert_eq!(pf(&mut p, &[2, 3, 1]).0, 2);
            assert_eq!(lists(&p), [vec![3, 2], vec![1], vec![]]);
            assert_eq!(acc(&mut p, 2).0, Outcome::PrefetchHit);
            assert_eq!(lists(&p)[0], vec![2, 3], "to SR's MRU end");
            assert_eq!(lfu(&p), vec![(3, 1), (2, 1), (1, 2)]);
            assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
            assert_eq!(lists(&p)[1], vec![2, 1]);
            // 4 reused (to R, 1 demoted): 3 is SR's LRU block and the least frequent, evicted unused into no
            // history.
            acc(&mut p, 4);
            acc(&mut p, 4);
            assert_eq!(lists(&p)[..2], [vec![1, 3], vec![4, 2]]);
            assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![ev(3, true)]));
            assert!(!lists(&p)[2].contains(&3));
            assert!(p.histories().iter().all(|h| !h.contains(&k(3))));
        }
    }

    #[test]
    fn a_prefetch_drops_the_keys_history() {
        let mut p = fixed(2);
        for b in [1, 1, 2, 3] {
            acc(&mut p, b); // 2 (new) goes to H
        }
        assert_eq!(lists(&p)[2], vec![2]);
        let w = p.weights();
        pf(&mut p, &[2]);
        assert_eq!(lists(&p)[0], vec![2], "to SR, not R");
        assert_eq!(lfu(&p)[0], (2, 1), "frequency not resumed");
        assert_eq!(p.weights(), w);
        assert!(!lists(&p)[2].contains(&2));
    }

    #[test]
    fn remove_sends_the_block_to_history() {
        let mut p = fixed(4);
        for b in [1, 2, 2, 2] {
            acc(&mut p, b);
        }
        assert!(p.remove(k(2)) && !p.remove(k(2)));
        assert_eq!(lists(&p), [vec![1], vec![], vec![2]]);
        // Back from H with its frequency (3) + 1.
        acc(&mut p, 2);
        assert_eq!(lfu(&p), vec![(1, 1), (2, 4)]);
        pf(&mut p, &[5]);
        assert!(p.remove(k(5)));
        assert!(!lists(&p)[2].contains(&5), "an unused prefetch leaves no history");
    }

    #[test]
    fn victim_names_the_first_block_the_next_miss_evicts() {
        for quirks in [false, true] {
            for c in [1usize, 2, 3, 4, 9, 40] {
                let cfg = CacheusConfig { libcachesim_quirks: quirks, ..CacheusConfig::default() };
                let mut p = Cacheus::new(c, &cfg);
                let mut rng = Rng(c as u64 + 101);
                let mut out = Vec::new();
                for i in 0..6000 {
                    let b = (rng.next() % (4 * c as u64 + 4)).min(rng.next() % (4 * c as u64 + 4));
                    let key = k(b);
                    if rng.next() % 9 == 0 {
                        out.clear();
                        p.prefetch(&[Access::new(key)], &mut out);
                        continue;
                    }
                    let v = p.victim(key);
                    out.clear();
                    p.access(Access::new(key), &mut out);
                    let first = out.first().map(|e| e.key);
                    match v {
                        Victim::None => assert!(out.is_empty(), "quirks {quirks} c {c} step {i}: evicted {out:?}"),
                        Victim::Block(x) => assert_eq!(first, Some(x), "quirks {quirks} c {c} step {i}"),
                        Victim::Unknown => assert!(quirks, "CACHEUS knows its victim without libcachesim's quirks"),
                    }
                    assert!(quirks || out.len() <= 1);
                }
            }
        }
    }

    #[test]
    fn bytes_per_cached_block() {
        for c in [1000usize, 26921, 100_000] {
            let mut p = fixed(c);
            let mut out = Vec::new();
            let mut rng = Rng(c as u64);
            for _ in 0..20 * c {
                let b = (rng.next() % (4 * c as u64)).min(rng.next() % (4 * c as u64));
                p.access(Access::new(k(b)), &mut out);
            }
            let [g1, g2] = p.histories().map(|h| h.len());
            let h = p.lists()[2].len();
            assert!(h + 10 >= c && g1 + g2 > c / 2, "H {h}, histories {g1} + {g2}");
            let per_block = p.heap_bytes() as f64 / c as f64;
            eprintln!("CACHEUS at c = {c}: {per_block:.1} bytes per cached block (H {h}, histories {g1} + {g2})");
            assert!((100.0..=145.0).contains(&per_block), "{per_block} bytes per cached block at {c}");
        }
    }

    /// Runs `ops` on a libcachesim-quirks cache, checking its invariants and the blocks it reports against a
    /// resident-set model (a miss may evict two blocks here, so the common harness does not apply).
    fn run_quirks(c: usize, ops: &[model::Op]) -> Result<(), TestCaseError> {
        let mut p = lcs(c);
        let mut resident = HashSet::new();
        let mut out = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            out.clear();
            match op {
                &model::Op::Access(b) => {
                    let o = p.access(Access::new(k(b)), &mut out);
                    prop_assert_eq!(o.is_hit(), resident.contains(&b), "step {}", i);
                    prop_assert!(out.len() <= 2);
                }
                model::Op::Prefetch(bs) => {
                    // Distinct keys in the group's order (a HashSet's order would change from run to run).
                    let mut seen = HashSet::new();
                    let g: Vec<Access> = bs.iter().filter(|&&b| seen.insert(b)).map(|&b| Access::new(k(b))).collect();
                    p.prefetch(&g, &mut out);
                }
                &model::Op::Remove(b) => prop_assert_eq!(p.remove(k(b)), resident.remove(&b)),
            }
            for e in &out {
                // libCacheSim's quirk: a missed block can be inserted and evicted by the same access.
                let itself = matches!(op, &model::Op::Access(b) if e.key == k(b));
                prop_assert!(
                    resident.remove(&e.key.block()) || itself || matches!(op, model::Op::Prefetch(_)),
                    "step {}",
                    i
                );
            }
            if let model::Op::Access(b) | model::Op::Remove(b) = op {
                if p.contains(k(*b)) {
                    resident.insert(*b);
                }
            }
            if let model::Op::Prefetch(bs) = op {
                for &b in bs {
                    if p.contains(k(b)) {
                        resident.insert(b);
                    }
                }
            }
            p.validate().map_err(|e| TestCaseError::fail(format!("step {i} {op:?}: {e}")))?;
            prop_assert_eq!(p.len(), resident.len());
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn matches_the_resident_set_model(ops in prop::collection::vec(model::op(), 1..400), c in 1usize..12) {
            model::run(fixed(c), &ops)?;
        }

        #[test]
        fn libcachesim_mode_keeps_its_invariants(ops in prop::collection::vec(model::op(), 1..400), c in 1usize..12) {
            run_quirks(c, &ops)?;
        }
    }
}
