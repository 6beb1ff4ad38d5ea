//! SPC traces as the UMass Trace Repository publishes them (Financial1/2, WebSearch1-3).
//!
//! One request per line, comma separated, no header; fields after the fifth are ignored:
//!
//! ```text
//! ASU,LBA,Size,Opcode,Timestamp[,...]
//! 0,303567,3584,w,0.000000
//! ```
//!
//! | field | unit | → [`Request`] |
//! |---|---|---|
//! | ASU | application storage unit | `volume`: the ASU as written, numbered by first appearance |
//! | LBA | 512 B sectors | `offset` = LBA × 512 |
//! | Size | bytes | `len` |
//! | Opcode | `r`/`w`, any case | `op` |
//! | Timestamp | seconds, decimal | `time_ns` (exact to the nanosecond for plain decimals) |
//!
//! No digest. The writer writes the volume name when it is a number (else the volume number) as ASU, rounds
//! the offset down to a sector (the length is in bytes, extended by the rounding), and writes the time with nine
//! decimals.

use crate::parse::{decimal, scaled, split, uint};
use crate::write::{numeric_volume, push_seconds, Output, TextWriter};
use crate::{shown, Input, LineCtx, LineParser, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use blockwell_core::Op;
use std::fmt::Write as _;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(LineTrace::boxed(input, opts, Spc))
}

struct Spc;

impl LineParser for Spc {
    fn parse(&mut self, line: &str, ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Option<Request>, TraceError> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(None);
        }
        let (n, f) = split::<5>(line, ',');
        if n < 5 {
            return Err(ctx.error("5 comma-separated fields ASU,LBA,Size,Opcode,Timestamp", format!("{n} field(s)")));
        }
        let asu = f[0].trim();
        if asu.is_empty() {
            return Err(ctx.error("an ASU", shown(f[0])));
        }
        let offset = scaled(f[1], 512).ok_or_else(|| ctx.error("an LBA in 512 B sectors below 2^55", shown(f[1])))?;
        let len = uint(f[2]).ok_or_else(|| ctx.error("a Size in bytes", shown(f[2])))?;
        let op = crate::parse::op_letter(f[3]).ok_or_else(|| ctx.error("an Opcode r or w", shown(f[3])))?;
        let time_ns = decimal(f[4], 1_000_000_000).ok_or_else(|| ctx.error("a Timestamp in seconds", shown(f[4])))?;
        let volume = volumes.id(asu);
        Ok(Some(Request { time_ns, volume, op, offset, len, digest: None }))
    }
}

/// `n,n,n,r|w,seconds[,...]`.
pub fn sniff_line(line: &str) -> bool {
    let (n, f) = split::<5>(line, ',');
    n >= 5
        && f[..3].iter().all(|x| uint(x).is_some())
        && crate::parse::op_letter(f[3]).is_some()
        && decimal(f[4], 1_000_000_000).is_some()
}

pub fn sniff_name(_name: &str) -> bool {
    false
}

pub fn create(out: Output, opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    let opts = opts.clone();
    TextWriter::boxed(out, None, move |r: &Request, line: &mut String| {
        let lba = r.offset / 512;
        let len = r.len.saturating_add(r.offset % 512);
        let op = if r.op == Op::Write { 'w' } else { 'r' };
        let _ = write!(line, "{},{lba},{len},{op},", numeric_volume(&opts, r.volume));
        push_seconds(line, r.time_ns);
        Ok(())
    })
}
