//! Generic CSV (or any separated text) with a column mapping, for traces without a module of their own.
//!
//! The mapping (`--csv-columns`, [`CsvMapping::parse`]) is a comma-separated list of `key=value`:
//!
//! | key | value | default |
//! |---|---|---|
//! | `offset` | 0-based column of the offset | required |
//! | `len` | column of the length | none: every request is `--object-size` bytes |
//! | `time` | column of the time stamp (a decimal number; fractions allowed) | none: time 0 |
//! | `volume` | column of the volume name (any text; numbered by first appearance) | none: one volume `0` |
//! | `op` | column of the operation | none: every request is a read |
//! | `digest` | column of a content digest, 32 hex digits | none |
//! | `offset_unit` | bytes per offset unit, e.g. `512` for sectors | `1` |
//! | `len_unit` | bytes per length unit | `1` |
//! | `time_unit` | `ns`, `us`, `ms` or `s` | `ns` |
//! | `read` | the op values meaning read, separated by `\|`, matched without regard to case | `r\|read` |
//! | `write` | the op values meaning write, likewise | `w\|write` |
//! | `header` | `true` (skip the first line), `false`, or `auto` (skip the first line if it does not parse) | `auto` |
//! | `sep` | the field separator: one character, or `tab`, `space` (runs of blanks), `comma`, `semicolon`, `pipe` | `,` |
//!
//! If only one of `read`/`write` is given, every other op value is the other operation (`write=1` makes
//! everything but `1` a read). Example, for lines like `1577808000000073,419,W,8792731648,4096`:
//!
//! ```text
//! time=0,volume=1,op=2,offset=3,len=4,time_unit=us,read=R,write=W,header=false,sep=,
//! ```
//!
//! `sep=,` may end the list or be followed by `,` and more keys. Mapping errors name the key
//! ([`TraceError::BadMapping`]); a line with too few fields or a malformed value is a parse error naming the
//! column and key. Offsets and lengths are multiplied by their unit with overflow checked.
//!
//! Fields are split by the `csv` crate, so a field may be quoted as in RFC 4180: `"vol,1"` is the one field
//! `vol,1` and `""` inside quotes is one `"`. A quoted field does not span lines (a record is one line): a line
//! whose quote is not closed is a parse error. With `sep=space` (runs of blanks) or a non-ASCII separator,
//! fields are split at the separator and quotes are ordinary characters. Fields are trimmed of surrounding
//! blanks.
//!
//! Without a mapping the reader uses [`CsvMapping::default`], which reads what the writer writes: the header
//! `time_ns,volume,op,offset,len`, then time in nanoseconds, the volume name, `R`/`W`, offset and length in
//! bytes. The writer replaces commas and blanks in volume names with `_` and does not write digests. That header
//! is detected as this format.

use crate::parse::{decimal, hex128, uint};
use crate::write::{field_safe, Output, TextWriter};
use crate::{shown, Input, LineCtx, LineParser, LineTrace, ReaderOptions, Request, TraceError, TraceReader};
use crate::{TraceWriter, VolumeMap, WriterOptions};
use blockwell_core::Op;
use std::fmt::Write as _;

/// The header the writer writes, and the default mapping reads.
pub const HEADER: &str = "time_ns,volume,op,offset,len";

/// The field separator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sep {
    Char(char),
    /// Runs of spaces and tabs.
    Blanks,
}

/// Whether the first line is a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Header {
    Yes,
    No,
    /// A header if it does not parse as a request.
    Auto,
}

/// Which column holds which field, and the units. See the [module documentation](self) for the keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsvMapping {
    pub offset: usize,
    pub len: Option<usize>,
    pub time: Option<usize>,
    pub volume: Option<usize>,
    pub op: Option<usize>,
    pub digest: Option<usize>,
    /// Bytes per offset unit.
    pub offset_unit: u64,
    /// Bytes per length unit.
    pub len_unit: u64,
    /// Nanoseconds per time unit.
    pub time_unit: u64,
    /// Op values meaning read, lower case; empty with `write` set: anything else.
    pub read: Vec<String>,
    /// Op values meaning write, lower case; empty with `read` set: anything else.
    pub write: Vec<String>,
    pub header: Header,
    pub sep: Sep,
}

