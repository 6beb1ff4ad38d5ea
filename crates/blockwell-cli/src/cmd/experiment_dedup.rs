//! `blockwell experiment dedup`: offset- vs content-based caching (seed `003_*`, Morrey & Grunwald): read hit
//! rates across cache sizes (Table 3's layout), Table 1's nine categories, the hash-table fraction sweep
//! (Figures 4–5), silent writes eliminated, other policies, and unified vs private caches for 2–4 volumes.
//! On a generated trace with content by default, or on `--trace` files with digests (FIU, or CSV with a
//! `digest=` column). The grid is [`blockwell_sim::experiments::dedup`]; this module parses the options, reads
//! the traces and prints the tables, CSV and JSON.

use super::experiment::flag_error;
use crate::cmd::common::report_skipped;
use crate::cmd::options::{parse_arg, Bytes, Fraction, List};
use anyhow::Context;
use blockwell_core::dedup::Category;
use blockwell_core::policy::PolicySpec;
use blockwell_sim::analysis::human_bytes;
use blockwell_sim::experiments::dedup::{DedupGrid, DedupOptions, DedupReport, Source};
use blockwell_sim::experiments::Error as GridError;
use blockwell_trace::{Format, ReaderOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Options of `blockwell experiment dedup`.
#[derive(clap::Args, Debug, Clone)]
#[command(after_help = "\
Every block access is replayed through an offset cache (the policy over addresses) and a content cache (one \
copy per content, shared by addresses, as Morrey & Grunwald's) of the same byte budget; the content cache's hash table is \
charged against the budget (\"content\") or not (\"ideal\"). Without --trace the workload is generated: a Zipf \
address stream with content (--dup-ratio, --zero-fraction, --cross-volume, --rewrite-ratio); for the \
multi-volume table, one such trace per volume (own address seed, one shared disk image) merged by time.")]
pub struct DedupArgs {
    /// Trace files with content digests (FIU, or --format csv with a digest= column). One file: the
    /// single-volume tables use it. Two to four files: also the unified-vs-private table, one volume per file.
    #[arg(long, short = 't', value_name = "FILE")]
    pub trace: Vec<PathBuf>,

    /// Trace format (detected when unambiguous).
    #[arg(long, short = 'f', value_name = "FORMAT")]
    pub format: Option<String>,

    /// Column mapping for --format csv, e.g. `time=0,volume=1,op=2,offset=3,len=4,digest=5`.
    #[arg(long, value_name = "MAPPING")]
    pub csv_columns: Option<String>,

    /// Read at most N requests of each trace.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,

    /// Cache block size.
    #[arg(long, value_name = "BYTES", default_value = "4096", value_parser = parse_arg::<Bytes>)]
    pub block_size: Bytes,

    /// Cache sizes (comma-separated byte counts: 4MiB, 64MiB, ...).
    #[arg(
        long,
        visible_alias = "sizes",
        value_name = "SIZE,...",
        default_value = "2MiB,4MiB,8MiB,16MiB,32MiB,64MiB,128MiB",
        value_parser = parse_arg::<List<Bytes>>
    )]
    pub cache: List<Bytes>,

    /// Replacement policy of both caches.
    #[arg(long, value_name = "POLICY", default_value = "lru", value_parser = parse_arg::<PolicySpec>)]
    pub policy: PolicySpec,

    /// Policies compared at --policy-size (the content cache works under any of them).
    #[arg(long, value_name = "LIST", default_value = "lru,arc,2q,s3fifo,clock", value_parser = parse_arg::<List<PolicySpec>>)]
    pub policies: List<PolicySpec>,

    /// Cache size of the policy table, the fraction sweep and the multi-volume table (per volume).
    #[arg(long, value_name = "BYTES", default_value = "16MiB", value_parser = parse_arg::<Bytes>)]
    pub policy_size: Bytes,

    /// Hash-table fractions of the sweep (as 1/N or decimals).
    #[arg(long, value_name = "LIST", default_value = "1/128,1/64,1/32,1/16,1/8", value_parser = parse_arg::<List<Fraction>>)]
    pub fractions: List<Fraction>,

    /// Hash-table fraction of the other tables.
    #[arg(long, value_name = "F", default_value = "1/64", value_parser = parse_arg::<Fraction>)]
    pub hash_fraction: Fraction,

    /// Budget bytes per extra reference (reference pages hold block_size / ref_bytes references).
    #[arg(long, value_name = "BYTES", default_value_t = 48)]
    pub ref_bytes: u64,

    /// Volume counts of the unified-vs-private table (generated traces only).
    #[arg(long, value_name = "LIST", default_value = "2,3,4", value_parser = parse_arg::<List<usize>>)]
    pub volumes: List<usize>,

    /// Generated: requests per volume.
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    pub requests: u64,

    /// Generated: footprint per volume in blocks.
    #[arg(long, value_name = "N", default_value_t = 50_000)]
    pub blocks: u64,

    /// Generated: Zipf exponent of the address stream.
    #[arg(long, value_name = "A", default_value_t = 0.8)]
    pub alpha: f64,

    /// Generated: probability that a request is a write.
    #[arg(long, value_name = "P", default_value_t = 0.5)]
    pub write_ratio: f64,

    /// Generated: probability that written content is one of --pool popular contents.
    #[arg(long, value_name = "P", default_value_t = 0.3)]
    pub dup_ratio: f64,

    /// Generated: probability that written content is the zero block.
    #[arg(long, value_name = "P", default_value_t = 0.05)]
    pub zero_fraction: f64,

    /// Generated: fraction of blocks whose initial content is the same on every volume.
    #[arg(long, value_name = "P", default_value_t = 0.5)]
    pub cross_volume: f64,

    /// Generated: probability that a write rewrites the address's current content.
    #[arg(long, value_name = "P", default_value_t = 0.3)]
    pub rewrite_ratio: f64,

    /// Generated: popular contents.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub pool: u64,

    /// Generated: seed.
    #[arg(long, value_name = "N", default_value_t = 42)]
    pub seed: u64,

    /// Write each table as CSV into this directory (sizes.csv, categories.csv, fractions.csv, policies.csv,
    /// volumes.csv).
    #[arg(long, value_name = "DIR")]
    pub csv: Option<PathBuf>,

    /// Write the whole report as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

