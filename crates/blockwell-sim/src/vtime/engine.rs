//! The discrete-event engine.

use super::device::{DevReq, Device, Started};
use super::level::{Level, LevelRead, Merge, MergeFlight, Oracle, Waiter};
use super::redcap::{Owner, RedcapLevel, ShadowWake};
use super::report::{LevelReport, Report};
use super::tier::{CacheDev, Cmd};
use super::{BlockRequest, Config, Error, IssueMode, LevelConfig};
use crate::layout::FileMap;
use crate::replay::CacheSize;
use crate::workload::Workload;
use blockwell_core::cache::CacheConfig;
use blockwell_core::cluster::{Clusterer, DeviceRead};
use blockwell_core::key::{block_span, MAX_BLOCK, MAX_VOLUME};
use blockwell_core::level::WritePolicy;
use blockwell_core::prefetch::Fetch;
use blockwell_core::{BlockKey, Op};
use blockwell_disk::{DiskModel, DiskOp, SECTOR};
use blockwell_trace::TraceReader;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};

/// Largest request, in blocks (64 GiB at 4 KiB): the simulator walks requests block by block.
const MAX_REQUEST_BLOCKS: u64 = 1 << 24;

fn check_blocks(n: u64) -> Result<(), String> {
    if n > MAX_REQUEST_BLOCKS {
        return Err(format!("{n} blocks is more than the simulator's limit of {MAX_REQUEST_BLOCKS} per request"));
    }
    Ok(())
}

/// One process request, resolved to blocks (file pages, or volume blocks for block-level input).
#[derive(Clone, Copy, Debug)]
struct Req {
    /// File (file workloads) or volume (block input).
    target: u32,
    op: Op,
    first: u64,
    /// Blocks (0: the request touches nothing and completes at once).
    n: u64,
    /// Block input: the bytes (for the cache device's partial blocks); file input: the pages'.
    offset: u64,
    len: u64,
    think_ns: u64,
    at_ns: Option<u64>,
}

