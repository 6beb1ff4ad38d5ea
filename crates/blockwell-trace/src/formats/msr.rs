//! MSR Cambridge block traces (SNIA IOTTA 388): 36 volumes of 13 servers, one week of 2007.
//!
//! One CSV line per request, no header:
//!
//! ```text
//! Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime
//! 128166372003061629,hm,1,Read,3154264064,4096,24095
//! ```
//!
//! | field | unit | → [`Request`] |
//! |---|---|---|
//! | Timestamp | Windows FILETIME, 100 ns ticks | `time_ns` = (Timestamp − first record's Timestamp) × 100 (0 if earlier) |
//! | Hostname, DiskNumber | name, integer | `volume`: the name `Hostname_DiskNumber` (e.g. `hm_1`), numbered by first appearance |
//! | Type | `Read`/`Write`, any case | `op` |
//! | Offset | bytes | `offset` |
//! | Size | bytes | `len` |
//! | ResponseTime | 100 ns ticks | ignored |
//!
//! No digest. The writer writes `Timestamp` = [`FILETIME_BASE`] + `time_ns`/100 (so the output looks like the
//! original traces), splits a volume name `host_N` into Hostname and DiskNumber (any other name becomes the
//! Hostname, with DiskNumber 0), and writes ResponseTime 0.

use crate::parse::{split, uint};
use crate::write::{field_safe, Output, TextWriter};
use crate::{CommaFields, Input, LineCtx, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use blockwell_core::Op;
use std::fmt::Write as _;

/// The FILETIME the writer starts its time stamps from: 2007-02-22 00:00:00 UTC, the week of the traces.
pub const FILETIME_BASE: u64 = 128_165_760_000_000_000;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    let mut msr = Msr { origin: None, name: String::new() };
    Ok(LineTrace::boxed(input, opts, CommaFields::new(FIELDS, move |f, ctx, volumes| msr.request(f, ctx, volumes))))
}

const FIELDS: &str = "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime";

struct Msr {
    origin: Option<u64>,
    name: String,
}

fn parse_op(s: &str) -> Option<Op> {
    let s = s.trim();
    if s.eq_ignore_ascii_case("read") {
        Some(Op::Read)
    } else if s.eq_ignore_ascii_case("write") {
        Some(Op::Write)
    } else {
        None
    }
}

impl Msr {
    fn request(&mut self, f: [&str; 7], ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Request, TraceError> {
        let ticks = ctx.field(f[0], "a Timestamp in 100 ns FILETIME ticks", uint)?;
        let host = ctx.nonblank(f[1], "a Hostname")?;
        ctx.field(f[2], "a DiskNumber (unsigned integer)", uint)?;
        let op = ctx.field(f[3], "a Type of Read or Write", parse_op)?;
        let offset = ctx.field(f[4], "an Offset in bytes", uint)?;
        let len = ctx.field(f[5], "a Size in bytes", uint)?;
        let origin = *self.origin.get_or_insert(ticks);
        self.name.clear();
        self.name.push_str(host);
        self.name.push('_');
        self.name.push_str(f[2].trim());
        let volume = volumes.id(&self.name);
        Ok(Request { time_ns: ticks.saturating_sub(origin) * 100, volume, op, offset, len, digest: None })
    }
}

/// `n,host,n,Read|Write,n,n,n` with a FILETIME-sized time stamp (after 1601 + 31 years: at least 10^16 ticks).
pub fn sniff_line(line: &str) -> bool {
    let (n, f) = split::<7>(line, ',');
    n == 7
        && uint(f[0]).is_some_and(|t| t >= 10_000_000_000_000_000)
        && !f[1].trim().is_empty()
        && uint(f[2]).is_some()
        && parse_op(f[3]).is_some()
        && f[4..].iter().all(|x| uint(x).is_some())
}

pub fn sniff_name(_name: &str) -> bool {
    false
}

pub fn create(out: Output, opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    let opts = opts.clone();
    TextWriter::boxed(out, None, move |r: &Request, line: &mut String| {
        let name = opts.volume_name(r.volume);
        let (host, disk) = match name.rsplit_once('_') {
            Some((h, d)) if !h.is_empty() && uint(d).is_some() => (h, d),
            _ => (&*name, "0"),
        };
        let op = if r.op == Op::Write { "Write" } else { "Read" };
        let ticks = FILETIME_BASE + r.time_ns / 100;
        let _ = write!(line, "{ticks},{},{disk},{op},{},{},0", field_safe(host, ','), r.offset, r.len);
        Ok(())
    })
}
