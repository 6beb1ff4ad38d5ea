//! `blockwell mrc --policy P`: miss-ratio curves of any policy, by simulating one cache per size in one pass
//! over the trace, miniature with `--sample R` ([`blockwell_sim::mini`]); a table, CSV, JSON and a plot.

use super::mrc::Args;
use super::options::{Format, OutputArgs};
use super::plot::{
    chart, draw_legend, drawing_error, line, marks, miss_ratio_axes, save_and_report, split_for_legend, Figure,
    LegendEntry, PlotKind, PALETTE,
};
use anyhow::Context;
use blockwell_core::policy::PolicySpec;
use blockwell_sim::mini::{curves, MiniError, Point, Sizes};
use blockwell_sim::replay::ReplayConfig;
use plotters::coord::Shift;
use plotters::prelude::{DrawingArea, DrawingBackend, RGBColor};
use std::fmt::Write as _;
use std::process::ExitCode;

pub fn run(a: &Args, policies: &[PolicySpec], plot: Option<PlotKind>) -> anyhow::Result<ExitCode> {
    let rate = a.sample.unwrap_or(1.0);
    let cfg = ReplayConfig {
        block_size: a.block_size.get(),
        preset: a.preset,
        reads_only: a.reads_only,
        threads: a.threads,
        ..ReplayConfig::default()
    };
    let sizes = match &a.cache {
        Some(list) => Sizes::Given(list.to_vec()),
        None => Sizes::Points(a.points),
    };
    let (report, pts) = curves(&super::sim::opener(&a.input), policies, &sizes, rate, &cfg).map_err(|e| match e {
        MiniError::Rate(_) => anyhow::anyhow!("--sample: {e}"),
        MiniError::Size(..) => anyhow::anyhow!("--cache: {e}"),
        e => anyhow::Error::new(e).context(a.input.trace.display().to_string()),
    })?;
    super::sim::skipped(report.skipped_lines, &report.skipped_examples, None);
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
            // The policy column as wide as the longest spec, so that long specs keep the columns aligned.
            let w = pts.iter().map(|p| p.policy.chars().count()).chain(["policy".len()]).max().unwrap_or(6);
            let _ = writeln!(
                s,
                "{:<w$}  {:>12}  {:>16}  {:>10}",
                "policy", "cache blocks", "simulated blocks", "miss ratio"
            );
            for p in &pts {
                let _ = writeln!(
                    s,
                    "{:<w$}  {:>12}  {:>16}  {:>10.6}",
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
        save_and_report(
            path,
            kind,
            (1000, 640),
            &Curves { title: &title, points: &pts, block_size: report.block_size },
        )
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
        let mut policies: Vec<&str> = Vec::new();
        for p in self.points {
            if !policies.contains(&p.policy.as_str()) {
                policies.push(&p.policy);
            }
        }
        let entries: Vec<LegendEntry> = policies
            .iter()
            .enumerate()
            .map(|(n, name)| {
                let (r, g, b) = PALETTE[n % PALETTE.len()];
                LegendEntry { label: name.to_string(), color: RGBColor(r, g, b), marked: true }
            })
            .collect();
        let (area, legend) = split_for_legend(&root, &entries)?;
        let mut chart = chart(&area, self.title, 0u64..x_max, 0.0..y1)?;
        miss_ratio_axes(&mut chart, self.block_size)?;
        // A line per policy through its simulated sizes, each size marked (as the Python package's plot).
        for (name, e) in policies.iter().zip(&entries) {
            let points: Vec<(u64, f64)> =
                self.points.iter().filter(|p| p.policy == *name).map(|p| (p.cache_blocks, p.miss_ratio)).collect();
            line(&mut chart, points.clone(), e.color)?;
            marks(&mut chart, &points, e.color)?;
        }
        draw_legend(&legend, &entries)?;
        root.present().map_err(drawing_error)
    }
}
