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

use crate::parse::{decimal, op_letter, scaled, split, uint};
use crate::write::{numeric_volume, push_seconds, Output, TextWriter};
use crate::{CommaFields, Input, LineCtx, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use blockwell_core::Op;
use std::fmt::Write as _;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(LineTrace::boxed(input, opts, CommaFields::new("ASU,LBA,Size,Opcode,Timestamp", request)))
}

fn request(f: [&str; 5], ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Request, TraceError> {
    let asu = ctx.nonblank(f[0], "an ASU")?;
    let offset = ctx.field(f[1], "an LBA in 512 B sectors below 2^55", |lba| scaled(lba, 512))?;
    let len = ctx.field(f[2], "a Size in bytes", uint)?;
    let op = ctx.field(f[3], "an Opcode r or w", op_letter)?;
    let time_ns = ctx.field(f[4], "a Timestamp in seconds", |s| decimal(s, 1_000_000_000))?;
    Ok(Request { time_ns, volume: volumes.id(asu), op, offset, len, digest: None })
}

/// `n,n,n,r|w,seconds[,...]`.
pub fn sniff_line(line: &str) -> bool {
    let (n, f) = split::<5>(line, ',');
    n >= 5
        && f[..3].iter().all(|x| uint(x).is_some())
        && op_letter(f[3]).is_some()
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
