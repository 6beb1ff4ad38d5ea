//! ARC / LIRS `.lis` traces (Megiddo & Modha's ARC paper traces: OLTP, P1-P14, DS1, ...).
//!
//! One line per run of blocks, space separated:
//!
//! ```text
//! start_block nblocks ignore request_number
//! 230027 8 0 0
//! ```
//!
//! | field | unit | → [`Request`] |
//! |---|---|---|
//! | start_block | 512 B blocks | `offset` = start_block × 512 |
//! | nblocks | 512 B blocks | `len` = nblocks × 512: one request for the line, which at a 512 B block size is the `nblocks` page requests `start_block .. start_block+nblocks-1` |
//! | ignore, request_number | | ignored (may be absent) |
//!
//! Every request is a read on volume 0, at time 0; no digest. `traces/arc/OLTP.lis.zst` holds 914,145 page
//! requests to 186,880 distinct 512 B pages (checked by this crate's tests). Detected by the `.lis` extension.
//!
//! The writer writes every request (writes too: the format has no op) as its 512 B blocks, rounded outward,
//! with the request number; it refuses volumes other than 0.

use crate::parse::{scaled, split_ws};
use crate::write::{single_volume, units, Output, TextWriter};
use crate::{shown, Input, LineCtx, LineParser, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use std::fmt::Write as _;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(LineTrace::boxed_single(input, opts, Lis))
}

struct Lis;

impl LineParser for Lis {
    fn parse(&mut self, line: &str, ctx: &LineCtx, _: &mut VolumeMap) -> Result<Option<Request>, TraceError> {
        let (n, f) = split_ws::<2>(line);
        if n == 0 {
            return Ok(None);
        }
        if n < 2 {
            return Err(ctx.error("start_block nblocks [ignore request_number]", format!("{n} field(s)")));
        }
        let offset = ctx.field(f[0], "a start_block in 512 B blocks below 2^55", |b| scaled(b, 512))?;
        let len = ctx.field(f[1], "an nblocks count below 2^55", |b| scaled(b, 512))?;
        if offset.checked_add(len).is_none() {
            return Err(ctx.error("a block range below 2^64 bytes", shown(line)));
        }
        Ok(Some(Request { offset, len, ..Default::default() }))
    }
}

pub fn sniff_line(_line: &str) -> bool {
    false
}

pub fn sniff_name(name: &str) -> bool {
    name.ends_with(".lis")
}

pub fn create(out: Output, _opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    let mut n = 0u64;
    TextWriter::boxed(out, None, move |r: &Request, line: &mut String| {
        single_volume(r, "lis")?;
        let (first, count) = units(r, 512);
        let _ = write!(line, "{first} {count} 0 {n}");
        n += 1;
        Ok(())
    })
}
