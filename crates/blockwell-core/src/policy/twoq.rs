//! 2Q: a FIFO for blocks seen once (A1in), a ghost FIFO of their keys (A1out), an LRU for the rest (Am).
//!
//! **Paper.** T. Johnson and D. Shasha, "2Q: A Low Overhead High Performance Buffer Management Replacement
//! Algorithm", Proceedings of the 20th International Conference on Very Large Data Bases (VLDB '94), Santiago de
//! Chile, September 1994, pp. 439–450: the "full version" with `Kin` and `Kout`. A missed block enters A1in; when
//! the cache is full and |A1in| > Kin, A1in's oldest block is paged out and its key enters A1out (whose oldest key
//! is forgotten when |A1out| would exceed Kout), otherwise Am's LRU block is paged out. A hit in A1in does nothing;
//! a hit in Am moves the block to Am's MRU end; a miss whose key is in A1out puts the block at Am's MRU end.
//!
//! **Prefetch adaptation (seed `001_*` §4, "2Q").** A prefetched block goes to A1in (its newest end), flagged *not
//! yet accessed*. Its first demand access leaves it in A1in, as if it were being accessed for the first time (it
//! clears the flag). If it is evicted from A1in before any demand access it is discarded, not put into A1out, so
//! that its real first access is not mistaken for a second one. A prefetch of a block whose key is in A1out promotes
//! it to Am "as if it is accessed on demand" (flagged, so that its first demand access reports a prefetch hit and an
//! eviction before that reports an unused prefetch). Room for a prefetched block is made as for a demand miss.
//!
//! **Parameters** ([`TwoQConfig`]): `a_in_ratio` (Kin = ⌊c · a_in_ratio⌋ blocks, 0 < a_in_ratio < 1) and
//! `a_out_ratio` (Kout = ⌊c · a_out_ratio⌋ ghost keys, ≥ 0), both rounded down as libCacheSim does.
//!
//! | preset | `a_in_ratio` | `a_out_ratio` | source |
//! |---|---|---|---|
//! | `Default` | 0.25 | 0.5 | equal to libcachesim (the paper's recommended Kin = 25 %, Kout = 50 %) |
//! | `Libcachesim` | 0.25 | 0.5 | libcachesim 0.3.5 `TwoQ(a_in_size_ratio=0.25, a_out_size_ratio=0.5)` |
//! | `Butt05` | 0.25 | 1.0 | seed `001_*` Table 4: "A1in = 25% of cache, ghost cache = cache size" |
//!
//! Under `Default` and `Libcachesim` miss ratios equal libcachesim's `TwoQ` exactly, except in caches so small
//! that Kin rounds down to 0 (c · a_in_ratio < 1, e.g. c ≤ 3 at 0.25): there libcachesim admits **nothing** (its
//! `TwoQ_can_insert` requires a block to fit in A1in) and every access misses. `libcachesim_quirks` (on in the
//! `Libcachesim` preset only) reproduces that; otherwise Kin is at least one block. When Kout rounds down to 0
//! there is no ghost list (blocks leaving A1in are forgotten). Further consequences of matching it:
//! - A1in is not capped at Kin: it holds every block until the cache is full, and only then shrinks to Kin as Am
//!   fills. This is the paper's algorithm too.
//!
//! libCacheSim also caps Am at c − Kin on its own (an A1out hit with Am at that size evicts Am's LRU block even if
//! the cache has a free slot). Without [`Policy::remove`] that cap never binds (once the cache has filled, |A1in| ≥
//! Kin, so |Am| ≤ c − Kin whenever a block enters Am), so we follow the paper instead: a free slot is always used.
//!
//! **Metadata.** One arena entry per resident block and per A1out key: 20 bytes (the 8-byte key stored as two `u32` so
//! the entry has 4-byte alignment, two 31-bit links plus the prefetch flag, one state byte naming the queue), plus the
//! handle index at 5 bytes a bucket (4-byte handle, 1 control byte). Every miss removes and inserts keys, and under
//! such churn hashbrown keeps at least twice as many slots as entries (we size it so from the start), i.e. 16/7 to 32/7
//! buckets per entry after power-of-two rounding: ≈ 11–23 bytes per entry. In all ≈ 31–43 bytes per cached block and
//! the same per ghost key; with A1out full (Kout = c/2 by default) ≈ 47–64 bytes per cached block. Measured on the
//! CloudPhysics trace at c = 26921: `heap_bytes()` / c = 54.3.
//!
//! **Cost.** O(1) per access, prefetched block, eviction and removal. No allocation per access: the arena and the
//! index are sized for c + Kout entries up front, and an A1out hit reuses the ghost's arena slot and index entry.

