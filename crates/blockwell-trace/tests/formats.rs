//! Each format on sample lines shaped like the public traces, and the exact error messages.

mod common;

use blockwell_core::Op;
use blockwell_trace::formats::csv::{CsvMapping, Header, Sep};
use blockwell_trace::{Format, ReaderOptions, Request};
use common::{error_of, read_as};

fn req(time_ns: u64, volume: u32, op: Op, offset: u64, len: u64) -> Request {
    Request { time_ns, volume, op, offset, len, digest: None }
}

fn read_ok(text: &str, format: Format) -> (Vec<Request>, Vec<String>) {
    read_opts(text, format, &ReaderOptions::default())
}

fn read_opts(text: &str, format: Format, opts: &ReaderOptions) -> (Vec<Request>, Vec<String>) {
    let dir = tempfile::tempdir().unwrap();
    let (res, vols, _) = read_as(dir.path(), "t.txt", text.as_bytes(), Some(format), opts);
    (res.unwrap_or_else(|e| panic!("{e}")), vols)
}

fn err(text: &str, format: Format) -> String {
    let dir = tempfile::tempdir().unwrap();
    error_of(dir.path(), text, format)
}

#[test]
fn msr() {
    let text = "128166372003061629,hm,1,Read,3154264064,4096,24095\n\
                128166372016382155,hm,1,Write,3154268160,512,8000\r\n\
                \n\
                128166372026382245,prn,0,write,0,65536,1\n";
    let (rs, vols) = read_ok(text, Format::Msr);
    assert_eq!(
        rs,
        vec![
            req(0, 0, Op::Read, 3154264064, 4096),
            req(1_332_052_600, 0, Op::Write, 3154268160, 512),
            req(2_332_061_600, 1, Op::Write, 0, 65536),
        ]
    );
    assert_eq!(vols, ["hm_1", "prn_0"]);
    assert_eq!(
        err("128166372003061629,hm,1,Read\n", Format::Msr),
        "FILE:1: expected 7 comma-separated fields Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime, \
         found 4 field(s)"
    );
    assert_eq!(
        err("128166372003061629,hm,1,Read,3154264064,4096,1\n1,hm,1,Flush,0,0,0\n", Format::Msr),
        "FILE:2: expected a Type of Read or Write, found 'Flush'"
    );
    assert_eq!(err("1,hm,1,Read,-5,4096,1\n", Format::Msr), "FILE:1: expected an Offset in bytes, found '-5'");
}

#[test]
fn fiu() {
    let text = "89967404265597 4692 syslogd 904265560 8 W 6 0 531e779e4ab1a8fc0ab1f8fe6c0d9f3a\n\
                89967404265598 4692 my proc 904265568 8 r 6 1 00000000000000000000000000000000\n";
    let (rs, vols) = read_ok(text, Format::Fiu);
    let mut a = req(89967404265597, 0, Op::Write, 904265560 * 512, 4096);
    a.digest = Some(0x531e779e4ab1a8fc0ab1f8fe6c0d9f3a);
    assert_eq!(rs, vec![a, req(89967404265598, 1, Op::Read, 904265568 * 512, 4096)]);
    assert_eq!(vols, ["6,0", "6,1"]);
    assert_eq!(err("1 2 p 3 4 W 6 0 xyz\n", Format::Fiu), "FILE:1: expected an md5 of 32 hex digits, found 'xyz'");
    assert_eq!(
        err("1 2 p 3 4 W 6 0\n", Format::Fiu),
        "FILE:1: expected 9 space-separated fields ts_ns pid process lba size R/W major minor md5, found 8 field(s)"
    );
    assert_eq!(
        err("1 2 p 99999999999999999 4 W 6 0 531e779e4ab1a8fc0ab1f8fe6c0d9f3a\n", Format::Fiu),
        "FILE:1: expected an lba in 512 B sectors below 2^55, found '99999999999999999'"
    );
}

