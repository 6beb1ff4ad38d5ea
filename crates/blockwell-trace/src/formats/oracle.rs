//! libCacheSim oracleGeneral: a binary trace of fixed 24-byte little-endian records, often zstd-compressed.
//!
//! ```text
//! offset 0   u32 time               seconds
//! offset 4   u64 obj_id             a packed block key: volume = obj_id >> 48, block = obj_id & (2^48 - 1)
//! offset 12  u32 obj_size           bytes (ignored: the block size is --object-size)
//! offset 16  i64 next_access_vtime  1-based number of the next request to the same object; -1 (or i64::MAX) for none
//! ```
//!
//! | field | → [`Request`] |
//! |---|---|
//! | time | `time_ns` = time × 10^9 |
//! | obj_id | `volume`: the number `obj_id >> 48` (named by its decimal value, numbered by first appearance); `offset` = block × object_size |
//! | obj_size | ignored; `len` = object_size ([`ReaderOptions::object_size`], default 4096) |
//! | next_access_vtime | [`TraceReader::next_access`]: the 0-based index of the next request to the same block (`vtime − 1`) |
//!
//! Every request is a read (the format has no op); no digest. Each record is one request, so request `i` is
//! record `i` and `next_access` indexes requests. The next_access_vtime convention (1-based, -1 for none) is
//! that of libCacheSim's `traceConv`.
//!
//! A file whose length is not a multiple of 24 ends in a truncated record: an error
//! `file:N: expected a 24-byte record (record N at byte offset B), found K bytes`, where N is the 1-based record
//! number (the "line" of [`TraceError::Parse`]). An uncompressed file is checked before its first record is
//! read (so a file in another format given `--format oracle` fails at once); a compressed one when its end is
//! reached.
//!
//! The format has no magic number, so every record is checked for plausibility, and an implausible one is an
//! error `file:N: expected …, found …` like a malformed line (through the same `--skip-bad-lines` budget):
//!
//! - `obj_size` must not be 0 (a file of zeros, or another binary format, is not a trace);
//! - `next_access_vtime` must be -1 or `i64::MAX` (no next access), or a request number from N (the record's
//!   own 1-based number: the next access comes later; N itself is accepted for writers that count from 0) to
//!   2^40 - 1. Text or random bytes read as records give values far beyond that, or negative ones.
//!
//! Records are decoded in bulk straight from the decompressor's buffer (no per-record allocation). Every request
//! being a read of `object_size` bytes, [`TraceReader::unit_size`] says so and [`TraceReader::read_units`] gives
//! the requests as (volume, block) pairs, decoded from the buffer without building a [`Request`]. Detected by a
//! file name containing `oracleGeneral` or ending `.oracle`.
//!
//! The writer writes one record per block each request touches at `object_size` bytes (a zero-length request:
//! the block holding its offset), with `obj_id` the packed key of (volume, block), `obj_size` = object_size and
//! time in seconds. next_access_vtime needs the future, so the writer keeps each record's key (8 bytes) and the
//! time stamps (8+4 bytes per change of second) in memory until [`TraceWriter::finish`], then computes it in one
//! reverse pass over a hash map of the distinct blocks (8 more bytes per record, about 24 per block) and writes
//! the file.

use crate::write::{blocks, Output};
use crate::{
    BadLines, Input, ReaderOptions, Request, TraceError, TraceReader, TraceWriter, UnitRead, WriterOptions, NEVER,
};
use blockwell_core::{BlockKey, Op};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;
use std::path::PathBuf;

/// Bytes per record.
pub const RECORD: usize = 24;
/// Bits of the block number in a packed object id.
const BLOCK_BITS: u32 = 48;
/// Requests decoded ahead for `next_request`.
const CHUNK: usize = 4096;
/// The largest plausible next-access request number (2^40 - 1: about 10^12 requests, beyond any trace).
const MAX_VTIME: i64 = (1 << 40) - 1;

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Ok(Box::new(Oracle {
        input,
        dec: Decoder {
            unit: opts.object_size(),
            max_block: u64::MAX / opts.object_size(),
            vol_ids: vec![u32::MAX; 1 << (64 - BLOCK_BITS)],
            names: Vec::new(),
        },
        skip_limit: opts.skip_bad_lines,
        bad: BadLines::default(),
        tail_checked: false,
        tail_reported: false,
        records: 0,
        carry: [0; RECORD],
        carry_len: 0,
        done: false,
        pending: Vec::new(),
        pending_next: Vec::new(),
        pos: 0,
        last_next: None,
        scratch: Vec::new(),
    }))
}

