//! `blockwell sim`: replay a trace through every (policy × cache size) combination in one pass; with
//! `--cache-dev-size`, through each RAM cache over a simulated cache device ([`super::sim_tier`]).
//!
//! Several traces (`--trace` repeated, or a glob pattern) replay in parallel, a bounded number at once
//! ([`split_threads`]), into one document: the table has a block per trace, the CSV a first column `trace`,
//! the JSON an array of the single-trace reports, in the order the traces were given. A trace that fails
//! leaves the others' results: they are printed, each failure is reported on stderr with the message a
//! single-trace run gives, and the exit code is 1. A failed trace has no rows in the CSV (it has no results);
//! the table says `trace FILE: error: MESSAGE` in its place, and the JSON has `{"trace": FILE, "error":
//! MESSAGE}` there.

use super::common::{SizeSpec, TraceArgs, TraceListArgs};
use super::options::{parse_arg, AdmitArgs, CacheArgs, Format, Many, OutputArgs};
use anyhow::bail;
use blockwell_core::policy::{PolicyError, PolicySpec};
use blockwell_sim::analysis::human_bytes;
use blockwell_sim::replay::{replay, CacheSpec, ReplayConfig, ReplayError, ReplayHooks, ReplayReport, Warmup};
use blockwell_sim::tier::{replay_tier, TierReplayConfig};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub trace: TraceListArgs,

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

    /// Warm the caches before counting starts: N requests (`50000`, `1M`), or a span of trace time (`30s`,
    /// `500ms`, `10min`: until the first request at least that long after the first one). A warm-up as long as
    /// the trace counts nothing.
    #[arg(long, value_name = "N|TIME", default_value = "0", value_parser = parse_arg::<Warmup>)]
    pub warmup: Warmup,

    /// Also count per interval of N requests after warm-up (the last one possibly shorter): the table adds the
    /// block miss ratio per interval, --csv prints one row per cache and interval instead, --json adds each
    /// cache's "intervals". One trace at a time.
    #[arg(long, value_name = "N")]
    pub interval: Option<u64>,

    /// With --interval: plot the block miss ratio per interval into FILE (.svg or .png).
    #[arg(long, value_name = "FILE", requires = "interval")]
    pub plot: Option<std::path::PathBuf>,

    /// Worker threads (default: one per core). With several traces, in all: min(traces, N) traces replay at
    /// once, sharing the N threads evenly.
    #[arg(long, value_name = "N", default_value = "0", value_parser = super::options::parse_threads)]
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
            let size = s.cache_size(block_size).map_err(|e| anyhow::anyhow!("--cache: {e}"))?;
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
        sample: None,
        threads: a.threads,
        prefetch: a.cache.prefetch.clone(),
        admission: a.admit.admission,
        sequential_cutoff: a.admit.sequential_cutoff.0,
        associativity: a.cache.ways(),
        interval: match a.interval {
            Some(0) => bail!("--interval: must be at least 1 request"),
            i => i.unwrap_or(0),
        },
    };
    // (The error names the option and the file: `--plot x.gif: the file name must end in .png or .svg`.)
    let plot_kind = a.plot.as_deref().map(super::plot::PlotKind::of).transpose()?;
    let dev = a.dev.spec(bs)?;
    let list = a.trace.expand()?;
    if a.interval.is_some() && (list.many || dev.is_some()) {
        bail!("--interval: one --trace FILE, without --cache-dev-size");
    }
    if list.many {
        if dev.is_some() {
            bail!("--cache-dev-size simulates one trace at a time: give one --trace FILE, not several nor a pattern");
        }
        return run_many(&a, &list.traces, &caches, cfg);
    }
    let Some(trace) = list.traces.first() else { bail!("--trace: no trace given") };
    // Check the trace opens (and its format is known) before anything else.
    trace.open()?;
    for (option, path) in [("--output", &a.output.output), ("--plot", &a.plot)] {
        if let Some(p) = path {
            super::common::check_writable(option, p)?;
        }
    }
    let bar = super::common::progress_bar(&trace.trace, "reading");
    // A pre-pass (footprint for % sizes, next-use times for OPT) reads the trace once more: say which pass.
    let tick = |bytes: u64| {
        if let Some(b) = &bar {
            if bytes < b.position() {
                b.set_message("replay");
            }
            b.set_position(bytes);
        }
    };
    let open = opener(trace);
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
        let report = report.map_err(|e| trace_error(e, &trace.trace))?;
        skipped(report.skipped_lines, &report.skipped_examples, None);
        let text = super::sim_tier::render(&report, &trace.trace.display().to_string(), &a.output)?;
        a.output.write(&text)?;
        return Ok(ExitCode::SUCCESS);
    }
    let report = replay(&open, &caches, &cfg, ReplayHooks { progress: Some(&tick), validate: a.validate });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let report = report.map_err(|e| trace_error(e, &trace.trace))?;
    skipped(report.skipped_lines, &report.skipped_examples, None);
    let name = trace.trace.display().to_string();
    let over_time = a.interval.is_some();
    let text = match a.output.format() {
        Format::Json => OutputArgs::json(&report_json(&report, &name, &a)?)?,
        Format::Csv if over_time => super::sim_interval::csv(&report),
        Format::Csv => csv(&report),
        Format::Table if over_time => {
            format!("{}\n{}", table(&report, &name, a.cache.prefetching()), super::sim_interval::table(&report))
        }
        Format::Table => table(&report, &name, a.cache.prefetching()),
    };
    a.output.write(&text)?;
    if let (Some(path), Some(kind)) = (&a.plot, plot_kind) {
        let file = trace.trace.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let title = format!("{file} — miss ratio per {} requests", a.interval.unwrap_or(0));
        let fig = super::sim_interval::OverTime { title: &title, report: &report };
        super::plot::save_and_report(path, kind, (1000, 640), &fig)
            .map_err(|e| e.context(format!("--plot {}", path.display())))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Opens `trace` for the replay, which takes the trace's own errors.
pub fn opener(
    trace: &TraceArgs,
) -> impl Fn() -> Result<Box<dyn blockwell_trace::TraceReader>, blockwell_trace::TraceError> + '_ {
    move || {
        trace.open().map_err(|e| match e.downcast::<blockwell_trace::TraceError>() {
            Ok(t) => t,
            Err(e) => blockwell_trace::TraceError::Invalid { file: trace.trace.clone(), message: e.to_string() },
        })
    }
}

