//! [`TierBackend`]: a persistent cache level on a fast device (a file or block device formatted by
//! `blockwell-cachedev`) in front of an origin, driven by the engine's cache step ([`CacheLevel`]) like every
//! other level: seed `004_*`'s SSD caches (dm-cache, FlashCache, bcache, EnhanceIO), in write-back,
//! write-through, write-around or read-only mode.
//!
//! The engine decides what the device holds (any policy; promotion by admission and the sequential cutoff;
//! dirty blocks in order for the cleaner); this layer moves data between the device's slots, the origin and
//! the client, and keeps the device's metadata crash-consistent (`commit`).
//!
//! ## What a reply means
//! - **write-back**: a WRITE is acknowledged once its data is on the cache device (not necessarily durable);
//!   FLUSH returns once every write acknowledged before it is durable on the cache device together with the
//!   metadata that finds it (a sync of the device, a journal commit, a sync); a FUA write is durable before its
//!   reply. Dirty blocks reach the origin through the cleaner (`clean`), in origin order, merged.
//! - **write-through**: the origin is written first (with the client's FUA), then the cached copy; FLUSH
//!   flushes the origin.
//! - **write-around**: the origin is written and cached copies are dropped.
//! - **read-only**: writes are refused.
//!
//! ## Crash safety
//! Recovery keeps every dirty block. It keeps a clean block only in write-back (and read-only) mode, and only
//! while the slot's data still has the checksum the metadata recorded: the tier never writes a block to the
//! origin while the metadata may still map an older clean copy of it (`state`), and an in-place write
//! changes a clean slot's data before the dirty record is durable, which the checksum then reveals. In
//! write-through and write-around, the origin is written first, so after a crash a cached copy may be older
//! than the origin: those modes restart cold after a crash (warm after a clean shutdown).
//!
//! ## Concurrency
//! One mutex guards the engine and the slot table; it is never held during I/O. Writes to overlapping blocks
//! are serialized by striped locks (as in the RAM cache), and a promotion holds its blocks' stripes while it
//! installs them, so a write never races a fill. Commits are serialized by their own lock and grouped: a
//! FLUSH that finds its writes already covered by a commit that started after them returns at once.

mod clean;
mod commit;
pub mod origin;
mod rw;
mod state;
pub mod target;

use crate::backend::{refuse_writes, Backend, WriteStripes};
use blockwell_cachedev::{CacheMode, Dev, Entry, Geometry, Metadata, OpenOptions, OriginId, Recovery};
use blockwell_core::admission::AdmissionSpec;
use blockwell_core::cleaner::{Cleaner, CleanerSpec};
use blockwell_core::level::{CacheLevel, LevelConfig, StepPlan, WritePolicy};
use blockwell_core::policy::PolicyError;
use blockwell_core::stats::DevCounters;
use blockwell_core::{CacheConfig, PolicySpec, Preset, Stats};
use serde::Serialize;
use state::{key, State};
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use blockwell_cachedev::CacheMode as TierMode;

/// A [`Dev`] over any backend: the cache device through the slow-disk emulator, or an in-memory backend.
pub struct BackendDev<B>(pub B);

impl<B: Backend> Dev for BackendDev<B> {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.0.write_at(buf, offset, false)
    }
    fn sync(&self) -> io::Result<()> {
        self.0.flush()
    }
}

/// The default sequential cutoff of the tier (bcache's `sequential_cutoff`).
pub const DEFAULT_SEQUENTIAL_CUTOFF: u64 = 4 << 20;

/// The default largest write-back request, in blocks.
pub const DEFAULT_CLEAN_RUN_BLOCKS: u64 = 256;

/// How often the cleaner asks its policy for a quota, by default.
pub const DEFAULT_CLEAN_INTERVAL: Duration = Duration::from_millis(100);

