//! Detection, compression, bad input, the skip-bad-lines budget, and the oracleGeneral binary reader.

mod common;

use blockwell_core::Op;
use blockwell_trace::formats::{detect, detect_line, detect_name};
use blockwell_trace::{open, Format, ReaderOptions, Request, TraceError, NEVER};
use common::{drain, gzip, read_as, write_file, zstd};

const MSR: &str =
    "128166372003061629,hm,1,Read,3154264064,4096,24095\n128166372016382155,hm,1,Write,3154268160,512,8000\n";

#[test]
fn detection_table() {
    let lines: &[(&str, Option<Format>)] = &[
        ("version,time,op,size,lbn", Some(Format::Vscsi)),
        ("128166372003061629,hm,1,Read,3154264064,4096,24095", Some(Format::Msr)),
        ("128166372003061629,hm,1,write,3154264064,4096,24095", Some(Format::Msr)),
        ("89967404265597 4692 syslogd 904265560 8 W 6 0 531e779e4ab1a8fc0ab1f8fe6c0d9f3a", Some(Format::Fiu)),
        ("0,303567,3584,w,0.000000", Some(Format::Spc)),
        ("0,303567,3584,R,0.000000,1,2", Some(Format::Spc)),
        ("  8,0    3        1     0.000000000   697  Q  WS 3417048 + 8 [kjournald]", Some(Format::Blkparse)),
        ("8,0 3 0 0.000005524 0 m N cfq697 insert_request", Some(Format::Blkparse)),
        ("1538323200,12153280,16,1,1063", Some(Format::Tencent)),
        ("419,W,8792731648,4096,1577808000000073", Some(Format::Alibaba)),
        ("time_ns,volume,op,offset,len", Some(Format::Csv)),
        // Not enough to tell: a lone number, a .lis line, a vscsi line without its header, other CSVs.
        ("42", None),
        ("230027 8 0 0", None),
        ("1,5633898,2a,512,42932745", None),
        ("1538323200,12153280,16,2,1063", None),
        ("12,hm,1,Read,3154264064,4096,24095", None),
        ("a,b,c", None),
        ("", None),
    ];
    for &(line, want) in lines {
        assert_eq!(detect_line(line), want, "{line:?}");
    }
    let names: &[(&str, Option<Format>)] = &[
        ("OLTP.lis", Some(Format::Lis)),
        ("OLTP.lis.zst", Some(Format::Lis)),
        ("P3.LIS.gz", Some(Format::Lis)),
        ("cloudPhysicsIO.oracleGeneral.bin", Some(Format::Oracle)),
        ("w44.oracleGeneral.bin.zst", Some(Format::Oracle)),
        ("trace.oracle", Some(Format::Oracle)),
        ("trace.oracle.zst", Some(Format::Oracle)),
        ("sda.blktrace.0", None),
        ("hm_0.csv", None),
        ("trace.bin", None),
        ("lisbon.txt", None),
    ];
    for &(name, want) in names {
        assert_eq!(detect_name(name), want, "{name:?}");
    }
}

#[test]
fn detection_reads_the_decompressed_first_line() {
    let dir = tempfile::tempdir().unwrap();
    let plain = write_file(dir.path(), "a", MSR.as_bytes());
    let gz = write_file(dir.path(), "b.gz", &gzip(MSR.as_bytes()));
    let zst = write_file(dir.path(), "c.zst", &zstd(MSR.as_bytes()));
    let blank_first = write_file(dir.path(), "d", format!("\n\n{MSR}").as_bytes());
    for p in [&plain, &gz, &zst, &blank_first] {
        assert_eq!(detect(p).unwrap(), Format::Msr, "{}", p.display());
        let rs = drain(&mut *open(p, None, &ReaderOptions::default()).unwrap()).unwrap();
        assert_eq!(rs.len(), 2);
    }
    // Compressed with the wrong extension, and the other way round: magic bytes decide.
    let odd = write_file(dir.path(), "e.txt", &zstd(MSR.as_bytes()));
    assert_eq!(drain(&mut *open(&odd, Some(Format::Msr), &ReaderOptions::default()).unwrap()).unwrap().len(), 2);
    let odd = write_file(dir.path(), "f.gz", MSR.as_bytes());
    assert_eq!(drain(&mut *open(&odd, Some(Format::Msr), &ReaderOptions::default()).unwrap()).unwrap().len(), 2);

    let unknown = write_file(dir.path(), "g", b"a,b,c\n");
    let e = detect(&unknown).unwrap_err();
    assert!(matches!(e, TraceError::UnknownFormat { .. }));
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("{}: cannot tell the trace format", unknown.display())), "{msg}");
    assert!(msg.contains("pass --format (msr, fiu, spc, alibaba, tencent, lis, oracle, blkparse"), "{msg}");
    let binary = write_file(dir.path(), "h", &[0xff, 0xfe, 0, 1, 2, 0x80, b'\n', 9]);
    assert!(matches!(detect(&binary), Err(TraceError::UnknownFormat { .. })));
}

