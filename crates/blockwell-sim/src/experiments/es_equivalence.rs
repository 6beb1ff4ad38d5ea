//! Seed `002_*` (extended storage), Table II: for each workload, each slowdown factor of file memory relative to
//! DRAM and each reference size, the tier capacity whose time matches a DRAM tier of the reference size
//! ([`crate::estier::search`]), with the mean ratio and the break-even price per slowdown; optionally the
//! per-level metrics of the reference (slowdown 1) and of a tier of the same size at the largest slowdown.
//!
//! Workloads are generated one at a time, by name ([`EsWorkload::named`]); reference sizes are pages or
//! percentages of each workload's working set. Model and parameters: `docs/extended-storage.md`.

use super::{bad, Error};
use crate::estier::{equivalence_table, simulate, EsConfig, EsMode, EsReport, EsTable, EsWorkload, SearchConfig};
use crate::replay::CacheSize;
use crate::size::SizeSpec;
use blockwell_core::PolicySpec;
use blockwell_disk::DiskSpec;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// The grid.
#[derive(Clone, Debug)]
pub struct EsGrid {
    /// The hierarchy every run starts from; the runs set the tier's size and slowdown.
    pub base: EsConfig,
    /// Workload names, in table order: `postmark`, `bonnie`.
    pub workloads: Vec<String>,
    /// Scale of the workloads (1 = the paper's).
    pub scale: f64,
    /// Seed of the workload generators.
    pub seed: u64,
    /// Reference DRAM tier sizes, in pages or percent of the workload's working set (at least one page).
    pub sizes: Vec<CacheSize>,
    /// Slowdown factors, each at least 1.
    pub slowdowns: Vec<f64>,
    pub search: SearchConfig,
}

/// One line of the per-level metrics.
#[derive(Clone, Debug, Serialize)]
pub struct LevelLine {
    pub workload: String,
    pub es_blocks: usize,
    pub slowdown: f64,
    pub report: EsReport,
}

impl EsGrid {
    /// The paper's grid: PostMark and Bonnie at the paper's scale (seed 1), reference sizes of 12.5 % to 75 % of
    /// the working set in steps of 12.5 %, slowdowns 1 to 5, the default hierarchy ([`EsConfig::default`]) and
    /// search.
    pub fn paper() -> EsGrid {
        EsGrid {
            base: EsConfig::default(),
            workloads: vec!["postmark".into(), "bonnie".into()],
            scale: 1.0,
            seed: 1,
            sizes: [12.5, 25.0, 37.5, 50.0, 62.5, 75.0].into_iter().map(CacheSize::PercentOfFootprint).collect(),
            slowdowns: vec![1.0, 2.0, 3.0, 4.0, 5.0],
            search: SearchConfig::default(),
        }
    }

    fn check(&self) -> Result<(), Error> {
        if self.slowdowns.is_empty() || self.slowdowns.iter().any(|&s| !(s.is_finite() && s >= 1.0)) {
            return Err(Error::Option { option: "slowdowns", message: "give factors >= 1".into() });
        }
        if self.sizes.is_empty() {
            return Err(Error::Option { option: "sizes", message: "no size given".into() });
        }
        Ok(())
    }

    fn workload(&self, name: &str) -> Result<EsWorkload, Error> {
        EsWorkload::named(name, self.scale, self.seed)
            .map_err(|source| Error::EsWorkload { name: name.to_string(), source })
    }

    /// One table per workload, in [`EsGrid::workloads`] order.
    pub fn tables(&self) -> Result<Vec<EsTable>, Error> {
        self.check()?;
        let mut out = Vec::new();
        for name in &self.workloads {
            let w = self.workload(name)?;
            let refs: Vec<usize> = self.sizes.iter().map(|s| s.blocks(w.working_set).max(1) as usize).collect();
            out.push(equivalence_table(&self.base, &w, &refs, &self.slowdowns, &self.search)?);
        }
        Ok(out)
    }

