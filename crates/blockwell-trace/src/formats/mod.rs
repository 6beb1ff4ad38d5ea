//! The trace formats, one module each, and format detection.
//!
//! Field orders and units follow `shared/reference/trace-formats.md`; each module's doc restates them.

use crate::{Input, ReaderOptions, TraceError, TraceReader};
use std::io::BufRead;
use std::path::Path;

pub mod csv;
pub mod plain;
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
        }

        /// Opens a reader of `format` over an already-opened input.
        pub fn open_format(format: Format, input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
            match format {
                $(Format::$variant => $module::open(input, opts)),*
            }
        }
    };
}

formats! {
    Vscsi => vscsi, "vscsi", "libCacheSim vscsi CSV: version,time,op,size,lbn (header; lbn in 512 B sectors, op in hex SCSI)";
    Plain => plain, "plain", "one object (block) id per line, as libCacheSim's plain text traces";
    Csv => csv, "csv", "generic CSV with a column mapping (--csv-columns)";
}

impl Format {
    pub fn names() -> Vec<&'static str> {
        Self::ALL.iter().map(|f| f.name()).collect()
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

/// Detects the format from the file name, then from the first line, when that is unambiguous.
pub fn detect(path: &Path) -> Result<Format, TraceError> {
    let name = path.file_name().map(|n| n.to_string_lossy().to_lowercase()).unwrap_or_default();
    let stem = name.trim_end_matches(".gz").trim_end_matches(".zst");
    if stem.ends_with(".lis") {
        if let Some(f) = Format::ALL.iter().copied().find(|f| f.name() == "lis") {
            return Ok(f);
        }
    }
    if stem.ends_with(".oraclegeneral") || stem.contains("oraclegeneral") {
        if let Some(f) = Format::ALL.iter().copied().find(|f| f.name() == "oracle") {
            return Ok(f);
        }
    }
    let mut input = crate::open_input(path)?;
    let mut first = String::new();
    // Read at most one line (bounded, in case of binary data).
    let buf = input.reader.fill_buf().map_err(|e| TraceError::Io { file: path.to_path_buf(), source: e })?;
    let end = buf.iter().position(|&b| b == b'\n').unwrap_or(buf.len().min(4096));
    first.push_str(&String::from_utf8_lossy(&buf[..end]));
    let first = first.trim();
    if first.starts_with("version,time,op,size,lbn") {
        return Ok(Format::Vscsi);
    }
    Err(TraceError::UnknownFormat { file: path.to_path_buf() })
}
