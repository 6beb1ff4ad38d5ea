//! `blockwell mount` driven as a user would: the FUSE export under a loop device, a real filesystem (ext4, and
//! xfs where mkfs.xfs exists) made and mounted on it, 64 MiB of pseudo-random data written, page caches dropped,
//! read back and compared, the filesystem checked on the loop device, then SIGTERM for a clean unmount and the
//! backing image checked again (write-through: everything acknowledged is in the image).
//!
//! Needs root, /dev/fuse, losetup and mkfs.ext4; otherwise each test prints "SKIPPED: …" and passes.
//! Every mount, loop device and process the test starts is released by a guard, even when an assertion fails.

mod util;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use util::fs::{is_mounted, missing_prerequisite, sh, sh_ok as ok};
use util::serve::have;

/// Everything the test set up, torn down in reverse order on drop (even after a failed assertion).
#[derive(Default)]
struct Guard {
    child: Option<Child>,
    fuse_dir: Option<PathBuf>,
    loop_dev: Option<String>,
    fs_dir: Option<PathBuf>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(d) = self.fs_dir.take() {
            if is_mounted(&d) {
                let _ = sh("umount", &[d.to_str().unwrap()]);
            }
        }
        if let Some(l) = self.loop_dev.take() {
            let _ = sh("losetup", &["-d", &l]);
        }
        if let Some(mut c) = self.child.take() {
            let _ = sh("kill", &["-TERM", &c.id().to_string()]);
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) && c.try_wait().ok().flatten().is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        if let Some(d) = self.fuse_dir.take() {
            if is_mounted(&d) {
                let _ = sh("umount", &["-l", d.to_str().unwrap()]);
            }
        }
    }
}

/// xorshift64*: deterministic pseudo-random bytes.
fn random_bytes(len: usize, mut seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        out.extend_from_slice(&seed.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn drop_caches() {
    let _ = Command::new("sync").status();
    if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open("/proc/sys/vm/drop_caches") {
        let _ = f.write_all(b"3\n");
    }
}

/// Starts `blockwell mount` (with `extra` options); `None` (after a SKIPPED message) when this machine does not
/// permit FUSE mounts.
fn start_mount(g: &mut Guard, img: &Path, mnt: &Path, extra: &[&str]) -> Option<PathBuf> {
    let mut child = util::bin()
        .args(["mount", "--backend", img.to_str().unwrap(), "--mountpoint", mnt.to_str().unwrap()])
        .args(["--cache", "32MiB", "--policy", "arc"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start blockwell mount");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    if line.is_empty() {
        let mut err = String::new();
        child.stderr.as_mut().unwrap().read_to_string(&mut err).unwrap();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(2), "blockwell mount: {err}");
        // Only a refused FUSE mount is a reason to skip; any other error (a bad option) fails the test.
        assert!(err.contains("mounting FUSE at"), "blockwell mount: {err}");
        util::skip(&format!("FUSE mounting is not permitted here: {}", err.trim()));
        return None;
    }
    g.child = Some(child);
    g.fuse_dir = Some(mnt.to_path_buf());
    let file = mnt.join("disk");
    assert_eq!(line.trim(), format!("blockwell: mounted {} at {}", img.display(), file.display()));
    let start = Instant::now();
    while !file.exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "{} did not appear", file.display());
        std::thread::sleep(Duration::from_millis(50));
    }
    Some(file)
}

