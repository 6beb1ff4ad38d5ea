//! `blockwell disk`: the device timing models — list them, time one request, and validate a model against a
//! DiskSim validation trace (measured service times of a real disk), optionally plotting both CDFs.

use crate::cmd::options::{parse_arg, Bytes};
use crate::cmd::plot::{
    chart, draw_legend, drawing_error, line, save, split_for_legend, Figure, LegendEntry, PlotKind,
};
use anyhow::{bail, Context};
use blockwell_disk::validate::{self, Validation};
use blockwell_disk::{DiskOp, DiskRequest, DiskSpec};
use plotters::coord::Shift;
use plotters::prelude::{DrawingArea, DrawingBackend, RGBColor};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `blockwell disk ...`
#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// List the disk models and presets, with the parameters each kind of model takes.
    List,
    /// Replay a DiskSim validation trace through a model and compare with the measured service times.
    #[command(after_help = "\
Trace lines are `R|W action blkno bcount service_us next_us` (DiskSim's validation format; \
../shared/reference/disk/{barracuda,cheetah9LP}.trace). Requests are served one at a time; each arrives next_us \
of the previous line after the simulated completion of the previous one, as in DiskSim's validation mode. \
Reported: mean measured and simulated service time, relative error, and the Ruemmler-Wilkes demerit (RMS \
horizontal distance between the two CDFs), in µs and as % of the measured mean.")]
    Validate(ValidateArgs),
    /// Service time of one request on a device in its power-on state (head at cylinder 0, empty buffer).
    Time(TimeArgs),
    /// Mean service time of a synthetic stream (random or sequential), one request at a time.
    Bench(BenchArgs),
}

/// Options of `blockwell disk bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Device spec (see `blockwell disk list`).
    #[arg(long, value_name = "SPEC", default_value = "barracuda")]
    pub model: String,

    /// `random` (uniform over the device, aligned to the request size, a fixed pseudo-random sequence) or
    /// `sequential` (from sector 0).
    #[arg(long, value_name = "PATTERN", default_value = "random")]
    pub pattern: String,

    /// `read` or `write`.
    #[arg(long, value_name = "OP", default_value = "read")]
    pub op: String,

    /// Sectors per request.
    #[arg(long, value_name = "K", default_value_t = 8)]
    pub sectors: u64,

    /// Number of requests.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub count: u64,

    /// Idle time between a completion and the next request, in µs (with --queue 1 only).
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub gap_us: u64,

    /// Requests in flight: a new one arrives whenever one completes (fio's iodepth). The device serves them in
    /// the order the live emulator does (`blockwell serve --delay`): a disk one at a time, picking among the
    /// waiting ones with command queueing (ncq); an SSD on its channels. 1: one request at a time.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub queue: usize,

    /// Requests fall in the first SPAN bytes of the device (random ones uniformly, sequential ones wrap
    /// around), like fio's --size on the device [default: the whole device].
    #[arg(long, value_name = "SIZE", value_parser = parse_arg::<Bytes>)]
    pub span: Option<Bytes>,
}

/// Options of `blockwell disk validate`.
#[derive(clap::Args, Debug)]
pub struct ValidateArgs {
    /// Device spec: a preset (`blockwell disk list`) with optional overrides, e.g. `barracuda(write_cache=0)`.
    #[arg(long, value_name = "SPEC", default_value = "barracuda")]
    pub model: String,

    /// The validation trace.
    #[arg(long, value_name = "FILE")]
    pub trace: PathBuf,

    /// Plot both service-time CDFs to FILE.svg or FILE.png.
    #[arg(long, value_name = "FILE")]
    pub plot: Option<PathBuf>,

    /// Print the result as JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Options of `blockwell disk time`.
#[derive(clap::Args, Debug)]
pub struct TimeArgs {
    /// Device spec (see `blockwell disk list`).
    #[arg(long, value_name = "SPEC", default_value = "barracuda")]
    pub model: String,

    /// `read` or `write`.
    #[arg(long, value_name = "OP", default_value = "read")]
    pub op: String,

    /// First 512 B sector.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub sector: u64,

    /// Number of 512 B sectors.
    #[arg(long, value_name = "K", default_value_t = 8)]
    pub sectors: u64,

