//! Random input to every reader (and to detection): errors are fine, panics are not.

mod common;

use blockwell_trace::formats::csv::CsvMapping;
use blockwell_trace::{formats, open, Format, ReaderOptions};
use common::{write_file, Rng};

const TOKENS: &[&str] = &[
    "0",
    "1",
    "7",
    "512",
    "4096",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "-1",
    "1e400",
    "1.5e-3",
    ".",
    "0.5",
    "nan",
    "R",
    "W",
    "r",
    "w",
    "Read",
    "Write",
    "2a",
    "28",
    "D",
    "Q",
    "WS",
    "FWS",
    "N",
    "+",
    "8,0",
    "8,",
    ",0",
    "CPU0",
    "(8,0):",
    "Total",
    "531e779e4ab1a8fc0ab1f8fe6c0d9f3a",
    "ffffffffffffffffffffffffffffffff",
    "128166372003061629",
    "hm",
    "é",
    "\u{0}",
    "\t",
    " ",
    ",",
    ",,",
    "\r",
    "version,time,op,size,lbn",
    "#",
];

fn random_text(rng: &mut Rng) -> Vec<u8> {
    let mut s = String::new();
    for _ in 0..rng.below(40) {
        for _ in 0..rng.below(14) {
            s.push_str(TOKENS[rng.below(TOKENS.len() as u64) as usize]);
            s.push(if rng.below(2) == 0 { ',' } else { ' ' });
        }
        s.push('\n');
    }
    s.into_bytes()
}

fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    (0..rng.below(600)).map(|_| rng.next() as u8).collect()
}

#[test]
fn readers_do_not_panic_on_random_input() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x5eed);
    let mappings = [
        None,
        Some("offset=0,len=1,time=2,op=3,volume=4,digest=5,offset_unit=512,time_unit=s"),
        Some("offset=2,sep=space,write=W"),
    ];
    for case in 0..400 {
        let mut bytes = if case % 3 == 0 { random_bytes(&mut rng) } else { random_text(&mut rng) };
        if case % 7 == 0 {
            bytes = common::gzip(&bytes);
        } else if case % 11 == 0 {
            let z = common::zstd(&bytes);
            bytes = z[..rng.below(z.len() as u64 + 1) as usize].to_vec();
        }
        let p = write_file(dir.path(), "fuzz", &bytes);
        let _ = formats::detect(&p);
        let _ = open(&p, None, &ReaderOptions::default()).map(|mut r| common::drain(&mut *r));
        for &f in Format::ALL {
            let csv = mappings[case % mappings.len()].map(|m| CsvMapping::parse(m).unwrap());
            let opts = ReaderOptions {
                skip_bad_lines: [0, 3, u64::MAX][case % 3],
                csv,
                object_size: [None, Some(1), Some(0), Some(u64::MAX)][case % 4],
            };
            if let Ok(mut r) = open(&p, Some(f), &opts) {
                for _ in 0..10_000 {
                    match r.next_request() {
                        Ok(Some(q)) => assert!(q.offset.checked_add(0).is_some()),
                        _ => break,
                    }
                }
                let _ = r.next_access();
                let (mut b, mut n) = (Vec::new(), Vec::new());
                let _ = r.read_batch_next(&mut b, &mut n, 100);
            }
        }
    }
}

#[test]
fn mapping_parser_does_not_panic() {
    let mut rng = Rng(99);
    let parts =
        ["offset", "len", "=", ",", "sep", "=,", "1", "x", "read", "|", "write", "header", "auto", "", " ", "é"];
    for _ in 0..5000 {
        let s: String = (0..rng.below(12)).map(|_| parts[rng.below(parts.len() as u64) as usize]).collect();
        let _ = CsvMapping::parse(&s);
    }
}

#[test]
fn writers_do_not_panic_on_extreme_requests() {
    use blockwell_core::Op;
    use blockwell_trace::{create, Request, WriterOptions};
    let dir = tempfile::tempdir().unwrap();
    let values =
        [0, 1, 511, 512, 4095, u32::MAX as u64, (1 << 48) - 1, 1 << 48, u64::MAX / 512, u64::MAX - 1, u64::MAX];
    let mut rng = Rng(3);
    for &f in Format::ALL {
        for object_size in [None, Some(1), Some(0), Some(u64::MAX)] {
            let p = dir.path().join(format!("w.{}", f.name()));
            let opts = WriterOptions { object_size, volumes: vec!["a,b".into(), "".into(), "x_y_1".into()] };
            let mut w = create(&p, f, &opts).unwrap();
            for _ in 0..60 {
                let mut pick = || values[rng.below(values.len() as u64) as usize];
                let (time_ns, offset, len, v, o) = (pick(), pick(), pick(), pick(), pick());
                let r = Request {
                    time_ns,
                    volume: [0, 1, 2, 3, u32::MAX][(v % 5) as usize],
                    op: if o % 2 == 0 { Op::Read } else { Op::Write },
                    offset,
                    len: len % 4096,
                    digest: Some(u128::MAX),
                };
                let _ = w.write(&r);
            }
            let _ = w.finish();
            // Whatever was written reads back without panicking.
            if let Ok(mut r) = open(&p, Some(f), &ReaderOptions { skip_bad_lines: u64::MAX, ..Default::default() }) {
                let _ = common::drain(&mut *r);
            }
        }
    }
}
