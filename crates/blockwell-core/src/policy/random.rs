//! RANDOM: evict a block chosen at random.
//!
//! **Paper.** L. A. Belady, "A study of replacement algorithms for a virtual-storage computer", IBM Systems
//! Journal 5(2):78–101, 1966, where RAND (each resident page equally likely to go) is the baseline every other
//! algorithm is measured against. It keeps no state per block beyond residency, so it cannot be fooled by a
//! pattern; nor can it exploit one.
//!
//! **Prefetch adaptation (seed `001_*` §4, in its spirit; the seed does not study RANDOM).** A prefetched block is
//! inserted as a missed block is, flagged *not yet accessed*. Its first demand access clears the flag and returns
//! [`Outcome::PrefetchHit`] (RANDOM keeps no other state, so that is the whole of the first reference). If it is
//! evicted with the flag still set, the eviction is reported with `unused_prefetch: true`. No ghost list.
//!
//! **Parameters** ([`RandomConfig`]):
//!
//! | preset | `seed` | `libcachesim_replay` |
//! |---|---|---|
//! | `Default` | 3735928559 (`0xdeadbeef`) | false |
//! | `Libcachesim` | 3735928559 | true |
//! | `Butt05` | 3735928559 | false (seed `001_*` has no RANDOM) |
//!
//! The generator is D. H. Lehmer's multiplicative one with a 128-bit state (multiplier `0xda942042e4dd58b5`, the
//! high 64 bits of the state as output), the one libcachesim 0.3.5 draws from; the same trace and configuration
//! always give the same victims, and nothing else (no clock, no global state) goes in.
//!
//! - `libcachesim_replay: false` (uniform): every resident block is equally likely. The state starts from
//!   SplitMix64 of `seed` and `seed + 1`, made odd; a victim is the block at position ⌊r·n / 2⁶⁴⌋ of a dense
//!   array of the n resident blocks (r the next output), which a swap with the last entry keeps dense.
//! - `libcachesim_replay: true`: victims are picked exactly as libcachesim 0.3.5's `Random` picks them, miss for
//!   miss. Its `hashtable_rand_obj` draws buckets of its chained hash table (key hash: XXH3-64 of the 8-byte
//!   object id, 2¹⁶ buckets at first, `Random`'s `hashpower` of the Python class's 24 minus 8) until one is not
//!   empty, shrinking the table to half after the 33rd empty draw and at every one after it, then draws the
//!   victim's position in that bucket's chain (output modulo the chain length). The table doubles when an insert
//!   finds more than 2 keys per bucket; every rehash (growing or shrinking) visits the old buckets in order and
//!   pushes each chain's keys, head first, onto the heads of the new chains, as libCacheSim does. The state starts
//!   at `seed` itself (libCacheSim's `set_rand_seed`); libcachesim's per-thread state starts at `0xdeadbeef`, the
//!   default. The choice is not uniform: a block alone in its bucket is likelier to go than one sharing it.
//!
//! `seed` 0 is rejected with `libcachesim_replay` (libCacheSim's generator then returns 0 for ever).
//!
//! **Metadata.** Uniform: the dense array, 12 bytes per cached block (the key as two `u32` and the prefetch flag),
//! and a position index of 4 bytes + 1 tag byte per bucket, reserved for twice the blocks so that churn never makes
//! it grow: 11.4–22.9 bytes per block depending on where the size falls between powers of two: 23.4–34.9 bytes per
//! cached block. Replay: the chained table itself, 64 bytes per bucket holding up to 7 keys of its chain in place
//! with their prefetch flags (a longer chain, rare at 1 to 2 keys per bucket, moves to a vector of 16 bytes per
//! key); the table doubles when it holds more than 2 keys per bucket, so past its initial 2¹⁶ buckets (4 MiB,
//! whatever the capacity, per instance: per set under `--associativity`) there are 1/2 to 1 bucket per block
//! (fewer after a rare shrink): 32–64 bytes per cached block, or the 4 MiB floor below 131072 blocks. No ghosts
//! either way.
//!
//! **Cost.** Uniform: O(1) per hit, insert and eviction (an eviction updates the moved block's index entry). Replay:
//! a hit or insert hashes the key and reads one 64-byte bucket; an eviction draws until a bucket is not empty
//! (expected 1/load draws; the first two are told apart without a branch) and removes a key from that bucket; a
//! resize rehashes every block, amortized O(1) per insert. The draws are known in advance, so every miss starts
//! loading the buckets of the next eviction's first four draws, and the replay hints each request's bucket 16
//! requests ahead ([`Policy::hint`]): the loads overlap the requests in between. [`Policy::victim`] copies the
//! generator and repeats the draw; in replay mode, if the draw would shrink the table it runs on a copy of the
//! table (O(blocks)). No allocation per access outside resizes and chains longer than 7.

use super::{prefetch_missing, Access, Evicted, Outcome, Policy, Preset, Victim};
use crate::arena::PackedKey;
use crate::cacheline::prefetch;
use crate::key::BlockKey;
use crate::lehmer::{Lehmer64, MULT};
use crate::sketch::xxh3_u64;
use hashbrown::HashTable;
use serde::{Deserialize, Serialize};