struct Proc {
    reqs: Vec<Req>,
    next: usize,
    outstanding: u32,
    /// Draws the per-request think-time jitter ([`Config::think_jitter_ns`]), one stream per process.
    jitter: crate::gen::Rng,
    /// Closed loop: total time with no request outstanding (start delay and think times), and when the last
    /// request completed.
    idle_ns: u64,
    done_at: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Job {
    proc: u32,
    pending: u32,
    issued_at: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Issue(u32),
    DeviceDone,
    /// The device's scheduler asked to be called back (CFQ's idle timer).
    DeviceTimer,
    /// A REDCAP shadow device (0: without the cache, 1: with it) completed a request.
    ShadowDone(u8),
    /// A process's next batch of REDCAP shadow requests (shadow, process) may be released.
    ShadowRelease(u8, u32),
    /// A REDCAP shadow device's scheduler asked to be called back.
    ShadowTimer(u8),
    /// The cache device completed a request.
    CacheDevDone,
    /// The cache device's scheduler asked to be called back.
    CacheDevTimer,
    /// The cache device's cleaner runs.
    CleanTick,
}

/// What the input is.
enum Input {
    Files { map: FileMap, pages: Vec<u64> },
    Blocks,
}

/// Start delays of `n` processes, uniform in `0..=jitter_ns`, from `seed` (all zero without jitter).
fn start_delays(n: usize, jitter_ns: u64, seed: u64) -> Vec<u64> {
    if jitter_ns == 0 {
        return vec![0; n];
    }
    let mut rng = crate::gen::Rng::new(seed ^ 0x0053_5441_5254);
    (0..n).map(|_| rng.next_u64() % (jitter_ns + 1)).collect()
}

struct Sim {
    now: u64,
    seq: u64,
    events: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    n_events: u64,
    open_loop: bool,
    think: Option<u64>,
    /// Largest random addition to a closed-loop think time ([`Config::think_jitter_ns`]).
    think_jitter: u64,
    /// Start delay of each process.
    starts: Vec<u64>,
    /// When each processor is next free ([`Config::cpus`]); empty: think times never wait for one.
    cpus: Vec<u64>,
    spb: u64,
    max_blocks: u64,
    procs: Vec<Proc>,
    jobs: Vec<Job>,
    free_jobs: Vec<u32>,
    input: Input,
    page: Option<Level>,
    /// The block cache, if any.
    block: Option<Level>,
    /// The block layer's read merging (no block cache, or REDCAP).
    merge: Merge,
    redcap: Option<RedcapLevel>,
    /// The cache device between the block level and `dev` (its origin), if any.
    cdev: Option<CacheDev>,
    clusterer: Clusterer,
    dev: Device,
    /// Process requests in all, and completed.
    total: u64,
    completed: u64,
    response_sum: u128,
    app_end: u64,
    /// Completion time of the last real device request (shadow devices may run later).
    last_device: u64,
    /// The process request being issued, for REDCAP's closed-loop shadows.
    owner: Option<Owner>,
    // scratch
    runs: Vec<(u64, u64)>,
}

fn build_level(lc: &LevelConfig, cfg: &Config, name: &'static str, writes: WritePolicy) -> Result<Level, Error> {
    let cc = CacheConfig::new(cfg.block_size, lc.capacity_bytes)
        .map_err(|source| Error::Cache { level: name, source })?
        .with_associativity(lc.associativity);
    let policy = cc.build_policy(&lc.policy, cfg.preset)?;
    Ok(Level::new(cc, policy, lc.prefetch.build(cfg.block_size)?, writes))
}

fn check_config(cfg: &Config) -> Result<(), Error> {
    CacheConfig::new(cfg.block_size, cfg.block_size).map_err(|source| Error::Cache { level: "config", source })?;
    if cfg.redcap.is_some() && cfg.block_cache.is_some() {
        return Err(Error::Config("REDCAP and a block cache are alternatives at the same level; choose one".into()));
    }
    if cfg.redcap.is_some() && cfg.cache_dev.is_some() {
        return Err(Error::Config("REDCAP over a cache device is not modelled; choose one".into()));
    }
    if cfg.max_request_bytes < cfg.block_size {
        return Err(Error::Config(format!(
            "max_request_bytes {} is smaller than one {} B block",
            cfg.max_request_bytes, cfg.block_size
        )));
    }
    Ok(())
}

/// Both levels' recorded demand sequences (first pass for OPT).
type Recorded = (Option<Vec<u64>>, Option<Vec<u64>>);

impl Sim {
    fn new(
        input: Input,
        reqs: Vec<Vec<Req>>,
        cfg: &Config,
        disk: &dyn DiskModel,
        oracles: Option<(Oracle, Oracle)>,
        record: bool,
    ) -> Result<Sim, Error> {
        let page = match (&input, &cfg.page_cache) {
            (Input::Files { .. }, Some(lc)) => Some(build_level(lc, cfg, "page cache", WritePolicy::Allocate)?),
            _ => None,
        };
        // The block level caches reads only (writes go to the device, counted).
        let block = match &cfg.block_cache {
            Some(lc) => Some(build_level(lc, cfg, "block cache", WritePolicy::Ignore)?),
            None => None,
        };
        let spb = cfg.block_size / SECTOR;
        let redcap = match cfg.redcap {
            Some(setup) => {
                let closed = cfg.issue == IssueMode::ClosedLoop;
                Some(RedcapLevel::new(setup, disk, cfg.scheduler, disk.capacity_sectors() / spb, reqs.len(), closed)?)
            }
            None => None,
        };
        let max_blocks = cfg.max_request_bytes / cfg.block_size;
        let cdev = match &cfg.cache_dev {
            Some(cd) => {
                let blocks = match cd.spec.size {
                    CacheSize::Blocks(b) => b,
                    size => size.blocks(footprint(&input, &reqs)),
                };
                Some(CacheDev::new(cd, cfg.block_size, cfg.preset, blocks, max_blocks)?)
            }
            None => None,
        };
        let total = reqs.iter().map(|r| r.len() as u64).sum();
        let mut sim = Sim {
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            n_events: 0,
            open_loop: cfg.issue == IssueMode::OpenLoop,
            think: cfg.think_ns,
            starts: start_delays(reqs.len(), cfg.start_jitter_ns, cfg.start_seed),
            cpus: vec![0; cfg.cpus as usize],
            spb,
            max_blocks,
            procs: reqs
                .into_iter()
                .enumerate()
                .map(|(i, reqs)| Proc {
                    reqs,
                    next: 0,
                    outstanding: 0,
                    jitter: crate::gen::Rng::new(
                        cfg.start_seed ^ 0x7468_696e_6b00 ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                    ),
                    idle_ns: 0,
                    done_at: 0,
                })
                .collect(),
            think_jitter: cfg.think_jitter_ns,
            jobs: Vec::new(),
            free_jobs: Vec::new(),
            input,
            page,
            block,
            merge: Merge::default(),
            redcap,
            cdev,
            clusterer: Clusterer::new(max_blocks).map_err(|e| Error::Config(e.to_string()))?,
            dev: Device::new(disk.boxed_clone(), cfg.scheduler, if cfg.merge_queued { max_blocks } else { 0 }),
            total,
            completed: 0,
            response_sum: 0,
            app_end: 0,
            last_device: 0,
            owner: None,
            runs: Vec::new(),
        };
        if let Some((po, bo)) = oracles {
            if let Some(p) = &mut sim.page {
                p.oracle = Some(po);
            }
            if let Some(b) = &mut sim.block {
                b.oracle = Some(bo);
            }
        }
        if record {
            if let Some(p) = &mut sim.page {
                p.record = Some(Vec::new());
            }
            if let Some(b) = &mut sim.block {
                b.record = Some(Vec::new());
            }
        }
        Ok(sim)
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.events.push(Reverse((at, self.seq, ev)));
        self.seq += 1;
    }

    fn think_of(&self, r: &Req) -> u64 {
        self.think.unwrap_or(r.think_ns)
    }

    /// Process `p`'s think time before request `r` (closed loop): [`Sim::think_of`] plus its jitter.
    fn think_before(&mut self, p: usize, r: &Req) -> u64 {
        let base = self.think_of(r);
        if self.think_jitter == 0 {
            return base;
        }
        base + self.procs[p].jitter.next_u64() % (self.think_jitter + 1)
    }

    /// When a process ready at `ready` has run a think time of `burst` (closed loop): at once, or after waiting
    /// for the processor free first ([`Config::cpus`]; first come, first served).
    fn think_done(&mut self, ready: u64, burst: u64) -> u64 {
        if burst == 0 {
            return ready;
        }
        let Some(cpu) = self.cpus.iter_mut().min() else { return ready + burst };
        *cpu = ready.max(*cpu) + burst;
        *cpu
    }