/// How the tier behaves.
#[derive(Clone, Debug)]
pub struct TierConfig {
    pub mode: CacheMode,
    pub policy: PolicySpec,
    pub preset: Preset,
    /// Blocks per set when the engine's policy over the device is set-associative (FlashCache's associativity:
    /// eviction only within a block's set); `None`: fully associative. Only the replacement decision is split
    /// into sets; a block's slot on the device is any free slot.
    pub associativity: Option<std::num::NonZeroUsize>,
    /// Which missed blocks are promoted into the device (`always`, `n-hit:N`, `tinylfu`, `bloom`, `prob:P`).
    pub admission: AdmissionSpec,
    /// Back-to-back runs of at least this many bytes bypass the device; 0 turns it off.
    pub sequential_cutoff: u64,
    pub cleaner: CleanerSpec,
    /// Metadata is committed at least this often when there is something to commit (dm-cache commits every
    /// second), so that a crash without FLUSH loses little.
    pub commit_interval: Duration,
    /// How often the cleaner asks its policy for a quota.
    pub clean_interval: Duration,
    /// Largest write-back request, in blocks.
    pub clean_run_blocks: u64,
    /// Slots kept out of the engine's capacity, for writes in flight, evicted dirty blocks and slots waiting
    /// for a commit (default: 1/64 of the slots, at least 16).
    pub reserve: Option<u64>,
    /// Identity and path of the origin, checked against the device.
    pub origin: OriginId,
    pub origin_path: String,
    /// The origin's state record ([`origin`]): checked before the device is opened (another device's dirty
    /// blocks, the origin's write nonce), then marked in use; at a clean stop it records the dirty blocks left.
    /// `None`: no record is kept (tests, in-memory origins).
    pub origin_guard: Option<origin::OriginGuard>,
}

impl TierConfig {
    pub fn new(origin: OriginId, origin_path: String) -> TierConfig {
        TierConfig {
            mode: CacheMode::WriteBack,
            policy: PolicySpec::new(blockwell_core::PolicyKind::Lru),
            preset: Preset::Default,
            associativity: None,
            admission: AdmissionSpec::Always,
            sequential_cutoff: DEFAULT_SEQUENTIAL_CUTOFF,
            cleaner: CleanerSpec::PI,
            commit_interval: Duration::from_secs(1),
            clean_interval: DEFAULT_CLEAN_INTERVAL,
            clean_run_blocks: DEFAULT_CLEAN_RUN_BLOCKS,
            reserve: None,
            origin,
            origin_path,
            origin_guard: None,
        }
    }
}

