//! Seed `001_*`'s applications (§5.1, Tables 2 and 3): `cscope`, `glimpse`, `gcc`, `viewperf`, `tpc-h`, `tpc-r`
//! and the concurrent mixes `multi1`–`multi3`, each generated from what the paper says of its access pattern.
//!
//! Every generator takes `scale`: the data size and the number of block references are Table 2's times
//! `scale` (so the number of passes or queries is the paper's), and so is the number of files for the
//! applications with many small files (cscope, glimpse, gcc); viewperf and the TPC benchmarks keep Table 2's
//! file count and scale the file sizes. The paper's cache sizes map proportionally ([`PaperApp::cache_mb`]
//! against [`PaperApp::data_mb`]). What comes from the paper and what is Blockwell's assumption, parameter by
//! parameter: `docs/workloads.md`.

use super::{check_range, read, read_forward, workload, Params, WorkloadKind, KIB, MIB};
use crate::gen::{Permutation, Rng, Zipf};
use crate::workload::{FileInfo, FileRequest, Workload};
use serde::{Deserialize, Serialize};

/// The block the paper's references are counted in (a Linux 2.4 page on x86).
pub const PAPER_BLOCK: u64 = 4096;

/// One row of Butt et al.'s Table 2 (and the cache sizes its figures are read at).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PaperApp {
    pub name: &'static str,
    /// "Num. of references" (block references: Table 5's request counts times their sizes give the text's hit
    /// ratios only if a reference is one block).
    pub references: u64,
    /// "Data size \[MB\]" (taken as MiB).
    pub data_mb: f64,
    /// "Num. of files".
    pub files: u64,
    /// "Seq. refs.": references to consecutive file blocks, %.
    pub consecutive_pct: f64,
    /// Cache sizes (MB) the experiment maps proportionally onto the generated data: cscope's are Figure 3's
    /// (32–256 MB; the text quotes 64 and 128), glimpse's the three the text quotes plus 256; the others are
    /// Blockwell's choice (the figures are not in the seed's text; the paper says its applications "require
    /// cache sizes of up to 1024MB" and that 4 MB holds gcc's headers).
    pub cache_mb: &'static [u64],
}

/// Table 2.
pub const TABLE2: [PaperApp; 9] = [
    PaperApp {
        name: "cscope",
        references: 1_119_161,
        data_mb: 260.0,
        files: 10_635,
        consecutive_pct: 76.0,
        cache_mb: &[32, 64, 128, 256],
    },
    PaperApp {
        name: "glimpse",
        references: 3_102_248,
        data_mb: 669.0,
        files: 43_649,
        consecutive_pct: 74.0,
        cache_mb: &[32, 64, 128, 256],
    },
    PaperApp {
        name: "gcc",
        references: 158_667,
        data_mb: 41.0,
        files: 2098,
        consecutive_pct: 27.0,
        cache_mb: &[1, 2, 4, 8, 16],
    },
    PaperApp {
        name: "viewperf",
        references: 303_123,
        data_mb: 495.0,
        files: 289,
        consecutive_pct: 99.0,
        cache_mb: &[32, 64, 128, 256, 512],
    },
    PaperApp {
        name: "tpc-h",
        references: 13_468_995,
        data_mb: 1187.0,
        files: 49,
        consecutive_pct: 3.0,
        cache_mb: &[64, 128, 256, 512, 1024],
    },
    PaperApp {
        name: "tpc-r",
        references: 9_415_527,
        data_mb: 1087.0,
        files: 49,
        consecutive_pct: 3.0,
        cache_mb: &[64, 128, 256, 512, 1024],
    },
    PaperApp {
        name: "multi1",
        references: 1_278_135,
        data_mb: 297.0,
        files: 12_246,
        consecutive_pct: 70.0,
        cache_mb: &[32, 64, 128, 256],
    },
    PaperApp {
        name: "multi2",
        references: 1_580_908,
        data_mb: 792.0,
        files: 12_514,
        consecutive_pct: 75.0,
        cache_mb: &[64, 128, 256, 512],
    },
    PaperApp {
        name: "multi3",
        references: 16_571_229,
        data_mb: 1855.0,
        files: 43_696,
        consecutive_pct: 16.0,
        cache_mb: &[128, 256, 512, 1024],
    },
];

/// Table 2's row of a generator (`None` for generators that are not one of the paper's applications).
pub fn paper_app(kind: WorkloadKind) -> Option<&'static PaperApp> {
    TABLE2.iter().find(|a| a.name == kind.name())
}

impl PaperApp {
    /// The paper's cache sizes mapped onto a generated workload of `data_bytes` bytes: `mb / data_mb` of it,
    /// in blocks of `block_size` (at least 1).
    pub fn cache_blocks(&self, data_bytes: u64, block_size: u64) -> Vec<u64> {
        self.cache_mb.iter().map(|&mb| self.blocks_for(mb as f64, data_bytes, block_size)).collect()
    }

