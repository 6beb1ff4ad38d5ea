//! [`CacheLevel`]: the whole cache step of one cache level — the one type that `blockwell sim`, the live
//! server and the FUSE export drive.
//!
//! A level owns the replacement policy, the prefetcher, the set of blocks in flight, admission, the sequential
//! cutoff, per-block state (dirty, pinned while a write is in flight) and the counters ([`crate::stats`]). A
//! [`Request`] goes in and a [`StepPlan`] comes out: what each block of the request is ([`Fate`]: a hit, a
//! wait on a read in flight, a fetch to install, a pass-through), the device reads to issue now (demand misses
//! and synchronous prefetches, clustered) and in the background (asynchronous prefetches), and the victims with
//! their dirty bit. The driver executes the reads and feeds their completions back ([`CacheLevel::fetch_done`],
//! [`CacheLevel::fetch_failed`]). There is no I/O and no clock here: the same requests and completions give the
//! same plans, bit for bit.
//!
//! ## When a block enters the policy
//! A missed block the level admits enters the policy when its read is *issued*, as the Linux page cache adds a
//! locked page before reading it: it is then resident in the policy and *in flight* until
//! [`CacheLevel::fetch_done`]. A demand access to a block in flight is a miss that issues no read (seed `001_*`
//! §5.2), counted once in `delayed_hits`; the policy sees it as an access (recency is updated). Prefetched
//! blocks enter through the policy's prefetch path ([`crate::Policy::prefetch`], seed `001_*` §4), one group
//! per fetch range. A driver whose reads complete at once (the one-pass `sim`) calls
//! [`CacheLevel::complete_all`] after each request, and then the level behaves exactly as a bare policy: the
//! libcachesim cross-check holds through it.
//!
//! With [`Insert::OnCompletion`] (the time-aware simulator) a missed or prefetched block enters the policy only
//! when its read completes ([`CacheLevel::arrive`]): demand accesses made while it was in flight, reads and
//! writes alike, are applied then, in order; blocks that arrived only prefetched enter as one prefetch group
//! ([`CacheLevel::insert_arrived`]). Counting is the same in both modes.
//!
//! ## Admission
//! Every demand access the level serves (reads, and writes that may allocate; hits, waits and misses alike) is
//! shown to admission ([`crate::admission::Admission::record`]: TinyLFU counts it). A demand miss of an absent
//! block, read or whole-block write, asks admission whether the block enters; a rule that weighs the policy's
//! victim (TinyLFU) gets [`crate::Policy::victim`] for it. A rejected block is [`Fate::Pass`]: read (or written)
//! through, not inserted, counted in `admission_rejections`. `always` costs nothing.
//!
//! ## Writes
//! - [`WritePolicy::Allocate`] (write-through, and the simulator): a written block that is resident is updated
//!   ([`Fate::Update`]); an absent block wholly covered by the write is admitted and allocated
//!   ([`Fate::Allocate`], its data is the written data); a partly covered absent block is not allocated
//!   ([`Fate::Pass`]) unless `partial_write_allocate` (the simulator, which has no data, allocates like
//!   libCacheSim). A write over a block in flight overtakes the read: whole, it allocates; partial, the block
//!   is dropped ([`Fate::Dropped`]).
//! - [`WritePolicy::Around`]: every written block is dropped from the level.
//! - [`WritePolicy::Ignore`]: writes are counted and change nothing (the time simulator's block level).
//! - [`WritePolicy::Back`]: as `Allocate`, and the blocks written into the level are *dirty*; a request that
//!   bypasses the level still updates the blocks it holds (dm-cache's rule: cached blocks are written in the
//!   cache), so the level never holds an older copy than the next level.
//!
//! Whatever the policy, a write to a dirty block updates it ([`Fate::Update`]): the level holds the only current
//! copy. Writes count as block hits only when the level held the block's data ([`Fate::Update`]).
//!
//! ## Dirty blocks and cleaning
//! Dirty blocks are kept in key order. [`CacheLevel::clean_plan`] hands the driver dirty blocks to write back,
//! in key order from where the previous pass stopped, merged into runs of consecutive blocks, skipping blocks
//! with a write in flight ([`CacheLevel::set_pinned`]); [`CacheLevel::clean_done`] marks a block clean unless a
//! write reached it after it was handed out. How many to clean, and when, is a [`crate::cleaner::Cleaner`]'s
//! decision. A dirty victim leaves the level with [`Victim::dirty`] set: the driver writes it back.
//!
//! **State**: per block in flight 24 B (token, flags) in a hash map; per block with state (dirty, pinned,
//! cleaning) 9 B in a hash map, plus about 40 B per dirty block in the ordered dirty set; admission's and the
//! prefetcher's own state (see their modules); the policy's metadata.

use crate::admission::{Admission, AdmissionSpec};
use crate::cache::{BlockCache, CacheConfig, CacheError, Op};
use crate::cluster::{Clusterer, DeviceRead};
use crate::cutoff::SequentialCutoff;
use crate::key::{block_span, BlockKey, MAX_BLOCK, MAX_VOLUME};
use crate::policy::{Access, DynPolicy, Evicted, Outcome, Victim as PolicyVictim, NEVER};
use crate::prefetch::{BlockState, BlockView, Demand, Fetch, Prefetcher, U64Map};
use crate::redcap::{ReadPlan, Redcap};
use std::collections::BTreeSet;

