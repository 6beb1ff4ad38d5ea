//! Issue #4 §6 properties on the time-aware simulator with the real pieces: the disk presets, the Linux 2.4
//! (seed 001) and 2.6.14 (seed 000) read-ahead, OPT, REDCAP with its activation controller, the workload generators and the file layouts.
//! The numbers these tests measure are in `docs/time-simulation.md`.

use blockwell_core::policy::PolicySpec;
use blockwell_core::redcap::RedcapControlConfig;
use blockwell_disk::{DiskModel, DiskSpec};
use blockwell_sim::experiments::redcap::START_JITTER_NS;
use blockwell_sim::layout::{LayoutKind, LayoutSpec};
use blockwell_sim::vtime::{run_workload, Config, LevelConfig, PrefetchChoice, RedcapSetup, Report, Scheduler, Shadow};
use blockwell_sim::workload::Workload;
use blockwell_sim::workloads::WorkloadSpec;

fn disk(name: &str) -> Box<dyn DiskModel> {
    DiskSpec::parse(name).unwrap().build().unwrap()
}

fn workload(spec: &str) -> Workload {
    WorkloadSpec::parse(spec).unwrap().build().unwrap()
}

fn page_cache(policy: &str, mib: u64, prefetch: &str) -> LevelConfig {
    LevelConfig::new(PolicySpec::parse(policy).unwrap(), mib << 20)
        .with_prefetch(PrefetchChoice::parse(prefetch).unwrap())
}

/// Seed 000's setup: WD1200BB, a 256 MiB LRU page cache with Linux 2.6.14 read-ahead, CFQ, with or without
/// REDCAP 64×128 KiB; processes start within 10 ms of each other (start seed 1), as `experiment redcap` runs.
fn seed000(w: &Workload, layout: LayoutSpec, redcap: bool) -> Report {
    let cfg = Config {
        page_cache: Some(page_cache("lru", 256, "linux26")),
        redcap: redcap.then(|| RedcapSetup::preset("64x128k", 4096).unwrap()),
        layout,
        scheduler: Scheduler::CFQ,
        start_jitter_ns: START_JITTER_NS,
        start_seed: 1,
        ..Config::default()
    };
    run_workload(w, &cfg, disk("wd1200bb").as_ref()).unwrap()
}

/// (time without REDCAP, time with, the REDCAP report).
fn redcap_pair(spec: &str, layout: &str) -> (f64, f64, Report) {
    let w = workload(spec);
    let layout = LayoutSpec::parse(layout).unwrap();
    let off = seed000(&w, layout.clone(), false);
    let on = seed000(&w, layout, true);
    (off.app_time_ns as f64, on.app_time_ns as f64, on)
}

#[test]
fn redcap_cuts_strided_4k_time_by_40_percent_with_8_or_more_processes_on_block_groups() {
    for procs in [8, 16] {
        let (off, on, rep) = redcap_pair(&format!("strided-4k(procs={procs})"), "block-groups");
        let cut = 1.0 - on / off;
        let rc = rep.redcap.as_ref().unwrap();
        assert!(cut >= 0.40, "{procs} processes: {off} ns without REDCAP, {on} ns with: cut {:.1}%", cut * 100.0);
        // The controller keeps it on: its closed-loop shadow estimates the time without the cache from each
        // process's own loop (before it did, the shadow got every request as it arrived, C-LOOK sorted them
        // into sweeps, and the cache was on only 23 % and 56 % of the time).
        assert!(rc.segment_reads > 0 && rc.active_fraction > 0.9, "{rc:?}");
    }
}

/// REDCAP that never switches off (a margin no estimate reaches), its shadows fed as `shadow`.
fn always_on(shadow: Shadow) -> RedcapSetup {
    let mut s = RedcapSetup { shadow, ..RedcapSetup::preset("64x128k", 4096).unwrap() };
    s.control = RedcapControlConfig { margin_pct: 1_000_000, ..s.control };
    s
}

