//! `blockwell mrc`: the LRU miss-ratio curve of a trace in one pass, exact or SHARDS-sampled; a table on
//! stdout, optionally CSV and a PNG/SVG plot.

use crate::cmd::common::{check_writable, for_each_request, progress_bar, report_skipped, SizeSpec, TraceArgs};
use crate::cmd::options::{parse_arg, BlockSize, Format, List, OutputArgs, PolicyList};
use crate::cmd::plot::{
    chart, draw_legend, drawing_error, line, marks, miss_ratio_axes, save_and_report, split_for_legend, Figure,
    LegendEntry, PlotKind,
};
use anyhow::{bail, Context};
use blockwell_core::policy::Preset;
use blockwell_sim::analysis::human_bytes;
use blockwell_sim::mrc::{Mrc, MrcBuilder, MrcConfig, MrcError, MrcPoint, Sampling};
use plotters::coord::Shift;
use plotters::prelude::{DrawingArea, DrawingBackend, RGBColor};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Options of `blockwell mrc`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Every block a request touches is one access (reads and writes alike unless --reads-only); a block is \
(volume, offset / block size). Stack distances give the miss ratio of every cache size in one pass: exact by \
default (memory about 40 bytes per distinct block); --sample or --shards-max use SHARDS spatial sampling \
(Waldspurger et al., FAST'15) for traces too big for that.")]
pub struct Args {
    #[command(flatten)]
    pub input: TraceArgs,

    /// Cache block size, a power of two from 512 B to 1 MiB.
    #[arg(long, short = 'b', value_name = "SIZE", default_value = "4KiB", value_parser = parse_arg::<BlockSize>)]
    pub block_size: BlockSize,

    /// Count read requests only; writes neither hit nor update the cache.
    #[arg(long)]
    pub reads_only: bool,

    /// SHARDS at a fixed sampling rate R in (0, 1], e.g. 0.01: memory and time shrink by about R.
    #[arg(long, value_name = "R", conflicts_with = "shards_max")]
    pub sample: Option<f64>,

    /// Fixed-size SHARDS: track at most N sampled blocks, lowering the rate as the sample overflows.
    #[arg(long, value_name = "N")]
    pub shards_max: Option<usize>,

    /// Number of evenly spaced cache sizes in the table, from footprint/N to the footprint.
    #[arg(long, value_name = "N", default_value_t = 20, conflicts_with = "cache")]
    pub points: usize,

    /// Cache sizes for the table instead of --points: comma-separated `1%` (of the footprint), `64MiB`,
    /// `4096` (bytes) or `2692blocks`.
    #[arg(long, short = 'c', visible_alias = "sizes", value_name = "SIZE,...", value_parser = parse_arg::<List<SizeSpec>>)]
    pub cache: Option<List<SizeSpec>>,

    /// The table (with the trace's summary above it), `--csv` (cache_blocks,cache_bytes,miss_ratio) or `--json`
    /// (the summary and the points).
    #[command(flatten)]
    pub output: OutputArgs,

    /// Plot the curve (miss ratio against cache size) to FILE.png or FILE.svg.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// Curves of these policies (comma separated, as `sim --policy`; `lru` too) by simulating a cache per
    /// size instead of LRU stack distances: with --sample R, miniature simulation (every cache scaled by R over
    /// the SHARDS-sampled blocks; Waldspurger et al., ATC'17), else full simulation.
    #[arg(long, visible_alias = "policies", value_name = "POLICY,...", value_parser = parse_arg::<PolicyList>, conflicts_with = "shards_max")]
    pub policy: Option<PolicyList>,

    /// Parameter preset of --policy.
    #[arg(long, value_name = "PRESET", default_value = "default", value_parser = parse_arg::<Preset>, requires = "policy")]
    pub preset: Preset,

    /// With --policy: worker threads (default: one per core).
    #[arg(long, value_name = "N", default_value = "0", value_parser = super::options::parse_threads, requires = "policy")]
    pub threads: usize,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let block_size = a.block_size.get();
    let sampling = match (a.sample, a.shards_max) {
        (Some(r), _) => Sampling::Rate(r),
        (None, Some(n)) => Sampling::MaxBlocks(n),
        (None, None) => Sampling::Exact,
    };
    let config = MrcConfig { block_size, reads_only: a.reads_only, sampling };
    config.validate().map_err(|e| match e {
        MrcError::Rate(_) => anyhow::anyhow!("--sample: {e}"),
        e => e.into(),
    })?;
    let sizes = a.cache.as_ref().map(|l| l.0.clone());
    if a.points == 0 {
        bail!("--points must be at least 1");
    }
    let plot_kind = a.plot.as_deref().map(PlotKind::of).transpose()?;
    // Every output file is checked before the (possibly long) pass over the trace.
    for (option, path) in [("--plot", &a.plot), ("--output", &a.output.output)] {
        if let Some(p) = path {
            check_writable(option, p)?;
        }
    }
    if let Some(p) = &a.policy {
        return super::mrc_mini::run(&a, &p.0, plot_kind);
    }

    let mut reader = a.input.open()?;
    let mut builder = MrcBuilder::new(config)?;
    let bar = progress_bar(&a.input.trace, "reading");
    let read = for_each_request(reader.as_mut(), bar.as_ref(), |r| builder.request(r));
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    read?;
    let curve = builder.finish();
    report_skipped(reader.as_ref());
    if curve.requests == 0 || curve.accesses == 0 {
        let what = if curve.requests == 0 { "no requests" } else { "no block accesses (only zero-length requests)" };
        bail!(
            "{}: the trace has {what}{}",
            a.input.trace.display(),
            if a.reads_only { " left after --reads-only" } else { "" }
        );
    }

    let blocks: Vec<u64> = match &sizes {
        Some(list) => list
            .iter()
            .map(|s| {
                let b = s.blocks(block_size, curve.footprint);
                if b == 0 {
                    bail!("--cache: {s} holds no {block_size} B block");
                }
                Ok(b)
            })
            .collect::<anyhow::Result<_>>()?,
        None => curve.even_sizes(a.points),
    };
    let points = curve.curve(&blocks);
    if !curve.is_exact() && sizes.as_ref().is_some_and(|l| l.iter().any(SizeSpec::needs_footprint)) {
        eprintln!("blockwell: note: percentages are of the footprint estimated by SHARDS ({} blocks)", curve.footprint);
    }

    let mut out = Vec::new();
    match a.output.format() {
        Format::Table => {
            write_summary(&mut out, &a.input.trace, &curve)?;
            write_table(&mut out, &curve, &points, &sizes)?;
        }
        Format::Csv => write_csv(&mut out, &points)?,
        Format::Json => out = OutputArgs::json(&json(&a.input.trace, &curve, &points))?.into_bytes(),
    }
    a.output.write(&String::from_utf8(out)?)?;
    if let (Some(path), Some(kind)) = (&a.plot, plot_kind) {
        let title = format!(
            "{} — LRU miss ratio{}",
            a.input.trace.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
            sampling_label(&curve)
        );
        save_and_report(path, kind, (1000, 640), &Curve { title: &title, c: &curve, marks: &points })
            .with_context(|| format!("--plot {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The `--json` document.
fn json(trace: &Path, c: &Mrc, points: &[MrcPoint]) -> serde_json::Value {
    let sampling = match c.sampling {
        Sampling::Exact => serde_json::json!({"method": "exact"}),
        Sampling::Rate(r) => serde_json::json!({"method": "shards", "rate": r}),
        Sampling::MaxBlocks(n) => {
            serde_json::json!({"method": "shards-max", "max_blocks": n, "final_rate": c.final_rate})
        }
    };
    serde_json::json!({
        "trace": trace.display().to_string(),
        "block_size": c.block_size,
        "reads_only": c.reads_only,
        "sampling": sampling,
        "requests": c.requests,
        "accesses": c.accesses,
        "sampled_accesses": c.sampled_accesses,
        "sampled_blocks": c.sampled_blocks,
        "footprint_blocks": c.footprint,
        "footprint_bytes": c.footprint * c.block_size,
        "cold_misses": c.cold_misses(),
        "points": points,
    })
}

fn sampling_label(c: &Mrc) -> String {
    match c.sampling {
        Sampling::Exact => String::new(),
        Sampling::Rate(r) => format!(" (SHARDS, R = {r})"),
        Sampling::MaxBlocks(n) => format!(" (SHARDS, {n} blocks, R = {:.2e})", c.final_rate),
    }
}

fn write_summary(out: &mut impl Write, trace: &Path, c: &Mrc) -> anyhow::Result<()> {
    let pct = |a: f64, b: f64| if b > 0.0 { 100.0 * a / b } else { 0.0 };
    writeln!(
        out,
        "trace {}: {} requests, {} block accesses of {} B ({})",
        trace.display(),
        c.requests,
        c.accesses,
        c.block_size,
        if c.reads_only { "reads only" } else { "reads and writes" }
    )?;
    let est = if c.is_exact() { "" } else { "≈ " };
    writeln!(
        out,
        "footprint {est}{} blocks ({}), cold misses {est}{:.0} ({:.2}% of accesses)",
        c.footprint,
        human_bytes(c.footprint * c.block_size),
        c.cold_misses(),
        pct(c.cold_misses(), c.total())
    )?;
    match c.sampling {
        Sampling::Exact => writeln!(out, "exact LRU stack distances")?,
        Sampling::Rate(r) => writeln!(
            out,
            "SHARDS at rate {r}: {} blocks sampled, {} sampled accesses (estimates below)",
            c.sampled_blocks, c.sampled_accesses
        )?,
        Sampling::MaxBlocks(n) => writeln!(
            out,
            "fixed-size SHARDS ({n} blocks): final rate {:.3e}, {} blocks tracked, {} sampled accesses (estimates below)",
            c.final_rate, c.sampled_blocks, c.sampled_accesses
        )?,
    }
    Ok(())
}

fn write_table(
    out: &mut impl Write,
    c: &Mrc,
    points: &[MrcPoint],
    specs: &Option<Vec<SizeSpec>>,
) -> anyhow::Result<()> {
    writeln!(out, "{:>14} {:>12} {:>12} {:>10}", "cache_blocks", "cache_bytes", "%footprint", "miss_ratio")?;
    for (i, p) in points.iter().enumerate() {
        let of_footprint = if c.footprint > 0 { 100.0 * p.cache_blocks as f64 / c.footprint as f64 } else { 0.0 };
        let note = match specs.as_ref().and_then(|s| s.get(i)) {
            Some(SizeSpec::Percent(v)) => format!("  ({v}%)"),
            _ => String::new(),
        };
        writeln!(
            out,
            "{:>14} {:>12} {:>11.2}% {:>10.6}{note}",
            p.cache_blocks,
            human_bytes(p.cache_bytes),
            of_footprint,
            p.miss_ratio
        )?;
    }
    Ok(())
}

fn write_csv(out: &mut impl Write, points: &[MrcPoint]) -> anyhow::Result<()> {
    writeln!(out, "cache_blocks,cache_bytes,miss_ratio")?;
    for p in points {
        writeln!(out, "{},{},{:.6}", p.cache_blocks, p.cache_bytes, p.miss_ratio)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------------------------
// Plotting

/// The curve (densely sampled) with the table's points marked.
struct Curve<'a> {
    title: &'a str,
    c: &'a Mrc,
    marks: &'a [MrcPoint],
}

impl Figure for Curve<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let c = self.c;
        let x_max = self.marks.iter().map(|p| p.cache_blocks).max().unwrap_or(1).max(c.footprint).max(1);
        let steps = 500u64;
        let mut dense: Vec<(u64, f64)> = (0..=steps).map(|i| x_max * i / steps).map(|b| (b, c.miss_ratio(b))).collect();
        dense.dedup_by_key(|p| p.0);
        let (lo, hi) = dense
            .iter()
            .map(|p| p.1)
            .chain(self.marks.iter().map(|p| p.miss_ratio))
            .fold((1.0f64, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
        let mut y0 = ((lo * 20.0).floor() / 20.0).max(0.0);
        let y1 = ((hi * 20.0).ceil() / 20.0).clamp(y0 + 0.05, 1.0);
        if y1 - y0 < 0.05 {
            y0 = (y1 - 0.05).max(0.0);
        }

        let blue = RGBColor(31, 119, 180);
        let label = if c.is_exact() { "LRU (exact)" } else { "LRU (SHARDS)" };
        let entries = [LegendEntry { label: label.to_string(), color: blue, marked: true }];
        let (area, legend) = split_for_legend(&root, &entries)?;
        let mut chart = chart(&area, self.title, 0u64..x_max, y0..y1)?;
        miss_ratio_axes(&mut chart, c.block_size)?;
        // The curve between the table's sizes too (exact at every size), the table's points marked.
        line(&mut chart, dense, blue)?;
        let points: Vec<(u64, f64)> = marks_of(self.marks);
        marks(&mut chart, &points, blue)?;
        draw_legend(&legend, &entries)?;
        root.present().map_err(drawing_error)
    }
}

/// The table's points, (cache blocks, miss ratio).
fn marks_of(points: &[MrcPoint]) -> Vec<(u64, f64)> {
    points.iter().map(|p| (p.cache_blocks, p.miss_ratio)).collect()
}
