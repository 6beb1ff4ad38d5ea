//! # blockwell-trace
//!
//! Streaming readers (and writers) for public block-trace formats, one module per format under
//! [`formats`]. A reader yields [`Request`]s in byte units and never holds the whole trace in memory; `.gz`
//! and `.zst` files are decompressed transparently. A malformed line is an error naming the place,
//! `file:line: expected …, found …`, unless [`ReaderOptions::skip_bad_lines`] allows skipping it.
//!
//! - [`open`] a trace (format given, or detected by [`formats::detect`] from the name or first line), then pull
//!   [`TraceReader::next_request`] or [`TraceReader::read_batch`]. Volumes are numbered densely by first
//!   appearance; [`TraceReader::volumes`] keeps their names.
//! - Formats that record the future (oracleGeneral) also give each request's next-access index
//!   ([`TraceReader::next_access`], [`TraceReader::read_batch_next`]), for OPT without a second pass.
//! - [`create`] a writer of any format; see [`mod@write`] for what each format can hold.
//! - A text format is a [`LineParser`] run by [`LineTrace`], which owns line numbering and the skip budget.

use blockwell_core::Op;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

pub mod formats;
pub mod parse;
pub mod write;

pub use formats::Format;
pub use write::{create, Output, TraceWriter, WriterOptions};

/// One I/O request of a trace, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Request {
    /// Time stamp in nanoseconds from the trace's own origin (0 when the format has none).
    pub time_ns: u64,
    /// Dense volume number, in order of first appearance (see [`TraceReader::volumes`]).
    pub volume: u32,
    pub op: Op,
    /// Byte offset within the volume.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// Content digest of the data (FIU traces carry an MD5 per block), if the format has one.
    pub digest: Option<u128>,
}

/// A request of a trace whose requests are all reads of one size ([`TraceReader::unit_size`]): its volume and
/// the unit it reads (its byte offset over the unit size).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct UnitRead {
    /// As [`Request::volume`].
    pub volume: u32,
    pub unit: u64,
}

/// What went wrong reading a trace.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// A line or record that does not parse. Displays as `file:line: expected …, found …`.
    #[error("{}:{line}: expected {expected}, found {found}", file.display())]
    Parse { file: PathBuf, line: u64, expected: String, found: String },
    /// More malformed lines than `--skip-bad-lines` allows.
    #[error("{}: more than {limit} malformed lines; first: {first}", file.display())]
    TooManyBad { file: PathBuf, limit: u64, first: String },
    #[error("{}: {source}", file.display())]
    Io { file: PathBuf, source: io::Error },
    /// A `.gz` or `.zst` file that ends in the middle of its compressed stream (a cut-off download or copy).
    /// `at` is the last complete line (or record, for binary formats) read before the cut; 0 when none was.
    #[error("{}: truncated compressed stream after {what} {at} (the file is cut short; re-download or re-copy it)", file.display())]
    Truncated { file: PathBuf, what: &'static str, at: u64 },
    #[error("{}: cannot tell the trace format from the name or first line; pass --format ({})", file.display(), Format::names().join(", "))]
    UnknownFormat { file: PathBuf },
    #[error("unknown trace format '{0}' (known: {known})", known = Format::names().join(", "))]
    BadFormatName(String),
    #[error("{}: {message}", file.display())]
    Invalid { file: PathBuf, message: String },
    /// A malformed `--csv-columns` mapping, naming the key (see [`formats::csv::CsvMapping::parse`]).
    #[error("csv mapping key '{key}': expected {expected}, found {found}")]
    BadMapping { key: String, expected: String, found: String },
}

/// Reader settings.
#[derive(Clone, Debug, Default)]
pub struct ReaderOptions {
    /// Skip up to this many malformed lines (counted and reported) instead of failing at the first.
    pub skip_bad_lines: u64,
    /// Column mapping for the generic CSV format (see [`formats::csv`]).
    pub csv: Option<formats::csv::CsvMapping>,
    /// Bytes per object id for formats that name objects rather than byte ranges (oracleGeneral, plain
    /// block-id text): object `i` is the byte range `i*object_size .. (i+1)*object_size`. Default 4096.
    pub object_size: Option<u64>,
}

impl ReaderOptions {
    pub fn object_size(&self) -> u64 {
        self.object_size.unwrap_or(4096).max(1)
    }
}

/// A stream of requests.
pub trait TraceReader: Send {
    /// The next request, `Ok(None)` at the end.
    fn next_request(&mut self) -> Result<Option<Request>, TraceError>;