/// What writes do to the level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WritePolicy {
    /// Update resident blocks, allocate absent ones the write covers (write-through; the simulator).
    #[default]
    Allocate,
    /// Drop every written block (write-around).
    Around,
    /// Writes pass the level: counted, nothing changes (the time simulator's block level, whose model of seed
    /// `001_*` caches reads only).
    Ignore,
    /// Write-back: as [`WritePolicy::Allocate`], and every block written into the level is dirty until it is
    /// cleaned ([`CacheLevel::clean_plan`]) or written back when evicted (its [`Victim::dirty`]). A bypassed
    /// write still updates the blocks the level holds.
    Back,
}

/// When a missed block enters the policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Insert {
    /// When its read is issued: it is resident (and in flight) at once, as a locked page in the Linux page
    /// cache. The one-pass simulator and the live server.
    #[default]
    OnIssue,
    /// When its read completes ([`CacheLevel::arrive`]): demand accesses made while it was in flight are
    /// applied then, in order, and a block only prefetched enters as part of a prefetch group. The time-aware
    /// simulator, whose levels see reads take time.
    OnCompletion,
}

/// Everything that configures a level apart from its policy and prefetcher.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LevelConfig {
    pub cache: CacheConfig,
    pub admission: AdmissionSpec,
    /// Requests extending a back-to-back run of at least this many bytes bypass the level; 0 turns it off.
    pub sequential_cutoff: u64,
    pub write: WritePolicy,
    /// Allocate absent blocks a write covers only in part (the simulator: there is no data to lose).
    pub partial_write_allocate: bool,
    /// Largest device read the clusterer builds, in blocks.
    pub cluster_max_blocks: u64,
    /// Bytes of each volume, when known: a write reaching the end of the volume covers its short last block
    /// whole.
    pub volume_bytes: u64,
    pub insert: Insert,
}

impl LevelConfig {
    /// Admit always, no cutoff, allocate on write (partial blocks too), 64 KiB device reads.
    pub fn new(cache: CacheConfig) -> Self {
        LevelConfig {
            cache,
            admission: AdmissionSpec::Always,
            sequential_cutoff: 0,
            write: WritePolicy::Allocate,
            partial_write_allocate: true,
            cluster_max_blocks: (crate::cluster::DEFAULT_MAX_KIB * 1024 / cache.block_size).max(1),
            volume_bytes: u64::MAX,
            insert: Insert::OnIssue,
        }
    }

    /// Admit always, no cutoff, allocate every written block, insert on issue: with no prefetcher and no reads
    /// in flight, a request is then a plain policy step ([`BlockCache::access_blocks`]).
    pub fn is_plain(&self) -> bool {
        self.insert == Insert::OnIssue
            && self.admission == AdmissionSpec::Always
            && self.sequential_cutoff == 0
            && self.write == WritePolicy::Allocate
            && self.partial_write_allocate
    }
}

/// One request to a level.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub op: Op,
    pub first: BlockKey,
    /// Blocks touched (>= 1).
    pub n: u64,
    /// Byte range in the volume (for the sequential cutoff and partial-block writes).
    pub offset: u64,
    pub len: u64,
    /// The prefetcher's stream (a file, process or volume); the volume by default.
    pub stream: u64,
    /// One past the last block of the stream (read-ahead never crosses it).
    pub stream_end: u64,
    /// Next-use times of the request's blocks (OPT), or empty.
    pub next_use: &'a [u64],
}

impl Request<'static> {
    /// A byte-range request; `Err` when the volume or range cannot be keyed.
    pub fn bytes(op: Op, volume: u32, offset: u64, len: u64, block_size: u64) -> Result<Self, CacheError> {
        if volume > MAX_VOLUME {
            return Err(CacheError::Volume(volume));
        }
        let (first, n) = block_span(offset, len, block_size);
        if n == 0 || first + (n - 1) > MAX_BLOCK {
            return Err(CacheError::Range { offset, len });
        }
        let key = BlockKey::new(volume, first).ok_or(CacheError::Range { offset, len })?;
        Ok(Request { op, first: key, n, offset, len, stream: u64::from(volume), stream_end: u64::MAX, next_use: &[] })
    }

    /// A request of `n` whole blocks from `first`.
    pub fn blocks(op: Op, first: BlockKey, n: u64, block_size: u64) -> Self {
        Request {
            op,
            first,
            n,
            offset: first.block().saturating_mul(block_size),
            len: n.saturating_mul(block_size),
            stream: u64::from(first.volume()),
            stream_end: u64::MAX,
            next_use: &[],
        }
    }
}

/// What one block of a request is, for the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Read: the level has the data.
    Hit,
    /// Read: a read of the block is in flight (a miss that issues no read). A driver that cannot wait reads
    /// the block itself, without installing it.
    Wait,
    /// Read: missed and admitted; read it (it is in `reads`) and install it when [`CacheLevel::fetch_done`]
    /// says so.
    Fetch,
    /// Not cached: read it from (or write it to) the next level only (admission said no, a partial write, a
    /// bypass).
    Pass,
    /// Write: the level holds the block; update its data.
    Update,
    /// Write: the block is allocated for the written data (install it).
    Allocate,
    /// The level dropped the block (write-around, a partial write over a read in flight, a bypassed write).
    Dropped,
}