struct Oracle {
    input: Input,
    dec: Decoder,
    skip_limit: u64,
    bad: BadLines,
    /// Whether a partial last record was reported before reading (uncompressed files, whose length is known).
    tail_checked: bool,
    tail_reported: bool,
    /// Records decoded so far (including skipped ones).
    records: u64,
    /// A record split across two buffer fills.
    carry: [u8; RECORD],
    carry_len: usize,
    done: bool,
    /// Decoded ahead for `next_request`.
    pending: Vec<Request>,
    pending_next: Vec<u64>,
    pos: usize,
    last_next: Option<u64>,
    /// next-access indexes `read_batch` does not return (kept to reuse the allocation).
    scratch: Vec<u64>,
}

/// Record decoding state: the object size and the volume numbering.
struct Decoder {
    unit: u64,
    /// The largest block whose byte offset fits in 64 bits.
    max_block: u64,
    /// Dense volume id by raw volume number (`u32::MAX`: not seen yet).
    vol_ids: Vec<u32>,
    names: Vec<String>,
}

/// Why a record is refused.
#[derive(Clone, Copy, Debug)]
enum Bad {
    /// A block whose byte offset overflows at the object size.
    Overflow(u64),
    /// `obj_size` 0.
    Size,
    /// An impossible `next_access_vtime`.
    Next(i64),
}

impl Decoder {
    /// Decodes a record assuming it is valid, and says whether it is: the checks fold into one flag without a
    /// branch each (the bulk loop tests the flag once per record; [`Decoder::why`] explains a refusal).
    #[inline(always)]
    fn decode_unchecked(&mut self, rec: &[u8], index: u64) -> (Request, u64, bool) {
        let (time, u, next, ok) = self.decode_unit(rec, index);
        let r = Request {
            time_ns: time as u64 * 1_000_000_000,
            volume: u.volume,
            op: Op::Read,
            offset: u.unit.wrapping_mul(self.unit),
            len: self.unit,
            digest: None,
        };
        (r, next, ok)
    }

    /// [`Decoder::decode_unchecked`] into the record's time in seconds, volume and block, and next access.
    #[inline(always)]
    fn decode_unit(&mut self, rec: &[u8], index: u64) -> (u32, UnitRead, u64, bool) {
        let mut b = [0u8; RECORD];
        b.copy_from_slice(&rec[..RECORD]);
        let time = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let id = u64::from_le_bytes([b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11]]);
        let size = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
        let next = i64::from_le_bytes([b[16], b[17], b[18], b[19], b[20], b[21], b[22], b[23]]);
        let raw_vol = (id >> BLOCK_BITS) as usize;
        let block = id & ((1 << BLOCK_BITS) - 1);
        // A later request: its number is at least this record's (1-based, index + 1; the 0-based convention
        // gives index + 1 for the very next request).
        let never = (next == -1) | (next == i64::MAX);
        let later = (next > index as i64) & (next <= MAX_VTIME);
        let ok = (block <= self.max_block) & (size != 0) & (never | later);
        let volume = match self.vol_ids.get(raw_vol) {
            Some(&v) if v != u32::MAX => v,
            _ if ok => self.new_volume(raw_vol),
            _ => 0,
        };
        let next = if never | !ok { NEVER } else { next as u64 - 1 };
        (time, UnitRead { volume, unit: block }, next, ok)
    }

    /// Why record `index` is refused (it is).
    #[cold]
    fn why(&self, rec: &[u8], index: u64) -> Bad {
        let id = u64::from_le_bytes(rec[4..12].try_into().expect("8 bytes"));
        let size = u32::from_le_bytes(rec[12..16].try_into().expect("4 bytes"));
        let next = i64::from_le_bytes(rec[16..24].try_into().expect("8 bytes"));
        let block = id & ((1 << BLOCK_BITS) - 1);
        if block > self.max_block {
            Bad::Overflow(block)
        } else if size == 0 {
            Bad::Size
        } else {
            debug_assert!(!(next == -1 || next == i64::MAX || (next > index as i64 && next <= MAX_VTIME)));
            Bad::Next(next)
        }
    }

    #[cold]
    fn new_volume(&mut self, raw_vol: usize) -> u32 {
        let v = self.names.len() as u32;
        if let Some(slot) = self.vol_ids.get_mut(raw_vol) {
            *slot = v;
        }
        self.names.push(raw_vol.to_string());
        v
    }

    /// The error for record `index` (0-based), refused for `why`.
    fn error(&self, file: &std::path::Path, index: u64, why: Bad) -> TraceError {
        let (expected, found) = match why {
            Bad::Overflow(block) => {
                (format!("a block whose byte offset at {} B fits in 64 bits", self.unit), format!("block {block}"))
            }
            Bad::Size => ("a nonzero obj_size (not an oracleGeneral trace? wrong --format?)".into(), "0".into()),
            Bad::Next(next) => (
                format!(
                    "a next_access_vtime of -1 or from {} to 2^40 (not an oracleGeneral trace? wrong --format?)",
                    index + 1
                ),
                next.to_string(),
            ),
        };
        TraceError::Parse { file: file.to_path_buf(), line: index + 1, expected, found }
    }
}

