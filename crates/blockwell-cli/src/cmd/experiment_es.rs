//! `blockwell experiment es-equivalence`: seed `002_*`'s Table II. For each slowdown factor of file memory
//! relative to DRAM, the extended-storage tier capacity that matches the time of a DRAM tier of each reference
//! size (bisection, [`blockwell_sim::estier::search`]), the mean capacity ratio per slowdown (the paper's
//! Table II) and the break-even price ratio, on generated PostMark-like and Bonnie-like workloads.
//! Model and parameters: `docs/extended-storage.md`; measured tables: `docs/experiments/es-equivalence.md`. The
//! grid is [`blockwell_sim::experiments::es_equivalence`]; this module parses the options and prints the tables,
//! CSV and JSON.

use crate::cmd::common::SizeSpec;
use crate::cmd::options::{parse_arg, Bytes, Format, List, OutputArgs};

use blockwell_core::PolicySpec;
use blockwell_disk::DiskSpec;
use blockwell_sim::estier::EsTable;
use blockwell_sim::experiments::es_equivalence::{self, EsGrid, EsOptions, LevelLine};
use blockwell_sim::experiments::Error as GridError;
use std::io::Write;
use std::process::ExitCode;

/// Options of `blockwell experiment es-equivalence`.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
The reference is a tier of DRAM (slowdown 1) of each --cache capacity; for each --slowdowns factor the search \
finds the smallest tier capacity whose total time (DRAM copies + tier transfers + disk) is at most the \
reference's, to within --tolerance of the reference capacity. The paper's Table II is the mean ratio over the \
sizes; the break-even price is 1/ratio (file memory must cost at most that fraction of DRAM per bit).")]
pub struct EsArgs {
    /// Workloads, comma-separated: postmark, bonnie.
    #[arg(long, value_name = "LIST", default_value = "postmark,bonnie")]
    pub workload: String,

    /// Scale of the workloads: PostMark files and transactions, Bonnie file size and seeks (1 = the paper's).
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    pub scale: f64,

    /// Seed of the workload generators.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Reference DRAM tier sizes: comma-separated `25%` (of the workload's working set), `256MiB` or
    /// `65536blocks` (4 KiB pages) [default: 12.5%,25%,37.5%,50%,62.5%,75%].
    #[arg(long, visible_alias = "sizes", value_name = "SIZE,...", value_parser = parse_arg::<List<SizeSpec>>)]
    pub cache: Option<List<SizeSpec>>,

    /// Slowdown factors of file memory relative to DRAM.
    #[arg(long, value_name = "LIST", default_value = "1,2,3,4,5", value_parser = parse_arg::<List<f64>>)]
    pub slowdowns: List<f64>,

    /// DRAM page cache above the tier (0 = none: the paper's experimental model).
    #[arg(long, value_name = "BYTES", default_value = "0", value_parser = parse_arg::<Bytes>)]
    pub page_cache: Bytes,

    /// Tier mode with a page cache: inclusive or exclusive.
    #[arg(long, default_value = "inclusive")]
    pub mode: String,

    /// Replacement policy of both levels.
    #[arg(long, default_value = "lru", value_parser = parse_arg::<PolicySpec>)]
    pub policy: PolicySpec,

    /// Disk model (blockwell disk list).
    #[arg(long, default_value = "cheetah9lp", value_parser = parse_arg::<DiskSpec>)]
    pub disk: DiskSpec,

    /// Nanoseconds of one DRAM page copy (a tier transfer costs this × slowdown + --transfer-ns).
    #[arg(long, value_name = "NS", default_value_t = 1950)]
    pub dram_ns: u64,

    /// Fixed nanoseconds added to every tier transfer.
    #[arg(long, value_name = "NS", default_value_t = 0)]
    pub transfer_ns: u64,

    /// Search tolerance, as a fraction of the reference capacity.
    #[arg(long, default_value_t = 0.005)]
    pub tolerance: f64,

    /// Worker threads (results do not depend on it).
    #[arg(long, value_name = "N", default_value = "2", value_parser = super::options::parse_threads)]
    pub threads: usize,

    /// Also print, per workload and reference size, the per-level metrics of the reference (slowdown 1) and of
    /// a tier of the same size at the largest slowdown: miss rates, pages moved, time per level.
    #[arg(long)]
    pub levels: bool,

    /// The tables, `--csv` (every search result) or `--json` (the tables; with --levels, an object with
    /// "tables" and "levels").
    #[command(flatten)]
    pub output: OutputArgs,
}