#[test]
fn the_closed_loop_shadow_replays_the_run_without_the_cache() {
    // 4 KiB strided reads: every request of the run without REDCAP is one disk read. With REDCAP always on and
    // no lag limit, the shadow replays each process's loop on a copy of the disk. Under C-LOOK the disk is
    // never idle, so its estimate of the time without the cache is the real run's disk time to the
    // nanosecond, although REDCAP's own run is 10x faster. Under CFQ the disk waits for the process it serves,
    // so when a request arrives matters, and the shadow cannot replay a request before REDCAP's run issues it
    // (the first whole-segment read is slower than the 4 KiB read without the cache): off by 1 % (measured
    // 1,639,314,624 vs 1,623,614,044 ns). Fed on arrival, the estimate is off by an order of magnitude under
    // C-LOOK, which sorts the bursts of requests REDCAP's faster processes send into sweeps; CFQ serves each
    // process's requests in its own queue and slice whenever they arrive, so there the arrival shadow is as
    // close as the closed-loop one (1,640,981,291 ns).
    let w = workload("strided-4k(procs=4,file_mb=8)");
    let layout = LayoutSpec::from(LayoutKind::BlockGroups);
    for (scheduler, tolerance) in [(Scheduler::CLook, 0.0), (Scheduler::CFQ, 0.02)] {
        let base = Config {
            page_cache: Some(page_cache("lru", 256, "linux26")),
            layout: layout.clone(),
            scheduler,
            ..Config::default()
        };
        let off = run_workload(&w, &base, disk("wd1200bb").as_ref()).unwrap();
        let run = |shadow| {
            let cfg = Config { redcap: Some(always_on(shadow)), ..base.clone() };
            let r = run_workload(&w, &cfg, disk("wd1200bb").as_ref()).unwrap();
            let rc = r.redcap.unwrap();
            assert_eq!((rc.switches, rc.shadow_skipped), (0, 0), "{rc:?}");
            (r.app_time_ns, rc.without_ns)
        };
        let (on, estimate) = run(Shadow::ClosedLoop { lag: 0 });
        assert!(on * 2 < off.app_time_ns, "{scheduler:?}: REDCAP {on} ns, none {} ns", off.app_time_ns);
        let busy = off.device.busy_ns;
        let error = (estimate as f64 / busy as f64 - 1.0).abs();
        assert!(
            error <= tolerance,
            "{scheduler:?}: the shadow's time without the cache {estimate} ns, measured {busy} ns"
        );
        let (_, arrival) = run(Shadow::Arrival { depth: 0 });
        if scheduler == Scheduler::CLook {
            assert!(arrival * 5 < busy, "{scheduler:?}: fed on arrival: {arrival} ns vs {busy} ns");
        } else {
            let error = (arrival as f64 / busy as f64 - 1.0).abs();
            assert!(error <= tolerance, "{scheduler:?}: fed on arrival: {arrival} ns vs {busy} ns");
        }
    }
}

/// Process `i` runs `a`'s requests, then `b`'s (files of `b` renumbered after `a`'s).
fn then(a: Workload, b: Workload) -> Workload {
    let base = a.files.len() as u32;
    let mut w = a;
    w.files.extend(b.files.iter().map(|f| blockwell_sim::workload::FileInfo { dir: f.dir + 1_000, ..*f }));
    for (p, reqs) in w.processes.iter_mut().zip(b.processes) {
        p.extend(reqs.into_iter().map(|r| blockwell_sim::workload::FileRequest { file: r.file + base, ..r }));
    }
    w
}

#[test]
fn the_controller_follows_a_phase_change_within_its_lag() {
    // 4 KiB strided reads (REDCAP wins) then random reads (it loses). The closed-loop shadow of the time
    // without the cache runs slower than the real run during the first phase; with no lag limit the controller
    // learns of the second phase late (measured under C-LOOK, where REDCAP won 10x, with `lag=0`: the only
    // switch at 141.0 s, REDCAP counted active all the run). The default lag of 8 requests per process
    // switches it off early in the second phase.
    let w = then(workload("strided-4k(procs=8,file_mb=16)"), workload("random(procs=8,requests=1024)"));
    let layout = LayoutSpec::from(LayoutKind::BlockGroups);
    let first = seed000(&workload("strided-4k(procs=8,file_mb=16)"), layout.clone(), true).app_time_ns;
    let on = seed000(&w, layout.clone(), true);
    let rc = on.redcap.as_ref().unwrap();
    assert!(rc.shadow_skipped > 0, "{rc:?}");
    let off_at = rc.switch_times_ns.first().copied().unwrap_or(u64::MAX);
    assert!(
        off_at < first + (on.app_time_ns - first) / 4,
        "switched off at {off_at} ns; phase 2 from about {first} ns to {} ns: {rc:?}",
        on.app_time_ns
    );
    assert!(rc.active_fraction < 0.5, "{rc:?}");
}

