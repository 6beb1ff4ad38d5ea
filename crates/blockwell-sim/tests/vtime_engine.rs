//! The time-aware simulator's engine with test-only models: a constant-time disk that logs what it serves and
//! a simple sequential prefetcher.

use blockwell_core::policy::PolicySpec;
use blockwell_core::prefetch::{BlockState, BlockView, Demand, Fetch, Prefetcher};
use blockwell_core::Op;
use blockwell_disk::{DiskModel, DiskRequest};
use blockwell_sim::vtime::{
    run_block_requests, run_workload, BlockRequest, Config, Error, IssueMode, LevelConfig, PrefetchChoice, Scheduler,
};
use blockwell_sim::workload::{FileInfo, FileRequest, Workload};
use std::sync::{Arc, Mutex};

const MS: u64 = 1_000_000;
const BS: u64 = 4096;

/// Every request takes `ns`; the requests served are logged (shared between clones).
#[derive(Clone)]
struct ConstDisk {
    ns: u64,
    log: Arc<Mutex<Vec<(u64, DiskRequest)>>>,
}

impl ConstDisk {
    fn new(ns: u64) -> Self {
        ConstDisk { ns, log: Arc::new(Mutex::new(Vec::new())) }
    }
    fn served(&self) -> Vec<(u64, DiskRequest)> {
        self.log.lock().unwrap().clone()
    }
}

impl DiskModel for ConstDisk {
    fn service(&mut self, now_ns: u64, req: &DiskRequest) -> u64 {
        self.log.lock().unwrap().push((now_ns, *req));
        self.ns
    }
    fn capacity_sectors(&self) -> u64 {
        1 << 40
    }
    fn reset(&mut self) {}
    fn boxed_clone(&self) -> Box<dyn DiskModel> {
        Box::new(self.clone())
    }
    fn describe(&self) -> String {
        format!("constant {} ns", self.ns)
    }
}

/// On every read, asynchronously fetch the `k` blocks after the request (within the stream's end), unless
/// the last of them is already resident or in flight.
struct SeqAhead {
    k: u64,
}

impl Prefetcher for SeqAhead {
    fn on_demand(&mut self, d: &Demand, view: &dyn BlockView, out: &mut Vec<Fetch>) {
        if d.op != Op::Read {
            return;
        }
        let start = d.first.block() + d.n;
        let n = self.k.min(d.end.saturating_sub(start));
        if n == 0 {
            return;
        }
        let Some(first) = blockwell_core::BlockKey::new(d.first.volume(), start) else { return };
        let last = blockwell_core::BlockKey::from_raw(first.raw() + n - 1);
        if view.state(last) == BlockState::Absent {
            out.push(Fetch { first, n, sync: false });
        }
    }
}

fn seq_ahead(k: u64) -> PrefetchChoice {
    PrefetchChoice::custom(format!("seq{k}"), move || Box::new(SeqAhead { k }))
}

fn lru(blocks: u64) -> LevelConfig {
    LevelConfig::new(PolicySpec::parse("lru").unwrap(), blocks * BS)
}

fn read(file: u32, block: u64, think_ns: u64) -> FileRequest {
    FileRequest { file, op: Op::Read, offset: block * BS, len: BS, think_ns, at_ns: None }
}

fn one_file(blocks: u64, processes: Vec<Vec<FileRequest>>) -> Workload {
    Workload { name: "t".into(), files: vec![FileInfo { size: blocks * BS, writer: 0, dir: 0 }], processes }
}

/// A pseudo-random permutation-ish sequence of blocks (deterministic, no dependency).
fn scrambled(n: u64, range: u64) -> Vec<u64> {
    (0..n).map(|i| (i * 7919 + 13) % range).collect()
}

