//! The experiment grids (`blockwell_sim::experiments`): grid order and determinism whatever the thread count,
//! the papers' headline properties at reduced scale, scaling of the workloads, option errors, and block traces
//! as a source.

use blockwell_core::policy::parse_policy_list;
use blockwell_sim::experiments::policies::{PolicyGrid, Source};
use blockwell_sim::experiments::redcap::RedcapGrid;
use blockwell_sim::experiments::Error;
use blockwell_sim::layout::LayoutKind;
use blockwell_sim::replay::CacheSize;
use blockwell_sim::vtime::{run_block_requests, run_block_trace, Config, LevelConfig, PrefetchChoice};
use blockwell_sim::workloads::generate;
use blockwell_trace::{formats::Format, ReaderOptions};
use std::io::Write;

fn small_redcap(threads: usize) -> RedcapGrid {
    RedcapGrid {
        benchmarks: vec!["strided-4k".into(), "random(files=8,file_mb=32)".into()],
        procs: vec![1, 8],
        layouts: vec![LayoutKind::BlockGroups.into(), LayoutKind::Contiguous.into()],
        threads,
        ..RedcapGrid::quick().unwrap()
    }
}

#[test]
fn redcap_grid_is_in_grid_order_and_identical_for_any_thread_count() {
    let one = small_redcap(1).run().unwrap();
    let three = small_redcap(3).run().unwrap();
    assert_eq!(serde_json::to_string(&one).unwrap(), serde_json::to_string(&three).unwrap());
    // benchmark × procs × layout × config, in that order.
    let keys: Vec<(String, u32, String)> =
        one.cells.iter().map(|c| (c.benchmark.clone(), c.procs, c.layout.clone())).collect();
    assert_eq!(keys.len(), 2 * 2 * 2);
    assert_eq!(keys[0], ("strided-4k".into(), 1, "block-groups".into()));
    assert_eq!(keys[1], ("strided-4k".into(), 1, "contiguous".into()));
    assert_eq!(keys[2], ("strided-4k".into(), 8, "block-groups".into()));
    assert_eq!(keys[4], ("random(files=8,file_mb=32)".into(), 1, "block-groups".into()));
    for c in &one.cells {
        // The improvement is the mean of the paired runs' improvements, with a 95 % Student-t interval.
        assert_eq!(c.improvement_runs.len(), 3, "quick grid: 3 runs");
        let (mean, ci) = blockwell_sim::experiments::redcap::mean_ci95(&c.improvement_runs);
        assert!((c.improvement - mean).abs() < 1e-12 && (c.improvement_ci95 - ci).abs() < 1e-12, "{c:?}");
        assert!(c.time_without_ns > 0 && c.time_with_ns > 0);
    }
    // Seed 000's headline at an eighth of the default file size: strided 4 KiB reads by 8 processes on block
    // groups gain at least 40 %; random reads switch REDCAP off and stay within 3 %.
    let s = one.get("strided-4k", 8, "block-groups", "64x128k").unwrap();
    assert!(s.improvement >= 0.40 && s.active_fraction > 0.0, "{s:?}");
    // Random reads: REDCAP is switched off and stays off most of the time (measured: within 3 % on the mean of
    // the three jittered runs, active about 11 % of the time; docs/experiments/redcap.md).
    let r = one.get("random(files=8,file_mb=32)", 8, "block-groups", "64x128k").unwrap();
    assert!(r.improvement.abs() <= 0.03 && r.active_fraction < 0.25 && r.switches >= 1, "{r:?}");
    // The table has one block per benchmark with a row per process count.
    let t = one.table();
    assert!(t.contains("\nstrided-4k\n") && t.contains("\nrandom(files=8,file_mb=32)\n") && !t.contains(" - "), "{t}");
    assert_eq!(one.csv().lines().count(), 1 + one.cells.len());
}

