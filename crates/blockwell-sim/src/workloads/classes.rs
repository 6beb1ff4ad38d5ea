//! Seed `001_*`'s workload classes (§5.1): looping sequential (cscope, glimpse, viewperf), random (tpc-h,
//! tpc-r) and concurrent mixes (multi1–3). Interpretation and sizes: `docs/workloads.md`.

use super::{
    check_positive, check_procs, check_range, lognormal_sizes, read, read_forward, requests_for, workload, Params, KIB,
    MIB,
};
use crate::gen::{Permutation, Rng, Zipf};
use crate::workload::{FileInfo, FileRequest, Workload};
use blockwell_core::Op;
use serde::{Deserialize, Serialize};

/// `loop`: every process reads a file set whole, in order, `loops` times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoopConfig {
    pub procs: u32,
    /// Files in the set.
    pub files: u64,
    /// Median file size, KiB (log-normal).
    pub median_kb: f64,
    pub sigma: f64,
    pub max_kb: u64,
    /// Passes over the set.
    pub loops: u64,
    /// Bytes per read, KiB.
    pub request_kb: u64,
    /// All processes loop over one set (written by process 0); otherwise each has its own copy.
    pub shared: bool,
    pub think_us: u64,
    pub seed: u64,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            procs: 1,
            files: 2000,
            median_kb: 8.0,
            sigma: 1.5,
            max_kb: 4096,
            loops: 4,
            request_kb: 8,
            shared: true,
            think_us: 0,
            seed: 42,
        }
    }
}

impl LoopConfig {
    fn sizes(&self) -> Vec<u64> {
        let mut rng = Rng::new(self.seed ^ 0x100b);
        lognormal_sizes(&mut rng, self.files, self.median_kb * KIB as f64, self.sigma, self.max_kb * KIB)
    }
}

impl Params for LoopConfig {
    const DOCS: &'static [(&'static str, &'static str)] = &[
        ("procs", "processes looping over the set (1-32)"),
        ("files", "files in the set"),
        ("median_kb", "median file size, KiB (log-normal sizes)"),
        ("sigma", "log-normal shape: standard deviation of ln(size)"),
        ("max_kb", "largest file, KiB"),
        ("loops", "passes over the set"),
        ("request_kb", "bytes per read, KiB (cscope reads mostly 2 blocks: 8)"),
        ("shared", "all processes loop over one set; otherwise each over its own copy"),
        ("think_us", "think time before each request, microseconds"),
        ("seed", "seed of the file sizes"),
    ];

    fn check(&self) -> Result<(), (&'static str, String)> {
        check_procs(self.procs)?;
        check_range("files", self.files, 1, 1_000_000)?;
        if !(self.median_kb > 0.0 && self.median_kb.is_finite()) {
            return Err(("median_kb", format!("{} is not a positive size", self.median_kb)));
        }
        if !(0.0..=5.0).contains(&self.sigma) {
            return Err(("sigma", format!("{} is not between 0 and 5", self.sigma)));
        }
        check_range("max_kb", self.max_kb, 1, 1 << 30)?;
        check_positive("loops", self.loops)?;
        check_range("request_kb", self.request_kb, 1, 1 << 20)?;
        check_range("think_us", self.think_us, 0, 1 << 40)
    }

    fn requests(&self) -> u64 {
        requests_for(&self.sizes(), self.request_kb * KIB).saturating_mul(self.loops).saturating_mul(self.procs as u64)
    }

    fn generate(&self, name: &str) -> Workload {
        let sizes = self.sizes();
        let copies = if self.shared { 1 } else { self.procs };
        let mut files = Vec::new();
        for c in 0..copies {
            files.extend(sizes.iter().map(|&size| FileInfo { size, writer: c, dir: c }));
        }
        let (req, think) = (self.request_kb * KIB, self.think_us * 1000);
        let processes = (0..self.procs)
            .map(|p| {
                let base = if self.shared { 0 } else { p as usize * sizes.len() };
                let mut reqs = Vec::new();
                for _ in 0..self.loops {
                    for (i, &size) in sizes.iter().enumerate() {
                        read_forward(&mut reqs, (base + i) as u32, 0, size, req, think);
                    }
                }
                reqs
            })
            .collect();
        workload(name, files, processes)
    }
}

/// Popularity of the pieces of a random workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dist {
    /// Every piece equally likely.
    Uniform,
    /// Piece of rank `k` with probability ∝ `k^-alpha`, ranks scattered over the pieces by a seeded permutation.
    Zipf,
}