#[test]
fn empty_files_have_no_requests() {
    let dir = tempfile::tempdir().unwrap();
    let empty = write_file(dir.path(), "empty", b"");
    let empty_zst = write_file(dir.path(), "empty.zst", &zstd(b""));
    let empty_gz = write_file(dir.path(), "empty.gz", &gzip(b""));
    for p in [&empty, &empty_zst, &empty_gz] {
        let mut r = open(p, None, &ReaderOptions::default()).unwrap();
        assert_eq!(drain(&mut *r).unwrap(), vec![]);
        for &f in Format::ALL {
            let mut r = open(p, Some(f), &ReaderOptions::default()).unwrap();
            assert_eq!(drain(&mut *r).unwrap(), vec![], "{}", f.name());
        }
    }
}

#[test]
fn gzip_and_zstd_are_transparent_for_every_text_format() {
    let samples: &[(Format, &str)] = &[
        (Format::Msr, MSR),
        (Format::Spc, "0,303567,3584,w,0.000000\n"),
        (Format::Lis, "1 1 0 0\n2 1 0 1\n"),
        (Format::Vscsi, "version,time,op,size,lbn\n1,5633898,2a,512,42932745\n"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for &(f, text) in samples {
        let want = read_as(dir.path(), "p", text.as_bytes(), Some(f), &ReaderOptions::default()).0.unwrap();
        assert!(!want.is_empty());
        for (name, bytes) in [("p.gz", gzip(text.as_bytes())), ("p.zst", zstd(text.as_bytes()))] {
            let got = read_as(dir.path(), name, &bytes, Some(f), &ReaderOptions::default()).0.unwrap();
            assert_eq!(got, want, "{} {name}", f.name());
        }
    }
}

/// Reads until the error, counting the requests delivered before it.
fn until_error(r: &mut dyn blockwell_trace::TraceReader) -> (u64, TraceError) {
    let mut n = 0;
    loop {
        match r.next_request() {
            Ok(Some(_)) => n += 1,
            Ok(None) => panic!("no error after {n} requests"),
            Err(e) => return (n, e),
        }
    }
}

#[test]
fn truncated_compressed_input_says_so_naming_the_file_and_the_last_line() {
    let text: String = (0..20_000).map(|i| format!("128166372003061629,hm,1,Read,{},4096,24095\n", i * 4096)).collect();
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [("t.gz", gzip(text.as_bytes())), ("t.zst", zstd(text.as_bytes()))] {
        let cut = &bytes[..bytes.len() / 2];
        let p = write_file(dir.path(), name, cut);
        let mut r = open(&p, None, &ReaderOptions::default()).unwrap();
        let (delivered, e) = until_error(&mut *r);
        // One request per line: the last line read is the last request delivered.
        assert!(delivered > 1000 && delivered < 20_000, "{name}: {delivered}");
        assert!(matches!(e, TraceError::Truncated { what: "line", at, .. } if at == delivered), "{name}: {e:?}");
        assert_eq!(
            e.to_string(),
            format!(
                "{}: truncated compressed stream after line {delivered} (the file is cut short; re-download or \
                 re-copy it)",
                p.display()
            )
        );
    }
    // The binary reader counts records.
    let records: Vec<u8> = (0..50_000u32).flat_map(|i| record(i, i as u64 % 999, 4096, -1)).collect();
    let z = zstd(&records);
    let p = write_file(dir.path(), "t.oracleGeneral.zst", &z[..z.len() / 2]);
    let (delivered, e) = until_error(&mut *open(&p, None, &ReaderOptions::default()).unwrap());
    assert!(matches!(e, TraceError::Truncated { what: "record", at, .. } if at >= delivered && at > 0), "{e:?}");
    assert!(e.to_string().starts_with(&format!("{}: truncated compressed stream after record ", p.display())), "{e}");
}

#[test]
fn binary_data_to_a_text_format_is_a_clear_parse_error() {
    let dir = tempfile::tempdir().unwrap();
    let bytes: Vec<u8> = (0..4000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8 | 0x80).collect();
    for &f in Format::ALL {
        if f == Format::Oracle {
            continue;
        }
        let (res, _, p) = read_as(dir.path(), "bin", &bytes, Some(f), &ReaderOptions::default());
        let e = res.unwrap_err().to_string();
        let want = format!(
            "{}:1: expected a line of at most 65536 bytes, found a longer line (binary data? wrong --format?)",
            p.display()
        );
        let want_utf8 = format!("{}:1: expected UTF-8 text, found binary data (wrong --format?)", p.display());
        assert!(e == want || e == want_utf8, "{}: {e}", f.name());
    }
    let mut with_newlines = bytes.clone();
    with_newlines[100] = b'\n';
    let (res, _, p) = read_as(dir.path(), "bin2", &with_newlines, Some(Format::Msr), &ReaderOptions::default());
    assert_eq!(
        res.unwrap_err().to_string(),
        format!("{}:1: expected UTF-8 text, found binary data (wrong --format?)", p.display())
    );
    // A huge line without newline is not buffered whole, and is one bad line.
    let long = vec![b'7'; 1 << 20];
    let (res, _, p) = read_as(dir.path(), "long", &long, Some(Format::Plain), &ReaderOptions::default());
    assert_eq!(
        res.unwrap_err().to_string(),
        format!(
            "{}:1: expected a line of at most 65536 bytes, found a longer line (binary data? wrong --format?)",
            p.display()
        )
    );
    let opts = ReaderOptions { skip_bad_lines: 1, ..Default::default() };
    let mut long_then_good = long.clone();
    long_then_good.extend_from_slice(b"\n5\n");
    let (res, _, _) = read_as(dir.path(), "long2", &long_then_good, Some(Format::Plain), &opts);
    assert_eq!(res.unwrap().len(), 1);
}

#[test]
fn skip_bad_lines_counts_and_limits() {
    let text = "1,W,0,512,1\nbad\n2,R,512,512,2\n3,X,0,0,0\n\nworse,line\n4,W,1024,512,3\n";
    let dir = tempfile::tempdir().unwrap();
    let p = write_file(dir.path(), "t", text.as_bytes());
    let read = |limit| {
        let mut r = open(&p, Some(Format::Alibaba), &ReaderOptions { skip_bad_lines: limit, ..Default::default() })?;
        let rs = drain(&mut *r)?;
        Ok::<_, TraceError>((rs.len(), r.skipped().clone()))
    };
    let (n, bad) = read(3).unwrap();
    assert_eq!((n, bad.count), (3, 3));
    let f = p.display();
    assert_eq!(
        bad.examples,
        [
            format!(
                "{f}:2: expected 5 comma-separated fields device_id,opcode,offset,length,timestamp, found 1 field(s)"
            ),
            format!("{f}:4: expected an opcode R or W, found 'X'"),
            format!(
                "{f}:6: expected 5 comma-separated fields device_id,opcode,offset,length,timestamp, found 2 field(s)"
            ),
        ]
    );
    assert_eq!(read(10).unwrap().1.count, 3);
    let e = read(2).unwrap_err();
    assert!(matches!(e, TraceError::TooManyBad { limit: 2, .. }), "{e:?}");
    assert_eq!(
        e.to_string(),
        format!(
            "{f}: more than 2 malformed lines; first: {f}:2: expected 5 comma-separated fields \
             device_id,opcode,offset,length,timestamp, found 1 field(s)"
        )
    );
    // No budget: the first bad line's own error.
    assert_eq!(
        read(0).unwrap_err().to_string(),
        format!("{f}:2: expected 5 comma-separated fields device_id,opcode,offset,length,timestamp, found 1 field(s)")
    );
}

#[test]
fn every_text_format_routes_bad_lines_through_the_budget() {
    let good: &[(Format, &str)] = &[
        (Format::Msr, "128166372003061629,hm,1,Read,3154264064,4096,24095"),
        (Format::Fiu, "89967404265597 4692 syslogd 904265560 8 W 6 0 531e779e4ab1a8fc0ab1f8fe6c0d9f3a"),
        (Format::Spc, "0,303567,3584,w,0.000000"),
        (Format::Alibaba, "419,W,8792731648,4096,1577808000000073"),
        (Format::Tencent, "1538323200,12153280,16,1,1063"),
        (Format::Lis, "1 1 0 0"),
        (Format::Blkparse, "8,0 3 6 0.000010108 697 D WS 3417048 + 8 [kjournald]"),
        (Format::BlkparseQ, "8,0 3 6 0.000010108 697 Q WS 3417048 + 8 [kjournald]"),
        (Format::Vscsi, "1,5633898,2a,512,42932745"),
        (Format::Plain, "7"),
        (Format::Csv, "1,v,R,0,512"),
    ];
    assert_eq!(good.len(), Format::ALL.len() - 1, "every text format is listed");
    let dir = tempfile::tempdir().unwrap();
    for &(f, line) in good {
        let text = format!("{line}\nnot,a valid line at all\n\u{1}\u{2}\n{line}\n");
        let opts = ReaderOptions { skip_bad_lines: 2, ..Default::default() };
        let (res, _, _) = read_as(dir.path(), "t", text.as_bytes(), Some(f), &opts);
        assert_eq!(res.unwrap_or_else(|e| panic!("{}: {e}", f.name())).len(), 2, "{}", f.name());
        let opts = ReaderOptions { skip_bad_lines: 1, ..Default::default() };
        let (res, _, _) = read_as(dir.path(), "t", text.as_bytes(), Some(f), &opts);
        assert!(matches!(res, Err(TraceError::TooManyBad { .. })), "{}: {res:?}", f.name());
    }
}

fn record(time: u32, id: u64, size: u32, next: i64) -> Vec<u8> {
    let mut r = Vec::with_capacity(24);
    r.extend_from_slice(&time.to_le_bytes());
    r.extend_from_slice(&id.to_le_bytes());
    r.extend_from_slice(&size.to_le_bytes());
    r.extend_from_slice(&next.to_le_bytes());
    r
}

#[test]
fn oracle_records() {
    let vol7 = 7u64 << 48;
    let bytes: Vec<u8> =
        [record(10, 5, 4096, 3), record(11, vol7 | 9, 4096, -1), record(11, 5, 4096, -1), record(12, 6, 512, i64::MAX)]
            .concat();
    let dir = tempfile::tempdir().unwrap();
    let p = write_file(dir.path(), "t.oracleGeneral.bin", &bytes);
    let mut r = open(&p, None, &ReaderOptions::default()).unwrap();
    assert!(r.has_next_access());
    let mut got = Vec::new();
    while let Some(q) = r.next_request().unwrap() {
        got.push((q, r.next_access()));
    }
    let rq = |t: u64, v, off| Request {
        time_ns: t * 1_000_000_000,
        volume: v,
        op: Op::Read,
        offset: off,
        len: 4096,
        digest: None,
    };
    assert_eq!(
        got,
        vec![
            (rq(10, 0, 5 * 4096), Some(2)),
            (rq(11, 1, 9 * 4096), None),
            (rq(11, 0, 5 * 4096), None),
            (rq(12, 0, 6 * 4096), None)
        ]
    );
    assert_eq!(r.volumes(), ["0", "7"]);

    // Batches, with the object size from the options.
    let opts = ReaderOptions { object_size: Some(512), ..Default::default() };
    let mut r = open(&p, Some(Format::Oracle), &opts).unwrap();
    let (mut buf, mut next) = (Vec::new(), Vec::new());
    assert_eq!(r.read_batch_next(&mut buf, &mut next, 3).unwrap(), 3);
    assert_eq!(next, [2, NEVER, NEVER]);
    assert_eq!((buf[0].offset, buf[0].len), (5 * 512, 512));
    assert_eq!(r.read_batch(&mut buf, 3).unwrap(), 1);
    assert_eq!(r.read_batch(&mut buf, 3).unwrap(), 0);

    // A truncated final record.
    let mut cut = bytes.clone();
    cut.truncate(24 * 3 + 5);
    let p = write_file(dir.path(), "cut.oracleGeneral", &cut);
    let mut r = open(&p, None, &ReaderOptions::default()).unwrap();
    let e = drain(&mut *r).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("{}:4: expected a 24-byte record (record 4 at byte offset 72), found 5 bytes", p.display())
    );
    assert!(matches!(e, TraceError::Parse { line: 4, .. }));
    let mut r = open(&p, None, &ReaderOptions { skip_bad_lines: 1, ..Default::default() }).unwrap();
    assert_eq!(drain(&mut *r).unwrap().len(), 3);
    assert_eq!(r.skipped().count, 1);

    // A block whose byte offset overflows at the object size.
    let bad = [record(1, (1 << 48) - 1, 4096, -1), record(2, 1, 4096, -1)].concat();
    let p = write_file(dir.path(), "big.oracleGeneral", &bad);
    let opts = ReaderOptions { object_size: Some(1 << 20), ..Default::default() };
    let e = drain(&mut *open(&p, None, &opts).unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}:1: expected a block whose byte offset at 1048576 B fits in 64 bits, found block 281474976710655",
            p.display()
        )
    );
    let opts = ReaderOptions { skip_bad_lines: 1, ..opts };
    assert_eq!(drain(&mut *open(&p, None, &opts).unwrap()).unwrap().len(), 1);
}