    fn run(&mut self) {
        // Processes take the processors in the order they start.
        let mut order: Vec<usize> = (0..self.procs.len()).collect();
        if !self.cpus.is_empty() {
            order.sort_by_key(|&p| (self.starts[p], p));
        }
        for p in order {
            if let Some(r) = self.procs[p].reqs.first().copied() {
                let at = if self.open_loop {
                    r.at_ns.unwrap_or(0) + self.starts[p]
                } else {
                    let burst = self.think_before(p, &r);
                    self.think_done(self.starts[p], burst)
                };
                self.schedule(at, Ev::Issue(p as u32));
            }
        }
        if let Some(t) = self.cdev.as_ref().and_then(CacheDev::first_tick) {
            self.schedule(t, Ev::CleanTick);
        }
        while let Some(Reverse((t, _, ev))) = self.events.pop() {
            self.now = t;
            self.n_events += 1;
            match ev {
                Ev::Issue(p) => self.issue(p),
                Ev::DeviceDone => self.device_done(),
                Ev::DeviceTimer => self.kick_device(),
                Ev::ShadowDone(k) => self.shadow_done(k),
                Ev::ShadowRelease(k, p) => self.shadow_release(k, p),
                Ev::ShadowTimer(k) => self.shadow_timer(k),
                Ev::CacheDevDone => self.cache_dev_done(),
                Ev::CacheDevTimer => self.kick_cache_dev(),
                Ev::CleanTick => self.clean_tick(),
            }
        }
    }

    fn issue(&mut self, p: u32) {
        let proc = &mut self.procs[p as usize];
        let Some(r) = proc.reqs.get(proc.next).copied() else { return };
        proc.next += 1;
        proc.outstanding += 1;
        if !self.open_loop {
            proc.idle_ns += self.now.saturating_sub(proc.done_at);
        }
        self.owner = Some(Owner { proc: p, issue: proc.next as u64, idle_ns: proc.idle_ns });
        if self.open_loop {
            if let Some(n) = proc.reqs.get(proc.next) {
                let at = n.at_ns.map_or(self.now, |t| t + self.starts[p as usize]).max(self.now);
                self.schedule(at, Ev::Issue(p));
            }
        }
        // The job starts with a guard count of 1, released at the end, so that it cannot complete while its
        // blocks are still being looked up.
        let job = Job { proc: p, pending: 1, issued_at: self.now };
        let j = match self.free_jobs.pop() {
            Some(j) => {
                self.jobs[j as usize] = job;
                j
            }
            None => {
                self.jobs.push(job);
                (self.jobs.len() - 1) as u32
            }
        };
        if r.n > 0 {
            match (&self.input, r.op) {
                (Input::Files { .. }, Op::Read) if self.page.is_some() => self.page_read(j, p, &r),
                (Input::Files { .. }, Op::Write) if self.page.is_some() => self.page_write(j, p, &r),
                (Input::Files { .. }, _) => self.direct_file(j, &r),
                (Input::Blocks, _) => self.block_input(j, &r),
            }
        }
        self.release(j);
        self.kick_device();
        self.kick_cache_dev();
        self.owner = None;
    }

    /// Demand read through the page cache.
    fn page_read(&mut self, j: u32, p: u32, r: &Req) {
        let Some(page) = self.page.as_mut() else { return };
        let Input::Files { pages, .. } = &self.input else { return };
        let f = r.target;
        let stream = (u64::from(p) << 32) | u64::from(f);
        let Some(first) = BlockKey::new(f, r.first) else { return };
        let mut out = LevelRead::default();
        page.read(first, r.n, stream, pages[f as usize], |_| Waiter::Job(j), &mut out);
        self.jobs[j as usize].pending += out.pending;
        let mut sync_pages: Vec<u64> = out.sync.iter().map(|k| k.block()).collect();
        let mut async_pages: Vec<u64> = out.asyn.iter().map(|k| k.block()).collect();
        self.pages_down(f, &mut sync_pages, true);
        self.pages_down(f, &mut async_pages, false);
    }

    /// Sends page-cache misses of file `f` to the block level.
    fn pages_down(&mut self, f: u32, pages: &mut Vec<u64>, sync: bool) {
        if pages.is_empty() {
            return;
        }
        pages.sort_unstable();
        pages.dedup();
        let (items, mut ready) = self.map_pages(f, pages, Waiter::Page);
        self.block_read(&items, sync, &mut ready);
        self.notify_all(ready);
    }

    /// Maps pages (sorted) of file `f` to (disk block key, waiter) pairs; unmapped pages arrive at once.
    fn map_pages(
        &mut self,
        f: u32,
        pages: &[u64],
        waiter: impl Fn(u64) -> Waiter,
    ) -> (Vec<(BlockKey, Waiter)>, Vec<Waiter>) {
        let Input::Files { map, .. } = &self.input else { return (Vec::new(), Vec::new()) };
        let mut items = Vec::with_capacity(pages.len());
        let mut unmapped = Vec::new();
        let mut i = 0;
        while i < pages.len() {
            let mut k = i + 1;
            while k < pages.len() && pages[k] == pages[k - 1] + 1 {
                k += 1;
            }
            let (p0, cnt) = (pages[i], (k - i) as u64);
            self.runs.clear();
            map.runs(f, p0, cnt, &mut self.runs);
            let mapped: u64 = self.runs.iter().map(|r| r.1).sum();
            if mapped == cnt {
                let mut pg = p0;
                for &(db, len) in &self.runs {
                    for b in db..db + len {
                        if let Some(pk) = BlockKey::new(f, pg) {
                            match BlockKey::new(0, b) {
                                Some(bk) => items.push((bk, waiter(pk.raw()))),
                                None => unmapped.push(waiter(pk.raw())),
                            }
                        }
                        pg += 1;
                    }
                }
            } else {
                for pg in p0..p0 + cnt {
                    self.runs.clear();
                    map.runs(f, pg, 1, &mut self.runs);
                    match (self.runs.first().and_then(|r| BlockKey::new(0, r.0)), BlockKey::new(f, pg)) {
                        (Some(bk), Some(pk)) => items.push((bk, waiter(pk.raw()))),
                        (None, Some(pk)) => unmapped.push(waiter(pk.raw())),
                        _ => {}
                    }
                }
            }
            i = k;
        }
        (items, unmapped)
    }