/// `random`: block-aligned reads at random places in a few large files.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RandomConfig {
    pub procs: u32,
    pub files: u64,
    pub file_mb: u64,
    /// Requests per process.
    pub requests: u64,
    /// Bytes per read (and piece size), KiB.
    pub request_kb: u64,
    pub dist: Dist,
    pub alpha: f64,
    /// Percentage of requests that are writes.
    pub write_pct: f64,
    pub think_us: u64,
    pub seed: u64,
}

impl Default for RandomConfig {
    fn default() -> Self {
        RandomConfig {
            procs: 1,
            files: 8,
            file_mb: 32,
            requests: 20_000,
            request_kb: 4,
            dist: Dist::Uniform,
            alpha: 0.9,
            write_pct: 0.0,
            think_us: 0,
            seed: 42,
        }
    }
}

impl Params for RandomConfig {
    const DOCS: &'static [(&'static str, &'static str)] = &[
        ("procs", "processes, all reading the same files (1-32)"),
        ("files", "data files (written by process 0, one after another)"),
        ("file_mb", "size of each file, MiB"),
        ("requests", "requests per process"),
        ("request_kb", "bytes per request, KiB; requests are aligned to it"),
        ("dist", "uniform or zipf popularity of the request-sized pieces"),
        ("alpha", "Zipf exponent (dist=zipf)"),
        ("write_pct", "percentage of requests that are writes"),
        ("think_us", "think time before each request, microseconds"),
        ("seed", "seed of the request sequence (process p uses a stream derived from it)"),
    ];

    fn check(&self) -> Result<(), (&'static str, String)> {
        check_procs(self.procs)?;
        check_range("files", self.files, 1, 1 << 20)?;
        check_range("file_mb", self.file_mb, 1, 1 << 20)?;
        check_range("request_kb", self.request_kb, 1, 1 << 20)?;
        if self.request_kb * KIB > self.file_mb * MIB {
            return Err(("request_kb", format!("{} KiB is larger than a file", self.request_kb)));
        }
        if !(self.alpha >= 0.0 && self.alpha.is_finite()) {
            return Err(("alpha", format!("{} is not a finite number >= 0", self.alpha)));
        }
        if !(0.0..=100.0).contains(&self.write_pct) {
            return Err(("write_pct", format!("{} is not between 0 and 100", self.write_pct)));
        }
        check_range("think_us", self.think_us, 0, 1 << 40)
    }

    fn requests(&self) -> u64 {
        self.requests.saturating_mul(self.procs as u64)
    }

    fn generate(&self, name: &str) -> Workload {
        let (size, req, think) = (self.file_mb * MIB, self.request_kb * KIB, self.think_us * 1000);
        let files = (0..self.files).map(|_| FileInfo { size, writer: 0, dir: 0 }).collect();
        let per_file = size / req;
        let pieces = per_file * self.files;
        let zipf = (self.dist == Dist::Zipf).then(|| Zipf::new(pieces, self.alpha));
        let perm = Permutation::new(pieces, self.seed);
        let processes = (0..self.procs)
            .map(|p| {
                let mut rng = Rng::new(self.seed ^ (0x7a4d_0000 + p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
                (0..self.requests)
                    .map(|_| {
                        let piece = match &zipf {
                            Some(z) => perm.apply(z.sample(&mut rng) - 1),
                            None => rng.below(pieces),
                        };
                        let write = self.write_pct > 0.0 && rng.next_f64() * 100.0 < self.write_pct;
                        let r = read((piece / per_file) as u32, piece % per_file * req, req, think);
                        FileRequest { op: if write { Op::Write } else { Op::Read }, ..r }
                    })
                    .collect()
            })
            .collect();
        workload(name, files, processes)
    }
}

/// `mix-seq`, `mix-random`: looping processes and random readers running at the same time, on separate files.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MixConfig {
    /// Processes of the looping part (0-32), each looping over its own file set.
    pub loop_procs: u32,
    /// Processes of the random part (0-32), sharing the random files.
    pub random_procs: u32,
    /// Files per looping set.
    pub loop_files: u64,
    pub loops: u64,
    /// Random files and their size.
    pub random_files: u64,
    pub random_file_mb: u64,
    /// Requests per random process.
    pub random_requests: u64,
    pub dist: Dist,
    pub alpha: f64,
    pub think_us: u64,
    pub seed: u64,
}

