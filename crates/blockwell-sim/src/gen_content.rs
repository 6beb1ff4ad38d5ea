//! Synthetic traces with content: block addresses from [`crate::gen`] plus a content digest per request, for
//! content-based caching (seed `003_*`).
//!
//! Every request is one block (`request_size` = `block_size`). The device starts with an *initial image*: the
//! content of block `b` of volume `v` is a deterministic function of the seed, `v` and `b`:
//! - with probability `cross_volume` (decided per block number) the block belongs to the *shared image* and has
//!   the same content on every volume (the paper's workstations were copies of one installed disk);
//! - otherwise its content is drawn as a write's is, below, from the block's own hash.
//!
//! A write's new content is: the address's current content with probability `rewrite_ratio` (a *silent write*
//! if cached — the paper's "repeated writes"), else the zero block with probability `zero_fraction`, else one of
//! `pool` popular contents with probability `dup_ratio` (duplicates: the same content at several addresses),
//! else a fresh content never seen before. A read returns the address's current content. So `dup_ratio`,
//! `zero_fraction` and `cross_volume` all 0 (and `rewrite_ratio` 0) give a trace with no duplicate content.
//!
//! Traces generated one volume at a time (own address seed, one `image_seed`, distinct `volume_base`) and merged
//! by time model clones of one disk used by different clients.
//!
//! Determinism: the same [`ContentGenConfig`] always yields the same requests (xoshiro256** from the seed, and
//! SplitMix64 hashes for the initial image). Memory: one map entry (a 16-byte key and a 16-byte digest, plus the
//! hash table's overhead) per address written.

use crate::gen::{GenConfig, GenError, Generator, Rng, SplitMix64};
use blockwell_core::Op;
use blockwell_trace::{BadLines, Request, TraceError, TraceReader};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// The digest standing for the all-zero block.
pub const ZERO_DIGEST: u128 = 0x5a5a_0000_0000_0000_0000_0000_0000_0001;

/// Content settings on top of an address workload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContentGenConfig {
    /// Addresses, operations, volumes and seed (`request_size` must equal `block_size`).
    pub addresses: GenConfig,
    /// Probability that new content is one of `pool` popular contents.
    pub dup_ratio: f64,
    /// Probability that new content is the zero block.
    pub zero_fraction: f64,
    /// Fraction of block numbers whose initial content is the same on every volume.
    pub cross_volume: f64,
    /// Probability that a write rewrites the address's current content.
    pub rewrite_ratio: f64,
    /// Number of popular contents duplicates are drawn from.
    pub pool: u64,
    /// Seed of the initial image and of the popular contents (default: the address seed). Traces generated
    /// separately with different address seeds and one image seed are clones of one disk.
    pub image_seed: Option<u64>,
    /// Volume `v` of this generator is volume `v + volume_base` of the disk image (so that traces generated
    /// one volume at a time and merged have distinct private contents).
    pub volume_base: u32,
}

impl Default for ContentGenConfig {
    fn default() -> Self {
        ContentGenConfig {
            addresses: GenConfig { write_ratio: 0.5, ..GenConfig::default() },
            dup_ratio: 0.3,
            zero_fraction: 0.05,
            cross_volume: 0.5,
            rewrite_ratio: 0.3,
            pool: 1000,
            image_seed: None,
            volume_base: 0,
        }
    }
}

/// Invalid content settings.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ContentGenError {
    #[error(transparent)]
    Gen(#[from] GenError),
    #[error("{name} {value} is not between 0 and 1")]
    Fraction { name: &'static str, value: f64 },
    #[error("zero_fraction + dup_ratio = {0} exceeds 1")]
    Sum(f64),
    #[error(
        "the content generator issues one block per request: request_size {request} must equal block_size {block}"
    )]
    RequestSize { request: u64, block: u64 },
    #[error("pool must be at least 1")]
    Pool,
}

