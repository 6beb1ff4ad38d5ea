//! `blockwell experiment redcap|prefetch-policies`: the seed papers' experiment grids on the time-aware
//! simulator, as tables, CSV, JSON and SVG plots. The grids live in `blockwell_sim::experiments`; this module
//! parses options, prints and plots, and dispatches the experiments with modules of their own (dedup,
//! es-equivalence, device-caches).

use crate::cmd::common::{ReadArgs, SizeSpec, TraceArgs};
use crate::cmd::options::{parse_arg, parse_threads, BlockSize, Format, List, OutputArgs, PolicyList};
use crate::cmd::plot::{drawing_error, save, Figure, PlotKind, PALETTE};
use anyhow::Context;
use blockwell_core::policy::Preset;
use blockwell_sim::experiments::policies::{Metric, PolicyOptions, PolicyResults, Source};
use blockwell_sim::experiments::redcap::{RedcapOptions, RedcapResults};
use blockwell_sim::experiments::Error as GridError;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `blockwell experiment ...`
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// The REDCAP paper's Figure 1: improvement in application time with REDCAP vs without, per benchmark × processes ×
    /// layout × REDCAP configuration.
    #[command(after_help = "\
The paper's file systems map to layouts: ext3 → block-groups, ext2 → block-groups(rsv_min=0), XFS/JFS → single-extent, ReiserFS → \
reiserfs (its tree order; `scattered`, 1-16 block runs at random places, is an older stand-in); contiguous is the \
ideal baseline. Each (benchmark, processes) workload runs once without REDCAP and \
once per configuration on each layout, cold caches; improvement = 1 - time with / time without. Runs are \
independent and use all cores (--threads); the output is the same whatever the thread count. Results and their \
comparison with the paper: docs/experiments/redcap.md.")]
    Redcap(RedcapArgs),
    /// Butt et al. (SIGMETRICS'05, kernel prefetching and buffer-cache replacement), Figures 3-6 and Table 5:
    /// hit ratio, disk requests and execution time against cache size for replacement policies, with and without
    /// read-ahead.
    #[command(after_help = "\
A generated workload (--workload: the paper's applications cscope, glimpse, gcc, viewperf, tpc-h, tpc-r, \
multi1-multi3, at the paper's cache sizes mapped onto the generated data unless --cache is given; or the classes \
loop, random, mix-seq, mix-random) runs through a page cache with the policy and the read-ahead, files laid out \
by --layout; a block trace (--trace) runs through a block-level cache instead. Results and their comparison with the paper: \
docs/experiments/prefetch-policies.md.")]
    PrefetchPolicies(PolicyArgs),
    /// Morrey & Grunwald (content-based block caching), Tables 1 and 3, Figures 4-5: offset- vs content-based caching across cache sizes, the hash-table
    /// fraction sweep, silent writes, unified vs private caches over several volumes.
    Dedup(super::experiment_dedup::DedupArgs),
    /// The extended-storage paper's Table II: the extended-storage tier capacity equivalent to DRAM, per slowdown factor, and the
    /// break-even price ratio.
    EsEquivalence(super::experiment_es::EsArgs),
    /// Koutoupis, "Advanced Hard Drive Caching Techniques" (Linux Journal): SSD and RAM caches in front of an HDD, live: fio (4 KiB, queue depth 32) over NBD against the
    /// emulated HDD and SSD alone, Blockwell's write-back SSD tier, its write-through RAM cache and nbdkit's
    /// write-back cache filter, beside the article's numbers; then a kill -9 durability check.
    DeviceCaches(super::experiment_devcache::DevCacheArgs),
}

/// Output options shared by both experiments: the tables, CSV or JSON (the options of every command that
/// prints them), plots, threads.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub print: OutputArgs,

    /// Also write plots into DIR (created if missing).
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,

    /// Plot file format: svg or png.
    #[arg(long, value_name = "FORMAT", default_value = "svg", requires = "plot")]
    pub plot_format: String,

    /// Threads (default: all cores).
    #[arg(long, value_name = "N", value_parser = parse_threads)]
    pub threads: Option<usize>,
}

/// Options of `blockwell experiment redcap`.
#[derive(clap::Args, Debug)]
pub struct RedcapArgs {
    /// A reduced grid: 1 and 8 processes, block-groups and scattered, 64x128k, --scale 0.125 (each option
    /// given explicitly still applies).
    #[arg(long)]
    pub quick: bool,

