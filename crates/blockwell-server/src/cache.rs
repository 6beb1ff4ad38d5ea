//! [`CachedBackend`]: a RAM block cache over a backend, driven by the same engine as the simulator
//! ([`BlockCache`] over a policy built from a [`PolicySpec`]).
//!
//! The engine decides (hits, missed runs, victims); this layer moves data. Block data lives in block-sized
//! slots allocated lazily up to the budget; a map from block number to slot is kept in step with the engine
//! (a victim's slot is freed at once), so the slots allocated never exceed the capacity in blocks.
//!
//! ## Concurrency
//! One mutex guards the engine, the map and the slots; it is never held during backend I/O, nor while a large
//! read copies its data (it holds references to the slots instead; a slot so held is copied before a write and
//! not reused for another block). A read plans under
//! the lock (hits are copied out, each missed block the engine admitted is marked *pending* with the request's
//! token), reads the missed runs from the backend without the lock (one request per run, whole blocks), and
//! installs a fetched block only if it is still pending with its own token. Every write updates the backend
//! first, then, under the lock, patches, installs or drops the cached copies; a write that finds a block pending
//! takes it over (a whole-block write installs its data, a partial one drops the block), so a fetch that
//! started before the write can never install stale data. Writes to overlapping blocks are serialized by
//! striped write locks, so that the order of backend writes and of cache updates agree.
//!
//! ## Cost
//! Per cached block: the block's slot, 8 B of slot pointer and 32 B of `Arc` header and boxed-slice pointer,
//! about 24 B in the map, plus the policy's metadata (see each policy's module doc).

use crate::backend::{forward_backend, Backend};
use crate::stats::{Counters, StatsSnapshot};
use blockwell_core::key::{block_span, MAX_BLOCK};
use blockwell_core::policy::PolicyError;
use blockwell_core::prefetch::{
    BlockState, BlockView, Demand, Fetch, PrefetchError, Prefetcher, PrefetcherKind, PrefetcherSpec,
};
use blockwell_core::redcap::{ReadPlan, Redcap, RedcapConfig};
use blockwell_core::{Access, BlockCache, BlockKey, CacheConfig, CacheError, DynPolicy, Op, Plan, PolicySpec, Preset};
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::io;
use std::str::FromStr;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::Instant;

/// Streams tracked by the sequential cutoff.
const STREAMS: usize = 16;
/// Blocks per prefetch group (one backend request) of the CACHE command.
const PREFETCH_GROUP: usize = 256;
/// Asynchronous prefetch ranges waiting for the worker; more are dropped (and counted).
const ASYNC_QUEUE: usize = 256;
/// Worker messages that are not ranges.
const STOP: u64 = u64::MAX;
const QUIESCE: u64 = u64::MAX - 1;

/// What writes do.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WriteMode {
    /// Write the backend first, then update cached copies (and cache whole written blocks).
    #[default]
    WriteThrough,
    /// Write the backend and drop cached copies.
    WriteAround,
    /// Refuse writes (EPERM).
    ReadOnly,
}

impl WriteMode {
    pub fn name(self) -> &'static str {
        match self {
            WriteMode::WriteThrough => "write-through",
            WriteMode::WriteAround => "write-around",
            WriteMode::ReadOnly => "read-only",
        }
    }
}

impl FromStr for WriteMode {
    type Err = CachedError;
    fn from_str(s: &str) -> Result<Self, CachedError> {
        [WriteMode::WriteThrough, WriteMode::WriteAround, WriteMode::ReadOnly]
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| CachedError::Mode(s.to_string()))
    }
}

/// Which missed blocks enter the cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Admission {
    /// Every missed block.
    #[default]
    Always,
    /// A block on its N-th miss within a bounded history of recent misses (as many entries as the cache
    /// has blocks). `n-hit:1` is `always`.
    NHit(u32),
}

impl FromStr for Admission {
    type Err = CachedError;
    fn from_str(s: &str) -> Result<Self, CachedError> {
        let t = s.trim().to_ascii_lowercase();
        if t == "always" {
            return Ok(Admission::Always);
        }
        match t.strip_prefix("n-hit:").map(str::parse::<u32>) {
            Some(Ok(n)) if n >= 1 => Ok(Admission::NHit(n)),
            _ => Err(CachedError::Admission(s.to_string())),
        }
    }
}

/// Configuration of a [`CachedBackend`].
#[derive(Clone, Debug)]
pub struct CachedConfig {
    /// Block size in bytes (power of two, 512 B..1 MiB).
    pub block_size: u64,
    /// RAM budget in bytes.
    pub capacity_bytes: u64,
    pub policy: PolicySpec,
    pub preset: Preset,
    pub mode: WriteMode,
    pub admission: Admission,
    /// A stream of back-to-back requests reaching this many bytes bypasses the cache (bcache's
    /// `sequential_cutoff`); 0 turns it off.
    pub sequential_cutoff: u64,
    /// The prefetcher (`none`, `redcap`, `linux24`, `ondemand`, `stride`, ...; see `docs/prefetchers.md`).
    pub prefetch: PrefetcherSpec,
}

impl CachedConfig {
    /// LRU at 4 KiB blocks, write-through, admit always, no sequential cutoff.
    pub fn new(capacity_bytes: u64) -> Self {
        CachedConfig {
            block_size: blockwell_core::cache::DEFAULT_BLOCK_SIZE,
            capacity_bytes,
            policy: PolicySpec::new(blockwell_core::PolicyKind::Lru),
            preset: Preset::Default,
            mode: WriteMode::default(),
            admission: Admission::default(),
            sequential_cutoff: 0,
            prefetch: PrefetcherSpec::new(PrefetcherKind::NoPrefetch),
        }
    }
}