impl EsArgs {
    /// The options as the grid takes them ([`EsOptions::grid`] checks them).
    pub fn options(&self) -> EsOptions {
        EsOptions {
            workload: self.workload.split(',').map(str::to_string).collect(),
            scale: self.scale,
            seed: self.seed,
            cache: self.cache.as_ref().map(|c| c.iter().map(|s| s.to_string()).collect()),
            slowdowns: self.slowdowns.to_vec(),
            page_cache: self.page_cache.0.to_string(),
            mode: self.mode.clone(),
            policy: self.policy.label().to_string(),
            disk: self.disk.label().to_string(),
            dram_ns: self.dram_ns,
            transfer_ns: self.transfer_ns,
            tolerance: self.tolerance,
            threads: Some(self.threads.max(1)),
        }
    }
}

/// The grid the options describe: the paper's ([`EsGrid::paper`]) with the options applied.
pub fn grid(a: &EsArgs) -> anyhow::Result<EsGrid> {
    a.options().grid().map_err(grid_error)
}

/// A grid error as the command says it: a workload that cannot be generated is named with `--workload`.
fn grid_error(e: GridError) -> anyhow::Error {
    match e {
        GridError::EsWorkload { name, source } => anyhow::Error::new(source).context(format!("--workload {name}")),
        e => super::experiment::flag_error(e),
    }
}

fn mib(blocks: usize) -> f64 {
    blocks as f64 * 4096.0 / (1024.0 * 1024.0)
}

fn opt(x: Option<f64>, prec: usize) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.prec$}"))
}

/// Prints the tables (per-size ratios, then the Table II layout with the break-even price).
pub fn print(out: &mut dyn Write, tables: &[EsTable]) -> std::io::Result<()> {
    for t in tables {
        writeln!(out, "{}: capacity of file memory / DRAM for equal time, per reference size (MiB)", t.workload)?;
        write!(out, "{:>9}", "slowdown")?;
        for &b in &t.reference_blocks {
            write!(out, " {:>8.0}", mib(b))?;
        }
        writeln!(out)?;
        for r in &t.rows {
            write!(out, "{:>9}", r.slowdown)?;
            for e in &r.per_size {
                write!(out, " {:>8}", opt(e.ratio, 3))?;
            }
            writeln!(out)?;
        }
        writeln!(out)?;
    }
    writeln!(out, "Table II layout: mean ratio of file memory capacity to DRAM capacity (sizes with an equivalent)")?;
    write!(out, "{:>9}", "slowdown")?;
    for t in tables {
        write!(out, " {:>10} {:>6} {:>9}", t.workload, "found", "price<=")?;
    }
    writeln!(out)?;
    let n = tables.iter().map(|t| t.rows.len()).max().unwrap_or(0);
    for i in 0..n {
        let s = tables.iter().find_map(|t| t.rows.get(i)).map(|r| r.slowdown).unwrap_or(0.0);
        write!(out, "{s:>9}")?;
        for t in tables {
            match t.rows.get(i) {
                Some(r) => write!(
                    out,
                    " {:>10} {:>6} {:>9}",
                    opt(r.mean_ratio, 3),
                    format!("{}/{}", r.found, r.per_size.len()),
                    opt(r.break_even_price, 3)
                )?,
                None => write!(out, " {:>10} {:>6} {:>9}", "", "", "")?,
            }
        }
        writeln!(out)?;
    }
    writeln!(out, "price<=: break-even price of file memory per bit relative to DRAM (1 / mean ratio)")?;
    Ok(())
}

/// Prints `--levels`.
pub fn print_levels(out: &mut dyn Write, lines: &[LevelLine]) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<9} {:>7} {:>4} {:>9} {:>9} {:>7} {:>7} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8}",
        "workload",
        "es_MiB",
        "slow",
        "reads",
        "writes",
        "dram_mr",
        "es_mr",
        "es_in",
        "es_out",
        "disk_rd",
        "disk_wr",
        "dram_s",
        "es_s",
        "disk_s"
    )?;
    for l in lines {
        let r = &l.report;
        writeln!(
            out,
            "{:<9} {:>7.0} {:>4} {:>9} {:>9} {:>7} {:>7} {:>9} {:>9} {:>9} {:>8} {:>8.2} {:>8.2} {:>8.2}",
            l.workload,
            mib(l.es_blocks),
            l.slowdown,
            r.user_reads,
            r.user_writes,
            // (A level that saw no read has no read miss rate: `-`.)
            r.dram.read_miss_rate().map_or("-".to_string(), |m| format!("{m:.4}")),
            r.es.read_miss_rate().map_or("-".to_string(), |m| format!("{m:.4}")),
            r.es.pages_written,
            r.es.pages_read,
            r.disk.pages_read,
            r.disk.pages_written,
            r.dram.time_ns as f64 / 1e9,
            r.es.time_ns as f64 / 1e9,
            r.disk.time_ns as f64 / 1e9
        )?;
    }
    writeln!(out, "mr: read miss rate of the level; es_in/es_out: pages copied into/out of the tier; times in seconds")
}