impl Default for CsvMapping {
    /// The mapping of the writer's output: `time=0,volume=1,op=2,offset=3,len=4` in ns and bytes, `header=auto`.
    fn default() -> Self {
        CsvMapping {
            time: Some(0),
            volume: Some(1),
            op: Some(2),
            offset: 3,
            len: Some(4),
            digest: None,
            offset_unit: 1,
            len_unit: 1,
            time_unit: 1,
            read: vec!["r".into(), "read".into()],
            write: vec!["w".into(), "write".into()],
            header: Header::Auto,
            sep: Sep::Char(','),
        }
    }
}

const KEYS: &str = "offset, len, time, volume, op, digest, offset_unit, len_unit, time_unit, read, write, header, sep";

fn bad(key: &str, expected: impl Into<String>, found: impl Into<String>) -> TraceError {
    TraceError::BadMapping { key: key.into(), expected: expected.into(), found: found.into() }
}

/// Splits `s` into `(key, value)` items at commas, except that `sep=,` takes the comma as its value.
fn items(s: &str) -> Result<Vec<(&str, &str)>, TraceError> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let item_end = rest.find(',').unwrap_or(rest.len());
        let Some(eq) = rest[..item_end].find('=') else {
            let item = rest[..item_end].trim();
            return Err(bad(item, "key=value", shown(item)));
        };
        let key = rest[..eq].trim();
        let after = &rest[eq + 1..];
        let (value, next) = if key == "sep" && after.starts_with(',') {
            (",", &after[1..])
        } else {
            let end = after.find(',').unwrap_or(after.len());
            (after[..end].trim(), &after[end..])
        };
        out.push((key, value));
        rest = next.strip_prefix(',').unwrap_or(next).trim_start();
    }
    Ok(out)
}

impl CsvMapping {
    /// Parses `key=value,...` (see the [module documentation](self)); errors name the key.
    pub fn parse(s: &str) -> Result<Self, TraceError> {
        let mut m = CsvMapping {
            offset: usize::MAX,
            len: None,
            time: None,
            volume: None,
            op: None,
            digest: None,
            ..CsvMapping::default()
        };
        let (mut read, mut write) = (None, None);
        let mut seen: Vec<&str> = Vec::new();
        for (key, value) in items(s)? {
            if seen.contains(&key) {
                return Err(bad(key, "each key once", format!("'{key}' twice")));
            }
            seen.push(key);
            let column = || {
                uint(value)
                    .and_then(|c| usize::try_from(c).ok())
                    .ok_or_else(|| bad(key, "a 0-based column number", shown(value)))
            };
            let unit = || {
                uint(value).filter(|&u| u > 0).ok_or_else(|| bad(key, "a positive whole number of bytes", shown(value)))
            };
            let values = || -> Result<Vec<String>, TraceError> {
                let v: Vec<String> =
                    value.split('|').map(|x| x.trim().to_lowercase()).filter(|x| !x.is_empty()).collect();
                if v.is_empty() {
                    return Err(bad(key, "op values separated by |", shown(value)));
                }
                Ok(v)
            };
            match key {
                "offset" => m.offset = column()?,
                "len" => m.len = Some(column()?),
                "time" => m.time = Some(column()?),
                "volume" => m.volume = Some(column()?),
                "op" => m.op = Some(column()?),
                "digest" => m.digest = Some(column()?),
                "offset_unit" => m.offset_unit = unit()?,
                "len_unit" => m.len_unit = unit()?,
                "time_unit" => {
                    m.time_unit = match value.to_ascii_lowercase().as_str() {
                        "ns" => 1,
                        "us" | "µs" => 1_000,
                        "ms" => 1_000_000,
                        "s" => 1_000_000_000,
                        _ => return Err(bad(key, "ns, us, ms or s", shown(value))),
                    }
                }
                "read" => read = Some(values()?),
                "write" => write = Some(values()?),
                "header" => {
                    m.header = match value.to_ascii_lowercase().as_str() {
                        "true" | "yes" | "1" => Header::Yes,
                        "false" | "no" | "0" => Header::No,
                        "auto" => Header::Auto,
                        _ => return Err(bad(key, "true, false or auto", shown(value))),
                    }
                }
                "sep" => {
                    m.sep = match value {
                        "tab" | "\\t" => Sep::Char('\t'),
                        "space" | "blank" | "whitespace" => Sep::Blanks,
                        "comma" => Sep::Char(','),
                        "semicolon" => Sep::Char(';'),
                        "pipe" => Sep::Char('|'),
                        v if v.chars().count() == 1 => Sep::Char(v.chars().next().unwrap_or(',')),
                        _ => {
                            return Err(bad(key, "one character, or tab, space, comma, semicolon, pipe", shown(value)))
                        }
                    }
                }
                _ => return Err(bad(key, format!("one of the keys {KEYS}"), shown(key))),
            }
        }
        if m.offset == usize::MAX {
            return Err(bad("offset", "an offset column (offset=N)", "none"));
        }
        match (read, write) {
            (Some(r), Some(w)) => {
                if let Some(both) = r.iter().find(|v| w.contains(v)) {
                    return Err(bad("write", "values distinct from read's", format!("'{both}' in both")));
                }
                (m.read, m.write) = (r, w);
            }
            (Some(r), None) => (m.read, m.write) = (r, Vec::new()),
            (None, Some(w)) => (m.read, m.write) = (Vec::new(), w),
            (None, None) => {}
        }
        Ok(m)
    }

