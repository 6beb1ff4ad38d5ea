//! `blockwell trace stats|gen|convert`: summarize a trace, generate a synthetic one, convert between formats.

use crate::cmd::common::{for_each_request, parse_bytes, progress_bar, report_skipped, TraceArgs};
use anyhow::{bail, Context};
use blockwell_core::Op;
use blockwell_sim::analysis::{self, StatsConfig};
use blockwell_sim::gen::{GenConfig, Generator, Workload};
use blockwell_trace::{Format, TraceReader, WriterOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Footprint, request sizes, read/write mix, sequentiality, reuse distances.
    ///
    /// One pass: requests and bytes by operation, footprint (distinct blocks), request-size distribution,
    /// sequentiality (requests starting where the previous request of the same volume ended), LRU reuse (stack)
    /// distances, time span, and the same per volume.
    Stats(StatsArgs),
    /// Generate a synthetic trace (deterministic: the same options and seed give the same file).
    ///
    /// Writes any writable format (--format).
    ///
    /// Workloads: uniform (every request-sized slot of the footprint equally likely); zipf (slot popularity ∝
    /// rank^-alpha, ranks scattered over the footprint unless --no-permute); sequential (runs of --run-length
    /// consecutive requests from random starts); loop (a cyclic scan of the footprint); scan-hot (a hot set of
    /// --hot-blocks blocks hit with probability --hot-fraction, else a cyclic scan of the rest).
    Gen(GenArgs),
    /// Convert a trace from any readable format to any writable one.
    ///
    /// Goes through the reader and writer APIs (byte-exact requests in between).
    ///
    /// The input is read twice: once for the volume names (so formats that name volumes keep them) and how the
    /// requests align, once to write. Units follow the formats: e.g. sector-addressed formats need 512-aligned
    /// offsets. Object-id formats (oracle, plain) write objects of --object-size bytes; without it, of the
    /// input's own unit (512 B for lis, the input's objects for oracle and plain, 4 KiB for byte-addressed
    /// formats), and a trace whose requests are not whole objects of that size is refused rather than rounded
    /// (which would merge distinct parts of it into one object).
    ///
    /// Formats without an operation field (lis, oracle, plain) cannot carry writes: converting a trace with
    /// writes to one is refused unless --reads-only drops them.
    Convert(ConvertArgs),
}

pub fn run(c: Command) -> anyhow::Result<ExitCode> {
    match c {
        Command::Stats(a) => stats(a),
        Command::Gen(a) => gen(a),
        Command::Convert(a) => convert(a),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// stats

/// Options of `blockwell trace stats`.
#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    pub input: TraceArgs,

    /// Block size for the footprint and reuse distances (a power of two from 512 B to 1 MiB).
    #[arg(long, value_name = "BYTES", default_value = "4096")]
    pub block_size: String,

    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,

    /// Skip reuse distances (saves the stack-distance structure's time and part of its memory).
    #[arg(long)]
    pub no_reuse: bool,
}

fn stats(a: StatsArgs) -> anyhow::Result<ExitCode> {
    let block_size = parse_bytes(&a.block_size).context("--block-size")?;
    let config = StatsConfig { block_size, reuse: !a.no_reuse };
    let mut reader = a.input.open()?;
    let mut builder = analysis::StatsBuilder::new(config)?;
    let bar = progress_bar(&a.input.trace, "reading");
    let read = for_each_request(reader.as_mut(), bar.as_ref(), |r| builder.request(r));
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    read?;
    let s = builder.finish(reader.volumes());
    report_skipped(reader.as_ref());
    let mut out = std::io::stdout().lock();
    if a.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            trace: String,
            #[serde(flatten)]
            stats: &'a analysis::TraceStats,
        }
        serde_json::to_writer_pretty(&mut out, &Out { trace: a.input.trace.display().to_string(), stats: &s })?;
        writeln!(out)?;
    } else {
        writeln!(out, "trace             {}", a.input.trace.display())?;
        write!(out, "{s}")?;
    }
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------------------------------------------
// gen

