//! Options shared by subcommands: which trace to read and how, and size parsing.

use anyhow::{bail, Context};
use blockwell_trace::{Format, ReaderOptions, Request, TraceReader};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};

/// How to read the input trace.
#[derive(clap::Args, Debug, Clone)]
pub struct TraceArgs {
    /// The trace file (`.gz` and `.zst` are decompressed transparently).
    #[arg(long, short = 't', value_name = "FILE")]
    pub trace: PathBuf,

    #[command(flatten)]
    pub read: ReadArgs,
}

/// How to read a trace file (every trace of a command alike): its format and the reader's settings.
#[derive(clap::Args, Debug, Clone)]
pub struct ReadArgs {
    /// The trace format; detected from the file name or first line when unambiguous (see `blockwell list`).
    #[arg(long, short = 'f', value_name = "FORMAT")]
    pub format: Option<String>,

    /// Skip up to N malformed lines (counted and reported on stderr) instead of stopping at the first.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub skip_bad_lines: u64,

    /// Bytes per object id for formats that name objects (oracleGeneral, plain): object i is bytes
    /// i*SIZE .. (i+1)*SIZE [default: 4096].
    #[arg(long, value_name = "BYTES")]
    pub object_size: Option<String>,

    /// Column mapping for `--format csv`, e.g. `time=0,volume=1,op=2,offset=3,len=4,offset_unit=512`.
    #[arg(long, value_name = "MAPPING")]
    pub csv_columns: Option<String>,
}

impl ReadArgs {
    /// For a trace that a command opens with its own options, not these flags: `format`, and the flags'
    /// defaults for the rest (nothing skipped, 4 KiB objects, no column mapping).
    pub fn with_format(format: Option<String>) -> Self {
        ReadArgs { format, skip_bad_lines: 0, object_size: None, csv_columns: None }
    }

    pub fn format(&self) -> anyhow::Result<Option<Format>> {
        self.format.as_deref().map(Format::from_name).transpose().context("--format")
    }

    pub fn reader_options(&self) -> anyhow::Result<ReaderOptions> {
        let object_size = parse_bytes(self.object_size.as_deref().unwrap_or("4096")).context("--object-size")?;
        let csv = match &self.csv_columns {
            Some(m) => Some(blockwell_trace::formats::csv::CsvMapping::parse(m).context("--csv-columns")?),
            None => None,
        };
        Ok(ReaderOptions { skip_bad_lines: self.skip_bad_lines, csv, object_size: Some(object_size) })
    }
}

impl TraceArgs {
    pub fn format(&self) -> anyhow::Result<Option<Format>> {
        self.read.format()
    }

    pub fn reader_options(&self) -> anyhow::Result<ReaderOptions> {
        self.read.reader_options()
    }

    /// Opens the trace.
    pub fn open(&self) -> anyhow::Result<Box<dyn TraceReader>> {
        Ok(blockwell_trace::open(&self.trace, self.format()?, &self.reader_options()?)?)
    }
}

/// Several traces, read alike (`blockwell sim`).
#[derive(clap::Args, Debug, Clone)]
pub struct TraceListArgs {
    /// The trace file (`.gz` and `.zst` are decompressed transparently). Several traces: repeat the option
    /// (`-t a.csv -t b.csv`), give several files after it, or a quoted glob pattern (`-t 'traces/*.csv'`).
    #[arg(long = "trace", short = 't', value_name = "FILE", required = true, num_args = 1..)]
    pub traces: Vec<PathBuf>,

    #[command(flatten)]
    pub read: ReadArgs,
}

/// The traces of a [`TraceListArgs`], patterns expanded.
#[derive(Debug)]
pub struct TraceList {
    pub traces: Vec<TraceArgs>,
    /// More than one `--trace` value, or a glob pattern: a report per trace, even if the pattern found one.
    pub many: bool,
}

impl TraceListArgs {
    /// The traces in the order given, each glob pattern replaced by the files it matches, sorted.
    pub fn expand(&self) -> anyhow::Result<TraceList> {
        let mut many = self.traces.len() > 1;
        let mut traces = Vec::new();
        for value in &self.traces {
            match expand_pattern(value)? {
                Some(files) => {
                    many = true;
                    traces.extend(files);
                }
                None => traces.push(value.clone()),
            }
        }
        Ok(TraceList {
            traces: traces.into_iter().map(|trace| TraceArgs { trace, read: self.read.clone() }).collect(),
            many,
        })
    }
}

/// The files a `--trace` value names when it is a glob pattern (it has `*`, `?` or `[`, and no file has that
/// very name), sorted, directories left out; `None` for a plain path. A pattern that matches no file is an
/// error naming the option and the pattern.
pub fn expand_pattern(value: &Path) -> anyhow::Result<Option<Vec<PathBuf>>> {
    let Some(pattern) = value.to_str() else { return Ok(None) };
    if !pattern.contains(['*', '?', '[']) || value.exists() {
        return Ok(None);
    }
    // As a shell matches: no wildcard matches a leading dot.
    let options = glob::MatchOptions { require_literal_leading_dot: true, ..glob::MatchOptions::new() };
    let paths = glob::glob_with(pattern, options)
        .map_err(|e| anyhow::anyhow!("--trace '{pattern}': not a glob pattern: {e}"))?;
    let mut files = Vec::new();
    for p in paths {
        let p = p.with_context(|| format!("--trace '{pattern}'"))?;
        if !p.is_dir() {
            files.push(p);
        }
    }
    if files.is_empty() {
        bail!("--trace '{pattern}': no file matches the pattern");
    }
    files.sort();
    Ok(Some(files))
}

