//! Seed `000_*` Figure 1: the improvement in application time achieved by REDCAP over the same system without
//! it, per benchmark × processes × file layout × REDCAP configuration, with cold caches.
//!
//! Each (benchmark, processes) pair is one generated workload ([`crate::workloads`]); each (workload, layout)
//! runs once without REDCAP (the "Original Kernel") and once per REDCAP configuration, on the same disk model,
//! page cache, read-ahead and scheduler. Improvement = 1 − time with / time without (positive: REDCAP is
//! faster), as the paper's figure plots it. The seed's file systems map to layouts (ext3 → `block-groups`, ext2 → `block-groups(rsv_min=0)`,
//! XFS/JFS → `single-extent`, ReiserFS → `reiserfs`; `contiguous` is the ideal baseline): see
//! `docs/experiments/redcap.md`.
//!
//! **Repeated runs.** Like the paper (five runs per point, mean and 95 % confidence interval), each cell runs
//! [`RedcapGrid::runs`] times. Run `r` (1-based) starts each process after a delay drawn uniformly from
//! `0..=start_jitter_ns` with seed `r` ([`Config::start_jitter_ns`]), the same delays with and without REDCAP
//! (paired runs). Generated processes are identical: started at exactly the same instant they can run in
//! lock-step, which on interleaved layouts is a fast, fragile state that a few milliseconds of difference
//! destroy (`docs/experiments/redcap.md` measures how much). A cell reports the mean of the per-run
//! improvements, its 95 % confidence half-width (Student's t), and the other quantities' means.

use super::{bad, cell, par_map_progress, Error, Progress};
use crate::layout::{LayoutKind, LayoutSpec};
use crate::vtime::{run_workload, Config, LevelConfig, PrefetchChoice, RedcapSetup, Report, Scheduler, Shadow};
use crate::workload::Workload;
use crate::workloads::WorkloadSpec;
use blockwell_core::policy::PolicySpec;
use blockwell_disk::DiskSpec;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Seed 000's five benchmarks, in the paper's order.
pub const BENCHMARKS: [&str; 5] = ["kernel-read", "ior", "tac", "strided-4k", "strided-512k"];
/// Processes of the paper's runs.
pub const PROCS: [u32; 6] = [1, 2, 4, 8, 16, 32];
/// REDCAP configurations of the paper.
pub const CONFIGS: [&str; 2] = ["64x128k", "128x128k"];
/// Layouts standing for the paper's file systems (see the module doc): ext3, ext2 (block groups without
/// reservation windows), JFS, ReiserFS, and the contiguous baseline.
pub const LAYOUTS: [&str; 5] = ["block-groups", "block-groups(rsv_min=0)", "contiguous", "single-extent", "reiserfs"];

/// The grid and the system it runs on.
#[derive(Clone, Debug)]
pub struct RedcapGrid {
    /// Workload generators (any of [`crate::workloads::WorkloadKind`] that takes `procs`), optionally with
    /// parameters (`random(files=8)`); the results name benchmarks exactly as given here.
    pub benchmarks: Vec<String>,
    pub procs: Vec<u32>,
    pub layouts: Vec<LayoutSpec>,
    /// REDCAP presets (`64x128k`, `128x128k`).
    pub configs: Vec<String>,
    pub disk: DiskSpec,
    /// The page cache above (the paper's kernels had one, with read-ahead).
    pub page_cache: Option<LevelConfig>,
    pub scheduler: Scheduler,
    /// Multiplies the generators' data sizes (`file_mb`, kernel-read's `files` and `dirs`); 1 = their defaults.
    pub scale: f64,
    pub layout_seed: u64,
    pub block_size: u64,
    pub threads: usize,
    /// Runs per cell (at least 1), each with its own start-jitter seed.
    pub runs: u32,
    /// Each process starts after a uniform delay in `0..=start_jitter_ns` (0: all start together, lock-step).
    pub start_jitter_ns: u64,
    /// How REDCAP's shadow devices are fed ([`RedcapSetup::shadow`]).
    pub shadow: Shadow,
    /// Random addition of up to this much to every think time ([`Config::think_jitter_ns`]; 0: none).
    pub think_jitter_ns: u64,
    /// Processors the think times run on ([`Config::cpus`]; 0: unlimited). The paper's machine had one.
    pub cpus: u32,
}