#[test]
fn closed_loop_zero_think_constant_disk_is_the_sum_of_service_times() {
    let disk = ConstDisk::new(3 * MS);
    let blocks = scrambled(50, 1000);
    let w = one_file(1000, vec![blocks.iter().map(|&b| read(0, b, 0)).collect()]);
    // No cache at all: every request is one device read.
    let r = run_workload(&w, &Config::default(), &disk).unwrap();
    assert_eq!(r.requests, 50);
    assert_eq!(r.device.sync_reads.requests, 50);
    assert_eq!(r.app_time_ns, 50 * 3 * MS);
    assert_eq!(r.device.busy_ns, r.app_time_ns);
    assert_eq!(r.device.idle_ns, 0);
    // With think time the application time adds it; the device idles exactly that long.
    let w = one_file(1000, vec![blocks.iter().map(|&b| read(0, b, 2 * MS)).collect()]);
    let r = run_workload(&w, &Config::default(), &disk).unwrap();
    assert_eq!(r.app_time_ns, 50 * 5 * MS);
    assert_eq!(r.device.idle_ns, 50 * 2 * MS);
    // The think-time override replaces the workload's.
    let cfg = Config { think_ns: Some(0), ..Config::default() };
    assert_eq!(run_workload(&w, &cfg, &disk).unwrap().app_time_ns, 50 * 3 * MS);
}

#[test]
fn think_jitter_adds_a_seeded_random_delay_to_every_think_time() {
    let disk = ConstDisk::new(3 * MS);
    let blocks = scrambled(50, 1000);
    let w = one_file(1000, vec![blocks.iter().map(|&b| read(0, b, MS)).collect()]);
    let plain = run_workload(&w, &Config::default(), &disk).unwrap();
    assert_eq!(plain.app_time_ns, 50 * 4 * MS);
    let jittered = |seed| {
        let cfg = Config { think_jitter_ns: 2 * MS, start_seed: seed, ..Config::default() };
        run_workload(&w, &cfg, &disk).unwrap()
    };
    let (a, b, c) = (jittered(1), jittered(1), jittered(2));
    // Each of the 50 think times grows by 0..=2 ms: the device idles exactly the think times.
    for r in [&a, &c] {
        let think = r.app_time_ns - 50 * 3 * MS;
        assert_eq!(r.device.idle_ns, think);
        assert!(think > 50 * MS && think < 50 * 3 * MS, "think total {think} ns: 50 x (1 ms + U(0, 2 ms))");
    }
    assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap(), "seeded");
    assert_ne!(a.app_time_ns, c.app_time_ns, "another seed, other delays");
}

#[test]
fn think_times_queue_for_the_processors() {
    // Four processes, 10 reads each of 1 ms on the disk, thinking 4 ms before each.
    let disk = ConstDisk::new(MS);
    let procs = (0..4u64).map(|p| (0..10).map(|i| read(0, p * 100 + i, 4 * MS)).collect()).collect();
    let w = one_file(1000, procs);
    let time = |cpus| run_workload(&w, &Config { cpus, ..Config::default() }, &disk).unwrap().app_time_ns;
    // A processor per process: the think times overlap, the disk (4 ms of work per round) keeps up.
    assert!(time(0) < 10 * 8 * MS, "{}", time(0));
    // One processor: the 160 ms of thinking run one after another, and the disk's work overlaps them.
    assert!(time(1) >= 160 * MS && time(1) <= 161 * MS, "{}", time(1));
    // Two processors: half as long, as long as the thinking dominates.
    assert!(time(2) >= 80 * MS && time(2) < 90 * MS, "{}", time(2));
    // As many processors as processes is no limit at all.
    assert_eq!(time(4), time(0));
}

#[test]
fn page_cache_hits_take_no_device_time() {
    let disk = ConstDisk::new(MS);
    // Read blocks 0..10 twice: the second pass hits.
    let reqs: Vec<_> = (0..10).chain(0..10).map(|b| read(0, b, 0)).collect();
    let w = one_file(10, vec![reqs]);
    let cfg = Config { page_cache: Some(lru(16)), ..Config::default() };
    let r = run_workload(&w, &cfg, &disk).unwrap();
    let pc = r.page_cache.as_ref().unwrap();
    assert_eq!(pc.counters.read_blocks, 20);
    assert_eq!(pc.counters.read_hits, 10);
    assert_eq!(pc.hit_ratio.unwrap(), 0.5);
    assert_eq!(r.device.sync_reads.requests, 10);
    assert_eq!(r.app_time_ns, 10 * MS);
}