    /// Per table and reference size, the metrics at slowdown 1 and at the table's largest slowdown.
    pub fn levels(&self, tables: &[EsTable]) -> Result<Vec<LevelLine>, Error> {
        let mut out = Vec::new();
        for t in tables {
            let w = self.workload(&t.workload)?;
            let smax = t.rows.iter().map(|r| r.slowdown).fold(1.0, f64::max);
            for &b in &t.reference_blocks {
                for s in [1.0, smax] {
                    let report = simulate(&EsConfig { es_blocks: b, slowdown: s, ..self.base.clone() }, &w)?;
                    out.push(LevelLine { workload: t.workload.clone(), es_blocks: b, slowdown: s, report });
                }
            }
        }
        Ok(out)
    }
}

/// The grid's settings as a user writes them, for `blockwell experiment es-equivalence` and Python's
/// `blockwell.experiments.es_equivalence`. [`EsOptions::grid`] checks them; an error names the option (by its
/// field name, [`Error::option`]). The defaults are the paper's grid ([`EsGrid::paper`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EsOptions {
    /// `postmark`, `bonnie`.
    pub workload: Vec<String>,
    pub scale: f64,
    pub seed: u64,
    /// Reference DRAM tier sizes: `25%` of the working set, `256MiB`, `65536blocks` (4 KiB pages); `None`:
    /// the paper's.
    pub cache: Option<Vec<String>>,
    pub slowdowns: Vec<f64>,
    /// DRAM page cache above the tier (`0`: none, Koob et al.'s model).
    pub page_cache: String,
    /// Tier mode with a page cache: `inclusive` or `exclusive`.
    pub mode: String,
    /// Policy of both levels.
    pub policy: String,
    pub disk: String,
    pub dram_ns: u64,
    pub transfer_ns: u64,
    /// Search tolerance, a fraction of the reference capacity.
    pub tolerance: f64,
    /// Threads (`None`: every core); results do not depend on it.
    pub threads: Option<usize>,
}

impl Default for EsOptions {
    fn default() -> Self {
        let p = EsGrid::paper();
        EsOptions {
            workload: p.workloads,
            scale: p.scale,
            seed: p.seed,
            cache: None,
            slowdowns: p.slowdowns,
            page_cache: "0".into(),
            mode: "inclusive".into(),
            policy: "lru".into(),
            disk: "cheetah9lp".into(),
            dram_ns: p.base.dram_ns,
            transfer_ns: p.base.transfer_ns,
            tolerance: p.search.tolerance,
            threads: None,
        }
    }
}

impl EsOptions {
    /// The grid these options describe.
    pub fn grid(&self) -> Result<EsGrid, Error> {
        let mut g = EsGrid::paper();
        if let Some(c) = &self.cache {
            // Reference sizes are counted in 4 KiB pages.
            g.sizes = c
                .iter()
                .map(|s| {
                    Ok(match SizeSpec::parse(s).map_err(|e| bad("cache")(&e))? {
                        SizeSpec::Bytes(b) => CacheSize::Blocks(b / 4096),
                        SizeSpec::Blocks(n) => CacheSize::Blocks(n),
                        SizeSpec::Percent(p) => CacheSize::PercentOfFootprint(p),
                    })
                })
                .collect::<Result<_, Error>>()?;
        }
        let page_cache = crate::size::parse_bytes(&self.page_cache).map_err(|e| bad("page_cache")(&e))?;
        let policy = PolicySpec::parse(&self.policy).map_err(|e| bad("policy")(&e))?;
        let disk = DiskSpec::parse(&self.disk).map_err(|e| bad("disk")(&e))?;
        disk.build().map_err(|e| bad("disk")(&e))?;
        g.base = EsConfig {
            dram_blocks: usize::try_from(page_cache / 4096).map_err(|e| bad("page_cache")(&e))?,
            dram_policy: policy.clone(),
            es_policy: policy,
            dram_ns: self.dram_ns,
            transfer_ns: self.transfer_ns,
            mode: EsMode::from_name(&self.mode).map_err(|e| bad("mode")(&e))?,
            disk,
            ..EsConfig::default()
        };
        g.workloads = self.workload.iter().map(|w| w.trim().to_string()).filter(|w| !w.is_empty()).collect();
        if g.workloads.is_empty() {
            return Err(bad("workload")(&"the list is empty"));
        }
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(bad("scale")(&format!("{} is not a positive number", self.scale)));
        }
        g.scale = self.scale;
        g.seed = self.seed;
        g.slowdowns = self.slowdowns.clone();
        if !(self.tolerance.is_finite() && self.tolerance > 0.0) {
            return Err(bad("tolerance")(&format!("{} is not a positive fraction", self.tolerance)));
        }
        g.search =
            SearchConfig { tolerance: self.tolerance, max_blocks: None, threads: super::threads_option(self.threads)? };
        g.check()?;
        Ok(g)
    }
}

