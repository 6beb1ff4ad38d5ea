//! The trace formats, one module each, and format detection.
//!
//! Field orders and units follow `shared/reference/trace-formats.md`; each module's doc restates them with an
//! example line. A format module provides:
//!
//! - `open(Input, &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError>`, the streaming reader;
//! - `create(Output, &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError>`, the writer;
//! - `sniff_name(&str) -> bool`: the lower-cased file name (without `.gz`/`.zst`) certainly names this format;
//! - `sniff_line(&str) -> bool`: the first non-blank line (decompressed, trimmed) looks like this format.
//!
//! and one line in the `formats!` registry below. Detection asks every format and accepts an answer only when
//! exactly one says yes.

use crate::write::Output;
use crate::{Input, ReaderOptions, TraceError, TraceReader, TraceWriter, WriterOptions};
use std::path::Path;

pub mod alibaba;
pub mod blkparse;
pub mod blkparse_q;
pub mod csv;
pub mod fiu;
pub mod lis;
pub mod msr;
pub mod oracle;
pub mod plain;
pub mod spc;
pub mod tencent;
pub mod vscsi;

macro_rules! formats {
    ($( $variant:ident => $module:ident, $name:literal, $summary:literal; )*) => {
        /// Every trace format Blockwell reads.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Format { $($variant),* }

        impl Format {
            pub const ALL: &'static [Format] = &[$(Format::$variant),*];

            /// The name used by `--format`.
            pub fn name(self) -> &'static str {
                match self { $(Format::$variant => $name),* }
            }

            /// One line for `--help` and docs.
            pub fn summary(self) -> &'static str {
                match self { $(Format::$variant => $summary),* }
            }

            fn sniff_name(self, name: &str) -> bool {
                match self { $(Format::$variant => $module::sniff_name(name)),* }
            }

            fn sniff_line(self, line: &str) -> bool {
                match self { $(Format::$variant => $module::sniff_line(line)),* }
            }
        }

        /// Opens a reader of `format` over an already-opened input.
        pub fn open_format(format: Format, input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
            match format {
                $(Format::$variant => $module::open(input, opts)),*
            }
        }

        /// A writer of `format` over an already-opened output.
        pub fn create_format(format: Format, out: Output, opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
            match format {
                $(Format::$variant => $module::create(out, opts)),*
            }
        }
    };
}

formats! {
    Msr => msr, "msr", "MSR Cambridge CSV: Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime (FILETIME; bytes)";
    Fiu => fiu, "fiu", "FIU text: ts_ns pid process lba size R/W major minor md5 (512 B sectors; content MD5)";
    Spc => spc, "spc", "SPC/UMass CSV: ASU,LBA,Size,Opcode,Timestamp (LBA in 512 B sectors, size in bytes, seconds)";
    Alibaba => alibaba, "alibaba", "Alibaba block CSV: device_id,opcode,offset,length,timestamp (bytes; microseconds)";
    Tencent => tencent, "tencent", "Tencent CBS CSV: Timestamp,Offset,Size,IOType,VolumeID (seconds; 512 B sectors)";
    Lis => lis, "lis", "ARC/LIRS .lis: start_block nblocks ignore request_number (512 B blocks; reads)";
    Oracle => oracle, "oracle", "libCacheSim oracleGeneral binary: 24-byte records time,obj_id,obj_size,next_access_vtime";
    Blkparse => blkparse, "blkparse", "blkparse text output, D (issue) events: maj,min cpu seq time pid action rwbs sector + n";
    BlkparseQ => blkparse_q, "blkparse-q", "blkparse text output, Q (queue) events instead of D";
    Vscsi => vscsi, "vscsi", "libCacheSim vscsi CSV: version,time,op,size,lbn (header; lbn in 512 B sectors, op in hex SCSI)";
    Plain => plain, "plain", "one object (block) id per line, as libCacheSim's plain text traces";
    Csv => csv, "csv", "generic CSV with a column mapping (--csv-columns)";
}

impl Format {
    pub fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|f| f.name()).collect()
    }

    /// Whether the format records the operation, so that a writer keeps writes as writes. Those that do not
    /// (lis, oracle, plain) read every request as a read, and their writers would turn writes into reads.
    pub fn carries_writes(self) -> bool {
        !matches!(self, Format::Lis | Format::Oracle | Format::Plain)
    }

    /// Parses a `--format` value.
    pub fn from_name(s: &str) -> Result<Self, TraceError> {
        Self::ALL
            .iter()
            .copied()
            .find(|f| f.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| TraceError::BadFormatName(s.to_string()))
    }
}

/// The only format for which `pred` holds, if exactly one does.
fn unique(pred: impl Fn(Format) -> bool) -> Option<Format> {
    let mut hits = Format::ALL.iter().copied().filter(|&f| pred(f));
    match (hits.next(), hits.next()) {
        (Some(f), None) => Some(f),
        _ => None,
    }
}

/// The format `name` (a file name) certainly denotes, if any.
pub fn detect_name(name: &str) -> Option<Format> {
    let name = name.to_lowercase();
    let stem = name.strip_suffix(".gz").or_else(|| name.strip_suffix(".zst")).unwrap_or(&name);
    unique(|f| f.sniff_name(stem))
}

/// The format a first line (decompressed) unambiguously belongs to, if any.
pub fn detect_line(line: &str) -> Option<Format> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    unique(|f| f.sniff_line(line))
}

/// Detects the format from the file name, then from the first non-blank line (after decompression), when that
/// is unambiguous; otherwise [`TraceError::UnknownFormat`], which tells the user to pass `--format`.
pub fn detect(path: &Path) -> Result<Format, TraceError> {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if let Some(f) = detect_name(&name) {
        return Ok(f);
    }
    let input = crate::open_input(path)?;
    let mut lines = crate::LineReader::new(input, &ReaderOptions::default());
    // Look past leading blank lines, but not far: this is a sniff, not a read.
    for _ in 0..16 {
        match lines.next_line() {
            Ok(Some((line, _))) if line.trim().is_empty() => continue,
            Ok(Some((line, _))) => {
                return detect_line(line).ok_or_else(|| TraceError::UnknownFormat { file: path.to_path_buf() })
            }
            Ok(None) | Err(TraceError::Parse { .. }) => break,
            Err(e) => return Err(e),
        }
    }
    Err(TraceError::UnknownFormat { file: path.to_path_buf() })
}