/// Default start jitter of the grid: 10 ms, about what starting processes one after the other from a shell
/// costs, and more than a disk access.
pub const START_JITTER_NS: u64 = 10_000_000;

impl RedcapGrid {
    /// The paper's grid: five benchmarks × 1–32 processes × four layouts × two configurations on `wd1200bb`,
    /// a 256 MiB LRU page cache with Linux 2.6.14 read-ahead (`linux26`), CFQ; ext3 and ext2 block groups.
    pub fn paper() -> Result<Self, Error> {
        Ok(RedcapGrid {
            benchmarks: BENCHMARKS.iter().map(|s| s.to_string()).collect(),
            procs: PROCS.to_vec(),
            layouts: LAYOUTS.iter().map(|s| LayoutSpec::parse(s)).collect::<Result<_, _>>()?,
            configs: CONFIGS.iter().map(|s| s.to_string()).collect(),
            disk: DiskSpec::parse("wd1200bb")?,
            page_cache: Some(default_page_cache()),
            scheduler: Scheduler::CFQ,
            scale: 1.0,
            layout_seed: 0,
            block_size: 4096,
            threads: super::default_threads(),
            runs: 5,
            start_jitter_ns: START_JITTER_NS,
            shadow: Shadow::default(),
            think_jitter_ns: 0,
            cpus: 1,
        })
    }

    /// A reduced grid for tests and a first look: 1 and 8 processes, block groups and scattered, 64×128 KiB,
    /// files at an eighth of the default size.
    pub fn quick() -> Result<Self, Error> {
        Ok(RedcapGrid {
            procs: vec![1, 8],
            layouts: vec![LayoutKind::BlockGroups.into(), LayoutKind::Scattered.into()],
            configs: vec![CONFIGS[0].to_string()],
            scale: 0.125,
            runs: 3,
            ..Self::paper()?
        })
    }

    /// The workload spec of `benchmark` with `procs` processes at this grid's scale.
    pub fn workload_spec(&self, benchmark: &str, procs: u32) -> Result<WorkloadSpec, Error> {
        let base = WorkloadSpec::parse(benchmark)?;
        let defaults = base.kind.defaults();
        let mut params = vec![format!("procs={procs}")];
        let scaled = |key: &str| -> Option<u64> {
            let v = defaults.get(key)?.as_u64()?;
            Some(((v as f64 * self.scale).round() as u64).max(1))
        };
        if self.scale != 1.0 {
            for key in ["file_mb", "files", "dirs"] {
                if !base.overrides.contains_key(key) {
                    if let Some(v) = scaled(key) {
                        params.push(format!("{key}={v}"));
                    }
                }
            }
        }
        for (k, v) in &base.overrides {
            if k != "procs" {
                params.push(format!("{k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_string)));
            }
        }
        Ok(WorkloadSpec::parse(&format!("{}({})", base.kind.name(), params.join(",")))?)
    }

    fn check(&self) -> Result<(), Error> {
        let empty = |option: &'static str, v: bool| {
            if v {
                Err(Error::Option { option, message: "the list is empty".into() })
            } else {
                Ok(())
            }
        };
        empty("benchmarks", self.benchmarks.is_empty())?;
        empty("procs", self.procs.is_empty())?;
        empty("layouts", self.layouts.is_empty())?;
        empty("configs", self.configs.is_empty())?;
        if self.runs == 0 {
            return Err(Error::Option { option: "runs", message: "must be at least 1".into() });
        }
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(Error::Option { option: "scale", message: format!("{} is not a positive number", self.scale) });
        }
        for c in &self.configs {
            RedcapSetup::preset(c, self.block_size)
                .map_err(|e| Error::Option { option: "configs", message: e.to_string() })?;
        }
        Ok(())
    }

    fn config(&self, layout: &LayoutSpec, redcap: Option<&str>, run: u32) -> Result<Config, Error> {
        let redcap = match redcap {
            Some(c) => Some(RedcapSetup {
                shadow: self.shadow,
                ..RedcapSetup::preset(c, self.block_size)
                    .map_err(|e| Error::Option { option: "configs", message: e.to_string() })?
            }),
            None => None,
        };
        Ok(Config {
            block_size: self.block_size,
            page_cache: self.page_cache.clone(),
            redcap,
            layout: layout.clone(),
            layout_seed: self.layout_seed,
            scheduler: self.scheduler,
            start_jitter_ns: self.start_jitter_ns,
            start_seed: u64::from(run),
            think_jitter_ns: self.think_jitter_ns,
            cpus: self.cpus,
            ..Config::default()
        })
    }

