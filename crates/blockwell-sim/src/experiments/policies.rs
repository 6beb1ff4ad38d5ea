//! Seed `001_*` Figures 3–6 and Table 5: hit ratio, number of (clustered) disk requests and execution time
//! against cache size for replacement policies, with and without kernel read-ahead, on a time-aware simulation
//! with a disk model (the paper: its buffer-cache simulator with Linux 2.4 read-ahead and I/O clustering up to
//! 64 KiB, coupled to DiskSim's Seagate ST39102LW, our `cheetah9lp`).
//!
//! The source is a generated file-level workload (the policy and read-ahead run in the page cache, files
//! placed by a layout) or a block trace (the policy and read-ahead run in a block-level cache, one process).
//! Cache sizes are blocks or percentages of the footprint (distinct blocks the source touches).

use super::{bad, cell, par_map_progress, Error, Progress};
use crate::layout::{LayoutKind, LayoutSpec};
use crate::replay::CacheSize;
use crate::vtime::{
    run_block_requests, run_workload, BlockRequest, Config, IoCount, LevelConfig, PrefetchChoice, Report, Scheduler,
};
use crate::workload::Workload;
use blockwell_core::policy::{PolicySpec, Preset};
use blockwell_disk::DiskSpec;
use blockwell_trace::TraceReader;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fmt::Write as _;

/// The paper's eight policies (Table 4), by their Blockwell names.
pub const POLICIES: [&str; 8] = ["opt", "lru", "lru-k(k=2)", "2q", "lirs", "lrfu", "mq", "arc"];

/// What the grid runs on.
#[derive(Clone, Debug)]
pub enum Source {
    /// A file-level workload: page cache → layout → device.
    Workload(Workload),
    /// Block-level requests of one process (from a trace): block cache → device.
    Blocks { name: String, requests: Vec<BlockRequest> },
}

impl Source {
    pub fn name(&self) -> &str {
        match self {
            Source::Workload(w) => &w.name,
            Source::Blocks { name, .. } => name,
        }
    }

    /// Reads a block trace into memory, as [`crate::vtime::run_block_trace`] does
    /// ([`crate::vtime::read_block_trace`]).
    pub fn from_trace(name: impl Into<String>, reader: &mut dyn TraceReader) -> Result<Self, Error> {
        Ok(Source::Blocks { name: name.into(), requests: crate::vtime::read_block_trace(reader)? })
    }

    /// Distinct blocks (file pages, or volume blocks) the source touches.
    pub fn footprint(&self, block_size: u64) -> u64 {
        let bs = block_size.max(1);
        let mut seen: HashSet<(u32, u64)> = HashSet::new();
        let mut add = |id: u32, offset: u64, len: u64| {
            if len == 0 {
                return;
            }
            let last = offset.saturating_add(len - 1) / bs;
            for b in offset / bs..=last {
                seen.insert((id, b));
            }
        };
        match self {
            Source::Workload(w) => w.processes.iter().flatten().for_each(|r| add(r.file, r.offset, r.len)),
            Source::Blocks { requests, .. } => requests.iter().for_each(|r| add(r.volume, r.offset, r.len)),
        }
        seen.len() as u64
    }
}

/// The grid and the system it runs on.
#[derive(Clone, Debug)]
pub struct PolicyGrid {
    pub source: Source,
    pub policies: Vec<PolicySpec>,
    /// Policy parameters (`butt05`: Table 4 of Butt et al.).
    pub preset: Preset,
    /// With and without prefetching: `none` and `linux24` by default.
    pub prefetchers: Vec<PrefetchChoice>,
    pub sizes: Vec<CacheSize>,
    pub disk: DiskSpec,
    /// File layout of workloads (ignored for block traces).
    pub layout: LayoutSpec,
    pub scheduler: Scheduler,
    pub block_size: u64,
    /// Closed-loop think time for every request instead of the source's.
    pub think_ns: Option<u64>,
    pub threads: usize,
}

impl PolicyGrid {
    /// The paper's setup on `source`: the eight policies under the `butt05` preset, none vs Linux 2.4
    /// read-ahead, `cheetah9lp`, contiguous files, FIFO, cache sizes of 10–100 % of the footprint.
    pub fn paper(source: Source) -> Result<Self, Error> {
        let policies = POLICIES
            .iter()
            .map(|p| PolicySpec::parse(p).map_err(|e| Error::Option { option: "policies", message: e.to_string() }))
            .collect::<Result<_, _>>()?;
        Ok(PolicyGrid {
            source,
            policies,
            preset: Preset::Butt05,
            prefetchers: vec![PrefetchChoice::None, parse_prefetch("linux24")?],
            sizes: [10.0, 25.0, 50.0, 75.0, 100.0].into_iter().map(CacheSize::PercentOfFootprint).collect(),
            disk: DiskSpec::parse("cheetah9lp")?,
            layout: LayoutKind::Contiguous.into(),
            scheduler: Scheduler::Fifo,
            block_size: 4096,
            think_ns: None,
            threads: super::default_threads(),
        })
    }

