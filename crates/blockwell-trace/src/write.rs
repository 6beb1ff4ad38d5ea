//! Trace writers: `blockwell trace gen` and `blockwell trace convert` write any format through these.
//!
//! A writer takes [`Request`]s in byte units and writes them in its format's units; `.gz`/`.zst` output is
//! compressed when the path ends so.

use crate::{Format, Request, TraceError};
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

/// A sink of requests in one format.
pub trait TraceWriter {
    fn write(&mut self, r: &Request) -> Result<(), TraceError>;
    /// Flushes and closes (and, for formats that need the whole trace, writes it).
    fn finish(self: Box<Self>) -> Result<(), TraceError>;
}

/// Opens `path` for writing, compressing by extension (`.gz`, `.zst`).
pub fn create_output(path: &Path) -> Result<Box<dyn Write + Send>, TraceError> {
    let io_err = |source| TraceError::Io { file: path.to_path_buf(), source };
    let f = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io_err)?);
    let name = path.to_string_lossy().to_lowercase();
    Ok(if name.ends_with(".gz") {
        Box::new(flate2::write::GzEncoder::new(f, flate2::Compression::default()))
    } else if name.ends_with(".zst") {
        Box::new(zstd::stream::write::Encoder::new(f, 3).map_err(io_err)?.auto_finish())
    } else {
        Box::new(f)
    })
}

/// A writer of `format` to `path`.
pub fn create(path: &Path, format: Format, opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    let out = create_output(path)?;
    let unit = opts.object_size.unwrap_or(4096);
    match format {
        Format::Plain => Ok(Box::new(Plain { out, unit, path: path.to_path_buf() })),
        Format::Vscsi => {
            let mut w = Vscsi { out, path: path.to_path_buf() };
            writeln!(w.out, "version,time,op,size,lbn").map_err(|e| w.err(e))?;
            Ok(Box::new(w))
        }
        other => Err(TraceError::Invalid {
            file: path.to_path_buf(),
            message: format!("writing the {} format is not supported", other.name()),
        }),
    }
}

struct Plain {
    out: Box<dyn Write + Send>,
    unit: u64,
    path: PathBuf,
}

impl TraceWriter for Plain {
    fn write(&mut self, r: &Request) -> Result<(), TraceError> {
        let first = r.offset / self.unit;
        let last = if r.len == 0 { first } else { (r.offset + r.len - 1) / self.unit };
        for b in first..=last {
            writeln!(self.out, "{b}").map_err(|source| TraceError::Io { file: self.path.clone(), source })?;
        }
        Ok(())
    }
    fn finish(mut self: Box<Self>) -> Result<(), TraceError> {
        self.out.flush().map_err(|source| TraceError::Io { file: self.path.clone(), source })
    }
}

struct Vscsi {
    out: Box<dyn Write + Send>,
    path: PathBuf,
}

impl Vscsi {
    fn err(&self, source: io::Error) -> TraceError {
        TraceError::Io { file: self.path.clone(), source }
    }
}

impl TraceWriter for Vscsi {
    fn write(&mut self, r: &Request) -> Result<(), TraceError> {
        if r.offset % 512 != 0 {
            return Err(TraceError::Invalid {
                file: self.path.clone(),
                message: format!("vscsi addresses 512 B sectors; offset {} is not a multiple of 512", r.offset),
            });
        }
        let op = match r.op {
            blockwell_core::Op::Read => "28",
            blockwell_core::Op::Write => "2a",
        };
        writeln!(self.out, "1,{},{op},{},{}", r.time_ns / 1000, r.len, r.offset / 512).map_err(|e| self.err(e))
    }
    fn finish(mut self: Box<Self>) -> Result<(), TraceError> {
        self.out.flush().map_err(|e| self.err(e))
    }
}
