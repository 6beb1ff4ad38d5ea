//! Prefetchers, the clusterer and REDCAP driven the way a driver uses them: determinism, the behaviours the
//! issue asks for on random and strided workloads, and REDCAP's self-deactivation with a toy disk model.

use blockwell_core::cache::Op;
use blockwell_core::cluster::{Clusterer, DeviceRead};
use blockwell_core::prefetch::{self, BlockState, BlockView, Demand, Fetch, Prefetcher, PrefetcherSpec};
use blockwell_core::redcap::{ReadPlan, Redcap, RedcapConfig, RedcapControl, RedcapControlConfig};
use blockwell_core::BlockKey;
use std::collections::BTreeSet;

fn k(b: u64) -> BlockKey {
    BlockKey::new(0, b).unwrap()
}

/// A driver with an unbounded cache where reads complete at once: each request's demand misses and the
/// prefetcher's fetches go through the clusterer. Returns (device reads, blocks read, request hits).
struct Driver {
    cached: BTreeSet<BlockKey>,
    clusterer: Clusterer,
    reads: Vec<DeviceRead>,
    blocks_read: u64,
    hits: u64,
}

struct View<'a>(&'a BTreeSet<BlockKey>);
impl BlockView for View<'_> {
    fn state(&self, key: BlockKey) -> BlockState {
        if self.0.contains(&key) {
            BlockState::Resident
        } else {
            BlockState::Absent
        }
    }
}

impl Driver {
    fn new() -> Self {
        Driver {
            cached: BTreeSet::new(),
            clusterer: Clusterer::new(16).unwrap(),
            reads: Vec::new(),
            blocks_read: 0,
            hits: 0,
        }
    }

    fn request(&mut self, p: &mut dyn Prefetcher, stream: u64, first: u64, n: u64, end: u64) {
        let d = Demand { stream, op: Op::Read, first: k(first), n, end };
        let mut fetches = Vec::new();
        p.on_demand(&d, &View(&self.cached), &mut fetches);
        let misses: Vec<Fetch> = (first..first + n)
            .filter(|&b| !self.cached.contains(&k(b)))
            .map(|b| Fetch { first: k(b), n: 1, sync: true })
            .collect();
        if misses.is_empty() {
            self.hits += 1;
        }
        fetches.extend(misses);
        let mut out = Vec::new();
        self.clusterer.cluster_view(&fetches, &View(&self.cached), &mut out);
        for r in &out {
            self.blocks_read += r.n;
            for b in r.first.block()..r.first.block() + r.n {
                self.cached.insert(k(b));
            }
        }
        self.reads.extend(out);
    }
}

/// A small deterministic generator (xorshift64*), so tests need no RNG crate.
fn rng(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed | 1;
    move |m| {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) % m
    }
}

fn mixed_workload() -> Vec<(u64, u64, u64)> {
    let mut r = rng(7);
    let mut v = Vec::new();
    for i in 0..400u64 {
        v.push((1, i, 1)); // sequential
        v.push((2, 1000 + i * 3, 1)); // strided
        v.push((3, 5000 + r(4000), 1 + r(4))); // random
    }
    v
}

#[test]
fn every_prefetcher_is_deterministic() {
    for info in prefetch::list() {
        let run = || {
            let mut p = PrefetcherSpec::parse(info.name).unwrap().build(4096).unwrap();
            let mut d = Driver::new();
            for (s, b, n) in mixed_workload() {
                d.request(p.as_mut(), s, b, n, 20_000);
            }
            (d.reads, d.blocks_read, d.hits, p.heap_bytes())
        };
        assert_eq!(run(), run(), "{}", info.name);
    }
}

#[test]
fn linux_read_ahead_reads_more_blocks_than_none_on_random_reads() {
    let mut r = rng(11);
    let reqs: Vec<u64> = (0..2000).map(|_| r(1_000_000)).collect();
    let blocks = |spec: &str| {
        let mut p = PrefetcherSpec::parse(spec).unwrap().build(4096).unwrap();
        let mut d = Driver::new();
        for &b in &reqs {
            d.request(p.as_mut(), 1, b, 1, 1_000_000);
        }
        d.blocks_read
    };
    let none = blocks("none");
    let linux = blocks("linux24");
    assert!(linux > none * 3 / 2, "linux24 {linux} vs none {none}");
    assert!(blocks("ondemand") <= none + 10, "ondemand reads only the request on random reads");
    assert!(blocks("linux26") <= none + 10, "linux26 (2.6.14) reads only the request on random reads");
}