/// Errors opening a tier.
#[derive(Debug, thiserror::Error)]
pub enum TierError {
    #[error("cache device: {0}")]
    Device(#[from] blockwell_cachedev::Error),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("policy '{0}' needs the future (next-use times) and cannot drive a live cache")]
    Offline(String),
    #[error(
        "policy '{policy}' with preset '{preset}' may hold more blocks than its capacity; the cache device \
         refuses it (use another preset)"
    )]
    Quirks { policy: String, preset: &'static str },
    #[error("the cache device has {slots} slots; a reserve of {reserve} leaves none for the policy")]
    TooSmall { slots: u64, reserve: u64 },
    #[error("origin of {size} B has more blocks of {block_size} B than a block key holds")]
    OriginTooLarge { size: u64, block_size: u64 },
    #[error(transparent)]
    OriginState(#[from] origin::StateError),
    #[error("{0}")]
    HeldElsewhere(String),
    #[error("cannot start the tier's {what} thread: {source}")]
    Thread { what: &'static str, source: io::Error },
}

/// The tier's own counters (what the engine does not count), FlashCache- and dm-cache-style.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub read_requests: AtomicU64,
    pub write_requests: AtomicU64,
    pub promotions: AtomicU64,
    pub demotions: AtomicU64,
    pub cleaned_blocks: AtomicU64,
    pub clean_writes: AtomicU64,
    pub uncached_reads: AtomicU64,
    pub uncached_writes: AtomicU64,
    pub dev_read_blocks: AtomicU64,
    pub dev_write_blocks: AtomicU64,
    pub origin_reads: AtomicU64,
    pub origin_read_bytes: AtomicU64,
    pub origin_write_bytes: AtomicU64,
    pub origin_writes: AtomicU64,
    /// WRITE_ZEROES and TRIM passed to the origin (not counted in `origin_writes`), and their bytes.
    pub origin_zero_writes: AtomicU64,
    pub origin_bytes_zeroed: AtomicU64,
    pub origin_trims: AtomicU64,
    pub origin_bytes_trimmed: AtomicU64,
    pub dev_read_errors: AtomicU64,
    pub dev_write_errors: AtomicU64,
    pub origin_read_errors: AtomicU64,
    pub origin_write_errors: AtomicU64,
    pub checksum_failures: AtomicU64,
    pub no_room: AtomicU64,
    pub throttled: AtomicU64,
    pub forced_commits: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// A copy of the tier's counters and state, for `status`, JSON and Prometheus.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TierSnapshot {
    pub mode: String,
    pub policy: String,
    /// Blocks per set of the engine's policy, when set-associative.
    pub associativity: Option<usize>,
    pub cleaner: String,
    pub block_size: u64,
    pub slots: u64,
    pub capacity_blocks: u64,
    pub cached_blocks: u64,
    pub dirty_blocks: u64,
    pub dirty_percent: f64,
    /// Dirty blocks evicted and waiting for their write-back.
    pub evicted_dirty: u64,
    pub free_slots: u64,
    /// The counters `sim` and `tsim` count for a cache device, under the same names (flattened into the
    /// JSON).
    #[serde(flatten)]
    pub counters: DevCounters,
    pub dev_read_errors: u64,
    pub dev_write_errors: u64,
    pub origin_read_errors: u64,
    pub origin_write_errors: u64,
    /// WRITE_ZEROES requests passed to the origin and the bytes they zeroed (not in `origin_writes` and
    /// `origin_write_bytes`).
    pub origin_zero_writes: u64,
    pub origin_bytes_zeroed: u64,
    /// TRIM requests passed to the origin and the bytes they discarded.
    pub origin_trims: u64,
    pub origin_bytes_trimmed: u64,
    /// Clean blocks whose data no longer matched their checksum (dropped, read from the origin).
    pub checksum_failures: u64,
    /// Promotions or writes that found no free slot (served from the origin).
    pub no_room: u64,
    /// Writes that waited for a commit or a write-back to free a slot.
    pub throttled: u64,
    pub commits: u64,
    pub checkpoints: u64,
    pub journal_blocks: u64,
    /// The reason the tier stopped trusting its device, if it did.
    pub degraded: Option<String>,
    /// What opening the device found.
    pub recovery: Recovery,
    /// The cleaner's current rate (blocks per second), for `pi`.
    pub clean_rate: Option<f64>,
}

/// A persistent cache level over an origin. See the module documentation.
pub struct TierBackend<O: Backend + 'static> {
    inner: Arc<Inner<O>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    closed: AtomicBool,
}

pub(crate) struct Inner<O> {
    pub origin: O,
    pub dev: Arc<dyn Dev>,
    pub geometry: Geometry,
    pub block_size: u64,
    /// Origin size and blocks.
    pub size: u64,
    pub blocks: u64,
    pub capacity: u64,
    pub config: TierConfig,
    pub state: Mutex<State>,
    pub commit: Mutex<commit::CommitState>,
    /// Incremented after every cache-device data write and every record (see `commit`).
    pub epoch: AtomicU64,
    /// Incremented after every origin write not yet known durable (FUA writes excepted).
    pub origin_written: AtomicU64,
    /// The value of `origin_written` the last completed origin flush covered; held while flushing, so a
    /// FLUSH never returns while another caller's origin flush that took its writes is still running.
    pub origin_flushed: Mutex<u64>,
    pub stripes: WriteStripes,
    pub counters: Counters,
    pub cleaner: Mutex<Cleaner>,
    pub recovery: Recovery,
    /// Background threads wait here; `stop` ends them.
    pub wake: Condvar,
    pub wake_lock: Mutex<()>,
    pub stop: AtomicBool,
    pub start: Instant,
    /// Nanoseconds since `start` of the last request.
    pub last_request: AtomicU64,
    /// Serializes whole-cache cleaning (flush, mode switch, detach).
    pub drain: Mutex<()>,
    /// Signalled (with the state lock) when write-backs finish.
    pub written_back: Condvar,
}

