//! Hyperbolic caching: evict the block of lowest hits per unit of time in the cache among a random sample.
//!
//! **Paper.** A. Blankstein, S. Sen and M. J. Freedman, "Hyperbolic Caching: Flexible Caching for Web
//! Applications", 2017 USENIX Annual Technical Conference (USENIX ATC '17). Each cached item `i` has the priority
//! `p_i = n_i / t_i`, its number of requests since it entered the cache over the time it has spent there. The
//! priorities of all items decay at different rates (hyperbolically), so no data structure keeps them ordered; to
//! evict, the cache samples `S` random items and evicts the one of lowest priority.
//!
//! **Semantics**, as libcachesim 0.3.5's `Hyperbolic` (`Hyperbolic.c` over its chained hash table) defines them,
//! which Blockwell follows draw for draw. Time is the number of demand accesses so far, this one included. A
//! block inserted on a miss gets `n = 1` and its insertion time; a hit adds 1 to `n`. To evict, `samples` blocks
//! are drawn (with repetition) and scored `1e8 · n / age` in `f64` (age = now − insertion time); the first sample
//! of strictly lowest score is evicted.
//!
//! A draw is libcachesim 0.3.5's `hashtable_rand_obj`, over the hash table that also finds the blocks: `2^power`
//! buckets, a block in bucket XXH3-64(8-byte key) mod `2^power`, at the front of its bucket's chain. The generator
//! (Lehmer64, `lehmer.rs`: libCacheSim's `next_rand()`, started at `seed`) names a bucket by the low `power` bits of a
//! draw; an empty bucket costs another draw, and after 33 failed draws in one call the table halves before every
//! further draw. In a non-empty bucket one more draw picks the block at position `draw mod chain length` from the
//! front. Before a block is inserted into a table holding more than `2 · 2^power` blocks, the table doubles.
//! Halving or doubling re-links the old buckets' chains in bucket order, each front to back, into the fronts of
//! the new chains. The table thus tracks the number of resident blocks, whatever `power` it starts at.
//!
//! `n` and the insertion time are kept as libCacheSim keeps them, in 24 and 40 bits. Differences, none reached by
//! realistic runs: `n` stops at 2^23 − 1 (8 388 607 hits) where libCacheSim's signed field wraps to negative, and
//! ages are computed modulo 2^40 where libCacheSim's sign-extended times break after 2^39 requests. A sample scoring
//! at least `1e16` is never chosen in libCacheSim, which fails if all do; Blockwell then evicts the first sample
//! (possible only with prefetched blocks, whose age may be 0).
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
//! | `Default`, `Butt05` | 64 | 0 (auto: the smallest power ≥ 1 with `2^power` ≥ capacity) | `0xdeadbeef` |
//! | `Libcachesim` | 64 | 16 | `0xdeadbeef` |
//!
//! libcachesim 0.3.5's `Hyperbolic` samples 64 and starts its table at `max(12, hashpower − 8)` = 16 bits for
//! the Python binding's default `hashpower=24`. Its generator is one per thread, starting at `0xdeadbeef`: a fresh
//! process (or thread) running one `Hyperbolic` draws what Blockwell draws with the default seed; later caches of
//! the same thread continue the sequence. The same trace and configuration give the same run.
//!
//! **Metadata.** 20 bytes per cached block in three arrays by slot (the 8-byte key; `n` and the insertion time in
//! 8 bytes; the 31-bit chain link with the prefetch flag in its top bit), and 5 bytes per bucket (the chain's
//! first block, its length as a byte). With `hashpower = 0` a full cache has 1–2 buckets per block (fewer if
//! draws ever halve the table): 25–30 bytes per cached block. With `hashpower = 16` the table starts at 65 536
//! buckets (320 KiB however small the cache), halves on the first evictions of a small cache until draws find
//! blocks, and doubles past 2 blocks per bucket: 22.5–30 bytes per cached block once it has adapted. No ghost
//! entries.
//!
//! **Cost.** A lookup hashes the key (XXH3 of 8 bytes) and walks one chain (about one block long). An eviction
//! draws `samples` blocks: per draw one or two 128-bit multiplications, and reads of a bucket, of chain links and
//! of the block's 8 bytes of `n` and time. Generator states are computed ahead and their buckets read in one
//! pass, then the chains, then the blocks, so that the reads of different draws overlap instead of waiting for
//! each other. A pick's position in its chain (`draw mod length`) is taken without a branch on the length and
//! without a division instruction (`lehmer::small_mod`). Halving or doubling the table is O(blocks + buckets):
//! halving happens only while the table is much sparser than the cache, doubling amortizes to O(1) per insertion.
//! No allocation once the arrays have grown to the capacity, except when the table is resized.