/// The error for a last record cut short: `records` whole records, then `partial` bytes.
fn partial_record(file: &std::path::Path, records: u64, partial: usize) -> TraceError {
    TraceError::Parse {
        file: file.to_path_buf(),
        line: records + 1,
        expected: format!("a {RECORD}-byte record (record {} at byte offset {})", records + 1, records * RECORD as u64),
        found: match partial {
            1 => "1 byte".into(),
            k => format!("{k} bytes"),
        },
    }
}

/// Where [`Oracle::fill`] puts what it decodes.
trait Sink {
    fn len(&self) -> usize;
    fn reserve(&mut self, n: usize);
    /// Decodes record `index` and keeps it if it is valid; says whether it is (see [`Decoder::decode_unchecked`]).
    fn decode(&mut self, dec: &mut Decoder, rec: &[u8], index: u64) -> bool;
}

/// Requests and their next accesses.
struct Requests<'a>(&'a mut Vec<Request>, &'a mut Vec<u64>);

impl Sink for Requests<'_> {
    #[inline(always)]
    fn len(&self) -> usize {
        self.0.len()
    }

    fn reserve(&mut self, n: usize) {
        self.0.reserve(n);
        self.1.reserve(n);
    }

    #[inline(always)]
    fn decode(&mut self, dec: &mut Decoder, rec: &[u8], index: u64) -> bool {
        let (r, nx, ok) = dec.decode_unchecked(rec, index);
        if ok {
            self.0.push(r);
            self.1.push(nx);
        }
        ok
    }
}

impl Sink for Vec<UnitRead> {
    #[inline(always)]
    fn len(&self) -> usize {
        Vec::len(self)
    }

    fn reserve(&mut self, n: usize) {
        Vec::reserve(self, n);
    }

    #[inline(always)]
    fn decode(&mut self, dec: &mut Decoder, rec: &[u8], index: u64) -> bool {
        let (_, u, _, ok) = dec.decode_unit(rec, index);
        if ok {
            self.push(u);
        }
        ok
    }
}

impl Oracle {
    /// Takes up to `max` of the requests decoded ahead for `next_request`: their range in `pending`.
    fn take_pending(&mut self, max: usize) -> std::ops::Range<usize> {
        let ahead = self.pos..self.pos + (self.pending.len() - self.pos).min(max);
        self.pos = ahead.end;
        ahead
    }