/// Options of `blockwell trace gen`.
#[derive(clap::Args, Debug)]
pub struct GenArgs {
    /// The workload: uniform, zipf, sequential, loop, scan-hot.
    #[arg(value_name = "WORKLOAD", value_parser = parse_workload)]
    pub workload: Workload,

    /// Where to write the trace (`.gz`/`.zst` compress).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,

    /// Output format (see `blockwell list`).
    #[arg(long, short = 'f', value_name = "FORMAT", default_value = "vscsi")]
    pub format: String,

    /// Number of requests (`10M`, `500k` accepted).
    #[arg(long, value_name = "N", default_value = "1M", value_parser = parse_count)]
    pub requests: u64,

    /// Footprint per volume, in blocks of --block-size (`1M` accepted).
    #[arg(long, value_name = "N", default_value = "100k", value_parser = parse_count)]
    pub blocks: u64,

    /// Block size: the unit of --blocks and of slot alignment.
    #[arg(long, value_name = "BYTES", default_value = "4096")]
    pub block_size: String,

    /// Bytes per request (a multiple of 512).
    #[arg(long, value_name = "BYTES", default_value = "4KiB")]
    pub request_size: String,

    /// Fraction of requests that are writes.
    #[arg(long, value_name = "F", default_value_t = 0.0)]
    pub write_ratio: f64,

    /// Number of volumes; each request picks one uniformly, each has the full footprint.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub volumes: u32,

    /// Zipf exponent (zipf).
    #[arg(long, value_name = "A", default_value_t = 0.9)]
    pub alpha: f64,

    /// Zipf: rank 1 is block 0, rank 2 block 1, … instead of ranks scattered over the footprint.
    #[arg(long)]
    pub no_permute: bool,

    /// scan-hot: probability that a request goes to the hot set.
    #[arg(long, value_name = "P", default_value_t = 0.5)]
    pub hot_fraction: f64,

    /// scan-hot: hot-set size in blocks [default: a tenth of --blocks].
    #[arg(long, value_name = "N", value_parser = parse_count)]
    pub hot_blocks: Option<u64>,

    /// sequential: requests per sequential run.
    #[arg(long, value_name = "N", default_value_t = 64)]
    pub run_length: u64,

    /// Random seed.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,

    /// Time between requests, in microseconds.
    #[arg(long, value_name = "US", default_value_t = 100)]
    pub interval_us: u64,

    /// Bytes per object id for object-id formats (oracle, plain).
    #[arg(long, value_name = "BYTES", default_value = "4096")]
    pub object_size: String,
}

fn parse_workload(s: &str) -> Result<Workload, String> {
    Workload::from_name(s).map_err(|e| e.to_string())
}

/// `1000`, `10k`, `10M`, `1G`, `1_000_000`.
fn parse_count(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let (num, mult) = match t.char_indices().last() {
        Some((i, 'k' | 'K')) => (&t[..i], 1_000),
        Some((i, 'm' | 'M')) => (&t[..i], 1_000_000),
        Some((i, 'g' | 'G')) => (&t[..i], 1_000_000_000),
        _ => (&t[..], 1),
    };
    let v: f64 = num.parse().map_err(|_| format!("'{s}': expected a count like 1000, 10k or 10M"))?;
    let n = v * mult as f64;
    if !((0.0..1.8e19).contains(&n) && n.fract() == 0.0) {
        return Err(format!("'{s}': not a whole count"));
    }
    Ok(n as u64)
}

