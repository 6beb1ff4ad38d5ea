//! Content-based caching live (seed `003_*`, Morrey & Grunwald): one [`ContentStore`] — the engine's
//! [`ContentCache`] plus the bytes of its blocks — shared by any number of exports, each a [`ContentBackend`]
//! with its own volume number, so identical blocks of different volumes (or of one) are cached once (the
//! paper's unified cache across LUNs).
//!
//! ## What each operation does
//! - **Read**: hits are copied from the block's slot. Missed blocks are read from the backend (one request per
//!   run of missed blocks, whole blocks), hashed (XXH3-128 of the block, zero-padded at the end of the device)
//!   and placed with [`ContentCache::fill_read`]; a hash match is a hint only, confirmed by a full byte
//!   comparison with the cached block.
//! - **Write** (write-through): each block's new content is known when the write covers the whole block, or
//!   when the address is cached (*read-modify from the cache*: the cached bytes patched with the written
//!   ones; the cache never reads the backend to complete a partial write). A block whose new content equals the
//!   cached content of the same address (same hash, then a full byte comparison) is a **silent write**: it is
//!   not written to the backend (the backend already holds those bytes). The other blocks are written to the
//!   backend, one request per run, and only then, under the lock, placed in the cache
//!   ([`ContentCache::write`]). A partial write to an uncached block is written to the backend and not cached
//!   (counted as `partial_write_misses`, not in any category). A FUA write that skipped silent blocks is
//!   followed by a FLUSH (fdatasync), since the skipped bytes may not have been durable yet.
//! - **TRIM, WRITE_ZEROES**: reach the backend, then every touched address is dropped from the cache.
//! - **FLUSH**: reaches the backend (fdatasync on a file).
//!
//! ## Concurrency
//! One mutex guards the engine, the slots and the pending table; it is never held during backend I/O. Writes
//! (and TRIM, WRITE_ZEROES) to overlapping blocks of one export are serialized by striped locks held across
//! the silent-write check, the backend write and the cache update, so the cache and the backend see writes to
//! a block in the same order. A read miss marks its addresses *pending* with the request's token before it
//! reads the backend; every write, TRIM or WRITE_ZEROES removes the pending marks of the addresses it changed
//! once the backend has the new data; a read installs a block only if its mark is still there (its own token).
//! So a read that raced a write can never put the bytes it read before the write into the cache (it
//! still returns them: a read concurrent with a write may see either). A partial write to an uncached address
//! also drops the address, in case a racing read cached it with the old bytes.
//!
//! Invariant: a cached address's block holds the bytes the backend has there, except while a write to it is in
//! flight (between its backend write and its cache update; the block is then the older content). A backend
//! error on a write drops every written address (the backend's contents there are unknown); on a read, the
//! pending marks are removed and nothing is cached.
//!
//! ## Counters
//! The nine categories of the paper's Table 1, the content-table lookups ("inserts") and full comparisons, per
//! export and for the shared cache ([`ContentSnapshot`]); the usual [`StatsSnapshot`] of the export, where the
//! capacity, resident blocks and evictions are the shared cache's. A read miss whose fill a racing write
//! dropped (`fills_dropped`) and a partial write to an uncached block (`partial_write_misses`) are the only
//! block accesses outside the categories.
//!
//! ## Cost
//! Per cached block: its slot (one block of bytes; freed slots are kept for reuse, never more than the cache
//! has blocks) and 8 B of slot pointer, plus the engine's metadata (see [`blockwell_core::dedup`]).

use crate::backend::{Backend, OnMiss, ReadInto, ReadOutcome};
use crate::cache::runs;
use crate::stats::{Counters, StatsSnapshot};
use blockwell_core::dedup::{BlockId, Category, ContentCache, DedupConfig, DedupError, DedupPlan, DedupStats};
use blockwell_core::key::{block_span, MAX_BLOCK, MAX_VOLUME};
use blockwell_core::policy::PolicyError;
use blockwell_core::{BlockKey, DynPolicy, PolicySpec, Preset};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Settings of a [`ContentStore`].
#[derive(Clone, Debug)]
pub struct ContentConfig {
    /// Block size in bytes (power of two, 512 B..1 MiB).
    pub block_size: u64,
    /// The whole budget: block slots, reference pages and the content hash table.
    pub capacity_bytes: u64,
    /// Hash table size as a fraction of the budget (default 1/64, the paper's).
    pub hash_fraction: f64,
    pub policy: PolicySpec,
    pub preset: Preset,
}

impl ContentConfig {
    /// LRU, 4 KiB blocks, hash table 1/64 of the budget.
    pub fn new(capacity_bytes: u64) -> Self {
        let d = DedupConfig::default();
        ContentConfig {
            block_size: d.block_size,
            capacity_bytes,
            hash_fraction: d.hash_fraction,
            policy: PolicySpec::new(blockwell_core::PolicyKind::Lru),
            preset: Preset::Default,
        }
    }

    fn dedup(&self) -> DedupConfig {
        DedupConfig {
            block_size: self.block_size,
            capacity_bytes: self.capacity_bytes,
            hash_fraction: self.hash_fraction,
            ..DedupConfig::default()
        }
    }
}

/// Errors building a content store or attaching an export to it.
#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    #[error(transparent)]
    Dedup(#[from] DedupError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(
        "policy '{policy}' with preset '{preset}' sets libcachesim_quirks, which may hold more blocks than the \
         capacity; the live cache refuses it (use another preset or libcachesim_quirks=false)"
    )]
    Quirks { policy: String, preset: &'static str },
    #[error("device of {size} B has more blocks of {block_size} B than a block key holds")]
    DeviceTooLarge { size: u64, block_size: u64 },
    #[error("a content cache serves at most {0} exports")]
    TooManyVolumes(u32),
}

/// Per-category counts, serialized as a map in Table 1's order (`read_hit`, ..., `silent_write`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Categories(pub [u64; 9]);

impl Categories {
    pub fn get(&self, c: Category) -> u64 {
        self.0[c.index()]
    }
}

impl Serialize for Categories {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(9))?;
        for c in Category::ALL {
            m.serialize_entry(c.short(), &self.get(c))?;
        }
        m.end()
    }
}