    fn check(&self) -> Result<(), Error> {
        for (option, empty) in [
            ("policies", self.policies.is_empty()),
            ("prefetch", self.prefetchers.is_empty()),
            ("sizes", self.sizes.is_empty()),
        ] {
            if empty {
                return Err(Error::Option { option, message: "the list is empty".into() });
            }
        }
        Ok(())
    }

    /// Runs every (policy, prefetcher, size) on up to [`PolicyGrid::threads`] threads; results in grid order.
    pub fn run(&self) -> Result<PolicyResults, Error> {
        self.run_with_progress(&|_, _| {})
    }

    /// [`PolicyGrid::run`], calling `progress` with (runs done, runs in all) as runs finish.
    pub fn run_with_progress(&self, progress: Progress<'_>) -> Result<PolicyResults, Error> {
        self.check()?;
        let footprint = self.source.footprint(self.block_size);
        let blocks: Vec<u64> = self.sizes.iter().map(|s| s.blocks(footprint)).collect();
        let mut jobs: Vec<(usize, usize, usize)> = Vec::new();
        for p in 0..self.policies.len() {
            for f in 0..self.prefetchers.len() {
                for s in 0..blocks.len() {
                    jobs.push((p, f, s));
                }
            }
        }
        // OPT runs twice (its oracle needs a first pass): start with it.
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by_key(|&j| self.policies[jobs[j].0].kind != blockwell_core::PolicyKind::Opt);
        let reports = par_map_progress(
            &jobs,
            &order,
            self.threads,
            |&(p, f, s)| -> Result<Report, Error> {
                let level = LevelConfig::new(self.policies[p].clone(), blocks[s].saturating_mul(self.block_size))
                    .with_prefetch(self.prefetchers[f].clone());
                let mut cfg = Config {
                    block_size: self.block_size,
                    preset: self.preset,
                    layout: self.layout.clone(),
                    scheduler: self.scheduler,
                    think_ns: self.think_ns,
                    ..Config::default()
                };
                let run = || {
                    format!("{} + {} at {} blocks", self.policies[p].label(), self.prefetchers[f].label(), blocks[s])
                };
                let model = self.disk.build()?;
                let r = match &self.source {
                    Source::Workload(w) => {
                        cfg.page_cache = Some(level);
                        run_workload(w, &cfg, model.as_ref())
                    }
                    Source::Blocks { requests, .. } => {
                        cfg.block_cache = Some(level);
                        run_block_requests(std::slice::from_ref(requests), &cfg, model.as_ref())
                    }
                };
                r.map_err(|source| Error::Run { run: run(), source })
            },
            progress,
        );
        let mut points = Vec::with_capacity(jobs.len());
        for (&(p, f, s), r) in jobs.iter().zip(reports) {
            let r = r?;
            points.push(PolicyPoint {
                policy: self.policies[p].label().to_string(),
                prefetch: self.prefetchers[f].label().to_string(),
                cache_blocks: blocks[s],
                cache_bytes: blocks[s].saturating_mul(self.block_size),
                hit_ratio: r.hit_ratio(),
                disk_requests: r.disk_reads(),
                sync_reads: r.device.sync_reads,
                async_reads: r.device.async_reads,
                blocks_read: r.device.blocks_read,
                prefetch_accuracy: r.page_cache.as_ref().or(r.block_cache.as_ref()).and_then(|l| l.prefetch_accuracy),
                app_time_ns: r.app_time_ns,
            });
        }
        Ok(PolicyResults {
            source: self.source.name().to_string(),
            disk: self.disk.label().to_string(),
            layout: match self.source {
                Source::Workload(_) => Some(self.layout.to_string()),
                Source::Blocks { .. } => None,
            },
            scheduler: self.scheduler,
            preset: self.preset.name().to_string(),
            block_size: self.block_size,
            footprint_blocks: footprint,
            policies: self.policies.iter().map(|p| p.label().to_string()).collect(),
            prefetchers: self.prefetchers.iter().map(|p| p.label().to_string()).collect(),
            sizes: blocks,
            points,
        })
    }
}