/// A block that left the level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Victim {
    pub key: BlockKey,
    /// Prefetched and never demanded.
    pub unused_prefetch: bool,
    /// Its data is newer than the next level's (write-back): the driver must write it down first.
    pub dirty: bool,
    /// A write of it is in flight.
    pub pinned: bool,
    /// It was still being read (the read will not be installed).
    pub in_flight: bool,
}

/// What a request does (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StepPlan {
    /// The request bypassed the level (sequential cutoff).
    pub bypass: bool,
    /// Identifies this plan's reads in [`CacheLevel::fetch_done`].
    pub token: u64,
    /// One per block of the request, in order.
    pub fates: Vec<Fate>,
    /// Blocks that hit.
    pub hits: u64,
    /// Synchronous device reads: demand misses (`Fetch`, `Pass`) and synchronous prefetches, clustered.
    pub reads: Vec<DeviceRead>,
    /// Asynchronous device reads (prefetches), clustered.
    pub async_reads: Vec<DeviceRead>,
    /// Blocks evicted while serving the request.
    pub victims: Vec<Victim>,
    /// Blocks a cache without prefetching would have read for this request (misses and first hits on
    /// prefetched blocks): REDCAP's estimate of the time without it.
    pub demand_blocks: u64,
    /// REDCAP probe: the prefetcher's proposals were dropped so that this miss measures a small read.
    pub probe: bool,
}

impl StepPlan {
    pub fn clear(&mut self) {
        self.bypass = false;
        self.token = 0;
        self.fates.clear();
        self.hits = 0;
        self.reads.clear();
        self.async_reads.clear();
        self.victims.clear();
        self.demand_blocks = 0;
        self.probe = false;
    }
}

/// A block in flight.
#[derive(Clone, Debug)]
struct Flight {
    token: u64,
    /// Read by a prefetch and not demanded yet.
    prefetched: bool,
    /// [`Insert::OnCompletion`]: the next-use times of the demand accesses made while in flight, in order.
    demands: Vec<u64>,
}

impl Flight {
    fn new(token: u64, prefetched: bool, demands: Vec<u64>) -> Self {
        Flight { token, prefetched, demands }
    }
}

const DIRTY: u8 = 1;
const PINNED: u8 = 2;
/// Handed out by [`CacheLevel::clean_plan`] and not written since.
const CLEANING: u8 = 4;

/// Blocks per prefetch group inserted into the policy at once.
const PREFETCH_GROUP: usize = 256;

/// One cache level's whole step (see the module docs).
pub struct CacheLevel<P: DynPolicy + ?Sized = dyn DynPolicy> {
    cache: BlockCache<P>,
    config: LevelConfig,
    prefetcher: Option<Box<dyn Prefetcher>>,
    inflight: U64Map<Flight>,
    admission: Admission,
    cutoff: SequentialCutoff,
    flags: U64Map<u8>,
    /// The dirty blocks, in key order, and where the next cleaning pass starts.
    dirty: BTreeSet<u64>,
    clean_cursor: u64,
    clusterer: Clusterer,
    next_token: u64,
    redcap: Option<RedcapTiming>,
    // Scratch.
    evicted: Vec<Evicted>,
    fetches: Vec<Fetch>,
    group: Vec<Access>,
    /// [`Insert::OnCompletion`]: blocks that arrived only prefetched, waiting for [`CacheLevel::insert_arrived`].
    arrived: Vec<Access>,
    sync_keys: Vec<Fetch>,
    async_keys: Vec<Fetch>,
}

impl<P: DynPolicy + ?Sized> CacheLevel<P> {
    /// A level over `policy` (built for `config.cache.capacity_blocks()` blocks), with an optional prefetcher.
    pub fn new(config: LevelConfig, policy: Box<P>, prefetcher: Option<Box<dyn Prefetcher>>) -> Self {
        let capacity = config.cache.capacity_blocks();
        CacheLevel {
            cache: BlockCache::new(config.cache, policy),
            prefetcher,
            inflight: U64Map::default(),
            admission: config.admission.build(capacity),
            cutoff: SequentialCutoff::new(config.sequential_cutoff),
            flags: U64Map::default(),
            dirty: BTreeSet::new(),
            clean_cursor: 0,
            clusterer: Clusterer::new(config.cluster_max_blocks.max(1)).expect("at least one block"),
            next_token: 0,
            redcap: None,
            evicted: Vec::new(),
            fetches: Vec::new(),
            group: Vec::new(),
            arrived: Vec::new(),
            sync_keys: Vec::new(),
            async_keys: Vec::new(),
            config,
        }
    }

    /// Replaces the admission rule (a custom [`crate::admission::AdmissionFilter`]).
    pub fn set_admission(&mut self, admission: Admission) {
        self.admission = admission;
    }

    /// Runs REDCAP's activation algorithm on the driver's measured read times (the `redcap` prefetcher in a
    /// driver without a disk model), seed `000_*`'s "only takes into account the I/O time of the issued disk
    /// requests": while REDCAP is on, the time without it is estimated for the blocks a plain cache would have
    /// read; while it is off, the segment cache runs in `shadow` and its reads' time is estimated.
    pub fn enable_redcap_timing(&mut self, shadow: Redcap) {
        self.redcap = Some(RedcapTiming { shadow, plan: ReadPlan::default(), model: IoModel::default() });
    }

    pub fn config(&self) -> &LevelConfig {
        &self.config
    }

