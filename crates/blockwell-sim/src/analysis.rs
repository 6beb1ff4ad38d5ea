//! Trace summaries: footprint, request sizes, read/write mix, sequentiality, reuse distances, time span.
//!
//! One streaming pass. Memory: one hash-map entry per distinct block (the footprint; with reuse distances, the
//! exact stack-distance structure of [`crate::mrc`], ≈ 40 bytes per block), one counter per distinct request
//! size, and a few words per volume.
//!
//! Definitions:
//! - *footprint*: distinct (volume, block) keys touched, at the block size; bytes = blocks × block size.
//! - *sequential*: a request is sequential when it starts exactly at the byte where the previous request of the
//!   same volume ended; the fraction is over all requests (a volume's first request is never sequential).
//! - *reuse distance*: the LRU stack distance of each block access that is not the block's first (the number
//!   of distinct other blocks accessed since its previous access); a cache of `M` blocks hits it iff it is
//!   below `M`.
//! - request sizes are bucketed by powers of two: bucket `[2^i, 2^(i+1))`, zero-length requests apart.

use crate::mrc::{request_blocks, KeyMap, Mrc, MrcBuilder, MrcConfig, MrcError, Sampling};
use blockwell_core::{BlockKey, Op};
use blockwell_trace::{Request, TraceReader};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// What to compute.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StatsConfig {
    pub block_size: u64,
    /// Compute LRU reuse (stack) distances.
    pub reuse: bool,
}

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig { block_size: 4096, reuse: true }
    }
}

/// Requests and bytes of one kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct OpSummary {
    pub requests: u64,
    pub bytes: u64,
}

/// One power-of-two bucket of request sizes: `lo <= size < hi`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SizeBucket {
    pub lo: u64,
    pub hi: u64,
    pub count: u64,
}

/// Request sizes in bytes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SizeSummary {
    pub min: u64,
    pub max: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub histogram: Vec<SizeBucket>,
}

/// Per-volume figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct VolumeStats {
    pub name: String,
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
    pub footprint_blocks: u64,
    pub sequential: u64,
    pub sequential_fraction: f64,
}

/// LRU stack distances of block re-accesses.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ReuseSummary {
    /// Block accesses.
    pub accesses: u64,
    /// First accesses (cold misses of any cache).
    pub cold: u64,
    /// Re-accesses.
    pub reuses: u64,
    pub mean: f64,
    pub p10: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

/// Time stamps of the trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct TimeSummary {
    pub first_ns: u64,
    pub last_ns: u64,
    pub span_ns: u64,
    /// Requests per second over the span; `None` (JSON `null`) when no time passes (a format without time
    /// stamps), where a rate is undefined.
    pub requests_per_sec: Option<f64>,
}

/// The summary of a trace.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TraceStats {
    pub block_size: u64,
    pub requests: u64,
    pub bytes: u64,
    pub reads: OpSummary,
    pub writes: OpSummary,
    /// Fraction of requests that are reads.
    pub read_fraction: f64,
    /// Fraction of bytes that are read.
    pub read_bytes_fraction: f64,
    pub footprint_blocks: u64,
    pub footprint_bytes: u64,
    pub sizes: SizeSummary,
    pub sequential: u64,
    pub sequential_fraction: f64,
    pub time: TimeSummary,
    pub volumes: usize,
    pub per_volume: Vec<VolumeStats>,
    pub reuse: Option<ReuseSummary>,
}

#[derive(Clone, Debug, Default)]
struct Vol {
    requests: u64,
    reads: u64,
    writes: u64,
    bytes: u64,
    sequential: u64,
    /// End (exclusive) of the previous request.
    prev_end: Option<u64>,
}

/// Accumulates [`TraceStats`] request by request.
#[derive(Clone, Debug)]
pub struct StatsBuilder {
    config: StatsConfig,
    reads: OpSummary,
    writes: OpSummary,
    sizes: BTreeMap<u64, u64>,
    vols: Vec<Vol>,
    first_ns: Option<u64>,
    min_ns: u64,
    max_ns: u64,
    /// Exact stack distances (with `reuse`), which also holds the footprint.
    mrc: Option<MrcBuilder>,
    /// The footprint without `reuse`.
    blocks: KeyMap<()>,
}

impl StatsBuilder {
    pub fn new(config: StatsConfig) -> Result<Self, MrcError> {
        let mrc_config = MrcConfig { block_size: config.block_size, reads_only: false, sampling: Sampling::Exact };
        mrc_config.validate()?;
        Ok(StatsBuilder {
            config,
            reads: OpSummary::default(),
            writes: OpSummary::default(),
            sizes: BTreeMap::new(),
            vols: Vec::new(),
            first_ns: None,
            min_ns: u64::MAX,
            max_ns: 0,
            mrc: if config.reuse { Some(MrcBuilder::new(mrc_config)?) } else { None },
            blocks: KeyMap::default(),
        })
    }

