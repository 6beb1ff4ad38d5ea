//! The time-aware simulator's cache device (`tsim --cache-dev-size`): seed `004_*`'s persistent cache level
//! between the block cache and the origin disk, on its own device model and queue.
//!
//! The level is the engine's [`CacheLevel`] configured as `serve --cache-dev` and `sim --cache-dev-size`
//! configure it ([`crate::cachedev`], whose bookkeeping this driver shares), inserting blocks when their reads
//! complete as every `vtime` level does ([`Insert::OnCompletion`]). What this driver adds is time:
//!
//! - **Reads.** Every read the level above sends down (a block-cache miss or prefetch, clustered; without a
//!   block cache, the request's blocks) is one request to the level. Blocks it holds are read from the cache
//!   device; the others from the origin, in runs of consecutive blocks; a block already being read here comes
//!   with that read. A promoted block enters the level when its origin read completes, and is then written to
//!   the cache device in the background: the reader waits for the origin only (the live tier copies the block
//!   into its slot before it replies).
//! - **Writes.** Write-back writes the blocks the level takes into the cache device (dirty) and the bytes of
//!   the others to the origin; the request waits for both. Write-through and write-around write the request to
//!   the origin first; when that completes the level takes the write (write-through: the blocks it holds or
//!   allocates go to the cache device too, and the request waits for them; write-around drops its copies). A
//!   write to a block whose promotion is still being read overtakes it: the write's data goes to the device,
//!   the promotion is not written, and under write-back the block is dirty once it is in.
//! - **Write-back of evicted blocks.** A dirty block the level evicts is read from the cache device and written
//!   to the origin at once, in runs of consecutive blocks (as the live tier writes them first in every pass).
//!   Until that completes it holds its slot. The live tier keeps a reserve of slots beyond the policy's
//!   capacity (1/64 of it, at least 16): while more evicted blocks than that wait for their write-back, a step
//!   that evicted a dirty block waits for write-backs before its blocks go into the device (foreground
//!   throttling: `throttled_requests`, `throttle_ns`).
//! - **Cleaning.** Every `clean_interval_ns` of virtual time (100 ms, the live tier's), the cleaner's quota
//!   ([`Cleaner::quota`] with the virtual clock and the time since the last request reached the level) is
//!   handed out by [`CacheLevel::clean_plan`] in origin order, in runs of at most `clean_run_blocks`. A pass
//!   is the live tier's cleaner thread, one I/O at a time: it reads its runs from the cache device one after
//!   the other, then writes them to the origin one after the other, where each queues with the demand
//!   requests, and then marks the blocks clean (a block written since it was handed out stays dirty). A block
//!   the level evicts while the pass has it is written back by the pass, not again, and holds its slot until
//!   the pass ends. The next pass starts an interval after this one ends. Blocks with a write to the device in flight are not
//!   handed out (pinned). Passes stop when the last process request completes.
//! - **Devices.** The cache device has its own queue, served in arrival order, and is addressed by the
//!   origin's block numbers (its model wraps them into its capacity). Requests are at most `max_request_bytes`
//!   each; the level's requests are never merged in a queue.
//!
//! The counters are [`DevCounters`], counted as `sim --cache-dev-size` counts them (an origin write there is
//! one request of the level; the origin device's report counts the device requests it became). With
//! instant devices, one process and one-block requests, a run counts what `sim --cache-dev-size` counts
//! (tested).

use super::device::{DevReq, Device};
use super::report::DeviceReport;
use super::{CacheDevConfig, Error, Scheduler};
use crate::cachedev::{
    level_config, read_runs, victim_runs, write_reduction, write_split, DevCounters, DevMode, DirtyReport,
    DirtySampler, ReadRun,
};
use blockwell_core::cache::CacheConfig;
use blockwell_core::cleaner::{Cleaner, CleanerInput, CleanerSpec};
use blockwell_core::cluster::DeviceRead;
use blockwell_core::level::{CacheLevel, Fate, Insert, Request, StepPlan, Victim};
use blockwell_core::policy::{Preset, NEVER};
use blockwell_core::{BlockKey, Op, Stats};
use blockwell_disk::{DiskOp, SECTOR};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet, VecDeque};

/// What the engine is to do for the tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cmd {
    /// Queue this request at the origin device.
    Origin(DevReq),
    /// The job waits for one more request.
    Wait(u32),
    /// One of the job's requests completed.
    Release(u32),
    /// Blocks `first..first+n` (raw keys) were read for the level above.
    Deliver(u64, u64),
    /// A cleaning pass is due at this time.
    Tick(u64),
}

/// A write the level takes once its origin write completed (write-through, write-around).
#[derive(Clone, Copy, Debug)]
struct LevelWrite {
    job: Option<u32>,
    first: BlockKey,
    n: u64,
    offset: u64,
    len: u64,
}

/// One operation of the tier in flight at a device.
#[derive(Clone, Copy, Debug)]
enum TierOp {
    /// Blocks read for the level above, from the cache device (`token` none) or the origin (the level's plan
    /// `token`: its fetched blocks arrive with the read).
    Read { first: u64, n: u64, token: Option<u64> },
    /// Blocks written into the cache device: a request's (`job`) or a promotion.
    DevWrite { first: u64, n: u64, job: Option<u32> },
    /// A piece of a write to the origin; the last piece of a `group` steps the level.
    OriginWrite { job: Option<u32>, group: Option<u32> },
    /// Evicted dirty blocks written back: read from the cache device, then (`on_origin`) written to the origin.
    WriteBack { first: u64, n: u64, on_origin: bool },
    /// The cleaning pass's current I/O.
    Pass,
}

