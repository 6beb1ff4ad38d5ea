//! `blockwell sim`: replay a trace through every (policy × cache size) combination in one pass; with
//! `--cache-dev-size`, through each RAM cache over a simulated cache device ([`super::sim_tier`]).

use super::common::{SizeSpec, TraceArgs};
use super::options::{AdmitArgs, CacheArgs, Format, Many, OutputArgs};
use anyhow::bail;
use blockwell_core::policy::{PolicyError, PolicySpec};
use blockwell_sim::analysis::human_bytes;
use blockwell_sim::replay::{replay, CacheSize, CacheSpec, ReplayConfig, ReplayError, ReplayHooks, ReplayReport};
use blockwell_sim::tier::{replay_tier, TierReplayConfig};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub trace: TraceArgs,

    // Policies and cache sizes (lists: every combination runs), block size, preset, prefetcher.
    #[command(flatten)]
    pub cache: CacheArgs<Many>,

    #[command(flatten)]
    pub admit: AdmitArgs,

    // The cache device under the RAM cache (seed 004), when --cache-dev-size is given.
    #[command(flatten)]
    pub dev: super::sim_tier::DevArgs,

    /// With --cache-dev-size, the cleaner's clock: request i at i × this many microseconds, instead of the
    /// trace's time stamps (for traces without them).
    #[arg(long, value_name = "US")]
    pub request_interval_us: Option<u64>,

    /// Simulate only these volumes (comma separated, by the names the trace gives them).
    #[arg(long, value_name = "NAMES")]
    pub volumes: Option<String>,

    /// Ignore write requests.
    #[arg(long)]
    pub reads_only: bool,

    /// Requests replayed to warm the caches before counting starts.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub warmup: u64,

    /// Worker threads (default: one per core).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,

    #[command(flatten)]
    pub output: OutputArgs,

    /// Check every policy's invariants after every request (slow; for debugging).
    #[arg(long, hide = true)]
    pub validate: bool,
}

