//! The persistent cache device driven as a user would, with real clients, and crashed for real:
//!
//! - `blockwell cache` format / check / status / flush / detach, and the refusals (another origin, damaged
//!   metadata, a newer format, a device already formatted);
//! - kill -9 cycles: `blockwell serve --mode write-back --cache-dev` under a libnbd client writing verifiable
//!   patterns with FLUSH and FUA, killed with SIGKILL at random moments and restarted on the same device; after
//!   every restart every sector holds its last flushed value or a later one, and what a restart finds stays
//!   (`BLOCKWELL_KILL_CYCLES`, default 100; `scripts/crash.sh` runs 1,000);
//! - a filesystem on top: ext4 and xfs through `blockwell mount --cache-dev` and a loop device, files fsync'd
//!   before a SIGKILL of the mount are intact after the restart and the filesystem checks clean; after
//!   `blockwell cache detach`, the origin alone holds the same files.
//!
//! The NBD client is Debian's python3-libnbd (installed by the test command); the filesystem test needs root,
//! /dev/fuse and losetup. A missing prerequisite is reported with "SKIPPED: ..." (a failure in CI, where the test
//! command installed everything).

mod util;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use util::fs::{is_mounted, missing_prerequisite, sh, sh_ok};

const ORIGIN: u64 = 8 << 20;
const SECTORS: u64 = ORIGIN / 512;

fn python_nbd() -> bool {
    let ok = Command::new("/usr/bin/python3").args(["-c", "import nbd"]).status().is_ok_and(|s| s.success());
    if !ok {
        util::skip("python3-libnbd is not installed for /usr/bin/python3");
    }
    ok
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/util").join(name)
}

use blockwell_testkit::Rng;

/// Which write a sector holds (0: zeroes), `None` for anything else.
fn sector_id(sector: &[u8], n: u64) -> Option<u64> {
    if sector.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let id = u64::from_le_bytes(sector[..8].try_into().unwrap());
    sector
        .chunks(16)
        .all(|w| {
            u64::from_le_bytes(w[..8].try_into().unwrap()) == id && u64::from_le_bytes(w[8..].try_into().unwrap()) == n
        })
        .then_some(id)
}

/// What each sector may hold: its durable value and the writes issued since (QD1: in order).
struct Model {
    durable: Vec<u64>,
    since: Vec<Vec<u64>>,
    acked: u64,
    flushes: u64,
    /// Every event per sector, for a failure's message: (cycle, what).
    history: Vec<Vec<(u64, String)>>,
    cycle: u64,
}

impl Model {
    fn new() -> Model {
        Model {
            durable: vec![0; SECTORS as usize],
            since: vec![Vec::new(); SECTORS as usize],
            acked: 0,
            flushes: 0,
            history: vec![Vec::new(); SECTORS as usize],
            cycle: 0,
        }
    }

    /// Applies one client's log; returns the next free write id.
    fn apply(&mut self, log: &str, mut next: u64) -> u64 {
        let mut pending: Option<(u64, u64, u64, bool)> = None;
        for line in log.lines() {
            let w: Vec<&str> = line.split_whitespace().collect();
            match w.as_slice() {
                ["w", id, off, len, fua] => {
                    let (id, off, len) =
                        (id.parse().unwrap(), off.parse::<u64>().unwrap(), len.parse::<u64>().unwrap());
                    for s in off / 512..(off + len) / 512 {
                        self.since[s as usize].push(id);
                        self.history[s as usize].push((self.cycle, format!("w {id} fua {fua}")));
                    }
                    pending = Some((id, off / 512, len / 512, *fua == "1"));
                    next = id + 1;
                }
                ["W", id] => {
                    let (pid, first, n, fua) = pending.take().expect("an acknowledgement follows its write");
                    assert_eq!(id.parse::<u64>().unwrap(), pid);
                    self.acked += 1;
                    for s in first..first + n {
                        self.history[s as usize].push((self.cycle, format!("acked {pid}")));
                    }
                    if fua {
                        for s in first..first + n {
                            self.durable[s as usize] = pid;
                            self.since[s as usize].clear();
                        }
                    }
                }
                ["F"] => {
                    self.flushes += 1;
                    for ((d, since), h) in
                        self.durable.iter_mut().zip(self.since.iter_mut()).zip(self.history.iter_mut())
                    {
                        if let Some(&last) = since.last() {
                            *d = last;
                            since.clear();
                            h.push((self.cycle, format!("flushed, durable {last}")));
                        }
                    }
                }
                _ => {}
            }
        }
        next
    }