    pub fn stats(&self) -> &crate::Stats {
        self.cache.stats()
    }

    /// Zeroes the counters (end of a warm-up); contents stay.
    pub fn reset_stats(&mut self) {
        self.cache.reset_stats();
    }

    pub fn policy(&self) -> &P {
        self.cache.policy()
    }

    /// Blocks in flight now.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Whether the prefetcher proposes fetches now (false without one, or while REDCAP is off).
    pub fn prefetcher_active(&self) -> Option<bool> {
        self.prefetcher.as_ref().map(|p| p.is_active())
    }

    /// Neither prefetching, admission, cutoff nor reads in flight: a request is a plain policy step.
    #[inline]
    pub fn is_plain(&self) -> bool {
        self.config.is_plain() && self.prefetcher.is_none() && self.admission.is_always() && self.inflight.is_empty()
    }

    /// Where a block is.
    pub fn state(&self, key: BlockKey) -> BlockState {
        LevelView { inflight: &self.inflight, cache: &self.cache }.state(key)
    }

    /// Is the block resident with its data (not in flight)?
    pub fn has_data(&self, key: BlockKey) -> bool {
        !self.inflight.contains_key(&key.raw()) && self.cache.contains(key)
    }

    /// Is the block still in flight for the read of `token`?
    pub fn awaits(&self, key: BlockKey, token: u64) -> bool {
        self.inflight.get(&key.raw()).is_some_and(|f| f.token == token)
    }

    /// Whether a byte-range request would bypass the level now (no state changes).
    pub fn would_bypass(&self, volume: u32, offset: u64, len: u64) -> bool {
        self.cutoff.would_bypass(volume, offset, len)
    }

    fn token(&mut self) -> u64 {
        self.next_token += 1;
        self.next_token
    }

    /// The step: see the module docs. `plan` is cleared and filled.
    pub fn access(&mut self, req: &Request<'_>, plan: &mut StepPlan) {
        plan.clear();
        plan.token = self.token();
        if req.n == 0 {
            return;
        }
        let volume = req.first.volume();
        if self.cutoff.observe(volume, req.offset, req.len) {
            self.bypass(req, plan);
            return;
        }
        match (req.op, self.config.write) {
            (Op::Read, _) => self.read(req, plan),
            (Op::Write, WritePolicy::Allocate | WritePolicy::Back) => self.write(req, plan),
            (Op::Write, WritePolicy::Ignore) => {
                plan.fates.extend((0..req.n).map(|_| Fate::Pass));
                self.count(Op::Write, req.n, 0);
            }
            (Op::Write, WritePolicy::Around) => self.write_around(req, plan),
        }
    }

    /// A write that does not allocate: drops the blocks it reaches, except dirty ones (and, written back, every
    /// resident one), which it updates.
    fn write_around(&mut self, req: &Request<'_>, plan: &mut StepPlan) {
        let keep_resident = self.config.write == WritePolicy::Back;
        let mut hits = 0;
        for i in 0..req.n {
            let key = BlockKey::from_raw(req.first.raw() + i);
            let f = if self.has_data(key) && (keep_resident || self.is_dirty(key)) {
                self.written_into(key);
                hits += 1;
                Fate::Update
            } else if self.drop_block(key) {
                Fate::Dropped
            } else {
                Fate::Pass
            };
            plan.fates.push(f);
        }
        self.count(Op::Write, req.n, hits);
    }

    /// A block the level holds was written: dirty under write-back, and no longer clean for a cleaning pass.
    fn written_into(&mut self, key: BlockKey) {
        let was_dirty = self.is_dirty(key);
        if was_dirty {
            self.cache.stats_mut().dirty_write_hits += 1;
        }
        if self.config.write == WritePolicy::Back || was_dirty {
            self.set_flag(key, DIRTY, true);
        }
        self.set_flag(key, CLEANING, false);
    }

    fn bypass(&mut self, req: &Request<'_>, plan: &mut StepPlan) {
        plan.bypass = true;
        self.cache.stats_mut().bypassed += 1;
        if req.op == Op::Write {
            return self.write_around(req, plan);
        }
        plan.fates.extend((0..req.n).map(|_| Fate::Pass));
        self.clusterer.cluster(&[Fetch { first: req.first, n: req.n, sync: true }], &mut plan.reads);
        self.count(req.op, req.n, 0);
    }

    fn count(&mut self, op: Op, n: u64, hits: u64) {
        let s = self.cache.stats_mut();
        let s = match op {
            Op::Read => &mut s.read,
            Op::Write => &mut s.write,
        };
        s.requests += 1;
        s.blocks += n;
        s.block_hits += hits;
        if hits == n {
            s.request_hits += 1;
        }
    }

