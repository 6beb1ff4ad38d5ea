//! Set associativity: any policy, run separately in each set of a set-associative cache.
//!
//! **Source.** FlashCache (Facebook, `facebookarchive/flashcache`, itself based on Ming Zhao's dm-cache): "the cache
//! is divided up into a number of fixed size sets (buckets)", a block's set is "(dbn / block size / set size) mod
//! (number of sets)", so that "a sequential range of disk blocks will all map onto a given set", and "replacement
//! policy is either FIFO or LRU within a cache set" (`doc/flashcache-doc.txt`). The code is `hash_block` in
//! `src/flashcache_main.c`: `(dbn >> (block_shift + assoc_shift)) % num_sets`. The set size defaults to 512
//! blocks (`DEFAULT_CACHE_ASSOC`, `src/flashcache.h`); FlashCache accepts powers of two from 256 to 8192 and rounds
//! the cache down to whole sets (`src/flashcache_conf.c`). Its on-SSD format version 3 can instead place each
//! `disk_assoc` run of sectors in a set picked by `jhash_1word`; that variant is not modelled here. The original
//! dm-cache (`mingzhao/dm-cache`, `stable/3.0/dm-cache.c`: `hash_block` hashes the run number with `hash_long`;
//! 1024 ways by default, LRU within a set) and EnhanceIO (`stec-inc/EnhanceIO`, `Driver/enhanceio/eio_mem.c`:
//! `EIO_DBN_TO_SET` masks the run number to the sets; 512 ways by default; random, FIFO or LRU within a set) are
//! set-associative the same way.
//!
//! **What it does.** [`SetAssoc<P>`] splits a capacity of `c` blocks into `⌈c / ways⌉` sets of `ways` blocks and
//! runs one instance of the inner policy `P` (any engine policy, with its configuration) in each. Block `b` of
//! volume `v` belongs to set `(⌊b / ways⌋ + mix(v)) mod sets`: FlashCache's hash, with `mix(0) = 0` so that a
//! single volume maps exactly as FlashCache maps its disk; other volumes start at a pseudo-random set
//! (a multiplicative hash of the volume number) so that block 0 of every volume does not land in one set. Runs of
//! `ways` consecutive blocks share a set and consecutive runs go to consecutive sets. A lookup, a demand access and a
//! removal touch the block's set only; a miss evicts only within that set, the victim the inner policy would choose
//! among the set's blocks; ghost history (ARC's B1/B2, 2Q's A1out, ...) is kept per set. Ratios of a policy's
//! configuration apply to each set (2Q's A1in in an 8-way set is 2 blocks).
//!
//! **Capacity not a multiple of `ways`.** The last set is smaller: it holds `c mod ways` blocks, so
//! [`Policy::capacity`] is exactly `c` (a policy is sized to its cache's byte budget; FlashCache instead rounds the
//! cache down to whole sets). The hash sends as many runs to the short set as to any other, so it sees more
//! conflicts. With `ways >= c` there is one set of `c` blocks: the inner policy, step for step (and the builders,
//! [`crate::policy::PolicySpec::build_with_associativity`] and [`crate::CacheConfig::build_policy`], then build
//! the plain policy itself).
//!
//! **Prefetch adaptation.** A prefetch group is split per set, each part keeping the group's order; the parts go
//! to their sets' prefetch paths (the inner policy's own seed `001_*` §4 adaptation), sets in the order of their
//! first block in the group. A part larger than its set is cut to the set's size, its first blocks kept (as
//! `BlockCache::prefetch` cuts a group larger than the cache), so that the inner policy's contract holds.
//!
//! **Parameters.** `ways`, the blocks per set (at least 1; the typed configuration defaults to FlashCache's 512),
//! and the inner policy's configuration under the chosen preset. A configuration with `libcachesim_quirks` is
//! refused (it may hold more blocks than its capacity, and a set must never exceed its ways). OPT is allowed: each
//! set evicts the block of the set used farthest in the future.
//!
//! **Metadata.** Per cached block (and ghost entry), the inner policy's bytes, its arena and index sized per set
//! (the index rounds each set's reservation to a power of two, as it rounds a whole cache's). Per set, the inner
//! policy's own struct in the sets' vector (`size_of::<P>()`, 96 B for LRU: 0.19 B per block at 512 ways, 12 B at
//! 8 ways) and the allocator's overhead of the set's arena and index. The test `heap_bytes_per_block_by_ways`
//! compares `heap_bytes()` per block across ways.
//!
//! **Cost.** Finding a block's set is a shift and a mask when `ways` and the number of sets are powers of two, two
//! integer divisions otherwise; then the inner policy's cost over `ways` blocks. `len()` sums the sets (O(sets)).

