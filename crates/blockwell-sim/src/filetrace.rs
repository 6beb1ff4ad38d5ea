//! File-level traces: a small CSV of (time, process, file, offset, size, op) that reads into a [`Workload`] and
//! that any [`Workload`] writes to, so generated workloads can be saved, edited and replayed. The format is
//! documented for users in `docs/file-traces.md`:
//!
//! ```text
//! # any comment
//! # file,<name>,<size>[,<writer>[,<dir>]]
//! time_ns,process,file,offset,size,op[,think_ns]
//! 0,0,src/main.c,0,4096,R
//! ,1,data.db,81920,8192,W,2000
//! ```
//!
//! - Blank lines and lines starting with `#` are ignored, except *declarations* `# file,<name>,<size>` with an
//!   optional writer process and directory number (for the layouts, [`crate::layout`]); a declaration also fixes
//!   the file's index (files are numbered in order of first appearance, declared or requested).
//! - The header line is optional; when present it must be one of the two column lists above.
//! - `time_ns` is the issue time in nanoseconds (open loop: [`FileRequest::at_ns`]) or empty (closed loop);
//!   `process` a number (processes are numbered densely in ascending order of these numbers); `file` a name
//!   without commas; `offset` and `size` in bytes (`size >= 1`); `op` `R` or `W` (any case, or `read`/`write`);
//!   `think_ns` (optional seventh column, default 0) the think time before the request.
//! - A file's size is the largest of its declared size and the end of every request to it.
//! - A process's requests keep the order of their lines.
//!
//! Errors name the file and line: `trace.csv:12: size: expected a number >= 1, found "0"`.

use crate::workload::{FileInfo, FileRequest, Workload};
use blockwell_core::Op;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

/// The header line written, and accepted, with and without the think-time column.
pub const HEADER: &str = "time_ns,process,file,offset,size,op";
pub const HEADER_THINK: &str = "time_ns,process,file,offset,size,op,think_ns";

/// A file trace that does not read or write.
#[derive(Debug, thiserror::Error)]
pub enum FileTraceError {
    /// A malformed line.
    #[error("{}:{line}: {message}", file.display())]
    Parse { file: PathBuf, line: u64, message: String },
    #[error("{}: {source}", file.display())]
    Io { file: PathBuf, source: io::Error },
}

/// A read trace: the workload, plus the names the trace used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileTrace {
    /// Named after the trace file's name.
    pub workload: Workload,
    /// Name of file `i` of the workload.
    pub file_names: Vec<String>,
    /// Process number in the trace of process `i` of the workload.
    pub process_ids: Vec<u32>,
}

/// Reads a file trace from `path` (gzip and zstd are detected and decompressed).
pub fn read_path(path: &Path) -> Result<FileTrace, FileTraceError> {
    let input = blockwell_trace::open_input(path).map_err(|e| match e {
        blockwell_trace::TraceError::Io { file, source } => FileTraceError::Io { file, source },
        other => FileTraceError::Io { file: path.to_path_buf(), source: io::Error::other(other.to_string()) },
    })?;
    read_from(input.reader, path)
}

/// Reads a file trace from `reader`; `path` names it in errors and names the workload.
pub fn read_from(reader: impl BufRead, path: &Path) -> Result<FileTrace, FileTraceError> {
    let mut p = Parser { path, line: 0, names: HashMap::new(), files: Vec::new() };
    // Requests per trace process number, in line order; the file index is resolved at once.
    let mut per_process: BTreeMap<u32, Vec<FileRequest>> = BTreeMap::new();
    let mut columns: Option<usize> = None;
    let mut seen_data = false;
    for line in reader.lines() {
        p.line += 1;
        let line = line.map_err(|e| match e.kind() {
            io::ErrorKind::InvalidData => p.err("the line is not UTF-8 text".into()),
            _ => FileTraceError::Io { file: path.to_path_buf(), source: e },
        })?;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            if let Some(decl) = comment.trim_start().strip_prefix("file,") {
                p.declaration(decl)?;
            }
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if !seen_data && fields.first().is_some_and(|f| f.eq_ignore_ascii_case("time_ns")) {
            let h = fields.join(",").to_ascii_lowercase();
            columns = match h.as_str() {
                HEADER => Some(6),
                HEADER_THINK => Some(7),
                _ => return Err(p.err(format!("header: expected '{HEADER}' or '{HEADER_THINK}', found '{line}'"))),
            };
            seen_data = true;
            continue;
        }
        seen_data = true;
        let (process, req) = p.request(&fields, columns)?;
        per_process.entry(process).or_default().push(req);
    }
    let Parser { files, names, .. } = p;
    let mut file_names = vec![String::new(); files.len()];
    for (name, i) in names {
        file_names[i as usize] = name;
    }
    let process_ids = per_process.keys().copied().collect();
    let workload = Workload {
        name: path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned()),
        files,
        processes: per_process.into_values().collect(),
    };
    Ok(FileTrace { workload, file_names, process_ids })
}

struct Parser<'a> {
    path: &'a Path,
    line: u64,
    names: HashMap<String, u32>,
    files: Vec<FileInfo>,
}

