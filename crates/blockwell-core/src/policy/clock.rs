//! CLOCK: FIFO with second chances, generalised to an n-bit reference counter.
//!
//! **Paper.** F. J. Corbató, "A paging experiment with the Multics system", in *In Honor of Philip M. Morse*,
//! MIT Press, 1969 (MIT Project MAC report MAC-M-384, 1968); the n-bit ("generalised") form follows
//! A. J. Smith, "Sequentiality and prefetching in database systems", ACM TODS 3(3):223–247, 1978, and is the
//! form libCacheSim implements as `Clock(init_freq, n_bit_counter)`. Blocks sit in a FIFO; a hit raises the
//! block's counter by one (saturating at 2^bits − 1); to evict, the hand looks at the oldest block: if its counter
//! is non-zero it is decremented and the block goes back to the new end (a second chance), otherwise it is
//! evicted. The FIFO with re-insertion at the new end *is* the circular clock: moving the oldest block to the new
//! end is the hand moving past it.
//!
//! **Prefetch adaptation (seed `001_*` §4, in its spirit; the seed does not study CLOCK).** A prefetched block is
//! inserted at the new end like a missed block (the seed puts prefetched blocks where a demand-fetched block would
//! go), flagged *not yet accessed*, with its counter at **0** whatever `init_freq` is: it has not been referenced,
//! so the hand gives it no second chance. Its first demand access clears the flag, returns
//! [`Outcome::PrefetchHit`] and counts as the block's *first* reference: the counter becomes `init_freq`, exactly
//! the state a block inserted by a demand miss at that moment would have (a later hit then adds one as usual).
//! The block is not moved (no CLOCK hit moves a block; it has been in the cache since its prefetch). If the hand
//! evicts it with the flag still set, the eviction is reported with `unused_prefetch: true`. CLOCK keeps no
//! history, so there is no ghost list.
//!
//! **Parameters** ([`ClockConfig`]): `bits`, the counter width, 1..=8, default 1 (classic one-bit CLOCK, "second
//! chance"); `init_freq`, the counter of a newly inserted block, 0..=2^bits − 1, default 0. The defaults are
//! libcachesim 0.3.5's `Clock()` defaults (`n_bit_counter=1`, `init_freq=0`), and the same under every preset
//! ([`Preset::Default`](super::Preset::Default), [`Preset::Libcachesim`](super::Preset::Libcachesim),
//! [`Preset::Butt05`](super::Preset::Butt05)). Matches libcachesim's `Clock` exactly, including that the hand
//! runs (evicting one block) *before* the missed block is inserted. libcachesim accepts an `init_freq` above
//! the counter's maximum; Blockwell rejects it.
//!
//! **Metadata.** 16 bytes per cached block in the arena (8-byte key, two 31-bit links, the prefetch flag in a spare
//! link bit), 1 byte of counter in a side array indexed by handle, plus the handle index, 4 bytes + 1 tag byte per
//! bucket, reserved for twice the entries so that churn never makes it grow (`KeyIndex::with_capacity`): 11.4–22.9
//! bytes per entry depending on where the size falls between powers of two: 28.4–39.9 bytes per cached block. No
//! ghost entries.
//!
//! **Cost.** O(1) per hit and insert. An eviction is O(1) amortized: every step of the hand either evicts or
//! decrements a counter, and counters only grow by one per hit (or by `init_freq` per insertion), so the hand
//! makes at most 1 + `init_freq` steps per access on average; a single eviction can take up to
//! (2^bits − 1)·n + 1 steps. No allocation once the arena and index have grown to the capacity.

use super::onelist::OneList;
use super::{Access, Evicted, Outcome, Policy};
use crate::arena::{Keyed, Links, PackedKey};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// CLOCK's parameters (libcachesim `Clock(init_freq, n_bit_counter)`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ClockConfig {
    /// Width of the reference counter in bits, 1..=8 (libcachesim `n_bit_counter`).
    pub bits: u32,
    /// Counter value of a block inserted by a demand miss, 0..=2^bits − 1 (libcachesim `init_freq`).
    pub init_freq: u32,
}

