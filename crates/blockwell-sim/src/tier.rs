//! Seed `004_*`'s SSD caches from a trace: an optional RAM level over a cache-device level over the origin,
//! in write-back, write-through or write-around, with a cleaner (the replay behind `blockwell sim
//! --cache-dev-size`).
//!
//! Both levels are the engine's [`CacheLevel`], configured as `blockwell serve --cache-dev` configures them:
//! the RAM level writes through to the device level and takes the prefetcher, admission and cutoff of `sim`;
//! the device level promotes read misses by its own admission rule and sequential cutoff, never allocates a
//! block a write covers only in part, and, in write-back, keeps written blocks dirty until the cleaner or an
//! eviction writes them back. Every read the RAM level issues (its clustered misses and prefetches) is one
//! read request to the device level.
//!
//! Time: the cleaner runs before each request with the request's time stamp (or, with
//! [`TierReplayConfig::request_interval_ns`], the request's index times the interval, for traces without
//! time stamps); the time since the previous request is its idle time. A cleaning pass hands out the
//! cleaner's quota of dirty blocks in origin order, merged into runs of at most `clean_run_blocks`; a dirty
//! block the device level evicts is written back at once, as the server's tier does first in every pass.
//! Reads and writes complete at once, so no block is ever in flight at the next request: at queue depth 1
//! against instant devices the counters are the live tier's (the differential test checks it).
//!
//! Reported per configuration: both levels' engine counters, the device level's counters under the names
//! `blockwell status` gives them, origin reads and writes (the write reduction by overwrites absorbed in the
//! cache), cleaning traffic, and the dirty blocks over time (data at risk if the cache device were lost).

pub use crate::cachedev::{DevCounters, DevMode, DevSpec, DirtyPoint, DirtyReport};

use crate::cachedev::{level_config, read_runs, victim_runs, write_reduction, write_split, DirtySampler, ReadRun};
use crate::replay::{cache_config, BlockReq, CacheSize, Filter, ReplayConfig, ReplayError};
use blockwell_core::cleaner::{Cleaner, CleanerInput, CleanerSpec};
use blockwell_core::cluster::DeviceRead;
use blockwell_core::key::BlockKey;
use blockwell_core::level::{self, CacheLevel, Fate, LevelConfig, StepPlan};
use blockwell_core::policy::PolicySpec;
use blockwell_core::prefetch::PrefetcherKind;
use blockwell_core::{Op, Stats};
use blockwell_trace::{TraceError, TraceReader};
use serde::Serialize;
use std::collections::HashSet;
use std::num::NonZeroUsize;

/// How to replay through the two levels (the filters, block size and preset of [`ReplayConfig`]; its
/// prefetcher, admission and cutoff are the RAM level's).
#[derive(Clone, Debug)]
pub struct TierReplayConfig {
    pub replay: ReplayConfig,
    pub dev: DevSpec,
    /// The clock: `None` takes the trace's time stamps; `Some(ns)` puts request `i` at `i × ns`.
    pub request_interval_ns: Option<u64>,
    /// A point of the dirty series every this many requests (0: none).
    pub dirty_every: u64,
}

/// The result for one configuration.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TierResult {
    /// The RAM level's policy and size (`None`: no RAM level).
    pub ram_policy: Option<String>,
    pub ram_blocks: u64,
    pub ram: Option<Stats>,
    pub dev_policy: String,
    pub dev_blocks: u64,
    /// The device level's sets' blocks (`None`: fully associative).
    pub dev_associativity: Option<usize>,
    pub mode: DevMode,
    pub cleaner: String,
    /// The device level's admission of read misses, and its sequential cutoff in bytes (0: off).
    pub promote: String,
    pub dev_sequential_cutoff: u64,
    /// The device level's engine counters.
    pub dev: Stats,
    pub tier: DevCounters,
    /// Bytes the client wrote (counted requests).
    pub client_write_bytes: u64,
    /// 1 − origin write bytes / client write bytes: the writes the cache absorbed (negative when cleaning
    /// whole blocks wrote more than the client did).
    pub write_reduction: Option<f64>,
    pub dirty: DirtyReport,
}

