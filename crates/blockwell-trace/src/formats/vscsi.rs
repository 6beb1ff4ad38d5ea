//! libCacheSim vscsi CSV (the CloudPhysics traces as libCacheSim ships them as text).
//!
//! A header, then one request a line:
//!
//! ```text
//! version,time,op,size,lbn
//! 1,5633898,2a,512,42932745
//! ```
//!
//! | field | unit | → [`Request`] |
//! |---|---|---|
//! | version | | ignored |
//! | time | seconds (libCacheSim's documentation of the sample: "time is in seconds") | `time_ns` = time × 10⁹ |
//! | op | SCSI opcode in hex: `28` READ(10), `2a` WRITE(10); also `08`/`0a` (6), `a8`/`aa` (12), `88`/`8a` (16) | `op` |
//! | size | bytes | `len` |
//! | lbn | 512 B sectors | `offset` = lbn × 512 |
//!
//! One volume (`0`); no digest. `traces/cloudphysics/cloudPhysicsIO.csv` holds 113,872 requests. Detected by
//! the header. The writer writes the header, `28`/`2a`, time in whole seconds, and rounds the offset down to a
//! sector (extending the length by the rounding); it refuses volumes other than 0.

use crate::parse::{scaled, uint};
use crate::write::{single_volume, Output, TextWriter};
use crate::{Input, LineCtx, LineParser, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use blockwell_core::Op;
use std::fmt::Write as _;

const HEADER: &str = "version,time,op,size,lbn";

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(LineTrace::boxed_single(input, opts, Vscsi))
}

struct Vscsi;

fn parse_op(s: &str) -> Option<Op> {
    let s = s.trim();
    let s = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")).unwrap_or(s);
    let code = u8::from_str_radix(s, 16).ok()?;
    match code {
        0x08 | 0x28 | 0x88 | 0xa8 => Some(Op::Read),
        0x0a | 0x2a | 0x8a | 0xaa => Some(Op::Write),
        _ => None,
    }
}

impl LineParser for Vscsi {
    fn parse(&mut self, line: &str, ctx: &LineCtx, _: &mut VolumeMap) -> Result<Option<Request>, TraceError> {
        let t = line.trim();
        if t.is_empty() || (ctx.line == 1 && t.starts_with("version")) {
            return Ok(None);
        }
        let f = ctx.comma_fields::<5>(t, "version,time,op,size,lbn")?;
        let time_ns = ctx.field(f[1], "a time in seconds below 2^64 ns", |s| scaled(s, 1_000_000_000))?;
        let op = ctx.field(f[2], "a SCSI opcode in hex (28 read, 2a write)", parse_op)?;
        let len = ctx.field(f[3], "a size in bytes", uint)?;
        let offset = ctx.field(f[4], "an lbn in 512 B sectors below 2^55", |lbn| scaled(lbn, 512))?;
        Ok(Some(Request { time_ns, volume: 0, op, offset, len, digest: None }))
    }
}

pub fn sniff_line(line: &str) -> bool {
    line.starts_with(HEADER)
}

pub fn sniff_name(_name: &str) -> bool {
    false
}

pub fn create(out: Output, _opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    TextWriter::boxed(out, Some(HEADER), move |r: &Request, line: &mut String| {
        single_volume(r, "vscsi")?;
        let op = if r.op == Op::Write { "2a" } else { "28" };
        let len = r.len.saturating_add(r.offset % 512);
        let _ = write!(line, "1,{},{op},{len},{}", r.time_ns / 1_000_000_000, r.offset / 512);
        Ok(())
    })
}