    fn read(&mut self, req: &Request<'_>, plan: &mut StepPlan) {
        let token = plan.token;
        self.fetches.clear();
        if let Some(p) = self.prefetcher.as_mut() {
            let demand = Demand { stream: req.stream, op: Op::Read, first: req.first, n: req.n, end: req.stream_end };
            let view = LevelView { inflight: &self.inflight, cache: &self.cache };
            p.on_demand(&demand, &view, &mut self.fetches);
            if let Some(r) = self.redcap.as_mut() {
                if !self.fetches.is_empty() && r.model.probe() {
                    self.fetches.clear();
                    plan.probe = true;
                }
            }
        }
        self.sync_keys.clear();
        self.async_keys.clear();
        let mut hits = 0;
        let mut key = req.first;
        for i in 0..req.n as usize {
            let nu = req.next_use.get(i).copied().unwrap_or(NEVER);
            self.admission.record(key.raw());
            let fate = if let Some(f) = self.inflight.get_mut(&key.raw()) {
                let late = std::mem::replace(&mut f.prefetched, false);
                if self.config.insert == Insert::OnCompletion {
                    f.demands.push(nu);
                } else {
                    self.touch(key, nu, plan);
                }
                let s = self.cache.stats_mut();
                s.delayed_hits += 1;
                if late {
                    s.prefetch_late += 1;
                }
                plan.demand_blocks += 1;
                Fate::Wait
            } else if let Some(o) = self.hit(key, nu, plan) {
                if o == Outcome::PrefetchHit {
                    self.cache.stats_mut().prefetch_used += 1;
                    plan.demand_blocks += 1;
                    if let Some(p) = self.prefetcher.as_mut() {
                        p.on_prefetch_hit(req.stream, key);
                    }
                }
                hits += 1;
                Fate::Hit
            } else {
                plan.demand_blocks += 1;
                let fate = self.allocate(key, nu, token, plan);
                self.sync_keys.push(Fetch { first: key, n: 1, sync: true });
                fate
            };
            plan.fates.push(fate);
            key = key.next();
        }
        plan.hits = hits;
        self.count(Op::Read, req.n, hits);
        let fetches = std::mem::take(&mut self.fetches);
        for f in fetches.iter().filter(|f| f.first.volume() == req.first.volume()) {
            self.prefetch_fetch(f, token, req.stream_end, plan);
        }
        self.fetches = fetches;
        self.clusterer.cluster(&self.sync_keys, &mut plan.reads);
        self.clusterer.cluster(&self.async_keys, &mut plan.async_reads);
    }

    /// Admission's decision on a demand miss of the absent block `key`, counted when it says no. The policy is
    /// asked for its victim only when the rule weighs it (TinyLFU).
    #[inline]
    fn admit(&mut self, key: BlockKey) -> bool {
        if self.admission.is_always() {
            return true;
        }
        let victim =
            if self.admission.needs_victim() { self.cache.policy().victim(key) } else { PolicyVictim::Unknown };
        let admitted = self.admission.admit(key.raw(), victim);
        if !admitted {
            self.cache.stats_mut().admission_rejections += 1;
        }
        admitted
    }

    /// A demand miss of an absent block: admit and insert it (in flight), or let it pass.
    fn allocate(&mut self, key: BlockKey, nu: u64, token: u64, plan: &mut StepPlan) -> Fate {
        if !self.admit(key) {
            return Fate::Pass;
        }
        if self.config.insert == Insert::OnCompletion {
            self.inflight.insert(key.raw(), Flight::new(token, false, vec![nu]));
            return Fate::Fetch;
        }
        self.touch(key, nu, plan);
        if self.cache.contains(key) {
            self.inflight.insert(key.raw(), Flight::new(token, false, Vec::new()));
            Fate::Fetch
        } else {
            // The policy declined it (OPT: never used again).
            Fate::Pass
        }
    }

    /// A demand access to `key` if it is resident (one lookup: [`crate::Policy::hit`]), victims handled.
    fn hit(&mut self, key: BlockKey, nu: u64, plan: &mut StepPlan) -> Option<Outcome> {
        self.evicted.clear();
        let o = self.cache.policy_mut().hit(Access::with_next_use(key, nu), &mut self.evicted);
        self.take_victims(plan);
        o
    }

    /// A demand access in the policy, victims handled.
    fn touch(&mut self, key: BlockKey, nu: u64, plan: &mut StepPlan) -> Outcome {
        self.evicted.clear();
        let o = self.cache.policy_mut().access(Access::with_next_use(key, nu), &mut self.evicted);
        self.take_victims(plan);
        o
    }

    /// Inserts the absent blocks of one prefetcher range as prefetch groups; they go in flight and are read
    /// with the request (`sync`) or in the background.
    fn prefetch_fetch(&mut self, f: &Fetch, token: u64, end: u64, plan: &mut StepPlan) {
        let lo = f.first.raw();
        let base = lo - f.first.block();
        let hi = lo.saturating_add(f.n).min(base + MAX_BLOCK + 1).min(base.saturating_add(end));
        if self.config.insert == Insert::OnCompletion {
            for b in lo..hi {
                let key = BlockKey::from_raw(b);
                if !self.inflight.contains_key(&b) && !self.cache.contains(key) {
                    self.inflight.insert(b, Flight::new(token, true, Vec::new()));
                    self.cache.stats_mut().prefetch_issued += 1;
                    let to = if f.sync { &mut self.sync_keys } else { &mut self.async_keys };
                    to.push(Fetch { first: key, n: 1, sync: f.sync });
                }
            }
            return;
        }
        let mut b = lo;
        while b < hi {
            self.group.clear();
            while b < hi && self.group.len() < PREFETCH_GROUP.min(self.cache.policy().capacity()) {
                let key = BlockKey::from_raw(b);
                if !self.inflight.contains_key(&b) && !self.cache.contains(key) {
                    self.group.push(Access::new(key));
                }
                b += 1;
            }
            if self.group.is_empty() {
                continue;
            }
            let group = std::mem::take(&mut self.group);
            self.evicted.clear();
            let inserted = self.cache.policy_mut().prefetch(&group, &mut self.evicted);
            self.cache.stats_mut().prefetch_issued += inserted as u64;
            self.take_victims(plan);
            for a in &group {
                if self.cache.contains(a.key) && !self.inflight.contains_key(&a.key.raw()) {
                    self.inflight.insert(a.key.raw(), Flight::new(token, true, Vec::new()));
                    let to = if f.sync { &mut self.sync_keys } else { &mut self.async_keys };
                    to.push(Fetch { first: a.key, n: 1, sync: f.sync });
                }
            }
            self.group = group;
        }
    }