fn report_json(w: &Workload, cfg: &Config) -> String {
    let disk = ConstDisk::new(MS + 12_345);
    serde_json::to_string(&run_workload(w, cfg, &disk).unwrap()).unwrap()
}

#[test]
fn identical_inputs_give_identical_reports_time_included() {
    let procs: Vec<Vec<FileRequest>> = (0..6u64)
        .map(|p| {
            scrambled(80, 400).iter().map(|&b| read((p % 3) as u32, (b + p * 17) % 400, (p + 1) * 100_000)).collect()
        })
        .collect();
    let w = Workload {
        name: "det".into(),
        files: (0..3).map(|i| FileInfo { size: 400 * BS, writer: i, dir: 0 }).collect(),
        processes: procs,
    };
    for scheduler in [Scheduler::Fifo, Scheduler::CLook, Scheduler::CFQ] {
        let cfg = Config {
            page_cache: Some(lru(64).with_prefetch(seq_ahead(4))),
            block_cache: Some(
                LevelConfig::new(PolicySpec::parse("arc").unwrap(), 128 * BS).with_prefetch(seq_ahead(8)),
            ),
            scheduler,
            ..Config::default()
        };
        let a = report_json(&w, &cfg);
        let b = report_json(&w, &cfg);
        assert_eq!(a, b);
        assert!(a.contains("\"app_time_ns\""));
    }
}

#[test]
fn a_demand_to_an_in_flight_block_waits_and_issues_no_read() {
    let disk = ConstDisk::new(4 * MS);
    // Two processes read the same block at time 0: one read, both wait for it.
    let w = one_file(10, vec![vec![read(0, 3, 0)], vec![read(0, 3, 0)]]);
    let cfg = Config { page_cache: Some(lru(8)), ..Config::default() };
    let r = run_workload(&w, &cfg, &disk).unwrap();
    assert_eq!(r.device.sync_reads.requests, 1);
    assert_eq!(r.app_time_ns, 4 * MS);
    let pc = r.page_cache.as_ref().unwrap();
    assert_eq!(pc.counters.inflight_waits, 1);
    assert_eq!(pc.counters.read_hits, 0, "a block still in flight is a miss");
    assert_eq!(r.mean_request_ns, Some((4 * MS) as f64));

    // A read of a block whose prefetch is still in flight waits for the prefetch: block 0 misses and
    // prefetches 1..=4 asynchronously; block 1, read 1 ms after block 0 completed, waits for that read.
    let disk = ConstDisk::new(4 * MS);
    let w = one_file(10, vec![vec![read(0, 0, 0), read(0, 1, MS)]]);
    let cfg = Config { page_cache: Some(lru(8).with_prefetch(seq_ahead(4))), ..Config::default() };
    let r = run_workload(&w, &cfg, &disk).unwrap();
    let pc = r.page_cache.as_ref().unwrap();
    assert_eq!(pc.counters.inflight_waits, 1);
    assert_eq!(pc.counters.prefetch_late, 1);
    assert_eq!(pc.counters.read_hits, 0);
    assert_eq!(r.device.sync_reads.requests, 1, "block 1 issued no read of its own");
    // The async read of 1..=4 is served after the sync read (4 ms), completes at 8 ms; block 1 waits for it.
    assert_eq!(r.app_time_ns, 8 * MS);
    let served = disk.served();
    assert_eq!(served.len(), 2 + 1, "sync 0, async 1..=4, then the prefetch triggered by block 1");
    assert_eq!(served[1].1.sectors, 4 * 8);
}

