//! The cache step ([`CacheLevel`]): fates, waits on blocks in flight, admission, cutoff, writes, victims and the
//! counters' definitions.

use blockwell_core::admission::AdmissionSpec;
use blockwell_core::level::{CacheLevel, Fate, LevelConfig, Request, StepPlan, WritePolicy};
use blockwell_core::prefetch::{PrefetcherKind, PrefetcherSpec};
use blockwell_core::{BlockCache, BlockKey, CacheConfig, Op, Plan, PolicyKind, PolicySpec, Preset};
use blockwell_testkit::Rng;

const BS: u64 = 4096;

fn level(blocks: u64, f: impl FnOnce(&mut LevelConfig), prefetch: Option<&str>) -> CacheLevel {
    let cc = CacheConfig::new(BS, blocks * BS).unwrap();
    let mut lc = LevelConfig::new(cc);
    f(&mut lc);
    let policy = PolicySpec::new(PolicyKind::Lru).build(Preset::Default, cc.capacity_blocks()).unwrap();
    let pf = prefetch.map(|s| PrefetcherSpec::parse(s).unwrap().build(BS).unwrap());
    CacheLevel::new(lc, policy, pf)
}

fn k(b: u64) -> BlockKey {
    BlockKey::new(0, b).unwrap()
}

fn read(l: &mut CacheLevel, b: u64, n: u64, plan: &mut StepPlan) {
    l.access(&Request::blocks(Op::Read, k(b), n, BS), plan);
}

#[test]
fn a_block_in_flight_is_a_delayed_hit_counted_as_a_miss() {
    let mut l = level(8, |_| {}, None);
    let mut p = StepPlan::default();
    read(&mut l, 0, 2, &mut p);
    assert_eq!(p.fates, [Fate::Fetch, Fate::Fetch]);
    assert_eq!(p.reads.len(), 1, "one device read of two blocks");
    assert_eq!((p.reads[0].first, p.reads[0].n, p.reads[0].sync), (k(0), 2, true));
    let t = p.token;
    let mut q = StepPlan::default();
    read(&mut l, 1, 2, &mut q);
    assert_eq!(q.fates, [Fate::Wait, Fate::Fetch]);
    assert_eq!(q.reads.len(), 1);
    assert_eq!((q.reads[0].first, q.reads[0].n), (k(2), 1), "the block in flight is not read again");
    assert!(l.fetch_done(k(0), t) && l.fetch_done(k(1), t));
    assert!(!l.fetch_done(k(1), t), "a completion is taken once");
    read(&mut l, 0, 2, &mut p);
    assert_eq!(p.fates, [Fate::Hit, Fate::Hit]);
    let s = l.stats();
    assert_eq!(s.delayed_hits, 1);
    assert_eq!((s.read.blocks, s.read.block_hits, s.read.requests, s.read.request_hits), (6, 2, 3, 1));
    l.validate().unwrap();
}

#[test]
fn plain_step_equals_the_full_step_with_instant_reads() {
    // A deterministic mix of reads and writes with reuse: the policy's own step (what `sim` runs when the
    // level is plain) and the full step agree, counter for counter.
    let cc = CacheConfig::new(BS, 64 * BS).unwrap();
    let mut a = BlockCache::new(cc, PolicySpec::new(PolicyKind::Lru).build(Preset::Default, 64).unwrap());
    let mut b = level(64, |_| {}, None);
    let (mut p, mut sp) = (Plan::default(), StepPlan::default());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..20_000 {
        let x = rng.next();
        let op = if x % 5 == 0 { Op::Write } else { Op::Read };
        let first = (x >> 8) % 200;
        let n = 1 + (x >> 20) % 4;
        a.access_blocks(op, k(first), n, &[], &mut p);
        b.access(&Request::blocks(op, k(first), n, BS), &mut sp);
        b.complete_all();
    }
    assert_eq!(a.stats(), b.stats());
    assert!(a.stats().evictions > 1000);
}