    /// Demand (or page-cache read-ahead) reads at the block level. Blocks found resident go to `ready`.
    fn block_read(&mut self, items: &[(BlockKey, Waiter)], sync: bool, ready: &mut Vec<Waiter>) {
        if self.redcap.is_some() {
            self.redcap_read(items, sync, ready);
            return;
        }
        let mut reads: Vec<BlockKey> = Vec::new();
        let mut async_reads: Vec<BlockKey> = Vec::new();
        // Each run of consecutive blocks is one request.
        for run in items.chunk_by(|a, b| b.0.raw() == a.0.raw() + 1) {
            let first = run[0].0;
            let n = run.len() as u64;
            match self.block.as_mut() {
                Some(lvl) => {
                    let mut out = LevelRead::default();
                    lvl.read(first, n, u64::from(first.volume()), u64::MAX, |b| run[b as usize].1, &mut out);
                    for (f, &(_, w)) in lvl.plan.fates.iter().zip(run) {
                        if *f == blockwell_core::level::Fate::Hit {
                            ready.push(w);
                        }
                    }
                    reads.append(&mut out.sync);
                    async_reads.append(&mut out.asyn);
                }
                None => {
                    let m = &mut self.merge;
                    m.c.read_requests += 1;
                    m.c.read_blocks += n;
                    for &(key, w) in run {
                        if let std::collections::hash_map::Entry::Vacant(e) = m.inflight.entry(key.raw()) {
                            e.insert(MergeFlight { waiters: vec![w], prefetched: false });
                            m.c.read_misses_issued += 1;
                            reads.push(key);
                        } else {
                            m.join_flight(key, w);
                        }
                    }
                }
            }
        }
        if sync {
            self.submit_reads(&mut reads, true);
        } else {
            async_reads.append(&mut reads);
        }
        self.submit_reads(&mut async_reads, false);
    }

    /// Clusters block reads into device requests of consecutive blocks, up to the maximum size.
    fn submit_reads(&mut self, keys: &mut Vec<BlockKey>, sync: bool) {
        for r in self.cluster(keys, sync) {
            match self.cdev.as_mut() {
                Some(t) => t.read(r.first, r.n, r.sync, self.now),
                None => self.submit(DiskOp::Read, r.first, r.n, r.sync, None, None),
            }
        }
        keys.clear();
        self.tier_cmds();
    }

    /// The clusterer's device reads for `keys` (any order, duplicates allowed).
    fn cluster(&mut self, keys: &[BlockKey], sync: bool) -> Vec<DeviceRead> {
        let fetches: Vec<Fetch> = keys.iter().map(|&first| Fetch { first, n: 1, sync }).collect();
        let mut out = Vec::new();
        self.clusterer.cluster(&fetches, &mut out);
        out
    }

