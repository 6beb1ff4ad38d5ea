//! blkparse text output (Linux blktrace), its default format.
//!
//! One event per line, space separated:
//!
//! ```text
//! maj,min cpu seq time pid action rwbs sector + nsectors [process]
//!   8,0    3        6     0.000010108   697  D  WS 3417048 + 8 [kjournald]
//! ```
//!
//! | field | unit | → [`Request`] |
//! |---|---|---|
//! | maj,min | device number | `volume`: the name `maj,min` (e.g. `8,0`), numbered by first appearance |
//! | cpu, seq, pid, process | | ignored |
//! | time | seconds, decimal | `time_ns` (exact) |
//! | action | `D` issue (this format), `Q` queue (format `blkparse-q`) | events with other actions are passed over |
//! | rwbs | letters | containing `W` → write, else containing `R` → read, else (`N`, discard `D`, flush-only `F`…) passed over |
//! | sector + nsectors | 512 B sectors | `offset` = sector × 512, `len` = nsectors × 512; an event without data (no `sector + n`, or n = 0) is passed over |
//!
//! No digest. blkparse's summary at the end (`CPU0 (8,0):`, `Total (8,0):`, `Throughput …`, `Events …`, …) is
//! passed over: once it starts, lines that are not events are skipped without error. Other lines that are not
//! events are parse errors. The writer writes one `D` (or `Q`) event per request, `R`/`W`, cpu 0, pid 0, process
//! `[blockwell]`, a sequence number from 1, addresses rounded outward to sectors, and the device number from a
//! volume name `maj,min` (else `0` and the volume number).

use crate::parse::{decimal, devno, scaled, split_ws, uint};
use crate::write::{devno_volume, push_seconds, units, Output, TextWriter};
use crate::{shown, Input, LineCtx, LineParser, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use blockwell_core::Op;
use std::fmt::Write as _;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    open_with(input, opts, "D")
}

/// A reader of the events with `action` (`D` or `Q`).
pub fn open_with(input: Input, opts: &ReaderOptions, action: &'static str) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(LineTrace::boxed(input, opts, Blkparse { action, summary: false }))
}

struct Blkparse {
    action: &'static str,
    /// Inside the summary blkparse prints at the end.
    summary: bool,
}

/// The first line of a summary section.
fn summary_start(line: &str) -> bool {
    let cpu = line.strip_prefix("CPU").is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()));
    cpu || ["Total (", "Throughput", "Events (", "Skips:"].iter().any(|p| line.starts_with(p))
}

const EVENT: &str = "a blkparse event 'maj,min cpu seq time pid action rwbs sector + nsectors'";

impl LineParser for Blkparse {
    fn parse(&mut self, line: &str, ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Option<Request>, TraceError> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(None);
        }
        let (n, f) = split_ws::<10>(line);
        if devno(f[0]).is_none() {
            if self.summary || summary_start(line) {
                self.summary = true;
                return Ok(None);
            }
            return Err(ctx.error(EVENT, shown(line)));
        }
        if n < 7 {
            return Err(ctx.error(EVENT, shown(line)));
        }
        if f[5] != self.action {
            return Ok(None);
        }
        let rwbs = f[6];
        let op = if rwbs.contains('W') {
            Op::Write
        } else if rwbs.contains('R') {
            Op::Read
        } else {
            return Ok(None);
        };
        if n < 10 || f[8] != "+" {
            if n < 8 || uint(f[7]).is_none() {
                // No `sector + n`: an event without data (a flush, or one with a note after it).
                return Ok(None);
            }
            return Err(ctx.error("'sector + nsectors'", shown(&f[7..n.min(10)].join(" "))));
        }
        let time_ns = ctx.field(f[3], "a time in seconds", |s| decimal(s, 1_000_000_000))?;
        let offset = ctx.field(f[7], "a sector below 2^55", |s| scaled(s, 512))?;
        let len = ctx.field(f[9], "a sector count below 2^55", |n| scaled(n, 512))?;
        if len == 0 {
            return Ok(None);
        }
        let volume = volumes.id(f[0]);
        Ok(Some(Request { time_ns, volume, op, offset, len, digest: None }))
    }
}

/// `maj,min cpu seq time pid action ...` with numbers where numbers go and a decimal time.
pub fn sniff_line(line: &str) -> bool {
    let (n, f) = split_ws::<7>(line);
    n >= 7
        && devno(f[0]).is_some()
        && [1, 2, 4].iter().all(|&i| uint(f[i]).is_some())
        && f[3].contains('.')
        && decimal(f[3], 1_000_000_000).is_some()
        && (1..=2).contains(&f[5].len())
        && f[5].bytes().all(|b| b.is_ascii_alphabetic())
}

pub fn sniff_name(_name: &str) -> bool {
    false
}

pub fn create(out: Output, opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    create_with(out, opts, "D")
}

/// A writer of `action` (`D` or `Q`) events.
pub fn create_with(
    out: Output,
    opts: &WriterOptions,
    action: &'static str,
) -> Result<Box<dyn TraceWriter>, TraceError> {
    let opts = opts.clone();
    let mut seq = 0u64;
    TextWriter::boxed(out, None, move |r: &Request, line: &mut String| {
        seq += 1;
        let (major, minor) = devno_volume(&opts, r.volume);
        let (sector, n) = units(r, 512);
        let rwbs = if r.op == Op::Write { 'W' } else { 'R' };
        let _ = write!(line, "{major:>3},{minor:<3} 0 {seq:>8} ");
        push_seconds(line, r.time_ns);
        let _ = write!(line, "     0  {action} {rwbs:>2} {sector} + {n} [blockwell]");
        Ok(())
    })
}