/// A cleaning pass: its runs, read one after the other, then written one after the other.
#[derive(Clone, Debug, Default)]
struct Pass {
    runs: Vec<DeviceRead>,
    next: usize,
    writing: bool,
    /// Its blocks, and how many of them the level evicted meanwhile.
    keys: HashSet<u64>,
    evicted: u64,
}

/// Device writes waiting for slots (foreground throttling).
#[derive(Clone, Debug)]
struct Deferred {
    runs: Vec<(u64, u64)>,
    job: Option<u32>,
    since: u64,
}

/// What the cache device did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheDevReport {
    pub policy: String,
    pub capacity_blocks: u64,
    pub mode: DevMode,
    pub promote: String,
    pub sequential_cutoff: u64,
    pub cleaner: String,
    pub clean_interval_ns: u64,
    /// Slots beyond the policy's capacity for evicted blocks waiting for their write-back.
    pub reserve_blocks: u64,
    /// The level's engine counters.
    pub stats: Stats,
    /// The tier's counters, named as `blockwell status` names them.
    pub counters: DevCounters,
    /// Read blocks found in the device / read blocks; written blocks found in it / written blocks.
    pub read_hit_ratio: Option<f64>,
    pub write_hit_ratio: Option<f64>,
    /// Bytes the level above wrote.
    pub client_write_bytes: u64,
    /// 1 − origin write bytes / client write bytes.
    pub write_reduction: Option<f64>,
    /// Requests (and promotions) whose device writes waited for evicted blocks' write-back, and the time they
    /// waited (requests only).
    pub throttled_requests: u64,
    pub throttled_promotions: u64,
    pub throttle_ns: u64,
    /// Cleaning passes that wrote something.
    pub clean_passes: u64,
    /// Dirty blocks after each process request (max, mean over requests, at the end; a point every
    /// `dirty_every` requests).
    pub dirty: DirtyReport,
    /// The cache device's queue and model.
    pub device: DeviceReport,
}

/// The cache device (see the module docs).
pub(crate) struct CacheDev {
    pub step: CacheLevel,
    pub dev: Device,
    mode: DevMode,
    cleaner: Cleaner,
    clean_run: u64,
    interval: u64,
    bs: u64,
    spb: u64,
    max_blocks: u64,
    reserve: u64,
    /// Evicted dirty blocks whose write-back has not completed (they hold their slots).
    held: u64,
    /// Device writes waiting for slots, in arrival order.
    for_slots: VecDeque<Deferred>,
    ops: Vec<Option<TierOp>>,
    free_ops: Vec<u32>,
    groups: HashMap<u32, (u32, LevelWrite)>,
    next_group: u32,
    /// Writes to the device in flight per block.
    pins: HashMap<u64, u32>,
    /// Blocks written while their promotion was being read.
    overtaken: HashSet<u64>,
    /// The cleaning pass in progress.
    pass: Option<Pass>,
    last_access: u64,
    pub cmds: Vec<Cmd>,
    c: DevCounters,
    client_write_bytes: u64,
    throttled_requests: u64,
    throttled_promotions: u64,
    throttle_ns: u64,
    clean_passes: u64,
    dirty: DirtySampler,
    dirty_every: u64,
    plan: StepPlan,
    arrive_plan: StepPlan,
    label: (String, String, u64, String),
    // Scratch.
    runs: Vec<ReadRun>,
    dev_keys: Vec<BlockKey>,
    in_flight: Vec<BlockKey>,
    origin_runs: Vec<(u64, u64)>,
    clean: Vec<DeviceRead>,
}

/// Runs of consecutive keys (sorted or in request order) of at most `max` blocks.
fn key_runs(keys: &[BlockKey], max: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for k in keys {
        match out.last_mut() {
            Some((f, n)) if *f + *n == k.raw() && *n < max => *n += 1,
            _ => out.push((k.raw(), 1)),
        }
    }
    out
}

impl CacheDev {
    /// A cache device of `blocks` blocks; device requests of at most `max_blocks`.
    pub fn new(
        cfg: &CacheDevConfig,
        block_size: u64,
        preset: Preset,
        blocks: u64,
        max_blocks: u64,
    ) -> Result<CacheDev, Error> {
        let spec = &cfg.spec;
        if spec.policy.kind.needs_next_use() {
            return Err(Error::Config("the cache device cannot run an offline policy (OPT)".into()));
        }
        let cc = CacheConfig::new(block_size, blocks.saturating_mul(block_size))
            .map_err(|source| Error::Cache { level: "cache device", source })?
            .with_associativity(spec.associativity);
        let mut lc = level_config(cc, spec);
        lc.insert = Insert::OnCompletion;
        let policy = cc.build_policy(&spec.policy, preset)?;
        let capacity = cc.capacity_blocks() as u64;
        Ok(CacheDev {
            step: CacheLevel::new(lc, policy, None),
            dev: Device::new(cfg.disk.fresh(), Scheduler::Fifo, 0),
            mode: spec.mode,
            cleaner: spec.cleaner.build(),
            clean_run: spec.clean_run_blocks.max(1),
            interval: cfg.clean_interval_ns.max(1),
            bs: block_size,
            spb: (block_size / SECTOR).max(1),
            max_blocks: max_blocks.max(1),
            reserve: (capacity / 64).max(16),
            held: 0,
            for_slots: VecDeque::new(),
            ops: Vec::new(),
            free_ops: Vec::new(),
            groups: HashMap::new(),
            next_group: 0,
            pins: HashMap::new(),
            overtaken: HashSet::new(),
            pass: None,
            last_access: 0,
            cmds: Vec::new(),
            c: DevCounters::default(),
            client_write_bytes: 0,
            throttled_requests: 0,
            throttled_promotions: 0,
            throttle_ns: 0,
            clean_passes: 0,
            dirty: DirtySampler::default(),
            dirty_every: cfg.dirty_every,
            plan: StepPlan::default(),
            arrive_plan: StepPlan::default(),
            label: (
                spec.policy.label().to_string(),
                spec.promote.to_string(),
                spec.sequential_cutoff,
                spec.cleaner.to_string(),
            ),
            runs: Vec::new(),
            dev_keys: Vec::new(),
            in_flight: Vec::new(),
            origin_runs: Vec::new(),
            clean: Vec::new(),
        })
    }