/// Everything a two-level replay measured.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TierReport {
    pub block_size: u64,
    pub preset: String,
    pub requests: u64,
    pub block_accesses: u64,
    pub footprint_blocks: Option<u64>,
    pub warmup_requests: u64,
    /// Where the cleaner's clock came from: `trace` or `requests`.
    pub clock: String,
    /// The trace's time stamps never advanced while a time-based cleaner ran (it then never cleaned).
    pub clock_stood_still: bool,
    pub skipped_lines: u64,
    pub skipped_examples: Vec<String>,
    /// The settings of the replay (the RAM level's and the trace's: every CSV row carries them).
    pub settings: crate::replay::Settings,
    /// `--request-interval-us` in nanoseconds, when the cleaner's clock is the requests.
    pub request_interval_ns: Option<u64>,
    pub results: Vec<TierResult>,
}

/// One RAM configuration of a two-level replay: a policy and a size (0 blocks: no RAM level).
#[derive(Clone, Debug)]
pub struct RamSpec {
    pub policy: PolicySpec,
    pub size: CacheSize,
}

/// The two levels and their counters.
struct Run {
    ram: Option<CacheLevel>,
    ram_plan: StepPlan,
    dev: CacheLevel,
    plan: StepPlan,
    mode: DevMode,
    cleaner: Cleaner,
    clean_run: u64,
    block_size: u64,
    c: DevCounters,
    client_write_bytes: u64,
    dirty: DirtySampler,
    runs: Vec<DeviceRead>,
    reads: Vec<DeviceRead>,
    // Scratch of the shared bookkeeping.
    read_runs: Vec<ReadRun>,
    dev_keys: Vec<BlockKey>,
    in_flight: Vec<BlockKey>,
    origin_runs: Vec<(u64, u64)>,
}

impl Run {
    fn reset(&mut self) {
        if let Some(r) = self.ram.as_mut() {
            r.reset_stats();
        }
        self.dev.reset_stats();
        self.c = DevCounters::default();
        self.client_write_bytes = 0;
        self.dirty = DirtySampler::default();
    }

    /// A cleaning pass at `now`.
    fn clean(&mut self, now_ns: u64, idle_ns: u64) {
        let dirty = self.dev.dirty_count();
        let quota = self.cleaner.quota(CleanerInput {
            now_ns,
            dirty,
            capacity: self.dev.policy().capacity() as u64,
            block_size: self.block_size,
            idle_ns,
        });
        if quota == 0 || dirty == 0 {
            self.cleaner.written(0);
            return;
        }
        self.runs.clear();
        self.dev.clean_plan(quota.min(dirty), self.clean_run, &mut self.runs);
        let mut done = 0;
        for r in std::mem::take(&mut self.runs) {
            self.c.clean_writes += 1;
            self.c.origin_write(r.n * self.block_size);
            self.c.dev_read_blocks += r.n;
            for k in 0..r.n {
                if self.dev.clean_done(BlockKey::from_raw(r.first.raw() + k)) {
                    done += 1;
                }
            }
        }
        self.c.cleaned_blocks += done;
        self.cleaner.written(done);
    }

    /// Evicted blocks of the device level: clean ones leave, dirty ones are written back at once.
    fn victims(&mut self) {
        self.read_runs.clear();
        victim_runs(&self.plan.victims, self.clean_run, self.block_size, &mut self.c, &mut self.read_runs);
    }

    /// A read of `n` blocks from `first` at the device level.
    fn dev_read(&mut self, first: BlockKey, n: u64) {
        self.c.read_requests += 1;
        let req = level::Request::blocks(Op::Read, first, n, self.block_size);
        self.dev.access(&req, &mut self.plan);
        if self.plan.bypass {
            self.c.uncached_reads += 1;
        }
        self.victims();
        let fetched = self.plan.fates.iter().filter(|f| **f == Fate::Fetch).count() as u64;
        self.c.promotions += fetched;
        self.c.dev_write_blocks += fetched;
        read_runs(&self.dev, &self.plan.fates, first, self.block_size, &mut self.c, &mut self.read_runs);
        self.dev.complete_all();
    }