/// The grid's settings as a user writes them, for `blockwell experiment prefetch-policies` and Python's
/// `blockwell.experiments.prefetch_policies`. [`PolicyOptions::grid`] checks them and builds the grid on a
/// generated workload or on a trace the caller has read; an error names the option (by its field name,
/// [`Error::option`]). The defaults are the paper's setup ([`PolicyGrid::paper`]) on `loop`; on one of the paper's
/// applications (`cscope`, `tpc-h`, ... [`crate::workloads::TABLE2`]) the default cache sizes are the paper's,
/// mapped proportionally onto the generated data ([`crate::workloads::PaperApp::cache_blocks`]); `quick` means
/// cache sizes of 25, 50 and 100 % and `loop(files=500)`, and every option given still applies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyOptions {
    pub quick: bool,
    /// A generated workload (`loop`, `random`, `mix-seq`, `mix-random`, the paper's applications `cscope`,
    /// `glimpse`, `gcc`, `viewperf`, `tpc-h`, `tpc-r`, `multi1`–`multi3`, with parameters); not with a trace.
    pub workload: Option<String>,
    /// Policy specs (`None`: the paper's eight, [`POLICIES`]).
    pub policies: Option<Vec<String>>,
    pub preset: String,
    pub prefetch: Vec<String>,
    /// Cache sizes: `25%` of the footprint, `64MiB`, `16384blocks`.
    pub cache: Option<Vec<String>>,
    pub disk: String,
    pub layout: String,
    pub scheduler: String,
    /// Closed-loop think time before every request, in µs, instead of the source's.
    pub think_us: Option<u64>,
    /// Page and block size: a power of two from 512 B to 1 MiB.
    pub block_size: u64,
    /// Threads (`None`: every core); results do not depend on it.
    pub threads: Option<usize>,
}

impl Default for PolicyOptions {
    fn default() -> Self {
        PolicyOptions {
            quick: false,
            workload: None,
            policies: None,
            preset: "butt05".into(),
            prefetch: vec!["none".into(), "linux24".into()],
            cache: None,
            disk: "cheetah9lp".into(),
            layout: "contiguous".into(),
            scheduler: "fifo".into(),
            think_us: None,
            block_size: 4096,
            threads: None,
        }
    }
}

impl PolicyOptions {
    /// The grid on `trace` (a block trace read with [`Source::from_trace`]) or, without one, on the workload
    /// option; every setting checked before anything runs.
    pub fn grid(&self, trace: Option<Source>) -> Result<PolicyGrid, Error> {
        let bs = self.block_size;
        if !bs.is_power_of_two() || !(512..=1 << 20).contains(&bs) {
            return Err(bad("block_size")(&format!("{bs} is not a power of two between 512 B and 1 MiB")));
        }
        // The paper's cache sizes, mapped onto the generated data, for its applications (`cscope`, ...).
        let mut app_sizes = None;
        let source = match (trace, &self.workload) {
            (Some(_), Some(_)) => return Err(bad("workload")(&"give a workload or a trace, not both")),
            (Some(t), None) => t,
            (None, w) => {
                let spec = match (w, self.quick) {
                    (Some(w), _) => w.as_str(),
                    (None, true) => "loop(files=500)",
                    (None, false) => "loop",
                };
                let spec = crate::workloads::WorkloadSpec::parse(spec).map_err(|e| bad("workload")(&e))?;
                let w = spec.build().map_err(|e| bad("workload")(&e))?;
                if let Some(app) = crate::workloads::paper_app(spec.kind) {
                    let data: u64 = w.files.iter().map(|f| f.size).sum();
                    app_sizes = Some(app.cache_blocks(data, bs));
                }
                Source::Workload(w)
            }
        };
        let mut g = PolicyGrid::paper(source)?;
        g.block_size = bs;
        if self.quick {
            g.sizes = [25.0, 50.0, 100.0].into_iter().map(CacheSize::PercentOfFootprint).collect();
        } else if let Some(sizes) = app_sizes {
            g.sizes = sizes.into_iter().map(CacheSize::Blocks).collect();
        }
        if let Some(p) = &self.policies {
            g.policies =
                p.iter().map(|p| PolicySpec::parse(p)).collect::<Result<_, _>>().map_err(|e| bad("policies")(&e))?;
        }
        g.preset = Preset::from_name(&self.preset).ok_or_else(|| {
            let known: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
            bad("preset")(&format!("unknown preset '{}' (known: {})", self.preset, known.join(", ")))
        })?;
        g.prefetchers = self.prefetch.iter().map(|p| parse_prefetch(p)).collect::<Result<_, _>>()?;
        if let Some(sizes) = &self.cache {
            g.sizes = sizes
                .iter()
                .map(|s| match crate::size::SizeSpec::parse(s).map_err(|e| bad("cache")(&e))? {
                    crate::size::SizeSpec::Blocks(0) => Err(bad("cache")(&"0 blocks")),
                    s => s.cache_size(bs).map_err(|e| bad("cache")(&e)),
                })
                .collect::<Result<_, _>>()?;
        }
        g.disk = DiskSpec::parse(&self.disk).map_err(|e| bad("disk")(&e))?;
        g.disk.build().map_err(|e| bad("disk")(&e))?;
        g.layout = self.layout.parse().map_err(|e| bad("layout")(&e))?;
        g.layout.params.validate(bs).map_err(|e| bad("layout")(&e))?;
        g.scheduler = Scheduler::parse(&self.scheduler).map_err(|e| bad("scheduler")(&e))?;
        g.think_ns = self.think_us.map(|us| us.saturating_mul(1000));
        g.threads = super::threads_option(self.threads)?;
        for (option, empty) in
            [("policies", g.policies.is_empty()), ("prefetch", g.prefetchers.is_empty()), ("cache", g.sizes.is_empty())]
        {
            if empty {
                return Err(bad(option)(&"the list is empty"));
            }
        }
        Ok(g)
    }
}

