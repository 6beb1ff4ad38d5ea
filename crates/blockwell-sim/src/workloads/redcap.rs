//! Seed `000_*`'s five benchmarks: Linux kernel read, IOR read, tac, 4 KiB and 512 KiB strided reads. Every
//! process has its own files (IOR optionally shares one), written by that process while all processes write
//! theirs at the same time. Interpretation and sizes: `docs/workloads.md`.

use super::{
    check_positive, check_procs, check_range, lognormal_sizes, read, read_forward, requests_for, workload, Params, KIB,
    MIB,
};
use crate::gen::Rng;
use crate::workload::{FileInfo, Workload};
use serde::{Deserialize, Serialize};

/// `kernel-read`: each process reads its own copy of a source tree, file by file, directory by directory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KernelReadConfig {
    pub procs: u32,
    /// Files per tree.
    pub files: u64,
    /// Directories per tree (files are split evenly over them, in order).
    pub dirs: u64,
    /// Median file size, KiB.
    pub median_kb: f64,
    /// Log-normal shape (standard deviation of ln size).
    pub sigma: f64,
    /// Largest file, KiB.
    pub max_kb: u64,
    /// Bytes per read call, KiB.
    pub request_kb: u64,
    pub think_us: u64,
    pub seed: u64,
}

impl Default for KernelReadConfig {
    fn default() -> Self {
        KernelReadConfig {
            procs: 4,
            files: 1000,
            dirs: 50,
            median_kb: 8.0,
            sigma: 1.5,
            max_kb: 4096,
            request_kb: 4,
            think_us: 0,
            seed: 42,
        }
    }
}

impl KernelReadConfig {
    fn sizes(&self) -> Vec<u64> {
        let mut rng = Rng::new(self.seed ^ 0x6b65_726e_656c);
        lognormal_sizes(&mut rng, self.files, self.median_kb * KIB as f64, self.sigma, self.max_kb * KIB)
    }
}

impl Params for KernelReadConfig {
    const DOCS: &'static [(&'static str, &'static str)] = &[
        ("procs", "processes, each reading its own copy of the tree (1-32)"),
        ("files", "files per tree"),
        ("dirs", "directories per tree; files split evenly over them in order"),
        ("median_kb", "median file size, KiB (log-normal sizes)"),
        ("sigma", "log-normal shape: standard deviation of ln(size)"),
        ("max_kb", "largest file, KiB"),
        ("request_kb", "bytes per read call, KiB (4-64 makes sense)"),
        ("think_us", "think time before each request, microseconds"),
        ("seed", "seed of the file sizes"),
    ];

    fn check(&self) -> Result<(), (&'static str, String)> {
        check_procs(self.procs)?;
        check_range("files", self.files, 1, 1_000_000)?;
        check_positive("dirs", self.dirs)?;
        if self.dirs > self.files {
            return Err(("dirs", format!("{} is more than files ({})", self.dirs, self.files)));
        }
        if !(self.median_kb > 0.0 && self.median_kb.is_finite()) {
            return Err(("median_kb", format!("{} is not a positive size", self.median_kb)));
        }
        if !(self.sigma >= 0.0 && self.sigma <= 5.0) {
            return Err(("sigma", format!("{} is not between 0 and 5", self.sigma)));
        }
        check_range("max_kb", self.max_kb, 1, 1 << 30)?;
        check_range("request_kb", self.request_kb, 1, 1 << 20)?;
        check_range("think_us", self.think_us, 0, 1 << 40)
    }

    fn requests(&self) -> u64 {
        requests_for(&self.sizes(), self.request_kb * KIB) * self.procs as u64
    }

    fn generate(&self, name: &str) -> Workload {
        let sizes = self.sizes();
        let n = self.files;
        let mut files = Vec::with_capacity((n * self.procs as u64) as usize);
        let mut processes = Vec::with_capacity(self.procs as usize);
        for p in 0..self.procs {
            let mut reqs = Vec::new();
            for (i, &size) in sizes.iter().enumerate() {
                let dir = p as u64 * self.dirs + i as u64 * self.dirs / n;
                let f = files.len() as u32;
                files.push(FileInfo { size, writer: p, dir: dir as u32 });
                read_forward(&mut reqs, f, 0, size, self.request_kb * KIB, self.think_us * 1000);
            }
            processes.push(reqs);
        }
        workload(name, files, processes)
    }
}