#[test]
fn one_run_without_jitter_is_the_plain_ratio_and_jitter_changes_the_runs() {
    let plain = RedcapGrid { runs: 1, start_jitter_ns: 0, ..small_redcap(2) }.run().unwrap();
    for c in &plain.cells {
        let expect = 1.0 - c.time_with_ns as f64 / c.time_without_ns as f64;
        assert!((c.improvement - expect).abs() < 1e-12 && c.improvement_ci95 == 0.0, "{c:?}");
    }
    // Jittered runs differ from one another (each has its own seed) on the 8-process cells.
    let runs = small_redcap(2).run().unwrap();
    let c = runs.get("strided-4k", 8, "block-groups", "64x128k").unwrap();
    let t = |x: &f64| x.to_bits();
    assert!(c.improvement_runs.iter().map(t).collect::<std::collections::BTreeSet<_>>().len() > 1, "{c:?}");
    assert!(c.improvement_ci95 > 0.0);
    let e = RedcapGrid { runs: 0, ..RedcapGrid::quick().unwrap() }.run().unwrap_err();
    assert!(e.to_string().starts_with("runs:"), "{e}");
}

#[test]
fn mean_ci95_is_students_t_interval() {
    use blockwell_sim::experiments::redcap::mean_ci95;
    assert_eq!(mean_ci95(&[]), (0.0, 0.0));
    assert_eq!(mean_ci95(&[0.25]), (0.25, 0.0));
    // 1, 2, 3: mean 2, s = 1, t(2) = 4.303, half-width 4.303 / sqrt(3).
    let (m, h) = mean_ci95(&[1.0, 2.0, 3.0]);
    assert!((m - 2.0).abs() < 1e-12 && (h - 4.303 / 3f64.sqrt()).abs() < 1e-9, "{h}");
}

#[test]
fn workloads_scale_their_data_sizes() {
    let g = RedcapGrid { scale: 0.125, ..RedcapGrid::paper().unwrap() };
    assert_eq!(g.workload_spec("strided-4k", 8).unwrap().label(), "strided-4k(procs=8,file_mb=8)");
    assert_eq!(g.workload_spec("kernel-read", 2).unwrap().label(), "kernel-read(procs=2,files=125,dirs=6)");
    // Explicit parameters win over the scale; procs is the grid's.
    assert_eq!(g.workload_spec("tac(file_mb=3,procs=5)", 4).unwrap().label(), "tac(procs=4,file_mb=3)");
    let full = RedcapGrid::paper().unwrap();
    assert_eq!(full.workload_spec("ior", 32).unwrap().label(), "ior(procs=32)");
    assert!(matches!(full.workload_spec("nope", 1), Err(Error::Workload(_))));
}

#[test]
fn bad_grids_name_the_option() {
    let e = RedcapGrid { procs: vec![], ..RedcapGrid::quick().unwrap() }.run().unwrap_err();
    assert!(e.to_string().starts_with("procs:"), "{e}");
    let e = RedcapGrid { configs: vec!["3x3k".into()], ..RedcapGrid::quick().unwrap() }.run().unwrap_err();
    assert!(e.to_string().starts_with("configs:") && e.to_string().contains("3x3k"), "{e}");
    let e = RedcapGrid { scale: 0.0, ..RedcapGrid::quick().unwrap() }.run().unwrap_err();
    assert!(e.to_string().starts_with("scale:"), "{e}");
    let src = Source::Workload(generate("loop(files=20)").unwrap());
    let e = PolicyGrid { sizes: vec![], ..PolicyGrid::paper(src).unwrap() }.run().unwrap_err();
    assert!(e.to_string().starts_with("sizes:"), "{e}");
}

fn policy_grid(spec: &str, policies: &str, sizes: &[f64]) -> PolicyGrid {
    PolicyGrid {
        policies: parse_policy_list(policies).unwrap(),
        sizes: sizes.iter().map(|&p| CacheSize::PercentOfFootprint(p)).collect(),
        ..PolicyGrid::paper(Source::Workload(generate(spec).unwrap())).unwrap()
    }
}

