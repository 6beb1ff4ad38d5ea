//! [`CachedBackend`]: a RAM block cache over a backend, driven by the engine's cache step
//! ([`CacheLevel`], the same type `blockwell sim` runs).
//!
//! The engine decides — hits, waits on blocks in flight, admission, the sequential cutoff, prefetching,
//! victims, and every counter — and this layer moves data: block data lives in slots (`slots`) kept in step
//! with the engine (a block has a slot exactly when the engine holds it with its data), backend reads are the
//! plan's device reads, and completions go back to the engine ([`CacheLevel::fetch_done`]), which says whether
//! the data is still wanted. Asynchronous prefetches are read by a worker thread (`worker`).
//!
//! ## Concurrency
//! One mutex guards the engine and the slots; it is never held during backend I/O, nor while a large read
//! copies its data (it holds references to the slots instead). A read plans under the lock (hits are copied
//! out), reads the plan's device reads without it, and installs a block only if the engine still waits for that
//! read. A demand access to a block another request is reading is a *delayed hit* for the engine; this driver
//! does not wait for the other read but reads the block itself (without installing it). Every write updates the
//! backend first, then, under the lock, patches, installs or drops the cached copies; a write over a block in
//! flight overtakes the read (the engine will not let the read install stale data). Writes to overlapping blocks
//! are serialized by striped write locks, so that the order of backend writes and of cache updates agree.
//!
//! ## Cost
//! Per cached block: its slot (see `slots`) plus the policy's metadata (see each policy's module doc).

mod slots;
pub(crate) use slots::BlockHasher;
mod worker;

use crate::backend::{forward_backend, Backend, OnMiss, ReadInto, ReadOutcome, SharedBytes};
use crate::stats::{Counters, StatsSnapshot};
use blockwell_core::admission::AdmissionSpec;
use blockwell_core::cluster::DeviceRead;
use blockwell_core::key::{block_span, MAX_BLOCK};
use blockwell_core::level::{CacheLevel, Fate, LevelConfig, Request, StepPlan, WritePolicy};
use blockwell_core::policy::PolicyError;
use blockwell_core::prefetch::{PrefetchError, PrefetcherKind, PrefetcherSpec};
use blockwell_core::redcap::{Redcap, RedcapConfig};
use blockwell_core::{BlockKey, CacheConfig, CacheError, Op, PolicySpec, Preset};
use slots::{Slot, Slots};
use std::io;
use std::str::FromStr;
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Instant;
use worker::Job;

/// Asynchronous prefetch reads waiting for the worker; more are dropped (and counted).
const ASYNC_QUEUE: usize = 256;

