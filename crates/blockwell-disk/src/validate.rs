//! Validation against measured service times: DiskSim's validation traces (`../shared/reference/disk/
//! {barracuda,cheetah9LP}.trace`, from DiskSim 2.01.016's `valid/` directory).
//!
//! Trace format, one request per line: `R|W action blkno bcount service_us next_us` — operation, the buffer
//! action the tracer recorded (not used), first 512 B block, block count, the measured service time of the real
//! disk (µs), and the idle time before the next request (µs).
//!
//! Replay follows DiskSim's own validation mode (`iotrace_validate_get_ioreq_event` and the `VALIDATE` case of
//! the I/O driver's completion path): requests are served one at a time; the first arrives at 0; each next one
//! arrives `next_us` of the previous line *after the simulated completion* of the previous request (the trace
//! was taken with one request outstanding, so the gap after completion is what the host did, and replaying gaps
//! after completion keeps the disk's idle time — hence its read-ahead and destaging — as in the measurement).
//!
//! Comparison: mean measured vs mean simulated service time, their relative error, and Ruemmler & Wilkes's
//! demerit figure — the root-mean-square horizontal distance between the two service-time CDFs, i.e. between
//! the `q`-quantiles of the two distributions over `q` in (0, 1) — in µs and as a percentage of the measured
//! mean.

use crate::{DiskModel, DiskOp, DiskRequest};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A validation-trace line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TraceRecord {
    pub op: DiskOp,
    pub sector: u64,
    pub sectors: u64,
    pub service_us: f64,
    pub next_us: f64,
}

/// Reading a validation trace failed.
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    /// A malformed line: `file:line: what`.
    #[error("{}:{line}: {what}", file.display())]
    Parse { file: PathBuf, line: u64, what: String },
    #[error("{}: no requests", file.display())]
    Empty { file: PathBuf },
}

/// Reads a whole validation trace (10,000 lines for DiskSim's).
pub fn read_trace(path: &Path) -> Result<Vec<TraceRecord>, ValidateError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| ValidateError::Io { path: path.to_path_buf(), source })?;
    parse_trace(&text, path)
}

/// Parses validation-trace text; `file` names it in errors.
pub fn parse_trace(text: &str, file: &Path) -> Result<Vec<TraceRecord>, ValidateError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let ln = i as u64 + 1;
        let err = |what: String| ValidateError::Parse { file: file.to_path_buf(), line: ln, what };
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.is_empty() || f[0].starts_with('#') {
            continue;
        }
        if f.len() != 6 {
            return Err(err(format!(
                "expected 6 fields `R|W action blkno bcount service_us next_us`, found {} in '{}'",
                f.len(),
                line.trim()
            )));
        }
        let op = match f[0] {
            "R" | "r" => DiskOp::Read,
            "W" | "w" => DiskOp::Write,
            x => return Err(err(format!("expected R or W, found '{x}'"))),
        };
        let int = |s: &str, what: &str| s.parse::<u64>().map_err(|_| err(format!("expected {what}, found '{s}'")));
        let num = |s: &str, what: &str| {
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .ok_or_else(|| err(format!("expected {what}, found '{s}'")))
        };
        let sector = int(f[2], "a block number")?;
        let sectors = int(f[3], "a block count")?;
        if sectors == 0 {
            return Err(err("expected a block count >= 1, found 0".into()));
        }
        out.push(TraceRecord {
            op,
            sector,
            sectors,
            service_us: num(f[4], "a service time in µs (>= 0)")?,
            next_us: num(f[5], "an idle time in µs (>= 0)")?,
        });
    }
    if out.is_empty() {
        return Err(ValidateError::Empty { file: file.to_path_buf() });
    }
    Ok(out)
}

/// Replays `records` through `model` as DiskSim's validation does (see the module doc); returns each request's
/// simulated service time in ns.
pub fn replay(model: &mut dyn DiskModel, records: &[TraceRecord]) -> Vec<u64> {
    let mut t = 0u64;
    records
        .iter()
        .map(|r| {
            let s = model.service(t, &DiskRequest { op: r.op, sector: r.sector, sectors: r.sectors });
            t += s + (r.next_us * 1000.0).round() as u64;
            s
        })
        .collect()
}

/// Mean of a slice (0 for an empty one).
pub fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Ruemmler-Wilkes demerit: RMS horizontal distance between the CDFs of `a` and `b` (same unit as the values),
/// taken at the quantiles `(i + 1/2) / N`, `N` the larger sample size.
pub fn demerit(a: &[f64], b: &[f64]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_by(f64::total_cmp);
    b.sort_by(f64::total_cmp);
    let n = a.len().max(b.len());
    let q = |v: &[f64], i: usize| v[((i as f64 + 0.5) / n as f64 * v.len() as f64) as usize % v.len().max(1)];
    let ss: f64 = (0..n).map(|i| (q(&a, i) - q(&b, i)).powi(2)).sum();
    (ss / n as f64).sqrt()
}