    /// When the first cleaning pass is due (none without a cleaner).
    pub fn first_tick(&self) -> Option<u64> {
        (*self.cleaner.spec() != CleanerSpec::None && self.mode == DevMode::WriteBack).then_some(self.interval)
    }

    /// Operations at a device or waiting for slots.
    pub fn busy(&self) -> usize {
        self.ops.iter().filter(|o| o.is_some()).count() + self.for_slots.len()
    }

    fn new_op(&mut self, op: TierOp) -> u32 {
        match self.free_ops.pop() {
            Some(id) => {
                self.ops[id as usize] = Some(op);
                id
            }
            None => {
                self.ops.push(Some(op));
                (self.ops.len() - 1) as u32
            }
        }
    }

    fn take_op(&mut self, id: u32) -> Option<TierOp> {
        let op = self.ops.get_mut(id as usize)?.take();
        if op.is_some() {
            self.free_ops.push(id);
        }
        op
    }

    fn req(&self, op: DiskOp, first: u64, n: u64, sync: bool, id: u32) -> DevReq {
        DevReq {
            op,
            first_key: first,
            n,
            sector: BlockKey::from_raw(first).block().saturating_mul(self.spb),
            sectors: n * self.spb,
            sync,
            job: None,
            tag: None,
            tier: Some(id),
            owner: None,
            seq: 0,
            queued_at: 0,
        }
    }

    /// Queues an operation at the cache device.
    fn queue_dev(&mut self, op: DiskOp, first: u64, n: u64, sync: bool, what: TierOp, now: u64) {
        let id = self.new_op(what);
        let r = self.req(op, first, n, sync, id);
        self.dev.submit(r, now);
    }

    /// Queues an operation at the origin (through the engine).
    fn queue_origin(&mut self, op: DiskOp, first: u64, n: u64, sync: bool, what: TierOp) {
        let id = self.new_op(what);
        let r = self.req(op, first, n, sync, id);
        self.cmds.push(Cmd::Origin(r));
    }

    /// Writes `len` bytes from `start` of the volume of `first` to the origin, in pieces of at most
    /// `max_blocks` blocks, for `job`; the last piece of `group` steps the level.
    fn write_origin(&mut self, first: BlockKey, start: u64, len: u64, job: Option<u32>, group: Option<u32>) {
        let (bs, end, base) = (self.bs, start + len, first.raw() - first.block());
        if let Some(g) = group {
            let pieces = (end.div_ceil(bs) - start / bs).div_ceil(self.max_blocks);
            self.groups.entry(g).and_modify(|e| e.0 = pieces as u32);
        }
        let mut s = start;
        while s < end {
            let b = s / bs;
            let e = end.min((b + self.max_blocks) * bs);
            let id = self.new_op(TierOp::OriginWrite { job, group });
            let mut r = self.req(DiskOp::Write, base + b, e.div_ceil(bs) - b, job.is_some(), id);
            r.sector = s / SECTOR;
            r.sectors = (e.div_ceil(SECTOR) - s / SECTOR).max(1);
            self.cmds.push(Cmd::Origin(r));
            if let Some(j) = job {
                self.cmds.push(Cmd::Wait(j));
            }
            s = e;
        }
    }

    /// A read of `n` blocks from `first` by the level above.
    pub fn read(&mut self, first: BlockKey, n: u64, sync: bool, now: u64) {
        self.last_access = now;
        self.c.read_requests += 1;
        let req = Request::blocks(Op::Read, first, n, self.bs);
        self.step.access(&req, &mut self.plan);
        if self.plan.bypass {
            self.c.uncached_reads += 1;
        }
        let victims = std::mem::take(&mut self.plan.victims);
        self.after_step(&victims, None, Vec::new(), now);
        self.plan.victims = victims;
        let mut runs = std::mem::take(&mut self.runs);
        read_runs(&self.step, &self.plan.fates, first, self.bs, &mut self.c, &mut runs);
        let token = self.plan.token;
        for r in &runs {
            let f = r.first.raw();
            if r.from_dev {
                self.queue_dev(DiskOp::Read, f, r.n, sync, TierOp::Read { first: f, n: r.n, token: None }, now);
            } else {
                self.queue_origin(DiskOp::Read, f, r.n, sync, TierOp::Read { first: f, n: r.n, token: Some(token) });
            }
        }
        self.runs = runs;
    }