    /// Decodes up to `max` more requests into `out`; fewer only at the end of the file.
    fn fill(&mut self, out: &mut impl Sink, max: usize) -> Result<(), TraceError> {
        if !self.tail_checked {
            // An uncompressed file's length is known: a partial last record is reported before any is read.
            self.tail_checked = true;
            if self.input.compression == crate::Compression::None {
                if let Ok(m) = std::fs::metadata(&self.input.path) {
                    let (records, partial) = (m.len() / RECORD as u64, (m.len() % RECORD as u64) as usize);
                    if partial > 0 && m.is_file() {
                        let e = partial_record(&self.input.path, records, partial);
                        self.tail_reported = true;
                        self.bad.absorb(e, self.skip_limit)?;
                    }
                }
            }
        }
        let target = out.len() + max;
        let file = &self.input.path;
        while out.len() < target && !self.done {
            let buf = match self.input.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => return Err(self.input.read_error(source, "record", self.records)),
            };
            if buf.is_empty() {
                self.done = true;
                if self.carry_len > 0 {
                    let e = partial_record(file, self.records, self.carry_len);
                    self.carry_len = 0;
                    if !self.tail_reported {
                        self.bad.absorb(e, self.skip_limit)?;
                    }
                }
                break;
            }
            let mut refused = None;
            let consumed = if self.carry_len > 0 || buf.len() < RECORD {
                // Stitch a record across fills.
                let take = (RECORD - self.carry_len).min(buf.len());
                self.carry[self.carry_len..self.carry_len + take].copy_from_slice(&buf[..take]);
                self.carry_len += take;
                if self.carry_len == RECORD {
                    self.carry_len = 0;
                    let carry = self.carry;
                    if !out.decode(&mut self.dec, &carry, self.records) {
                        let why = self.dec.why(&carry, self.records);
                        refused = Some(self.dec.error(file, self.records, why));
                    }
                    self.records += 1;
                }
                take
            } else {
                let n = (buf.len() / RECORD).min(target - out.len());
                let mut done = 0;
                out.reserve(n);
                for rec in buf[..n * RECORD].chunks_exact(RECORD) {
                    let index = self.records + done as u64;
                    done += 1;
                    if !out.decode(&mut self.dec, rec, index) {
                        // Rare: judged after the buffer's borrow ends.
                        let why = self.dec.why(rec, index);
                        refused = Some(self.dec.error(file, index, why));
                        break;
                    }
                }
                self.records += done as u64;
                done * RECORD
            };
            self.input.reader.consume(consumed);
            if let Some(e) = refused {
                self.bad.absorb(e, self.skip_limit)?;
            }
        }
        Ok(())
    }
}

impl TraceReader for Oracle {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        if self.pos == self.pending.len() {
            let (mut p, mut n) = (std::mem::take(&mut self.pending), std::mem::take(&mut self.pending_next));
            p.clear();
            n.clear();
            let r = self.fill(&mut Requests(&mut p, &mut n), CHUNK);
            (self.pending, self.pending_next, self.pos) = (p, n, 0);
            r?;
        }
        match self.pending.get(self.pos) {
            Some(&r) => {
                self.last_next = self.pending_next.get(self.pos).copied().filter(|&n| n != NEVER);
                self.pos += 1;
                Ok(Some(r))
            }
            None => Ok(None),
        }
    }

    fn read_batch(&mut self, buf: &mut Vec<Request>, max: usize) -> Result<usize, TraceError> {
        let mut next = std::mem::take(&mut self.scratch);
        let r = self.read_batch_next(buf, &mut next, max);
        self.scratch = next;
        r
    }

    fn read_batch_next(
        &mut self,
        buf: &mut Vec<Request>,
        next: &mut Vec<u64>,
        max: usize,
    ) -> Result<usize, TraceError> {
        buf.clear();
        next.clear();
        let ahead = self.take_pending(max);
        buf.extend_from_slice(&self.pending[ahead.clone()]);
        next.extend_from_slice(&self.pending_next[ahead.clone()]);
        self.fill(&mut Requests(buf, next), max - ahead.len())?;
        self.last_next = next.last().copied().filter(|&n| n != NEVER);
        Ok(buf.len())
    }

    fn unit_size(&self) -> Option<u64> {
        Some(self.dec.unit)
    }

    fn read_units(&mut self, buf: &mut Vec<UnitRead>, max: usize) -> Result<usize, TraceError> {
        buf.clear();
        let ahead = self.take_pending(max);
        let unit = self.dec.unit;
        buf.extend(self.pending[ahead.clone()].iter().map(|r| UnitRead { volume: r.volume, unit: r.offset / unit }));
        self.fill(buf, max - ahead.len())?;
        // The next access of the last request returned is not known here.
        self.last_next = None;
        Ok(buf.len())
    }

    fn volumes(&self) -> &[String] {
        &self.dec.names
    }

    fn skipped(&self) -> &BadLines {
        &self.bad
    }

    fn bytes_read(&self) -> u64 {
        self.input.bytes_read()
    }

    fn has_next_access(&self) -> bool {
        true
    }

    fn next_access(&self) -> Option<u64> {
        self.last_next
    }
}

