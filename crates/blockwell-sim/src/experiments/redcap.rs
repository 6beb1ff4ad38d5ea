//! Seed `000_*` Figure 1: the improvement in application time achieved by REDCAP over the same system without
//! it, per benchmark × processes × file layout × REDCAP configuration, with cold caches.
//!
//! Each (benchmark, processes) pair is one generated workload ([`crate::workloads`]); each (workload, layout)
//! runs once without REDCAP (the "Original Kernel") and once per REDCAP configuration, on the same disk model,
//! page cache, read-ahead and scheduler. Improvement = 1 − time with / time without (positive: REDCAP is
//! faster), as the paper's figure plots it. The seed's file systems map to layouts (ext2/ext3 → `block-groups`,
//! XFS/JFS → `single-extent`, ReiserFS → `scattered`; `contiguous` is the ideal baseline): see
//! `docs/experiments/redcap.md`.

use super::{cell, par_map, Error};
use crate::layout::LayoutKind;
use crate::vtime::{run_workload, Config, LevelConfig, PrefetchChoice, RedcapSetup, Report, Scheduler};
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
/// Layouts standing for the paper's file systems (see the module doc).
pub const LAYOUTS: [LayoutKind; 4] =
    [LayoutKind::BlockGroups, LayoutKind::Contiguous, LayoutKind::SingleExtent, LayoutKind::Scattered];

/// The grid and the system it runs on.
#[derive(Clone, Debug)]
pub struct RedcapGrid {
    /// Workload generators (any of [`crate::workloads::WorkloadKind`] that takes `procs`), optionally with
    /// parameters (`random(files=8)`); the results name benchmarks exactly as given here.
    pub benchmarks: Vec<String>,
    pub procs: Vec<u32>,
    pub layouts: Vec<LayoutKind>,
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
}

impl RedcapGrid {
    /// The paper's grid: five benchmarks × 1–32 processes × four layouts × two configurations on `wd1200bb`,
    /// a 256 MiB LRU page cache with Linux 2.4 read-ahead, C-LOOK.
    pub fn paper() -> Result<Self, Error> {
        Ok(RedcapGrid {
            benchmarks: BENCHMARKS.iter().map(|s| s.to_string()).collect(),
            procs: PROCS.to_vec(),
            layouts: LAYOUTS.to_vec(),
            configs: CONFIGS.iter().map(|s| s.to_string()).collect(),
            disk: DiskSpec::parse("wd1200bb")?,
            page_cache: Some(default_page_cache()),
            scheduler: Scheduler::CLook,
            scale: 1.0,
            layout_seed: 0,
            block_size: 4096,
            threads: super::default_threads(),
        })
    }

