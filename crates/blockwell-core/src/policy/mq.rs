//! MQ: the multi-queue replacement algorithm for second-level buffer caches.
//!
//! **Paper.** Y. Zhou, J. F. Philbin, K. Li, "The Multi-Queue Replacement Algorithm for Second Level Buffer
//! Caches", USENIX ATC 2001. Seed `001_*` §4 ("MQ").
//!
//! **Rule.** `m` LRU queues `Q0..Qm-1`; a block referenced `f` times lives in `Q[min(floor(log2 f), m-1)]`. A
//! hit increments `f`, moves the block to the MRU end of its (new) queue and sets
//! `expire = now + life_time`. After every demand access the clock `now` advances by one and, for `k = 1..m-1`
//! in that order, the LRU block of `Qk` is demoted to the MRU end of `Qk-1` (with a fresh
//! `expire = now + life_time`) if `expire < now`; `Q0` is never checked. A miss evicts the LRU block of the
//! lowest non-empty queue and records its key and `f` at the newest end of `Qout`, a FIFO history of
//! `floor(capacity × qout_ratio)` entries (the oldest is dropped when full; none when the size is 0). A missed
//! block found in `Qout` is taken out of it *before* the victim is recorded and comes back with the remembered
//! `f` plus one; otherwise it starts at `f = 1`. `now` is the policy's logical clock: the number of demand
//! accesses so far (`expire` is set from the clock before the access's tick).
//!
//! This is libcachesim 0.3.5's `MQ` step for step (its `vtime` also ticks once per hit or insert, which on a
//! demand-only trace is once per access; `f` saturates at `i32::MAX`), and the cross-check gives identical miss
//! counts. libcachesim also advances its clock and runs the demotion pass when a prefetcher inserts a block;
//! here prefetches do not tick the clock.
//!
//! **Prefetch adaptation (seed `001_*` §4, "MQ").** A prefetch is not a reference: a prefetched block keeps
//! `f = 0` (or, if it was in `Qout`, the remembered `f`, taken out of `Qout`), goes to the MRU end of
//! `Q[queue(f)]` (`Q0` for `f = 0`) with `expire = now + life_time`, flagged *not yet accessed*; its first demand
//! access increments `f` like any hit ([`Outcome::PrefetchHit`]), so `f` counts demand references only. A
//! prefetched block evicted without a demand access is not recorded in `Qout` (reported as an unused
//! prefetch); if its `f` came from `Qout`, that remembered entry goes back to `Qout` unchanged, since it records
//! earlier demand references and not the prefetch. [`Policy::remove`] drops a block without recording it.
//!
//! **Parameters** ([`MqConfig`]; checked: `queues` in 1..=64, `life_time` ≥ 1, `qout_ratio` in [0, 64]):
//!
//! | preset | `queues` | `life_time` | `qout_ratio` |
//! |---|---|---|---|
//! | `Default` = `Libcachesim` (`lcs.MQ` defaults) | 8 | 10 000 | 4.0 |
//! | `Butt05` (Table 4: "4 queues, ghost cache = cache size") | 4 | 10 000 | 1.0 |
//!
//! Table 4 gives no life time; the MQ paper sets it to the workload's peak temporal distance, measured online.
//! `Butt05` keeps libcachesim's 10 000 accesses so that the two presets differ only in what the seed states.
//!
//! **Metadata.** 32 bytes per entry in the arena (8-byte key, links with the prefetch flag, 8-byte expiry,
//! 4-byte frequency, 1-byte queue number, padding) plus the handle index (4 bytes + 1 tag byte per bucket,
//! reserved for twice the entries so that churn never grows it: 11.4–22.9 bytes per entry): 43–55 bytes per
//! cached block and the same per `Qout` entry (ghosts share the arena and the index), i.e. with the default
//! `qout_ratio = 4`, 215–275 bytes per block of capacity when `Qout` is full. Plus 12 bytes per queue.
//!
//! **Cost.** O(m) per demand access (one look at the LRU end of each queue), O(1) per insert and eviction;
//! no allocation after construction.

