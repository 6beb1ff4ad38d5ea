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
//! | `Seed001` | 3735928559 | false (seed `001_*` has no RANDOM) |
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
//! cached block. Replay: 12 bytes per block (key, chain link) in a slab sized for the capacity, a prefetch bit per
//! block, and 14 bytes per bucket (the chain's head, a copy of its key so that a hit on a chain's head reads no slot, its
//! length so that a draw walks only to the victim); the table doubles when it holds more than 2 keys per bucket,
//! so past its initial 2¹⁶ buckets (896 KiB, whatever the capacity, per instance: per set under
//! `--associativity`) there are 1/2 to 1 bucket per block (fewer after a rare shrink): 19–26 bytes per cached
//! block, or 12 plus the 896 KiB floor below 131072 blocks. No ghosts either way.
//!
//! **Cost.** Uniform: O(1) per hit, insert and eviction (an eviction updates the moved block's index entry). Replay:
//! a hit or insert hashes the key and walks its chain (2 keys at most on average); an eviction draws until a bucket
//! is not empty (expected 1/load draws) and walks one chain; a resize rehashes every block, amortized O(1) per
//! insert. [`Policy::victim`] copies the generator and repeats the draw; in replay mode, if the draw would shrink
//! the table it runs on a copy of the table (O(blocks)). No allocation per access outside resizes.

use super::{prefetch_missing, Access, Evicted, Outcome, Policy, Preset, Victim};
use crate::arena::PackedKey;
use crate::key::BlockKey;
use crate::lehmer::Lehmer64;
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

const NIL: u32 = 0;

/// A block of the replay store: its key and the next block of its hash chain (slot + 1, 0 for none). A free slot
/// links the free list the same way.
#[derive(Clone, Copy, Debug)]
struct CSlot {
    key: PackedKey,
    next: u32,
}

/// Replay mode: libCacheSim's chained hash table (`chainedHashTableV2.c` in libcachesim 0.3.5), which is both the
/// index and what victims are drawn from. Only the order of each chain matters to the draws; where the blocks
/// live in memory is Blockwell's: per bucket, the head's slot, a copy of the head's key (a hit on a chain's head
/// then reads no slot) and the chain's length (a draw then walks only to the victim), in three arrays so that a
/// draw reads only the small ones.
#[derive(Clone, Debug)]
struct Chained {
    slots: Vec<CSlot>,
    /// Prefetch flags, one bit per slot.
    prefetched: Vec<u64>,
    /// Head of the free list of slots (slot + 1).
    free: u32,
    /// 2^power chain heads (slot + 1, 0 for none).
    heads: Vec<u32>,
    /// The key of each chain's head (meaningless for an empty chain).
    head_keys: Vec<PackedKey>,
    /// Each chain's length; `u16::MAX`: that many or more, count by walking.
    lens: Vec<u16>,
    power: u32,
    len: usize,
}

const NO_KEY: PackedKey = PackedKey::new(BlockKey::from_raw(0));

impl Chained {
    /// `Random_init`'s `hashpower`: the Python class's default 24, minus 8.
    const INITIAL_POWER: u32 = 16;

    fn new(capacity: usize) -> Self {
        let n = 1 << Self::INITIAL_POWER;
        Chained {
            slots: Vec::with_capacity(capacity),
            prefetched: vec![0; capacity.div_ceil(64)],
            free: NIL,
            heads: vec![NIL; n],
            head_keys: vec![NO_KEY; n],
            lens: vec![0; n],
            power: Self::INITIAL_POWER,
            len: 0,
        }
    }

    #[inline]
    fn bucket_of(&self, key: BlockKey) -> usize {
        self.bucket_of_hash(xxh3_u64(key.raw()))
    }

    #[inline]
    fn bucket_of_hash(&self, hash: u64) -> usize {
        (hash & ((1u64 << self.power) - 1)) as usize
    }

    #[inline]
    fn link(&self, s: u32) -> u32 {
        self.slots[(s - 1) as usize].next
    }

    #[inline]
    fn set_link(&mut self, s: u32, to: u32) {
        self.slots[(s - 1) as usize].next = to;
    }