use super::{Access, Evicted, Outcome, Policy, Preset};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};
use std::num::NonZeroUsize;

/// FlashCache's default set size (`DEFAULT_CACHE_ASSOC`, 512 blocks).
pub const DEFAULT_WAYS: NonZeroUsize = match NonZeroUsize::new(512) {
    Some(w) => w,
    None => unreachable!(),
};

/// The ways that actually split a cache of `capacity` blocks: `Some(ways)` when `ways < capacity`, `None` when the
/// cache is fully associative (no associativity given, or a set as large as the cache).
pub fn split_ways(capacity: usize, ways: Option<NonZeroUsize>) -> Option<NonZeroUsize> {
    ways.filter(|w| w.get() < capacity)
}

/// Number of sets of a cache of `capacity` blocks at `ways` blocks per set (the last one may be smaller).
pub fn set_count(capacity: usize, ways: Option<NonZeroUsize>) -> usize {
    match split_ways(capacity, ways) {
        Some(w) => capacity.div_ceil(w.get()),
        None => 1,
    }
}

/// The configuration of a set-associative policy: the ways and the inner policy's configuration.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SetAssocConfig<C> {
    /// Blocks per set.
    pub ways: NonZeroUsize,
    /// The configuration of each set's policy.
    pub inner: C,
}

impl<C: Default> Default for SetAssocConfig<C> {
    fn default() -> Self {
        SetAssocConfig { ways: DEFAULT_WAYS, inner: C::default() }
    }
}

/// A `ways`-way set-associative cache running policy `P` in each set (see the module docs).
#[derive(Clone, Debug)]
pub struct SetAssoc<P> {
    sets: Vec<P>,
    capacity: usize,
    ways: usize,
    /// `log2(ways)` when `ways` is a power of two.
    ways_shift: Option<u32>,
    /// `sets - 1` when the number of sets is a power of two.
    sets_mask: Option<u64>,
    // Prefetch scratch: (set, position in the group); the parts as (first position, start, end) in `order`; one
    // set's part of the group.
    order: Vec<(usize, usize)>,
    runs: Vec<(usize, usize, usize)>,
    part: Vec<Access>,
}

/// A volume's first set before the modulo: 0 for volume 0 (FlashCache's mapping), a multiplicative hash of the
/// volume number otherwise (below 2^48, so adding a run number below 2^48 cannot overflow).
#[inline]
fn mix(volume: u32) -> u64 {
    u64::from(volume).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 16
}