    pub fn request(&mut self, r: &Request) -> Result<(), MrcError> {
        let op = match r.op {
            Op::Read => &mut self.reads,
            Op::Write => &mut self.writes,
        };
        op.requests += 1;
        op.bytes += r.len;
        *self.sizes.entry(r.len).or_default() += 1;
        self.first_ns.get_or_insert(r.time_ns);
        self.min_ns = self.min_ns.min(r.time_ns);
        self.max_ns = self.max_ns.max(r.time_ns);

        let v = r.volume as usize;
        if v >= self.vols.len() {
            self.vols.resize(v + 1, Vol::default());
        }
        let vol = &mut self.vols[v];
        vol.requests += 1;
        vol.bytes += r.len;
        match r.op {
            Op::Read => vol.reads += 1,
            Op::Write => vol.writes += 1,
        }
        if vol.prev_end == Some(r.offset) {
            vol.sequential += 1;
        }
        vol.prev_end = Some(r.offset.saturating_add(r.len));

        match &mut self.mrc {
            Some(m) => m.request(r)?,
            None => {
                let (k0, count) = request_blocks(r, self.config.block_size)?;
                for i in 0..count {
                    self.blocks.insert(k0.raw() + i, ());
                }
            }
        }
        Ok(())
    }

    /// The summary; `names` are the volume names (e.g. [`TraceReader::volumes`]), numbers where missing.
    pub fn finish(self, names: &[String]) -> TraceStats {
        let bs = self.config.block_size;
        let mut per_vol_blocks = vec![0u64; self.vols.len()];
        let mut count_block = |k: BlockKey| {
            if let Some(c) = per_vol_blocks.get_mut(k.volume() as usize) {
                *c += 1;
            }
        };
        match &self.mrc {
            Some(m) => m.tracked_blocks().for_each(&mut count_block),
            None => self.blocks.keys().for_each(|&k| count_block(BlockKey::from_raw(k))),
        }
        let footprint_blocks: u64 = per_vol_blocks.iter().sum();
        let requests = self.reads.requests + self.writes.requests;
        let bytes = self.reads.bytes + self.writes.bytes;
        let frac = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };

        let per_volume: Vec<VolumeStats> = self
            .vols
            .iter()
            .enumerate()
            .filter(|(_, v)| v.requests > 0)
            .map(|(i, v)| VolumeStats {
                name: names.get(i).cloned().unwrap_or_else(|| i.to_string()),
                requests: v.requests,
                reads: v.reads,
                writes: v.writes,
                bytes: v.bytes,
                footprint_blocks: per_vol_blocks[i],
                sequential: v.sequential,
                sequential_fraction: frac(v.sequential, v.requests),
            })
            .collect();
        let sequential = per_volume.iter().map(|v| v.sequential).sum();

        let span_ns = if requests == 0 { 0 } else { self.max_ns - self.min_ns };
        let time = TimeSummary {
            first_ns: self.first_ns.unwrap_or(0),
            last_ns: if requests == 0 { 0 } else { self.max_ns },
            span_ns,
            requests_per_sec: (span_ns > 0).then(|| requests as f64 / (span_ns as f64 / 1e9)),
        };

        let reuse = self.mrc.map(|m| reuse_summary(&m.finish()));
        TraceStats {
            block_size: bs,
            requests,
            bytes,
            reads: self.reads,
            writes: self.writes,
            read_fraction: frac(self.reads.requests, requests),
            read_bytes_fraction: frac(self.reads.bytes, bytes),
            footprint_blocks,
            footprint_bytes: footprint_blocks * bs,
            sizes: size_summary(&self.sizes, requests),
            sequential,
            sequential_fraction: frac(sequential, requests),
            time,
            volumes: per_volume.len(),
            per_volume,
            reuse,
        }
    }
}

fn size_summary(sizes: &BTreeMap<u64, u64>, n: u64) -> SizeSummary {
    if n == 0 {
        return SizeSummary::default();
    }
    let quantile = |q: f64| {
        let target = ((q * n as f64).ceil() as u64).clamp(1, n);
        let mut acc = 0;
        for (&s, &c) in sizes {
            acc += c;
            if acc >= target {
                return s;
            }
        }
        0
    };
    let total: u128 = sizes.iter().map(|(&s, &c)| s as u128 * c as u128).sum();
    let mut histogram: Vec<SizeBucket> = Vec::new();
    for (&s, &c) in sizes {
        let (lo, hi) = if s == 0 {
            (0, 1)
        } else {
            let i = 63 - s.leading_zeros();
            (1u64 << i, if i == 63 { u64::MAX } else { 1u64 << (i + 1) })
        };
        match histogram.last_mut() {
            Some(b) if b.lo == lo => b.count += c,
            _ => histogram.push(SizeBucket { lo, hi, count: c }),
        }
    }
    SizeSummary {
        min: *sizes.keys().next().unwrap_or(&0),
        max: *sizes.keys().next_back().unwrap_or(&0),
        mean: total as f64 / n as f64,
        p50: quantile(0.5),
        p90: quantile(0.9),
        p99: quantile(0.99),
        histogram,
    }
}