#[test]
fn oracle_refuses_what_is_not_an_oracle_trace_naming_file_and_record() {
    let dir = tempfile::tempdir().unwrap();
    let first_error = |name: &str, bytes: &[u8]| {
        let p = write_file(dir.path(), name, bytes);
        let mut r = open(&p, Some(Format::Oracle), &ReaderOptions::default()).unwrap();
        let (delivered, e) = until_error(&mut *r);
        (p, delivered, e.to_string())
    };
    // A length that is not a whole number of records: refused before the first record, not at the end.
    let mut text = MSR.repeat(1000).into_bytes();
    text.truncate(24 * 1000 + 7);
    let (p, delivered, e) = first_error("msr.csv", &text);
    assert_eq!(delivered, 0, "{e}");
    assert_eq!(
        e,
        format!("{}:1001: expected a 24-byte record (record 1001 at byte offset 24000), found 7 bytes", p.display())
    );
    // Text of a whole number of records: next_access_vtime is ASCII, far beyond any request number.
    text.truncate(24 * 1000);
    let (p, delivered, e) = first_error("msr2.csv", &text);
    assert_eq!(delivered, 0, "{e}");
    assert!(e.starts_with(&format!("{}:1: expected a next_access_vtime of -1 or from 1 to 2^40", p.display())), "{e}");
    // A file of zeros: object size 0.
    let (p, _, e) = first_error("zeros.bin", &vec![0u8; 24 * 100]);
    assert_eq!(
        e,
        format!(
            "{}:1: expected a nonzero obj_size (not an oracleGeneral trace? wrong --format?), found 0",
            p.display()
        )
    );
    // A next access that points back in time (record 3 says its next access is request 2), after good records.
    let bytes = [record(1, 5, 4096, 3), record(1, 6, 4096, -1), record(2, 7, 4096, 2), record(3, 5, 4096, -1)].concat();
    let (p, delivered, e) = first_error("back.oracleGeneral", &bytes);
    assert_eq!(delivered, 0, "decoded in one batch: {e}");
    assert!(e.starts_with(&format!("{}:3: expected a next_access_vtime of -1 or from 3 to 2^40", p.display())), "{e}");
    assert!(e.ends_with("found 2"), "{e}");
    // The budget skips implausible records like malformed lines.
    let opts = ReaderOptions { skip_bad_lines: 1, ..Default::default() };
    let got = drain(&mut *open(&p, Some(Format::Oracle), &opts).unwrap()).unwrap();
    assert_eq!(got.len(), 3);
    // The 0-based convention (the very next request is this record's own 1-based number) and i64::MAX are fine.
    let bytes = [record(1, 5, 4096, 1), record(1, 5, 4096, i64::MAX)].concat();
    let p = write_file(dir.path(), "zero-based.oracleGeneral", &bytes);
    let mut r = open(&p, None, &ReaderOptions::default()).unwrap();
    let mut buf = Vec::new();
    let mut next = Vec::new();
    assert_eq!(r.read_batch_next(&mut buf, &mut next, 10).unwrap(), 2);
    assert_eq!(next[1], NEVER);
}

