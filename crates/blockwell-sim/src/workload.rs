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

/// A request that does not fit its workload.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("process {process}, request {index}: {message}")]
pub struct WorkloadError {
    pub process: usize,
    pub index: usize,
    pub message: String,
}

impl Workload {
    /// Requests of all processes.
    pub fn requests(&self) -> usize {
        self.processes.iter().map(Vec::len).sum()
    }

    /// Bytes requested by all processes (reads and writes).
    pub fn bytes(&self) -> u64 {
        self.processes.iter().flatten().map(|r| r.len).sum()
    }

    /// Fraction of requests that continue their process's previous request to the same file (start where it
    /// ended): the "sequential references" of Butt et al.'s Table 2, at request granularity. 0 for no requests.
    pub fn sequential_fraction(&self) -> f64 {
        let mut seq = 0u64;
        let mut last_end: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
        for reqs in &self.processes {
            last_end.clear();
            for r in reqs {
                if last_end.insert(r.file, r.offset.saturating_add(r.len)) == Some(r.offset) {
                    seq += 1;
                }
            }
        }
        match self.requests() {
            0 => 0.0,
            n => seq as f64 / n as f64,
        }
    }

    /// Block references: blocks of `block_size` each request touches, summed over all requests (our reading of the
    /// "references" of Butt et al.'s Table 2; see `docs/workloads.md`).
    pub fn block_references(&self, block_size: u64) -> u64 {
        let bs = block_size.max(1);
        self.processes
            .iter()
            .flatten()
            .filter(|r| r.len > 0)
            .map(|r| r.offset.saturating_add(r.len - 1) / bs - r.offset / bs + 1)
            .sum()
    }

    /// Fraction of block references (of `block_size`) that are to the block after the one the same process
    /// referenced last in the same file: every block of a request but the first, and the first when the
    /// process's previous reference to the file ended in the block before. 0 for no requests.
    pub fn consecutive_block_fraction(&self, block_size: u64) -> f64 {
        let bs = block_size.max(1);
        let (mut consecutive, mut all) = (0u64, 0u64);
        let mut last: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
        for reqs in &self.processes {
            last.clear();
            for r in reqs.iter().filter(|r| r.len > 0) {
                let (first, end) = (r.offset / bs, r.offset.saturating_add(r.len - 1) / bs);
                all += end - first + 1;
                consecutive += end - first;
                if first > 0 && last.get(&r.file) == Some(&(first - 1)) {
                    consecutive += 1;
                }
                last.insert(r.file, end);
            }
        }
        match all {
            0 => 0.0,
            n => consecutive as f64 / n as f64,
        }
    }

    /// Checks that every request names a file of the workload, has `len >= 1` and lies within the file.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        for (process, reqs) in self.processes.iter().enumerate() {
            for (index, r) in reqs.iter().enumerate() {
                let err = |message: String| Err(WorkloadError { process, index, message });
                let Some(f) = self.files.get(r.file as usize) else {
                    return err(format!("file {} of {}", r.file, self.files.len()));
                };
                if r.len == 0 {
                    return err("zero length".into());
                }
                if r.offset.checked_add(r.len).map_or(true, |end| end > f.size) {
                    return err(format!("bytes {}+{} past the end of file {} ({} B)", r.offset, r.len, r.file, f.size));
                }
            }
        }
        Ok(())
    }
}