/// The shared cache's counters and occupancy.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SharedSnapshot {
    pub exports: u32,
    pub policy: String,
    pub block_size: u64,
    pub capacity_bytes: u64,
    pub hash_fraction: f64,
    pub hash_buckets: u64,
    /// Budget bytes the hash table takes.
    pub hash_table_bytes: u64,
    /// Slots (blocks or reference pages) the budget leaves.
    pub capacity_slots: u64,
    pub resident_blocks: u64,
    pub references: u64,
    pub reference_pages: u64,
    pub used_bytes: u64,
    pub categories: Categories,
    /// Content-table lookups (one per block whose content had to be placed: the paper's "inserts").
    pub lookups: u64,
    /// Byte comparisons of a block with a hash-chain candidate (the paper's "full comparisons").
    pub full_comparisons: u64,
    pub comparisons_per_insert: f64,
    /// Byte comparisons of a write with its address's block (silent-write detection).
    pub address_comparisons: u64,
    pub blocks_inserted: u64,
    pub blocks_evicted: u64,
    pub blocks_released: u64,
    pub refs_dropped: u64,
    pub pages_evicted: u64,
}

/// One export's content counters, and the shared cache's.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ContentSnapshot {
    /// The export's volume number in the shared cache.
    pub volume: u32,
    /// This export's block accesses, per Table 1 category.
    pub categories: Categories,
    pub lookups: u64,
    pub full_comparisons: u64,
    pub comparisons_per_insert: f64,
    pub address_comparisons: u64,
    /// Block reads served from the cache (read hits: no backend read).
    pub backend_block_reads_avoided: u64,
    /// Blocks of writes not written to the backend (silent writes).
    pub backend_block_writes_avoided: u64,
    /// Partial-block writes to uncached addresses (written to the backend, not cached, not categorized).
    pub partial_write_misses: u64,
    /// Read misses not cached because a write overtook them (not categorized).
    pub fills_dropped: u64,
    pub shared: SharedSnapshot,
}

fn comparisons_per_insert(s: &DedupStats) -> f64 {
    s.comparisons_per_insert()
}

/// The engine and the block bytes.
struct Store {
    cache: ContentCache<dyn DynPolicy>,
    /// Block bytes by [`BlockId`] (the handle's number).
    slots: Vec<Option<Box<[u8]>>>,
    /// Slots of freed blocks, for reuse.
    spare: Vec<Box<[u8]>>,
    /// Addresses a read miss is fetching, with the request's token.
    pending: HashMap<BlockKey, u64>,
    next_token: u64,
    plan: DedupPlan,
    /// Per-volume deltas of the engine's counters.
    volumes: Vec<DedupStats>,
}

fn add_delta(to: &mut DedupStats, before: &DedupStats, after: &DedupStats) {
    for i in 0..9 {
        to.categories[i] += after.categories[i] - before.categories[i];
    }
    to.lookups += after.lookups - before.lookups;
    to.full_comparisons += after.full_comparisons - before.full_comparisons;
    to.address_comparisons += after.address_comparisons - before.address_comparisons;
}

impl Store {
    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    fn slot(&self, b: BlockId) -> &[u8] {
        self.slots[b.get() as usize].as_deref().expect("a resident block has a slot")
    }

    /// Releases the slots of the blocks the last engine call freed.
    fn release(&mut self) {
        for &b in &self.plan.freed {
            if let Some(s) = self.slots.get_mut(b.get() as usize).and_then(Option::take) {
                self.spare.push(s);
            }
        }
    }

    /// Stores `data` (one whole block) into the plan's block when the plan says so.
    fn fill(&mut self, data: &[u8]) {
        let (true, Some(b)) = (self.plan.fill, self.plan.block) else { return };
        let i = b.get() as usize;
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        let mut s = match self.slots[i].take().or_else(|| self.spare.pop()) {
            Some(s) => s,
            None => vec![0u8; data.len()].into_boxed_slice(),
        };
        s.copy_from_slice(data);
        self.slots[i] = Some(s);
    }

    /// Runs one engine call on behalf of `volume`, then releases freed slots and accounts the counters' change.
    fn engine(
        &mut self,
        volume: u32,
        f: impl FnOnce(&mut ContentCache<dyn DynPolicy>, &[Option<Box<[u8]>>], &mut DedupPlan),
    ) {
        let before = *self.cache.stats();
        let Store { cache, slots, plan, .. } = self;
        f(cache, slots, plan);
        self.release();
        let after = *self.cache.stats();
        add_delta(&mut self.volumes[volume as usize], &before, &after);
    }

    /// Drops an address (and its pending mark). Returns whether it was cached.
    fn invalidate(&mut self, key: BlockKey) -> bool {
        self.pending.remove(&key);
        let Store { cache, plan, .. } = self;
        let was = cache.invalidate(key, plan);
        self.release();
        was
    }
}

fn slot_eq(slots: &[Option<Box<[u8]>>], b: BlockId, data: &[u8]) -> bool {
    slots.get(b.get() as usize).and_then(|s| s.as_deref()) == Some(data)
}

fn hash(block: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(block)
}

/// A content cache shared by exports. See the module documentation.
pub struct ContentStore {
    state: Mutex<Store>,
    config: ContentConfig,
    volumes: AtomicU32,
}

impl ContentStore {
    /// A content cache of `config`. Refuses offline policies (OPT) and policies that may exceed their capacity
    /// (`libcachesim_quirks`).
    pub fn new(config: ContentConfig) -> Result<Arc<Self>, ContentError> {
        if config.policy.libcachesim_quirks(config.preset)? {
            return Err(ContentError::Quirks {
                policy: config.policy.label().to_string(),
                preset: config.preset.name(),
            });
        }
        let cache = ContentCache::build(config.dedup(), &config.policy, config.preset)?;
        Ok(Arc::new(ContentStore {
            state: Mutex::new(Store {
                cache,
                slots: Vec::new(),
                spare: Vec::new(),
                pending: HashMap::new(),
                next_token: 0,
                plan: DedupPlan::default(),
                volumes: Vec::new(),
            }),
            config,
            volumes: AtomicU32::new(0),
        }))
    }

    pub fn config(&self) -> &ContentConfig {
        &self.config
    }