use super::{Access, Evicted, Outcome, Policy, Preset, Victim};
use crate::key::BlockKey;
use crate::lehmer::{small_mod, Lehmer64, LIBCACHESIM_SEED, MULT};
use crate::sketch::xxh3_u64;
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
/// The generator's multiplier to the power `k`, modulo 2^128.
const fn mult_pow(k: u32) -> u128 {
    let mut x: u128 = 1;
    let mut i = 0;
    while i < k {
        x = x.wrapping_mul(MULT);
        i += 1;
    }
    x
}

/// The generator's multiplier's inverse modulo 2^128: a state times it is the state before.
const MULT_INVERSE: u128 = {
    // Newton's iteration doubles the correct low bits at every step: 7 steps from 1 bit (an odd number is its
    // own inverse modulo 2) reach 128.
    let mut x: u128 = 1;
    let mut k = 0;
    while k < 7 {
        x = x.wrapping_mul(2u128.wrapping_sub(MULT.wrapping_mul(x)));
        k += 1;
    }
    x
};
/// A recorded chain length meaning "this many or more".
const LONG_CHAIN: u8 = u8::MAX;
/// Top bit of a link: prefetched, not yet accessed on demand.
const PREFETCHED: u32 = 1 << 31;
const NEXT: u32 = !PREFETCHED;
/// A block's `n` and insertion time share 8 bytes: time modulo 2^40 in the low bits, `n` in the top 24.
const TIME_BITS: u32 = 40;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;
/// Largest `n`: libCacheSim's 24-bit signed field's largest value.
const MAX_FREQ: u64 = (1 << 23) - 1;

#[inline(always)]
fn meta(freq: u64, time: u64) -> u64 {
    freq << TIME_BITS | (time & TIME_MASK)
}

/// What one call of `hashtable_rand_obj` found so far.
enum Drawn {
    Block(u32),
    /// The table must halve before the next draw.
    Shrink,
}

/// The Hyperbolic policy. Blocks live in slots addressed by handle − 1 (0: none), in three arrays so that each
/// step reads only what it needs.
#[derive(Clone, Debug)]
pub struct Hyperbolic {
    capacity: usize,
    samples: u32,
    /// Per slot: the packed key.
    keys: Vec<u64>,
    /// Per slot: `n` and the insertion time ([`meta`]).
    metas: Vec<u64>,
    /// Per slot: the next block of its chain (0: none), the prefetch flag in the top bit; of a free slot, the
    /// next free one.
    links: Vec<u32>,
    /// Free list of slots (handle, 0: none), through `links`.
    free: u32,
    len: usize,
    /// First block of each bucket's chain (handle, 0: empty).
    heads: Vec<u32>,
    /// Length of each bucket's chain, [`LONG_CHAIN`] for that many or more (then counted by walking it).
    lens: Vec<u8>,
    power: u32,
    rng: Lehmer64,
    /// Demand accesses so far.
    now: u64,
}

impl Hyperbolic {
    #[inline(always)]
    fn key(&self, h: u32) -> BlockKey {
        BlockKey::from_raw(self.keys[(h - 1) as usize])
    }

    /// The block after `h` on its chain (0: none).
    #[inline(always)]
    fn next(&self, h: u32) -> u32 {
        self.links[(h - 1) as usize] & NEXT
    }

    #[inline(always)]
    fn set_next(&mut self, h: u32, n: u32) {
        let l = &mut self.links[(h - 1) as usize];
        *l = (*l & PREFETCHED) | n;
    }

    #[inline(always)]
    fn prefetched(&self, h: u32) -> bool {
        self.links[(h - 1) as usize] & PREFETCHED != 0
    }

    #[inline(always)]
    fn mask(&self) -> u64 {
        (1u64 << self.power) - 1
    }

    #[inline(always)]
    fn bucket(&self, raw: u64) -> usize {
        (xxh3_u64(raw) & self.mask()) as usize
    }