fn parse_prefetch(s: &str) -> Result<PrefetchChoice, Error> {
    PrefetchChoice::parse(s).map_err(|e| Error::Option { option: "prefetch", message: e.to_string() })
}

/// One (policy, prefetcher, size).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyPoint {
    pub policy: String,
    pub prefetch: String,
    pub cache_blocks: u64,
    pub cache_bytes: u64,
    /// Demand read blocks found resident (a block still in flight is a miss); `None` (undefined, not 0)
    /// without demand reads.
    pub hit_ratio: Option<f64>,
    /// Device read requests after clustering (synchronous + asynchronous).
    pub disk_requests: u64,
    pub sync_reads: IoCount,
    pub async_reads: IoCount,
    pub blocks_read: u64,
    /// `None` (undefined, not 0) without prefetches (no prefetcher, or one that never prefetched).
    pub prefetch_accuracy: Option<f64>,
    /// Execution (application) time.
    pub app_time_ns: u64,
}

/// The metrics the figures plot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    HitRatio,
    DiskRequests,
    Time,
}

impl Metric {
    pub const ALL: [Metric; 3] = [Metric::HitRatio, Metric::DiskRequests, Metric::Time];

    /// File-name friendly name.
    pub fn name(self) -> &'static str {
        match self {
            Metric::HitRatio => "hit-ratio",
            Metric::DiskRequests => "disk-requests",
            Metric::Time => "time",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Metric::HitRatio => "hit ratio (%)",
            Metric::DiskRequests => "disk requests (clustered reads)",
            Metric::Time => "execution time (s)",
        }
    }

    /// The metric's value at a point, in the unit of [`Metric::title`] (`None`: undefined, a hit ratio without
    /// demand reads).
    pub fn value(self, p: &PolicyPoint) -> Option<f64> {
        match self {
            Metric::HitRatio => p.hit_ratio.map(|h| h * 100.0),
            Metric::DiskRequests => Some(p.disk_requests as f64),
            Metric::Time => Some(p.app_time_ns as f64 / 1e9),
        }
    }

    fn format(self, v: f64) -> String {
        match self {
            Metric::HitRatio => format!("{v:.2}"),
            Metric::DiskRequests => format!("{v:.0}"),
            Metric::Time => format!("{v:.3}"),
        }
    }
}

/// The grid's results in grid order (policy, prefetcher, size).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyResults {
    pub source: String,
    pub disk: String,
    /// `None` for block traces.
    pub layout: Option<String>,
    pub scheduler: Scheduler,
    pub preset: String,
    pub block_size: u64,
    pub footprint_blocks: u64,
    pub policies: Vec<String>,
    pub prefetchers: Vec<String>,
    /// Cache sizes in blocks.
    pub sizes: Vec<u64>,
    pub points: Vec<PolicyPoint>,
}

impl PolicyResults {
    pub fn get(&self, policy: &str, prefetch: &str, blocks: u64) -> Option<&PolicyPoint> {
        self.points.iter().find(|p| p.policy == policy && p.prefetch == prefetch && p.cache_blocks == blocks)
    }

    /// Lines of a plot: (policy, prefetcher, points in size order).
    pub fn series(&self) -> Vec<(&str, &str, Vec<&PolicyPoint>)> {
        let mut v = Vec::new();
        for pol in &self.policies {
            for pf in &self.prefetchers {
                let pts = self.points.iter().filter(|p| &p.policy == pol && &p.prefetch == pf).collect();
                v.push((pol.as_str(), pf.as_str(), pts));
            }
        }
        v
    }

