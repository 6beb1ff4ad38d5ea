//! LHD: evict the sampled block of least hit density, learned from age histograms of hits and evictions.
//!
//! **Paper.** N. Beckmann, H. Chen and A. Cidon, "LHD: Improving Cache Hit Rate by Maximizing Hit Density", 15th
//! USENIX Symposium on Networked Systems Design and Implementation (NSDI '18). A block's *hit density* at age `a`
//! (time since its last reference) is the probability that it hits again over the expected cache space-time it
//! will consume until then: `HD(a) = Σ_{x>a} P_hit(x) / Σ_{x>a} (x − a)·(P_hit(x) + P_evict(x))`, from histograms
//! of the ages at which blocks were hit or evicted. Blocks are split into classes (by the sum of their last two
//! hit ages) with one pair of histograms each; ages are coarsened by a right shift so that the histograms cover
//! the cache's lifetimes. Every so many accesses the histograms decay (EWMA) and the densities are recomputed. To
//! evict, a few random blocks are sampled and the one of least hit density goes; a small budget of "explorer"
//! blocks never looks evictable, so that long lifetimes keep being observed.
//!
//! **Semantics**, as libCacheSim's `LHD` (libcachesim 0.3.5, `eviction/LHD/lhd.cpp` and `lhd.hpp`, the authors'
//! simulator code) defines them; Blockwell follows it draw for draw and float for float (all in `f32`, as there).
//! Blocks are all of size 1 and of one application (class ids 16–31 of its 256; the other 240 are never used
//! and are not stored). Time is the number of demand references so far.
//! - Each resident block has a *tag*: time of its last reference, its last two hit ages (coarsened; a new block has
//!   0 and `max_age`), an explorer bit. Tags sit in an array; an evicted block's tag is replaced by the last one
//!   (swap-remove), so the array position of a block depends on the history of evictions, as in libCacheSim.
//! - Age = (now − last reference) >> `shift` (initially 10), capped at `max_age` − 1; a block at the cap has the
//!   lowest possible density. Class = the number of doublings that bring the sum of the last two hit ages to
//!   `max_age` or more, at most 15, and 15 for a sum of 0 (`hitAgeClass`). Density = `densities[class][age]`,
//!   plus 1 for an explorer; initially `(c + 1) / (age + 1)` for class id `c` (16 + class), a size-free GDSF.
//! - *Reference* (hit or insertion): a hit adds 1 to `hits[class][age]` (class and age before the hit), shifts its
//!   hit ages, and an explorer gives back its budget. Then: last reference = now; one generator draw
//!   (`lehmer.rs`: libCacheSim's shared `next_rand()`, which in the compiled 0.3.5 is Lehmer64, not the MMIX
//!   LCG of its October 2024 source; started at `seed`) makes the block an explorer when it is 0 mod 32, the
//!   explorer budget (⌊0.01·capacity⌋ in `f32`) is positive and fewer than 50 reconfigurations have run; an
//!   inserted block that did not draw 0 mod 32 and whose density is below the EWMA of victim densities goes into
//!   a ring of the last `admissions` such blocks. Time advances by one; every `reconfigure_interval` references,
//!   *reconfigure*.
//! - *Evict*: draw 8 candidates (`associativity` after 50 reconfigurations), each at array position
//!   `next_rand() mod len`, then look at the resident blocks of the ring; the first of strictly least density is
//!   evicted (`evictions[class][age]` + 1, an explorer's budget back) and the EWMA of victim densities (decay 0.9)
//!   takes its density.
//! - *Reconfigure*: every histogram bucket × 0.9; the EWMA of the number of resident blocks is updated, and at the
//!   6th and 26th reconfigurations `shift` becomes the least `s ≥ 1` with `2^s ≥ blocks / (0.01 · max_age)`,
//!   the histograms being compressed or stretched to the new scale; then densities are recomputed from the
//!   histograms by the paper's formula, from the oldest age down (ages with no events below `1e-5` get 0).
//!
//! Difference from libcachesim, not reached by its simulations: removing a block ([`Policy::remove`]; libCacheSim's
//! `LHD_remove`) gives an explorer's budget back, which libCacheSim forgets to do.
//!
//! **Prefetch adaptation (seed `001_*` §4, in its spirit; the seed does not study LHD).** A prefetch is not a
//! reference: time does not advance, nothing is drawn. A prefetched block gets the tag of a new block referenced
//! now (no explorer), after making room as a miss does, flagged *not yet accessed*. Its first demand access clears
//! the flag, returns [`Outcome::PrefetchHit`] and is its first reference, exactly an insertion's (fresh hit ages,
//! the explorer draw, the ring): no hit is recorded. The histograms only learn from blocks referenced on demand:
//! an unused prefetched block evicted records no eviction (it is reported as an unused prefetch). LHD keeps no
//! history of evicted blocks, so there are no ghosts.
//!
//! **Parameters** ([`LhdConfig`]), the same under every preset, libcachesim 0.3.5's (`associativity` 32 and
//! `admissions` 8 set in `LHD_Interface.cpp`, the rest constants of `lhd.hpp`):
//!
//! | `associativity` | `admissions` | `max_age` | `reconfigure_interval` | `seed` |
//! |---|---|---|---|---|
//! | 32 | 8 | 20 000 | 2^20 = 1 048 576 | `0xdeadbeef` |
//!
//! libCacheSim's generator is one per thread, starting at `0xdeadbeef`, and LHD draws from it: a fresh process
//! (or thread) running one `LHD` draws what Blockwell draws with the default seed; later caches of the same thread
//! continue the sequence.
//!
//! **Metadata.** 24 bytes per cached block in the tag array (8-byte key, 8-byte time of the last reference, the two
//! hit ages as `u16`, the flags) plus the position index (a hash table of 4-byte positions with 1 tag byte per
//! bucket, reserved for twice the blocks: 11.4–22.9 bytes per block): 35.4–46.9 bytes per cached block. Plus the
//! model, fixed: 16 classes × `max_age` ages × 3 `f32` (hits, evictions, densities), 3.84 MB at `max_age` =
//! 20 000 (libCacheSim allocates it for 256 classes: 61 MB). Per set in a set-associative cache; a smaller
//! `max_age` shrinks it. No ghost entries.
//!
//! **Cost.** A hit: one index lookup and a few arithmetic operations. An eviction: 8 (later `associativity`)
//! random tag reads and up to `admissions` index lookups. A reconfiguration: O(16 · `max_age`), every
//! `reconfigure_interval` references (about 1 ns per reference at the defaults). No allocation after
//! construction.

