//! Hyperbolic caching: evict the block of lowest hits per unit of time in the cache among a random sample.
//!
//! **Paper.** A. Blankstein, S. Sen and M. J. Freedman, "Hyperbolic Caching: Flexible Caching for Web
//! Applications", 2017 USENIX Annual Technical Conference (USENIX ATC '17). Each cached item `i` has the priority
//! `p_i = n_i / t_i`, its number of requests since it entered the cache over the time it has spent there. The
//! priorities of all items decay at different rates (hyperbolically), so no data structure keeps them ordered; to
//! evict, the cache samples `S` random items and evicts the one of lowest priority (the paper samples 64).
//!
//! **Semantics**, as libcachesim 0.3.5's `Hyperbolic` (`Hyperbolic.c` over its chained hash table) defines them,
//! which Blockwell follows draw for draw. Time is the number of demand accesses so far, this one included. A
//! block inserted on a miss gets `n = 1` and its insertion time; a hit adds 1 to `n`. To evict, `samples` blocks
//! are drawn (with repetition) and scored `1e8 · n / age` in `f64` (age = now − insertion time); the first sample
//! of strictly lowest score is evicted.
//!
//! A draw is libcachesim 0.3.5's `hashtable_rand_obj`, over the hash table that also finds the blocks: `2^power`
//! buckets, a block in bucket XXH3-64(8-byte key) mod `2^power`, at the front of its bucket's chain. The generator
//! ([`super::lehmer`], libCacheSim's `next_rand()`, started at `seed`) names a bucket by the low `power` bits of a
//! draw; an empty bucket costs another draw, and after 33 failed draws in one call the table halves before every
//! further draw. In a non-empty bucket one more draw picks the block at position `draw mod chain length` from the
//! front. Before a block is inserted into a table holding more than `2 · 2^power` blocks, the table doubles.
//! Halving or doubling re-links the old buckets' chains in bucket order, each front to back, into the fronts of
//! the new chains. The table thus tracks the number of resident blocks, whatever `power` it starts at.
//!
//! Differences from libcachesim, none reached by realistic runs: `n` is a saturating `u32` there a 24-bit signed
//! field (which wraps after 8 388 607 hits to one object), and insertion times are `u64` there 40-bit signed
//! fields (wrapping after 2^39 requests). A sample scoring at least `1e16` is never chosen in libCacheSim, which
//! fails if all do; Blockwell then evicts the first sample (possible only with prefetched blocks, whose age may be
//! 0, or past 10^8 hits).
//!
//! **Prefetch adaptation (seed `001_*` §4, in its spirit; the seed does not study Hyperbolic).** A prefetch is not
//! a request: time does not advance. A prefetched block is inserted as a missed block would be at that time
//! (`n = 1`, insertion time now, after making room as a miss does), flagged *not yet accessed*. Its first demand
//! access clears the flag, returns [`Outcome::PrefetchHit`] and counts as its first reference: `n = 1` and the
//! insertion time is reset to now, the state a demand miss would have given it. Evicted with the flag set, it is
//! reported as an unused prefetch. Hyperbolic keeps no history of evicted blocks, so there are no ghosts.
//!
//! **Parameters** ([`HyperbolicConfig`]):
//!
//! | preset | `samples` | `hashpower` | `seed` |
//! |---|---|---|---|
//! | `Default`, `Seed001` | 64 | 0 (auto: the smallest power ≥ 1 with `2^power` ≥ capacity) | `0xdeadbeef` |
//! | `Libcachesim` | 64 | 16 | `0xdeadbeef` |
//!
//! libcachesim 0.3.5's `Hyperbolic` samples 64 and starts its table at `max(12, hashpower − 8)` = 16 bits for
//! the Python binding's default `hashpower=24`. Its generator is one per thread, starting at `0xdeadbeef`: a fresh
//! process (or thread) running one `Hyperbolic` draws what Blockwell draws with the default seed; later caches of
//! the same thread continue the sequence. The same trace and configuration give the same run.
//!
//! **Metadata.** 24 bytes per cached block in the slab (8-byte key, the 31-bit chain link with the prefetch flag
//! in its top bit, `n` as `u32`, the insertion time as two `u32`) and 4 bytes per bucket. With `hashpower = 0` a
//! full cache has 1–2 buckets per block (fewer if draws ever halve it): 28–32 bytes per cached block. With
//! `hashpower = 16` the table starts at 65 536 buckets (256 KiB however small the cache), halves on the first
//! evictions of a small cache until draws find blocks, and doubles past 2 blocks per bucket: 26–32 bytes per
//! cached block once it has adapted. No ghost entries.
//!
//! **Cost.** A lookup hashes the key (XXH3 of 8 bytes) and walks one chain (about one block long). An eviction
//! draws `samples` blocks: per draw a few 128-bit multiplications, reads of one or two buckets, of a chain and of
//! the block. Halving or doubling the table is O(blocks + buckets): halving happens only while the table is much
//! sparser than the cache, doubling amortizes to O(1) per insertion. No allocation once the slab has grown to
//! the capacity, except when the table is resized.

