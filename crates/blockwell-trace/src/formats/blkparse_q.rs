//! blkparse text output, reading the `Q` (queue) events instead of the `D` (issue) events: what the
//! application asked for, before the I/O scheduler merged, split or reordered it. Everything else is as in
//! [`super::blkparse`]; detection picks `blkparse` (pass `--format blkparse-q` for this one).

use super::blkparse;
use crate::write::Output;
use crate::{Input, ReaderOptions, TraceError, TraceReader, TraceWriter, WriterOptions};

pub fn open(input: Input, opts: &ReaderOptions) -> Result<Box<dyn TraceReader>, TraceError> {
    blkparse::open_with(input, opts, "Q")
}

pub fn sniff_line(_line: &str) -> bool {
    false
}

pub fn sniff_name(_name: &str) -> bool {
    false
}

pub fn create(out: Output, opts: &WriterOptions) -> Result<Box<dyn TraceWriter>, TraceError> {
    blkparse::create_with(out, opts, "Q")
}