    /// Runs the grid on up to [`RedcapGrid::threads`] threads; results in grid order.
    pub fn run(&self) -> Result<RedcapResults, Error> {
        self.run_with_progress(&|_, _| {})
    }

    /// [`RedcapGrid::run`], calling `progress` with (runs done, runs in all) as runs finish.
    pub fn run_with_progress(&self, progress: Progress<'_>) -> Result<RedcapResults, Error> {
        self.check()?;
        // One workload per (benchmark, processes), generated once.
        let mut workloads: Vec<(String, u32, Workload)> = Vec::new();
        for b in &self.benchmarks {
            for &p in &self.procs {
                let spec = self.workload_spec(b, p)?;
                workloads.push((b.clone(), p, spec.build()?));
            }
        }
        // Jobs: (workload, layout, configuration or none for the baseline, run).
        let mut jobs: Vec<(usize, &LayoutSpec, Option<usize>, u32)> = Vec::new();
        for w in 0..workloads.len() {
            for l in &self.layouts {
                for run in 1..=self.runs {
                    jobs.push((w, l, None, run));
                    for c in 0..self.configs.len() {
                        jobs.push((w, l, Some(c), run));
                    }
                }
            }
        }
        // Largest workloads first, so the last runs to finish are short ones.
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by_key(|&j| std::cmp::Reverse(workloads[jobs[j].0].2.requests()));
        let disk = &self.disk;
        let reports = par_map_progress(
            &jobs,
            &order,
            self.threads,
            |&(w, layout, c, r)| -> Result<Report, Error> {
                let (bench, procs, workload) = &workloads[w];
                let config_name = c.map(|c| self.configs[c].as_str());
                let run = || {
                    format!(
                        "{bench} with {procs} processes on {layout}, REDCAP {}, run {r}",
                        config_name.unwrap_or("off")
                    )
                };
                let cfg = self.config(layout, config_name, r)?;
                let model = disk.build()?;
                run_workload(workload, &cfg, model.as_ref()).map_err(|source| Error::Run { run: run(), source })
            },
            progress,
        );
        let mut reports = reports.into_iter();
        let mut cells = Vec::new();
        for (bench, procs, workload) in &workloads {
            for layout in &self.layouts {
                // pairs[c]: (without, with) per run, for configuration c.
                let mut pairs: Vec<Vec<(Report, Report)>> = vec![Vec::new(); self.configs.len()];
                for _ in 0..self.runs {
                    let Some(base) = reports.next() else { break };
                    let base = base?;
                    for pc in pairs.iter_mut() {
                        let Some(with) = reports.next() else { break };
                        pc.push((base.clone(), with?));
                    }
                }
                for (config, runs) in self.configs.iter().zip(&pairs) {
                    cells.push(RedcapCell::new(bench, *procs, &workload.name, layout, config, runs));
                }
            }
        }
        Ok(RedcapResults {
            disk: self.disk.label().to_string(),
            page_cache: self.page_cache.as_ref().map(describe_level),
            scheduler: self.scheduler,
            scale: self.scale,
            block_size: self.block_size,
            benchmarks: self.benchmarks.clone(),
            procs: self.procs.clone(),
            layouts: self.layouts.iter().map(|l| l.to_string()).collect(),
            configs: self.configs.clone(),
            runs: self.runs,
            start_jitter_ns: self.start_jitter_ns,
            shadow: self.shadow.to_string(),
            think_jitter_ns: self.think_jitter_ns,
            cpus: self.cpus,
            cells,
        })
    }
}

