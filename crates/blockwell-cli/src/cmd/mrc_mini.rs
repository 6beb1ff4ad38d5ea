//! `blockwell mrc --policy P`: miss-ratio curves of any policy, by simulating one cache per size in one pass
//! over the trace (the replay of `blockwell sim`). With `--sample R` the pass is a miniature simulation
//! (Waldspurger et al., "Cache Modeling and Optimization using Miniature Simulations", USENIX ATC'17): only the
//! blocks SHARDS samples at rate R are replayed, each cache scaled by R, and each curve point is the scaled
//! cache's block miss ratio, reported at the full size it stands for (the scaled size / R).

use super::common::{report_skipped, SizeSpec};
use super::mrc::{short_count, Args};
use super::options::{Format, OutputArgs};
use super::plot::{chart, drawing_error, labelled_line, legend, save, Figure, PlotKind, PALETTE};
use anyhow::{bail, Context};
use blockwell_core::policy::PolicySpec;
use blockwell_sim::replay::{replay, CacheSize, CacheSpec, ReplayConfig, ReplayHooks, ReplayReport};
use plotters::coord::Shift;
use plotters::prelude::{DrawingArea, DrawingBackend, RGBColor, SeriesLabelPosition};
use serde::Serialize;
use std::fmt::Write as _;
use std::process::ExitCode;

/// One point of one policy's curve.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Point {
    pub policy: String,
    /// The full-size cache the point stands for (the simulated cache / the sampling rate).
    pub cache_blocks: u64,
    pub cache_bytes: u64,
    /// The cache simulated on the sampled blocks.
    pub sampled_cache_blocks: u64,
    /// Block miss ratio of the simulated cache; sampled, with SHARDS_adj (see [`points`]).
    pub miss_ratio: f64,
}

/// The caches of the curves: every policy at every size (`--cache`, or `--points` even shares of the
/// footprint), block sizes scaled by `rate`.
fn caches(a: &Args, policies: &[PolicySpec], rate: f64) -> anyhow::Result<Vec<CacheSpec>> {
    let bs = a.block_size.get();
    let sizes: Vec<CacheSize> = match &a.cache {
        Some(list) => list
            .iter()
            .map(|s| match *s {
                SizeSpec::Percent(p) => Ok(CacheSize::PercentOfFootprint(p)),
                s => {
                    let blocks = s.blocks(bs, 0);
                    if blocks == 0 {
                        bail!("--cache: {s} holds no {bs} B block");
                    }
                    Ok(CacheSize::Blocks(((blocks as f64 * rate).round() as u64).max(1)))
                }
            })
            .collect::<anyhow::Result<_>>()?,
        None => (1..=a.points).map(|i| CacheSize::PercentOfFootprint(100.0 * i as f64 / a.points as f64)).collect(),
    };
    Ok(policies.iter().flat_map(|p| sizes.iter().map(|&size| CacheSpec { policy: p.clone(), size })).collect())
}

/// The curves' points, in policy then size order. A sampled run's miss ratio is its misses over the accesses
/// the sample should have had (rate × the trace's block accesses): SHARDS_adj (Waldspurger et al., FAST'15),
/// which takes the surplus or shortfall of sampled accesses to be hits on the few hot blocks that happened (not)
/// to be sampled, as `blockwell mrc --sample` does for LRU.
pub fn points(r: &ReplayReport, rate: f64) -> Vec<Point> {
    let expected = r.unsampled_block_accesses.map(|n| n as f64 * rate);
    r.results
        .iter()
        .map(|c| {
            let full = ((c.cache_blocks as f64 / rate).round() as u64).max(c.cache_blocks);
            Point {
                policy: c.policy.clone(),
                cache_blocks: full,
                cache_bytes: full * r.block_size,
                sampled_cache_blocks: c.cache_blocks,
                miss_ratio: match expected {
                    Some(e) if e > 0.0 => (c.stats.total().block_misses() as f64 / e).min(1.0),
                    _ => c.stats.total().block_miss_ratio(),
                },
            }
        })
        .collect()
}