#[test]
fn redcap_stays_within_3_percent_on_sequential_and_random_reads() {
    for (spec, layout) in [
        ("ior(procs=8,shared=true)", "block-groups"),
        ("ior(procs=8)", "block-groups"),
        ("ior(procs=8)", "contiguous"),
        ("random(procs=8)", "block-groups"),
    ] {
        let (off, on, rep) = redcap_pair(spec, layout);
        let change = on / off - 1.0;
        assert!(
            change.abs() <= 0.03,
            "{spec} on {layout}: {off} ns without REDCAP, {on} ns with ({:+.2}%)",
            change * 100.0
        );
        if spec.starts_with("random") {
            // It loses on random reads: the controller switches it off after the first period; it may come back
            // on briefly when the shadow cache's hits make it look worthwhile, but stays off most of the time.
            let rc = rep.redcap.as_ref().unwrap();
            assert!(rc.active_fraction < 0.1 && rc.switches >= 1, "{rc:?}");
            assert!(rc.switch_times_ns[0] < off as u64 / 50, "{rc:?}");
        }
    }
}

#[test]
fn ext3_reservation_windows_take_away_redcaps_gain_on_per_file_ior() {
    // Four IOR files written concurrently into one group. ext2 of 2.6.14 (`rsv_min=0`) interleaves them chunk
    // by chunk, so every whole-segment read brings the neighbours' next chunks: REDCAP gains (measured +47.7 %:
    // CFQ serves one process at a time, which without REDCAP reads its file chunk by chunk across the others').
    // ext3's reservation windows (the default) keep each file in runs of up to 4 MiB, and REDCAP is within 3 %
    // (measured −0.6 %), as seed 000 reports for IOR on every file system.
    let (off, on, _) = redcap_pair("ior(procs=4)", "block-groups");
    assert!((on / off - 1.0).abs() <= 0.03, "ext3: {off} ns without REDCAP, {on} ns with");
    let (off, on, _) = redcap_pair("ior(procs=4)", "block-groups(rsv_min=0)");
    assert!(on < 0.7 * off, "ext2: {off} ns without REDCAP, {on} ns with");
}

fn seed001(w: &Workload, policy: &str, mib: u64, prefetch: &str) -> Report {
    let cfg = Config {
        page_cache: Some(page_cache(policy, mib, prefetch)),
        layout: LayoutKind::Contiguous.into(),
        scheduler: Scheduler::Fifo,
        ..Config::default()
    };
    run_workload(w, &cfg, disk("cheetah9lp").as_ref()).unwrap()
}

#[test]
fn linux_read_ahead_on_random_reads_reads_more_disk_blocks_than_no_prefetching() {
    let w = workload("random");
    let none = seed001(&w, "lru", 16, "none");
    let ra = seed001(&w, "lru", 16, "linux24");
    assert!(
        ra.device.blocks_read > none.device.blocks_read,
        "read-ahead {} blocks, none {}",
        ra.device.blocks_read,
        none.device.blocks_read
    );
    // The extra blocks cost time: the hit ratio barely moves, the application is slower (seed 001 §5.3.2).
    assert!(ra.app_time_ns > none.app_time_ns);
    assert!(ra.hit_ratio().unwrap() - none.hit_ratio().unwrap() < 0.05);
    assert!(ra.page_cache.as_ref().unwrap().prefetch_accuracy.unwrap() < 0.2);
}

#[test]
fn prefetching_narrows_the_lru_opt_hit_ratio_gap_on_a_looping_sequential_workload() {
    let w = workload("loop");
    for mib in [16, 32] {
        let gap = |pf: &str| {
            seed001(&w, "opt", mib, pf).hit_ratio().unwrap() - seed001(&w, "lru", mib, pf).hit_ratio().unwrap()
        };
        let (without, with) = (gap("none"), gap("linux24"));
        assert!(without > 0.0 && with < without, "{mib} MiB: gap {without:.3} without prefetching, {with:.3} with");
    }
}