    #[inline]
    fn find(&self, key: BlockKey) -> Option<u32> {
        let raw = key.raw();
        let mut h = self.heads[self.bucket(raw)];
        while h != 0 {
            if self.keys[(h - 1) as usize] == raw {
                return Some(h);
            }
            h = self.next(h);
        }
        None
    }

    /// Puts `h` at the front of its bucket's chain.
    #[inline]
    fn link(&mut self, h: u32) {
        let b = self.bucket(self.keys[(h - 1) as usize]);
        let head = self.heads[b];
        self.set_next(h, head);
        self.heads[b] = h;
        self.lens[b] = self.lens[b].saturating_add(1);
    }

    /// Length of the chain starting at `head`, of recorded length `len`.
    #[inline(always)]
    fn chain_len(&self, head: u32, len: u8) -> u64 {
        if len != LONG_CHAIN {
            return len as u64;
        }
        let (mut n, mut h) = (0, head);
        while h != 0 {
            n += 1;
            h = self.next(h);
        }
        n
    }

    /// Takes `h` out of its bucket's chain, keeping the others' order.
    #[inline]
    fn unlink(&mut self, h: u32) {
        let b = self.bucket(self.keys[(h - 1) as usize]);
        let next = self.next(h);
        if self.heads[b] == h {
            self.heads[b] = next;
        } else {
            let mut cur = self.heads[b];
            while cur != 0 {
                let n = self.next(cur);
                if n == h {
                    self.set_next(cur, next);
                    break;
                }
                cur = n;
            }
            debug_assert!(cur != 0, "block not on its chain");
        }
        self.lens[b] = match self.lens[b] {
            LONG_CHAIN => self.chain_len(self.heads[b], LONG_CHAIN).min(LONG_CHAIN as u64) as u8,
            n => n - 1,
        };
    }

    /// Stores a block (on no chain) and returns its handle.
    #[inline]
    fn alloc(&mut self, raw: u64, meta: u64, prefetched: bool) -> u32 {
        self.len += 1;
        let link = if prefetched { PREFETCHED } else { 0 };
        if self.free != 0 {
            let h = self.free;
            let i = (h - 1) as usize;
            self.free = self.links[i];
            (self.keys[i], self.metas[i], self.links[i]) = (raw, meta, link);
            return h;
        }
        self.keys.push(raw);
        self.metas.push(meta);
        self.links.push(link);
        self.keys.len() as u32
    }

    #[inline]
    fn release(&mut self, h: u32) {
        self.links[(h - 1) as usize] = self.free;
        self.free = h;
        self.len -= 1;
    }

    /// Rebuilds the table with `2^power` buckets: the old chains in bucket order, each front to back, pushed to the
    /// fronts of the new ones (libcachesim's rehash, for doubling and halving alike).
    fn resize(&mut self, power: u32) {
        let old = std::mem::replace(&mut self.heads, vec![0; 1 << power]);
        self.lens = vec![0; 1 << power];
        self.power = power;
        for &head in &old {
            let mut h = head;
            while h != 0 {
                let next = self.next(h);
                self.link(h);
                h = next;
            }
        }
    }

    /// The block at position `pick mod length` of the chain starting at `head`, of recorded length `len`.
    #[inline(always)]
    fn nth(&self, head: u32, pick: u64, len: u8) -> u32 {
        if len == 1 {
            return head;
        }
        let i = if len != LONG_CHAIN { small_mod(pick, len) } else { pick % self.chain_len(head, len) };
        let mut h = head;
        for _ in 0..i {
            h = self.next(h);
        }
        h
    }

    /// Draws of one `hashtable_rand_obj` call, `failed` draws having failed so far: the block found, or
    /// [`Drawn::Shrink`] when the table must halve before the next draw. The table is not empty.
    #[inline]
    fn draw(&self, rng: &mut Lehmer64, failed: &mut u32) -> Drawn {
        let mask = self.mask();
        loop {
            let b = (rng.next() & mask) as usize;
            let head = self.heads[b];
            if head != 0 {
                let pick = rng.next();
                return Drawn::Block(self.nth(head, pick, self.lens[b]));
            }
            *failed += 1;
            if *failed > DRAWS_BEFORE_SHRINK && self.power > 0 {
                return Drawn::Shrink;
            }
        }
    }