    fn write(&mut self, req: &Request<'_>, plan: &mut StepPlan) {
        let bs = self.config.cache.block_size;
        let end = req.offset.saturating_add(req.len);
        let mut hits = 0;
        let mut key = req.first;
        for i in 0..req.n as usize {
            let nu = req.next_use.get(i).copied().unwrap_or(NEVER);
            self.admission.record(key.raw());
            let start = key.block().saturating_mul(bs);
            let stop = start.saturating_add(bs).min(self.config.volume_bytes.max(start + 1));
            let whole = self.config.partial_write_allocate || (start >= req.offset && stop <= end);
            let fate = if let Some(f) =
                self.inflight.get_mut(&key.raw()).filter(|_| self.config.insert == Insert::OnCompletion)
            {
                // Applied when the read completes.
                f.demands.push(nu);
                Fate::Allocate
            } else if self.inflight.remove(&key.raw()).is_some() {
                self.cache.stats_mut().fills_dropped += 1;
                if whole {
                    self.touch(key, nu, plan);
                    self.allocated(key)
                } else {
                    self.drop_block(key);
                    Fate::Dropped
                }
            } else if let Some(o) = self.hit(key, nu, plan) {
                if o == Outcome::PrefetchHit {
                    self.cache.stats_mut().prefetch_used += 1;
                }
                self.written_into(key);
                hits += 1;
                Fate::Update
            } else if !whole || !self.admit(key) {
                Fate::Pass
            } else {
                self.touch(key, nu, plan);
                self.allocated(key)
            };
            plan.fates.push(fate);
            key = key.next();
        }
        plan.hits = hits;
        self.count(Op::Write, req.n, hits);
    }

    /// A written block entered the policy (or the policy declined it: OPT).
    fn allocated(&mut self, key: BlockKey) -> Fate {
        if !self.cache.contains(key) {
            return Fate::Pass;
        }
        if self.config.write == WritePolicy::Back {
            self.set_flag(key, DIRTY, true);
        }
        Fate::Allocate
    }

    /// Moves the policy's victims (in `self.evicted`) into the plan, counting them.
    fn take_victims(&mut self, plan: &mut StepPlan) {
        for v in self.evicted.drain(..) {
            let s = self.cache.stats_mut();
            s.evictions += 1;
            if v.unused_prefetch {
                s.prefetch_wasted += 1;
            }
            let in_flight = self.inflight.remove(&v.key.raw()).is_some();
            if in_flight {
                self.cache.stats_mut().fills_dropped += 1;
            }
            let flags = self.flags.remove(&v.key.raw()).unwrap_or(0);
            if flags & DIRTY != 0 {
                self.dirty.remove(&v.key.raw());
                self.cache.stats_mut().dirty_evictions += 1;
            }
            if let Some(p) = self.prefetcher.as_mut() {
                p.on_evict(&v);
            }
            plan.victims.push(Victim {
                key: v.key,
                unused_prefetch: v.unused_prefetch,
                dirty: flags & DIRTY != 0,
                pinned: flags & PINNED != 0,
                in_flight,
            });
        }
    }

    /// Drops a block: cancels its read, removes it from the policy. True when it was resident.
    fn drop_block(&mut self, key: BlockKey) -> bool {
        if self.inflight.remove(&key.raw()).is_some() {
            self.cache.stats_mut().fills_dropped += 1;
        }
        if self.flags.remove(&key.raw()).is_some_and(|f| f & DIRTY != 0) {
            self.dirty.remove(&key.raw());
        }
        let was = self.cache.invalidate(key);
        if was {
            self.cache.stats_mut().invalidations += 1;
        }
        was
    }

    /// Drops blocks `first..first+n` (TRIM, a failed or bypassed write). Returns how many were resident.
    pub fn invalidate(&mut self, first: BlockKey, n: u64) -> u64 {
        (0..n).filter(|&i| self.drop_block(BlockKey::from_raw(first.raw() + i))).count() as u64
    }

    /// A read of the plan `token` completed for `key`: true when the driver should install the data (the block
    /// is still waited for by that read); false when something overtook it.
    pub fn fetch_done(&mut self, key: BlockKey, token: u64) -> bool {
        match self.inflight.get(&key.raw()) {
            Some(f) if f.token == token => {
                self.inflight.remove(&key.raw());
                true
            }
            _ => false,
        }
    }

    /// A read of the plan `token` failed (or was abandoned) for `key`: the block leaves the level.
    pub fn fetch_failed(&mut self, key: BlockKey, token: u64) {
        if self.awaits(key, token) {
            self.drop_block(key);
        }
    }

    /// Every read in flight completed (a driver without time, after each request). [`Insert::OnIssue`] only.
    #[inline]
    pub fn complete_all(&mut self) {
        debug_assert_eq!(self.config.insert, Insert::OnIssue);
        self.inflight.clear();
    }