/// Bytes an NBD_CMD_CACHE request prefetches per step (see [`Backend::cache`] of [`CachedBackend`]).
const CACHE_WINDOW: u64 = 1 << 20;

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
    pub admission: AdmissionSpec,
    /// A stream of back-to-back requests reaching this many bytes bypasses the cache (bcache's
    /// `sequential_cutoff`); 0 turns it off.
    pub sequential_cutoff: u64,
    /// The prefetcher (`none`, `redcap`, `linux24`, `ondemand`, `stride`, ...; see `docs/prefetchers.md`).
    pub prefetch: PrefetcherSpec,
    /// Blocks per set of a set-associative cache (FlashCache's associativity); `None`: fully associative.
    pub associativity: Option<std::num::NonZeroUsize>,
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
            admission: AdmissionSpec::Always,
            sequential_cutoff: 0,
            prefetch: PrefetcherSpec::new(PrefetcherKind::NoPrefetch),
            associativity: None,
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
    #[error("device of {size} B has more blocks of {block_size} B than a block key holds")]
    DeviceTooLarge { size: u64, block_size: u64 },
    #[error(transparent)]
    Prefetch(#[from] PrefetchError),
    #[error("cannot start the prefetch worker: {0}")]
    Worker(io::Error),
    #[error("redcap: {0}")]
    Redcap(#[from] blockwell_core::redcap::RedcapError),
}

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

/// Requests of more blocks than this copy their data after releasing the cache's lock (so that large reads by
/// several workers copy in parallel); smaller ones copy under it (cheaper than taking references).
const COPY_UNLOCKED_BLOCKS: u64 = 16;

fn key(block: u64) -> BlockKey {
    BlockKey::new(0, block).expect("block numbers are checked against the device size at construction")
}

/// What the lock guards.
struct State {
    level: CacheLevel,
    slots: Slots,
    plan: StepPlan,
}

impl State {
    /// Frees the slots of the plan's victims.
    fn forget_victims(&mut self) {
        for v in &self.plan.victims {
            self.slots.remove(v.key.block());
        }
    }

    /// Drops blocks `first..first+n` from the engine and the slots.
    fn invalidate(&mut self, first: u64, n: u64) {
        self.level.invalidate(key(first), n);
        for b in first..first + n {
            self.slots.remove(b);
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
    /// Asynchronous prefetch reads for the worker; `None` without a prefetcher.
    async_tx: Option<SyncSender<Job>>,
    state: Mutex<State>,
    stripes: crate::backend::WriteStripes,
    counters: Counters,
    block_size: u64,
    size: u64,
    capacity: usize,
    mode: WriteMode,
    redcap: bool,
}

impl<B: Backend + 'static> CachedBackend<B> {
    /// A cache of `config` over `backend`. Refuses policies that may exceed their capacity
    /// (`libcachesim_quirks`) and offline policies (OPT). With a prefetcher, starts the worker thread that
    /// performs its asynchronous fetches.
    pub fn new(backend: B, config: CachedConfig) -> Result<Self, CachedError> {
        let prefetching = config.prefetch.kind != PrefetcherKind::NoPrefetch;
        let (tx, rx) = if prefetching {
            let (tx, rx) = std::sync::mpsc::sync_channel(ASYNC_QUEUE);
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let inner = Arc::new(Inner::new(backend, config, tx)?);
        let worker = match rx {
            Some(rx) => Some(worker::start(inner.clone(), rx).map_err(CachedError::Worker)?),
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

    /// Checks the layer's invariants: the engine's, and that a block has a slot exactly when the engine holds
    /// it with its data, slots are not shared, and no more exist than blocks of capacity.
    pub fn validate(&self) -> Result<(), String> {
        self.inner.validate()
    }

    /// Waits until the asynchronous prefetches queued so far have been performed (tests, benchmarks).
    pub fn quiesce(&self) {
        if let Some(tx) = &self.inner.async_tx {
            let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
            if tx.send(Job::Quiesce(done_tx)).is_ok() {
                let _ = done_rx.recv();
            }
        }
    }
}

impl<B: Backend + 'static> Drop for CachedBackend<B> {
    fn drop(&mut self) {
        if let Some(tx) = &self.inner.async_tx {
            let _ = tx.send(Job::Stop);
        }
        if let Some(w) = self.worker.take() {
            let _ = w.join();
        }
    }
}

impl<B: Backend> Inner<B> {
    fn new(backend: B, config: CachedConfig, async_tx: Option<SyncSender<Job>>) -> Result<Self, CachedError> {
        let cc = CacheConfig::new(config.block_size, config.capacity_bytes)?.with_associativity(config.associativity);
        if config.policy.libcachesim_quirks(config.preset)? {
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
        let policy = cc.build_policy(&config.policy, config.preset)?;
        let prefetcher = match config.prefetch.kind {
            PrefetcherKind::NoPrefetch => None,
            _ => Some(config.prefetch.build(config.block_size)?),
        };
        let mut lc = LevelConfig::new(cc);
        lc.admission = config.admission;
        lc.sequential_cutoff = config.sequential_cutoff;
        lc.write = if config.mode == WriteMode::WriteAround { WritePolicy::Around } else { WritePolicy::Allocate };
        // Without the data of a block's other bytes, a partial write cannot allocate it.
        lc.partial_write_allocate = false;
        // One backend read per run of missing blocks, however long.
        lc.cluster_max_blocks = u64::from(u32::MAX);
        lc.volume_bytes = size;
        let mut level = CacheLevel::new(lc, policy, prefetcher);
        let redcap = config.prefetch.kind == PrefetcherKind::Redcap;
        if redcap {
            let c = config.prefetch.config()?;
            let seg_kb = c.get("segment_kb").and_then(serde_json::Value::as_u64).unwrap_or(128);
            let seg_blocks = (seg_kb * 1024 / config.block_size).max(1);
            let segments = (capacity as u64 / seg_blocks).max(1) as usize;
            level.enable_redcap_timing(Redcap::new(RedcapConfig { segments, segment_blocks: seg_blocks })?);
        }
        Ok(Inner {
            backend,
            async_tx,
            state: Mutex::new(State {
                level,
                slots: Slots::new(capacity, config.block_size as usize),
                plan: StepPlan::default(),
            }),
            stripes: crate::backend::WriteStripes::new(),
            counters: Counters::default(),
            block_size: config.block_size,
            size,
            capacity,
            mode: config.mode,
            redcap,
        })
    }

    fn snapshot(&self) -> StatsSnapshot {
        let st = self.lock();
        let mut s = StatsSnapshot::build(
            &self.counters,
            st.level.stats(),
            st.slots.allocated() as u64,
            self.capacity as u64,
            st.level.policy().len() as u64,
        );
        if self.redcap {
            s.redcap_active = st.level.prefetcher_active();
        }
        s
    }

    fn validate(&self) -> Result<(), String> {
        let st = self.lock();
        st.level.validate()?;
        st.slots.validate()?;
        for b in st.slots.blocks() {
            if !st.level.has_data(key(b)) {
                return Err(format!("block {b} has a slot but the engine does not hold its data"));
            }
        }
        let resident = st.level.policy().len() - st.level.in_flight().min(st.level.policy().len());
        let slotted = st.slots.blocks().count();
        if slotted != resident {
            return Err(format!("{slotted} blocks with slots, {resident} resident with data in the engine"));
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

    /// Blocks of the device.
    fn blocks(&self) -> u64 {
        self.size.div_ceil(self.block_size)
    }

    /// A request on the device for the engine.
    fn request(&self, op: Op, offset: u64, len: u64) -> Request<'static> {
        let mut r = Request::bytes(op, 0, offset, len, self.block_size)
            .expect("requests are checked against the device size, and its blocks against the key range");
        r.stream_end = self.blocks();
        r
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

    /// Reads blocks `first..first+n` (clipped to the device) in one backend request. Returns the data and the
    /// time it took in ns.
    fn read_blocks(&self, first: u64, n: u64) -> io::Result<(Vec<u8>, u64)> {
        let off = first * self.block_size;
        let end = ((first + n) * self.block_size).min(self.size);
        let mut data = vec![0u8; end.saturating_sub(off) as usize];
        let t0 = Instant::now();
        self.backend_read(&mut data, off)?;
        Ok((data, t0.elapsed().as_nanos() as u64))
    }

    /// Performs device reads of plan `token`: copies the part inside `[offset, offset + buf.len())` into `buf`
    /// (when given) and installs the blocks the engine still waits for. Returns the backend time in ns. On an
    /// error, the blocks of the reads leave the cache.
    fn fetch(&self, reads: &[DeviceRead], token: u64, mut buf: Option<(&mut [u8], u64)>) -> io::Result<u64> {
        let mut fetched: Vec<(u64, Vec<u8>)> = Vec::with_capacity(reads.len());
        let mut timed: Vec<(u64, u64)> = Vec::with_capacity(reads.len());
        let mut result = Ok(());
        for r in reads {
            let b0 = r.first.block();
            match self.read_blocks(b0, r.n) {
                Ok((data, ns)) => {
                    if let Some((buf, offset)) = buf.as_mut() {
                        copy_range(b0 * self.block_size, &data, buf, *offset);
                    }
                    timed.push((data.len() as u64, ns));
                    fetched.push((b0, data));
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let mut st = self.lock();
        for &(bytes, ns) in &timed {
            st.level.observe_read(bytes, ns);
        }
        if let Err(e) = result {
            for r in reads {
                for b in r.first.block()..r.first.block() + r.n {
                    st.level.fetch_failed(key(b), token);
                    if !st.level.has_data(key(b)) {
                        st.slots.remove(b);
                    }
                }
            }
            return Err(e);
        }
        let bs = self.block_size as usize;
        for (b0, data) in &fetched {
            for (j, chunk) in data.chunks(bs).enumerate() {
                let b = b0 + j as u64;
                if st.level.fetch_done(key(b), token) && !st.slots.install(b, chunk) {
                    st.invalidate(b, 1);
                }
            }
        }
        Ok(timed.iter().map(|t| t.1).sum())
    }

    /// Hands the plan's asynchronous reads to the prefetch worker; a full queue abandons them (the blocks leave
    /// the cache; counted).
    fn queue_async(&self, st: &mut State, reads: &[DeviceRead], token: u64) {
        for r in reads {
            let sent = self.async_tx.as_ref().is_some_and(|tx| tx.try_send(Job::Read(*r, token)).is_ok());
            if !sent {
                Counters::add(&self.counters.prefetch_dropped, 1);
                for b in r.first.block()..r.first.block() + r.n {
                    st.level.fetch_failed(key(b), token);
                }
            }
        }
    }

    /// A read served at once from blocks the cache holds (`Ok`, the lock released), or nothing done at all
    /// (`Err`, the lock handed back): see [`Backend::read`].
    fn fast_read<'g>(
        &'g self,
        mut st: MutexGuard<'g, State>,
        offset: u64,
        into: &mut ReadInto<'_>,
    ) -> Result<(), MutexGuard<'g, State>> {
        let len = into.len();
        if len == 0 || st.level.would_bypass(0, offset, len) {
            return Err(st);
        }
        let (first, n) = block_span(offset, len, self.block_size);
        let shared_before = match into {
            ReadInto::Share { out, .. } => out.len(),
            ReadInto::Copy(_) => 0,
        };
        // Take the data while checking that every block is there (large copies take references and copy
        // later); on the first block that is not, give up (what was copied is overwritten by the slow path).
        let mut later: Vec<(u64, Slot)> = Vec::new();
        for b in first..first + n {
            let Some(slot) = st.slots.get(b) else {
                if let ReadInto::Share { out, .. } = into {
                    out.truncate(shared_before);
                }
                return Err(st);
            };
            match into {
                ReadInto::Copy(buf) if n <= COPY_UNLOCKED_BLOCKS => {
                    self.copy_out(b, &slot[..self.block_len(b)], buf, offset)
                }
                ReadInto::Copy(_) => later.push((b, slot.clone())),
                ReadInto::Share { out, .. } => {
                    let start = b * self.block_size;
                    let lo = start.max(offset);
                    let hi = (start + self.block_len(b) as u64).min(offset + len);
                    out.push(SharedBytes {
                        buf: slot.clone(),
                        start: (lo - start) as usize,
                        end: (hi - start) as usize,
                    });
                }
            }
        }
        // Every block is there: the engine's step, where each block hits.
        let req = self.request(Op::Read, offset, len);
        let State { level, plan, .. } = &mut *st;
        level.access(&req, plan);
        debug_assert_eq!(plan.hits, n, "a block with a slot did not hit");
        st.forget_victims();
        // Nothing is missing, so synchronous proposals (outside the request) are read in the background.
        let (reads, asyn, token) =
            (std::mem::take(&mut st.plan.reads), std::mem::take(&mut st.plan.async_reads), st.plan.token);
        self.queue_async(&mut st, &reads, token);
        self.queue_async(&mut st, &asyn, token);
        let State { level, plan, .. } = &mut *st;
        if level.read_timed(&req, plan, 0) {
            Counters::add(&self.counters.redcap_switches, 1);
        }
        drop(st);
        if let ReadInto::Copy(buf) = into {
            for (b, slot) in &later {
                self.copy_out(*b, &slot[..self.block_len(*b)], buf, offset);
            }
        }
        Counters::add(&self.counters.read_requests, 1);
        Counters::add(&self.counters.read_request_hits, 1);
        Ok(())
    }
    /// A read through the cache, with the lock already held: the engine's step, hits copied, the plan's reads
    /// performed without the lock, completions installed.
    fn read_locked(&self, mut st: MutexGuard<'_, State>, buf: &mut [u8], offset: u64) -> io::Result<()> {
        Counters::add(&self.counters.read_requests, 1);
        let len = buf.len() as u64;
        if len == 0 {
            return Ok(());
        }
        let req = self.request(Op::Read, offset, len);
        let first = req.first.block();
        let State { level, plan, .. } = &mut *st;

        level.access(&req, plan);
        st.forget_victims();
        let mut plan = std::mem::take(&mut st.plan);
        if plan.bypass {
            st.plan = plan;
            drop(st);
            return self.backend_read(buf, offset);
        }
        // Hits are copied now; blocks read by another request (delayed hits) are read again here, uninstalled.
        let mut own: Vec<DeviceRead> = Vec::new();
        for (i, f) in plan.fates.iter().enumerate() {
            let b = first + i as u64;
            match (f, st.slots.get(b)) {
                (Fate::Hit, Some(slot)) => self.copy_out(b, &slot[..self.block_len(b)], buf, offset),
                (Fate::Hit | Fate::Wait, _) => match own.last_mut() {
                    Some(r) if r.first.block() + r.n == b => r.n += 1,
                    _ => own.push(DeviceRead { first: key(b), n: 1, sync: true }),
                },
                _ => {}
            }
        }
        let token = plan.token;
        let asyn = std::mem::take(&mut plan.async_reads);
        self.queue_async(&mut st, &asyn, token);
        let prefetched: u64 = plan.reads.iter().map(|r| r.n).sum::<u64>()
            - plan.fates.iter().filter(|f| matches!(f, Fate::Fetch | Fate::Pass)).count() as u64;
        drop(st);
        Counters::add(&self.counters.prefetch_blocks_read, prefetched);
        own.extend_from_slice(&plan.reads);
        let result = if own.is_empty() {
            Counters::add(&self.counters.read_request_hits, 1);
            Ok(0)
        } else {
            self.fetch(&own, token, Some((buf, offset)))
        };
        let mut st = self.lock();
        if let Ok(ns) = result {
            if st.level.read_timed(&req, &plan, ns) {
                Counters::add(&self.counters.redcap_switches, 1);
            }
        }
        st.plan = plan;
        result.map(|_| ())
    }
}

/// Copies the part of `data` (bytes from device offset `at`) that lies in `[offset, offset + buf.len())`.
pub(crate) fn copy_range(at: u64, data: &[u8], buf: &mut [u8], offset: u64) {
    let lo = at.max(offset);
    let hi = (at + data.len() as u64).min(offset + buf.len() as u64);
    if lo < hi {
        buf[(lo - offset) as usize..(hi - offset) as usize]
            .copy_from_slice(&data[(lo - at) as usize..(hi - at) as usize]);
    }
}

impl<B: Backend> Backend for Inner<B> {
    fn size(&self) -> u64 {
        self.size
    }

    /// Hits are served at once; a miss asked to fetch continues as [`Inner::read_locked`] under the lock that
    /// found it.
    fn read(&self, offset: u64, mut into: ReadInto<'_>, on_miss: OnMiss) -> io::Result<ReadOutcome> {
        let st = match self.fast_read(self.lock(), offset, &mut into) {
            Ok(()) => return Ok(ReadOutcome::Served),
            Err(st) => st,
        };
        match (into, on_miss) {
            (ReadInto::Copy(buf), OnMiss::Fetch) => self.read_locked(st, buf, offset).map(|()| ReadOutcome::Served),
            _ => Ok(ReadOutcome::NeedsIo),
        }
    }

    /// Group prefetching: looks up every block of the reads (the slot map and the slot's first bytes) without
    /// changing anything, so that the cache misses of the lookups overlap in the out-of-order window;
    /// [`Backend::read`] then finds them in cache. Worth it when the caches are cold, as when the client runs
    /// on the server's CPU (docs/performance.md).
    fn hint_reads(&self, reads: &[(u64, u32)]) {
        let st = self.lock();
        for &(offset, len) in reads {
            let (first, n) = block_span(offset, u64::from(len), self.block_size);
            if n > COPY_UNLOCKED_BLOCKS {
                continue;
            }
            for b in first..first + n {
                if let Some(slot) = st.slots.get(b) {
                    std::hint::black_box(slot.first());
                    std::hint::black_box(st.level.has_data(key(b)));
                }
            }
        }
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read_locked(self.lock(), buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> io::Result<()> {
        crate::backend::refuse_writes(self.is_read_only())?;
        Counters::add(&self.counters.write_requests, 1);
        let len = buf.len() as u64;
        let (first, n) = block_span(offset, len, self.block_size);
        let _stripes = self.stripes.lock(first, n);
        Counters::add(&self.counters.backend_writes, 1);
        Counters::add(&self.counters.backend_bytes_written, len);
        if let Err(e) = self.backend.write_at(buf, offset, fua) {
            // The backend's contents of the range are unknown now.
            self.lock().invalidate(first, n);
            return Err(e);
        }
        if n == 0 {
            return Ok(());
        }
        let req = self.request(Op::Write, offset, len);
        let bs = self.block_size;
        let mut st = self.lock();
        let State { level, plan, .. } = &mut *st;
        level.access(&req, plan);
        st.forget_victims();
        let plan = std::mem::take(&mut st.plan);
        for (i, f) in plan.fates.iter().enumerate() {
            let b = first + i as u64;
            let start = b * bs;
            let lo = start.max(offset);
            let hi = (start + self.block_len(b) as u64).min(offset + len);
            // A block updated or allocated early in the request may be a victim of a later block's insert.
            let held = st.level.has_data(key(b));
            match f {
                Fate::Update | Fate::Allocate if !held => st.slots.remove(b),
                Fate::Update => match st.slots.get_mut(b) {
                    Some(slot) => slot[(lo - start) as usize..(hi - start) as usize]
                        .copy_from_slice(&buf[(lo - offset) as usize..(hi - offset) as usize]),
                    // Held without data (cannot happen while fills and slots stay in step): drop it.
                    None => st.invalidate(b, 1),
                },
                Fate::Allocate => {
                    let data = &buf[(lo - offset) as usize..(hi - offset) as usize];
                    if !st.slots.install(b, data) {
                        st.invalidate(b, 1);
                    }
                }
                _ => st.slots.remove(b),
            }
        }
        st.plan = plan;
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
            |first, n| self.lock().invalidate(first, n),
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
            |first, n| self.lock().invalidate(first, n),
        )
    }

    /// Prefetches the range (at most the cache's capacity from its start) through the engine's prefetch path.
    /// Prefetches the range's first blocks, at most the cache's capacity, one window of [`CACHE_WINDOW`] bytes
    /// at a time: whatever the length a client asks for, a CACHE request holds at most one window of data
    /// outside the cache.
    fn cache(&self, offset: u64, len: u64) -> io::Result<()> {
        Counters::add(&self.counters.cache_requests, 1);
        let (first, n) = block_span(offset, len, self.block_size);
        let n = n.min(self.capacity as u64).min(self.blocks().saturating_sub(first));
        let window = (CACHE_WINDOW / self.block_size).max(1);
        let mut b = first;
        while b < first + n {
            let m = window.min(first + n - b);
            let mut st = self.lock();
            let State { level, plan, .. } = &mut *st;
            level.prefetch(key(b), m, plan);
            st.forget_victims();
            let (reads, token) = (std::mem::take(&mut st.plan.reads), st.plan.token);
            drop(st);
            Counters::add(&self.counters.prefetch_blocks_read, reads.iter().map(|r| r.n).sum());
            self.fetch(&reads, token, None)?;
            b += m;
        }
        Ok(())
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