/// Errors building a [`CachedBackend`].
#[derive(Debug, thiserror::Error)]
pub enum CachedError {
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(
        "policy '{policy}' with preset '{preset}' sets libcachesim_quirks, which may hold more blocks than the \
         capacity; the live cache refuses it (use another preset or libcachesim_quirks=false)"
    )]
    Quirks { policy: String, preset: &'static str },
    #[error("policy '{0}' needs the future (next-use times) and cannot drive a live cache")]
    Offline(String),
    #[error("unknown write mode '{0}' (known: write-through, write-around, read-only)")]
    Mode(String),
    #[error("bad admission '{0}' (expected 'always' or 'n-hit:N' with N >= 1)")]
    Admission(String),
    #[error("device of {size} B has more blocks of {block_size} B than a block key holds")]
    DeviceTooLarge { size: u64, block_size: u64 },
    #[error(transparent)]
    Prefetch(#[from] PrefetchError),
    #[error("cannot start the prefetch worker: {0}")]
    Worker(io::Error),
}

/// Hash of a block number for the slot map: one multiply and a fold (SipHash costs more than the rest of a
/// cache hit). Keys are block numbers of one device, not attacker-chosen in a way that matters: the map holds at
/// most as many entries as the cache has blocks.
#[derive(Default)]
struct BlockHasher(u64);

impl Hasher for BlockHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        let h = (self.0 ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 32);
    }
}

type BlockMap<V> = HashMap<u64, V, BuildHasherDefault<BlockHasher>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Entry {
    /// Resident in the engine, data being fetched by the request holding this token.
    Pending(u64),
    /// Resident, data in this slot.
    Ready(u32),
}

/// The bounded recent-miss history of `n-hit` admission.
struct MissHistory {
    n: u32,
    cap: usize,
    seq: u64,
    counts: BlockMap<(u32, u64)>,
    fifo: VecDeque<(u64, u64)>,
}

impl MissHistory {
    /// Records a miss of `block`; true when it is the N-th (the block is then forgotten and admitted).
    fn admit(&mut self, block: u64) -> bool {
        self.seq += 1;
        let seq = self.seq;
        let e = self.counts.entry(block).or_insert_with(|| {
            self.fifo.push_back((block, seq));
            (0, seq)
        });
        e.0 += 1;
        if e.0 >= self.n {
            self.counts.remove(&block);
            return true;
        }
        while self.counts.len() > self.cap {
            let Some((b, s)) = self.fifo.pop_front() else { break };
            if self.counts.get(&b).is_some_and(|e| e.1 == s) {
                self.counts.remove(&b);
            }
        }
        // Entries of forgotten blocks linger in the FIFO; keep it bounded too.
        while self.fifo.len() > 2 * self.cap + 1 {
            let Some((b, s)) = self.fifo.pop_front() else { break };
            if self.counts.get(&b).is_some_and(|e| e.1 == s) {
                self.counts.remove(&b);
            }
        }
        false
    }
}

/// Per-stream end offsets for the sequential cutoff: (end, sequential bytes, last use).
#[derive(Default)]
struct Streams {
    clock: u64,
    streams: Vec<(u64, u64, u64)>,
}

impl Streams {
    /// The bytes of the sequential run a request at `offset` would make, without recording it.
    fn peek(&self, offset: u64, len: u64) -> u64 {
        self.streams.iter().find(|s| s.0 == offset).map_or(len, |s| s.1 + len)
    }

    /// Records a request; returns the bytes of the sequential run it extends (its own length included).
    fn observe(&mut self, offset: u64, len: u64) -> u64 {
        self.clock += 1;
        let now = self.clock;
        if let Some(s) = self.streams.iter_mut().find(|s| s.0 == offset) {
            s.0 = offset + len;
            s.1 += len;
            s.2 = now;
            return s.1;
        }
        let fresh = (offset + len, len, now);
        if self.streams.len() < STREAMS {
            self.streams.push(fresh);
        } else if let Some(oldest) = self.streams.iter_mut().min_by_key(|s| s.2) {
            *oldest = fresh;
        }
        len
    }
}

struct State {
    engine: BlockCache<dyn DynPolicy>,
    map: BlockMap<Entry>,
    /// Block data. Shared (`Arc`) so that a large read can copy a block after letting go of the lock: a slot
    /// still held by such a reader is never written in place (writes copy it first, reuse allocates anew).
    slots: Vec<Slot>,
    free: Vec<u32>,
    history: Option<MissHistory>,
    streams: Streams,
    next_token: u64,
    plan: Plan,
    prefetcher: Box<dyn Prefetcher>,
    /// Scratch for the prefetcher's proposals.
    fetches: Vec<Fetch>,
    /// With the `redcap` prefetcher: its segment cache run in the shadow, to estimate the time with REDCAP
    /// while it is switched off.
    redcap: Option<Redcap>,
    redcap_plan: ReadPlan,
    timing: IoModel,
}

/// An online estimate of the backend's read time, `latency + bytes * per_byte`, from measured reads: REDCAP's
/// activation compares measured time with an estimate of the time the other way (seed `000_*`: "the
/// algorithm is independent of the underlying device, because it only takes into account the I/O time of the
/// issued disk requests"). Latency is a moving average over reads of at most 8 KiB, the per-byte cost one over
/// reads of 64 KiB or more (after the latency is taken off).
///
/// While REDCAP is on, every read miss reads a whole segment, so small reads (the latency) would never be seen:
/// the first 4 read misses with a segment to fetch, and then one in [`PROBE_EVERY`], read only their own blocks
/// ([`IoModel::probe`]) and are left out of the activation algorithm's sums.
#[derive(Default)]
struct IoModel {
    latency_ns: f64,
    per_byte_ns: f64,
    small: u64,
    large: u64,
    misses: u64,
}

