//! Plain text: one object id per line (libCacheSim's `PLAIN_TXT_TRACE`). Each id is a block number at
//! `--object-size` bytes (default 4096); every request is a read of one object. One volume.

use crate::{shown, Input, LineReader, ReaderOptions, Request, TraceError, TraceReader};

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(Box::new(Plain { lines: LineReader::new(input, opts), unit: opts.object_size(), volumes: vec!["0".into()] }))
}

struct Plain {
    lines: LineReader,
    unit: u64,
    volumes: Vec<String>,
}

impl TraceReader for Plain {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        loop {
            let unit = self.unit;
            let Some((line, ctx)) = self.lines.next_line()? else { return Ok(None) };
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            match t.parse::<u64>().ok().and_then(|id| id.checked_mul(unit)) {
                Some(offset) => return Ok(Some(Request { offset, len: unit, ..Default::default() })),
                None => {
                    let e = ctx.error("an object id (unsigned integer)", shown(t));
                    self.lines.skip_or_fail(e)?
                }
            }
        }
    }

    fn volumes(&self) -> &[String] {
        &self.volumes
    }

    fn skipped(&self) -> &crate::BadLines {
        self.lines.bad()
    }

    fn bytes_read(&self) -> u64 {
        self.lines.bytes_read()
    }
}