/// The caches of `--policy` × `--cache`.
pub fn caches(policies: &[PolicySpec], sizes: &[SizeSpec], block_size: u64) -> anyhow::Result<Vec<CacheSpec>> {
    let mut out = Vec::new();
    for p in policies {
        for s in sizes {
            let size = match *s {
                SizeSpec::Percent(p) => CacheSize::PercentOfFootprint(p),
                SizeSpec::Blocks(b) => CacheSize::Blocks(b),
                SizeSpec::Bytes(b) => {
                    if b < block_size {
                        bail!("--cache: {b} B is smaller than one {block_size} B block");
                    }
                    CacheSize::Blocks(b / block_size)
                }
            };
            out.push(CacheSpec { policy: p.clone(), size });
        }
    }
    Ok(out)
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let bs = a.cache.block_size.get();
    // (With a cache device, `--cache` sizes the RAM level above it, and 0 means none.)
    let caches = if a.dev.cache_dev_size.is_some() { Vec::new() } else { caches(&a.cache.policy, &a.cache.cache, bs)? };
    let cfg = ReplayConfig {
        block_size: bs,
        preset: a.cache.preset,
        reads_only: a.reads_only,
        volumes: a.volumes.as_ref().map(|v| v.split(',').map(|s| s.trim().to_string()).collect()),
        warmup: a.warmup,
        threads: a.threads,
        prefetch: a.cache.prefetch.clone(),
        admission: a.admit.admission,
        sequential_cutoff: a.admit.sequential_cutoff.0,
        associativity: a.cache.ways(),
    };
    let dev = a.dev.spec(bs)?;
    // Check the trace opens (and its format is known) before anything else.
    a.trace.open()?;
    if let Some(p) = &a.output.output {
        super::common::check_writable("--output", p)?;
    }
    let bar = super::common::progress_bar(&a.trace.trace, "reading");
    // A pre-pass (footprint for % sizes, next-use times for OPT) reads the trace once more: say which pass.
    let tick = |bytes: u64| {
        if let Some(b) = &bar {
            if bytes < b.position() {
                b.set_message("replay");
            }
            b.set_position(bytes);
        }
    };
    let open = || {
        a.trace.open().map_err(|e| match e.downcast::<blockwell_trace::TraceError>() {
            Ok(t) => t,
            Err(e) => blockwell_trace::TraceError::Invalid { file: a.trace.trace.clone(), message: e.to_string() },
        })
    };
    if let Some(dev) = dev {
        let rams = super::sim_tier::rams(&a.cache.policy, &a.cache.cache, bs)?;
        let tcfg = TierReplayConfig {
            replay: cfg,
            dev,
            request_interval_ns: a.request_interval_us.map(|us| us.saturating_mul(1000)),
            dirty_every: a.dev.dirty_every,
        };
        let report = replay_tier(&open, &rams, &tcfg);
        if let Some(b) = bar {
            b.finish_and_clear();
        }
        let report = report.map_err(|e| trace_error(e, &a.trace.trace))?;
        skipped(report.skipped_lines, &report.skipped_examples);
        let text = super::sim_tier::render(&report, &a.trace.trace.display().to_string(), &a.output)?;
        a.output.write(&text)?;
        return Ok(ExitCode::SUCCESS);
    }
    let report = replay(&open, &caches, &cfg, ReplayHooks { progress: Some(&tick), validate: a.validate });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let report = report.map_err(|e| trace_error(e, &a.trace.trace))?;
    skipped(report.skipped_lines, &report.skipped_examples);
    let text = match a.output.format() {
        Format::Json => {
            let mut v = serde_json::to_value(&report)?;
            v["trace"] = serde_json::Value::String(a.trace.trace.display().to_string());
            v["prefetch"] = serde_json::Value::String(a.cache.prefetch.label().to_string());
            v["admission"] = serde_json::Value::String(a.admit.admission.to_string());
            v["sequential_cutoff"] = a.admit.sequential_cutoff.0.into();
            if let Some(results) = v["results"].as_array_mut() {
                for (j, c) in results.iter_mut().zip(&report.results) {
                    j["ratios"] = ratios(&c.stats);
                }
            }
            OutputArgs::json(&v)?
        }
        Format::Csv => csv(&report),
        Format::Table => table(&report, &a.trace.trace.display().to_string(), a.cache.prefetching()),
    };
    a.output.write(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Errors about the trace as a whole name it (read errors already do); an associativity error names the option.
fn trace_error(e: ReplayError, trace: &std::path::Path) -> anyhow::Error {
    match e {
        ReplayError::Empty(_) | ReplayError::NoSuchVolume { .. } => anyhow::anyhow!("{}: {e}", trace.display()),
        ReplayError::Policy(PolicyError::AssociativityQuirks { .. }) => anyhow::anyhow!("--associativity: {e}"),
        e => e.into(),
    }
}

fn skipped(count: u64, examples: &[String]) {
    if count > 0 {
        eprintln!("blockwell: skipped {count} malformed line(s); first:");
        for e in examples {
            eprintln!("  {e}");
        }
    }
}

/// Miss ratios (block and request level; read, write, total) and the prefetcher's accuracy and coverage,
/// for `--json`.
fn ratios(st: &blockwell_core::Stats) -> serde_json::Value {
    let t = st.total();
    serde_json::json!({
        "block_miss_ratio": t.block_miss_ratio(),
        "read_block_miss_ratio": st.read.block_miss_ratio(),
        "write_block_miss_ratio": st.write.block_miss_ratio(),
        "request_miss_ratio": t.request_miss_ratio(),
        "read_request_miss_ratio": st.read.request_miss_ratio(),
        "write_request_miss_ratio": st.write.request_miss_ratio(),
        "prefetch_accuracy": st.prefetch_accuracy(),
        "prefetch_coverage": st.prefetch_coverage(),
    })
}

/// A report's first words: the trace, its requests and block accesses, the footprint if measured, the block size.
pub fn trace_summary(trace: &str, requests: u64, accesses: u64, footprint: Option<u64>, block_size: u64) -> String {
    format!(
        "trace {trace}: {requests} requests, {accesses} block accesses{}, block size {}",
        footprint.map(|f| format!(", footprint {f} blocks ({})", human_bytes(f * block_size))).unwrap_or_default(),
        human_bytes(block_size),
    )
}

/// Quotes a CSV field when it needs it (commas, quotes, line breaks).
pub fn csv_field(x: &str) -> String {
    if x.contains([',', '"', '\n']) {
        format!("\"{}\"", x.replace('"', "\"\""))
    } else {
        x.to_string()
    }
}

/// The terminal table; with a prefetcher, its accuracy and coverage too.
pub fn table(r: &ReplayReport, trace: &str, prefetching: bool) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "{}, preset {}{}{}\n",
        trace_summary(trace, r.requests, r.block_accesses, r.footprint_blocks, r.block_size),
        r.preset,
        match r.results.first().and_then(|c| c.associativity) {
            Some(w) => format!(", {w}-way set associative"),
            None => String::new(),
        },
        if r.warmup_requests > 0 {
            format!(", first {} requests are warm-up", r.warmup_requests)
        } else {
            String::new()
        },
    ));
    s.push_str(&format!(
        "{:<22} {:>10} {:>10} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9}",
        "policy", "cache", "blocks", "miss blk", "read", "write", "miss req", "read", "write"
    ));
    if prefetching {
        s.push_str(&format!(" | {:>9} {:>9}", "pf accur", "pf cover"));
    }
    s.push('\n');
    let width = 22 + 1 + 10 + 1 + 10 + 3 + 9 * 3 + 2 + 3 + 9 * 3 + 2 + if prefetching { 3 + 9 * 2 + 1 } else { 0 };
    s.push_str(&format!("{}\n", "-".repeat(width)));
    let ratio = |m: u64, n: u64| if n == 0 { "-".to_string() } else { format!("{:.6}", m as f64 / n as f64) };
    for c in &r.results {
        let t = c.stats.total();
        let (rd, wr) = (c.stats.read, c.stats.write);
        s.push_str(&format!(
            "{:<22} {:>10} {:>10} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9}",
            c.policy,
            human_bytes(c.cache_bytes),
            c.cache_blocks,
            ratio(t.block_misses(), t.blocks),
            ratio(rd.block_misses(), rd.blocks),
            ratio(wr.block_misses(), wr.blocks),
            ratio(t.request_misses(), t.requests),
            ratio(rd.request_misses(), rd.requests),
            ratio(wr.request_misses(), wr.requests),
        ));
        if prefetching {
            let st = &c.stats;
            s.push_str(&format!(
                " | {:>9} {:>9}",
                ratio(st.prefetch_used + st.prefetch_late, st.prefetch_issued),
                ratio(st.prefetch_used, st.prefetch_used + rd.block_misses()),
            ));
        }
        s.push('\n');
    }
    s.push_str("miss ratios: block level (each block a lookup) and request level (a request hits only if all its blocks hit)\n");
    if prefetching {
        s.push_str("prefetch accuracy: demanded / prefetched blocks; coverage: prefetch hits / (prefetch hits + read block misses)\n");
    }
    s
}