#[test]
fn spc() {
    let text = "0,303567,3584,w,0.000000\n1,303574,512,R,0.025000,extra,fields\n0,1,1,r,12.5\n";
    let (rs, vols) = read_ok(text, Format::Spc);
    assert_eq!(
        rs,
        vec![
            req(0, 0, Op::Write, 303567 * 512, 3584),
            req(25_000_000, 1, Op::Read, 303574 * 512, 512),
            req(12_500_000_000, 0, Op::Read, 512, 1),
        ]
    );
    assert_eq!(vols, ["0", "1"]);
    assert_eq!(err("0,303567,3584,x,0.0\n", Format::Spc), "FILE:1: expected an Opcode r or w, found 'x'");
    assert_eq!(err("0,303567,3584,w,soon\n", Format::Spc), "FILE:1: expected a Timestamp in seconds, found 'soon'");
}

#[test]
fn alibaba() {
    let (rs, vols) = read_ok("419,W,8792731648,4096,1577808000000073\n7,r,0,512,1577808000000100\n", Format::Alibaba);
    assert_eq!(
        rs,
        vec![
            req(1_577_808_000_000_073_000, 0, Op::Write, 8792731648, 4096),
            req(1_577_808_000_000_100_000, 1, Op::Read, 0, 512)
        ]
    );
    assert_eq!(vols, ["419", "7"]);
    assert_eq!(err("419,X,0,4096,1\n", Format::Alibaba), "FILE:1: expected an opcode R or W, found 'X'");
    assert_eq!(
        err("419,W,0,4096,99999999999999999999\n", Format::Alibaba),
        "FILE:1: expected a timestamp in microseconds below 2^64 ns, found '99999999999999999999'"
    );
}

#[test]
fn tencent() {
    let (rs, vols) = read_ok("1538323200,12153280,16,1,1063\n1538323201,8,8,0,7\n", Format::Tencent);
    assert_eq!(
        rs,
        vec![
            req(1_538_323_200_000_000_000, 0, Op::Write, 12153280 * 512, 8192),
            req(1_538_323_201_000_000_000, 1, Op::Read, 4096, 4096)
        ]
    );
    assert_eq!(vols, ["1063", "7"]);
    assert_eq!(
        err("1538323200,12153280,16,2,1063\n", Format::Tencent),
        "FILE:1: expected an IOType 0 (read) or 1 (write), found '2'"
    );
    // Offsets that overflow u64 once multiplied by the sector size.
    assert_eq!(
        err("1538323200,36028797018963968,16,1,1063\n", Format::Tencent),
        "FILE:1: expected an Offset in 512 B sectors below 2^55, found '36028797018963968'"
    );
}

#[test]
fn lis() {
    let (rs, vols) = read_ok("230027 8 0 0\n1842745 64 0 1\n5 1\n\n", Format::Lis);
    assert_eq!(
        rs,
        vec![
            req(0, 0, Op::Read, 230027 * 512, 4096),
            req(0, 0, Op::Read, 1842745 * 512, 32768),
            req(0, 0, Op::Read, 2560, 512)
        ]
    );
    assert_eq!(vols, ["0"]);
    assert_eq!(
        err("230027\n", Format::Lis),
        "FILE:1: expected start_block nblocks [ignore request_number], found 1 field(s)"
    );
    assert_eq!(err("1 x 0 0\n", Format::Lis), "FILE:1: expected an nblocks count below 2^55, found 'x'");
}

