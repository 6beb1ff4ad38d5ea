//! Deterministic synthetic workloads.
//!
//! A [`Generator`] is an iterator of [`Request`]s (and a [`TraceReader`], so a workload can feed anything that
//! reads traces). The same [`GenConfig`] (seed included) always yields the same requests, on every platform: the
//! random numbers come from xoshiro256** (Blackman & Vigna 2018) seeded through SplitMix64, and nothing else.
//!
//! Addressing. The footprint of a volume is `blocks` blocks of `block_size` bytes. Random workloads (`uniform`,
//! `zipf`, the hot part of `scan-hot`) pick a *slot*: the footprint divided into request-sized, block-aligned
//! pieces of `ceil(request_size / block_size)` blocks, and issue `request_size` bytes at its start. Sequential
//! workloads (`sequential`, `loop`, the scan of `scan-hot`) move a byte cursor by `request_size`, so consecutive
//! requests start exactly where the previous one ended, and wrap at the end of their region.
//!
//! Workloads:
//! - `uniform`: every slot equally likely.
//! - `zipf`: slot of popularity rank `k` (1-based) has probability ∝ `k^-alpha`, sampled exactly in O(1) by
//!   rejection-inversion (Hörmann & Derflinger, "Rejection-inversion to generate variates from monotone discrete
//!   distributions", ACM TOMACS 1996; the formulation of Apache Commons RNG's `RejectionInversionZipfSampler`).
//!   Ranks are scattered over the slots by a seeded bijection (a Feistel network with cycle walking) unless
//!   `permute` is off, in which case rank `k` is slot `k-1`.
//! - `sequential`: sequential runs of `run_length` requests, each from a uniformly random slot.
//! - `loop`: one cyclic scan of the footprint, from block 0.
//! - `scan-hot`: with probability `hot_fraction`, a uniform slot among the first `hot_blocks` blocks (the hot
//!   set); otherwise the next request of a cyclic scan over the rest of the footprint.
//!
//! With several volumes each request picks its volume uniformly; every volume has the same footprint and its own
//! cursor. A request is a write with probability `write_ratio`. Request `i` is stamped `i × interval_ns`.

use blockwell_core::Op;
use blockwell_trace::{BadLines, Request, TraceError, TraceReader};
use serde::{Deserialize, Serialize};

/// Invalid generator settings.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum GenError {
    #[error("unknown workload '{0}' (known: uniform, zipf, sequential, loop, scan-hot)")]
    Workload(String),
    #[error("--blocks must be at least 1")]
    Blocks,
    #[error("--block-size {0} is not a power of two between 512 B and 1 MiB")]
    BlockSize(u64),
    #[error("--request-size {0} is not a positive multiple of 512 B")]
    RequestSize(u64),
    #[error("--write-ratio {0} is not between 0 and 1")]
    WriteRatio(f64),
    #[error("--volumes must be between 1 and 65536")]
    Volumes,
    #[error("--alpha {0} must be a finite number ≥ 0")]
    Alpha(f64),
    #[error("--hot-fraction {0} is not between 0 and 1")]
    HotFraction(f64),
    #[error("--hot-blocks {hot} must be between 1 and --blocks - 1 ({max})")]
    HotBlocks { hot: u64, max: u64 },
    #[error("--run-length must be at least 1")]
    RunLength,
    #[error("the footprint ({blocks} blocks of {block_size} B) does not fit in 2^63 bytes")]
    TooLarge { blocks: u64, block_size: u64 },
}

// ---------------------------------------------------------------------------------------------------------------
// Random numbers

/// SplitMix64 (Steele, Lea & Flood 2014): seeds [`Rng`].
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// xoshiro256** (Blackman & Vigna), seeded by SplitMix64.
#[derive(Clone, Debug)]
pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut sm = SplitMix64(seed);
        Rng { s: [sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()] }
    }

    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let s = &mut self.s;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [0, n) (Lemire's multiply-shift; bias below 2^-64 · n).
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Zipf

/// Zipf over `1..=n` with exponent `s ≥ 0`: rejection-inversion, O(1) per sample, no table.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    sv: f64,
}

impl Zipf {
    pub fn new(n: u64, s: f64) -> Self {
        assert!(n >= 1 && s >= 0.0 && s.is_finite());
        let mut z = Zipf { n: n as f64, s, h_integral_x1: 0.0, h_integral_n: 0.0, sv: 0.0 };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(n as f64 + 0.5);
        z.sv = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    /// A rank in `1..=n`.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_integral_n + rng.next_f64() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.sv || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.s) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// `ln(1+x)/x`, accurate near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x - 1)/x`, accurate near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x))
    }
}