/// `blockwell experiment es-equivalence`.
pub fn run(a: EsArgs) -> anyhow::Result<ExitCode> {
    let g = grid(&a)?;
    let t = g.tables().map_err(grid_error)?;
    let levels = if a.levels { g.levels(&t).map_err(grid_error)? } else { Vec::new() };
    let mut out = Vec::new();
    match a.output.format() {
        Format::Table => {
            print(&mut out, &t)?;
            if a.levels {
                writeln!(out)?;
                print_levels(&mut out, &levels)?;
            }
        }
        Format::Csv => out = es_equivalence::csv(&t).into_bytes(),
        Format::Json if a.levels => {
            out = OutputArgs::json(&serde_json::json!({ "tables": t, "levels": levels }))?.into_bytes()
        }
        Format::Json => out = OutputArgs::json(&t)?.into_bytes(),
    }
    a.output.write(&String::from_utf8(out)?)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        a: EsArgs,
    }

    fn args(extra: &[&str]) -> EsArgs {
        let mut v = vec!["x", "--scale", "0.01", "--cache", "25%,50%", "--slowdowns", "1,3", "--threads", "1"];
        v.extend_from_slice(extra);
        Cli::parse_from(v).a
    }

    fn tables(a: &EsArgs) -> anyhow::Result<Vec<EsTable>> {
        grid(a)?.tables().map_err(grid_error)
    }

    #[test]
    fn run_writes_tables_csv_and_json() {
        let dir = tempfile::tempdir().unwrap();
        let (c, j) = (dir.path().join("t.csv"), dir.path().join("t.json"));
        assert_eq!(run(args(&["--csv", "-o", c.to_str().unwrap()])).unwrap(), ExitCode::SUCCESS);
        assert_eq!(run(args(&["--json", "-o", j.to_str().unwrap()])).unwrap(), ExitCode::SUCCESS);
        let csv = std::fs::read_to_string(&c).unwrap();
        // Header + 2 workloads × 2 slowdowns × 2 sizes.
        assert_eq!(csv.lines().count(), 1 + 8, "{csv}");
        let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&j).unwrap()).unwrap();
        let t = json.as_array().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0]["workload"], "postmark");
        // Slowdown 1: the ratio is exactly 1 at every size.
        for table in t {
            assert_eq!(table["rows"][0]["mean_ratio"], 1.0);
        }
    }

    #[test]
    fn printed_table_has_table_ii_layout() {
        let t = tables(&args(&["--workload", "bonnie"])).unwrap();
        let mut buf = Vec::new();
        print(&mut buf, &t).unwrap();
        let s = String::from_utf8(buf).unwrap();
        assert!(s.contains("Table II layout") && s.contains("bonnie") && s.contains("price<="), "{s}");
        assert_eq!(t[0].rows.len(), 2);
        assert_eq!(t[0].rows[0].mean_ratio, Some(1.0));
    }

    #[test]
    fn levels_print_a_header_a_line_per_run_and_a_legend() {
        let g = grid(&args(&["--workload", "bonnie", "--levels"])).unwrap();
        let l = g.levels(&g.tables().unwrap()).unwrap();
        assert_eq!(l.len(), 2 * 2, "2 sizes × (slowdown 1, slowdown 3)");
        let mut buf = Vec::new();
        print_levels(&mut buf, &l).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert_eq!(text.lines().count(), 1 + 4 + 1);
        assert!(text.lines().nth(2).unwrap().starts_with("bonnie "), "{text}");
    }

    #[test]
    fn bad_options_are_errors_naming_the_option() {
        for (flag, value) in [("--slowdowns", "two"), ("--disk", "floppy"), ("--cache", "big"), ("--policy", "nosuch")]
        {
            let e = Cli::try_parse_from(["x", flag, value]).err().unwrap().to_string();
            assert!(e.contains(&format!("invalid value '{value}' for '{flag} <")), "{e}");
        }
        let with = |f: fn(&mut EsArgs)| {
            let mut a = args(&[]);
            f(&mut a);
            tables(&a).map_err(|e| format!("{e:#}"))
        };
        assert_eq!(with(|a| a.slowdowns = List(vec![1.0, 0.5])).unwrap_err(), "--slowdowns: give factors >= 1");
        let e = with(|a| a.workload = "tpcc".into()).unwrap_err();
        assert!(e.starts_with("--workload tpcc: unknown workload 'tpcc'"), "{e}");
        let e = with(|a| a.mode = "sideways".into()).unwrap_err();
        assert!(e.starts_with("--mode: unknown tier mode 'sideways'"), "{e}");
    }
}
