//! One pass over a trace feeds every (policy × size) cache, spread over threads.
//!
//! The reading thread turns requests into compact block requests and hands batches (shared, read-only) to
//! worker threads; each worker owns some caches and runs every batch through each of them with the policy's
//! concrete type (static dispatch in the per-block loop). Results do not depend on the number of threads.
//!
//! A pre-pass runs first when a cache size is a percentage of the footprint or when OPT is asked for: it
//! counts distinct blocks and, for OPT, computes each block access's next-use time with a reverse pass (the
//! reader is opened a second time for the replay).

use blockwell_core::admission::AdmissionSpec;
use blockwell_core::cache::{BlockCache, CacheConfig, CacheError, Plan};
use blockwell_core::key::{block_span, BlockKey};
use blockwell_core::level::{self, CacheLevel, LevelConfig, StepPlan};
use blockwell_core::policy::setassoc::SetAssoc;
use blockwell_core::policy::{DynPolicy, Policy, PolicyError, PolicySpec, PolicyVisitor, Preset, NEVER};
use blockwell_core::prefetch::{PrefetchError, PrefetcherKind, PrefetcherSpec};
use blockwell_core::stats::OpStats;
use blockwell_core::{Op, Stats};
use blockwell_trace::{Request, TraceError, TraceReader};
use serde::Serialize;
use std::collections::{HashMap, HashSet};
use std::num::NonZeroUsize;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;

/// How to replay.
#[derive(Clone, Debug)]
pub struct ReplayConfig {
    pub block_size: u64,
    pub preset: Preset,
    /// Ignore write requests entirely.
    pub reads_only: bool,
    /// Keep only these volumes (by name, as the trace names them); `None` keeps all.
    pub volumes: Option<Vec<String>>,
    /// What is replayed before the counters start (the cache is warm, the counts are zero): a number of requests,
    /// or the requests (after the filters) until the first one whose time stamp is at least the first request's
    /// plus a span. A warm-up as long as the trace counts nothing.
    pub warmup: Warmup,
    /// Worker threads (0 = one per core).
    pub threads: usize,
    /// The prefetcher of every cache (prefetched blocks enter through the policy's prefetch path; reads complete
    /// at once, so a prefetch is never late).
    pub prefetch: PrefetcherSpec,
    /// Which missed blocks enter the caches.
    pub admission: AdmissionSpec,
    /// Back-to-back runs of at least this many bytes bypass the caches; 0 turns it off.
    pub sequential_cutoff: u64,
    /// Blocks per set of every cache (set-associative, [`blockwell_core::policy::setassoc`]); `None`: fully
    /// associative.
    pub associativity: Option<NonZeroUsize>,
    /// SHARDS spatial sampling (Waldspurger et al., FAST'15): keep only the blocks whose sampling hash
    /// ([`crate::mrc::sample_hash`]) falls below this rate, each as a one-block request, for miniature
    /// simulation (caches scaled by the same rate; ATC'17). Block counts and ratios keep their meaning,
    /// request-level ones do not. `None`: every block.
    pub sample: Option<f64>,
    /// Report every cache's counters per interval of this many requests (after warm-up, the last interval
    /// possibly shorter: [`CacheResult::intervals`]); 0 turns it off.
    pub interval: u64,
}

impl Default for ReplayConfig {
    fn default() -> Self {
        ReplayConfig {
            block_size: 4096,
            preset: Preset::Default,
            reads_only: false,
            volumes: None,
            warmup: Warmup::Requests(0),
            threads: 0,
            prefetch: PrefetcherSpec::new(PrefetcherKind::NoPrefetch),
            admission: AdmissionSpec::Always,
            sequential_cutoff: 0,
            associativity: None,
            interval: 0,
            sample: None,
        }
    }
}

/// How long the caches warm before counting starts: a number of requests (`10000`, `1M`: k, M, G) or a span of
/// trace time (`30s`, `500ms`, `2min`, `1h`, `250us`, `100ns`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Warmup {
    Requests(u64),
    Nanos(u64),
}

impl Warmup {
    pub fn parse(s: &str) -> Result<Warmup, String> {
        let t = s.trim();
        let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let v: f64 = num.parse().map_err(|_| format!("'{s}' is not a request count or a time span (30s, 5min)"))?;
        let (mult, time) = match unit.trim() {
            "" => (1.0, false),
            "k" | "K" => (1e3, false),
            "M" => (1e6, false),
            "G" => (1e9, false),
            "ns" => (1.0, true),
            "us" | "µs" => (1e3, true),
            "ms" => (1e6, true),
            "s" => (1e9, true),
            "min" => (60e9, true),
            "h" => (3600e9, true),
            u => return Err(format!("'{s}': unknown unit '{u}' (requests: k, M, G; time: ns, us, ms, s, min, h)")),
        };
        let x = v * mult;
        if !x.is_finite() || x > u64::MAX as f64 / 2.0 {
            return Err(format!("'{s}' is out of range"));
        }
        let x = x.round() as u64;
        Ok(if time { Warmup::Nanos(x) } else { Warmup::Requests(x) })
    }

    /// The warm-up's length in requests, known before the replay (`None` for a span of time).
    pub fn requests(self) -> Option<u64> {
        match self {
            Warmup::Requests(n) => Some(n),
            Warmup::Nanos(_) => None,
        }
    }
}

impl std::str::FromStr for Warmup {
    type Err = String;
    fn from_str(s: &str) -> Result<Warmup, String> {
        Warmup::parse(s)
    }
}

/// One cache to simulate: a policy and a size.
#[derive(Clone, Debug)]
pub struct CacheSpec {
    pub policy: PolicySpec,
    pub size: CacheSize,
}

/// A cache size: absolute, or relative to the footprint (which needs a pre-pass).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CacheSize {
    Blocks(u64),
    /// Percent of the distinct blocks the (filtered) trace touches; rounded down, at least one block.
    PercentOfFootprint(f64),
}

impl CacheSize {
    pub fn blocks(self, footprint: u64) -> u64 {
        match self {
            CacheSize::Blocks(b) => b,
            CacheSize::PercentOfFootprint(p) => ((footprint as f64 * p / 100.0 + 1e-9).floor() as u64).max(1),
        }
    }
}