    /// One paper cache size of `mb` MB mapped onto `data_bytes` of generated data: `mb / data_mb` of it, in
    /// blocks of `block_size` (at least 1).
    pub fn blocks_for(&self, mb: f64, data_bytes: u64, block_size: u64) -> u64 {
        ((mb / self.data_mb * data_bytes as f64) / block_size.max(1) as f64).round().max(1.0) as u64
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Shared pieces

fn check_scale(scale: f64) -> Result<(), (&'static str, String)> {
    if scale > 0.0 && scale <= 4.0 {
        Ok(())
    } else {
        Err(("scale", format!("{scale} is not in (0, 4]")))
    }
}

fn check_pct(name: &'static str, v: f64, lo: f64, hi: f64) -> Result<(), (&'static str, String)> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err((name, format!("{v} is not between {lo} and {hi}")))
    }
}

fn check_sigma(name: &'static str, v: f64) -> Result<(), (&'static str, String)> {
    check_pct(name, v, 0.0, 4.0)
}

fn check_think(think_us: u64) -> Result<(), (&'static str, String)> {
    check_range("think_us", think_us, 0, 1 << 40)
}

/// `n × scale`, rounded, at least `min`.
fn scaled(n: f64, scale: f64, min: u64) -> u64 {
    ((n * scale).round() as u64).max(min)
}

/// Bytes of `mb` paper megabytes (MiB) times `scale`.
fn scaled_bytes(mb: f64, scale: f64) -> u64 {
    (mb * scale * MIB as f64).round() as u64
}

/// Blocks (of [`PAPER_BLOCK`]) of a file of `size` bytes.
fn blocks(size: u64) -> u64 {
    size.div_ceil(PAPER_BLOCK)
}

/// `n` log-normal sizes (shape `sigma`), each clamped to `min..=max`, scaled so that they add up to about
/// `total` bytes (a bisection on the common factor, so that clamped sizes are made up by the others).
fn fill_sizes(rng: &mut Rng, n: u64, total: u64, sigma: f64, min: u64, max: u64) -> Vec<u64> {
    let raw: Vec<f64> = (0..n)
        .map(|_| {
            let u1 = 1.0 - rng.next_f64();
            let u2 = rng.next_f64();
            (sigma * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()).exp()
        })
        .collect();
    let (min, max) = (min.max(1), max.max(min.max(1)));
    let sizes = |k: f64| raw.iter().map(move |&r| ((r * k).round() as u64).clamp(min, max));
    let sum = |k: f64| sizes(k).fold(0u64, u64::saturating_add);
    let (mut lo, mut hi) = (0.0, 1.0);
    while sum(hi) < total && hi < 1e18 {
        hi *= 2.0;
    }
    for _ in 0..64 {
        let mid = (lo + hi) / 2.0;
        if sum(mid) < total {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    sizes(hi).collect()
}

/// Files `0..n` in directories of 64, all written by process `writer`.
/// `queries` queries, each reading file 0 whole in requests of `first_req` bytes, then each other file whole, in
/// requests of `req` bytes, with probability `match_pct` % (cscope's database and the sources that match;
/// glimpse's index and the texts that match).
fn queries_over_matches(
    sizes: &[u64],
    queries: u64,
    first_req: u64,
    req: u64,
    think_ns: u64,
    match_pct: f64,
    rng: &mut Rng,
) -> Vec<FileRequest> {
    let p = match_pct / 100.0;
    let mut reqs = Vec::new();
    for _ in 0..queries {
        read_forward(&mut reqs, 0, 0, sizes[0], first_req, think_ns);
        for (i, &s) in sizes.iter().enumerate().skip(1) {
            if rng.next_f64() < p {
                read_forward(&mut reqs, i as u32, 0, s, req, think_ns);
            }
        }
    }
    reqs
}

fn files_of(sizes: &[u64], writer: u32) -> Vec<FileInfo> {
    sizes.iter().enumerate().map(|(i, &size)| FileInfo { size, writer, dir: (i / 64) as u32 }).collect()
}

/// Whole-file forward reads of `size` bytes in `req`-byte requests: how many.
fn reads_of(size: u64, req: u64) -> u64 {
    size.div_ceil(req.max(1))
}

// ---------------------------------------------------------------------------------------------------------------
// cscope

/// `cscope`: query phases over a source tree and its cross-reference database (Butt et al. §5.1, §5.3.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CscopeConfig {
    /// Fraction of Table 2's data (260 MB), files (10,635) and references (1,119,161).
    pub scale: f64,
    /// Share of the data in the cross-reference database, %.
    pub db_pct: f64,
    /// Share of the source files each query reads, %.
    pub match_pct: f64,
    /// Queries (0: as many as give Table 2's references).
    pub queries: u64,
    /// Log-normal shape of the source file sizes.
    pub sigma: f64,
    pub max_kb: u64,
    pub request_kb: u64,
    pub think_us: u64,
    pub seed: u64,
}

impl Default for CscopeConfig {
    fn default() -> Self {
        CscopeConfig {
            scale: 0.1,
            db_pct: 25.0,
            match_pct: 40.0,
            queries: 0,
            sigma: 1.5,
            max_kb: 1024,
            request_kb: 8,
            think_us: 700,
            seed: 42,
        }
    }
}

impl CscopeConfig {
    const APP: &'static PaperApp = &TABLE2[0];

    /// File 0 is the database, files 1.. the sources.
    fn sizes(&self) -> Vec<u64> {
        let data = scaled_bytes(Self::APP.data_mb, self.scale);
        let files = scaled(Self::APP.files as f64, self.scale, 2);
        let db = ((data as f64 * self.db_pct / 100.0).round() as u64).max(1);
        let mut rng = Rng::new(self.seed ^ 0xc5c0_9e00);
        let mut sizes = vec![db];
        sizes.extend(fill_sizes(&mut rng, files - 1, data.saturating_sub(db), self.sigma, 1, self.max_kb * KIB));
        sizes
    }

    fn queries(&self, sizes: &[u64]) -> u64 {
        if self.queries > 0 {
            return self.queries;
        }
        let src: u64 = sizes[1..].iter().map(|&s| blocks(s)).sum();
        let per_query = blocks(sizes[0]) as f64 + self.match_pct / 100.0 * src as f64;
        let target = Self::APP.references as f64 * self.scale;
        ((target / per_query.max(1.0)).round() as u64).max(1)
    }
}

impl Params for CscopeConfig {
    const DOCS: &'static [(&'static str, &'static str)] = &[
        ("scale", "fraction of Table 2's cscope: 260 MB of data, 10,635 files, 1,119,161 block references"),
        ("db_pct", "share of the data in the cross-reference database (file 0), read whole by every query, %"),
        ("match_pct", "share of the source files each query reads whole (drawn per query), %"),
        ("queries", "queries (0: as many as give Table 2's references at this scale)"),
        ("sigma", "log-normal shape of the source file sizes (their mean is fixed by data and file count)"),
        ("max_kb", "largest source file, KiB"),
        ("request_kb", "bytes per read, KiB (the paper: cscope reads mostly 2 blocks at a time)"),
        ("think_us", "think (CPU) time before each request, microseconds"),
        ("seed", "seed of the file sizes and of each query's files"),
    ];

    fn check(&self) -> Result<(), (&'static str, String)> {
        check_scale(self.scale)?;
        check_pct("db_pct", self.db_pct, 0.0, 90.0)?;
        check_pct("match_pct", self.match_pct, 0.0, 100.0)?;
        check_range("queries", self.queries, 0, 100_000)?;
        check_sigma("sigma", self.sigma)?;
        check_range("max_kb", self.max_kb, 1, 1 << 30)?;
        check_range("request_kb", self.request_kb, 1, 1 << 20)?;
        check_think(self.think_us)
    }

    fn requests(&self) -> u64 {
        let sizes = self.sizes();
        let req = self.request_kb * KIB;
        let all: u64 = sizes.iter().map(|&s| reads_of(s, req)).sum();
        all.saturating_mul(self.queries(&sizes))
    }

    fn generate(&self, name: &str) -> Workload {
        let sizes = self.sizes();
        let req = self.request_kb * KIB;
        let mut rng = Rng::new(self.seed ^ 0xc5c0_9e01);
        let reqs = queries_over_matches(
            &sizes,
            self.queries(&sizes),
            req,
            req,
            self.think_us * 1000,
            self.match_pct,
            &mut rng,
        );
        workload(name, files_of(&sizes, 0), vec![reqs])
    }
}