/// libcachesim's initial generator state (`g_lehmer64_state`'s initial value in 0.3.5).
pub const LIBCACHESIM_SEED: u64 = 0xdead_beef;

/// RANDOM's parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct RandomConfig {
    /// Seeds the generator: the same trace and seed give the same victims.
    pub seed: u64,
    /// Pick victims as libcachesim 0.3.5's `Random` does (random bucket of its hash table), for exact comparisons.
    pub libcachesim_replay: bool,
}

impl Default for RandomConfig {
    fn default() -> Self {
        RandomConfig { seed: LIBCACHESIM_SEED, libcachesim_replay: false }
    }
}

/// libCacheSim's `set_rand_seed`: the state is `seed`.
fn libcachesim_rng(seed: u64) -> Lehmer64 {
    Lehmer64::new(seed)
}

/// A well-spread odd state from any seed (Lemire's `lehmer64_seed`, made odd).
fn seeded_rng(seed: u64) -> Lehmer64 {
    Lehmer64::from_state(((splitmix64(seed) as u128) << 64 | splitmix64(seed.wrapping_add(1)) as u128) | 1)
}

fn splitmix64(x: u64) -> u64 {
    let z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A resident block of the uniform store.
#[derive(Clone, Copy, Debug)]
struct Slot {
    key: PackedKey,
    prefetched: bool,
}

/// Uniform mode: the resident blocks in a dense array, and an index from key to position.
#[derive(Clone, Debug)]
struct Dense {
    slots: Vec<Slot>,
    index: HashTable<u32>,
}

impl Dense {
    fn new(capacity: usize) -> Self {
        // Twice the entries, so that tombstones never force a resize (see `KeyIndex::with_capacity`).
        Dense { slots: Vec::with_capacity(capacity), index: HashTable::with_capacity(capacity.saturating_mul(2)) }
    }

    #[inline]
    fn get(&self, key: BlockKey) -> Option<u32> {
        let slots = &self.slots;
        self.index.find(key.hash64(), |&i| slots[i as usize].key.get() == key).copied()
    }

    #[inline]
    fn insert(&mut self, key: BlockKey, prefetched: bool) {
        let i = self.slots.len() as u32;
        self.slots.push(Slot { key: PackedKey::new(key), prefetched });
        let slots = &self.slots;
        self.index.insert_unique(key.hash64(), i, |&j| slots[j as usize].key.get().hash64());
    }

    /// Removes the block at position `i`; the last block takes its place.
    #[inline]
    fn remove_at(&mut self, i: u32) -> Slot {
        let gone = self.slots[i as usize];
        if let Ok(e) = self.index.find_entry(gone.key.get().hash64(), |&j| j == i) {
            e.remove();
        }
        let last = (self.slots.len() - 1) as u32;
        self.slots.swap_remove(i as usize);
        if i != last {
            let moved = self.slots[i as usize].key.get();
            if let Some(j) = self.index.find_mut(moved.hash64(), |&j| j == last) {
                *j = i;
            }
        }
        gone
    }

    fn heap_bytes(&self) -> usize {
        let buckets = if self.index.capacity() == 0 { 0 } else { (self.index.capacity() * 8 / 7).next_power_of_two() };
        self.slots.capacity() * std::mem::size_of::<Slot>() + buckets * 5
    }
}

/// How many of the generator's next draws a miss starts loading the buckets of (see `Chained::warm`).
const WARM_DRAWS: usize = 4;

/// Keys a bucket of the replay store holds in place; a longer chain moves to the spill area.
const INLINE: usize = 7;

/// A bucket of the replay store: its chain, tail first (`keys[len - 1]` is the head), and in `meta` the chain's
/// length (low 32 bits) and the prefetch flags of the keys held in place (bit 32 + position). A chain longer than
/// [`INLINE`] lives in the spill area, `keys[0]` naming its entry. 64 bytes: one cache line.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C, align(64))]
struct Bucket {
    keys: [u64; INLINE],
    meta: u64,
}

impl Bucket {
    #[inline]
    fn len(&self) -> usize {
        self.meta as u32 as usize
    }

    #[inline]
    fn spilled(&self) -> bool {
        self.len() > INLINE
    }

    #[inline]
    fn flag(&self, j: usize) -> bool {
        self.meta & (1 << (32 + j)) != 0
    }
}

/// Replay mode: libCacheSim's chained hash table (`chainedHashTableV2.c` in libcachesim 0.3.5), which is both the
/// index and what victims are drawn from. Only the order of each chain matters to the draws; where the keys live
/// is Blockwell's: a chain of up to [`INLINE`] keys is held in its 64-byte bucket (one cache line), so that a
/// lookup, a draw and the removal of the drawn key each read one line; the few longer chains (under 0.5 % of
/// the buckets even at 2 keys per bucket, just before the table doubles) move to a vector of their own.
#[derive(Clone, Debug)]
struct Chained {
    buckets: Vec<Bucket>,
    /// Chains longer than [`INLINE`], tail first, with their prefetch flags.
    spill: Vec<Vec<(u64, bool)>>,
    /// Unused entries of `spill` (emptied, their allocations kept).
    spill_free: Vec<usize>,
    power: u32,
    /// 2^power − 1, kept rather than derived: every lookup and draw masks with it.
    mask: u64,
    len: usize,
}

impl Chained {
    /// `Random_init`'s `hashpower`: the Python class's default 24, minus 8.
    const INITIAL_POWER: u32 = 16;

    fn new() -> Self {
        Chained::with_power(Self::INITIAL_POWER)
    }

    fn with_power(power: u32) -> Self {
        Chained {
            buckets: vec![Bucket::default(); 1 << power],
            spill: Vec::new(),
            spill_free: Vec::new(),
            power,
            mask: (1u64 << power) - 1,
            len: 0,
        }
    }

    #[inline]
    fn bucket_of_hash(&self, hash: u64) -> usize {
        (hash & self.mask) as usize
    }

    #[inline]
    fn bucket_of(&self, key: BlockKey) -> usize {
        self.bucket_of_hash(xxh3_u64(key.raw()))
    }

    /// The length of chain `b`.
    #[inline]
    fn chain_len(&self, b: usize) -> usize {
        self.buckets[b].len()
    }

    /// Chain `b`, tail first, with each key's prefetch flag.
    fn chain(&self, b: usize) -> Vec<(u64, bool)> {
        let bk = &self.buckets[b];
        if bk.spilled() {
            self.spill[bk.keys[0] as usize].clone()
        } else {
            (0..bk.len()).map(|j| (bk.keys[j], bk.flag(j))).collect()
        }
    }

    /// The position (tail first) of `key` in chain `b`.
    #[inline]
    fn find(&self, b: usize, key: BlockKey) -> Option<usize> {
        let bk = &self.buckets[b];
        let raw = key.raw();
        let n = bk.len();
        if n <= INLINE {
            // The keys of a chain differ: at most one bit is set.
            // The first four without a branch; the others only in the few chains that long.
            let mut hits = 0u32;
            for j in 0..4 {
                hits |= ((bk.keys[j] == raw) as u32) << j;
            }
            if n > 4 {
                for j in 4..INLINE {
                    hits |= ((bk.keys[j] == raw) as u32) << j;
                }
            }
            let hits = hits & ((1 << n) - 1);
            return if hits == 0 { None } else { Some(hits.trailing_zeros() as usize) };
        }
        self.spill[bk.keys[0] as usize].iter().position(|&(k, _)| k == raw)
    }

    /// Where `key` is: its chain and its position there (tail first).
    #[inline]
    fn get(&self, key: BlockKey) -> Option<(usize, usize)> {
        let b = self.bucket_of(key);
        self.find(b, key).map(|j| (b, j))
    }

    /// The key at position `j` (tail first) of chain `b`.
    #[inline]
    fn key_at(&self, b: usize, j: usize) -> BlockKey {
        let bk = &self.buckets[b];
        BlockKey::from_raw(if bk.spilled() { self.spill[bk.keys[0] as usize][j].0 } else { bk.keys[j] })
    }

    /// Reads and clears the prefetch flag at position `j` of chain `b`.
    #[inline]
    fn take_prefetched(&mut self, b: usize, j: usize) -> bool {
        let bk = &mut self.buckets[b];
        if bk.spilled() {
            return std::mem::take(&mut self.spill[bk.keys[0] as usize][j].1);
        }
        let was = bk.flag(j);
        bk.meta &= !(1 << (32 + j));
        was
    }

    fn alloc_spill(&mut self) -> usize {
        self.spill_free.pop().unwrap_or_else(|| {
            self.spill.push(Vec::new());
            self.spill.len() - 1
        })
    }

    /// Pushes `key` onto the head of chain `b`.
    #[inline(always)]
    fn push(&mut self, b: usize, key: u64, prefetched: bool) {
        let n = self.buckets[b].len();
        if n < INLINE {
            let bk = &mut self.buckets[b];
            bk.keys[n] = key;
            bk.meta = (bk.meta + 1) | ((prefetched as u64) << (32 + n));
            self.len += 1;
        } else {
            self.push_spilled(b, key, prefetched);
        }
    }

    /// [`Chained::push`] onto a chain that is, or becomes, longer than [`INLINE`].
    #[cold]
    #[inline(never)]
    fn push_spilled(&mut self, b: usize, key: u64, prefetched: bool) {
        let n = self.buckets[b].len();
        if n == INLINE {
            let chain = self.chain(b);
            let at = self.alloc_spill();
            let v = &mut self.spill[at];
            v.extend(chain);
            v.push((key, prefetched));
            let mut keys = [0; INLINE];
            keys[0] = at as u64;
            self.buckets[b] = Bucket { keys, meta: (INLINE + 1) as u64 };
        } else {
            let bk = &mut self.buckets[b];
            self.spill[bk.keys[0] as usize].push((key, prefetched));
            bk.meta += 1;
        }
        self.len += 1;
    }

    /// Removes position `j` (tail first) of chain `b`; returns its key and prefetch flag.
    #[inline(always)]
    fn remove_at(&mut self, b: usize, j: usize) -> (BlockKey, bool) {
        let n = self.buckets[b].len();
        if n <= INLINE {
            self.len -= 1;
            let bk = &mut self.buckets[b];
            let (key, was) = (bk.keys[j], bk.flag(j));
            // The keys above `j` move down one (what lies past the chain's length is never read).
            let k = bk.keys;
            for i in 0..INLINE - 1 {
                bk.keys[i] = if i >= j { k[i + 1] } else { k[i] };
            }
            let flags = bk.meta >> 32;
            let below = (1u64 << j) - 1;
            bk.meta = (n as u64 - 1) | (((flags & below) | ((flags >> 1) & !below)) << 32);
            return (BlockKey::from_raw(key), was);
        }
        self.remove_spilled(b, j)
    }

    /// [`Chained::remove_at`] from a chain longer than [`INLINE`].
    #[cold]
    #[inline(never)]
    fn remove_spilled(&mut self, b: usize, j: usize) -> (BlockKey, bool) {
        let n = self.buckets[b].len();
        self.len -= 1;
        let at = self.buckets[b].keys[0] as usize;
        let (key, was) = self.spill[at].remove(j);
        if n - 1 == INLINE {
            let mut bk = Bucket { keys: [0; INLINE], meta: INLINE as u64 };
            for (i, &(k, f)) in self.spill[at].iter().enumerate() {
                bk.keys[i] = k;
                bk.meta |= (f as u64) << (32 + i);
            }
            self.buckets[b] = bk;
            self.spill[at].clear();
            self.spill_free.push(at);
        } else {
            self.buckets[b].meta -= 1;
        }
        (BlockKey::from_raw(key), was)
    }

    /// Rebuilds the table with 2^power buckets as libCacheSim's `_copy_entries` does: old buckets in order, each
    /// chain from its head, every key pushed onto the head of its new chain.
    fn rehash(&mut self, power: u32) {
        let old = std::mem::replace(self, Chained::with_power(power));
        for b in 0..old.buckets.len() {
            for &(key, prefetched) in old.chain(b).iter().rev() {
                let nb = self.bucket_of(BlockKey::from_raw(key));
                self.push(nb, key, prefetched);
            }
        }
    }

    /// `chained_hashtable_insert_v2`: grow first if there are more than 2 keys per bucket.
    #[inline]
    fn insert_hashed(&mut self, key: BlockKey, hash: u64, prefetched: bool) {
        if self.len > (2usize << self.power) {
            self.rehash(self.power + 1);
        }
        self.push(self.bucket_of_hash(hash), key.raw(), prefetched);
    }

    #[inline]
    fn insert(&mut self, key: BlockKey, prefetched: bool) {
        self.insert_hashed(key, xxh3_u64(key.raw()), prefetched);
    }

    /// The bucket `chained_hashtable_rand_obj_v2` draws (the table is not empty), shrinking the table as it does.
    #[inline]
    fn draw_bucket(&mut self, rng: &mut Lehmer64) -> usize {
        let mut pos = rng.next() & self.mask;
        let mut tries = 0u32;
        while self.buckets[pos as usize].len() == 0 {
            tries += 1;
            if tries > 32 && self.power > 0 {
                self.rehash(self.power - 1);
            }
            pos = rng.next() & self.mask;
        }
        pos as usize
    }

    /// Position (tail first) of the key the draw `r` picks in a chain of `n` keys: libCacheSim walks `r mod n`
    /// links from the head (`r` is drawn even when `n` is 1).
    #[inline]
    fn drawn_position(n: usize, r: u64) -> usize {
        let k = r % n as u64;
        n - 1 - k as usize
    }

    /// `chained_hashtable_rand_obj_v2`, then the removal of the key it picks (the table is not empty). Returns
    /// its key and prefetch flag.
    #[inline(always)]
    fn evict_drawn(&mut self, rng: &mut Lehmer64) -> (BlockKey, bool) {
        // The first or the second draw finds a chain (90 % of evictions at the table's lowest load): which one is
        // chosen without branches, from the next three outputs of the generator.
        let s1 = rng.0.wrapping_mul(MULT);
        let s2 = s1.wrapping_mul(MULT);
        let s3 = s2.wrapping_mul(MULT);
        let (r1, r2, r3) = ((s1 >> 64) as u64, (s2 >> 64) as u64, (s3 >> 64) as u64);
        let (b1, b2) = ((r1 & self.mask) as usize, (r2 & self.mask) as usize);
        let (n1, n2) = (self.chain_len(b1), self.chain_len(b2));
        if n1 | n2 != 0 {
            let first = n1 != 0;
            let (b, n, r) = if first { (b1, n1, r2) } else { (b2, n2, r3) };
            rng.0 = if first { s2 } else { s3 };
            return self.remove_at(b, Self::drawn_position(n, r));
        }
        self.evict_drawn_slowly(rng)
    }

    /// [`Chained::evict_drawn`] when the first two draws find empty buckets.
    #[inline(never)]
    fn evict_drawn_slowly(&mut self, rng: &mut Lehmer64) -> (BlockKey, bool) {
        let b = self.draw_bucket(rng);
        let j = Self::drawn_position(self.chain_len(b), rng.next());
        self.remove_at(b, j)
    }

    /// Starts loading the buckets of the generator's next [`WARM_DRAWS`] draws (the next eviction's bucket, and
    /// those it goes on to when that one is empty), so that the next miss finds them in cache memory: the draws
    /// are known in advance.
    #[inline]
    fn warm(&self, rng: &Lehmer64) {
        let mut r = *rng;
        for _ in 0..WARM_DRAWS {
            prefetch(&self.buckets[(r.next() & self.mask) as usize]);
        }
    }

    /// The key [`Chained::evict_drawn`] would pick, changing nothing (a shrinking draw runs on a copy).
    fn peek(&self, rng: &Lehmer64) -> BlockKey {
        let mut r = *rng;
        for _ in 0..=32 {
            let b = (r.next() & self.mask) as usize;
            let n = self.chain_len(b);
            if n != 0 {
                return self.key_at(b, Self::drawn_position(n, r.next()));
            }
        }
        self.clone().evict_drawn(&mut rng.clone()).0
    }

    /// The keys, buckets in order, each chain from its head.
    fn keys(&self) -> Vec<BlockKey> {
        (0..self.buckets.len())
            .flat_map(|b| self.chain(b).into_iter().rev().map(|(k, _)| BlockKey::from_raw(k)))
            .collect()
    }

    fn heap_bytes(&self) -> usize {
        self.buckets.capacity() * std::mem::size_of::<Bucket>()
            + self.spill.capacity() * std::mem::size_of::<Vec<(u64, bool)>>()
            + self.spill.iter().map(|v| v.capacity() * 16).sum::<usize>()
            + self.spill_free.capacity() * 8
    }

    fn validate(&self) -> Result<(), String> {
        if self.buckets.len() != 1 << self.power {
            return Err(format!("{} buckets for power {}", self.buckets.len(), self.power));
        }
        let mut n = 0;
        let mut spills = vec![false; self.spill.len()];
        for (b, bk) in self.buckets.iter().enumerate() {
            if bk.spilled() {
                let at = bk.keys[0] as usize;
                if at >= self.spill.len() || std::mem::replace(&mut spills[at], true) {
                    return Err(format!("bucket {b}: spill entry {at} missing or shared"));
                }
                if self.spill[at].len() != bk.len() {
                    return Err(format!("bucket {b}: length {} recorded, {} spilled", bk.len(), self.spill[at].len()));
                }
            } else if bk.meta >> (32 + bk.len()) != 0 {
                return Err(format!("bucket {b}: prefetch flags beyond its {} keys", bk.len()));
            }
            for (j, (k, _)) in self.chain(b).into_iter().enumerate() {
                let key = BlockKey::from_raw(k);
                if self.bucket_of(key) != b {
                    return Err(format!("key {key} chained in bucket {b}"));
                }
                if self.find(b, key) != Some(j) {
                    return Err(format!("key {key} twice in bucket {b}"));
                }
            }
            n += bk.len();
        }
        for &at in &self.spill_free {
            if spills[at] || !self.spill[at].is_empty() {
                return Err(format!("spill entry {at} listed free but in use"));
            }
        }
        if n != self.len {
            return Err(format!("{n} chained keys, count {}", self.len));
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum Store {
    Uniform(Dense),
    Replay(Chained),
}

/// The RANDOM policy.
#[derive(Clone, Debug)]
pub struct Random {
    capacity: usize,
    rng: Lehmer64,
    store: Store,
}

impl Random {
    /// Evicts one block chosen by the generator.
    #[inline]
    fn evict_one(&mut self, out: &mut Vec<Evicted>) {
        match &mut self.store {
            Store::Uniform(d) => {
                let n = d.slots.len() as u64;
                if n == 0 {
                    return;
                }
                let i = ((self.rng.next() as u128 * n as u128) >> 64) as u32;
                let s = d.remove_at(i);
                out.push(Evicted { key: s.key.get(), unused_prefetch: s.prefetched });
            }
            Store::Replay(c) => {
                if c.len == 0 {
                    return;
                }
                let (key, unused_prefetch) = c.evict_drawn(&mut self.rng);
                out.push(Evicted { key, unused_prefetch });
            }
        }
    }

    #[inline]
    fn insert(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) {
        while self.len() >= self.capacity {
            self.evict_one(out);
        }
        match &mut self.store {
            Store::Uniform(d) => d.insert(key, prefetched),
            Store::Replay(c) => c.insert(key, prefetched),
        }
    }

    /// A demand miss in replay mode: evictions, the insert, and the loads of the next eviction started.
    #[inline(never)]
    fn replay_miss(&mut self, key: BlockKey, hash: u64, out: &mut Vec<Evicted>) -> Outcome {
        let Store::Replay(c) = &mut self.store else { unreachable!("replay mode") };
        while c.len >= self.capacity && c.len > 0 {
            let (key, unused_prefetch) = c.evict_drawn(&mut self.rng);
            out.push(Evicted { key, unused_prefetch });
        }
        c.insert_hashed(key, hash, false);
        c.warm(&self.rng);
        Outcome::Miss
    }

    /// A hit: clears the prefetch flag. `None` when `key` is not resident.
    #[inline]
    fn on_hit(&mut self, key: BlockKey) -> Option<Outcome> {
        let was_prefetched = match &mut self.store {
            Store::Uniform(d) => {
                let i = d.get(key)?;
                std::mem::replace(&mut d.slots[i as usize].prefetched, false)
            }
            Store::Replay(c) => {
                let (b, j) = c.get(key)?;
                c.take_prefetched(b, j)
            }
        };
        Some(if was_prefetched { Outcome::PrefetchHit } else { Outcome::Hit })
    }

    /// Resident keys in the store's order (for tests).
    pub fn keys(&self) -> Vec<BlockKey> {
        match &self.store {
            Store::Uniform(d) => d.slots.iter().map(|s| s.key.get()).collect(),
            Store::Replay(c) => c.keys(),
        }
    }
}

impl Policy for Random {
    type Config = RandomConfig;

    fn preset(preset: Preset) -> RandomConfig {
        RandomConfig { libcachesim_replay: preset == Preset::Libcachesim, ..RandomConfig::default() }
    }

    fn check_config(c: &RandomConfig) -> Result<(), String> {
        if c.libcachesim_replay && c.seed == 0 {
            return Err("seed 0 with libcachesim_replay: libCacheSim's generator would return 0 for ever".into());
        }
        Ok(())
    }

    fn new(capacity: usize, config: &RandomConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        let (rng, store) = if config.libcachesim_replay {
            (libcachesim_rng(config.seed), Store::Replay(Chained::new()))
        } else {
            (seeded_rng(config.seed), Store::Uniform(Dense::new(capacity)))
        };
        Random { capacity, rng, store }
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        match &self.store {
            Store::Uniform(d) => d.slots.len(),
            Store::Replay(c) => c.len,
        }
    }

    fn contains(&self, key: BlockKey) -> bool {
        match &self.store {
            Store::Uniform(d) => d.get(key).is_some(),
            Store::Replay(c) => c.get(key).is_some(),
        }
    }

    #[inline(always)]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        if let Store::Replay(c) = &mut self.store {
            // One hash for the lookup and the insert.
            let key = access.key;
            let hash = xxh3_u64(key.raw());
            let b = c.bucket_of_hash(hash);
            if let Some(j) = c.find(b, key) {
                return if c.take_prefetched(b, j) { Outcome::PrefetchHit } else { Outcome::Hit };
            }
            return self.replay_miss(key, hash, out);
        }
        match self.on_hit(access.key) {
            Some(o) => o,
            None => {
                self.insert(access.key, false, out);
                Outcome::Miss
            }
        }
    }

    #[inline]
    fn hit(&mut self, access: Access, _out: &mut Vec<Evicted>) -> Option<Outcome> {
        self.on_hit(access.key)
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        prefetch_missing(self, group, out, |p, key, out| p.insert(key, true, out))
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        match &mut self.store {
            Store::Uniform(d) => match d.get(key) {
                Some(i) => {
                    d.remove_at(i);
                    true
                }
                None => false,
            },
            Store::Replay(c) => match c.get(key) {
                Some((b, j)) => {
                    c.remove_at(b, j);
                    true
                }
                None => false,
            },
        }
    }

    fn validate(&self) -> Result<(), String> {
        if self.len() > self.capacity {
            return Err(format!("{} blocks over capacity {}", self.len(), self.capacity));
        }
        match &self.store {
            Store::Uniform(d) => {
                if d.index.len() != d.slots.len() {
                    return Err(format!("index {} / slots {} disagree", d.index.len(), d.slots.len()));
                }
                for (i, s) in d.slots.iter().enumerate() {
                    if d.get(s.key.get()) != Some(i as u32) {
                        return Err(format!("key {} at position {i} not indexed there", s.key.get()));
                    }
                }
            }
            Store::Replay(c) => c.validate()?,
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        match &self.store {
            Store::Uniform(d) => d.heap_bytes(),
            Store::Replay(c) => c.heap_bytes(),
        }
    }

    const HINTS: bool = true;

    /// Replay mode: starts loading the key's bucket. Uniform mode: nothing (its index gives no address ahead).
    #[inline]
    fn hint(&self, key: BlockKey) {
        if let Store::Replay(c) = &self.store {
            prefetch(&c.buckets[c.bucket_of(key)]);
        }
    }

    fn victim(&self, incoming: BlockKey) -> Victim {
        if self.len() < self.capacity || self.contains(incoming) {
            return Victim::None;
        }
        match &self.store {
            Store::Uniform(d) => {
                let mut r = self.rng;
                let i = ((r.next() as u128 * d.slots.len() as u128) >> 64) as usize;
                Victim::Block(d.slots[i].key.get())
            }
            Store::Replay(c) => Victim::Block(c.peek(&self.rng)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::super::{PolicyKind, PolicySpec};
    use super::*;
    use crate::policy::testutil::{acc, ev, k, pf};
    use blockwell_testkit::Rng;
    use proptest::prelude::*;

    fn random(cap: usize, replay: bool) -> Random {
        Random::new(cap, &RandomConfig { seed: LIBCACHESIM_SEED, libcachesim_replay: replay })
    }

    #[test]
    fn generator_is_libcachesims_lehmer64() {
        let mut r = libcachesim_rng(LIBCACHESIM_SEED);
        assert_eq!([r.next(), r.next(), r.next()], [3189820697, 6199708794445739982, 10757353228193073621]);
    }

    #[test]
    fn replay_evicts_what_libcachesim_evicts() {
        // A Python transcription of libcachesim 0.3.5's Random (checked miss for miss against it) on this trace.
        let mut p = random(8, true);
        let mut evicted = Vec::new();
        for i in 0..200u64 {
            let (o, out) = acc(&mut p, (i * 7919) % 50);
            assert_eq!(o, Outcome::Miss);
            evicted.extend(out.iter().map(|e| e.key.block()));
        }
        assert_eq!(evicted.len(), 192);
        let want = [
            19, 38, 14, 7, 40, 33, 21, 26, 9, 45, 4, 28, 2, 11, 42, 0, 47, 49, 18, 23, 44, 16, 37, 35, 20, 6, 39, 27,
            32, 1, 13, 3, 34, 41, 10, 29, 48, 17, 36, 8,
        ];
        assert_eq!(evicted[..40], want);
        let Store::Replay(c) = &p.store else { unreachable!() };
        assert_eq!(c.power, 4, "the sparse table shrank");
    }

    #[test]
    fn replay_grows_past_two_keys_per_bucket() {
        let mut p = random(300_000, true);
        let mut out = Vec::new();
        for b in 0..(2 << 16) + 2 {
            p.access(Access::new(k(b)), &mut out);
        }
        let Store::Replay(c) = &p.store else { unreachable!() };
        assert_eq!(c.power, 17);
        p.validate().unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn a_chain_spilled_past_its_bucket_is_exact() {
        // 70,000 blocks in one bucket: the chain lives in the spill area; draws, the victim and the regrowth work
        // on it as on a chain held in place.
        let mut p = random(70_000, true);
        let mut out = Vec::new();
        for b in 0..70_000 {
            p.access(Access::new(k(b)), &mut out);
        }
        let Store::Replay(c) = &mut p.store else { unreachable!() };
        c.rehash(0);
        assert_eq!(c.chain_len(0), 70_000);
        assert!(c.buckets[0].spilled());
        p.validate().unwrap();
        let v = p.victim(k(1_000_000));
        let (_, out) = acc(&mut p, 1_000_000);
        assert_eq!(Victim::Block(out[0].key), v);
        let Store::Replay(c) = &p.store else { unreachable!() };
        assert_eq!(c.chain_len(0) + c.chain_len(1), 70_000, "grown back to 2 buckets");
        p.validate().unwrap();
    }

    #[test]
    fn chains_move_between_bucket_and_spill_area_intact() {
        // One bucket (power 0): every key shares its chain, which crosses the in-place limit both ways, with
        // prefetched and demand-fetched keys mixed; the chain's order is libCacheSim's (newest first).
        let mut c = Chained::with_power(0);
        let keys: Vec<u64> = (0..12).collect();
        for &x in &keys {
            c.push(0, x, x % 3 == 0);
            c.validate().unwrap();
        }
        assert_eq!(c.keys(), keys.iter().rev().map(|&x| BlockKey::from_raw(x)).collect::<Vec<_>>());
        // Remove from the middle until the chain fits in place again, checking order and flags each time.
        let mut model: Vec<(u64, bool)> = keys.iter().map(|&x| (x, x % 3 == 0)).collect();
        while model.len() > 2 {
            let j = model.len() / 2;
            let (key, pf) = c.remove_at(0, j);
            assert_eq!((key.raw(), pf), model.remove(j));
            c.validate().unwrap();
            assert_eq!(c.chain(0), model);
        }
        assert!(!c.buckets[0].spilled());
        assert_eq!(c.spill_free.len(), 1, "the spill entry is kept for reuse");
        for x in 100..110 {
            c.push(0, x, false);
        }
        assert_eq!(c.spill.len(), 1, "and reused");
        c.validate().unwrap();
    }

    #[test]
    fn hints_change_nothing() {
        for replay in [false, true] {
            let run = |hint: bool| {
                let mut p = random(300, replay);
                let (mut rng, mut other) = (Rng(5), Rng(6));
                let mut log = Vec::new();
                for _ in 0..20_000 {
                    let b = rng.next() % 1000;
                    if hint {
                        p.hint(k(other.next() % 1000));
                        p.hint(k(b));
                    }
                    log.push(acc(&mut p, b));
                }
                log
            };
            let (with, without) = (run(true), run(false));
            assert!(with == without, "replay {replay}: results differ with hints");
        }
    }

    #[test]
    fn uniform_draws_every_block_about_equally() {
        let mut counts = [0u32; 10];
        let mut p = random(10, false);
        for b in 0..10 {
            acc(&mut p, b);
        }
        let mut out = Vec::new();
        for i in 0..20_000u64 {
            out.clear();
            p.access(Access::new(k(100 + i)), &mut out);
            let v = out[0].key.block();
            if v < 10 {
                counts[v as usize] += 1;
            }
            // Put the victim back in place of the newcomer: the same ten blocks every time.
            p.remove(k(100 + i));
            p.access(Access::new(out[0].key), &mut Vec::new());
        }
        for c in counts {
            assert!((1800..2200).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn same_seed_same_victims_other_seed_others() {
        let run = |seed: u64| {
            let mut p = Random::new(16, &RandomConfig { seed, libcachesim_replay: false });
            let mut out = Vec::new();
            for i in 0..500u64 {
                p.access(Access::new(k(i * 31 % 97)), &mut out);
            }
            out
        };
        assert_eq!(run(1), run(1));
        assert_ne!(run(1), run(2));
    }

    #[test]
    fn prefetched_blocks_are_flagged_until_accessed() {
        for replay in [false, true] {
            let mut p = random(2, replay);
            assert_eq!(pf(&mut p, &[1, 2]), (2, vec![]));
            assert_eq!(acc(&mut p, 1).0, Outcome::PrefetchHit);
            assert_eq!(acc(&mut p, 1).0, Outcome::Hit);
            let (o, out) = acc(&mut p, 3);
            assert_eq!(o, Outcome::Miss);
            assert!(out == vec![ev(1, false)] || out == vec![ev(2, true)], "{out:?}");
            assert!(p.remove(k(3)));
            assert!(!p.remove(k(3)));
            assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![]));
        }
    }

    #[test]
    fn capacity_one() {
        for replay in [false, true] {
            let mut p = random(1, replay);
            acc(&mut p, 1);
            assert_eq!(acc(&mut p, 2), (Outcome::Miss, vec![ev(1, false)]));
            assert_eq!(p.victim(k(3)), Victim::Block(k(2)));
        }
    }

    #[test]
    fn victim_is_what_the_next_miss_evicts() {
        for replay in [false, true] {
            let mut rng = Rng(11);
            for cap in [1usize, 3, 16, 100] {
                let mut p = random(cap, replay);
                let mut out = Vec::new();
                for _ in 0..5000 {
                    let b = rng.next() % (cap as u64 * 3);
                    let v = p.victim(k(b));
                    out.clear();
                    if rng.next() % 7 == 0 {
                        p.remove(k(b));
                        continue;
                    }
                    p.access(Access::new(k(b)), &mut out);
                    match v {
                        Victim::Block(x) => assert_eq!(out.iter().map(|e| e.key).collect::<Vec<_>>(), vec![x]),
                        Victim::None => assert!(out.is_empty()),
                        Victim::Unknown => panic!("RANDOM always knows"),
                    }
                }
            }
        }
    }

    #[test]
    fn victim_of_a_shrinking_draw_is_exact() {
        // Three blocks in 2^16 buckets: the first draw shrinks the table many times.
        let mut p = random(3, true);
        for b in [1, 2, 3] {
            acc(&mut p, b);
        }
        let v = p.victim(k(4));
        let Store::Replay(c) = &p.store else { unreachable!() };
        assert_eq!(c.power, 16, "victim() changes nothing");
        let (_, out) = acc(&mut p, 4);
        assert_eq!(Victim::Block(out[0].key), v);
    }

    #[test]
    fn metadata_is_as_documented() {
        for cap in [1_000, 10_000, 100_000, 1 << 20] {
            let per_block = random(cap, false).heap_bytes() as f64 / cap as f64;
            assert!((23.4..=35.0).contains(&per_block), "{per_block} bytes per block at {cap}");
        }
        let mut p = random(1 << 20, true);
        let mut out = Vec::new();
        for b in 0..1 << 20 {
            p.access(Access::new(k(b)), &mut out);
        }
        let per_block = p.heap_bytes() as f64 / (1 << 20) as f64;
        assert!((32.0..=34.0).contains(&per_block), "{per_block} bytes per block");
        assert_eq!(std::mem::size_of::<Bucket>(), 64);
        assert_eq!(std::mem::size_of::<Slot>(), 12);
    }

    #[test]
    fn presets_and_checks() {
        let spec = PolicySpec::new(PolicyKind::Random);
        assert_eq!(
            spec.config(Preset::Libcachesim).unwrap(),
            serde_json::json!({"seed": 3735928559u64, "libcachesim_replay": true})
        );
        assert_eq!(spec.config(Preset::Default).unwrap()["libcachesim_replay"], false);
        assert!(PolicySpec::parse("random(seed=7)").is_ok());
        assert!(PolicySpec::parse("random(seed=0,libcachesim_replay=true)").is_err());
        assert!(PolicySpec::parse("random(seed=0)").is_ok());
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(
            cap in 1usize..9,
            replay: bool,
            seed in 1u64..1000,
            ops in prop::collection::vec(model::op(), 1..300),
        ) {
            model::run(Random::new(cap, &RandomConfig { seed, libcachesim_replay: replay }), &ops)?;
        }
    }
}
