//! Content-based caching (seed 003): Table 1 categories, silent writes, budget, the policy generalization.

use blockwell_core::cache::{BlockCache, CacheConfig, Op, Plan};
use blockwell_core::dedup::{Candidate, Category, ContentCache, DedupConfig, DedupError, DedupPlan};
use blockwell_core::policy::{DynPolicy, PolicyKind, PolicySpec, Preset};
use blockwell_core::BlockKey;

const BS: u64 = 4096;

fn k(vol: u32, b: u64) -> BlockKey {
    BlockKey::new(vol, b).unwrap()
}

fn cfg(blocks: u64, charge: bool) -> DedupConfig {
    DedupConfig { block_size: BS, capacity_bytes: blocks * BS, charge_hash_table: charge, ..Default::default() }
}

fn cache(kind: PolicyKind, blocks: u64, charge: bool) -> ContentCache<dyn DynPolicy> {
    ContentCache::build(cfg(blocks, charge), &PolicySpec::new(kind), Preset::Default).unwrap()
}

/// A tiny deterministic generator (SplitMix64) for test traces.
struct Sm(u64);
impl Sm {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// (op, address, digest) triples. `dup`: digests drawn from a small pool (heavy duplication) or all distinct.
fn trace(seed: u64, n: usize, addrs: u64, vols: u32, dup: bool) -> Vec<(Op, BlockKey, u128)> {
    let mut r = Sm(seed);
    // Current content of every address, so that reads see what was last written (a coherent device).
    let mut content: std::collections::HashMap<BlockKey, u128> = Default::default();
    let mut fresh = 1u128 << 100;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let key = k(r.below(vols as u64) as u32, r.below(addrs));
        let write = r.below(3) == 0;
        let mut new_content = |r: &mut Sm| {
            if dup {
                1 + r.below(addrs / 4) as u128
            } else {
                fresh += 1;
                fresh
            }
        };
        if write {
            let d = if dup && r.below(4) == 0 {
                // Rewrite the same content: a silent write if still cached.
                *content.get(&key).unwrap_or(&7)
            } else {
                new_content(&mut r)
            };
            content.insert(key, d);
            out.push((Op::Write, key, d));
        } else {
            let d = *content.entry(key).or_insert_with(|| new_content(&mut r));
            out.push((Op::Read, key, d));
        }
    }
    out
}

#[test]
fn table1_categories_on_a_constructed_trace() {
    let mut c = cache(PolicyKind::Lru, 64, false);
    let mut p = DedupPlan::default();
    let steps: &[(Op, BlockKey, u128, Category)] = &[
        (Op::Read, k(0, 1), 10, Category::ReadMissContentMiss),
        (Op::Read, k(0, 1), 10, Category::ReadHit),
        (Op::Read, k(0, 2), 10, Category::ReadMissContentHit), // same content, other address
        (Op::Write, k(0, 1), 10, Category::SilentWrite),
        (Op::Write, k(0, 1), 11, Category::WriteHitMultiContentMiss), // block 10 has refs 1 and 2
        (Op::Write, k(0, 3), 11, Category::WriteMissContentHit),
        (Op::Write, k(0, 3), 10, Category::WriteHitMultiContentHit), // 11 has refs 1, 3; 10 exists (ref 2)
        (Op::Write, k(0, 4), 12, Category::WriteMissContentMiss),
        (Op::Write, k(0, 4), 13, Category::PrivateWrite), // rewritten in place
        (Op::Write, k(0, 4), 13, Category::SilentWrite),
        (Op::Write, k(0, 4), 10, Category::PrivateWrite), // joins block 10, block 13 discarded
        (Op::Write, k(1, 4), 10, Category::WriteMissContentHit), // another volume shares it
        (Op::Read, k(1, 4), 10, Category::ReadHit),
    ];
    for (i, &(op, key, d, want)) in steps.iter().enumerate() {
        let got = c.access_sim(op, key, d, &mut p);
        assert_eq!(got, want, "step {i}");
        assert_eq!(p.device_write, op == Op::Write && want != Category::SilentWrite, "step {i}");
        assert_eq!(p.device_read, want == Category::ReadMissContentHit || want == Category::ReadMissContentMiss);
        c.validate().unwrap();
    }
    let s = c.stats();
    assert_eq!(s.get(Category::SilentWrite), 2);
    assert_eq!(s.get(Category::PrivateWrite), 2);
    assert_eq!(s.accesses(), steps.len() as u64);
    // Contents: 10 shared by (0,2), (0,3), (0,4), (1,4); 11 by (0,1).
    let b10 = c.lookup(k(0, 2)).unwrap();
    assert_eq!(c.refs_of(b10), 4);
    assert_eq!(c.lookup(k(1, 4)), Some(b10));
    assert_eq!(c.hash_of(c.lookup(k(0, 1)).unwrap()), 11);
    assert_eq!(c.blocks(), 2);
    assert_eq!(c.references(), 5);
    assert_eq!(s.blocks_released, 1, "block 13 discarded by the private write");
}