/// Errors of a replay.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error("{policy} at {blocks} blocks: {source}")]
    Cache { policy: String, blocks: u64, source: CacheError },
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error(transparent)]
    Prefetch(#[from] PrefetchError),
    #[error("the trace has no requests{0}")]
    Empty(&'static str),
    #[error("request {index}: {message}")]
    Request { index: u64, message: String },
    #[error("no cache to simulate (give at least one policy and one size)")]
    NoCaches,
    #[error("sampling rate {0} is not in (0, 1]")]
    SampleRate(f64),
    /// The volume filter kept nothing: no volume of the trace has any of the names asked for.
    #[error("no volume named {} in the trace; its volumes: {}", .asked.join(", "), list_names(.have))]
    NoSuchVolume { asked: Vec<String>, have: Vec<String> },
}

/// Names for a message: all of them, or the first 20 and how many there are.
fn list_names(names: &[String]) -> String {
    const SHOWN: usize = 20;
    if names.len() <= SHOWN {
        names.join(", ")
    } else {
        format!("{}, … ({} in all)", names[..SHOWN].join(", "), names.len())
    }
}

/// The result for one cache.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CacheResult {
    pub policy: String,
    pub config: serde_json::Value,
    pub cache_blocks: u64,
    pub cache_bytes: u64,
    /// Blocks per set asked for (`None`: fully associative).
    pub associativity: Option<usize>,
    /// Sets the cache had: 1 when fully associative (no associativity, or ways >= blocks).
    pub sets: u64,
    pub stats: Stats,
    /// With [`ReplayConfig::interval`]: the counters of each interval, in trace order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<Interval>,
}

/// The counters of one interval of requests ([`ReplayConfig::interval`]).
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Interval {
    /// Requests replayed (after filters, warm-up included) when the interval ended.
    pub end_request: u64,
    pub read: OpStats,
    pub write: OpStats,
}

impl Interval {
    fn between(end_request: u64, from: &Stats, to: &Stats) -> Interval {
        let d = |a: OpStats, b: OpStats| OpStats {
            requests: b.requests - a.requests,
            request_hits: b.request_hits - a.request_hits,
            blocks: b.blocks - a.blocks,
            block_hits: b.block_hits - a.block_hits,
        };
        Interval { end_request, read: d(from.read, to.read), write: d(from.write, to.write) }
    }

    /// Read and write counters together.
    pub fn total(&self) -> OpStats {
        let mut t = self.read;
        t += self.write;
        t
    }
}

/// The intervals of one cache from its counters at each interval's end (`snaps`, the `k`-th at request
/// `warmup + k·interval`) and at the end of the trace (`last`, after `requests`).
fn intervals(snaps: &[Stats], last: &Stats, warmup: u64, interval: u64, requests: u64) -> Vec<Interval> {
    let mut out = Vec::with_capacity(snaps.len() + 1);
    let mut prev = Stats::default();
    for (k, s) in snaps.iter().enumerate() {
        out.push(Interval::between(warmup + (k as u64 + 1) * interval, &prev, s));
        prev = *s;
    }
    let end = warmup + snaps.len() as u64 * interval;
    if requests > end {
        out.push(Interval::between(requests, &prev, last));
    }
    out
}

/// Everything a replay measured.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ReplayReport {
    pub block_size: u64,
    pub preset: String,
    /// Requests replayed (after filters, including warm-up).
    pub requests: u64,
    /// Block accesses replayed (after filters, including warm-up).
    pub block_accesses: u64,
    /// Distinct blocks, when a pre-pass ran.
    pub footprint_blocks: Option<u64>,
    /// With [`ReplayConfig::sample`]: the block accesses the trace had after the filters, before sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unsampled_block_accesses: Option<u64>,
    pub warmup_requests: u64,
    pub skipped_lines: u64,
    /// The first few skipped lines' messages (`file:line: expected …, found …`).
    pub skipped_examples: Vec<String>,
    /// The settings the replay ran with (every row of the report's CSV and JSON carries them:
    /// [`crate::rows`]).
    pub settings: Settings,
    pub results: Vec<CacheResult>,
}

/// What decides a replay's numbers besides the trace and the cache (policy, size, associativity): the settings
/// every result row carries, so that rows of runs that differ only in a setting can be told apart.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Settings {
    pub block_size: u64,
    pub preset: String,
    /// The prefetcher's spec (`none` without one).
    pub prefetch: String,
    /// The admission spec (`always`: every missed block enters).
    pub admission: String,
    /// Bytes (0: off).
    pub sequential_cutoff: u64,
    pub reads_only: bool,
    /// The warm-up: a number of requests (`0`: none) or a span of trace time in nanoseconds (`30000000000ns`).
    pub warmup: String,
    /// The volumes simulated, comma separated (`None`: all).
    pub volumes: Option<String>,
    /// The SHARDS sampling rate (`None`: every block).
    pub sample: Option<f64>,
}

impl Settings {
    /// The settings of `cfg`.
    pub fn of(cfg: &ReplayConfig) -> Settings {
        Settings {
            block_size: cfg.block_size,
            preset: cfg.preset.name().to_string(),
            prefetch: cfg.prefetch.label().to_string(),
            admission: cfg.admission.to_string(),
            sequential_cutoff: cfg.sequential_cutoff,
            reads_only: cfg.reads_only,
            warmup: match cfg.warmup {
                Warmup::Requests(n) => n.to_string(),
                Warmup::Nanos(ns) => format!("{ns}ns"),
            },
            volumes: cfg.volumes.as_ref().map(|v| v.join(",")),
            sample: cfg.sample,
        }
    }
}

/// A request reduced to what the caches need.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockReq {
    pub(crate) first: BlockKey,
    pub(crate) n: u32,
    pub(crate) op: Op,
}

struct Batch {
    /// Index (in filtered requests) of the first request.
    start: u64,
    reqs: Vec<BlockReq>,
    /// Next-use time of every block access of the batch, in order, when OPT needs it.
    next_use: Vec<u64>,
    /// An interval ends with this batch: runners keep their counters.
    snapshot: bool,
    /// Warm-up ends where this batch starts: runners zero their counters first.
    reset: bool,
}

/// Where the requests `start..start + len` are cut into batches: the ends of the pieces, each with whether an
/// interval ends there. Intervals of `interval` requests start after `warmup`; the warm-up point is a cut too, so
/// that counters reset at a batch's first request.
fn cuts(start: u64, len: usize, warmup: u64, interval: u64) -> Vec<(usize, bool)> {
    let end = start + len as u64;
    let mut out = Vec::new();
    if warmup > start && warmup <= end {
        out.push(((warmup - start) as usize, false));
    }
    if let Some(k) = (start.max(warmup) - warmup).checked_div(interval) {
        // Interval ends are warmup + k·interval (k >= 1); those in start+1..=end fall in this batch.
        let mut b = warmup.saturating_add((k + 1).saturating_mul(interval));
        while b <= end {
            out.push(((b - start) as usize, true));
            b = b.saturating_add(interval);
        }
    }
    if out.last().map_or(true, |&(e, _)| e < len) {
        out.push((len, false));
    }
    out
}