use super::multilist::{MultiList, LIST};
use super::{Access, Evicted, Outcome, Policy, Preset};
use crate::arena::Handle;
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// 2Q's parameters: queue sizes as fractions of the cache size in blocks.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TwoQConfig {
    /// Kin / c: the size A1in is trimmed to once the cache is full. 0 < a_in_ratio < 1.
    pub a_in_ratio: f64,
    /// Kout / c: how many keys of blocks paged out of A1in are remembered. ≥ 0.
    pub a_out_ratio: f64,
    /// Round Kin down to 0 when c · a_in_ratio < 1, admitting nothing, as libcachesim 0.3.5 does. Off: Kin is at
    /// least one block.
    #[serde(default)]
    pub libcachesim_quirks: bool,
}

impl Default for TwoQConfig {
    fn default() -> Self {
        TwoQConfig { a_in_ratio: 0.25, a_out_ratio: 0.5, libcachesim_quirks: false }
    }
}

/// Which queue an entry is on (its whole state).
const A1IN: u8 = 0;
const AM: u8 = 1;
const A1OUT: u8 = 2;

/// The 2Q policy. Each queue's front is its newest (MRU) end. An entry's flag bit is "prefetched, not yet
/// accessed" (never set on A1out keys).
#[derive(Clone, Debug)]
pub struct TwoQ {
    /// Kin: A1in is paged out from only while it holds more than this.
    kin: usize,
    /// Kout: most keys A1out remembers.
    kout: usize,
    lists: MultiList<3>,
}

impl TwoQ {
    /// The paper's `reclaimfor`: pages out one block when the cache is full.
    #[inline]
    fn reclaim(&mut self, out: &mut Vec<Evicted>) {
        let l = &mut self.lists;
        while l.resident() >= l.capacity() {
            if l.len(A1IN) > self.kin || l.is_empty(AM) {
                let Some(h) = l.pop_back(A1IN) else { return };
                if self.kout == 0 {
                    l.evict(h, out);
                } else {
                    // An unused prefetch is forgotten; any other block's key goes to A1out.
                    l.retire(h, A1OUT, out);
                    l.trim(A1OUT, self.kout);
                }
            } else if let Some(h) = l.pop_back(AM) {
                l.evict(h, out);
            }
        }
    }

    /// A new block (not in any queue) into A1in.
    #[inline]
    fn admit(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) {
        self.reclaim(out);
        self.lists.insert(key, A1IN, prefetched);
    }

    /// A key found in A1out (already unlinked from it) becomes a block at Am's MRU end.
    #[inline]
    fn promote(&mut self, h: Handle, prefetched: bool, out: &mut Vec<Evicted>) {
        self.reclaim(out);
        self.lists.node_mut(h).links.set_flag(prefetched);
        self.lists.push_front(h, AM);
    }

    /// Kin and Kout, in blocks.
    pub fn sizes(&self) -> (usize, usize) {
        (self.kin, self.kout)
    }

    /// Keys of A1in, Am and A1out, each newest first (for tests and debugging).
    pub fn queues(&self) -> [Vec<BlockKey>; 3] {
        [A1IN, AM, A1OUT].map(|l| self.lists.keys(l))
    }
}

/// ⌊c · ratio⌋, as libCacheSim computes it (a `double` product assigned to an `int64_t`).
fn scaled(capacity: usize, ratio: f64) -> usize {
    (capacity as f64 * ratio) as usize
}

impl Policy for TwoQ {
    type Config = TwoQConfig;