use super::lehmer::{Lehmer64, LIBCACHESIM_SEED};
use super::{Access, Evicted, Outcome, Policy, Preset, Victim};
use crate::arena::PackedKey;
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// Hyperbolic's parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HyperbolicConfig {
    /// Blocks drawn per eviction (1..=65 536).
    pub samples: u32,
    /// log2 of the hash table's initial number of buckets (1..=31), or 0 for the smallest with at least one bucket
    /// per block of capacity. The table of libcachesim's `Hyperbolic` starts at 16 bits.
    pub hashpower: u32,
    /// The generator's initial state (libCacheSim's `set_rand_seed`; `0xdeadbeef` in a fresh thread), not 0.
    pub seed: u64,
}

impl Default for HyperbolicConfig {
    fn default() -> Self {
        HyperbolicConfig { samples: 64, hashpower: 0, seed: LIBCACHESIM_SEED }
    }
}

/// Largest table: handles are 31 bits.
const MAX_POWER: u32 = 31;
const MAX_SAMPLES: u32 = 1 << 16;
/// Failed draws in one `hashtable_rand_obj` call after which the table halves before every further draw.
const DRAWS_BEFORE_SHRINK: u32 = 32;
/// Top bit of [`Entry::next`]: prefetched, not yet accessed on demand.
const PREFETCHED: u32 = 1 << 31;
const NEXT: u32 = !PREFETCHED;

/// One cached block (or, when free, a link of the free list).
#[derive(Clone, Copy, Debug)]
struct Entry {
    key: PackedKey,
    /// Next block of the bucket's chain (handle, 0: none), the prefetch flag in the top bit.
    next: u32,
    /// Requests since insertion.
    freq: u32,
    /// Insertion time, as two `u32` so that the entry is 4-byte aligned.
    enter: [u32; 2],
}

impl Entry {
    #[inline(always)]
    fn next(&self) -> u32 {
        self.next & NEXT
    }
    #[inline(always)]
    fn set_next(&mut self, n: u32) {
        self.next = (self.next & PREFETCHED) | n;
    }
    #[inline(always)]
    fn prefetched(&self) -> bool {
        self.next & PREFETCHED != 0
    }
    #[inline(always)]
    fn enter(&self) -> u64 {
        (self.enter[1] as u64) << 32 | self.enter[0] as u64
    }
    #[inline(always)]
    fn set_enter(&mut self, t: u64) {
        self.enter = [t as u32, (t >> 32) as u32];
    }
}