    /// The highest column the mapping uses.
    fn max_column(&self) -> usize {
        [Some(self.offset), self.len, self.time, self.volume, self.op, self.digest]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or(0)
    }

    fn op_of(&self, v: &str) -> Option<Op> {
        let matches = |list: &[String]| list.iter().any(|x| x.eq_ignore_ascii_case(v));
        if self.read.is_empty() {
            return Some(if matches(&self.write) { Op::Write } else { Op::Read });
        }
        if self.write.is_empty() {
            return Some(if matches(&self.read) { Op::Read } else { Op::Write });
        }
        if matches(&self.read) {
            Some(Op::Read)
        } else if matches(&self.write) {
            Some(Op::Write)
        } else {
            None
        }
    }
}

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    let map = opts.csv.clone().unwrap_or_default();
    let single = map.volume.is_none();
    let splitter = match map.sep {
        Sep::Char(c) if c.is_ascii() => Splitter::Csv(Box::new(new_csv_reader(c as u8)), c as u8),
        sep => Splitter::Plain(sep, Vec::new()),
    };
    let parser = Csv { splitter, record: csv::ByteRecord::new(), object_size: opts.object_size(), map };
    Ok(if single { LineTrace::boxed_single(input, opts, parser) } else { LineTrace::boxed(input, opts, parser) })
}

/// The message of the error [`Feed`] returns when a quoted field is still open at the end of the line.
const OPEN_QUOTE: &str = "a quoted field is not closed on its line";

/// The `csv` reader's input: the current line and its newline, then an error if more is asked for (a quote
/// left open), so that a record never runs into the next line.
struct Feed {
    line: Vec<u8>,
    pos: usize,
}

impl std::io::Read for Feed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let rest = &self.line[self.pos..];
        if rest.is_empty() {
            return Err(std::io::Error::other(OPEN_QUOTE));
        }
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.pos += n;
        Ok(n)
    }
}

fn new_csv_reader(sep: u8) -> csv::Reader<Feed> {
    csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .delimiter(sep)
        .terminator(csv::Terminator::Any(b'\n'))
        .buffer_capacity(1 << 12)
        .from_reader(Feed { line: Vec::with_capacity(256), pos: 0 })
}

/// How a line becomes fields.
enum Splitter {
    /// The `csv` crate (quotes), fed one line at a time; the separator byte.
    Csv(Box<csv::Reader<Feed>>, u8),
    /// Runs of blanks, or a non-ASCII separator, without quoting: byte ranges of the fields (reused).
    Plain(Sep, Vec<(usize, usize)>),
}

struct Csv {
    map: CsvMapping,
    object_size: u64,
    splitter: Splitter,
    /// The current line's fields, with `Splitter::Csv` (reused).
    record: csv::ByteRecord,
}

