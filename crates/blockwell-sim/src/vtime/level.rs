//! One cache level on the virtual clock: a policy, a prefetcher, the blocks in flight and the counters.
//!
//! A block is *resident* when the policy holds it, *in flight* when a read for it has been issued and has not
//! completed, *absent* otherwise. Blocks enter the policy when their read completes: demand-accessed ones
//! through [`DynPolicy::access`] (one call per demand access made while in flight, in order), blocks only
//! prefetched through one [`DynPolicy::prefetch`] group per device request.

use blockwell_core::policy::{Access, DynPolicy, Evicted, Outcome, NEVER};
use blockwell_core::prefetch::{BlockState, BlockView, Prefetcher};
use blockwell_core::BlockKey;
use std::collections::HashMap;

/// Who waits for an in-flight block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waiter {
    /// A process request (by job slot).
    Job(u32),
    /// A page of the level above (its page-cache key, raw).
    Page(u64),
}

/// A block in flight.
#[derive(Debug, Default)]
pub(crate) struct Flight {
    /// Who is notified when the block arrives.
    pub waiters: Vec<Waiter>,
    /// Demand accesses made while in flight: their next-use times (OPT), in order.
    pub demands: Vec<u64>,
    /// The read was a prefetch.
    pub prefetched: bool,
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

/// A cache level.
pub(crate) struct Level {
    pub policy: Option<Box<dyn DynPolicy>>,
    pub prefetcher: Box<dyn Prefetcher>,
    pub inflight: HashMap<u64, Flight>,
    pub c: LevelCounters,
    /// Record the demand access sequence (first pass for OPT).
    pub record: Option<Vec<u64>>,
    pub oracle: Option<Oracle>,
    victims: Vec<Evicted>,
}

impl Level {
    pub fn new(policy: Option<Box<dyn DynPolicy>>, prefetcher: Box<dyn Prefetcher>) -> Level {
        Level {
            policy,
            prefetcher,
            inflight: HashMap::new(),
            c: LevelCounters::default(),
            record: None,
            oracle: None,
            victims: Vec::new(),
        }
    }

    pub fn state(&self, key: BlockKey) -> BlockState {
        if self.inflight.contains_key(&key.raw()) {
            BlockState::InFlight
        } else if self.policy.as_ref().is_some_and(|p| p.contains(key)) {
            BlockState::Resident
        } else {
            BlockState::Absent
        }
    }

    /// The next-use time for a demand access made now (advancing the oracle, recording the access).
    pub fn demand_next_use(&mut self, key: BlockKey) -> u64 {
        if let Some(r) = &mut self.record {
            r.push(key.raw());
        }
        match &mut self.oracle {
            Some(o) => o.advance(key.raw()),
            None => NEVER,
        }
    }

    /// A demand access to a resident block. Returns the outcome (a hit, or a prefetch hit).
    pub fn access_resident(&mut self, key: BlockKey, stream: u64) -> Outcome {
        let nu = self.demand_next_use(key);
        let Some(p) = self.policy.as_mut() else { return Outcome::Miss };
        self.victims.clear();
        let o = p.access(Access::with_next_use(key, nu), &mut self.victims);
        if o == Outcome::PrefetchHit {
            self.c.prefetch_hits += 1;
            self.prefetcher.on_prefetch_hit(stream, key);
        }
        self.flush_victims();
        o
    }

    /// A demand access applied to the policy now (write-allocate for writes).
    pub fn policy_access(&mut self, key: BlockKey, next_use: u64) -> Option<Outcome> {
        let p = self.policy.as_mut()?;
        self.victims.clear();
        let o = p.access(Access::with_next_use(key, next_use), &mut self.victims);
        self.flush_victims();
        Some(o)
    }

    /// A block's read completed: its flight ends and it enters the policy (demand accesses made while it was
    /// in flight are applied in order; a block only prefetched goes to `prefetch_group`). Returns the flight.
    pub fn arrive(&mut self, key: BlockKey, prefetch_group: &mut Vec<Access>) -> Option<Flight> {
        let f = self.inflight.remove(&key.raw())?;
        if let Some(p) = self.policy.as_mut() {
            if f.demands.is_empty() {
                let nu = self.oracle.as_ref().map_or(NEVER, |o| o.peek(key.raw()));
                prefetch_group.push(Access::with_next_use(key, nu));
            } else {
                self.victims.clear();
                for &nu in &f.demands {
                    p.access(Access::with_next_use(key, nu), &mut self.victims);
                }
                self.flush_victims();
            }
        }
        Some(f)
    }

    /// Inserts blocks that were only prefetched, as one group.
    pub fn insert_prefetched(&mut self, group: &mut Vec<Access>) {
        if group.is_empty() {
            return;
        }
        if let Some(p) = self.policy.as_mut() {
            self.victims.clear();
            let cap = p.capacity();
            for chunk in group.chunks(cap.max(1)) {
                p.prefetch(chunk, &mut self.victims);
            }
            self.flush_victims();
        }
        group.clear();
    }

    fn flush_victims(&mut self) {
        for v in &self.victims {
            self.c.evictions += 1;
            if v.unused_prefetch {
                self.c.prefetch_wasted += 1;
            }
            self.prefetcher.on_evict(v);
        }
        self.victims.clear();
    }
}

/// [`BlockView`] over a level, optionally translating the prefetcher's keys.
pub(crate) struct View<'a> {
    pub inflight: &'a HashMap<u64, Flight>,
    pub policy: Option<&'a dyn DynPolicy>,
}

impl BlockView for View<'_> {
    fn state(&self, key: BlockKey) -> BlockState {
        if self.inflight.contains_key(&key.raw()) {
            BlockState::InFlight
        } else if self.policy.is_some_and(|p| p.contains(key)) {
            BlockState::Resident
        } else {
            BlockState::Absent
        }
    }
}