/// The CSV output: one row per cache.
pub fn csv(r: &ReplayReport) -> String {
    let mut s = String::from(
        "policy,cache_blocks,cache_bytes,block_size,requests,blocks,block_misses,block_miss_ratio,\
read_blocks,read_block_misses,read_block_miss_ratio,write_blocks,write_block_misses,write_block_miss_ratio,\
request_misses,request_miss_ratio,read_requests,read_request_misses,write_requests,write_request_misses,\
prefetch_issued,prefetch_used,prefetch_late,prefetch_wasted,prefetch_accuracy,prefetch_coverage,\
admission_rejections,bypassed,evictions,associativity,sets\n",
    );
    for c in &r.results {
        let t = c.stats.total();
        let (rd, wr) = (c.stats.read, c.stats.write);
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{:.6},{},{},{:.6},{},{},{:.6},{},{:.6},{},{},{},{},{},{},{},{},{:.6},{:.6},{},{},{},{},{}\n",
            csv_field(&c.policy),
            c.cache_blocks,
            c.cache_bytes,
            r.block_size,
            t.requests,
            t.blocks,
            t.block_misses(),
            t.block_miss_ratio(),
            rd.blocks,
            rd.block_misses(),
            rd.block_miss_ratio(),
            wr.blocks,
            wr.block_misses(),
            wr.block_miss_ratio(),
            t.request_misses(),
            t.request_miss_ratio(),
            rd.requests,
            rd.request_misses(),
            wr.requests,
            wr.request_misses(),
            c.stats.prefetch_issued,
            c.stats.prefetch_used,
            c.stats.prefetch_late,
            c.stats.prefetch_wasted,
            c.stats.prefetch_accuracy(),
            c.stats.prefetch_coverage(),
            c.stats.admission_rejections,
            c.stats.bypassed,
            c.stats.evictions,
            c.associativity.map(|w| w.to_string()).unwrap_or_default(),
            c.sets,
        ));
    }
    s
}