impl<P: Policy> SetAssoc<P> {
    /// `capacity` (>= 1) blocks in sets of `ways` blocks (the last set smaller when `ways` does not divide
    /// `capacity`; one set when `ways >= capacity`), each running `P` with `config`.
    pub fn with_ways(capacity: usize, ways: NonZeroUsize, config: &P::Config) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        let ways = ways.get().min(capacity);
        let n = capacity.div_ceil(ways);
        let sets = (0..n).map(|i| P::new(Self::set_capacity_of(capacity, ways, i), config)).collect();
        SetAssoc {
            sets,
            capacity,
            ways,
            ways_shift: ways.is_power_of_two().then(|| ways.trailing_zeros()),
            sets_mask: n.is_power_of_two().then(|| n as u64 - 1),
            order: Vec::new(),
            runs: Vec::new(),
            part: Vec::new(),
        }
    }

    fn set_capacity_of(capacity: usize, ways: usize, i: usize) -> usize {
        ways.min(capacity - i * ways)
    }

    /// Blocks per set (at most the capacity).
    pub fn ways(&self) -> usize {
        self.ways
    }

    /// Number of sets.
    pub fn sets(&self) -> usize {
        self.sets.len()
    }

    /// The set `key` maps to: `(⌊block / ways⌋ + mix(volume)) mod sets`.
    #[inline]
    pub fn set_of(&self, key: BlockKey) -> usize {
        let run = match self.ways_shift {
            Some(s) => key.block() >> s,
            None => key.block() / self.ways as u64,
        };
        let x = run + mix(key.volume());
        match self.sets_mask {
            Some(m) => (x & m) as usize,
            None => (x % self.sets.len() as u64) as usize,
        }
    }

    /// Set `i`'s policy.
    pub fn set(&self, i: usize) -> &P {
        &self.sets[i]
    }

    /// The capacity of set `i`: `ways`, or less for the last set.
    pub fn set_capacity(&self, i: usize) -> usize {
        Self::set_capacity_of(self.capacity, self.ways, i)
    }
}

impl<P: Policy> Policy for SetAssoc<P> {
    type Config = SetAssocConfig<P::Config>;

    const NEEDS_NEXT_USE: bool = P::NEEDS_NEXT_USE;

    fn preset(preset: Preset) -> Self::Config {
        SetAssocConfig { ways: DEFAULT_WAYS, inner: P::preset(preset) }
    }

    fn check_config(c: &Self::Config) -> Result<(), String> {
        P::check_config(&c.inner)
    }

    fn libcachesim_quirks(config: &Self::Config) -> bool {
        P::libcachesim_quirks(&config.inner)
    }

    fn new(capacity: usize, config: &Self::Config) -> Self {
        Self::with_ways(capacity, config.ways, &config.inner)
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.sets.iter().map(|s| s.len()).sum()
    }