/// One read miss in this many is a probe (see [`IoModel`]).
const PROBE_EVERY: u64 = 32;

impl IoModel {
    /// Called for each read miss that would fetch a segment: should this one read only its own blocks?
    fn probe(&mut self) -> bool {
        self.misses += 1;
        self.small < 4 || self.misses % PROBE_EVERY == 0
    }

    fn observe(&mut self, bytes: u64, ns: u64) {
        let t = ns as f64;
        if bytes <= 8192 {
            self.small += 1;
            let w = if self.small < 8 { 1.0 / self.small as f64 } else { 0.125 };
            self.latency_ns += w * (t - self.latency_ns);
        } else if bytes >= 65536 {
            self.large += 1;
            let w = if self.large < 8 { 1.0 / self.large as f64 } else { 0.125 };
            let lat = if self.small > 0 { self.latency_ns.min(t) } else { 0.0 };
            self.per_byte_ns += w * ((t - lat) / bytes as f64 - self.per_byte_ns);
        }
        if self.small == 0 && self.latency_ns == 0.0 {
            // Until a small read is seen, a large read's time is the best guess of a request's cost.
            self.latency_ns = t;
        }
    }

    /// Estimated time of one read of `bytes`.
    fn estimate(&self, bytes: u64) -> u64 {
        (self.latency_ns + self.per_byte_ns * bytes as f64).max(0.0) as u64
    }
}

/// The cache's map as a prefetcher sees it: data present is resident, data being fetched is in flight.
struct MapView<'a>(&'a BlockMap<Entry>);

impl BlockView for MapView<'_> {
    fn state(&self, key: BlockKey) -> BlockState {
        match self.0.get(&key.block()) {
            Some(Entry::Ready(_)) => BlockState::Resident,
            Some(Entry::Pending(_)) => BlockState::InFlight,
            None => BlockState::Absent,
        }
    }
}

/// One block of data.
/// A block's bytes. `Arc<[u8]>` keeps the length in the pointer and the bytes right after the counts, so a hit
/// touches one allocation, not a header and then a separate buffer.
type Slot = Arc<[u8]>;

/// A new zero-filled slot.
fn new_slot(block_size: usize) -> Slot {
    Arc::from(vec![0u8; block_size])
}

/// The slot's bytes to write, copied first if a reader still holds the slot (copy on write).
fn unique(slot: &mut Slot) -> &mut [u8] {
    if Arc::get_mut(slot).is_none() {
        *slot = Arc::from(&slot[..]);
    }
    Arc::get_mut(slot).expect("the slot was just made unique")
}

/// Where a fast read's data goes: copied into the caller's buffer, or shared as references to the slots.
enum FastSink<'a> {
    Copy(&'a mut [u8]),
    Share(&'a mut Vec<crate::backend::SharedBytes>),
}

/// Requests of more blocks than this copy their data after releasing the cache's lock (so that large reads by
/// several workers copy in parallel); smaller ones copy under it (cheaper than taking references).
const COPY_UNLOCKED_BLOCKS: u64 = 16;

/// The runs of `true` in `mask`, as index ranges `(start, end)`. Also used by [`crate::content`].
pub(crate) fn runs(mask: &[bool]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < mask.len() && !mask[i] {
            i += 1;
        }
        let start = i;
        while i < mask.len() && mask[i] {
            i += 1;
        }
        (start < i).then_some((start, i))
    })
}

fn key(block: u64) -> BlockKey {
    BlockKey::new(0, block).expect("block numbers are checked against the device size at construction")
}

impl State {
    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    /// Replaces the map entry of `block`, freeing its slot.
    fn set_entry(&mut self, block: u64, e: Option<Entry>) {
        let old = match e {
            Some(e) => self.map.insert(block, e),
            None => self.map.remove(&block),
        };
        if let Some(Entry::Ready(s)) = old {
            self.free.push(s);
        }
    }

    /// Drops a block from the engine and the map. Returns whether it was resident.
    fn invalidate(&mut self, block: u64) -> bool {
        let was = self.engine.invalidate(key(block));
        self.set_entry(block, None);
        was
    }

    /// Puts `data` (one block, possibly short at the end of the device) in a slot for `block`.
    fn install(&mut self, block: u64, data: &[u8], capacity: usize, block_size: usize) {
        let slot = match self.free.pop() {
            Some(s) => s,
            None if self.slots.len() < capacity => {
                self.slots.push(new_slot(block_size));
                (self.slots.len() - 1) as u32
            }
            None => {
                // Unreachable while every Ready entry is resident in the engine and the policy respects its
                // capacity; stay correct anyway: do not cache.
                debug_assert!(false, "no free slot with {} slots", self.slots.len());
                self.invalidate(block);
                return;
            }
        };
        let arc = &mut self.slots[slot as usize];
        if Arc::get_mut(arc).is_none() {
            // A reader still copies the slot's previous block: leave that memory to it.
            *arc = new_slot(block_size);
        }
        let s = Arc::get_mut(arc).expect("the slot was just made unique");
        s[..data.len()].copy_from_slice(data);
        s[data.len()..].fill(0);
        self.set_entry(block, Some(Entry::Ready(slot)));
    }