use super::{Access, Evicted, Outcome, Policy, Victim};
use crate::arena::PackedKey;
use crate::key::BlockKey;
use crate::lehmer::{Lehmer64, LIBCACHESIM_SEED};
use hashbrown::HashTable;
use serde::{Deserialize, Serialize};

/// LHD's parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LhdConfig {
    /// Candidates drawn per eviction once 50 reconfigurations have run (8 before), 1..=4096.
    pub associativity: u32,
    /// Recently inserted low-density blocks also considered at every eviction, 1..=4096.
    pub admissions: u32,
    /// Ages (coarsened) the histograms cover, 2..=65 535.
    pub max_age: u32,
    /// References between reconfigurations, at least 1.
    pub reconfigure_interval: u64,
    /// The generator's initial state (libCacheSim's `set_rand_seed`; `0xdeadbeef` in a fresh thread), not 0.
    pub seed: u64,
}

impl Default for LhdConfig {
    fn default() -> Self {
        LhdConfig {
            associativity: 32,
            admissions: 8,
            max_age: 20_000,
            reconfigure_interval: 1 << 20,
            seed: LIBCACHESIM_SEED,
        }
    }
}

const HIT_AGE_CLASSES: usize = 16;
/// libCacheSim's class id of a block is `app · 16 + hit-age class` with `app = DEFAULT_APP_ID % 16 = 1`.
const CLASS_ID_BASE: u32 = 16;
const EXPLORE_INVERSE_PROBABILITY: u64 = 32;
const EXPLORER_BUDGET_FRACTION: f32 = 0.01;
const AGE_COARSENING_ERROR_TOLERANCE: f32 = 0.01;
const EWMA_DECAY: f32 = 0.9;
/// Candidates per eviction until `WARM_RECONFIGURATIONS` reconfigurations have run.
const EARLY_CANDIDATES: u32 = 8;
const WARM_RECONFIGURATIONS: u64 = 50;
const INITIAL_SHIFT: u32 = 10;
const MAX_LIMIT: u32 = 4096;

const EXPLORER: u8 = 1;
const PREFETCHED: u8 = 2;

/// What LHD tracks of a resident block.
#[derive(Clone, Copy, Debug)]
struct Tag {
    key: PackedKey,
    /// Time of the last reference, as two `u32` so that the tag is 4-byte aligned.
    timestamp: [u32; 2],
    last_hit_age: u16,
    last_last_hit_age: u16,
    flags: u8,
}

impl Tag {
    #[inline(always)]
    fn timestamp(&self) -> u64 {
        (self.timestamp[1] as u64) << 32 | self.timestamp[0] as u64
    }
    #[inline(always)]
    fn set_timestamp(&mut self, t: u64) {
        self.timestamp = [t as u32, (t >> 32) as u32];
    }
    #[inline(always)]
    fn explorer(&self) -> bool {
        self.flags & EXPLORER != 0
    }
    #[inline(always)]
    fn prefetched(&self) -> bool {
        self.flags & PREFETCHED != 0
    }
}