    /// Benchmarks (workload generators, optionally with parameters) [default: kernel-read,ior,tac,strided-4k,strided-512k].
    #[arg(long, value_name = "LIST")]
    pub benchmarks: Option<String>,

    /// Process counts [default: 1,2,4,8,16,32].
    #[arg(long, value_name = "LIST")]
    pub procs: Option<String>,

    /// Layouts, with parameters [default: block-groups,block-groups(rsv_min=0),contiguous,single-extent,reiserfs].
    #[arg(long, value_name = "LIST")]
    pub layouts: Option<String>,

    /// REDCAP configurations [default: 64x128k,128x128k].
    #[arg(long, value_name = "LIST")]
    pub configs: Option<String>,

    /// Multiplies the generators' data sizes (file_mb; kernel-read's files and dirs) [default: 1].
    #[arg(long, value_name = "F")]
    pub scale: Option<f64>,

    /// Disk model.
    #[arg(long, value_name = "SPEC", default_value = "wd1200bb")]
    pub disk: String,

    /// Page-cache size (`0`: none).
    #[arg(long, value_name = "SIZE", default_value = "256MiB")]
    pub page_cache: String,

    /// Page-cache policy.
    #[arg(long, value_name = "POLICY", default_value = "lru")]
    pub page_policy: String,

    /// Page-cache read-ahead (default: Linux 2.6.14's, the paper's kernel).
    #[arg(long, value_name = "PREFETCHER", default_value = "linux26")]
    pub page_prefetch: String,

    /// Device queue order: fifo, c-look or cfq (Linux 2.6.14's CFQ, the paper's scheduler).
    #[arg(long, value_name = "SCHEDULER", default_value = "cfq")]
    pub scheduler: String,

    /// Seed of layouts with randomness.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub layout_seed: u64,

    /// Runs per cell, each with its own start-jitter seed; cells give the mean and its 95 % confidence
    /// interval [default: 5; --quick: 3].
    #[arg(long, value_name = "N")]
    pub runs: Option<u32>,

    /// Each process starts after a uniform random delay of up to this many milliseconds (0: all start
    /// together and may run in lock-step).
    #[arg(long, value_name = "MS", default_value_t = 10.0)]
    pub start_jitter_ms: f64,

    /// How REDCAP's controller's shadow devices are fed: `closed-loop` (each process replays its own closed
    /// loop; `closed-loop(lag=N)`: at most N requests per process wait, default 8, 0: no limit) or
    /// `arrival(depth=N)` (queued as requests arrive; at most N per process, 0: no limit). See
    /// docs/experiments/redcap.md.
    #[arg(long, value_name = "SPEC", default_value = "closed-loop")]
    pub shadow: String,

    /// Every think time gets a uniform random addition of up to this many microseconds, drawn per process and
    /// run (0: none). See docs/experiments/redcap.md.
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub think_jitter_us: u64,

    /// Processors the processes' think times share, first come first served (0: one per process). The
    /// paper's machine had one. Matters only with think times (`kernel-read(think_us=500)`). See
    /// docs/experiments/redcap.md.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub cpus: u32,

    #[command(flatten)]
    pub output: RunArgs,
}

/// Options of `blockwell experiment prefetch-policies`.
#[derive(clap::Args, Debug)]
pub struct PolicyArgs {
    /// A reduced grid: cache sizes 25%, 50%, 100% of the footprint, and `loop(files=500)` unless --workload or
    /// --trace is given (each option given explicitly still applies).
    #[arg(long)]
    pub quick: bool,

    /// A generated workload: the paper's applications cscope, glimpse, gcc, viewperf, tpc-h, tpc-r, multi1-3, or
    /// loop, random, mix-seq, mix-random (with parameters, e.g. `cscope(scale=0.3)`) [default: loop].
    #[arg(long, value_name = "SPEC", conflicts_with = "trace")]
    pub workload: Option<String>,

    /// A block trace instead of a workload.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,

    /// The block trace's format.
    #[arg(long, value_name = "FORMAT", requires = "trace")]
    pub format: Option<String>,