#[test]
fn oracle_records_across_buffer_boundaries() {
    // More than the 1 MiB read buffer, whose size is not a multiple of 24: records straddle fills.
    let n = 100_000u64;
    let bytes: Vec<u8> = (0..n).flat_map(|i| record(i as u32, i % 1000, 4096, -1)).collect();
    let dir = tempfile::tempdir().unwrap();
    for (name, data) in [("a.oracleGeneral", bytes.clone()), ("b.oracleGeneral.zst", zstd(&bytes))] {
        let p = write_file(dir.path(), name, &data);
        let mut r = open(&p, None, &ReaderOptions::default()).unwrap();
        let mut i = 0u64;
        let mut buf = Vec::new();
        // Mix single reads and batches of odd sizes.
        loop {
            let got = if i % 3 == 0 {
                r.next_request().unwrap().into_iter().collect::<Vec<_>>()
            } else {
                r.read_batch(&mut buf, 777).unwrap();
                buf.clone()
            };
            if got.is_empty() {
                break;
            }
            for q in got {
                assert_eq!((q.time_ns, q.offset), (i * 1_000_000_000, (i % 1000) * 4096), "{name} request {i}");
                i += 1;
            }
        }
        assert_eq!(i, n);
        assert_eq!(r.bytes_read(), data.len() as u64);
    }
}

