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
use crate::{shown, Input, LineCtx, LineParser, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use blockwell_core::Op;
use std::fmt::Write as _;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(LineTrace::boxed(input, opts, Tencent))
}

struct Tencent;

fn parse_op(s: &str) -> Option<Op> {
    match s.trim() {
        "0" => Some(Op::Read),
        "1" => Some(Op::Write),
        _ => None,
    }
}

impl LineParser for Tencent {
    fn parse(&mut self, line: &str, ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Option<Request>, TraceError> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(None);
        }
        let (n, f) = split::<5>(line, ',');
        if n < 5 {
            return Err(
                ctx.error("5 comma-separated fields Timestamp,Offset,Size,IOType,VolumeID", format!("{n} field(s)"))
            );
        }
        let time_ns = scaled(f[0], 1_000_000_000)
            .ok_or_else(|| ctx.error("a Timestamp in seconds below 2^64 ns", shown(f[0])))?;
        let offset =
            scaled(f[1], 512).ok_or_else(|| ctx.error("an Offset in 512 B sectors below 2^55", shown(f[1])))?;
        let len = scaled(f[2], 512).ok_or_else(|| ctx.error("a Size in 512 B sectors below 2^55", shown(f[2])))?;
        let op = parse_op(f[3]).ok_or_else(|| ctx.error("an IOType 0 (read) or 1 (write)", shown(f[3])))?;
        let vol = f[4].trim();
        if vol.is_empty() {
            return Err(ctx.error("a VolumeID", shown(f[4])));
        }
        let volume = volumes.id(vol);
        Ok(Some(Request { time_ns, volume, op, offset, len, digest: None }))
    }
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