    /// Arrival time in ns (the platter's angle is a function of time).
    #[arg(long, value_name = "NS", default_value_t = 0)]
    pub at: u64,
}

pub fn run(c: Command) -> anyhow::Result<ExitCode> {
    match c {
        Command::List => list(),
        Command::Validate(a) => run_validate(a),
        Command::Time(a) => time(a),
        Command::Bench(a) => bench(a),
    }
}

fn list() -> anyhow::Result<ExitCode> {
    println!("disk models (use as --model NAME or NAME(key=value,...)):");
    for (name, desc) in blockwell_disk::spec::list() {
        println!("  {name:<11} {desc}");
    }
    println!("parameters:");
    println!("  hard disks  {}", blockwell_disk::spec::HDD_KEYS.join(", "));
    println!("  ssd         {}", blockwell_disk::spec::SSD_KEYS.join(", "));
    println!("  memory      {}", blockwell_disk::spec::MEMORY_KEYS.join(", "));
    Ok(ExitCode::SUCCESS)
}

fn parse_op(s: &str) -> anyhow::Result<DiskOp> {
    match s.to_ascii_lowercase().as_str() {
        "read" | "r" => Ok(DiskOp::Read),
        "write" | "w" => Ok(DiskOp::Write),
        other => bail!("--op: expected read or write, found '{other}'"),
    }
}

fn bench(a: BenchArgs) -> anyhow::Result<ExitCode> {
    let op = parse_op(&a.op)?;
    let random = match a.pattern.to_ascii_lowercase().as_str() {
        "random" | "rand" => true,
        "sequential" | "seq" => false,
        other => bail!("--pattern: expected random or sequential, found '{other}'"),
    };
    if a.sectors == 0 || a.count == 0 {
        bail!("--sectors and --count must be >= 1");
    }
    if a.queue == 0 {
        bail!("--queue must be >= 1");
    }
    if a.queue > 1 && a.gap_us > 0 {
        bail!("--gap-us needs --queue 1 (with more in flight, a request arrives when one completes)");
    }
    let spec = DiskSpec::parse(&a.model)?;
    let mut m = spec.build()?;
    let cap = m.capacity_sectors();
    let limit = a.span.map_or(cap, |b| (b.0 / blockwell_disk::SECTOR).clamp(1, cap));
    let span = limit.saturating_sub(a.sectors).max(1);
    let mut x: u64 = 0x5eed;
    let mut next = |i: u64| {
        let sector = if random {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 11) % (span / a.sectors).max(1) * a.sectors
        } else {
            (i * a.sectors) % limit
        };
        DiskRequest { op, sector, sectors: a.sectors }
    };
    let what = format!(
        "{} {} of {} sectors x {}",
        if random { "random" } else { "sequential" },
        if op == DiskOp::Read { "reads" } else { "writes" },
        a.sectors,
        a.count
    );
    let bytes = (a.sectors * blockwell_disk::SECTOR) as f64;
    println!("{}", m.describe());
    if a.queue > 1 {
        let r = blockwell_disk::closed_loop(m, a.queue, a.count, next);
        let per_req = r.elapsed_ns as f64 / r.requests as f64;
        println!(
            "{what}, {} in flight: {:.0} requests/s, {:.2} MB/s, mean latency {:.3} ms",
            a.queue,
            1e9 / per_req,
            bytes / per_req * 1e3,
            r.mean_latency_ns / 1e6
        );
        return Ok(ExitCode::SUCCESS);
    }
    let (mut t, mut total) = (0u64, 0u64);
    for i in 0..a.count {
        let s = m.service(t, &next(i));
        total += s;
        t += s + a.gap_us * 1000;
    }
    let mean_ns = total as f64 / a.count as f64;
    println!(
        "{what}: mean {:.3} ms, {:.0} requests/s, {:.2} MB/s while busy",
        mean_ns / 1e6,
        1e9 / mean_ns,
        bytes / mean_ns * 1e3
    );
    Ok(ExitCode::SUCCESS)
}

fn time(a: TimeArgs) -> anyhow::Result<ExitCode> {
    let op = parse_op(&a.op)?;
    if a.sectors == 0 {
        bail!("--sectors must be >= 1");
    }
    let spec = DiskSpec::parse(&a.model)?;
    let mut m = spec.build()?;
    let ns = m.service(a.at, &DiskRequest { op, sector: a.sector, sectors: a.sectors });
    println!("{}", m.describe());
    println!(
        "{} of {} sectors at sector {} (arriving at {} ns): {} ns ({:.3} ms)",
        if op == DiskOp::Read { "read" } else { "write" },
        a.sectors,
        a.sector,
        a.at,
        ns,
        ns as f64 / 1e6
    );
    Ok(ExitCode::SUCCESS)
}

