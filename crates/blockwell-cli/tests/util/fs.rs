//! Helpers for the tests that put a real filesystem on a FUSE export through a loop device.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs a system command (not checked).
pub fn sh(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

/// Runs a system command and asserts success; returns stdout.
pub fn sh_ok(cmd: &str, args: &[&str]) -> String {
    let o = sh(cmd, args);
    assert!(
        o.status.success(),
        "{cmd} {args:?} failed ({:?}):\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).to_string()
}

/// Whether something is mounted on `dir`.
pub fn is_mounted(dir: &Path) -> bool {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(dir.to_str().unwrap()))
}

/// On the PATH (quietly: the caller says what it skips).
fn on_path(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Why this machine cannot run a FUSE + loop device test needing `tools` as well, if it cannot.
pub fn missing_prerequisite(tools: &[&str]) -> Option<String> {
    if String::from_utf8_lossy(&sh("id", &["-u"]).stdout).trim() != "0" {
        return Some("not root (losetup and mount need it)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing".into());
    }
    tools.iter().chain(&["losetup", "mount", "umount"]).find(|t| !on_path(t)).map(|t| format!("{t} not installed"))
}