    #[inline]
    fn key(&self, s: u32) -> BlockKey {
        self.slots[(s - 1) as usize].key.get()
    }

    /// Reads and clears slot `s`'s prefetch flag.
    #[inline]
    fn take_prefetched(&mut self, s: u32) -> bool {
        let i = (s - 1) as usize;
        let w = &mut self.prefetched[i / 64];
        let was = *w & (1 << (i % 64)) != 0;
        *w &= !(1 << (i % 64));
        was
    }

    #[inline]
    fn set_prefetched(&mut self, s: u32, on: bool) {
        let i = (s - 1) as usize;
        if i / 64 >= self.prefetched.len() {
            self.prefetched.resize(i / 64 + 1, 0);
        }
        let w = &mut self.prefetched[i / 64];
        if on {
            *w |= 1 << (i % 64);
        } else {
            *w &= !(1 << (i % 64));
        }
    }

    /// Makes `s` (or nothing, for `NIL`) the head of chain `b`.
    #[inline]
    fn set_head(&mut self, b: usize, s: u32) {
        self.heads[b] = s;
        if s != NIL {
            self.head_keys[b] = self.slots[(s - 1) as usize].key;
        }
    }

    /// The length of chain `b`.
    #[inline]
    fn chain_len(&self, b: usize) -> u64 {
        let l = self.lens[b];
        if l < u16::MAX {
            return l as u64;
        }
        let mut n = 0;
        let mut s = self.heads[b];
        while s != NIL {
            n += 1;
            s = self.link(s);
        }
        n
    }

    #[inline]
    fn get(&self, key: BlockKey) -> Option<u32> {
        self.get_hashed(key, xxh3_u64(key.raw()))
    }

    #[inline]
    fn get_hashed(&self, key: BlockKey, hash: u64) -> Option<u32> {
        let b = self.bucket_of_hash(hash);
        let head = self.heads[b];
        if head == NIL {
            return None;
        }
        if self.head_keys[b].get() == key {
            return Some(head);
        }
        let mut s = self.link(head);
        while s != NIL {
            if self.key(s) == key {
                return Some(s);
            }
            s = self.link(s);
        }
        None
    }

    /// Pushes slot `s` onto the head of its chain.
    #[inline]
    fn push_head(&mut self, s: u32) {
        self.push_head_hashed(s, xxh3_u64(self.key(s).raw()));
    }

    #[inline]
    fn push_head_hashed(&mut self, s: u32, hash: u64) {
        let b = self.bucket_of_hash(hash);
        let head = self.heads[b];
        self.set_link(s, head);
        self.set_head(b, s);
        self.lens[b] = self.lens[b].saturating_add(1);
    }

    /// Rebuilds the table with 2^power buckets as libCacheSim's `_copy_entries` does: old buckets in order, each
    /// chain from its head, every block pushed onto the head of its new chain.
    fn rehash(&mut self, power: u32) {
        let n = 1 << power;
        let old = std::mem::replace(&mut self.heads, vec![NIL; n]);
        self.head_keys = vec![NO_KEY; n];
        self.lens = vec![0; n];
        self.power = power;
        for head in old {
            let mut s = head;
            while s != NIL {
                let next = self.link(s);
                self.push_head(s);
                s = next;
            }
        }
    }

    /// `chained_hashtable_insert_v2`: grow first if there are more than 2 keys per bucket.
    #[inline]
    fn insert(&mut self, key: BlockKey, prefetched: bool) {
        self.insert_hashed(key, xxh3_u64(key.raw()), prefetched);
    }

    #[inline]
    fn insert_hashed(&mut self, key: BlockKey, hash: u64, prefetched: bool) {
        if self.len > (2usize << self.power) {
            self.rehash(self.power + 1);
        }
        let slot = CSlot { key: PackedKey::new(key), next: NIL };
        let s = if self.free != NIL {
            let s = self.free;
            self.free = self.link(s);
            self.slots[(s - 1) as usize] = slot;
            s
        } else {
            self.slots.push(slot);
            self.slots.len() as u32
        };
        self.set_prefetched(s, prefetched);
        self.push_head_hashed(s, hash);
        self.len += 1;
    }

