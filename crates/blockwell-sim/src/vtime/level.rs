//! The time-aware simulator's cache levels: the engine's cache step ([`CacheLevel`], inserting blocks when their
//! reads complete, [`Insert::OnCompletion`]) plus what only this driver knows — who waits for each block in
//! flight, and the recorded demand sequence and next-use oracle of OPT. Below the page cache without a block
//! cache (and under REDCAP), [`Merge`] is the block layer's merging of reads of a block already being read; it
//! caches nothing.

use blockwell_core::level::{CacheLevel, Fate, Insert, LevelConfig, Request, StepPlan, WritePolicy};
use blockwell_core::policy::{DynPolicy, NEVER};
use blockwell_core::prefetch::Prefetcher;
use blockwell_core::{BlockKey, CacheConfig, Op, Stats};
use std::collections::HashMap;

/// Who waits for an in-flight block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiter {
    /// A process request (by job slot).
    Job(u32),
    /// A page of the level above (its page-cache key, raw).
    Page(u64),
}

/// Counters of one level.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LevelCounters {
    /// Demand read requests that reached this level.
    pub read_requests: u64,
    /// Read requests whose every block was resident.
    pub read_request_hits: u64,
    /// Demand read blocks.
    pub read_blocks: u64,
    /// Demand read blocks found resident.
    pub read_hits: u64,
    /// Demand read blocks found in flight (misses that issued no read).
    pub inflight_waits: u64,
    /// Demand read blocks that issued a read.
    pub read_misses_issued: u64,
    pub write_requests: u64,
    pub write_blocks: u64,
    /// Blocks this level's prefetcher had read.
    pub prefetch_issued: u64,
    /// Prefetched blocks whose first demand access found them resident.
    pub prefetch_hits: u64,
    /// Prefetched blocks demanded while still in flight (right but late).
    pub prefetch_late: u64,
    /// Prefetched blocks evicted before any demand access.
    pub prefetch_wasted: u64,
    pub evictions: u64,
}

impl From<&Stats> for LevelCounters {
    /// The engine's counters (`blockwell_core::stats`, the one definition) in this report's names.
    fn from(s: &Stats) -> Self {
        LevelCounters {
            read_requests: s.read.requests,
            read_request_hits: s.read.request_hits,
            read_blocks: s.read.blocks,
            read_hits: s.read.block_hits,
            inflight_waits: s.delayed_hits,
            read_misses_issued: s.read.block_misses() - s.delayed_hits,
            write_requests: s.write.requests,
            write_blocks: s.write.blocks,
            prefetch_issued: s.prefetch_issued,
            prefetch_hits: s.prefetch_used,
            prefetch_late: s.prefetch_late,
            prefetch_wasted: s.prefetch_wasted,
            evictions: s.evictions,
        }
    }
}

/// Next-use times from a recorded run (for OPT): per key, the logical times of its demand accesses.
#[derive(Default)]
pub(crate) struct Oracle {
    times: HashMap<u64, (Vec<u64>, usize)>,
}

impl Oracle {
    pub fn from_sequence(seq: &[u64]) -> Oracle {
        let mut times: HashMap<u64, (Vec<u64>, usize)> = HashMap::new();
        for (i, &k) in seq.iter().enumerate() {
            times.entry(k).or_default().0.push(i as u64);
        }
        Oracle { times }
    }

    /// The key is accessed now: consume this occurrence and return the time of the next one.
    fn advance(&mut self, key: u64) -> u64 {
        match self.times.get_mut(&key) {
            Some((t, cur)) => {
                *cur += 1;
                t.get(*cur).copied().unwrap_or(NEVER)
            }
            None => NEVER,
        }
    }

    /// The time of the key's next access, without consuming one.
    fn peek(&self, key: u64) -> u64 {
        match self.times.get(&key) {
            Some((t, cur)) => t.get(*cur).copied().unwrap_or(NEVER),
            None => NEVER,
        }
    }
}

/// A cache level (see the module docs).
pub(crate) struct Level {
    pub step: CacheLevel,
    /// Who waits for each block in flight.
    waiters: HashMap<u64, Vec<Waiter>>,
    /// Record the demand access sequence (first pass for OPT).
    pub record: Option<Vec<u64>>,
    pub oracle: Option<Oracle>,
    pub plan: StepPlan,
    block_size: u64,
    next_use: Vec<u64>,
}

/// What a read request at a level needs from the driver.
#[derive(Debug, Default)]
pub(crate) struct LevelRead {
    /// Waiters whose block was resident.
    pub hits: usize,
    /// Blocks the request waits for (in flight or now read).
    pub pending: u32,
    /// Blocks to read now (demand misses and synchronous prefetches) and in the background.
    pub sync: Vec<BlockKey>,
    pub asyn: Vec<BlockKey>,
}