fn reuse_summary(m: &Mrc) -> ReuseSummary {
    let q = |x| m.distance_quantile(x).unwrap_or(0);
    ReuseSummary {
        accesses: m.accesses,
        cold: m.cold_misses() as u64,
        reuses: m.reuses() as u64,
        mean: m.mean_distance().unwrap_or(0.0),
        p10: q(0.1),
        p50: q(0.5),
        p90: q(0.9),
        p99: q(0.99),
        max: q(1.0),
    }
}

/// Summarizes a whole trace.
pub fn from_reader(reader: &mut dyn TraceReader, config: StatsConfig) -> Result<TraceStats, MrcError> {
    let mut b = StatsBuilder::new(config)?;
    let mut buf = Vec::with_capacity(4096);
    while reader.read_batch(&mut buf, 4096)? > 0 {
        for r in &buf {
            b.request(r)?;
        }
    }
    Ok(b.finish(reader.volumes()))
}

/// `1234567` → `1.18 MiB`.
pub fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// Nanoseconds as seconds with a unit.
fn human_ns(ns: u64) -> String {
    let s = ns as f64 / 1e9;
    if s >= 3600.0 {
        format!("{s:.0} s ({:.2} h)", s / 3600.0)
    } else {
        format!("{s:.3} s")
    }
}

