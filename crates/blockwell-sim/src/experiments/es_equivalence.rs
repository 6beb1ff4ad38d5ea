//! Seed `002_*` (extended storage), Table II: for each workload, each slowdown factor of file memory relative to
//! DRAM and each reference size, the tier capacity whose time matches a DRAM tier of the reference size
//! ([`crate::estier::search`]), with the mean ratio and the break-even price per slowdown; optionally the
//! per-level metrics of the reference (slowdown 1) and of a tier of the same size at the largest slowdown.
//!
//! Workloads are generated one at a time, by name ([`EsWorkload::named`]); reference sizes are pages or
//! percentages of each workload's working set. Model and parameters: `docs/extended-storage.md`.

use super::Error;
use crate::estier::{equivalence_table, simulate, EsConfig, EsReport, EsTable, EsWorkload, SearchConfig};
use crate::replay::CacheSize;
use serde::Serialize;

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
