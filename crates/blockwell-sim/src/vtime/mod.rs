//! Time-aware simulation: processes, a page cache, a file layout, an optional block cache, an I/O clusterer, a
//! device queue and a disk model, on one virtual clock (integer nanoseconds).
//!
//! Seeds `000_*` (REDCAP) and `001_*` (prefetch-aware buffer caching) show that hit ratio alone misleads: disk
//! requests and time decide. This module measures all three. The engine ([`blockwell_core`]) still decides
//! hits, misses, victims and what to prefetch; this driver owns time:
//!
//! - **Processes** issue requests *closed loop* (a process waits for its request, then thinks, then issues the
//!   next) or *open loop* (each request is issued at its time stamp whether or not the previous one finished).
//! - **Page cache** (file-level workloads only): one policy over file pages, keyed (file, page), and one
//!   prefetcher whose streams are open files (process × file), e.g. Linux read-ahead.
//! - **File layout**: page-cache misses (demand and prefetch) become disk-block reads through
//!   [`crate::layout::FileMap::runs`].
//! - **Block cache** (optional): any policy plus a block-level prefetcher, or REDCAP (seed `000_*`: a segment
//!   cache with its activation controller, fed with measured device times and shadow-device estimates; see
//!   [`RedcapSetup`]); block-level traces start here.
//! - **Clusterer**: the blocks one access sends to the device, sorted, become device requests of consecutive
//!   blocks up to `max_request_bytes` (64 KiB by default); synchronous and asynchronous reads never share a
//!   request.
//! - **Cache device** (optional, [`CacheDevConfig`]): seed `004_*`'s persistent cache level under the block
//!   cache, on its own device model and queue, in write-back, write-through or write-around, with a cleaner
//!   on the virtual clock (see `tier`).
//! - **Device**: one queue (FIFO, C-LOOK by sector, or Linux 2.6.14's CFQ with per-process time slices and
//!   anticipation), one request served at a time through a [`blockwell_disk::DiskModel`].
//!
//! A demand access to a block whose read is still in flight waits for that read and counts as a miss that
//! issues no new read (seed `001_*` §5.2). Blocks enter a cache's policy when their read completes (Linux
//! locks the page until then and never evicts it), so in-flight blocks cannot be evicted. Writes are
//! write-through: the writing request waits for the device write (with a cache device, for what its mode
//! writes). See `docs/time-simulation.md`.
//!
//! Identical inputs give bit-identical reports: events are ordered by (time, sequence number), no hash map is
//! ever iterated, and the disk model starts from its power-on state ([`blockwell_disk::DiskModel::boxed_clone`]).

mod cfq;
mod device;
mod engine;
mod level;
mod redcap;
mod report;
mod tier;

pub use cfq::CfqTuning;
pub use level::LevelCounters;
pub use redcap::{RedcapReport, RedcapSetup, Shadow, ShadowParseError, SHADOW_LAG};
pub use report::{DeviceReport, IoCount, LevelReport, Report};
pub use tier::CacheDevReport;

use crate::cachedev::DevSpec;
use crate::layout::LayoutSpec;
use crate::workload::Workload;
use blockwell_core::cache::CacheError;
use blockwell_core::policy::{PolicyError, PolicySpec, Preset};
use blockwell_core::prefetch::{NoPrefetch, PrefetchError, Prefetcher, PrefetcherSpec};
use blockwell_core::redcap::RedcapError;
use blockwell_disk::DiskModel;
use blockwell_trace::{TraceError, TraceReader};
use std::fmt;
use std::sync::{Arc, Mutex};

/// How processes issue their requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IssueMode {
    /// Each process waits for its request to complete, then waits the request's think time
    /// ([`crate::workload::FileRequest::think_ns`]; for block traces the gap between consecutive time stamps,
    /// unless [`Config::think_ns`] overrides it), then issues the next.
    #[default]
    ClosedLoop,
    /// Each request is issued at its time stamp ([`crate::workload::FileRequest::at_ns`], a block trace's
    /// `time_ns`), whether or not the process's previous request has completed. A file request without a time
    /// stamp is issued when the previous one of its process was issued.
    OpenLoop,
}