impl DedupArgs {
    /// The options as the grid takes them ([`DedupOptions::grid`] checks them).
    pub fn options(&self) -> DedupOptions {
        DedupOptions {
            block_size: self.block_size.0,
            cache: self.cache.iter().map(|b| b.0.to_string()).collect(),
            policy: self.policy.label().to_string(),
            policies: self.policies.iter().map(|p| p.label().to_string()).collect(),
            policy_size: self.policy_size.0.to_string(),
            fractions: self.fractions.iter().map(|f| f.0).collect(),
            hash_fraction: self.hash_fraction.0,
            ref_bytes: self.ref_bytes,
            volumes: self.volumes.to_vec(),
            requests: self.requests,
            blocks: self.blocks,
            alpha: self.alpha,
            write_ratio: self.write_ratio,
            dup_ratio: self.dup_ratio,
            zero_fraction: self.zero_fraction,
            cross_volume: self.cross_volume,
            rewrite_ratio: self.rewrite_ratio,
            pool: self.pool,
            seed: self.seed,
        }
    }

    /// The --trace files read as the grid's source (none: the generator).
    fn source(&self) -> anyhow::Result<Option<Source>> {
        let Some(first) = self.trace.first() else { return Ok(None) };
        let format = self.format.as_deref().map(Format::from_name).transpose().context("--format")?;
        let csv = match &self.csv_columns {
            Some(m) => Some(blockwell_trace::formats::csv::CsvMapping::parse(m).context("--csv-columns")?),
            None => None,
        };
        let opts = ReaderOptions { csv, ..Default::default() };
        let open = |i: usize| blockwell_trace::open(&self.trace[i], format, &opts);
        let source = Source::from_traces(
            first.display().to_string(),
            self.trace.len(),
            &open,
            self.block_size.0,
            self.limit,
            &mut |r| report_skipped(r),
        );
        Ok(Some(source.map_err(|e| match e {
            e @ GridError::Option { .. } => flag_error(e),
            e => anyhow::Error::new(e).context("--trace"),
        })?))
    }
}

