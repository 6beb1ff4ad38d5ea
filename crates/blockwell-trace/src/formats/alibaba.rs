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

use crate::parse::{split, uint};
use crate::write::{numeric_volume, Output, TextWriter};
use crate::{shown, Input, LineCtx, LineParser, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use blockwell_core::Op;
use std::fmt::Write as _;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(LineTrace::boxed(input, opts, Alibaba))
}

struct Alibaba;

impl LineParser for Alibaba {
    fn parse(&mut self, line: &str, ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Option<Request>, TraceError> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(None);
        }
        let (n, f) = split::<5>(line, ',');
        if n < 5 {
            return Err(
                ctx.error("5 comma-separated fields device_id,opcode,offset,length,timestamp", format!("{n} field(s)"))
            );
        }
        let device = f[0].trim();
        if device.is_empty() {
            return Err(ctx.error("a device_id", shown(f[0])));
        }
        let op = crate::parse::op_letter(f[1]).ok_or_else(|| ctx.error("an opcode R or W", shown(f[1])))?;
        let offset = uint(f[2]).ok_or_else(|| ctx.error("an offset in bytes", shown(f[2])))?;
        let len = uint(f[3]).ok_or_else(|| ctx.error("a length in bytes", shown(f[3])))?;
        let time_ns = uint(f[4])
            .and_then(|us| us.checked_mul(1000))
            .ok_or_else(|| ctx.error("a timestamp in microseconds below 2^64 ns", shown(f[4])))?;
        let volume = volumes.id(device);
        Ok(Some(Request { time_ns, volume, op, offset, len, digest: None }))
    }
}

/// `n,R|W,n,n,n`.
pub fn sniff_line(line: &str) -> bool {
    let (n, f) = split::<5>(line, ',');
    n == 5
        && uint(f[0]).is_some()
        && crate::parse::op_letter(f[1]).is_some()
        && f[2..].iter().all(|x| uint(x).is_some())
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