fn gen(a: GenArgs) -> anyhow::Result<ExitCode> {
    if a.requests == 0 {
        bail!("--requests 0: a trace needs at least 1 request (every command refuses an empty trace)");
    }
    let format = Format::from_name(&a.format).context("--format")?;
    if a.write_ratio > 0.0 && !format.carries_writes() {
        bail!(
            "--write-ratio {}: the {} format has no operation field, so writes would be written as reads; use a \
             format that records the operation (e.g. csv, vscsi, msr)",
            a.write_ratio,
            format.name()
        );
    }
    let cfg = GenConfig {
        workload: a.workload,
        requests: a.requests,
        blocks: a.blocks,
        block_size: parse_bytes(&a.block_size).context("--block-size")?,
        request_size: parse_bytes(&a.request_size).context("--request-size")?,
        write_ratio: a.write_ratio,
        volumes: a.volumes,
        alpha: a.alpha,
        permute: !a.no_permute,
        hot_fraction: a.hot_fraction,
        hot_blocks: a.hot_blocks,
        run_length: a.run_length,
        seed: a.seed,
        interval_ns: a.interval_us.saturating_mul(1000),
    };
    let object_size = parse_bytes(&a.object_size).context("--object-size")?;
    let mut g = Generator::new(cfg)?;
    let opts = WriterOptions { object_size: Some(object_size), volumes: g.volume_names().to_vec() };
    let mut w = blockwell_trace::create(&a.output, format, &opts)?;
    let mut n = 0u64;
    for r in &mut g {
        w.write(&r)?;
        n += 1;
    }
    w.finish()?;
    eprintln!("blockwell: wrote {n} {} requests to {} ({})", a.workload.name(), a.output.display(), format.name());
    Ok(ExitCode::SUCCESS)
}

// ---------------------------------------------------------------------------------------------------------------
// convert

/// Options of `blockwell trace convert`.
#[derive(clap::Args, Debug)]
pub struct ConvertArgs {
    #[command(flatten)]
    pub input: TraceArgs,

    /// Output format (see `blockwell list`).
    #[arg(long, value_name = "FORMAT")]
    pub to: String,

    /// Where to write (`.gz`/`.zst` compress).
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: PathBuf,

    /// Convert only the read requests (needed to write a trace with writes to lis, oracle or plain, which
    /// have no operation field).
    #[arg(long)]
    pub reads_only: bool,
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

/// Whether `f` names objects (one record per object of `--object-size` bytes) rather than byte ranges.
fn names_objects(f: Format) -> bool {
    matches!(f, Format::Oracle | Format::Plain)
}

/// The object size of a conversion to an object-id format (oracle, plain): `--object-size` when given; else the
/// input's own unit: 512 B pages for lis, its objects for oracle and plain, 4 KiB for byte-addressed formats.
fn object_size_for(a: &ConvertArgs, from: Option<Format>) -> anyhow::Result<u64> {
    Ok(if a.input.read.object_size.is_none() && from == Some(Format::Lis) {
        512
    } else {
        a.input.reader_options()?.object_size()
    })
}

/// How the requests converted align to the object size: without `--object-size`, a trace whose requests are
/// not whole objects is refused (rounding them outward would merge distinct parts of the trace into one object
/// and change every result); with it, they are rounded, and a note says how many.
fn check_alignment(a: &ConvertArgs, size: u64, seen: &Alignment) -> anyhow::Result<()> {
    if seen.odd == 0 {
        return Ok(());
    }
    if a.input.read.object_size.is_none() {
        let unit = seen.unit();
        bail!(
            "--to {}: {} request(s) are not whole {size}-byte objects (the first: {}), so writing {size}-byte \
             object ids would merge distinct parts of the trace into one object and change its results; give \
             --object-size{} (requests are rounded outward to whole objects of the size given)",
            a.to.trim(),
            seen.odd,
            seen.first_odd.as_deref().unwrap_or_default(),
            if unit < size { format!(" {unit} to keep the trace's unit") } else { String::new() },
        );
    }
    eprintln!(
        "blockwell: note: {} request(s) are not whole {size}-byte objects; each is written as the objects that hold it",
        seen.odd
    );
    Ok(())
}

/// The requests' alignment to an object size: how many are not whole objects (offset or length not a multiple
/// of it), the first of those, and the greatest common divisor of every offset and length.
struct Alignment {
    size: u64,
    requests: u64,
    odd: u64,
    first_odd: Option<String>,
    gcd: u64,
}

impl Alignment {
    fn new(size: u64) -> Self {
        Alignment { size: size.max(1), requests: 0, odd: 0, first_odd: None, gcd: 0 }
    }

    fn add(&mut self, q: &blockwell_trace::Request) {
        self.requests += 1;
        self.gcd = gcd(gcd(self.gcd, q.offset), q.len);
        if q.offset % self.size != 0 || q.len % self.size != 0 {
            self.odd += 1;
            if self.first_odd.is_none() {
                self.first_odd = Some(format!("request {}, {} B at byte {}", self.requests, q.len, q.offset));
            }
        }
    }