/// The JSON report of one trace: every result carries its ratios (`null` when undefined) and the settings that
/// produced it ([`blockwell_sim::rows`]).
fn report_json(report: &ReplayReport, trace: &str, a: &Args) -> anyhow::Result<serde_json::Value> {
    let mut v = serde_json::to_value(report)?;
    v["trace"] = serde_json::Value::String(trace.to_string());
    v["prefetch"] = serde_json::Value::String(a.cache.prefetch.label().to_string());
    v["admission"] = serde_json::Value::String(a.admit.admission.to_string());
    v["sequential_cutoff"] = a.admit.sequential_cutoff.0.into();
    let settings = serde_json::to_value(&report.settings)?;
    if let Some(results) = v["results"].as_array_mut() {
        for (j, c) in results.iter_mut().zip(&report.results) {
            j["ratios"] = ratios(&c.stats);
            j["settings"] = settings.clone();
        }
    }
    Ok(v)
}

/// Several traces (see the module's documentation): replayed in parallel, reported in the order given.
fn run_many(a: &Args, traces: &[TraceArgs], caches: &[CacheSpec], cfg: ReplayConfig) -> anyhow::Result<ExitCode> {
    // What every trace shares is checked once, before anything runs: a bad value is one error (exit 2).
    a.trace.read.format()?;
    a.trace.read.reader_options()?;
    check_caches(caches, &cfg)?;
    if let Some(p) = &a.output.output {
        super::common::check_writable("--output", p)?;
    }
    let total =
        if a.threads == 0 { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) } else { a.threads };
    let (at_once, threads) = split_threads(total, traces.len());
    let bar = super::common::job_bar(traces.len() as u64, "traces");
    let outcomes = run_ordered(traces.len(), at_once, |worker, i| {
        let t = &traces[i];
        let cfg = ReplayConfig { threads: threads(worker), ..cfg.clone() };
        let r = t.open().and_then(|_| {
            replay(&opener(t), caches, &cfg, ReplayHooks { progress: None, validate: a.validate })
                .map_err(|e| trace_error_of_many(e, &t.trace))
        });
        if let Some(b) = &bar {
            b.inc(1);
        }
        r
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    for (t, r) in traces.iter().zip(&outcomes) {
        if let Ok(r) = r {
            skipped(r.skipped_lines, &r.skipped_examples, Some(&t.trace));
        }
    }
    let names: Vec<String> = traces.iter().map(|t| t.trace.display().to_string()).collect();
    let text = match a.output.format() {
        Format::Json => {
            let mut all = Vec::with_capacity(outcomes.len());
            for (name, o) in names.iter().zip(&outcomes) {
                all.push(match o {
                    Ok(r) => report_json(r, name, a)?,
                    Err(e) => serde_json::json!({ "trace": name, "error": crate::message(e) }),
                });
            }
            OutputArgs::json(&all)?
        }
        Format::Csv => csv_many(names.iter().map(String::as_str).zip(outcomes.iter().map(|o| o.as_ref().ok()))),
        Format::Table => {
            let mut s = String::new();
            for (name, o) in names.iter().zip(&outcomes) {
                if !s.is_empty() {
                    s.push('\n');
                }
                match o {
                    Ok(r) => s.push_str(&table_block(r, name, a.cache.prefetching())),
                    Err(e) => s.push_str(&format!("trace {name}: error: {}\n", crate::message(e))),
                }
            }
            s.push_str(&legend(a.cache.prefetching()));
            s
        }
    };
    a.output.write(&text)?;
    let mut failed = false;
    for e in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        eprintln!("blockwell: error: {}", crate::message(e));
        failed = true;
    }
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

/// Checks the caches' configuration (sizes, policies with the preset, the prefetcher, associativity) on a
/// one-request trace of its own, so that with several traces a bad option is one error, as with one trace, and
/// not one per trace. A cache at a time, so that the check holds no more memory than the largest cache. (A size
/// in % of the footprint is one block here: the check refuses nothing that a trace would accept.)
fn check_caches(caches: &[CacheSpec], cfg: &ReplayConfig) -> anyhow::Result<()> {
    let one = blockwell_trace::Request {
        time_ns: 0,
        volume: 0,
        op: blockwell_core::Op::Read,
        offset: 0,
        len: cfg.block_size,
        digest: None,
    };
    let open = || -> Result<Box<dyn blockwell_trace::TraceReader>, blockwell_trace::TraceError> {
        Ok(Box::new(blockwell_sim::replay::VecReader::new(vec![one])))
    };
    let cfg = ReplayConfig { volumes: None, warmup: Warmup::Requests(0), threads: 1, ..cfg.clone() };
    for c in caches {
        if let Err(e) = replay(&open, std::slice::from_ref(c), &cfg, ReplayHooks { progress: None, validate: false }) {
            // (The check's trace has a request and no volume filter: no error here is about a trace.)
            return Err(trace_error(e, Path::new("--trace")));
        }
    }
    Ok(())
}

/// How `total` threads (`--threads`, or one per core) are shared by `traces` traces: `min(traces, total)`
/// traces replay at once, and the returned function gives the worker threads of the replay running in slot `w`
/// of those: `total / at_once`, one more for the first `total % at_once` slots, so that the slots use exactly
/// `total` (each replay also reads its trace on one more thread, as a single-trace run does). With more traces
/// than threads each replay runs single-threaded and the traces are the parallelism; with fewer, each replay
/// spreads its caches over its share (more threads than caches are not started).
pub fn split_threads(total: usize, traces: usize) -> (usize, impl Fn(usize) -> usize) {
    let total = total.max(1);
    let at_once = total.min(traces).max(1);
    let (each, extra) = (total / at_once, total % at_once);
    (at_once, move |w: usize| each + usize::from(w < extra))
}

/// Runs `job(slot, i)` for every `i` in `0..n` on at most `slots` threads at once (each thread is a slot and
/// takes the next `i` when it is done with one), and returns the results in the order of `i`, whichever
/// finished first.
pub fn run_ordered<T: Send>(n: usize, slots: usize, job: impl Fn(usize, usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let done: Vec<Mutex<Option<T>>> = (0..n).map(|_| Mutex::new(None)).collect();
    std::thread::scope(|s| {
        for slot in 0..slots.clamp(1, n.max(1)) {
            let (next, done, job) = (&next, &done, &job);
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let r = job(slot, i);
                *done[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            });
        }
    });
    // Every index was taken by exactly one slot, and the scope joined them all (or passed on a panic).
    done.into_iter().map(|m| m.into_inner().unwrap_or_else(|p| p.into_inner()).expect("every job ran")).collect()
}

/// Errors about the trace as a whole name it (read errors already do); an associativity error names the option.
fn trace_error(e: ReplayError, trace: &Path) -> anyhow::Error {
    match e {
        ReplayError::Empty(_) | ReplayError::NoSuchVolume { .. } => anyhow::anyhow!("{}: {e}", trace.display()),
        ReplayError::Policy(PolicyError::AssociativityQuirks { .. }) => anyhow::anyhow!("--associativity: {e}"),
        e => e.into(),
    }
}

/// With several traces, an error names its trace: those of [`trace_error`] that do not already say which one
/// get its name in front.
fn trace_error_of_many(e: ReplayError, trace: &Path) -> anyhow::Error {
    match e {
        ReplayError::Trace(_) | ReplayError::Empty(_) | ReplayError::NoSuchVolume { .. } => trace_error(e, trace),
        e => trace_error(e, trace).context(trace.display().to_string()),
    }
}

/// Reports the malformed lines a replay skipped (naming the trace when several replay).
pub fn skipped(count: u64, examples: &[String], trace: Option<&Path>) {
    if count > 0 {
        let of = trace.map(|t| format!(" of {}", t.display())).unwrap_or_default();
        eprintln!("blockwell: skipped {count} malformed line(s){of}; first:");
        for e in examples {
            eprintln!("  {e}");
        }
    }
}

/// Miss ratios (block and request level; read, write, total) and the prefetcher's accuracy and coverage,
/// for `--json`: `null` when undefined (no accesses of the kind, no prefetches), never 0.
fn ratios(st: &blockwell_core::Stats) -> serde_json::Value {
    serde_json::Value::Object(
        blockwell_sim::rows::ratios(st).into_iter().map(|(k, r)| (k.to_string(), r.into())).collect(),
    )
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
pub use blockwell_sim::rows::csv_field;

/// The terminal table; with a prefetcher, its accuracy and coverage too.
pub fn table(r: &ReplayReport, trace: &str, prefetching: bool) -> String {
    let mut s = table_block(r, trace, prefetching);
    s.push_str(&legend(prefetching));
    s
}

/// The table without its legend: the trace's summary, the header and a row per cache.
fn table_block(r: &ReplayReport, trace: &str, prefetching: bool) -> String {
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
    s
}

/// The table's legend, below its rows.
fn legend(prefetching: bool) -> String {
    let mut s = String::new();
    s.push_str("miss ratios: block level (each block a lookup) and request level (a request hits only if all its blocks hit)\n");
    if prefetching {
        s.push_str("prefetch accuracy: demanded / prefetched blocks; coverage: prefetch hits / (prefetch hits + read block misses)\n");
    }
    s
}

/// The CSV output: one row per cache ([`blockwell_sim::rows::sim_row`]: the counters, the ratios, empty when
/// undefined, and the settings that produced them).
pub fn csv(r: &ReplayReport) -> String {
    let mut s = csv_header();
    csv_rows(&mut s, r, "");
    s
}

/// The CSV output of several traces: a first column `trace`, then the columns of [`csv`]; a trace without a
/// report (it failed) has no rows.
pub fn csv_many<'a>(reports: impl IntoIterator<Item = (&'a str, Option<&'a ReplayReport>)>) -> String {
    let mut s = format!("trace,{}", csv_header());
    for (trace, r) in reports {
        if let Some(r) = r {
            csv_rows(&mut s, r, &format!("{},", csv_field(trace)));
        }
    }
    s
}

fn csv_header() -> String {
    let mut s = blockwell_sim::rows::sim_columns().join(",");
    s.push('\n');
    s
}

/// A CSV row per cache of `r`, each starting with `prefix`.
fn csv_rows(s: &mut String, r: &ReplayReport, prefix: &str) {
    for row in blockwell_sim::rows::sim_rows(r) {
        s.push_str(prefix);
        s.push_str(&row.csv());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwell_core::Op;
    use blockwell_sim::replay::VecReader;
    use blockwell_trace::Request;
    use std::time::Duration;

    #[test]
    fn threads_are_shared_by_the_traces_running_at_once() {
        let share = |total, traces| {
            let (at_once, threads) = split_threads(total, traces);
            (at_once, (0..at_once).map(threads).collect::<Vec<_>>())
        };
        assert_eq!(share(8, 3), (3, vec![3, 3, 2]), "the remainder goes to the first slots");
        assert_eq!(share(16, 2), (2, vec![8, 8]));
        assert_eq!(share(4, 10), (4, vec![1, 1, 1, 1]), "more traces than threads: one thread each");
        assert_eq!(share(1, 5), (1, vec![1]));
        assert_eq!(share(0, 2), (1, vec![1]), "at least one thread");
    }

    #[test]
    fn jobs_run_bounded_and_come_back_in_order() {
        let running = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let out = run_ordered(7, 3, |slot, i| {
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(now, Ordering::SeqCst);
            // The later jobs finish first.
            std::thread::sleep(Duration::from_millis(5 * (7 - i as u64)));
            running.fetch_sub(1, Ordering::SeqCst);
            assert!(slot < 3);
            i * 10
        });
        assert_eq!(out, [0, 10, 20, 30, 40, 50, 60]);
        assert!(most.load(Ordering::SeqCst) <= 3);
        assert_eq!(run_ordered(0, 4, |_, i| i), Vec::<usize>::new());
        assert_eq!(run_ordered(2, 0, |_, i| i), [0, 1], "at least one slot");
    }

    fn report(blocks: &[u64]) -> ReplayReport {
        let reqs: Vec<Request> = blocks
            .iter()
            .map(|&b| Request { time_ns: 0, volume: 0, op: Op::Read, offset: b * 4096, len: 4096, digest: None })
            .collect();
        let open = move || -> Result<Box<dyn blockwell_trace::TraceReader>, blockwell_trace::TraceError> {
            Ok(Box::new(VecReader::new(reqs.clone())))
        };
        let caches = caches(&[PolicySpec::new(blockwell_core::PolicyKind::Lru)], &[SizeSpec::Blocks(2)], 4096).unwrap();
        replay(&open, &caches, &ReplayConfig::default(), ReplayHooks { progress: None, validate: false }).unwrap()
    }

    #[test]
    fn csv_of_several_traces_adds_a_first_column_and_skips_failed_ones() {
        let (a, b) = (report(&[1, 2, 1]), report(&[1, 2, 3, 1]));
        let one = csv(&a);
        let many = csv_many([("a.csv", Some(&a)), ("bad.csv", None), ("b,c.csv", Some(&b))]);
        let lines: Vec<&str> = many.lines().collect();
        assert_eq!(lines.len(), 3, "{many}");
        assert_eq!(lines[0], format!("trace,{}", one.lines().next().unwrap()));
        assert_eq!(lines[1], format!("a.csv,{}", one.lines().nth(1).unwrap()), "the row a single run gives");
        assert!(lines[2].starts_with("\"b,c.csv\",lru,2,"), "a name with a comma is quoted: {}", lines[2]);
        assert_eq!(csv_many([("bad.csv", None)]), format!("trace,{}", csv_header()));
    }

    #[test]
    fn the_table_of_one_trace_is_its_block_and_the_legend() {
        let r = report(&[1, 2, 1]);
        let t = table(&r, "a.csv", false);
        assert_eq!(t, format!("{}{}", table_block(&r, "a.csv", false), legend(false)));
        assert!(t.starts_with("trace a.csv: 3 requests") && t.ends_with("all its blocks hit)\n"), "{t}");
    }
}
