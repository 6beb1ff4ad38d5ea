//! [`BlockCache`]: a replacement policy over a byte budget at a block size, turning requests into plans.
//!
//! A request of `len` bytes at byte `offset` of a volume touches blocks `offset/bs ..= (offset+len-1)/bs`. Each
//! block is one demand access of the policy; the [`Plan`] says which hit, which missed (as runs of consecutive
//! blocks, ready to become device reads), and which blocks were evicted. Writes allocate (a write miss inserts
//! the block, as in libCacheSim); what a write means for the backing store is the driver's business.

use crate::key::{block_span, BlockKey, MAX_BLOCK, MAX_VOLUME};
use crate::policy::{Access, DynPolicy, Evicted, Outcome, PolicyError, PolicySpec, Preset, NEVER};
use crate::stats::{OpStats, Stats};
use serde::{Deserialize, Serialize};
use std::num::NonZeroUsize;

/// Smallest supported block size.
pub const MIN_BLOCK_SIZE: u64 = 512;
/// Largest supported block size.
pub const MAX_BLOCK_SIZE: u64 = 1 << 20;
/// The default block size.
pub const DEFAULT_BLOCK_SIZE: u64 = 4096;

/// Read or write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    #[default]
    Read,
    Write,
}

/// Configuration errors, naming the setting.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CacheError {
    #[error("block size {0} is not a power of two between 512 B and 1 MiB")]
    BlockSize(u64),
    #[error("cache size {bytes} B holds no {block_size} B block")]
    TooSmall { bytes: u64, block_size: u64 },
    #[error("cache size {bytes} B is {blocks} blocks, more than the engine's limit of {limit}")]
    TooLarge { bytes: u64, blocks: u64, limit: u64 },
    #[error("volume {0} is out of range (at most {MAX_VOLUME})")]
    Volume(u32),
    #[error("byte range {offset}+{len} is beyond the largest addressable block")]
    Range { offset: u64, len: u64 },
}

/// Size, block size and associativity of a cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CacheConfig {
    pub block_size: u64,
    pub capacity_bytes: u64,
    /// Blocks per set of a set-associative cache (FlashCache's `--associativity`); `None`: fully associative.
    /// A set as large as the cache is fully associative too. See [`crate::policy::setassoc`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub associativity: Option<NonZeroUsize>,
}

impl CacheConfig {
    /// Checks the block size and that the budget holds between 1 and 2^31-2 blocks.
    pub fn new(block_size: u64, capacity_bytes: u64) -> Result<Self, CacheError> {
        if !block_size.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&block_size) {
            return Err(CacheError::BlockSize(block_size));
        }
        let blocks = capacity_bytes / block_size;
        if blocks == 0 {
            return Err(CacheError::TooSmall { bytes: capacity_bytes, block_size });
        }
        let limit = crate::arena::MAX_ENTRIES as u64 / 2;
        if blocks > limit {
            return Err(CacheError::TooLarge { bytes: capacity_bytes, blocks, limit });
        }
        Ok(CacheConfig { block_size, capacity_bytes, associativity: None })
    }

    /// The same cache, `ways`-way set-associative (`None`: fully associative).
    pub fn with_associativity(self, ways: Option<NonZeroUsize>) -> Self {
        CacheConfig { associativity: ways, ..self }
    }

    /// Whole blocks the budget holds.
    pub fn capacity_blocks(&self) -> usize {
        (self.capacity_bytes / self.block_size) as usize
    }

    /// The ways that split this cache into sets: `Some` only when the associativity is smaller than the capacity.
    pub fn split_ways(&self) -> Option<NonZeroUsize> {
        crate::policy::setassoc::split_ways(self.capacity_blocks(), self.associativity)
    }

    /// Number of sets (1 when fully associative).
    pub fn sets(&self) -> usize {
        crate::policy::setassoc::set_count(self.capacity_blocks(), self.associativity)
    }

    /// The policy of this cache, the one path every driver builds a level's policy by: `spec` under `preset` over
    /// [`CacheConfig::capacity_blocks`], set-associative as [`CacheConfig::associativity`] asks
    /// ([`PolicySpec::build_with_associativity`]; without associativity exactly [`PolicySpec::build`]).
    pub fn build_policy(&self, spec: &PolicySpec, preset: Preset) -> Result<Box<dyn DynPolicy>, PolicyError> {
        spec.build_with_associativity(preset, self.capacity_blocks(), self.associativity)
    }
}

/// What a request did to the cache.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Blocks that hit.
    pub hits: u64,
    /// Blocks that missed, as runs (first key, count) of consecutive blocks in request order.
    pub misses: Vec<(BlockKey, u64)>,
    /// Blocks evicted while serving the request.
    pub victims: Vec<Evicted>,
}