use super::{Access, Evicted, Outcome, Policy, Preset};
use crate::arena::{Arena, Handle, KeyIndex, Links, List, MAX_ENTRIES};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// Largest number of queues (as libcachesim's `MQ_MAX_N_QUEUE`).
pub const MAX_QUEUES: u32 = 64;

/// MQ's parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MqConfig {
    /// Number of LRU queues `m`.
    pub queues: u32,
    /// Demand accesses a block may stay in its queue without a reference before it is demoted.
    pub life_time: u64,
    /// Size of the `Qout` frequency history, as a multiple of the capacity (rounded down).
    pub qout_ratio: f64,
}

impl Default for MqConfig {
    fn default() -> Self {
        MqConfig { queues: 8, life_time: 10_000, qout_ratio: 4.0 }
    }
}

/// `queue` value of an entry in `Qout`.
const GHOST: u8 = u8::MAX;
/// Frequencies saturate here (libcachesim keeps them in an `int32_t`).
const MAX_FREQ: u32 = i32::MAX as u32;

#[derive(Clone, Debug)]
struct Node {
    key: BlockKey,
    links: Links,
    expire: u64,
    freq: u32,
    /// Queue number, or [`GHOST`] for a `Qout` entry.
    queue: u8,
}

crate::arena::linked_by_field!(Node);
crate::arena::keyed_by_field!(Node);

/// The MQ policy. Every list's front is its MRU (newest) end.
#[derive(Clone, Debug)]
pub struct Mq {
    capacity: usize,
    life_time: u64,
    qout_cap: usize,
    /// Demand accesses so far.
    now: u64,
    resident: usize,
    arena: Arena<Node>,
    index: KeyIndex,
    queues: Vec<List>,
    qout: List,
}

impl Mq {
    /// `min(floor(log2 f), m - 1)`, and 0 for `f` = 0 (a prefetched block never referenced).
    #[inline]
    fn queue_of(&self, freq: u32) -> usize {
        if freq <= 1 {
            0
        } else {
            ((31 - freq.leading_zeros()) as usize).min(self.queues.len() - 1)
        }
    }

    #[inline]
    fn link(&mut self, h: Handle, queue: usize) {
        self.arena[h].queue = queue as u8;
        self.queues[queue].push_front(&mut self.arena, h);
    }

    /// Records `h` (already off its queue) at the newest end of `Qout`, dropping the oldest entry when full.
    #[inline]
    fn remember(&mut self, h: Handle) {
        if self.qout_cap == 0 {
            self.index.forget(&mut self.arena, h);
            return;
        }
        if self.qout.len() >= self.qout_cap {
            if let Some(old) = self.qout.pop_back(&mut self.arena) {
                self.index.forget(&mut self.arena, old);
            }
        }
        let n = &mut self.arena[h];
        n.queue = GHOST;
        n.links.set_flag(false);
        self.qout.push_front(&mut self.arena, h);
    }

    #[inline]
    fn evict_one(&mut self, out: &mut Vec<Evicted>) {
        let Some(q) = self.queues.iter().position(|q| !q.is_empty()) else { return };
        let h = self.queues[q].pop_back(&mut self.arena).expect("non-empty queue");
        self.resident -= 1;
        let n = &self.arena[h];
        if n.links.flag() && n.freq == 0 {
            super::evict(&mut self.arena, &mut self.index, h, out);
        } else {
            out.push(Evicted { key: n.key, unused_prefetch: n.links.flag() });
            self.remember(h);
        }
    }

    /// Takes `key` out of `Qout` if it is there, returning its entry (still indexed) and remembered frequency.
    #[inline]
    fn take_ghost(&mut self, key: BlockKey) -> Option<(Handle, u32)> {
        let h = self.index.get(&self.arena, key)?;
        debug_assert_eq!(self.arena[h].queue, GHOST);
        self.qout.remove(&mut self.arena, h);
        Some((h, self.arena[h].freq))
    }