#[test]
fn n_hit_admission_passes_the_first_miss() {
    let mut l = level(8, |c| c.admission = AdmissionSpec::NHit(2), None);
    let mut p = StepPlan::default();
    read(&mut l, 5, 1, &mut p);
    assert_eq!(p.fates, [Fate::Pass]);
    assert_eq!(p.reads.len(), 1, "a block kept out is still read");
    read(&mut l, 5, 1, &mut p);
    assert_eq!(p.fates, [Fate::Fetch]);
    l.complete_all();
    read(&mut l, 5, 1, &mut p);
    assert_eq!(p.fates, [Fate::Hit]);
    let s = l.stats();
    assert_eq!((s.admission_rejections, s.read.block_misses(), s.read.block_hits), (1, 2, 1));
}

/// TinyLFU counts hits too, and weighs a miss against the policy's victim (LRU's tail).
#[test]
fn tinylfu_admission_weighs_the_miss_against_the_victim() {
    let mut l = level(4, |c| c.admission = "tinylfu".parse().unwrap(), None);
    let mut p = StepPlan::default();
    for b in 0..4 {
        read(&mut l, b, 1, &mut p);
        assert_eq!(p.fates, [Fate::Fetch], "room in the cache: admitted");
        l.complete_all();
    }
    for _ in 0..3 {
        read(&mut l, 0, 4, &mut p);
        assert_eq!(p.hits, 4);
    }
    // Block 9 (seen once) against the LRU tail, block 0 (seen four times): kept out, and 0 stays.
    for miss in 1..=4 {
        read(&mut l, 9, 1, &mut p);
        assert_eq!(p.fates, [Fate::Pass], "miss {miss} of 9 is no more frequent than the victim");
    }
    read(&mut l, 9, 1, &mut p);
    assert_eq!(p.fates, [Fate::Fetch], "the fifth miss of 9 beats the victim's four accesses");
    assert_eq!(p.victims.first().map(|v| v.key), Some(k(0)), "the victim the policy named");
    l.complete_all();
    let s = l.stats();
    assert_eq!((s.admission_rejections, s.read.block_hits, s.evictions), (4, 12, 1));
    l.validate().unwrap();
}

/// `bloom` admits a block's second miss; `prob` is deterministic for a seed and admits about P of the misses.
#[test]
fn bloom_and_prob_admission_in_a_level() {
    let mut l = level(64, |c| c.admission = "bloom".parse().unwrap(), None);
    let mut p = StepPlan::default();
    read(&mut l, 3, 1, &mut p);
    assert_eq!(p.fates, [Fate::Pass]);
    read(&mut l, 3, 1, &mut p);
    assert_eq!(p.fates, [Fate::Fetch]);
    let run = |spec: &str| {
        let mut l = level(64, |c| c.admission = spec.parse().unwrap(), None);
        let mut p = StepPlan::default();
        let fates: Vec<Fate> = (0..2000)
            .map(|b| {
                read(&mut l, 1000 + b, 1, &mut p);
                l.complete_all();
                p.fates[0]
            })
            .collect();
        (fates, l.stats().admission_rejections)
    };
    let (a, rejected) = run("prob:0.25");
    assert_eq!(run("prob:0.25").0, a, "deterministic");
    assert_ne!(run("prob:0.25:seed=3").0, a, "another seed, other draws");
    assert!((1400..1600).contains(&rejected), "{rejected} of 2000 misses rejected at P = 0.25");
}

#[test]
fn a_sequential_run_past_the_cutoff_bypasses() {
    let mut l = level(64, |c| c.sequential_cutoff = 4 * BS, None);
    let mut p = StepPlan::default();
    read(&mut l, 0, 2, &mut p);
    assert!(!p.bypass);
    l.complete_all();
    read(&mut l, 2, 2, &mut p);
    assert!(p.bypass, "the run reaches 16 KiB");
    assert_eq!(p.fates, [Fate::Pass, Fate::Pass]);
    assert!(!l.has_data(k(2)), "a bypassed read is not cached");
    // A bypassed write drops what the level held.
    l.access(&Request::blocks(Op::Write, k(4), 1, BS), &mut p);
    assert_eq!(p.fates, [Fate::Pass]);
    l.access(&Request::blocks(Op::Write, k(0), 1, BS), &mut p);
    assert!(!p.bypass);
    assert_eq!(p.fates, [Fate::Update]);
    let s = l.stats();
    assert_eq!(s.bypassed, 2);
    assert_eq!(s.read.block_misses(), 4);
}

