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
use crate::{shown, Input, LineCtx, LineParser, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use blockwell_core::Op;
use std::fmt::Write as _;

/// The FILETIME the writer starts its time stamps from: 2007-02-22 00:00:00 UTC, the week of the traces.
pub const FILETIME_BASE: u64 = 128_165_760_000_000_000;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(LineTrace::boxed(input, opts, Msr { origin: None, name: String::new() }))
}

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

impl LineParser for Msr {
    fn parse(&mut self, line: &str, ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Option<Request>, TraceError> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(None);
        }
        let (n, f) = split::<7>(line, ',');
        if n < 7 {
            return Err(ctx.error(
                "7 comma-separated fields Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime",
                format!("{n} field(s)"),
            ));
        }
        let ticks = uint(f[0]).ok_or_else(|| ctx.error("a Timestamp in 100 ns FILETIME ticks", shown(f[0])))?;
        let host = f[1].trim();
        if host.is_empty() {
            return Err(ctx.error("a Hostname", shown(f[1])));
        }
        uint(f[2]).ok_or_else(|| ctx.error("a DiskNumber (unsigned integer)", shown(f[2])))?;
        let op = parse_op(f[3]).ok_or_else(|| ctx.error("a Type of Read or Write", shown(f[3])))?;
        let offset = uint(f[4]).ok_or_else(|| ctx.error("an Offset in bytes", shown(f[4])))?;
        let len = uint(f[5]).ok_or_else(|| ctx.error("a Size in bytes", shown(f[5])))?;
        let origin = *self.origin.get_or_insert(ticks);
        self.name.clear();
        self.name.push_str(host);
        self.name.push('_');
        self.name.push_str(f[2].trim());
        let volume = volumes.id(&self.name);
        Ok(Some(Request { time_ns: ticks.saturating_sub(origin) * 100, volume, op, offset, len, digest: None }))
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