    /// Serves `backend` through this cache as a new volume. `read_only` refuses writes.
    pub fn attach<B: Backend>(
        self: &Arc<Self>,
        backend: B,
        read_only: bool,
    ) -> Result<ContentBackend<B>, ContentError> {
        let bs = self.config.block_size;
        let size = backend.size();
        if size.div_ceil(bs) > MAX_BLOCK {
            return Err(ContentError::DeviceTooLarge { size, block_size: bs });
        }
        let mut st = self.lock();
        // The engine's own keys live on its internal volume (MAX_VOLUME).
        let volume = st.volumes.len() as u32;
        if volume >= MAX_VOLUME {
            return Err(ContentError::TooManyVolumes(MAX_VOLUME));
        }
        st.volumes.push(DedupStats::default());
        drop(st);
        self.volumes.fetch_add(1, Ordering::Relaxed);
        Ok(ContentBackend {
            backend,
            store: self.clone(),
            volume,
            size,
            block_size: bs,
            read_only,
            stripes: crate::backend::WriteStripes::new(),
            counters: Counters::default(),
            avoided_writes: AtomicU64::new(0),
            partial_misses: AtomicU64::new(0),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The shared cache's counters and occupancy.
    pub fn shared(&self) -> SharedSnapshot {
        let st = self.lock();
        self.shared_of(&st)
    }

    fn shared_of(&self, st: &Store) -> SharedSnapshot {
        let c = &st.cache;
        let s = c.stats();
        let cfg = c.config();
        SharedSnapshot {
            exports: self.volumes.load(Ordering::Relaxed),
            policy: self.config.policy.label().to_string(),
            block_size: cfg.block_size,
            capacity_bytes: cfg.capacity_bytes,
            hash_fraction: cfg.hash_fraction,
            hash_buckets: cfg.buckets() as u64,
            hash_table_bytes: cfg.charged_table_bytes(),
            capacity_slots: cfg.slots() as u64,
            resident_blocks: c.blocks() as u64,
            references: c.references() as u64,
            reference_pages: c.pages() as u64,
            used_bytes: c.used_bytes(),
            categories: Categories(s.categories),
            lookups: s.lookups,
            full_comparisons: s.full_comparisons,
            comparisons_per_insert: comparisons_per_insert(s),
            address_comparisons: s.address_comparisons,
            blocks_inserted: s.blocks_inserted,
            blocks_evicted: s.blocks_evicted,
            blocks_released: s.blocks_released,
            refs_dropped: s.refs_dropped,
            pages_evicted: s.pages_evicted,
        }
    }

    /// Checks the engine's invariants and that every resident block, and only those, has a slot of the block
    /// size, and no more slots exist than the cache has slots.
    pub fn validate(&self) -> Result<(), String> {
        let st = self.lock();
        st.cache.validate()?;
        let bs = self.config.block_size as usize;
        let with_data = st.slots.iter().filter(|s| s.is_some()).count();
        if with_data != st.cache.blocks() {
            return Err(format!("{with_data} slots hold data, {} blocks resident", st.cache.blocks()));
        }
        if st.slots.iter().flatten().chain(&st.spare).any(|s| s.len() != bs) {
            return Err("a slot is not one block".into());
        }
        let total = with_data + st.spare.len();
        if total > st.cache.config().slots() {
            return Err(format!("{total} slots allocated for {} of capacity", st.cache.config().slots()));
        }
        Ok(())
    }
}

/// One export (volume) served through a [`ContentStore`]. See the module documentation.
pub struct ContentBackend<B> {
    backend: B,
    store: Arc<ContentStore>,
    volume: u32,
    size: u64,
    block_size: u64,
    read_only: bool,
    stripes: crate::backend::WriteStripes,
    counters: Counters,
    avoided_writes: AtomicU64,
    partial_misses: AtomicU64,
}

/// A block of a write: its address and, when known, its whole new content and hash.
struct WBlock {
    block: u64,
    content: Option<(Box<[u8]>, u128)>,
    silent: bool,
}

impl<B: Backend> ContentBackend<B> {
    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.backend
    }

    pub fn store(&self) -> &Arc<ContentStore> {
        &self.store
    }

    pub fn volume(&self) -> u32 {
        self.volume
    }

    /// The export's counters in the shape of the offset cache's (block hits and misses from the categories;
    /// capacity, resident blocks and evictions are the shared cache's).
    pub fn snapshot(&self) -> StatsSnapshot {
        let (mine, shared, _) = self.stats();
        self.stats_snapshot(&mine, &shared)
    }

    /// The export's content counters and the shared cache's.
    pub fn content_snapshot(&self) -> ContentSnapshot {
        let (mine, shared, fills_dropped) = self.stats();
        ContentSnapshot {
            volume: self.volume,
            categories: Categories(mine.categories),
            lookups: mine.lookups,
            full_comparisons: mine.full_comparisons,
            comparisons_per_insert: comparisons_per_insert(&mine),
            address_comparisons: mine.address_comparisons,
            backend_block_reads_avoided: mine.get(Category::ReadHit),
            backend_block_writes_avoided: self.avoided_writes.load(Ordering::Relaxed),
            partial_write_misses: self.partial_misses.load(Ordering::Relaxed),
            fills_dropped,
            shared,
        }
    }

    fn stats(&self) -> (DedupStats, SharedSnapshot, u64) {
        let st = self.store.lock();
        let mine = st.volumes[self.volume as usize];
        (mine, self.store.shared_of(&st), self.counters.fills_dropped.load(Ordering::Relaxed))
    }

    fn stats_snapshot(&self, mine: &DedupStats, shared: &SharedSnapshot) -> StatsSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.counters;
        let get = |x: Category| mine.get(x);
        let write_misses = get(Category::WriteMissContentHit) + get(Category::WriteMissContentMiss);
        StatsSnapshot {
            read_requests: g(&c.read_requests),
            write_requests: g(&c.write_requests),
            read_request_hits: g(&c.read_request_hits),
            cache_requests: g(&c.cache_requests),
            read_block_hits: get(Category::ReadHit),
            read_block_misses: mine.reads() - get(Category::ReadHit) + g(&c.fills_dropped),
            write_block_hits: mine.writes() - write_misses,
            write_block_misses: write_misses + g(&self.partial_misses),
            backend_reads: g(&c.backend_reads),
            backend_bytes_read: g(&c.backend_bytes_read),
            backend_writes: g(&c.backend_writes),
            backend_bytes_written: g(&c.backend_bytes_written),
            backend_zero_writes: g(&c.backend_zero_writes),
            backend_bytes_zeroed: g(&c.backend_bytes_zeroed),
            backend_trims: g(&c.backend_trims),
            backend_bytes_trimmed: g(&c.backend_bytes_trimmed),
            evictions: shared.blocks_evicted,
            slots_allocated: shared.resident_blocks + shared.reference_pages,
            capacity_blocks: shared.capacity_slots,
            resident_blocks: shared.resident_blocks,
            fills_dropped: g(&c.fills_dropped),
            invalidations: g(&c.invalidations),
            ..StatsSnapshot::default()
        }
    }

    fn key(&self, block: u64) -> BlockKey {
        BlockKey::new(self.volume, block).expect("volume and device size are checked when attached")
    }

    /// Bytes of `block` inside the device.
    fn block_len(&self, block: u64) -> usize {
        (self.size - block * self.block_size).min(self.block_size) as usize
    }

    /// The byte range `[lo, hi)` of `block` that the request `[offset, offset + len)` covers.
    fn overlap(&self, block: u64, offset: u64, len: u64) -> (u64, u64) {
        let start = block * self.block_size;
        (start.max(offset), (start + self.block_len(block) as u64).min(offset + len))
    }

    /// Copies the part of `block` (whole-block data `src`) inside the request into `buf`.
    fn copy_out(&self, block: u64, src: &[u8], buf: &mut [u8], offset: u64) {
        let start = block * self.block_size;
        let (lo, hi) = self.overlap(block, offset, buf.len() as u64);
        if lo < hi {
            buf[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&src[(lo - start) as usize..(hi - start) as usize]);
        }
    }

    /// A whole block: `data` (the block's bytes inside the device), zero-padded to the block size.
    fn padded(&self, data: &[u8]) -> Box<[u8]> {
        let mut v = vec![0u8; self.block_size as usize];
        v[..data.len()].copy_from_slice(data);
        v.into_boxed_slice()
    }

    /// Drops blocks `first..first+n` from the cache (after TRIM, WRITE_ZEROES or a failed write).
    fn invalidate_range(&self, first: u64, n: u64) {
        let mut st = self.store.lock();
        for b in first..first + n {
            if st.invalidate(self.key(b)) {
                Counters::add(&self.counters.invalidations, 1);
            }
        }
    }

    /// Reads the runs of `need` (blocks from `first`) from the backend into `buf` and caches the blocks still
    /// pending with `token`.
    fn fetch(&self, first: u64, need: &[bool], token: u64, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let bs = self.block_size;
        let mut fetched: Vec<(u64, Box<[u8]>, u128)> = Vec::new();
        let mut result = Ok(());
        for (s, e) in runs(need) {
            let b0 = first + s as u64;
            let off = b0 * bs;
            let end = ((first + e as u64) * bs).min(self.size);
            let mut data = vec![0u8; (end - off) as usize];
            Counters::add(&self.counters.backend_reads, 1);
            Counters::add(&self.counters.backend_bytes_read, end - off);
            if let Err(err) = self.backend.read_at(&mut data, off) {
                result = Err(err);
                break;
            }
            for (j, chunk) in data.chunks(bs as usize).enumerate() {
                let b = b0 + j as u64;
                self.copy_out(b, chunk, buf, offset);
                let block = self.padded(chunk);
                let h = hash(&block);
                fetched.push((b, block, h));
            }
        }
        let mut st = self.store.lock();
        if let Err(err) = result {
            for (j, _) in need.iter().enumerate().filter(|x| *x.1) {
                let k = self.key(first + j as u64);
                if st.pending.get(&k) == Some(&token) {
                    st.pending.remove(&k);
                }
            }
            return Err(err);
        }
        for (b, block, h) in &fetched {
            let k = self.key(*b);
            if st.pending.get(&k) != Some(&token) {
                Counters::add(&self.counters.fills_dropped, 1);
                continue;
            }
            st.pending.remove(&k);
            st.engine(self.volume, |c, slots, plan| {
                c.fill_read(k, *h, &mut |cand| slot_eq(slots, cand.block, block), plan)
            });
            st.fill(block);
        }
        Ok(())
    }

    /// A read served entirely from the cache, or nothing (`false`).
    fn fast_read(&self, buf: &mut [u8], offset: u64) -> bool {
        let len = buf.len() as u64;
        if len == 0 {
            return false;
        }
        let (first, n) = block_span(offset, len, self.block_size);
        let mut st = self.store.lock();
        if (first..first + n).any(|b| st.cache.lookup(self.key(b)).is_none()) {
            return false;
        }
        for b in first..first + n {
            let k = self.key(b);
            st.engine(self.volume, |c, _, plan| c.read(k, plan));
            let Some(blk) = st.plan.block else {
                // Resident when checked; only a policy evicting on a hit could make this happen: finish on the
                // slow path (the blocks read so far count twice).
                drop(st);
                return self.read_at(buf, offset).is_ok();
            };
            self.copy_out(b, &st.slot(blk)[..self.block_len(b)], buf, offset);
        }
        drop(st);
        Counters::add(&self.counters.read_requests, 1);
        Counters::add(&self.counters.read_request_hits, 1);
        true
    }
}

impl<B: Backend> Backend for ContentBackend<B> {
    fn size(&self) -> u64 {
        self.size
    }