    /// Fills `buf` (cleared first) with up to `max` requests; returns how many. 0 means the end.
    fn read_batch(&mut self, buf: &mut Vec<Request>, max: usize) -> Result<usize, TraceError> {
        buf.clear();
        while buf.len() < max {
            match self.next_request()? {
                Some(r) => buf.push(r),
                None => break,
            }
        }
        Ok(buf.len())
    }

    /// When every request of the trace is a read of one length at a multiple of it (oracleGeneral): that length.
    /// [`TraceReader::read_units`] then gives the requests without what they do not need (time stamps, lengths).
    fn unit_size(&self) -> Option<u64> {
        None
    }

    /// Fills `buf` (cleared first) with up to `max` requests, those [`TraceReader::read_batch`] would give, as
    /// [`UnitRead`]s; returns how many, 0 at the end. With [`TraceReader::unit_size`] `Some(u)`, each request is
    /// a read of `u` bytes at `unit · u`; without, `unit` is the request's offset over its length (over 1 for an
    /// empty request), which loses what the request was.
    fn read_units(&mut self, buf: &mut Vec<UnitRead>, max: usize) -> Result<usize, TraceError> {
        let mut raw = Vec::with_capacity(max.min(1 << 16));
        let n = self.read_batch(&mut raw, max)?;
        buf.clear();
        buf.extend(raw.iter().map(|r| UnitRead { volume: r.volume, unit: r.offset / r.len.max(1) }));
        Ok(n)
    }

    /// Names of the volumes seen so far, indexed by [`Request::volume`].
    fn volumes(&self) -> &[String];

    /// Malformed lines skipped so far (with `skip_bad_lines`), with the first few messages.
    fn skipped(&self) -> &BadLines;

    /// Compressed bytes consumed so far (for progress bars).
    fn bytes_read(&self) -> u64;

    /// Whether the format records the future: [`TraceReader::next_access`] is meaningful (oracleGeneral).
    fn has_next_access(&self) -> bool {
        false
    }

    /// For the request last returned by [`TraceReader::next_request`]: the 0-based index, in this trace, of the
    /// next request to the same object, or `None` when there is none (or the format does not record it; see
    /// [`TraceReader::has_next_access`]). Used by OPT/Belady without a second pass.
    fn next_access(&self) -> Option<u64> {
        None
    }

    /// Like [`TraceReader::read_batch`], also filling `next` (cleared first) with each request's
    /// [`TraceReader::next_access`], [`NEVER`] for none.
    fn read_batch_next(
        &mut self,
        buf: &mut Vec<Request>,
        next: &mut Vec<u64>,
        max: usize,
    ) -> Result<usize, TraceError> {
        buf.clear();
        next.clear();
        while buf.len() < max {
            match self.next_request()? {
                Some(r) => {
                    buf.push(r);
                    next.push(self.next_access().unwrap_or(NEVER));
                }
                None => break,
            }
        }
        Ok(buf.len())
    }
}

/// The next-access index of a request that is never requested again (see [`TraceReader::read_batch_next`]).
pub const NEVER: u64 = u64::MAX;

/// Malformed lines skipped under `--skip-bad-lines`.
#[derive(Clone, Debug, Default)]
pub struct BadLines {
    pub count: u64,
    /// The first few messages, `file:line: expected …, found …`.
    pub examples: Vec<String>,
}

impl BadLines {
    /// Records a parse error if the budget allows; otherwise returns the error to raise.
    pub fn absorb(&mut self, err: TraceError, limit: u64) -> Result<(), TraceError> {
        if self.count >= limit {
            return Err(match err {
                e @ TraceError::Parse { .. } if limit == 0 => e,
                e => TraceError::TooManyBad {
                    file: match &e {
                        TraceError::Parse { file, .. } => file.clone(),
                        _ => PathBuf::new(),
                    },
                    limit,
                    first: self.examples.first().cloned().unwrap_or_else(|| e.to_string()),
                },
            });
        }
        self.count += 1;
        if self.examples.len() < 5 {
            self.examples.push(err.to_string());
        }
        Ok(())
    }
}

/// Assigns dense numbers to volume names in order of first appearance.
#[derive(Clone, Debug, Default)]
pub struct VolumeMap {
    names: Vec<String>,
    index: std::collections::HashMap<String, u32>,
    /// The id returned last: traces mostly repeat the previous volume, which skips the hash lookup.
    last: Option<u32>,
}