const BLKPARSE: &str = "  8,0    3        1     0.000000000   697  Q  WS 3417048 + 8 [kjournald]
  8,0    3        2     0.000001240   697  G  WS 3417048 + 8 [kjournald]
  8,0    3        3     0.000002126   697  P   N [kjournald]
  8,0    3        4     0.000003050   697  I  WS 3417048 + 8 [kjournald]
  8,0    3        0     0.000005524     0  m   N cfq697 insert_request
  8,0    3        6     0.000010108   697  D  WS 3417048 + 8 [kjournald]
  8,0    1        1     0.000207262     0  C  WS 3417048 + 8 [0]
  8,16   0        7     0.001000000   700  Q   R 2048 + 16 [dd]
  8,16   0        8     0.001000500   700  D   R 2048 + 16 [dd]
  8,16   0        9     0.001100000   700  D FWS [kworker/0:1H]
  8,16   0       10     0.001200000   700  D   N 0 + 0 [x]
  8,16   0       11     0.001300000   700  D  DS 4096 + 8 [fstrim]
  8,16   0       12     0.001400000   700  D  WS 4096 + 0 [x]
CPU0 (8,0):
 Reads Queued:           0,        0KiB\t Writes Queued:          77,      308KiB
 Read Dispatches:        0,        0KiB\t Write Dispatches:       55,      308KiB
Total (8,0):
 Reads Queued:           0,        0KiB\t Writes Queued:          77,      308KiB

Throughput (R/W): 0KiB/s / 1204KiB/s
Events (8,0): 2,167 entries
Skips: 0 forward (0 -   0.0%)
";

#[test]
fn blkparse() {
    let (rs, vols) = read_ok(BLKPARSE, Format::Blkparse);
    assert_eq!(rs, vec![req(10_108, 0, Op::Write, 3417048 * 512, 4096), req(1_000_500, 1, Op::Read, 2048 * 512, 8192)]);
    assert_eq!(vols, ["8,0", "8,16"]);
    let (rs, _) = read_ok(BLKPARSE, Format::BlkparseQ);
    assert_eq!(rs, vec![req(0, 0, Op::Write, 3417048 * 512, 4096), req(1_000_000, 1, Op::Read, 2048 * 512, 8192)]);
    assert_eq!(
        err("hello world\n", Format::Blkparse),
        "FILE:1: expected a blkparse event 'maj,min cpu seq time pid action rwbs sector + nsectors', found 'hello world'"
    );
    assert_eq!(
        err("  8,0 3 6 0.1 697 D WS 3417048 - 8 [k]\n", Format::Blkparse),
        "FILE:1: expected 'sector + nsectors', found '3417048 - 8'"
    );
    assert_eq!(
        err("  8,0 3 6 later 697 D WS 1 + 8 [k]\n", Format::Blkparse),
        "FILE:1: expected a time in seconds, found 'later'"
    );
}

#[test]
fn vscsi_and_plain() {
    let (rs, vols) =
        read_ok("version,time,op,size,lbn\n1,5633898,2a,512,42932745\n1,5633899,28,4096,8\n", Format::Vscsi);
    assert_eq!(
        rs,
        vec![
            req(5_633_898_000_000_000, 0, Op::Write, 42932745 * 512, 512),
            req(5_633_899_000_000_000, 0, Op::Read, 4096, 4096)
        ]
    );
    assert_eq!(vols, ["0"]);
    assert_eq!(
        err("version,time,op,size,lbn\n1,5,2b,512,4\n", Format::Vscsi),
        "FILE:2: expected a SCSI opcode in hex (28 read, 2a write), found '2b'"
    );
    let (rs, _) = read_ok("1\n# comment\n\n3\n", Format::Plain);
    assert_eq!(rs, vec![req(0, 0, Op::Read, 4096, 4096), req(0, 0, Op::Read, 12288, 4096)]);
    let opts = ReaderOptions { object_size: Some(512), ..Default::default() };
    assert_eq!(read_opts("3\n", Format::Plain, &opts).0, vec![req(0, 0, Op::Read, 1536, 512)]);
    assert_eq!(
        err("x1\n", Format::Plain),
        "FILE:1: expected an object id (unsigned integer, times the object size below 2^64), found 'x1'"
    );
}