#[test]
fn c_look_serves_by_sector_fifo_by_arrival() {
    let blocks = [500u64, 100, 900, 300, 700];
    let reqs: Vec<BlockRequest> = blocks
        .iter()
        .map(|&b| BlockRequest { volume: 0, op: Op::Read, offset: b * BS, len: BS, think_ns: 0, at_ns: 0 })
        .collect();
    let order = |scheduler| {
        let disk = ConstDisk::new(MS);
        let cfg = Config { scheduler, issue: IssueMode::OpenLoop, ..Config::default() };
        let r = run_block_requests(std::slice::from_ref(&reqs), &cfg, &disk).unwrap();
        assert_eq!(r.app_time_ns, 5 * MS);
        assert_eq!(r.device.max_queue, 4);
        disk.served().iter().map(|(_, q)| q.sector / 8).collect::<Vec<_>>()
    };
    assert_eq!(order(Scheduler::Fifo), vec![500, 100, 900, 300, 700]);
    assert_eq!(order(Scheduler::CLook), vec![500, 700, 900, 100, 300]);
}

#[test]
fn cfq_waits_for_the_process_it_serves_where_c_look_seeks_away() {
    // Process A reads blocks 0..10 one at a time, thinking 5 ms before each but the first; process B reads
    // blocks 1000..1004, thinking 1 ms before each. C-LOOK serves B during A's think times. CFQ gives A (first
    // to arrive) its slice: it waits up to 10 ms (the idle window) for A's next request each time, so A's ten
    // reads go first, then (after waiting 10 ms for A, which has no more) B's.
    let req =
        |b: u64, think_ns: u64| BlockRequest { volume: 0, op: Op::Read, offset: b * BS, len: BS, think_ns, at_ns: 0 };
    let a: Vec<BlockRequest> = (0..10u64).map(|b| req(b, if b == 0 { 0 } else { 5 * MS })).collect();
    let b: Vec<BlockRequest> = (1000..1004u64).map(|b| req(b, MS)).collect();
    let run = |scheduler| {
        let disk = ConstDisk::new(MS);
        let cfg = Config { scheduler, ..Config::default() };
        let r = run_block_requests(&[a.clone(), b.clone()], &cfg, &disk).unwrap();
        (disk.served().iter().map(|(_, q)| q.sector / 8).collect::<Vec<_>>(), r)
    };
    let (order, r) = run(Scheduler::CFQ);
    let expected: Vec<u64> = (0..10).chain(1000..1004).collect();
    assert_eq!(order, expected);
    // A: 10 reads of 1 ms and 9 think times of 5 ms (55 ms); the wait for A (10 ms); B: 4 reads, 3 think times.
    assert_eq!(r.device.busy_ns, 14 * MS);
    assert_eq!(r.app_time_ns, 55 * MS + 10 * MS + 7 * MS);
    let (order, r) = run(Scheduler::CLook);
    assert_eq!(&order[..3], &[0, 1000, 1001], "C-LOOK: B's reads fill A's think time");
    // B's reads all fit in A's think times: the run is A's own 55 ms.
    assert_eq!(r.app_time_ns, 55 * MS);
}

#[test]
fn async_prefetch_overlapping_think_time_reduces_app_time() {
    let disk = ConstDisk::new(MS);
    let w = one_file(256, vec![(0..256).map(|b| read(0, b, MS)).collect()]);
    let base = Config { page_cache: Some(lru(64)), ..Config::default() };
    let off = run_workload(&w, &base, &disk).unwrap();
    let on = run_workload(&w, &Config { page_cache: Some(lru(64).with_prefetch(seq_ahead(8))), ..base.clone() }, &disk)
        .unwrap();
    assert_eq!(off.app_time_ns, 256 * 2 * MS);
    assert!(on.device.async_reads.requests > 0);
    assert!(
        (on.app_time_ns as f64) < 0.7 * off.app_time_ns as f64,
        "with read-ahead {} ns, without {} ns",
        on.app_time_ns,
        off.app_time_ns
    );
    let pc = on.page_cache.as_ref().unwrap();
    assert!(pc.prefetch_accuracy.unwrap() > 0.9 && pc.prefetch_coverage.unwrap() > 0.5, "{pc:?}");
    assert!(on.device.async_reads.mean_blocks.unwrap() > 1.0);
}

