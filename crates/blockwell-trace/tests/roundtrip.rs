//! Every format: write generated requests, read them back, and compare within the format's units and precision.

mod common;

use blockwell_core::Op;
use blockwell_trace::{create, open, Format, ReaderOptions, Request, TraceError, WriterOptions, NEVER};
use common::{drain, Rng};
use std::collections::HashMap;
use std::path::Path;

/// Requests on `volumes` volumes (dense, numbered by first appearance), 4 KiB aligned, with digests.
fn generate(n: usize, volumes: u32, seed: u64) -> Vec<Request> {
    let mut rng = Rng(seed);
    let mut t = 0u64;
    let mut seen = 0u32;
    (0..n)
        .map(|i| {
            if i > 0 {
                t += rng.below(3_000_000_000);
            }
            // A new volume only ever appears as the next number: ids stay dense in order of appearance.
            let mut volume = rng.below(volumes as u64) as u32;
            if volume >= seen {
                volume = seen;
                seen += 1;
            }
            Request {
                time_ns: t,
                volume,
                op: if rng.below(3) == 0 { Op::Write } else { Op::Read },
                offset: rng.below(1 << 22) * 4096,
                len: (1 + rng.below(16)) * 4096,
                digest: if rng.below(4) == 0 {
                    None
                } else {
                    Some(((rng.next() as u128) << 64) | rng.next() as u128 | 1)
                },
            }
        })
        .collect()
}

fn trunc(t: u64, unit: u64) -> u64 {
    t - t % unit
}

/// What reading back `r` in `format` gives.
fn expected(format: Format, rs: &[Request], object_size: u64) -> Vec<Request> {
    let mut out = Vec::new();
    for r in rs {
        let mut e = Request { digest: None, ..*r };
        match format {
            Format::Fiu => e.digest = r.digest,
            Format::Msr => e.time_ns = trunc(r.time_ns, 100),
            Format::Alibaba => e.time_ns = trunc(r.time_ns, 1000),
            Format::Tencent | Format::Vscsi => e.time_ns = trunc(r.time_ns, 1_000_000_000),
            Format::Spc | Format::Blkparse | Format::BlkparseQ | Format::Csv => {}
            Format::Lis => (e.time_ns, e.op) = (0, Op::Read),
            Format::Plain | Format::Oracle => {
                let t = if format == Format::Oracle { trunc(r.time_ns, 1_000_000_000) } else { 0 };
                let first = r.offset / object_size;
                let last = (r.offset + r.len - 1) / object_size;
                for b in first..=last {
                    out.push(Request { time_ns: t, op: Op::Read, offset: b * object_size, len: object_size, ..e });
                }
                continue;
            }
        }
        out.push(e);
    }
    out
}

fn single_volume(f: Format) -> bool {
    matches!(f, Format::Lis | Format::Plain | Format::Vscsi)
}

fn roundtrip(dir: &Path, f: Format, name: &str, rs: &[Request], names: &[String]) -> Vec<Request> {
    let p = dir.join(name);
    let wopts = WriterOptions { object_size: None, volumes: names.to_vec() };
    let mut w = create(&p, f, &wopts).unwrap();
    for r in rs {
        w.write(r).unwrap_or_else(|e| panic!("{}: {e}", f.name()));
    }
    w.finish().unwrap();
    // Detected where the format is detectable; else named.
    let format = blockwell_trace::formats::detect(&p).ok();
    if let Some(d) = format {
        let want = if f == Format::BlkparseQ { Format::Blkparse } else { f };
        assert_eq!(d, want, "{name} detected as {}", d.name());
    }
    let mut r = open(&p, Some(f), &ReaderOptions::default()).unwrap();
    let got = drain(&mut *r).unwrap_or_else(|e| panic!("{}: {e}", f.name()));
    let vols = r.volumes().len();
    let distinct = rs.iter().map(|r| r.volume).max().map_or(0, |m| m as usize + 1);
    assert_eq!(vols, distinct.max(1), "{}: volumes {:?}", f.name(), r.volumes());
    got
}

#[test]
fn every_format_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let multi = generate(3000, 4, 1);
    let single = generate(3000, 1, 2);
    let names: Vec<String> = (0..4).map(|v| v.to_string()).collect();
    for &f in Format::ALL {
        let rs = if single_volume(f) { &single } else { &multi };
        for ext in ["", ".gz", ".zst"] {
            let base = match f {
                Format::Oracle => "t.oracleGeneral",
                Format::Lis => "t.lis",
                _ => "t.trace",
            };
            let got = roundtrip(dir.path(), f, &format!("{base}{ext}"), rs, &names);
            let want = expected(f, rs, 4096);
            assert_eq!(got.len(), want.len(), "{} {ext}", f.name());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(g, w, "{} {ext}: request {i}", f.name());
            }
        }
    }
}