    /// The blocks of `out.len()` (at most 64) consecutive `hashtable_rand_obj` calls, drawing from `rng`, as long
    /// as none of them would halve the table: returns how many were drawn; `rng` is left after the last of them.
    ///
    /// Generator states are computed ahead in groups and the buckets they name read in one pass, then consumed in
    /// order without a branch on the buckets' emptiness (a coin flip at usual loads): each step writes a pick,
    /// kept only if its bucket holds blocks, and moves on by one state or, past a pick, two. The chains are then
    /// walked one step at a time for all picks together. Within each phase the reads do not depend on each other,
    /// so they overlap. States computed ahead and not consumed are dropped.
    #[inline]
    fn draw_many(&self, rng: &mut Lehmer64, out: &mut [u32]) -> usize {
        const AHEAD: usize = 32;
        const CHAIN: usize = AHEAD / 4;
        // Four chains of CHAIN states each, interleaved so that they do not wait for each other: each starts with
        // a multiplication by a power of the multiplier, then goes on by the multiplier itself (64 bits: cheaper).
        // Only the chains' first states are kept: state `k` of a group is `x[k / CHAIN] · MULT^(k mod CHAIN)`.
        const STARTS: [u128; 4] = [mult_pow(1), mult_pow(9), mult_pow(17), mult_pow(25)];
        const POWS: [u128; CHAIN] =
            [mult_pow(0), mult_pow(1), mult_pow(2), mult_pow(3), mult_pow(4), mult_pow(5), mult_pow(6), mult_pow(7)];
        let state = |x: &[u128; 4], k: usize| x[k / CHAIN].wrapping_mul(POWS[k % CHAIN]);
        let n = out.len().min(64);
        if n == 0 {
            return 0;
        }
        let mask = self.mask();
        let (hs, ls) = (&self.heads[..=mask as usize], &self.lens[..=mask as usize]);
        // The current group: its chains' first states, each state's draw (its high half), and the first block and
        // recorded length of the chain of the bucket the draw names.
        let (mut x, mut draws) = ([0u128; 4], [0u64; AHEAD]);
        let (mut heads, mut lens) = ([0u32; AHEAD], [0u8; AHEAD]);
        // Per sample: the chain's first block, the draw that picks in it, the chain's recorded length.
        let (mut pick_heads, mut pick_draws, mut pick_lens) = ([0u32; 64], [0u64; 64], [0u8; 64]);
        // A sample's draws fail at most this many times in a row before the table must halve.
        let patience = if self.power > 0 { DRAWS_BEFORE_SHRINK } else { u32::MAX };
        let (mut i, mut drawn, mut failed) = (AHEAD, 0usize, 0u32);
        let (mut base, mut fresh) = (rng.0, true);
        while drawn < n {
            if i + 1 >= AHEAD {
                // A draw and the pick after it must both be in the group: start a new one after the last state
                // consumed.
                if !fresh {
                    base = state(&x, i - 1);
                }
                fresh = false;
                x = STARTS.map(|m| base.wrapping_mul(m));
                let mut y = x;
                for j in 0..CHAIN {
                    for (c, y) in y.iter_mut().enumerate() {
                        draws[c * CHAIN + j] = (*y >> 64) as u64;
                        *y = y.wrapping_mul(MULT);
                    }
                }
                for k in 0..AHEAD {
                    let b = (draws[k] & mask) as usize;
                    heads[k] = hs[b];
                    lens[k] = ls[b];
                }
                i = 0;
            }
            let full = usize::from(heads[i] != 0);
            pick_heads[drawn] = heads[i];
            pick_draws[drawn] = draws[i + 1];
            pick_lens[drawn] = lens[i];
            i += 1 + full;
            drawn += full;
            failed = if full != 0 { 0 } else { failed + 1 };
            if failed > patience {
                // Back to before this sample's first draw: the generator's steps undone.
                let mut s = state(&x, i - 1);
                for _ in 0..failed {
                    s = s.wrapping_mul(MULT_INVERSE);
                }
                rng.0 = s;
                self.walk(&pick_heads[..drawn], &pick_draws[..drawn], &pick_lens[..drawn], out);
                return drawn;
            }
        }
        rng.0 = state(&x, i - 1);
        self.walk(&pick_heads[..n], &pick_draws[..n], &pick_lens[..n], out);
        n
    }

