//! Offset-based vs content-based caching on a trace with content digests (seed `003_*`, §4).
//!
//! A trace is reduced once to block accesses `(op, address, digest)` ([`load`]; 32 bytes per block access, kept
//! in memory so that every configuration replays the same accesses), then replayed through:
//! - the offset cache ([`blockwell_core::BlockCache`]: the policy over addresses, `capacity / block_size` blocks);
//! - the content cache ([`blockwell_core::dedup::ContentCache`]) at the same byte budget, with the hash table
//!   charged or not.
//!
//! Digests: a request's digest is its first block's; block `i > 0` of a multi-block request gets a digest
//! derived from the request's digest and `i` (FIU records one MD5 per request, and its requests are one 4 KiB
//! block, so this only matters for other block sizes). A request with no digest gets one derived from its address
//! and the number of writes to that address so far: unique content, never a duplicate.
//!
//! Both caches are write-through and write-allocate; the offset cache issues a device write for every written
//! block, the content cache for every written block except silent writes.
//!
//! Multi-volume ([`merge_by_time`], [`unified_vs_private`]): several traces are merged by time stamp (ties keep
//! trace order), trace `i` becoming volume `i`; one unified cache of the whole budget is compared with private
//! per-volume caches of `budget / n` each.

use blockwell_core::cache::{BlockCache, CacheConfig, CacheError, Op, Plan};
use blockwell_core::dedup::{Category, ContentCache, DedupConfig, DedupError, DedupPlan, DedupStats};
use blockwell_core::key::{block_span, BlockKey};
use blockwell_core::policy::{DynPolicy, PolicyError, PolicySpec, Preset};
use blockwell_trace::{Request, TraceError, TraceReader};
use serde::Serialize;
use std::collections::HashMap;

/// One block access with its content.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockAccess {
    pub op: Op,
    pub key: BlockKey,
    pub digest: u128,
}

/// Errors of a dedup replay.
#[derive(Debug, thiserror::Error)]
pub enum DedupRunError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Dedup(#[from] DedupError),
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("request {index}: {message}")]
    Request { index: u64, message: String },
}

fn mix(a: u128, i: u64) -> u128 {
    let lo = blockwell_core::BlockKey::from_raw((a as u64) ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).hash64();
    let hi = blockwell_core::BlockKey::from_raw(((a >> 64) as u64) ^ i).hash64();
    ((hi as u128) << 64) | lo as u128
}

/// Reduces requests to block accesses at `block_size` (see the module doc for digests).
pub fn load(
    reader: &mut dyn TraceReader,
    block_size: u64,
    limit: Option<u64>,
) -> Result<Vec<BlockAccess>, DedupRunError> {
    let mut out = Vec::new();
    let mut writes: HashMap<BlockKey, u64> = HashMap::new();
    let mut index = 0u64;
    while let Some(r) = reader.next_request()? {
        if limit.is_some_and(|l| index >= l) {
            break;
        }
        index += 1;
        push_request(&r, block_size, index, &mut writes, &mut out)?;
    }
    Ok(out)
}

/// Block accesses of in-memory requests (for merged multi-volume traces).
pub fn load_requests(requests: &[Request], block_size: u64) -> Result<Vec<BlockAccess>, DedupRunError> {
    let mut out = Vec::new();
    let mut writes = HashMap::new();
    for (i, r) in requests.iter().enumerate() {
        push_request(r, block_size, i as u64 + 1, &mut writes, &mut out)?;
    }
    Ok(out)
}

fn push_request(
    r: &Request,
    block_size: u64,
    index: u64,
    writes: &mut HashMap<BlockKey, u64>,
    out: &mut Vec<BlockAccess>,
) -> Result<(), DedupRunError> {
    let (first, n) = block_span(r.offset, r.len, block_size);
    for i in 0..n {
        let key = BlockKey::new(r.volume, first + i).ok_or_else(|| DedupRunError::Request {
            index,
            message: format!("volume {} offset {} is beyond the addressable range", r.volume, r.offset),
        })?;
        let digest = match r.digest {
            Some(d) if i == 0 => d,
            Some(d) => mix(d, i),
            None => {
                let w = writes.entry(key).or_insert(0);
                if r.op == Op::Write {
                    *w += 1;
                }
                (1u128 << 127) | ((key.raw() as u128) << 32) | *w as u128
            }
        };
        out.push(BlockAccess { op: r.op, key, digest });
    }
    Ok(())
}