    /// A write of `n` blocks from `first` (bytes `offset..offset+len`) by the level above, for `job`.
    pub fn write(&mut self, job: Option<u32>, first: BlockKey, n: u64, offset: u64, len: u64, now: u64) {
        self.last_access = now;
        self.c.write_requests += 1;
        self.client_write_bytes += len;
        let w = LevelWrite { job, first, n, offset, len };
        if self.mode == DevMode::WriteBack {
            return self.step_write(w, now);
        }
        // The origin first; the level takes the write when it completes.
        self.c.origin_write(len);
        let g = self.next_group;
        self.next_group = self.next_group.wrapping_add(1);
        self.groups.insert(g, (0, w));
        self.write_origin(first, offset, len, job, Some(g));
    }

    /// The level takes a write.
    fn step_write(&mut self, w: LevelWrite, now: u64) {
        let req = Request { offset: w.offset, len: w.len, ..Request::blocks(Op::Write, w.first, w.n, self.bs) };
        self.step.access(&req, &mut self.plan);
        if self.plan.bypass {
            self.c.uncached_writes += 1;
        }
        let (mut dev, mut in_flight, mut origin) = (
            std::mem::take(&mut self.dev_keys),
            std::mem::take(&mut self.in_flight),
            std::mem::take(&mut self.origin_runs),
        );
        write_split(
            &mut self.step,
            &self.plan.fates,
            w.first,
            w.offset,
            w.len,
            self.bs,
            self.mode,
            &mut self.c,
            &mut dev,
            &mut in_flight,
            &mut origin,
        );
        self.overtaken.extend(in_flight.iter().map(|k| k.raw()));
        for (i, f) in self.plan.fates.iter().enumerate() {
            if *f == Fate::Dropped {
                // A bypassed write dropped the block (and any read of it in flight).
                self.overtaken.remove(&(w.first.raw() + i as u64));
            }
        }
        for &(s, e) in &origin {
            self.write_origin(w.first, s, e - s, w.job, None);
        }
        let runs = key_runs(&dev, self.max_blocks);
        let victims = std::mem::take(&mut self.plan.victims);
        self.after_step(&victims, w.job, runs, now);
        self.plan.victims = victims;
        (self.dev_keys, self.in_flight, self.origin_runs) = (dev, in_flight, origin);
    }

    /// After a step of the level: its victims (dirty ones written back), then its device writes `runs` (for
    /// `job`, or promotions), which wait for slots when evicted blocks hold too many.
    fn after_step(&mut self, victims: &[Victim], job: Option<u32>, runs: Vec<(u64, u64)>, now: u64) {
        let mut wb = std::mem::take(&mut self.runs);
        wb.clear();
        match self.pass.as_mut() {
            // Dirty victims the cleaning pass has are its to write back.
            Some(p) if victims.iter().any(|v| v.dirty && p.keys.contains(&v.key.raw())) => {
                let (mine, rest): (Vec<Victim>, Vec<Victim>) =
                    victims.iter().partition(|v| v.dirty && p.keys.contains(&v.key.raw()));
                p.evicted += mine.len() as u64;
                self.held += mine.len() as u64;
                victim_runs(&rest, self.clean_run, self.bs, &mut self.c, &mut wb);
            }
            _ => victim_runs(victims, self.clean_run, self.bs, &mut self.c, &mut wb),
        }
        let evicted_dirty = !wb.is_empty();
        for r in &wb {
            self.held += r.n;
            let f = r.first.raw();
            self.queue_dev(DiskOp::Read, f, r.n, false, TierOp::WriteBack { first: f, n: r.n, on_origin: false }, now);
        }
        self.runs = wb;
        if runs.is_empty() {
            return;
        }
        for &(f, n) in &runs {
            for k in f..f + n {
                *self.pins.entry(k).or_insert(0) += 1;
                self.step.set_pinned(BlockKey::from_raw(k), true);
            }
            if let Some(j) = job {
                self.cmds.push(Cmd::Wait(j));
            }
        }
        if evicted_dirty && self.held > self.reserve {
            match job {
                Some(_) => self.throttled_requests += 1,
                None => self.throttled_promotions += 1,
            }
            self.for_slots.push_back(Deferred { runs, job, since: now });
        } else {
            self.write_dev(&runs, job, now);
        }
    }

    fn write_dev(&mut self, runs: &[(u64, u64)], job: Option<u32>, now: u64) {
        for &(f, n) in runs {
            self.queue_dev(DiskOp::Write, f, n, job.is_some(), TierOp::DevWrite { first: f, n, job }, now);
        }
    }

    /// Evicted blocks' write-back completed: writes waiting for slots go.
    fn release_slots(&mut self, n: u64, now: u64) {
        self.held -= n.min(self.held);
        while self.held <= self.reserve {
            let Some(d) = self.for_slots.pop_front() else { break };
            if d.job.is_some() {
                self.throttle_ns += now - d.since;
            }
            self.write_dev(&d.runs, d.job, now);
        }
    }