    /// REDCAP in place of a block cache (see [`super::redcap`]). REDCAP sees each run of consecutive blocks as
    /// one read request and gives the controller one observation per run. While inactive, the missing blocks of
    /// all runs are clustered together, exactly as without REDCAP; a device read counts for the run of its
    /// first block.
    fn redcap_read(&mut self, items: &[(BlockKey, Waiter)], sync: bool, ready: &mut Vec<Waiter>) {
        let Some(active) = self.redcap.as_ref().map(|r| r.is_active()) else { return };
        let now = self.now;
        let spb = self.spb;
        let mut ids: Vec<u32> = Vec::new();
        // (device read, observation) while active; (missing block, observation) while inactive.
        let mut segments: Vec<(BlockKey, u64, u32)> = Vec::new();
        let mut plain: Vec<(BlockKey, u32)> = Vec::new();
        let mut shadow_reqs_all: Vec<DevReq> = Vec::new();
        // Each run of consecutive blocks is one request.
        for run in items.chunk_by(|a, b| b.0.raw() == a.0.raw() + 1) {
            let first = run[0].0;
            let n = run.len() as u64;
            // The estimate: without the cache, the run's blocks clustered; with it, the segments it reads.
            let estimate_reqs: Vec<(u64, u64)> = if active {
                let keys: Vec<BlockKey> = run.iter().map(|x| x.0).collect();
                self.cluster(&keys, sync).iter().map(|r| (r.first.block().saturating_mul(spb), r.n * spb)).collect()
            } else {
                Vec::new()
            };
            let (Some(rc), lvl) = (self.redcap.as_mut(), &mut self.merge) else { return };
            let id = rc.open();
            lvl.c.read_requests += 1;
            lvl.c.read_blocks += n;
            let end = rc.end_blocks.max(first.block() + n);
            rc.cache.read(first, n, end, &mut rc.plan);
            let shadow_reqs: Vec<(u64, u64)> = if active {
                estimate_reqs
            } else {
                rc.plan.fetches.iter().map(|f| (f.first.block().saturating_mul(spb), f.n * spb)).collect()
            };
            for (sector, sectors) in shadow_reqs {
                rc.add_device_request(id);
                shadow_reqs_all.push(DevReq::shadow_read(sector, sectors, sectors / spb.max(1), sync, id));
            }
            if active {
                let mut fresh = Vec::new();
                for fe in &rc.plan.fetches {
                    for b in 0..fe.n {
                        let key = BlockKey::from_raw(fe.first.raw() + b);
                        if let std::collections::hash_map::Entry::Vacant(e) = lvl.inflight.entry(key.raw()) {
                            e.insert(MergeFlight { waiters: Vec::new(), prefetched: true });
                            fresh.push(key.raw());
                        }
                    }
                    segments.push((fe.first, fe.n, id));
                    rc.segment_reads += 1;
                }
                fresh.sort_unstable();
                let mut hits = 0;
                for &(key, w) in run {
                    match lvl.inflight.get_mut(&key.raw()) {
                        Some(fl) if fresh.binary_search(&key.raw()).is_ok() => {
                            fl.prefetched = false;
                            fl.waiters.push(w);
                            lvl.c.read_misses_issued += 1;
                        }
                        Some(_) => lvl.join_flight(key, w),
                        None => {
                            hits += 1;
                            ready.push(w);
                        }
                    }
                }
                lvl.c.read_hits += hits;
                if hits == n {
                    lvl.c.read_request_hits += 1;
                }
            } else {
                for &(key, w) in run {
                    if let std::collections::hash_map::Entry::Vacant(e) = lvl.inflight.entry(key.raw()) {
                        e.insert(MergeFlight { waiters: vec![w], prefetched: false });
                        lvl.c.read_misses_issued += 1;
                        plain.push((key, id));
                    } else {
                        lvl.join_flight(key, w);
                    }
                }
            }
            ids.push(id);
        }
        if !active {
            plain.sort_unstable();
            let keys: Vec<BlockKey> = plain.iter().map(|x| x.0).collect();
            for r in self.cluster(&keys, sync) {
                let id = plain.binary_search_by_key(&r.first, |x| x.0).map_or(ids[0], |j| plain[j].1);
                segments.push((r.first, r.n, id));
            }
        }
        for (first, n, id) in segments {
            if let Some(rc) = self.redcap.as_mut() {
                rc.add_device_request(id);
            }
            self.submit(DiskOp::Read, first, n, sync, None, Some(id));
        }
        let mut wake = Vec::new();
        if let Some(rc) = self.redcap.as_mut() {
            rc.shadow_batch(usize::from(!active), self.owner, shadow_reqs_all, now, &mut wake);
        }
        self.wake_shadows(wake);
        if let Some(rc) = self.redcap.as_mut() {
            for id in ids {
                rc.seal(id, now);
            }
        }
    }

    fn wake_shadows(&mut self, wake: Vec<(u64, ShadowWake)>) {
        for (at, w) in wake {
            self.schedule(
                at,
                match w {
                    ShadowWake::Done(k) => Ev::ShadowDone(k),
                    ShadowWake::Release(k, p) => Ev::ShadowRelease(k, p),
                    ShadowWake::Timer(k) => Ev::ShadowTimer(k),
                },
            );
        }
    }

    fn shadow_timer(&mut self, k: u8) {
        let mut wake = Vec::new();
        if let Some(rc) = self.redcap.as_mut() {
            rc.shadow_kick(usize::from(k), self.now, &mut wake);
        }
        self.wake_shadows(wake);
    }

    fn shadow_release(&mut self, k: u8, p: u32) {
        let mut wake = Vec::new();
        if let Some(rc) = self.redcap.as_mut() {
            rc.shadow_release(usize::from(k), p as usize, self.now, &mut wake);
        }
        self.wake_shadows(wake);
    }

    fn shadow_done(&mut self, k: u8) {
        let now = self.now;
        let Some(rc) = self.redcap.as_mut() else { return };
        let mut wake = Vec::new();
        let done = rc.shadow_finish(usize::from(k), now, &mut wake);
        if let Some((r, service)) = done {
            if let Some(id) = r.tag {
                rc.progress(id, service, true, now);
            }
        }
        self.wake_shadows(wake);
    }

    fn submit(&mut self, op: DiskOp, first: BlockKey, n: u64, sync: bool, job: Option<u32>, tag: Option<u32>) {
        let r = DevReq {
            op,
            first_key: first.raw(),
            n,
            sector: first.block().saturating_mul(self.spb),
            sectors: n * self.spb,
            sync,
            job,
            tag,
            tier: None,
            owner: self.owner.map(|o| o.proc),
            seq: 0,
            queued_at: 0,
        };
        if let Some(Some(id)) = self.dev.submit(r, self.now) {
            // Merged into a queued read, which carries the service time: this read's share is zero.
            let now = self.now;
            if let Some(rc) = self.redcap.as_mut() {
                rc.progress(id, 0, false, now);
            }
        }
    }

    /// Write through the page cache: the pages are written (allocated) in the page cache, then written through
    /// to the device; the request waits for the device writes.
    fn page_write(&mut self, j: u32, _p: u32, r: &Req) {
        let Some(page) = self.page.as_mut() else { return };
        if let Some(first) = BlockKey::new(r.target, r.first) {
            page.write(first, r.n);
        }
        self.direct_file(j, r);
    }

    /// A file request below the page cache: reads wait for the block level, writes go to the device.
    fn direct_file(&mut self, j: u32, r: &Req) {
        let pages: Vec<u64> = (r.first..r.first + r.n).collect();
        let (items, unmapped) = self.map_pages(r.target, &pages, |_| Waiter::Job(j));
        if r.op == Op::Read {
            self.jobs[j as usize].pending += r.n as u32;
            self.notify_all(unmapped);
        }
        self.block_io(j, r.op, &items, None);
    }