/// The grid's settings as a user writes them, for `blockwell experiment redcap` and Python's
/// `blockwell.experiments.redcap`: lists of specs, sizes as text (`256MiB`). [`RedcapOptions::grid`] checks
/// them and builds the grid; an error names the option (by its field name, [`Error::option`]). The defaults
/// are the paper's grid ([`RedcapGrid::paper`]); `quick` starts from [`RedcapGrid::quick`] instead, and every
/// option given still applies.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedcapOptions {
    pub quick: bool,
    /// Workload generators with a `procs` parameter, with parameters (`random(files=8)`).
    pub benchmarks: Option<Vec<String>>,
    pub procs: Option<Vec<u32>>,
    pub layouts: Option<Vec<String>>,
    /// REDCAP presets (`64x128k`).
    pub configs: Option<Vec<String>>,
    pub scale: Option<f64>,
    pub disk: String,
    /// Page-cache size (`0`: none).
    pub page_cache: String,
    pub page_policy: String,
    pub page_prefetch: String,
    pub scheduler: String,
    pub layout_seed: u64,
    pub runs: Option<u32>,
    pub start_jitter_ms: f64,
    pub shadow: String,
    pub think_jitter_us: u64,
    /// Processors the processes' think times share (`0`: one per process).
    pub cpus: u32,
    /// Threads (`None`: every core); results do not depend on it.
    pub threads: Option<usize>,
}

impl Default for RedcapOptions {
    fn default() -> Self {
        RedcapOptions {
            quick: false,
            benchmarks: None,
            procs: None,
            layouts: None,
            configs: None,
            scale: None,
            disk: "wd1200bb".into(),
            page_cache: "256MiB".into(),
            page_policy: "lru".into(),
            page_prefetch: "linux26".into(),
            scheduler: "cfq".into(),
            layout_seed: 0,
            runs: None,
            start_jitter_ms: START_JITTER_NS as f64 / 1e6,
            shadow: "closed-loop".into(),
            think_jitter_us: 0,
            cpus: 1,
            threads: None,
        }
    }
}

impl RedcapOptions {
    /// The grid these options describe, every setting checked (each workload spec too) before anything runs.
    pub fn grid(&self) -> Result<RedcapGrid, Error> {
        let mut g = if self.quick { RedcapGrid::quick()? } else { RedcapGrid::paper()? };
        if let Some(list) = &self.benchmarks {
            for b in list {
                let spec = WorkloadSpec::parse(b).map_err(|e| bad("benchmarks")(&e))?;
                if !spec.kind.defaults().contains_key("procs") {
                    return Err(bad("benchmarks")(&format!("'{b}' has no procs parameter")));
                }
            }
            g.benchmarks = list.clone();
        }
        if let Some(p) = &self.procs {
            let max = crate::workloads::MAX_PROCS;
            if let Some(x) = p.iter().find(|&&n| !(1..=max).contains(&n)) {
                return Err(bad("procs")(&format!("'{x}' is not a process count from 1 to {max}")));
            }
            g.procs = p.clone();
        }
        if let Some(l) = &self.layouts {
            g.layouts =
                l.iter().map(|x| x.parse::<LayoutSpec>()).collect::<Result<_, _>>().map_err(|e| bad("layouts")(&e))?;
            for l in &g.layouts {
                l.params.validate(g.block_size).map_err(|e| bad("layouts")(&format!("{l}: {e}")))?;
            }
        }
        if let Some(c) = &self.configs {
            g.configs = c.clone();
        }
        if let Some(s) = self.scale {
            g.scale = s;
        }
        g.disk = DiskSpec::parse(&self.disk).map_err(|e| bad("disk")(&e))?;
        g.disk.build().map_err(|e| bad("disk")(&e))?;
        let bytes = crate::size::parse_bytes(&self.page_cache).map_err(|e| bad("page_cache")(&e))?;
        g.page_cache = if bytes == 0 {
            None
        } else {
            let policy = PolicySpec::parse(&self.page_policy).map_err(|e| bad("page_policy")(&e))?;
            let prefetch = PrefetchChoice::parse(&self.page_prefetch).map_err(|e| bad("page_prefetch")(&e))?;
            Some(LevelConfig::new(policy, bytes).with_prefetch(prefetch))
        };
        g.scheduler = Scheduler::parse(&self.scheduler).map_err(|e| bad("scheduler")(&e))?;
        g.layout_seed = self.layout_seed;
        if let Some(r) = self.runs {
            g.runs = r;
        }
        let ms = self.start_jitter_ms;
        if !(ms.is_finite() && (0.0..=3.6e6).contains(&ms)) {
            return Err(bad("start_jitter_ms")(&format!("{ms} is not a number of milliseconds from 0 to 3600000")));
        }
        g.start_jitter_ns = (ms * 1e6).round() as u64;
        g.shadow = self.shadow.parse().map_err(|e| bad("shadow")(&e))?;
        g.think_jitter_ns = self.think_jitter_us.saturating_mul(1000);
        g.cpus = self.cpus;
        g.threads = super::threads_option(self.threads)?;
        g.check()?;
        for b in &g.benchmarks {
            for &p in &g.procs {
                g.workload_spec(b, p).map_err(|e| bad("benchmarks")(&format!("{b} with {p} processes: {e}")))?;
            }
        }
        Ok(g)
    }
}