/// XXH3-64 of the 8 little-endian bytes of `x`, seed 0 (xxHash's `XXH3_len_4to8_64b` with the default secret):
/// libCacheSim's `get_hash_value_int_64` (its default `HASH_TYPE` is `XXHASH3`).
#[inline]
fn xxh3_u64(x: u64) -> u64 {
    // readLE64(secret + 8) ^ readLE64(secret + 16) of XXH3_kSecret.
    const BITFLIP: u64 = 0x1cad_21f7_2c81_017c ^ 0xdb97_9083_e96d_d4de;
    const M: u64 = 0x9FB2_1C65_1E98_DF25;
    // input64 = readLE32(input + 4) + (readLE32(input) << 32).
    let mut h = x.rotate_left(32) ^ BITFLIP;
    h ^= h.rotate_left(49) ^ h.rotate_left(24);
    h = h.wrapping_mul(M);
    h ^= (h >> 35).wrapping_add(8);
    h = h.wrapping_mul(M);
    h ^ (h >> 28)
}

/// What one call of `hashtable_rand_obj` found so far.
enum Drawn {
    Block(u32),
    /// The table must halve before the next draw.
    Shrink,
}

/// The Hyperbolic policy.
#[derive(Clone, Debug)]
pub struct Hyperbolic {
    capacity: usize,
    samples: u32,
    /// Entries addressed by handle − 1.
    slots: Vec<Entry>,
    /// Free list of slots (handle, 0: none), through `next`.
    free: u32,
    len: usize,
    /// First block of each bucket's chain (handle, 0: empty).
    heads: Vec<u32>,
    power: u32,
    rng: Lehmer64,
    /// Demand accesses so far.
    now: u64,
}

impl Hyperbolic {
    #[inline(always)]
    fn slot(&self, h: u32) -> &Entry {
        &self.slots[(h - 1) as usize]
    }

    #[inline(always)]
    fn slot_mut(&mut self, h: u32) -> &mut Entry {
        &mut self.slots[(h - 1) as usize]
    }

    #[inline(always)]
    fn mask(&self) -> u64 {
        (1u64 << self.power) - 1
    }

    #[inline(always)]
    fn bucket(&self, key: BlockKey) -> usize {
        (xxh3_u64(key.raw()) & self.mask()) as usize
    }

    #[inline]
    fn find(&self, key: BlockKey) -> Option<u32> {
        let mut h = self.heads[self.bucket(key)];
        while h != 0 {
            let e = self.slot(h);
            if e.key.get() == key {
                return Some(h);
            }
            h = e.next();
        }
        None
    }

    /// Puts `h` at the front of its bucket's chain.
    #[inline]
    fn link(&mut self, h: u32) {
        let b = self.bucket(self.slot(h).key.get());
        let head = self.heads[b];
        self.slot_mut(h).set_next(head);
        self.heads[b] = h;
    }

    /// Takes `h` out of its bucket's chain, keeping the others' order.
    #[inline]
    fn unlink(&mut self, h: u32) {
        let b = self.bucket(self.slot(h).key.get());
        let next = self.slot(h).next();
        if self.heads[b] == h {
            self.heads[b] = next;
            return;
        }
        let mut cur = self.heads[b];
        while cur != 0 {
            let n = self.slot(cur).next();
            if n == h {
                self.slot_mut(cur).set_next(next);
                return;
            }
            cur = n;
        }
        debug_assert!(false, "block not on its chain");
    }

    #[inline]
    fn alloc(&mut self, e: Entry) -> u32 {
        self.len += 1;
        if self.free != 0 {
            let h = self.free;
            self.free = self.slot(h).next();
            *self.slot_mut(h) = e;
            return h;
        }
        self.slots.push(e);
        self.slots.len() as u32
    }

    #[inline]
    fn release(&mut self, h: u32) {
        let free = self.free;
        self.slot_mut(h).next = free;
        self.free = h;
        self.len -= 1;
    }

    /// Rebuilds the table with `2^power` buckets: the old chains in bucket order, each front to back, pushed to the
    /// fronts of the new ones (libcachesim's rehash, for doubling and halving alike).
    fn resize(&mut self, power: u32) {
        let old = std::mem::replace(&mut self.heads, vec![0; 1 << power]);
        self.power = power;
        for &head in &old {
            let mut h = head;
            while h != 0 {
                let next = self.slot(h).next();
                self.link(h);
                h = next;
            }
        }
    }