    /// Block-level input.
    fn block_input(&mut self, j: u32, r: &Req) {
        let Some(first) = BlockKey::new(r.target, r.first) else { return };
        let items: Vec<(BlockKey, Waiter)> =
            (0..r.n).map(|i| (BlockKey::from_raw(first.raw() + i), Waiter::Job(j))).collect();
        if r.op == Op::Read {
            self.jobs[j as usize].pending += r.n as u32;
        }
        self.block_io(j, r.op, &items, Some((r.offset, r.len)));
    }

    /// Reads or writes `items` at the block level; `bytes`: the byte range of a block request (its partial
    /// blocks matter to a cache device), else whole blocks.
    fn block_io(&mut self, j: u32, op: Op, items: &[(BlockKey, Waiter)], bytes: Option<(u64, u64)>) {
        match op {
            Op::Read => {
                let mut ready = Vec::new();
                self.block_read(items, true, &mut ready);
                self.notify_all(ready);
            }
            Op::Write => {
                let mut keys: Vec<BlockKey> = items.iter().map(|x| x.0).collect();
                keys.sort_unstable();
                keys.dedup();
                match (self.block.as_mut(), keys.first()) {
                    // The block level counts the write and passes it (WritePolicy::Ignore).
                    (Some(b), Some(&k0)) => b.write(k0, keys.len() as u64),
                    _ => {
                        self.merge.c.write_requests += 1;
                        self.merge.c.write_blocks += items.len() as u64;
                    }
                }
                if self.cdev.is_some() {
                    return self.cache_dev_write(j, &keys, bytes);
                }
                let mut i = 0;
                while i < keys.len() {
                    let mut k = i + 1;
                    while k < keys.len() && keys[k].raw() == keys[k - 1].raw() + 1 && ((k - i) as u64) < self.max_blocks
                    {
                        k += 1;
                    }
                    self.jobs[j as usize].pending += 1;
                    if let Some(rc) = self.redcap.as_mut() {
                        rc.cache.write(keys[i], (k - i) as u64);
                    }
                    self.submit(DiskOp::Write, keys[i], (k - i) as u64, true, Some(j), None);
                    i = k;
                }
            }
        }
    }

    /// A write of `keys` (sorted) to the cache device, one request per run of consecutive blocks; `bytes`: the
    /// byte range of a block request.
    fn cache_dev_write(&mut self, j: u32, keys: &[BlockKey], bytes: Option<(u64, u64)>) {
        let bs = self.block_size();
        let Some(t) = self.cdev.as_mut() else { return };
        for run in keys.chunk_by(|a, b| b.raw() == a.raw() + 1) {
            let (first, n) = (run[0], run.len() as u64);
            let (offset, len) = match bytes {
                Some(b) if run.len() == keys.len() => b,
                _ => (first.block() * bs, n * bs),
            };
            t.write(Some(j), first, n, offset, len, self.now);
        }
        self.tier_cmds();
    }

    fn block_size(&self) -> u64 {
        self.spb * SECTOR
    }

    /// Carries out what the cache device asked for.
    fn tier_cmds(&mut self) {
        let Some(t) = self.cdev.as_mut() else { return };
        if t.cmds.is_empty() {
            return;
        }
        let cmds = std::mem::take(&mut t.cmds);
        for c in &cmds {
            match *c {
                Cmd::Origin(mut r) => {
                    r.owner = self.owner.map(|o| o.proc);
                    self.dev.submit(r, self.now);
                }
                Cmd::Wait(j) => self.jobs[j as usize].pending += 1,
                Cmd::Release(j) => self.release(j),
                Cmd::Deliver(first, n) => self.deliver(first, n),
                Cmd::Tick(at) => {
                    if self.completed < self.total {
                        self.schedule(at, Ev::CleanTick);
                    }
                }
            }
        }
        if let Some(t) = self.cdev.as_mut() {
            if t.cmds.is_empty() {
                // Hand the buffer back.
                t.cmds = cmds;
                t.cmds.clear();
            }
        }
    }

    fn kick_all(&mut self) {
        self.kick_device();
        self.kick_cache_dev();
    }

    fn kick_cache_dev(&mut self) {
        let Some(t) = self.cdev.as_mut() else { return };
        match t.dev.start_next(self.now) {
            Some(Started::Request(done)) => self.schedule(done, Ev::CacheDevDone),
            Some(Started::Timer(at)) => self.schedule(at, Ev::CacheDevTimer),
            None => {}
        }
    }

    fn cache_dev_done(&mut self) {
        if let Some(t) = self.cdev.as_mut() {
            t.dev_done(self.now);
        }
        self.tier_cmds();
        self.kick_all();
    }

    fn clean_tick(&mut self) {
        if self.completed >= self.total {
            return;
        }
        if let Some(t) = self.cdev.as_mut() {
            t.tick(self.now);
        }
        self.tier_cmds();
        self.kick_all();
    }

    /// Blocks `first..first+n` (raw keys) were read for the block level: the waiters of each.
    fn deliver(&mut self, first: u64, n: u64) {
        let mut ws = Vec::new();
        for i in 0..n {
            let key = BlockKey::from_raw(first + i);
            match self.block.as_mut() {
                Some(b) => ws.extend(b.arrive(key).unwrap_or_default()),
                None => ws.extend(self.merge.inflight.remove(&key.raw()).map(|f| f.waiters).unwrap_or_default()),
            }
        }
        if let Some(b) = self.block.as_mut() {
            b.insert_arrived();
        }
        self.notify_all(ws);
    }

