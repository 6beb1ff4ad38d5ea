//! Trace writers: `blockwell trace gen` and `blockwell trace convert` write any format through these.
//!
//! A writer takes [`Request`]s in byte units and writes them in its format's units; `.gz`/`.zst` output is
//! compressed when the path ends so. Each format module has its writer beside its reader (`formats::*::create`);
//! this module holds what they share.
//!
//! What a format cannot hold is handled the same way everywhere:
//! - **Addresses** in a format counted in sectors or blocks are rounded outward (offset down, end up) to whole
//!   units, so the written request covers the same bytes and the same cache blocks at any block size that is a
//!   multiple of the unit.
//! - **Time** is truncated to the format's resolution (seconds for Tencent and oracleGeneral, microseconds for
//!   Alibaba and vscsi, 100 ns for MSR); formats without time (lis, plain) drop it.
//! - **Volumes**: formats with named volumes write the name from [`WriterOptions::volumes`] (or the volume
//!   number when there is none), in the form the format wants (see each module); formats with a single volume
//!   (vscsi, lis, plain) refuse a request on any volume but 0 rather than merge volumes silently.
//! - **Op**: formats without one (lis, oracle, plain; [`crate::Format::carries_writes`]) write every request as a
//!   read access; `blockwell trace convert` and `trace gen` refuse to write writes to them (convert keeps only
//!   the reads with `--reads-only`).
//! - **Digest**: only FIU carries one (32 zero hex digits for a request without).
//!
//! Call [`TraceWriter::finish`]: it flushes and completes the compressed stream, and reports the errors that
//! dropping would swallow.

use crate::{Format, Request, TraceError};
use std::borrow::Cow;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// Writer settings.
#[derive(Clone, Debug, Default)]
pub struct WriterOptions {
    /// Bytes per object for object-id formats (oracleGeneral, plain). Default 4096.
    pub object_size: Option<u64>,
    /// Volume names, indexed by `Request::volume` (formats that name volumes).
    pub volumes: Vec<String>,
}

impl WriterOptions {
    pub fn object_size(&self) -> u64 {
        self.object_size.unwrap_or(4096).max(1)
    }

    /// The name of volume `v`: [`WriterOptions::volumes`]`[v]`, or the number.
    pub fn volume_name(&self, v: u32) -> Cow<'_, str> {
        match self.volumes.get(v as usize) {
            Some(n) => Cow::Borrowed(n.as_str()),
            None => Cow::Owned(v.to_string()),
        }
    }
}

/// A sink of requests in one format.
pub trait TraceWriter {
    fn write(&mut self, r: &Request) -> Result<(), TraceError>;
    /// Flushes and closes (and, for formats that need the whole trace, writes it).
    fn finish(self: Box<Self>) -> Result<(), TraceError>;
}

enum Sink {
    Plain(BufWriter<File>),
    Gzip(flate2::write::GzEncoder<BufWriter<File>>),
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<File>>),
}

/// An output file, compressed by extension (`.gz`, `.zst`). [`Output::finish`] completes the compressed stream
/// and reports errors; dropping it finishes too, ignoring errors.
pub struct Output {
    path: PathBuf,
    sink: Option<Sink>,
}

impl Output {
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// An I/O error on this output, naming the file.
    pub fn io_error(&self, source: io::Error) -> TraceError {
        TraceError::Io { file: self.path.clone(), source }
    }

    /// Flushes, completes the compressed stream and closes the file.
    pub fn finish(mut self) -> Result<(), TraceError> {
        let r = match self.sink.take() {
            None => Ok(()),
            Some(Sink::Plain(mut f)) => f.flush(),
            Some(Sink::Gzip(g)) => g.finish().and_then(|mut f| f.flush()),
            Some(Sink::Zstd(z)) => z.finish().and_then(|mut f| f.flush()),
        };
        r.map_err(|e| self.io_error(e))
    }

    fn sink(&mut self) -> io::Result<&mut dyn Write> {
        match &mut self.sink {
            Some(Sink::Plain(f)) => Ok(f),
            Some(Sink::Gzip(g)) => Ok(g),
            Some(Sink::Zstd(z)) => Ok(z),
            None => Err(io::Error::other("output already finished")),
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.sink()?.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.sink()?.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.sink()?.flush()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        match self.sink.take() {
            None | Some(Sink::Plain(_)) => {}
            Some(Sink::Gzip(g)) => {
                let _ = g.finish();
            }
            Some(Sink::Zstd(z)) => {
                let _ = z.finish();
            }
        }
    }
}

/// Opens `path` for writing, compressing by extension (`.gz`, `.zst`).
pub fn create_output(path: &Path) -> Result<Output, TraceError> {
    let io_err = |source| TraceError::Io { file: path.to_path_buf(), source };
    let f = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io_err)?);
    let name = path.to_string_lossy().to_lowercase();
    let sink = if name.ends_with(".gz") {
        Sink::Gzip(flate2::write::GzEncoder::new(f, flate2::Compression::default()))
    } else if name.ends_with(".zst") {
        Sink::Zstd(zstd::stream::write::Encoder::new(f, 3).map_err(io_err)?)
    } else {
        Sink::Plain(f)
    };
    Ok(Output { path: path.to_path_buf(), sink: Some(sink) })
}

