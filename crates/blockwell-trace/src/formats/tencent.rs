//! Tencent CBS block traces (SNIA IOTTA 27917): 5584 cloud volumes.
//!
//! One request per line, comma separated, no header:
//!
//! ```text
//! Timestamp,Offset,Size,IOType,VolumeID
//! 1538323200,12153280,16,1,1063
//! ```
//!
//! | field | unit | → [`Request`] |
//! |---|---|---|
//! | Timestamp | seconds (Unix time) | `time_ns` = Timestamp × 10^9 |
//! | Offset | 512 B sectors | `offset` = Offset × 512 |
//! | Size | 512 B sectors | `len` = Size × 512 |
//! | IOType | `0` read, `1` write | `op` |
//! | VolumeID | volume number | `volume`: the id as written, numbered by first appearance |
//!
//! No digest. The writer truncates time to seconds, rounds addresses outward to sectors, and writes the volume
//! name when it is a number (else the volume number) as VolumeID.

use crate::parse::{scaled, split, uint};
use crate::write::{numeric_volume, units, Output, TextWriter};
use crate::{CommaFields, Input, LineCtx, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use blockwell_core::Op;
use std::fmt::Write as _;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(LineTrace::boxed(input, opts, CommaFields::new("Timestamp,Offset,Size,IOType,VolumeID", request)))
}

fn parse_op(s: &str) -> Option<Op> {
    match s.trim() {
        "0" => Some(Op::Read),
        "1" => Some(Op::Write),
        _ => None,
    }
}

fn request(f: [&str; 5], ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Request, TraceError> {
    let time_ns = ctx.field(f[0], "a Timestamp in seconds below 2^64 ns", |s| scaled(s, 1_000_000_000))?;
    let offset = ctx.field(f[1], "an Offset in 512 B sectors below 2^55", |sectors| scaled(sectors, 512))?;
    let len = ctx.field(f[2], "a Size in 512 B sectors below 2^55", |sectors| scaled(sectors, 512))?;
    let op = ctx.field(f[3], "an IOType 0 (read) or 1 (write)", parse_op)?;
    let vol = ctx.nonblank(f[4], "a VolumeID")?;
    Ok(Request { time_ns, volume: volumes.id(vol), op, offset, len, digest: None })
}

/// Five numbers, the fourth 0 or 1.
pub fn sniff_line(line: &str) -> bool {
    let (n, f) = split::<5>(line, ',');
    n == 5 && f.iter().all(|x| uint(x).is_some()) && parse_op(f[3]).is_some()
}

pub fn sniff_name(_name: &str) -> bool {
    false
}

pub fn create(out: Output, opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    let opts = opts.clone();
    TextWriter::boxed(out, None, move |r: &Request, line: &mut String| {
        let (first, n) = units(r, 512);
        let op = if r.op == Op::Write { 1 } else { 0 };
        let _ = write!(line, "{},{first},{n},{op},{}", r.time_ns / 1_000_000_000, numeric_volume(&opts, r.volume));
        Ok(())
    })
}