    fn notify_all(&mut self, ws: Vec<Waiter>) {
        let mut jobs = Vec::new();
        for w in ws {
            match w {
                Waiter::Job(j) => jobs.push(j),
                Waiter::Page(pk) => {
                    if let Some(page) = self.page.as_mut() {
                        if let Some(waiters) = page.arrive(BlockKey::from_raw(pk)) {
                            jobs.extend(waiters.iter().filter_map(|w| match w {
                                Waiter::Job(j) => Some(*j),
                                Waiter::Page(_) => None,
                            }));
                        }
                    }
                }
            }
        }
        if let Some(page) = self.page.as_mut() {
            page.insert_arrived();
        }
        for j in jobs {
            self.release(j);
        }
    }

    /// One fewer thing job `j` waits for; completes it at zero.
    fn release(&mut self, j: u32) {
        let job = &mut self.jobs[j as usize];
        job.pending -= 1;
        if job.pending > 0 {
            return;
        }
        let job = *job;
        self.free_jobs.push(j);
        self.completed += 1;
        self.response_sum += u128::from(self.now - job.issued_at);
        self.app_end = self.app_end.max(self.now);
        if let Some(t) = self.cdev.as_mut() {
            t.sample(self.completed, self.now);
        }
        let proc = &mut self.procs[job.proc as usize];
        proc.outstanding -= 1;
        proc.done_at = self.now;
        if !self.open_loop {
            if let Some(n) = proc.reqs.get(proc.next).copied() {
                let burst = self.think_before(job.proc as usize, &n);
                let at = self.think_done(self.now, burst);
                self.schedule(at, Ev::Issue(job.proc));
            }
        }
    }

    fn kick_device(&mut self) {
        match self.dev.start_next(self.now) {
            Some(Started::Request(done)) => self.schedule(done, Ev::DeviceDone),
            Some(Started::Timer(t)) => self.schedule(t, Ev::DeviceTimer),
            None => {}
        }
    }

    fn device_done(&mut self) {
        let Some((r, service)) = self.dev.finish() else { return };
        self.last_device = self.now;
        if let (Some(id), Some(rc)) = (r.tag, self.redcap.as_mut()) {
            rc.progress(id, service, false, self.now);
        }
        if let (Some(id), Some(t)) = (r.tier, self.cdev.as_mut()) {
            t.origin_done(id, self.now);
            self.tier_cmds();
            return self.kick_all();
        }
        match r.op {
            DiskOp::Write => {
                if let Some(j) = r.job {
                    self.release(j);
                }
            }
            DiskOp::Read => self.deliver(r.first_key, r.n),
        }
        self.kick_device();
    }