impl Csv {
    /// Splits `line` into fields; returns how many.
    fn split(&mut self, line: &str, ctx: &LineCtx) -> Result<usize, TraceError> {
        match &mut self.splitter {
            Splitter::Csv(rdr, sep) => {
                let feed = rdr.get_mut();
                feed.line.clear();
                feed.line.extend_from_slice(line.as_bytes());
                feed.line.push(b'\n');
                feed.pos = 0;
                match rdr.read_byte_record(&mut self.record) {
                    Ok(true) => Ok(self.record.len()),
                    Ok(false) => Ok(0),
                    Err(e) => {
                        // The reader is mid-record: start afresh for the next line.
                        **rdr = new_csv_reader(*sep);
                        let open = matches!(e.kind(), csv::ErrorKind::Io(io) if io.to_string() == OPEN_QUOTE);
                        Err(if open {
                            ctx.error("a closing quote on the same line", shown(line))
                        } else {
                            ctx.error("CSV fields", format!("{} ({e})", shown(line)))
                        })
                    }
                }
            }
            Splitter::Plain(sep, fields) => {
                fields.clear();
                let base = line.as_ptr() as usize;
                let mut push = |f: &str| fields.push((f.as_ptr() as usize - base, f.len()));
                match *sep {
                    Sep::Char(c) => line.split(c).for_each(&mut push),
                    Sep::Blanks => line.split([' ', '\t']).filter(|f| !f.is_empty()).for_each(&mut push),
                }
                Ok(fields.len())
            }
        }
    }

    fn request(&mut self, line: &str, ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Request, TraceError> {
        let n = self.split(line, ctx)?;
        let need = self.map.max_column() + 1;
        if n < need {
            return Err(ctx.error(format!("at least {need} fields"), format!("{n} field(s)")));
        }
        let (splitter, record) = (&self.splitter, &self.record);
        let field = |c: usize| -> &str {
            let f = match splitter {
                // The line is UTF-8 and unquoting removes only ASCII quotes, so every field is UTF-8.
                Splitter::Csv(..) => record.get(c).and_then(|b| std::str::from_utf8(b).ok()).unwrap_or(""),
                Splitter::Plain(_, fields) => {
                    let (at, n) = fields[c];
                    line.get(at..at + n).unwrap_or("")
                }
            };
            f.trim()
        };
        let m = &self.map;
        let what = |key: &str, c: usize, what: &str| format!("{what} in column {c} ({key})");
        let c = m.offset;
        let offset = uint(field(c))
            .and_then(|v| v.checked_mul(m.offset_unit))
            .ok_or_else(|| ctx.error(what("offset", c, "an offset below 2^64 bytes"), shown(field(c))))?;
        let len = match m.len {
            None => self.object_size,
            Some(c) => uint(field(c))
                .and_then(|v| v.checked_mul(m.len_unit))
                .ok_or_else(|| ctx.error(what("len", c, "a length below 2^64 bytes"), shown(field(c))))?,
        };
        let time_ns = match m.time {
            None => 0,
            Some(c) => decimal(field(c), m.time_unit)
                .ok_or_else(|| ctx.error(what("time", c, "a time below 2^64 ns"), shown(field(c))))?,
        };
        let op = match m.op {
            None => Op::Read,
            Some(c) => m.op_of(field(c)).ok_or_else(|| {
                let ops = format!("an op ({} or {})", m.read.join("|"), m.write.join("|"));
                ctx.error(what("op", c, &ops), shown(field(c)))
            })?,
        };
        let digest = match m.digest {
            None => None,
            Some(c) => {
                Some(hex128(field(c)).ok_or_else(|| ctx.error(what("digest", c, "32 hex digits"), shown(field(c))))?)
            }
        };
        let volume = match m.volume {
            None => 0,
            Some(c) => {
                let v = field(c);
                if v.is_empty() {
                    return Err(ctx.error(what("volume", c, "a volume name"), shown(v)));
                }
                volumes.id(v)
            }
        };
        Ok(Request { time_ns, volume, op, offset, len, digest })
    }
}

impl LineParser for Csv {
    fn parse(&mut self, line: &str, ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Option<Request>, TraceError> {
        if line.trim().is_empty() {
            return Ok(None);
        }
        if ctx.line == 1 {
            match self.map.header {
                Header::Yes => return Ok(None),
                Header::Auto => return Ok(self.request(line, ctx, volumes).ok()),
                Header::No => {}
            }
        }
        self.request(line, ctx, volumes).map(Some)
    }
}

pub fn sniff_line(line: &str) -> bool {
    line == HEADER
}

pub fn sniff_name(_name: &str) -> bool {
    false
}

pub fn create(out: Output, opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    let opts = opts.clone();
    TextWriter::boxed(out, Some(HEADER), move |r: &Request, line: &mut String| {
        let name = opts.volume_name(r.volume);
        let op = if r.op == Op::Write { 'W' } else { 'R' };
        let _ = write!(line, "{},{},{op},{},{}", r.time_ns, field_safe(&name, ','), r.offset, r.len);
        Ok(())
    })
}