// ---------------------------------------------------------------------------------------------------------------
// glimpse

/// `glimpse`: query phases over an index and the text files it points to (Butt et al. §5.1, §5.3.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GlimpseConfig {
    /// Fraction of Table 2's data (669 MB), files (43,649) and references (3,102,248).
    pub scale: f64,
    /// Share of the data in the index (file 0), %.
    pub index_pct: f64,
    /// Share of the text files that are one or two blocks long, %.
    pub small_pct: f64,
    /// Share of the text files each query reads, %.
    pub match_pct: f64,
    /// Queries (0: as many as give Table 2's references).
    pub queries: u64,
    /// Log-normal shape of the sizes of the larger text files.
    pub sigma: f64,
    pub max_kb: u64,
    /// Bytes per read of the index, KiB.
    pub chunk_kb: u64,
    /// Bytes per read of a text file, KiB.
    pub request_kb: u64,
    pub think_us: u64,
    pub seed: u64,
}

impl Default for GlimpseConfig {
    fn default() -> Self {
        GlimpseConfig {
            scale: 0.05,
            index_pct: (669.0 - 550.0) / 669.0 * 100.0,
            small_pct: 72.0,
            match_pct: 15.0,
            queries: 0,
            sigma: 1.5,
            max_kb: 16 * 1024,
            chunk_kb: 128,
            request_kb: 4,
            think_us: 700,
            seed: 42,
        }
    }
}

impl GlimpseConfig {
    const APP: &'static PaperApp = &TABLE2[1];