// ---------------------------------------------------------------------------------------------------------------
// A seeded bijection of 0..n

/// A pseudo-random permutation of `0..n` in O(1) memory: a 4-round Feistel network over the smallest even power
/// of two ≥ n, with cycle walking.
#[derive(Clone, Debug)]
pub struct Permutation {
    n: u64,
    half_bits: u32,
    keys: [u64; 4],
}

impl Permutation {
    pub fn new(n: u64, seed: u64) -> Self {
        let bits = 64 - n.saturating_sub(1).leading_zeros();
        let half_bits = bits.div_ceil(2).max(1);
        let mut sm = SplitMix64(seed ^ 0x5eed_0f7e_5700);
        Permutation { n, half_bits, keys: [sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()] }
    }

    /// The image of `x < n`.
    pub fn apply(&self, mut x: u64) -> u64 {
        debug_assert!(x < self.n);
        loop {
            x = self.feistel(x);
            if x < self.n {
                return x;
            }
        }
    }

    fn feistel(&self, x: u64) -> u64 {
        let mask = (1u64 << self.half_bits) - 1;
        let (mut l, mut r) = (x >> self.half_bits, x & mask);
        for k in self.keys {
            let f = SplitMix64(r ^ k).next_u64() & mask;
            (l, r) = (r, l ^ f);
        }
        (l << self.half_bits) | r
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Workloads

/// The workload kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    Uniform,
    Zipf,
    Sequential,
    Loop,
    ScanHot,
}

impl Workload {
    pub const ALL: &'static [Workload] =
        &[Workload::Uniform, Workload::Zipf, Workload::Sequential, Workload::Loop, Workload::ScanHot];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Uniform => "uniform",
            Workload::Zipf => "zipf",
            Workload::Sequential => "sequential",
            Workload::Loop => "loop",
            Workload::ScanHot => "scan-hot",
        }
    }

    pub fn from_name(s: &str) -> Result<Self, GenError> {
        Self::ALL
            .iter()
            .copied()
            .find(|w| w.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| GenError::Workload(s.to_string()))
    }
}

/// Generator settings. See the module doc for what each means.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GenConfig {
    pub workload: Workload,
    /// Requests to generate.
    pub requests: u64,
    /// Footprint per volume, in blocks.
    pub blocks: u64,
    pub block_size: u64,
    /// Bytes per request (a multiple of 512).
    pub request_size: u64,
    /// Probability that a request is a write.
    pub write_ratio: f64,
    pub volumes: u32,
    /// Zipf exponent.
    pub alpha: f64,
    /// Scatter Zipf ranks over the footprint (otherwise rank 1 is slot 0).
    pub permute: bool,
    /// `scan-hot`: probability that a request goes to the hot set.
    pub hot_fraction: f64,
    /// `scan-hot`: hot-set size in blocks (default a tenth of the footprint).
    pub hot_blocks: Option<u64>,
    /// `sequential`: requests per sequential run.
    pub run_length: u64,
    pub seed: u64,
    /// Time between requests.
    pub interval_ns: u64,
}

impl Default for GenConfig {
    fn default() -> Self {
        GenConfig {
            workload: Workload::Uniform,
            requests: 1_000_000,
            blocks: 100_000,
            block_size: 4096,
            request_size: 4096,
            write_ratio: 0.0,
            volumes: 1,
            alpha: 0.9,
            permute: true,
            hot_fraction: 0.5,
            hot_blocks: None,
            run_length: 64,
            seed: 42,
            interval_ns: 100_000,
        }
    }
}

impl GenConfig {
    pub fn validate(&self) -> Result<(), GenError> {
        let bs = self.block_size;
        if !bs.is_power_of_two() || !(512..=1 << 20).contains(&bs) {
            return Err(GenError::BlockSize(bs));
        }
        if self.blocks == 0 {
            return Err(GenError::Blocks);
        }
        if self.blocks.checked_mul(bs).map_or(true, |b| b > 1 << 63) {
            return Err(GenError::TooLarge { blocks: self.blocks, block_size: bs });
        }
        if self.request_size == 0 || self.request_size % 512 != 0 {
            return Err(GenError::RequestSize(self.request_size));
        }
        if !(0.0..=1.0).contains(&self.write_ratio) {
            return Err(GenError::WriteRatio(self.write_ratio));
        }
        if self.volumes == 0 || self.volumes > 65_536 {
            return Err(GenError::Volumes);
        }
        if !(self.alpha >= 0.0 && self.alpha.is_finite()) {
            return Err(GenError::Alpha(self.alpha));
        }
        if !(0.0..=1.0).contains(&self.hot_fraction) {
            return Err(GenError::HotFraction(self.hot_fraction));
        }
        if self.workload == Workload::ScanHot {
            let hot = self.hot_blocks();
            if hot == 0 || hot >= self.blocks {
                return Err(GenError::HotBlocks { hot, max: self.blocks.saturating_sub(1) });
            }
        }
        if self.run_length == 0 {
            return Err(GenError::RunLength);
        }
        Ok(())
    }