/// A writer of `format` to `path`.
pub fn create(path: &Path, format: Format, opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    crate::formats::create_format(format, create_output(path)?, opts)
}

/// Formats one request as one line into the buffer (without the newline), or says why it cannot.
pub trait LineFormatter: Send {
    fn format(&mut self, r: &Request, line: &mut String) -> Result<(), String>;
}

impl<F: FnMut(&Request, &mut String) -> Result<(), String> + Send> LineFormatter for F {
    fn format(&mut self, r: &Request, line: &mut String) -> Result<(), String> {
        self(r, line)
    }
}

/// A line-per-request writer: an optional header line, then one formatted line per request. A request the
/// format cannot hold is an [`TraceError::Invalid`] naming the request number.
pub struct TextWriter<F> {
    out: Output,
    line: String,
    written: u64,
    fmt: F,
}

impl<F: LineFormatter + 'static> TextWriter<F> {
    pub fn boxed(mut out: Output, header: Option<&str>, fmt: F) -> Result<Box<dyn TraceWriter>, TraceError> {
        if let Some(h) = header {
            out.write_all(h.as_bytes()).and_then(|()| out.write_all(b"\n")).map_err(|e| out.io_error(e))?;
        }
        Ok(Box::new(TextWriter { out, line: String::with_capacity(128), written: 0, fmt }))
    }
}

impl<F: LineFormatter> TraceWriter for TextWriter<F> {
    fn write(&mut self, r: &Request) -> Result<(), TraceError> {
        self.line.clear();
        self.fmt.format(r, &mut self.line).map_err(|message| TraceError::Invalid {
            file: self.out.path().to_path_buf(),
            message: format!("request {}: {message}", self.written + 1),
        })?;
        self.line.push('\n');
        self.out.write_all(self.line.as_bytes()).map_err(|e| self.out.io_error(e))?;
        self.written += 1;
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<(), TraceError> {
        self.out.finish()
    }
}

/// The request's byte range rounded outward to whole units: (first unit, number of units). A zero-length
/// request is zero units at its offset.
pub fn units(r: &Request, unit: u64) -> (u64, u64) {
    let first = r.offset / unit;
    let end = r.offset.saturating_add(r.len).div_ceil(unit);
    (first, end.saturating_sub(first))
}

/// The blocks a request touches at `unit` bytes, as the engine counts them: `offset/unit ..= (offset+len-1)/unit`;
/// a zero-length request touches the block holding its offset.
pub fn blocks(r: &Request, unit: u64) -> std::ops::RangeInclusive<u64> {
    let first = r.offset / unit;
    let last = if r.len == 0 { first } else { r.offset.saturating_add(r.len - 1) / unit };
    first..=last
}

/// Refuses requests off volume 0, for formats that have a single volume.
pub fn single_volume(r: &Request, format: &str) -> Result<(), String> {
    if r.volume == 0 {
        Ok(())
    } else {
        Err(format!("the {format} format holds a single volume; found volume {}", r.volume))
    }
}

/// `name` as one field of a separated format: the separator, spaces and control characters become `_`.
pub fn field_safe(name: &str, sep: char) -> Cow<'_, str> {
    let bad = |c: char| c == sep || c.is_whitespace() || c.is_control();
    if name.is_empty() {
        Cow::Borrowed("_")
    } else if name.chars().any(bad) {
        Cow::Owned(name.chars().map(|c| if bad(c) { '_' } else { c }).collect())
    } else {
        Cow::Borrowed(name)
    }
}

/// The volume as a number for formats whose volume field is numeric (SPC's ASU, Tencent's VolumeID, Alibaba's
/// device_id): the name when it is a number, else the volume number.
pub fn numeric_volume(opts: &WriterOptions, v: u32) -> u64 {
    crate::parse::uint(&opts.volume_name(v)).unwrap_or(v as u64)
}

/// The volume as a Linux device number `(major, minor)` (FIU, blkparse): the name when it reads `maj,min`,
/// else `(0, volume number)`.
pub fn devno_volume(opts: &WriterOptions, v: u32) -> (u32, u32) {
    crate::parse::devno(&opts.volume_name(v)).unwrap_or((0, v))
}

/// Seconds with nine decimals, exact.
pub fn push_seconds(line: &mut String, ns: u64) {
    let _ = write!(line, "{}.{:09}", ns / 1_000_000_000, ns % 1_000_000_000);
}