    /// Checks a dump of the device; what it holds becomes the durable state (it must not change later).
    fn check(&mut self, dump: &[u8], when: &str) {
        assert_eq!(dump.len() as u64, ORIGIN, "{when}: dump size");
        for s in 0..SECTORS as usize {
            let got = sector_id(&dump[s * 512..(s + 1) * 512], s as u64);
            let ok = got.is_some_and(|id| id == self.durable[s] || self.since[s].contains(&id));
            assert!(
                ok,
                "{when}: sector {s} holds {got:?}; last flushed {}, written since {:?}; history {:?}",
                self.durable[s], self.since[s], self.history[s]
            );
            if self.durable[s] != got.unwrap() || !self.since[s].is_empty() {
                self.history[s].push((self.cycle, format!("restart reads {}", got.unwrap())));
            }
            self.durable[s] = got.unwrap();
            self.since[s].clear();
        }
    }
}

/// A `blockwell serve` on a Unix socket.
struct Server {
    child: Child,
    uri: String,
}

impl Server {
    fn start(dir: &Path, extra: &[&str]) -> Server {
        let sock = dir.join("nbd.sock");
        let _ = std::fs::remove_file(&sock);
        let mut child = util::bin()
            .arg("serve")
            .args(["--backend", dir.join("origin.img").to_str().unwrap()])
            .args(["--cache-dev", dir.join("cache.dev").to_str().unwrap(), "--mode", "write-back"])
            .args(["--unix", sock.to_str().unwrap(), "--control", dir.join("ctl.sock").to_str().unwrap()])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start blockwell serve");
        util::serve::wait_ready(&mut child);
        Server { child, uri: format!("nbd+unix:///blockwell?socket={}", sock.display()) }
    }

    fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn stop(mut self) -> String {
        assert!(Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap().success());
        let mut out = String::new();
        self.child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "serve exited {status:?}");
        out
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dump(uri: &str) -> Vec<u8> {
    let o = Command::new("/usr/bin/python3").arg(script("nbd_dump.py")).arg(uri).output().unwrap();
    assert!(o.status.success(), "nbd_dump: {}", String::from_utf8_lossy(&o.stderr));
    o.stdout
}

fn cli(args: &[&str]) -> String {
    util::ok(args)
}

#[test]
fn kill9_cycles_lose_no_flushed_write() {
    if !python_nbd() {
        return;
    }
    let cycles: u64 = std::env::var("BLOCKWELL_KILL_CYCLES").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::File::create(d.join("origin.img")).unwrap().set_len(ORIGIN).unwrap();
    let origin = d.join("origin.img");
    std::fs::File::create(d.join("cache.dev")).unwrap().set_len(4 << 20).unwrap();
    cli(&["cache", "format", d.join("cache.dev").to_str().unwrap(), "--origin", origin.to_str().unwrap()]);
    let mut model = Model::new();
    let mut rng = Rng(0x6b69_6c6c_3921);
    let mut next_id = 1u64;
    let started = Instant::now();
    for cycle in 0..cycles {
        // Vary what a crash can find: commit intervals, cleaners, a RAM cache above or not.
        let commit = ["5", "50", "1000"][(cycle % 3) as usize];
        let cleaner = ["none", "watermark(high=20,low=5)", "pi(percent=5,update_ms=100)"][(cycle / 3 % 3) as usize];
        let ram = ["0", "1MiB"][(cycle / 9 % 2) as usize];
        let srv = Server::start(d, &["--commit-ms", commit, "--cleaner", cleaner, "--cache", ram]);
        model.cycle = cycle;
        model.check(
            &dump(&srv.uri),
            &format!("after restart {cycle} (--commit-ms {commit} --cleaner {cleaner} --cache {ram})"),
        );
        let mut client = Command::new("/usr/bin/python3")
            .arg(script("nbd_writer.py"))
            .args([&srv.uri, &ORIGIN.to_string(), &rng.next().to_string(), &next_id.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(30 + rng.below(300)));
        srv.kill9();
        let mut log = String::new();
        client.stdout.take().unwrap().read_to_string(&mut log).unwrap();
        let _ = client.wait();
        next_id = model.apply(&log, next_id);
    }
    // The last crash, checked; then clean everything to the origin and detach: the origin alone holds it.
    let srv = Server::start(d, &["--cleaner", "none"]);
    let last = dump(&srv.uri);
    model.check(&last, "after the last restart");
    let flush = cli(&["cache", "flush", "--control", d.join("ctl.sock").to_str().unwrap()]);
    assert!(flush.starts_with("ok: blockwell:"), "{flush}");
    srv.stop();
    cli(&["cache", "detach", d.join("cache.dev").to_str().unwrap()]);
    let img = std::fs::read(&origin).unwrap();
    assert!(img == last, "after detach the origin differs from what the cache served");
    assert!(model.acked > cycles * 10 && model.flushes > cycles, "acked {} flushes {}", model.acked, model.flushes);
    eprintln!(
        "{cycles} kill -9 cycles: {} writes acknowledged, {} flushes, none lost ({:.0} s)",
        model.acked,
        model.flushes,
        started.elapsed().as_secs_f64()
    );
}

#[test]
fn cache_commands_format_check_flush_detach_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let origin = d.join("origin.img");
    let other = d.join("other.img");
    let dev = d.join("cache.dev");
    for p in [&origin, &other] {
        std::fs::File::create(p).unwrap().set_len(ORIGIN).unwrap();
    }
    std::fs::File::create(&dev).unwrap().set_len(4 << 20).unwrap();
    let (o, x, v) = (origin.to_str().unwrap(), other.to_str().unwrap(), dev.to_str().unwrap());
    let out = cli(&["cache", "format", v, "--origin", o]);
    assert!(out.contains("slots of 4096 B"), "{out}");
    // Formatting again is refused without --force, and names what is there.
    let e = util::fails(&["cache", "format", v, "--origin", o]);
    assert!(e.contains("already holds a Blockwell cache device") && e.contains("--force"), "{e}");
    let check = cli(&["cache", "check", v, "--origin", o]);
    assert!(check.starts_with("result           no problems found"), "{check}");
    assert!(check.contains("shut down cleanly"), "{check}");
    // Another origin of the same size: refused by check (exit 1) and by serve, nothing written.
    let before = std::fs::read(&dev).unwrap();
    let o2 = util::run(&["cache", "check", v, "--origin", x]);
    assert_eq!(o2.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o2.stdout).contains("belongs to origin"));
    let e =
        util::fails(&["serve", "--backend", x, "--cache-dev", v, "--mode", "write-back", "--unix", "/nonexistent/s"]);
    assert!(e.contains("belongs to another origin"), "{e}");
    assert_eq!(std::fs::read(&dev).unwrap(), before, "a refused device is untouched");
    // Write-back needs a cache device; a missing one needs a size.
    let e = util::fails(&["serve", "--backend", o, "--mode", "write-back"]);
    assert!(e.contains("--mode write-back needs --cache-dev"), "{e}");
    let e = util::fails(&["serve", "--backend", o, "--cache-dev", d.join("none.dev").to_str().unwrap()]);
    assert!(e.contains("does not exist") && e.contains("--cache-dev-size"), "{e}");
    // Damaged metadata: check reports it (exit 1), serve refuses it.
    let mut bad = before.clone();
    bad[8192 + 100] ^= 0x5a;
    let damaged = d.join("damaged.dev");
    std::fs::write(&damaged, &bad).unwrap();
    let dm = damaged.to_str().unwrap();
    let r = util::run(&["cache", "check", dm]);
    assert_eq!(r.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&r.stdout).contains("slot table copy 0, block 0: checksum mismatch"));
    let e =
        util::fails(&["serve", "--backend", o, "--cache-dev", dm, "--mode", "write-back", "--unix", "/nonexistent/s"]);
    assert!(e.contains("corrupt metadata"), "{e}");
    // Not a cache device.
    let blank = d.join("blank.dev");
    std::fs::File::create(&blank).unwrap().set_len(4 << 20).unwrap();
    let e = util::fails(&["cache", "status", blank.to_str().unwrap()]);
    assert!(e.contains("not a Blockwell cache device"), "{e}");
    // A newer format: both superblock copies say version 2 (checksums recomputed as the format does).
    let mut newer = before.clone();
    for copy in [0usize, 4096] {
        newer[copy + 8..copy + 12].copy_from_slice(&2u32.to_le_bytes());
        newer[copy + 16..copy + 20].fill(0);
        let crc = crc32c::crc32c(&newer[copy..copy + 4096]);
        newer[copy + 16..copy + 20].copy_from_slice(&crc.to_le_bytes());
    }
    let nd = d.join("newer.dev");
    std::fs::write(&nd, &newer).unwrap();
    let e = util::fails(&["cache", "check", nd.to_str().unwrap()]);
    assert!(e.contains("format version 2 is newer"), "{e}");
    // flush and detach offline, with the origin the device records.
    if python_nbd() {
        let srv = Server::start(d, &["--cleaner", "none"]);
        let o = Command::new("/usr/bin/python3")
            .arg(script("nbd_writer.py"))
            .args([&srv.uri, &ORIGIN.to_string(), "7", "1"])
            .stdout(Stdio::null())
            .spawn();
        std::thread::sleep(Duration::from_millis(300));
        let status = cli(&["status", "--control", d.join("ctl.sock").to_str().unwrap()]);
        assert!(status.contains("cache dev   write-back, lru"), "{status}");
        srv.stop();
        let _ = o.map(|mut c| c.wait());
        let st = cli(&["cache", "status", v]);
        assert!(st.contains("shut down cleanly"), "{st}");
        let flushed = cli(&["cache", "flush", v]);
        assert!(flushed.contains("dirty block(s) written back"), "{flushed}");
        let st = cli(&["cache", "status", v]);
        assert!(st.contains(" 0 dirty,"), "{st}");
        let detached = cli(&["cache", "detach", v]);
        assert!(detached.contains("detached"), "{detached}");
        assert!(cli(&["cache", "status", v]).contains("detached (the origin alone is current)"));
    }
}