impl VolumeMap {
    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(l) = self.last {
            if self.names[l as usize] == name {
                return l;
            }
        }
        let i = match self.index.get(name) {
            Some(&i) => i,
            None => {
                let i = self.names.len() as u32;
                self.names.push(name.to_string());
                self.index.insert(name.to_string(), i);
                i
            }
        };
        self.last = Some(i);
        i
    }

    /// A map holding the single volume `"0"` (formats without volumes).
    pub fn single() -> Self {
        let mut m = VolumeMap::default();
        m.id("0");
        m
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn names(&self) -> &[String] {
        &self.names
    }
}

/// Counts bytes pulled through a reader (the compressed side), for progress reporting.
pub struct Counting<R> {
    inner: R,
    count: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// An opened, decompressed input with its byte counter.
pub struct Input {
    pub path: PathBuf,
    pub reader: Box<dyn BufRead + Send>,
    pub consumed: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The compression of the file (the reader decompresses).
    pub compression: Compression,
}

impl Input {
    pub fn bytes_read(&self) -> u64 {
        self.consumed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The error for an I/O error reading this input, `at` complete lines (or records: `what`) in. A
    /// compressed stream that ends early (the decompressor's `UnexpectedEof`) is [`TraceError::Truncated`].
    pub fn read_error(&self, source: io::Error, what: &'static str, at: u64) -> TraceError {
        if self.compression != Compression::None && source.kind() == io::ErrorKind::UnexpectedEof {
            TraceError::Truncated { file: self.path.clone(), what, at }
        } else {
            TraceError::Io { file: self.path.clone(), source }
        }
    }
}

/// The compression a file uses, from its magic bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

/// Opens `path`, detecting gzip/zstd by magic bytes, and returns a buffered decompressed stream.
pub fn open_input(path: &Path) -> Result<Input, TraceError> {
    let io_err = |source| TraceError::Io { file: path.to_path_buf(), source };
    let f = File::open(path).map_err(io_err)?;
    let consumed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut raw = BufReader::with_capacity(1 << 20, Counting { inner: f, count: consumed.clone() });
    let magic = raw.fill_buf().map_err(io_err)?;
    let comp = if magic.starts_with(&[0x1f, 0x8b]) {
        Compression::Gzip
    } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Compression::Zstd
    } else {
        Compression::None
    };
    let reader: Box<dyn BufRead + Send> = match comp {
        Compression::None => Box::new(raw),
        Compression::Gzip => Box::new(BufReader::with_capacity(1 << 20, flate2::bufread::MultiGzDecoder::new(raw))),
        Compression::Zstd => {
            Box::new(BufReader::with_capacity(1 << 20, zstd::stream::read::Decoder::with_buffer(raw).map_err(io_err)?))
        }
    };
    Ok(Input { path: path.to_path_buf(), reader, consumed, compression: comp })
}

/// Opens a trace, detecting the format from the file name or first line when `format` is `None`.
///
/// An empty file (after decompression) whose format cannot be detected opens as a reader of zero requests, so
/// that callers report "empty trace" rather than "unknown format".
pub fn open(path: &Path, format: Option<Format>, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    let format = match format {
        Some(f) => f,
        None => match formats::detect(path) {
            Ok(f) => f,
            Err(e @ TraceError::UnknownFormat { .. }) => {
                let mut input = open_input(path)?;
                let empty = match input.reader.fill_buf() {
                    Ok(b) => b.is_empty(),
                    Err(source) => return Err(input.read_error(source, "line", 0)),
                };
                return if empty { Ok(Box::new(Empty::default())) } else { Err(e) };
            }
            Err(e) => return Err(e),
        },
    };
    formats::open_format(format, open_input(path)?, opts)
}

/// The reader of an empty trace.
#[derive(Default)]
struct Empty {
    bad: BadLines,
}

impl TraceReader for Empty {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        Ok(None)
    }
    fn volumes(&self) -> &[String] {
        &[]
    }
    fn skipped(&self) -> &BadLines {
        &self.bad
    }
    fn bytes_read(&self) -> u64 {
        0
    }
}

/// Where a line reader is, for error messages.
#[derive(Clone, Debug)]
pub struct Location {
    pub file: PathBuf,
    pub line: u64,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// File and line of the line being parsed; builds `file:line` errors.
#[derive(Clone, Debug)]
pub struct LineCtx {
    pub file: PathBuf,
    /// 1-based number of the current line.
    pub line: u64,
}

impl LineCtx {
    /// A parse error at this line.
    pub fn error(&self, expected: impl Into<String>, found: impl Into<String>) -> TraceError {
        TraceError::Parse { file: self.file.clone(), line: self.line, expected: expected.into(), found: found.into() }
    }