#[test]
fn volume_names_survive_where_the_format_can_hold_them() {
    let dir = tempfile::tempdir().unwrap();
    let rs = generate(50, 3, 3);
    let cases: &[(Format, &[&str], &[&str])] = &[
        (Format::Msr, &["hm_1", "prn_0", "web"], &["hm_1", "prn_0", "web_0"]),
        (Format::Fiu, &["6,0", "8,16", "x"], &["6,0", "8,16", "0,2"]),
        (Format::Blkparse, &["6,0", "8,16", "x"], &["6,0", "8,16", "0,2"]),
        (Format::Spc, &["0", "5", "asu"], &["0", "5", "2"]),
        (Format::Tencent, &["1063", "7", "v"], &["1063", "7", "2"]),
        (Format::Alibaba, &["419", "7", "v"], &["419", "7", "2"]),
        (Format::Csv, &["sda", "my disk", "8,0"], &["sda", "my_disk", "8_0"]),
        (Format::Oracle, &["a", "b", "c"], &["0", "1", "2"]),
    ];
    for &(f, given, want) in cases {
        let p = dir.path().join(format!("v.{}", f.name()));
        let names: Vec<String> = given.iter().map(|s| s.to_string()).collect();
        let mut w = create(&p, f, &WriterOptions { volumes: names, ..Default::default() }).unwrap();
        for r in &rs {
            w.write(r).unwrap();
        }
        w.finish().unwrap();
        let mut r = open(&p, Some(f), &ReaderOptions::default()).unwrap();
        drain(&mut *r).unwrap();
        assert_eq!(r.volumes(), want, "{}", f.name());
    }
}

#[test]
fn writers_round_addresses_outward_and_refuse_what_they_cannot_hold() {
    let dir = tempfile::tempdir().unwrap();
    let odd = Request { time_ns: 1, volume: 0, op: Op::Write, offset: 1000, len: 100, digest: None };
    // 1000..1100 spans sectors 1 and 2, and 4 KiB block 0.
    for (f, want) in [
        (Format::Tencent, (512, 1024)),
        (Format::Fiu, (512, 1024)),
        (Format::Blkparse, (512, 1024)),
        (Format::Lis, (512, 1024)),
        (Format::Spc, (512, 588)),
        (Format::Vscsi, (512, 588)),
        (Format::Msr, (1000, 100)),
        (Format::Plain, (0, 4096)),
        (Format::Oracle, (0, 4096)),
    ] {
        let p = dir.path().join(format!("odd.{}", f.name()));
        let mut w = create(&p, f, &WriterOptions::default()).unwrap();
        w.write(&odd).unwrap();
        w.finish().unwrap();
        let got = drain(&mut *open(&p, Some(f), &ReaderOptions::default()).unwrap()).unwrap();
        assert_eq!((got[0].offset, got[0].len), want, "{}", f.name());
    }
    for f in [Format::Lis, Format::Plain, Format::Vscsi] {
        let p = dir.path().join("multi");
        let mut w = create(&p, f, &WriterOptions::default()).unwrap();
        w.write(&Request::default()).unwrap();
        let e = w.write(&Request { volume: 3, ..Default::default() }).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("{}: request 2: the {} format holds a single volume; found volume 3", p.display(), f.name())
        );
    }
    let p = dir.path().join("big.oracleGeneral");
    let mut w = create(&p, Format::Oracle, &WriterOptions::default()).unwrap();
    let e = w.write(&Request { time_ns: u64::MAX, ..Default::default() }).unwrap_err();
    assert!(matches!(e, TraceError::Invalid { .. }), "{e}");
    let e = w.write(&Request { volume: 70_000, ..Default::default() }).unwrap_err();
    assert!(e.to_string().contains("does not fit a packed object id"), "{e}");
}

#[test]
fn the_oracle_writer_computes_next_access() {
    let dir = tempfile::tempdir().unwrap();
    let rs = generate(5000, 2, 4);
    // Repeat blocks often: a small address space.
    let rs: Vec<Request> = rs.into_iter().map(|r| Request { offset: r.offset % (64 * 4096), ..r }).collect();
    let p = dir.path().join("n.oracleGeneral.zst");
    let mut w = create(&p, Format::Oracle, &WriterOptions::default()).unwrap();
    for r in &rs {
        w.write(r).unwrap();
    }
    w.finish().unwrap();
    let flat = expected(Format::Oracle, &rs, 4096);
    // The obvious model: for each request, scan forward.
    let mut want = vec![NEVER; flat.len()];
    let mut last: HashMap<(u32, u64), usize> = HashMap::new();
    for (i, r) in flat.iter().enumerate().rev() {
        if let Some(&j) = last.get(&(r.volume, r.offset)) {
            want[i] = j as u64;
        }
        last.insert((r.volume, r.offset), i);
    }
    let mut r = open(&p, None, &ReaderOptions::default()).unwrap();
    let (mut buf, mut next) = (Vec::new(), Vec::new());
    let (mut all, mut all_next) = (Vec::new(), Vec::new());
    while r.read_batch_next(&mut buf, &mut next, 1000).unwrap() > 0 {
        all.extend_from_slice(&buf);
        all_next.extend_from_slice(&next);
    }
    assert_eq!(all, flat);
    assert_eq!(all_next, want);
    assert!(want.iter().filter(|&&n| n != NEVER).count() > flat.len() / 2);
    // One at a time agrees.
    let mut r = open(&p, None, &ReaderOptions::default()).unwrap();
    let mut i = 0;
    while r.next_request().unwrap().is_some() {
        assert_eq!(r.next_access().unwrap_or(NEVER), want[i], "request {i}");
        i += 1;
    }
    assert_eq!(i, flat.len());
}