#[test]
fn csv_mapping_keys() {
    let m = CsvMapping::parse(
        "time=0,volume=1,op=2,offset=3,len=4,offset_unit=512,len_unit=1,time_unit=us,read=R,write=W,header=true,sep=,",
    )
    .unwrap();
    assert_eq!(
        (m.time, m.volume, m.op, m.offset, m.len, m.offset_unit, m.len_unit, m.time_unit),
        (Some(0), Some(1), Some(2), 3, Some(4), 512, 1, 1000)
    );
    assert_eq!(
        (m.read.clone(), m.write.clone(), m.header, m.sep),
        (vec!["r".to_string()], vec!["w".to_string()], Header::Yes, Sep::Char(','))
    );
    let m = CsvMapping::parse("offset=1, sep=,, header=false").unwrap();
    assert_eq!((m.offset, m.sep, m.header, m.len, m.time), (1, Sep::Char(','), Header::No, None, None));
    assert_eq!(CsvMapping::parse("offset=0,sep=tab").unwrap().sep, Sep::Char('\t'));
    assert_eq!(CsvMapping::parse("offset=0,sep=space").unwrap().sep, Sep::Blanks);
    assert_eq!(CsvMapping::parse("offset=0,sep=;").unwrap().sep, Sep::Char(';'));
    let e = |s: &str| CsvMapping::parse(s).unwrap_err().to_string();
    assert_eq!(e("offset=x"), "csv mapping key 'offset': expected a 0-based column number, found 'x'");
    assert_eq!(e("len=1"), "csv mapping key 'offset': expected an offset column (offset=N), found none");
    assert_eq!(
        e("offset=1,colour=2"),
        "csv mapping key 'colour': expected one of the keys offset, len, time, volume, op, digest, offset_unit, \
         len_unit, time_unit, read, write, header, sep, found 'colour'"
    );
    assert_eq!(e("offset=1,time_unit=h"), "csv mapping key 'time_unit': expected ns, us, ms or s, found 'h'");
    assert_eq!(
        e("offset=1,offset_unit=0"),
        "csv mapping key 'offset_unit': expected a positive whole number of bytes, found '0'"
    );
    assert_eq!(e("offset=1,offset=2"), "csv mapping key 'offset': expected each key once, found 'offset' twice");
    assert_eq!(e("offset=1,header=maybe"), "csv mapping key 'header': expected true, false or auto, found 'maybe'");
    assert_eq!(
        e("offset=1,read=a,write=A"),
        "csv mapping key 'write': expected values distinct from read's, found 'a' in both"
    );
    assert_eq!(e("offset"), "csv mapping key 'offset': expected key=value, found 'offset'");
}

#[test]
fn csv_quoted_fields() {
    // Quoted fields (RFC 4180): a separator and a doubled quote inside quotes, quoted numbers, blanks around.
    let text = "time_ns,volume,op,offset,len\n\
                5,\"vol,1\",W,4096,512\n\
                6,\"say \"\"hi\"\"\",\"R\",\"8192\", 4096 \n\
                7,plain,r,0,\"1\"\n";
    let (rs, vols) = read_ok(text, Format::Csv);
    assert_eq!(rs, vec![req(5, 0, Op::Write, 4096, 512), req(6, 1, Op::Read, 8192, 4096), req(7, 2, Op::Read, 0, 1)]);
    assert_eq!(vols, ["vol,1", "say \"hi\"", "plain"]);
    // A quote left open is an error naming the line; the next lines still read (the budget skips it).
    let bad = "time_ns,volume,op,offset,len\n5,\"vol,W,4096,512\n6,v,R,0,4096\n";
    assert_eq!(err(bad, Format::Csv), "FILE:2: expected a closing quote on the same line, found '5,\"vol,W,4096,512'");
    let (rs, _) = read_opts(bad, Format::Csv, &ReaderOptions { skip_bad_lines: 1, ..Default::default() });
    assert_eq!(rs, vec![req(6, 0, Op::Read, 0, 4096)]);
    // Field-count and value errors keep their form, with quotes counted as one field.
    assert_eq!(
        err("time_ns,volume,op,offset,len\n5,\"v,W\",4096,1\n", Format::Csv),
        "FILE:2: expected at least 5 fields, found 4 field(s)"
    );
    assert_eq!(
        err("time_ns,volume,op,offset,len\n5,v,W,\"12x\",1\n", Format::Csv),
        "FILE:2: expected an offset below 2^64 bytes in column 3 (offset), found '12x'"
    );
    // Another one-character separator, and a carriage return (CRLF lines).
    let m = CsvMapping::parse("volume=0,offset=1,header=false,sep=;").unwrap();
    let opts = ReaderOptions { csv: Some(m), object_size: Some(512), ..Default::default() };
    let (rs, vols) = read_opts("\"a;b\";1024\r\nc;2048\r\n", Format::Csv, &opts);
    assert_eq!(rs, vec![req(0, 0, Op::Read, 1024, 512), req(0, 1, Op::Read, 2048, 512)]);
    assert_eq!(vols, ["a;b", "c"]);
}