#[test]
fn prefetching_narrows_the_opt_lru_gap_on_a_loop_and_costs_blocks_on_random_reads() {
    let r = policy_grid("loop(files=500)", "opt,lru", &[25.0, 50.0]).run().unwrap();
    // Footprint: the loop reads every file whole.
    let w = generate("loop(files=500)").unwrap();
    assert_eq!(r.footprint_blocks, w.files.iter().map(|f| f.size.div_ceil(4096)).sum::<u64>());
    for &b in &r.sizes {
        let hr = |pol: &str, pf: &str| r.get(pol, pf, b).unwrap().hit_ratio.unwrap();
        let (without, with) = (hr("opt", "none") - hr("lru", "none"), hr("opt", "linux24") - hr("lru", "linux24"));
        assert!(without > 0.0 && with < without, "{b} blocks: gap {without:.3} without, {with:.3} with");
        // Read-ahead clusters the loop's small reads: fewer, larger requests.
        assert!(r.get("lru", "linux24", b).unwrap().disk_requests < r.get("lru", "none", b).unwrap().disk_requests);
    }
    let r = policy_grid("random(requests=4000)", "lru", &[25.0]).run().unwrap();
    let b = r.sizes[0];
    let (none, ra) = (r.get("lru", "none", b).unwrap(), r.get("lru", "linux24", b).unwrap());
    assert!(ra.blocks_read > none.blocks_read && ra.app_time_ns > none.app_time_ns, "{none:?} {ra:?}");
    assert!(ra.hit_ratio.unwrap() - none.hit_ratio.unwrap() < 0.05);
}

#[test]
fn policy_grid_is_identical_for_any_thread_count() {
    let a = PolicyGrid { threads: 1, ..policy_grid("mix-seq(loop_files=100,random_requests=500)", "opt,arc", &[50.0]) };
    let b = PolicyGrid { threads: 4, ..a.clone() };
    let (ra, rb) = (a.run().unwrap(), b.run().unwrap());
    assert_eq!(serde_json::to_string(&ra).unwrap(), serde_json::to_string(&rb).unwrap());
    assert_eq!(ra.points.len(), 2 * 2);
    assert_eq!((ra.points[0].policy.as_str(), ra.points[0].prefetch.as_str()), ("opt", "none"));
    assert_eq!((ra.points[3].policy.as_str(), ra.points[3].prefetch.as_str()), ("arc", "linux24"));
    let t = ra.table();
    for needle in ["hit ratio (%)", "disk requests", "execution time (s)", "Table 5"] {
        assert!(t.contains(needle), "{needle}: {t}");
    }
}

#[test]
fn block_traces_run_through_a_block_level_cache() {
    // vscsi: 32 reads of 4 KiB walking blocks 0..16 twice, 1 ms apart.
    let mut f = tempfile::Builder::new().suffix(".csv").tempfile().unwrap();
    writeln!(f, "version,time,op,size,lbn").unwrap();
    for i in 0..32u64 {
        writeln!(f, "1,{},28,4096,{}", 1000 * i, (i % 16) * 8).unwrap();
    }
    f.flush().unwrap();
    let mut reader = blockwell_trace::open(f.path(), Some(Format::Vscsi), &ReaderOptions::default()).unwrap();
    let src = Source::from_trace("walk", reader.as_mut()).unwrap();
    assert_eq!(src.footprint(4096), 16);
    let g = PolicyGrid {
        policies: parse_policy_list("lru").unwrap(),
        prefetchers: vec![PrefetchChoice::None],
        sizes: vec![CacheSize::PercentOfFootprint(100.0), CacheSize::Blocks(8)],
        ..PolicyGrid::paper(src).unwrap()
    };
    let r = g.run().unwrap();
    assert_eq!(r.layout, None);
    assert_eq!(r.sizes, [16, 8]);
    // All 16 blocks fit: the second pass hits. With 8 blocks, LRU on a 16-block loop never hits.
    assert!((r.points[0].hit_ratio.unwrap() - 0.5).abs() < 1e-9, "{:?}", r.points[0]);
    assert_eq!(r.points[1].hit_ratio.unwrap(), 0.0);
    assert_eq!(r.points[0].blocks_read, 16);
    assert_eq!(r.points[1].blocks_read, 32);
}