    /// Policies, comma separated, with optional parameters (as `sim --policy`) [default:
    /// opt,lru,lru-k(k=2),2q,lirs,lrfu,mq,arc].
    #[arg(long, visible_alias = "policies", value_name = "POLICY,...", value_parser = parse_arg::<PolicyList>)]
    pub policy: Option<PolicyList>,

    /// Policy parameter preset (as `sim --preset`; here the paper's, butt05, by default).
    #[arg(long, value_name = "PRESET", default_value = "butt05", value_parser = parse_arg::<Preset>)]
    pub preset: Preset,

    /// Prefetchers to compare.
    #[arg(long, value_name = "LIST", default_value = "none,linux24")]
    pub prefetch: String,

    /// Cache sizes, comma separated: `25%` (of the footprint), `64MiB`, `16384blocks` [default:
    /// 10%,25%,50%,75%,100%; for the paper's applications the paper's sizes, mapped onto the generated data].
    #[arg(long, visible_alias = "sizes", value_name = "SIZE,...", value_parser = parse_arg::<List<SizeSpec>>)]
    pub cache: Option<List<SizeSpec>>,

    /// Disk model.
    #[arg(long, value_name = "SPEC", default_value = "cheetah9lp")]
    pub disk: String,

    /// File layout of workloads.
    #[arg(long, value_name = "LAYOUT", default_value = "contiguous")]
    pub layout: String,

    /// Device queue order: fifo, c-look or cfq.
    #[arg(long, value_name = "SCHEDULER", default_value = "fifo")]
    pub scheduler: String,

    /// Closed loop: think time before every request, in µs, instead of the source's.
    #[arg(long, value_name = "US")]
    pub think_us: Option<u64>,

    /// Page and block size, a power of two from 512 B to 1 MiB (512 for traces of 512-byte pages, such as ARC's
    /// `.lis`).
    #[arg(long, value_name = "SIZE", default_value = "4KiB", value_parser = parse_arg::<BlockSize>)]
    pub block_size: BlockSize,

    #[command(flatten)]
    pub output: RunArgs,
}

impl RedcapArgs {
    /// The options as the grid takes them ([`RedcapOptions::grid`] checks them).
    pub fn options(&self) -> anyhow::Result<RedcapOptions> {
        let procs = self
            .procs
            .as_deref()
            .map(|p| {
                split_list(p)
                    .iter()
                    .map(|x| x.parse::<u32>().map_err(|_| anyhow::anyhow!("--procs: '{x}' is not a process count")))
                    .collect::<anyhow::Result<Vec<u32>>>()
            })
            .transpose()?;
        Ok(RedcapOptions {
            quick: self.quick,
            benchmarks: self.benchmarks.as_deref().map(split_list),
            procs,
            layouts: self.layouts.as_deref().map(split_list),
            configs: self.configs.as_deref().map(split_list),
            scale: self.scale,
            disk: self.disk.clone(),
            page_cache: self.page_cache.clone(),
            page_policy: self.page_policy.clone(),
            page_prefetch: self.page_prefetch.clone(),
            scheduler: self.scheduler.clone(),
            layout_seed: self.layout_seed,
            runs: self.runs,
            start_jitter_ms: self.start_jitter_ms,
            shadow: self.shadow.clone(),
            think_jitter_us: self.think_jitter_us,
            cpus: self.cpus,
            threads: self.output.threads,
        })
    }
}

impl PolicyArgs {
    /// The options as the grid takes them ([`PolicyOptions::grid`] checks them).
    pub fn options(&self) -> PolicyOptions {
        PolicyOptions {
            quick: self.quick,
            workload: self.workload.clone(),
            policies: self.policy.as_ref().map(|p| p.0.iter().map(|s| s.label().to_string()).collect()),
            preset: self.preset.name().to_string(),
            prefetch: split_list(&self.prefetch),
            cache: self.cache.as_ref().map(|c| c.iter().map(|s| s.to_string()).collect()),
            disk: self.disk.clone(),
            layout: self.layout.clone(),
            scheduler: self.scheduler.clone(),
            think_us: self.think_us,
            block_size: self.block_size.get(),
            threads: self.output.threads,
        }
    }
}

/// A grid's error as the command line says it: an option named by its flag (`page_cache` → `--page-cache`).
pub fn flag_error(e: GridError) -> anyhow::Error {
    match e {
        GridError::Option { option, message } => anyhow::anyhow!("--{}: {message}", option.replace('_', "-")),
        e => e.into(),
    }
}