    /// File 0 is the index, files 1.. the text files.
    fn sizes(&self) -> Vec<u64> {
        let data = scaled_bytes(Self::APP.data_mb, self.scale);
        let files = scaled(Self::APP.files as f64, self.scale, 2);
        let index = ((data as f64 * self.index_pct / 100.0).round() as u64).max(1);
        let mut rng = Rng::new(self.seed ^ 0x611e_0000);
        let small: Vec<bool> = (1..files).map(|_| rng.next_f64() * 100.0 < self.small_pct).collect();
        let small_sizes: Vec<u64> = small.iter().map(|&s| if s { 1 + rng.below(2 * PAPER_BLOCK) } else { 0 }).collect();
        let small_total: u64 = small_sizes.iter().sum();
        let n_large = small.iter().filter(|&&s| !s).count() as u64;
        let large_total = data.saturating_sub(index).saturating_sub(small_total);
        let mut large =
            fill_sizes(&mut rng, n_large, large_total, self.sigma, 2 * PAPER_BLOCK + 1, self.max_kb * KIB).into_iter();
        let mut sizes = vec![index];
        sizes.extend(small.iter().zip(small_sizes).map(|(&s, size)| if s { size } else { large.next().unwrap_or(1) }));
        sizes
    }

    fn queries(&self, sizes: &[u64]) -> u64 {
        if self.queries > 0 {
            return self.queries;
        }
        let text: u64 = sizes[1..].iter().map(|&s| blocks(s)).sum();
        let per_query = blocks(sizes[0]) as f64 + self.match_pct / 100.0 * text as f64;
        let target = Self::APP.references as f64 * self.scale;
        ((target / per_query.max(1.0)).round() as u64).max(1)
    }
}

impl Params for GlimpseConfig {
    const DOCS: &'static [(&'static str, &'static str)] = &[
        ("scale", "fraction of Table 2's glimpse: 669 MB of data, 43,649 files, 3,102,248 block references"),
        ("index_pct", "share of the data in the index (file 0), read whole by every query, % (the paper: 550 MB of text in 669 MB)"),
        ("small_pct", "share of the text files one or two blocks long, % (the paper: 72)"),
        ("match_pct", "share of the text files each query reads whole (drawn per query), %"),
        ("queries", "queries (0: as many as give Table 2's references at this scale)"),
        ("sigma", "log-normal shape of the sizes of the text files over two blocks"),
        ("max_kb", "largest text file, KiB"),
        ("chunk_kb", "bytes per read of the index, KiB (the paper: chunks of 25 or more blocks)"),
        ("request_kb", "bytes per read of a text file, KiB"),
        ("think_us", "think (CPU) time before each request, microseconds"),
        ("seed", "seed of the file sizes and of each query's files"),
    ];

    fn check(&self) -> Result<(), (&'static str, String)> {
        check_scale(self.scale)?;
        check_pct("index_pct", self.index_pct, 0.0, 90.0)?;
        check_pct("small_pct", self.small_pct, 0.0, 100.0)?;
        check_pct("match_pct", self.match_pct, 0.0, 100.0)?;
        check_range("queries", self.queries, 0, 100_000)?;
        check_sigma("sigma", self.sigma)?;
        check_range("max_kb", self.max_kb, 9, 1 << 30)?;
        check_range("chunk_kb", self.chunk_kb, 1, 1 << 20)?;
        check_range("request_kb", self.request_kb, 1, 1 << 20)?;
        check_think(self.think_us)
    }

    fn requests(&self) -> u64 {
        let sizes = self.sizes();
        let text: u64 = sizes[1..].iter().map(|&s| reads_of(s, self.request_kb * KIB)).sum();
        (reads_of(sizes[0], self.chunk_kb * KIB) + text).saturating_mul(self.queries(&sizes))
    }

    fn generate(&self, name: &str) -> Workload {
        let sizes = self.sizes();
        let (chunk, req) = (self.chunk_kb * KIB, self.request_kb * KIB);
        let mut rng = Rng::new(self.seed ^ 0x611e_0001);
        let reqs = queries_over_matches(
            &sizes,
            self.queries(&sizes),
            chunk,
            req,
            self.think_us * 1000,
            self.match_pct,
            &mut rng,
        );
        workload(name, files_of(&sizes, 0), vec![reqs])
    }
}

// ---------------------------------------------------------------------------------------------------------------
// gcc

/// `gcc`: compiling a kernel, one source file after another, each including headers from a small shared set
/// (Butt et al. §5.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GccConfig {
    /// Fraction of Table 2's data (41 MB), files (2098) and references (158,667).
    pub scale: f64,
    /// Header data at the paper's scale, MB (the paper: 4 MB of cache holds the headers).
    pub headers_mb: f64,
    /// Share of the files that are headers, %.
    pub header_files_pct: f64,
    /// Log-normal shape of the header sizes.
    pub header_sigma: f64,
    /// Log-normal shape of the source sizes.
    pub sigma: f64,
    /// Zipf exponent of the headers' popularity.
    pub alpha: f64,
    /// Headers included per source file (0: as many as give Table 2's references).
    pub includes: u64,
    pub request_kb: u64,
    pub think_us: u64,
    pub seed: u64,
}

impl Default for GccConfig {
    fn default() -> Self {
        GccConfig {
            scale: 0.5,
            headers_mb: 4.0,
            header_files_pct: 50.0,
            header_sigma: 1.5,
            sigma: 1.0,
            alpha: 0.8,
            includes: 0,
            request_kb: 8,
            think_us: 700,
            seed: 42,
        }
    }
}