impl Parser<'_> {
    fn err(&self, message: String) -> FileTraceError {
        FileTraceError::Parse { file: self.path.to_path_buf(), line: self.line, message }
    }

    fn bad(&self, column: &str, expected: &str, found: &str) -> FileTraceError {
        self.err(format!("{column}: expected {expected}, found {}", blockwell_trace::shown(found)))
    }

    fn number<T: std::str::FromStr>(&self, column: &str, s: &str) -> Result<T, FileTraceError> {
        s.parse().map_err(|_| self.bad(column, "a non-negative integer", s))
    }

    /// The index of file `name`, adding it if new.
    fn file(&mut self, name: &str) -> Result<u32, FileTraceError> {
        if name.is_empty() {
            return Err(self.bad("file", "a file name", name));
        }
        if let Some(&i) = self.names.get(name) {
            return Ok(i);
        }
        let i = u32::try_from(self.files.len()).map_err(|_| self.err("more than 2^32 files".into()))?;
        self.names.insert(name.to_string(), i);
        self.files.push(FileInfo { size: 0, writer: 0, dir: 0 });
        Ok(i)
    }

    /// `<name>,<size>[,<writer>[,<dir>]]` after `# file,`.
    fn declaration(&mut self, decl: &str) -> Result<(), FileTraceError> {
        let f: Vec<&str> = decl.split(',').map(str::trim).collect();
        if !(2..=4).contains(&f.len()) {
            return Err(self.err(format!(
                "declaration: expected '# file,<name>,<size>[,<writer>[,<dir>]]', found {} fields",
                f.len() + 1
            )));
        }
        let size: u64 = self.number("declared size", f[1])?;
        let writer: u32 = match f.get(2) {
            Some(s) => self.number("declared writer", s)?,
            None => 0,
        };
        let dir: u32 = match f.get(3) {
            Some(s) => self.number("declared dir", s)?,
            None => 0,
        };
        let i = self.file(f[0])? as usize;
        let info = &mut self.files[i];
        info.size = info.size.max(size);
        info.writer = writer;
        info.dir = dir;
        Ok(())
    }

    fn request(&mut self, f: &[&str], columns: Option<usize>) -> Result<(u32, FileRequest), FileTraceError> {
        let ok = match columns {
            Some(n) => f.len() == n,
            None => f.len() == 6 || f.len() == 7,
        };
        if !ok {
            let expected = columns.map_or_else(|| "6 or 7".to_string(), |n| n.to_string());
            return Err(
                self.err(format!("expected {expected} comma-separated fields ({HEADER_THINK}), found {}", f.len()))
            );
        }
        let at_ns = if f[0].is_empty() { None } else { Some(self.number::<u64>("time_ns", f[0])?) };
        let process: u32 = self.number("process", f[1])?;
        let file = self.file(f[2])?;
        let offset: u64 = self.number("offset", f[3])?;
        let len: u64 = f[4].parse().ok().filter(|&n| n >= 1).ok_or_else(|| self.bad("size", "a number >= 1", f[4]))?;
        let end = offset.checked_add(len).ok_or_else(|| self.err("offset + size overflows 2^64".into()))?;
        let op = match f[5].to_ascii_lowercase().as_str() {
            "r" | "read" => Op::Read,
            "w" | "write" => Op::Write,
            _ => return Err(self.bad("op", "R or W", f[5])),
        };
        let think_ns = match f.get(6) {
            Some(s) if !s.is_empty() => self.number("think_ns", s)?,
            _ => 0,
        };
        let info = &mut self.files[file as usize];
        info.size = info.size.max(end);
        Ok((process, FileRequest { file, op, offset, len, think_ns, at_ns }))
    }
}

/// Writes `w` as a file trace: a comment naming it, one declaration per file (name = file index, with its
/// writer and directory), the header, then each process's requests in order (process `i` as number `i`).
/// The `think_ns` column is written only when some request has a think time. Processes without requests
/// leave no trace.
pub fn write_to(mut out: impl Write, w: &Workload) -> io::Result<()> {
    writeln!(out, "# blockwell file trace: {}", w.name.replace(['\n', '\r'], " "))?;
    for (i, f) in w.files.iter().enumerate() {
        writeln!(out, "# file,{i},{},{},{}", f.size, f.writer, f.dir)?;
    }
    let think = w.processes.iter().flatten().any(|r| r.think_ns != 0);
    writeln!(out, "{}", if think { HEADER_THINK } else { HEADER })?;
    for (p, reqs) in w.processes.iter().enumerate() {
        for r in reqs {
            if let Some(t) = r.at_ns {
                write!(out, "{t}")?;
            }
            let op = match r.op {
                Op::Read => 'R',
                Op::Write => 'W',
            };
            write!(out, ",{p},{},{},{},{op}", r.file, r.offset, r.len)?;
            if think {
                write!(out, ",{}", r.think_ns)?;
            }
            writeln!(out)?;
        }
    }
    out.flush()
}

/// Writes `w` to `path` (plain text).
pub fn write_path(path: &Path, w: &Workload) -> Result<(), FileTraceError> {
    let io_err = |source| FileTraceError::Io { file: path.to_path_buf(), source };
    let f = std::fs::File::create(path).map_err(io_err)?;
    write_to(io::BufWriter::new(f), w).map_err(io_err)
}
