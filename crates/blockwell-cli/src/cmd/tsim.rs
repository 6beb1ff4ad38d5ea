//! `blockwell tsim`: one time-aware run (page cache → file layout → block cache or REDCAP → cache device →
//! disk model, on a virtual clock) of a generated workload, a file-level trace or a block trace; and `blockwell
//! workload gen`, which saves a generated workload as a file-level trace for replay.

use crate::cmd::common::{parse_bytes, ReadArgs, TraceArgs};
use crate::cmd::options::{parse_arg, CacheArgs, FixedSize, Format, One, OutputArgs};
use crate::cmd::sim_tier::DevArgs;
use anyhow::{bail, Context};
use blockwell_core::policy::PolicySpec;
use blockwell_core::prefetch::{PrefetcherKind, PrefetcherSpec};
use blockwell_disk::DiskSpec;
use blockwell_server::tier::DEFAULT_CLEAN_INTERVAL;
use blockwell_sim::layout::LayoutSpec;
use blockwell_sim::vtime::{
    self, CacheDevConfig, Config, IssueMode, LevelConfig, PrefetchChoice, RedcapSetup, Scheduler, Shadow,
};
use blockwell_sim::workloads::WorkloadSpec;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `blockwell tsim`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Give exactly one source: --workload (a generator, see `blockwell list`), --file-trace (a file-level CSV, see \
docs/file-traces.md) or --trace (a block trace; it skips the page cache). File-level sources go through the page \
cache (--page-cache, 0 for none), the file layout (--layout), then the block level: a cache (--cache, with \
--policy and --prefetch; off by default) or REDCAP (--redcap), then the device queue (--scheduler) and the disk \
model (--disk). --block-size is the page size too, and --preset applies to both levels. The report gives the hit \
ratios, the disk requests (synchronous and asynchronous, with mean sizes), blocks read, prefetch accuracy and \
coverage, REDCAP's active fraction, and the application time (--csv: one row, a column per field of --json). \
With --cache-dev-size, a cache device (an SSD cache, on its own model: --cache-dev-disk) sits between the \
block level and --disk, which becomes its origin, with `sim --cache-dev-size`'s options (--mode, --cleaner, \
--promote, ...): the report adds its hit ratios, origin reads and writes, cleaning traffic, throttling, dirty blocks \
and device time. Model: docs/time-simulation.md.")]
#[command(mut_arg("cache", |a| a.default_value("0").visible_alias("block-cache")))]
#[command(mut_arg("policy", |a| a.visible_alias("block-policy")))]
#[command(mut_arg("prefetch", |a| a.visible_alias("block-prefetch")))]
pub struct Args {
    /// A generated workload, e.g. `strided-4k(procs=8)`.
    #[arg(long, value_name = "SPEC", conflicts_with_all = ["file_trace", "trace"])]
    pub workload: Option<String>,

    /// A file-level trace (CSV: `time_ns,process,file,offset,size,op[,think_ns]`).
    #[arg(long, value_name = "FILE", conflicts_with = "trace")]
    pub file_trace: Option<PathBuf>,

    /// A block trace (`.gz`/`.zst` decompressed); one process, no page cache.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,

    /// The block trace's format (detected from the name or first line when unambiguous).
    #[arg(long, value_name = "FORMAT", requires = "trace")]
    pub format: Option<String>,

    /// Disk model (see `blockwell disk list`).
    #[arg(long, value_name = "SPEC", default_value = "wd1200bb")]
    pub disk: String,

    /// File layout: contiguous, block-groups (ext3; `block-groups(rsv_min=0)`: ext2), single-extent, reiserfs,
    /// scattered, with optional parameters (docs/workloads.md).
    #[arg(long, value_name = "LAYOUT", default_value = "contiguous")]
    pub layout: String,

    /// Seed of layouts with randomness.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub layout_seed: u64,

    /// Page-cache size (`64MiB`, `16384blocks`; `0`: no page cache).
    #[arg(long, value_name = "SIZE", default_value = "64MiB", value_parser = parse_arg::<FixedSize>)]
    pub page_cache: FixedSize,

    /// Page-cache replacement policy.
    #[arg(long, value_name = "POLICY", default_value = "lru", value_parser = parse_arg::<PolicySpec>)]
    pub page_policy: PolicySpec,