impl GccConfig {
    const APP: &'static PaperApp = &TABLE2[2];

    /// Headers first (files `0..h`), then the sources; returns (sizes, h).
    fn sizes(&self) -> (Vec<u64>, usize) {
        let data = scaled_bytes(Self::APP.data_mb, self.scale);
        let files = scaled(Self::APP.files as f64, self.scale, 2);
        let h = ((files as f64 * self.header_files_pct / 100.0).round() as u64).clamp(1, files - 1);
        let hbytes = scaled_bytes(self.headers_mb, self.scale).clamp(1, data.saturating_sub(1).max(1));
        let mut rng = Rng::new(self.seed ^ 0x6cc0_0000);
        let mut sizes = fill_sizes(&mut rng, h, hbytes, self.header_sigma, 1, hbytes);
        sizes.extend(fill_sizes(&mut rng, files - h, data.saturating_sub(hbytes), self.sigma, 1, data));
        (sizes, h as usize)
    }

    fn includes(&self, sizes: &[u64], h: usize) -> u64 {
        if self.includes > 0 {
            return self.includes.min(h as u64);
        }
        let hblocks: u64 = sizes[..h].iter().map(|&s| blocks(s)).sum();
        let sblocks: u64 = sizes[h..].iter().map(|&s| blocks(s)).sum();
        let units = (sizes.len() - h) as f64;
        let per_include = hblocks as f64 / h as f64;
        let target = Self::APP.references as f64 * self.scale - sblocks as f64;
        ((target / (units * per_include)).round().max(0.0) as u64).min(h as u64)
    }
}

impl Params for GccConfig {
    const DOCS: &'static [(&'static str, &'static str)] = &[
        ("scale", "fraction of Table 2's gcc: 41 MB of data, 2098 files, 158,667 block references"),
        ("headers_mb", "header data at the paper's scale, MB (the paper: 4 MB of buffer cache holds the headers)"),
        ("header_files_pct", "share of the files that are headers, %"),
        ("header_sigma", "log-normal shape of the header sizes"),
        ("sigma", "log-normal shape of the source file sizes"),
        ("alpha", "Zipf exponent of the headers' popularity (which headers a source file includes)"),
        ("includes", "distinct headers each source file reads (0: as many as give Table 2's references)"),
        ("request_kb", "bytes per read, KiB"),
        ("think_us", "think (CPU) time before each request, microseconds"),
        ("seed", "seed of the file sizes and of the includes"),
    ];

    fn check(&self) -> Result<(), (&'static str, String)> {
        check_scale(self.scale)?;
        if !(self.headers_mb > 0.0 && self.headers_mb < 41.0) {
            return Err(("headers_mb", format!("{} is not in (0, 41)", self.headers_mb)));
        }
        check_pct("header_files_pct", self.header_files_pct, 1.0, 99.0)?;
        check_sigma("header_sigma", self.header_sigma)?;
        check_sigma("sigma", self.sigma)?;
        check_pct("alpha", self.alpha, 0.0, 5.0)?;
        check_range("includes", self.includes, 0, 1_000_000)?;
        check_range("request_kb", self.request_kb, 1, 1 << 20)?;
        check_think(self.think_us)
    }

    fn requests(&self) -> u64 {
        let (sizes, h) = self.sizes();
        let req = self.request_kb * KIB;
        let hmax = sizes[..h].iter().map(|&s| reads_of(s, req)).max().unwrap_or(0);
        let src: u64 = sizes[h..].iter().map(|&s| reads_of(s, req)).sum();
        let units = (sizes.len() - h) as u64;
        src.saturating_add(units.saturating_mul(self.includes(&sizes, h)).saturating_mul(hmax))
    }

    fn generate(&self, name: &str) -> Workload {
        let (sizes, h) = self.sizes();
        let (req, think) = (self.request_kb * KIB, self.think_us * 1000);
        let includes = self.includes(&sizes, h) as usize;
        let zipf = Zipf::new(h as u64, self.alpha);
        // Popularity ranks scattered over the header files (popular headers are not the first ones on disk).
        let perm = Permutation::new(h as u64, self.seed ^ 0x6cc0_0001);
        let mut rng = Rng::new(self.seed ^ 0x6cc0_0002);
        let mut reqs = Vec::new();
        let mut taken = vec![false; h];
        let mut chosen = Vec::with_capacity(includes);
        for (i, &s) in sizes.iter().enumerate().skip(h) {
            read_forward(&mut reqs, i as u32, 0, s, req, think);
            // Distinct headers by popularity; after many rejections, the most popular ones not yet taken.
            chosen.clear();
            let mut tries = 0;
            while chosen.len() < includes && tries < 64 * includes {
                let hdr = perm.apply(zipf.sample(&mut rng) - 1) as usize;
                tries += 1;
                if !taken[hdr] {
                    taken[hdr] = true;
                    chosen.push(hdr);
                }
            }
            let mut rank = 0;
            while chosen.len() < includes && rank < h as u64 {
                let hdr = perm.apply(rank) as usize;
                rank += 1;
                if !taken[hdr] {
                    taken[hdr] = true;
                    chosen.push(hdr);
                }
            }
            for &hdr in &chosen {
                taken[hdr] = false;
                read_forward(&mut reqs, hdr as u32, 0, sizes[hdr], req, think);
            }
        }
        workload(name, files_of(&sizes, 0), vec![reqs])
    }
}