#[test]
fn a_trace_read_into_a_source_runs_exactly_as_the_simulator_reads_it() {
    // Uneven gaps, a write, a zero-length request: think times and open-loop issue times must match
    // what `run_block_trace` does with the same file.
    let mut f = tempfile::Builder::new().suffix(".csv").tempfile().unwrap();
    writeln!(f, "version,time,op,size,lbn").unwrap();
    for (i, (t, lbn)) in [(5u64, 0u64), (9, 8), (9, 800), (40, 16), (41, 8), (100, 4096)].iter().enumerate() {
        let op = if i == 3 { "2a" } else { "28" };
        writeln!(f, "1,{t},{op},{},{lbn}", if i == 2 { 0 } else { 8192 }).unwrap();
    }
    f.flush().unwrap();
    let open = || blockwell_trace::open(f.path(), Some(Format::Vscsi), &ReaderOptions::default()).unwrap();
    let Source::Blocks { requests, .. } = Source::from_trace("t", open().as_mut()).unwrap() else {
        panic!("a trace gives block requests")
    };
    assert_eq!(requests.len(), 5, "the zero-length request is dropped");
    let disk = blockwell_disk::DiskSpec::parse("cheetah9lp").unwrap().build().unwrap();
    for issue in [blockwell_sim::vtime::IssueMode::ClosedLoop, blockwell_sim::vtime::IssueMode::OpenLoop] {
        let cfg = Config {
            block_cache: Some(LevelConfig::new(blockwell_core::PolicySpec::parse("lru").unwrap(), 8 * 4096)),
            issue,
            ..Config::default()
        };
        let mut a = run_block_trace(open().as_mut(), &cfg, disk.as_ref()).unwrap();
        let mut b = run_block_requests(std::slice::from_ref(&requests), &cfg, disk.as_ref()).unwrap();
        a.workload.clear();
        b.workload.clear();
        assert_eq!(a, b, "{issue:?}");
    }
}