/// Turns trace requests into block requests, applying the filters.
pub(crate) struct Filter {
    block_size: u64,
    reads_only: bool,
    volumes: Option<HashSet<String>>,
    keep: Vec<Option<bool>>,
    /// Whether any request was on a volume the filter keeps.
    volume_matched: bool,
    index: u64,
}

impl Filter {
    pub(crate) fn new(cfg: &ReplayConfig) -> Self {
        Filter {
            block_size: cfg.block_size,
            reads_only: cfg.reads_only,
            volumes: cfg.volumes.as_ref().map(|v| v.iter().cloned().collect()),
            keep: Vec::new(),
            volume_matched: false,
            index: 0,
        }
    }

    /// `Ok(None)` when the request is filtered out. (The error is boxed: a small `Result` is returned in
    /// registers, on every request of a replay.)
    #[inline(always)]
    pub(crate) fn convert(&mut self, r: &Request, names: &[String]) -> Result<Option<BlockReq>, Box<ReplayError>> {
        self.index += 1;
        if self.reads_only && r.op == Op::Write {
            return Ok(None);
        }
        if let Some(set) = &self.volumes {
            let v = r.volume as usize;
            if self.keep.len() <= v {
                self.keep.resize(v + 1, None);
            }
            let keep = *self.keep[v].get_or_insert_with(|| names.get(v).is_some_and(|n| set.contains(n)));
            if !keep {
                return Ok(None);
            }
            self.volume_matched = true;
        }
        let (first, n) = block_span(r.offset, r.len, self.block_size);
        if n == 0 {
            return Ok(None);
        }
        // The last block in range implies the first is (keys of one volume are consecutive).
        match BlockKey::new(r.volume, first + (n - 1)) {
            Some(last) if n <= u32::MAX as u64 => {
                Ok(Some(BlockReq { first: BlockKey::from_raw(last.raw() - (n - 1)), n: n as u32, op: r.op }))
            }
            _ => Err(bad_request(self.index, r, n)),
        }
    }

    /// Whether any request was on a volume the filter keeps.
    pub(crate) fn volume_matched(&self) -> bool {
        self.volume_matched
    }

    /// Requests seen (kept or not).
    pub(crate) fn seen(&self) -> u64 {
        self.index
    }
}

const BATCH: usize = 1 << 15;

/// Reads the whole (filtered) trace, calling `f` on each batch of block requests. Returns the skipped
/// malformed lines.
///
/// `f` gets each batch of block requests and, with a warm-up by time ([`Warmup::Nanos`]), the index (among the
/// requests kept) of the request that ends it, in the batch where it is found.
fn scan(
    reader: &mut dyn TraceReader,
    cfg: &ReplayConfig,
    progress: &(dyn Fn(u64) + Sync),
    mut f: impl FnMut(Vec<BlockReq>, Option<u64>) -> Result<(), ReplayError>,
) -> Result<Scanned, ReplayError> {
    let mut all_blocks = 0u64;
    let mut filter = Filter::new(cfg);
    let mut raw = Vec::with_capacity(BATCH);
    let mut kept = 0u64;
    // The first kept request's time, until warm-up by time has ended.
    let mut first_time: Option<u64> = None;
    let span = match cfg.warmup {
        Warmup::Nanos(ns) if ns > 0 => ns,
        _ => 0,
    };
    let mut timing = span > 0;
    // SHARDS: a block is kept when its 32-bit sampling hash is below rate · 2^32.
    let threshold = cfg.sample.map(|r| (r * 4_294_967_296.0) as u64);
    if reader.unit_size() == Some(cfg.block_size) && cfg.volumes.is_none() && threshold.is_none() && !timing {
        // Reads of one block each (oracleGeneral at its object size), nothing to filter, sample or time: the
        // requests are block requests already.
        return scan_units(reader, cfg.block_size, progress, f);
    }
    loop {
        let n = reader.read_batch(&mut raw, BATCH)?;
        if n == 0 {
            break;
        }
        let mut reqs = Vec::with_capacity(n);
        let mut warm_end = None;
        // The volume names cannot change until the next batch is read.
        let names = reader.volumes();
        for r in &raw {
            if let Some(b) = filter.convert(r, names).map_err(|e| *e)? {
                if timing {
                    let t0 = *first_time.get_or_insert(r.time_ns);
                    if r.time_ns.saturating_sub(t0) >= span {
                        warm_end = Some(kept);
                        timing = false;
                    }
                }
                all_blocks += u64::from(b.n);
                match threshold {
                    None => {
                        kept += 1;
                        reqs.push(b);
                    }
                    Some(t) => {
                        for k in b.first.raw()..b.first.raw() + u64::from(b.n) {
                            if u64::from(crate::mrc::sample_hash(k)) < t {
                                kept += 1;
                                reqs.push(BlockReq { first: BlockKey::from_raw(k), n: 1, op: b.op });
                            }
                        }
                    }
                }
            }
        }
        progress(reader.bytes_read());
        if !reqs.is_empty() {
            f(reqs, warm_end)?;
        }
    }
    if let Some(asked) = &cfg.volumes {
        // (An empty trace is reported as empty.)
        if !filter.volume_matched && filter.index > 0 {
            return Err(ReplayError::NoSuchVolume { asked: asked.clone(), have: reader.volumes().to_vec() });
        }
    }
    Ok(Scanned { skipped: reader.skipped().clone(), all_blocks })
}

/// Request `index` (1-based), of `n` blocks, cannot be replayed.
#[cold]
fn bad_request(index: u64, r: &Request, n: u64) -> Box<ReplayError> {
    let message = if n > u32::MAX as u64 {
        format!("length {} is absurd", r.len)
    } else {
        format!("volume {} offset {} is beyond the addressable range", r.volume, r.offset)
    };
    Box::new(ReplayError::Request { index, message })
}