// ---------------------------------------------------------------------------------------------------------------
// viewperf

/// `viewperf`: a few large data files read whole, in small requests, in loops, by a CPU-bound process (Butt et al.
/// §5.1, §5.3.1).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ViewperfConfig {
    /// Fraction of Table 2's data (495 MB) and references (303,123); the 289 files are kept, smaller.
    pub scale: f64,
    /// Large data files, one per test.
    pub big_files: u64,
    /// Share of the data in the large files, %.
    pub big_pct: f64,
    /// Passes over each test's data file (0: as many as give Table 2's references, some tests one more).
    pub passes: u64,
    pub request_kb: u64,
    pub think_us: u64,
    pub seed: u64,
}

impl Default for ViewperfConfig {
    fn default() -> Self {
        ViewperfConfig { scale: 0.1, big_files: 7, big_pct: 97.0, passes: 0, request_kb: 4, think_us: 2800, seed: 42 }
    }
}

impl ViewperfConfig {
    const APP: &'static PaperApp = &TABLE2[3];

    /// Large files first (`0..big_files`), then the small ones.
    fn sizes(&self) -> Vec<u64> {
        let data = scaled_bytes(Self::APP.data_mb, self.scale);
        let big = (data as f64 * self.big_pct / 100.0).round() as u64;
        let mut rng = Rng::new(self.seed ^ 0x71e0_0000);
        let mut sizes = fill_sizes(&mut rng, self.big_files, big, 0.5, 1, big.max(1));
        sizes.extend(fill_sizes(&mut rng, Self::APP.files - self.big_files, data.saturating_sub(big), 1.0, 1, data));
        sizes
    }

    /// Passes over test `t`'s data file.
    fn passes(&self, sizes: &[u64]) -> Vec<u64> {
        let n = self.big_files as usize;
        if self.passes > 0 {
            return vec![self.passes; n];
        }
        let big: u64 = sizes[..n].iter().map(|&s| blocks(s)).sum();
        let small: u64 = sizes[n..].iter().map(|&s| blocks(s)).sum();
        let p = ((Self::APP.references as f64 * self.scale - small as f64) / big.max(1) as f64).max(1.0);
        let extra = ((p - p.floor()) * n as f64).round() as usize;
        (0..n).map(|t| p.floor() as u64 + u64::from(t < extra)).collect()
    }
}

impl Params for ViewperfConfig {
    const DOCS: &'static [(&'static str, &'static str)] = &[
        ("scale", "fraction of Table 2's viewperf: 495 MB of data and 303,123 block references (289 files, smaller)"),
        ("big_files", "large data files, one per test (the paper: \"a few large files\")"),
        ("big_pct", "share of the data in the large files, %"),
        ("passes", "passes over each test's data file (0: as many as give Table 2's references)"),
        ("request_kb", "bytes per read, KiB"),
        (
            "think_us",
            "think (CPU) time before each request, microseconds (2800: the paper's 850 s over 303,123 references)",
        ),
        ("seed", "seed of the file sizes"),
    ];

    fn check(&self) -> Result<(), (&'static str, String)> {
        check_scale(self.scale)?;
        check_range("big_files", self.big_files, 1, Self::APP.files - 1)?;
        check_pct("big_pct", self.big_pct, 1.0, 99.9)?;
        check_range("passes", self.passes, 0, 10_000)?;
        check_range("request_kb", self.request_kb, 1, 1 << 20)?;
        check_think(self.think_us)
    }

    fn requests(&self) -> u64 {
        let sizes = self.sizes();
        let req = self.request_kb * KIB;
        let n = self.big_files as usize;
        let big: u64 = sizes[..n].iter().zip(self.passes(&sizes)).map(|(&s, p)| reads_of(s, req) * p).sum();
        big + sizes[n..].iter().map(|&s| reads_of(s, req)).sum::<u64>()
    }

    fn generate(&self, name: &str) -> Workload {
        let sizes = self.sizes();
        let (req, think) = (self.request_kb * KIB, self.think_us * 1000);
        let n = self.big_files as usize;
        let mut reqs = Vec::new();
        for (t, passes) in self.passes(&sizes).into_iter().enumerate() {
            // A test reads its share of the small files (round-robin) once, then its data file, `passes` times.
            for (i, &s) in sizes.iter().enumerate().skip(n).filter(|(i, _)| (i - n) % n == t) {
                read_forward(&mut reqs, i as u32, 0, s, req, think);
            }
            for _ in 0..passes {
                read_forward(&mut reqs, t as u32, 0, sizes[t], req, think);
            }
        }
        workload(name, files_of(&sizes, 0), vec![reqs])
    }
}

// ---------------------------------------------------------------------------------------------------------------
// tpc-h, tpc-r