#[test]
fn oracle_units_are_the_requests_without_time_or_length() {
    // Across buffer fills (plain and compressed), with refused records skipped within the budget, two volumes,
    // and the three ways of reading mixed: each request comes once, in order, whichever way it is read.
    let n = 100_000u64;
    let vol3 = 3u64 << 48;
    let bytes: Vec<u8> = (0..n)
        .flat_map(|i| match i {
            i if i % 10_007 == 5 => record(i as u32, i, 0, -1),
            i if i % 2 == 1 => record(i as u32, vol3 | (i % 777), 4096, -1),
            i => record(i as u32, i % 1000, 4096, -1),
        })
        .collect();
    let bad = (0..n).filter(|i| i % 10_007 == 5).count() as u64;
    let dir = tempfile::tempdir().unwrap();
    let opts = ReaderOptions { skip_bad_lines: bad, object_size: Some(512), ..Default::default() };
    for (name, data) in [("u.oracleGeneral", bytes.clone()), ("u.oracleGeneral.zst", zstd(&bytes))] {
        let p = write_file(dir.path(), name, &data);
        let want = drain(&mut *open(&p, None, &opts).unwrap()).unwrap();
        let mut r = open(&p, None, &opts).unwrap();
        assert_eq!(r.unit_size(), Some(512));
        let (mut got, mut buf, mut units) = (Vec::new(), Vec::new(), Vec::new());
        for k in 0.. {
            let before = got.len();
            match k % 3 {
                0 => got.extend(r.next_request().unwrap().map(|q| (q.volume, q.offset / 512))),
                1 => {
                    r.read_batch(&mut buf, 1001).unwrap();
                    got.extend(buf.iter().map(|q| (q.volume, q.offset / 512)));
                }
                _ => {
                    r.read_units(&mut units, 4099).unwrap();
                    got.extend(units.iter().map(|u| (u.volume, u.unit)));
                }
            }
            if got.len() == before && k % 3 == 2 {
                break;
            }
        }
        assert_eq!(got, want.iter().map(|q| (q.volume, q.offset / 512)).collect::<Vec<_>>(), "{name}");
        assert_eq!(got.len() as u64, n - bad);
        assert_eq!(r.skipped().count, bad);
        assert_eq!(r.volumes(), ["0", "3"]);
    }
    // Past the budget, the refusal names the record.
    let p = write_file(dir.path(), "v.oracleGeneral", &bytes);
    let mut r = open(&p, None, &ReaderOptions::default()).unwrap();
    let mut units = Vec::new();
    assert_eq!(r.read_units(&mut units, 3).unwrap(), 3);
    let e = r.read_units(&mut units, 10).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}:6: expected a nonzero obj_size", p.display())), "{e}");
}

#[test]
fn a_trace_of_mixed_requests_has_no_unit_and_reads_units_as_offset_over_length() {
    let dir = tempfile::tempdir().unwrap();
    let p = write_file(dir.path(), "t.csv", MSR.as_bytes());
    let mut r = open(&p, Some(Format::Msr), &ReaderOptions::default()).unwrap();
    assert_eq!(r.unit_size(), None);
    let mut units = Vec::new();
    assert_eq!(r.read_units(&mut units, 10).unwrap(), 2);
    assert_eq!(
        units.iter().map(|u| (u.volume, u.unit)).collect::<Vec<_>>(),
        [(0, 3154264064 / 4096), (0, 3154268160 / 512)]
    );
    assert_eq!(r.read_units(&mut units, 10).unwrap(), 0);
    assert!(units.is_empty());
}