    #[inline]
    fn contains(&self, key: BlockKey) -> bool {
        self.sets[self.set_of(key)].contains(key)
    }

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        let s = self.set_of(access.key);
        self.sets[s].access(access, out)
    }

    #[inline]
    fn hit(&mut self, access: Access, out: &mut Vec<Evicted>) -> Option<Outcome> {
        let s = self.set_of(access.key);
        self.sets[s].hit(access, out)
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        let Some(first) = group.first() else { return 0 };
        let s0 = self.set_of(first.key);
        if group.iter().all(|a| self.set_of(a.key) == s0) {
            let cap = self.set_capacity(s0);
            return self.sets[s0].prefetch(&group[..group.len().min(cap)], out);
        }
        // Group by set, each part in group order; parts in the order of their first block.
        let mut order = std::mem::take(&mut self.order);
        let mut runs = std::mem::take(&mut self.runs);
        let mut part = std::mem::take(&mut self.part);
        order.clear();
        order.extend(group.iter().enumerate().map(|(i, a)| (self.set_of(a.key), i)));
        order.sort_unstable();
        runs.clear();
        let mut start = 0;
        while start < order.len() {
            let set = order[start].0;
            let end = start + order[start..].iter().take_while(|x| x.0 == set).count();
            runs.push((order[start].1, start, end));
            start = end;
        }
        runs.sort_unstable();
        let mut n = 0;
        for &(_, start, end) in &runs {
            let set = order[start].0;
            let cap = self.set_capacity(set);
            part.clear();
            part.extend(order[start..end].iter().take(cap).map(|&(_, i)| group[i]));
            n += self.sets[set].prefetch(&part, out);
        }
        self.order = order;
        self.runs = runs;
        self.part = part;
        n
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        let s = self.set_of(key);
        self.sets[s].remove(key)
    }

    fn validate(&self) -> Result<(), String> {
        for (i, p) in self.sets.iter().enumerate() {
            let cap = self.set_capacity(i);
            if p.capacity() != cap {
                return Err(format!("set {i}: capacity {} instead of {cap}", p.capacity()));
            }
            if p.len() > cap {
                return Err(format!("set {i}: {} blocks, more than its {cap} ways", p.len()));
            }
            p.validate().map_err(|e| format!("set {i}: {e}"))?;
        }
        if self.sets.iter().map(|p| p.capacity()).sum::<usize>() != self.capacity {
            return Err(format!("the sets' capacities do not add up to {}", self.capacity));
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.sets.capacity() * std::mem::size_of::<P>()
            + self.sets.iter().map(|p| p.heap_bytes()).sum::<usize>()
            + self.order.capacity() * std::mem::size_of::<(usize, usize)>()
            + self.runs.capacity() * std::mem::size_of::<(usize, usize, usize)>()
            + self.part.capacity() * std::mem::size_of::<Access>()
    }

    fn victim(&self, incoming: BlockKey) -> super::Victim {
        self.sets[self.set_of(incoming)].victim(incoming)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::lru::{Lru, LruConfig};
    use crate::policy::testutil::k;
    use crate::policy::{PolicyKind, PolicySpec, PolicyVisitor, NEVER};
    use blockwell_testkit::Rng;
    use std::collections::HashMap;

    fn nz(n: usize) -> NonZeroUsize {
        NonZeroUsize::new(n).unwrap()
    }

    /// One step of a generated run.
    #[derive(Clone, Debug)]
    enum Step {
        Access(Access),
        Prefetch(Vec<Access>),
        Remove(BlockKey),
    }

    /// A deterministic run over `universe` blocks of volumes 0 and 1: mostly demand accesses with a hot region, some
    /// prefetch groups of consecutive blocks (distinct keys, spanning sets), some removals; demand accesses carry
    /// their next-use times (OPT reads them).
    fn trace(seed: u64, n: usize, universe: u64) -> Vec<Step> {
        let mut rng = Rng(seed | 1);
        let mut steps = Vec::with_capacity(n);
        for _ in 0..n {
            let r = rng.next();
            let vol = ((r >> 40) % 4 == 0) as u32;
            let block = if r % 3 == 0 { (r >> 8) % (universe / 8).max(1) } else { (r >> 8) % universe };
            let key = BlockKey::new(vol, block).unwrap();
            steps.push(match r % 16 {
                0 | 1 => {
                    let len = 1 + (r >> 20) % 12;
                    Step::Prefetch((0..len).map(|i| Access::new(BlockKey::new(vol, block + i).unwrap())).collect())
                }
                2 => Step::Remove(key),
                _ => Step::Access(Access::new(key)),
            });
        }
        let mut next: HashMap<BlockKey, u64> = HashMap::new();
        for (t, s) in steps.iter_mut().enumerate().rev() {
            if let Step::Access(a) = s {
                a.next_use = next.get(&a.key).copied().unwrap_or(NEVER);
                next.insert(a.key, t as u64);
            }
        }
        steps
    }

    /// Runs `f` on every policy kind's concrete type under every preset whose configuration keeps to its capacity.
    fn for_every_policy(f: impl Fn(PolicyKind, Preset) -> Result<(), String> + Copy) {
        for &kind in PolicyKind::ALL {
            for &preset in Preset::ALL {
                if PolicySpec::new(kind).libcachesim_quirks(preset).unwrap() {
                    continue;
                }
                f(kind, preset).unwrap_or_else(|e| panic!("{} ({preset:?}): {e}", kind.name()));
            }
        }
    }

    /// Runs a generic check on policy `kind`'s concrete type.
    fn visit(
        kind: PolicyKind,
        preset: Preset,
        v: impl PolicyVisitor<Output = Result<(), String>>,
    ) -> Result<(), String> {
        PolicySpec::new(kind).visit(preset, v).map_err(|e| e.to_string())?
    }

    /// What one step did: the outcome (or count inserted, or removed) and the victims.
    fn step<P: Policy>(p: &mut P, s: &Step, out: &mut Vec<Evicted>) -> (Option<Outcome>, usize) {
        out.clear();
        match s {
            Step::Access(a) => (Some(p.access(*a, out)), 0),
            Step::Prefetch(g) => (None, p.prefetch(g, out)),
            Step::Remove(key) => (None, p.remove(*key) as usize),
        }
    }

    #[test]
    fn set_mapping_is_flashcaches_hash() {
        // Power-of-two ways and sets (shift and mask), and neither (divisions).
        for (cap, ways) in [(64usize, 8usize), (60, 7), (4096, 512), (1000, 64)] {
            let p = SetAssoc::<Lru>::with_ways(cap, nz(ways), &LruConfig::default());
            let sets = cap.div_ceil(ways);
            assert_eq!(p.sets(), sets);
            for b in (0..5000u64).chain([1 << 40, (1 << 48) - 1]) {
                assert_eq!(p.set_of(k(b)), ((b / ways as u64) % sets as u64) as usize, "block {b}, {ways} ways");
            }
            // Another volume: the same runs, shifted by one offset.
            let off = (p.set_of(BlockKey::new(3, 0).unwrap()) + sets - p.set_of(k(0))) % sets;
            for b in 0..5000u64 {
                assert_eq!(p.set_of(BlockKey::new(3, b).unwrap()), (p.set_of(k(b)) + off) % sets);
            }
        }
    }

    #[test]
    fn a_set_never_exceeds_its_ways_and_blocks_stay_in_their_set() {
        for_every_policy(|kind, preset| {
            struct V;
            impl PolicyVisitor for V {
                type Output = Result<(), String>;
                fn visit<P: Policy>(self, config: P::Config) -> Result<(), String> {
                    let mut p = SetAssoc::<P>::with_ways(40, nz(8), &config);
                    let mut out = Vec::new();
                    for (i, s) in trace(7, 3000, 200).iter().enumerate() {
                        let before: Vec<usize> = (0..p.sets()).map(|j| p.set(j).len()).collect();
                        step(&mut p, s, &mut out);
                        p.validate().map_err(|e| format!("step {i}: {e}"))?;
                        for j in 0..p.sets() {
                            if p.set(j).len() > p.set_capacity(j) {
                                return Err(format!("step {i}: set {j} holds {}", p.set(j).len()));
                            }
                        }
                        // Eviction only within the set(s) the step touched.
                        let touched: Vec<usize> = match s {
                            Step::Access(a) => vec![p.set_of(a.key)],
                            Step::Prefetch(g) => g.iter().map(|a| p.set_of(a.key)).collect(),
                            Step::Remove(key) => vec![p.set_of(*key)],
                        };
                        for e in &out {
                            if !touched.contains(&p.set_of(e.key)) {
                                return Err(format!("step {i}: {:?} evicted from an untouched set", e.key));
                            }
                        }
                        for (j, &n) in before.iter().enumerate() {
                            if !touched.contains(&j) && p.set(j).len() != n {
                                return Err(format!("step {i}: untouched set {j} changed"));
                            }
                        }
                    }
                    // Every resident block is in its own set and in no other.
                    for vol in 0..2 {
                        for b in 0..220 {
                            let key = BlockKey::new(vol, b).unwrap();
                            let home = p.set_of(key);
                            for j in 0..p.sets() {
                                if j != home && p.set(j).contains(key) {
                                    return Err(format!("{key:?} (set {home}) is in set {j}"));
                                }
                            }
                        }
                    }
                    if p.len() != (0..p.sets()).map(|j| p.set(j).len()).sum::<usize>() || p.len() > p.capacity() {
                        return Err(format!("len {} of capacity {}", p.len(), p.capacity()));
                    }
                    Ok(())
                }
            }
            visit(kind, preset, V)
        });
    }

    #[test]
    fn each_set_chooses_the_victim_a_plain_policy_of_that_set_would() {
        for_every_policy(|kind, preset| {
            struct V;
            impl PolicyVisitor for V {
                type Output = Result<(), String>;
                fn visit<P: Policy>(self, config: P::Config) -> Result<(), String> {
                    // 37 blocks in 5 sets of 8 and a last set of 5; one plain policy per set, fed what maps there.
                    let mut p = SetAssoc::<P>::with_ways(37, nz(8), &config);
                    let mut plain: Vec<P> = (0..p.sets()).map(|j| P::new(p.set_capacity(j), &config)).collect();
                    let (mut out, mut pout) = (Vec::new(), Vec::new());
                    for (i, s) in trace(11, 3000, 150).iter().enumerate() {
                        let got = step(&mut p, s, &mut out);
                        pout.clear();
                        let want = match s {
                            Step::Access(a) => (Some(plain[p.set_of(a.key)].access(*a, &mut pout)), 0),
                            Step::Remove(key) => (None, plain[p.set_of(*key)].remove(*key) as usize),
                            Step::Prefetch(g) => {
                                // The group's part for each set, in group order, cut to the set's size.
                                let mut n = 0;
                                let mut done = Vec::new();
                                for a in g {
                                    let j = p.set_of(a.key);
                                    if done.contains(&j) {
                                        continue;
                                    }
                                    done.push(j);
                                    let part: Vec<Access> = g
                                        .iter()
                                        .filter(|b| p.set_of(b.key) == j)
                                        .take(p.set_capacity(j))
                                        .copied()
                                        .collect();
                                    n += plain[j].prefetch(&part, &mut pout);
                                }
                                (None, n)
                            }
                        };
                        if got != want || out != pout {
                            return Err(format!(
                                "step {i} {s:?}: {got:?} {out:?}, a plain policy per set: {want:?} {pout:?}"
                            ));
                        }
                    }
                    Ok(())
                }
            }
            visit(kind, preset, V)
        });
    }

    #[test]
    fn ways_at_least_the_capacity_is_the_plain_policy_exactly() {
        for &kind in PolicyKind::ALL {
            for &preset in Preset::ALL {
                struct V(usize);
                impl PolicyVisitor for V {
                    type Output = Result<(), String>;
                    fn visit<P: Policy>(self, config: P::Config) -> Result<(), String> {
                        let cap = 48;
                        let mut a = SetAssoc::<P>::with_ways(cap, nz(self.0), &config);
                        if a.sets() != 1 || a.ways() != cap {
                            return Err(format!("{} sets of {}", a.sets(), a.ways()));
                        }
                        let mut b = P::new(cap, &config);
                        let (mut oa, mut ob) = (Vec::new(), Vec::new());
                        for (i, s) in trace(3, 5000, 160).iter().enumerate() {
                            let ra = step(&mut a, s, &mut oa);
                            let rb = step(&mut b, s, &mut ob);
                            if ra != rb || oa != ob || a.len() != b.len() {
                                return Err(format!("step {i} {s:?}: {ra:?} {oa:?} vs plain {rb:?} {ob:?}"));
                            }
                        }
                        for vol in 0..2 {
                            for blk in 0..180 {
                                let key = BlockKey::new(vol, blk).unwrap();
                                if a.contains(key) != b.contains(key) {
                                    return Err(format!("{key:?} resident in one only"));
                                }
                            }
                        }
                        Ok(())
                    }
                }
                for ways in [48, 49, 1 << 20] {
                    visit(kind, preset, V(ways))
                        .unwrap_or_else(|e| panic!("{} ({preset:?}, {ways}): {e}", kind.name()));
                }
            }
        }
    }

    #[test]
    fn builders_give_the_plain_policy_unless_sets_split_the_cache() {
        let spec = PolicySpec::new(PolicyKind::Arc);
        let cap = 64;
        for ways in [None, Some(nz(64)), Some(nz(1000))] {
            let mut a = spec.build_with_associativity(Preset::Default, cap, ways).unwrap();
            let mut b = spec.build(Preset::Default, cap).unwrap();
            // The plain policy's metadata, to the byte: no wrapper.
            assert_eq!(a.heap_bytes(), b.heap_bytes(), "{ways:?}");
            let (mut oa, mut ob) = (Vec::new(), Vec::new());
            for (i, s) in trace(5, 2000, 200).iter().enumerate() {
                if let Step::Access(x) = s {
                    assert_eq!(a.access(*x, &mut oa), b.access(*x, &mut ob), "{ways:?} step {i}");
                    assert_eq!(oa, ob);
                }
            }
        }
        let split = spec.build_with_associativity(Preset::Default, cap, Some(nz(16))).unwrap();
        assert_eq!(split.capacity(), cap);
        assert!(split.heap_bytes() > spec.build(Preset::Default, cap).unwrap().heap_bytes());
        let e = spec.build_with_associativity(Preset::Default, 0, Some(nz(8))).err();
        assert_eq!(e, Some(crate::policy::PolicyError::ZeroCapacity));
    }

    #[test]
    fn libcachesim_quirks_are_refused_whenever_associativity_is_given() {
        let lirs = PolicySpec::new(PolicyKind::Lirs);
        let e = lirs.build_with_associativity(Preset::Libcachesim, 100, Some(nz(8))).err().unwrap();
        assert!(e.to_string().contains("cannot run set-associative"), "{e}");
        assert!(e.to_string().contains("'lirs'") && e.to_string().contains("'libcachesim'"), "{e}");
        assert!(lirs.build_with_associativity(Preset::Libcachesim, 100, Some(nz(512))).is_err());
        assert!(lirs.build_with_associativity(Preset::Libcachesim, 100, None).is_ok());
        assert!(lirs.build_with_associativity(Preset::Default, 100, Some(nz(8))).is_ok());
        // OPT needs next-use times; it runs per set.
        assert!(PolicySpec::new(PolicyKind::Opt).build_with_associativity(Preset::Default, 100, Some(nz(8))).is_ok());
    }

    #[test]
    fn capacity_not_a_multiple_of_ways_makes_the_last_set_smaller() {
        let mut p = SetAssoc::<Lru>::with_ways(10, nz(4), &LruConfig::default());
        assert_eq!((p.capacity(), p.sets(), p.ways()), (10, 3, 4));
        assert_eq!((0..3).map(|j| p.set_capacity(j)).collect::<Vec<_>>(), vec![4, 4, 2]);
        assert_eq!((0..3).map(|j| p.set(j).capacity()).sum::<usize>(), 10);
        // Runs of 4 blocks per set: set 2 gets blocks 8..12, 20..24, ... and holds 2 of them.
        let mut out = Vec::new();
        for b in 0..48 {
            p.access(Access::new(k(b)), &mut out);
            p.validate().unwrap();
        }
        assert_eq!(p.len(), 10, "every set full");
        assert_eq!(p.set(2).len(), 2);
        assert!(p.contains(k(46)) && p.contains(k(47)) && !p.contains(k(45)), "set 2 keeps its last two");
        assert!((36..44).all(|b| p.contains(k(b))), "sets 0 and 1 keep their last four");
    }

    #[test]
    fn prefetch_groups_are_split_per_set_and_cut_to_the_set() {
        // 4 sets of 4: blocks 0-3 set 0, 4-7 set 1, 8-11 set 2, 12-15 set 3, 16-19 set 0 again.
        let mut p = SetAssoc::<Lru>::with_ways(16, nz(4), &LruConfig::default());
        let mut out = Vec::new();
        for b in [0, 1, 4] {
            p.access(Access::new(k(b)), &mut out);
        }
        // Blocks 2..10: set 0 gets 2, 3 (0 and 1 stay), set 1 gets 5, 6, 7 (4 stays), set 2 gets 8, 9.
        let g: Vec<Access> = (2..10).map(|b| Access::new(k(b))).collect();
        assert_eq!(p.prefetch(&g, &mut out), 7);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!((p.set(0).len(), p.set(1).len(), p.set(2).len(), p.set(3).len()), (4, 4, 2, 0));
        // A group with six blocks for set 0 (16..20 and 32, 33) inserts only the first four: 16..20, evicting 0..4
        // as unused prefetches where they were prefetched (2, 3) and as used blocks otherwise (0, 1).
        let g: Vec<Access> = [16, 17, 12, 18, 19, 32, 33].iter().map(|&b| Access::new(k(b))).collect();
        out.clear();
        assert_eq!(p.prefetch(&g, &mut out), 5);
        assert!((16..20).all(|b| p.contains(k(b))) && !p.contains(k(32)) && !p.contains(k(33)));
        assert!(p.contains(k(12)));
        let mut ev: Vec<(u64, bool)> = out.iter().map(|e| (e.key.block(), e.unused_prefetch)).collect();
        ev.sort_unstable();
        assert_eq!(ev, vec![(0, false), (1, false), (2, true), (3, true)]);
        assert!(out.iter().all(|e| p.set_of(e.key) == 0), "evictions only in set 0");
        // The first demand access of a prefetched block is a prefetch hit, in its set.
        assert_eq!(p.access(Access::new(k(17)), &mut out), Outcome::PrefetchHit);
        p.validate().unwrap();
    }

    #[test]
    fn validate_names_the_broken_set() {
        let mut p = SetAssoc::<Lru>::with_ways(12, nz(4), &LruConfig::default());
        p.validate().unwrap();
        p.sets[1] = Lru::new(5, &LruConfig::default());
        let e = p.validate().unwrap_err();
        assert!(e.starts_with("set 1: capacity 5 instead of 4"), "{e}");
        let mut p = SetAssoc::<Lru>::with_ways(12, nz(4), &LruConfig::default());
        p.sets.pop();
        p.sets.push(Lru::new(4, &LruConfig::default()));
        p.capacity = 11;
        assert!(p.validate().unwrap_err().starts_with("set 2: capacity 4 instead of 3"));
    }

    #[test]
    fn heap_bytes_per_block_by_ways() {
        let cap = 1 << 16;
        let per_block = |ways: Option<usize>| {
            let spec = PolicySpec::new(PolicyKind::Lru);
            let mut p = spec.build_with_associativity(Preset::Default, cap, ways.map(nz)).unwrap();
            let mut out = Vec::new();
            for b in 0..2 * cap as u64 {
                p.access(Access::new(k(b)), &mut out);
            }
            p.heap_bytes() as f64 / cap as f64
        };
        let full = per_block(None);
        let (w512, w64, w8) = (per_block(Some(512)), per_block(Some(64)), per_block(Some(8)));
        // Each set carries at least the inner policy's struct; smaller sets cost more per block.
        assert_eq!(std::mem::size_of::<Lru>(), 96, "the module docs quote it");
        let lru = std::mem::size_of::<Lru>() as f64;
        assert!(w512 >= full + lru / 512.0 && w64 >= w512 && w8 > w64, "{full} {w512} {w64} {w8}");
        assert!(w8 >= full + lru / 8.0 && w8 < 2.0 * full, "{full} {w8}");
    }
}