    /// Draws of one `hashtable_rand_obj` call, `failed` draws having failed so far: the block found, or
    /// [`Drawn::Shrink`] when the table must halve before the next draw. The table is not empty.
    #[inline(always)]
    fn draw(&self, rng: &mut Lehmer64, failed: &mut u32) -> Drawn {
        let mask = self.mask();
        loop {
            let head = self.heads[(rng.next() & mask) as usize];
            if head != 0 {
                let pick = rng.next();
                let mut n = 1u64;
                let mut h = self.slot(head).next();
                while h != 0 {
                    n += 1;
                    h = self.slot(h).next();
                }
                let mut h = head;
                for _ in 0..pick % n {
                    h = self.slot(h).next();
                }
                return Drawn::Block(h);
            }
            *failed += 1;
            if *failed > DRAWS_BEFORE_SHRINK && self.power > 0 {
                return Drawn::Shrink;
            }
        }
    }

    /// Whether `h` scores strictly below `best` at time `now` (libcachesim's `best_candidate_score > score`).
    #[inline(always)]
    fn consider(&self, h: u32, now: u64, best: &mut (u32, f64)) {
        let e = self.slot(h);
        let age = now.wrapping_sub(e.enter()) as f64;
        let score = 1.0e8 * e.freq as f64 / age;
        if best.1 > score {
            *best = (h, score);
        }
    }

    /// The block an eviction at time `now` takes, drawing from `rng` as libcachesim's `Hyperbolic_to_evict` does
    /// and halving the table when its draws do. `None` only when the cache is empty.
    #[inline]
    fn choose(&mut self, rng: &mut Lehmer64, now: u64) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mut best = (0u32, 1.0e16);
        let mut first = 0u32;
        for _ in 0..self.samples {
            let mut failed = 0;
            let h = loop {
                match self.draw(rng, &mut failed) {
                    Drawn::Block(h) => break h,
                    Drawn::Shrink => self.resize(self.power - 1),
                }
            };
            if first == 0 {
                first = h;
            }
            self.consider(h, now, &mut best);
        }
        Some(if best.0 != 0 { best.0 } else { first })
    }

    /// [`Hyperbolic::choose`] without changing anything: `Err(())` if the draws would halve the table.
    #[inline]
    fn choose_unchanged(&self, rng: &mut Lehmer64, now: u64) -> Result<Option<u32>, ()> {
        if self.len == 0 {
            return Ok(None);
        }
        let mut best = (0u32, 1.0e16);
        let mut first = 0u32;
        for _ in 0..self.samples {
            let h = match self.draw(rng, &mut 0) {
                Drawn::Block(h) => h,
                Drawn::Shrink => return Err(()),
            };
            if first == 0 {
                first = h;
            }
            self.consider(h, now, &mut best);
        }
        Ok(Some(if best.0 != 0 { best.0 } else { first }))
    }

    #[inline]
    fn evict_one(&mut self, out: &mut Vec<Evicted>) {
        let mut rng = self.rng;
        let Some(h) = self.choose(&mut rng, self.now) else { return };
        self.rng = rng;
        self.unlink(h);
        let e = *self.slot(h);
        self.release(h);
        out.push(Evicted { key: e.key.get(), unused_prefetch: e.prefetched() });
    }

    #[inline]
    fn insert(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) {
        while self.len >= self.capacity {
            self.evict_one(out);
        }
        if self.len > (2usize << self.power) && self.power < MAX_POWER {
            self.resize(self.power + 1);
        }
        let mut e = Entry { key: PackedKey::new(key), next: 0, freq: 1, enter: [0; 2] };
        e.set_enter(self.now);
        if prefetched {
            e.next = PREFETCHED;
        }
        let h = self.alloc(e);
        self.link(h);
    }

    /// A demand hit on `h` (time already advanced).
    #[inline(always)]
    fn on_hit(&mut self, h: u32) -> Outcome {
        let now = self.now;
        let e = self.slot_mut(h);
        if e.prefetched() {
            e.next &= NEXT;
            e.freq = 1;
            e.set_enter(now);
            Outcome::PrefetchHit
        } else {
            e.freq = e.freq.saturating_add(1);
            Outcome::Hit
        }
    }

    /// Resident blocks with their request count and insertion time, in slot order (for tests and debugging).
    pub fn entries(&self) -> Vec<(BlockKey, u32, u64)> {
        let mut v = Vec::with_capacity(self.len);
        for &head in &self.heads {
            let mut h = head;
            while h != 0 {
                let e = self.slot(h);
                v.push((h, e.key.get(), e.freq, e.enter()));
                h = e.next();
            }
        }
        v.sort_unstable_by_key(|x| x.0);
        v.into_iter().map(|(_, k, f, t)| (k, f, t)).collect()
    }

    /// log2 of the number of buckets now.
    pub fn hashpower(&self) -> u32 {
        self.power
    }
}