    /// Unlinks slot `s` (after `prev` in chain `b`, or its head) and frees it; returns its key and prefetch flag.
    #[inline]
    fn unlink(&mut self, b: usize, prev: u32, s: u32) -> (BlockKey, bool) {
        let next = self.link(s);
        if prev == NIL {
            self.set_head(b, next);
        } else {
            self.set_link(prev, next);
        }
        if self.lens[b] == u16::MAX {
            self.lens[b] = self.chain_len_walked(b);
        } else {
            self.lens[b] -= 1;
        }
        let key = self.key(s);
        let prefetched = self.take_prefetched(s);
        self.set_link(s, self.free);
        self.free = s;
        self.len -= 1;
        (key, prefetched)
    }

    /// Chain `b`'s length by walking it, saturated to `u16::MAX`.
    fn chain_len_walked(&self, b: usize) -> u16 {
        let mut n = 0u16;
        let mut s = self.heads[b];
        while s != NIL && n < u16::MAX {
            n += 1;
            s = self.link(s);
        }
        n
    }

    /// Removes slot `s` from its chain and frees it.
    fn remove(&mut self, s: u32) -> (BlockKey, bool) {
        let b = self.bucket_of(self.key(s));
        let mut prev = NIL;
        let mut p = self.heads[b];
        while p != s && p != NIL {
            prev = p;
            p = self.link(p);
        }
        self.unlink(b, prev, s)
    }

    /// The bucket `chained_hashtable_rand_obj_v2` draws (the table is not empty), shrinking the table as it does.
    #[inline]
    fn draw_bucket(&mut self, rng: &mut Lehmer64) -> usize {
        let mut pos = rng.next() & ((1u64 << self.power) - 1);
        let mut tries = 0u32;
        while self.heads[pos as usize] == NIL {
            tries += 1;
            if tries > 32 && self.power > 0 {
                self.rehash(self.power - 1);
            }
            pos = rng.next() & ((1u64 << self.power) - 1);
        }
        pos as usize
    }

    /// `chained_hashtable_rand_obj_v2`, then the removal of the block it picks (the table is not empty). Returns
    /// its key and prefetch flag.
    #[inline]
    fn evict_drawn(&mut self, rng: &mut Lehmer64) -> (BlockKey, bool) {
        let b = self.draw_bucket(rng);
        let n = self.chain_len(b);
        let r = rng.next();
        let k = if n == 1 { 0 } else { r % n };
        let (mut prev, mut s) = (NIL, self.heads[b]);
        for _ in 0..k {
            prev = s;
            s = self.link(s);
        }
        self.unlink(b, prev, s)
    }

    /// The slot [`Chained::evict_drawn`] would pick, changing nothing (a shrinking draw runs on a copy).
    fn peek(&self, rng: &Lehmer64) -> u32 {
        let mut r = *rng;
        let mask = (1u64 << self.power) - 1;
        for _ in 0..=32 {
            let b = (r.next() & mask) as usize;
            if self.heads[b] != NIL {
                let n = self.chain_len(b);
                let x = r.next();
                let mut s = self.heads[b];
                for _ in 0..(if n == 1 { 0 } else { x % n }) {
                    s = self.link(s);
                }
                return s;
            }
        }
        let mut copy = self.clone();
        let key = copy.evict_drawn(&mut rng.clone()).0;
        self.get(key).unwrap_or(NIL)
    }

    /// Heads of the chains, in bucket order.
    fn heads(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.heads.iter().copied().enumerate().filter(|&(_, h)| h != NIL)
    }

    fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<CSlot>()
            + self.heads.capacity() * 4
            + self.head_keys.capacity() * std::mem::size_of::<PackedKey>()
            + self.lens.capacity() * 2
            + self.prefetched.capacity() * 8
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