/// [`scan`] of a trace of one-block reads ([`TraceReader::unit_size`] equal to the block size), with no volume
/// filter, sampling or warm-up by time.
fn scan_units(
    reader: &mut dyn TraceReader,
    block_size: u64,
    progress: &(dyn Fn(u64) + Sync),
    mut f: impl FnMut(Vec<BlockReq>, Option<u64>) -> Result<(), ReplayError>,
) -> Result<Scanned, ReplayError> {
    let mut units = Vec::with_capacity(BATCH);
    let (mut seen, mut all_blocks) = (0u64, 0u64);
    loop {
        let n = reader.read_units(&mut units, BATCH)?;
        if n == 0 {
            break;
        }
        let mut reqs = Vec::with_capacity(n);
        for (i, u) in units.iter().enumerate() {
            let Some(first) = BlockKey::new(u.volume, u.unit) else {
                let r = Request {
                    volume: u.volume,
                    offset: u.unit.wrapping_mul(block_size),
                    len: block_size,
                    ..Request::default()
                };
                return Err(*bad_request(seen + i as u64 + 1, &r, 1));
            };
            reqs.push(BlockReq { first, n: 1, op: Op::Read });
        }
        seen += n as u64;
        all_blocks += n as u64;
        progress(reader.bytes_read());
        f(reqs, None)?;
    }
    Ok(Scanned { skipped: reader.skipped().clone(), all_blocks })
}

/// What a scan saw besides its batches.
struct Scanned {
    skipped: blockwell_trace::BadLines,
    /// Block accesses after the filters, before sampling.
    all_blocks: u64,
}

/// The pre-pass: footprint and, if asked, next-use times of every block access.
struct PrePass {
    footprint: u64,
    next_use: Option<Vec<u64>>,
}

fn pre_pass(
    reader: &mut dyn TraceReader,
    cfg: &ReplayConfig,
    want_next_use: bool,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<PrePass, ReplayError> {
    let mut seen: HashSet<u64> = HashSet::new();
    let mut keys: Vec<u64> = Vec::new();
    scan(reader, cfg, progress, |reqs, _| {
        for r in reqs {
            for i in 0..r.n as u64 {
                let k = r.first.raw() + i;
                seen.insert(k);
                if want_next_use {
                    keys.push(k);
                }
            }
        }
        Ok(())
    })?;
    let footprint = seen.len() as u64;
    drop(seen);
    let next_use = want_next_use.then(|| {
        let mut next = vec![NEVER; keys.len()];
        let mut last: HashMap<u64, u64> = HashMap::with_capacity(footprint as usize);
        for i in (0..keys.len()).rev() {
            if let Some(j) = last.insert(keys[i], i as u64) {
                next[i] = j;
            }
        }
        next
    });
    Ok(PrePass { footprint, next_use })
}

/// A cache being simulated, behind an object-safe face so that one worker can hold several policy types.
trait Runner: Send {
    fn run(&mut self, batch: &Batch);
    /// The counters so far.
    fn stats(&self) -> Stats;
    fn finish(self: Box<Self>) -> (Stats, usize);
}

/// A cache with no prefetcher, admission or cutoff: a request is the policy's own step, on the concrete type, so
/// the policy's code inlines into this loop (kept apart from [`LevelCache`] so that nothing else shares the
/// loop's inlining budget).
/// How many requests ahead the replay hints a policy that takes hints ([`Policy::hint`]).
const HINT_AHEAD: usize = 16;

struct PlainCache<P: Policy> {
    cache: BlockCache<P>,
    plan: Plan,
    validate: bool,
}

impl<P: Policy> Runner for PlainCache<P> {
    fn run(&mut self, batch: &Batch) {
        let mut at = 0usize;
        let with_next = !batch.next_use.is_empty();
        if batch.reset {
            self.cache.reset_stats();
        }
        for (i, r) in batch.reqs.iter().enumerate() {
            if P::HINTS {
                if let Some(ahead) = batch.reqs.get(i + HINT_AHEAD) {
                    self.cache.policy().hint(ahead.first);
                }
            }
            let n = r.n as usize;
            let nu = if with_next { &batch.next_use[at..at + n] } else { &[][..] };
            self.cache.access_blocks_static(r.op, r.first, n as u64, nu, &mut self.plan);
            at += n;
            if self.validate {
                if let Err(e) = self.cache.policy().validate() {
                    panic!("invariant broken after request {}: {e}", batch.start + i as u64);
                }
            }
        }
    }

    fn stats(&self) -> Stats {
        *self.cache.stats()
    }

    fn finish(self: Box<Self>) -> (Stats, usize) {
        (*self.cache.stats(), self.cache.policy().len())
    }
}

/// A cache with a prefetcher, admission or a cutoff: the whole cache step, through the policy's object-safe face.
struct LevelCache {
    level: CacheLevel,
    plan: StepPlan,
    validate: bool,
}

impl Runner for LevelCache {
    fn run(&mut self, batch: &Batch) {
        let mut at = 0usize;
        let with_next = !batch.next_use.is_empty();
        let bs = self.level.config().cache.block_size;
        if batch.reset {
            self.level.reset_stats();
        }
        for (i, r) in batch.reqs.iter().enumerate() {
            let n = r.n as usize;
            let nu = if with_next { &batch.next_use[at..at + n] } else { &[][..] };
            let req = level::Request { next_use: nu, ..level::Request::blocks(r.op, r.first, n as u64, bs) };
            self.level.access(&req, &mut self.plan);
            // Reads complete at once: nothing is in flight at the next request.
            self.level.complete_all();
            at += n;
            if self.validate {
                if let Err(e) = self.level.validate() {
                    panic!("invariant broken after request {}: {e}", batch.start + i as u64);
                }
            }
        }
    }

    fn stats(&self) -> Stats {
        *self.level.stats()
    }

    fn finish(self: Box<Self>) -> (Stats, usize) {
        (*self.level.stats(), self.level.policy().len())
    }
}

struct MakeRunner<'a> {
    config: LevelConfig,
    prefetch: &'a PrefetcherSpec,
    validate: bool,
}

impl MakeRunner<'_> {
    fn runner<P: Policy>(self, policy: P) -> Result<Box<dyn Runner>, PrefetchError> {
        if self.config.is_plain() && self.prefetch.kind == PrefetcherKind::NoPrefetch {
            let cache = BlockCache::new(self.config.cache, Box::new(policy));
            return Ok(Box::new(PlainCache { cache, plan: Plan::default(), validate: self.validate }));
        }
        let prefetcher = match self.prefetch.kind {
            PrefetcherKind::NoPrefetch => None,
            _ => Some(self.prefetch.build(self.config.cache.block_size)?),
        };
        let policy: Box<dyn DynPolicy> = Box::new(policy);
        let level = CacheLevel::new(self.config, policy, prefetcher);
        Ok(Box::new(LevelCache { level, plan: StepPlan::default(), validate: self.validate }))
    }
}