#[test]
fn prefetching_reports_sync_and_async_requests_with_their_sizes() {
    // Seed 001 Table 5's columns: with read-ahead on a looping sequential workload, asynchronous requests are
    // larger than synchronous ones, and there are fewer requests in total than without prefetching.
    let w = workload("loop");
    let none = seed001(&w, "lru", 32, "none");
    let ra = seed001(&w, "lru", 32, "linux24");
    assert_eq!(none.device.async_reads.requests, 0);
    assert!(ra.device.async_reads.requests > 0);
    assert!(ra.device.async_reads.mean_blocks.unwrap() > ra.device.sync_reads.mean_blocks.unwrap());
    assert!(ra.disk_reads() < none.disk_reads());
}

#[test]
fn real_models_are_deterministic_time_included() {
    let w = workload("strided-4k(procs=8,file_mb=8)");
    let a = serde_json::to_string(&seed000(&w, LayoutKind::BlockGroups.into(), true)).unwrap();
    let b = serde_json::to_string(&seed000(&w, LayoutKind::BlockGroups.into(), true)).unwrap();
    assert_eq!(a, b);
}

/// Seed 001 §3's simple prefetcher, as Blockwell reads it: prefetch only on a miss, synchronously (clustered
/// with the demand block); a miss reads `size` blocks from the demand block on, stopping before a cached block
/// or the end of the file; `size` is 8 after an access that hit a block of the last prefetch group, else 3.
struct Section3 {
    size: u64,
    group: (u64, u64),
}

impl blockwell_core::prefetch::Prefetcher for Section3 {
    fn on_demand(
        &mut self,
        d: &blockwell_core::prefetch::Demand,
        view: &dyn blockwell_core::prefetch::BlockView,
        out: &mut Vec<blockwell_core::prefetch::Fetch>,
    ) {
        use blockwell_core::prefetch::{BlockState, Fetch};
        use blockwell_core::BlockKey;
        let b = d.first.block();
        if view.state(d.first) == BlockState::Resident {
            self.size = if (self.group.0..self.group.1).contains(&b) { 8 } else { 3 };
            return;
        }
        let mut n = 1;
        while n < self.size && b + n < d.end && view.state(BlockKey::from_raw(d.first.raw() + n)) == BlockState::Absent
        {
            n += 1;
        }
        if n > 1 {
            out.push(Fetch { first: BlockKey::from_raw(d.first.raw() + 1), n: n - 1, sync: true });
        }
        self.group = (b + 1, b + n);
    }
}

#[test]
fn opt_with_prefetching_issues_more_disk_requests_than_lru_on_seed_001_table_1() {
    use blockwell_core::Op;
    use blockwell_sim::workload::{FileInfo, FileRequest};
    // Seed 001 Table 1: blocks a..p of one file, an 8-block cache.
    let reqs = "acegikmoabcdefghijklmnop"
        .bytes()
        .map(|c| FileRequest {
            file: 0,
            op: Op::Read,
            offset: u64::from(c - b'a') * 4096,
            len: 4096,
            think_ns: 0,
            at_ns: None,
        })
        .collect();
    let w = Workload {
        name: "table1".into(),
        files: vec![FileInfo { size: 16 * 4096, writer: 0, dir: 0 }],
        processes: vec![reqs],
    };
    let run = |policy: &str, prefetch: bool| {
        let mut lc = LevelConfig::new(PolicySpec::parse(policy).unwrap(), 8 * 4096);
        if prefetch {
            lc = lc.with_prefetch(PrefetchChoice::custom("section3", || Box::new(Section3 { size: 3, group: (0, 0) })));
        }
        run_workload(&w, &Config { page_cache: Some(lc), ..Config::default() }, disk("cheetah9lp").as_ref())
            .unwrap()
            .disk_reads()
    };
    // Without prefetching: 16 misses for OPT, 23 for LRU, as the seed says.
    assert_eq!((run("opt", false), run("lru", false)), (16, 23));
    // With prefetching LRU needs 6 disk requests, as in the table; OPT needs more: 7 here, 8 in the table
    // (the seed's prefetcher also stops before a block whose insertion would evict the demand block or a block
    // of its own group, which `Section3` does not model).
    assert_eq!(run("lru", true), 6);
    assert_eq!(run("opt", true), 7);
}
