//! Generic CSV with a column mapping. (Placeholder mapping type; the full reader is being written.)

use crate::{Input, ReaderOptions, TraceError, TraceReader};

/// Which column holds which field, and the units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CsvMapping {}

impl CsvMapping {
    /// Parses `field=column,...` (being written).
    pub fn parse(_s: &str) -> Result<Self, TraceError> {
        Err(TraceError::BadFormatName("csv mapping not written yet".into()))
    }
}

pub fn open(input: Input, _opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    Err(TraceError::Invalid { file: input.path, message: "generic CSV reader not written yet".into() })
}