#[test]
fn clustering_respects_the_maximum_request_size_and_keeps_sync_and_async_apart() {
    let disk = ConstDisk::new(MS);
    // One 200 KiB read: 50 blocks → 64 KiB requests of 16 blocks: 16+16+16+2.
    let w = one_file(
        100,
        vec![vec![FileRequest { file: 0, op: Op::Read, offset: 0, len: 200 * 1024, think_ns: 0, at_ns: None }]],
    );
    let cfg = Config { page_cache: Some(lru(128).with_prefetch(seq_ahead(20))), ..Config::default() };
    let r = run_workload(&w, &cfg, &disk).unwrap();
    assert_eq!(r.device.sync_reads.requests, 4);
    assert_eq!(r.device.sync_reads.blocks, 50);
    assert_eq!(r.device.async_reads.blocks, 20);
    assert_eq!(r.device.async_reads.requests, 2);
    assert_eq!(r.device.blocks_read, 70);
    for (_, q) in disk.served() {
        assert!(q.sectors <= 128);
    }
}

#[test]
fn writes_go_through_to_the_disk_and_the_writer_waits() {
    let disk = ConstDisk::new(2 * MS);
    let wr = FileRequest { file: 0, op: Op::Write, offset: 0, len: 3 * BS, think_ns: 0, at_ns: None };
    let w = one_file(10, vec![vec![wr, read(0, 1, 0)]]);
    let cfg = Config { page_cache: Some(lru(8)), ..Config::default() };
    let r = run_workload(&w, &cfg, &disk).unwrap();
    assert_eq!(r.device.writes.requests, 1);
    assert_eq!(r.device.writes.blocks, 3);
    assert_eq!(r.device.sync_reads.requests, 0, "the written page is cached");
    assert_eq!(r.app_time_ns, 2 * MS);
}

#[test]
fn block_level_cache_and_open_loop_block_requests() {
    let disk = ConstDisk::new(MS);
    // Same block read at 0 and 10 ms: with a block cache the second hits.
    let reqs = vec![
        BlockRequest { volume: 0, op: Op::Read, offset: 0, len: BS, think_ns: 0, at_ns: 0 },
        BlockRequest { volume: 0, op: Op::Read, offset: 0, len: BS, think_ns: 0, at_ns: 10 * MS },
    ];
    let cfg = Config { block_cache: Some(lru(4)), issue: IssueMode::OpenLoop, ..Config::default() };
    let r = run_block_requests(std::slice::from_ref(&reqs), &cfg, &disk).unwrap();
    assert_eq!(r.device.sync_reads.requests, 1);
    assert_eq!(r.app_time_ns, 10 * MS);
    assert_eq!(r.block_cache.as_ref().unwrap().hit_ratio.unwrap(), 0.5);
    assert_eq!(r.hit_ratio().unwrap(), 0.5);
    // Without a block cache both go to the disk.
    let cfg = Config { issue: IssueMode::OpenLoop, ..Config::default() };
    let r = run_block_requests(&[reqs], &cfg, &disk).unwrap();
    assert_eq!(r.device.sync_reads.requests, 2);
    assert_eq!(r.app_time_ns, 11 * MS);
    assert!(r.block_cache.is_none());
}

#[test]
fn opt_gets_next_use_times_and_beats_lru_on_a_loop() {
    let disk = ConstDisk::new(MS);
    // Loop three times over 12 blocks with a 8-block cache: LRU misses everything, OPT keeps some.
    let reqs: Vec<_> = (0..3).flat_map(|_| 0..12).map(|b| read(0, b, 0)).collect();
    let w = one_file(12, vec![reqs]);
    let run = |p: &str| {
        let cfg =
            Config { page_cache: Some(LevelConfig::new(PolicySpec::parse(p).unwrap(), 8 * BS)), ..Config::default() };
        run_workload(&w, &cfg, &disk).unwrap()
    };
    let (l, o) = (run("lru"), run("opt"));
    assert_eq!(l.hit_ratio().unwrap(), 0.0);
    // Belady on a loop of 12 over 8 frames: 12 cold misses, then 4 misses per later pass of 12 → 16 hits.
    assert_eq!(o.page_cache.as_ref().unwrap().counters.read_hits, 16);
    assert!(o.app_time_ns < l.app_time_ns);
}