    fn size_label(&self, blocks: u64) -> String {
        let mib = (blocks * self.block_size) as f64 / (1u64 << 20) as f64;
        let pct = if self.footprint_blocks > 0 { 100.0 * blocks as f64 / self.footprint_blocks as f64 } else { 0.0 };
        format!("{mib:.1}M/{pct:.0}%")
    }

    /// One table per metric (rows policy × prefetcher, columns cache sizes), then Butt et al.'s Table 5's columns
    /// (synchronous and asynchronous requests with their mean size) at the largest size.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{}: footprint {} blocks of {} B; disk {}, {}{}, preset {}",
            self.source,
            self.footprint_blocks,
            self.block_size,
            self.disk,
            self.scheduler.label(),
            self.layout.as_deref().map(|l| format!(", layout {l}")).unwrap_or_default(),
            self.preset
        );
        let rows: Vec<String> = self.series().iter().map(|(a, b, _)| format!("{a} / {b}")).collect();
        let rw = rows.iter().map(String::len).max().unwrap_or(0).max(18);
        let labels: Vec<String> = self.sizes.iter().map(|&b| self.size_label(b)).collect();
        let cw = labels.iter().map(String::len).max().unwrap_or(0).max(10);
        for m in Metric::ALL {
            let _ = writeln!(s, "\n{} against cache size (MiB / % of footprint)", m.title());
            let _ = write!(s, "{:<rw$}", "policy / prefetch");
            for l in &labels {
                let _ = write!(s, " {l:>cw$}");
            }
            let _ = writeln!(s);
            for ((pol, pf, _), row) in self.series().iter().zip(&rows) {
                let _ = write!(s, "{row:<rw$}");
                for &b in &self.sizes {
                    let v = self.get(pol, pf, b).and_then(|p| m.value(p)).map(|v| m.format(v));
                    let _ = write!(s, " {}", cell(v, cw));
                }
                let _ = writeln!(s);
            }
        }
        if let Some(&big) = self.sizes.iter().max() {
            let _ = writeln!(
                s,
                "\nsynchronous and asynchronous disk requests (mean size in blocks) at {} (Butt et al. Table 5)",
                self.size_label(big)
            );
            let _ = writeln!(
                s,
                "{:<rw$} {:>10} {:>6} {:>10} {:>6} {:>12}",
                "policy / prefetch", "sync", "size", "async", "size", "blocks read"
            );
            for ((pol, pf, _), row) in self.series().iter().zip(&rows) {
                if let Some(p) = self.get(pol, pf, big) {
                    let _ = writeln!(
                        s,
                        "{row:<rw$} {:>10} {:>6} {:>10} {:>6} {:>12}",
                        p.sync_reads.requests,
                        fixed(p.sync_reads.mean_blocks, 2),
                        p.async_reads.requests,
                        fixed(p.async_reads.mean_blocks, 2),
                        p.blocks_read
                    );
                }
            }
        }
        s
    }

    /// One line per point.
    pub fn csv(&self) -> String {
        let mut s = String::from(
            "policy,prefetch,cache_blocks,cache_bytes,hit_ratio,disk_requests,sync_requests,sync_mean_blocks,\
             async_requests,async_mean_blocks,blocks_read,prefetch_accuracy,time_ms\n",
        );
        for p in &self.points {
            let _ = writeln!(
                s,
                "\"{}\",\"{}\",{},{},{},{},{},{},{},{},{},{},{:.3}",
                p.policy,
                p.prefetch,
                p.cache_blocks,
                p.cache_bytes,
                csv_fixed(p.hit_ratio, 6),
                p.disk_requests,
                p.sync_reads.requests,
                csv_fixed(p.sync_reads.mean_blocks, 3),
                p.async_reads.requests,
                csv_fixed(p.async_reads.mean_blocks, 3),
                p.blocks_read,
                csv_fixed(p.prefetch_accuracy, 4),
                p.app_time_ns as f64 / 1e6
            );
        }
        s
    }
}

/// `x` with `decimals` decimals, `-` when undefined (tables).
fn fixed(x: Option<f64>, decimals: usize) -> String {
    x.map_or("-".to_string(), |x| format!("{x:.decimals$}"))
}

/// `x` with `decimals` decimals, empty when undefined (CSV).
fn csv_fixed(x: Option<f64>, decimals: usize) -> String {
    x.map_or(String::new(), |x| format!("{x:.decimals$}"))
}