#[test]
fn writes_update_allocate_pass_and_overtake_reads() {
    let mut l = level(
        8,
        |c| {
            c.partial_write_allocate = false;
            c.volume_bytes = 10 * BS + 100;
        },
        None,
    );
    let mut p = StepPlan::default();
    let w = |off: u64, len: u64| Request::bytes(Op::Write, 0, off, len, BS).unwrap();
    l.access(&w(0, BS + 10), &mut p);
    assert_eq!(p.fates, [Fate::Allocate, Fate::Pass], "the partly written block is not allocated");
    l.access(&w(10, 20), &mut p);
    assert_eq!(p.fates, [Fate::Update]);
    assert_eq!(p.hits, 1);
    l.access(&w(10 * BS, 100), &mut p);
    assert_eq!(p.fates, [Fate::Allocate], "the short last block of the volume is written whole");
    // Writes over reads in flight.
    read(&mut l, 3, 2, &mut p);
    let t = p.token;
    l.access(&w(3 * BS, BS), &mut p);
    assert_eq!(p.fates, [Fate::Allocate], "a whole write takes the block over");
    l.access(&w(4 * BS + 1, 10), &mut p);
    assert_eq!(p.fates, [Fate::Dropped], "a partial write drops it");
    assert!(!l.fetch_done(k(3), t) && !l.fetch_done(k(4), t), "the reads are not installed");
    assert!(l.has_data(k(3)) && !l.has_data(k(4)));
    let s = l.stats();
    assert_eq!((s.fills_dropped, s.invalidations), (2, 1));
    assert_eq!((s.write.requests, s.write.blocks, s.write.block_hits), (5, 6, 1));
    l.validate().unwrap();
}

#[test]
fn write_around_drops_written_blocks() {
    let mut l = level(8, |c| c.write = WritePolicy::Around, None);
    let mut p = StepPlan::default();
    read(&mut l, 0, 2, &mut p);
    l.complete_all();
    l.access(&Request::blocks(Op::Write, k(1), 2, BS), &mut p);
    assert_eq!(p.fates, [Fate::Dropped, Fate::Pass]);
    assert!(l.has_data(k(0)) && !l.has_data(k(1)));
    assert_eq!(l.stats().invalidations, 1);
}

#[test]
fn prefetches_go_in_flight_and_count_used_late_and_wasted() {
    // One-block lookahead on every read: a read of block b proposes b+1 asynchronously.
    let mut l = level(4, |_| {}, Some("obl(every_access=true)"));
    let mut p = StepPlan::default();
    read(&mut l, 0, 1, &mut p);
    assert_eq!(p.fates, [Fate::Fetch]);
    assert_eq!(p.reads.len() + p.async_reads.len(), 2, "the demand block and the lookahead");
    let lookahead = p.reads.iter().chain(&p.async_reads).find(|r| r.first == k(1)).copied().unwrap();
    assert_eq!(lookahead.n, 1);
    // Block 1 is still in flight: a late prefetch.
    read(&mut l, 1, 1, &mut p);
    assert_eq!(p.fates, [Fate::Wait]);
    l.complete_all();
    // Block 2 was proposed by the read of 1; it arrived: a used prefetch.
    read(&mut l, 2, 1, &mut p);
    assert_eq!(p.fates, [Fate::Hit]);
    l.complete_all();
    // Fill the cache with far blocks: the prefetched, never-read block 3 is wasted when evicted.
    for b in [100, 200, 300, 400] {
        read(&mut l, b, 1, &mut p);
        l.complete_all();
    }
    let s = l.stats();
    assert_eq!((s.prefetch_late, s.prefetch_used), (1, 1));
    assert!(s.prefetch_issued >= 3 && s.prefetch_wasted >= 1, "{s:?}");
    let (accuracy, coverage) = (s.prefetch_accuracy().unwrap(), s.prefetch_coverage().unwrap());
    assert!(accuracy > 0.0 && accuracy <= 1.0);
    assert!(coverage > 0.0 && coverage < 1.0);
}