impl Policy for Hyperbolic {
    type Config = HyperbolicConfig;

    fn preset(preset: Preset) -> HyperbolicConfig {
        match preset {
            Preset::Libcachesim => HyperbolicConfig { hashpower: 16, ..HyperbolicConfig::default() },
            Preset::Default | Preset::Seed001 => HyperbolicConfig::default(),
        }
    }

    fn check_config(c: &HyperbolicConfig) -> Result<(), String> {
        if c.samples == 0 || c.samples > MAX_SAMPLES {
            return Err(format!("samples must be in 1..={MAX_SAMPLES}, got {}", c.samples));
        }
        if c.hashpower > MAX_POWER {
            return Err(format!(
                "hashpower must be in 0..={MAX_POWER} (0: sized to the capacity), got {}",
                c.hashpower
            ));
        }
        if c.seed == 0 {
            return Err("seed must not be 0 (the generator would draw 0 forever)".into());
        }
        Ok(())
    }

    fn new(capacity: usize, config: &HyperbolicConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        if let Err(e) = Self::check_config(config) {
            panic!("invalid Hyperbolic configuration: {e}");
        }
        let power = match config.hashpower {
            0 => capacity.next_power_of_two().trailing_zeros().clamp(1, MAX_POWER),
            p => p,
        };
        Hyperbolic {
            capacity,
            samples: config.samples,
            slots: Vec::with_capacity(capacity),
            free: 0,
            len: 0,
            heads: vec![0; 1 << power],
            power,
            rng: Lehmer64::new(config.seed),
            now: 0,
        }
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.len
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.find(key).is_some()
    }

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        self.now += 1;
        match self.find(access.key) {
            Some(h) => self.on_hit(h),
            None => {
                self.insert(access.key, false, out);
                Outcome::Miss
            }
        }
    }

    #[inline]
    fn hit(&mut self, access: Access, _out: &mut Vec<Evicted>) -> Option<Outcome> {
        let h = self.find(access.key)?;
        self.now += 1;
        Some(self.on_hit(h))
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        super::prefetch_missing(self, group, out, |p, key, out| p.insert(key, true, out))
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        match self.find(key) {
            Some(h) => {
                self.unlink(h);
                self.release(h);
                true
            }
            None => false,
        }
    }

    fn validate(&self) -> Result<(), String> {
        let mask = self.mask();
        if self.heads.len() != 1 << self.power {
            return Err(format!("{} buckets at power {}", self.heads.len(), self.power));
        }
        let mut n = 0usize;
        for (b, &head) in self.heads.iter().enumerate() {
            let mut h = head;
            while h != 0 {
                n += 1;
                if n > self.len {
                    return Err(format!("more blocks on the chains than len {} (cycle?)", self.len));
                }
                let e = self.slot(h);
                if xxh3_u64(e.key.get().raw()) & mask != b as u64 {
                    return Err(format!("key {} in bucket {b}, not its own", e.key.get()));
                }
                if e.freq == 0 {
                    return Err(format!("key {}: no request counted", e.key.get()));
                }
                if e.enter() > self.now {
                    return Err(format!("key {}: inserted after now", e.key.get()));
                }
                h = e.next();
            }
        }
        if n != self.len {
            return Err(format!("len {} but {n} blocks on the chains", self.len));
        }
        if self.len > self.capacity {
            return Err(format!("{} blocks over capacity {}", self.len, self.capacity));
        }
        let mut free = 0;
        let mut h = self.free;
        while h != 0 {
            free += 1;
            if free > self.slots.len() {
                return Err("free list cycles".into());
            }
            h = self.slot(h).next();
        }
        if free + self.len != self.slots.len() {
            return Err(format!("{free} free + {} live != {} slots", self.len, self.slots.len()));
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Entry>() + self.heads.capacity() * 4
    }

    fn victim(&self, incoming: BlockKey) -> Victim {
        if self.len < self.capacity || self.contains(incoming) {
            return Victim::None;
        }
        let now = self.now + 1;
        let h = match self.choose_unchanged(&mut self.rng.clone(), now) {
            Ok(h) => h,
            // The draws would halve the table (rare: only while it is much sparser than the cache): on a copy.
            Err(()) => {
                let mut copy = self.clone();
                let mut rng = copy.rng;
                return match copy.choose(&mut rng, now) {
                    Some(h) => Victim::Block(copy.slot(h).key.get()),
                    None => Victim::None,
                };
            }
        };
        match h {
            Some(h) => Victim::Block(self.slot(h).key.get()),
            None => Victim::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::*;
    use crate::policy::testutil::{acc, ev, k, pf};
    use blockwell_testkit::Rng;
    use proptest::prelude::*;

    fn hyp(cap: usize, samples: u32, hashpower: u32) -> Hyperbolic {
        Hyperbolic::new(cap, &HyperbolicConfig { samples, hashpower, seed: LIBCACHESIM_SEED })
    }

    #[test]
    fn entry_is_twenty_four_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 24);
    }

    #[test]
    fn xxh3_matches_libcachesims_hash() {
        // XXH3_64bits(&obj_id, 8) from libCacheSim's xxh3.h.
        for (x, h) in [
            (0u64, 14374147212387527897u64),
            (1, 3439722301264460078),
            (2, 2343778756980564547),
            (42, 15395265915043915720),
            (123456789, 2817400364357085909),
            (0xfedcba9876543210, 5120852969840722371),
            ((1 << 48) - 1, 16525179420693705522),
        ] {
            assert_eq!(xxh3_u64(x), h, "{x}");
        }
    }

    /// libcachesim 0.3.5's hash table and `chained_hashtable_rand_obj_v2`, transcribed plainly: chains as vectors
    /// (front first), a rehash that pushes every block of the old chains, in order, to the front of its new chain.
    struct Table {
        chains: Vec<Vec<u64>>,
        power: u32,
    }

    impl Table {
        fn of(p: &Hyperbolic) -> Table {
            let chains = p
                .heads
                .iter()
                .map(|&head| {
                    let mut c = Vec::new();
                    let mut h = head;
                    while h != 0 {
                        c.push(p.slot(h).key.get().raw());
                        h = p.slot(h).next();
                    }
                    c
                })
                .collect();
            Table { chains, power: p.power }
        }

        fn rehash(&mut self, power: u32) {
            let old = std::mem::replace(&mut self.chains, vec![Vec::new(); 1 << power]);
            self.power = power;
            for x in old.into_iter().flatten() {
                let b = (xxh3_u64(x) & ((1 << power) - 1)) as usize;
                self.chains[b].insert(0, x);
            }
        }

        fn rand_obj(&mut self, rng: &mut Lehmer64) -> u64 {
            let mut tries = 0;
            loop {
                let pos = (rng.next() & ((1 << self.power) - 1)) as usize;
                if !self.chains[pos].is_empty() {
                    let r = rng.next();
                    return self.chains[pos][(r % self.chains[pos].len() as u64) as usize];
                }
                tries += 1;
                if tries > 32 {
                    self.rehash(self.power - 1);
                }
            }
        }
    }

    #[test]
    fn draws_are_libcachesims_rand_obj() {
        for (cap, power) in [(5, 16), (50, 6), (300, 9), (7, 3), (3, 1), (1000, 5)] {
            let mut p = hyp(cap, 8, power);
            for b in 0..cap as u64 {
                acc(&mut p, b * 7919);
            }
            let mut t = Table::of(&p);
            let mut rng = p.rng;
            let mut rng2 = p.rng;
            for i in 0..3000 {
                let mut failed = 0;
                let h = loop {
                    match p.draw(&mut rng, &mut failed) {
                        Drawn::Block(h) => break h,
                        Drawn::Shrink => p.resize(p.power - 1),
                    }
                };
                assert_eq!(p.slot(h).key.get().raw(), t.rand_obj(&mut rng2), "cap {cap} power {power} draw {i}");
                assert_eq!(rng, rng2);
                assert_eq!(p.power, t.power);
            }
            p.validate().unwrap();
            assert_eq!(Table::of(&p).chains, t.chains);
        }
    }

    #[test]
    fn evicts_the_lowest_hits_per_age_of_the_sample() {
        // Two blocks, 64 draws: both are drawn.
        let mut p = hyp(2, 64, 16);
        acc(&mut p, 1); // t=1, n=1
        acc(&mut p, 2); // t=2, n=1
        acc(&mut p, 2); // t=3, n=2
                        // At t=4: block 1 scores 1/3, block 2 scores 2/2: block 1 goes.
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, vec![ev(1, false)]));
        // At t=5: block 2 scores 2/3, block 3 scores 1/1: block 2 goes.
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(2, false)]));
        let e = p.entries();
        assert_eq!(e, vec![(k(3), 1, 4), (k(4), 1, 5)]);
    }

    #[test]
    fn a_sample_of_one_is_a_random_eviction() {
        let mut p = hyp(4, 1, 0);
        for b in 0..4 {
            acc(&mut p, b);
        }
        let mut q = p.clone();
        let mut rng = q.rng;
        let h = q.choose(&mut rng, q.now + 1).unwrap();
        let want = q.slot(h).key.get();
        let (_, out) = acc(&mut p, 9);
        assert_eq!(out, vec![Evicted { key: want, unused_prefetch: false }]);
    }

    #[test]
    fn a_sparse_table_halves_until_draws_find_blocks() {
        let mut p = hyp(4, 64, 16);
        for b in 0..4 {
            acc(&mut p, b);
        }
        assert_eq!(p.hashpower(), 16);
        let v = p.victim(k(9));
        assert_eq!(p.hashpower(), 16, "victim changes nothing");
        let (_, out) = acc(&mut p, 9);
        assert_eq!(v, Victim::Block(out[0].key));
        assert!(p.hashpower() < 10, "power {}", p.hashpower());
    }

    #[test]
    fn the_table_doubles_past_two_blocks_per_bucket() {
        let mut p = hyp(40, 8, 2);
        let mut rng = Rng(5);
        for _ in 0..3000 {
            acc(&mut p, rng.next() % 100);
        }
        // More than 2 · 2^4 = 32 blocks needs 2^5 buckets.
        assert_eq!(p.hashpower(), 5);
        // The doubling re-links each old chain front to back into the new fronts.
        let mut q = hyp(8, 8, 1);
        let keys: Vec<u64> = (0..).filter(|&b| xxh3_u64(b) & 3 == 1).take(6).collect();
        for &b in &keys[..5] {
            acc(&mut q, b);
        }
        assert_eq!(q.hashpower(), 1);
        // 5 blocks > 2 · 2 buckets: inserting keys[5] doubles. Bucket 1's chain, keys[4] .. keys[0], re-linked
        // front to back into bucket 1 of 4: keys[0] .. keys[4]; then keys[5] in front.
        acc(&mut q, keys[5]);
        assert_eq!(q.hashpower(), 2);
        let mut chain = Vec::new();
        let mut h = q.heads[1];
        while h != 0 {
            chain.push(q.slot(h).key.get().block());
            h = q.slot(h).next();
        }
        assert_eq!(chain, vec![keys[5], keys[0], keys[1], keys[2], keys[3], keys[4]]);
    }

    #[test]
    fn prefetched_blocks_count_their_first_access_as_their_insertion() {
        let mut p = hyp(3, 64, 16);
        acc(&mut p, 1);
        assert_eq!(pf(&mut p, &[2, 3, 1]), (2, vec![]));
        assert_eq!(p.entries(), vec![(k(1), 1, 1), (k(2), 1, 1), (k(3), 1, 1)]);
        let mut p = hyp(3, 64, 16);
        acc(&mut p, 1);
        pf(&mut p, &[2, 3]);
        acc(&mut p, 1);
        acc(&mut p, 1);
        assert_eq!(acc(&mut p, 2).0, Outcome::PrefetchHit);
        assert_eq!(p.entries()[1], (k(2), 1, 4), "n = 1, inserted now");
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        // t=6: 1 scores 3/5, 2 scores 2/2, 3 (unused prefetch, n = 1 since t=1) 1/5: 3 goes.
        assert_eq!(acc(&mut p, 7), (Outcome::Miss, vec![ev(3, true)]));
    }

    #[test]
    fn victim_is_what_the_next_miss_evicts() {
        for (cap, power, samples) in [(1, 0, 64), (5, 16, 64), (20, 0, 4), (64, 3, 16), (300, 20, 8)] {
            let mut p = hyp(cap, samples, power);
            let mut rng = Rng(cap as u64);
            let mut out = Vec::new();
            for i in 0..5000u64 {
                let key = k(rng.next() % (cap as u64 * 3));
                let v = p.victim(key);
                out.clear();
                let o = p.access(Access::new(key), &mut out);
                match v {
                    Victim::None => assert!(out.is_empty(), "step {i}"),
                    Victim::Block(b) => {
                        assert_eq!(o, Outcome::Miss);
                        assert_eq!(out.iter().map(|e| e.key).collect::<Vec<_>>(), vec![b], "step {i}");
                    }
                    Victim::Unknown => panic!("unknown"),
                }
                if i % 97 == 0 {
                    p.prefetch(&[Access::new(k(rng.next() % (cap as u64 * 3)))], &mut out);
                }
            }
        }
    }

    #[test]
    fn same_seed_same_run_other_seed_other_run() {
        let run = |seed| {
            let mut p = Hyperbolic::new(50, &HyperbolicConfig { seed, ..HyperbolicConfig::default() });
            let mut rng = Rng(3);
            let mut out = Vec::new();
            for _ in 0..5000 {
                p.access(Access::new(k(rng.next() % 200)), &mut out);
            }
            out
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
        assert!(Hyperbolic::check_config(&HyperbolicConfig { seed: 0, ..HyperbolicConfig::default() }).is_err());
    }

    #[test]
    fn metadata_is_as_documented() {
        let fill = |p: &mut Hyperbolic, n: u64| {
            let mut out = Vec::new();
            for b in 0..n {
                p.access(Access::new(k(b)), &mut out);
            }
        };
        for cap in [1_000, 10_000, 100_000, 1 << 20] {
            let mut p = hyp(cap, 64, 0);
            fill(&mut p, cap as u64 * 2);
            let per_block = p.heap_bytes() as f64 / cap as f64;
            assert!((28.0..=32.0).contains(&per_block), "{per_block} bytes per block at {cap}");
        }
        // libcachesim's table: 2^16 buckets until the first evictions.
        let p = hyp(1000, 64, 16);
        assert_eq!(p.heap_bytes(), 24 * 1000 + 4 * 65536);
        for cap in [1_000, 200_000] {
            let mut p = hyp(cap, 64, 16);
            fill(&mut p, cap as u64 * 2);
            let per_block = p.heap_bytes() as f64 / cap as f64;
            assert!((26.0..=32.0).contains(&per_block), "{per_block} bytes per block at {cap}, power {}", p.power);
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(cap in 1usize..9, power in 0u32..5, samples in 1u32..70,
                                   ops in prop::collection::vec(model::op(), 1..300)) {
            model::run(hyp(cap, samples, power), &ops)?;
        }
    }
}