    /// A write of `n` blocks from `first` (bytes `offset..offset+len`) at the device level.
    fn dev_write(&mut self, first: BlockKey, n: u64, offset: u64, len: u64) {
        self.c.write_requests += 1;
        if self.mode != DevMode::WriteBack {
            self.c.origin_write(len);
        }
        let req = level::Request { offset, len, ..level::Request::blocks(Op::Write, first, n, self.block_size) };
        self.dev.access(&req, &mut self.plan);
        if self.plan.bypass {
            self.c.uncached_writes += 1;
        }
        self.victims();
        write_split(
            &mut self.dev,
            &self.plan.fates,
            first,
            offset,
            len,
            self.block_size,
            self.mode,
            &mut self.c,
            &mut self.dev_keys,
            &mut self.in_flight,
            &mut self.origin_runs,
        );
    }

    fn request(&mut self, r: &BlockReq, offset: u64, len: u64) {
        let bs = self.block_size;
        match self.ram.as_mut() {
            None => match r.op {
                Op::Read => self.dev_read(r.first, u64::from(r.n)),
                Op::Write => self.dev_write(r.first, u64::from(r.n), offset, len),
            },
            Some(ram) => {
                let req = level::Request { offset, len, ..level::Request::blocks(r.op, r.first, u64::from(r.n), bs) };
                ram.access(&req, &mut self.ram_plan);
                ram.complete_all();
                match r.op {
                    Op::Read => {
                        self.reads.clear();
                        self.reads.extend_from_slice(&self.ram_plan.reads);
                        self.reads.extend_from_slice(&self.ram_plan.async_reads);
                        for d in std::mem::take(&mut self.reads) {
                            self.dev_read(d.first, d.n);
                        }
                    }
                    // Write-through: the whole write goes down.
                    Op::Write => self.dev_write(r.first, u64::from(r.n), offset, len),
                }
            }
        }
        if r.op == Op::Write {
            self.client_write_bytes += len;
        }
    }

    fn sample(&mut self, index: u64, now_ns: u64, every: u64) {
        self.dirty.sample(index, now_ns, self.dev.dirty_count(), every);
    }

    fn finish(self, ram: Option<(&RamSpec, u64)>, dev: &DevSpec, dev_blocks: u64) -> TierResult {
        let st = *self.dev.stats();
        let c = self.c.with_engine(&st);
        TierResult {
            ram_policy: ram.map(|(r, _)| r.policy.label().to_string()),
            ram_blocks: ram.map_or(0, |(_, b)| b),
            ram: self.ram.as_ref().map(|r| *r.stats()),
            dev_policy: dev.policy.label().to_string(),
            dev_blocks,
            dev_associativity: dev.associativity.map(NonZeroUsize::get),
            mode: dev.mode,
            cleaner: dev.cleaner.to_string(),
            promote: dev.promote.to_string(),
            dev_sequential_cutoff: dev.sequential_cutoff,
            dev: st,
            write_reduction: write_reduction(self.client_write_bytes, c.origin_write_bytes),
            tier: c,
            client_write_bytes: self.client_write_bytes,
            dirty: self.dirty.finish(self.dev.dirty_count()),
        }
    }
}

/// Errors of a two-level replay beyond a replay's.
fn unsupported(message: &str) -> ReplayError {
    ReplayError::Request { index: 0, message: message.to_string() }
}