#[test]
fn victims_carry_their_dirty_and_in_flight_state() {
    let mut l = level(2, |_| {}, None);
    let mut p = StepPlan::default();
    read(&mut l, 0, 1, &mut p);
    l.complete_all();
    l.set_dirty(k(0), true);
    assert!(l.is_dirty(k(0)));
    read(&mut l, 1, 1, &mut p);
    let t = p.token;
    read(&mut l, 2, 1, &mut p);
    assert_eq!(p.victims.len(), 1);
    assert_eq!((p.victims[0].key, p.victims[0].dirty, p.victims[0].in_flight), (k(0), true, false));
    read(&mut l, 3, 1, &mut p);
    assert_eq!((p.victims[0].key, p.victims[0].in_flight), (k(1), true));
    assert!(!l.fetch_done(k(1), t), "an evicted block's read is not installed");
    assert!(!l.is_dirty(k(0)), "state leaves with the block");
    l.validate().unwrap();
}

#[test]
fn a_failed_read_drops_the_block() {
    let mut l = level(4, |_| {}, None);
    let mut p = StepPlan::default();
    read(&mut l, 7, 1, &mut p);
    l.fetch_failed(k(7), p.token);
    assert_eq!(l.state(k(7)), blockwell_core::prefetch::BlockState::Absent);
    read(&mut l, 7, 1, &mut p);
    assert_eq!(p.fates, [Fate::Fetch]);
}

#[test]
fn the_cache_command_prefetches_as_a_group() {
    let mut l = level(8, |_| {}, None);
    let mut p = StepPlan::default();
    read(&mut l, 2, 1, &mut p);
    l.complete_all();
    l.prefetch(k(0), 5, &mut p);
    let read: Vec<(u64, u64)> = p.reads.iter().map(|r| (r.first.block(), r.n)).collect();
    assert_eq!(read, [(0, 2), (3, 2)], "the resident block splits the reads");
    assert_eq!(l.stats().prefetch_issued, 4);
    for b in [0, 1, 3, 4] {
        assert!(l.fetch_done(k(b), p.token));
    }
    assert_eq!(PrefetcherKind::NoPrefetch.name(), "none");
}

fn write(l: &mut CacheLevel, b: u64, n: u64, plan: &mut StepPlan) {
    l.access(&Request::blocks(Op::Write, k(b), n, BS), plan);
}

fn back(blocks: u64) -> CacheLevel {
    level(
        blocks,
        |c| {
            c.write = WritePolicy::Back;
            c.partial_write_allocate = false;
        },
        None,
    )
}

#[test]
fn write_back_dirties_what_it_writes_and_victims_carry_it() {
    let mut l = back(4);
    let mut p = StepPlan::default();
    write(&mut l, 0, 2, &mut p);
    assert_eq!(p.fates, [Fate::Allocate, Fate::Allocate]);
    assert!(l.is_dirty(k(0)) && l.is_dirty(k(1)));
    read(&mut l, 5, 1, &mut p);
    l.complete_all();
    assert!(!l.is_dirty(k(5)), "a read fill is clean");
    write(&mut l, 1, 1, &mut p);
    assert_eq!(p.fates, [Fate::Update]);
    assert_eq!(l.stats().dirty_write_hits, 1, "an overwrite of a dirty block is absorbed");
    // A partial write to an absent block passes; to a dirty block it updates.
    l.access(&Request::bytes(Op::Write, 0, 9 * BS + 1, 10, BS).unwrap(), &mut p);
    assert_eq!(p.fates, [Fate::Pass]);
    l.access(&Request::bytes(Op::Write, 0, BS + 1, 10, BS).unwrap(), &mut p);
    assert_eq!(p.fates, [Fate::Update]);
    // Fill the level: the oldest dirty block leaves dirty.
    for b in [6, 7] {
        read(&mut l, b, 1, &mut p);
        l.complete_all();
    }
    let victims: Vec<(u64, bool)> = p.victims.iter().map(|v| (v.key.block(), v.dirty)).collect();
    assert_eq!(victims, [(0, true)]);
    assert_eq!(l.stats().dirty_evictions, 1);
    assert_eq!(l.dirty_count(), 1);
    l.validate().unwrap();
}