#[test]
fn stride_covers_4k_strided_reads_that_kernel_read_ahead_misses() {
    for stride in [2u64, 128] {
        // From block 1: a strided stream that starts at block 0 gets the kernel's initial window, whose windows
        // then cover the gaps of a 2-block stride (reading twice the data); elsewhere the kernel sees random reads.
        let reqs: Vec<u64> = (0..500).map(|i| 1 + i * stride).collect();
        let hits = |spec: &str| {
            let mut p = PrefetcherSpec::parse(spec).unwrap().build(4096).unwrap();
            let mut d = Driver::new();
            for &b in &reqs {
                d.request(p.as_mut(), 1, b, 1, 1 << 30);
            }
            d.hits
        };
        assert_eq!(hits("ondemand"), 0, "stride {stride}");
        assert_eq!(hits("linux26"), 0, "stride {stride}");
        assert_eq!(hits("none"), 0);
        assert!(hits("stride") >= 495, "stride {stride}: {}", hits("stride"));
    }
}

#[test]
fn sequential_scans_are_clustered_into_few_large_reads() {
    for spec in ["linux24", "linux26", "ondemand", "bsd"] {
        let mut p = PrefetcherSpec::parse(spec).unwrap().build(4096).unwrap();
        let mut d = Driver::new();
        for b in 0..4096 {
            d.request(p.as_mut(), 1, b, 1, 4096);
        }
        assert_eq!(d.blocks_read, 4096, "{spec}");
        assert!(d.reads.len() <= 4096 / 16 + 10, "{spec}: {} reads", d.reads.len());
        assert!(d.reads.iter().all(|r| r.n <= 16));
        assert!(d.hits >= 4000, "{spec}: {} hits", d.hits);
    }
}

/// A toy disk: 4 ms to move the head, 40 µs per block.
struct ToyDisk {
    head: u64,
}
impl ToyDisk {
    fn read(&mut self, first: u64, n: u64) -> u64 {
        let seek = if first == self.head { 0 } else { 4_000_000 };
        self.head = first + n;
        seek + n * 40_000
    }
}

/// Replays reads through REDCAP with its controller: the real disk serves the segment reads while active and
/// the demand reads while inactive; a shadow disk gives the other time. Returns (controller, real I/O time).
fn redcap_run(reqs: &[(u64, u64)], control: RedcapControlConfig) -> (RedcapControl, u64) {
    let mut cache = Redcap::new(RedcapConfig::preset("64x128k", 4096).unwrap()).unwrap();
    let mut ctl = RedcapControl::new(control).unwrap();
    let (mut real, mut shadow) = (ToyDisk { head: 0 }, ToyDisk { head: 0 });
    let mut plan = ReadPlan::default();
    let mut total = 0;
    for &(b, n) in reqs {
        cache.read(k(b), n, u64::MAX, &mut plan);
        let (with, without) = if ctl.is_active() {
            let with: u64 = plan.fetches.iter().map(|f| real.read(f.first.block(), f.n)).sum();
            (with, shadow.read(b, n))
        } else {
            let with: u64 = plan.fetches.iter().map(|f| shadow.read(f.first.block(), f.n)).sum();
            (with, real.read(b, n))
        };
        total += if ctl.is_active() { with } else { without };
        ctl.observe(with, without);
    }
    (ctl, total)
}

#[test]
fn redcap_stays_on_for_interleaved_strided_reads_and_turns_itself_off_on_random_reads() {
    let cfg = RedcapControlConfig::default();
    // 8 processes reading 4 KiB every 8 KiB in nearby regions, interleaved: REDCAP wins.
    let strided: Vec<(u64, u64)> = (0..256).flat_map(|i| (0..8).map(move |p| (p * 4096 + i * 2, 1))).collect();
    let (ctl, with_redcap) = redcap_run(&strided, cfg);
    assert!(ctl.is_active() && ctl.switches() == 0);
    let mut disk = ToyDisk { head: 0 };
    let without: u64 = strided.iter().map(|&(b, n)| disk.read(b, n)).sum();
    assert!(with_redcap * 2 < without, "{with_redcap} vs {without}");

    // Random reads over a large device: each miss reads a whole segment for nothing; it switches off at the
    // end of the first period and stays off.
    let mut r = rng(3);
    let random: Vec<(u64, u64)> = (0..2000).map(|_| (r(10_000_000), 1)).collect();
    let (ctl, _) = redcap_run(&random, cfg);
    assert!(!ctl.is_active());
    assert_eq!(ctl.switches(), 1);
    assert!(ctl.active_fraction() < 0.1, "{}", ctl.active_fraction());

    // Random, then strided: off, then back on once the shadow shows the cache would win.
    let both: Vec<(u64, u64)> = random[..500].iter().copied().chain(strided.iter().copied()).collect();
    let (ctl, _) = redcap_run(&both, cfg);
    assert!(ctl.is_active());
    assert_eq!(ctl.switches(), 2);
}