    fn report(mut self, name: String, cfg: &Config) -> (Report, Recorded) {
        let level_report = |l: &Level, lc: &Option<LevelConfig>| {
            lc.as_ref().map(|lc| {
                LevelReport::new(
                    lc.policy.label().to_string(),
                    lc.prefetch.label().to_string(),
                    lc.capacity_bytes / cfg.block_size,
                    l.counters(),
                )
            })
        };
        let page_cache = self.page.as_ref().and_then(|p| level_report(p, &cfg.page_cache));
        let block_cache = self.block.as_ref().and_then(|b| level_report(b, &cfg.block_cache));
        let rec = (self.page.as_mut().and_then(|p| p.record.take()), self.block.as_mut().and_then(|b| b.record.take()));
        let device = self.dev.finish_report(self.app_end);
        let redcap = self.redcap.as_ref().map(|r| r.report(self.app_end.max(self.last_device)));
        let block_cache = match (&self.redcap, block_cache) {
            (Some(r), None) => Some(LevelReport::new(
                "redcap".into(),
                "segment".into(),
                r.cache.config().segments as u64 * r.cache.config().segment_blocks,
                self.merge.c,
            )),
            (_, b) => b,
        };
        let report = Report {
            workload: name,
            block_size: cfg.block_size,
            processes: self.procs.len() as u64,
            requests: self.completed,
            page_cache,
            block_cache,
            device,
            cache_dev: self.cdev.take().map(|t| t.report(self.app_end)),
            redcap,
            app_time_ns: self.app_end,
            mean_request_ns: (self.completed != 0).then(|| self.response_sum as f64 / self.completed as f64),
            events: self.n_events,
        };
        (report, rec)
    }
}

/// The blocks the input touches at the block level (file pages through the layout), for a cache device sized
/// in percent.
fn footprint(input: &Input, reqs: &[Vec<Req>]) -> u64 {
    let mut seen: HashSet<u64> = HashSet::new();
    let mut runs = Vec::new();
    for r in reqs.iter().flatten() {
        match input {
            Input::Blocks => {
                if let Some(k) = BlockKey::new(r.target, r.first) {
                    seen.extend((0..r.n).map(|i| k.raw() + i));
                }
            }
            Input::Files { map, .. } => {
                runs.clear();
                map.runs(r.target, r.first, r.n, &mut runs);
                for &(db, len) in &runs {
                    seen.extend((db..db + len).filter_map(|b| BlockKey::new(0, b)).map(|k| k.raw()));
                }
            }
        }
    }
    seen.len() as u64
}

fn collect_recorded(rec: Recorded) -> (Oracle, Oracle) {
    (
        rec.0.map(|s| Oracle::from_sequence(&s)).unwrap_or_default(),
        rec.1.map(|s| Oracle::from_sequence(&s)).unwrap_or_default(),
    )
}

fn needs_oracle(cfg: &Config, files: bool) -> bool {
    let page = files && cfg.page_cache.as_ref().is_some_and(|l| l.policy.kind.needs_next_use());
    page || cfg.block_cache.as_ref().is_some_and(|l| l.policy.kind.needs_next_use())
}

/// Runs once, or twice when a policy needs next-use times (the first run records each level's demand
/// sequence; the second gives each access the logical time of the same key's next recorded access).
/// `files`: the input is a file-level workload (`make_input` gives [`Input::Files`]).
fn simulate(
    name: &str,
    make_input: impl Fn() -> Input,
    files: bool,
    reqs: Vec<Vec<Req>>,
    cfg: &Config,
    disk: &dyn DiskModel,
) -> Result<Report, Error> {
    let oracles = if needs_oracle(cfg, files) {
        let mut first = Sim::new(make_input(), reqs.clone(), cfg, disk, None, true)?;
        first.run();
        let (_, rec) = first.report(name.to_string(), cfg);
        Some(collect_recorded(rec))
    } else {
        None
    };
    let total: usize = reqs.iter().map(Vec::len).sum();
    let mut sim = Sim::new(make_input(), reqs, cfg, disk, oracles, false)?;
    sim.run();
    if sim.completed != total as u64 {
        return Err(Error::Stalled { completed: sim.completed, total: total as u64 });
    }
    let in_flight = sim.merge.inflight.len()
        + sim.cdev.as_ref().map_or(0, |t| t.step.in_flight() + t.busy())
        + sim.block.as_ref().map_or(0, |b| b.step.in_flight())
        + sim.page.as_ref().map_or(0, |p| p.step.in_flight());
    if in_flight > 0 {
        return Err(Error::InFlightAtEnd(in_flight));
    }
    Ok(sim.report(name.to_string(), cfg).0)
}

pub(super) fn run_workload(w: &Workload, cfg: &Config, disk: &dyn DiskModel) -> Result<Report, Error> {
    check_config(cfg)?;
    if w.files.len() > MAX_VOLUME as usize + 1 {
        return Err(Error::TooManyFiles(w.files.len()));
    }
    let bs = cfg.block_size;
    let pages: Vec<u64> = w.files.iter().map(|f| f.size.div_ceil(bs)).collect();
    let mut reqs = Vec::with_capacity(w.processes.len());
    for (pi, p) in w.processes.iter().enumerate() {
        let mut v = Vec::with_capacity(p.len());
        let mut prev_at = 0u64;
        for (ri, r) in p.iter().enumerate() {
            let bad = |message: String| Error::Request { process: pi, index: ri, message };
            let think_ns = match r.at_ns {
                Some(at) if cfg.think_from_gaps => {
                    let gap = at.saturating_sub(prev_at);
                    prev_at = at;
                    gap
                }
                _ => r.think_ns,
            };
            let fp = *pages.get(r.file as usize).ok_or_else(|| bad(format!("file {} does not exist", r.file)))?;
            if r.len == 0 {
                return Err(bad("zero-length request".into()));
            }
            let (first, n) = block_span(r.offset, r.len, bs);
            let n = n.min(fp.saturating_sub(first));
            check_blocks(n).map_err(bad)?;
            if n > 0 && first + (n - 1) > MAX_BLOCK {
                return Err(bad(format!("offset {} is beyond the addressable range", r.offset)));
            }
            v.push(Req {
                target: r.file,
                op: r.op,
                first,
                n,
                offset: first * bs,
                len: n * bs,
                think_ns,
                at_ns: r.at_ns,
            });
        }
        reqs.push(v);
    }
    let map: FileMap = cfg
        .layout
        .build(&w.files, bs, cfg.layout_seed)
        .map_err(|e| Error::Config(format!("layout {}: {e}", cfg.layout)))?;
    let make = || Input::Files { map: map.clone(), pages: pages.clone() };
    simulate(&w.name, make, true, reqs, cfg, disk)
}

pub(super) fn run_block_requests(
    name: &str,
    processes: &[Vec<BlockRequest>],
    cfg: &Config,
    disk: &dyn DiskModel,
) -> Result<Report, Error> {
    check_config(cfg)?;
    let mut reqs = Vec::with_capacity(processes.len());
    for (pi, p) in processes.iter().enumerate() {
        let mut v = Vec::with_capacity(p.len());
        for (ri, r) in p.iter().enumerate() {
            let bad = |message: String| Error::Request { process: pi, index: ri, message };
            if r.len == 0 {
                return Err(bad("zero-length request".into()));
            }
            let (first, n) = block_span(r.offset, r.len, cfg.block_size);
            check_blocks(n).map_err(bad)?;
            if r.volume > MAX_VOLUME || !first.checked_add(n - 1).is_some_and(|last| last <= MAX_BLOCK) {
                return Err(bad(format!("volume {} offset {} is beyond the addressable range", r.volume, r.offset)));
            }
            v.push(Req {
                target: r.volume,
                op: r.op,
                first,
                n,
                offset: r.offset,
                len: r.len,
                think_ns: r.think_ns,
                at_ns: Some(r.at_ns),
            });
        }
        reqs.push(v);
    }
    simulate(name, || Input::Blocks, false, reqs, cfg, disk)
}

pub(super) fn run_block_trace(
    reader: &mut dyn TraceReader,
    cfg: &Config,
    disk: &dyn DiskModel,
) -> Result<Report, Error> {
    run_block_requests("block trace", &[super::read_block_trace(reader)?], cfg, disk)
}