impl MixConfig {
    /// Mostly sequential, like Butt et al.'s multi1 (cscope + gcc, 70 % sequential references).
    pub fn seq() -> Self {
        MixConfig {
            loop_procs: 2,
            random_procs: 1,
            loop_files: 1000,
            loops: 4,
            random_files: 4,
            random_file_mb: 32,
            random_requests: 4000,
            dist: Dist::Uniform,
            alpha: 0.9,
            think_us: 0,
            seed: 42,
        }
    }

    /// Mostly random, like Butt et al.'s multi3 (glimpse + tpc-h, 16 % sequential references).
    pub fn random() -> Self {
        MixConfig { loop_procs: 1, random_procs: 2, random_files: 8, random_requests: 20_000, ..Self::seq() }
    }

    fn parts(&self) -> (LoopConfig, RandomConfig) {
        let l = LoopConfig {
            procs: self.loop_procs.max(1),
            files: self.loop_files,
            loops: self.loops,
            shared: false,
            think_us: self.think_us,
            seed: self.seed,
            ..LoopConfig::default()
        };
        let r = RandomConfig {
            procs: self.random_procs.max(1),
            files: self.random_files,
            file_mb: self.random_file_mb,
            requests: self.random_requests,
            dist: self.dist,
            alpha: self.alpha,
            think_us: self.think_us,
            seed: self.seed ^ 0x3141_5926,
            ..RandomConfig::default()
        };
        (l, r)
    }
}

impl Default for MixConfig {
    fn default() -> Self {
        Self::seq()
    }
}

impl Params for MixConfig {
    const DOCS: &'static [(&'static str, &'static str)] = &[
        ("loop_procs", "looping processes, each over its own file set (0-32)"),
        ("random_procs", "random readers sharing the random files (0-32)"),
        ("loop_files", "files per looping set (sizes as in `loop`)"),
        ("loops", "passes of each looping process over its set"),
        ("random_files", "random data files"),
        ("random_file_mb", "size of each random file, MiB"),
        ("random_requests", "requests per random reader (4 KiB each)"),
        ("dist", "uniform or zipf popularity of the random pieces"),
        ("alpha", "Zipf exponent (dist=zipf)"),
        ("think_us", "think time before each request, microseconds"),
        ("seed", "seed of file sizes and random offsets"),
    ];

    fn check(&self) -> Result<(), (&'static str, String)> {
        if self.loop_procs > super::MAX_PROCS {
            return Err(("loop_procs", format!("{} is more than {}", self.loop_procs, super::MAX_PROCS)));
        }
        if self.random_procs > super::MAX_PROCS {
            return Err(("random_procs", format!("{} is more than {}", self.random_procs, super::MAX_PROCS)));
        }
        if self.loop_procs + self.random_procs == 0 {
            return Err(("loop_procs", "loop_procs + random_procs must be at least 1".into()));
        }
        let (l, r) = self.parts();
        l.check().map_err(|(p, m)| (if p == "files" { "loop_files" } else { p }, m))?;
        r.check().map_err(|(p, m)| match p {
            "files" => ("random_files", m),
            "file_mb" => ("random_file_mb", m),
            _ => (p, m),
        })
    }

    fn requests(&self) -> u64 {
        let (l, _) = self.parts();
        let lr = if self.loop_procs > 0 { l.requests() / l.procs as u64 * self.loop_procs as u64 } else { 0 };
        lr.saturating_add(self.random_requests.saturating_mul(self.random_procs as u64))
    }

    fn generate(&self, name: &str) -> Workload {
        let (mut l, mut r) = self.parts();
        l.procs = self.loop_procs;
        r.procs = self.random_procs;
        let mut files = Vec::new();
        let mut processes = Vec::new();
        if self.loop_procs > 0 {
            let w = l.generate(name);
            files = w.files;
            processes = w.processes;
        }
        if self.random_procs > 0 {
            let w = r.generate(name);
            // Random files after the looping ones, in their own directory, written by the first random reader.
            let (base, dir) = (files.len() as u32, self.loop_procs);
            files.extend(w.files.into_iter().map(|f| FileInfo { writer: self.loop_procs, dir, ..f }));
            processes.extend(
                w.processes
                    .into_iter()
                    .map(|reqs| reqs.into_iter().map(|q| FileRequest { file: q.file + base, ..q }).collect()),
            );
        }
        workload(name, files, processes)
    }
}