/// Replays the trace `open` opens through a RAM level (each of `rams`; a size of 0 blocks: none) over the
/// cache-device level of `cfg.dev`, one configuration after the other.
pub fn replay_tier(
    open: &dyn Fn() -> Result<Box<dyn TraceReader>, TraceError>,
    rams: &[RamSpec],
    cfg: &TierReplayConfig,
) -> Result<TierReport, ReplayError> {
    if rams.is_empty() {
        return Err(ReplayError::NoCaches);
    }
    let rc = &cfg.replay;
    // A warm-up by time ends at the first request at least that long after the first one (trace time, as
    // `replay` does); until then it counts as unending.
    let span = match rc.warmup {
        crate::replay::Warmup::Nanos(ns) => Some(ns),
        crate::replay::Warmup::Requests(_) => None,
    };
    let bs = rc.block_size;
    if rams.iter().any(|r| r.policy.kind.needs_next_use()) || cfg.dev.policy.kind.needs_next_use() {
        return Err(unsupported("an offline policy (OPT) needs the whole trace's future: not in a two-level replay"));
    }
    // The footprint, for sizes in percent.
    let needs_footprint = rams.iter().any(|r| matches!(r.size, CacheSize::PercentOfFootprint(_)))
        || matches!(cfg.dev.size, CacheSize::PercentOfFootprint(_));
    let footprint = if needs_footprint { Some(footprint(open, rc)?) } else { None };
    let fp = footprint.unwrap_or(0);
    let mut report = TierReport {
        block_size: bs,
        preset: rc.preset.name().to_string(),
        requests: 0,
        block_accesses: 0,
        footprint_blocks: footprint,
        warmup_requests: 0,
        clock: if cfg.request_interval_ns.is_some() { "requests" } else { "trace" }.to_string(),
        clock_stood_still: false,
        skipped_lines: 0,
        skipped_examples: Vec::new(),
        settings: crate::replay::Settings::of(rc),
        request_interval_ns: cfg.request_interval_ns,
        results: Vec::new(),
    };
    let dev_blocks = cfg.dev.size.blocks(fp);
    for ram in rams {
        let ram_blocks = match ram.size {
            CacheSize::Blocks(0) => 0,
            s => s.blocks(fp),
        };
        let mut run = build(rc, cfg, ram, ram_blocks, dev_blocks)?;
        let mut reader = open()?;
        let mut filter = Filter::new(rc);
        let mut raw = Vec::new();
        let (mut requests, mut accesses) = (0u64, 0u64);
        let (mut first_time, mut last_time) = (None::<u64>, 0u64);
        let mut prev_now = None::<u64>;
        let mut warmup = rc.warmup.requests().unwrap_or(u64::MAX);
        let mut trace_start = None::<u64>;
        loop {
            if reader.read_batch(&mut raw, 1 << 15)? == 0 {
                break;
            }
            let names = reader.volumes();
            for t in &raw {
                let Some(b) = filter.convert(t, names).map_err(|e| *e)? else { continue };
                if let Some(span) = span.filter(|_| warmup == u64::MAX) {
                    let t0 = *trace_start.get_or_insert(t.time_ns);
                    if t.time_ns.saturating_sub(t0) >= span {
                        warmup = requests;
                    }
                }
                if warmup > 0 && requests == warmup {
                    run.reset();
                }
                let now = match cfg.request_interval_ns {
                    Some(ns) => requests.saturating_mul(ns),
                    None => {
                        let f = *first_time.get_or_insert(t.time_ns);
                        last_time = last_time.max(t.time_ns.saturating_sub(f));
                        last_time
                    }
                };
                let idle = prev_now.map_or(0, |p| now.saturating_sub(p));
                prev_now = Some(now);
                run.clean(now, idle);
                run.request(&b, t.offset, t.len);
                requests += 1;
                accesses += u64::from(b.n);
                let counted = requests.saturating_sub(warmup.min(requests));
                if requests > warmup {
                    run.sample(counted, now, cfg.dirty_every);
                }
            }
        }
        if let Some(asked) = &rc.volumes {
            if !filter.volume_matched() && filter.seen() > 0 {
                return Err(ReplayError::NoSuchVolume { asked: asked.clone(), have: reader.volumes().to_vec() });
            }
        }
        if requests == 0 {
            let filtered = rc.reads_only || rc.volumes.is_some();
            return Err(ReplayError::Empty(if filtered { " left after the filters" } else { "" }));
        }
        report.clock_stood_still |= cfg.request_interval_ns.is_none()
            && last_time == 0
            && !matches!(cfg.dev.cleaner, CleanerSpec::None | CleanerSpec::Watermark { .. });
        report.requests = requests;
        report.block_accesses = accesses;
        if warmup >= requests && warmup > 0 {
            // The warm-up outlasted the trace: nothing counts.
            run.reset();
        }
        report.warmup_requests = warmup.min(requests);
        let skipped = reader.skipped();
        report.skipped_lines = skipped.count;
        report.skipped_examples = skipped.examples.clone();
        report.results.push(run.finish((ram_blocks > 0).then_some((ram, ram_blocks)), &cfg.dev, dev_blocks));
    }
    Ok(report)
}