/// `ior`: IOR's read phase, file per process or one shared file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IorConfig {
    pub procs: u32,
    /// Data each process reads, MiB (its file, or its block of the shared file).
    pub file_mb: u64,
    /// IOR transfer size, KiB.
    pub request_kb: u64,
    /// One shared file of `procs × file_mb`, process `p` reading block `p`.
    pub shared: bool,
    pub think_us: u64,
}

impl Default for IorConfig {
    fn default() -> Self {
        IorConfig { procs: 4, file_mb: 64, request_kb: 256, shared: false, think_us: 0 }
    }
}

impl Params for IorConfig {
    const DOCS: &'static [(&'static str, &'static str)] = &[
        ("procs", "processes (1-32)"),
        ("file_mb", "data each process reads, MiB (its own file, or its block of the shared file)"),
        ("request_kb", "transfer size, KiB (IOR's default is 256)"),
        ("shared", "one shared file (written by process 0), process p reading its p-th block"),
        ("think_us", "think time before each request, microseconds"),
    ];

    fn check(&self) -> Result<(), (&'static str, String)> {
        check_procs(self.procs)?;
        check_range("file_mb", self.file_mb, 1, 1 << 20)?;
        check_range("request_kb", self.request_kb, 1, 1 << 20)?;
        check_range("think_us", self.think_us, 0, 1 << 40)
    }

    fn requests(&self) -> u64 {
        (self.file_mb * MIB).div_ceil(self.request_kb * KIB) * self.procs as u64
    }

    fn generate(&self, name: &str) -> Workload {
        let (part, req, think) = (self.file_mb * MIB, self.request_kb * KIB, self.think_us * 1000);
        let files = if self.shared {
            vec![FileInfo { size: part * self.procs as u64, writer: 0, dir: 0 }]
        } else {
            (0..self.procs).map(|p| FileInfo { size: part, writer: p, dir: 0 }).collect()
        };
        let processes = (0..self.procs)
            .map(|p| {
                let mut reqs = Vec::new();
                if self.shared {
                    read_forward(&mut reqs, 0, p as u64 * part, (p as u64 + 1) * part, req, think);
                } else {
                    read_forward(&mut reqs, p, 0, part, req, think);
                }
                reqs
            })
            .collect();
        workload(name, files, processes)
    }
}

/// `tac`: a backward read of each process's own file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TacConfig {
    pub procs: u32,
    pub file_mb: u64,
    /// Bytes per read, KiB.
    pub request_kb: u64,
    pub think_us: u64,
}

impl Default for TacConfig {
    fn default() -> Self {
        TacConfig { procs: 4, file_mb: 64, request_kb: 4, think_us: 0 }
    }
}

impl Params for TacConfig {
    const DOCS: &'static [(&'static str, &'static str)] = &[
        ("procs", "processes, each reading its own file backward (1-32)"),
        ("file_mb", "file size, MiB"),
        ("request_kb", "bytes per read, KiB; reads are aligned to it, last piece first"),
        ("think_us", "think time before each request, microseconds"),
    ];

    fn check(&self) -> Result<(), (&'static str, String)> {
        check_procs(self.procs)?;
        check_range("file_mb", self.file_mb, 1, 1 << 20)?;
        check_range("request_kb", self.request_kb, 1, 1 << 20)?;
        check_range("think_us", self.think_us, 0, 1 << 40)
    }

    fn requests(&self) -> u64 {
        (self.file_mb * MIB).div_ceil(self.request_kb * KIB) * self.procs as u64
    }

    fn generate(&self, name: &str) -> Workload {
        let (size, req, think) = (self.file_mb * MIB, self.request_kb * KIB, self.think_us * 1000);
        let files = (0..self.procs).map(|p| FileInfo { size, writer: p, dir: 0 }).collect();
        let processes = (0..self.procs)
            .map(|p| {
                let pieces = size.div_ceil(req);
                (0..pieces)
                    .rev()
                    .map(|k| {
                        let at = k * req;
                        read(p, at, req.min(size - at), think)
                    })
                    .collect()
            })
            .collect();
        workload(name, files, processes)
    }
}

