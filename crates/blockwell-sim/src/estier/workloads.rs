//! Page-level workloads for the extended-storage hierarchy: generated PostMark-like and Bonnie-like streams of
//! [`EsOp`]s, deterministic for a given configuration (seed included; random numbers from [`crate::gen::Rng`]).
//!
//! Files occupy pages of one logical page space, allocated in order as they are written (page `p` is at byte
//! `p × 4096` of the disk), never reused; a file's appended pages are allocated when appended, so they may be
//! far from its first pages, as on a filling file system. Only file data pages are modelled: no metadata, no
//! CPU time (seed 002's ESDC holds only page-cache pages; file-system metadata lives in the buffer cache).
//!
//! **PostMark** ([`PostmarkConfig`], Katcher 1997, as seed 002 §V-B runs it): create `files` files of sizes
//! uniform in `[min_size, max_size]` bytes (written whole), then `transactions` transactions, each a read or an
//! append (`read_bias` in 10 is a read) followed by a create or a delete (`create_bias` in 10 is a create), then
//! delete every file left. A read reads the whole file; an append adds a size uniform in `[min_size, max_size]`
//! bytes (our reading of PostMark 1.5; the paper does not say), reading the file's last page first when it is
//! partly filled; a delete drops the file's pages. The whole run is measured (PostMark reports throughput over
//! the run).
//!
//! | parameter | default | source |
//! |---|---|---|
//! | `files` | 100000 | seed 002: "100,000 transactions on 100,000 files" |
//! | `transactions` | 100000 | seed 002 |
//! | `min_size`, `max_size` | 500, 15000 | seed 002: "sizes ranging from 500 B to 15,000 B" (working set just over 1 GB) |
//! | `read_bias`, `create_bias` | 5, 5 | PostMark defaults |
//! | `seed` | 1 | |
//!
//! **Bonnie** ([`BonnieConfig`], Bray 1996, seed 002 §V-C): one file of `file_mb` MiB, written then read
//! sequentially (Bonnie's block write and block read phases, not measured: they leave the tier warm as they
//! would), then the measured random-seek phase: `seeks` reads of a uniformly random `chunk_kib` chunk, of
//! which a fraction `write_fraction` is dirtied and written back (Bonnie: "in 10% of cases").
//!
//! | parameter | default | source |
//! |---|---|---|
//! | `file_mb` | 1024 | seed 002: "random seek rate on a 1-GB file" |
//! | `seeks` | 4000 | Bonnie's total number of seeks |
//! | `chunk_kib` | 8 | Bonnie's chunk (8 KiB) |
//! | `write_fraction` | 0.1 | Bonnie: 10% of seeks write the chunk back |
//! | `seed` | 1 | |

use super::{EsError, EsOp};
use crate::gen::Rng;
use serde::Serialize;

/// Page size of the generated workloads.
pub const PAGE: u64 = 4096;

/// A page-level workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EsWorkload {
    pub name: String,
    pub ops: Vec<EsOp>,
    /// Distinct pages ever used.
    pub pages: u64,
    /// Most pages live (written and not deleted) at once: a tier this big never evicts.
    pub working_set: u64,
}

impl EsWorkload {
    /// Builds `postmark` or `bonnie` with default parameters scaled by `scale` (files and transactions, or the
    /// file size and seeks, multiplied by `scale`, at least 1).
    pub fn named(name: &str, scale: f64, seed: u64) -> Result<EsWorkload, EsError> {
        if !(scale.is_finite() && scale > 0.0) {
            return Err(EsError::Invalid(format!("scale must be > 0 (is {scale})")));
        }
        let sc = |n: u64| ((n as f64 * scale).round() as u64).max(1);
        match name.trim().to_ascii_lowercase().as_str() {
            "postmark" => {
                let d = PostmarkConfig::default();
                PostmarkConfig { files: sc(d.files), transactions: sc(d.transactions), seed, ..d }.generate()
            }
            "bonnie" => {
                let d = BonnieConfig::default();
                BonnieConfig { file_mb: sc(d.file_mb), seeks: sc(d.seeks), seed, ..d }.generate()
            }
            other => Err(EsError::Invalid(format!("unknown workload '{other}' (known: postmark, bonnie)"))),
        }
    }
}

/// PostMark-like workload (see the module doc).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PostmarkConfig {
    pub files: u64,
    pub transactions: u64,
    pub min_size: u64,
    pub max_size: u64,
    pub read_bias: u32,
    pub create_bias: u32,
    pub seed: u64,
}

impl Default for PostmarkConfig {
    fn default() -> Self {
        PostmarkConfig {
            files: 100_000,
            transactions: 100_000,
            min_size: 500,
            max_size: 15_000,
            read_bias: 5,
            create_bias: 5,
            seed: 1,
        }
    }
}

struct File {
    pages: Vec<u64>,
    size: u64,
}

struct Gen {
    rng: Rng,
    next_page: u64,
    live: u64,
    peak: u64,
    ops: Vec<EsOp>,
}