fn footprint(
    open: &dyn Fn() -> Result<Box<dyn TraceReader>, TraceError>,
    rc: &ReplayConfig,
) -> Result<u64, ReplayError> {
    let mut reader = open()?;
    let mut filter = Filter::new(rc);
    let mut raw = Vec::new();
    let mut seen: HashSet<u64> = HashSet::new();
    while reader.read_batch(&mut raw, 1 << 15)? > 0 {
        let names = reader.volumes();
        for t in &raw {
            if let Some(b) = filter.convert(t, names).map_err(|e| *e)? {
                seen.extend((0..u64::from(b.n)).map(|i| b.first.raw() + i));
            }
        }
    }
    if seen.is_empty() {
        if let Some(asked) = &rc.volumes {
            if filter.seen() > 0 {
                return Err(ReplayError::NoSuchVolume { asked: asked.clone(), have: reader.volumes().to_vec() });
            }
        }
        let filtered = rc.reads_only || rc.volumes.is_some();
        return Err(ReplayError::Empty(if filtered { " left after the filters" } else { "" }));
    }
    Ok(seen.len() as u64)
}

fn build(
    rc: &ReplayConfig,
    cfg: &TierReplayConfig,
    ram: &RamSpec,
    ram_blocks: u64,
    dev_blocks: u64,
) -> Result<Run, ReplayError> {
    let bs = rc.block_size;
    let dev = &cfg.dev;
    let dev_cc = cache_config(&dev.policy, bs, dev_blocks)?.with_associativity(dev.associativity);
    let lc = level_config(dev_cc, dev);
    let policy = dev_cc.build_policy(&dev.policy, rc.preset)?;
    let dev_level = CacheLevel::new(lc, policy, None);
    let ram_level = if ram_blocks == 0 {
        None
    } else {
        let ram_cc = cache_config(&ram.policy, bs, ram_blocks)?.with_associativity(rc.associativity);
        let mut lc = LevelConfig::new(ram_cc);
        lc.admission = rc.admission;
        lc.sequential_cutoff = rc.sequential_cutoff;
        let prefetcher = match rc.prefetch.kind {
            PrefetcherKind::NoPrefetch => None,
            _ => Some(rc.prefetch.build(bs)?),
        };
        Some(CacheLevel::new(lc, ram_cc.build_policy(&ram.policy, rc.preset)?, prefetcher))
    };
    Ok(Run {
        ram: ram_level,
        ram_plan: StepPlan::default(),
        dev: dev_level,
        plan: StepPlan::default(),
        mode: dev.mode,
        cleaner: dev.cleaner.build(),
        clean_run: dev.clean_run_blocks.max(1),
        block_size: bs,
        c: DevCounters::default(),
        client_write_bytes: 0,
        dirty: DirtySampler::default(),
        runs: Vec::new(),
        reads: Vec::new(),
        read_runs: Vec::new(),
        dev_keys: Vec::new(),
        in_flight: Vec::new(),
        origin_runs: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::VecReader;
    use blockwell_trace::Request;

    const BS: u64 = 4096;

    fn req(i: u64, op: Op, block: u64, n: u64) -> Request {
        Request { time_ns: i * 1_000_000, volume: 0, op, offset: block * BS, len: n * BS, digest: None }
    }

    fn cfg(mode: DevMode, dev_blocks: u64, cleaner: &str) -> TierReplayConfig {
        TierReplayConfig {
            replay: ReplayConfig { threads: 1, ..ReplayConfig::default() },
            dev: DevSpec::lru(mode, dev_blocks, cleaner.parse().unwrap()),
            request_interval_ns: None,
            dirty_every: 1,
        }
    }

    fn run(reqs: Vec<Request>, rams: &[RamSpec], c: &TierReplayConfig) -> TierReport {
        let open = || Ok(Box::new(VecReader::new(reqs.clone())) as Box<dyn TraceReader>);
        replay_tier(&open, rams, c).unwrap()
    }

    fn no_ram() -> Vec<RamSpec> {
        vec![RamSpec { policy: "lru".parse().unwrap(), size: CacheSize::Blocks(0) }]
    }

    /// Ten blocks overwritten 100 times each.
    fn overwrites() -> Vec<Request> {
        (0..1000).map(|i| req(i, Op::Write, i % 10, 1)).collect()
    }

    #[test]
    fn write_back_absorbs_overwrites_write_through_does_not() {
        let wb = run(overwrites(), &no_ram(), &cfg(DevMode::WriteBack, 100, "none"));
        let r = &wb.results[0];
        assert_eq!(r.client_write_bytes, 1000 * BS);
        assert_eq!(r.tier.origin_write_bytes, 0);
        assert_eq!(r.write_reduction, Some(1.0));
        assert_eq!(r.dirty.final_blocks, 10);
        assert_eq!(r.dirty.max_blocks, 10);
        assert_eq!(r.tier.write_misses, 10);
        assert_eq!(r.tier.write_hits, 990);
        assert_eq!(r.tier.dirty_write_hits, 990, "every hit was on a dirty block");
        assert_eq!(r.tier.dev_write_blocks, 1000);
        assert_eq!(r.dirty.series.len(), 1000);
        assert_eq!(r.dirty.series[4].dirty_blocks, 5);

        let wt = run(overwrites(), &no_ram(), &cfg(DevMode::WriteThrough, 100, "none"));
        let r = &wt.results[0];
        assert_eq!(r.tier.origin_write_bytes, 1000 * BS);
        assert_eq!(r.tier.origin_writes, 1000);
        assert_eq!(r.write_reduction, Some(0.0));
        assert_eq!(r.dirty.max_blocks, 0);
        assert_eq!(r.tier.write_hits, 990, "write-through keeps the copies current");

        let wa = run(overwrites(), &no_ram(), &cfg(DevMode::WriteAround, 100, "none"));
        let r = &wa.results[0];
        assert_eq!(r.tier.origin_write_bytes, 1000 * BS);
        assert_eq!(r.tier.dev_write_blocks, 0);
        assert_eq!(r.dev.invalidations, 0, "nothing was cached to drop");
    }

    #[test]
    fn evicted_dirty_blocks_are_written_back_in_runs() {
        // Eight consecutive blocks written into a 4-block device: the first four are evicted dirty.
        let reqs: Vec<Request> = (0..8).map(|i| req(i, Op::Write, i, 1)).collect();
        let r = &run(reqs, &no_ram(), &cfg(DevMode::WriteBack, 4, "none")).results[0];
        assert_eq!(r.tier.dirty_evictions, 4);
        assert_eq!(r.tier.cleaned_blocks, 4);
        assert_eq!(r.tier.origin_write_bytes, 4 * BS);
        assert_eq!(r.tier.demotions, 0);
        assert_eq!(r.dirty.final_blocks, 4);
        // A read of an evicted block comes from the origin and is promoted clean.
        let mut reqs: Vec<Request> = (0..8).map(|i| req(i, Op::Write, i, 1)).collect();
        reqs.push(req(8, Op::Read, 0, 1));
        let r = &run(reqs, &no_ram(), &cfg(DevMode::WriteBack, 4, "none")).results[0];
        assert_eq!((r.tier.read_misses, r.tier.promotions, r.tier.origin_reads), (1, 1, 1));
        assert_eq!(r.tier.dirty_evictions, 5, "the promotion evicted one more dirty block");
        assert_eq!(r.dirty.final_blocks, 3);
    }

    #[test]
    fn the_watermark_cleaner_cleans_from_high_to_low_in_origin_order() {
        // 100 blocks written backwards into a 100-block device: the cleaner starts at 30 dirty.
        let reqs: Vec<Request> = (0..100).map(|i| req(i, Op::Write, 99 - i, 1)).collect();
        let r = &run(reqs, &no_ram(), &cfg(DevMode::WriteBack, 100, "watermark(high=30,low=10)")).results[0];
        assert!(r.dirty.max_blocks <= 30, "{:?}", r.dirty.max_blocks);
        assert!(r.tier.cleaned_blocks >= 60, "{}", r.tier.cleaned_blocks);
        assert_eq!(r.dev.cleaned, r.tier.cleaned_blocks, "no dirty eviction");
        // The first pass, at 30 dirty, writes the 20 lowest dirty blocks (70..90) as one request; from then on
        // each write that lifts the dirty share above the low mark is cleaned at once, one block a pass.
        assert_eq!(r.dirty.series[28].dirty_blocks, 29);
        assert_eq!(r.dirty.series[29].dirty_blocks, 30, "sampled after the request, before the next pass");
        assert_eq!(r.dirty.series[30].dirty_blocks, 11);
        assert_eq!(r.tier.clean_writes, 1 + (r.tier.cleaned_blocks - 20), "{:?}", r.tier);
        assert_eq!(r.tier.origin_write_bytes, r.tier.cleaned_blocks * BS);
        assert_eq!(r.dirty.final_blocks + r.tier.cleaned_blocks, 100);
    }

    #[test]
    fn the_pi_cleaner_follows_the_clock_and_idle_time_cleans_all() {
        let mut reqs: Vec<Request> = (0..200).map(|i| req(i, Op::Write, i, 1)).collect();
        // A minute of silence, then one more request: the idle cleaner takes everything.
        reqs.push(Request { time_ns: 260_000_000_000, ..req(0, Op::Read, 500, 1) });
        let c = cfg(DevMode::WriteBack, 1000, "pi(percent=10)");
        let r = &run(reqs.clone(), &no_ram(), &c).results[0];
        assert_eq!(r.dirty.final_blocks, 0, "{:?}", r.dirty);
        assert_eq!(r.dirty.max_blocks, 200);
        // Without time stamps the clock stands still and the report says so.
        let still: Vec<Request> = reqs.iter().map(|r| Request { time_ns: 0, ..*r }).collect();
        let rep = run(still.clone(), &no_ram(), &c);
        assert!(rep.clock_stood_still);
        assert_eq!(rep.results[0].dirty.final_blocks, 200);
        // A request clock instead: 201 requests at 1 s each is enough for the minimum rate to clean some.
        let rep = run(still, &no_ram(), &TierReplayConfig { request_interval_ns: Some(1_000_000_000), ..c });
        assert!(!rep.clock_stood_still);
        assert_eq!(rep.clock, "requests");
        assert!(rep.results[0].tier.cleaned_blocks > 0);
    }

    #[test]
    fn a_ram_level_above_takes_the_hits_and_writes_through() {
        let mut reqs: Vec<Request> = Vec::new();
        for i in 0..400 {
            reqs.push(req(i, if i % 4 == 0 { Op::Write } else { Op::Read }, i % 20, 2));
        }
        let rams = vec![
            RamSpec { policy: "lru".parse().unwrap(), size: CacheSize::Blocks(0) },
            RamSpec { policy: "lru".parse().unwrap(), size: CacheSize::Blocks(64) },
        ];
        let rep = run(reqs, &rams, &cfg(DevMode::WriteBack, 100, "none"));
        let (alone, two) = (&rep.results[0], &rep.results[1]);
        assert!(alone.ram.is_none());
        let ram = two.ram.expect("a RAM level");
        assert_eq!(ram.read.requests, 300);
        assert_eq!(two.tier.write_requests, 100, "every write reaches the device level");
        assert_eq!(two.tier.read_requests, ram.read.requests - ram.read.request_hits);
        assert!(two.tier.read_requests < alone.tier.read_requests);
        assert_eq!(alone.tier.read_requests, 300);
        // The device holds the same dirty data either way.
        assert_eq!(two.dirty.final_blocks, alone.dirty.final_blocks);
    }

    #[test]
    fn the_same_trace_gives_the_same_report() {
        let mut x = 7u64;
        let reqs: Vec<Request> = (0..5000)
            .map(|i| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                req(i, if x >> 62 == 0 { Op::Write } else { Op::Read }, (x >> 20) % 3000, 1 + (x >> 50) % 4)
            })
            .collect();
        let c = cfg(DevMode::WriteBack, 500, "pi(percent=10,update_ms=100)");
        let a = run(reqs.clone(), &no_ram(), &c);
        let b = run(reqs, &no_ram(), &c);
        assert_eq!(a, b);
        let r = &a.results[0];
        assert_eq!(r.tier.read_hits + r.tier.read_misses, r.dev.read.blocks);
        assert!(r.tier.cleaned_blocks > 0 && r.tier.dirty_evictions > 0);
    }
}