impl Default for ClockConfig {
    fn default() -> Self {
        ClockConfig { bits: 1, init_freq: 0 }
    }
}

impl ClockConfig {
    /// Largest counter value.
    pub fn max_freq(&self) -> u32 {
        (1u32 << self.bits.min(8)) - 1
    }
}

#[derive(Clone, Debug)]
struct Node {
    key: PackedKey,
    /// Flag bit: prefetched, not yet accessed on demand.
    links: Links,
}

impl Node {
    #[inline]
    fn new(key: BlockKey) -> Self {
        Node { key: PackedKey::new(key), links: Links::default() }
    }
}

crate::arena::linked_by_field!(Node);
crate::arena::keyed_by_field!(Node);

/// The CLOCK policy. The list's front is the new end; the back is where the hand is.
#[derive(Clone, Debug)]
pub struct Clock {
    max_freq: u8,
    init_freq: u8,
    blocks: OneList<Node>,
    /// Reference counters, 0..=max_freq, indexed by handle (a side array keeps the arena entry at 16 bytes;
    /// handles never exceed the capacity, since CLOCK keeps no ghosts).
    freq: Vec<u8>,
}

impl Clock {
    /// Runs the hand until one block is evicted.
    #[inline]
    fn evict_one(&mut self, out: &mut Vec<Evicted>) {
        while let Some(h) = self.blocks.list.back() {
            let f = &mut self.freq[slot(h)];
            if *f > 0 {
                *f -= 1;
                self.blocks.list.move_to_front(&mut self.blocks.arena, h);
                continue;
            }
            self.blocks.evict(h, out);
            return;
        }
    }

    /// A hit on `h`: the counter goes up (to its maximum); a prefetched block's first access starts it at the
    /// initial value.
    #[inline(always)]
    fn on_hit(&mut self, h: crate::arena::Handle) -> Outcome {
        let n = &mut self.blocks.arena[h];
        let f = &mut self.freq[slot(h)];
        if n.links.flag() {
            n.links.set_flag(false);
            *f = self.init_freq;
            Outcome::PrefetchHit
        } else {
            if *f < self.max_freq {
                *f += 1;
            }
            Outcome::Hit
        }
    }

    #[inline]
    fn insert(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) {
        while self.blocks.is_full() {
            self.evict_one(out);
        }
        let h = self.blocks.push_front(Node::new(key), prefetched);
        self.freq[slot(h)] = if prefetched { 0 } else { self.init_freq };
    }

    /// Resident (key, counter) pairs from the new end to the hand (for tests and debugging).
    pub fn entries_newest_first(&self) -> Vec<(BlockKey, u8)> {
        self.blocks.iter().map(|(h, n)| (n.key(), self.freq[slot(h)])).collect()
    }
}

impl Policy for Clock {
    type Config = ClockConfig;

    fn check_config(c: &ClockConfig) -> Result<(), String> {
        if !(1..=8).contains(&c.bits) {
            return Err(format!("bits must be 1..=8, not {}", c.bits));
        }
        if c.init_freq > c.max_freq() {
            return Err(format!(
                "init_freq {} does not fit a {}-bit counter (max {})",
                c.init_freq,
                c.bits,
                c.max_freq()
            ));
        }
        Ok(())
    }

    fn new(capacity: usize, config: &ClockConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        if let Err(e) = Self::check_config(config) {
            panic!("invalid CLOCK configuration: {e}");
        }
        Clock {
            max_freq: config.max_freq() as u8,
            init_freq: config.init_freq as u8,
            blocks: OneList::new(capacity),
            freq: vec![0; capacity],
        }
    }

    super::onelist::one_list_policy_methods!();

    fn remove(&mut self, key: BlockKey) -> bool {
        self.blocks.remove(key)
    }