    /// The cache device finished its request in service.
    pub fn dev_done(&mut self, now: u64) {
        let Some((r, _)) = self.dev.finish() else { return };
        let Some(op) = r.tier.and_then(|id| self.take_op(id)) else { return };
        match op {
            TierOp::Read { first, n, .. } => self.cmds.push(Cmd::Deliver(first, n)),
            TierOp::DevWrite { first, n, job } => {
                for k in first..first + n {
                    if let Some(p) = self.pins.get_mut(&k) {
                        *p -= 1;
                        if *p == 0 {
                            self.pins.remove(&k);
                            self.step.set_pinned(BlockKey::from_raw(k), false);
                        }
                    }
                }
                if let Some(j) = job {
                    self.cmds.push(Cmd::Release(j));
                }
            }
            TierOp::WriteBack { first, n, on_origin: false } => {
                self.queue_origin(DiskOp::Write, first, n, false, TierOp::WriteBack { first, n, on_origin: true });
            }
            TierOp::Pass => self.pass_step(now),
            TierOp::WriteBack { .. } | TierOp::OriginWrite { .. } => {}
        }
    }

    /// The origin completed the tier's operation `id`.
    pub fn origin_done(&mut self, id: u32, now: u64) {
        let Some(op) = self.take_op(id) else { return };
        match op {
            TierOp::Read { first, n, token: Some(token) } => {
                self.arrive_plan.victims.clear();
                let mut promoted: Vec<BlockKey> = Vec::new();
                for k in first..first + n {
                    let key = BlockKey::from_raw(k);
                    if !self.step.awaits(key, token) {
                        continue;
                    }
                    self.step.arrive(key, NEVER, &mut self.arrive_plan);
                    let overtaken = self.overtaken.remove(&k);
                    if !self.step.has_data(key) {
                        continue;
                    }
                    if overtaken {
                        if self.mode == DevMode::WriteBack {
                            self.step.set_dirty(key, true);
                        }
                    } else {
                        self.c.promotions += 1;
                        self.c.dev_write_blocks += 1;
                        promoted.push(key);
                    }
                }
                self.step.insert_arrived(&mut self.arrive_plan);
                let victims = std::mem::take(&mut self.arrive_plan.victims);
                let runs = key_runs(&promoted, self.max_blocks);
                self.after_step(&victims, None, runs, now);
                self.arrive_plan.victims = victims;
                self.cmds.push(Cmd::Deliver(first, n));
            }
            TierOp::Read { first, n, token: None } => self.cmds.push(Cmd::Deliver(first, n)),
            TierOp::OriginWrite { job, group } => {
                if let Some(g) = group {
                    let last = match self.groups.get_mut(&g) {
                        Some(e) => {
                            e.0 -= 1;
                            e.0 == 0
                        }
                        None => false,
                    };
                    if last {
                        if let Some((_, w)) = self.groups.remove(&g) {
                            self.step_write(w, now);
                        }
                    }
                }
                if let Some(j) = job {
                    self.cmds.push(Cmd::Release(j));
                }
            }
            TierOp::WriteBack { n, .. } => self.release_slots(n, now),
            TierOp::Pass => self.pass_step(now),
            TierOp::DevWrite { .. } => {}
        }
    }

    /// A cleaning pass at `now`.
    pub fn tick(&mut self, now: u64) {
        if self.pass.is_some() {
            return;
        }
        let dirty = self.step.dirty_count();
        let quota = self.cleaner.quota(CleanerInput {
            now_ns: now,
            dirty,
            capacity: self.step.policy().capacity() as u64,
            block_size: self.bs,
            idle_ns: now.saturating_sub(self.last_access),
        });
        self.clean.clear();
        if quota > 0 && dirty > 0 {
            self.step.clean_plan(quota.min(dirty), self.clean_run, &mut self.clean);
        }
        if self.clean.is_empty() {
            self.cleaner.written(0);
            self.cmds.push(Cmd::Tick(now + self.interval));
            return;
        }
        self.clean_passes += 1;
        for r in &self.clean {
            self.c.clean_writes += 1;
            self.c.origin_write(r.n * self.bs);
            self.c.dev_read_blocks += r.n;
        }
        let keys = self.clean.iter().flat_map(|r| (0..r.n).map(move |k| r.first.raw() + k)).collect();
        self.pass = Some(Pass { runs: std::mem::take(&mut self.clean), keys, ..Pass::default() });
        self.pass_step(now);
    }

    /// The pass's next I/O, or its end: the blocks written back are clean, and the next pass is due an
    /// interval later.
    fn pass_step(&mut self, now: u64) {
        let Some(p) = self.pass.as_mut() else { return };
        if !p.writing && p.next == p.runs.len() {
            p.writing = true;
            p.next = 0;
        }
        if let Some(r) = p.runs.get(p.next).copied() {
            p.next += 1;
            let (f, n) = (r.first.raw(), r.n);
            if p.writing {
                self.queue_origin(DiskOp::Write, f, n, false, TierOp::Pass);
            } else {
                self.queue_dev(DiskOp::Read, f, n, false, TierOp::Pass, now);
            }
            return;
        }
        let Some(p) = self.pass.take() else { return };
        let mut done = p.evicted;
        for r in &p.runs {
            done += (0..r.n).filter(|&k| self.step.clean_done(BlockKey::from_raw(r.first.raw() + k))).count() as u64;
        }
        self.c.cleaned_blocks += done;
        self.cleaner.written(done);
        self.cmds.push(Cmd::Tick(now + self.interval));
        self.clean = p.runs;
        self.release_slots(p.evicted, now);
    }

    /// Samples the dirty blocks after process request `index` completed.
    pub fn sample(&mut self, index: u64, now: u64) {
        self.dirty.sample(index, now, self.step.dirty_count(), self.dirty_every);
    }

