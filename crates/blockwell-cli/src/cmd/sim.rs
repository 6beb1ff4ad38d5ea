//! `blockwell sim`: replay a trace through every (policy × cache size) combination in one pass.

use super::common::{parse_bytes, SizeSpec, TraceArgs};
use anyhow::{bail, Context};
use blockwell_core::policy::{parse_policy_list, Preset};
use blockwell_sim::analysis::human_bytes;
use blockwell_sim::replay::{replay, CacheSize, CacheSpec, ReplayConfig, ReplayError, ReplayHooks, ReplayReport};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub trace: TraceArgs,

    /// Policies, comma separated, each optionally with parameters: `lru,arc,lru-k(k=3,crp=20)`. `all` runs
    /// every policy. See `blockwell list`.
    #[arg(long, short = 'p', default_value = "lru")]
    pub policy: String,

    /// Cache sizes, comma separated: bytes with a unit (`64MiB`), blocks (`1000blocks`) or a percentage of
    /// the trace's footprint (`1%`, measured in a first pass).
    #[arg(long, short = 'c', default_value = "1%,5%,10%")]
    pub cache: String,

    /// Cache block size, a power of two from 512 B to 1 MiB.
    #[arg(long, short = 'b', default_value = "4KiB")]
    pub block_size: String,

    /// Parameter preset: default, libcachesim (the defaults of libcachesim 0.3.5), seed001 (Table 4 of
    /// Butt et al., SIGMETRICS'05).
    #[arg(long, default_value = "default")]
    pub preset: String,

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

    /// Print CSV instead of a table.
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Write the output to FILE instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Check every policy's invariants after every request (slow; for debugging).
    #[arg(long, hide = true)]
    pub validate: bool,
}

/// Parses `--block-size`.
pub fn block_size(s: &str) -> anyhow::Result<u64> {
    let b = parse_bytes(s).context("--block-size")?;
    if !b.is_power_of_two() || !(512..=1 << 20).contains(&b) {
        bail!("--block-size: {s} is not a power of two between 512 B and 1 MiB");
    }
    Ok(b)
}

/// Turns `--policy` and `--cache` into the list of caches.
pub fn caches(policy: &str, cache: &str, block_size: u64) -> anyhow::Result<Vec<CacheSpec>> {
    let policies = if policy.trim().eq_ignore_ascii_case("all") {
        blockwell_core::PolicyKind::ALL.iter().map(|&k| blockwell_core::PolicySpec::new(k)).collect()
    } else {
        parse_policy_list(policy).context("--policy")?
    };
    if policies.is_empty() {
        bail!("--policy: no policy given");
    }
    let sizes: Vec<SizeSpec> = super::common::parse_sizes(cache).context("--cache")?;
    if sizes.is_empty() {
        bail!("--cache: no size given");
    }
    let mut out = Vec::new();
    for p in &policies {
        for s in &sizes {
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
    let bs = block_size(&a.block_size)?;
    let preset = Preset::from_name(&a.preset)
        .with_context(|| format!("--preset: unknown preset '{}' (known: default, libcachesim, seed001)", a.preset))?;
    let caches = caches(&a.policy, &a.cache, bs)?;
    let cfg = ReplayConfig {
        block_size: bs,
        preset,
        reads_only: a.reads_only,
        volumes: a.volumes.as_ref().map(|v| v.split(',').map(|s| s.trim().to_string()).collect()),
        warmup: a.warmup,
        threads: a.threads,
    };
    // Check the trace opens (and its format is known) before anything else.
    a.trace.open()?;
    if let Some(p) = &a.output {
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
    let report = replay(&open, &caches, &cfg, ReplayHooks { progress: Some(&tick), validate: a.validate });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    // Errors about the trace as a whole name it (read errors already do).
    let report = report.map_err(|e| match e {
        ReplayError::Empty(_) | ReplayError::NoSuchVolume { .. } => {
            anyhow::anyhow!("{}: {e}", a.trace.trace.display())
        }
        e => e.into(),
    })?;
    if report.skipped_lines > 0 {
        eprintln!("blockwell: skipped {} malformed line(s); first:", report.skipped_lines);
        for e in &report.skipped_examples {
            eprintln!("  {e}");
        }
    }
    let text = if a.json {
        let mut v = serde_json::to_value(&report)?;
        v["trace"] = serde_json::Value::String(a.trace.trace.display().to_string());
        let mut s = serde_json::to_string_pretty(&v)?;
        s.push('\n');
        s
    } else if a.csv {
        csv(&report)
    } else {
        table(&report, &a.trace.trace.display().to_string())
    };
    match &a.output {
        Some(p) => std::fs::write(p, text).with_context(|| format!("--output {}", p.display()))?,
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The terminal table.
pub fn table(r: &ReplayReport, trace: &str) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "trace {trace}: {} requests, {} block accesses{}, block size {}, preset {}{}\n",
        r.requests,
        r.block_accesses,
        r.footprint_blocks
            .map(|f| format!(", footprint {f} blocks ({})", human_bytes(f * r.block_size)))
            .unwrap_or_default(),
        human_bytes(r.block_size),
        r.preset,
        if r.warmup_requests > 0 {
            format!(", first {} requests are warm-up", r.warmup_requests)
        } else {
            String::new()
        },
    ));
    s.push_str(&format!(
        "{:<22} {:>10} {:>10} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9}\n",
        "policy", "cache", "blocks", "miss blk", "read", "write", "miss req", "read", "write"
    ));
    s.push_str(&format!("{}\n", "-".repeat(22 + 1 + 10 + 1 + 10 + 3 + 9 * 3 + 2 + 3 + 9 * 3 + 2)));
    let ratio = |m: u64, n: u64| if n == 0 { "-".to_string() } else { format!("{:.6}", m as f64 / n as f64) };
    for c in &r.results {
        let t = c.stats.total();
        let (rd, wr) = (c.stats.read, c.stats.write);
        s.push_str(&format!(
            "{:<22} {:>10} {:>10} | {:>9} {:>9} {:>9} | {:>9} {:>9} {:>9}\n",
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
    }
    s.push_str("miss ratios: block level (each block a lookup) and request level (a request hits only if all its blocks hit)\n");
    s
}

/// The CSV output: one row per cache.
pub fn csv(r: &ReplayReport) -> String {
    let mut s = String::from(
        "policy,cache_blocks,cache_bytes,block_size,requests,blocks,block_misses,block_miss_ratio,\
read_blocks,read_block_misses,read_block_miss_ratio,write_blocks,write_block_misses,write_block_miss_ratio,\
request_misses,request_miss_ratio,read_requests,read_request_misses,write_requests,write_request_misses,\
prefetch_inserted,prefetch_used,prefetch_wasted,evictions\n",
    );
    for c in &r.results {
        let t = c.stats.total();
        let (rd, wr) = (c.stats.read, c.stats.write);
        let q =
            |x: &str| if x.contains([',', '"']) { format!("\"{}\"", x.replace('"', "\"\"")) } else { x.to_string() };
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{:.6},{},{},{:.6},{},{},{:.6},{},{:.6},{},{},{},{},{},{},{},{}\n",
            q(&c.policy),
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
            c.stats.prefetch_inserted,
            c.stats.prefetch_used,
            c.stats.prefetch_wasted,
            c.stats.evictions,
        ));
    }
    s
}