#[test]
fn csv_reading() {
    let m = CsvMapping::parse("time=4,volume=0,op=1,offset=2,len=3,time_unit=us,offset_unit=512,header=false").unwrap();
    let opts = ReaderOptions { csv: Some(m), ..Default::default() };
    let (rs, vols) = read_opts("419,W,17,4096,1577808000000073\nabc,READ,1,512,2.5\n", Format::Csv, &opts);
    assert_eq!(
        rs,
        vec![req(1_577_808_000_000_073_000, 0, Op::Write, 17 * 512, 4096), req(2500, 1, Op::Read, 512, 512)]
    );
    assert_eq!(vols, ["419", "abc"]);

    // Only `write` given: everything else reads. No len column: --object-size. Blank separators.
    let m = CsvMapping::parse("offset=0,op=1,write=1,sep=space").unwrap();
    let opts = ReaderOptions { csv: Some(m), object_size: Some(8192), ..Default::default() };
    let (rs, vols) = read_opts("  7 \t 1\n8 0\n", Format::Csv, &opts);
    assert_eq!(rs, vec![req(0, 0, Op::Write, 7, 8192), req(0, 0, Op::Read, 8, 8192)]);
    assert_eq!(vols, ["0"]);

    // The default mapping reads the writer's output (header detected as a header).
    let (rs, _) = read_ok("time_ns,volume,op,offset,len\n5,v,W,4096,512\n", Format::Csv);
    assert_eq!(rs, vec![req(5, 0, Op::Write, 4096, 512)]);
    assert_eq!(
        err("time_ns,volume,op,offset,len\n5,v,W,4096\n", Format::Csv),
        "FILE:2: expected at least 5 fields, found 4 field(s)"
    );
    assert_eq!(
        err("time_ns,volume,op,offset,len\n5,v,T,4096,1\n", Format::Csv),
        "FILE:2: expected an op (r|read or w|write) in column 2 (op), found 'T'"
    );
    assert_eq!(
        err("time_ns,volume,op,offset,len\n5,v,W,18446744073709551616,1\n", Format::Csv),
        "FILE:2: expected an offset below 2^64 bytes in column 3 (offset), found '18446744073709551616'"
    );
    // A unit that makes the offset overflow.
    let m = CsvMapping::parse("offset=0,offset_unit=512").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let opts = ReaderOptions { csv: Some(m), ..Default::default() };
    let (res, _, _) = read_as(dir.path(), "t.txt", b"1\n36028797018963968\n", Some(Format::Csv), &opts);
    let e = res.unwrap_err().to_string();
    assert!(
        e.ends_with(":2: expected an offset below 2^64 bytes in column 0 (offset), found '36028797018963968'"),
        "{e}"
    );
}