/// The LHD policy.
#[derive(Clone, Debug)]
pub struct Lhd {
    capacity: usize,
    associativity: u32,
    max_age: u64,
    interval: u64,
    /// Resident blocks; sampling picks positions in this array.
    tags: Vec<Tag>,
    /// Key → position in `tags`.
    index: HashTable<u32>,
    /// `[class * max_age + age]`, the 16 hit-age classes of application 1.
    hits: Vec<f32>,
    evictions: Vec<f32>,
    densities: Vec<f32>,
    timestamp: u64,
    next_reconfiguration: u64,
    reconfigurations: u64,
    shift: u32,
    ewma_objects: f32,
    ewma_objects_mass: f32,
    /// Ring of recently admitted blocks that looked evictable.
    recent: Vec<Option<BlockKey>>,
    recent_head: u64,
    ewma_victim_density: f32,
    explorer_budget: i64,
    rng: Lehmer64,
}

impl Lhd {
    #[inline(always)]
    fn position(&self, key: BlockKey) -> Option<usize> {
        let tags = &self.tags;
        self.index.find(key.hash64(), |&p| tags[p as usize].key.get() == key).map(|&p| p as usize)
    }

    /// libCacheSim's `hitAgeClass`: about log2(max_age / age), 15 for age 0.
    #[inline(always)]
    fn hit_age_class(&self, mut age: u64) -> usize {
        if age == 0 {
            return HIT_AGE_CLASSES - 1;
        }
        let mut log = 0;
        while age < self.max_age && log < HIT_AGE_CLASSES - 1 {
            age <<= 1;
            log += 1;
        }
        log
    }

    #[inline(always)]
    fn class(&self, tag: &Tag) -> usize {
        self.hit_age_class(tag.last_hit_age as u64 + tag.last_last_hit_age as u64)
    }

    #[inline(always)]
    fn age(&self, tag: &Tag) -> u64 {
        let age = self.timestamp.wrapping_sub(tag.timestamp()).checked_shr(self.shift).unwrap_or(0);
        age.min(self.max_age - 1)
    }

    /// `[class * max_age + age]` of `tag` now, and its age.
    #[inline(always)]
    fn slot(&self, tag: &Tag) -> (usize, u64) {
        let age = self.age(tag);
        (self.class(tag) * self.max_age as usize + age as usize, age)
    }

    #[inline(always)]
    fn density(&self, tag: &Tag) -> f32 {
        let (i, age) = self.slot(tag);
        if age == self.max_age - 1 {
            return f32::MIN;
        }
        let d = self.densities[i];
        if tag.explorer() {
            d + 1.0
        } else {
            d
        }
    }

    /// The explorer budget plus `delta`, in `f32` as libCacheSim adds a block's (float) size to its `int64_t`.
    #[inline(always)]
    fn budget_plus(&self, delta: f32) -> i64 {
        (self.explorer_budget as f32 + delta) as i64
    }

    /// libCacheSim's `LHD::rank` without the EWMA update: the victim's position and density, drawing from `rng`.
    #[inline]
    fn rank(&self, rng: &mut Lehmer64) -> (usize, f32) {
        let n = self.tags.len() as u64;
        let candidates =
            if self.reconfigurations > WARM_RECONFIGURATIONS { self.associativity } else { EARLY_CANDIDATES };
        let mut victim = usize::MAX;
        let mut victim_rank = f32::MAX;
        let mut first = usize::MAX;
        for _ in 0..candidates {
            let i = (rng.next() % n) as usize;
            let r = self.density(&self.tags[i]);
            if r < victim_rank {
                victim = i;
                victim_rank = r;
            }
            if first == usize::MAX {
                first = i;
            }
        }
        for k in self.recent.iter().flatten() {
            if let Some(i) = self.position(*k) {
                let r = self.density(&self.tags[i]);
                if r < victim_rank {
                    victim = i;
                    victim_rank = r;
                }
            }
        }
        // No density is below f32::MAX in practice (they are finite); libCacheSim would fail, Blockwell takes
        // the first candidate.
        (if victim == usize::MAX { first } else { victim }, victim_rank)
    }

    /// Removes the tag at `i` (swap-remove, as libCacheSim's `tags[index] = tags.back(); tags.pop_back()`).
    #[inline]
    fn take(&mut self, i: usize) -> Tag {
        let key = self.tags[i].key.get();
        let tags = &self.tags;
        if let Ok(e) = self.index.find_entry(key.hash64(), |&p| tags[p as usize].key.get() == key) {
            e.remove();
        }
        let tag = self.tags.swap_remove(i);
        if i < self.tags.len() {
            let moved = self.tags[i].key.get();
            let last = self.tags.len() as u32;
            if let Some(p) = self.index.find_mut(moved.hash64(), |&p| p == last) {
                *p = i as u32;
            }
        }
        tag
    }

    /// libCacheSim's `LHD_evict`: rank, then `replaced`.
    #[inline]
    fn evict_one(&mut self, out: &mut Vec<Evicted>) {
        if self.tags.is_empty() {
            return;
        }
        let mut rng = self.rng;
        let (i, rank) = self.rank(&mut rng);
        self.rng = rng;
        self.ewma_victim_density = EWMA_DECAY * self.ewma_victim_density + (1.0 - EWMA_DECAY) * rank;
        let tag = self.tags[i];
        if !tag.prefetched() {
            let (s, _) = self.slot(&tag);
            self.evictions[s] += 1.0;
            if tag.explorer() {
                self.explorer_budget = self.budget_plus(1.0);
            }
        }
        self.take(i);
        out.push(Evicted { key: tag.key.get(), unused_prefetch: tag.prefetched() });
    }