/// Writes `blocks` 4 KiB blocks of `byte` at offset 0 through libnbd (with a FLUSH when `flush`).
fn nbd_fill(uri: &str, byte: u8, blocks: u64, flush: bool) {
    let code = format!(
        "import nbd\nh = nbd.NBD()\nh.connect_uri({uri:?})\nh.pwrite(bytes([{byte}]) * {len}, 0)\n{}h.shutdown()\n",
        if flush { "h.flush()\n" } else { "" },
        len = blocks * 4096,
    );
    let o = Command::new("/usr/bin/python3").args(["-c", &code]).output().unwrap();
    assert!(o.status.success(), "nbd write: {}", String::from_utf8_lossy(&o.stderr));
}

fn dev_status(ctl: &Path) -> serde_json::Value {
    let s = cli(&["status", "--control", ctl.to_str().unwrap(), "--json"]);
    let v: serde_json::Value = serde_json::from_str(&s).unwrap();
    v["exports"][0]["cache_dev"].clone()
}

/// The origin file's first `blocks` blocks all hold `byte`.
fn origin_holds(origin: &Path, byte: u8, blocks: u64) -> bool {
    let data = std::fs::read(origin).unwrap();
    data[..(blocks * 4096) as usize].iter().all(|&b| b == byte)
}