/// The order in which the device serves queued requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scheduler {
    /// Arrival order.
    #[default]
    Fifo,
    /// Circular LOOK: the queued request with the lowest start sector at or after the end of the last served
    /// request; when there is none, the lowest start sector of all (ties: arrival order).
    CLook,
    /// Linux 2.6.14's CFQ (seed `000_*`'s scheduler): a queue per process served in time slices (100 ms) round
    /// robin, waiting up to the idle window (10 ms) for the served process's next request (anticipation),
    /// C-LOOK-like order with short backward seeks within a queue, FIFO deadlines; writes share one asynchronous
    /// queue. `cfq(slice_ms=S,idle_ms=I)` changes the two times (`idle_ms=0`: no anticipation). See
    /// `docs/time-simulation.md`.
    Cfq(CfqTuning),
}

impl Scheduler {
    /// CFQ with Linux 2.6.14's times.
    pub const CFQ: Scheduler = Scheduler::Cfq(CfqTuning::LINUX_2_6_14);

    /// Parses `fifo`, `c-look` (or `clook`), `cfq` or `cfq(slice_ms=S,idle_ms=I)`, in any case.
    pub fn parse(s: &str) -> Result<Self, String> {
        let text = blockwell_core::spec::split_spec(s.trim()).map_err(|e| format!("scheduler '{s}': {e}"))?;
        let name = text.name.trim().to_ascii_lowercase().replace('_', "-");
        let simple = |v: Scheduler| {
            if text.params.is_empty() {
                Ok(v)
            } else {
                Err(format!("scheduler '{s}': {name} takes no parameters"))
            }
        };
        match name.as_str() {
            "fifo" => simple(Scheduler::Fifo),
            "c-look" | "clook" => simple(Scheduler::CLook),
            "cfq" => {
                let mut t = CfqTuning::LINUX_2_6_14;
                for (k, v) in &text.params {
                    let ms: f64 = v
                        .trim()
                        .parse()
                        .ok()
                        .filter(|x: &f64| x.is_finite() && (0.0..=10_000.0).contains(x))
                        .ok_or_else(|| format!("scheduler '{s}': {k}={v} is not milliseconds from 0 to 10000"))?;
                    let ns = (ms * 1e6).round() as u64;
                    match k.replace('-', "_").as_str() {
                        "slice_ms" if ns > 0 => t.slice_ns = ns,
                        "slice_ms" => return Err(format!("scheduler '{s}': slice_ms must be above 0")),
                        "idle_ms" => t.idle_ns = ns,
                        _ => {
                            return Err(format!("scheduler '{s}': unknown parameter '{k}' (known: slice_ms, idle_ms)"))
                        }
                    }
                }
                Ok(Scheduler::Cfq(t))
            }
            _ => Err(format!("unknown scheduler '{s}' (known: fifo, c-look, cfq)")),
        }
    }

    /// The name reports print (`CFQ`, or `CFQ(slice 50 ms, idle 0 ms)` with other times).
    pub fn label(self) -> String {
        match self {
            Scheduler::Fifo => "FIFO".into(),
            Scheduler::CLook => "C-LOOK".into(),
            Scheduler::Cfq(t) if t == CfqTuning::LINUX_2_6_14 => "CFQ".into(),
            Scheduler::Cfq(t) => {
                format!("CFQ(slice {} ms, idle {} ms)", t.slice_ns as f64 / 1e6, t.idle_ns as f64 / 1e6)
            }
        }
    }