impl<O: Backend + 'static> TierBackend<O> {
    /// Opens a formatted cache device over `origin`: validates and recovers it (see the module docs), puts
    /// its blocks back in the engine in their recorded order, and starts the committer and the cleaner.
    pub fn open(origin: O, dev: Arc<dyn Dev>, config: TierConfig) -> Result<Self, TierError> {
        let inner = Arc::new(Inner::open(origin, dev, config)?);
        let threads = vec![
            spawn("committer", inner.clone(), |i| i.committer_loop())?,
            spawn("cleaner", inner.clone(), |i| i.cleaner_loop())?,
        ];
        Ok(TierBackend { inner, threads: Mutex::new(threads), closed: AtomicBool::new(false) })
    }

    pub fn origin(&self) -> &O {
        &self.inner.origin
    }

    pub fn snapshot(&self) -> TierSnapshot {
        self.inner.snapshot()
    }

    /// What opening the device found.
    pub fn recovery(&self) -> &Recovery {
        &self.inner.recovery
    }

    /// Checks the tier's invariants (tests).
    pub fn validate(&self) -> Result<(), String> {
        self.inner.lock().validate()
    }

    /// Writes every dirty block back to the origin and makes that durable (`blockwell cache flush`).
    /// Returns the blocks written back.
    pub fn clean_all(&self) -> io::Result<u64> {
        self.inner.clean_all()
    }

    /// Switches what writes do. Leaving write-back first writes every dirty block back.
    pub fn set_mode(&self, mode: CacheMode) -> io::Result<()> {
        self.inner.set_mode(mode)
    }

    /// Runs one cleaner pass now (tests and the simulator-equivalence checks); returns the blocks cleaned.
    pub fn clean_pass(&self) -> io::Result<u64> {
        self.inner.clean_tick()
    }

    /// Commits now.
    pub fn commit(&self) -> io::Result<()> {
        self.inner.commit()
    }

    /// A clean shutdown: stops the threads, commits, and checkpoints with the policy hints, marked clean.
    /// Dirty blocks stay dirty (a write-back cache keeps them across restarts).
    pub fn close(self) -> io::Result<()> {
        self.shutdown()
    }

    /// Cleans every dirty block, then marks the device detached: the origin alone is current.
    pub fn detach(self) -> io::Result<()> {
        self.inner.clean_all()?;
        if self.closed.swap(true, Ordering::SeqCst) {
            return Err(eio("the cache device is closed"));
        }
        self.stop_threads();
        self.inner.detach()
    }

    fn stop_threads(&self) {
        self.inner.stop.store(true, Ordering::SeqCst);
        {
            let _g = self.inner.wake_lock.lock().unwrap_or_else(|e| e.into_inner());
            self.inner.wake.notify_all();
        }
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(|e| e.into_inner()));
        for t in threads {
            let _ = t.join();
        }
    }

    /// The clean shutdown of [`TierBackend::close`], through a shared reference (a server that hands the
    /// tier to several owners closes it once its clients are gone). Later calls do nothing.
    pub fn shutdown(&self) -> io::Result<()> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.stop_threads();
        self.inner.shutdown()
    }
}

impl<O: Backend + 'static> Drop for TierBackend<O> {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn spawn<O: Backend + 'static>(
    what: &'static str,
    inner: Arc<Inner<O>>,
    f: fn(&Inner<O>),
) -> Result<JoinHandle<()>, TierError> {
    std::thread::Builder::new()
        .name(format!("blockwell-tier-{what}"))
        .spawn(move || f(&inner))
        .map_err(|source| TierError::Thread { what, source })
}

fn write_policy(mode: CacheMode) -> WritePolicy {
    match mode {
        CacheMode::WriteBack => WritePolicy::Back,
        CacheMode::WriteAround => WritePolicy::Around,
        CacheMode::WriteThrough | CacheMode::ReadOnly => WritePolicy::Allocate,
    }
}

pub(crate) fn eio(msg: impl Into<String>) -> io::Error {
    io::Error::other(msg.into())
}