/// The outcome of a validation run.
#[derive(Clone, Debug, Serialize)]
pub struct Validation {
    pub model: String,
    pub requests: usize,
    pub mean_measured_us: f64,
    pub mean_simulated_us: f64,
    /// (simulated − measured) / measured.
    pub relative_error: f64,
    pub demerit_us: f64,
    /// Demerit as a percentage of the measured mean.
    pub demerit_pct: f64,
    pub reads: OpStats,
    pub writes: OpStats,
    #[serde(skip)]
    pub measured_us: Vec<f64>,
    #[serde(skip)]
    pub simulated_us: Vec<f64>,
}

/// Means for one operation type.
#[derive(Clone, Debug, Serialize)]
pub struct OpStats {
    pub requests: usize,
    pub mean_measured_us: f64,
    pub mean_simulated_us: f64,
}

/// Replays `records` through `model` (reset first) and compares.
pub fn validate(model: &mut dyn DiskModel, records: &[TraceRecord]) -> Validation {
    model.reset();
    let sim_ns = replay(model, records);
    let measured: Vec<f64> = records.iter().map(|r| r.service_us).collect();
    let simulated: Vec<f64> = sim_ns.iter().map(|&ns| ns as f64 / 1000.0).collect();
    let op_stats = |op: DiskOp| {
        let idx: Vec<usize> = (0..records.len()).filter(|&i| records[i].op == op).collect();
        OpStats {
            requests: idx.len(),
            mean_measured_us: mean(&idx.iter().map(|&i| measured[i]).collect::<Vec<_>>()),
            mean_simulated_us: mean(&idx.iter().map(|&i| simulated[i]).collect::<Vec<_>>()),
        }
    };
    let (mm, ms) = (mean(&measured), mean(&simulated));
    let d = demerit(&measured, &simulated);
    Validation {
        model: model.describe(),
        requests: records.len(),
        mean_measured_us: mm,
        mean_simulated_us: ms,
        relative_error: if mm > 0.0 { (ms - mm) / mm } else { 0.0 },
        demerit_us: d,
        demerit_pct: if mm > 0.0 { 100.0 * d / mm } else { 0.0 },
        reads: op_stats(DiskOp::Read),
        writes: op_stats(DiskOp::Write),
        measured_us: measured,
        simulated_us: simulated,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{MemoryModel, MemoryParams};

    #[test]
    fn parses_lines_and_reports_bad_ones_with_file_and_line() {
        let text = "R Hit    2992396   4  13670.00000  35942.00000\nW Miss 8 8 1971.5 0\n";
        let r = parse_trace(text, Path::new("t.trace")).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].op, DiskOp::Read);
        assert_eq!((r[0].sector, r[0].sectors, r[0].service_us, r[0].next_us), (2992396, 4, 13670.0, 35942.0));
        assert_eq!(r[1].op, DiskOp::Write);
        let e = parse_trace("R Hit 1 4 10 10\nX Hit 1 4 10 10\n", Path::new("t.trace")).unwrap_err();
        assert_eq!(e.to_string(), "t.trace:2: expected R or W, found 'X'");
        let e = parse_trace("R Hit 1 4 10\n", Path::new("t.trace")).unwrap_err().to_string();
        assert!(e.starts_with("t.trace:1: expected 6 fields"), "{e}");
        let e = parse_trace("R Hit 1 four 10 10\n", Path::new("t.trace")).unwrap_err().to_string();
        assert_eq!(e, "t.trace:1: expected a block count, found 'four'");
        let e = parse_trace("R Hit 1 4 -3 10\n", Path::new("t.trace")).unwrap_err().to_string();
        assert!(e.starts_with("t.trace:1: expected a service time"), "{e}");
        assert!(matches!(parse_trace("\n", Path::new("e")), Err(ValidateError::Empty { .. })));
    }

    #[test]
    fn demerit_is_the_rms_horizontal_cdf_distance() {
        let a = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(demerit(&a, &a), 0.0);
        let b = [2.0, 3.0, 4.0, 5.0]; // shifted by 1
        assert!((demerit(&a, &b) - 1.0).abs() < 1e-12);
        // Order does not matter; different sizes work.
        assert!(
            (demerit(&[4.0, 1.0, 3.0, 2.0], &[3.0, 5.0]) - demerit(&[1.0, 2.0, 3.0, 4.0], &[3.0, 5.0])).abs() < 1e-12
        );
    }

    #[test]
    fn replay_issues_each_request_after_the_previous_completion_plus_the_gap() {
        // A constant-time device: completion times are predictable.
        let mut m = MemoryModel::new(MemoryParams::dram()).unwrap();
        let recs = parse_trace("R a 0 8 5 100\nR a 8 8 5 100\n", Path::new("t")).unwrap();
        let v = validate(&mut m, &recs);
        assert_eq!(v.simulated_us, vec![1.95, 1.95]);
        assert_eq!(v.mean_measured_us, 5.0);
        assert!((v.relative_error - (1.95 - 5.0) / 5.0).abs() < 1e-12);
        assert!((v.demerit_us - 3.05).abs() < 1e-9);
    }
}