/// The page cache of the paper's grid: 256 MiB LRU with the read-ahead of the seed's kernel, Linux 2.6.14 (`linux26`).
pub fn default_page_cache() -> LevelConfig {
    LevelConfig::new(PolicySpec::new(blockwell_core::PolicyKind::Lru), 256 << 20).with_prefetch(PrefetchChoice::Spec(
        blockwell_core::prefetch::PrefetcherSpec::new(blockwell_core::prefetch::PrefetcherKind::Linux26),
    ))
}

pub(crate) fn describe_level(l: &LevelConfig) -> String {
    format!("{} MiB {} + {}", l.capacity_bytes >> 20, l.policy.label(), l.prefetch.label())
}

/// One cell of Figure 1: means over the runs (integers rounded to the nearest).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RedcapCell {
    pub benchmark: String,
    pub procs: u32,
    /// The generated workload's spec.
    pub workload: String,
    pub layout: String,
    pub config: String,
    pub time_without_ns: u64,
    pub time_with_ns: u64,
    /// Mean over the runs of 1 − time with / time without.
    pub improvement: f64,
    /// Half-width of the 95 % confidence interval of `improvement` (Student's t; 0 with one run).
    pub improvement_ci95: f64,
    /// Each run's improvement, in run order.
    pub improvement_runs: Vec<f64>,
    /// REDCAP's fraction of the time active.
    pub active_fraction: f64,
    pub switches: u64,
    pub disk_reads_without: u64,
    pub disk_reads_with: u64,
    pub blocks_read_without: u64,
    pub blocks_read_with: u64,
}

impl RedcapCell {
    fn new(
        benchmark: &str,
        procs: u32,
        workload: &str,
        layout: &LayoutSpec,
        config: &str,
        runs: &[(Report, Report)],
    ) -> Self {
        let n = runs.len().max(1) as f64;
        let mean_u = |f: &dyn Fn(&Report, &Report) -> u64| -> u64 {
            (runs.iter().map(|(a, b)| f(a, b) as f64).sum::<f64>() / n).round() as u64
        };
        let improvement_runs: Vec<f64> = runs
            .iter()
            .map(|(without, with)| {
                if without.app_time_ns == 0 {
                    0.0
                } else {
                    1.0 - with.app_time_ns as f64 / without.app_time_ns as f64
                }
            })
            .collect();
        let (improvement, improvement_ci95) = mean_ci95(&improvement_runs);
        let rc = |r: &Report| r.redcap.clone().unwrap_or_default();
        RedcapCell {
            benchmark: benchmark.to_string(),
            procs,
            workload: workload.to_string(),
            layout: layout.to_string(),
            config: config.to_string(),
            time_without_ns: mean_u(&|a, _| a.app_time_ns),
            time_with_ns: mean_u(&|_, b| b.app_time_ns),
            improvement,
            improvement_ci95,
            improvement_runs,
            active_fraction: runs.iter().map(|(_, b)| rc(b).active_fraction).sum::<f64>() / n,
            switches: mean_u(&|_, b| rc(b).switches),
            disk_reads_without: mean_u(&|a, _| a.disk_reads()),
            disk_reads_with: mean_u(&|_, b| b.disk_reads()),
            blocks_read_without: mean_u(&|a, _| a.device.blocks_read),
            blocks_read_with: mean_u(&|_, b| b.device.blocks_read),
        }
    }
}

/// Mean and half-width of the 95 % confidence interval (Student's t, two-sided) of `v`; 0 for fewer than two
/// values.
pub fn mean_ci95(v: &[f64]) -> (f64, f64) {
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (mean, 0.0);
    }
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, t95(v.len() - 1) * (var / n).sqrt())
}

/// The 0.975 quantile of Student's t with `df` degrees of freedom (the normal's 1.960 above 30).
fn t95(df: usize) -> f64 {
    const T: [f64; 30] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    ];
    T.get(df.wrapping_sub(1)).copied().unwrap_or(1.960)
}

