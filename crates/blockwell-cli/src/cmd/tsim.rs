//! `blockwell tsim`: one time-aware run (page cache → file layout → block cache or REDCAP → disk model, on a
//! virtual clock) of a generated workload, a file-level trace or a block trace; and `blockwell workload gen`,
//! which saves a generated workload as a file-level trace for replay.

use crate::cmd::common::{parse_bytes, TraceArgs};
use anyhow::{bail, Context};
use blockwell_core::policy::{PolicySpec, Preset};
use blockwell_disk::DiskSpec;
use blockwell_sim::layout::LayoutSpec;
use blockwell_sim::vtime::{self, Config, IssueMode, LevelConfig, PrefetchChoice, RedcapSetup, Scheduler, Shadow};
use blockwell_sim::workloads::WorkloadSpec;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Options of `blockwell tsim`.
#[derive(clap::Args, Debug)]
#[command(after_help = "\
Give exactly one source: --workload (a generator, see `blockwell list`), --file-trace (a file-level CSV, see \
docs/file-traces.md) or --trace (a block trace; it skips the page cache). File-level sources go through the page \
cache (--page-cache, 0 for none), the file layout (--layout), then the block level: a cache (--block-cache) or \
REDCAP (--redcap), then the device queue (--scheduler) and the disk model (--disk). The report gives the hit \
ratios, the disk requests (synchronous and asynchronous, with mean sizes), blocks read, prefetch accuracy and \
coverage, REDCAP's active fraction, and the application time. Model: docs/time-simulation.md.")]
pub struct Args {
    /// A generated workload, e.g. `strided-4k(procs=8)`.
    #[arg(long, value_name = "SPEC", conflicts_with_all = ["file_trace", "trace"])]
    pub workload: Option<String>,

    /// A file-level trace (CSV: time_ns,process,file,offset,size,op[,think_ns]).
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

    /// File layout: contiguous, block-groups (ext3; `block-groups(rsv_min=0)`: ext2), single-extent, scattered,
    /// with optional parameters (docs/workloads.md).
    #[arg(long, value_name = "LAYOUT", default_value = "contiguous")]
    pub layout: String,

    /// Seed of layouts with randomness.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub layout_seed: u64,

    /// Page-cache size (`64MiB`, `16384blocks`; `0`: no page cache).
    #[arg(long, value_name = "SIZE", default_value = "64MiB")]
    pub page_cache: String,

    /// Page-cache replacement policy.
    #[arg(long, value_name = "POLICY", default_value = "lru")]
    pub page_policy: String,

    /// Page-cache read-ahead (`linux24`, `ondemand`, `none`, ...).
    #[arg(long, value_name = "PREFETCHER", default_value = "linux24")]
    pub page_prefetch: String,

    /// Block-level cache size (`16MiB`; `0`: none).
    #[arg(long, value_name = "SIZE", default_value = "0", conflicts_with = "redcap")]
    pub block_cache: String,

    /// Block-level cache policy.
    #[arg(long, value_name = "POLICY", default_value = "lru")]
    pub block_policy: String,

    /// Block-level prefetcher.
    #[arg(long, value_name = "PREFETCHER", default_value = "none")]
    pub block_prefetch: String,

    /// REDCAP at the block level: `64x128k` or `128x128k`.
    #[arg(long, value_name = "CONFIG")]
    pub redcap: Option<String>,

    /// Policy parameter preset: default, libcachesim, seed001.
    #[arg(long, value_name = "PRESET", default_value = "default")]
    pub preset: String,

    /// Device queue order: fifo, c-look, or cfq (Linux 2.6.14's CFQ: per-process time slices with
    /// anticipation; seed 000's scheduler).
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

    /// With --redcap: how its controller's shadow devices are fed: `closed-loop` (each process replays its
    /// own closed loop; at most `lag` requests per process wait, default 8, 0: no limit) or `arrival(depth=N)`
    /// (queued as requests arrive; at most N per process, 0: no limit). docs/experiments/redcap.md.
    #[arg(long, value_name = "SPEC", default_value = "closed-loop")]
    pub redcap_shadow: String,

    /// Page and block size.
    #[arg(long, value_name = "BYTES", default_value = "4096")]
    pub block_size: String,

    /// Largest device request the clusterer builds.
    #[arg(long, value_name = "BYTES", default_value = "64KiB")]
    pub max_request: String,

    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Parses a scheduler name.
pub fn parse_scheduler(s: &str) -> anyhow::Result<Scheduler> {
    match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
        "fifo" => Ok(Scheduler::Fifo),
        "c-look" | "clook" => Ok(Scheduler::CLook),
        "cfq" => Ok(Scheduler::Cfq),
        _ => bail!("unknown scheduler '{s}' (known: fifo, c-look, cfq)"),
    }
}