#[test]
fn switching_a_running_export_out_of_write_back_cleans_first() {
    if !python_nbd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let origin = d.join("origin.img");
    std::fs::File::create(&origin).unwrap().set_len(ORIGIN).unwrap();
    let ctl = d.join("ctl.sock");
    let srv = Server::start(d, &["--cache-dev-size", "4MiB", "--cleaner", "none", "--cache", "0"]);
    // Write-back: the data is on the cache device only.
    nbd_fill(&srv.uri, 0xa1, 64, true);
    let st = dev_status(&ctl);
    assert_eq!((st["mode"].as_str(), st["dirty_blocks"].as_u64()), (Some("write-back"), Some(64)), "{st}");
    assert!(origin_holds(&origin, 0, 64), "nothing reached the origin yet");
    // To write-through: every dirty block is written back before the reply.
    let out = cli(&["cache", "mode", "write-through", "--control", ctl.to_str().unwrap()]);
    assert!(out.contains("write-through"), "{out}");
    let st = dev_status(&ctl);
    assert_eq!((st["mode"].as_str(), st["dirty_blocks"].as_u64()), (Some("write-through"), Some(0)), "{st}");
    assert!(st["cleaned_blocks"].as_u64().unwrap() >= 64, "{st}");
    assert!(origin_holds(&origin, 0xa1, 64), "cleaned to the origin");
    // Write-through from now on: the origin has a write when it is acknowledged, without FLUSH.
    nbd_fill(&srv.uri, 0xb2, 16, false);
    assert!(origin_holds(&origin, 0xb2, 16));
    assert_eq!(dev_status(&ctl)["dirty_blocks"].as_u64(), Some(0));
    // And back to write-back: writes are dirty again.
    cli(&["cache", "mode", "write-back", "--control", ctl.to_str().unwrap()]);
    nbd_fill(&srv.uri, 0xc3, 8, true);
    let st = dev_status(&ctl);
    assert_eq!((st["mode"].as_str(), st["dirty_blocks"].as_u64()), (Some("write-back"), Some(8)), "{st}");
    assert!(origin_holds(&origin, 0xb2, 8), "the origin still has the write-through data");
    // A clean stop keeps the dirty blocks; the device says so offline, and a flush cleans them.
    srv.stop();
    let v = d.join("cache.dev");
    let st = cli(&["cache", "status", v.to_str().unwrap()]);
    assert!(st.contains(" 8 dirty,"), "{st}");
    cli(&["cache", "flush", v.to_str().unwrap()]);
    assert!(origin_holds(&origin, 0xc3, 8));
}

// ---------------------------------------------------------------------------------------------------------------
// A filesystem on top

/// The mount process, its loop device and the filesystem mounted on it; released (in reverse order) on drop,
/// crashed or not.
struct Stack {
    child: Option<Child>,
    fuse: PathBuf,
    loop_dev: Option<String>,
    fs: PathBuf,
}