/// Merges traces by time stamp; trace `i` becomes volume `i` (its own volumes are folded into one).
pub fn merge_by_time(traces: Vec<Vec<Request>>) -> Vec<Request> {
    let mut all: Vec<(u64, usize, usize, Request)> = Vec::new();
    for (t, reqs) in traces.into_iter().enumerate() {
        for (i, mut r) in reqs.into_iter().enumerate() {
            r.volume = t as u32;
            all.push((r.time_ns, t, i, r));
        }
    }
    all.sort_by_key(|a| (a.0, a.1, a.2));
    all.into_iter().map(|a| a.3).collect()
}

/// What the offset cache did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct OffsetResult {
    pub reads: u64,
    pub read_hits: u64,
    pub writes: u64,
    pub device_writes: u64,
}

impl OffsetResult {
    /// Read hits over reads; `None` (undefined, not 0) with no reads.
    pub fn read_hit_rate(&self) -> Option<f64> {
        ratio(self.read_hits, self.reads)
    }
}

use blockwell_core::stats::ratio;

/// Replays through an offset cache of `bytes`.
pub fn run_offset(
    accesses: &[BlockAccess],
    policy: &PolicySpec,
    preset: Preset,
    block_size: u64,
    bytes: u64,
) -> Result<OffsetResult, DedupRunError> {
    let cfg = CacheConfig::new(block_size, bytes)?;
    let mut c: BlockCache<dyn DynPolicy> = BlockCache::new(cfg, policy.build(preset, cfg.capacity_blocks())?);
    let mut plan = Plan::default();
    for a in accesses {
        c.access_blocks(a.op, a.key, 1, &[], &mut plan);
    }
    let s = c.stats();
    Ok(OffsetResult {
        reads: s.read.blocks,
        read_hits: s.read.block_hits,
        writes: s.write.blocks,
        device_writes: s.write.blocks,
    })
}

/// Replays through a content cache.
pub fn run_content(
    accesses: &[BlockAccess],
    policy: &PolicySpec,
    preset: Preset,
    cfg: DedupConfig,
) -> Result<DedupStats, DedupRunError> {
    let mut c = ContentCache::build(cfg, policy, preset)?;
    let mut plan = DedupPlan::default();
    for a in accesses {
        c.access_sim(a.op, a.key, a.digest, &mut plan);
    }
    Ok(*c.stats())
}

/// Offset and content caching at one budget.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub cache_bytes: u64,
    pub offset: OffsetResult,
    /// Content cache with the hash table charged.
    pub content: DedupStats,
    /// Content cache with the hash table in dedicated memory (the paper's "ideal").
    pub content_ideal: DedupStats,
}

impl Comparison {
    /// Silent writes eliminated: device writes the content cache did not issue.
    pub fn silent_writes(&self) -> u64 {
        self.content.get(Category::SilentWrite)
    }
}

/// The base settings of a comparison.
#[derive(Clone, Debug)]
pub struct DedupRun {
    pub policy: PolicySpec,
    pub preset: Preset,
    pub block_size: u64,
    pub hash_fraction: f64,
    pub ref_bytes: u64,
}

impl Default for DedupRun {
    fn default() -> Self {
        let d = DedupConfig::default();
        DedupRun {
            policy: PolicySpec::new(blockwell_core::PolicyKind::Lru),
            preset: Preset::Default,
            block_size: d.block_size,
            hash_fraction: d.hash_fraction,
            ref_bytes: d.ref_bytes,
        }
    }
}

impl DedupRun {
    pub fn dedup_config(&self, bytes: u64, charge: bool) -> DedupConfig {
        DedupConfig {
            block_size: self.block_size,
            capacity_bytes: bytes,
            hash_fraction: self.hash_fraction,
            charge_hash_table: charge,
            ref_bytes: self.ref_bytes,
        }
    }

