//! `blockwell sim --interval N`: every cache's miss ratio per interval of N requests (after warm-up), as a
//! table, as CSV (one row per cache and interval) and as a plot of the block miss ratio over the trace. The
//! counters come from the replay ([`blockwell_sim::replay::CacheResult::intervals`]).

use super::plot::{chart, draw_legend, drawing_error, line, split_for_legend, steps, Figure, LegendEntry, PALETTE};
use blockwell_sim::replay::ReplayReport;
use plotters::coord::Shift;
use plotters::prelude::{DrawingArea, DrawingBackend, RGBColor};
use std::fmt::Write as _;

/// The CSV: one row per cache and interval ([`blockwell_sim::rows::interval_row`]: ratios empty when undefined,
/// and the settings that produced them).
pub fn csv(r: &ReplayReport) -> String {
    let mut s = blockwell_sim::rows::interval_columns().join(",");
    s.push('\n');
    for row in blockwell_sim::rows::interval_rows(r) {
        s.push_str(&row.csv());
    }
    s
}

/// The table: one row per interval, the block miss ratio of each cache in a column.
pub fn table(r: &ReplayReport) -> String {
    let mut s = String::from("block miss ratio per interval (requests counted after filters, warm-up included)\n");
    let _ = write!(s, "{:>12}", "end request");
    let names: Vec<String> = r.results.iter().map(|c| format!("{} {}", c.policy, c.cache_blocks)).collect();
    let width = names.iter().map(String::len).max().unwrap_or(8).max(8);
    for n in &names {
        let _ = write!(s, " {n:>width$}");
    }
    s.push('\n');
    let rows = r.results.iter().map(|c| c.intervals.len()).max().unwrap_or(0);
    for k in 0..rows {
        let end = r.results.iter().find_map(|c| c.intervals.get(k)).map_or(0, |i| i.end_request);
        let _ = write!(s, "{end:>12}");
        for c in &r.results {
            let v = c.intervals.get(k).and_then(|i| i.total().block_miss_ratio());
            let v = v.map_or_else(|| "-".into(), |x| format!("{x:.6}"));
            let _ = write!(s, " {v:>width$}");
        }
        s.push('\n');
    }
    s
}

/// The plot: block miss ratio against requests replayed, a line per cache.
pub struct OverTime<'a> {
    pub title: &'a str,
    pub report: &'a ReplayReport,
}

impl Figure for OverTime<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let r = self.report;
        let x_max = r.results.iter().flat_map(|c| c.intervals.last()).map(|i| i.end_request).max().unwrap_or(1).max(1);
        let y_max = r
            .results
            .iter()
            .flat_map(|c| c.intervals.iter().filter_map(|i| i.total().block_miss_ratio()))
            .fold(0.0f64, f64::max);
        let y1 = ((y_max * 20.0).ceil() / 20.0).clamp(0.05, 1.0);
        let entries: Vec<LegendEntry> = r
            .results
            .iter()
            .enumerate()
            .map(|(n, c)| {
                let (red, green, blue) = PALETTE[n % PALETTE.len()];
                let label = format!("{} / {} blocks", c.policy, c.cache_blocks);
                LegendEntry { label, color: RGBColor(red, green, blue), marked: false }
            })
            .collect();
        let (area, legend) = split_for_legend(&root, &entries)?;
        let mut chart = chart(&area, self.title, 0u64..x_max, 0.0..y1)?;
        chart
            .configure_mesh()
            .x_desc("requests replayed")
            .y_desc("block miss ratio in the interval")
            .y_label_formatter(&|y| format!("{y:.2}"))
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 17))
            .draw()
            .map_err(drawing_error)?;
        // Each interval's ratio held over the interval (a step at its end), as the Python package's plot; an
        // interval without block accesses has no ratio and no step.
        for (c, e) in r.results.iter().zip(&entries) {
            let points: Vec<(u64, f64)> =
                c.intervals.iter().filter_map(|i| Some((i.end_request, i.total().block_miss_ratio()?))).collect();
            // The first interval starts where counting starts (after warm-up): its end less its requests.
            let start = c.intervals.first().map_or(0, |i| i.end_request.saturating_sub(i.total().requests));
            line(&mut chart, steps(start, &points), e.color)?;
        }
        draw_legend(&legend, &entries)?;
        root.present().map_err(drawing_error)
    }
}