    /// Makes room, then places `key` with frequency `freq` at the MRU end of its queue.
    #[inline]
    fn insert(&mut self, key: BlockKey, ghost: Option<Handle>, freq: u32, prefetched: bool, out: &mut Vec<Evicted>) {
        while self.resident >= self.capacity {
            self.evict_one(out);
        }
        let node = Node { key, links: Links::default(), expire: self.now + self.life_time, freq, queue: 0 };
        let h = match ghost {
            Some(h) => {
                self.arena[h] = node;
                h
            }
            None => {
                let h = self.arena.alloc(node);
                self.index.insert(&self.arena, h);
                h
            }
        };
        self.arena[h].links.set_flag(prefetched);
        self.resident += 1;
        self.link(h, self.queue_of(freq));
    }

    /// The clock tick and demotion pass that end every demand access (the paper's `Adjust`).
    #[inline]
    fn adjust(&mut self) {
        self.now += 1;
        for k in 1..self.queues.len() {
            if let Some(h) = self.queues[k].back() {
                if self.arena[h].expire < self.now {
                    self.queues[k].remove(&mut self.arena, h);
                    self.arena[h].expire = self.now + self.life_time;
                    self.link(h, k - 1);
                }
            }
        }
    }

    /// Resident keys of queue `q`, MRU first (for tests and debugging).
    pub fn queue_keys(&self, q: usize) -> Vec<BlockKey> {
        self.queues[q].iter(&self.arena).map(|h| self.arena[h].key).collect()
    }

    /// `Qout` keys with their remembered frequencies, newest first (for tests and debugging).
    pub fn qout_entries(&self) -> Vec<(BlockKey, u32)> {
        self.qout.iter(&self.arena).map(|h| (self.arena[h].key, self.arena[h].freq)).collect()
    }

    /// The frequency of a resident block (for tests and debugging).
    pub fn freq(&self, key: BlockKey) -> Option<u32> {
        let h = self.index.get(&self.arena, key)?;
        (self.arena[h].queue != GHOST).then(|| self.arena[h].freq)
    }
}

impl Policy for Mq {
    type Config = MqConfig;

    fn preset(preset: Preset) -> MqConfig {
        match preset {
            Preset::Default | Preset::Libcachesim => MqConfig::default(),
            Preset::Butt05 => MqConfig { queues: 4, life_time: 10_000, qout_ratio: 1.0 },
        }
    }

    fn check_config(c: &MqConfig) -> Result<(), String> {
        if !(1..=MAX_QUEUES).contains(&c.queues) {
            return Err(format!("queues must be in 1..={MAX_QUEUES}, got {}", c.queues));
        }
        if c.life_time == 0 {
            return Err("life_time must be at least 1 access".into());
        }
        if !(0.0..=64.0).contains(&c.qout_ratio) {
            return Err(format!("qout_ratio must be in [0, 64], got {}", c.qout_ratio));
        }
        Ok(())
    }