    /// Offset vs content (charged and ideal) at one budget.
    pub fn compare(&self, accesses: &[BlockAccess], bytes: u64) -> Result<Comparison, DedupRunError> {
        Ok(Comparison {
            cache_bytes: bytes,
            offset: run_offset(accesses, &self.policy, self.preset, self.block_size, bytes)?,
            content: run_content(accesses, &self.policy, self.preset, self.dedup_config(bytes, true))?,
            content_ideal: run_content(accesses, &self.policy, self.preset, self.dedup_config(bytes, false))?,
        })
    }
}

/// One point of the hash-table sweep (paper Figures 4–5).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FractionPoint {
    pub cache_bytes: u64,
    pub hash_fraction: f64,
    pub full_comparisons: u64,
    pub comparisons_per_insert: f64,
    /// `None` (undefined, not 0) without reads, as every hit rate here.
    pub read_hit_rate: Option<f64>,
    /// Read hit rate with the same table not charged (the paper's ideal).
    pub ideal_read_hit_rate: Option<f64>,
}

/// Sweeps the hash-table fraction at one budget.
pub fn fraction_sweep(
    run: &DedupRun,
    accesses: &[BlockAccess],
    bytes: u64,
    fractions: &[f64],
) -> Result<Vec<FractionPoint>, DedupRunError> {
    let mut out = Vec::new();
    for &f in fractions {
        let r = DedupRun { hash_fraction: f, ..run.clone() };
        let charged = run_content(accesses, &r.policy, r.preset, r.dedup_config(bytes, true))?;
        let ideal = run_content(accesses, &r.policy, r.preset, r.dedup_config(bytes, false))?;
        out.push(FractionPoint {
            cache_bytes: bytes,
            hash_fraction: f,
            full_comparisons: charged.full_comparisons,
            comparisons_per_insert: charged.comparisons_per_insert(),
            read_hit_rate: charged.read_hit_rate(),
            ideal_read_hit_rate: ideal.read_hit_rate(),
        });
    }
    Ok(out)
}

/// Unified vs private caches for several volumes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct UnifiedVsPrivate {
    pub volumes: usize,
    pub cache_bytes: u64,
    /// Read hit rates (`None`, undefined, without reads).
    pub unified_offset: Option<f64>,
    pub unified_content: Option<f64>,
    pub private_offset: Option<f64>,
    pub private_content: Option<f64>,
    /// Content hits of the unified content cache: block accesses (read misses and writes) whose content was
    /// already cached under another address.
    pub unified_content_hits: u64,
}

/// Replays `accesses` (volumes `0..n`) through one cache of `bytes` and through `n` private caches of
/// `bytes / n` each; read hit rates (hits over all reads of all volumes).
pub fn unified_vs_private(
    run: &DedupRun,
    accesses: &[BlockAccess],
    volumes: usize,
    bytes: u64,
) -> Result<UnifiedVsPrivate, DedupRunError> {
    let uo = run_offset(accesses, &run.policy, run.preset, run.block_size, bytes)?;
    let uc = run_content(accesses, &run.policy, run.preset, run.dedup_config(bytes, true))?;
    let share = bytes / volumes.max(1) as u64;
    let (mut po, mut pc_hits, mut reads) = (0u64, 0u64, 0u64);
    for v in 0..volumes {
        let mine: Vec<BlockAccess> = accesses.iter().filter(|a| a.key.volume() as usize == v).copied().collect();
        let o = run_offset(&mine, &run.policy, run.preset, run.block_size, share)?;
        let c = run_content(&mine, &run.policy, run.preset, run.dedup_config(share, true))?;
        po += o.read_hits;
        pc_hits += c.get(Category::ReadHit);
        reads += o.reads;
    }
    Ok(UnifiedVsPrivate {
        volumes,
        cache_bytes: bytes,
        unified_offset: uo.read_hit_rate(),
        unified_content: uc.read_hit_rate(),
        private_offset: ratio(po, reads),
        private_content: ratio(pc_hits, reads),
        unified_content_hits: uc.get(Category::ReadMissContentHit)
            + uc.get(Category::WriteMissContentHit)
            + uc.get(Category::WriteHitMultiContentHit),
    })
}