    /// Hot-set size of `scan-hot`, in blocks.
    pub fn hot_blocks(&self) -> u64 {
        self.hot_blocks.unwrap_or((self.blocks / 10).max(1))
    }

    /// Blocks per slot: the request size rounded up to whole blocks.
    fn slot_blocks(&self) -> u64 {
        self.request_size.div_ceil(self.block_size).max(1)
    }
}

/// Per-volume sequential state.
#[derive(Clone, Copy, Debug, Default)]
struct Cursor {
    /// Next byte offset (relative to the region start).
    pos: u64,
    /// Requests left in the current run (`sequential`).
    left: u64,
}

/// The workload as an iterator of requests.
#[derive(Clone, Debug)]
pub struct Generator {
    cfg: GenConfig,
    rng: Rng,
    zipf: Option<Zipf>,
    perm: Option<Permutation>,
    cursors: Vec<Cursor>,
    /// Slots in the footprint.
    slots: u64,
    i: u64,
    names: Vec<String>,
    bad: BadLines,
}

impl Generator {
    pub fn new(cfg: GenConfig) -> Result<Self, GenError> {
        cfg.validate()?;
        let slots = (cfg.blocks / cfg.slot_blocks()).max(1);
        let zipf = (cfg.workload == Workload::Zipf).then(|| Zipf::new(slots, cfg.alpha));
        let perm = (cfg.workload == Workload::Zipf && cfg.permute).then(|| Permutation::new(slots, cfg.seed));
        Ok(Generator {
            rng: Rng::new(cfg.seed),
            zipf,
            perm,
            cursors: vec![Cursor::default(); cfg.volumes as usize],
            slots,
            i: 0,
            names: (0..cfg.volumes).map(|v| v.to_string()).collect(),
            bad: BadLines::default(),
            cfg,
        })
    }

    pub fn config(&self) -> &GenConfig {
        &self.cfg
    }

    /// Volume names, `"0"`, `"1"`, ….
    pub fn volume_names(&self) -> &[String] {
        &self.names
    }

    fn slot_offset(&self, slot: u64) -> u64 {
        slot * self.cfg.slot_blocks() * self.cfg.block_size
    }

    /// Next offset of a cyclic scan over `region_len` bytes, advancing `cur`.
    fn scan(cur: &mut Cursor, region_len: u64, request_size: u64) -> u64 {
        if cur.pos + request_size > region_len {
            cur.pos = 0;
        }
        let at = cur.pos;
        cur.pos += request_size;
        at
    }

    fn offset(&mut self, volume: usize) -> u64 {
        let cfg = &self.cfg;
        let bs = cfg.block_size;
        let rs = cfg.request_size;
        match cfg.workload {
            Workload::Uniform => {
                let s = self.rng.below(self.slots);
                self.slot_offset(s)
            }
            Workload::Zipf => {
                let rank = self.zipf.as_ref().expect("zipf sampler").sample(&mut self.rng) - 1;
                let s = match &self.perm {
                    Some(p) => p.apply(rank),
                    None => rank,
                };
                self.slot_offset(s)
            }
            Workload::Sequential => {
                let region = cfg.blocks * bs;
                let run = cfg.run_length;
                let cur = &mut self.cursors[volume];
                if cur.left == 0 {
                    cur.left = run;
                    cur.pos = self.rng.below(self.slots) * cfg.slot_blocks() * bs;
                }
                cur.left -= 1;
                Self::scan(cur, region, rs)
            }
            Workload::Loop => Self::scan(&mut self.cursors[volume], cfg.blocks * bs, rs),
            Workload::ScanHot => {
                let hot = cfg.hot_blocks();
                if self.rng.next_f64() < cfg.hot_fraction {
                    let hot_slots = (hot / cfg.slot_blocks()).max(1);
                    let s = self.rng.below(hot_slots);
                    self.slot_offset(s)
                } else {
                    let start = hot * bs;
                    start + Self::scan(&mut self.cursors[volume], (cfg.blocks - hot) * bs, rs)
                }
            }
        }
    }
}