pub fn run(c: Command) -> anyhow::Result<ExitCode> {
    match c {
        Command::Redcap(a) => redcap(a),
        Command::PrefetchPolicies(a) => policies(a),
        Command::Dedup(a) => super::experiment_dedup::run(a),
        Command::EsEquivalence(a) => super::experiment_es::run(a),
        Command::DeviceCaches(a) => super::experiment_devcache::run(a),
    }
}

/// Splits a comma-separated list, keeping commas inside parentheses.
fn split_list(s: &str) -> Vec<String> {
    blockwell_core::spec::split_list(s).into_iter().map(str::to_string).collect()
}

impl RunArgs {
    fn plot_kind(&self) -> anyhow::Result<PlotKind> {
        PlotKind::from_name(&self.plot_format).context("--plot-format")
    }
}

/// Runs a grid with a progress bar of its runs on stderr, drawn only when stderr is a terminal.
fn with_bar<R>(message: &str, run: impl FnOnce(blockwell_sim::experiments::Progress<'_>) -> R) -> R {
    let bar: std::sync::OnceLock<Option<indicatif::ProgressBar>> = std::sync::OnceLock::new();
    let progress = |done: usize, total: usize| {
        if let Some(b) = bar.get_or_init(|| crate::cmd::common::job_bar(total as u64, message)) {
            b.set_position(done as u64);
        }
    };
    let r = run(&progress);
    if let Some(Some(b)) = bar.get() {
        b.finish_and_clear();
    }
    r
}

/// Prints a grid's results as `--json`, `--csv` or (default) its tables.
fn emit<R: serde::Serialize>(
    o: &RunArgs,
    r: &R,
    csv: impl FnOnce(&R) -> String,
    table: impl FnOnce(&R) -> String,
) -> anyhow::Result<ExitCode> {
    let text = match o.print.format() {
        Format::Json => OutputArgs::json(r)?,
        Format::Csv => csv(r),
        Format::Table => table(r),
    };
    o.print.write(&text)?;
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------------------------------------------
// redcap

fn redcap(a: RedcapArgs) -> anyhow::Result<ExitCode> {
    let plot_kind = a.output.plot_kind()?;
    let g = a.options()?.grid().map_err(flag_error)?;
    let r = with_bar("runs", |p| g.run_with_progress(p))?;
    if let Some(dir) = &a.output.plot {
        plot_redcap(dir, plot_kind, &r).with_context(|| format!("--plot {}", dir.display()))?;
    }
    emit(&a.output, &r, |r| r.csv(), |r| r.table())
}

// ---------------------------------------------------------------------------------------------------------------
// prefetch-policies

fn policies(a: PolicyArgs) -> anyhow::Result<ExitCode> {
    let plot_kind = a.output.plot_kind()?;
    let trace = match &a.trace {
        Some(path) => {
            let args = TraceArgs { trace: path.clone(), read: ReadArgs::with_format(a.format.clone()) };
            let mut reader = args.open().context("--trace")?;
            let name =
                path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
            Some(Source::from_trace(name, reader.as_mut()).context("--trace")?)
        }
        None => None,
    };
    let g = a.options().grid(trace).map_err(flag_error)?;
    let r = with_bar("runs", |p| g.run_with_progress(p))?;
    if let Some(dir) = &a.output.plot {
        plot_policies(dir, plot_kind, &r).with_context(|| format!("--plot {}", dir.display()))?;
    }
    emit(&a.output, &r, |r| r.csv(), |r| r.table())
}

// ---------------------------------------------------------------------------------------------------------------
// Plots

/// One line of a plot.
struct Line {
    label: String,
    color: usize,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// A file name made of `s`'s letters, digits, `-` and `_`.
fn file_name(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// Draws `lines` into an SVG or PNG at `path`; `x_labels` replaces the x-axis numbers by names at 0, 1, 2...
fn line_plot(
    path: &Path,
    kind: PlotKind,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    x_labels: Option<&[String]>,
    lines: &[Line],
) -> anyhow::Result<()> {
    save(path, kind, (1200, 680), &LinePlot { title, x_desc, y_desc, x_labels, lines })
}

/// Lines with a legend beside the chart.
#[derive(Clone, Copy)]
struct LinePlot<'a> {
    title: &'a str,
    x_desc: &'a str,
    y_desc: &'a str,
    x_labels: Option<&'a [String]>,
    lines: &'a [Line],
}

impl Figure for LinePlot<'_> {
    fn draw<DB: plotters::prelude::DrawingBackend>(
        &self,
        root: plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
    ) -> anyhow::Result<()> {
        use plotters::prelude::*;
        let LinePlot { title, x_desc, y_desc, x_labels, lines } = *self;
        let e = drawing_error::<DB::ErrorType>;
        let pts = || lines.iter().flat_map(|l| l.points.iter().copied());
        let (x0, x1) = pts().fold((f64::MAX, f64::MIN), |(a, b), (x, _)| (a.min(x), b.max(x)));
        let (y0, y1) = pts().fold((f64::MAX, f64::MIN), |(a, b), (_, y)| (a.min(y), b.max(y)));
        let (x0, x1) = if x0 <= x1 { (x0, x1) } else { (0.0, 1.0) };
        let (y0, y1) = if y0 <= y1 { (y0.min(0.0), y1.max(0.0)) } else { (0.0, 1.0) };
        let pad_x = ((x1 - x0) * 0.05).max(0.5);
        let pad_y = ((y1 - y0) * 0.08).max(1e-9);
        root.fill(&WHITE).map_err(e)?;
        let (plot_area, legend) = root.split_horizontally(root.dim_in_pixel().0.saturating_sub(260));
        let mut chart = ChartBuilder::on(&plot_area)
            .caption(title, ("sans-serif", 20))
            .margin(20)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d((x0 - pad_x)..(x1 + pad_x), (y0 - pad_y)..(y1 + pad_y))
            .map_err(e)?;
        let labels = x_labels.map(<[String]>::to_vec);
        let fmt_x = move |x: &f64| -> String {
            match &labels {
                Some(l) => {
                    let i = x.round();
                    if (x - i).abs() < 1e-6 && i >= 0.0 {
                        l.get(i as usize).cloned().unwrap_or_default()
                    } else {
                        String::new()
                    }
                }
                None => format!("{x:.0}"),
            }
        };
        let mut mesh = chart.configure_mesh();
        mesh.x_desc(x_desc)
            .y_desc(y_desc)
            .x_label_formatter(&fmt_x)
            .light_line_style(TRANSPARENT)
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 16));
        if let Some(l) = x_labels {
            mesh.x_labels(l.len().max(2) * 4);
        }
        mesh.draw().map_err(e)?;
        for l in lines {
            let (r, g, b) = PALETTE[l.color % PALETTE.len()];
            let c = RGBColor(r, g, b);
            let style = c.stroke_width(2);
            if l.dashed {
                chart.draw_series(DashedLineSeries::new(l.points.clone(), 8, 5, style)).map_err(e)?;
            } else {
                chart.draw_series(LineSeries::new(l.points.clone(), style)).map_err(e)?;
            }
            chart.draw_series(l.points.iter().map(|&p| Circle::new(p, 3, c.filled()))).map_err(e)?;
        }
        // The legend, beside the chart so that it hides no data.
        for (i, l) in lines.iter().enumerate() {
            let (r, g, b) = PALETTE[l.color % PALETTE.len()];
            let c = RGBColor(r, g, b);
            let y = 70 + 20 * i as i32;
            let segments: &[(i32, i32)] = if l.dashed { &[(4, 12), (18, 26), (32, 40)] } else { &[(4, 40)] };
            for &(a, b) in segments {
                legend.draw(&PathElement::new(vec![(a, y), (b, y)], c.stroke_width(2))).map_err(e)?;
            }
            legend.draw(&Text::new(l.label.clone(), (48, y - 7), ("sans-serif", 13))).map_err(e)?;
        }
        root.present().map_err(e)?;
        Ok(())
    }
}