impl Level {
    /// A level of `capacity_bytes` over `policy` (built for it) with `prefetcher`; `writes` says whether writes
    /// allocate (the page cache) or pass (the block level).
    pub fn new(
        cc: CacheConfig,
        policy: Box<dyn DynPolicy>,
        prefetcher: Box<dyn Prefetcher>,
        writes: WritePolicy,
    ) -> Level {
        let mut lc = LevelConfig::new(cc);
        lc.insert = Insert::OnCompletion;
        lc.write = writes;
        Level {
            step: CacheLevel::new(lc, policy, Some(prefetcher)),
            waiters: HashMap::new(),
            record: None,
            oracle: None,
            plan: StepPlan::default(),
            block_size: cc.block_size,
            next_use: Vec::new(),
        }
    }

    /// The next-use times of demand accesses to blocks `first..first+n` made now (advancing the oracle,
    /// recording the accesses).
    fn demand_next_use(&mut self, first: BlockKey, n: u64) {
        self.next_use.clear();
        for i in 0..n {
            let key = first.raw() + i;
            if let Some(r) = &mut self.record {
                r.push(key);
            }
            self.next_use.push(match &mut self.oracle {
                Some(o) => o.advance(key),
                None => NEVER,
            });
        }
    }

    /// A demand read of blocks `first..first+n` of `stream` (which ends at block `end`) by `waiter(i)` for block
    /// `i`: resident blocks are hits, the others are waited for; the reads to issue are returned.
    pub fn read(
        &mut self,
        first: BlockKey,
        n: u64,
        stream: u64,
        end: u64,
        waiter: impl Fn(u64) -> Waiter,
        out: &mut LevelRead,
    ) {
        self.demand_next_use(first, n);
        let req = Request {
            stream,
            stream_end: end,
            next_use: &self.next_use,
            ..Request::blocks(Op::Read, first, n, self.block_size)
        };
        self.step.access(&req, &mut self.plan);
        for (i, f) in self.plan.fates.iter().enumerate() {
            let key = first.raw() + i as u64;
            match f {
                Fate::Hit => out.hits += 1,
                Fate::Fetch | Fate::Wait => {
                    self.waiters.entry(key).or_default().push(waiter(i as u64));
                    out.pending += 1;
                }
                _ => unreachable!("a read at a level without admission or cutoff hits, waits or fetches"),
            }
        }
        let keys = |reads: &[blockwell_core::cluster::DeviceRead], to: &mut Vec<BlockKey>| {
            for r in reads {
                to.extend((0..r.n).map(|i| BlockKey::from_raw(r.first.raw() + i)));
            }
        };
        keys(&self.plan.reads, &mut out.sync);
        keys(&self.plan.async_reads, &mut out.asyn);
    }

    /// A write of blocks `first..first+n` (write-allocate at the page cache; counted only at the block level).
    pub fn write(&mut self, first: BlockKey, n: u64) {
        self.demand_next_use(first, n);
        let req = Request { next_use: &self.next_use, ..Request::blocks(Op::Write, first, n, self.block_size) };
        self.step.access(&req, &mut self.plan);
    }

    /// A block's read completed: it enters the policy (see [`CacheLevel::arrive`]); returns who waited for it,
    /// or `None` when it was not in flight here.
    pub fn arrive(&mut self, key: BlockKey) -> Option<Vec<Waiter>> {
        let nu = self.oracle.as_ref().map_or(NEVER, |o| o.peek(key.raw()));
        self.plan.victims.clear();
        if !self.step.arrive(key, nu, &mut self.plan) {
            return None;
        }
        Some(self.waiters.remove(&key.raw()).unwrap_or_default())
    }

    /// Inserts the blocks that arrived only prefetched, as prefetch groups.
    pub fn insert_arrived(&mut self) {
        self.plan.victims.clear();
        self.step.insert_arrived(&mut self.plan);
    }

    /// The counters in this simulator's report form.
    pub fn counters(&self) -> LevelCounters {
        LevelCounters::from(self.step.stats())
    }
}

/// The block layer below the page cache without a block cache (or under REDCAP): a read of a block already
/// being read waits for it instead of reading it again. No policy; the counters feed REDCAP's report.
#[derive(Default)]
pub(crate) struct Merge {
    pub inflight: HashMap<u64, MergeFlight>,
    pub c: LevelCounters,
}

/// A block being read at the block layer.
#[derive(Debug, Default)]
pub(crate) struct MergeFlight {
    pub waiters: Vec<Waiter>,
    /// Read for REDCAP's segment and not demanded yet.
    pub prefetched: bool,
}

impl Merge {
    /// A demand access to an in-flight block: it waits, counts as a miss, issues no read.
    pub fn join_flight(&mut self, key: BlockKey, w: Waiter) {
        self.c.inflight_waits += 1;
        if let Some(fl) = self.inflight.get_mut(&key.raw()) {
            if std::mem::replace(&mut fl.prefetched, false) {
                self.c.prefetch_late += 1;
            }
            fl.waiters.push(w);
        }
    }
}