    /// Appends a tag for `key` as libCacheSim's `update` creates one (not yet referenced: no draw, time not advanced).
    #[inline]
    fn push(&mut self, key: BlockKey, flags: u8, out: &mut Vec<Evicted>) -> usize {
        while self.tags.len() >= self.capacity {
            self.evict_one(out);
        }
        let mut tag = Tag {
            key: PackedKey::new(key),
            timestamp: [0; 2],
            last_hit_age: 0,
            last_last_hit_age: self.max_age as u16,
            flags,
        };
        tag.set_timestamp(self.timestamp);
        let i = self.tags.len();
        self.tags.push(tag);
        let tags = &self.tags;
        self.index.insert_unique(key.hash64(), i as u32, |&p| tags[p as usize].key.get().hash64());
        i
    }

    /// The end of libCacheSim's `update` for the tag at `i`: the reference time, the explorer draw, the ring of
    /// recent admissions (`insert`), the clock and reconfiguration.
    #[inline]
    fn referenced(&mut self, i: usize, insert: bool) {
        let timestamp = self.timestamp;
        self.tags[i].set_timestamp(timestamp);
        let explore = self.rng.next() % EXPLORE_INVERSE_PROBABILITY == 0;
        if explore && self.explorer_budget > 0 && self.reconfigurations < WARM_RECONFIGURATIONS {
            self.tags[i].flags |= EXPLORER;
            self.explorer_budget = self.budget_plus(-1.0);
        } else {
            self.tags[i].flags &= !EXPLORER;
        }
        if insert && !explore && self.density(&self.tags[i]) < self.ewma_victim_density {
            let n = self.recent.len() as u64;
            self.recent[(self.recent_head % n) as usize] = Some(self.tags[i].key.get());
            self.recent_head = self.recent_head.wrapping_add(1);
        }
        self.timestamp += 1;
        self.next_reconfiguration -= 1;
        if self.next_reconfiguration == 0 {
            self.reconfigure();
            self.next_reconfiguration = self.interval;
            self.reconfigurations += 1;
        }
    }

    /// A demand reference to the resident block at `i`.
    #[inline]
    fn on_hit(&mut self, i: usize) -> Outcome {
        let mut tag = self.tags[i];
        if tag.prefetched() {
            tag.flags &= !PREFETCHED;
            tag.last_hit_age = 0;
            tag.last_last_hit_age = self.max_age as u16;
            self.tags[i] = tag;
            self.referenced(i, true);
            return Outcome::PrefetchHit;
        }
        let (s, age) = self.slot(&tag);
        self.hits[s] += 1.0;
        if tag.explorer() {
            self.explorer_budget = self.budget_plus(1.0);
        }
        tag.last_last_hit_age = tag.last_hit_age;
        tag.last_hit_age = age as u16;
        self.tags[i] = tag;
        self.referenced(i, false);
        Outcome::Hit
    }

    /// libCacheSim's `LHD::reconfigure` (less its statistics printing).
    fn reconfigure(&mut self) {
        for x in self.hits.iter_mut().chain(self.evictions.iter_mut()) {
            *x *= EWMA_DECAY;
        }
        self.adapt_age_coarsening();
        self.model_hit_density();
    }

    /// libCacheSim's `LHD::adaptAgeCoarsening`.
    fn adapt_age_coarsening(&mut self) {
        self.ewma_objects *= EWMA_DECAY;
        self.ewma_objects_mass *= EWMA_DECAY;
        self.ewma_objects += self.tags.len() as f32;
        self.ewma_objects_mass += 1.0;
        let objects = self.ewma_objects / self.ewma_objects_mass;
        let optimal = (objects as f64 / (AGE_COARSENING_ERROR_TOLERANCE * self.max_age as f32) as f64) as f32;
        if self.reconfigurations != 5 && self.reconfigurations != 25 {
            return;
        }
        let mut log2 = 1u32;
        while log2 < 63 && ((1u64 << log2) as f32) < optimal {
            log2 += 1;
        }
        let delta = log2 as i64 - self.shift as i64;
        self.shift = log2;
        self.ewma_objects *= 8.0;
        self.ewma_objects_mass *= 8.0;
        let m = self.max_age as usize;
        for c in 0..HIT_AGE_CLASSES {
            for h in [&mut self.hits, &mut self.evictions] {
                let cl = &mut h[c * m..(c + 1) * m];
                if delta < 0 {
                    // Stretch.
                    let d = (-delta).min(63) as u32;
                    for a in (m >> d)..m - 1 {
                        cl[m - 1] += cl[a];
                    }
                    let div = (1u64 << d) as f32;
                    for a in (0..m - 1).rev() {
                        cl[a] = cl[a >> d] / div;
                    }
                } else if delta > 0 {
                    // Compress.
                    let d = delta.min(63) as u32;
                    for a in 0..m >> d {
                        cl[a] = cl[a << d];
                        for i in 1..1usize << d {
                            cl[a] += cl[(a << d) + i];
                        }
                    }
                    for x in &mut cl[m >> d..m - 1] {
                        *x = 0.0;
                    }
                }
            }
        }
    }