/// `strided-4k`, `strided-512k`: each process reads `request_kb` every `stride_kb` of its own file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StridedConfig {
    pub procs: u32,
    pub file_mb: u64,
    /// Bytes per read, KiB.
    pub request_kb: u64,
    /// Distance between the starts of consecutive reads, KiB (`2 × request_kb`: read one piece, skip one).
    pub stride_kb: u64,
    /// After the strided pass, a second pass reads the skipped pieces (so the whole file is read).
    pub fill: bool,
    pub think_us: u64,
}

impl Default for StridedConfig {
    fn default() -> Self {
        Self::with_request_kb(4)
    }
}

impl StridedConfig {
    /// Defaults with reads of `kb` KiB every `2 × kb` KiB.
    pub fn with_request_kb(kb: u64) -> Self {
        StridedConfig { procs: 4, file_mb: 64, request_kb: kb, stride_kb: 2 * kb, fill: false, think_us: 0 }
    }
}

impl Params for StridedConfig {
    const DOCS: &'static [(&'static str, &'static str)] = &[
        ("procs", "processes, each reading its own file (1-32)"),
        ("file_mb", "file size, MiB"),
        ("request_kb", "bytes per read, KiB"),
        ("stride_kb", "distance between the starts of consecutive reads, KiB (>= request_kb)"),
        ("fill", "after the strided pass, read the skipped pieces in a second strided pass"),
        ("think_us", "think time before each request, microseconds"),
    ];

    fn check(&self) -> Result<(), (&'static str, String)> {
        check_procs(self.procs)?;
        check_range("file_mb", self.file_mb, 1, 1 << 20)?;
        check_range("request_kb", self.request_kb, 1, 1 << 20)?;
        check_range("think_us", self.think_us, 0, 1 << 40)?;
        if self.stride_kb > 1 << 30 {
            return Err(("stride_kb", format!("{} is more than 2^30", self.stride_kb)));
        }
        if self.stride_kb < self.request_kb {
            return Err(("stride_kb", format!("{} is less than request_kb ({})", self.stride_kb, self.request_kb)));
        }
        Ok(())
    }

    fn requests(&self) -> u64 {
        let per_pass = (self.file_mb * MIB).div_ceil(self.stride_kb * KIB);
        let passes = if self.fill { self.stride_kb.div_ceil(self.request_kb) } else { 1 };
        per_pass * passes * self.procs as u64
    }

    fn generate(&self, name: &str) -> Workload {
        let (size, req, stride) = (self.file_mb * MIB, self.request_kb * KIB, self.stride_kb * KIB);
        let think = self.think_us * 1000;
        let files = (0..self.procs).map(|p| FileInfo { size, writer: p, dir: 0 }).collect();
        // Pass j starts at j × request: pass 0 is the strided read, later passes (with `fill`) the gaps.
        let passes = if self.fill { stride.div_ceil(req) } else { 1 };
        let processes = (0..self.procs)
            .map(|p| {
                let mut reqs = Vec::new();
                for j in 0..passes {
                    let mut at = j * req;
                    while at < size {
                        let len = req.min(size - at).min(stride - j * req);
                        reqs.push(read(p, at, len, think));
                        at += stride;
                    }
                }
                reqs
            })
            .collect();
        workload(name, files, processes)
    }
}
