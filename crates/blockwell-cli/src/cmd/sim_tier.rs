//! `blockwell sim --cache-dev-size SIZE`: the two-level replay of seed 004's device caches (RAM over a
//! cache device over the origin; [`blockwell_sim::tier`]), its options (shared with `blockwell tsim
//! --cache-dev-size`, the time-aware tier) and its report.

use super::common::SizeSpec;
use super::options::{parse_arg, ways, Associativity, Bytes, Format, OutputArgs};
use super::tier::{DEFAULT_CLEANER, DEFAULT_CUTOFF, DEFAULT_POLICY, DEFAULT_PROMOTE};
use anyhow::bail;
use blockwell_cachedev::CacheMode;
use blockwell_core::admission::AdmissionSpec;
use blockwell_core::cleaner::CleanerSpec;
use blockwell_core::policy::PolicySpec;
use blockwell_sim::analysis::human_bytes;
use blockwell_sim::replay::CacheSize;
use blockwell_sim::tier::{DevMode, DevSpec, RamSpec, TierReport};
use std::fmt::Write as _;

/// The simulated cache device (an SSD cache): with `--cache-dev-size`, `sim` replays the trace
/// through the RAM cache (`--cache`, `0` for none) over a cache device over the origin, and `tsim` puts a cache
/// device between its block cache and its disk model. The flags and defaults are `serve --cache-dev`'s.
#[derive(clap::Args, Debug, Clone)]
pub struct DevArgs {
    /// Simulate a persistent cache device of this size under the RAM cache (`tsim`: the block cache): bytes
    /// (`1GiB`), blocks (`262144blocks`) or a percentage of the footprint (`10%`: of the blocks the input
    /// touches).
    #[arg(long, value_name = "SIZE", value_parser = parse_arg::<SizeSpec>)]
    pub cache_dev_size: Option<SizeSpec>,

    /// The cache device's replacement policy.
    #[arg(long, value_name = "POLICY", default_value = DEFAULT_POLICY, value_parser = parse_arg::<PolicySpec>)]
    pub cache_dev_policy: PolicySpec,

    /// Set associativity of the cache device's policy (sets of N blocks, as `serve --cache-dev-associativity`).
    #[arg(long, value_name = "N", value_parser = parse_arg::<Associativity>)]
    pub cache_dev_associativity: Option<Associativity>,

    /// Which read misses are copied into the cache device: `always`, `n-hit:N`, `tinylfu`, `bloom` or `prob:P`
    /// (as --admission).
    #[arg(long, value_name = "SPEC", default_value = DEFAULT_PROMOTE, value_parser = parse_arg::<AdmissionSpec>)]
    pub promote: AdmissionSpec,

    /// Back-to-back runs of at least this many bytes bypass the cache device (bcache's sequential_cutoff).
    #[arg(long, value_name = "SIZE", default_value = DEFAULT_CUTOFF, value_parser = parse_arg::<Bytes>)]
    pub cache_dev_cutoff: Bytes,

    /// The cache device's write mode: write-back, write-through or write-around.
    #[arg(long, value_name = "MODE", default_value = "write-back", value_parser = parse_arg::<CacheMode>)]
    pub mode: CacheMode,

    /// How dirty blocks are written back: `pi` (bcache's rate controller), `watermark` (EnhanceIO's
    /// thresholds) or `none` (only on eviction).
    #[arg(long, value_name = "SPEC", default_value = DEFAULT_CLEANER, value_parser = parse_arg::<CleanerSpec>)]
    pub cleaner: CleanerSpec,

    /// A point of the dirty-blocks series (in `--json`) every this many requests; 0 for none.
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub dirty_every: u64,
}