#[test]
fn cleaning_hands_out_runs_in_key_order_and_a_write_keeps_a_block_dirty() {
    let mut l = back(64);
    let mut p = StepPlan::default();
    for b in [9, 3, 4, 5, 20, 21, 7] {
        write(&mut l, b, 1, &mut p);
    }
    l.set_pinned(k(7), true);
    let mut runs = Vec::new();
    assert_eq!(l.clean_plan(4, 2, &mut runs), 4);
    let got: Vec<(u64, u64)> = runs.iter().map(|r| (r.first.block(), r.n)).collect();
    assert_eq!(got, [(3, 2), (5, 1), (9, 1)], "key order, runs of at most 2, the pinned block skipped");
    // The next pass continues after block 9 and wraps; blocks handed out are not handed out again.
    let mut more = Vec::new();
    assert_eq!(l.clean_plan(10, 8, &mut more), 2);
    let got: Vec<(u64, u64)> = more.iter().map(|r| (r.first.block(), r.n)).collect();
    assert_eq!(got, [(20, 2)]);
    // A write to block 4 while it is being written back: it stays dirty.
    write(&mut l, 4, 1, &mut p);
    for b in [3, 4, 5, 9, 20] {
        assert_eq!(l.clean_done(k(b)), b != 4, "block {b}");
    }
    l.clean_failed(k(21));
    assert_eq!(l.dirty_blocks().map(|b| b.block()).collect::<Vec<_>>(), [4, 7, 21]);
    assert_eq!(l.stats().cleaned, 4);
    l.set_pinned(k(7), false);
    let mut last = Vec::new();
    assert_eq!(l.clean_plan(u64::MAX, 64, &mut last), 3);
    l.validate().unwrap();
}

#[test]
fn a_bypassed_write_back_updates_what_the_level_holds() {
    let mut l = level(
        64,
        |c| {
            c.write = WritePolicy::Back;
            c.sequential_cutoff = 2 * BS;
        },
        None,
    );
    let mut p = StepPlan::default();
    read(&mut l, 1, 1, &mut p);
    l.complete_all();
    // A 3-block sequential write reaches the cutoff: it bypasses, but the held block 1 is updated, dirty.
    write(&mut l, 0, 3, &mut p);
    assert!(p.bypass);
    assert_eq!(p.fates, [Fate::Pass, Fate::Update, Fate::Pass]);
    assert!(l.is_dirty(k(1)) && !l.has_data(k(0)));
    // Write-around never drops a dirty block.
    let mut a = level(8, |c| c.write = WritePolicy::Around, None);
    read(&mut a, 0, 1, &mut p);
    a.complete_all();
    a.set_dirty(k(0), true);
    write(&mut a, 0, 1, &mut p);
    assert_eq!(p.fates, [Fate::Update]);
    assert!(a.is_dirty(k(0)));
}

#[test]
fn restore_puts_blocks_back_without_counting() {
    let mut l = back(2);
    let mut p = StepPlan::default();
    l.restore(k(1), true, &mut p);
    l.restore(k(2), false, &mut p);
    l.restore(k(3), false, &mut p);
    assert_eq!(p.victims.iter().map(|v| (v.key.block(), v.dirty)).collect::<Vec<_>>(), [(1, true)]);
    assert_eq!(l.stats().read.blocks + l.stats().write.blocks, 0);
    read(&mut l, 3, 1, &mut p);
    assert_eq!(p.fates, [Fate::Hit]);
}
