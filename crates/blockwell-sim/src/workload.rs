//! File-level workloads: the files a workload uses and, per process, the sequence of requests it issues. The
//! time-aware simulator ([`crate::vtime`]) runs them through a page cache, a file layout ([`crate::layout`]),
//! an optional block cache and a disk model.

use blockwell_core::Op;

/// One file of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileInfo {
    /// Size in bytes.
    pub size: u64,
    /// The process that wrote the file when the workload's files were created; files written by different
    /// processes at the same time interleave on block-group layouts.
    pub writer: u32,
    /// Directory (block-group layouts place a directory's files in one group).
    pub dir: u32,
}

/// One file-level request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileRequest {
    /// Index into [`Workload::files`].
    pub file: u32,
    pub op: Op,
    /// Byte offset in the file.
    pub offset: u64,
    /// Bytes (>= 1).
    pub len: u64,
    /// Think time before issuing this request, after the previous one of the same process completed (closed
    /// loop), in nanoseconds.
    pub think_ns: u64,
    /// Issue time from a trace's timestamps (open loop), in nanoseconds from the trace start; `None` for
    /// closed-loop workloads.
    pub at_ns: Option<u64>,
}

/// A file-level workload: its files and one request sequence per process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workload {
    pub name: String,
    pub files: Vec<FileInfo>,
    pub processes: Vec<Vec<FileRequest>>,
}