    fn new(capacity: usize, config: &MqConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        if let Err(e) = Self::check_config(config) {
            panic!("mq: {e}");
        }
        let qout_cap = ((capacity as f64 * config.qout_ratio) as usize).min(MAX_ENTRIES.saturating_sub(capacity));
        Mq {
            capacity,
            life_time: config.life_time,
            qout_cap,
            now: 0,
            resident: 0,
            arena: Arena::with_capacity(capacity + qout_cap),
            index: KeyIndex::with_capacity(capacity + qout_cap),
            queues: vec![List::new(); config.queues as usize],
            qout: List::new(),
        }
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.resident
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.index.get(&self.arena, key).is_some_and(|h| self.arena[h].queue != GHOST)
    }

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        let outcome = match self.index.get(&self.arena, access.key) {
            Some(h) if self.arena[h].queue != GHOST => {
                let q = self.arena[h].queue as usize;
                self.queues[q].remove(&mut self.arena, h);
                let n = &mut self.arena[h];
                let prefetched = n.links.flag();
                n.links.set_flag(false);
                n.freq = (n.freq + 1).min(MAX_FREQ);
                n.expire = self.now + self.life_time;
                let freq = n.freq;
                self.link(h, self.queue_of(freq));
                if prefetched {
                    Outcome::PrefetchHit
                } else {
                    Outcome::Hit
                }
            }
            _ => {
                let (ghost, freq) = match self.take_ghost(access.key) {
                    Some((h, f)) => (Some(h), (f + 1).min(MAX_FREQ)),
                    None => (None, 1),
                };
                self.insert(access.key, ghost, freq, false, out);
                Outcome::Miss
            }
        };
        self.adjust();
        outcome
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        let mut n = 0;
        for a in group {
            if self.contains(a.key) {
                continue;
            }
            let (ghost, freq) = match self.take_ghost(a.key) {
                Some((h, f)) => (Some(h), f),
                None => (None, 0),
            };
            self.insert(a.key, ghost, freq, true, out);
            n += 1;
        }
        n
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        match self.index.get(&self.arena, key) {
            Some(h) if self.arena[h].queue != GHOST => {
                let q = self.arena[h].queue as usize;
                self.queues[q].remove(&mut self.arena, h);
                self.resident -= 1;
                self.index.forget(&mut self.arena, h);
                true
            }
            _ => false,
        }
    }

    fn validate(&self) -> Result<(), String> {
        let mut total = 0;
        for (q, list) in self.queues.iter().enumerate() {
            list.check(&self.arena).map_err(|e| format!("Q{q}: {e}"))?;
            total += list.len();
            for h in list.iter(&self.arena) {
                let n = &self.arena[h];
                if n.queue as usize != q {
                    return Err(format!("key {} on Q{q} but says Q{}", n.key, n.queue));
                }
                if q > self.queue_of(n.freq) {
                    return Err(format!("key {} with frequency {} above its queue, on Q{q}", n.key, n.freq));
                }
                if n.freq == 0 && !n.links.flag() {
                    return Err(format!("key {} accessed but with frequency 0", n.key));
                }
                if n.expire > self.now + self.life_time {
                    return Err(format!("key {} expires at {}, beyond now {} + life time", n.key, n.expire, self.now));
                }
                if self.index.get(&self.arena, n.key) != Some(h) {
                    return Err(format!("key {} on Q{q} but not indexed", n.key));
                }
            }
        }
        self.qout.check(&self.arena).map_err(|e| format!("Qout: {e}"))?;
        for h in self.qout.iter(&self.arena) {
            let n = &self.arena[h];
            if n.queue != GHOST || n.links.flag() || n.freq == 0 {
                return Err(format!(
                    "Qout entry {} has queue {} flag {} freq {}",
                    n.key,
                    n.queue,
                    n.links.flag(),
                    n.freq
                ));
            }
            if self.index.get(&self.arena, n.key) != Some(h) {
                return Err(format!("key {} in Qout but not indexed", n.key));
            }
        }
        if total != self.resident {
            return Err(format!("queues hold {total} blocks but {} resident", self.resident));
        }
        if self.resident > self.capacity {
            return Err(format!("{} blocks over capacity {}", self.resident, self.capacity));
        }
        if self.qout.len() > self.qout_cap {
            return Err(format!("Qout holds {} entries over its size {}", self.qout.len(), self.qout_cap));
        }
        if self.arena.len() != self.resident + self.qout.len() || self.index.len() != self.arena.len() {
            return Err(format!(
                "arena {} / index {} / resident {} + Qout {} disagree",
                self.arena.len(),
                self.index.len(),
                self.resident,
                self.qout.len()
            ));
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes() + self.index.heap_bytes() + self.queues.capacity() * std::mem::size_of::<List>()
    }

    /// Exact: the LRU block of the lowest non-empty queue when the cache is full (a miss evicts before the
    /// clock tick and demotion pass of `Adjust`).
    fn victim(&self, incoming: BlockKey) -> super::Victim {
        if self.contains(incoming) || self.resident < self.capacity {
            return super::Victim::None;
        }
        match self.queues.iter().find_map(|q| q.back()) {
            Some(h) => super::Victim::Block(self.arena[h].key),
            None => super::Victim::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::*;
    use crate::policy::testutil::{acc, k, keys};
    use crate::policy::PolicySpec;
    use proptest::prelude::*;

    fn cfg(queues: u32, life_time: u64, qout_ratio: f64) -> MqConfig {
        MqConfig { queues, life_time, qout_ratio }
    }

    #[test]
    fn node_is_32_bytes_as_documented() {
        assert_eq!(std::mem::size_of::<Node>(), 32);
    }

    #[test]
    fn metadata_is_as_documented() {
        // 38-43 bytes per entry; with qout_ratio 4 there are 5 entries per block of capacity.
        let per_block = Mq::new(10_000, &MqConfig::default()).heap_bytes() as f64 / 10_000.0;
        assert!((215.0..=275.0).contains(&per_block), "{per_block} bytes per block");
        let per_block = Mq::new(10_000, &cfg(4, 10, 0.0)).heap_bytes() as f64 / 10_000.0;
        assert!((43.0..=55.0).contains(&per_block), "{per_block} bytes per block");
    }

    #[test]
    fn frequency_picks_the_queue() {
        let mut p = Mq::new(8, &cfg(3, 1000, 1.0));
        for _ in 0..5 {
            acc(&mut p, 1); // f = 1..5
        }
        acc(&mut p, 2);
        acc(&mut p, 2); // f = 2
        acc(&mut p, 3); // f = 1
        assert_eq!(p.queue_keys(0), keys(&[3]));
        assert_eq!(p.queue_keys(1), keys(&[2]));
        assert_eq!(p.queue_keys(2), keys(&[1]), "f = 5 capped at the top queue");
        assert_eq!(p.freq(k(1)), Some(5));
    }

    #[test]
    fn evicts_lru_of_lowest_queue_and_remembers_frequency() {
        let mut p = Mq::new(2, &cfg(4, 1000, 1.0));
        acc(&mut p, 1);
        acc(&mut p, 1); // f(1) = 2, Q1
        acc(&mut p, 2); // Q0
        assert_eq!(acc(&mut p, 3).1, vec![Evicted { key: k(2), unused_prefetch: false }]);
        assert_eq!(p.qout_entries(), vec![(k(2), 1)]);
        // 3 is alone in Q0 and goes next; Qout (size 2) keeps both.
        acc(&mut p, 4);
        assert_eq!(p.qout_entries(), vec![(k(3), 1), (k(2), 1)]);
        // 2 comes back from Qout with f = 1 + 1 = 2 (Q1); it leaves Qout before 4 is recorded, so nothing drops.
        assert_eq!(acc(&mut p, 2).1, vec![Evicted { key: k(4), unused_prefetch: false }]);
        assert_eq!(p.freq(k(2)), Some(2));
        assert_eq!(p.qout_entries(), vec![(k(4), 1), (k(3), 1)]);
        assert_eq!(p.queue_keys(1), keys(&[2, 1]));
    }

    #[test]
    fn expired_blocks_are_demoted_one_queue() {
        // life_time 2: a block not referenced for more than 2 accesses drops a queue.
        let mut p = Mq::new(4, &cfg(3, 2, 1.0));
        for b in [1, 1, 1, 1] {
            acc(&mut p, b); // f = 4: Q2, expire = 3 + 2 = 5 after the 4th access (now = 4)
        }
        assert_eq!(p.queue_keys(2), keys(&[1]));
        acc(&mut p, 2); // now = 5: 5 < 5 is false
        assert_eq!(p.queue_keys(2), keys(&[1]));
        acc(&mut p, 3); // now = 6: expired, to Q1 with expire 8
        assert_eq!(p.queue_keys(1), keys(&[1]));
        acc(&mut p, 2); // now = 7
        acc(&mut p, 2); // now = 8
        assert_eq!(p.queue_keys(1), keys(&[2, 1]), "2 reached f = 3 and Q1; 1 not yet expired");
        acc(&mut p, 5); // now = 9: 1 expired again, to the MRU end of Q0 (Q0 itself is never demoted)
        assert_eq!(p.queue_keys(0), keys(&[1, 5, 3]));
    }

    #[test]
    fn prefetch_does_not_count_as_a_reference() {
        let mut p = Mq::new(3, &cfg(4, 1000, 1.0));
        let mut out = Vec::new();
        assert_eq!(p.prefetch(&[Access::new(k(1)), Access::new(k(2))], &mut out), 2);
        assert_eq!(p.freq(k(1)), Some(0));
        assert_eq!(acc(&mut p, 1).0, Outcome::PrefetchHit);
        assert_eq!(p.freq(k(1)), Some(1), "first demand access counts once");
        acc(&mut p, 3);
        // 2 (prefetched, unused) is the LRU of Q0: evicted, reported, and not remembered.
        let (_, ev) = acc(&mut p, 4);
        assert_eq!(ev, vec![Evicted { key: k(2), unused_prefetch: true }]);
        assert!(p.qout_entries().is_empty());
    }

    #[test]
    fn prefetch_of_a_remembered_block_keeps_its_history() {
        let mut p = Mq::new(1, &cfg(4, 1000, 4.0));
        acc(&mut p, 1);
        acc(&mut p, 1);
        acc(&mut p, 2); // 1 -> Qout with f = 2
        assert_eq!(p.qout_entries(), vec![(k(1), 2)]);
        let mut out = Vec::new();
        p.prefetch(&[Access::new(k(1))], &mut out); // 2 -> Qout (f = 1); 1 back with f = 2, not incremented
        assert_eq!(p.freq(k(1)), Some(2));
        assert_eq!(p.qout_entries(), vec![(k(2), 1)]);
        // Evicted unused: its remembered entry goes back to Qout unchanged, flagged as an unused prefetch.
        let (_, ev) = acc(&mut p, 3);
        assert_eq!(ev, vec![Evicted { key: k(1), unused_prefetch: true }]);
        assert_eq!(p.qout_entries(), vec![(k(1), 2), (k(2), 1)]);
        // Prefetched again and then used: f = 2 + 1, as if the demand access had come back from Qout.
        p.prefetch(&[Access::new(k(1))], &mut out);
        assert_eq!(acc(&mut p, 1).0, Outcome::PrefetchHit);
        assert_eq!(p.freq(k(1)), Some(3));
    }

    #[test]
    fn qout_is_a_bounded_fifo() {
        let mut p = Mq::new(2, &cfg(2, 1000, 1.5)); // Qout size floor(3.0) = 3
        for b in 0..10 {
            acc(&mut p, b);
        }
        assert_eq!(p.qout_entries().iter().map(|e| e.0).collect::<Vec<_>>(), keys(&[7, 6, 5]));
        let mut p = Mq::new(2, &cfg(2, 1000, 0.0));
        for b in 0..10 {
            acc(&mut p, b);
        }
        assert!(p.qout_entries().is_empty());
    }

    #[test]
    fn presets_and_bad_parameters() {
        assert_eq!(Mq::preset(Preset::Libcachesim), MqConfig { queues: 8, life_time: 10_000, qout_ratio: 4.0 });
        assert_eq!(Mq::preset(Preset::Butt05).queues, 4);
        assert_eq!(Mq::preset(Preset::Butt05).qout_ratio, 1.0);
        for bad in ["mq(queues=0)", "mq(queues=65)", "mq(life_time=0)", "mq(qout_ratio=-1)", "mq(lifetime=5)"] {
            assert!(PolicySpec::parse(bad).is_err(), "{bad}");
        }
        assert!(PolicySpec::parse("mq(queues=1,life_time=1,qout_ratio=0)").is_ok());
    }

    #[test]
    fn remove_drops_without_remembering() {
        let mut p = Mq::new(2, &cfg(4, 10, 1.0));
        acc(&mut p, 1);
        assert!(p.remove(k(1)));
        assert!(!p.remove(k(1)));
        assert!(p.qout_entries().is_empty());
        p.validate().unwrap();
        assert_eq!(p.len(), 0);
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(
            cap in 1usize..8,
            queues in 1u32..6,
            life_time in 1u64..12,
            qout_ratio in prop_oneof![Just(0.0), 0.0f64..5.0],
            ops in proptest::collection::vec(model::op(), 1..200),
        ) {
            model::run(Mq::new(cap, &cfg(queues, life_time, qout_ratio)), &ops)?;
        }
    }
}