/// The grid's results, in grid order (benchmark, processes, layout, configuration).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RedcapResults {
    pub disk: String,
    pub page_cache: Option<String>,
    pub scheduler: Scheduler,
    pub scale: f64,
    pub block_size: u64,
    pub benchmarks: Vec<String>,
    pub procs: Vec<u32>,
    pub layouts: Vec<String>,
    pub configs: Vec<String>,
    /// Runs per cell and the start jitter of each process (see the module doc).
    pub runs: u32,
    pub start_jitter_ns: u64,
    /// How REDCAP's shadows were fed ([`Shadow`]'s spec).
    pub shadow: String,
    /// Largest random addition to each think time (0: none).
    #[serde(default)]
    pub think_jitter_ns: u64,
    /// Processors the think times ran on (0: one per process).
    #[serde(default)]
    pub cpus: u32,
    pub cells: Vec<RedcapCell>,
}

impl RedcapResults {
    /// The cell of one point of the grid.
    pub fn get(&self, benchmark: &str, procs: u32, layout: &str, config: &str) -> Option<&RedcapCell> {
        self.cells
            .iter()
            .find(|c| c.benchmark == benchmark && c.procs == procs && c.layout == layout && c.config == config)
    }

    /// One table per benchmark: rows processes, columns layout × configuration, cells the improvement with
    /// REDCAP's active fraction in parentheses.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "REDCAP vs none: improvement in application time, mean of {} runs ± 95% CI (REDCAP active fraction); \
             start jitter {} ms{}{}, shadow {}; disk {}, page cache {}, {}, scale {}",
            self.runs,
            self.start_jitter_ns as f64 / 1e6,
            if self.think_jitter_ns > 0 {
                format!(", think jitter {} us", self.think_jitter_ns as f64 / 1e3)
            } else {
                String::new()
            },
            match self.cpus {
                0 => ", a CPU per process".to_string(),
                1 => String::new(),
                n => format!(", {n} CPUs"),
            },
            self.shadow,
            self.disk,
            self.page_cache.as_deref().unwrap_or("none"),
            self.scheduler.label(),
            self.scale
        );
        let cols: Vec<(&str, &str)> =
            self.layouts.iter().flat_map(|l| self.configs.iter().map(move |c| (l.as_str(), c.as_str()))).collect();
        let w = cols.iter().map(|(l, c)| l.len() + c.len() + 1).max().unwrap_or(0).max(23);
        for b in &self.benchmarks {
            let _ = writeln!(s, "\n{b}");
            let _ = write!(s, "{:>6}", "procs");
            for (l, c) in &cols {
                let _ = write!(s, " {:>w$}", format!("{l} {c}"));
            }
            let _ = writeln!(s);
            for &p in &self.procs {
                let _ = write!(s, "{p:>6}");
                for (l, c) in &cols {
                    let v = self.get(b, p, l, c).map(|x| {
                        let ci =
                            if self.runs > 1 { format!(" ±{:.1}", x.improvement_ci95 * 100.0) } else { String::new() };
                        format!("{:+.1}%{ci} ({:.0}%)", x.improvement * 100.0, x.active_fraction * 100.0)
                    });
                    let _ = write!(s, " {}", cell(v, w));
                }
                let _ = writeln!(s);
            }
        }
        s
    }

    /// One line per cell.
    pub fn csv(&self) -> String {
        let mut s = String::from(
            "benchmark,procs,layout,config,workload,time_without_ms,time_with_ms,improvement_pct,ci95_pct,active_pct,switches,\
             disk_reads_without,disk_reads_with,blocks_read_without,blocks_read_with\n",
        );
        for c in &self.cells {
            let _ = writeln!(
                s,
                "\"{}\",{},\"{}\",{},\"{}\",{:.3},{:.3},{:.2},{:.2},{:.1},{},{},{},{},{}",
                c.benchmark,
                c.procs,
                c.layout,
                c.config,
                c.workload,
                c.time_without_ns as f64 / 1e6,
                c.time_with_ns as f64 / 1e6,
                c.improvement * 100.0,
                c.improvement_ci95 * 100.0,
                c.active_fraction * 100.0,
                c.switches,
                c.disk_reads_without,
                c.disk_reads_with,
                c.blocks_read_without,
                c.blocks_read_with
            );
        }
        s
    }
}