impl Plan {
    pub fn clear(&mut self) {
        self.hits = 0;
        self.misses.clear();
        self.victims.clear();
    }

    /// Number of blocks that missed.
    pub fn missed_blocks(&self) -> u64 {
        self.misses.iter().map(|m| m.1).sum()
    }

    fn push_miss(&mut self, key: BlockKey) {
        if let Some(last) = self.misses.last_mut() {
            if last.0.raw() + last.1 == key.raw() {
                last.1 += 1;
                return;
            }
        }
        self.misses.push((key, 1));
    }
}

/// A policy over a byte budget, counting what it does.
pub struct BlockCache<P: DynPolicy + ?Sized> {
    config: CacheConfig,
    stats: Stats,
    policy: Box<P>,
}

impl<P: DynPolicy + ?Sized> BlockCache<P> {
    /// A cache over `policy`, which must have been built with `config.capacity_blocks()` blocks.
    pub fn new(config: CacheConfig, policy: Box<P>) -> Self {
        debug_assert_eq!(policy.capacity(), config.capacity_blocks());
        BlockCache { config, stats: Stats::default(), policy }
    }

    pub fn config(&self) -> CacheConfig {
        self.config
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Zeroes the counters (end of a warm-up period); the cache's contents stay.
    pub fn reset_stats(&mut self) {
        self.stats = Stats::default();
    }

    pub fn policy(&self) -> &P {
        &self.policy
    }

    pub(crate) fn policy_mut(&mut self) -> &mut P {
        &mut self.policy
    }

    pub(crate) fn stats_mut(&mut self) -> &mut Stats {
        &mut self.stats
    }

    /// A byte-range request on `volume`. `plan` is cleared and filled.
    pub fn access(&mut self, op: Op, volume: u32, offset: u64, len: u64, plan: &mut Plan) -> Result<(), CacheError> {
        if volume > MAX_VOLUME {
            return Err(CacheError::Volume(volume));
        }
        let (first, n) = block_span(offset, len, self.config.block_size);
        if n > 0 && first + (n - 1) > MAX_BLOCK {
            return Err(CacheError::Range { offset, len });
        }
        let key = BlockKey::new(volume, first).ok_or(CacheError::Range { offset, len })?;
        self.access_blocks(op, key, n, &[], plan);
        Ok(())
    }

    /// A request for `n` consecutive blocks from `first`. `next_use[i]`, when given, is the logical time of the
    /// next access to block `i` of the request (OPT needs it); an empty slice means unknown.
    #[inline]
    pub fn access_blocks(&mut self, op: Op, first: BlockKey, n: u64, next_use: &[u64], plan: &mut Plan) {
        self.step(op, first, n, next_use, plan, |p, a, out| p.access(a, out));
    }

    /// The request step, with the policy's access given (through [`DynPolicy`], or the concrete type's
    /// [`crate::Policy::access`]).
    #[inline(always)]
    fn step(
        &mut self,
        op: Op,
        first: BlockKey,
        n: u64,
        next_use: &[u64],
        plan: &mut Plan,
        mut access: impl FnMut(&mut P, Access, &mut Vec<Evicted>) -> Outcome,
    ) {
        plan.clear();
        let mut key = first;
        let mut hits = 0u64;
        for i in 0..n as usize {
            let nu = next_use.get(i).copied().unwrap_or(NEVER);
            let before = plan.victims.len();
            match access(&mut self.policy, Access::with_next_use(key, nu), &mut plan.victims) {
                Outcome::Hit => hits += 1,
                Outcome::PrefetchHit => {
                    hits += 1;
                    self.stats.prefetch_used += 1;
                }
                Outcome::Miss => plan.push_miss(key),
            }
            self.count_victims(before, plan);
            key = key.next();
        }
        plan.hits = hits;
        let s: &mut OpStats = match op {
            Op::Read => &mut self.stats.read,
            Op::Write => &mut self.stats.write,
        };
        s.requests += 1;
        s.blocks += n;
        s.block_hits += hits;
        if hits == n {
            s.request_hits += 1;
        }
    }

    /// [`BlockCache::access_blocks`] on the concrete policy type: the policy's own `access` (not its
    /// object-safe face) is called, so it inlines into the caller's loop (the simulator's replay).
    #[inline]
    pub fn access_blocks_static(&mut self, op: Op, first: BlockKey, n: u64, next_use: &[u64], plan: &mut Plan)
    where
        P: crate::Policy,
    {
        self.step(op, first, n, next_use, plan, |p, a, out| crate::Policy::access(p, a, out));
    }

    /// Inserts one prefetch group (blocks read together). Returns how many blocks were inserted; evictions
    /// go to `plan.victims` (the plan is not cleared).
    ///
    /// Duplicate keys are dropped and a group larger than the cache is cut to the cache's capacity (its
    /// first blocks are kept), as the policy's contract asks.
    pub fn prefetch(&mut self, group: &[Access], plan: &mut Plan) -> usize {
        let before = plan.victims.len();
        let cap = self.policy.capacity();
        let distinct = group.len() <= cap.min(64)
            && group.iter().enumerate().all(|(i, a)| group[..i].iter().all(|b| b.key != a.key));
        let n = if distinct {
            self.policy.prefetch(group, &mut plan.victims)
        } else {
            let mut seen = std::collections::HashSet::with_capacity(group.len());
            let clean: Vec<Access> = group.iter().filter(|a| seen.insert(a.key)).take(cap).copied().collect();
            self.policy.prefetch(&clean, &mut plan.victims)
        };
        self.stats.prefetch_issued += n as u64;
        self.count_victims(before, plan);
        n
    }

    /// Drops a resident block (write-around invalidation). Returns whether it was resident.
    pub fn invalidate(&mut self, key: BlockKey) -> bool {
        self.policy.remove(key)
    }

    /// Is the block resident?
    pub fn contains(&self, key: BlockKey) -> bool {
        self.policy.contains(key)
    }

    #[inline]
    fn count_victims(&mut self, from: usize, plan: &Plan) {
        for v in &plan.victims[from..] {
            self.stats.evictions += 1;
            if v.unused_prefetch {
                self.stats.prefetch_wasted += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{PolicyKind, PolicySpec, Preset};

    fn cache(blocks: u64) -> BlockCache<dyn DynPolicy> {
        let cfg = CacheConfig::new(4096, blocks * 4096).unwrap();
        let p = PolicySpec::new(PolicyKind::Lru).build(Preset::Default, cfg.capacity_blocks()).unwrap();
        BlockCache::new(cfg, p)
    }

    #[test]
    fn config_errors_name_the_problem() {
        assert_eq!(CacheConfig::new(1000, 1 << 20), Err(CacheError::BlockSize(1000)));
        assert_eq!(CacheConfig::new(256, 1 << 20), Err(CacheError::BlockSize(256)));
        assert!(matches!(CacheConfig::new(4096, 100), Err(CacheError::TooSmall { .. })));
        assert!(matches!(CacheConfig::new(512, u64::MAX), Err(CacheError::TooLarge { .. })));
        assert_eq!(CacheConfig::new(4096, 10_000).unwrap().capacity_blocks(), 2);
    }

    #[test]
    fn request_level_hit_needs_every_block() {
        let mut c = cache(8);
        let mut plan = Plan::default();
        c.access(Op::Read, 0, 0, 8192, &mut plan).unwrap();
        assert_eq!(plan.misses, vec![(BlockKey::new(0, 0).unwrap(), 2)]);
        c.access(Op::Read, 0, 4096, 8192, &mut plan).unwrap(); // block 1 hits, 2 misses
        assert_eq!(plan.hits, 1);
        c.access(Op::Write, 0, 100, 10, &mut plan).unwrap(); // block 0 hits
        let s = c.stats();
        assert_eq!(s.read, OpStats { requests: 2, request_hits: 0, blocks: 4, block_hits: 1 });
        assert_eq!(s.write, OpStats { requests: 1, request_hits: 1, blocks: 1, block_hits: 1 });
    }

    #[test]
    fn prefetch_counters() {
        let mut c = cache(2);
        let mut plan = Plan::default();
        let k = |b| BlockKey::new(1, b).unwrap();
        assert_eq!(c.prefetch(&[Access::new(k(1)), Access::new(k(2))], &mut plan), 2);
        c.access_blocks(Op::Read, k(1), 1, &[], &mut plan);
        assert_eq!(plan.hits, 1);
        c.access_blocks(Op::Read, k(3), 1, &[], &mut plan); // evicts 2, never used
        let s = c.stats();
        assert_eq!((s.prefetch_issued, s.prefetch_used, s.prefetch_wasted, s.evictions), (2, 1, 1, 1));
    }

    #[test]
    fn out_of_range_requests_are_errors() {
        let mut c = cache(2);
        let mut plan = Plan::default();
        assert_eq!(c.access(Op::Read, 70_000, 0, 1, &mut plan), Err(CacheError::Volume(70_000)));
        assert!(matches!(c.access(Op::Read, 0, u64::MAX - 10, 5, &mut plan), Err(CacheError::Range { .. })));
    }
}