impl PolicyVisitor for MakeRunner<'_> {
    type Output = Result<Box<dyn Runner>, PrefetchError>;
    /// The policy on its concrete type: `P`, or `SetAssoc<P>` when the cache is split into sets.
    fn visit<P: Policy>(self, config: P::Config) -> Self::Output {
        let capacity = self.config.cache.capacity_blocks();
        match self.config.cache.split_ways() {
            None => self.runner(P::new(capacity, &config)),
            Some(ways) => self.runner(SetAssoc::<P>::with_ways(capacity, ways, &config)),
        }
    }
}

/// The configuration of a cache of `blocks` blocks under `policy`; the error names the policy and the size.
pub(crate) fn cache_config(policy: &PolicySpec, block_size: u64, blocks: u64) -> Result<CacheConfig, ReplayError> {
    CacheConfig::new(block_size, blocks.saturating_mul(block_size)).map_err(|source| ReplayError::Cache {
        policy: policy.label().to_string(),
        blocks,
        source,
    })
}

/// Options for a replay beyond the configuration.
#[derive(Default)]
pub struct ReplayHooks<'a> {
    /// Called with the compressed bytes read so far (progress bars).
    pub progress: Option<&'a (dyn Fn(u64) + Sync)>,
    /// Check every policy's invariants after every request (slow; for tests).
    pub validate: bool,
}

/// Replays the trace that `open` opens through every cache in `caches`.
///
/// `open` is called once, or twice when a pre-pass is needed (a size in % of the footprint, or OPT).
pub fn replay(
    open: &dyn Fn() -> Result<Box<dyn TraceReader>, TraceError>,
    caches: &[CacheSpec],
    cfg: &ReplayConfig,
    hooks: ReplayHooks<'_>,
) -> Result<ReplayReport, ReplayError> {
    if caches.is_empty() {
        return Err(ReplayError::NoCaches);
    }
    if let Some(r) = cfg.sample {
        if !(r > 0.0 && r <= 1.0) {
            return Err(ReplayError::SampleRate(r));
        }
    }
    let noop = |_: u64| {};
    let progress: &(dyn Fn(u64) + Sync) = hooks.progress.unwrap_or(&noop);
    let needs_opt = caches.iter().any(|c| c.policy.kind.needs_next_use());
    let needs_footprint = caches.iter().any(|c| matches!(c.size, CacheSize::PercentOfFootprint(_)));
    let pre = if needs_opt || needs_footprint {
        let mut r = open()?;
        let p = pre_pass(r.as_mut(), cfg, needs_opt, progress)?;
        if p.footprint == 0 {
            return Err(ReplayError::Empty(if cfg.reads_only || cfg.volumes.is_some() {
                " left after the filters"
            } else {
                ""
            }));
        }
        Some(p)
    } else {
        None
    };
    let footprint = pre.as_ref().map(|p| p.footprint);

    // Build every cache (checking sizes and configurations before reading anything).
    let mut runners: Vec<Box<dyn Runner>> = Vec::with_capacity(caches.len());
    let mut meta = Vec::with_capacity(caches.len());
    for c in caches {
        let blocks = c.size.blocks(footprint.unwrap_or(0));
        let label = c.policy.label().to_string();
        let config = cache_config(&c.policy, cfg.block_size, blocks)?.with_associativity(cfg.associativity);
        if cfg.associativity.is_some() {
            c.policy.check_associativity(cfg.preset)?;
        }
        let mut level = LevelConfig::new(config);
        level.admission = cfg.admission;
        level.sequential_cutoff = cfg.sequential_cutoff;
        runners.push(
            c.policy
                .visit(cfg.preset, MakeRunner { config: level, prefetch: &cfg.prefetch, validate: hooks.validate })??,
        );
        meta.push(CacheResult {
            policy: label,
            config: c.policy.config(cfg.preset)?,
            cache_blocks: blocks,
            cache_bytes: blocks * cfg.block_size,
            associativity: cfg.associativity.map(NonZeroUsize::get),
            sets: config.sets() as u64,
            stats: Stats::default(),
            intervals: Vec::new(),
        });
    }

    let threads =
        if cfg.threads == 0 { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) } else { cfg.threads }
            .clamp(1, runners.len());

    let mut reader = open()?;
    let next_use = pre.and_then(|p| p.next_use);
    let mut requests = 0u64;
    let mut accesses = 0u64;
    // Until warm-up by time ends, where it ends is not known: no request is counted yet.
    let mut warmup = match cfg.warmup {
        Warmup::Requests(n) | Warmup::Nanos(n @ 0) => n,
        Warmup::Nanos(_) => u64::MAX,
    };
    let interval = cfg.interval;

    // Split the caches over the workers round-robin; results are put back in input order.
    let mut groups: Vec<Group> = (0..threads).map(|_| Vec::new()).collect();
    for (i, r) in runners.into_iter().enumerate() {
        groups[i % threads].push((i, r, Vec::new()));
    }

    // Batches as read, cut where warm-up or an interval ends.
    let mut make_batches = |mut reqs: Vec<BlockReq>, warmup: u64| -> Vec<Batch> {
        let pieces = cuts(requests, reqs.len(), warmup, interval);
        let mut out = Vec::with_capacity(pieces.len());
        let mut at = 0;
        for (end, snapshot) in pieces {
            let piece: Vec<BlockReq> =
                if at == 0 && end == reqs.len() { std::mem::take(&mut reqs) } else { reqs[at..end].to_vec() };
            at = end;
            let n_blocks: u64 = piece.iter().map(|r| r.n as u64).sum();
            let nu = match &next_use {
                Some(all) => all[accesses as usize..(accesses + n_blocks) as usize].to_vec(),
                None => Vec::new(),
            };
            let reset = warmup > 0 && requests == warmup;
            let b = Batch { start: requests, reqs: piece, next_use: nu, snapshot, reset };
            requests += b.reqs.len() as u64;
            accesses += n_blocks;
            out.push(b);
        }
        out
    };

    let (scanned, finished): (Scanned, Vec<Finished>) = if threads == 1 {
        let mut group = groups.pop().expect("one group");
        let skipped = scan(reader.as_mut(), cfg, progress, |reqs, warm_end| {
            warmup = warm_end.unwrap_or(warmup);
            for b in make_batches(reqs, warmup) {
                run_batch(&mut group, &b);
            }
            Ok(())
        })?;
        (skipped, finish(group))
    } else {
        std::thread::scope(|s| -> Result<_, ReplayError> {
            let mut senders = Vec::new();
            let mut handles = Vec::new();
            for group in groups {
                let (tx, rx) = sync_channel::<Arc<Batch>>(4);
                senders.push(tx);
                handles.push(s.spawn(move || worker(group, rx)));
            }
            let res = scan(reader.as_mut(), cfg, progress, |reqs, warm_end| {
                warmup = warm_end.unwrap_or(warmup);
                for b in make_batches(reqs, warmup) {
                    let b = Arc::new(b);
                    for tx in &senders {
                        // A worker only stops early by panicking; the join below reports it.
                        let _ = tx.send(b.clone());
                    }
                }
                Ok(())
            });
            drop(senders);
            let mut out = Vec::new();
            for h in handles {
                match h.join() {
                    Ok(v) => out.extend(v),
                    Err(p) => std::panic::resume_unwind(p),
                }
            }
            Ok((res?, out))
        })?
    };
    if requests == 0 {
        return Err(ReplayError::Empty(if cfg.reads_only || cfg.volumes.is_some() {
            " left after the filters"
        } else {
            ""
        }));
    }
    // A warm-up as long as the trace leaves nothing counted.
    let warmed_all = warmup >= requests;
    for (i, st, snaps) in finished {
        if warmed_all {
            continue;
        }
        if interval > 0 {
            meta[i].intervals = intervals(&snaps, &st, warmup, interval, requests);
        }
        meta[i].stats = st;
    }
    Ok(ReplayReport {
        block_size: cfg.block_size,
        preset: cfg.preset.name().to_string(),
        requests,
        block_accesses: accesses,
        footprint_blocks: footprint,
        warmup_requests: warmup.min(requests),
        unsampled_block_accesses: cfg.sample.map(|_| scanned.all_blocks),
        skipped_lines: scanned.skipped.count,
        skipped_examples: scanned.skipped.examples,
        settings: Settings::of(cfg),
        results: meta,
    })
}