/// `tpc-h`, `tpc-r`: MySQL reading small records at random places of a few large files, each probed block read
/// a few times (Butt et al. §5.1, §5.3.2).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TpcConfig {
    /// Fraction of Table 2's data and references.
    pub scale: f64,
    /// Table 2's data size, MB (tpc-h 1187, tpc-r 1087).
    pub data_mb: f64,
    /// Table 2's references (tpc-h 13,468,995, tpc-r 9,415,527).
    pub references: u64,
    pub files: u64,
    /// File sizes ∝ rank^-size_alpha.
    pub size_alpha: f64,
    /// Reads of each probed block.
    pub reads: u64,
    /// Bytes per read (a record), at record-aligned offsets.
    pub record_bytes: u64,
    /// Concurrent access patterns (probe sequences interleaved read by read).
    pub streams: u64,
    pub think_us: u64,
    pub seed: u64,
}

impl TpcConfig {
    pub fn h() -> Self {
        TpcConfig {
            scale: 0.01,
            data_mb: 1187.0,
            references: 13_468_995,
            files: 49,
            size_alpha: 1.0,
            reads: 2,
            record_bytes: 256,
            streams: 2,
            think_us: 0,
            seed: 42,
        }
    }

    pub fn r() -> Self {
        TpcConfig { data_mb: 1087.0, references: 9_415_527, ..Self::h() }
    }

    fn sizes(&self) -> Vec<u64> {
        let data = scaled_bytes(self.data_mb, self.scale);
        let w: Vec<f64> = (1..=self.files).map(|r| (r as f64).powf(-self.size_alpha)).collect();
        let sum: f64 = w.iter().sum();
        w.iter().map(|x| ((x / sum * data as f64 / PAPER_BLOCK as f64).round() as u64).max(1) * PAPER_BLOCK).collect()
    }

    fn total_reads(&self) -> u64 {
        scaled(self.references as f64, self.scale, 1)
    }
}

impl Default for TpcConfig {
    fn default() -> Self {
        Self::h()
    }
}

impl Params for TpcConfig {
    const DOCS: &'static [(&'static str, &'static str)] = &[
        ("scale", "fraction of Table 2's data and references (the 49 files are kept, smaller)"),
        ("data_mb", "Table 2's data size, MB (tpc-h 1187, tpc-r 1087)"),
        ("references", "Table 2's references (tpc-h 13,468,995, tpc-r 9,415,527); one read per block reference"),
        ("files", "database files (the paper: 49)"),
        ("size_alpha", "file sizes proportional to rank^-size_alpha"),
        ("reads", "reads of each probed block (records at random places in it) before the probe moves elsewhere"),
        ("record_bytes", "bytes per read, at record-aligned offsets (a power of two up to 4096)"),
        ("streams", "concurrent access patterns, interleaved read by read in one process"),
        ("think_us", "think (CPU) time before each request, microseconds"),
        ("seed", "seed of the probes"),
    ];

    fn check(&self) -> Result<(), (&'static str, String)> {
        check_scale(self.scale)?;
        if !(self.data_mb >= 1.0 && self.data_mb <= 1e6) {
            return Err(("data_mb", format!("{} is not between 1 and 1000000", self.data_mb)));
        }
        check_range("references", self.references, 1, 1 << 40)?;
        check_range("files", self.files, 1, 100_000)?;
        check_pct("size_alpha", self.size_alpha, 0.0, 5.0)?;
        check_range("reads", self.reads, 1, 1024)?;
        if !(self.record_bytes.is_power_of_two() && self.record_bytes <= PAPER_BLOCK) {
            return Err(("record_bytes", format!("{} is not a power of two up to 4096", self.record_bytes)));
        }
        check_range("streams", self.streams, 1, 64)?;
        check_think(self.think_us)
    }

    fn requests(&self) -> u64 {
        self.total_reads()
    }

    fn generate(&self, name: &str) -> Workload {
        let sizes = self.sizes();
        let think = self.think_us * 1000;
        let rec = self.record_bytes;
        let slots = PAPER_BLOCK / rec;
        // Blocks chosen uniformly over all files: cumulative block counts.
        let cum: Vec<u64> = sizes
            .iter()
            .scan(0u64, |acc, &s| {
                *acc += blocks(s);
                Some(*acc)
            })
            .collect();
        let total = cum.last().copied().unwrap_or(1);
        let mut rng = Rng::new(self.seed ^ 0x7bc0_0000);
        // Each stream: (file, block, reads left in the block).
        let mut streams = vec![(0u32, 0u64, 0u64); self.streams as usize];
        let target = self.total_reads();
        let mut reqs = Vec::with_capacity(target as usize);
        'all: loop {
            for st in streams.iter_mut() {
                if reqs.len() as u64 >= target {
                    break 'all;
                }
                if st.2 == 0 {
                    let b = rng.below(total);
                    let f = cum.partition_point(|&c| c <= b);
                    let first = b - if f == 0 { 0 } else { cum[f - 1] };
                    *st = (f as u32, first, self.reads);
                }
                let slot = rng.below(slots);
                reqs.push(read(st.0, st.1 * PAPER_BLOCK + slot * rec, rec, think));
                st.2 -= 1;
            }
        }
        workload(name, files_of(&sizes, 0), vec![reqs])
    }
}

// ---------------------------------------------------------------------------------------------------------------
// multi1–3