/// A progress bar on stderr over the (compressed) bytes of `path`, or `None` when stderr is not a terminal
/// (a pipe, a file, a test): then nothing is drawn.
pub fn progress_bar(path: &Path, message: &str) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let len = std::fs::metadata(path).ok()?.len();
    let b = indicatif::ProgressBar::new(len).with_message(message.to_string());
    b.set_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} {msg:7} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({eta})",
        )
        .ok()?,
    );
    Some(b)
}

/// A progress bar on stderr counting `len` jobs, or `None` when stderr is not a terminal.
pub fn job_bar(len: u64, message: &str) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() || len == 0 {
        return None;
    }
    let b = indicatif::ProgressBar::new(len).with_message(message.to_string());
    b.set_style(
        indicatif::ProgressStyle::with_template("{spinner} {msg} [{elapsed_precise}] {wide_bar} {pos}/{len} ({eta})")
            .ok()?,
    );
    Some(b)
}

/// Calls `f` on every request of `reader`, in batches, advancing `bar` (if any) by the bytes read.
pub fn for_each_request<E>(
    reader: &mut dyn TraceReader,
    bar: Option<&indicatif::ProgressBar>,
    mut f: impl FnMut(&Request) -> Result<(), E>,
) -> anyhow::Result<()>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let mut buf = Vec::with_capacity(4096);
    while reader.read_batch(&mut buf, 4096)? > 0 {
        for r in &buf {
            f(r)?;
        }
        if let Some(b) = bar {
            b.set_position(reader.bytes_read());
        }
    }
    Ok(())
}

/// Checks, before a long computation, that `path` can be written: opens it for writing (creating it if
/// missing, then removing it again; an existing file is not changed). Errors name the option and the path.
pub fn check_writable(option: &str, path: &Path) -> anyhow::Result<()> {
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .with_context(|| format!("{option} {}", path.display()))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// Prints the skipped-lines report of a reader to stderr.
pub fn report_skipped(r: &dyn TraceReader) {
    let b = r.skipped();
    if b.count > 0 {
        eprintln!("blockwell: skipped {} malformed line(s); first:", b.count);
        for e in &b.examples {
            eprintln!("  {e}");
        }
    }
}

/// Parses a byte count: `4096`, `4KiB`, `64MiB`, `1.5GiB`, `10MB` (SI), `512B`.
pub fn parse_bytes(s: &str) -> anyhow::Result<u64> {
    Ok(blockwell_sim::size::parse_bytes(s)?)
}

/// A cache size as given on the command line (`64MiB`, `1000blocks`, `1%`).
pub use blockwell_sim::size::SizeSpec;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_and_sizes() {
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert_eq!(parse_bytes("4KiB").unwrap(), 4096);
        assert_eq!(parse_bytes("1.5MiB").unwrap(), 1_572_864);
        assert_eq!(parse_bytes("10MB").unwrap(), 10_000_000);
        assert!(parse_bytes("12XB").unwrap_err().to_string().contains("unknown unit"));
        assert_eq!(SizeSpec::parse("1%").unwrap(), SizeSpec::Percent(1.0));
        assert_eq!(SizeSpec::parse("2692blocks").unwrap(), SizeSpec::Blocks(2692));
        assert_eq!(SizeSpec::parse("64MiB").unwrap(), SizeSpec::Bytes(64 << 20));
        assert!(SizeSpec::parse("-1%").is_err());
        assert_eq!("1%,5%,64MiB".parse::<crate::cmd::options::List<SizeSpec>>().unwrap().len(), 3);
        assert_eq!(SizeSpec::Percent(5.0).blocks(4096, 269_210), 13460, "rounded down, as the reference");
        assert_eq!(SizeSpec::Percent(0.0001).blocks(4096, 10), 1, "at least one block");
    }

    #[test]
    fn trace_patterns_expand_to_sorted_files() {
        let d = tempfile::tempdir().unwrap();
        for f in ["b.csv", "a.csv", ".hidden.csv", "c.txt", "odd[1].csv"] {
            std::fs::write(d.path().join(f), "x").unwrap();
        }
        std::fs::create_dir(d.path().join("dir.csv")).unwrap();
        let p = |s: &str| d.path().join(s);
        let pat = p("*.csv");
        assert_eq!(
            expand_pattern(&pat).unwrap(),
            Some(vec![p("a.csv"), p("b.csv"), p("odd[1].csv")]),
            "sorted; no directory, no dot file"
        );
        assert_eq!(expand_pattern(&p("?.csv")).unwrap(), Some(vec![p("a.csv"), p("b.csv")]));
        assert_eq!(expand_pattern(&p("odd[1].csv")).unwrap(), None, "an existing file is taken by its name");
        assert_eq!(expand_pattern(&p("missing.csv")).unwrap(), None, "a plain path is left to the reader");
        let e = expand_pattern(&p("*.zst")).unwrap_err().to_string();
        assert_eq!(e, format!("--trace '{}': no file matches the pattern", p("*.zst").display()));
        let e = expand_pattern(&p("[.csv")).unwrap_err().to_string();
        assert!(e.starts_with("--trace '") && e.contains("not a glob pattern"), "{e}");

        let list = |values: &[PathBuf]| {
            let args = TraceListArgs { traces: values.to_vec(), read: ReadArgs::with_format(None) };
            let l = args.expand().unwrap();
            (l.traces.into_iter().map(|t| t.trace).collect::<Vec<_>>(), l.many)
        };
        assert_eq!(list(&[p("b.csv")]), (vec![p("b.csv")], false), "one trace");
        assert_eq!(list(&[p("a*.csv")]), (vec![p("a.csv")], true), "a pattern gives several traces' output");
        assert_eq!(
            list(&[p("c.txt"), p("[ab].csv")]),
            (vec![p("c.txt"), p("a.csv"), p("b.csv")], true),
            "in the order given, each pattern's files in place"
        );
    }
}