#[test]
fn silent_writes_counted_exactly() {
    // Every write of the content an address already holds, while the address is mapped, is silent; nothing
    // else is. A cache big enough for everything maps every address ever touched, so the count is exact.
    let t = trace(3, 20_000, 300, 2, true);
    let mut c = cache(PolicyKind::Lru, 4096, false);
    let mut p = DedupPlan::default();
    let mut current: std::collections::HashMap<BlockKey, u128> = Default::default();
    let mut expect = 0u64;
    for &(op, key, d) in &t {
        if op == Op::Write && current.get(&key) == Some(&d) {
            expect += 1;
        }
        current.insert(key, d);
        let cat = c.access_sim(op, key, d, &mut p);
        assert_eq!(cat == Category::SilentWrite, op == Op::Write && !p.device_write);
    }
    c.validate().unwrap();
    assert!(expect > 1000, "the trace has silent writes: {expect}");
    assert_eq!(c.stats().get(Category::SilentWrite), expect);
    assert_eq!(c.stats().device_writes(), c.stats().writes() - expect);
}

#[test]
fn every_access_in_exactly_one_category() {
    for kind in [PolicyKind::Lru, PolicyKind::Arc, PolicyKind::S3Fifo] {
        let t = trace(5, 30_000, 2000, 3, true);
        let mut c = cache(kind, 200, true);
        let mut p = DedupPlan::default();
        let mut per_op = [0u64; 2];
        for &(op, key, d) in &t {
            let cat = c.access_sim(op, key, d, &mut p);
            assert_eq!(p.category, Some(cat));
            assert_eq!(cat.is_read(), op == Op::Read);
            per_op[(op == Op::Write) as usize] += 1;
        }
        let s = c.stats();
        assert_eq!(s.accesses(), t.len() as u64);
        assert_eq!(s.reads(), per_op[0]);
        assert_eq!(s.writes(), per_op[1]);
        for cat in Category::ALL {
            assert!(s.get(cat) > 0, "{kind:?}: {cat:?} never happened");
        }
    }
}

fn offset_read_hits(kind: PolicyKind, blocks: u64, t: &[(Op, BlockKey, u128)]) -> u64 {
    let cc = CacheConfig::new(BS, blocks * BS).unwrap();
    let mut c: BlockCache<dyn DynPolicy> =
        BlockCache::new(cc, PolicySpec::new(kind).build(Preset::Default, cc.capacity_blocks()).unwrap());
    let mut plan = Plan::default();
    for &(op, key, _) in t {
        c.access_blocks(op, key, 1, &[], &mut plan);
    }
    c.stats().read.block_hits
}

fn content_read_hits(c: &mut ContentCache<dyn DynPolicy>, t: &[(Op, BlockKey, u128)]) -> u64 {
    let mut p = DedupPlan::default();
    for &(op, key, d) in t {
        c.access_sim(op, key, d, &mut p);
    }
    c.validate().unwrap();
    c.stats().get(Category::ReadHit)
}