/// Parses a cache size in bytes or blocks (`64MiB`, `16384blocks`); 0 means none.
fn parse_cache_bytes(s: &str, block_size: u64) -> anyhow::Result<u64> {
    let t = s.trim();
    for suf in ["blocks", "block", "blk"] {
        if let Some(n) = t.strip_suffix(suf) {
            let v: u64 = n.trim().parse().map_err(|_| anyhow::anyhow!("'{s}': expected a whole number of blocks"))?;
            return Ok(v.saturating_mul(block_size));
        }
    }
    let b = parse_bytes(t)?;
    if b != 0 && b < block_size {
        bail!("'{s}' is smaller than one {block_size} B block");
    }
    Ok(b)
}

fn level(
    size: &str,
    policy: &str,
    prefetch: &str,
    block_size: u64,
    names: [&str; 3],
) -> anyhow::Result<Option<LevelConfig>> {
    let bytes = parse_cache_bytes(size, block_size).with_context(|| names[0].to_string())?;
    if bytes == 0 {
        return Ok(None);
    }
    let policy = PolicySpec::parse(policy).with_context(|| names[1].to_string())?;
    let prefetch = PrefetchChoice::parse(prefetch).with_context(|| names[2].to_string())?;
    Ok(Some(LevelConfig::new(policy, bytes).with_prefetch(prefetch)))
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let block_size = parse_bytes(&a.block_size).context("--block-size")?;
    if !(512..=(1 << 20)).contains(&block_size) || !block_size.is_power_of_two() {
        bail!("--block-size: {block_size} is not a power of two from 512 B to 1 MiB");
    }
    let disk = DiskSpec::parse(&a.disk).context("--disk")?;
    let layout: LayoutSpec = a.layout.parse().context("--layout")?;
    layout.params.validate(block_size).context("--layout")?;
    let scheduler = parse_scheduler(&a.scheduler).context("--scheduler")?;
    let preset = Preset::from_name(&a.preset).ok_or_else(|| {
        anyhow::anyhow!(
            "--preset: unknown preset '{}' (known: {})",
            a.preset,
            Preset::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", ")
        )
    })?;
    let page_cache = level(
        &a.page_cache,
        &a.page_policy,
        &a.page_prefetch,
        block_size,
        ["--page-cache", "--page-policy", "--page-prefetch"],
    )?;
    let block_cache = level(
        &a.block_cache,
        &a.block_policy,
        &a.block_prefetch,
        block_size,
        ["--block-cache", "--block-policy", "--block-prefetch"],
    )?;
    let shadow: Shadow = a.redcap_shadow.parse().context("--redcap-shadow")?;
    let redcap = a.redcap.as_deref().map(|r| RedcapSetup::preset(r, block_size)).transpose().context("--redcap")?;
    let redcap = redcap.map(|s| RedcapSetup { shadow, ..s });
    let max_request_bytes = parse_bytes(&a.max_request).context("--max-request")?;
    if max_request_bytes < block_size {
        bail!("--max-request: {max_request_bytes} B is less than one block ({block_size} B)");
    }
    let cfg = Config {
        block_size,
        preset,
        page_cache,
        block_cache,
        redcap,
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
        let args = TraceArgs {
            trace: path.clone(),
            format: a.format.clone(),
            skip_bad_lines: 0,
            object_size: "4096".into(),
            csv_columns: None,
        };
        let mut reader = args.open().context("--trace")?;
        vtime::run_block_trace(reader.as_mut(), &cfg, model.as_ref())?
    } else {
        bail!("give a source: --workload SPEC, --file-trace FILE or --trace FILE");
    };
    let mut out = std::io::stdout().lock();
    if a.json {
        let mut s = serde_json::to_string_pretty(&report)?;
        s.push('\n');
        out.write_all(s.as_bytes())?;
    } else {
        out.write_all(report.table().as_bytes())?;
    }
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

/// `--start-jitter-ms` in ns.
fn jitter_ns(ms: f64) -> anyhow::Result<u64> {
    if !(ms.is_finite() && (0.0..=3.6e6).contains(&ms)) {
        bail!("--start-jitter-ms: {ms} is not a number of milliseconds from 0 to 3600000");
    }
    Ok((ms * 1e6).round() as u64)
}