#[test]
fn bad_input_is_a_typed_error() {
    let disk = ConstDisk::new(MS);
    let w = one_file(10, vec![vec![read(3, 0, 0)]]);
    assert!(matches!(run_workload(&w, &Config::default(), &disk), Err(Error::Request { process: 0, index: 0, .. })));
    let cfg = Config { max_request_bytes: 100, ..Config::default() };
    assert!(matches!(run_workload(&one_file(1, vec![]), &cfg, &disk), Err(Error::Config(_))));
    let cfg = Config { page_cache: Some(LevelConfig::new(PolicySpec::parse("lru").unwrap(), 10)), ..Config::default() };
    assert!(matches!(run_workload(&one_file(1, vec![]), &cfg, &disk), Err(Error::Cache { .. })));
    // A read past the end of the file touches nothing and completes at once.
    let w = one_file(1, vec![vec![read(0, 5, 0)]]);
    let r = run_workload(&w, &Config::default(), &disk).unwrap();
    assert_eq!((r.requests, r.app_time_ns, r.device.served), (1, 0, 0));
}

/// `fixed_ns` per request plus `per_sector_ns` per sector.
#[derive(Clone)]
struct LinearDisk {
    fixed_ns: u64,
    per_sector_ns: u64,
}

impl DiskModel for LinearDisk {
    fn service(&mut self, _now_ns: u64, req: &DiskRequest) -> u64 {
        self.fixed_ns + self.per_sector_ns * req.sectors
    }
    fn capacity_sectors(&self) -> u64 {
        1 << 30
    }
    fn reset(&mut self) {}
    fn boxed_clone(&self) -> Box<dyn DiskModel> {
        Box::new(self.clone())
    }
    fn describe(&self) -> String {
        "linear".into()
    }
}

fn block_reads(blocks: &[u64]) -> Vec<BlockRequest> {
    blocks
        .iter()
        .map(|&b| BlockRequest { volume: 0, op: Op::Read, offset: b * BS, len: BS, think_ns: 0, at_ns: 0 })
        .collect()
}

#[test]
fn redcap_switches_itself_off_when_segment_reads_cost_more_than_they_save() {
    use blockwell_sim::vtime::RedcapSetup;
    // Transfer-dominated disk: a 32-block segment costs 32 times a block; random reads never reuse a segment.
    let disk = LinearDisk { fixed_ns: 100_000, per_sector_ns: 50_000 };
    let reqs = block_reads(&scrambled(2000, 1_000_000));
    let with = Config { redcap: Some(RedcapSetup::preset("64x128k", BS).unwrap()), ..Config::default() };
    let on = run_block_requests(std::slice::from_ref(&reqs), &with, &disk).unwrap();
    let off = run_block_requests(&[reqs], &Config::default(), &disk).unwrap();
    let rc = on.redcap.as_ref().unwrap();
    assert_eq!(rc.switches, 1, "{rc:?}");
    assert!(!rc.active_at_end);
    assert_eq!(rc.switch_times_ns.len(), 1);
    // One period (64 requests) of 32-block segment reads, then plain reads.
    assert_eq!(rc.segment_reads, 64);
    // The price of deciding: a block costs 0.1 + 8 × 0.05 = 0.5 ms, a segment 0.1 + 256 × 0.05 = 12.9 ms.
    assert_eq!(off.app_time_ns, 2000 * 500_000);
    assert_eq!(on.app_time_ns, off.app_time_ns + 64 * (12_900_000 - 500_000));
    assert!(rc.with_ns > rc.without_ns);
}

