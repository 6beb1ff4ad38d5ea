//! libCacheSim vscsi CSV (the CloudPhysics traces as libCacheSim ships them).
//!
//! Header `version,time,op,size,lbn`, then one request a line: `time` in microseconds, `op` the SCSI opcode in
//! hex (`28` READ(10), `2a` WRITE(10); also `08`/`0a` READ/WRITE(6), `a8`/`aa` (12), `88`/`8a` (16)), `size` in
//! bytes, `lbn` in 512 B sectors. One volume.

use crate::{shown, Input, LineCtx, LineReader, ReaderOptions, Request, TraceError, TraceReader};
use blockwell_core::Op;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(Box::new(Vscsi { lines: LineReader::new(input, opts), volumes: vec!["0".into()] }))
}

struct Vscsi {
    lines: LineReader,
    volumes: Vec<String>,
}

fn parse_op(s: &str) -> Option<Op> {
    match s.trim().to_ascii_lowercase().trim_start_matches("0x") {
        "28" | "8" | "08" | "88" | "a8" => Some(Op::Read),
        "2a" | "a" | "0a" | "8a" | "aa" => Some(Op::Write),
        _ => None,
    }
}

fn parse(line: &str, ctx: &LineCtx) -> Result<Request, TraceError> {
    let f: Vec<&str> = line.split(',').collect();
    if f.len() < 5 {
        return Err(ctx.error("5 comma-separated fields version,time,op,size,lbn", format!("{} field(s)", f.len())));
    }
    let time: u64 = f[1].trim().parse().map_err(|_| ctx.error("a time in microseconds", shown(f[1])))?;
    let op = parse_op(f[2]).ok_or_else(|| ctx.error("a SCSI opcode in hex (28 read, 2a write)", shown(f[2])))?;
    let size: u64 = f[3].trim().parse().map_err(|_| ctx.error("a size in bytes", shown(f[3])))?;
    let lbn: u64 = f[4].trim().parse().map_err(|_| ctx.error("an lbn in 512 B sectors", shown(f[4])))?;
    let offset = lbn.checked_mul(512).ok_or_else(|| ctx.error("an lbn below 2^55", shown(f[4])))?;
    Ok(Request { time_ns: time.saturating_mul(1000), volume: 0, op, offset, len: size, digest: None })
}

impl TraceReader for Vscsi {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        loop {
            let Some((line, ctx)) = self.lines.next_line()? else { return Ok(None) };
            let t = line.trim();
            if t.is_empty() || (ctx.line == 1 && t.starts_with("version")) {
                continue;
            }
            match parse(t, ctx) {
                Ok(r) => return Ok(Some(r)),
                Err(e) => self.lines.skip_or_fail(e)?,
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