pub fn sniff_line(_line: &str) -> bool {
    false
}

pub fn sniff_name(name: &str) -> bool {
    name.contains("oraclegeneral") || name.ends_with(".oracle")
}

/// A multiplicative hash for the writer's map of block keys (keys are well spread; SipHash is not needed).
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, k: u64) {
        self.0 = (k ^ (k >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (k >> 32);
    }
}

pub fn create(out: Output, opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    let path = out.path().to_path_buf();
    Ok(Box::new(OracleWriter { out, path, unit: opts.object_size(), keys: Vec::new(), times: Vec::new() }))
}

struct OracleWriter {
    out: Output,
    path: PathBuf,
    unit: u64,
    /// The packed key of every record, in order.
    keys: Vec<u64>,
    /// (first record index, seconds) at each change of time stamp.
    times: Vec<(u64, u32)>,
}

impl OracleWriter {
    fn invalid(&self, message: String) -> TraceError {
        TraceError::Invalid { file: self.path.clone(), message }
    }
}

impl TraceWriter for OracleWriter {
    fn write(&mut self, r: &Request) -> Result<(), TraceError> {
        let secs = u32::try_from(r.time_ns / 1_000_000_000)
            .map_err(|_| self.invalid(format!("time {} ns does not fit the format's 32-bit seconds", r.time_ns)))?;
        if self.times.last().map_or(true, |&(_, t)| t != secs) {
            self.times.push((self.keys.len() as u64, secs));
        }
        for b in blocks(r, self.unit) {
            let key = BlockKey::new(r.volume, b).ok_or_else(|| {
                self.invalid(format!(
                    "volume {} block {b} does not fit a packed object id (volume < 2^16, block < 2^48)",
                    r.volume
                ))
            })?;
            self.keys.push(key.raw());
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<(), TraceError> {
        let obj_size = u32::try_from(self.unit)
            .map_err(|_| self.invalid(format!("object size {} does not fit the format's 32 bits", self.unit)))?;
        // Reverse pass: the next record (1-based) with the same key, or -1.
        let mut next = vec![-1i64; self.keys.len()];
        let mut seen: HashMap<u64, u64, BuildHasherDefault<KeyHasher>> = HashMap::default();
        for (i, &k) in self.keys.iter().enumerate().rev() {
            if let Some(j) = seen.insert(k, i as u64) {
                next[i] = j as i64 + 1;
            }
        }
        drop(seen);
        let mut buf = Vec::with_capacity(RECORD * 4096);
        let mut times = self.times.iter().peekable();
        let mut secs = 0u32;
        for (i, (&k, &nx)) in self.keys.iter().zip(&next).enumerate() {
            while let Some(&&(at, t)) = times.peek() {
                if at > i as u64 {
                    break;
                }
                secs = t;
                times.next();
            }
            buf.extend_from_slice(&secs.to_le_bytes());
            buf.extend_from_slice(&k.to_le_bytes());
            buf.extend_from_slice(&obj_size.to_le_bytes());
            buf.extend_from_slice(&nx.to_le_bytes());
            if buf.len() >= RECORD * 4096 {
                self.out.write_all(&buf).map_err(|e| self.out.io_error(e))?;
                buf.clear();
            }
        }
        self.out.write_all(&buf).map_err(|e| self.out.io_error(e))?;
        self.out.finish()
    }
}