#[test]
fn redcap_stays_on_and_serves_neighbouring_blocks_from_its_segments() {
    use blockwell_sim::vtime::RedcapSetup;
    // Overhead-dominated disk: reading 32 blocks costs little more than one.
    let disk = LinearDisk { fixed_ns: 5 * MS, per_sector_ns: 1_000 };
    // Two interleaved sequential streams, one block each, like two files interleaved on disk.
    let blocks: Vec<u64> = (0..512).map(|i| (i % 2) * 4096 + i / 2).collect();
    let reqs = block_reads(&blocks);
    let with = Config { redcap: Some(RedcapSetup::preset("64x128k", BS).unwrap()), ..Config::default() };
    let on = run_block_requests(std::slice::from_ref(&reqs), &with, &disk).unwrap();
    let off = run_block_requests(&[reqs], &Config::default(), &disk).unwrap();
    let rc = on.redcap.as_ref().unwrap();
    assert_eq!((rc.switches, rc.active_at_end, rc.segment_reads), (0, true, 16));
    assert_eq!(on.device.sync_reads.requests, 16);
    assert_eq!(off.device.sync_reads.requests, 512);
    assert!(on.app_time_ns * 20 < off.app_time_ns);
    let bc = on.block_cache.as_ref().unwrap();
    assert_eq!(bc.counters.read_hits, 512 - 16);
}

#[test]
fn prefetches_evicted_unused_are_counted_as_wasted() {
    let disk = ConstDisk::new(MS);
    // A 4-block cache, 8 blocks of read-ahead per read, reads jumping 100 blocks: every prefetch is wasted.
    let w = one_file(10_000, vec![(0..20).map(|i| read(0, i * 100, 0)).collect()]);
    let cfg = Config { page_cache: Some(lru(4).with_prefetch(seq_ahead(8))), ..Config::default() };
    let r = run_workload(&w, &cfg, &disk).unwrap();
    let c = r.page_cache.as_ref().unwrap().counters;
    assert_eq!(c.prefetch_issued, 20 * 8);
    assert_eq!(c.prefetch_hits + c.prefetch_late, 0);
    assert!(c.prefetch_wasted >= 19 * 8 - 4, "{c:?}");
    assert_eq!(r.page_cache.as_ref().unwrap().prefetch_accuracy.unwrap(), 0.0);
    assert_eq!(r.device.blocks_read, 20 * 9);
}

#[test]
fn reads_merge_into_a_queued_read_that_ends_where_they_start() {
    // Block 0 is in service while 10, 11 and 12 arrive one by one: 11 and 12 join 10's queued request.
    let reqs = block_reads(&[0, 10, 11, 12, 30]);
    let run = |merge_queued| {
        let disk = ConstDisk::new(MS);
        let cfg = Config { issue: IssueMode::OpenLoop, merge_queued, ..Config::default() };
        let r = run_block_requests(std::slice::from_ref(&reqs), &cfg, &disk).unwrap();
        (r, disk.served().iter().map(|(_, q)| (q.sector / 8, q.sectors / 8)).collect::<Vec<_>>())
    };
    let (merged, served) = run(true);
    assert_eq!(served, vec![(0, 1), (10, 3), (30, 1)]);
    assert_eq!((merged.device.sync_reads.requests, merged.device.sync_reads.blocks, merged.device.merged), (3, 5, 2));
    assert_eq!(merged.app_time_ns, 3 * MS);
    let (plain, served) = run(false);
    assert_eq!(served.len(), 5);
    assert_eq!((plain.device.sync_reads.requests, plain.device.merged), (5, 0));
}

#[test]
fn absurd_request_sizes_are_errors_not_allocations() {
    let disk = ConstDisk::new(MS);
    let huge = BlockRequest { volume: 0, op: Op::Read, offset: 0, len: 1 << 50, think_ns: 0, at_ns: 0 };
    let e = run_block_requests(&[vec![huge]], &Config::default(), &disk).unwrap_err();
    assert!(matches!(e, Error::Request { .. }), "{e}");
    assert!(e.to_string().contains("limit"), "{e}");
    let w = Workload {
        name: "huge".into(),
        files: vec![FileInfo { size: 1 << 50, writer: 0, dir: 0 }],
        processes: vec![vec![FileRequest { file: 0, op: Op::Read, offset: 0, len: 1 << 50, think_ns: 0, at_ns: None }]],
    };
    assert!(matches!(run_workload(&w, &Config::default(), &disk), Err(Error::Request { .. })));
}