#[test]
fn without_duplicates_content_mode_equals_offset_uncharged_and_never_wins_charged() {
    let t = trace(11, 40_000, 3000, 2, false);
    for &kind in PolicyKind::ALL.iter().filter(|k| !k.needs_next_use()) {
        for blocks in [64u64, 300, 1000, 4000] {
            let off = offset_read_hits(kind, blocks, &t);
            let free = content_read_hits(&mut cache(kind, blocks, false), &t);
            assert_eq!(free, off, "{kind:?} at {blocks} blocks, hash table not charged");
            if kind == PolicyKind::Lru {
                // LRU is a stack algorithm: fewer slots never hit more.
                let charged = content_read_hits(&mut cache(kind, blocks, true), &t);
                assert!(charged <= off, "LRU at {blocks}: charged {charged} > offset {off}");
                if blocks >= 300 {
                    assert!(charged < off, "the charged table costs something at {blocks} blocks");
                }
            }
        }
    }
}

#[test]
fn duplicates_make_content_mode_win() {
    let t = trace(13, 40_000, 3000, 2, true);
    let off = offset_read_hits(PolicyKind::Lru, 600, &t);
    let con = content_read_hits(&mut cache(PolicyKind::Lru, 600, true), &t);
    assert!(con > off, "content {con} vs offset {off}");
}

#[test]
fn policies_keep_invariants_after_every_step() {
    let t = trace(17, 8000, 600, 2, true);
    for kind in [
        PolicyKind::Lru,
        PolicyKind::Arc,
        PolicyKind::TwoQ,
        PolicyKind::S3Fifo,
        PolicyKind::Clock,
        PolicyKind::Fifo,
        PolicyKind::Sieve,
        PolicyKind::Lirs,
        PolicyKind::Car,
        PolicyKind::Mq,
        PolicyKind::LruK,
        PolicyKind::Lrfu,
    ] {
        // Small budgets and costly references, so that reference pages are evicted and references dropped.
        for (blocks, ref_bytes) in [(40u64, 48u64), (40, 2048), (150, 512)] {
            let cfg = DedupConfig { ref_bytes, ..cfg(blocks, true) };
            let mut c = ContentCache::build(cfg, &PolicySpec::new(kind), Preset::Default).unwrap();
            let mut p = DedupPlan::default();
            for (i, &(op, key, d)) in t.iter().enumerate() {
                c.access_sim(op, key, d, &mut p);
                if let Err(e) = c.validate() {
                    panic!("{kind:?} {blocks}/{ref_bytes} step {i}: {e}");
                }
                assert!(c.used_bytes() <= blocks * BS);
            }
            let s = c.stats();
            assert_eq!(s.accesses(), t.len() as u64);
            assert!(s.blocks_evicted > 0, "{kind:?}: the cache was under pressure");
            if ref_bytes == 2048 {
                assert!(s.refs_dropped > 0 && s.pages_evicted > 0, "{kind:?}: references competed: {s:?}");
            }
        }
    }
}

#[test]
fn full_comparisons_fall_as_the_table_grows() {
    let t = trace(19, 20_000, 4000, 1, true);
    let mut last = u64::MAX;
    for frac in [1.0 / 4096.0, 1.0 / 512.0, 1.0 / 64.0, 1.0 / 8.0] {
        let cfg = DedupConfig { hash_fraction: frac, ..cfg(2000, false) };
        let mut c = ContentCache::build(cfg, &PolicySpec::new(PolicyKind::Lru), Preset::Default).unwrap();
        content_read_hits(&mut c, &t);
        let n = c.stats().full_comparisons;
        assert!(n < last, "fraction {frac}: {n} comparisons, not fewer than {last}");
        last = n;
    }
}