    /// [`Insert::OnCompletion`]: the read of `key` completed. The demand accesses made while it was in flight
    /// enter the policy now, in order (victims go to `plan.victims`, which is not cleared); a block only
    /// prefetched joins the prefetch group inserted by [`CacheLevel::insert_arrived`], with `next_use` (OPT).
    /// False when the block was not in flight.
    pub fn arrive(&mut self, key: BlockKey, next_use: u64, plan: &mut StepPlan) -> bool {
        let Some(f) = self.inflight.remove(&key.raw()) else { return false };
        if f.demands.is_empty() {
            self.arrived.push(Access::with_next_use(key, next_use));
        } else {
            for nu in f.demands {
                self.touch(key, nu, plan);
            }
        }
        true
    }

    /// [`Insert::OnCompletion`]: inserts the blocks that arrived only prefetched since the last call, as prefetch
    /// groups of at most the capacity (victims to `plan.victims`).
    pub fn insert_arrived(&mut self, plan: &mut StepPlan) {
        if self.arrived.is_empty() {
            return;
        }
        let mut arrived = std::mem::take(&mut self.arrived);
        let cap = self.cache.policy().capacity().max(1);
        for chunk in arrived.chunks(cap) {
            self.evicted.clear();
            self.cache.policy_mut().prefetch(chunk, &mut self.evicted);
            self.take_victims(plan);
        }
        arrived.clear();
        self.arrived = arrived;
    }

    /// Prefetches blocks `first..first+n` now (the NBD CACHE command): their absent blocks enter as prefetch
    /// groups and go in flight; `plan.reads` says what to read (synchronously: the caller waits).
    pub fn prefetch(&mut self, first: BlockKey, n: u64, plan: &mut StepPlan) {
        plan.clear();
        plan.token = self.token();
        self.sync_keys.clear();
        self.async_keys.clear();
        let token = plan.token;
        self.prefetch_fetch(&Fetch { first, n, sync: true }, token, u64::MAX, plan);
        self.clusterer.cluster(&self.sync_keys, &mut plan.reads);
    }

    /// Marks a resident block dirty (its data is newer than the next level's) or clean.
    pub fn set_dirty(&mut self, key: BlockKey, dirty: bool) {
        self.set_flag(key, DIRTY, dirty);
    }

    pub fn is_dirty(&self, key: BlockKey) -> bool {
        self.flags.get(&key.raw()).is_some_and(|f| f & DIRTY != 0)
    }

    /// A write of the block is in flight (`true`) or done (`false`).
    pub fn set_pinned(&mut self, key: BlockKey, pinned: bool) {
        self.set_flag(key, PINNED, pinned);
    }

    pub fn is_pinned(&self, key: BlockKey) -> bool {
        self.flags.get(&key.raw()).is_some_and(|f| f & PINNED != 0)
    }

    fn set_flag(&mut self, key: BlockKey, flag: u8, on: bool) {
        if on {
            if self.cache.contains(key) {
                *self.flags.entry(key.raw()).or_insert(0) |= flag;
                if flag == DIRTY {
                    self.dirty.insert(key.raw());
                }
            }
        } else if let Some(f) = self.flags.get_mut(&key.raw()) {
            *f &= !flag;
            if *f == 0 {
                self.flags.remove(&key.raw());
            }
            if flag == DIRTY {
                self.dirty.remove(&key.raw());
            }
        }
    }

    /// Dirty blocks now.
    pub fn dirty_count(&self) -> u64 {
        self.dirty.len() as u64
    }

