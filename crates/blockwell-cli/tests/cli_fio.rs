//! fio's NBD engine (libnbd) against `blockwell serve` with a cache smaller than the region: data written
//! through the server reads back with the right CRC32C, for random 4 KiB mixed I/O at queue depth 16 and for
//! 1 MiB sequential writes. Skips with "SKIPPED: fio not installed" / "SKIPPED: fio has no nbd engine".

mod util;

use std::path::{Path, PathBuf};
use std::process::Command;
use util::serve::{disk, Served};

/// fio with the nbd engine, or None after printing why the test is skipped.
fn fio_nbd() -> Option<()> {
    let Ok(out) = Command::new("fio").arg("--enghelp=nbd").output() else {
        util::skip("fio not installed");
        return None;
    };
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() || !text.contains("uri") {
        util::skip("fio has no nbd engine");
        return None;
    }
    Some(())
}

/// Runs fio in `dir` against `uri` with `args` (plus verification options) and returns its output; asserts
/// exit 0 and no verify error.
fn fio(dir: &Path, uri: &str, name: &str, args: &[&str]) -> String {
    let out = Command::new("fio")
        .current_dir(dir)
        .args([&format!("--name={name}"), "--ioengine=nbd", &format!("--uri={uri}")])
        .args(args)
        .args(["--verify=crc32c", "--verify_fatal=1", "--do_verify=1", "--time_based=0", "--runtime=20"])
        .arg("--verify_state_save=0")
        .output()
        .expect("run fio");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "fio {name} failed ({:?}):\n{text}", out.status);
    assert!(!text.contains("verify") && !text.contains("bad magic"), "fio {name} reports a verify error:\n{text}");
    assert!(text.contains("err= 0"), "fio {name} reports an error:\n{text}");
    text
}

/// A fio job's run through `blockwell serve`: the server's last output and the file it served.
struct FioRun {
    out: String,
    img: PathBuf,
    _dir: tempfile::TempDir,
}

/// Serves a 32 MiB file through an 8 MiB ARC cache, runs fio job `name` with `args` against it and stops the
/// server, asserting a graceful exit; `None` when fio cannot run (the test is skipped).
fn fio_through_arc_cache(name: &str, args: &[&str]) -> Option<FioRun> {
    fio_nbd()?;
    let dir = tempfile::tempdir().unwrap();
    let img = disk(dir.path(), 32);
    let s = Served::start(&["--backend", img.to_str().unwrap(), "--cache", "8MiB", "--policy", "arc"]);
    fio(dir.path(), &s.uri, name, args);
    let (ok, out) = s.stop();
    assert!(ok, "graceful stop exits 0: {out}");
    Some(FioRun { out, img, _dir: dir })
}

#[test]
fn fio_random_mixed_4k_qd16_verifies_through_a_small_arc_cache() {
    let Some(run) = fio_through_arc_cache("randrw", &["--rw=randrw", "--bs=4k", "--size=32m", "--iodepth=16"]) else {
        return;
    };
    // The stop summary counts what fio sent: its reads line names a request count above 0.
    let reads = run.out.lines().find_map(|l| l.trim_start().strip_prefix("reads")).expect("a reads line");
    let n: u64 = reads.split_whitespace().next().and_then(|w| w.parse().ok()).expect("a request count");
    assert!(n > 0, "{}", run.out);
}

#[test]
fn fio_sequential_1m_write_then_verify() {
    let Some(run) = fio_through_arc_cache("seqwrite", &["--rw=write", "--bs=1M", "--size=32m", "--iodepth=4"]) else {
        return;
    };
    // The write-through cache left the verified pattern in the file: fio's header magic leads every block.
    let f = std::fs::read(&run.img).unwrap();
    assert!(f.chunks(1 << 20).all(|b| b[..2] == [0xca, 0xac]), "fio's verify header in every 1 MiB block");
}