    /// `parse(field)`, or an error expecting `expected` that shows this same field.
    #[inline]
    pub fn field<T>(
        &self,
        field: &str,
        expected: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<T, TraceError> {
        parse(field).ok_or_else(|| self.error(expected, shown(field)))
    }

    /// `field` trimmed, or an error expecting `expected` when nothing is left.
    #[inline]
    pub fn nonblank<'a>(&self, field: &'a str, expected: &str) -> Result<&'a str, TraceError> {
        let t = field.trim();
        if t.is_empty() {
            return Err(self.error(expected, shown(field)));
        }
        Ok(t)
    }

    /// The first `N` comma-separated fields of `line`, or an error when it has fewer; `names` lists the fields,
    /// comma separated, for that error.
    #[inline]
    pub fn comma_fields<'a, const N: usize>(&self, line: &'a str, names: &str) -> Result<[&'a str; N], TraceError> {
        let (n, f) = parse::split::<N>(line, ',');
        if n < N {
            return Err(self.error(format!("{N} comma-separated fields {names}"), format!("{n} field(s)")));
        }
        Ok(f)
    }
}

/// Longest line a text reader accepts: anything longer is binary data or the wrong format, and is not
/// buffered (the reader stays streaming whatever the input).
pub const MAX_LINE: usize = 64 * 1024;

/// Shared machinery of line-oriented formats: reads lines, counts them, and applies the skip-bad-lines
/// budget. Lines that are not UTF-8 or longer than [`MAX_LINE`] are malformed lines (through the same budget).
/// Most formats use it through [`LineTrace`]; by hand:
///
/// ```ignore
/// while let Some((line, ctx)) = self.lines.next_line()? {
///     match parse(line, ctx) { Ok(r) => return Ok(Some(r)), Err(e) => { self.lines.skip_or_fail(e)?; } }
/// }
/// ```
pub struct LineReader {
    input: Input,
    buf: Vec<u8>,
    ctx: LineCtx,
    skip_limit: u64,
    bad: BadLines,
}

/// Appends the next line (with its newline) to `out`, reading at most up to the newline. Returns the bytes
/// consumed and whether the line was longer than `max` (then `out` is left empty and the rest of the line is
/// consumed without being stored).
fn read_line_bounded(r: &mut dyn BufRead, out: &mut Vec<u8>, max: usize) -> io::Result<(usize, bool)> {
    let mut total = 0;
    let mut too_long = false;
    loop {
        let avail = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if avail.is_empty() {
            return Ok((total, too_long));
        }
        let (chunk, done) = match avail.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (avail.len(), false),
        };
        if !too_long {
            if out.len() + chunk > max + 2 {
                too_long = true;
                out.clear();
            } else {
                out.extend_from_slice(&avail[..chunk]);
            }
        }
        r.consume(chunk);
        total += chunk;
        if done {
            return Ok((total, too_long));
        }
    }
}

impl LineReader {
    pub fn new(input: Input, opts: &ReaderOptions) -> Self {
        let ctx = LineCtx { file: input.path.clone(), line: 0 };
        LineReader { input, buf: Vec::new(), ctx, skip_limit: opts.skip_bad_lines, bad: BadLines::default() }
    }

    pub fn path(&self) -> &Path {
        &self.input.path
    }

    /// Line number of the last line returned (1-based).
    pub fn line_no(&self) -> u64 {
        self.ctx.line
    }

    /// The next raw line (without its newline) and its context, or `None` at the end. Blank lines are
    /// returned too; lines that are not text are counted against the skip budget and passed over, or fail.
    pub fn next_line(&mut self) -> Result<Option<(&str, &LineCtx)>, TraceError> {
        loop {
            self.buf.clear();
            let (n, too_long) = read_line_bounded(&mut *self.input.reader, &mut self.buf, MAX_LINE)
                .map_err(|source| self.input.read_error(source, "line", self.ctx.line))?;
            if n == 0 {
                return Ok(None);
            }
            self.ctx.line += 1;
            let err = if too_long {
                self.ctx.error(
                    format!("a line of at most {MAX_LINE} bytes"),
                    "a longer line (binary data? wrong --format?)",
                )
            } else if std::str::from_utf8(&self.buf).is_err() {
                self.ctx.error("UTF-8 text", "binary data (wrong --format?)")
            } else {
                break;
            };
            self.bad.absorb(err, self.skip_limit)?;
        }
        let text = std::str::from_utf8(&self.buf).unwrap_or_default();
        Ok(Some((text.trim_end_matches(['\n', '\r']), &self.ctx)))
    }