impl Iterator for Generator {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.i >= self.cfg.requests {
            return None;
        }
        let volume = if self.cfg.volumes > 1 { self.rng.below(self.cfg.volumes as u64) as u32 } else { 0 };
        let w = self.cfg.write_ratio;
        let op = if w >= 1.0 || (w > 0.0 && self.rng.next_f64() < w) { Op::Write } else { Op::Read };
        let offset = self.offset(volume as usize);
        let r = Request {
            time_ns: self.i.saturating_mul(self.cfg.interval_ns),
            volume,
            op,
            offset,
            len: self.cfg.request_size,
            digest: None,
        };
        self.i += 1;
        Some(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = (self.cfg.requests - self.i) as usize;
        (left, Some(left))
    }
}

impl TraceReader for Generator {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        Ok(self.next())
    }

    fn volumes(&self) -> &[String] {
        &self.names
    }

    fn skipped(&self) -> &BadLines {
        &self.bad
    }

    fn bytes_read(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn gen(cfg: GenConfig) -> Vec<Request> {
        Generator::new(cfg).unwrap().collect()
    }

    #[test]
    fn xoshiro_matches_reference_output() {
        // Reference: xoshiro256** with state {1, 2, 3, 4} (Vigna's xoshiro256starstar.c).
        let mut r = Rng { s: [1, 2, 3, 4] };
        let got: Vec<u64> = (0..4).map(|_| r.next_u64()).collect();
        assert_eq!(got, vec![11520, 0, 1509978240, 1215971899390074240]);
        // SplitMix64 from 0 (Vigna's splitmix64.c).
        assert_eq!(SplitMix64(0).next_u64(), 0xe220_a839_7b1d_cdaf);
    }

    #[test]
    fn same_seed_same_requests_other_seed_differs() {
        for &w in Workload::ALL {
            let cfg = GenConfig {
                workload: w,
                requests: 5000,
                blocks: 1000,
                write_ratio: 0.3,
                volumes: 3,
                ..Default::default()
            };
            assert_eq!(gen(cfg.clone()), gen(cfg.clone()), "{w:?}");
            let other = gen(GenConfig { seed: 7, ..cfg.clone() });
            assert_ne!(gen(cfg), other, "{w:?}");
        }
    }

    #[test]
    fn requests_stay_in_the_footprint() {
        for &w in Workload::ALL {
            for rs in [512u64, 4096, 10_240, 65_536] {
                let cfg =
                    GenConfig { workload: w, requests: 3000, blocks: 500, request_size: rs, ..Default::default() };
                for r in gen(cfg) {
                    assert_eq!(r.len, rs);
                    assert!(r.offset + r.len <= 500 * 4096 || rs > 500 * 4096, "{w:?} {r:?}");
                    assert_eq!(r.offset % 512, 0);
                }
            }
        }
    }

    #[test]
    fn write_ratio_is_respected() {
        let cfg = GenConfig { requests: 100_000, write_ratio: 0.3, ..Default::default() };
        let writes = gen(cfg).iter().filter(|r| r.op == Op::Write).count() as f64;
        assert!((writes / 100_000.0 - 0.3).abs() < 0.01, "{writes}");
        let all = GenConfig { requests: 100, write_ratio: 1.0, ..Default::default() };
        assert!(gen(all).iter().all(|r| r.op == Op::Write));
    }

    #[test]
    fn zipf_rank_frequency_slope_is_minus_alpha() {
        for alpha in [0.6, 0.9, 1.2] {
            let cfg = GenConfig {
                workload: Workload::Zipf,
                requests: 500_000,
                blocks: 100_000,
                alpha,
                permute: false,
                ..Default::default()
            };
            let mut freq: HashMap<u64, u64> = HashMap::new();
            for r in gen(cfg) {
                *freq.entry(r.offset / 4096).or_default() += 1;
            }
            // Least squares of ln(count) on ln(rank) over ranks 1..=200 (rank k is block k-1).
            let pts: Vec<(f64, f64)> =
                (1..=200u64).map(|k| ((k as f64).ln(), (*freq.get(&(k - 1)).unwrap_or(&1) as f64).ln())).collect();
            let n = pts.len() as f64;
            let (sx, sy) = pts.iter().fold((0.0, 0.0), |a, p| (a.0 + p.0, a.1 + p.1));
            let (mx, my) = (sx / n, sy / n);
            let cov: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
            let var: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
            let slope = cov / var;
            assert!((slope + alpha).abs() < 0.05, "alpha {alpha}: slope {slope}");
        }
    }

    #[test]
    fn zipf_probabilities_match_exact_pmf() {
        // n = 10: compare the empirical distribution with k^-s / H(n, s).
        let z = Zipf::new(10, 1.0);
        let mut rng = Rng::new(1);
        let mut c = [0u64; 10];
        let n = 200_000;
        for _ in 0..n {
            c[z.sample(&mut rng) as usize - 1] += 1;
        }
        let hn: f64 = (1..=10).map(|k| 1.0 / k as f64).sum();
        for (i, &ci) in c.iter().enumerate() {
            let p = 1.0 / (i + 1) as f64 / hn;
            assert!((ci as f64 / n as f64 - p).abs() < 0.005, "rank {}: {} vs {p}", i + 1, ci as f64 / n as f64);
        }
        // alpha 0 is uniform.
        let u = Zipf::new(4, 0.0);
        let mut c = [0u64; 4];
        for _ in 0..40_000 {
            c[u.sample(&mut rng) as usize - 1] += 1;
        }
        assert!(c.iter().all(|&x| (x as f64 - 10_000.0).abs() < 500.0), "{c:?}");
    }

    #[test]
    fn permutation_is_a_bijection() {
        for n in [1u64, 2, 3, 17, 1000, 4096, 10_007] {
            let p = Permutation::new(n, 42);
            let mut seen = vec![false; n as usize];
            for x in 0..n {
                let y = p.apply(x);
                assert!(y < n && !seen[y as usize], "n {n}");
                seen[y as usize] = true;
            }
        }
        let p = Permutation::new(1000, 42);
        assert!((0..10).any(|x| p.apply(x) != x), "permutes");
    }

    #[test]
    fn loop_and_sequential_are_sequential() {
        let l = gen(GenConfig { workload: Workload::Loop, requests: 25, blocks: 10, ..Default::default() });
        let blocks: Vec<u64> = l.iter().map(|r| r.offset / 4096).collect();
        assert_eq!(&blocks[..12], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]);
        let s = gen(GenConfig {
            workload: Workload::Sequential,
            requests: 64,
            blocks: 1_000_000,
            run_length: 16,
            ..Default::default()
        });
        for run in s.chunks(16) {
            for w in run.windows(2) {
                assert_eq!(w[1].offset, w[0].offset + w[0].len);
            }
        }
        assert_ne!(s[16].offset, s[15].offset + 4096, "a new run starts elsewhere");
    }

    #[test]
    fn scan_hot_mixes_hot_set_and_scan() {
        let cfg = GenConfig {
            workload: Workload::ScanHot,
            requests: 20_000,
            blocks: 10_000,
            hot_blocks: Some(100),
            hot_fraction: 0.25,
            ..Default::default()
        };
        let reqs = gen(cfg);
        let hot = reqs.iter().filter(|r| r.offset / 4096 < 100).count() as f64 / reqs.len() as f64;
        assert!((hot - 0.25).abs() < 0.02, "{hot}");
        let scan: Vec<u64> = reqs.iter().map(|r| r.offset / 4096).filter(|&b| b >= 100).take(5).collect();
        assert_eq!(scan, vec![100, 101, 102, 103, 104]);
    }

    #[test]
    fn volumes_are_spread_and_bad_settings_rejected() {
        let reqs = gen(GenConfig { requests: 9000, volumes: 3, ..Default::default() });
        for v in 0..3 {
            let n = reqs.iter().filter(|r| r.volume == v).count();
            assert!((2700..3300).contains(&n), "{v}: {n}");
        }
        let bad = |c: GenConfig| Generator::new(c).unwrap_err();
        assert_eq!(bad(GenConfig { blocks: 0, ..Default::default() }), GenError::Blocks);
        assert_eq!(bad(GenConfig { request_size: 1000, ..Default::default() }), GenError::RequestSize(1000));
        assert_eq!(bad(GenConfig { write_ratio: 1.5, ..Default::default() }), GenError::WriteRatio(1.5));
        assert_eq!(bad(GenConfig { block_size: 1000, ..Default::default() }), GenError::BlockSize(1000));
        assert!(matches!(
            bad(GenConfig { workload: Workload::ScanHot, blocks: 10, hot_blocks: Some(10), ..Default::default() }),
            GenError::HotBlocks { .. }
        ));
        assert_eq!(Workload::from_name("scan-hot").unwrap(), Workload::ScanHot);
        assert!(Workload::from_name("nope").unwrap_err().to_string().contains("known: uniform"));
    }
}