impl DevArgs {
    /// The device level, when `--cache-dev-size` was given.
    pub fn spec(&self, block_size: u64) -> anyhow::Result<Option<DevSpec>> {
        let Some(size) = self.cache_dev_size else { return Ok(None) };
        let mode = match self.mode {
            CacheMode::WriteBack => DevMode::WriteBack,
            CacheMode::WriteThrough => DevMode::WriteThrough,
            CacheMode::WriteAround => DevMode::WriteAround,
            CacheMode::ReadOnly => {
                bail!("--mode read-only: the simulator caches reads in every mode (give --reads-only to drop writes)")
            }
        };
        Ok(Some(DevSpec {
            policy: self.cache_dev_policy.clone(),
            size: cache_size(size, block_size, "--cache-dev-size")?,
            mode,
            promote: self.promote,
            sequential_cutoff: self.cache_dev_cutoff.0,
            cleaner: self.cleaner,
            clean_run_blocks: blockwell_server::tier::DEFAULT_CLEAN_RUN_BLOCKS,
            associativity: ways(self.cache_dev_associativity),
        }))
    }
}

fn cache_size(s: SizeSpec, block_size: u64, flag: &str) -> anyhow::Result<CacheSize> {
    Ok(match s {
        SizeSpec::Percent(p) => CacheSize::PercentOfFootprint(p),
        SizeSpec::Blocks(0) | SizeSpec::Bytes(0) => bail!("{flag}: 0 is no cache device"),
        SizeSpec::Blocks(b) => CacheSize::Blocks(b),
        SizeSpec::Bytes(b) if b < block_size => bail!("{flag}: {b} B is smaller than one {block_size} B block"),
        SizeSpec::Bytes(b) => CacheSize::Blocks(b / block_size),
    })
}

/// The RAM levels of `--policy` × `--cache` (a size of 0: no RAM level).
pub fn rams(policies: &[PolicySpec], sizes: &[SizeSpec], block_size: u64) -> anyhow::Result<Vec<RamSpec>> {
    let mut out = Vec::new();
    for p in policies {
        for &s in sizes {
            let size = match s {
                SizeSpec::Blocks(0) | SizeSpec::Bytes(0) => CacheSize::Blocks(0),
                s => cache_size(s, block_size, "--cache")?,
            };
            out.push(RamSpec { policy: p.clone(), size });
        }
    }
    Ok(out)
}

/// The report in the format asked for.
pub fn render(r: &TierReport, trace: &str, output: &OutputArgs) -> anyhow::Result<String> {
    Ok(match output.format() {
        Format::Json => {
            let mut v = serde_json::to_value(r)?;
            v["trace"] = serde_json::Value::String(trace.to_string());
            OutputArgs::json(&v)?
        }
        Format::Csv => csv(r),
        Format::Table => table(r, trace),
    })
}

fn ratio(m: u64, n: u64) -> String {
    if n == 0 {
        "-".to_string()
    } else {
        format!("{:.4}", m as f64 / n as f64)
    }
}

fn table(r: &TierReport, trace: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}, cleaner clock: {}",
        super::sim::trace_summary(trace, r.requests, r.block_accesses, r.footprint_blocks, r.block_size),
        r.clock,
    );
    if let Some(t) = r.results.first() {
        let _ = writeln!(
            s,
            "cache device: {} {} ({} blocks{}), {}, cleaner {}",
            t.dev_policy,
            human_bytes(t.dev_blocks * r.block_size),
            t.dev_blocks,
            t.dev_associativity.map(|w| format!(", {w}-way set associative")).unwrap_or_default(),
            t.mode.name(),
            t.cleaner
        );
    }
    let _ = writeln!(
        s,
        "{:<18} | {:>8} | {:>8} {:>8} | {:>10} {:>10} {:>9} | {:>9} {:>9} | {:>8} {:>8} {:>8}",
        "RAM",
        "RAM miss",
        "dev rmis",
        "dev wmis",
        "origin rd",
        "origin wr",
        "wr saved",
        "cleaned",
        "dirty ev",
        "dirty mx",
        "mean",
        "final"
    );
    let _ = writeln!(s, "{}", "-".repeat(137));
    for t in &r.results {
        let ram = match &t.ram_policy {
            Some(p) => format!("{p} {}", human_bytes(t.ram_blocks * r.block_size)),
            None => "none".to_string(),
        };
        let ram_miss = t.ram.map_or("-".to_string(), |st| ratio(st.read.block_misses(), st.read.blocks));
        let c = &t.tier;
        let _ = writeln!(
            s,
            "{:<18} | {:>8} | {:>8} {:>8} | {:>10} {:>10} {:>9} | {:>9} {:>9} | {:>8} {:>8.1} {:>8}",
            ram,
            ram_miss,
            ratio(c.read_misses, c.read_hits + c.read_misses),
            ratio(c.write_misses, c.write_hits + c.write_misses),
            human_bytes(c.origin_read_bytes),
            human_bytes(c.origin_write_bytes),
            t.write_reduction.map_or("-".to_string(), |w| format!("{:.1}%", w * 100.0)),
            c.cleaned_blocks,
            c.dirty_evictions,
            t.dirty.max_blocks,
            t.dirty.mean_blocks,
            t.dirty.final_blocks,
        );
    }
    s.push_str(
        "miss ratios: read blocks (RAM, cache device), written blocks (cache device); wr saved: client writes the \
         cache absorbed;\ndirty: blocks only the cache device holds (max, mean over requests, at the end)\n",
    );
    if r.clock_stood_still {
        s.push_str(
            "warning: the trace has no time stamps, so the time-based cleaner never ran (give --request-interval-us)\n",
        );
    }
    s
}