    pub fn report(self, app_time: u64) -> CacheDevReport {
        let mut dev = self.dev;
        let st = *self.step.stats();
        let c = self.c.with_engine(&st);
        let r = blockwell_core::stats::ratio;
        CacheDevReport {
            policy: self.label.0,
            capacity_blocks: self.step.policy().capacity() as u64,
            mode: self.mode,
            promote: self.label.1,
            sequential_cutoff: self.label.2,
            cleaner: self.label.3,
            clean_interval_ns: self.interval,
            reserve_blocks: self.reserve,
            stats: st,
            read_hit_ratio: r(c.read_hits, c.read_hits + c.read_misses),
            write_hit_ratio: r(c.write_hits, c.write_hits + c.write_misses),
            write_reduction: write_reduction(self.client_write_bytes, c.origin_write_bytes),
            counters: c,
            client_write_bytes: self.client_write_bytes,
            throttled_requests: self.throttled_requests,
            throttled_promotions: self.throttled_promotions,
            throttle_ns: self.throttle_ns,
            clean_passes: self.clean_passes,
            dirty: self.dirty.finish(self.step.dirty_count()),
            device: dev.finish_report(app_time),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{run_block_requests, run_block_trace, BlockRequest, CacheDevConfig, Config, Report};
    use crate::cachedev::{DevMode, DevSpec};
    use crate::replay::{CacheSize, ReplayConfig, VecReader};
    use crate::tier::{replay_tier, RamSpec, TierReplayConfig};
    use blockwell_core::Op;
    use blockwell_disk::{DiskModel, DiskSpec};
    use blockwell_trace::{Request, TraceReader};
    use proptest::prelude::*;

    const BS: u64 = 4096;
    const MS: u64 = 1_000_000;

    fn disk(spec: &str) -> Box<dyn DiskModel> {
        DiskSpec::parse(spec).unwrap().build().unwrap()
    }

    /// A model taking `ns` per 4 KiB block.
    fn mem(ns: u64) -> Box<dyn DiskModel> {
        disk(&format!("memory(dram_ns={ns},capacity_gb=64)"))
    }

    fn spec(mode: DevMode, blocks: u64, cleaner: &str) -> DevSpec {
        DevSpec::lru(mode, blocks, cleaner.parse().unwrap())
    }

    fn config(spec: DevSpec, dev: Box<dyn DiskModel>) -> Config {
        Config {
            cache_dev: Some(CacheDevConfig { dirty_every: 1, ..CacheDevConfig::new(spec, dev) }),
            ..Config::default()
        }
    }

    fn req(op: Op, block: u64, think_ns: u64) -> BlockRequest {
        BlockRequest { volume: 0, op, offset: block * BS, len: BS, think_ns, at_ns: 0 }
    }

    fn run(procs: &[Vec<BlockRequest>], cfg: &Config, origin: &dyn DiskModel) -> Report {
        run_block_requests(procs, cfg, origin).unwrap()
    }

    /// A deterministic pseudo-random stream.
    fn lcg(x: &mut u64) -> u64 {
        *x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *x >> 20
    }

    #[test]
    fn each_path_takes_the_time_of_the_devices_it_uses() {
        // Origin 10 ms a block, cache device 1 ms a block, one process, no think time.
        let (w, r) = (Op::Write, Op::Read);
        let go =
            |mode, reqs: Vec<BlockRequest>| run(&[reqs], &config(spec(mode, 100, "none"), mem(MS)), &*mem(10 * MS));
        // Write-back: a write and a hit take the cache device's time; a miss the origin's, and its promotion is
        // written to the cache device after it, where the next hit queues behind it.
        let rep = go(DevMode::WriteBack, vec![req(w, 0, 0), req(r, 0, 0), req(r, 5, 0), req(r, 5, 0)]);
        let t = rep.cache_dev.as_ref().unwrap();
        assert_eq!(rep.app_time_ns, (1 + 1 + 10 + 2) * MS);
        assert_eq!((t.device.busy_ns, rep.device.busy_ns), (4 * MS, 10 * MS));
        assert_eq!((t.counters.read_hits, t.counters.promotions, t.dirty.final_blocks), (2, 1, 1));
        // Write-through: the origin, then the device; write-around: the origin, and the next read misses.
        let rep = go(DevMode::WriteThrough, vec![req(w, 0, 0), req(r, 0, 0)]);
        assert_eq!(rep.app_time_ns, (10 + 1 + 1) * MS);
        let rep = go(DevMode::WriteAround, vec![req(w, 0, 0), req(r, 0, 0)]);
        assert_eq!(rep.app_time_ns, (10 + 10) * MS);
        assert_eq!(rep.cache_dev.as_ref().unwrap().counters.read_misses, 1);
    }

    /// `sim --cache-dev-size`'s counters for `reqs` (no RAM level).
    fn sim(reqs: &[Request], spec: &DevSpec) -> crate::tier::TierResult {
        let open = || Ok(Box::new(VecReader::new(reqs.to_vec())) as Box<dyn TraceReader>);
        let rams = [RamSpec { policy: "lru".parse().unwrap(), size: CacheSize::Blocks(0) }];
        let cfg = TierReplayConfig {
            replay: ReplayConfig { threads: 1, ..ReplayConfig::default() },
            dev: spec.clone(),
            request_interval_ns: None,
            dirty_every: 1,
        };
        replay_tier(&open, &rams, &cfg).unwrap().results.remove(0)
    }

    /// The same with zero-time devices in the time-aware simulator.
    fn tsim(reqs: &[Request], spec: &DevSpec) -> super::CacheDevReport {
        let cfg = config(spec.clone(), mem(0));
        run_block_trace(&mut VecReader::new(reqs.to_vec()), &cfg, &*mem(0)).unwrap().cache_dev.unwrap()
    }

    fn one_block_stream(seed: u64, n: u64, blocks: u64, write_share: u64) -> Vec<Request> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                let op = if lcg(&mut x) % 100 < write_share { Op::Write } else { Op::Read };
                let block = lcg(&mut x) % blocks;
                Request { time_ns: i * 1000, volume: 0, op, offset: block * BS, len: BS, digest: None }
            })
            .collect()
    }

    #[test]
    fn with_instant_devices_it_counts_what_the_one_pass_replay_counts() {
        let reqs = one_block_stream(7, 6000, 1500, 35);
        for mode in [DevMode::WriteBack, DevMode::WriteThrough, DevMode::WriteAround] {
            for (policy, promote, cutoff) in [("lru", "always", 0), ("arc", "n-hit:2", 0), ("s3fifo", "always", 16384)]
            {
                let spec = DevSpec {
                    policy: policy.parse().unwrap(),
                    promote: promote.parse().unwrap(),
                    sequential_cutoff: cutoff,
                    ..spec(mode, 300, "none")
                };
                let (s, t) = (sim(&reqs, &spec), tsim(&reqs, &spec));
                let what = format!("{mode:?} {policy} {promote} {cutoff}");
                assert_eq!(s.tier, t.counters, "{what}");
                assert_eq!(s.dev, t.stats, "{what}");
                assert_eq!(s.client_write_bytes, t.client_write_bytes, "{what}");
                let d = |r: &crate::cachedev::DirtyReport| (r.max_blocks, r.mean_blocks, r.final_blocks);
                assert_eq!(d(&s.dirty), d(&t.dirty), "{what}");
                assert!(s.tier.read_hits > 500, "{what}: {:?}", s.tier);
                if mode != DevMode::WriteAround {
                    assert!(s.tier.write_hits > 300, "{what}: {:?}", s.tier);
                }
                if mode == DevMode::WriteBack {
                    assert!(s.tier.dirty_evictions > 100, "{what}: {:?}", s.tier);
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn instant_devices_count_as_the_one_pass_replay_for_any_one_block_stream(
            seed in any::<u64>(),
            blocks in 20u64..400,
            cap in 4u64..120,
            writes in 0u64..100,
            mode in prop_oneof![Just(DevMode::WriteBack), Just(DevMode::WriteThrough), Just(DevMode::WriteAround)],
        ) {
            let reqs = one_block_stream(seed, 800, blocks, writes);
            let spec = spec(mode, cap, "none");
            let (s, t) = (sim(&reqs, &spec), tsim(&reqs, &spec));
            prop_assert_eq!(s.tier, t.counters);
            prop_assert_eq!(s.dirty.final_blocks, t.dirty.final_blocks);
        }
    }

    fn random_writes(n: u64, blocks: u64, seed: u64) -> Vec<BlockRequest> {
        let mut x = seed;
        (0..n).map(|_| req(Op::Write, lcg(&mut x) % blocks, 0)).collect()
    }

    #[test]
    fn write_back_on_an_ssd_makes_random_writes_faster_than_write_through_over_an_hdd() {
        // 2000 random 4 KiB writes over 1 GiB of a WD1200BB, a 256 MiB cache device on a SATA SSD.
        let reqs = [random_writes(2000, 1 << 18, 3)];
        let hdd = disk("wd1200bb");
        let go = |mode| run(&reqs, &config(spec(mode, 1 << 16, "pi"), disk("sata-ssd")), &*hdd);
        let (wb, wt) = (go(DevMode::WriteBack), go(DevMode::WriteThrough));
        let none = run(&reqs, &Config::default(), &*hdd);
        assert!(wb.app_time_ns * 20 < wt.app_time_ns, "write-back {} write-through {}", wb.app_time_ns, wt.app_time_ns);
        // Write-through pays the origin's time, as without the cache device.
        let ratio = wt.app_time_ns as f64 / none.app_time_ns as f64;
        assert!((0.95..1.10).contains(&ratio), "write-through / none = {ratio}");
        let t = wb.cache_dev.as_ref().unwrap();
        assert_eq!((t.counters.origin_writes, t.write_reduction), (0, Some(1.0)));
        assert!(t.dirty.max_blocks > 1900, "{:?}", t.dirty);
        assert_eq!(wt.cache_dev.as_ref().unwrap().dirty.max_blocks, 0);
    }

    #[test]
    fn a_full_cache_of_dirty_blocks_paces_the_writer_by_the_origin() {
        // 64 blocks of cache (and the reserve of 16), no cleaner, random writes: every eviction is a write-back
        // and the writer waits for them.
        let reqs = [random_writes(3000, 1 << 18, 5)];
        let hdd = disk("wd1200bb");
        let rep = run(&reqs, &config(spec(DevMode::WriteBack, 64, "none"), disk("sata-ssd")), &*hdd);
        let t = rep.cache_dev.as_ref().unwrap();
        assert_eq!(t.counters.cleaned_blocks, t.counters.dirty_evictions, "every dirty victim written back");
        assert!(t.counters.dirty_evictions > 2900, "{:?}", t.counters);
        assert!(t.throttled_requests > 2800 && t.throttle_ns > 0, "{t:?}");
        assert!(t.dirty.max_blocks == 64, "{:?}", t.dirty);
        // The writer goes at the origin's pace, not the SSD's.
        assert!(
            rep.app_time_ns * 10 > rep.device.busy_ns * 9,
            "app {} origin busy {}",
            rep.app_time_ns,
            rep.device.busy_ns
        );
    }

    #[test]
    fn the_cleaners_origin_writes_slow_the_readers_down() {
        // A writer dirtying random blocks every 5 ms and a reader of random blocks the cache device does not
        // hold. Without a cleaner the origin serves the reads alone; with a cleaner
        // that writes everything back every pass, the reads queue behind its writes.
        let mut x = 11u64;
        let writer: Vec<BlockRequest> = (0..1000).map(|_| req(Op::Write, lcg(&mut x) % (1 << 18), 5 * MS)).collect();
        let reader: Vec<BlockRequest> =
            (0..1000).map(|_| req(Op::Read, (1 << 18) + lcg(&mut x) % (1 << 18), 0)).collect();
        let procs = [writer, reader];
        let hdd = disk("wd1200bb");
        let go = |cleaner| run(&procs, &config(spec(DevMode::WriteBack, 1 << 16, cleaner), disk("sata-ssd")), &*hdd);
        let (lazy, eager) = (go("none"), go("watermark(high=0,low=0)"));
        let (l, e) = (lazy.cache_dev.as_ref().unwrap(), eager.cache_dev.as_ref().unwrap());
        assert_eq!(l.counters.origin_writes, 0);
        assert!(e.counters.cleaned_blocks > 900 && e.clean_passes > 1, "{:?}", e.counters);
        assert!(e.dirty.final_blocks * 10 < l.dirty.final_blocks, "{:?} vs {:?}", e.dirty, l.dirty);
        // The reader finishes last either way (the writer's think times add up to 5 s); the cleaner's writes
        // make it slower.
        assert!(lazy.app_time_ns > 6000 * MS, "{}", lazy.app_time_ns);
        assert!(
            eager.app_time_ns as f64 > lazy.app_time_ns as f64 * 1.5,
            "eager {} lazy {}",
            eager.app_time_ns,
            lazy.app_time_ns
        );
    }

    #[test]
    fn idle_time_lets_the_cleaner_write_everything_back() {
        // 200 writes, then a minute of silence, then one read: bcache's idle write-back (after 30 s) cleans all.
        let mut reqs: Vec<BlockRequest> = (0..200).map(|b| req(Op::Write, b * 3, 0)).collect();
        reqs.push(req(Op::Read, 1 << 20, 60_000 * MS));
        let rep = run(&[reqs], &config(spec(DevMode::WriteBack, 1000, "pi"), disk("sata-ssd")), &*disk("wd1200bb"));
        let t = rep.cache_dev.as_ref().unwrap();
        assert_eq!((t.dirty.max_blocks, t.dirty.final_blocks, t.counters.cleaned_blocks), (200, 0, 200), "{t:?}");
        assert_eq!(t.dirty.series.len(), 201);
        assert!(t.clean_passes >= 1);
    }

    #[test]
    fn the_same_input_gives_the_same_report_time_included() {
        let mut x = 5u64;
        let procs: Vec<Vec<BlockRequest>> = (0..3)
            .map(|_| {
                (0..800)
                    .map(|_| {
                        let op = if lcg(&mut x) % 3 == 0 { Op::Write } else { Op::Read };
                        BlockRequest { len: BS * (1 + lcg(&mut x) % 4), ..req(op, lcg(&mut x) % 20_000, MS) }
                    })
                    .collect()
            })
            .collect();
        for cleaner in ["pi(update_ms=100,percent=1)", "watermark(high=5,low=1)"] {
            let cfg = config(spec(DevMode::WriteBack, 2000, cleaner), disk("sata-ssd"));
            let cfg = Config { scheduler: super::super::Scheduler::CFQ, ..cfg };
            let json = || serde_json::to_string(&run(&procs, &cfg, &*disk("wd1200bb"))).unwrap();
            let a = json();
            assert_eq!(a, json(), "{cleaner}");
            let rep: Report = serde_json::from_str(&a).unwrap();
            let t = rep.cache_dev.unwrap();
            assert!(t.clean_passes > 0 && t.counters.cleaned_blocks > 0 && t.counters.dirty_evictions > 0, "{t:?}");
        }
    }

    #[test]
    fn nonsense_is_a_typed_error() {
        let reqs = [vec![req(Op::Read, 0, 0)]];
        let bad = |cfg: Config| run_block_requests(&reqs, &cfg, &*mem(0)).unwrap_err().to_string();
        let opt = DevSpec { policy: "opt".parse().unwrap(), ..spec(DevMode::WriteBack, 10, "none") };
        assert!(bad(config(opt, mem(0))).contains("OPT"));
        let redcap = super::super::RedcapSetup::preset("64x128k", BS).unwrap();
        let e = bad(Config { redcap: Some(redcap), ..config(spec(DevMode::WriteBack, 10, "none"), mem(0)) });
        assert!(e.contains("REDCAP"), "{e}");
        let e = bad(config(spec(DevMode::WriteBack, 0, "none"), mem(0)));
        assert!(e.contains("cache device"), "{e}");
    }
}