    /// Page-cache read-ahead (`linux24`, `ondemand`, `none`, ...).
    #[arg(long, value_name = "SPEC", default_value = "linux24", value_parser = parse_arg::<PrefetcherSpec>)]
    pub page_prefetch: PrefetcherSpec,

    // The block-level cache: --cache (0: none), --policy, --prefetch; --block-size and --preset of both levels.
    #[command(flatten)]
    pub cache: CacheArgs<One>,

    /// REDCAP at the block level: `64x128k` or `128x128k`.
    #[arg(long, value_name = "CONFIG", conflicts_with = "cache")]
    pub redcap: Option<String>,

    /// Device queue order: fifo, c-look, or cfq (Linux 2.6.14's CFQ: per-process time slices with
    /// anticipation; the REDCAP paper's scheduler).
    #[arg(long, value_name = "SCHEDULER", default_value = "c-look")]
    pub scheduler: String,

    /// Issue each request at its time stamp instead of after the previous one completed (closed loop).
    #[arg(long)]
    pub open_loop: bool,

    /// Closed loop: think time before every request, in µs, instead of the source's.
    #[arg(long, value_name = "US")]
    pub think_us: Option<u64>,

    /// Closed loop, file traces with time stamps: each request's think time is the gap between its time stamp
    /// and its process's previous one (as block traces always do).
    #[arg(long)]
    pub think_from_gaps: bool,

    /// Each process starts after a uniform random delay of up to this many milliseconds (0: all at once).
    #[arg(long, value_name = "MS", default_value_t = 0.0)]
    pub start_jitter_ms: f64,

    /// Seed of the start delays and of the think-time jitter.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub start_seed: u64,

    /// Closed loop: every think time gets a uniform random addition of up to this many microseconds, drawn per
    /// process from --start-seed (0: none).
    #[arg(long, value_name = "US", default_value_t = 0)]
    pub think_jitter_us: u64,

    /// Closed loop: processors the think times share, first come first served (0: one per process, every
    /// think time runs at once).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub cpus: u32,

    /// With --redcap: how its controller's shadow devices are fed: `closed-loop` (each process replays its
    /// own closed loop; at most `lag` requests per process wait, default 8, 0: no limit) or `arrival(depth=N)`
    /// (queued as requests arrive; at most N per process, 0: no limit). docs/experiments/redcap.md.
    #[arg(long, value_name = "SPEC", default_value = "closed-loop")]
    pub redcap_shadow: String,

    /// Largest device request the clusterer builds.
    #[arg(long, value_name = "BYTES", default_value = "64KiB")]
    pub max_request: String,

    // A cache device between the block level and --disk (seed 004), when --cache-dev-size is given.
    #[command(flatten)]
    pub dev: DevArgs,

    /// With --cache-dev-size: the cache device's model (see `blockwell disk list`).
    #[arg(long, value_name = "SPEC", default_value = "sata-ssd")]
    pub cache_dev_disk: String,