/// The CSV: a row per RAM configuration, with the settings that produced it (the device's and the replay's);
/// what is undefined (the RAM level's counters without a RAM level, the write reduction without writes) is
/// empty.
fn csv(r: &TierReport) -> String {
    let mut s = String::from(
        "ram_policy,ram_blocks,dev_policy,dev_blocks,mode,cleaner,requests,ram_read_blocks,ram_read_block_misses,\
read_requests,write_requests,read_hits,read_misses,write_hits,write_misses,promotions,demotions,dirty_evictions,\
cleaned_blocks,clean_writes,dirty_write_hits,bypassed,admission_rejections,origin_reads,origin_read_bytes,\
origin_writes,origin_write_bytes,client_write_bytes,write_reduction,dirty_max,dirty_mean,dirty_final,\
ram_read_block_miss_ratio,dev_read_miss_ratio,dev_write_miss_ratio,promote,dev_sequential_cutoff,\
dev_associativity,clock,request_interval_us,block_size,preset,prefetch,admission,sequential_cutoff,reads_only,\
warmup,volumes\n",
    );
    let q = super::sim::csv_field;
    let ratio = |m: u64, n: u64| blockwell_core::stats::ratio(m, n).map_or(String::new(), |x| format!("{x:.6}"));
    let opt = |x: Option<u64>| x.map_or(String::new(), |x| x.to_string());
    let st = &r.settings;
    for t in &r.results {
        let c = &t.tier;
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.3},{},\
             {},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            q(t.ram_policy.as_deref().unwrap_or("")),
            t.ram_blocks,
            q(&t.dev_policy),
            t.dev_blocks,
            t.mode.name(),
            q(&t.cleaner),
            r.requests,
            opt(t.ram.map(|st| st.read.blocks)),
            opt(t.ram.map(|st| st.read.block_misses())),
            c.read_requests,
            c.write_requests,
            c.read_hits,
            c.read_misses,
            c.write_hits,
            c.write_misses,
            c.promotions,
            c.demotions,
            c.dirty_evictions,
            c.cleaned_blocks,
            c.clean_writes,
            c.dirty_write_hits,
            c.bypassed,
            c.admission_rejections,
            c.origin_reads,
            c.origin_read_bytes,
            c.origin_writes,
            c.origin_write_bytes,
            t.client_write_bytes,
            t.write_reduction.map_or(String::new(), |w| format!("{w:.6}")),
            t.dirty.max_blocks,
            t.dirty.mean_blocks,
            t.dirty.final_blocks,
            t.ram.map_or(String::new(), |st| ratio(st.read.block_misses(), st.read.blocks)),
            ratio(c.read_misses, c.read_hits + c.read_misses),
            ratio(c.write_misses, c.write_hits + c.write_misses),
            q(&t.promote),
            t.dev_sequential_cutoff,
            opt(t.dev_associativity.map(|w| w as u64)),
            r.clock,
            opt(r.request_interval_ns.map(|ns| ns / 1000)),
            st.block_size,
            q(&st.preset),
            q(&st.prefetch),
            q(&st.admission),
            st.sequential_cutoff,
            st.reads_only,
            q(&st.warmup),
            q(st.volumes.as_deref().unwrap_or("")),
        );
    }
    s
}