/// `multi1`–`multi3`: applications running at the same time, one process each, on their own files (Table 3).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MultiConfig {
    /// The applications, `+`-separated (`cscope+gcc`).
    pub apps: String,
    /// The scale of every application.
    pub scale: f64,
    pub seed: u64,
}

impl MultiConfig {
    pub fn multi1() -> Self {
        MultiConfig { apps: "cscope+gcc".into(), scale: 0.1, seed: 42 }
    }

    pub fn multi2() -> Self {
        MultiConfig { apps: "cscope+gcc+viewperf".into(), ..Self::multi1() }
    }

    pub fn multi3() -> Self {
        MultiConfig { apps: "glimpse+tpc-h".into(), scale: 0.01, seed: 42 }
    }

    fn parts(&self) -> Result<Vec<App>, String> {
        let parts: Vec<&str> = self.apps.split('+').map(str::trim).collect();
        if parts.iter().any(|p| p.is_empty()) {
            return Err(format!("'{}' is not a '+'-separated list of applications", self.apps));
        }
        parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let seed = self.seed.wrapping_add(i as u64);
                let scale = self.scale;
                match WorkloadKind::from_name(p) {
                    Ok(WorkloadKind::Cscope) => Ok(App::Cscope(CscopeConfig { scale, seed, ..Default::default() })),
                    Ok(WorkloadKind::Glimpse) => Ok(App::Glimpse(GlimpseConfig { scale, seed, ..Default::default() })),
                    Ok(WorkloadKind::Gcc) => Ok(App::Gcc(GccConfig { scale, seed, ..Default::default() })),
                    Ok(WorkloadKind::Viewperf) => {
                        Ok(App::Viewperf(ViewperfConfig { scale, seed, ..Default::default() }))
                    }
                    Ok(WorkloadKind::TpcH) => Ok(App::Tpc(TpcConfig { scale, seed, ..TpcConfig::h() })),
                    Ok(WorkloadKind::TpcR) => Ok(App::Tpc(TpcConfig { scale, seed, ..TpcConfig::r() })),
                    _ => Err(format!("'{p}' is not one of cscope, glimpse, gcc, viewperf, tpc-h, tpc-r")),
                }
            })
            .collect()
    }
}

/// One application of a mix.
enum App {
    Cscope(CscopeConfig),
    Glimpse(GlimpseConfig),
    Gcc(GccConfig),
    Viewperf(ViewperfConfig),
    Tpc(TpcConfig),
}

impl App {
    fn check(&self) -> Result<(), (&'static str, String)> {
        match self {
            App::Cscope(c) => c.check(),
            App::Glimpse(c) => c.check(),
            App::Gcc(c) => c.check(),
            App::Viewperf(c) => c.check(),
            App::Tpc(c) => c.check(),
        }
    }

    fn requests(&self) -> u64 {
        match self {
            App::Cscope(c) => c.requests(),
            App::Glimpse(c) => c.requests(),
            App::Gcc(c) => c.requests(),
            App::Viewperf(c) => c.requests(),
            App::Tpc(c) => c.requests(),
        }
    }

    fn generate(&self, name: &str) -> Workload {
        match self {
            App::Cscope(c) => c.generate(name),
            App::Glimpse(c) => c.generate(name),
            App::Gcc(c) => c.generate(name),
            App::Viewperf(c) => c.generate(name),
            App::Tpc(c) => c.generate(name),
        }
    }
}

impl Default for MultiConfig {
    fn default() -> Self {
        Self::multi1()
    }
}

impl Params for MultiConfig {
    const DOCS: &'static [(&'static str, &'static str)] = &[
        ("apps", "the applications, '+'-separated, one process each (multi1: cscope+gcc)"),
        ("scale", "the scale of every application (see each one's parameter)"),
        ("seed", "seed of the first application; the others use seed+1, seed+2, ..."),
    ];

    fn check(&self) -> Result<(), (&'static str, String)> {
        check_scale(self.scale)?;
        let parts = self.parts().map_err(|m| ("apps", m))?;
        if parts.len() > super::MAX_PROCS as usize {
            return Err(("apps", format!("more than {} applications", super::MAX_PROCS)));
        }
        parts.iter().try_for_each(App::check)
    }

    fn requests(&self) -> u64 {
        self.parts().map_or(0, |p| p.iter().map(App::requests).fold(0, u64::saturating_add))
    }

    fn generate(&self, name: &str) -> Workload {
        let mut files: Vec<FileInfo> = Vec::new();
        let mut processes: Vec<Vec<FileRequest>> = Vec::new();
        for app in self.parts().unwrap_or_default() {
            let w = app.generate(name);
            let (base, writer) = (files.len() as u32, processes.len() as u32);
            let dir0 = files.iter().map(|f| f.dir + 1).max().unwrap_or(0);
            files.extend(w.files.into_iter().map(|f| FileInfo { writer, dir: dir0 + f.dir, ..f }));
            processes.extend(
                w.processes
                    .into_iter()
                    .map(|reqs| reqs.into_iter().map(|q| FileRequest { file: q.file + base, ..q }).collect()),
            );
        }
        workload(name, files, processes)
    }
}
