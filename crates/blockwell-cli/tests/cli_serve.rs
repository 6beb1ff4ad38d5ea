//! `blockwell serve` driven as a user would: the real binary, real NBD clients (qemu-io, nbdinfo, nbdcopy,
//! qemu-img), SIGTERM for a graceful stop, and the backing file checked for exactly the acknowledged data.
//! Each test skips with "SKIPPED: <tool> not installed" when a client is missing (`scripts/test.sh` installs them).

mod util;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};

fn have(tool: &str) -> bool {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("SKIPPED: {tool} not installed");
    }
    ok
}

/// A running `blockwell serve` and its NBD URI.
struct Served {
    child: Child,
    uri: String,
}

impl Served {
    fn start(args: &[&str]) -> Served {
        let mut child = util::bin()
            .arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start blockwell serve");
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        let uri = line.split_whitespace().find(|w| w.starts_with("nbd://")).unwrap_or_else(|| {
            let mut err = String::new();
            child.stderr.as_mut().unwrap().read_to_string(&mut err).unwrap();
            panic!("no URI in {line:?}; stderr: {err}")
        });
        Served { uri: uri.to_string(), child }
    }

    /// SIGTERM, then the exit status and the rest of stdout.
    fn stop(mut self) -> (bool, String) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let mut rest = String::new();
        self.child.stdout.take().unwrap().read_to_string(&mut rest).unwrap();
        let status = self.child.wait().unwrap();
        (status.success(), rest)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn qemu_io(uri: &str, cmds: &[&str]) -> String {
    let mut c = Command::new("qemu-io");
    c.args(["-f", "raw", uri]);
    for x in cmds {
        c.args(["-c", x]);
    }
    let out = c.output().expect("qemu-io");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("failed") && !text.contains("error"), "qemu-io {cmds:?}:\n{text}");
    text
}

fn disk(dir: &Path, mib: u64) -> std::path::PathBuf {
    let p = dir.join("disk.img");
    std::fs::File::create(&p).unwrap().set_len(mib << 20).unwrap();
    p
}

#[test]
fn qemu_io_patterns_reach_the_backing_file_and_sigterm_drains() {
    if !have("qemu-io") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 16);
    let s = Served::start(&["--backend", img.to_str().unwrap(), "--cache", "1MiB", "--policy", "arc"]);
    qemu_io(
        &s.uri,
        &[
            "write -P 0xab 0 2M",
            "read -P 0xab 0 2M",
            "read -P 0xab 0 2M",
            "write -P 0x11 4095 3",
            "read -P 0x11 4095 3",
            "write -P 0x22 8M 64k",
            "discard 8M 32k",
            "write -z 8421376 32k",
            "read -P 0 8421376 32k",
            "flush",
        ],
    );
    let (ok, out) = s.stop();
    assert!(ok, "graceful stop exits 0: {out}");
    assert!(out.contains("stopped;") && out.contains("read_block_hits"), "{out}");
    // Write-through: the file holds exactly what was acknowledged.
    let f = std::fs::read(&img).unwrap();
    let mut want = vec![0u8; 16 << 20];
    want[..2 << 20].fill(0xab);
    want[4095..4098].fill(0x11);
    want[8 << 20..(8 << 20) + (64 << 10)].fill(0x22);
    want[(8 << 20) + (32 << 10)..(8 << 20) + (64 << 10)].fill(0);
    // The discarded 32 KiB may read as anything; compare around it.
    let hole = (8 << 20)..(8 << 20) + (32 << 10);
    assert_eq!(f[..hole.start], want[..hole.start]);
    assert_eq!(f[hole.end..], want[hole.end..]);
}

#[test]
fn nbdinfo_flags_and_nbdcopy_round_trip() {
    if !have("nbdinfo") || !have("nbdcopy") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 16);
    let s = Served::start(&["--backend", img.to_str().unwrap(), "--cache", "4MiB", "--description", "test disk"]);
    let info = Command::new("nbdinfo").args(["--json", &s.uri]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    let e = &v["exports"][0];
    assert_eq!(e["export-size"], 16 << 20);
    assert_eq!(e["is_read_only"], false);
    assert_eq!(e["can_flush"], true);
    assert_eq!(e["can_fua"], true);
    assert_eq!(e["block_size_preferred"], 4096);
    assert_eq!(e["description"], "test disk");
    // Random data in, back out.
    let src = d.path().join("src.bin");
    let data: Vec<u8> = (0..16u32 << 20).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    std::fs::write(&src, &data).unwrap();
    assert!(Command::new("nbdcopy").args([src.to_str().unwrap(), &s.uri]).status().unwrap().success());
    let back = d.path().join("back.bin");
    assert!(Command::new("nbdcopy").args([&s.uri, back.to_str().unwrap()]).status().unwrap().success());
    assert!(std::fs::read(&back).unwrap() == data, "nbdcopy round trip differs");
    let (ok, _) = s.stop();
    assert!(ok);
    assert!(std::fs::read(&img).unwrap() == data, "the backing file holds the copied data");
}

#[test]
fn read_only_export_refuses_writes() {
    if !have("qemu-io") || !have("nbdinfo") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 4);
    let s = Served::start(&["--backend", img.to_str().unwrap(), "--read-only"]);
    let info = Command::new("nbdinfo").args(["--json", &s.uri]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(v["exports"][0]["is_read_only"], true);
    let out = Command::new("qemu-io").args(["-f", "raw", &s.uri, "-c", "write -P 1 0 4k"]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() || text.contains("ermission") || text.contains("read-only"), "{text}");
    drop(s);
    assert!(std::fs::read(&img).unwrap().iter().all(|&b| b == 0), "nothing written");
}

#[test]
fn bad_serve_options_are_one_clear_error() {
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 1);
    let b = img.to_str().unwrap();
    let missing = d.path().join("nope.img");
    assert!(util::fails(&["serve", "--backend", missing.to_str().unwrap()]).contains("nope.img"));
    assert!(util::fails(&["serve", "--backend", b, "--policy", "nosuch"]).contains("--policy"));
    assert!(util::fails(&["serve", "--backend", b, "--policy", "opt"]).contains("--cache"));
    assert!(util::fails(&["serve", "--backend", b, "--policy", "lirs", "--preset", "libcachesim"]).contains("quirks"));
    assert!(util::fails(&["serve", "--backend", b, "--delay", "floppy"]).contains("--delay"));
    assert!(util::fails(&["serve", "--backend", b, "--mode", "write-back"]).contains("--mode"));
    assert!(util::fails(&["serve", "--backend", b, "--listen", "nowhere"]).contains("--listen"));
}