    fn validate(&self) -> Result<(), String> {
        self.blocks.validate()?;
        if self.init_freq > self.max_freq {
            return Err(format!("init_freq {} over max {}", self.init_freq, self.max_freq));
        }
        for (h, n) in self.blocks.iter() {
            let f = self.freq[slot(h)];
            if f > self.max_freq {
                return Err(format!("key {}: counter {f} over max {}", n.key(), self.max_freq));
            }
            if n.links.flag() && f != 0 {
                return Err(format!("key {}: unaccessed prefetched block with counter {f}", n.key()));
            }
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.blocks.heap_bytes() + self.freq.capacity()
    }

    /// Exact, on a read-only walk from the hand. The hand decrements each counter it passes and every block
    /// keeps its place in the circle, so the block at position i from the hand (0 = the hand) with counter f is
    /// reached with counter 0 after f·n + i steps: the victim is the first block from the hand with the smallest
    /// counter. The walk stops at the first 0 (where the hand would stop); it reads every block when no counter
    /// is 0.
    fn victim(&self, incoming: BlockKey) -> super::Victim {
        if !self.blocks.is_full() || self.blocks.contains(incoming) {
            return super::Victim::None;
        }
        let mut best: Option<(u8, crate::arena::Handle)> = None;
        let mut h = self.blocks.list.back();
        while let Some(x) = h {
            let f = self.freq[slot(x)];
            if best.map_or(true, |(b, _)| f < b) {
                best = Some((f, x));
                if f == 0 {
                    break;
                }
            }
            h = crate::arena::List::prev_of(&self.blocks.arena, x);
        }
        best.map_or(super::Victim::None, |(_, x)| super::Victim::Block(self.blocks.arena[x].key()))
    }
}

/// The side-array slot of a handle.
#[inline]
fn slot(h: crate::arena::Handle) -> usize {
    (h.get() - 1) as usize
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::super::{PolicyKind, PolicySpec, Preset};
    use super::*;
    use crate::policy::testutil::{acc, ev, k};
    use proptest::prelude::*;

    fn clock(cap: usize, bits: u32, init_freq: u32) -> Clock {
        Clock::new(cap, &ClockConfig { bits, init_freq })
    }
    fn entries(p: &Clock) -> Vec<(u64, u8)> {
        p.entries_newest_first().into_iter().map(|(k, f)| (k.block(), f)).collect()
    }

    #[test]
    fn node_is_sixteen_bytes() {
        assert_eq!(std::mem::size_of::<Node>(), 16);
        let key = BlockKey::new(0xfedc, 0xba98_7654_3210).unwrap();
        assert_eq!(Node::new(key).key(), key);
    }

    #[test]
    fn metadata_is_as_documented() {
        for cap in [1_000, 10_000, 100_000, 1 << 20] {
            let per_block = clock(cap, 8, 0).heap_bytes() as f64 / cap as f64;
            assert!((28.4..=40.0).contains(&per_block), "{per_block} bytes per block at {cap}");
        }
    }

    #[test]
    fn one_bit_second_chance() {
        let mut p = clock(3, 1, 0);
        for b in [1, 2, 3] {
            assert_eq!(acc(&mut p, b).0, Outcome::Miss);
        }
        // 1 referenced (twice: the counter saturates at 1).
        assert_eq!(acc(&mut p, 1).0, Outcome::Hit);
        assert_eq!(acc(&mut p, 1).0, Outcome::Hit);
        assert_eq!(entries(&p), vec![(3, 0), (2, 0), (1, 1)]);
        // The hand clears 1 and moves it to the new end, then evicts 2.
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(2, false)]));
        assert_eq!(entries(&p), vec![(4, 0), (1, 0), (3, 0)]);
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![ev(3, false)]));
        assert_eq!(acc(&mut p, 6), (Outcome::Miss, vec![ev(1, false)]));
    }

    #[test]
    fn all_referenced_means_a_full_sweep_then_the_oldest_goes() {
        let mut p = clock(3, 1, 0);
        for b in [1, 2, 3, 1, 2, 3] {
            acc(&mut p, b);
        }
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(entries(&p), vec![(4, 0), (3, 0), (2, 0)]);
    }

    #[test]
    fn two_bit_counter_saturates_at_three() {
        let mut p = clock(2, 2, 0);
        acc(&mut p, 1);
        acc(&mut p, 2);
        for _ in 0..5 {
            acc(&mut p, 1);
        }
        acc(&mut p, 2);
        assert_eq!(entries(&p), vec![(2, 1), (1, 3)]);
        // Hand: 1 (3→2, to front), 2 (1→0, to front), 1 (2→1), 2 evicted.
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, vec![ev(2, false)]));
        assert_eq!(entries(&p), vec![(3, 0), (1, 1)]);
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(3, false)]));
        assert_eq!(entries(&p), vec![(4, 0), (1, 0)]);
    }

    #[test]
    fn init_freq_gives_new_blocks_a_chance() {
        let mut p = clock(2, 2, 1);
        acc(&mut p, 1);
        acc(&mut p, 2);
        assert_eq!(entries(&p), vec![(2, 1), (1, 1)]);
        // Hand: 1 (1→0, front), 2 (1→0, front), 1 evicted.
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(entries(&p), vec![(3, 1), (2, 0)]);
    }

    #[test]
    fn capacity_one() {
        let mut p = clock(1, 1, 0);
        acc(&mut p, 1);
        acc(&mut p, 1);
        assert_eq!(acc(&mut p, 2), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(entries(&p), vec![(2, 0)]);
    }

    #[test]
    fn prefetched_blocks_have_no_reference_until_accessed() {
        let mut p = clock(3, 2, 1);
        acc(&mut p, 1);
        let mut out = Vec::new();
        assert_eq!(p.prefetch(&[Access::new(k(2)), Access::new(k(3)), Access::new(k(1))], &mut out), 2);
        p.validate().unwrap();
        assert_eq!(entries(&p), vec![(3, 0), (2, 0), (1, 1)], "prefetched at counter 0, resident 1 untouched");
        // First access: the first reference, counter = init_freq (not init_freq + 1).
        assert_eq!(acc(&mut p, 2).0, Outcome::PrefetchHit);
        assert_eq!(entries(&p), vec![(3, 0), (2, 1), (1, 1)], "not moved");
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        assert_eq!(entries(&p), vec![(3, 0), (2, 2), (1, 1)]);
        // Hand: 1 (1→0, front), 2 (2→1, front), 3 unused prefetch evicted.
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(3, true)]));
        assert_eq!(entries(&p), vec![(4, 1), (2, 1), (1, 0)]);
    }

    #[test]
    fn remove_drops_a_block() {
        let mut p = clock(2, 1, 0);
        acc(&mut p, 1);
        acc(&mut p, 2);
        acc(&mut p, 2);
        assert!(p.remove(k(1)));
        assert!(!p.remove(k(1)));
        p.validate().unwrap();
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, vec![]));
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(3, false)]));
    }

    #[test]
    fn config_is_checked_when_the_spec_is_parsed() {
        assert!(PolicySpec::parse("clock(bits=2,init_freq=3)").is_ok());
        for bad in ["clock(bits=0)", "clock(bits=9)", "clock(init_freq=2)", "clock(bits=2,init_freq=4)"] {
            let e = PolicySpec::parse(bad).unwrap_err();
            assert!(e.to_string().contains("bits") || e.to_string().contains("init_freq"), "{bad}: {e}");
        }
        assert!(PolicySpec::parse("clock(n_bits=2)").is_err());
        let spec = PolicySpec::new(PolicyKind::Clock);
        for &p in Preset::ALL {
            assert_eq!(spec.config(p).unwrap(), serde_json::json!({"bits": 1, "init_freq": 0}));
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(
            cap in 1usize..9,
            bits in 1u32..4,
            init in 0u32..8,
            ops in prop::collection::vec(model::op(), 1..300),
        ) {
            let c = ClockConfig { bits, init_freq: init.min((1 << bits) - 1) };
            model::run(Clock::new(cap, &c), &ops)?;
        }
    }
}