impl ContentGenConfig {
    pub fn validate(&self) -> Result<(), ContentGenError> {
        self.addresses.validate()?;
        for (name, value) in [
            ("dup_ratio", self.dup_ratio),
            ("zero_fraction", self.zero_fraction),
            ("cross_volume", self.cross_volume),
            ("rewrite_ratio", self.rewrite_ratio),
        ] {
            if !(0.0..=1.0).contains(&value) {
                return Err(ContentGenError::Fraction { name, value });
            }
        }
        if self.zero_fraction + self.dup_ratio > 1.0 {
            return Err(ContentGenError::Sum(self.zero_fraction + self.dup_ratio));
        }
        if self.addresses.request_size != self.addresses.block_size {
            return Err(ContentGenError::RequestSize {
                request: self.addresses.request_size,
                block: self.addresses.block_size,
            });
        }
        if self.pool == 0 {
            return Err(ContentGenError::Pool);
        }
        Ok(())
    }
}

fn mix(a: u64, b: u64) -> u64 {
    SplitMix64(a ^ b.wrapping_mul(0x9e37_79b9_7f4a_7c15)).next_u64()
}

fn unit(x: u64) -> f64 {
    (x >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Popular content `i` (tagged so it never equals a fresh or initial content).
fn pooled(seed: u64, i: u64) -> u128 {
    (1u128 << 120) | ((mix(seed, i) as u128) << 32) | i as u128
}

/// The request stream with digests; a [`TraceReader`].
#[derive(Clone, Debug)]
pub struct ContentGenerator {
    cfg: ContentGenConfig,
    addrs: Generator,
    rng: Rng,
    /// Current content of every address written so far.
    written: HashMap<(u32, u64), u128>,
    fresh: u64,
    bad: BadLines,
}

impl ContentGenerator {
    pub fn new(cfg: ContentGenConfig) -> Result<Self, ContentGenError> {
        cfg.validate()?;
        Ok(ContentGenerator {
            addrs: Generator::new(cfg.addresses.clone())?,
            rng: Rng::new(cfg.addresses.seed ^ 0x00c0_7e47),
            written: HashMap::new(),
            fresh: 0,
            bad: BadLines::default(),
            cfg,
        })
    }

    pub fn config(&self) -> &ContentGenConfig {
        &self.cfg
    }

    fn image_seed(&self) -> u64 {
        self.cfg.image_seed.unwrap_or(self.cfg.addresses.seed)
    }

    /// Content drawn from the uniform number `u` and hash `x`: zero, pooled, or unique (`unique`).
    fn draw(&self, u: f64, x: u64, unique: u128) -> u128 {
        let c = &self.cfg;
        if u < c.zero_fraction {
            ZERO_DIGEST
        } else if u < c.zero_fraction + c.dup_ratio {
            pooled(self.image_seed(), x % c.pool)
        } else {
            unique
        }
    }

    /// The initial-image content of (volume, block).
    pub fn initial(&self, volume: u32, block: u64) -> u128 {
        let seed = self.image_seed();
        let shared = unit(mix(seed ^ 0x005b_a7ed, block)) < self.cfg.cross_volume;
        let v = if shared { u64::MAX } else { volume as u64 + self.cfg.volume_base as u64 };
        let x = mix(mix(seed, v), block);
        let unique = (2u128 << 120) | ((v as u128) << 64) | block as u128;
        self.draw(unit(x), mix(x, 1), unique)
    }

    fn current(&self, volume: u32, block: u64) -> u128 {
        self.written.get(&(volume, block)).copied().unwrap_or_else(|| self.initial(volume, block))
    }
}

impl Iterator for ContentGenerator {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        let mut r = self.addrs.next()?;
        let block = r.offset / self.cfg.addresses.block_size;
        let d = match r.op {
            Op::Read => self.current(r.volume, block),
            Op::Write => {
                let d = if self.rng.next_f64() < self.cfg.rewrite_ratio {
                    self.current(r.volume, block)
                } else {
                    let u = self.rng.next_f64();
                    let x = self.rng.next_u64();
                    self.fresh += 1;
                    // Fresh contents are unique to this generator's address seed, too.
                    let tag = (self.cfg.addresses.seed as u128 & 0xffff_ffff) << 64;
                    self.draw(u, x, (3u128 << 120) | tag | self.fresh as u128)
                };
                self.written.insert((r.volume, block), d);
                d
            }
        };
        r.digest = Some(d);
        Some(r)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.addrs.size_hint()
    }
}

impl TraceReader for ContentGenerator {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        Ok(self.next())
    }

    fn volumes(&self) -> &[String] {
        self.addrs.volume_names()
    }

    fn skipped(&self) -> &BadLines {
        &self.bad
    }

    fn bytes_read(&self) -> u64 {
        0
    }
}