/// The tables as CSV: one line per (workload, slowdown, reference size).
pub fn csv(tables: &[EsTable]) -> String {
    let mut out = String::from(
        "workload,slowdown,reference_blocks,reference_ns,equivalent_blocks,equivalent_ns,ratio,evaluations\n",
    );
    for t in tables {
        for r in &t.rows {
            for e in &r.per_size {
                let o = |x: Option<String>| x.unwrap_or_default();
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{},{},{}",
                    t.workload,
                    e.slowdown,
                    e.reference_blocks,
                    e.reference_ns,
                    o(e.equivalent_blocks.map(|v| v.to_string())),
                    o(e.equivalent_ns.map(|v| v.to_string())),
                    o(e.ratio.map(|v| format!("{v:.6}"))),
                    e.evaluations
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(workloads: &[&str]) -> EsGrid {
        EsGrid {
            workloads: workloads.iter().map(|w| w.to_string()).collect(),
            scale: 0.01,
            sizes: vec![CacheSize::PercentOfFootprint(25.0), CacheSize::PercentOfFootprint(50.0)],
            slowdowns: vec![1.0, 3.0],
            ..EsGrid::paper()
        }
    }

    #[test]
    fn tables_follow_the_workloads_and_slowdown_1_is_ratio_1() {
        let t = grid(&["postmark", "bonnie"]).tables().unwrap();
        assert_eq!(t.iter().map(|t| t.workload.as_str()).collect::<Vec<_>>(), ["postmark", "bonnie"]);
        for table in &t {
            assert_eq!(table.reference_blocks.len(), 2);
            assert_eq!(table.rows.iter().map(|r| r.slowdown).collect::<Vec<_>>(), [1.0, 3.0]);
            assert_eq!(table.rows[0].mean_ratio, Some(1.0));
        }
    }

    #[test]
    fn levels_pair_the_reference_with_the_slowest_tier() {
        let g = grid(&["bonnie"]);
        let l = g.levels(&g.tables().unwrap()).unwrap();
        assert_eq!(l.iter().map(|l| l.slowdown).collect::<Vec<_>>(), [1.0, 3.0, 1.0, 3.0]);
        // Same tier size: same misses, three times the tier time.
        assert_eq!(l[0].report.es.read_misses, l[1].report.es.read_misses);
        assert_eq!(3 * l[0].report.es.time_ns, l[1].report.es.time_ns);
    }

    #[test]
    fn bad_settings_are_errors_naming_them() {
        let e = grid(&["tpcc"]).tables().unwrap_err();
        assert!(matches!(&e, Error::EsWorkload { name, .. } if name == "tpcc"), "{e}");
        let mut g = grid(&["bonnie"]);
        g.slowdowns = vec![0.5];
        assert!(matches!(g.tables(), Err(Error::Option { option: "slowdowns", .. })));
        let mut g = grid(&["bonnie"]);
        g.sizes.clear();
        assert!(matches!(g.tables(), Err(Error::Option { option: "sizes", .. })));
    }
}
