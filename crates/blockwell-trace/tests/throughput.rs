//! Reader throughput, for `cargo test --release -p blockwell-trace --test throughput -- --ignored --nocapture`.

mod common;

use blockwell_trace::{open, ReaderOptions};
use std::path::Path;
use std::time::Instant;

#[test]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
fn oracle_records_per_second() {
    let n = 5_000_000u64;
    let mut bytes = Vec::with_capacity(n as usize * 24);
    let mut rng = common::Rng(1);
    for i in 0..n {
        bytes.extend_from_slice(&((i / 1000) as u32).to_le_bytes());
        bytes.extend_from_slice(&(((rng.below(4)) << 48) | rng.below(1 << 20)).to_le_bytes());
        bytes.extend_from_slice(&4096u32.to_le_bytes());
        bytes.extend_from_slice(&(-1i64).to_le_bytes());
    }
    let dir = tempfile::tempdir().unwrap();
    for (name, data) in [("t.oracleGeneral", bytes.clone()), ("t.oracleGeneral.zst", common::zstd(&bytes))] {
        let p = common::write_file(dir.path(), name, &data);
        let t = Instant::now();
        let mut r = open(&p, None, &ReaderOptions::default()).unwrap();
        let (mut buf, mut next, mut count) = (Vec::new(), Vec::new(), 0u64);
        while r.read_batch_next(&mut buf, &mut next, 1 << 14).unwrap() > 0 {
            count += buf.len() as u64;
        }
        let batch = count as f64 / t.elapsed().as_secs_f64() / 1e6;
        let (one, single) = one_at_a_time(&p);
        assert_eq!((count, one), (n, n));
        println!("{name}: {batch:.0} M records/s in batches, {single:.0} M records/s one at a time");
    }
}

#[test]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
fn text_lines_per_second() {
    let n = 2_000_000u64;
    let text: String = (0..n)
        .map(|i| format!("128166372003061629,hm,{},Read,{},4096,24095\n", i % 3, (i * 7919) % (1 << 30) * 512))
        .collect();
    lines_per_second("msr", &text, n);
}

#[test]
#[ignore = "a measurement: run in release with --ignored --nocapture"]
fn generic_csv_lines_per_second() {
    let n = 2_000_000u64;
    let text: String = std::iter::once("time_ns,volume,op,offset,len\n".to_string())
        .chain((0..n).map(|i| format!("{},vol{},{},{},4096\n", i * 1000, i % 3, ["R", "W"][i as usize % 2], i * 4096)))
        .collect();
    lines_per_second("csv", &text, n);
}

/// Reads `p` one request at a time: the requests, and millions of them per second.
fn one_at_a_time(p: &Path) -> (u64, f64) {
    let t = Instant::now();
    let mut r = open(p, None, &ReaderOptions::default()).unwrap();
    let mut count = 0u64;
    while r.next_request().unwrap().is_some() {
        count += 1;
    }
    (count, count as f64 / t.elapsed().as_secs_f64() / 1e6)
}

/// Writes `text` (`n` requests, one a line) to a `.csv` file and prints how fast it reads, labelled `format`.
fn lines_per_second(format: &str, text: &str, n: u64) {
    let dir = tempfile::tempdir().unwrap();
    let p = common::write_file(dir.path(), "t.csv", text.as_bytes());
    let (count, rate) = one_at_a_time(&p);
    assert_eq!(count, n);
    println!("{format}: {rate:.1} M lines/s");
}
