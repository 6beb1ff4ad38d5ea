//! Helpers for the integration tests: run the real `blockwell` binary and find `../shared`.

#![allow(dead_code)]

pub mod fs;
pub mod serve;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub use blockwell_testkit::skip;

/// The `blockwell` binary cargo built for these tests.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_blockwell"))
}

/// Runs `blockwell` with `args`.
pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run blockwell")
}

/// Runs `blockwell` and asserts success; returns stdout.
pub fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(o.status.success(), "blockwell {args:?} failed ({:?}):\n{}", o.status, String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).expect("utf-8 stdout")
}

/// Runs `blockwell` expecting exit code 2 and one error line; returns that line.
pub fn fails(args: &[&str]) -> String {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "blockwell {args:?}: expected exit 2, stderr:\n{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "blockwell {args:?}: expected one error line, got:\n{err}");
    assert!(lines[0].starts_with("blockwell: error: "), "{err}");
    lines[0].to_string()
}

/// `../shared` beside the repository, if present (CI has it; a bare clone may not).
pub fn shared() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared");
    if p.join("traces").is_dir() {
        Some(p.canonicalize().expect("canonical path"))
    } else {
        skip("../shared (traces and reference results) is not beside the repository");
        None
    }
}

/// Whether the tests run as root; when not, reports the test as skipped because of `why`.
pub fn root(why: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if !root {
        skip(&format!("{why} needs root"));
    }
    root
}