    /// Engine accesses for blocks `first..first+vis.len()`: each run of visible blocks is one engine request.
    /// Missed blocks the engine kept become `Pending(token)`; victims lose their entries. Returns, per block,
    /// whether it hit in the engine (false for invisible blocks).
    fn access(&mut self, op: Op, first: u64, vis: &[bool], token: u64) -> Vec<bool> {
        let mut hit = vis.to_vec();
        let mut plan = std::mem::take(&mut self.plan);
        for (start, i) in runs(vis) {
            self.engine.access_blocks(op, key(first + start as u64), (i - start) as u64, &[], &mut plan);
            for &(k, n) in &plan.misses {
                for b in k.block()..k.block() + n {
                    hit[(b - first) as usize] = false;
                    let e = self.engine.contains(key(b)).then_some(Entry::Pending(token));
                    self.set_entry(b, e);
                }
            }
            self.forget_victims(&plan);
        }
        self.plan = plan;
        hit
    }

    /// Drops the entries of `plan`'s victims and tells the prefetcher.
    fn forget_victims(&mut self, plan: &Plan) {
        for v in &plan.victims {
            self.prefetcher.on_evict(v);
            if !self.engine.contains(v.key) {
                self.set_entry(v.key.block(), None);
            }
        }
    }

    /// Inserts the absent blocks of `first..first+n` as one prefetch group per [`PREFETCH_GROUP`] blocks
    /// (the policy's seed-001 adaptation) and marks those the policy kept `Pending(token)`. Returns how many.
    fn prefetch_range(&mut self, first: u64, n: u64, token: u64) -> u64 {
        let mut plan = std::mem::take(&mut self.plan);
        let mut group = Vec::with_capacity(PREFETCH_GROUP.min(n as usize));
        let mut inserted = 0;
        let mut b = first;
        while b < first + n {
            group.clear();
            while b < first + n && group.len() < PREFETCH_GROUP {
                if !self.map.contains_key(&b) && !self.engine.contains(key(b)) {
                    group.push(Access::new(key(b)));
                }
                b += 1;
            }
            if group.is_empty() {
                continue;
            }
            plan.clear();
            self.engine.prefetch(&group, &mut plan);
            for a in &group {
                if self.engine.contains(a.key) {
                    self.set_entry(a.key.block(), Some(Entry::Pending(token)));
                    inserted += 1;
                }
            }
            self.forget_victims(&plan);
        }
        self.plan = plan;
        inserted
    }

    /// Whether a request extends a sequential stream past the cutoff.
    fn bypass(&mut self, cutoff: u64, offset: u64, len: u64) -> bool {
        cutoff > 0 && self.streams.observe(offset, len) >= cutoff
    }

    fn admit(&mut self, block: u64) -> bool {
        match &mut self.history {
            None => true,
            Some(h) => h.admit(block),
        }
    }
}

/// A RAM cache over a backend. See the module documentation.
pub struct CachedBackend<B: Backend + 'static> {
    inner: Arc<Inner<B>>,
    worker: Option<JoinHandle<()>>,
}

/// The cache proper, shared with the asynchronous prefetch worker.
struct Inner<B> {
    backend: B,
    /// Asynchronous prefetch ranges (first block, blocks) for the worker; `None` without a prefetcher.
    async_tx: Option<SyncSender<(u64, u64)>>,
    /// Who waits for [`CachedBackend::quiesce`].
    quiesce: Mutex<Option<SyncSender<()>>>,
    state: Mutex<State>,
    stripes: crate::backend::WriteStripes,
    counters: Counters,
    block_size: u64,
    size: u64,
    capacity: usize,
    mode: WriteMode,
    cutoff: u64,
}

impl<B: Backend + 'static> CachedBackend<B> {
    /// A cache of `config` over `backend`. Refuses policies that may exceed their capacity
    /// (`libcachesim_quirks`) and offline policies (OPT). With a prefetcher, starts the worker thread that
    /// performs its asynchronous fetches.
    pub fn new(backend: B, config: CachedConfig) -> Result<Self, CachedError> {
        let prefetching = config.prefetch.kind != PrefetcherKind::NoPrefetch;
        let (tx, rx) = if prefetching {
            let (tx, rx) = sync_channel(ASYNC_QUEUE);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let inner = Arc::new(Inner::new(backend, config, tx)?);
        let worker = match rx {
            Some(rx) => {
                let i = inner.clone();
                Some(
                    thread::Builder::new()
                        .name("cache-prefetch".into())
                        .spawn(move || i.prefetch_worker(rx))
                        .map_err(CachedError::Worker)?,
                )
            }
            None => None,
        };
        Ok(CachedBackend { inner, worker })
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner.backend
    }

    pub fn capacity_blocks(&self) -> usize {
        self.inner.capacity
    }

    /// All counters.
    pub fn snapshot(&self) -> StatsSnapshot {
        self.inner.snapshot()
    }

    /// Checks the layer's invariants: every entry is resident in the engine, slots are not shared, every slot
    /// is either in use or free, and no more slots than blocks of capacity exist.
    pub fn validate(&self) -> Result<(), String> {
        self.inner.validate()
    }

    /// Waits until the asynchronous prefetches queued so far have been performed (tests, benchmarks).
    pub fn quiesce(&self) {
        if let Some(tx) = &self.inner.async_tx {
            let (done_tx, done_rx) = sync_channel(1);
            *self.inner.quiesce.lock().unwrap_or_else(|e| e.into_inner()) = Some(done_tx);
            if tx.send((QUIESCE, 0)).is_ok() {
                let _ = done_rx.recv();
            }
        }
    }
}