impl fmt::Display for TraceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = |x: f64| format!("{:.2}%", 100.0 * x);
        writeln!(f, "requests          {} ({})", self.requests, human_bytes(self.bytes))?;
        writeln!(
            f,
            "  reads           {} ({}), {} of requests, {} of bytes",
            self.reads.requests,
            human_bytes(self.reads.bytes),
            pct(self.read_fraction),
            pct(self.read_bytes_fraction)
        )?;
        writeln!(f, "  writes          {} ({})", self.writes.requests, human_bytes(self.writes.bytes))?;
        writeln!(
            f,
            "footprint         {} blocks of {} B ({})",
            self.footprint_blocks,
            self.block_size,
            human_bytes(self.footprint_bytes)
        )?;
        writeln!(f, "volumes           {}", self.volumes)?;
        if let Some(rate) = self.time.requests_per_sec {
            writeln!(
                f,
                "time span         {} (first {} ns, last {} ns), {:.1} requests/s",
                human_ns(self.time.span_ns),
                self.time.first_ns,
                self.time.last_ns,
                rate
            )?;
        } else {
            // No time passes (a format without time stamps reads every request at 0): no rate to give.
            writeln!(
                f,
                "time span         none: every request has time stamp {} ns, so no request rate",
                self.time.first_ns
            )?;
        }
        let s = &self.sizes;
        writeln!(
            f,
            "request size      min {} B, mean {:.1} B, p50 {} B, p90 {} B, p99 {} B, max {} B",
            s.min, s.mean, s.p50, s.p90, s.p99, s.max
        )?;
        for b in &s.histogram {
            let label = if b.lo == 0 { "0 B".to_string() } else { format!("[{}, {})", b.lo, b.hi) };
            let share = b.count as f64 / self.requests.max(1) as f64;
            let bar = "#".repeat((share * 40.0).round() as usize);
            writeln!(f, "  {label:>22}  {:>10}  {:>7}  {bar}", b.count, pct(share))?;
        }
        writeln!(f, "sequential        {} requests ({})", self.sequential, pct(self.sequential_fraction))?;
        if let Some(r) = &self.reuse {
            writeln!(
                f,
                "reuse distance    {} block accesses: {} cold, {} re-accesses ({} of accesses)",
                r.accesses,
                r.cold,
                r.reuses,
                pct(r.reuses as f64 / r.accesses.max(1) as f64)
            )?;
            writeln!(
                f,
                "  (LRU stack, blocks) mean {:.1}, p10 {}, p50 {}, p90 {}, p99 {}, max {}",
                r.mean, r.p10, r.p50, r.p90, r.p99, r.max
            )?;
        }
        if self.per_volume.len() > 1 {
            writeln!(f, "per volume:")?;
            writeln!(
                f,
                "  {:<16} {:>12} {:>8} {:>12} {:>14} {:>11}",
                "volume", "requests", "reads", "bytes", "footprint", "sequential"
            )?;
            for v in &self.per_volume {
                writeln!(
                    f,
                    "  {:<16} {:>12} {:>8} {:>12} {:>14} {:>11}",
                    v.name,
                    v.requests,
                    pct(v.reads as f64 / v.requests.max(1) as f64),
                    human_bytes(v.bytes),
                    v.footprint_blocks,
                    pct(v.sequential_fraction)
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(t: u64, volume: u32, op: Op, offset: u64, len: u64) -> Request {
        Request { time_ns: t, volume, op, offset, len, digest: None }
    }

    /// A hand-made trace with every figure worked out by hand.
    fn hand_trace() -> Vec<Request> {
        vec![
            req(1_000, 0, Op::Read, 0, 4096),      // blocks 0          cold
            req(2_000, 0, Op::Read, 4096, 8192),   // blocks 1, 2       cold, sequential
            req(3_000, 1, Op::Write, 0, 512),      // vol 1 block 0     cold
            req(4_000, 0, Op::Write, 12288, 4096), // block 3           cold, sequential
            req(5_000, 0, Op::Read, 0, 4096),      // block 0           distance 4 (v0 1, 2, v1 0, v0 3)
            req(6_000, 1, Op::Read, 512, 1024),    // vol 1 block 0     distance 2 (v0 3, 0), sequential
            req(11_000, 0, Op::Read, 4096, 0),     // no block          sequential (#5 ended at 4096)
        ]
    }

    #[test]
    fn stats_of_a_hand_made_trace() {
        let mut b = StatsBuilder::new(StatsConfig::default()).unwrap();
        for r in hand_trace() {
            b.request(&r).unwrap();
        }
        let s = b.finish(&["a".into(), "b".into()]);
        assert_eq!(s.requests, 7);
        assert_eq!(s.reads, OpSummary { requests: 5, bytes: 4096 + 8192 + 4096 + 1024 });
        assert_eq!(s.writes, OpSummary { requests: 2, bytes: 512 + 4096 });
        assert_eq!(s.footprint_blocks, 5);
        assert_eq!(s.footprint_bytes, 5 * 4096);
        assert_eq!(s.volumes, 2);
        // Sequential: #2 (0+4096), #4 (4096+8192=12288), #6 (0+512 on vol 1), and #7: vol 0's previous request
        // (#5) ended at 4096.
        assert_eq!(s.sequential, 4);
        assert!((s.sequential_fraction - 4.0 / 7.0).abs() < 1e-12);
        assert_eq!(s.per_volume[0].name, "a");
        assert_eq!((s.per_volume[0].requests, s.per_volume[0].footprint_blocks, s.per_volume[0].sequential), (5, 4, 3));
        assert_eq!((s.per_volume[1].requests, s.per_volume[1].footprint_blocks, s.per_volume[1].sequential), (2, 1, 1));
        assert_eq!((s.sizes.min, s.sizes.max, s.sizes.p50), (0, 8192, 4096));
        assert!((s.sizes.mean - (4096.0 * 3.0 + 8192.0 + 512.0 + 1024.0) / 7.0).abs() < 1e-9);
        let buckets: Vec<(u64, u64)> = s.sizes.histogram.iter().map(|b| (b.lo, b.count)).collect();
        assert_eq!(buckets, vec![(0, 1), (512, 1), (1024, 1), (4096, 3), (8192, 1)]);
        assert_eq!(
            s.time,
            TimeSummary { first_ns: 1_000, last_ns: 11_000, span_ns: 10_000, requests_per_sec: Some(7e5) }
        );
        let r = s.reuse.clone().unwrap();
        assert_eq!((r.accesses, r.cold, r.reuses), (7, 5, 2));
        assert_eq!((r.p10, r.p50, r.max), (2, 2, 4));
        assert!((r.mean - 3.0).abs() < 1e-12);
        let text = s.to_string();
        assert!(text.contains("footprint         5 blocks of 4096 B"), "{text}");
        assert!(text.contains("sequential        4 requests"), "{text}");
    }

    #[test]
    fn footprint_without_reuse_is_the_same() {
        let mut b = StatsBuilder::new(StatsConfig { reuse: false, ..Default::default() }).unwrap();
        for r in hand_trace() {
            b.request(&r).unwrap();
        }
        let s = b.finish(&[]);
        assert_eq!(s.footprint_blocks, 5);
        assert!(s.reuse.is_none());
        assert_eq!(s.per_volume[1].name, "1");
    }

    #[test]
    fn empty_trace_and_json() {
        let s = StatsBuilder::new(StatsConfig::default()).unwrap().finish(&[]);
        assert_eq!(s.requests, 0);
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(j["footprint_blocks"], 0);
        assert!(j["reuse"].is_object());
    }
}
