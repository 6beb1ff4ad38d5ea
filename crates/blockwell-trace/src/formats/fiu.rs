//! FIU traces (homes, mail, web-vm; SNIA IOTTA 390): block I/O with an MD5 of the content, the input for
//! content-based caching.
//!
//! One request per line, space separated, no header:
//!
//! ```text
//! ts_ns pid process lba size R/W major minor md5
//! 89967404265597 4692 syslogd 904265560 8 W 6 0 531e779e4ab1a8fc0ab1f8fe6c0d9f3a
//! ```
//!
//! | field | unit | → [`Request`] |
//! |---|---|---|
//! | ts_ns | nanoseconds | `time_ns` |
//! | pid, process | | ignored (a process name containing spaces is tolerated: fields are taken from both ends) |
//! | lba | 512 B sectors | `offset` = lba × 512 |
//! | size | 512 B sectors | `len` = size × 512 |
//! | R/W | `R`/`W`, any case | `op` |
//! | major minor | device number | `volume`: the name `major,minor` (e.g. `6,0`), numbered by first appearance |
//! | md5 | 32 hex digits | `digest` (as a big-endian `u128`); 32 zeros, what the writer emits for a request without a digest, read as none |
//!
//! The writer writes pid 0 and process `blockwell`, rounds addresses outward to sectors, and takes major and
//! minor from a volume name `maj,min` (else `0` and the volume number).

use crate::parse::{hex128, scaled, split_ws, uint};
use crate::write::{devno_volume, units, Output, TextWriter};
use crate::{shown, Input, LineCtx, LineParser, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use blockwell_core::Op;
use std::fmt::Write as _;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(LineTrace::boxed(input, opts, Fiu { name: String::new() }))
}

struct Fiu {
    name: String,
}

const FIELDS: &str = "9 space-separated fields ts_ns pid process lba size R/W major minor md5";

impl LineParser for Fiu {
    fn parse(&mut self, line: &str, ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Option<Request>, TraceError> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(None);
        }
        let (n, head) = split_ws::<2>(line);
        if n < 9 {
            return Err(ctx.error(FIELDS, format!("{n} field(s)")));
        }
        // The last six fields, from the end (the process name may hold spaces).
        let mut tail = [""; 6];
        for (slot, f) in tail.iter_mut().rev().zip(line.split_ascii_whitespace().rev()) {
            *slot = f;
        }
        let [lba, size, op, major, minor, md5] = tail;
        let time_ns = ctx.field(head[0], "a ts_ns in nanoseconds", uint)?;
        ctx.field(head[1], "a pid", uint)?;
        let offset = ctx.field(lba, "an lba in 512 B sectors below 2^55", |lba| scaled(lba, 512))?;
        let len = ctx.field(size, "a size in 512 B sectors below 2^55", |size| scaled(size, 512))?;
        let op = ctx.field(op, "R or W", crate::parse::op_letter)?;
        let digest = ctx.field(md5, "an md5 of 32 hex digits", hex128)?;
        if uint(major).is_none() || uint(minor).is_none() {
            return Err(ctx.error("a device number: major minor", shown(&format!("{major} {minor}"))));
        }
        self.name.clear();
        self.name.push_str(major);
        self.name.push(',');
        self.name.push_str(minor);
        let volume = volumes.id(&self.name);
        Ok(Some(Request { time_ns, volume, op, offset, len, digest: (digest != 0).then_some(digest) }))
    }
}

/// Nine or more space-separated fields: numbers where numbers go, `R`/`W`, and a 32-hex-digit md5 last.
pub fn sniff_line(line: &str) -> bool {
    let (n, f) = split_ws::<9>(line);
    n == 9
        && [0, 1, 3, 4, 6, 7].iter().all(|&i| uint(f[i]).is_some())
        && crate::parse::op_letter(f[5]).is_some()
        && hex128(f[8]).is_some()
}

pub fn sniff_name(_name: &str) -> bool {
    false
}

pub fn create(out: Output, opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    let opts = opts.clone();
    TextWriter::boxed(out, None, move |r: &Request, line: &mut String| {
        let (lba, n) = units(r, 512);
        let (major, minor) = devno_volume(&opts, r.volume);
        let op = if r.op == Op::Write { 'W' } else { 'R' };
        let md5 = r.digest.unwrap_or(0);
        let _ = write!(line, "{} 0 blockwell {lba} {n} {op} {major} {minor} {md5:032x}", r.time_ns);
        Ok(())
    })
}