/// Runs the experiment; prints the tables and writes `--csv`/`--json`.
pub fn run(a: DedupArgs) -> anyhow::Result<ExitCode> {
    let report = measure(&a)?;
    let mut out = std::io::stdout().lock();
    print_report(&report, &mut out)?;
    if let Some(dir) = &a.csv {
        write_csv(dir, &report).with_context(|| format!("--csv {}", dir.display()))?;
    }
    if let Some(path) = &a.json {
        let f = std::fs::File::create(path).with_context(|| format!("--json {}", path.display()))?;
        serde_json::to_writer_pretty(std::io::BufWriter::new(f), &report)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Checks the options and runs the grid ([`DedupOptions::grid`]).
pub fn measure(a: &DedupArgs) -> anyhow::Result<DedupReport> {
    let g = a.options().grid(None).map_err(flag_error)?;
    let g = match a.source()? {
        Some(traces) => DedupGrid { source: traces, ..g },
        None => g,
    };
    Ok(g.run()?)
}

/// A rate as a percentage; `-` when undefined (no reads).
fn pct(x: Option<f64>) -> String {
    x.map_or("-".to_string(), |x| format!("{:.1}%", 100.0 * x))
}

/// Prints the tables.
pub fn print_report(r: &DedupReport, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "source: {}", r.source)?;
    writeln!(
        out,
        "block size {} B, policy {}, hash table 1/{:.0} of the cache, {} B per extra reference, {} block accesses\n",
        r.block_size,
        r.policy,
        1.0 / r.hash_fraction,
        r.ref_bytes,
        r.block_accesses
    )?;
    writeln!(out, "Read hit rate (Table 3 layout)")?;
    writeln!(
        out,
        "{:>10} {:>12} {:>14} {:>12} {:>14} {:>16}",
        "cache", "offset", "content", "ideal", "silent writes", "device writes"
    )?;
    for c in &r.sizes {
        writeln!(
            out,
            "{:>10} {:>12} {:>14} {:>12} {:>14} {:>16}",
            human_bytes(c.cache_bytes),
            pct(c.offset.read_hit_rate()),
            pct(c.content.read_hit_rate()),
            pct(c.content_ideal.read_hit_rate()),
            c.silent_writes(),
            format!("{} / {}", c.content.device_writes(), c.offset.device_writes),
        )?;
    }
    writeln!(out, "(content: hash table charged; ideal: not charged; device writes: content / offset)\n")?;

    writeln!(out, "Table 1 categories, content cache (block accesses)")?;
    write!(out, "{:<60}", "category")?;
    for c in &r.sizes {
        write!(out, " {:>10}", human_bytes(c.cache_bytes))?;
    }
    writeln!(out)?;
    for cat in Category::ALL {
        write!(out, "{:<60}", cat.label())?;
        for c in &r.sizes {
            write!(out, " {:>10}", c.content.get(cat))?;
        }
        writeln!(out)?;
    }
    write!(out, "{:<60}", "full comparisons per insert")?;
    for c in &r.sizes {
        write!(out, " {:>10.3}", c.content.comparisons_per_insert())?;
    }
    writeln!(out, "\n")?;

    if let Some(p) = r.fractions.first() {
        writeln!(out, "Hash-table fraction at {} (Figures 4-5)", human_bytes(p.cache_bytes))?;
        writeln!(
            out,
            "{:>9} {:>16} {:>14} {:>12} {:>12}",
            "fraction", "full compares", "per insert", "hit rate", "ideal"
        )?;
        for p in &r.fractions {
            writeln!(
                out,
                "{:>9} {:>16} {:>14.3} {:>12} {:>12}",
                format!("1/{:.0}", 1.0 / p.hash_fraction),
                p.full_comparisons,
                p.comparisons_per_insert,
                pct(p.read_hit_rate),
                pct(p.ideal_read_hit_rate)
            )?;
        }
        writeln!(out)?;
    }

    if let Some(p) = r.policies.first() {
        writeln!(out, "Policies at {}", human_bytes(p.comparison.cache_bytes))?;
        // The policy column as wide as the longest spec (`2q(a_in_ratio=0.3)`), so that the columns stay aligned.
        let w = r.policies.iter().map(|p| p.policy.chars().count()).max().unwrap_or(0).max(14);
        writeln!(out, "{:<w$} {:>10} {:>10} {:>10} {:>14}", "policy", "offset", "content", "ideal", "refs dropped")?;
        for p in &r.policies {
            let c = &p.comparison;
            writeln!(
                out,
                "{:<w$} {:>10} {:>10} {:>10} {:>14}",
                p.policy,
                pct(c.offset.read_hit_rate()),
                pct(c.content.read_hit_rate()),
                pct(c.content_ideal.read_hit_rate()),
                c.content.refs_dropped
            )?;
        }
        writeln!(out)?;
    }

    if !r.volumes.is_empty() {
        writeln!(out, "Unified vs private caches (read hit rate; private caches get the budget / volumes)")?;
        writeln!(
            out,
            "{:>7} {:>10} {:>15} {:>16} {:>15} {:>16} {:>14}",
            "volumes",
            "budget",
            "private offset",
            "private content",
            "unified offset",
            "unified content",
            "content hits"
        )?;
        for v in &r.volumes {
            writeln!(
                out,
                "{:>7} {:>10} {:>15} {:>16} {:>15} {:>16} {:>14}",
                v.volumes,
                human_bytes(v.cache_bytes),
                pct(v.private_offset),
                pct(v.private_content),
                pct(v.unified_offset),
                pct(v.unified_content),
                v.unified_content_hits
            )?;
        }
    }
    Ok(())
}

fn write_csv(dir: &Path, r: &DedupReport) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (name, text) in r.csv_tables() {
        std::fs::write(dir.join(format!("{name}.csv")), text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        a: DedupArgs,
    }

    fn args(extra: &[&str]) -> DedupArgs {
        let mut v = vec!["x", "--requests", "20000", "--blocks", "5000", "--cache", "256KiB,2MiB,8MiB"];
        v.extend_from_slice(extra);
        Cli::parse_from(v).a
    }

    #[test]
    fn run_prints_every_table_and_writes_csv_and_json() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let csv = dir.path().join("csv");
        let a = args(&[
            "--policy-size",
            "1MiB",
            "--volumes",
            "2,3",
            "--csv",
            csv.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ]);
        assert_eq!(run(a.clone()).unwrap(), ExitCode::SUCCESS);
        let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        assert_eq!(r["sizes"].as_array().unwrap().len(), 3);
        assert_eq!(r["fractions"].as_array().unwrap().len(), 5);
        assert_eq!(r["policies"].as_array().unwrap().len(), 5);
        assert_eq!(r["volumes"].as_array().unwrap().len(), 2);
        for name in ["sizes", "categories", "fractions", "policies", "volumes"] {
            let text = std::fs::read_to_string(csv.join(format!("{name}.csv"))).unwrap();
            assert!(text.lines().count() >= 3, "{name}: {text}");
        }
        // Deterministic: the same arguments measure the same numbers.
        let m1 = serde_json::to_value(measure(&a).unwrap()).unwrap();
        let m2 = serde_json::to_value(measure(&a).unwrap()).unwrap();
        assert_eq!(m1, m2);
        let mut text = Vec::new();
        print_report(&measure(&a).unwrap(), &mut text).unwrap();
        let text = String::from_utf8(text).unwrap();
        for want in ["Table 3", "silent write", "Figures 4-5", "Unified vs private", "s3fifo"] {
            assert!(text.contains(want), "missing {want}:\n{text}");
        }
    }

    /// The default experiment (what `blockwell experiment dedup` prints once wired); run with
    /// `cargo test -p blockwell-cli --bin blockwell -- --ignored default_experiment --nocapture`.
    /// Extra arguments come from the environment variable `BLOCKWELL_DEDUP_ARGS` (space separated).
    #[test]
    #[ignore = "the full experiment: seconds to minutes"]
    fn default_experiment() {
        let extra = std::env::var("BLOCKWELL_DEDUP_ARGS").unwrap_or_default();
        let mut v = vec!["x"];
        v.extend(extra.split_whitespace());
        assert_eq!(run(Cli::parse_from(v).a).unwrap(), ExitCode::SUCCESS);
    }

    #[test]
    fn reads_a_csv_trace_with_digests() {
        let dir = tempfile::tempdir().unwrap();
        let p1 = dir.path().join("a.csv");
        let p2 = dir.path().join("b.csv");
        for (p, shift) in [(&p1, 0u64), (&p2, 1)] {
            let mut f = std::fs::File::create(p).unwrap();
            for i in 0..400u64 {
                let op = if i % 3 == 0 { "W" } else { "R" };
                writeln!(f, "{},{op},{},{:032x}", i * 10 + shift, (i % 50) * 4096, i % 50 + 1).unwrap();
            }
        }
        let a = args(&[
            "--trace",
            p1.to_str().unwrap(),
            "--trace",
            p2.to_str().unwrap(),
            "--format",
            "csv",
            "--csv-columns",
            "time=0,op=1,offset=2,digest=3,header=false",
            "--policy-size",
            "64KiB",
        ]);
        let r = measure(&a).unwrap();
        assert_eq!(r.block_accesses, 400);
        assert_eq!(r.volumes.len(), 1, "two traces: one unified-vs-private row");
        assert!(r.volumes[0].unified_content_hits > 0, "identical volumes share content");
        assert!(r.sizes[0].silent_writes() > 0);
        let e = Cli::try_parse_from(["x", "--fractions", "1/64,2"]).err().unwrap().to_string();
        assert!(e.contains("--fractions") && e.contains("'2' is not a fraction between 0 and 1"), "{e}");
        let e = measure(&args(&["--volumes", "1,2"])).unwrap_err().to_string();
        assert_eq!(e, "--volumes: counts between 2 and 16");
    }
}