    /// With --cache-dev-size: how often the cleaner runs, in milliseconds of virtual time (the default is
    /// `serve --cache-dev`'s).
    #[arg(long, value_name = "MS", default_value_t = DEFAULT_CLEAN_INTERVAL.as_millis() as u64)]
    pub clean_interval_ms: u64,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Parses a scheduler name.
pub fn parse_scheduler(s: &str) -> anyhow::Result<Scheduler> {
    Scheduler::parse(s).map_err(anyhow::Error::msg)
}

/// A cache level of `bytes` (none for 0).
fn level(
    bytes: u64,
    policy: &PolicySpec,
    prefetch: &PrefetcherSpec,
    block_size: u64,
) -> anyhow::Result<Option<LevelConfig>> {
    if bytes == 0 {
        return Ok(None);
    }
    if bytes < block_size {
        bail!("{bytes} B is smaller than one {block_size} B block");
    }
    let prefetch = match prefetch.kind {
        PrefetcherKind::NoPrefetch => PrefetchChoice::None,
        _ => PrefetchChoice::Spec(prefetch.clone()),
    };
    Ok(Some(LevelConfig::new(policy.clone(), bytes).with_prefetch(prefetch)))
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let block_size = a.cache.block_size.get();
    let disk = DiskSpec::parse(&a.disk).context("--disk")?;
    let layout: LayoutSpec = a.layout.parse().context("--layout")?;
    layout.params.validate(block_size).context("--layout")?;
    let scheduler = parse_scheduler(&a.scheduler).context("--scheduler")?;
    let page_cache =
        level(a.page_cache.bytes(block_size), &a.page_policy, &a.page_prefetch, block_size).context("--page-cache")?;
    let c = &a.cache;
    let block_cache = level(c.cache.bytes(block_size), &c.policy, &c.prefetch, block_size).context("--cache")?;
    if block_cache.is_none() && c.associativity.is_some() {
        bail!("--associativity needs a block cache (--cache is 0)");
    }
    let block_cache = block_cache.map(|l| l.with_associativity(c.ways()));
    let shadow: Shadow = a.redcap_shadow.parse().context("--redcap-shadow")?;
    let redcap = a.redcap.as_deref().map(|r| RedcapSetup::preset(r, block_size)).transpose().context("--redcap")?;
    let redcap = redcap.map(|s| RedcapSetup { shadow, ..s });
    let max_request_bytes = parse_bytes(&a.max_request).context("--max-request")?;
    if max_request_bytes < block_size {
        bail!("--max-request: {max_request_bytes} B is less than one block ({block_size} B)");
    }
    let cache_dev = match a.dev.spec(block_size)? {
        Some(_) if a.redcap.is_some() => {
            bail!("--redcap with --cache-dev-size: REDCAP over a cache device is not modelled")
        }
        Some(spec) => {
            let model = DiskSpec::parse(&a.cache_dev_disk).and_then(|d| d.build()).context("--cache-dev-disk")?;
            if a.clean_interval_ms == 0 {
                bail!("--clean-interval-ms: 0 is no interval");
            }
            Some(CacheDevConfig {
                clean_interval_ns: a.clean_interval_ms.saturating_mul(1_000_000),
                dirty_every: a.dev.dirty_every,
                ..CacheDevConfig::new(spec, model)
            })
        }
        None => None,
    };
    let cfg = Config {
        block_size,
        preset: a.cache.preset,
        page_cache,
        block_cache,
        redcap,
        cache_dev,
        layout,
        layout_seed: a.layout_seed,
        scheduler,
        issue: if a.open_loop { IssueMode::OpenLoop } else { IssueMode::ClosedLoop },
        think_ns: a.think_us.map(|us| us.saturating_mul(1000)),
        think_from_gaps: a.think_from_gaps,
        max_request_bytes,
        start_jitter_ns: jitter_ns(a.start_jitter_ms)?,
        start_seed: a.start_seed,
        think_jitter_ns: a.think_jitter_us.saturating_mul(1000),
        cpus: a.cpus,
        ..Config::default()
    };
    let model = disk.build().context("--disk")?;
    let report = if let Some(spec) = &a.workload {
        let w = WorkloadSpec::parse(spec).and_then(|s| s.build()).context("--workload")?;
        vtime::run_workload(&w, &cfg, model.as_ref())?
    } else if let Some(path) = &a.file_trace {
        let t = blockwell_sim::filetrace::read_path(path).context("--file-trace")?;
        vtime::run_workload(&t.workload, &cfg, model.as_ref())?
    } else if let Some(path) = &a.trace {
        let args = TraceArgs { trace: path.clone(), read: ReadArgs::with_format(a.format.clone()) };
        let mut reader = args.open().context("--trace")?;
        vtime::run_block_trace(reader.as_mut(), &cfg, model.as_ref())?
    } else {
        bail!("give a source: --workload SPEC, --file-trace FILE or --trace FILE");
    };
    // The JSON and the CSV row carry the settings that produced them (the levels' own are in their reports).
    let mut v = serde_json::to_value(&report)?;
    v["settings"] = settings(&a, &cfg);
    let text = match a.output.format() {
        Format::Json => OutputArgs::json(&v)?,
        Format::Csv => csv_row(&v),
        Format::Table => report.table(),
    };
    a.output.write(&text)?;
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------------------------------------------
// workload gen

/// `blockwell workload ...`
#[derive(clap::Subcommand, Debug)]
pub enum WorkloadCommand {
    /// Generate a workload and write it as a file-level trace (replay it with `blockwell tsim --file-trace`).
    Gen(GenArgs),
}

/// Options of `blockwell workload gen`.
#[derive(clap::Args, Debug)]
pub struct GenArgs {
    /// The generator with parameters, e.g. `strided-4k(procs=8,file_mb=16)` (see `blockwell list`).
    #[arg(value_name = "SPEC")]
    pub spec: String,

    /// Where to write the CSV.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,
}

pub fn run_workload(c: WorkloadCommand) -> anyhow::Result<ExitCode> {
    match c {
        WorkloadCommand::Gen(a) => {
            let w = WorkloadSpec::parse(&a.spec).and_then(|s| s.build()).context("workload spec")?;
            blockwell_sim::filetrace::write_path(&a.output, &w).context("--output")?;
            eprintln!(
                "blockwell: wrote {} requests of {} processes over {} files to {}",
                w.requests(),
                w.processes.len(),
                w.files.len(),
                a.output.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A JSON object as CSV: a header of its leaves' dotted paths (`device.sync_reads.requests`) and one row of their
/// values (an absent level, `null`, is one empty column).
fn csv_row(v: &serde_json::Value) -> String {
    fn leaves(prefix: &str, v: &serde_json::Value, out: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    leaves(&p, x, out);
                }
            }
            serde_json::Value::Null => out.push((prefix.to_string(), String::new())),
            serde_json::Value::String(s) => out.push((prefix.to_string(), s.clone())),
            other => out.push((prefix.to_string(), other.to_string())),
        }
    }
    let mut cols = Vec::new();
    leaves("", v, &mut cols);
    let q = super::sim::csv_field;
    let header: Vec<String> = cols.iter().map(|(k, _)| q(k)).collect();
    let row: Vec<String> = cols.iter().map(|(_, x)| q(x)).collect();
    format!("{}\n{}\n", header.join(","), row.join(","))
}

/// The run's settings, for its JSON and CSV row: the source's and the models' options as given, and the
/// levels' configuration (also in the levels' reports, which are absent when a level is off).
fn settings(a: &Args, cfg: &Config) -> serde_json::Value {
    let dev = a.dev.cache_dev_size.is_some();
    serde_json::json!({
        "source": if a.workload.is_some() { "workload" } else if a.file_trace.is_some() { "file-trace" } else { "trace" },
        "block_size": cfg.block_size,
        "preset": cfg.preset.name(),
        "page_cache_bytes": cfg.page_cache.as_ref().map_or(0, |l| l.capacity_bytes),
        "page_policy": a.page_policy.label(),
        "page_prefetch": a.page_prefetch.label(),
        "block_cache_bytes": cfg.block_cache.as_ref().map_or(0, |l| l.capacity_bytes),
        "block_policy": a.cache.policy.label(),
        "block_prefetch": a.cache.prefetch.label(),
        "associativity": a.cache.ways().map(|w| w.get()),
        "redcap": a.redcap,
        "redcap_shadow": a.redcap.as_ref().map(|_| a.redcap_shadow.clone()),
        "disk": a.disk,
        "layout": a.layout,
        "layout_seed": a.layout_seed,
        "scheduler": a.scheduler,
        "open_loop": a.open_loop,
        "think_us": a.think_us,
        "think_from_gaps": a.think_from_gaps,
        "start_jitter_ms": a.start_jitter_ms,
        "start_seed": a.start_seed,
        "think_jitter_us": a.think_jitter_us,
        "cpus": a.cpus,
        "max_request_bytes": cfg.max_request_bytes,
        "cache_dev_disk": dev.then(|| a.cache_dev_disk.clone()),
        "clean_interval_ms": dev.then_some(a.clean_interval_ms),
    })
}

/// `--start-jitter-ms` in ns.
fn jitter_ns(ms: f64) -> anyhow::Result<u64> {
    if !(ms.is_finite() && (0.0..=3.6e6).contains(&ms)) {
        bail!("--start-jitter-ms: {ms} is not a number of milliseconds from 0 to 3600000");
    }
    Ok((ms * 1e6).round() as u64)
}