/// The caches one thread runs: index in the report, the cache, its counters at each interval's end.
type Group = Vec<(usize, Box<dyn Runner>, Vec<Stats>)>;
/// A cache's index, final counters and counters at each interval's end.
type Finished = (usize, Stats, Vec<Stats>);

fn run_batch(group: &mut Group, b: &Batch) {
    for (_, r, snaps) in group.iter_mut() {
        r.run(b);
        if b.snapshot {
            snaps.push(r.stats());
        }
    }
}

fn finish(group: Group) -> Vec<Finished> {
    group.into_iter().map(|(i, r, snaps)| (i, r.finish().0, snaps)).collect()
}

fn worker(mut group: Group, rx: Receiver<Arc<Batch>>) -> Vec<Finished> {
    while let Ok(b) = rx.recv() {
        run_batch(&mut group, &b);
    }
    finish(group)
}

/// A reader over requests held in memory (tests, the built-in demo workload, generators).
pub struct VecReader {
    reqs: std::vec::IntoIter<Request>,
    volumes: Vec<String>,
    bad: blockwell_trace::BadLines,
}

impl VecReader {
    pub fn new(reqs: Vec<Request>) -> Self {
        let nvol = reqs.iter().map(|r| r.volume + 1).max().unwrap_or(1);
        VecReader {
            reqs: reqs.into_iter(),
            volumes: (0..nvol).map(|v| v.to_string()).collect(),
            bad: Default::default(),
        }
    }
}