/// The whole round trip with one filesystem on a sparse image of `image_mib` MiB: `mkfs` and `check` are the commands, `check` run with the
/// device or image as its last argument.
fn round_trip(image_mib: u64, mkfs: &[&str], check: &[&str]) {
    if let Some(why) = missing_prerequisite(&["mkfs.ext4", "e2fsck"]) {
        util::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let mnt = tmp.path().join("mnt");
    let fs_dir = tmp.path().join("fs");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::create_dir(&fs_dir).unwrap();
    std::fs::File::create(&img).unwrap().set_len(image_mib << 20).unwrap();

    let mut g = Guard::default();
    let Some(file) = start_mount(&mut g, &img, &mnt, &[]) else { return };
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(meta.len(), image_mib << 20);
    let names: Vec<String> =
        std::fs::read_dir(&mnt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert_eq!(names, ["disk"]);

    // A loop device over the export, with direct I/O where the kernel accepts it.
    let f = file.to_str().unwrap();
    let o = sh("losetup", &["--find", "--show", "--direct-io=on", f]);
    let dev = if o.status.success() {
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    } else {
        ok("losetup", &["--find", "--show", f]).trim().to_string()
    };
    g.loop_dev = Some(dev.clone());

    let mut args = mkfs[1..].to_vec();
    args.push(&dev);
    ok(mkfs[0], &args);
    ok("mount", &[&dev, fs_dir.to_str().unwrap()]);
    g.fs_dir = Some(fs_dir.clone());

    let data = random_bytes(64 << 20, 0x9e37_79b9_7f4a_7c15);
    let target = fs_dir.join("random.bin");
    std::fs::write(&target, &data).unwrap();
    ok("sync", &[]);
    drop_caches();
    let back = std::fs::read(&target).unwrap();
    assert!(back == data, "read back differs from what was written");
    drop(back);

    ok("umount", &[fs_dir.to_str().unwrap()]);
    g.fs_dir = None;
    let mut args = check[1..].to_vec();
    args.push(&dev);
    ok(check[0], &args);
    ok("losetup", &["-d", &dev]);
    g.loop_dev = None;

    // SIGTERM: clean unmount, counters, exit 0.
    let mut child = g.child.take().unwrap();
    ok("kill", &["-TERM", &child.id().to_string()]);
    let mut rest = String::new();
    child.stdout.take().unwrap().read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "blockwell mount exited {status:?}: {err}");
    assert!(rest.contains("blockwell: unmounted;"), "stdout after SIGTERM: {rest:?}");
    assert!(!is_mounted(&mnt), "the FUSE mount is still there after SIGTERM");
    g.fuse_dir = None;

    // Write-through: the image alone holds a consistent filesystem.
    let mut args = check[1..].to_vec();
    let img_s = img.to_str().unwrap();
    args.push(img_s);
    ok(check[0], &args);
}

#[test]
fn ext4_on_loop_on_fuse_round_trips_and_checks_clean() {
    round_trip(256, &["mkfs.ext4", "-q", "-F"], &["e2fsck", "-fn"]);
}

#[test]
fn xfs_on_loop_on_fuse_round_trips_and_checks_clean() {
    if !have("mkfs.xfs") || !have("xfs_repair") {
        util::skip("mkfs.xfs/xfs_repair not installed");
        return;
    }
    // mkfs.xfs refuses filesystems under 300 MB.
    round_trip(512, &["mkfs.xfs", "-q", "-f"], &["xfs_repair", "-n"]);
}

/// `--control` answers `blockwell status`; `fusermount3 -u` from outside ends the mount like a signal: the
/// counters are printed, the control socket removed, exit 0, and the data written is in the image.
#[test]
fn unmounted_from_outside_exits_cleanly_and_status_works_meanwhile() {
    if let Some(why) = missing_prerequisite(&["mkfs.ext4", "e2fsck"]) {
        util::skip(&why);
        return;
    }
    if !have("fusermount3") {
        util::skip("fusermount3 not installed (the fuse3 package)");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let mnt = tmp.path().join("mnt");
    let sock = tmp.path().join("ctl.sock");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::File::create(&img).unwrap().set_len(4 << 20).unwrap();
    let mut g = Guard::default();
    let Some(file) = start_mount(&mut g, &img, &mnt, &["--control", sock.to_str().unwrap()]) else { return };
    let data = random_bytes(64 << 10, 7);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().read(true).write(true).open(&file).unwrap();
        f.write_all_at(&data, 8192).unwrap();
        f.sync_all().unwrap();
        let mut back = vec![0u8; data.len()];
        f.read_exact_at(&mut back, 8192).unwrap();
        f.read_exact_at(&mut back, 8192).unwrap();
        assert!(back == data);
    }
    let st = util::ok(&["status", "--control", sock.to_str().unwrap()]);
    assert!(st.starts_with("disk: write-through, 4.00 MiB (8192 sectors), backend "), "{st}");
    assert!(st.contains("\n  cache       arc, 8192 blocks, "), "{st}");
    assert!(st.contains("\n  reads       2 requests, "), "{st}");
    let j: serde_json::Value =
        serde_json::from_str(&util::ok(&["status", "--control", sock.to_str().unwrap(), "--json"])).unwrap();
    assert_eq!(j["exports"][0]["name"], "disk");
    assert_eq!(j["exports"][0]["cache"]["read_requests"], 2, "{j}");

    ok("fusermount3", &["-u", mnt.to_str().unwrap()]);
    let mut child = g.child.take().unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("blockwell mount did not exit after fusermount3 -u");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    g.fuse_dir = None;
    let mut rest = String::new();
    child.stdout.take().unwrap().read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "blockwell mount exited {status:?}: {err}");
    assert!(err.is_empty(), "{err}");
    assert!(rest.contains("was unmounted from outside\nblockwell: unmounted; "), "{rest}");
    assert!(rest.contains("\n  reads       2 requests, "), "{rest}");
    assert!(!sock.exists(), "the control socket is removed");
    assert!(!is_mounted(&mnt));
    let image = std::fs::read(&img).unwrap();
    assert!(image[8192..8192 + data.len()] == data[..], "the data written is in the image");
}

/// Once mounted, `blockwell mount` loses the readers of its stdout and stderr (closed pipes): SIGTERM still
/// unmounts, exits 0 and shuts its write-back cache device down cleanly, the dirty blocks kept.
#[test]
fn closed_stdout_and_stderr_never_abort_a_mount() {
    if let Some(why) = missing_prerequisite(&[]) {
        util::skip(&why);
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let mnt = tmp.path().join("mnt");
    let dev = tmp.path().join("cache.dev");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::File::create(&img).unwrap().set_len(4 << 20).unwrap();
    let mut g = Guard::default();
    let extra = ["--cache-dev", dev.to_str().unwrap(), "--cache-dev-size", "4MiB", "--mode", "write-back"];
    let Some(file) = start_mount(&mut g, &img, &mnt, &[&extra[..], &["--cleaner", "none"]].concat()) else {
        return;
    };
    let mut child = g.child.take().unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
        f.write_all_at(&[7u8; 64 << 10], 0).unwrap();
        f.sync_all().unwrap();
    }
    ok("kill", &["-TERM", &child.id().to_string()]);
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("blockwell mount did not exit after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
    g.fuse_dir = None;
    assert!(!is_mounted(&mnt));
    let st = util::ok(&["cache", "status", dev.to_str().unwrap()]);
    assert!(st.contains("shut down cleanly") && st.contains(" 16 dirty"), "{st}");
}

#[test]
fn bad_input_is_one_error_line() {
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    std::fs::File::create(&img).unwrap().set_len(1 << 20).unwrap();
    let dir = tmp.path().to_str().unwrap();
    let missing = tmp.path().join("missing");
    let e = util::fails(&["mount", "--backend", missing.to_str().unwrap(), "--mountpoint", dir]);
    assert!(e.contains("--backend"), "{e}");
    let e = util::fails(&["mount", "--backend", img.to_str().unwrap(), "--mountpoint", img.to_str().unwrap()]);
    assert!(e.contains("not a directory"), "{e}");
}