#[test]
fn options_read_from_json_take_the_defaults_and_name_bad_settings() {
    use blockwell_sim::experiments::dedup::DedupOptions;
    use blockwell_sim::experiments::es_equivalence::EsOptions;
    use blockwell_sim::experiments::policies::PolicyOptions;
    use blockwell_sim::experiments::redcap::RedcapOptions;
    let o: RedcapOptions = serde_json::from_str(r#"{"quick": true, "procs": [1], "page_cache": "64MiB"}"#).unwrap();
    let g = o.grid().unwrap();
    assert_eq!((g.procs.as_slice(), g.runs, g.scale), (&[1][..], 3, 0.125), "quick, with procs applied");
    assert_eq!(g.page_cache.unwrap().capacity_bytes, 64 << 20);
    let e = serde_json::from_str::<RedcapOptions>(r#"{"nosuch": 1}"#).unwrap_err().to_string();
    assert!(e.contains("unknown field `nosuch`"), "{e}");
    let bad = RedcapOptions { scheduler: "elevator".into(), ..RedcapOptions::default() }.grid().unwrap_err();
    assert_eq!(bad.option(), Some("scheduler"));
    assert!(bad.to_string().starts_with("scheduler: unknown scheduler 'elevator'"), "{bad}");
    let p = PolicyOptions { workload: Some("loop(files=10)".into()), ..PolicyOptions::default() };
    let trace = p.grid(None).unwrap().source;
    assert_eq!(p.grid(Some(trace)).unwrap_err().option(), Some("workload"), "a workload and a trace");
    let d = DedupOptions { cache: vec!["1MiB".into(), "2 MiB".into()], ..DedupOptions::default() }.grid(None).unwrap();
    assert_eq!(d.sizes, [1 << 20, 2 << 20]);
    assert_eq!(EsOptions { scale: 0.0, ..EsOptions::default() }.grid().unwrap_err().option(), Some("scale"));
}

/// Seed 000, kernel read: "the improvement becomes greater as the number of processes increase … there are
/// usually more processes than disk cache segments, which are continually evicted". The trend appears when the
/// disk interleaves the processes' reads (CFQ without its idle window): REDCAP's gain rises once the processes
/// outnumber the drive's 8 buffer segments, and with 32 segments the rise moves to more processes. With 2.6.14's
/// 10 ms idle window CFQ serves one process per slice and the segment count does not matter
/// (docs/experiments/redcap.md, "Kernel read: why the gain does not rise").
#[test]
fn kernel_read_gain_rises_once_processes_outnumber_the_drive_segments() {
    use blockwell_sim::experiments::redcap::RedcapOptions;
    let run = |scheduler: &str, disk: &str| {
        let o = RedcapOptions {
            benchmarks: Some(vec!["kernel-read".into()]),
            procs: Some(vec![4, 16, 32]),
            layouts: Some(vec!["block-groups".into()]),
            configs: Some(vec!["64x128k".into()]),
            scale: Some(0.25),
            runs: Some(1),
            scheduler: scheduler.into(),
            disk: disk.into(),
            ..RedcapOptions::default()
        };
        let r = o.grid().unwrap().run().unwrap();
        let gain = |p: u32| r.get("kernel-read", p, "block-groups", "64x128k").unwrap().improvement;
        (gain(4), gain(16), gain(32))
    };
    let (g4, g16, _) = run("cfq(idle_ms=0)", "wd1200bb");
    assert!(g16 > g4 + 0.2, "8 drive segments: 4 processes {g4:.3}, 16 {g16:.3}");
    let (w4, w16, w32) = run("cfq(idle_ms=0)", "wd1200bb(segments=32)");
    assert!(w16 < g16 - 0.2 && w32 > w16 + 0.2, "32 segments: 4 {w4:.3}, 16 {w16:.3}, 32 {w32:.3}");
    // With the idle window the segment count changes nothing and the gain falls with the processes.
    let (a4, a16, a32) = run("cfq", "wd1200bb");
    let (b4, b16, b32) = run("cfq", "wd1200bb(segments=32)");
    assert!(a32 < a4 && (a16 - b16).abs() < 0.05 && (a32 - b32).abs() < 0.05, "{a4} {a16} {a32} / {b4} {b16} {b32}");
}

/// Seed 000, ReiserFS and kernel read: "a great performance for 1, 2, 4 and 8 processes" (more than 55 %),
/// smaller with 16 and 32, where the larger REDCAP cache "confirms the segment eviction problem". On the
/// `reiserfs` layout (a directory's files together, read in an order other than the disk's) the gain is large
/// while the processes' directories fit in REDCAP's segments and falls once they do not, less so with 128
/// segments; as for ext3, the fall needs the disk to interleave the processes (CFQ without its idle window).
/// Nothing is fitted: each process's footprint is a directory of kernel-read's own files.
#[test]
fn reiserfs_kernel_read_gains_much_until_the_processes_directories_outgrow_redcap() {
    use blockwell_sim::experiments::redcap::RedcapOptions;
    let run = |scheduler: &str| {
        let o = RedcapOptions {
            benchmarks: Some(vec!["kernel-read".into()]),
            procs: Some(vec![1, 8, 32]),
            layouts: Some(vec!["reiserfs".into(), "scattered".into()]),
            configs: Some(vec!["64x128k".into(), "128x128k".into()]),
            runs: Some(1),
            scheduler: scheduler.into(),
            ..RedcapOptions::default()
        };
        o.grid().unwrap().run().unwrap()
    };
    let gain = |r: &blockwell_sim::experiments::redcap::RedcapResults, p, l, c| {
        r.get("kernel-read", p, l, c).unwrap().improvement
    };
    for sched in ["cfq", "cfq(idle_ms=0)"] {
        let r = run(sched);
        for p in [1, 8] {
            let g = gain(&r, p, "reiserfs", "64x128k");
            assert!(g > 0.55, "{sched}, {p} processes: {g:.3}");
            // The old stand-in, runs scattered over half-empty windows, gains little.
            assert!(gain(&r, p, "scattered", "64x128k") < g - 0.3, "{sched}, {p} processes");
        }
        let (small, big) = (gain(&r, 32, "reiserfs", "64x128k"), gain(&r, 32, "reiserfs", "128x128k"));
        if sched == "cfq" {
            // One process per slice: its directory is all REDCAP must hold.
            assert!(small > 0.55, "cfq, 32 processes: {small:.3}");
        } else {
            let g8 = gain(&r, 8, "reiserfs", "64x128k");
            assert!(small < g8 - 0.2 && big > small + 0.15, "8: {g8:.3}; 32: {small:.3} / {big:.3}");
        }
    }
}

#[test]
fn tac_gains_with_redcap_on_and_less_with_a_drive_that_reads_behind_and_a_busy_cpu() {
    // Seed 000's TAC finding: REDCAP better than the original kernel, its cache almost always active. Its value
    // (at most 17 %) is not reproduced; what lowers the model's gain is the drive's handling of backward reads
    // and tac's own CPU time, neither given by the paper (docs/experiments/redcap.md, "TAC").
    use blockwell_sim::experiments::redcap::RedcapOptions;
    let run = |bench: &str, disk: &str| {
        let o = RedcapOptions {
            benchmarks: Some(vec![bench.into()]),
            procs: Some(vec![1, 8]),
            layouts: Some(vec!["block-groups".into()]),
            configs: Some(vec!["64x128k".into()]),
            runs: Some(1),
            scale: Some(0.25),
            disk: disk.into(),
            ..RedcapOptions::default()
        };
        let r = o.grid().unwrap().run().unwrap();
        [1, 8].map(|p| r.get(bench, p, "block-groups", "64x128k").unwrap().clone())
    };
    let preset = run("tac", "wd1200bb");
    let behind = run("tac", "wd1200bb(read_behind=1,overhead_ms=0.1)");
    let busy = run("tac(think_us=100)", "wd1200bb(read_behind=1,overhead_ms=0.1)");
    for i in 0..2 {
        for c in [&preset[i], &behind[i], &busy[i]] {
            assert!(c.improvement > 0.0 && c.active_fraction > 0.9, "{c:?}");
        }
        assert!(behind[i].improvement < preset[i].improvement - 0.2, "{:?} / {:?}", behind[i], preset[i]);
        assert!(busy[i].improvement < behind[i].improvement - 0.05, "{:?} / {:?}", busy[i], behind[i]);
    }
}

#[test]
fn schedulers_parse_with_cfq_times_and_name_their_errors() {
    use blockwell_sim::vtime::{CfqTuning, Scheduler};
    assert_eq!(Scheduler::parse("CFQ").unwrap(), Scheduler::CFQ);
    let t = Scheduler::parse("cfq(slice_ms=50, idle_ms=0)").unwrap();
    assert_eq!(t, Scheduler::Cfq(CfqTuning { slice_ns: 50_000_000, idle_ns: 0 }));
    assert_eq!(Scheduler::parse(&t.spec()).unwrap(), t);
    assert_eq!(serde_json::to_string(&Scheduler::CFQ).unwrap(), "\"cfq\"");
    assert!(Scheduler::parse("cfq(idle=3)").unwrap_err().contains("unknown parameter 'idle'"));
    assert!(Scheduler::parse("cfq(slice_ms=0)").unwrap_err().contains("slice_ms"));
    assert!(Scheduler::parse("c-look(x=1)").unwrap_err().contains("takes no parameters"));
}
// ---------------------------------------------------------------------------------------------------------------
// Seed 001's findings on the application generators, where Blockwell reproduces their trend
// (docs/experiments/prefetch-policies.md, "Compared with the paper"). Scaled down to run in about a second each;
// cache sizes are the paper's, mapped onto the generated data as `--workload cscope` maps them.

/// The grid on `spec` at the paper's cache sizes `mb` (of the application's Table 2 data size).
fn app_grid(spec: &str, policies: &str, mb: &[u64]) -> PolicyGrid {
    use blockwell_sim::workloads::{paper_app, WorkloadSpec};
    let s = WorkloadSpec::parse(spec).unwrap();
    let w = s.build().unwrap();
    let app = paper_app(s.kind).unwrap();
    let data: u64 = w.files.iter().map(|f| f.size).sum();
    PolicyGrid {
        policies: parse_policy_list(policies).unwrap(),
        sizes: mb.iter().map(|&mb| CacheSize::Blocks(app.blocks_for(mb as f64, data, 4096))).collect(),
        ..PolicyGrid::paper(Source::Workload(w)).unwrap()
    }
}

#[test]
fn cscope_prefetching_raises_every_hit_ratio_and_keeps_lru2_and_lirs_above_2q() {
    // Paper, cscope at 128 MB (half its 260 MB): with prefetching LRU-2 78.1 %, LIRS 77.1 %, 2Q 75.8 %; every
    // policy gains; the OPT–2Q gap narrows (18 points to under 6); disk requests fall (clustering).
    let r = app_grid("cscope(scale=0.03)", "opt,lru,lru-k(k=2),2q,lirs", &[128]).run().unwrap();
    let b = r.sizes[0];
    let p = |pol: &str, pf: &str| r.get(pol, pf, b).unwrap();
    for pol in &r.policies {
        let (none, ra) = (p(pol, "none"), p(pol, "linux24"));
        assert!(
            ra.hit_ratio.unwrap() > none.hit_ratio.unwrap() + 0.05,
            "{pol}: {} -> {}",
            none.hit_ratio.unwrap(),
            ra.hit_ratio.unwrap()
        );
        assert!(ra.disk_requests < none.disk_requests, "{pol}");
    }
    let with = |pol: &str| p(pol, "linux24").hit_ratio.unwrap();
    assert!(with("lru-k(k=2)") > with("2q") && with("lirs") > with("2q"), "{r:?}");
    let gap = |pf: &str| p("opt", pf).hit_ratio.unwrap() - p("2q", pf).hit_ratio.unwrap();
    assert!(gap("linux24") < gap("none"), "OPT-2Q gap {} -> {}", gap("none"), gap("linux24"));
}

#[test]
fn gcc_prefetching_leaves_the_execution_time_almost_unchanged() {
    // Paper: "all three performance metrics ... are almost identical with and without prefetching" for gcc.
    // Blockwell reproduces it for the time (within 3 % here; hit ratios gain 5-12 points).
    let r = app_grid("gcc(scale=0.2)", "lru,lru-k(k=2)", &[2, 4, 8]).run().unwrap();
    for &b in &r.sizes {
        for pol in &r.policies {
            let (none, ra) = (r.get(pol, "none", b).unwrap(), r.get(pol, "linux24", b).unwrap());
            let change = ra.app_time_ns as f64 / none.app_time_ns as f64 - 1.0;
            assert!(change.abs() < 0.03, "{pol} at {b} blocks: {change:+.3}");
        }
    }
}

#[test]
fn viewperf_prefetching_cuts_disk_requests_tenfold_but_not_the_cpu_bound_time() {
    // Paper: hit ratio 35 % -> 87 % on average, disk requests / 11, time 880 s -> 850 s (CPU-bound).
    let r = app_grid("viewperf(scale=0.05)", "lru,2q", &[64, 256]).run().unwrap();
    for &b in &r.sizes {
        for pol in &r.policies {
            let (none, ra) = (r.get(pol, "none", b).unwrap(), r.get(pol, "linux24", b).unwrap());
            assert!(
                ra.hit_ratio.unwrap() > 0.9 && ra.hit_ratio.unwrap() > none.hit_ratio.unwrap() + 0.3,
                "{pol} at {b}: {none:?} {ra:?}"
            );
            assert!(ra.disk_requests * 8 < none.disk_requests, "{pol} at {b}");
            let time = ra.app_time_ns as f64 / none.app_time_ns as f64;
            assert!((0.7..1.0).contains(&time), "{pol} at {b}: time x{time:.3}");
        }
    }
}

#[test]
fn tpc_prefetching_reads_more_blocks_and_takes_longer_for_the_same_hit_ratio() {
    // Paper, tpc-h: little hit-ratio improvement; synchronous requests about as many as without prefetching,
    // each with an extra block; more blocks read and a longer run (x5 blocks, x2 time in the paper; x2 and
    // +15 % or more here).
    let r = app_grid("tpc-h(scale=0.002)", "lru,arc", &[128, 512]).run().unwrap();
    for &b in &r.sizes {
        for pol in &r.policies {
            let (none, ra) = (r.get(pol, "none", b).unwrap(), r.get(pol, "linux24", b).unwrap());
            assert!((ra.hit_ratio.unwrap() - none.hit_ratio.unwrap()).abs() < 0.02, "{pol} at {b}: {none:?} {ra:?}");
            let sync = ra.sync_reads.requests as f64 / none.disk_requests as f64;
            assert!((0.9..1.05).contains(&sync), "{pol} at {b}: sync x{sync:.3}");
            assert!(ra.sync_reads.mean_blocks.unwrap() > 1.5, "{pol} at {b}: an extra block per synchronous request");
            assert!(ra.blocks_read as f64 > 1.5 * none.blocks_read as f64, "{pol} at {b}");
            assert!(ra.app_time_ns as f64 > 1.15 * none.app_time_ns as f64, "{pol} at {b}");
        }
    }
}

/// Seed 001 Table 5 and §5.3.2, tpc-h: "the number of synchronous disk requests, each of which prefetches an
/// extra block, is almost the same as without prefetching, and there is an almost equal number of asynchronous
/// disk requests, each of which prefetches between 2 to 4 blocks"; disk blocks ×5, requests and time ×2. With
/// Linux 2.4's own window (`demand_in_window`: the demand page counts in the window after a synchronous
/// read-ahead) the second read of a page is sequential and reads ahead asynchronously; with the paper's
/// description of the window (the default) it is not, and the asynchronous half is missing.
#[test]
fn tpc_h_rereads_read_ahead_asynchronously_with_the_24_sources_window() {
    use blockwell_sim::vtime::PrefetchChoice;
    let mut g = app_grid("tpc-h", "lru", &[64]);
    g.prefetchers = ["none", "linux24", "linux24(demand_in_window=true)"]
        .iter()
        .map(|s| PrefetchChoice::parse(s).unwrap())
        .collect();
    let r = g.run().unwrap();
    let b = r.sizes[0];
    let none = r.get("lru", "none", b).unwrap();
    let paper = r.get("lru", "linux24", b).unwrap();
    let src = r.get("lru", "linux24(demand_in_window=true)", b).unwrap();
    let n = none.disk_requests as f64;
    // Synchronous requests about as many as without prefetching, each with an extra block, both ways.
    for p in [paper, src] {
        assert!((0.9..1.05).contains(&(p.sync_reads.requests as f64 / n)), "{p:?}");
        assert!(p.sync_reads.mean_blocks.unwrap() > 1.5, "{p:?}");
    }
    // The asynchronous half: almost as many, 2-4 blocks each, only with the source's window.
    let a = src.async_reads.requests as f64 / src.sync_reads.requests as f64;
    assert!((0.7..1.1).contains(&a), "async/sync {a:.3}");
    assert!((2.0..=4.0).contains(&src.async_reads.mean_blocks.unwrap()), "{src:?}");
    assert!((paper.async_reads.requests as f64) < 0.2 * paper.sync_reads.requests as f64, "{paper:?}");
    // Blocks about x5, requests and time about x2 (the paper's description: x2, x1.0, x1.2).
    let x = |p: &blockwell_sim::experiments::policies::PolicyPoint| {
        (
            p.blocks_read as f64 / none.blocks_read as f64,
            p.disk_requests as f64 / n,
            p.app_time_ns as f64 / none.app_time_ns as f64,
        )
    };
    let (blocks, reqs, time) = x(src);
    assert!(blocks > 4.0 && reqs > 1.6 && time > 1.5, "x{blocks:.2} blocks, x{reqs:.2} requests, x{time:.2} time");
    let (blocks, reqs, _) = x(paper);
    assert!(blocks < 2.5 && reqs < 1.3, "paper's window: x{blocks:.2} blocks, x{reqs:.2} requests");
}

#[test]
fn application_workloads_default_to_the_papers_cache_sizes() {
    use blockwell_sim::experiments::policies::PolicyOptions;
    let o = PolicyOptions { workload: Some("cscope(scale=0.02)".into()), ..PolicyOptions::default() };
    let g = o.grid(None).unwrap();
    let Source::Workload(w) = &g.source else { panic!("a workload") };
    let data: u64 = w.files.iter().map(|f| f.size).sum();
    // 32, 64, 128 and 256 MB of cscope's 260 MB.
    let want: Vec<CacheSize> = [32.0, 64.0, 128.0, 256.0]
        .iter()
        .map(|mb| CacheSize::Blocks((mb / 260.0 * data as f64 / 4096.0).round() as u64))
        .collect();
    assert_eq!(g.sizes, want);
    // --quick and --cache still decide.
    let q = PolicyOptions { quick: true, ..o.clone() }.grid(None).unwrap();
    assert_eq!(q.sizes.len(), 3);
    let c = PolicyOptions { cache: Some(vec!["50%".into()]), ..o }.grid(None).unwrap();
    assert_eq!(c.sizes, [CacheSize::PercentOfFootprint(50.0)]);
    let l = PolicyOptions { workload: Some("loop(files=10)".into()), ..PolicyOptions::default() }.grid(None).unwrap();
    assert_eq!(l.sizes.len(), 5, "other generators keep 10-100 % of the footprint");
}