    fn preset(preset: Preset) -> TwoQConfig {
        match preset {
            Preset::Default => TwoQConfig::default(),
            Preset::Libcachesim => TwoQConfig { libcachesim_quirks: true, ..TwoQConfig::default() },
            Preset::Butt05 => TwoQConfig { a_in_ratio: 0.25, a_out_ratio: 1.0, libcachesim_quirks: false },
        }
    }

    fn check_config(c: &TwoQConfig) -> Result<(), String> {
        if !(c.a_in_ratio > 0.0 && c.a_in_ratio < 1.0) {
            return Err(format!("a_in_ratio must be in (0, 1), got {}", c.a_in_ratio));
        }
        if !(c.a_out_ratio >= 0.0 && c.a_out_ratio.is_finite()) {
            return Err(format!("a_out_ratio must be a finite number >= 0, got {}", c.a_out_ratio));
        }
        Ok(())
    }

    fn libcachesim_quirks(c: &TwoQConfig) -> bool {
        c.libcachesim_quirks
    }

    fn new(capacity: usize, config: &TwoQConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        if let Err(e) = Self::check_config(config) {
            panic!("invalid 2Q configuration: {e}");
        }
        let kin = scaled(capacity, config.a_in_ratio).min(capacity);
        let kin = if config.libcachesim_quirks { kin } else { kin.max(1) };
        let kout = scaled(capacity, config.a_out_ratio);
        TwoQ { kin, kout, lists: MultiList::new(capacity, capacity.saturating_add(kout)) }
    }

    fn capacity(&self) -> usize {
        self.lists.capacity()
    }

