//! Alibaba Cloud block traces (2020): 1000 virtual disks.
//!
//! One request per line, comma separated, no header:
//!
//! ```text
//! device_id,opcode,offset,length,timestamp
//! 419,W,8792731648,4096,1577808000000073
//! ```
//!
//! | field | unit | → [`Request`] |
//! |---|---|---|
//! | device_id | virtual disk number | `volume`: the id as written, numbered by first appearance |
//! | opcode | `R`/`W`, any case | `op` |
//! | offset | bytes | `offset` |
//! | length | bytes | `len` |
//! | timestamp | microseconds (Unix time) | `time_ns` = timestamp × 1000 |
//!
//! No digest. The writer writes the volume name when it is a number (else the volume number) as device_id and
//! truncates time to microseconds.

use crate::parse::{op_letter, scaled, split, uint};
use crate::write::{numeric_volume, Output, TextWriter};
use crate::{CommaFields, Input, LineCtx, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use blockwell_core::Op;
use std::fmt::Write as _;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(LineTrace::boxed(input, opts, CommaFields::new("device_id,opcode,offset,length,timestamp", request)))
}

fn request(f: [&str; 5], ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Request, TraceError> {
    let device = ctx.nonblank(f[0], "a device_id")?;
    let op = ctx.field(f[1], "an opcode R or W", op_letter)?;
    let offset = ctx.field(f[2], "an offset in bytes", uint)?;
    let len = ctx.field(f[3], "a length in bytes", uint)?;
    let time_ns = ctx.field(f[4], "a timestamp in microseconds below 2^64 ns", |us| scaled(us, 1000))?;
    Ok(Request { time_ns, volume: volumes.id(device), op, offset, len, digest: None })
}

/// `n,R|W,n,n,n`.
pub fn sniff_line(line: &str) -> bool {
    let (n, f) = split::<5>(line, ',');
    n == 5 && uint(f[0]).is_some() && op_letter(f[1]).is_some() && f[2..].iter().all(|x| uint(x).is_some())
}

pub fn sniff_name(_name: &str) -> bool {
    false
}

pub fn create(out: Output, opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    let opts = opts.clone();
    TextWriter::boxed(out, None, move |r: &Request, line: &mut String| {
        let op = if r.op == Op::Write { 'W' } else { 'R' };
        let _ = write!(line, "{},{op},{},{},{}", numeric_volume(&opts, r.volume), r.offset, r.len, r.time_ns / 1000);
        Ok(())
    })
}