    /// libCacheSim's `LHD::modelHitDensity`.
    fn model_hit_density(&mut self) {
        let m = self.max_age as usize;
        for c in 0..HIT_AGE_CLASSES {
            let (hits, evictions) = (&self.hits[c * m..(c + 1) * m], &self.evictions[c * m..(c + 1) * m]);
            let densities = &mut self.densities[c * m..(c + 1) * m];
            let mut events = hits[m - 1] + evictions[m - 1];
            let mut total_hits = hits[m - 1];
            let mut lifetime = events;
            for a in (0..m - 1).rev() {
                total_hits += hits[a];
                events += hits[a] + evictions[a];
                lifetime += events;
                densities[a] = if events as f64 > 1e-5 { total_hits / lifetime } else { 0.0 };
            }
        }
    }

    /// Hit density of every resident block, in array order (for tests and debugging).
    pub fn densities(&self) -> Vec<(BlockKey, f32)> {
        self.tags.iter().map(|t| (t.key.get(), self.density(t))).collect()
    }

    /// The age coarsening shift now.
    pub fn age_shift(&self) -> u32 {
        self.shift
    }
}

impl Policy for Lhd {
    type Config = LhdConfig;

    fn check_config(c: &LhdConfig) -> Result<(), String> {
        if c.associativity == 0 || c.associativity > MAX_LIMIT {
            return Err(format!("associativity must be in 1..={MAX_LIMIT}, got {}", c.associativity));
        }
        if c.admissions == 0 || c.admissions > MAX_LIMIT {
            return Err(format!("admissions must be in 1..={MAX_LIMIT}, got {}", c.admissions));
        }
        if !(2..=u16::MAX as u32).contains(&c.max_age) {
            return Err(format!("max_age must be in 2..={}, got {}", u16::MAX, c.max_age));
        }
        if c.reconfigure_interval == 0 {
            return Err("reconfigure_interval must be at least 1".into());
        }
        if c.seed == 0 {
            return Err("seed must not be 0 (the generator would draw 0 forever)".into());
        }
        Ok(())
    }