impl<B: Backend + 'static> Drop for CachedBackend<B> {
    fn drop(&mut self) {
        if let Some(tx) = &self.inner.async_tx {
            let _ = tx.send((STOP, 0));
        }
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl<B: Backend> Inner<B> {
    fn new(backend: B, config: CachedConfig, async_tx: Option<SyncSender<(u64, u64)>>) -> Result<Self, CachedError> {
        let cc = CacheConfig::new(config.block_size, config.capacity_bytes)?;
        let resolved = config.policy.config(config.preset)?;
        if resolved.get("libcachesim_quirks") == Some(&serde_json::Value::Bool(true)) {
            return Err(CachedError::Quirks {
                policy: config.policy.label().to_string(),
                preset: config.preset.name(),
            });
        }
        if config.policy.kind.needs_next_use() {
            return Err(CachedError::Offline(config.policy.label().to_string()));
        }
        let size = backend.size();
        if size.div_ceil(config.block_size) > MAX_BLOCK {
            return Err(CachedError::DeviceTooLarge { size, block_size: config.block_size });
        }
        let capacity = cc.capacity_blocks();
        let policy = config.policy.build(config.preset, capacity)?;
        let history = match config.admission {
            Admission::NHit(n) if n > 1 => {
                Some(MissHistory { n, cap: capacity, seq: 0, counts: BlockMap::default(), fifo: VecDeque::new() })
            }
            _ => None,
        };
        let prefetcher = config.prefetch.build(config.block_size)?;
        let redcap = if config.prefetch.kind == PrefetcherKind::Redcap {
            let c = config.prefetch.config()?;
            let seg_kb = c.get("segment_kb").and_then(serde_json::Value::as_u64).unwrap_or(128);
            let seg_blocks = (seg_kb * 1024 / config.block_size).max(1);
            let segments = (capacity as u64 / seg_blocks).max(1) as usize;
            Some(Redcap::new(RedcapConfig { segments, segment_blocks: seg_blocks }).map_err(|e| {
                CachedError::Prefetch(PrefetchError::Invalid { prefetcher: "redcap".into(), message: e.to_string() })
            })?)
        } else {
            None
        };
        Ok(Inner {
            backend,
            async_tx,
            quiesce: Mutex::new(None),
            state: Mutex::new(State {
                engine: BlockCache::new(cc, policy),
                map: BlockMap::default(),
                slots: Vec::new(),
                free: Vec::new(),
                history,
                streams: Streams::default(),
                next_token: 0,
                plan: Plan::default(),
                prefetcher,
                fetches: Vec::new(),
                redcap,
                redcap_plan: ReadPlan::default(),
                timing: IoModel::default(),
            }),
            stripes: crate::backend::WriteStripes::new(),
            counters: Counters::default(),
            block_size: config.block_size,
            size,
            capacity,
            mode: config.mode,
            cutoff: config.sequential_cutoff,
        })
    }

    fn snapshot(&self) -> StatsSnapshot {
        let st = self.lock();
        let mut s = StatsSnapshot::build(
            &self.counters,
            st.engine.stats(),
            st.slots.len() as u64,
            self.capacity as u64,
            st.engine.policy().len() as u64,
        );
        if st.redcap.is_some() {
            s.redcap_active = Some(st.prefetcher.is_active());
        }
        s
    }

    fn validate(&self) -> Result<(), String> {
        let st = self.lock();
        st.engine.policy().validate()?;
        if st.slots.len() > self.capacity {
            return Err(format!("{} slots for {} blocks", st.slots.len(), self.capacity));
        }
        let mut used = vec![false; st.slots.len()];
        for &s in &st.free {
            if std::mem::replace(&mut used[s as usize], true) {
                return Err(format!("slot {s} freed twice"));
            }
        }
        for (&b, e) in &st.map {
            if !st.engine.contains(key(b)) {
                return Err(format!("block {b} has an entry but is not resident"));
            }
            if let Entry::Ready(s) = e {
                if std::mem::replace(&mut used[*s as usize], true) {
                    return Err(format!("slot {s} of block {b} is shared or free"));
                }
            }
        }
        if let Some(s) = used.iter().position(|u| !u) {
            return Err(format!("slot {s} leaked"));
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes of `block` inside the device.
    fn block_len(&self, block: u64) -> usize {
        (self.size - block * self.block_size).min(self.block_size) as usize
    }

    /// Copies the part of block `block` (data `src`) that lies in the request `[offset, offset+buf.len())`.
    fn copy_out(&self, block: u64, src: &[u8], buf: &mut [u8], offset: u64) {
        let start = block * self.block_size;
        let lo = start.max(offset);
        let hi = (start + src.len() as u64).min(offset + buf.len() as u64);
        if lo < hi {
            buf[(lo - offset) as usize..(hi - offset) as usize]
                .copy_from_slice(&src[(lo - start) as usize..(hi - start) as usize]);
        }
    }

    fn backend_read(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        Counters::add(&self.counters.backend_reads, 1);
        Counters::add(&self.counters.backend_bytes_read, buf.len() as u64);
        self.backend.read_at(buf, offset)
    }

    /// Reads the runs of blocks marked in `need` (relative to `first`) from the backend, one request per run,
    /// copies the part inside the request `[offset, offset + buf.len())` into `buf` (when given) and installs
    /// blocks still `Pending(token)`. Returns the backend time spent, in ns; each read's time also feeds the
    /// [`IoModel`].
    fn fetch(&self, first: u64, need: &[bool], token: u64, mut buf: Option<(&mut [u8], u64)>) -> io::Result<u64> {
        let mut fetched: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut timed: Vec<(u64, u64)> = Vec::new();
        let mut result = Ok(());
        for (start, i) in runs(need) {
            let b0 = first + start as u64;
            let off = b0 * self.block_size;
            let end = ((first + i as u64) * self.block_size).min(self.size);
            let mut data = vec![0u8; (end - off) as usize];
            let t0 = Instant::now();
            if let Err(e) = self.backend_read(&mut data, off) {
                result = Err(e);
                break;
            }
            timed.push((end - off, t0.elapsed().as_nanos() as u64));
            if let Some((buf, offset)) = buf.as_mut() {
                let lo = off.max(*offset);
                let hi = end.min(*offset + buf.len() as u64);
                if lo < hi {
                    buf[(lo - *offset) as usize..(hi - *offset) as usize]
                        .copy_from_slice(&data[(lo - off) as usize..(hi - off) as usize]);
                }
            }
            fetched.push((b0, data));
        }
        let mut st = self.lock();
        for &(bytes, ns) in &timed {
            st.timing.observe(bytes, ns);
        }
        if let Err(e) = result {
            // Drop what this request left pending: nobody will fill it.
            for (j, _) in need.iter().enumerate().filter(|x| *x.1) {
                let b = first + j as u64;
                if st.map.get(&b) == Some(&Entry::Pending(token)) {
                    st.invalidate(b);
                }
            }
            return Err(e);
        }
        let bs = self.block_size as usize;
        for (b0, data) in &fetched {
            for (j, chunk) in data.chunks(bs).enumerate() {
                let b = b0 + j as u64;
                if st.map.get(&b) == Some(&Entry::Pending(token)) {
                    st.install(b, chunk, self.capacity, bs);
                }
            }
        }
        Ok(timed.iter().map(|t| t.1).sum())
    }

    /// A read served at once from resident blocks, or nothing at all (`false`): see
    /// [`Backend::try_read_fast`] and [`Backend::try_read_shared`].
    fn fast_read(&self, offset: u64, len: u64, mut sink: FastSink<'_>) -> bool {
        if len == 0 {
            return false;
        }
        let (first, n) = block_span(offset, len, self.block_size);
        let mut st = self.lock();
        if self.cutoff > 0 && st.streams.peek(offset, len) >= self.cutoff {
            return false;
        }
        // Take the data while checking that every block is there (large copies take references and copy
        // later); on the first block that is not, give up (what was copied is overwritten by the slow path).
        let mut later: Vec<(u64, Slot)> = Vec::new();
        for b in first..first + n {
            let Some(&Entry::Ready(s)) = st.map.get(&b) else { return false };
            let slot = &st.slots[s as usize];
            match &mut sink {
                FastSink::Copy(buf) if n <= COPY_UNLOCKED_BLOCKS => {
                    self.copy_out(b, &slot[..self.block_len(b)], buf, offset)
                }
                FastSink::Copy(_) => later.push((b, slot.clone())),
                FastSink::Share(out) => {
                    let start = b * self.block_size;
                    let lo = start.max(offset);
                    let hi = (start + self.block_len(b) as u64).min(offset + len);
                    out.push(crate::backend::SharedBytes {
                        buf: slot.clone(),
                        start: (lo - start) as usize,
                        end: (hi - start) as usize,
                    });
                }
            }
        }
        // Every block is resident with its data: the steps of `read_at`, where each block hits.
        st.bypass(self.cutoff, offset, len);
        self.propose(&mut st, Op::Read, first, n);
        // Nothing is missing, so synchronous proposals (outside the request) are read in the background.
        for f in &st.fetches {
            self.queue_async(f.first.block(), f.n);
        }
        let used = st.engine.stats().prefetch_used;
        let mut plan = std::mem::take(&mut st.plan);
        st.engine.access_blocks(Op::Read, key(first), n, &[], &mut plan);
        debug_assert!(plan.misses.is_empty() && plan.victims.is_empty(), "a resident block missed");
        st.plan = plan;
        let first_hits = st.engine.stats().prefetch_used - used;
        self.redcap_step(&mut st, first, n, 0, first_hits);
        drop(st);
        if let FastSink::Copy(buf) = sink {
            for (b, slot) in &later {
                self.copy_out(*b, &slot[..self.block_len(*b)], buf, offset);
            }
        }
        Counters::add(&self.counters.read_requests, 1);
        Counters::add(&self.counters.read_request_hits, 1);
        true
    }

    /// Blocks of the device.
    fn blocks(&self) -> u64 {
        self.size.div_ceil(self.block_size)
    }

    /// Asks the prefetcher about a demand request; queues its asynchronous proposals for the worker and returns
    /// the synchronous ones (in `st.fetches`).
    fn propose(&self, st: &mut State, op: Op, first: u64, n: u64) {
        st.fetches.clear();
        if self.async_tx.is_none() || n == 0 {
            return;
        }
        let d = Demand { stream: 0, op, first: key(first), n, end: self.blocks() };
        let State { prefetcher, map, fetches, .. } = st;
        prefetcher.on_demand(&d, &MapView(map), fetches);
        fetches.retain(|f| {
            if !f.sync {
                self.queue_async(f.first.block(), f.n);
            }
            f.sync
        });
    }

    /// Hands blocks `first..first+n` (clipped to the device) to the prefetch worker; a full queue drops them
    /// (counted).
    fn queue_async(&self, first: u64, n: u64) {
        let Some(tx) = &self.async_tx else { return };
        let lo = first.min(self.blocks());
        let n = n.min(self.blocks() - lo);
        if n > 0 && tx.try_send((lo, n)).is_err() {
            Counters::add(&self.counters.prefetch_dropped, 1);
        }
    }

    /// REDCAP's activation–deactivation step for one read request of `n` blocks from `first`: `measured_ns` is
    /// the backend time the request took; `demand_blocks` the blocks a cache without REDCAP's segments would
    /// have read (misses and first hits on prefetched blocks). The segment cache runs in the shadow all along,
    /// so that while REDCAP is off the time with it can be estimated.
    fn redcap_step(&self, st: &mut State, first: u64, n: u64, measured_ns: u64, demand_blocks: u64) {
        let State { redcap, redcap_plan, prefetcher, timing, .. } = st;
        let Some(shadow) = redcap.as_mut() else { return };
        shadow.read(key(first), n, self.blocks(), redcap_plan);
        let was = prefetcher.is_active();
        let (with, without) = if was {
            let without = if demand_blocks > 0 { timing.estimate(demand_blocks * self.block_size) } else { 0 };
            (measured_ns, without)
        } else {
            let with = redcap_plan.fetches.iter().map(|f| timing.estimate(f.n * self.block_size)).sum();
            (with, measured_ns)
        };
        prefetcher.on_io_time(with, without);
        if prefetcher.is_active() != was {
            Counters::add(&self.counters.redcap_switches, 1);
        }
    }

    /// The worker that performs asynchronous prefetches: each range's absent blocks are inserted as a prefetch
    /// group, read from the backend in one request per run, and installed unless a write overtook them.
    fn prefetch_worker(&self, rx: Receiver<(u64, u64)>) {
        while let Ok((first, n)) = rx.recv() {
            match first {
                STOP => return,
                QUIESCE => {
                    if let Some(tx) = self.quiesce.lock().unwrap_or_else(|e| e.into_inner()).take() {
                        let _ = tx.send(());
                    }
                    continue;
                }
                _ => {}
            }
            let n = n.min(self.capacity as u64);
            let mut st = self.lock();
            let token = st.token();
            if st.prefetch_range(first, n, token) == 0 {
                continue;
            }
            let need: Vec<bool> = (first..first + n).map(|b| st.map.get(&b) == Some(&Entry::Pending(token))).collect();
            drop(st);
            Counters::add(&self.counters.prefetch_blocks_read, need.iter().filter(|&&x| x).count() as u64);
            // An error leaves nothing pending; the demand read will try again and report it.
            let _ = self.fetch(first, &need, token, None);
        }
    }

    /// Drops every touched block from the cache.
    fn invalidate_range(&self, first: u64, n: u64) {
        let mut st = self.lock();
        for b in first..first + n {
            if st.invalidate(b) {
                Counters::add(&self.counters.invalidations, 1);
            }
        }
    }
}

impl<B: Backend> Backend for Inner<B> {
    fn size(&self) -> u64 {
        self.size
    }

    fn try_read_fast(&self, buf: &mut [u8], offset: u64) -> bool {
        self.fast_read(offset, buf.len() as u64, FastSink::Copy(buf))
    }

    fn try_read_shared(&self, offset: u64, len: u64, out: &mut Vec<crate::backend::SharedBytes>) -> bool {
        let before = out.len();
        let ok = self.fast_read(offset, len, FastSink::Share(out));
        if !ok {
            out.truncate(before);
        }
        ok
    }

    /// Group prefetching: looks up every block of the reads (the slot map, the slot's first bytes, the engine's
    /// index and entry) without changing anything, so that the cache misses of the lookups overlap in the
    /// out-of-order window; [`Inner::fast_read`] then finds them in cache. Worth it when the caches are cold, as
    /// when the client runs on the server's CPU: fio at QD32 on one CPU over a Unix socket, 1.97 -> 1.58 µs of
    /// server CPU per request (`bench/nbd_bench.py`, docs/performance.md).
    fn hint_reads(&self, reads: &[(u64, u32)]) {
        let st = self.lock();
        for &(offset, len) in reads {
            // An empty read spans no block.
            let (first, n) = block_span(offset, u64::from(len), self.block_size);
            if n > COPY_UNLOCKED_BLOCKS {
                continue;
            }
            for b in first..first + n {
                if let Some(&Entry::Ready(s)) = st.map.get(&b) {
                    std::hint::black_box(st.slots[s as usize].first());
                    std::hint::black_box(st.engine.contains(key(b)));
                }
            }
        }
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        Counters::add(&self.counters.read_requests, 1);
        let len = buf.len() as u64;
        if len == 0 {
            return Ok(());
        }
        let (first, n) = block_span(offset, len, self.block_size);
        let mut st = self.lock();
        if st.bypass(self.cutoff, offset, len) {
            drop(st);
            Counters::add(&self.counters.bypassed, 1);
            return self.backend_read(buf, offset);
        }
        // The prefetcher sees the request before it is served (what is resident, what is in flight).
        self.propose(&mut st, Op::Read, first, n);
        let probe = st.redcap.is_some() && !st.fetches.is_empty() && st.timing.probe();
        if probe {
            st.fetches.clear();
        }
        let token = st.token();
        let mut vis = Vec::with_capacity(n as usize);
        let mut rejected = 0;
        for b in first..first + n {
            let v = st.engine.contains(key(b)) || st.admit(b);
            rejected += u64::from(!v);
            vis.push(v);
        }
        let used = st.engine.stats().prefetch_used;
        let hit = st.access(Op::Read, first, &vis, token);
        let first_hits = st.engine.stats().prefetch_used - used;
        // Synchronous proposals (a REDCAP segment, a read-ahead group) are read with the demand blocks: the
        // range to fetch grows to cover them, and their absent blocks enter the cache as prefetches.
        let (mut lo, mut hi) = (first, first + n);
        let sync: Vec<Fetch> = std::mem::take(&mut st.fetches);
        for f in &sync {
            let a = f.first.block().min(self.blocks());
            let b = a + f.n.min(self.blocks() - a);
            if a < b {
                st.prefetch_range(a, b - a, token);
                lo = lo.min(a);
                hi = hi.max(b);
            }
        }
        st.fetches = sync;
        let mut need = vec![false; (hi - lo) as usize];
        let mut pending_hits = 0;
        let mut missed = 0;
        for (i, h) in hit.iter().enumerate() {
            let b = first + i as u64;
            let j = (b - lo) as usize;
            match (h, st.map.get(&b)) {
                (true, Some(&Entry::Ready(s))) => {
                    self.copy_out(b, &st.slots[s as usize][..self.block_len(b)], buf, offset)
                }
                (true, _) => {
                    pending_hits += 1;
                    need[j] = true;
                }
                (false, _) => {
                    missed += 1;
                    need[j] = true;
                }
            }
        }
        let mut prefetched = 0;
        for b in (lo..first).chain(first + n..hi) {
            if st.map.get(&b) == Some(&Entry::Pending(token)) {
                need[(b - lo) as usize] = true;
                prefetched += 1;
            }
        }
        drop(st);
        Counters::add(&self.counters.admission_rejections, rejected);
        Counters::add(&self.counters.read_uncounted_misses, rejected);
        Counters::add(&self.counters.pending_hits, pending_hits);
        Counters::add(&self.counters.prefetch_blocks_read, prefetched);
        let measured = if need.contains(&true) {
            // Runs separated by resident blocks stay separate requests; a REDCAP segment with no resident
            // block inside is one request.
            self.fetch(lo, &need, token, Some((buf, offset)))?
        } else {
            Counters::add(&self.counters.read_request_hits, 1);
            0
        };
        if self.async_tx.is_some() && !probe {
            let mut st = self.lock();
            self.redcap_step(&mut st, first, n, measured, missed + first_hits);
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> io::Result<()> {
        crate::backend::refuse_writes(self.is_read_only())?;
        Counters::add(&self.counters.write_requests, 1);
        let len = buf.len() as u64;
        let (first, n) = block_span(offset, len, self.block_size);
        let _stripes = self.stripes.lock(first, n);
        let bypass = self.lock().bypass(self.cutoff, offset, len);
        Counters::add(&self.counters.backend_writes, 1);
        Counters::add(&self.counters.backend_bytes_written, len);
        if let Err(e) = self.backend.write_at(buf, offset, fua) {
            // The backend's contents of the range are unknown now.
            self.invalidate_range(first, n);
            return Err(e);
        }
        if bypass || self.mode == WriteMode::WriteAround {
            if bypass {
                Counters::add(&self.counters.bypassed, 1);
            }
            self.invalidate_range(first, n);
            return Ok(());
        }
        let bs = self.block_size;
        let full = |b: u64| b * bs >= offset && b * bs + self.block_len(b) as u64 <= offset + len;
        let mut st = self.lock();
        let token = st.token();
        let mut vis = Vec::with_capacity(n as usize);
        let (mut rejected, mut unallocated) = (0, 0);
        for b in first..first + n {
            let v = st.engine.contains(key(b)) || (full(b) && st.admit(b));
            if !v {
                unallocated += 1;
                rejected += u64::from(full(b));
            }
            vis.push(v);
        }
        st.access(Op::Write, first, &vis, token);
        for b in first..first + n {
            match st.map.get(&b).copied() {
                Some(Entry::Ready(s)) => {
                    let blen = self.block_len(b);
                    let start = b * bs;
                    let lo = start.max(offset);
                    let hi = (start + blen as u64).min(offset + len);
                    // Copy on write if a reader still holds the slot.
                    unique(&mut st.slots[s as usize])[(lo - start) as usize..(hi - start) as usize]
                        .copy_from_slice(&buf[(lo - offset) as usize..(hi - offset) as usize]);
                }
                Some(Entry::Pending(_)) if full(b) => {
                    let lo = (b * bs - offset) as usize;
                    st.install(b, &buf[lo..lo + self.block_len(b)], self.capacity, bs as usize);
                }
                Some(Entry::Pending(_)) => {
                    // A partial write over a block being fetched: the fetch may carry the old bytes.
                    st.invalidate(b);
                    Counters::add(&self.counters.invalidations, 1);
                }
                None => {}
            }
        }
        drop(st);
        Counters::add(&self.counters.admission_rejections, rejected);
        Counters::add(&self.counters.write_uncounted_misses, unallocated);
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
            || self.backend.trim(offset, len, fua),
            |first, n| self.invalidate_range(first, n),
        )
    }

    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> io::Result<()> {
        self.stripes.discard(
            self.is_read_only(),
            self.block_size,
            (offset, len),
            || {
                Counters::add(&self.counters.backend_writes, 1);
                Counters::add(&self.counters.backend_bytes_written, len);
                self.backend.write_zeroes(offset, len, may_trim, fua)
            },
            |first, n| self.invalidate_range(first, n),
        )
    }

    /// Prefetches the range (at most the cache's capacity from its start) through [`BlockCache::prefetch`].
    fn cache(&self, offset: u64, len: u64) -> io::Result<()> {
        Counters::add(&self.counters.cache_requests, 1);
        let (first, n) = block_span(offset, len, self.block_size);
        let n = n.min(self.capacity as u64);
        let mut st = self.lock();
        let token = st.token();
        st.prefetch_range(first, n, token);
        let need: Vec<bool> = (first..first + n).map(|b| st.map.get(&b) == Some(&Entry::Pending(token))).collect();
        drop(st);
        self.fetch(first, &need, token, None).map(|_| ())
    }

    fn is_read_only(&self) -> bool {
        self.mode == WriteMode::ReadOnly || self.backend.is_read_only()
    }

    fn can_multi_conn(&self) -> bool {
        // One cache shared by every connection, write-through: it holds exactly when the backend's does.
        self.backend.can_multi_conn()
    }

    fn block_status(&self, offset: u64, len: u64) -> Option<io::Result<Vec<(u64, u32)>>> {
        self.backend.block_status(offset, len)
    }
}

forward_backend!([B: Backend + 'static] CachedBackend<B>, self => self.inner);
