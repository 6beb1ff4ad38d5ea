//! The checked-in traces under `../shared/traces` (outside the repository: skipped with a message when absent).

mod common;

use blockwell_trace::{open, Format, ReaderOptions, Request};
use std::collections::HashSet;
use std::path::PathBuf;

fn shared(rel: &str) -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared").join(rel);
    if p.exists() {
        Some(p)
    } else {
        eprintln!("skipped: {} is absent (the shared traces live beside the repository)", p.display());
        None
    }
}

#[test]
fn oltp_lis_page_counts() {
    let Some(p) = shared("traces/arc/OLTP.lis.zst") else { return };
    let mut r = open(&p, None, &ReaderOptions::default()).unwrap();
    let (mut pages, mut distinct, mut requests) = (0u64, HashSet::new(), 0u64);
    let mut buf: Vec<Request> = Vec::new();
    while r.read_batch(&mut buf, 4096).unwrap() > 0 {
        for q in &buf {
            requests += 1;
            for page in q.offset / 512..(q.offset + q.len) / 512 {
                pages += 1;
                distinct.insert(page);
            }
        }
    }
    assert_eq!(requests, 914_145);
    assert_eq!(pages, 914_145);
    assert_eq!(distinct.len(), 186_880);
    assert_eq!(r.volumes(), ["0"]);
    assert_eq!(r.skipped().count, 0);
}

#[test]
fn p3_lis_reads_cleanly() {
    let Some(p) = shared("traces/arc/P3.lis.zst") else { return };
    let mut r = open(&p, None, &ReaderOptions::default()).unwrap();
    let rs = common::drain(&mut *r).unwrap();
    assert!(!rs.is_empty());
    assert!(rs.iter().all(|q| q.len > 0 && q.len % 512 == 0));
}

#[test]
fn cloudphysics_vscsi_count() {
    let Some(p) = shared("traces/cloudphysics/cloudPhysicsIO.csv") else { return };
    assert_eq!(blockwell_trace::formats::detect(&p).unwrap(), Format::Vscsi);
    let mut r = open(&p, None, &ReaderOptions::default()).unwrap();
    let rs = common::drain(&mut *r).unwrap();
    assert_eq!(rs.len(), 113_872);
}