    fn read(&self, offset: u64, into: ReadInto<'_>, on_miss: OnMiss) -> io::Result<ReadOutcome> {
        let ReadInto::Copy(buf) = into else { return Ok(ReadOutcome::NeedsIo) };
        if self.fast_read(buf, offset) {
            return Ok(ReadOutcome::Served);
        }
        match on_miss {
            OnMiss::Fetch => self.read_at(buf, offset).map(|()| ReadOutcome::Served),
            OnMiss::Decline => Ok(ReadOutcome::NeedsIo),
        }
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        Counters::add(&self.counters.read_requests, 1);
        let len = buf.len() as u64;
        if len == 0 {
            return Ok(());
        }
        let (first, n) = block_span(offset, len, self.block_size);
        let mut need = vec![false; n as usize];
        let mut st = self.store.lock();
        let token = st.token();
        for (i, b) in (first..first + n).enumerate() {
            let k = self.key(b);
            st.engine(self.volume, |c, _, plan| c.read(k, plan));
            match st.plan.block {
                Some(blk) if !st.plan.device_read => self.copy_out(b, &st.slot(blk)[..self.block_len(b)], buf, offset),
                _ => {
                    need[i] = true;
                    st.pending.insert(k, token);
                }
            }
        }
        drop(st);
        if !need.contains(&true) {
            Counters::add(&self.counters.read_request_hits, 1);
            return Ok(());
        }
        self.fetch(first, &need, token, buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> io::Result<()> {
        crate::backend::refuse_writes(self.is_read_only())?;
        Counters::add(&self.counters.write_requests, 1);
        let len = buf.len() as u64;
        if len == 0 {
            return Ok(());
        }
        let bs = self.block_size;
        let (first, n) = block_span(offset, len, bs);
        let _stripes = self.stripes.lock(first, n);
        // Whole blocks' contents and hashes, outside the lock.
        let mut blocks: Vec<WBlock> = (first..first + n)
            .map(|b| {
                let (lo, hi) = self.overlap(b, offset, len);
                let whole = lo == b * bs && hi - lo == self.block_len(b) as u64;
                let content = whole.then(|| {
                    let c = self.padded(&buf[(lo - offset) as usize..(hi - offset) as usize]);
                    let h = hash(&c);
                    (c, h)
                });
                WBlock { block: b, content, silent: false }
            })
            .collect();
        // Phase 1, under the lock: complete partial blocks from the cache; handle silent writes.
        let mut st = self.store.lock();
        for w in &mut blocks {
            let k = self.key(w.block);
            let cur = st.cache.lookup(k);
            if w.content.is_none() {
                if let Some(blk) = cur {
                    let start = w.block * bs;
                    let (lo, hi) = self.overlap(w.block, offset, len);
                    let mut c: Box<[u8]> = st.slot(blk).into();
                    c[(lo - start) as usize..(hi - start) as usize]
                        .copy_from_slice(&buf[(lo - offset) as usize..(hi - offset) as usize]);
                    let h = hash(&c);
                    w.content = Some((c, h));
                }
            }
            let (Some(blk), Some((c, h))) = (cur, &w.content) else { continue };
            if st.cache.hash_of(blk) == *h && st.slot(blk) == &c[..] {
                w.silent = true;
                st.engine(self.volume, |cache, slots, plan| {
                    cache.write(k, *h, &mut |cand| slot_eq(slots, cand.block, c), plan)
                });
                debug_assert_eq!(st.plan.category, Some(Category::SilentWrite));
            }
        }
        drop(st);
        // Phase 2: the backend gets the non-silent blocks, one request per run.
        let write: Vec<bool> = blocks.iter().map(|w| !w.silent).collect();
        let skipped = blocks.iter().filter(|w| w.silent).count() as u64;
        Counters::add(&self.avoided_writes, skipped);
        let mut result = Ok(());
        for (s, e) in runs(&write) {
            let lo = ((first + s as u64) * bs).max(offset);
            let hi = ((first + e as u64) * bs).min(offset + len);
            Counters::add(&self.counters.backend_writes, 1);
            Counters::add(&self.counters.backend_bytes_written, hi - lo);
            if let Err(err) = self.backend.write_at(&buf[(lo - offset) as usize..(hi - offset) as usize], lo, fua) {
                result = Err(err);
                break;
            }
        }
        if let Err(err) = result {
            // The backend's contents of the written blocks are unknown now.
            let mut st = self.store.lock();
            for w in blocks.iter().filter(|w| !w.silent) {
                if st.invalidate(self.key(w.block)) {
                    Counters::add(&self.counters.invalidations, 1);
                }
            }
            return Err(err);
        }
        // Phase 3, under the lock: the cache follows the backend.
        let mut st = self.store.lock();
        for w in blocks.iter().filter(|w| !w.silent) {
            let k = self.key(w.block);
            st.pending.remove(&k);
            match &w.content {
                Some((c, h)) => {
                    st.engine(self.volume, |cache, slots, plan| {
                        cache.write(k, *h, &mut |cand| slot_eq(slots, cand.block, c), plan)
                    });
                    st.fill(c);
                }
                None => {
                    // A partial write to an uncached block; a racing read may have cached the old bytes.
                    Counters::add(&self.partial_misses, 1);
                    if st.invalidate(k) {
                        Counters::add(&self.counters.invalidations, 1);
                    }
                }
            }
        }
        drop(st);
        if fua && skipped > 0 {
            // The skipped blocks' bytes were on the backend, but perhaps not yet durable.
            self.backend.flush()?;
        }
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        self.backend.flush()
    }

    fn trim(&self, offset: u64, len: u64, fua: bool) -> io::Result<()> {
        self.stripes.discard(
            self.is_read_only(),
            self.block_size,
            (offset, len),
            || {
                Counters::add(&self.counters.backend_trims, 1);
                Counters::add(&self.counters.backend_bytes_trimmed, len);
                self.backend.trim(offset, len, fua)
            },
            |first, n| self.invalidate_range(first, n),
        )
    }

    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> io::Result<()> {
        self.stripes.discard(
            self.is_read_only(),
            self.block_size,
            (offset, len),
            || {
                Counters::add(&self.counters.backend_zero_writes, 1);
                Counters::add(&self.counters.backend_bytes_zeroed, len);
                self.backend.write_zeroes(offset, len, may_trim, fua)
            },
            |first, n| self.invalidate_range(first, n),
        )
    }

    fn is_read_only(&self) -> bool {
        self.read_only || self.backend.is_read_only()
    }

    fn can_multi_conn(&self) -> bool {
        // One cache shared by every connection, write-through: it holds exactly when the backend's does.
        self.backend.can_multi_conn()
    }

    fn block_status(&self, offset: u64, len: u64) -> Option<io::Result<Vec<(u64, u32)>>> {
        self.backend.block_status(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MemBackend;
    use std::sync::atomic::AtomicU8;

    const BS: usize = 4096;

    /// A memory backend that counts requests, can be slowed down and can fail writes (before or after
    /// applying them).
    struct Counting {
        mem: MemBackend,
        reads: AtomicU64,
        writes: AtomicU64,
        flushes: AtomicU64,
        /// 0: writes work; 1: fail without writing; 2: write, then fail.
        fail: AtomicU8,
        slow: bool,
        /// When set, the next read takes it: it reads the data, says so on the first channel, then waits for the
        /// second before returning (to stage a race).
        gate: Mutex<Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)>>,
    }

    impl Counting {
        fn new(size: usize) -> Arc<Counting> {
            Arc::new(Counting {
                mem: MemBackend::new(size),
                reads: AtomicU64::new(0),
                writes: AtomicU64::new(0),
                flushes: AtomicU64::new(0),
                fail: AtomicU8::new(0),
                slow: false,
                gate: Mutex::new(None),
            })
        }
        fn slow(size: usize) -> Arc<Counting> {
            let mut c = Arc::try_unwrap(Counting::new(size)).ok().unwrap();
            c.slow = true;
            Arc::new(c)
        }
        fn writes(&self) -> u64 {
            self.writes.load(Ordering::SeqCst)
        }
    }

    impl Backend for Counting {
        fn size(&self) -> u64 {
            self.mem.size()
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            self.reads.fetch_add(1, Ordering::SeqCst);
            self.mem.read_at(buf, offset)?;
            let gate = self.gate.lock().unwrap().take();
            if let Some((entered, release)) = gate {
                entered.send(()).unwrap();
                release.recv().unwrap();
            }
            if self.slow {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            Ok(())
        }
        fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> io::Result<()> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            match self.fail.load(Ordering::SeqCst) {
                1 => return Err(io::Error::from_raw_os_error(5)),
                2 => {
                    self.mem.write_at(buf, offset, fua)?;
                    return Err(io::Error::from_raw_os_error(5));
                }
                _ => {}
            }
            if self.slow {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
            self.mem.write_at(buf, offset, fua)
        }
        fn flush(&self) -> io::Result<()> {
            self.flushes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
        fn trim(&self, offset: u64, len: u64, fua: bool) -> io::Result<()> {
            // A real device may return anything after a trim: zeroes here.
            self.mem.write_zeroes(offset, len, true, fua)
        }
        fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> io::Result<()> {
            self.mem.write_zeroes(offset, len, may_trim, fua)
        }
    }

    fn store(blocks: u64) -> Arc<ContentStore> {
        // The hash table takes one more slot's worth of bytes (at least one bucket's).
        let mut c = ContentConfig::new(blocks * BS as u64);
        c.hash_fraction = 1.0 / 64.0;
        ContentStore::new(c).unwrap()
    }

    fn pattern(x: u8) -> Vec<u8> {
        (0..BS).map(|i| x.wrapping_mul(31).wrapping_add((i % 251) as u8)).collect()
    }

    fn read(b: &impl Backend, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        b.read_at(&mut v, off).unwrap();
        v
    }

    fn cat(e: &ContentBackend<Arc<Counting>>, c: Category) -> u64 {
        e.content_snapshot().categories.get(c)
    }

    #[test]
    fn silent_write_issues_no_backend_write() {
        let s = store(64);
        let dev = Counting::new(64 * BS);
        let e = s.attach(dev.clone(), false).unwrap();
        e.write_at(&pattern(1), 0, false).unwrap();
        assert_eq!(dev.writes(), 1);
        e.write_at(&pattern(1), 0, false).unwrap();
        assert_eq!(dev.writes(), 1, "same bytes to the same address: no backend write");
        assert_eq!(cat(&e, Category::SilentWrite), 1);
        assert_eq!(e.content_snapshot().backend_block_writes_avoided, 1);
        // A two-block write with one silent block writes only the other.
        let mut two = pattern(1);
        two.extend(pattern(2));
        e.write_at(&two, 0, false).unwrap();
        assert_eq!(dev.writes(), 2);
        assert_eq!(cat(&e, Category::SilentWrite), 2);
        // FUA over a silent block still reaches stable storage.
        e.write_at(&pattern(2), BS as u64, true).unwrap();
        assert_eq!((dev.writes(), dev.flushes.load(Ordering::SeqCst)), (2, 1));
        // A partial write of the bytes already there is silent too (read-modify from the cache).
        e.write_at(&pattern(2)[10..20], BS as u64 + 10, false).unwrap();
        assert_eq!(dev.writes(), 2);
        assert_eq!(dev.mem.snapshot()[..2 * BS], two[..]);
        assert_eq!(read(&e, 0, 2 * BS), two);
        s.validate().unwrap();
    }

    #[test]
    fn content_read_through_one_volume_hits_through_another() {
        let s = store(64);
        let (a, b) = (Counting::new(16 * BS), Counting::new(32 * BS));
        a.mem.write_at(&pattern(7), 5 * BS as u64, false).unwrap();
        b.mem.write_at(&pattern(7), 9 * BS as u64, false).unwrap();
        let (ea, eb) = (s.attach(a.clone(), false).unwrap(), s.attach(b.clone(), false).unwrap());
        assert_eq!((ea.volume(), eb.volume()), (0, 1));
        assert_eq!(read(&ea, 5 * BS as u64, BS), pattern(7));
        assert_eq!(cat(&ea, Category::ReadMissContentMiss), 1);
        assert_eq!(read(&eb, 9 * BS as u64, BS), pattern(7));
        assert_eq!(cat(&eb, Category::ReadMissContentHit), 1);
        let sh = eb.content_snapshot().shared;
        assert_eq!((sh.resident_blocks, sh.references, sh.exports), (1, 2, 2));
        assert!(sh.full_comparisons >= 1);
        // Now both hit, from one slot.
        assert_eq!(read(&eb, 9 * BS as u64, BS), pattern(7));
        assert_eq!(read(&ea, 5 * BS as u64 + 100, 50), pattern(7)[100..150]);
        assert_eq!(cat(&ea, Category::ReadHit) + cat(&eb, Category::ReadHit), 2);
        assert_eq!(b.reads.load(Ordering::SeqCst), 1);
        s.validate().unwrap();
    }

    #[test]
    fn write_to_a_shared_block_leaves_the_other_address_intact() {
        let s = store(64);
        let (a, b) = (Counting::new(8 * BS), Counting::new(8 * BS));
        let (ea, eb) = (s.attach(a.clone(), false).unwrap(), s.attach(b.clone(), false).unwrap());
        ea.write_at(&pattern(3), 0, false).unwrap();
        eb.write_at(&pattern(3), 2 * BS as u64, false).unwrap();
        assert_eq!(cat(&eb, Category::WriteMissContentHit), 1);
        assert_eq!(s.shared().resident_blocks, 1);
        ea.write_at(&pattern(4), 0, false).unwrap();
        assert_eq!(cat(&ea, Category::WriteHitMultiContentMiss), 1);
        // A partial write to the other address of a shared block.
        eb.write_at(&[9u8; 100], 2 * BS as u64 + 50, false).unwrap();
        let mut want = pattern(3);
        want[50..150].fill(9);
        assert_eq!(read(&ea, 0, BS), pattern(4));
        assert_eq!(read(&eb, 2 * BS as u64, BS), want);
        assert_eq!(b.mem.snapshot()[2 * BS..3 * BS], want[..]);
        assert_eq!(a.reads.load(Ordering::SeqCst) + b.reads.load(Ordering::SeqCst), 0, "all hits");
        s.validate().unwrap();
    }

    #[test]
    fn backend_write_errors_leave_the_cache_consistent() {
        for mode in [1u8, 2] {
            let s = store(64);
            let dev = Counting::new(8 * BS);
            let e = s.attach(dev.clone(), false).unwrap();
            e.write_at(&pattern(1), 0, false).unwrap();
            dev.fail.store(mode, Ordering::SeqCst);
            assert!(e.write_at(&pattern(2), 0, false).is_err());
            assert!(e.write_at(&[5u8; 10], 100, false).is_err());
            dev.fail.store(0, Ordering::SeqCst);
            s.validate().unwrap();
            // Whatever the backend holds now, reads see it.
            assert_eq!(read(&e, 0, BS), dev.mem.snapshot()[..BS]);
            assert_eq!(read(&e, 0, BS), dev.mem.snapshot()[..BS]);
            if mode == 1 {
                assert_eq!(read(&e, 0, BS), pattern(1), "nothing written, nothing lost");
            }
            s.validate().unwrap();
        }
    }

    #[test]
    fn every_access_lands_in_exactly_one_category() {
        let s = store(16);
        let (a, b) = (Counting::new(64 * BS), Counting::new(64 * BS));
        let (ea, eb) = (s.attach(a, false).unwrap(), s.attach(b, false).unwrap());
        let mut accesses = 0u64;
        let mut x = 12345u64;
        for i in 0..2000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let e = if x >> 63 == 0 { &ea } else { &eb };
            let block = (x >> 20) % 64;
            let n = 1 + (x >> 40) % 3;
            let n = n.min(64 - block);
            if (x >> 10) % 3 == 0 {
                let mut data = Vec::new();
                for j in 0..n {
                    data.extend(pattern(((x >> 50) % 5 + j) as u8));
                }
                e.write_at(&data, block * BS as u64, false).unwrap();
            } else {
                read(e, block * BS as u64, n as usize * BS);
            }
            accesses += n;
            s.validate().unwrap_or_else(|m| panic!("step {i}: {m}"));
        }
        let (sa, sb) = (ea.content_snapshot(), eb.content_snapshot());
        let sum = |c: &Categories| c.0.iter().sum::<u64>();
        assert_eq!(sum(&sa.categories) + sum(&sb.categories), accesses);
        assert_eq!(sum(&sa.shared.categories), accesses);
        for c in Category::ALL {
            assert_eq!(sa.categories.get(c) + sb.categories.get(c), sa.shared.categories.get(c), "{c:?}");
        }
        assert_eq!(sa.lookups + sb.lookups, sa.shared.lookups);
        assert_eq!(sa.full_comparisons + sb.full_comparisons, sa.shared.full_comparisons);
        // With 5 contents over 128 addresses, a small cache shares blocks.
        assert!(sa.shared.categories.get(Category::ReadMissContentHit) > 0, "{sa:?}");
        assert!(sa.shared.categories.get(Category::SilentWrite) > 0, "{sa:?}");
        let st = ea.snapshot();
        assert_eq!(st.read_block_hits, sa.categories.get(Category::ReadHit));
        assert_eq!(st.capacity_blocks, sa.shared.capacity_slots);
    }

    #[test]
    fn partial_writes_trim_and_zeroes_read_back_correctly() {
        let s = store(64);
        let dev = Counting::new(8 * BS + 1000); // a short last block
        let e = s.attach(dev.clone(), false).unwrap();
        let mut reference = vec![0u8; 8 * BS + 1000];
        let mut put = |e: &ContentBackend<Arc<Counting>>, off: usize, data: &[u8]| {
            e.write_at(data, off as u64, false).unwrap();
            reference[off..off + data.len()].copy_from_slice(data);
            reference.clone()
        };
        put(&e, 100, &[1u8; 5000]); // uncached partial blocks
        let r = put(&e, 8 * BS, &[2u8; 1000]); // the whole short block
        assert_eq!(read(&e, 0, r.len()), r);
        let r = put(&e, 4000, &[3u8; 200]); // partial, now cached: merged
        assert_eq!(read(&e, 0, r.len()), r);
        assert_eq!(dev.mem.snapshot(), r);
        e.write_zeroes(0, 2 * BS as u64, false, false).unwrap();
        let mut r = r;
        r[..2 * BS].fill(0);
        assert_eq!(read(&e, 0, r.len()), r);
        e.trim(8 * BS as u64, 1000, false).unwrap();
        r[8 * BS..].fill(0);
        assert_eq!(read(&e, 0, r.len()), r);
        assert_eq!(dev.mem.snapshot(), r);
        assert!(e.content_snapshot().partial_write_misses >= 2);
        s.validate().unwrap();
    }

    #[test]
    fn read_only_export_refuses_writes_and_serves_reads() {
        let s = store(64);
        let dev = Counting::new(4 * BS);
        dev.mem.write_at(&pattern(5), 0, false).unwrap();
        let e = s.attach(dev.clone(), true).unwrap();
        assert!(e.is_read_only());
        assert_eq!(e.write_at(&pattern(1), 0, false).unwrap_err().raw_os_error(), Some(1));
        assert!(e.trim(0, 4096, false).is_err() && e.write_zeroes(0, 4096, true, false).is_err());
        assert_eq!(read(&e, 0, BS), pattern(5));
        let mut buf = vec![0u8; BS];
        assert_eq!(e.read(0, ReadInto::Copy(&mut buf), OnMiss::Decline).unwrap(), ReadOutcome::Served);
        assert_eq!(buf, pattern(5));
        assert_eq!(dev.writes(), 0);
        s.validate().unwrap();
    }

    #[test]
    fn policies_drive_the_live_cache_and_offline_ones_are_refused() {
        for p in ["lru", "arc", "2q", "s3fifo", "clock"] {
            let mut c = ContentConfig::new(16 * BS as u64);
            c.policy = PolicySpec::parse(p).unwrap();
            let s = ContentStore::new(c).unwrap();
            let e = s.attach(Counting::new(64 * BS), false).unwrap();
            for i in 0..64u64 {
                e.write_at(&pattern((i % 7) as u8), i * BS as u64, false).unwrap();
            }
            for i in 0..64u64 {
                assert_eq!(read(&e, i * BS as u64, BS), pattern((i % 7) as u8), "{p}");
            }
            s.validate().unwrap_or_else(|m| panic!("{p}: {m}"));
        }
        let mut c = ContentConfig::new(16 * BS as u64);
        c.policy = PolicySpec::parse("opt").unwrap();
        assert!(matches!(ContentStore::new(c), Err(ContentError::Dedup(DedupError::Offline(_)))));
    }

    /// A read miss that read the old bytes, overtaken by a write (or TRIM) that leaves the address uncached,
    /// must not cache what it read: staged deterministically with a gated backend read.
    #[test]
    fn a_read_miss_overtaken_by_a_write_caches_nothing_stale() {
        type Op = fn(&ContentBackend<Arc<Counting>>);
        let ops: [(Op, u8); 3] = [
            (|e| e.write_at(&[9u8; 100], 10, false).unwrap(), 9), // partial write to an uncached block
            (|e| e.trim(0, BS as u64, false).unwrap(), 0),
            (|e| e.write_zeroes(0, BS as u64, false, false).unwrap(), 0),
        ];
        for (op, byte) in ops {
            let s = store(64);
            let dev = Counting::new(4 * BS);
            dev.mem.write_at(&pattern(1), 0, false).unwrap();
            let e = Arc::new(s.attach(dev.clone(), false).unwrap());
            let (entered_tx, entered_rx) = std::sync::mpsc::channel();
            let (release_tx, release_rx) = std::sync::mpsc::channel();
            *dev.gate.lock().unwrap() = Some((entered_tx, release_rx));
            let e2 = e.clone();
            let reader = std::thread::spawn(move || read(&*e2, 0, BS));
            entered_rx.recv().unwrap();
            op(&e);
            release_tx.send(()).unwrap();
            assert_eq!(reader.join().unwrap(), pattern(1), "the racing read returns what it read");
            assert_eq!(e.content_snapshot().fills_dropped, 1);
            let now = dev.mem.snapshot()[..BS].to_vec();
            assert_eq!(now[10], byte);
            assert_eq!(read(&*e, 0, BS), now, "no stale block cached");
            assert_eq!(read(&*e, 0, BS), now);
            s.validate().unwrap();
        }
    }

    /// Writers own disjoint block ranges (so the final contents are known) and write whole and partial blocks
    /// of a few contents (so blocks are shared); readers read everything, across ranges, through both exports,
    /// on a slow backend (so read misses overlap writes). Afterwards every block read through the cache equals
    /// the reference and the backend.
    #[test]
    fn concurrent_readers_and_writers_never_leave_stale_data() {
        const BLOCKS: u64 = 48;
        let s = store(256); // everything fits: a stale block would stay until checked
        let devs = [Counting::slow(BLOCKS as usize * BS), Counting::slow(BLOCKS as usize * BS)];
        let exps: Vec<Arc<ContentBackend<Arc<Counting>>>> =
            devs.iter().map(|d| Arc::new(s.attach(d.clone(), false).unwrap())).collect();
        let writers = 4u64;
        let per = BLOCKS / writers;
        let refs: Vec<Vec<Vec<u8>>> = std::thread::scope(|sc| {
            let mut hs = Vec::new();
            for w in 0..writers {
                let exps = exps.clone();
                hs.push(sc.spawn(move || {
                    let mut reference = vec![vec![0u8; BLOCKS as usize * BS]; 2];
                    let mut x = 99 + w;
                    for _ in 0..300 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let v = (x >> 60) as usize % 2;
                        let b = w * per + (x >> 20) % per;
                        let off = b as usize * BS + if x & 1 == 0 { 0 } else { (x >> 8) as usize % BS };
                        let len = if x & 1 == 0 { BS } else { 1 + (x >> 30) as usize % 300 };
                        let len = len.min(((w + 1) * per) as usize * BS - off);
                        let data: Vec<u8> = pattern((x >> 40) as u8 % 4)[..len].to_vec();
                        exps[v].write_at(&data, off as u64, false).unwrap();
                        reference[v][off..off + len].copy_from_slice(&data);
                    }
                    reference
                }));
            }
            for r in 0..4u64 {
                let exps = exps.clone();
                sc.spawn(move || {
                    let mut x = 7 + r;
                    for _ in 0..400 {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        let b = (x >> 20) % (BLOCKS - 3);
                        read(&*exps[(x >> 62) as usize % 2], b * BS as u64, 3 * BS);
                    }
                });
            }
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        s.validate().unwrap();
        for v in 0..2 {
            let mut want = vec![0u8; BLOCKS as usize * BS];
            for (w, r) in refs.iter().enumerate() {
                let lo = w * per as usize * BS;
                let hi = lo + per as usize * BS;
                want[lo..hi].copy_from_slice(&r[v][lo..hi]);
            }
            assert!(devs[v].mem.snapshot() == want, "backend {v} holds the acknowledged data");
            // Twice: misses fill the cache, then hits come from it.
            for _ in 0..2 {
                for b in 0..BLOCKS {
                    let got = read(&*exps[v], b * BS as u64, BS);
                    assert!(got[..] == want[b as usize * BS..(b as usize + 1) * BS], "volume {v} block {b} stale");
                }
            }
        }
        s.validate().unwrap();
    }
}