#[test]
fn confirm_is_the_authority_not_the_hash() {
    // Live mode: two different contents with the same hash. The callback says they differ: two blocks.
    let mut c = cache(PolicyKind::Lru, 16, false);
    let mut p = DedupPlan::default();
    let mut never = |_: Candidate| false;
    c.write(k(0, 1), 42, &mut never, &mut p);
    assert_eq!(p.category, Some(Category::WriteMissContentMiss));
    assert!(p.fill);
    c.write(k(0, 2), 42, &mut never, &mut p);
    assert_eq!(p.category, Some(Category::WriteMissContentMiss));
    assert_eq!(c.stats().full_comparisons, 1);
    // Same hash rewritten to (0,1) but different bytes: not silent.
    c.write(k(0, 1), 42, &mut never, &mut p);
    assert_eq!(p.category, Some(Category::PrivateWrite));
    assert_eq!(c.blocks(), 2);
    c.validate().unwrap();
    // The two-phase read of live mode.
    c.read(k(0, 9), &mut p);
    assert!(p.device_read && p.category.is_none());
    let b2 = c.lookup(k(0, 2)).unwrap();
    let mut same_as_b2 = |cand: Candidate| cand.block == b2;
    c.fill_read(k(0, 9), 42, &mut same_as_b2, &mut p);
    assert_eq!(p.category, Some(Category::ReadMissContentHit));
    assert_eq!(p.block, Some(b2));
    c.validate().unwrap();
}

#[test]
fn results_identical_across_runs() {
    let t = trace(23, 20_000, 1500, 3, true);
    let run = || {
        let mut c = cache(PolicyKind::Arc, 300, true);
        content_read_hits(&mut c, &t);
        *c.stats()
    };
    assert_eq!(run(), run());
}

#[test]
fn bad_settings_are_errors() {
    let spec = PolicySpec::new(PolicyKind::Lru);
    let bad = |c: DedupConfig| ContentCache::build(c, &spec, Preset::Default).err().unwrap();
    assert!(matches!(bad(DedupConfig { hash_fraction: 0.0, ..cfg(64, true) }), DedupError::HashFraction(_)));
    assert!(matches!(bad(DedupConfig { ref_bytes: 0, ..cfg(64, true) }), DedupError::RefBytes { .. }));
    assert!(matches!(bad(DedupConfig { capacity_bytes: 100, ..cfg(64, true) }), DedupError::Cache(_)));
    let opt = ContentCache::build(cfg(64, true), &PolicySpec::new(PolicyKind::Opt), Preset::Default);
    assert!(matches!(opt.err().unwrap(), DedupError::Offline(_)));
    // 64 blocks with a 1/64 table: 4 KiB of table, one slot fewer.
    assert_eq!(cfg(64, true).slots(), 63);
    assert_eq!(cfg(64, false).slots(), 64);
}

/// With room for everything, the category of every access follows from a plain map address → content.
#[test]
fn categories_match_an_obvious_model_when_nothing_is_evicted() {
    for seed in [29u64, 31, 37] {
        let t = trace(seed, 20_000, 300, 2, true);
        let mut c = cache(PolicyKind::Lru, 4096, true);
        let mut p = DedupPlan::default();
        let mut model: std::collections::HashMap<BlockKey, u128> = Default::default();
        let holders = |m: &std::collections::HashMap<BlockKey, u128>, d: u128| m.values().filter(|&&x| x == d).count();
        for (i, &(op, key, d)) in t.iter().enumerate() {
            let want = match (op, model.get(&key).copied()) {
                (Op::Read, Some(_)) => Category::ReadHit,
                (Op::Read, None) if holders(&model, d) > 0 => Category::ReadMissContentHit,
                (Op::Read, None) => Category::ReadMissContentMiss,
                (Op::Write, Some(old)) if old == d => Category::SilentWrite,
                (Op::Write, Some(old)) if holders(&model, old) == 1 => Category::PrivateWrite,
                (Op::Write, Some(_)) if holders(&model, d) > 0 => Category::WriteHitMultiContentHit,
                (Op::Write, Some(_)) => Category::WriteHitMultiContentMiss,
                (Op::Write, None) if holders(&model, d) > 0 => Category::WriteMissContentHit,
                (Op::Write, None) => Category::WriteMissContentMiss,
            };
            if op == Op::Write || !model.contains_key(&key) {
                model.insert(key, d);
            }
            assert_eq!(c.access_sim(op, key, d, &mut p), want, "seed {seed} step {i}");
        }
        c.validate().unwrap();
        let distinct: std::collections::HashSet<u128> = model.values().copied().collect();
        assert_eq!(c.blocks(), distinct.len(), "one block per distinct content");
        assert_eq!(c.references(), model.len(), "one reference per address");
        assert_eq!(c.stats().blocks_evicted + c.stats().refs_dropped, 0);
    }
}