/// One SVG per benchmark: improvement (%) against processes, a line per layout × configuration (the second
/// configuration dashed).
fn plot_redcap(dir: &Path, kind: PlotKind, r: &RedcapResults) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let x_labels: Vec<String> = r.procs.iter().map(u32::to_string).collect();
    for b in &r.benchmarks {
        let mut lines = Vec::new();
        for (li, l) in r.layouts.iter().enumerate() {
            for (ci, c) in r.configs.iter().enumerate() {
                let points = r
                    .procs
                    .iter()
                    .enumerate()
                    .filter_map(|(i, &p)| r.get(b, p, l, c).map(|x| (i as f64, x.improvement * 100.0)))
                    .collect();
                lines.push(Line { label: format!("{l} {c}"), color: li, dashed: ci > 0, points });
            }
        }
        let title = format!("{b}: application time improvement with REDCAP ({})", r.disk);
        let path = dir.join(format!("redcap-{}.{}", file_name(b), kind.ext()));
        line_plot(&path, kind, &title, "processes", "improvement (%)", Some(&x_labels), &lines)?;
    }
    Ok(())
}

/// One SVG per metric: the metric against cache size (MiB), a line per policy × prefetcher (no prefetching
/// dashed).
fn plot_policies(dir: &Path, kind: PlotKind, r: &PolicyResults) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    for m in Metric::ALL {
        let lines: Vec<Line> = r
            .series()
            .into_iter()
            .enumerate()
            .map(|(i, (pol, pf, pts))| Line {
                label: format!("{pol} / {pf}"),
                color: i / r.prefetchers.len().max(1),
                dashed: pf == "none",
                // (A point whose metric is undefined is left out of its line.)
                points: pts
                    .iter()
                    .filter_map(|p| Some((p.cache_bytes as f64 / (1u64 << 20) as f64, m.value(p)?)))
                    .collect(),
            })
            .collect();
        let title = format!("{}: {} ({})", r.source, m.title(), r.disk);
        let path = dir.join(format!("{}.{}", m.name(), kind.ext()));
        line_plot(&path, kind, &title, "cache size (MiB)", m.title(), None, &lines)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_split_outside_parentheses() {
        assert_eq!(split_list("a, b(x=1,y=2),c"), ["a", "b(x=1,y=2)", "c"]);
        assert!(split_list(" ,").is_empty());
        assert_eq!(file_name("strided-4k(procs=8)"), "strided-4k_procs_8_");
    }

    #[derive(clap::Parser)]
    struct Cli {
        #[command(subcommand)]
        c: Command,
    }

    fn parse(args: &[&str]) -> Command {
        use clap::Parser;
        Cli::parse_from(std::iter::once("experiment").chain(args.iter().copied())).c
    }

    /// The command's defaults (written in its help) and the options' (the Python front's) build the same grid.
    #[test]
    fn command_defaults_are_the_options_defaults() {
        use blockwell_sim::experiments::{dedup::DedupOptions, es_equivalence::EsOptions};
        let grid = |g: &dyn std::fmt::Debug| format!("{g:?}");
        let Command::Redcap(a) = parse(&["redcap"]) else { unreachable!() };
        assert_eq!(a.options().unwrap(), RedcapOptions::default());
        let Command::PrefetchPolicies(a) = parse(&["prefetch-policies"]) else { unreachable!() };
        assert_eq!(a.options(), PolicyOptions::default());
        let Command::Dedup(a) = parse(&["dedup"]) else { unreachable!() };
        let (cli, lib) = (a.options().grid(None).unwrap(), DedupOptions::default().grid(None).unwrap());
        assert_eq!(grid(&cli), grid(&lib));
        let Command::EsEquivalence(a) = parse(&["es-equivalence"]) else { unreachable!() };
        let cli = EsOptions { threads: None, ..a.options() };
        assert_eq!(grid(&cli.grid().unwrap()), grid(&EsOptions::default().grid().unwrap()));
    }

    #[test]
    fn option_errors_name_the_flag() {
        let Command::Redcap(a) = parse(&["redcap", "--page-cache", "lots"]) else { unreachable!() };
        let e = a.options().unwrap().grid().map_err(flag_error).unwrap_err().to_string();
        assert!(e.starts_with("--page-cache: "), "{e}");
        let Command::Redcap(a) = parse(&["redcap", "--procs", "1,99"]) else { unreachable!() };
        let e = a.options().unwrap().grid().map_err(flag_error).unwrap_err().to_string();
        assert!(e.starts_with("--procs: '99' is not a process count from 1 to"), "{e}");
        let Command::PrefetchPolicies(a) = parse(&["prefetch-policies", "--cache", "0blocks"]) else { unreachable!() };
        let e = a.options().grid(None).map_err(flag_error).unwrap_err().to_string();
        assert_eq!(e, "--cache: 0 blocks");
    }
}