    fn new(capacity: usize, config: &LhdConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        if let Err(e) = Self::check_config(config) {
            panic!("invalid LHD configuration: {e}");
        }
        let m = config.max_age as usize;
        let mut densities = vec![0f32; HIT_AGE_CLASSES * m];
        for c in 0..HIT_AGE_CLASSES {
            let id = CLASS_ID_BASE + c as u32;
            for a in 0..m {
                densities[c * m + a] = (1.0 * (id + 1) as f64 / (a + 1) as f64) as f32;
            }
        }
        Lhd {
            capacity,
            associativity: config.associativity,
            max_age: config.max_age as u64,
            interval: config.reconfigure_interval,
            tags: Vec::with_capacity(capacity),
            index: HashTable::with_capacity(capacity.saturating_mul(2)),
            hits: vec![0.0; HIT_AGE_CLASSES * m],
            evictions: vec![0.0; HIT_AGE_CLASSES * m],
            densities,
            timestamp: 0,
            next_reconfiguration: config.reconfigure_interval,
            reconfigurations: 0,
            shift: INITIAL_SHIFT,
            ewma_objects: 0.0,
            ewma_objects_mass: 0.0,
            recent: vec![None; config.admissions as usize],
            recent_head: 0,
            ewma_victim_density: 0.0,
            explorer_budget: (capacity as f32 * EXPLORER_BUDGET_FRACTION) as i64,
            rng: Lehmer64::new(config.seed),
        }
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.tags.len()
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.position(key).is_some()
    }

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        match self.position(access.key) {
            Some(i) => self.on_hit(i),
            None => {
                let i = self.push(access.key, 0, out);
                self.referenced(i, true);
                Outcome::Miss
            }
        }
    }

    #[inline]
    fn hit(&mut self, access: Access, _out: &mut Vec<Evicted>) -> Option<Outcome> {
        let i = self.position(access.key)?;
        Some(self.on_hit(i))
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        super::prefetch_missing(self, group, out, |p, key, out| {
            p.push(key, PREFETCHED, out);
        })
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        match self.position(key) {
            Some(i) => {
                if self.tags[i].explorer() {
                    self.explorer_budget = self.budget_plus(1.0);
                }
                self.take(i);
                true
            }
            None => false,
        }
    }

    fn validate(&self) -> Result<(), String> {
        if self.tags.len() > self.capacity {
            return Err(format!("{} blocks over capacity {}", self.tags.len(), self.capacity));
        }
        if self.index.len() != self.tags.len() {
            return Err(format!("{} indexed, {} tags", self.index.len(), self.tags.len()));
        }
        for (i, t) in self.tags.iter().enumerate() {
            let key = t.key.get();
            if self.position(key) != Some(i) {
                return Err(format!("key {key} at {i} indexed at {:?}", self.position(key)));
            }
            if t.timestamp() > self.timestamp {
                return Err(format!("key {key}: referenced in the future"));
            }
            if t.prefetched() && (t.explorer() || t.last_hit_age != 0) {
                return Err(format!("key {key}: unaccessed prefetched block with a history"));
            }
            if t.last_hit_age as u64 >= self.max_age || t.last_last_hit_age as u64 > self.max_age {
                return Err(format!("key {key}: hit ages beyond max_age"));
            }
        }
        if self.next_reconfiguration == 0 || self.next_reconfiguration > self.interval {
            return Err(format!("next reconfiguration in {}", self.next_reconfiguration));
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        let buckets = if self.index.capacity() == 0 { 0 } else { (self.index.capacity() * 8 / 7).next_power_of_two() };
        self.tags.capacity() * std::mem::size_of::<Tag>()
            + buckets * (std::mem::size_of::<u32>() + 1)
            + (self.hits.capacity() + self.evictions.capacity() + self.densities.capacity()) * 4
            + self.recent.capacity() * std::mem::size_of::<Option<BlockKey>>()
    }

    fn victim(&self, incoming: BlockKey) -> Victim {
        if self.tags.len() < self.capacity || self.contains(incoming) {
            return Victim::None;
        }
        let mut rng = self.rng;
        let (i, _) = self.rank(&mut rng);
        Victim::Block(self.tags[i].key.get())
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::*;
    use crate::policy::testutil::{acc, k, pf};
    use blockwell_testkit::Rng;
    use proptest::prelude::*;

    fn lhd(cap: usize) -> Lhd {
        Lhd::new(cap, &LhdConfig::default())
    }

    fn model_bytes(c: &LhdConfig) -> usize {
        HIT_AGE_CLASSES * c.max_age as usize * 12
    }

    #[test]
    fn tag_is_twenty_four_bytes() {
        assert_eq!(std::mem::size_of::<Tag>(), 24);
    }

    #[test]
    fn initial_densities_are_libcachesims_gdsf() {
        let p = lhd(4);
        // Class 0 (id 16) at age 0: 17; class 15 (id 31) at age 9: 32 / 10.
        assert_eq!(p.densities[0], 17.0);
        assert_eq!(p.densities[15 * 20_000 + 9], 3.2);
        assert_eq!(p.hit_age_class(0), 15);
        assert_eq!(p.hit_age_class(20_000), 0);
        assert_eq!(p.hit_age_class(19_999), 1);
        assert_eq!(p.hit_age_class(10_000), 1);
        assert_eq!(p.hit_age_class(9_999), 2);
        assert_eq!(p.hit_age_class(1), 15);
        // ⌊0.01 · capacity⌋ in f32: 100 · 0.01f rounds to 1.
        assert_eq!(lhd(100).explorer_budget, 1);
        assert_eq!(lhd(99).explorer_budget, 0);
    }

    /// A transcription of libCacheSim's sampling, for the hand-worked orders below: the positions the next
    /// eviction draws.
    fn draws(p: &Lhd, n: usize) -> Vec<usize> {
        let mut g = p.rng;
        (0..n).map(|_| (g.next() % p.tags.len() as u64) as usize).collect()
    }

    #[test]
    fn evicts_the_least_dense_sampled_block() {
        // Shift 0 so that ages are in references; 4 blocks: no explorer budget.
        let c = LhdConfig { max_age: 64, ..LhdConfig::default() };
        let mut p = Lhd::new(4, &c);
        p.shift = 0;
        for b in 1..=4 {
            acc(&mut p, b);
        }
        acc(&mut p, 2);
        // Now t = 5. New blocks are in class 0 (last two hit ages 0 + 64), id 16: density 17 / (age + 1); ages 1 → 5,
        // 3 → 3, 4 → 2. Block 2 was hit at age 3: class hit_age_class(3 + 0) = 5 (3 · 2^5 ≥ 64), id 21, age 1: 22 / 2.
        let d: Vec<(u64, f32)> = p.densities().into_iter().map(|(k, d)| (k.block(), d)).collect();
        assert_eq!(d, vec![(1, 17.0 / 6.0), (2, 11.0), (3, 17.0 / 4.0), (4, 17.0 / 3.0)]);
        assert_eq!(p.hits[3], 1.0, "the hit at age 3, in class 0");
        // The victim is the least dense of the 8 drawn positions.
        let drawn = draws(&p, 8);
        let want = drawn.iter().map(|&i| (i, p.density(&p.tags[i]))).fold((usize::MAX, f32::MAX), |b, x| {
            if x.1 < b.1 {
                x
            } else {
                b
            }
        });
        let key = p.tags[want.0].key.get();
        assert_eq!(p.victim(k(9)), Victim::Block(key));
        let (o, out) = acc(&mut p, 9);
        assert_eq!((o, out), (Outcome::Miss, vec![Evicted { key, unused_prefetch: false }]));
        // Swap-remove: the last tag took the victim's place, and the new block is last.
        assert_eq!(p.tags.last().unwrap().key.get(), k(9));
    }

    #[test]
    fn hits_and_evictions_fill_the_histograms_and_reconfiguration_models_them() {
        let c = LhdConfig { max_age: 100, reconfigure_interval: 1000, ..LhdConfig::default() };
        let mut p = Lhd::new(50, &c);
        p.shift = 2;
        let mut rng = Rng(11);
        let mut out = Vec::new();
        for _ in 0..999 {
            p.access(Access::new(k(rng.next() % 200)), &mut out);
        }
        let hits: f32 = p.hits.iter().sum();
        let evictions: f32 = p.evictions.iter().sum();
        assert!(hits > 100.0 && evictions > 100.0, "{hits} {evictions}");
        let before = p.densities.clone();
        p.access(Access::new(k(1)), &mut out);
        assert_eq!(p.reconfigurations, 1);
        assert_ne!(p.densities, before);
        let after: f32 = p.hits.iter().sum();
        assert!(after < hits, "decayed");
        // Density at age a = hits above a / Σ of events above each age (checked for one class by brute force).
        let m = 100;
        let (h, e) = (&p.hits[..m], &p.evictions[..m]);
        for a in [0usize, 1, 5, 50] {
            let num: f64 = h[a..].iter().map(|&x| x as f64).sum();
            let den: f64 = (a..m).map(|x| h[x..].iter().chain(&e[x..]).map(|&y| y as f64).sum::<f64>()).sum();
            if den > 1e-3 {
                let got = p.densities[a] as f64;
                assert!((got - num / den).abs() <= 1e-4 * (num / den) + 1e-9, "age {a}: {got} vs {}", num / den);
            }
        }
    }

    #[test]
    fn age_coarsening_adapts_at_the_sixth_and_twenty_sixth_reconfiguration() {
        let c = LhdConfig { max_age: 200, reconfigure_interval: 100, ..LhdConfig::default() };
        let mut p = Lhd::new(1000, &c);
        let mut out = Vec::new();
        let mut rng = Rng(2);
        for _ in 0..550 {
            p.access(Access::new(k(rng.next() % 5000)), &mut out);
        }
        assert_eq!(p.reconfigurations, 5);
        assert_eq!(p.age_shift(), 10);
        for _ in 0..100 {
            p.access(Access::new(k(rng.next() % 5000)), &mut out);
        }
        // 6th reconfiguration: about 500 blocks on average / (0.01 · 200) = 250 → 2^8.
        assert_eq!(p.reconfigurations, 6);
        assert_eq!(p.age_shift(), 8);
        for _ in 0..2000 {
            p.access(Access::new(k(rng.next() % 5000)), &mut out);
        }
        assert_eq!(p.reconfigurations, 26);
        // Full cache: 1000 / 2 = 500 → 2^9.
        assert_eq!(p.age_shift(), 9);
        p.validate().unwrap();
    }

    #[test]
    fn stretch_and_compress_move_the_histograms() {
        let c = LhdConfig { max_age: 16, ..LhdConfig::default() };
        let mut p = Lhd::new(10, &c);
        for a in 0..16 {
            p.hits[a] = (a + 1) as f32;
        }
        // Compress by 2 (shift 10 → 12 needs ~2^12 · 0.16 objects).
        p.reconfigurations = 5;
        p.shift = 10;
        p.ewma_objects = 0.0;
        p.ewma_objects_mass = 0.0;
        p.tags =
            vec![
                Tag { key: PackedKey::new(k(0)), timestamp: [0; 2], last_hit_age: 0, last_last_hit_age: 16, flags: 0 };
                600
            ];
        // 600 / (0.01 · 16) = 3750 → 2^12: delta = 2.
        p.adapt_age_coarsening();
        assert_eq!(p.shift, 12);
        let h: Vec<f32> = p.hits[..16].to_vec();
        assert_eq!(
            &h[..4],
            &[1.0 + 2.0 + 3.0 + 4.0, 5.0 + 6.0 + 7.0 + 8.0, 9.0 + 10.0 + 11.0 + 12.0, 13.0 + 14.0 + 15.0 + 16.0]
        );
        assert!(h[4..15].iter().all(|&x| x == 0.0));
        assert_eq!(h[15], 16.0, "the last age is kept");
        // Stretch: 1 block → 1 / 0.16 = 6.25 → 2^3, delta = −9.
        p.reconfigurations = 25;
        p.tags.truncate(1);
        p.ewma_objects = 1.0;
        p.ewma_objects_mass = 1.0;
        let before: Vec<f32> = p.hits[..16].to_vec();
        p.adapt_age_coarsening();
        let d = 12 - p.shift;
        assert!(d > 0);
        let last = before[(16 >> d)..15].iter().fold(before[15], |acc, &x| acc + x);
        let h: Vec<f32> = p.hits[..16].to_vec();
        for a in 0..15 {
            assert_eq!(h[a], before[a >> d] / (1u32 << d) as f32, "age {a}");
        }
        assert_eq!(h[15], last);
    }

    #[test]
    fn explorers_look_dense_and_give_their_budget_back() {
        let mut p = lhd(1000);
        assert_eq!(p.explorer_budget, 10);
        let mut out = Vec::new();
        for b in 0..1000 {
            p.access(Access::new(k(b)), &mut out);
        }
        let explorers = p.tags.iter().filter(|t| t.explorer()).count() as i64;
        assert!(explorers > 0 && explorers <= 10, "{explorers}");
        assert_eq!(p.explorer_budget, 10 - explorers);
        let e = *p.tags.iter().find(|t| t.explorer()).unwrap();
        assert!(p.remove(e.key.get()));
        assert_eq!(p.explorer_budget, 11 - explorers);
    }

    #[test]
    fn prefetched_blocks_are_new_at_their_first_access_and_teach_nothing_unused() {
        let mut p = lhd(3);
        acc(&mut p, 1);
        let t = p.timestamp;
        assert_eq!(pf(&mut p, &[2, 3, 1]), (2, vec![]));
        assert_eq!(p.timestamp, t, "a prefetch is not a reference");
        let rng = p.rng;
        assert_eq!(acc(&mut p, 2).0, Outcome::PrefetchHit);
        assert_ne!(p.rng, rng, "the first access draws as an insertion does");
        assert_eq!(p.hits.iter().sum::<f32>(), 0.0, "and records no hit");
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        assert_eq!(p.hits.iter().sum::<f32>(), 1.0);
        // Fill with new blocks until 3 (never accessed) is evicted: it records no eviction.
        let mut b = 10;
        loop {
            let before = p.evictions.iter().sum::<f32>();
            let (_, out) = acc(&mut p, b);
            b += 1;
            if out.iter().any(|e| e.key == k(3)) {
                assert_eq!(out, vec![Evicted { key: k(3), unused_prefetch: true }]);
                assert_eq!(p.evictions.iter().sum::<f32>(), before);
                break;
            }
            assert_eq!(p.evictions.iter().sum::<f32>(), before + out.len() as f32);
        }
    }

    #[test]
    fn victim_is_what_the_next_miss_evicts() {
        for cap in [1usize, 2, 7, 64] {
            let c = LhdConfig { reconfigure_interval: 500, max_age: 300, ..LhdConfig::default() };
            let mut p = Lhd::new(cap, &c);
            let mut rng = Rng(cap as u64 + 7);
            let mut out = Vec::new();
            for i in 0..30_000u64 {
                let key = k(rng.next() % (cap as u64 * 3));
                let v = p.victim(key);
                out.clear();
                p.access(Access::new(key), &mut out);
                match v {
                    Victim::None => assert!(out.is_empty(), "step {i}"),
                    Victim::Block(b) => assert_eq!(out.iter().map(|e| e.key).collect::<Vec<_>>(), vec![b], "step {i}"),
                    Victim::Unknown => panic!("unknown"),
                }
                if i % 101 == 0 {
                    p.prefetch(&[Access::new(k(rng.next() % (cap as u64 * 3)))], &mut out);
                }
            }
            assert!(p.reconfigurations > 50, "past the warm-up: associativity candidates");
        }
    }

    #[test]
    fn same_seed_same_run_other_seed_other_run() {
        let run = |seed| {
            let mut p = Lhd::new(50, &LhdConfig { seed, ..LhdConfig::default() });
            let mut rng = Rng(3);
            let mut out = Vec::new();
            for _ in 0..5000 {
                p.access(Access::new(k(rng.next() % 200)), &mut out);
            }
            out
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        assert!(Lhd::check_config(&LhdConfig { seed: 0, ..LhdConfig::default() }).is_err());
    }

    #[test]
    fn metadata_is_as_documented() {
        let c = LhdConfig::default();
        assert_eq!(model_bytes(&c), 3_840_000);
        for cap in [1_000, 10_000, 100_000, 1 << 20] {
            let p = lhd(cap);
            let per_block = (p.heap_bytes() - model_bytes(&c)) as f64 / cap as f64;
            assert!((35.4..=47.0).contains(&per_block), "{per_block} bytes per block at {cap}");
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(cap in 1usize..9, interval in 1u64..50,
                                   ops in prop::collection::vec(model::op(), 1..300)) {
            let c = LhdConfig { max_age: 50, reconfigure_interval: interval, ..LhdConfig::default() };
            model::run(Lhd::new(cap, &c), &ops)?;
        }
    }
}