impl Gen {
    /// Appends `bytes` to `f`: reads a partly filled last page first, then writes the pages touched.
    fn append(&mut self, f: &mut File, bytes: u64) {
        let end = f.size + bytes;
        let first = f.size / PAGE;
        if f.size % PAGE != 0 {
            if let Some(&p) = f.pages.last() {
                self.ops.push(EsOp::Read(p));
            }
        }
        for i in first..end.div_ceil(PAGE) {
            let p = match f.pages.get(i as usize) {
                Some(&p) => p,
                None => {
                    let p = self.next_page;
                    self.next_page += 1;
                    self.live += 1;
                    self.peak = self.peak.max(self.live);
                    f.pages.push(p);
                    p
                }
            };
            self.ops.push(EsOp::Write(p));
        }
        f.size = end;
    }

    fn size(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.rng.below(hi - lo + 1)
    }
}

impl PostmarkConfig {
    fn check(&self) -> Result<(), EsError> {
        let bad = |m: String| Err(EsError::Invalid(format!("postmark: {m}")));
        if self.files == 0 {
            return bad("files must be at least 1".into());
        }
        if self.min_size == 0 || self.min_size > self.max_size {
            return bad(format!("need 1 <= min_size <= max_size (are {}, {})", self.min_size, self.max_size));
        }
        if self.max_size > 1 << 30 {
            return bad("max_size must be at most 1 GiB".into());
        }
        if self.read_bias > 10 || self.create_bias > 10 {
            return bad("read_bias and create_bias are out of 10".into());
        }
        let est = (self.files + 2 * self.transactions).saturating_mul(self.max_size.div_ceil(PAGE) + 1);
        if est > 200_000_000 {
            return bad(format!("about {est} operations is too many; lower files or transactions"));
        }
        Ok(())
    }

    pub fn generate(&self) -> Result<EsWorkload, EsError> {
        self.check()?;
        let mut g = Gen { rng: Rng::new(self.seed), next_page: 0, live: 0, peak: 0, ops: Vec::new() };
        let mut files: Vec<File> = Vec::with_capacity(self.files as usize);
        for _ in 0..self.files {
            let mut f = File { pages: Vec::new(), size: 0 };
            let s = g.size(self.min_size, self.max_size);
            g.append(&mut f, s);
            files.push(f);
        }
        for _ in 0..self.transactions {
            if !files.is_empty() {
                let i = g.rng.below(files.len() as u64) as usize;
                if g.rng.below(10) < u64::from(self.read_bias) {
                    g.ops.extend(files[i].pages.iter().map(|&p| EsOp::Read(p)));
                } else {
                    let s = g.size(self.min_size, self.max_size);
                    let mut f = std::mem::replace(&mut files[i], File { pages: Vec::new(), size: 0 });
                    g.append(&mut f, s);
                    files[i] = f;
                }
            }
            if g.rng.below(10) < u64::from(self.create_bias) || files.is_empty() {
                let mut f = File { pages: Vec::new(), size: 0 };
                let s = g.size(self.min_size, self.max_size);
                g.append(&mut f, s);
                files.push(f);
            } else {
                let i = g.rng.below(files.len() as u64) as usize;
                let f = files.swap_remove(i);
                g.live -= f.pages.len() as u64;
                g.ops.extend(f.pages.iter().map(|&p| EsOp::Delete(p)));
            }
        }
        for f in files {
            g.ops.extend(f.pages.iter().map(|&p| EsOp::Delete(p)));
        }
        Ok(EsWorkload { name: "postmark".into(), ops: g.ops, pages: g.next_page, working_set: g.peak })
    }
}

/// Bonnie-like random-seek workload (see the module doc).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BonnieConfig {
    pub file_mb: u64,
    pub seeks: u64,
    pub chunk_kib: u64,
    pub write_fraction: f64,
    pub seed: u64,
}

impl Default for BonnieConfig {
    fn default() -> Self {
        BonnieConfig { file_mb: 1024, seeks: 4000, chunk_kib: 8, write_fraction: 0.1, seed: 1 }
    }
}

impl BonnieConfig {
    pub fn generate(&self) -> Result<EsWorkload, EsError> {
        let bad = |m: &str| Err(EsError::Invalid(format!("bonnie: {m}")));
        if self.file_mb == 0 || self.file_mb > 1 << 20 {
            return bad("file_mb must be between 1 and 1048576");
        }
        if self.chunk_kib == 0 || self.chunk_kib * 1024 % PAGE != 0 || self.chunk_kib > self.file_mb * 1024 {
            return bad("chunk_kib must be a positive multiple of 4 no larger than the file");
        }
        if !(0.0..=1.0).contains(&self.write_fraction) {
            return bad("write_fraction must be between 0 and 1");
        }
        if self.seeks > 50_000_000 {
            return bad("seeks must be at most 50000000");
        }
        let pages = self.file_mb * 1024 * 1024 / PAGE;
        let per_chunk = self.chunk_kib * 1024 / PAGE;
        let chunks = pages / per_chunk;
        let mut rng = Rng::new(self.seed);
        let mut ops = Vec::with_capacity((2 * pages + 3 * self.seeks * per_chunk + 1) as usize);
        ops.extend((0..pages).map(EsOp::Write));
        ops.extend((0..pages).map(EsOp::Read));
        ops.push(EsOp::Mark);
        for _ in 0..self.seeks {
            let c = rng.below(chunks);
            let first = c * per_chunk;
            ops.extend((first..first + per_chunk).map(EsOp::Read));
            if rng.next_f64() < self.write_fraction {
                ops.extend((first..first + per_chunk).map(EsOp::Write));
            }
        }
        Ok(EsWorkload { name: "bonnie".into(), ops, pages, working_set: pages })
    }
}