    /// The blocks picked by `draws` in the chains starting at `heads`, of recorded lengths `lens`, into `out`: the
    /// chains are walked one step at a time for all picks together, so that the reads of different chains overlap.
    #[inline(always)]
    fn walk(&self, heads: &[u32], draws: &[u64], lens: &[u8], out: &mut [u32]) {
        let mut walking = [(0u32, 0u32); 64];
        let mut w = 0;
        for (j, ((o, &head), (&pick, &len))) in out.iter_mut().zip(heads).zip(draws.iter().zip(lens)).enumerate() {
            // One remainder for every length rather than a branch on it (lengths 1, 2 and more are about equally
            // likely at usual loads, so a branch would be mispredicted half the time).
            let steps = if len != LONG_CHAIN { small_mod(pick, len) } else { pick % self.chain_len(head, len) };
            *o = head;
            walking[w] = (j as u32, steps as u32);
            w += usize::from(steps != 0);
        }
        while w > 0 {
            let mut left = 0;
            for k in 0..w {
                let (j, steps) = walking[k];
                let o = &mut out[j as usize];
                *o = self.next(*o);
                walking[left] = (j, steps - 1);
                left += usize::from(steps > 1);
            }
            w = left;
        }
    }

    /// Whether `h` scores strictly below `best` at time `now` (libcachesim's `best_candidate_score > score`).
    #[inline(always)]
    fn consider(&self, h: u32, now: u64, best: &mut (u32, f64)) {
        let m = self.metas[(h - 1) as usize];
        let age = (now.wrapping_sub(m) & TIME_MASK) as f64;
        let score = 1.0e8 * (m >> TIME_BITS) as f64 / age;
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
        let mut batch = [0u32; 64];
        let mut left = self.samples as usize;
        while left > 0 {
            let n = left.min(batch.len());
            // All draws first, then all scores: the reads of the blocks do not depend on each other, so they
            // overlap.
            let fast = self.draw_many(rng, &mut batch[..n]);
            for b in &mut batch[fast..n] {
                let mut failed = 0;
                *b = loop {
                    match self.draw(rng, &mut failed) {
                        Drawn::Block(h) => break h,
                        Drawn::Shrink => self.resize(self.power - 1),
                    }
                };
            }
            if first == 0 {
                first = batch[0];
            }
            for &h in &batch[..n] {
                self.consider(h, now, &mut best);
            }
            left -= n;
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
        let mut batch = [0u32; 64];
        let mut left = self.samples as usize;
        while left > 0 {
            let n = left.min(batch.len());
            if self.draw_many(rng, &mut batch[..n]) < n {
                return Err(());
            }
            if first == 0 {
                first = batch[0];
            }
            for &h in &batch[..n] {
                self.consider(h, now, &mut best);
            }
            left -= n;
        }
        Ok(Some(if best.0 != 0 { best.0 } else { first }))
    }

    #[inline]
    fn evict_one(&mut self, out: &mut Vec<Evicted>) {
        let mut rng = self.rng;
        let Some(h) = self.choose(&mut rng, self.now) else { return };
        self.rng = rng;
        self.unlink(h);
        let evicted = Evicted { key: self.key(h), unused_prefetch: self.prefetched(h) };
        self.release(h);
        out.push(evicted);
    }

    #[inline]
    fn insert(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) {
        while self.len >= self.capacity {
            self.evict_one(out);
        }
        if self.len > (2usize << self.power) && self.power < MAX_POWER {
            self.resize(self.power + 1);
        }
        let h = self.alloc(key.raw(), meta(1, self.now), prefetched);
        self.link(h);
    }

    /// A demand hit on `h` (time already advanced).
    #[inline(always)]
    fn on_hit(&mut self, h: u32) -> Outcome {
        let i = (h - 1) as usize;
        if self.links[i] & PREFETCHED != 0 {
            self.links[i] &= NEXT;
            self.metas[i] = meta(1, self.now);
            Outcome::PrefetchHit
        } else {
            let m = self.metas[i];
            if m >> TIME_BITS < MAX_FREQ {
                self.metas[i] = m + (1 << TIME_BITS);
            }
            Outcome::Hit
        }
    }

    /// Resident blocks with their request count and insertion time (modulo 2^40), in slot order (for tests and
    /// debugging).
    pub fn entries(&self) -> Vec<(BlockKey, u32, u64)> {
        let mut v = Vec::with_capacity(self.len);
        for &head in &self.heads {
            let mut h = head;
            while h != 0 {
                let m = self.metas[(h - 1) as usize];
                v.push((h, self.key(h), (m >> TIME_BITS) as u32, m & TIME_MASK));
                h = self.next(h);
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
            Preset::Default | Preset::Butt05 => HyperbolicConfig::default(),
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
            keys: Vec::with_capacity(capacity),
            metas: Vec::with_capacity(capacity),
            links: Vec::with_capacity(capacity),
            free: 0,
            len: 0,
            heads: vec![0; 1 << power],
            lens: vec![0; 1 << power],
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
        if self.heads.len() != 1 << self.power || self.lens.len() != self.heads.len() {
            return Err(format!("{} heads, {} lengths at power {}", self.heads.len(), self.lens.len(), self.power));
        }
        let slots = self.keys.len();
        if self.metas.len() != slots || self.links.len() != slots {
            return Err(format!("{slots} keys, {} metas, {} links", self.metas.len(), self.links.len()));
        }
        let mut n = 0usize;
        for (b, &head) in self.heads.iter().enumerate() {
            let mut chain = 0u64;
            let mut h = head;
            while h != 0 {
                n += 1;
                if n > self.len {
                    return Err(format!("more blocks on the chains than len {} (cycle?)", self.len));
                }
                let key = self.key(h);
                if xxh3_u64(key.raw()) & mask != b as u64 {
                    return Err(format!("key {key} in bucket {b}, not its own"));
                }
                let m = self.metas[(h - 1) as usize];
                if m >> TIME_BITS == 0 {
                    return Err(format!("key {key}: no request counted"));
                }
                if self.now.wrapping_sub(m) & TIME_MASK > self.now {
                    return Err(format!("key {key}: inserted after now"));
                }
                h = self.next(h);
                chain += 1;
            }
            if self.lens[b] as u64 != chain.min(LONG_CHAIN as u64) {
                return Err(format!("bucket {b}: length {} recorded, {chain} linked", self.lens[b]));
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
            if free > slots {
                return Err("free list cycles".into());
            }
            h = self.links[(h - 1) as usize];
        }
        if free + self.len != slots {
            return Err(format!("{free} free + {} live != {slots} slots", self.len));
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.keys.capacity() * 8
            + self.metas.capacity() * 8
            + self.links.capacity() * 4
            + self.heads.capacity() * 4
            + self.lens.capacity()
    }

    fn victim(&self, incoming: BlockKey) -> Victim {
        if self.len < self.capacity || self.contains(incoming) {
            return Victim::None;
        }
        let now = self.now + 1;
        match self.choose_unchanged(&mut self.rng.clone(), now) {
            Ok(Some(h)) => Victim::Block(self.key(h)),
            Ok(None) => Victim::None,
            // The draws would halve the table (rare: only while it is much sparser than the cache): on a copy.
            Err(()) => {
                let mut copy = self.clone();
                let mut rng = copy.rng;
                match copy.choose(&mut rng, now) {
                    Some(h) => Victim::Block(copy.key(h)),
                    None => Victim::None,
                }
            }
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
                        c.push(p.key(h).raw());
                        h = p.next(h);
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

    /// One `hashtable_rand_obj` call, halving the table when it must.
    fn draw_resizing(p: &mut Hyperbolic, rng: &mut Lehmer64) -> u32 {
        let mut failed = 0;
        loop {
            match p.draw(rng, &mut failed) {
                Drawn::Block(h) => return h,
                Drawn::Shrink => p.resize(p.power - 1),
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
                let h = draw_resizing(&mut p, &mut rng);
                assert_eq!(p.key(h).raw(), t.rand_obj(&mut rng2), "cap {cap} power {power} draw {i}");
                assert_eq!(rng, rng2);
                assert_eq!(p.power, t.power);
            }
            p.validate().unwrap();
            assert_eq!(Table::of(&p).chains, t.chains);
        }
    }

    #[test]
    fn the_inverse_multiplier_undoes_a_draw() {
        assert_eq!(MULT.wrapping_mul(MULT_INVERSE), 1);
        let mut r = Lehmer64::new(LIBCACHESIM_SEED);
        r.next();
        assert_eq!(r.0.wrapping_mul(MULT_INVERSE), LIBCACHESIM_SEED as u128);
    }

    #[test]
    fn drawing_many_at_once_is_drawing_one_at_a_time() {
        for (cap, power) in [(5, 16), (50, 6), (300, 9), (7, 3), (3, 1), (1000, 5), (64, 12)] {
            let mut p = hyp(cap, 8, power);
            for b in 0..cap as u64 {
                acc(&mut p, b * 7919);
            }
            let mut rng = p.rng;
            for n in (1..=64).cycle().take(300) {
                let mut many = vec![0u32; n];
                let mut fast = rng;
                let got = p.draw_many(&mut fast, &mut many);
                let mut slow = rng;
                for (j, &h) in many[..got].iter().enumerate() {
                    let Drawn::Block(x) = p.draw(&mut slow, &mut 0) else { panic!("sample {j} shrinks") };
                    assert_eq!(h, x, "cap {cap} power {power} sample {j} of {n}");
                }
                assert_eq!(fast, slow, "the generator is left after the last sample drawn");
                if got < n {
                    let mut again = slow;
                    assert!(matches!(p.draw(&mut again, &mut 0), Drawn::Shrink), "stopped only before a halving");
                    draw_resizing(&mut p, &mut slow);
                }
                rng = slow;
            }
        }
    }

    #[test]
    fn chains_longer_than_255_blocks_are_counted_by_walking() {
        // 300 keys in one bucket of a 256-bucket table (doubling stops at 2^8: 300 <= 2 · 2^8).
        let keys: Vec<u64> = (0..).filter(|&b| xxh3_u64(b) & 255 == 7).take(300).collect();
        let mut p = hyp(300, 64, 8);
        for &b in &keys {
            acc(&mut p, b);
        }
        assert_eq!((p.hashpower(), p.lens[7], p.chain_len(p.heads[7], p.lens[7])), (8, LONG_CHAIN, 300));
        let mut t = Table::of(&p);
        let (mut rng, mut rng2) = (p.rng, p.rng);
        for _ in 0..200 {
            let h = draw_resizing(&mut p, &mut rng);
            assert_eq!(p.key(h).raw(), t.rand_obj(&mut rng2));
            assert_eq!(p.power, t.power);
        }
        for &b in &keys[..50] {
            assert!(p.remove(k(b)));
            p.validate().unwrap();
        }
        let b = p.bucket(keys[60]);
        assert_eq!((p.lens[b], p.chain_len(p.heads[b], p.lens[b])), (250, 250));
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
        let want = q.key(h);
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
            chain.push(q.key(h).block());
            h = q.next(h);
        }
        assert_eq!(chain, vec![keys[5], keys[0], keys[1], keys[2], keys[3], keys[4]]);
    }

    #[test]
    fn counts_stop_at_24_bits_and_ages_are_modulo_2_40() {
        let mut p = hyp(2, 64, 0);
        acc(&mut p, 1);
        p.metas[0] = meta(MAX_FREQ, 1);
        assert_eq!(acc(&mut p, 1).0, Outcome::Hit);
        assert_eq!(p.entries()[0].1 as u64, MAX_FREQ, "saturated");
        // Time past 2^40: a block inserted at 2^40 − 1 is 2 old at 2^40 + 1.
        p.now = (1 << 40) - 2;
        acc(&mut p, 2);
        p.now = 1 << 40;
        let mut best = (0, 1.0e16);
        p.consider(p.find(k(2)).unwrap(), p.now + 1, &mut best);
        assert_eq!(best.1, 1.0e8 / 2.0);
        p.validate().unwrap();
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
            assert!((25.0..=30.0).contains(&per_block), "{per_block} bytes per block at {cap}");
        }
        // libcachesim's table: 2^16 buckets until the first evictions.
        let p = hyp(1000, 64, 16);
        assert_eq!(p.heap_bytes(), 20 * 1000 + 5 * 65536);
        for cap in [1_000, 200_000] {
            let mut p = hyp(cap, 64, 16);
            fill(&mut p, cap as u64 * 2);
            let per_block = p.heap_bytes() as f64 / cap as f64;
            assert!((22.5..=30.0).contains(&per_block), "{per_block} bytes per block at {cap}, power {}", p.power);
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