pub fn run(a: &Args, policies: &[PolicySpec], plot: Option<PlotKind>) -> anyhow::Result<ExitCode> {
    let rate = a.sample.unwrap_or(1.0);
    if !(rate > 0.0 && rate <= 1.0) {
        bail!("--sample: {rate} is not a rate in (0, 1]");
    }
    let caches = caches(a, policies, rate)?;
    let cfg = ReplayConfig {
        block_size: a.block_size.get(),
        preset: a.preset,
        reads_only: a.reads_only,
        threads: a.threads,
        sample: (rate < 1.0).then_some(rate),
        ..ReplayConfig::default()
    };
    let report = replay(&super::sim::opener(&a.input), &caches, &cfg, ReplayHooks::default())
        .with_context(|| a.input.trace.display().to_string())?;
    if report.skipped_lines > 0 {
        // The replay read the trace; say what it skipped as a single pass does.
        let mut reader = a.input.open()?;
        while reader.next_request()?.is_some() {}
        report_skipped(reader.as_ref());
    }
    let pts = points(&report, rate);
    let trace = a.input.trace.display().to_string();
    let text = match a.output.format() {
        Format::Json => OutputArgs::json(&serde_json::json!({
            "trace": trace,
            "block_size": report.block_size,
            "preset": report.preset,
            "sample_rate": rate,
            "sampled_block_accesses": report.block_accesses,
            "sampled_footprint_blocks": report.footprint_blocks,
            "points": pts,
        }))?,
        Format::Csv => {
            let mut s = String::from("policy,cache_blocks,cache_bytes,sampled_cache_blocks,miss_ratio\n");
            for p in &pts {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{:.6}",
                    super::sim::csv_field(&p.policy),
                    p.cache_blocks,
                    p.cache_bytes,
                    p.sampled_cache_blocks,
                    p.miss_ratio
                );
            }
            s
        }
        Format::Table => {
            let how = if rate < 1.0 {
                format!("miniature simulation at R = {rate} ({} sampled block accesses)", report.block_accesses)
            } else {
                format!("full simulation ({} block accesses)", report.block_accesses)
            };
            let mut s = format!("trace {trace}: {how}, preset {}\n", report.preset);
            let _ = writeln!(s, "{:<24} {:>12} {:>12} {:>10}", "policy", "cache blocks", "simulated", "miss ratio");
            for p in &pts {
                let _ = writeln!(
                    s,
                    "{:<24} {:>12} {:>12} {:>10.6}",
                    p.policy, p.cache_blocks, p.sampled_cache_blocks, p.miss_ratio
                );
            }
            s
        }
    };
    a.output.write(&text)?;
    if let (Some(path), Some(kind)) = (&a.plot, plot) {
        let file = a.input.trace.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let title = if rate < 1.0 {
            format!("{file} — miss ratio (miniature simulation, R = {rate})")
        } else {
            format!("{file} — miss ratio")
        };
        save(path, kind, (1000, 640), &Curves { title: &title, points: &pts, block_size: report.block_size })
            .with_context(|| format!("--plot {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The plot: a line per policy, miss ratio against cache size.
struct Curves<'a> {
    title: &'a str,
    points: &'a [Point],
    block_size: u64,
}

impl Figure for Curves<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let x_max = self.points.iter().map(|p| p.cache_blocks).max().unwrap_or(1).max(1);
        let y_max = self.points.iter().map(|p| p.miss_ratio).fold(0.0f64, f64::max);
        let y1 = ((y_max * 20.0).ceil() / 20.0).clamp(0.05, 1.0);
        let mut chart = chart(&root, self.title, 0u64..x_max, 0.0..y1)?;
        chart
            .configure_mesh()
            .x_desc(format!("cache size (blocks of {} B)", self.block_size))
            .y_desc("miss ratio")
            .x_label_formatter(&|x| short_count(*x))
            .y_label_formatter(&|y| format!("{y:.2}"))
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 17))
            .draw()
            .map_err(drawing_error)?;
        let mut policies: Vec<&str> = Vec::new();
        for p in self.points {
            if !policies.contains(&p.policy.as_str()) {
                policies.push(&p.policy);
            }
        }
        for (n, name) in policies.iter().enumerate() {
            let (r, g, b) = PALETTE[n % PALETTE.len()];
            let line = self.points.iter().filter(|p| p.policy == *name).map(|p| (p.cache_blocks, p.miss_ratio));
            labelled_line(&mut chart, line.collect(), RGBColor(r, g, b), name.to_string())?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)?;
        root.present().map_err(drawing_error)
    }
}