impl Stack {
    fn start(d: &Path, extra: &[&str]) -> Option<Stack> {
        let fuse = d.join("fuse");
        let fs = d.join("fs");
        for p in [&fuse, &fs] {
            let _ = std::fs::create_dir(p);
        }
        let mut child = util::bin()
            .args(["mount", "--backend", d.join("origin.img").to_str().unwrap()])
            .args(["--mountpoint", fuse.to_str().unwrap(), "--cache", "8MiB"])
            .args(["--cache-dev", d.join("cache.dev").to_str().unwrap(), "--mode", "write-back"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        if line.is_empty() {
            let mut err = String::new();
            child.stderr.as_mut().unwrap().read_to_string(&mut err).unwrap();
            let _ = child.wait();
            assert!(err.contains("mounting FUSE at"), "blockwell mount: {err}");
            util::skip(&format!("FUSE mounting is not permitted here: {}", err.trim()));
            return None;
        }
        let file = fuse.join("disk");
        let t = Instant::now();
        while !file.exists() {
            assert!(t.elapsed() < Duration::from_secs(10), "{} did not appear", file.display());
            std::thread::sleep(Duration::from_millis(20));
        }
        let dev = sh_ok("losetup", &["--find", "--show", file.to_str().unwrap()]).trim().to_string();
        Some(Stack { child: Some(child), fuse, loop_dev: Some(dev), fs })
    }

    fn dev(&self) -> &str {
        self.loop_dev.as_deref().unwrap()
    }

    fn mount_fs(&self) {
        sh_ok("mount", &[self.dev(), self.fs.to_str().unwrap()]);
    }

    fn umount_fs(&self) {
        sh_ok("umount", &[self.fs.to_str().unwrap()]);
    }

    /// SIGKILL of the mount process with the filesystem mounted and busy; then what is left is torn down.
    fn crash(mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.release();
    }

    /// A clean stop: unmount the filesystem, detach the loop device, SIGTERM the mount.
    fn stop(mut self) {
        if is_mounted(&self.fs) {
            self.umount_fs();
        }
        if let Some(l) = self.loop_dev.take() {
            sh_ok("losetup", &["-d", &l]);
        }
        if let Some(mut c) = self.child.take() {
            sh_ok("kill", &["-TERM", &c.id().to_string()]);
            let status = c.wait().unwrap();
            assert!(status.success(), "blockwell mount exited {status:?}");
        }
    }

    fn release(&mut self) {
        if is_mounted(&self.fs) {
            let _ = sh("umount", &["-l", self.fs.to_str().unwrap()]);
        }
        if let Some(l) = self.loop_dev.take() {
            let _ = sh("losetup", &["-d", &l]);
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        if is_mounted(&self.fuse) {
            let _ = sh("umount", &["-l", self.fuse.to_str().unwrap()]);
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.release();
    }
}

/// A file's contents, from its number.
fn file_bytes(n: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ ((n + 1).wrapping_mul(0x1000_0000_01b3)));
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        v.extend_from_slice(&r.next().to_le_bytes());
    }
    v.truncate(len);
    v
}

fn fsync_file(path: &Path, data: &[u8]) {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
    std::fs::File::open(path.parent().unwrap()).unwrap().sync_all().unwrap();
}

/// Cycles of: start, check the filesystem, check every file fsync'd so far, write more (fsync'd, and some not),
/// SIGKILL. Then a clean stop, detach, and the origin alone checked and read.
fn filesystem_survives_sigkill(mkfs: &[&str], check: &[&str], cycles: u64, origin_mib: u64) {
    if let Some(why) = missing_prerequisite(&[mkfs[0], check[0]]) {
        util::skip(&why);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::File::create(d.join("origin.img")).unwrap().set_len(origin_mib << 20).unwrap();
    let fsck = |dev: &str| {
        let mut args = check[1..].to_vec();
        args.push(dev);
        sh_ok(check[0], &args);
    };
    let mut synced: Vec<u64> = Vec::new();
    let mut n = 0u64;
    for cycle in 0..cycles {
        let commit = ["20", "1000"][(cycle % 2) as usize];
        let Some(st) = Stack::start(d, &["--cache-dev-size", "96MiB", "--commit-ms", commit]) else { return };
        if cycle == 0 {
            let mut args = mkfs[1..].to_vec();
            args.push(st.dev());
            sh_ok(mkfs[0], &args);
        } else {
            // Let the filesystem replay its journal, then check it clean.
            st.mount_fs();
            st.umount_fs();
            fsck(st.dev());
        }
        st.mount_fs();
        for &k in &synced {
            let got = std::fs::read(st.fs.join(format!("f{k}"))).unwrap_or_else(|e| panic!("cycle {cycle}: f{k}: {e}"));
            assert!(got == file_bytes(k, 300 << 10), "cycle {cycle}: f{k} differs after the crash");
        }
        for _ in 0..8 {
            fsync_file(&st.fs.join(format!("f{n}")), &file_bytes(n, 300 << 10));
            synced.push(n);
            n += 1;
        }
        // Unsynced writes in flight when the mount dies.
        std::fs::write(st.fs.join(format!("unsynced{cycle}")), file_bytes(1 << 40, 2 << 20)).unwrap();
        st.crash();
    }
    let Some(st) = Stack::start(d, &[]) else { return };
    st.mount_fs();
    st.umount_fs();
    fsck(st.dev());
    st.stop();
    util::ok(&["cache", "detach", d.join("cache.dev").to_str().unwrap()]);
    // The origin alone.
    let dev = sh_ok("losetup", &["--find", "--show", d.join("origin.img").to_str().unwrap()]).trim().to_string();
    let fs = d.join("fs");
    let res = std::panic::catch_unwind(|| {
        fsck(&dev);
        sh_ok("mount", &[&dev, fs.to_str().unwrap()]);
        for &k in &synced {
            let got = std::fs::read(fs.join(format!("f{k}"))).unwrap();
            assert!(got == file_bytes(k, 300 << 10), "after detach: f{k} differs on the origin alone");
        }
    });
    if is_mounted(&fs) {
        let _ = sh("umount", &[fs.to_str().unwrap()]);
    }
    let _ = sh("losetup", &["-d", &dev]);
    if let Err(e) = res {
        std::panic::resume_unwind(e);
    }
    eprintln!("{cycles} SIGKILL cycles of {}: {} fsync'd files intact, checks clean", mkfs[0], synced.len());
}

#[test]
fn ext4_on_a_write_back_cache_device_survives_sigkill_and_detach() {
    filesystem_survives_sigkill(&["mkfs.ext4", "-q", "-F"], &["e2fsck", "-fn"], 5, 256);
}

#[test]
fn xfs_on_a_write_back_cache_device_survives_sigkill_and_detach() {
    // (mkfs.xfs refuses filesystems under 300 MB.)
    filesystem_survives_sigkill(&["mkfs.xfs", "-q", "-f"], &["xfs_repair", "-n"], 4, 512);
}

// ---------------------------------------------------------------------------------------------------------------
// Media damage after a crash

/// Five writes of one block each, every one followed by a FLUSH, through libnbd; then the server is killed.
fn five_flushed_writes_then_kill9(d: &Path) {
    let srv = Server::start(d, &["--cleaner", "none", "--commit-ms", "600000", "--cache", "0"]);
    let code = format!(
        "import nbd\nh = nbd.NBD()\nh.connect_uri({:?})\nfor i in range(5):\n    h.pwrite(bytes([0x11 * (i + 1)]) * \
         4096, i * 4096)\n    h.flush()\nh.shutdown()\n",
        srv.uri
    );
    let o = Command::new("/usr/bin/python3").args(["-c", &code]).output().unwrap();
    assert!(o.status.success(), "nbd write: {}", String::from_utf8_lossy(&o.stderr));
    srv.kill9();
}

/// The valid journal blocks of a device image, as (byte offset, commit sequence), in sequence order.
fn journal_blocks(img: &[u8]) -> Vec<(usize, u64)> {
    let u64_at = |at: usize| u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
    // The superblock copy of the higher generation names the journal.
    let sb = if u64_at(4096 + 24) > u64_at(24) { 4096 } else { 0 };
    let (journal, blocks) = (u64_at(sb + 96) as usize, u64_at(sb + 72) as usize);
    let mut out: Vec<(usize, u64)> = (0..blocks)
        .map(|i| journal + i * 4096)
        .filter(|&at| &img[at..at + 4] == b"BWJN")
        .map(|at| (at, u64_at(at + 8)))
        .collect();
    out.sort_by_key(|&(_, seq)| seq);
    out
}

#[test]
fn a_damaged_journal_block_is_refused_checked_and_repaired() {
    if !python_nbd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let origin = d.join("origin.img");
    std::fs::File::create(&origin).unwrap().set_len(ORIGIN).unwrap();
    let dev = d.join("cache.dev");
    std::fs::File::create(&dev).unwrap().set_len(4 << 20).unwrap();
    let (o, v) = (origin.to_str().unwrap(), dev.to_str().unwrap());
    cli(&["cache", "format", v, "--origin", o]);
    five_flushed_writes_then_kill9(d);
    // One flipped byte in the third commit's journal block.
    let mut img = std::fs::read(&dev).unwrap();
    let commits = journal_blocks(&img);
    assert!(commits.len() >= 5, "{commits:?}");
    let (third, seq) = commits[commits.len() - 3];
    img[third + 20] ^= 0x04; // the header's mount count: the records still read, unverified
    std::fs::write(&dev, &img).unwrap();
    // The server refuses the device, naming the commit; nothing is written.
    let e =
        util::fails(&["serve", "--backend", o, "--cache-dev", v, "--mode", "write-back", "--unix", "/nonexistent/s"]);
    assert!(e.contains(&format!("commit {seq} (journal block")) && e.contains("damaged before its end"), "{e}");
    assert!(e.contains("blockwell cache repair"), "{e}");
    assert_eq!(std::fs::read(&dev).unwrap(), img, "a refused device is untouched");
    // check: exit 1, the damage named, never "no problems found".
    let c = util::run(&["cache", "check", v, "--origin", o]);
    let out = String::from_utf8_lossy(&c.stdout);
    assert_eq!(c.status.code(), Some(1), "{out}");
    assert!(out.starts_with("result           1 problem(s) found"), "{out}");
    assert!(out.contains(&format!("commit {seq} (journal block")), "{out}");
    // repair without --write: says what it would do, writes nothing.
    let dry = cli(&["cache", "repair", v]);
    assert!(dry.contains(&format!("journal commit(s) {seq}")), "{dry}");
    assert!(dry.contains("nothing written"), "{dry}");
    // The two blocks of the commits after the damage are proven; the two before it and the one of the damaged
    // commit itself are named (dirty, with where their data lies).
    assert!(dry.contains("2 mapping(s) proven and verified against their data (2 dirty)"), "{dry}");
    for b in 0..3 {
        assert!(dry.contains(&format!("origin block {b} (dirty)")), "block {b}: {dry}");
    }
    assert_eq!(std::fs::read(&dev).unwrap(), img, "repair without --write writes nothing");
    // repair --write, then the device opens: the proven blocks are served, the others come from the origin.
    let wet = cli(&["cache", "repair", v, "--write"]);
    assert!(wet.contains("written"), "{wet}");
    let check = cli(&["cache", "check", v, "--origin", o]);
    assert!(check.starts_with("result           no problems found"), "{check}");
    let srv = Server::start(d, &["--cleaner", "none"]);
    let data = dump(&srv.uri);
    srv.stop();
    for (b, byte) in [(0usize, 0u8), (1, 0), (2, 0), (3, 0x44), (4, 0x55)] {
        assert!(data[b * 4096..(b + 1) * 4096].iter().all(|&x| x == byte), "block {b} is not {byte:#x}");
    }
}

#[test]
fn a_flipped_byte_in_a_dirty_block_is_an_error_never_data() {
    if !python_nbd() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let origin = d.join("origin.img");
    std::fs::File::create(&origin).unwrap().set_len(ORIGIN).unwrap();
    let ctl = d.join("ctl.sock");
    let v = d.join("cache.dev");
    let srv = Server::start(d, &["--cache-dev-size", "4MiB", "--cleaner", "none", "--cache", "0"]);
    nbd_fill(&srv.uri, 0xa1, 16, true);
    srv.stop();
    // The device was shut down cleanly with 16 dirty blocks: check says so without calling it "clean".
    let st = cli(&["cache", "status", v.to_str().unwrap()]);
    assert!(st.starts_with("result           no problems found") && st.contains(" 16 dirty,"), "{st}");
    let check = cli(&["cache", "check", v.to_str().unwrap()]);
    assert!(check.contains("16 mapped slot(s) verified against their checksums, 0 mismatch(es)"), "{check}");
    // One flipped byte in the data of a dirty block.
    let mut img = std::fs::read(&v).unwrap();
    let u64_at = |at: usize| u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
    let (data, slots) = (u64_at(104) as usize, u64_at(56) as usize);
    let slot = (0..slots).find(|s| img[data + s * 4096] == 0xa1).expect("a slot holds the data");
    img[data + slot * 4096 + 1000] ^= 0x01;
    std::fs::write(&v, &img).unwrap();
    let c = util::run(&["cache", "check", v.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&c.stdout);
    assert_eq!(c.status.code(), Some(1), "{out}");
    assert!(
        out.contains(&format!("slot {slot} (origin block")) && out.contains("dirty): data checksum mismatch"),
        "{out}"
    );
    // Served: the read of that block fails (EIO) and the export says it is degraded; the others read.
    let srv = Server::start(d, &["--cleaner", "none", "--cache", "0"]);
    let code = format!(
        "import nbd\nh = nbd.NBD()\nh.connect_uri({:?})\nbad = []\nfor b in range(16):\n    try:\n        \
         assert h.pread(4096, b * 4096) == bytes([0xa1]) * 4096\n    except nbd.Error:\n        bad.append(b)\n\
         print(bad)\n",
        srv.uri
    );
    let o = Command::new("/usr/bin/python3").args(["-c", &code]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let bad = String::from_utf8_lossy(&o.stdout).trim().to_string();
    assert!(bad.starts_with('[') && bad.len() > 2 && !bad.contains(','), "exactly one block fails: {bad}");
    let st = dev_status(&ctl);
    assert!(st["degraded"].as_str().is_some_and(|s| s.contains("cannot be read")), "{st}");
    assert!(st["checksum_failures"].as_u64() >= Some(1), "{st}");
    drop(srv);
}