/// A view from two sets, for randomised checks.
struct SetView {
    resident: BTreeSet<BlockKey>,
    inflight: BTreeSet<BlockKey>,
}
impl BlockView for SetView {
    fn state(&self, key: BlockKey) -> BlockState {
        if self.inflight.contains(&key) {
            BlockState::InFlight
        } else if self.resident.contains(&key) {
            BlockState::Resident
        } else {
            BlockState::Absent
        }
    }
}

#[test]
fn proposals_stay_inside_the_stream_whatever_the_requests() {
    let mut r = rng(99);
    for info in prefetch::list() {
        {
            let spec = info.name;
            let mut p = PrefetcherSpec::parse(spec).unwrap().build(4096).unwrap();
            let mut view = SetView { resident: BTreeSet::new(), inflight: BTreeSet::new() };
            for i in 0..3000u64 {
                let stream = r(4);
                let end = 1 + r(300);
                let first = match r(3) {
                    0 => (i * 3) % end,
                    1 => r(end),
                    _ => (i % 50).min(end - 1),
                };
                let n = (1 + r(8)).min(end - first);
                let vol = (stream % 2) as u32;
                let d = Demand {
                    stream,
                    op: if r(10) == 0 { Op::Write } else { Op::Read },
                    first: BlockKey::new(vol, first).unwrap(),
                    n,
                    end,
                };
                let mut out = Vec::new();
                p.on_demand(&d, &view, &mut out);
                if d.op == Op::Write {
                    assert!(out.is_empty(), "{spec}: writes prefetch nothing");
                }
                for f in &out {
                    assert!(f.n >= 1, "{spec}: empty fetch");
                    assert_eq!(f.first.volume(), vol, "{spec}: other volume");
                    assert!(f.first.block() + f.n <= end, "{spec}: {f:?} past end {end}");
                    for b in f.first.block()..f.first.block() + f.n {
                        let key = BlockKey::new(vol, b).unwrap();
                        if r(4) == 0 {
                            view.inflight.insert(key);
                        } else {
                            view.inflight.remove(&key);
                            view.resident.insert(key);
                        }
                    }
                }
                if r(20) == 0 {
                    view.inflight.clear();
                }
                if r(50) == 0 {
                    p.end_stream(stream);
                }
            }
        }
    }
}

#[test]
fn clusterer_reads_exactly_the_requested_blocks_in_bounded_runs() {
    let mut r = rng(5);
    for max in [1u64, 3, 16, 64] {
        let mut c = Clusterer::new(max).unwrap();
        for _ in 0..300 {
            let fetches: Vec<Fetch> = (0..1 + r(12))
                .map(|_| Fetch { first: BlockKey::new(r(2) as u32, r(200)).unwrap(), n: 1 + r(40), sync: r(2) == 0 })
                .collect();
            let mut out = Vec::new();
            c.cluster(&fetches, &mut out);
            // Model: the sets of sync and async blocks, sync taking precedence.
            let mut sync = BTreeSet::new();
            let mut asyn = BTreeSet::new();
            for f in &fetches {
                for b in f.first.block()..f.first.block() + f.n {
                    let key = BlockKey::new(f.first.volume(), b).unwrap();
                    if f.sync {
                        sync.insert(key);
                    } else {
                        asyn.insert(key);
                    }
                }
            }
            asyn.retain(|key| !sync.contains(key));
            let (mut got_sync, mut got_async) = (BTreeSet::new(), BTreeSet::new());
            let mut seen_async = false;
            for d in &out {
                assert!(d.n >= 1 && d.n <= max);
                seen_async |= !d.sync;
                assert!(!(seen_async && d.sync), "sync reads come first");
                for b in d.first.block()..d.first.block() + d.n {
                    let key = BlockKey::new(d.first.volume(), b).unwrap();
                    let fresh = if d.sync { got_sync.insert(key) } else { got_async.insert(key) };
                    assert!(fresh, "{key:?} read twice");
                }
            }
            assert_eq!(got_sync, sync);
            assert_eq!(got_async, asyn);
            // Maximal runs: two consecutive reads of one class are not mergeable unless the first is full.
            for w in out.windows(2) {
                if w[0].sync == w[1].sync && w[0].first.volume() == w[1].first.volume() {
                    assert!(w[0].first.block() + w[0].n < w[1].first.block() || w[0].n == max, "{w:?}");
                }
            }
        }
    }
}