    /// The largest power of two (up to 1 MiB) dividing every offset and length: the trace's unit.
    fn unit(&self) -> u64 {
        match self.gcd {
            0 => 1 << 20,
            g => (1u64 << g.trailing_zeros()).min(1 << 20),
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn convert(a: ConvertArgs) -> anyhow::Result<ExitCode> {
    let to = Format::from_name(&a.to).context("--to")?;
    if same_file(&a.input.trace, &a.output) {
        bail!("--output {} is the input trace", a.output.display());
    }
    let from = match a.input.format()? {
        Some(f) => Some(f),
        None => blockwell_trace::formats::detect(&a.input.trace).ok(),
    };
    let object_size = object_size_for(&a, from)?;
    // Pass 1: volume names, whether there are writes, and how the requests align to the object size.
    let bar = progress_bar(&a.input.trace, "reading");
    let (volumes, writes, seen) = {
        let mut r = a.input.open()?;
        let mut writes = 0u64;
        let mut seen = Alignment::new(object_size);
        let read = for_each_request(r.as_mut(), bar.as_ref(), |q| {
            writes += u64::from(q.op == Op::Write);
            if !(a.reads_only && q.op == Op::Write) {
                seen.add(q);
            }
            Ok::<(), std::convert::Infallible>(())
        });
        if read.is_err() {
            if let Some(b) = &bar {
                b.finish_and_clear();
            }
        }
        read?;
        (r.volumes().to_vec(), writes, seen)
    };
    if let Some(b) = &bar {
        b.set_message("writing");
        b.set_position(0);
    }
    if writes > 0 && !to.carries_writes() && !a.reads_only {
        if let Some(b) = &bar {
            b.finish_and_clear();
        }
        bail!(
            "--to {}: the {} format has no operation field, so the trace's {writes} write request(s) would be \
             written as reads; pass --reads-only to convert only the reads",
            to.name(),
            to.name()
        );
    }
    if names_objects(to) {
        check_alignment(&a, object_size, &seen).inspect_err(|_| {
            if let Some(b) = &bar {
                b.finish_and_clear();
            }
        })?;
    }
    let opts = WriterOptions { object_size: Some(object_size), volumes };
    let mut r = a.input.open()?;
    let written = blockwell_trace::create(&a.output, to, &opts).map_err(anyhow::Error::from).and_then(|mut w| {
        let n = copy(r.as_mut(), w.as_mut(), a.reads_only, bar.as_ref())?;
        w.finish()?;
        Ok(n)
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let (n, dropped) = written?;
    report_skipped(r.as_ref());
    let dropped = if a.reads_only { format!(", left out {dropped} write request(s)") } else { String::new() };
    let objects = if names_objects(to) {
        format!(" as {object_size}-byte objects (read it with --object-size {object_size})")
    } else {
        String::new()
    };
    eprintln!("blockwell: wrote {n} requests to {} ({}){objects}{dropped}", a.output.display(), to.name());
    Ok(ExitCode::SUCCESS)
}

/// Copies every request (only the reads with `reads_only`); returns (written, writes left out).
fn copy(
    r: &mut dyn TraceReader,
    w: &mut dyn blockwell_trace::TraceWriter,
    reads_only: bool,
    bar: Option<&indicatif::ProgressBar>,
) -> anyhow::Result<(u64, u64)> {
    let (mut n, mut dropped) = (0u64, 0u64);
    for_each_request(r, bar, |q| {
        if reads_only && q.op == Op::Write {
            dropped += 1;
            return Ok(());
        }
        n += 1;
        w.write(q)
    })?;
    Ok((n, dropped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!(parse_count("1000").unwrap(), 1000);
        assert_eq!(parse_count("10k").unwrap(), 10_000);
        assert_eq!(parse_count("10M").unwrap(), 10_000_000);
        assert_eq!(parse_count("1.5M").unwrap(), 1_500_000);
        assert_eq!(parse_count("1_000_000").unwrap(), 1_000_000);
        assert!(parse_count("ten").is_err());
        assert!(parse_count("1.5").is_err());
    }
}