impl TraceReader for VecReader {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        Ok(self.reqs.next())
    }
    fn volumes(&self) -> &[String] {
        &self.volumes
    }
    fn skipped(&self) -> &blockwell_trace::BadLines {
        &self.bad
    }
    fn bytes_read(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwell_core::PolicyKind;

    fn reqs(ids: &[u64]) -> Vec<Request> {
        ids.iter().map(|&b| Request { offset: b * 4096, len: 4096, ..Default::default() }).collect()
    }

    fn run(ids: &[u64], caches: &[CacheSpec], cfg: &ReplayConfig) -> ReplayReport {
        let v = reqs(ids);
        replay(
            &|| Ok(Box::new(VecReader::new(v.clone()))),
            caches,
            cfg,
            ReplayHooks { validate: true, ..Default::default() },
        )
        .unwrap()
    }

    fn lru(size: CacheSize) -> CacheSpec {
        CacheSpec { policy: PolicySpec::new(PolicyKind::Lru), size }
    }

    #[test]
    fn threads_do_not_change_results() {
        let ids: Vec<u64> = (0..20_000u64).map(|i| (i * 7919 + i / 3) % 1000).collect();
        let caches: Vec<_> = [1, 10, 100, 500].iter().map(|&b| lru(CacheSize::Blocks(b))).collect();
        let one = run(&ids, &caches, &ReplayConfig { threads: 1, ..Default::default() });
        let many = run(&ids, &caches, &ReplayConfig { threads: 3, ..Default::default() });
        assert_eq!(one, many);
        assert_eq!(one.requests, 20_000);
        let misses: Vec<u64> = one.results.iter().map(|r| r.stats.total().block_misses()).collect();
        assert!(misses.windows(2).all(|w| w[0] >= w[1]), "LRU is a stack algorithm: {misses:?}");
    }

    #[test]
    fn one_block_reads_replay_as_the_same_requests_read_whole() {
        // An oracleGeneral file is replayed from its compact reads (unit size = block size); the same requests
        // from memory go through the general path. Warm-up, intervals, threads and OPT's pre-pass alike.
        let ids: Vec<u64> = (0..30_000u64).map(|i| ((i * 7919 + i / 7) % 3000) | ((i % 3) << 48)).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.oracleGeneral");
        let bytes: Vec<u8> = ids
            .iter()
            .flat_map(|&id| {
                [&0u32.to_le_bytes()[..], &id.to_le_bytes(), &4096u32.to_le_bytes(), &(-1i64).to_le_bytes()].concat()
            })
            .collect();
        std::fs::write(&path, bytes).unwrap();
        let mem: Vec<Request> = ids
            .iter()
            .map(|&id| Request {
                volume: (id >> 48) as u32,
                offset: (id & ((1 << 48) - 1)) * 4096,
                len: 4096,
                ..Default::default()
            })
            .collect();
        let caches = [
            lru(CacheSize::Blocks(300)),
            CacheSpec { policy: PolicySpec::new(PolicyKind::Opt), size: CacheSize::Blocks(300) },
        ];
        for threads in [1, 2] {
            let cfg = ReplayConfig { threads, warmup: Warmup::Requests(5000), interval: 7000, ..Default::default() };
            let open_file = || blockwell_trace::open(&path, Some(blockwell_trace::Format::Oracle), &Default::default());
            assert_eq!(open_file().unwrap().unit_size(), Some(4096));
            let file = replay(&open_file, &caches, &cfg, ReplayHooks::default()).unwrap();
            let vec =
                replay(&|| Ok(Box::new(VecReader::new(mem.clone()))), &caches, &cfg, ReplayHooks::default()).unwrap();
            assert_eq!(file.results, vec.results, "{threads} threads");
            assert_eq!((file.requests, file.block_accesses), (30_000, 30_000));
            assert!(file.results[0].stats.total().block_misses() > 0);
        }
    }

    #[test]
    fn batches_are_cut_where_warm_up_and_intervals_end() {
        assert_eq!(cuts(0, 10, 0, 0), [(10, false)]);
        assert_eq!(cuts(0, 10, 4, 0), [(4, false), (10, false)]);
        assert_eq!(cuts(0, 10, 0, 4), [(4, true), (8, true), (10, false)]);
        assert_eq!(cuts(10, 10, 3, 4), [(1, true), (5, true), (9, true), (10, false)], "ends at 11, 15, 19");
        assert_eq!(cuts(0, 8, 2, 3), [(2, false), (5, true), (8, true)], "an interval ending with the batch");
        assert_eq!(cuts(8, 4, 2, 3), [(3, true), (4, false)], "the end at 8 belonged to the batch before");
        assert_eq!(cuts(0, 5, 20, 3), [(5, false)], "all warm-up");
    }

    #[test]
    fn intervals_add_up_to_the_totals_whatever_the_threads() {
        use blockwell_core::prefetch::PrefetcherSpec;
        let ids: Vec<u64> = (0..30_000u64).map(|i| (i * 7919 + i / 3) % 2000 + (i / 5000) * 100).collect();
        let caches: Vec<_> = [10, 300].iter().map(|&b| lru(CacheSize::Blocks(b))).collect();
        let base = ReplayConfig { interval: 4_000, warmup: Warmup::Requests(1_500), ..Default::default() };
        for prefetch in [PrefetcherSpec::new(PrefetcherKind::NoPrefetch), "obl".parse().unwrap()] {
            let cfg = ReplayConfig { prefetch, ..base.clone() };
            let one = run(&ids, &caches, &ReplayConfig { threads: 1, ..cfg.clone() });
            let many = run(&ids, &caches, &ReplayConfig { threads: 2, ..cfg });
            assert_eq!(one, many);
            for c in &one.results {
                // 28,500 counted requests: seven intervals of 4,000 and one of 500.
                let ends: Vec<u64> = c.intervals.iter().map(|i| i.end_request).collect();
                assert_eq!(ends, [5_500, 9_500, 13_500, 17_500, 21_500, 25_500, 29_500, 30_000]);
                let mut sum = (OpStats::default(), OpStats::default());
                for i in &c.intervals {
                    sum.0 += i.read;
                    sum.1 += i.write;
                }
                assert_eq!(sum, (c.stats.read, c.stats.write));
                assert_eq!(c.intervals[0].total().requests, 4_000);
            }
            // The working set shifts every 5,000 requests: the small cache's miss ratio is not one number.
            let r: Vec<f64> = one.results[1].intervals.iter().map(|i| i.total().block_miss_ratio().unwrap()).collect();
            assert!(r.iter().any(|&x| (x - r[0]).abs() > 1e-3), "{r:?}");
        }
        let off = run(&ids, &caches, &ReplayConfig { interval: 0, ..base.clone() });
        assert!(off.results.iter().all(|c| c.intervals.is_empty()));
        let json = serde_json::to_value(&off).unwrap();
        assert!(json["results"][0].get("intervals").is_none(), "no intervals key without --interval");
    }

    #[test]
    fn warm_up_by_time_ends_at_the_first_request_that_late() {
        let v: Vec<Request> = (0..1000u64)
            .map(|i| Request {
                time_ns: 1_000_000 + i * 1000,
                offset: (i % 50) * 4096,
                len: 4096,
                ..Default::default()
            })
            .collect();
        let go = |w: Warmup, interval: u64, threads: usize| {
            let cfg = ReplayConfig { interval, threads, warmup: w, ..Default::default() };
            let v = v.clone();
            let caches = [lru(CacheSize::Blocks(10)), lru(CacheSize::Blocks(60))];
            replay(&|| Ok(Box::new(VecReader::new(v.clone()))), &caches, &cfg, ReplayHooks::default()).unwrap()
        };
        // Request i is at 1 ms + i µs: 300 µs of warm-up is the first 300 requests, as --warmup 300 is.
        let by_time = go(Warmup::parse("300us").unwrap(), 0, 1);
        let by_count = go(Warmup::Requests(300), 0, 1);
        assert_eq!((by_time.settings.warmup.as_str(), by_count.settings.warmup.as_str()), ("300000ns", "300"));
        assert_eq!(by_time.results, by_count.results);
        assert_eq!(by_time.warmup_requests, 300);
        assert_eq!(by_time.results[1].stats.read.blocks, 700);
        assert_eq!(by_time.results[1].stats.read.block_hits, 700, "warm: 50 blocks fit in 60");
        assert_eq!(go(Warmup::parse("300us").unwrap(), 200, 2).results, go(Warmup::Requests(300), 200, 1).results);
        // A warm-up longer than the trace counts nothing, by time or by requests.
        for w in [Warmup::parse("2s").unwrap(), Warmup::Requests(5000), Warmup::Requests(1000)] {
            let r = go(w, 100, 1);
            assert_eq!(r.warmup_requests, 1000);
            assert!(r.results.iter().all(|c| c.stats == Stats::default() && c.intervals.is_empty()), "{w:?}");
        }
        assert_eq!(Warmup::parse("1.5M"), Ok(Warmup::Requests(1_500_000)));
        assert_eq!(Warmup::parse("2min"), Ok(Warmup::Nanos(120_000_000_000)));
        assert!(Warmup::parse("3 days").unwrap_err().contains("unknown unit"));
        assert!(Warmup::parse("soon").unwrap_err().contains("not a request count"));
    }

    #[test]
    fn percent_sizes_use_the_footprint_rounded_down() {
        let ids: Vec<u64> = (0..1000).collect();
        let r = run(
            &ids,
            &[lru(CacheSize::PercentOfFootprint(5.0)), lru(CacheSize::PercentOfFootprint(0.01))],
            &ReplayConfig::default(),
        );
        assert_eq!(r.footprint_blocks, Some(1000));
        assert_eq!(r.results[0].cache_blocks, 50);
        assert_eq!(r.results[1].cache_blocks, 1, "at least one block");
    }

    #[test]
    fn warmup_resets_counters_but_keeps_contents() {
        let ids = [1, 2, 3, 1, 2, 3];
        let r = run(
            &ids,
            &[lru(CacheSize::Blocks(3))],
            &ReplayConfig { warmup: Warmup::Requests(3), ..Default::default() },
        );
        assert_eq!(r.results[0].stats.read.blocks, 3);
        assert_eq!(r.results[0].stats.read.block_hits, 3);
    }

    #[test]
    fn reads_only_and_empty_traces() {
        let mut v = reqs(&[1, 2, 3]);
        v[1].op = Op::Write;
        let caches = [lru(CacheSize::Blocks(2))];
        let cfg = ReplayConfig { reads_only: true, ..Default::default() };
        let r = replay(&|| Ok(Box::new(VecReader::new(v.clone()))), &caches, &cfg, Default::default()).unwrap();
        assert_eq!(r.requests, 2);
        assert_eq!(r.results[0].stats.write.requests, 0);
        let e = replay(&|| Ok(Box::new(VecReader::new(vec![]))), &caches, &cfg, Default::default()).unwrap_err();
        assert!(e.to_string().contains("no requests"), "{e}");
    }

    #[test]
    fn a_volume_filter_that_matches_nothing_lists_the_volumes() {
        let mut v = reqs(&[1, 2, 3]);
        v[2].volume = 2;
        let caches = [lru(CacheSize::Blocks(2))];
        let cfg = ReplayConfig { volumes: Some(vec!["x".into(), "9".into()]), ..Default::default() };
        let e = replay(&|| Ok(Box::new(VecReader::new(v.clone()))), &caches, &cfg, Default::default()).unwrap_err();
        assert!(matches!(&e, ReplayError::NoSuchVolume { have, .. } if have == &["0", "1", "2"]), "{e:?}");
        assert_eq!(e.to_string(), "no volume named x, 9 in the trace; its volumes: 0, 1, 2");
        // The same from the pre-pass (a size in % of the footprint).
        let pct = [lru(CacheSize::PercentOfFootprint(10.0))];
        let e = replay(&|| Ok(Box::new(VecReader::new(v.clone()))), &pct, &cfg, Default::default()).unwrap_err();
        assert!(matches!(e, ReplayError::NoSuchVolume { .. }), "{e:?}");
        // One name that matches is enough; many volumes are shortened.
        let cfg = ReplayConfig { volumes: Some(vec!["x".into(), "2".into()]), ..Default::default() };
        assert_eq!(
            replay(&|| Ok(Box::new(VecReader::new(v.clone()))), &caches, &cfg, Default::default()).unwrap().requests,
            1
        );
        let many: Vec<String> = (0..30).map(|i| i.to_string()).collect();
        assert_eq!(list_names(&many), format!("{}, … (30 in all)", many[..20].join(", ")));
    }

    #[test]
    fn zero_block_cache_is_an_error() {
        let e = replay(
            &|| Ok(Box::new(VecReader::new(reqs(&[1])))),
            &[lru(CacheSize::Blocks(0))],
            &ReplayConfig::default(),
            Default::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("holds no"), "{e}");
    }

    #[test]
    fn associativity_splits_every_cache_into_sets_on_both_paths() {
        // A loop over 64 blocks spaced 64 apart fits a 128-block cache, but at 8 ways they map to 2 of the 16 sets.
        let ids: Vec<u64> = (0..20).flat_map(|_| (0..64u64).map(|i| i * 64)).collect();
        let caches = [
            lru(CacheSize::Blocks(128)),
            CacheSpec { policy: PolicySpec::new(PolicyKind::Opt), ..lru(CacheSize::Blocks(128)) },
        ];
        let ways = |w| ReplayConfig { associativity: NonZeroUsize::new(w), ..Default::default() };
        let full = run(&ids, &caches, &ReplayConfig::default());
        let same = run(&ids, &caches, &ways(128));
        let eight = run(&ids, &caches, &ways(8));
        for i in 0..2 {
            assert_eq!(full.results[i].stats.total().block_misses(), 64, "cold misses only");
            assert_eq!((full.results[i].associativity, full.results[i].sets), (None, 1));
            assert_eq!(same.results[i].stats, full.results[i].stats, "ways = capacity is fully associative");
            assert_eq!((same.results[i].associativity, same.results[i].sets), (Some(128), 1));
            assert_eq!(eight.results[i].sets, 16);
        }
        assert_eq!(
            eight.results[0].stats.total().block_misses(),
            ids.len() as u64,
            "LRU looping over 32 blocks in each of two 8-block sets"
        );
        assert!(eight.results[1].stats.total().block_misses() > 64, "OPT cannot fit 32 blocks in a set either");
        // The level path (admission, cutoff or a prefetcher) builds the same sets: a cutoff no run reaches.
        let level = ReplayConfig { sequential_cutoff: 1 << 40, ..ways(8) };
        let via_level = run(&ids, &caches[..1], &level);
        assert_eq!(via_level.results[0].stats.total().block_misses(), ids.len() as u64);
    }

    #[test]
    fn associativity_refuses_libcachesim_quirks() {
        let caches = [CacheSpec { policy: PolicySpec::new(PolicyKind::Lirs), size: CacheSize::Blocks(16) }];
        let cfg =
            ReplayConfig { preset: Preset::Libcachesim, associativity: NonZeroUsize::new(4), ..Default::default() };
        let e = replay(&|| Ok(Box::new(VecReader::new(reqs(&[1])))), &caches, &cfg, Default::default()).unwrap_err();
        assert!(e.to_string().contains("cannot run set-associative"), "{e}");
    }
}