fn run_validate(a: ValidateArgs) -> anyhow::Result<ExitCode> {
    let kind = a.plot.as_deref().map(PlotKind::of).transpose()?;
    let spec = DiskSpec::parse(&a.model)?;
    let mut m = spec.build()?;
    let records = validate::read_trace(&a.trace)?;
    let v = validate::validate(m.as_mut(), &records);
    if a.json {
        let mut j = serde_json::to_value(&v)?;
        if let Some(o) = j.as_object_mut() {
            o.insert("spec".into(), spec.label().into());
            o.insert("trace".into(), a.trace.display().to_string().into());
        }
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        println!("model    {}", v.model);
        println!("trace    {} ({} requests)", a.trace.display(), v.requests);
        println!("                 measured   simulated");
        println!("mean (us)     {:>11.1} {:>11.1}", v.mean_measured_us, v.mean_simulated_us);
        println!(
            "  reads       {:>11.1} {:>11.1}  ({} requests)",
            v.reads.mean_measured_us, v.reads.mean_simulated_us, v.reads.requests
        );
        println!(
            "  writes      {:>11.1} {:>11.1}  ({} requests)",
            v.writes.mean_measured_us, v.writes.mean_simulated_us, v.writes.requests
        );
        println!("relative error of the mean  {:+.2} %", 100.0 * v.relative_error);
        println!("demerit (RMS CDF distance)  {:.1} us = {:.2} % of the measured mean", v.demerit_us, v.demerit_pct);
    }
    if let (Some(path), Some(kind)) = (a.plot.as_deref(), kind) {
        let title = format!("{}: service-time CDFs ({})", spec.label(), file_name(&a.trace));
        save(path, kind, (1000, 640), &Cdfs { title: &title, v: &v })
            .with_context(|| format!("--plot {}", path.display()))?;
        if !a.json {
            println!("plot     {}", path.display());
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn file_name(p: &Path) -> String {
    p.file_name().map(|f| f.to_string_lossy().into_owned()).unwrap_or_else(|| p.display().to_string())
}

/// Sorted values as CDF points, thinned to at most ~2000 steps.
fn cdf(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let step = (n / 2000).max(1);
    let mut out: Vec<(f64, f64)> = (0..n).step_by(step).map(|i| (v[i] / 1000.0, (i + 1) as f64 / n as f64)).collect();
    if let Some(&last) = v.last() {
        out.push((last / 1000.0, 1.0));
    }
    out
}

/// Both service-time CDFs, in ms.
struct Cdfs<'a> {
    title: &'a str,
    v: &'a Validation,
}

impl Figure for Cdfs<'_> {
    fn draw<DB: DrawingBackend>(&self, root: DrawingArea<DB, Shift>) -> anyhow::Result<()> {
        let v = self.v;
        let measured = cdf(&v.measured_us);
        let simulated = cdf(&v.simulated_us);
        // x axis: up to the 99.5th percentile of either, rounded up to 5 ms.
        let p995 = |s: &[f64]| {
            let mut s = s.to_vec();
            s.sort_by(f64::total_cmp);
            s.get(((s.len() as f64) * 0.995) as usize).copied().unwrap_or(0.0) / 1000.0
        };
        let x_max = ((p995(&v.measured_us).max(p995(&v.simulated_us)) / 5.0).ceil() * 5.0).max(5.0);
        let entries = [
            LegendEntry {
                label: format!("measured (mean {:.2} ms)", v.mean_measured_us / 1000.0),
                color: RGBColor(31, 119, 180),
                marked: false,
            },
            LegendEntry {
                label: format!(
                    "simulated (mean {:.2} ms, {:+.1} %; demerit {:.2} ms = {:.1} %)",
                    v.mean_simulated_us / 1000.0,
                    100.0 * v.relative_error,
                    v.demerit_us / 1000.0,
                    v.demerit_pct
                ),
                color: RGBColor(255, 127, 14),
                marked: false,
            },
        ];
        let (area, legend) = split_for_legend(&root, &entries)?;
        let mut chart = chart(&area, self.title, 0f64..x_max, 0f64..1f64)?;
        chart
            .configure_mesh()
            .x_desc("service time (ms)")
            .y_desc("fraction of requests")
            .y_label_formatter(&|y| format!("{y:.1}"))
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 17))
            .draw()
            .map_err(drawing_error)?;
        line(&mut chart, measured, entries[0].color)?;
        line(&mut chart, simulated, entries[1].color)?;
        draw_legend(&legend, &entries)?;
        root.present().map_err(drawing_error)
    }
}