    /// The spec that parses back to this scheduler (`cfq`, `cfq(slice_ms=100,idle_ms=0)`).
    pub fn spec(self) -> String {
        match self {
            Scheduler::Fifo => "fifo".into(),
            Scheduler::CLook => "c-look".into(),
            Scheduler::Cfq(t) if t == CfqTuning::LINUX_2_6_14 => "cfq".into(),
            Scheduler::Cfq(t) => {
                format!("cfq(slice_ms={},idle_ms={})", t.slice_ns as f64 / 1e6, t.idle_ns as f64 / 1e6)
            }
        }
    }
}

impl serde::Serialize for Scheduler {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.spec())
    }
}

impl<'de> serde::Deserialize<'de> for Scheduler {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Scheduler::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Makes a fresh prefetcher for one cache level.
pub type PrefetcherFactory = Arc<dyn Fn() -> Box<dyn Prefetcher> + Send + Sync>;

/// The prefetcher of one cache level.
#[derive(Clone, Default)]
pub enum PrefetchChoice {
    /// No prefetching.
    #[default]
    None,
    /// A registered prefetcher (`linux24`, `ondemand`, `stride`, ...), built for the configured block size.
    Spec(PrefetcherSpec),
    /// A prefetcher built by a factory (called once per run), with a label for reports.
    Custom { label: String, make: PrefetcherFactory },
}

impl PrefetchChoice {
    /// A choice from a factory.
    pub fn custom(label: impl Into<String>, make: impl Fn() -> Box<dyn Prefetcher> + Send + Sync + 'static) -> Self {
        PrefetchChoice::Custom { label: label.into(), make: Arc::new(make) }
    }

    pub fn label(&self) -> &str {
        match self {
            PrefetchChoice::None => "none",
            PrefetchChoice::Spec(s) => s.label(),
            PrefetchChoice::Custom { label, .. } => label,
        }
    }

    /// Parses a registered prefetcher spec (`none` gives [`PrefetchChoice::None`]).
    pub fn parse(s: &str) -> Result<Self, PrefetchError> {
        let spec = PrefetcherSpec::parse(s)?;
        Ok(if spec.kind == blockwell_core::prefetch::PrefetcherKind::NoPrefetch {
            PrefetchChoice::None
        } else {
            PrefetchChoice::Spec(spec)
        })
    }

    fn build(&self, block_size: u64) -> Result<Box<dyn Prefetcher>, Error> {
        Ok(match self {
            PrefetchChoice::None => Box::new(NoPrefetch),
            PrefetchChoice::Spec(s) => s.build(block_size)?,
            PrefetchChoice::Custom { make, .. } => make(),
        })
    }
}

impl fmt::Debug for PrefetchChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One cache level: a policy over a byte budget and a prefetcher.
#[derive(Clone, Debug)]
pub struct LevelConfig {
    pub policy: PolicySpec,
    pub capacity_bytes: u64,
    pub prefetch: PrefetchChoice,
    /// Blocks per set of a set-associative level ([`blockwell_core::policy::setassoc`]); `None`: fully
    /// associative.
    pub associativity: Option<std::num::NonZeroUsize>,
}

impl LevelConfig {
    pub fn new(policy: PolicySpec, capacity_bytes: u64) -> Self {
        LevelConfig { policy, capacity_bytes, prefetch: PrefetchChoice::None, associativity: None }
    }

    pub fn with_prefetch(mut self, prefetch: PrefetchChoice) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// The same level, `ways`-way set-associative (`None`: fully associative).
    pub fn with_associativity(mut self, ways: Option<std::num::NonZeroUsize>) -> Self {
        self.associativity = ways;
        self
    }
}

/// A disk model for the cache device, shared by clones of a [`Config`]; each run takes a fresh copy
/// ([`DiskModel::boxed_clone`]).
#[derive(Clone)]
pub struct DevDisk(Arc<Mutex<Box<dyn DiskModel>>>);

impl DevDisk {
    pub fn new(model: Box<dyn DiskModel>) -> Self {
        DevDisk(Arc::new(Mutex::new(model)))
    }