    /// A reduced grid for tests and a first look: 1 and 8 processes, block groups and scattered, 64×128 KiB,
    /// files at an eighth of the default size.
    pub fn quick() -> Result<Self, Error> {
        Ok(RedcapGrid {
            procs: vec![1, 8],
            layouts: vec![LayoutKind::BlockGroups, LayoutKind::Scattered],
            configs: vec![CONFIGS[0].to_string()],
            scale: 0.125,
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
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(Error::Option { option: "scale", message: format!("{} is not a positive number", self.scale) });
        }
        for c in &self.configs {
            RedcapSetup::preset(c, self.block_size)
                .map_err(|e| Error::Option { option: "configs", message: e.to_string() })?;
        }
        Ok(())
    }

    fn config(&self, layout: LayoutKind, redcap: Option<&str>) -> Result<Config, Error> {
        let redcap = match redcap {
            Some(c) => Some(
                RedcapSetup::preset(c, self.block_size)
                    .map_err(|e| Error::Option { option: "configs", message: e.to_string() })?,
            ),
            None => None,
        };
        Ok(Config {
            block_size: self.block_size,
            page_cache: self.page_cache.clone(),
            redcap,
            layout,
            layout_seed: self.layout_seed,
            scheduler: self.scheduler,
            ..Config::default()
        })
    }

    /// Runs the grid on up to [`RedcapGrid::threads`] threads; results in grid order.
    pub fn run(&self) -> Result<RedcapResults, Error> {
        self.check()?;
        // One workload per (benchmark, processes), generated once.
        let mut workloads: Vec<(String, u32, Workload)> = Vec::new();
        for b in &self.benchmarks {
            for &p in &self.procs {
                let spec = self.workload_spec(b, p)?;
                workloads.push((b.clone(), p, spec.build()?));
            }
        }
        // Jobs: (workload, layout, configuration or none for the baseline).
        let mut jobs: Vec<(usize, LayoutKind, Option<usize>)> = Vec::new();
        for w in 0..workloads.len() {
            for &l in &self.layouts {
                jobs.push((w, l, None));
                for c in 0..self.configs.len() {
                    jobs.push((w, l, Some(c)));
                }
            }
        }
        // Largest workloads first, so the last runs to finish are short ones.
        let mut order: Vec<usize> = (0..jobs.len()).collect();
        order.sort_by_key(|&j| std::cmp::Reverse(workloads[jobs[j].0].2.requests()));
        let disk = &self.disk;
        let reports = par_map(&jobs, &order, self.threads, |&(w, layout, c)| -> Result<Report, Error> {
            let (bench, procs, workload) = &workloads[w];
            let config_name = c.map(|c| self.configs[c].as_str());
            let run = || format!("{bench} with {procs} processes on {layout}, REDCAP {}", config_name.unwrap_or("off"));
            let cfg = self.config(layout, config_name)?;
            let model = disk.build()?;
            run_workload(workload, &cfg, model.as_ref()).map_err(|source| Error::Run { run: run(), source })
        });
        let mut reports = reports.into_iter();
        let mut cells = Vec::new();
        for (bench, procs, workload) in &workloads {
            for &layout in &self.layouts {
                let Some(base) = reports.next() else { break };
                let base = base?;
                for config in &self.configs {
                    let Some(with) = reports.next() else { break };
                    let with = with?;
                    cells.push(RedcapCell::new(bench, *procs, &workload.name, layout, config, &base, &with));
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
            layouts: self.layouts.iter().map(|l| l.name().to_string()).collect(),
            configs: self.configs.clone(),
            cells,
        })
    }
}

/// The page cache of the paper's grid: 256 MiB LRU with Linux 2.4 read-ahead.
pub fn default_page_cache() -> LevelConfig {
    LevelConfig::new(PolicySpec::new(blockwell_core::PolicyKind::Lru), 256 << 20).with_prefetch(PrefetchChoice::Spec(
        blockwell_core::prefetch::PrefetcherSpec::new(blockwell_core::prefetch::PrefetcherKind::Linux24),
    ))
}

pub(crate) fn describe_level(l: &LevelConfig) -> String {
    format!("{} MiB {} + {}", l.capacity_bytes >> 20, l.policy.label(), l.prefetch.label())
}

/// One cell of Figure 1.
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
    /// 1 − time with / time without.
    pub improvement: f64,
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
        layout: LayoutKind,
        config: &str,
        without: &Report,
        with: &Report,
    ) -> Self {
        let rc = with.redcap.clone().unwrap_or_default();
        RedcapCell {
            benchmark: benchmark.to_string(),
            procs,
            workload: workload.to_string(),
            layout: layout.name().to_string(),
            config: config.to_string(),
            time_without_ns: without.app_time_ns,
            time_with_ns: with.app_time_ns,
            improvement: if without.app_time_ns == 0 {
                0.0
            } else {
                1.0 - with.app_time_ns as f64 / without.app_time_ns as f64
            },
            active_fraction: rc.active_fraction,
            switches: rc.switches,
            disk_reads_without: without.disk_reads(),
            disk_reads_with: with.disk_reads(),
            blocks_read_without: without.device.blocks_read,
            blocks_read_with: with.device.blocks_read,
        }
    }
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
            "REDCAP vs none: improvement in application time (REDCAP active fraction); disk {}, page cache {}, {}, scale {}",
            self.disk,
            self.page_cache.as_deref().unwrap_or("none"),
            match self.scheduler {
                Scheduler::Fifo => "FIFO",
                Scheduler::CLook => "C-LOOK",
            },
            self.scale
        );
        let cols: Vec<(&str, &str)> =
            self.layouts.iter().flat_map(|l| self.configs.iter().map(move |c| (l.as_str(), c.as_str()))).collect();
        let w = cols.iter().map(|(l, c)| l.len() + c.len() + 1).max().unwrap_or(0).max(16);
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
                    let v = self
                        .get(b, p, l, c)
                        .map(|x| format!("{:+.1}% ({:.0}%)", x.improvement * 100.0, x.active_fraction * 100.0));
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
            "benchmark,procs,layout,config,workload,time_without_ms,time_with_ms,improvement_pct,active_pct,switches,\
             disk_reads_without,disk_reads_with,blocks_read_without,blocks_read_with\n",
        );
        for c in &self.cells {
            let _ = writeln!(
                s,
                "{},{},{},{},\"{}\",{:.3},{:.3},{:.2},{:.1},{},{},{},{},{}",
                c.benchmark,
                c.procs,
                c.layout,
                c.config,
                c.workload,
                c.time_without_ns as f64 / 1e6,
                c.time_with_ns as f64 / 1e6,
                c.improvement * 100.0,
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
