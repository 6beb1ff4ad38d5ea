//! Plain text: one object id per line (libCacheSim's `PLAIN_TXT_TRACE`).
//!
//! ```text
//! 42
//! ```
//!
//! Each id is a block number at `--object-size` bytes ([`ReaderOptions::object_size`], default 4096): the request
//! is a read of `offset` = id × object_size, `len` = object_size, on volume 0 at time 0, no digest. Blank lines
//! and `#` comments are passed over. Not detected (a lone number says too little): pass `--format plain`.
//!
//! The writer writes one line per block the request touches at `object_size` bytes (a zero-length request: the
//! block holding its offset); time and op are lost; it refuses volumes other than 0.

use crate::parse::uint;
use crate::write::{blocks, single_volume, Output, TextWriter};
use crate::{shown, Input, LineCtx, LineParser, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use std::fmt::Write as _;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(LineTrace::boxed_single(input, opts, Plain { unit: opts.object_size().max(1) }))
}

struct Plain {
    unit: u64,
}

impl LineParser for Plain {
    fn parse(&mut self, line: &str, ctx: &LineCtx, _: &mut VolumeMap) -> Result<Option<Request>, TraceError> {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            return Ok(None);
        }
        match uint(t).and_then(|id| id.checked_mul(self.unit)) {
            Some(offset) => Ok(Some(Request { offset, len: self.unit, ..Default::default() })),
            None => Err(ctx.error("an object id (unsigned integer, times the object size below 2^64)", shown(t))),
        }
    }
}

pub fn sniff_line(_line: &str) -> bool {
    false
}

pub fn sniff_name(_name: &str) -> bool {
    false
}

pub fn create(out: Output, opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    let unit = opts.object_size();
    TextWriter::boxed(out, None, move |r: &Request, line: &mut String| {
        single_volume(r, "plain")?;
        for (i, b) in blocks(r, unit).enumerate() {
            if i > 0 {
                line.push('\n');
            }
            let _ = write!(line, "{b}");
        }
        Ok(())
    })
}