impl<O: Backend> Inner<O> {
    fn open(origin: O, dev: Arc<dyn Dev>, config: TierConfig) -> Result<Self, TierError> {
        if config.policy.kind.needs_next_use() {
            return Err(TierError::Offline(config.policy.label().to_string()));
        }
        if config.policy.libcachesim_quirks(config.preset)? {
            return Err(TierError::Quirks { policy: config.policy.label().to_string(), preset: config.preset.name() });
        }
        let size = origin.size();
        let opts = OpenOptions {
            origin: config.origin,
            origin_path: config.origin_path.clone(),
            block_size: None,
            mode: config.mode,
        };
        let (mut meta, recovery) = match &config.origin_guard {
            None => Metadata::open(&*dev, &opts)?,
            Some(g) => {
                let st = g.record.read()?.unwrap_or_default();
                if let Some(hold) = &st.cache {
                    let mine = blockwell_cachedev::superblock::current(&*dev).map(|sb| sb.uuid);
                    if mine != Some(hold.uuid) && !g.force {
                        if let Some(why) = origin::hold_refusal(hold) {
                            return Err(TierError::HeldElsewhere(why));
                        }
                    }
                }
                let check = blockwell_cachedev::OriginCheck {
                    nonce: st.nonce,
                    new_nonce: origin::new_nonce(),
                    stale: g.stale(),
                };
                let (meta, recovery) = Metadata::open_checked(&*dev, &opts, Some(check))?;
                let sb = meta.superblock();
                let hold = origin::CacheHold { uuid: sb.uuid, path: g.cache_path.clone(), dirty: None };
                g.record.write(&origin::OriginState { nonce: sb.origin_nonce, cache: Some(hold) })?;
                (meta, recovery)
            }
        };
        let geometry = *meta.geometry();
        let block_size = u64::from(geometry.block_size);
        let blocks = size.div_ceil(block_size);
        if blocks > blockwell_core::key::MAX_BLOCK {
            return Err(TierError::OriginTooLarge { size, block_size });
        }
        // After a crash, write-through and write-around copies may be older than the origin: keep dirty
        // blocks only (there are none unless the mode changed).
        let cold = !recovery.clean_shutdown
            && matches!(recovery.previous_mode, Some(CacheMode::WriteThrough | CacheMode::WriteAround));
        if cold {
            meta.retain(&*dev, |e| e.dirty)?;
        }
        let slots = geometry.slots;
        let reserve = config.reserve.unwrap_or((slots / 64).max(16)).min(slots);
        let capacity = slots - reserve;
        if capacity == 0 {
            return Err(TierError::TooSmall { slots, reserve });
        }
        let cc = CacheConfig::new(block_size, capacity * block_size)
            .map_err(|e| TierError::Device(blockwell_cachedev::Error::Corrupt(format!("geometry: {e}"))))?
            .with_associativity(config.associativity);
        let policy = cc.build_policy(&config.policy, config.preset)?;
        let mut lc = LevelConfig::new(cc);
        lc.admission = config.admission;
        lc.sequential_cutoff = config.sequential_cutoff;
        lc.write = write_policy(config.mode);
        lc.partial_write_allocate = false;
        lc.cluster_max_blocks = u64::from(u32::MAX);
        lc.volume_bytes = size;
        let level = CacheLevel::new(lc, policy, None);
        let entries: Vec<Entry> = meta.entries().to_vec();
        let mut st = State::new(level, &entries, config.mode);
        // Back into the engine, least recently used first.
        let mut order: Vec<usize> = (0..entries.len()).filter(|&s| !entries[s].is_free()).collect();
        order.sort_by_key(|&s| (entries[s].hint, s));
        let mut plan = StepPlan::default();
        for &s in &order {
            let e = entries[s];
            if e.block >= blocks {
                continue;
            }
            let slot = &mut st.slots[s];
            slot.used = state::Use::Valid(e.block);
            slot.dirty = e.dirty;
            slot.crc = e.data_crc();
            slot.verified = false;
            slot.adopt = e.dirty && !recovery.clean_shutdown;
            slot.stamp = e.hint;
            st.map.insert(e.block, s as u32);
            plan.victims.clear();
            st.level.restore(key(e.block), e.dirty, &mut plan);
            let victims = std::mem::take(&mut plan.victims);
            st.victims(&victims);
        }
        for s in 0..entries.len() {
            st.pool(s as u32);
        }
        let cleaner = config.cleaner.build();
        Ok(Inner {
            origin,
            dev,
            geometry,
            block_size,
            size,
            blocks,
            capacity,
            state: Mutex::new(st),
            commit: Mutex::new(commit::CommitState::new(meta)),
            epoch: AtomicU64::new(1),
            origin_written: AtomicU64::new(0),
            origin_flushed: Mutex::new(0),
            stripes: WriteStripes::new(),
            counters: Counters::default(),
            cleaner: Mutex::new(cleaner),
            recovery,
            wake: Condvar::new(),
            wake_lock: Mutex::new(()),
            stop: AtomicBool::new(false),
            start: Instant::now(),
            last_request: AtomicU64::new(0),
            drain: Mutex::new(()),
            written_back: Condvar::new(),
            config,
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits (releasing the lock meanwhile) until no write-back of a block `pick` selects is in flight.
    pub(crate) fn wait_write_backs<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        pick: impl Fn(u64) -> bool,
    ) -> MutexGuard<'a, State> {
        while st.writing_back.iter().any(|&b| pick(b)) {
            st = self.written_back.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        st
    }

    pub(crate) fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    pub(crate) fn touch_clock(&self) {
        self.last_request.store(self.now_ns(), Ordering::Relaxed);
    }

    fn snapshot(&self) -> TierSnapshot {
        let (engine, cached, dirty, evicted, free, degraded, mode) = {
            let st = self.lock();
            let engine: Stats = *st.level.stats();
            (
                engine,
                st.map.len() as u64,
                st.level.dirty_count(),
                st.evicted.len() as u64,
                st.free.len() as u64,
                st.degraded.clone(),
                st.mode,
            )
        };
        let meta = self.commit.lock().unwrap_or_else(|e| e.into_inner()).meta.stats();
        let c = &self.counters;
        let dirty_all = dirty + evicted;
        TierSnapshot {
            mode: mode.to_string(),
            policy: self.config.policy.label().to_string(),
            associativity: self.config.associativity.map(std::num::NonZeroUsize::get),
            cleaner: self.config.cleaner.to_string(),
            block_size: self.block_size,
            slots: self.geometry.slots,
            capacity_blocks: self.capacity,
            cached_blocks: cached,
            dirty_blocks: dirty_all,
            dirty_percent: if self.geometry.slots == 0 {
                0.0
            } else {
                dirty_all as f64 * 100.0 / self.geometry.slots as f64
            },
            evicted_dirty: evicted,
            free_slots: free,
            counters: DevCounters {
                read_requests: get(&c.read_requests),
                write_requests: get(&c.write_requests),
                promotions: get(&c.promotions),
                demotions: get(&c.demotions),
                cleaned_blocks: get(&c.cleaned_blocks),
                clean_writes: get(&c.clean_writes),
                uncached_reads: get(&c.uncached_reads),
                uncached_writes: get(&c.uncached_writes),
                dev_read_blocks: get(&c.dev_read_blocks),
                dev_write_blocks: get(&c.dev_write_blocks),
                origin_reads: get(&c.origin_reads),
                origin_read_bytes: get(&c.origin_read_bytes),
                origin_writes: get(&c.origin_writes),
                origin_write_bytes: get(&c.origin_write_bytes),
                ..DevCounters::default()
            }
            .with_engine(&engine),
            dev_read_errors: get(&c.dev_read_errors),
            dev_write_errors: get(&c.dev_write_errors),
            origin_read_errors: get(&c.origin_read_errors),
            origin_write_errors: get(&c.origin_write_errors),
            origin_zero_writes: get(&c.origin_zero_writes),
            origin_bytes_zeroed: get(&c.origin_bytes_zeroed),
            origin_trims: get(&c.origin_trims),
            origin_bytes_trimmed: get(&c.origin_bytes_trimmed),
            checksum_failures: get(&c.checksum_failures),
            no_room: get(&c.no_room),
            throttled: get(&c.throttled),
            commits: meta.commits,
            checkpoints: meta.checkpoints,
            journal_blocks: meta.journal_blocks_written,
            degraded,
            recovery: self.recovery.clone(),
            clean_rate: self.cleaner.lock().unwrap_or_else(|e| e.into_inner()).rate(),
        }
    }

    /// The engine's view of a request on the origin.
    pub(crate) fn request(
        &self,
        op: blockwell_core::Op,
        offset: u64,
        len: u64,
    ) -> blockwell_core::level::Request<'static> {
        let mut r = blockwell_core::level::Request::bytes(op, 0, offset, len, self.block_size)
            .expect("requests are checked against the origin size, and its blocks against the key range");
        r.stream_end = self.blocks;
        r
    }

    /// Bytes of `block` inside the origin.
    pub(crate) fn block_len(&self, block: u64) -> usize {
        (self.size - block * self.block_size).min(self.block_size) as usize
    }

    fn set_mode(&self, mode: CacheMode) -> io::Result<()> {
        let _d = self.drain.lock().unwrap_or_else(|e| e.into_inner());
        let was = self.lock().mode;
        if was == mode {
            return Ok(());
        }
        // No write in flight while the mode changes: a write that began under the old rules must not finish
        // under a superblock that promises the new ones.
        let all = self.stripes.lock(0, u64::MAX);
        // The new mode is durable before any write follows it: leaving write-back, recovery must already treat
        // clean copies as write-through ones (cold) once write-through writes reach the origin first; dirty
        // blocks are kept in every mode.
        self.commit()?;
        {
            let mut c = self.commit.lock().unwrap_or_else(|e| e.into_inner());
            c.meta.set_mode(&*self.dev, mode).map_err(|e| eio(e.to_string()))?;
        }
        {
            let mut st = self.lock();
            st.mode = mode;
            st.level.set_write_policy(write_policy(mode));
        }
        drop(all);
        if was == CacheMode::WriteBack {
            self.clean_all_locked()?;
        }
        Ok(())
    }

    fn clean_all(&self) -> io::Result<u64> {
        let _d = self.drain.lock().unwrap_or_else(|e| e.into_inner());
        self.clean_all_locked()
    }

    fn shutdown(&self) -> io::Result<()> {
        self.adopt_unread();
        self.commit()?;
        let hints: Vec<u32> = {
            let st = self.lock();
            st.slots.iter().map(|s| s.stamp).collect()
        };
        let mut c = self.commit.lock().unwrap_or_else(|e| e.into_inner());
        c.meta.shutdown(&*self.dev, |slot| hints[slot as usize]).map_err(|e| eio(e.to_string()))?;
        self.release_origin(&c.meta)
    }

    fn detach(&self) -> io::Result<()> {
        self.commit()?;
        let mut c = self.commit.lock().unwrap_or_else(|e| e.into_inner());
        c.meta.detach(&*self.dev).map_err(|e| eio(e.to_string()))?;
        self.release_origin(&c.meta)
    }

    /// After a clean stop: the origin records the dirty blocks the device keeps, or no device at all when it
    /// keeps none (the origin alone is current).
    fn release_origin(&self, meta: &Metadata) -> io::Result<()> {
        let Some(g) = &self.config.origin_guard else { return Ok(()) };
        let sb = meta.superblock();
        let dirty = meta.entries().iter().filter(|e| e.dirty).count() as u64;
        let cache =
            (dirty > 0).then(|| origin::CacheHold { uuid: sb.uuid, path: g.cache_path.clone(), dirty: Some(dirty) });
        g.record.write(&origin::OriginState { nonce: sb.origin_nonce, cache }).map_err(|e| eio(e.to_string()))
    }
}

impl<O: Backend> Backend for Inner<O> {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.read(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> io::Result<()> {
        refuse_writes(self.is_read_only())?;
        self.write(buf, offset, fua)
    }

    fn flush(&self) -> io::Result<()> {
        self.flush_all()
    }

    fn trim(&self, offset: u64, len: u64, fua: bool) -> io::Result<()> {
        refuse_writes(self.is_read_only())?;
        self.discard(offset, len, fua, false, true)
    }

    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> io::Result<()> {
        refuse_writes(self.is_read_only())?;
        self.discard(offset, len, fua, true, may_trim)
    }

    fn is_read_only(&self) -> bool {
        self.lock().mode == CacheMode::ReadOnly || self.origin.is_read_only()
    }

    fn can_multi_conn(&self) -> bool {
        // One cache for every connection; FLUSH commits everything.
        self.origin.can_multi_conn()
    }
}

crate::backend::forward_backend!([O: Backend + 'static] TierBackend<O>, self => self.inner);