    fn len(&self) -> usize {
        self.lists.resident()
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.lists.contains(key)
    }

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        let Some(h) = self.lists.get(access.key) else {
            if self.kin > 0 {
                self.admit(access.key, false, out);
            }
            return Outcome::Miss;
        };
        match self.lists.node(h).state {
            A1IN => {}
            AM => self.lists.move_to_front(h),
            _ => {
                self.lists.unlink(h);
                self.promote(h, false, out);
                return Outcome::Miss;
            }
        }
        let links = &mut self.lists.node_mut(h).links;
        if links.flag() {
            links.set_flag(false);
            Outcome::PrefetchHit
        } else {
            Outcome::Hit
        }
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        let mut n = 0;
        if self.kin == 0 {
            return 0; // nothing is admitted (see the module docs)
        }
        for a in group {
            match self.lists.get(a.key) {
                Some(h) if self.lists.node(h).state == A1OUT => {
                    self.lists.unlink(h);
                    self.promote(h, true, out);
                }
                Some(_) => continue, // resident: a prefetch is not a reference
                None => self.admit(a.key, true, out),
            }
            n += 1;
        }
        n
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        self.lists.remove(key)
    }

    fn validate(&self) -> Result<(), String> {
        self.lists.validate(["A1in", "Am", "A1out"], |_, n| {
            if n.state & !LIST != 0 {
                return Err(format!("stray state bits {:#x}", n.state));
            }
            Ok(())
        })?;
        let a1out = self.lists.len(A1OUT);
        if a1out > self.kout {
            return Err(format!("|A1out| = {a1out} > Kout = {}", self.kout));
        }
        let total = self.lists.resident() + a1out;
        if self.kin == 0 && total > 0 {
            return Err(format!("Kin = 0 admits nothing, yet {total} entries"));
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.lists.heap_bytes()
    }

    /// Exact: `reclaimfor`'s choice when the cache is full (A1in's oldest block while A1in is over Kin or Am is
    /// empty, else Am's LRU block), for a key in A1out as for a new one; nothing when Kin = 0 admits nothing.
    fn victim(&self, incoming: BlockKey) -> super::Victim {
        let l = &self.lists;
        let ghost = match l.get(incoming) {
            Some(h) => l.node(h).state == A1OUT,
            None => false,
        };
        if l.contains(incoming) || (!ghost && self.kin == 0) || l.resident() < l.capacity() {
            return super::Victim::None;
        }
        if l.len(A1IN) > self.kin || l.is_empty(AM) {
            l.back_victim(A1IN)
        } else {
            l.back_victim(AM)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::*;
    use crate::policy::testutil::{k, keys, pf};
    use proptest::prelude::*;

    fn new(c: usize) -> TwoQ {
        TwoQ::new(c, &TwoQConfig::default())
    }
    fn acc(p: &mut TwoQ, b: u64) -> (Outcome, Vec<BlockKey>) {
        let mut out = Vec::new();
        let o = p.access(Access::new(k(b)), &mut out);
        p.validate().unwrap();
        (o, out.iter().map(|e| e.key).collect())
    }
    fn assert_queues(p: &TwoQ, a1in: &[u64], am: &[u64], a1out: &[u64]) {
        assert_eq!(p.queues(), [keys(a1in), keys(am), keys(a1out)], "[A1in, Am, A1out] newest first");
    }

    #[test]
    fn sizes_round_down_like_libcachesim() {
        assert_eq!(new(4).sizes(), (1, 2));
        assert_eq!(new(10).sizes(), (2, 5));
        assert_eq!(new(2692).sizes(), (673, 1346));
        assert_eq!(new(13460).sizes(), (3365, 6730));
        assert_eq!(TwoQ::new(7, &TwoQ::preset(Preset::Butt05)).sizes(), (1, 7));
    }

    #[test]
    fn fifo_a1in_ghost_a1out_lru_am() {
        // c = 4: Kin = 1, Kout = 2.
        let mut p = new(4);
        for b in [1, 2, 3, 4] {
            assert_eq!(acc(&mut p, b), (Outcome::Miss, vec![]));
        }
        assert_eq!(acc(&mut p, 1), (Outcome::Hit, vec![]), "A1in hit does nothing");
        assert_queues(&p, &[4, 3, 2, 1], &[], &[]);
        // Full, |A1in| = 4 > Kin: A1in's oldest (1, although just hit) goes to A1out.
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, keys(&[1])));
        assert_eq!(acc(&mut p, 6), (Outcome::Miss, keys(&[2])));
        assert_eq!(acc(&mut p, 7), (Outcome::Miss, keys(&[3])), "A1out over Kout forgets 1");
        assert_queues(&p, &[7, 6, 5, 4], &[], &[3, 2]);
        // A1out hit: 3 leaves A1out, reclaim pages out A1in's oldest (4 → A1out), 3 goes to Am.
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, keys(&[4])));
        assert_queues(&p, &[7, 6, 5], &[3], &[4, 2]);
        assert_eq!(acc(&mut p, 2), (Outcome::Miss, keys(&[5])));
        assert_queues(&p, &[7, 6], &[2, 3], &[5, 4]);
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, keys(&[6])));
        assert_queues(&p, &[7], &[4, 2, 3], &[6, 5]);
        assert_eq!(acc(&mut p, 3), (Outcome::Hit, vec![]));
        assert_queues(&p, &[7], &[3, 4, 2], &[6, 5]);
        // |A1in| = 1 = Kin: not over, so Am's LRU (2) is paged out, and forgotten.
        assert_eq!(acc(&mut p, 8), (Outcome::Miss, keys(&[2])));
        assert_queues(&p, &[8, 7], &[3, 4], &[6, 5]);
        // |A1in| = 2 > Kin: 7 to A1out, which forgets its oldest key (5) to stay within Kout = 2.
        assert_eq!(acc(&mut p, 9), (Outcome::Miss, keys(&[7])));
        assert_queues(&p, &[9, 8], &[3, 4], &[7, 6]);
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, keys(&[8])), "5 was forgotten: a plain miss into A1in");
        assert_queues(&p, &[5, 9], &[3, 4], &[8, 7]);
    }

    #[test]
    fn tiny_cache_admits_nothing_only_in_libcachesim_quirks_mode() {
        let mut d = TwoQ::new(3, &TwoQConfig::default());
        assert_eq!(d.sizes().0, 1, "Kin is at least one block by default");
        acc(&mut d, 1);
        assert_eq!(acc(&mut d, 1).0, Outcome::Hit);
        let mut p = TwoQ::new(3, &TwoQ::preset(Preset::Libcachesim));
        for b in [1, 1, 2, 1] {
            assert_eq!(acc(&mut p, b).0, Outcome::Miss);
        }
        assert_eq!(pf(&mut p, &[5]).0, 0);
        assert_eq!(p.len(), 0);
        let mut p = TwoQ::new(3, &TwoQConfig { a_in_ratio: 0.34, a_out_ratio: 0.5, ..TwoQConfig::default() });
        acc(&mut p, 1);
        assert_eq!(acc(&mut p, 1).0, Outcome::Hit);
    }

    #[test]
    fn no_ghosts_when_kout_is_zero() {
        let mut p = TwoQ::new(4, &TwoQConfig { a_in_ratio: 0.25, a_out_ratio: 0.0, ..TwoQConfig::default() });
        for b in 1..=5 {
            acc(&mut p, b);
        }
        assert_queues(&p, &[5, 4, 3, 2], &[], &[]);
        assert_eq!(acc(&mut p, 1).0, Outcome::Miss);
        assert_queues(&p, &[1, 5, 4, 3], &[], &[]);
    }

    #[test]
    fn prefetched_block_stays_in_a1in_and_is_not_a_ghost_if_unused() {
        let mut p = new(4);
        acc(&mut p, 1);
        assert_eq!(pf(&mut p, &[2, 3, 1]).0, 2);
        assert_queues(&p, &[3, 2, 1], &[], &[]);
        assert_eq!(acc(&mut p, 2).0, Outcome::PrefetchHit);
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        assert_queues(&p, &[3, 2, 1], &[], &[]);
        acc(&mut p, 4);
        // Pages out 1 (accessed: → A1out), 2 (accessed on demand: → A1out), 3 (never accessed: discarded).
        let mut out = Vec::new();
        for b in [5, 6, 7] {
            p.access(Access::new(k(b)), &mut out);
            p.validate().unwrap();
        }
        assert_eq!(
            out,
            vec![
                Evicted { key: k(1), unused_prefetch: false },
                Evicted { key: k(2), unused_prefetch: false },
                Evicted { key: k(3), unused_prefetch: true },
            ]
        );
        assert_queues(&p, &[7, 6, 5, 4], &[], &[2, 1]);
        assert_eq!(acc(&mut p, 3).0, Outcome::Miss);
        assert_queues(&p, &[3, 7, 6, 5], &[], &[4, 2]);
    }

    #[test]
    fn prefetch_of_a1out_key_promotes_to_am() {
        let mut p = new(4);
        for b in 1..=5 {
            acc(&mut p, b);
        }
        assert_queues(&p, &[5, 4, 3, 2], &[], &[1]);
        let (n, out) = pf(&mut p, &[1]);
        assert_eq!(n, 1);
        assert_eq!(out, vec![Evicted { key: k(2), unused_prefetch: false }]);
        assert_queues(&p, &[5, 4, 3], &[1], &[2]);
        assert_eq!(acc(&mut p, 1).0, Outcome::PrefetchHit);
        assert_eq!(acc(&mut p, 1).0, Outcome::Hit);
        // An unused one reports so when Am pages it out.
        pf(&mut p, &[2]); // 3 paged out; 2 → Am (flagged)
        assert_queues(&p, &[5, 4], &[2, 1], &[3]);
        acc(&mut p, 1);
        for b in [6, 7, 8] {
            acc(&mut p, b); // |A1in| = 2 > Kin each time: A1in's oldest is paged out
        }
        assert_queues(&p, &[8, 7], &[1, 2], &[6, 5]);
        acc(&mut p, 6); // A1out hit: 7 paged out, 6 → Am; |A1in| = 1 = Kin now
        assert_queues(&p, &[8], &[6, 1, 2], &[7, 5]);
        let mut out = Vec::new();
        p.access(Access::new(k(9)), &mut out);
        assert_eq!(out, vec![Evicted { key: k(2), unused_prefetch: true }]);
    }

    #[test]
    fn remove_keeps_ghosts() {
        let mut p = new(4);
        for b in 1..=5 {
            acc(&mut p, b);
        }
        assert!(!p.remove(k(1)), "ghost");
        assert!(p.remove(k(3)));
        assert_eq!(acc(&mut p, 1), (Outcome::Miss, vec![]), "free slot used, no page-out");
        assert_queues(&p, &[5, 4, 2], &[1], &[]);
    }

    #[test]
    fn config_checks() {
        use crate::policy::{PolicyKind, PolicySpec};
        assert!(PolicySpec::parse("2q(a_in_ratio=0.3,a_out_ratio=1)").is_ok());
        assert_eq!(PolicySpec::parse("two-q").unwrap().kind, PolicyKind::TwoQ);
        assert_eq!(PolicySpec::parse("TwoQ").unwrap().kind, PolicyKind::TwoQ);
        for bad in ["2q(a_in_ratio=0)", "2q(a_in_ratio=1)", "2q(a_in_ratio=-0.1)", "2q(a_out_ratio=-1)"] {
            let e = PolicySpec::parse(bad).unwrap_err().to_string();
            assert!(e.contains("ratio"), "{bad}: {e}");
        }
        assert!(PolicySpec::parse("2q(kin=3)").is_err());
        let seed = PolicySpec::parse("2q").unwrap().config(Preset::Butt05).unwrap();
        assert_eq!(seed["a_out_ratio"], 1.0);
    }

    #[test]
    fn entry_is_20_bytes() {
        assert_eq!(
            std::mem::size_of::<super::super::multilist::Node>(),
            20,
            "the module docs state the metadata per entry"
        );
    }

    /// The paper's full 2Q with libCacheSim's sizes, on plain vectors (index 0 = newest), O(n) per step.
    struct Model {
        c: usize,
        kin: usize,
        kout: usize,
        q: [Vec<u64>; 3], // A1in, Am, A1out
    }

    impl Model {
        fn reclaim(&mut self) {
            if self.q[0].len() + self.q[1].len() < self.c {
                return;
            }
            if self.q[0].len() > self.kin || self.q[1].is_empty() {
                let y = self.q[0].pop().unwrap();
                if self.kout > 0 {
                    if self.q[2].len() == self.kout {
                        self.q[2].pop();
                    }
                    self.q[2].insert(0, y);
                }
            } else {
                self.q[1].pop();
            }
        }
        fn access(&mut self, x: u64) -> bool {
            if self.q[0].contains(&x) {
                return true;
            }
            if let Some(j) = self.q[1].iter().position(|&y| y == x) {
                self.q[1].remove(j);
                self.q[1].insert(0, x);
                return true;
            }
            if self.kin == 0 {
                return false;
            }
            if let Some(j) = self.q[2].iter().position(|&y| y == x) {
                self.q[2].remove(j);
                self.reclaim();
                self.q[1].insert(0, x);
            } else {
                self.reclaim();
                self.q[0].insert(0, x);
            }
            false
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(
            cap in 1usize..12,
            a_in in 0.05f64..0.95,
            a_out in 0.0f64..2.0,
            quirks in proptest::bool::ANY,
            ops in proptest::collection::vec(model::op(), 1..300),
        ) {
            let config = TwoQConfig { a_in_ratio: a_in, a_out_ratio: a_out, libcachesim_quirks: quirks };
            // With the quirks, a cache whose Kin rounds down to 0 admits nothing.
            model::run_with(TwoQ::new(cap, &config), &ops, quirks)?;
        }

        #[test]
        fn agrees_with_a_naive_model(
            cap in 1usize..12,
            a_in in 0.05f64..0.95,
            a_out in 0.0f64..2.0,
            quirks in proptest::bool::ANY,
            trace in proptest::collection::vec(0u64..30, 1..400),
        ) {
            let mut p = TwoQ::new(cap, &TwoQConfig { a_in_ratio: a_in, a_out_ratio: a_out, libcachesim_quirks: quirks });
            let (kin, kout) = p.sizes();
            let mut m = Model { c: cap, kin, kout, q: Default::default() };
            let mut out = Vec::new();
            for (i, &b) in trace.iter().enumerate() {
                let hit = p.access(Access::new(k(b)), &mut out).is_hit();
                prop_assert_eq!(hit, m.access(b), "access {} to {}", i, b);
            }
            prop_assert_eq!(p.queues(), m.q.clone().map(|v| keys(&v)));
        }
    }
}