    /// A copy in the power-on state.
    pub fn fresh(&self) -> Box<dyn DiskModel> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).boxed_clone()
    }

    pub fn describe(&self) -> String {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).describe()
    }
}

impl fmt::Debug for DevDisk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

/// A cache device under the block cache (seed `004_*`; see the `tier` module): the level's policy, size,
/// mode, promotion rule, cutoff and cleaner ([`DevSpec`], as `sim --cache-dev-size` takes them) and its disk
/// model.
#[derive(Clone, Debug)]
pub struct CacheDevConfig {
    /// The level. A size in percent is of the blocks the input touches at the block level.
    pub spec: DevSpec,
    pub disk: DevDisk,
    /// How often the cleaner runs (the live tier's 100 ms by default).
    pub clean_interval_ns: u64,
    /// A point of the dirty-blocks series every this many process requests (0: none).
    pub dirty_every: u64,
}

impl CacheDevConfig {
    /// The level `spec` on `disk`, cleaned every 100 ms, no dirty series.
    pub fn new(spec: DevSpec, disk: Box<dyn DiskModel>) -> Self {
        CacheDevConfig { spec, disk: DevDisk::new(disk), clean_interval_ns: 100_000_000, dirty_every: 0 }
    }
}

/// A time-aware simulation's configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Page and block size in bytes (the page cache and the block cache use the same size).
    pub block_size: u64,
    /// Policy parameter preset of both levels.
    pub preset: Preset,
    /// The page cache of file-level workloads (ignored for block traces). `None`: no page cache (every request
    /// goes to the block level, as with direct I/O).
    pub page_cache: Option<LevelConfig>,
    /// The block-level cache between the layout and the device. `None`: none.
    pub block_cache: Option<LevelConfig>,
    /// REDCAP between the layout and the device (seed `000_*`), instead of a block cache.
    pub redcap: Option<RedcapSetup>,
    /// A cache device between the block cache (if any) and the device, which is then its origin.
    pub cache_dev: Option<CacheDevConfig>,
    /// How files are placed on the disk (a layout with its parameters).
    pub layout: LayoutSpec,
    /// Seed of layouts with randomness.
    pub layout_seed: u64,
    pub scheduler: Scheduler,
    pub issue: IssueMode,
    /// Closed loop: a think time for every request instead of the workload's (or the trace's gaps).
    pub think_ns: Option<u64>,
    /// Closed loop, file workloads: a time-stamped request's think time is the gap between its time stamp and
    /// the previous time-stamped request's of the same process (the first one's: its time stamp), as block
    /// traces always do. Requests without a time stamp keep their own think time.
    pub think_from_gaps: bool,
    /// Largest device request the clusterer builds, in bytes (at least one block).
    pub max_request_bytes: u64,
    /// Merge a read into a queued (not yet started) read of the same kind that ends where it starts, up to
    /// `max_request_bytes` (Linux's clustering into the request queue, seed `001_*` §2.1).
    pub merge_queued: bool,
    /// Each process starts after a delay drawn uniformly from `0..=start_jitter_ns` (seeded by `start_seed`)
    /// instead of all at time 0. Generated processes are identical; started together they can run in
    /// lock-step, which on interleaved layouts makes the disk serve them as neighbours (see
    /// `docs/time-simulation.md`). `0`: no jitter.
    pub start_jitter_ns: u64,
    /// Seed of the start jitter and of the think-time jitter (one seed per run of a repeated experiment).
    pub start_seed: u64,
    /// Closed loop: every think time gets a uniform random addition in `0..=think_jitter_ns` (one seeded stream
    /// per process, from `start_seed`). Models the variation of a real process's CPU and scheduling time per
    /// request; without it identical generated processes keep whatever phase they start with. `0`: none.
    pub think_jitter_ns: u64,
    /// Closed loop: processors the think times run on (`0`: as many as processes, every think time runs at
    /// once). With `cpus` processors a think time is a CPU burst: a process whose request completed waits for
    /// a free processor (first come, first served, no preemption), runs its burst, then issues its next
    /// request. With many processes and think times this queueing lengthens each one's time between requests,
    /// as on seed `000_*`'s one-processor machine (`docs/time-simulation.md`).
    pub cpus: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            block_size: 4096,
            preset: Preset::Default,
            page_cache: None,
            block_cache: None,
            redcap: None,
            cache_dev: None,
            layout: LayoutSpec::default(),
            layout_seed: 0,
            scheduler: Scheduler::default(),
            issue: IssueMode::default(),
            think_ns: None,
            think_from_gaps: false,
            max_request_bytes: 64 * 1024,
            merge_queued: true,
            start_jitter_ns: 0,
            start_seed: 0,
            think_jitter_ns: 0,
            cpus: 0,
        }
    }
}

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("{level}: {source}")]
    Cache { level: &'static str, source: CacheError },
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Prefetch(#[from] PrefetchError),
    #[error("REDCAP: {0}")]
    Redcap(#[from] RedcapError),
    #[error("the workload has {0} files; the page cache keys pages by (file, page) and holds at most 65536 files")]
    TooManyFiles(usize),
    #[error("process {process}, request {index}: {message}")]
    Request { process: usize, index: usize, message: String },
    #[error("invalid configuration: {0}")]
    Config(String),
    /// An engine bug: the event queue ran dry with requests still waiting.
    #[error("internal error: only {completed} of {total} requests completed")]
    Stalled { completed: u64, total: u64 },
    /// An engine bug: blocks still marked in flight after every device request completed.
    #[error("internal error: {0} blocks still in flight at the end")]
    InFlightAtEnd(usize),
}

/// Runs a file-level workload (page cache → layout → block cache → device) on a fresh copy of `disk`.
pub fn run_workload(workload: &Workload, config: &Config, disk: &dyn DiskModel) -> Result<Report, Error> {
    engine::run_workload(workload, config, disk)
}

/// Runs a block-level trace (block cache → device; no page cache) on a fresh copy of `disk`. The trace is
/// read into memory (one process; its time stamps drive the open loop or the closed loop's think times).
pub fn run_block_trace(reader: &mut dyn TraceReader, config: &Config, disk: &dyn DiskModel) -> Result<Report, Error> {
    engine::run_block_trace(reader, config, disk)
}

/// Reads a block trace into one process's requests, as [`run_block_trace`] replays it: time stamps relative to
/// the first request (open loop), the gaps between them as think times (closed loop); zero-length requests
/// dropped.
pub fn read_block_trace(reader: &mut dyn TraceReader) -> Result<Vec<BlockRequest>, TraceError> {
    let mut requests = Vec::new();
    let mut prev: Option<u64> = None;
    let mut origin: Option<u64> = None;
    while let Some(r) = reader.next_request()? {
        if r.len == 0 {
            continue;
        }
        let o = *origin.get_or_insert(r.time_ns);
        let think_ns = prev.map_or(0, |p| r.time_ns.saturating_sub(p));
        prev = Some(r.time_ns);
        requests.push(BlockRequest {
            volume: r.volume,
            op: r.op,
            offset: r.offset,
            len: r.len,
            think_ns,
            at_ns: r.time_ns.saturating_sub(o),
        });
    }
    Ok(requests)
}

/// One block-level request, for [`run_block_requests`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRequest {
    pub volume: u32,
    pub op: blockwell_core::Op,
    /// Byte offset within the volume.
    pub offset: u64,
    /// Bytes (>= 1).
    pub len: u64,
    /// Closed loop: think time before this request.
    pub think_ns: u64,
    /// Open loop: issue time.
    pub at_ns: u64,
}

/// Runs block-level requests, one sequence per process (block cache → device).
pub fn run_block_requests(
    processes: &[Vec<BlockRequest>],
    config: &Config,
    disk: &dyn DiskModel,
) -> Result<Report, Error> {
    engine::run_block_requests("block requests", processes, config, disk)
}