    /// A hit: clears the prefetch flag. `None` when `key` is not resident.
    #[inline]
    fn on_hit(&mut self, key: BlockKey) -> Option<Outcome> {
        let was_prefetched = match &mut self.store {
            Store::Uniform(d) => {
                let i = d.get(key)?;
                std::mem::replace(&mut d.slots[i as usize].prefetched, false)
            }
            Store::Replay(c) => {
                let s = c.get(key)?;
                c.take_prefetched(s)
            }
        };
        Some(if was_prefetched { Outcome::PrefetchHit } else { Outcome::Hit })
    }

    /// Resident keys in the store's order (for tests).
    pub fn keys(&self) -> Vec<BlockKey> {
        match &self.store {
            Store::Uniform(d) => d.slots.iter().map(|s| s.key.get()).collect(),
            Store::Replay(c) => {
                let mut v = Vec::new();
                for (_, head) in c.heads() {
                    let mut s = head;
                    while s != NIL {
                        v.push(c.key(s));
                        s = c.link(s);
                    }
                }
                v
            }
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
            (libcachesim_rng(config.seed), Store::Replay(Chained::new(capacity)))
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

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        if let Store::Replay(c) = &mut self.store {
            // One hash for the lookup and the insert.
            let key = access.key;
            let hash = xxh3_u64(key.raw());
            if let Some(s) = c.get_hashed(key, hash) {
                return if c.take_prefetched(s) { Outcome::PrefetchHit } else { Outcome::Hit };
            }
            while c.len >= self.capacity && c.len > 0 {
                let (key, unused_prefetch) = c.evict_drawn(&mut self.rng);
                out.push(Evicted { key, unused_prefetch });
            }
            c.insert_hashed(key, hash, false);
            return Outcome::Miss;
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
                Some(s) => {
                    c.remove(s);
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
            Store::Replay(c) => {
                if c.heads.len() != 1 << c.power || c.head_keys.len() != c.heads.len() || c.lens.len() != c.heads.len()
                {
                    return Err(format!("{} buckets for power {}", c.heads.len(), c.power));
                }
                let mut n = 0;
                for (b, head) in c.heads() {
                    if c.head_keys[b] != c.slots[(head - 1) as usize].key {
                        return Err(format!("bucket {b} caches a key other than its head's"));
                    }
                    if c.lens[b] != c.chain_len_walked(b) {
                        return Err(format!(
                            "bucket {b}: length {} recorded, {} chained",
                            c.lens[b],
                            c.chain_len_walked(b)
                        ));
                    }
                    let mut s = head;
                    while s != NIL {
                        n += 1;
                        if n > c.len {
                            return Err("more chained blocks than the count (cycle?)".into());
                        }
                        if c.bucket_of(c.key(s)) != b {
                            return Err(format!("key {} chained in bucket {b}", c.key(s)));
                        }
                        s = c.link(s);
                    }
                }
                if n != c.len {
                    return Err(format!("{n} chained blocks, count {}", c.len));
                }
            }
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        match &self.store {
            Store::Uniform(d) => d.heap_bytes(),
            Store::Replay(c) => c.heap_bytes(),
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
            Store::Replay(c) => Victim::Block(c.key(c.peek(&self.rng))),
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
    fn a_chain_longer_than_its_length_counter_is_walked() {
        let mut p = random(70_000, true);
        let mut out = Vec::new();
        for b in 0..70_000 {
            p.access(Access::new(k(b)), &mut out);
        }
        let Store::Replay(c) = &mut p.store else { unreachable!() };
        c.rehash(0);
        assert_eq!((c.lens[0], c.chain_len(0)), (u16::MAX, 70_000));
        p.validate().unwrap();
        let v = p.victim(k(1_000_000));
        let (_, out) = acc(&mut p, 1_000_000);
        assert_eq!(Victim::Block(out[0].key), v);
        let Store::Replay(c) = &p.store else { unreachable!() };
        assert_eq!(c.chain_len(0) + c.chain_len(1), 70_000, "grown back to 2 buckets");
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
        assert!((19.0..=26.2).contains(&per_block), "{per_block} bytes per block");
        assert_eq!(std::mem::size_of::<CSlot>(), 12);
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
