//! Block-level traces through the time-aware simulator: a real trace reader (MSR Cambridge CSV), open and
//! closed loop from the trace's time stamps.

use blockwell_core::policy::PolicySpec;
use blockwell_disk::{DiskModel, DiskRequest};
use blockwell_sim::vtime::{run_block_trace, Config, IssueMode, LevelConfig};
use blockwell_trace::{formats::Format, ReaderOptions};
use std::io::Write;

const MS: u64 = 1_000_000;

#[derive(Clone)]
struct Const;

impl DiskModel for Const {
    fn service(&mut self, _now_ns: u64, _req: &DiskRequest) -> u64 {
        MS
    }
    fn capacity_sectors(&self) -> u64 {
        1 << 40
    }
    fn reset(&mut self) {}
    fn boxed_clone(&self) -> Box<dyn DiskModel> {
        Box::new(Const)
    }
    fn describe(&self) -> String {
        "1 ms".into()
    }
}

fn trace() -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".csv").tempfile().unwrap();
    // FILETIME ticks are 100 ns: 100 000 ticks = 10 ms.
    writeln!(f, "128166372000000000,hm,1,Read,0,4096,0").unwrap();
    writeln!(f, "128166372000100000,hm,1,Read,0,4096,0").unwrap();
    writeln!(f, "128166372000200000,hm,1,Read,409600,4096,0").unwrap();
    f.flush().unwrap();
    f
}

fn run(issue: IssueMode) -> blockwell_sim::vtime::Report {
    let f = trace();
    let mut r = blockwell_trace::open(f.path(), Some(Format::Msr), &ReaderOptions::default()).unwrap();
    let cfg = Config {
        block_cache: Some(LevelConfig::new(PolicySpec::parse("lru").unwrap(), 64 * 4096)),
        issue,
        ..Config::default()
    };
    run_block_trace(r.as_mut(), &cfg, &Const).unwrap()
}

#[test]
fn open_loop_issues_at_the_time_stamps() {
    let r = run(IssueMode::OpenLoop);
    assert_eq!(r.requests, 3);
    assert_eq!(r.device.sync_reads.requests, 2);
    assert_eq!(r.app_time_ns, 21 * MS);
    assert_eq!(r.block_cache.as_ref().unwrap().counters.read_hits, 1);
    assert!(r.page_cache.is_none());
}

#[test]
fn closed_loop_thinks_for_the_gaps_between_time_stamps() {
    // 0–1 ms miss, think 10 ms, 11 ms hit, think 10 ms, 21–22 ms miss.
    let r = run(IssueMode::ClosedLoop);
    assert_eq!(r.app_time_ns, 22 * MS);
    assert_eq!(r.device.busy_ns, 2 * MS);
    assert_eq!(r.device.idle_ns, 20 * MS);
}

#[test]
fn a_file_level_trace_runs_open_loop_through_the_page_cache() {
    use blockwell_sim::vtime::run_workload;
    // Process 2 reads the page process 1 is reading, 1 ms later: it waits for that read (seed 001 §5.2).
    let csv = "# file,a.txt,40960,1,0\n\
               time_ns,process,file,offset,size,op\n\
               0,1,a.txt,0,4096,R\n\
               1000000,2,a.txt,0,4096,R\n\
               5000000,1,a.txt,8192,4096,R\n";
    let t = blockwell_sim::filetrace::read_from(csv.as_bytes(), std::path::Path::new("t.csv")).unwrap();
    let cfg = Config {
        page_cache: Some(LevelConfig::new(PolicySpec::parse("lru").unwrap(), 16 * 4096)),
        issue: IssueMode::OpenLoop,
        ..Config::default()
    };
    let r = run_workload(&t.workload, &cfg, &Const).unwrap();
    let pc = r.page_cache.as_ref().unwrap();
    assert_eq!((pc.counters.read_blocks, pc.counters.read_hits, pc.counters.inflight_waits), (3, 0, 1));
    assert_eq!(r.device.sync_reads.requests, 2);
    assert_eq!(r.app_time_ns, 6 * MS);
}

#[test]
fn a_file_level_trace_closed_loop_thinks_for_the_gaps_when_asked() {
    use blockwell_sim::vtime::run_workload;
    let csv = "# file,a.txt,40960,1,0\n\
               time_ns,process,file,offset,size,op\n\
               2000000,1,a.txt,0,4096,R\n\
               12000000,1,a.txt,8192,4096,R\n";
    let t = blockwell_sim::filetrace::read_from(csv.as_bytes(), std::path::Path::new("t.csv")).unwrap();
    let mut cfg = Config { think_from_gaps: true, ..Config::default() };
    // Think 2 ms, read 1 ms, think 10 ms (the gap), read 1 ms.
    assert_eq!(run_workload(&t.workload, &cfg, &Const).unwrap().app_time_ns, 14 * MS);
    // Without the flag the trace's think column (absent: 0) is used.
    cfg.think_from_gaps = false;
    assert_eq!(run_workload(&t.workload, &cfg, &Const).unwrap().app_time_ns, 2 * MS);
}