    /// The dirty blocks, in key order.
    pub fn dirty_blocks(&self) -> impl Iterator<Item = BlockKey> + '_ {
        self.dirty.iter().map(|&k| BlockKey::from_raw(k))
    }

    /// Hands out up to `max` dirty blocks to write back, in key order from where the previous pass stopped
    /// (wrapping once), as runs of consecutive blocks of at most `max_run` blocks, appended to `out`. Blocks
    /// with a write in flight, and blocks already handed out, are skipped. Returns how many were handed out;
    /// each is then [`CacheLevel::clean_done`] or [`CacheLevel::clean_failed`].
    pub fn clean_plan(&mut self, max: u64, max_run: u64, out: &mut Vec<DeviceRead>) -> u64 {
        let max_run = max_run.max(1);
        let mut n = 0;
        let start = self.clean_cursor;
        let keys = self.dirty.range(start..).chain(self.dirty.range(..start));
        let mut last = None;
        for &k in keys {
            if n >= max {
                break;
            }
            let f = self.flags.get_mut(&k).expect("a dirty block has flags");
            if *f & (PINNED | CLEANING) != 0 || self.inflight.contains_key(&k) {
                continue;
            }
            *f |= CLEANING;
            n += 1;
            last = Some(k);
            match out.last_mut() {
                Some(r) if r.first.raw() + r.n == k && r.n < max_run => r.n += 1,
                _ => out.push(DeviceRead { first: BlockKey::from_raw(k), n: 1, sync: false }),
            }
        }
        if let Some(k) = last {
            self.clean_cursor = k + 1;
        }
        n
    }

    /// The write-back of a block handed out by [`CacheLevel::clean_plan`] completed (and is durable in the next
    /// level): the block is clean, unless a write reached it since (then it stays dirty). True when it became
    /// clean.
    pub fn clean_done(&mut self, key: BlockKey) -> bool {
        match self.flags.get(&key.raw()) {
            Some(f) if f & CLEANING != 0 => {
                self.set_flag(key, CLEANING, false);
                self.set_flag(key, DIRTY, false);
                self.cache.stats_mut().cleaned += 1;
                true
            }
            _ => false,
        }
    }

    /// The write-back of a block handed out by [`CacheLevel::clean_plan`] failed: it stays dirty.
    pub fn clean_failed(&mut self, key: BlockKey) {
        self.set_flag(key, CLEANING, false);
    }

    /// Puts a block back in the level without counting an access (a warm restart from a persistent cache):
    /// it enters the policy as a demand access would, with its dirty bit. Victims go to `plan.victims` (not
    /// cleared).
    pub fn restore(&mut self, key: BlockKey, dirty: bool, plan: &mut StepPlan) {
        self.touch(key, NEVER, plan);
        if dirty {
            self.set_flag(key, DIRTY, true);
        }
    }

    /// Changes what writes do (a mode switch of a running level; switching away from write-back is the
    /// driver's to do only once no block is dirty).
    pub fn set_write_policy(&mut self, write: WritePolicy) {
        self.config.write = write;
    }

    /// A backend read of `bytes` took `ns` (feeds REDCAP's estimate of the time of a read).
    pub fn observe_read(&mut self, bytes: u64, ns: u64) {
        if let Some(r) = self.redcap.as_mut() {
            r.model.observe(bytes, ns);
        }
    }

    /// REDCAP's activation step for a read request served by `plan` that took `measured_ns` of backend time;
    /// `stream_end` bounds its segments. Returns whether REDCAP switched on or off. No-op without REDCAP
    /// timing, and for probes.
    pub fn read_timed(&mut self, req: &Request<'_>, plan: &StepPlan, measured_ns: u64) -> bool {
        let (Some(r), Some(p)) = (self.redcap.as_mut(), self.prefetcher.as_mut()) else { return false };
        if plan.probe || plan.bypass {
            return false;
        }
        let bs = self.config.cache.block_size;
        r.shadow.read(req.first, req.n, req.stream_end, &mut r.plan);
        let was = p.is_active();
        let (with, without) = if was {
            let without = if plan.demand_blocks > 0 { r.model.estimate(plan.demand_blocks * bs) } else { 0 };
            (measured_ns, without)
        } else {
            let with = r.plan.fetches.iter().map(|f| r.model.estimate(f.n * bs)).sum();
            (with, measured_ns)
        };
        p.on_io_time(with, without);
        p.is_active() != was
    }

    /// Checks the policy's invariants and that every block with state (and, inserting on issue, every block in
    /// flight) is resident.
    pub fn validate(&self) -> Result<(), String> {
        self.cache.policy().validate()?;
        let flights = self.inflight.keys().filter(|_| self.config.insert == Insert::OnIssue);
        for &k in flights.chain(self.flags.keys()) {
            if !self.cache.contains(BlockKey::from_raw(k)) {
                return Err(format!("block {:#x} in flight or flagged but not resident", k));
            }
        }
        let flagged = self.flags.values().filter(|&&f| f & DIRTY != 0).count();
        if flagged != self.dirty.len() || self.dirty.iter().any(|k| !self.flags.get(k).is_some_and(|f| f & DIRTY != 0))
        {
            return Err(format!("{} blocks flagged dirty, {} in the dirty set", flagged, self.dirty.len()));
        }
        Ok(())
    }
}

/// The level as a prefetcher sees it.
struct LevelView<'a, P: DynPolicy + ?Sized> {
    inflight: &'a U64Map<Flight>,
    cache: &'a BlockCache<P>,
}

impl<P: DynPolicy + ?Sized> BlockView for LevelView<'_, P> {
    fn state(&self, key: BlockKey) -> BlockState {
        if self.inflight.contains_key(&key.raw()) {
            BlockState::InFlight
        } else if self.cache.contains(key) {
            BlockState::Resident
        } else {
            BlockState::Absent
        }
    }
}

/// REDCAP's activation algorithm driven by measured read times, for drivers without a disk model (the live
/// server): seed `000_*`, "the algorithm is independent of the underlying device, because it only takes into
/// account the I/O time of the issued disk requests". While REDCAP is on, the time without it is estimated
/// with [`IoModel`] for the blocks a plain cache would have read; while it is off, the segment cache runs in
/// the shadow and the time of the segment reads it would have issued is estimated.
struct RedcapTiming {
    shadow: Redcap,
    plan: ReadPlan,
    model: IoModel,
}

/// An online estimate of a read's time, `latency + bytes * per_byte`, from measured reads. Latency is a moving
/// average over reads of at most 8 KiB, the per-byte cost one over reads of 64 KiB or more (after the latency
/// is taken off).
///
/// While REDCAP is on, every read miss reads a whole segment, so small reads (the latency) would never be seen:
/// the first 4 read misses with a segment to fetch, and then one in [`PROBE_EVERY`], read only their own blocks
/// ([`StepPlan::probe`]) and are left out of the activation algorithm's sums.
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

    fn estimate(&self, bytes: u64) -> u64 {
        (self.latency_ns + self.per_byte_ns * bytes as f64).max(0.0) as u64
    }
}