    /// A parse error at the current line.
    pub fn error(&self, expected: impl Into<String>, found: impl Into<String>) -> TraceError {
        self.ctx.error(expected, found)
    }

    /// Applies the skip budget to `err`: `Ok(())` means skip the line and go on.
    pub fn skip_or_fail(&mut self, err: TraceError) -> Result<(), TraceError> {
        self.bad.absorb(err, self.skip_limit)
    }

    pub fn bad(&self) -> &BadLines {
        &self.bad
    }

    pub fn bytes_read(&self) -> u64 {
        self.input.bytes_read()
    }
}

/// The per-line part of a text format: [`LineTrace`] does the rest (reading, line numbers, skip budget,
/// volume names).
pub trait LineParser: Send {
    /// Parses one line (without its newline): `Ok(Some(request))`, `Ok(None)` for a line that carries no
    /// request (blank, header, comment, an event that is not an I/O), or a parse error built with `ctx`.
    fn parse(&mut self, line: &str, ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Option<Request>, TraceError>;
}

/// The [`LineParser`] of a format with one request per line in `N` or more comma-separated fields (no header;
/// blank lines carry no request, fields after the `N`th are ignored).
pub struct CommaFields<const N: usize, F> {
    /// The fields, comma separated, for the error on a line with fewer.
    names: &'static str,
    /// The request of a line from its first `N` fields (each as written, untrimmed).
    request: F,
}

impl<const N: usize, F> CommaFields<N, F>
where
    F: FnMut([&str; N], &LineCtx, &mut VolumeMap) -> Result<Request, TraceError> + Send,
{
    pub fn new(names: &'static str, request: F) -> Self {
        CommaFields { names, request }
    }
}

impl<const N: usize, F> LineParser for CommaFields<N, F>
where
    F: FnMut([&str; N], &LineCtx, &mut VolumeMap) -> Result<Request, TraceError> + Send,
{
    fn parse(&mut self, line: &str, ctx: &LineCtx, volumes: &mut VolumeMap) -> Result<Option<Request>, TraceError> {
        let line = line.trim();
        if line.is_empty() {
            return Ok(None);
        }
        let f = ctx.comma_fields::<N>(line, self.names)?;
        (self.request)(f, ctx, volumes).map(Some)
    }
}

/// A [`TraceReader`] over a [`LineParser`]: every text format routes its malformed lines through the one
/// skip-bad-lines budget here.
pub struct LineTrace<P> {
    lines: LineReader,
    volumes: VolumeMap,
    parser: P,
}

impl<P: LineParser + 'static> LineTrace<P> {
    /// A reader with volumes named by the parser as it meets them.
    pub fn boxed(input: Input, opts: &ReaderOptions, parser: P) -> Box<dyn TraceReader> {
        Box::new(LineTrace { lines: LineReader::new(input, opts), volumes: VolumeMap::default(), parser })
    }

    /// A reader of a format without volumes: every request is on volume 0, named `"0"`.
    pub fn boxed_single(input: Input, opts: &ReaderOptions, parser: P) -> Box<dyn TraceReader> {
        Box::new(LineTrace { lines: LineReader::new(input, opts), volumes: VolumeMap::single(), parser })
    }
}

impl<P: LineParser> TraceReader for LineTrace<P> {
    fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        loop {
            let Some((line, ctx)) = self.lines.next_line()? else { return Ok(None) };
            match self.parser.parse(line, ctx, &mut self.volumes) {
                Ok(Some(r)) => return Ok(Some(r)),
                Ok(None) => {}
                Err(e) => self.lines.skip_or_fail(e)?,
            }
        }
    }

    fn volumes(&self) -> &[String] {
        self.volumes.names()
    }

    fn skipped(&self) -> &BadLines {
        self.lines.bad()
    }

    fn bytes_read(&self) -> u64 {
        self.lines.bytes_read()
    }
}

/// Shows a field for an error message: quoted, shortened, control characters escaped.
pub fn shown(s: &str) -> String {
    let s = s.trim();
    if s.is_empty() {
        return "an empty field".into();
    }
    let mut end = s.len().min(40);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut body = String::with_capacity(end);
    for c in s[..end].chars() {
        if c.is_control() {
            body.extend(c.escape_debug());
        } else {
            body.push(c);
        }
    }
    if end < s.len() {
        format!("'{body}…'")
    } else {
        format!("'{body}'")
    }
}
