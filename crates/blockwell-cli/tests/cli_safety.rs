//! Operator mistakes that must not lose data, performed as an operator would, with the real binary and qemu-io:
//!
//! - an origin whose cache device holds dirty blocks is not served, mounted or claimed without it unless
//!   forced; a cache device whose origin was written without it refuses to write its stale dirty blocks back
//!   (serve, `cache flush`, `cache detach`) unless forced, or drops them on request, and never serves a stale
//!   clean copy;
//! - `cache format` refuses to overwrite data, a file system, a partition table or a volume, and the origin
//!   itself;
//! - a failed start removes the cache-device file it created, and nothing else.

mod util;

use std::path::{Path, PathBuf};
use util::serve::{have, qemu_io, Served};

const ORIGIN: u64 = 8 << 20;

struct Setup {
    _dir: tempfile::TempDir,
    d: PathBuf,
    origin: String,
    dev: String,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_path_buf();
    let origin = d.join("origin.img");
    std::fs::File::create(&origin).unwrap().set_len(ORIGIN).unwrap();
    let dev = d.join("cache.dev");
    std::fs::File::create(&dev).unwrap().set_len(4 << 20).unwrap();
    let (origin, dev) = (origin.to_str().unwrap().to_string(), dev.to_str().unwrap().to_string());
    util::ok(&["cache", "format", &dev, "--origin", &origin]);
    Setup { _dir: dir, d, origin, dev }
}

impl Setup {
    /// `serve --backend ORIGIN --cache-dev DEV --mode write-back --cleaner none` plus `extra`.
    fn serve_cached(&self, extra: &[&str]) -> Served {
        let mut a = vec!["--backend", &self.origin, "--cache-dev", &self.dev, "--mode", "write-back"];
        a.extend(["--cleaner", "none", "--cache", "0"]);
        a.extend(extra);
        Served::start(&a)
    }

    fn origin_bytes(&self, off: usize, len: usize) -> Vec<u8> {
        std::fs::read(&self.origin).unwrap()[off..off + len].to_vec()
    }
}

fn stop(s: Served) {
    let (ok, rest) = s.stop();
    assert!(ok, "serve did not stop cleanly: {rest}");
}

/// 64 KiB of 0xab written through the cache device in write-back with no cleaning, then a clean stop: 16
/// dirty blocks that the origin does not have.
fn dirty_cache(s: &Setup) {
    let srv = s.serve_cached(&[]);
    qemu_io(&srv.uri, &["write -P 0xab 0 64k", "flush"]);
    stop(srv);
    assert!(s.origin_bytes(0, 65536).iter().all(|&b| b == 0), "the writes are only on the cache device");
}

#[test]
fn an_origin_is_not_served_or_mounted_without_its_dirty_cache_device() {
    if !have("qemu-io") {
        return;
    }
    let s = setup();
    dirty_cache(&s);
    for ro in [false, true] {
        let mut a = vec!["serve", "--backend", &s.origin, "--listen", "127.0.0.1:0"];
        if ro {
            a.push("--read-only");
        }
        let e = util::fails(&a);
        assert!(e.contains(&format!("the cache device {}", s.dev)), "{e}");
        assert!(e.contains("holds 16 dirty block(s) of it") && e.contains("--force"), "{e}");
        assert!(e.contains("stale"), "{e}");
    }
    let mnt = s.d.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let e = util::fails(&["mount", "--backend", &s.origin, "--mountpoint", mnt.to_str().unwrap()]);
    assert!(e.contains("holds 16 dirty block(s)"), "{e}");
    // Another cache device formatted for the same origin is refused too: the first one holds its newest data.
    let other = s.d.join("other.dev");
    std::fs::File::create(&other).unwrap().set_len(4 << 20).unwrap();
    let other = other.to_str().unwrap();
    util::ok(&["cache", "format", other, "--origin", &s.origin]);
    let e = util::fails(&["serve", "--backend", &s.origin, "--cache-dev", other, "--listen", "127.0.0.1:0"]);
    assert!(e.contains(&format!("the cache device {}", s.dev)) && e.contains("holds 16 dirty"), "{e}");
    // With its own cache device it serves the newest data.
    let srv = s.serve_cached(&[]);
    assert!(qemu_io(&srv.uri, &["read -P 0xab 0 64k"]).contains("read 65536/65536"));
    stop(srv);
    // Once written back, the origin alone is current and serves.
    util::ok(&["cache", "flush", &s.dev]);
    let srv = Served::start(&["--backend", &s.origin]);
    assert!(qemu_io(&srv.uri, &["read -P 0xab 0 64k"]).contains("read 65536/65536"));
    stop(srv);
}

/// The second half: the origin forced into service alone and written; its cache device notices.
fn written_without_its_cache(s: &Setup) {
    dirty_cache(s);
    let srv = Served::start(&["--backend", &s.origin, "--force"]);
    qemu_io(&srv.uri, &["write -P 0xcd 0 4k", "flush"]);
    stop(srv);
    assert!(s.origin_bytes(0, 4096).iter().all(|&b| b == 0xcd));
}

#[test]
fn a_cache_device_refuses_to_write_back_blocks_its_origin_overwrote_since() {
    if !have("qemu-io") {
        return;
    }
    let s = setup();
    written_without_its_cache(&s);
    let before = std::fs::read(&s.dev).unwrap();
    let e = util::fails(&[
        "serve",
        "--backend",
        &s.origin,
        "--cache-dev",
        &s.dev,
        "--mode",
        "write-back",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert!(e.contains("written without this cache device") && e.contains("16 dirty block(s)"), "{e}");
    assert!(e.contains("--force") && e.contains("--discard-stale"), "{e}");
    for cmd in ["flush", "detach"] {
        let e = util::fails(&["cache", cmd, &s.dev]);
        assert!(e.contains("written without this cache device"), "cache {cmd}: {e}");
    }
    assert!(std::fs::read(&s.dev).unwrap() == before, "the refusals wrote nothing to the cache device");
    assert!(s.origin_bytes(0, 4096).iter().all(|&b| b == 0xcd), "nor to the origin");
    // Dropping the stale blocks keeps the origin's newer write, and detaches.
    let out = util::ok(&["cache", "detach", &s.dev, "--discard-stale"]);
    assert!(out.contains("detached"), "{out}");
    assert!(s.origin_bytes(0, 4096).iter().all(|&b| b == 0xcd));
    assert!(s.origin_bytes(4096, 61440).iter().all(|&b| b == 0), "no stale block was written back");
    // Nothing holds the origin any more: it serves alone without --force.
    stop(Served::start(&["--backend", &s.origin]));
}

#[test]
fn forcing_a_stale_cache_device_writes_its_blocks_back_over_the_origin() {
    if !have("qemu-io") {
        return;
    }
    let s = setup();
    written_without_its_cache(&s);
    let out = util::ok(&["cache", "flush", &s.dev, "--force"]);
    assert!(out.contains("16 dirty block(s) written back"), "{out}");
    assert!(s.origin_bytes(0, 65536).iter().all(|&b| b == 0xab), "--force: the cache device's blocks win");
    // The same with serve: forced, it serves the cache device's blocks.
    let s = setup();
    written_without_its_cache(&s);
    let srv = s.serve_cached(&["--force"]);
    assert!(qemu_io(&srv.uri, &["read -P 0xab 0 64k"]).contains("read 65536/65536"));
    stop(srv);
}

#[test]
fn a_clean_copy_is_not_served_after_the_origin_was_written_without_its_cache_device() {
    if !have("qemu-io") {
        return;
    }
    let s = setup();
    // Written back and then read: clean copies on the cache device; no dirty block, so the origin serves alone.
    let srv = s.serve_cached(&["--control", s.d.join("ctl.sock").to_str().unwrap()]);
    qemu_io(&srv.uri, &["write -P 0xab 0 64k", "flush"]);
    util::ok(&["cache", "flush", "--control", s.d.join("ctl.sock").to_str().unwrap()]);
    qemu_io(&srv.uri, &["read -P 0xab 0 64k"]);
    stop(srv);
    let srv = Served::start(&["--backend", &s.origin]);
    qemu_io(&srv.uri, &["write -P 0xcd 0 64k", "flush"]);
    stop(srv);
    // Reattached, the cache device drops its now stale copies and serves the origin's data.
    let srv = s.serve_cached(&[]);
    let out = qemu_io(&srv.uri, &["read -P 0xcd 0 64k"]);
    assert!(out.contains("read 65536/65536"), "{out}");
    stop(srv);
}

#[test]
fn a_crashed_write_through_cache_device_with_no_dirty_block_does_not_hold_its_origin() {
    if !have("qemu-io") {
        return;
    }
    let s = setup();
    let mut srv = Served::start(&["--backend", &s.origin, "--cache-dev", &s.dev, "--mode", "write-through"]);
    qemu_io(&srv.uri, &["write -P 0xab 0 64k", "flush"]);
    let _ = srv.child.kill();
    let _ = srv.child.wait();
    // The origin records the device as in use (it was not stopped); the device itself says it holds no dirty
    // block, so the origin serves alone.
    stop(Served::start(&["--backend", &s.origin]));
    // A crashed write-back device is counted on the device: its dirty blocks hold the origin.
    let mut srv = s.serve_cached(&[]);
    qemu_io(&srv.uri, &["write -P 0xee 0 8k", "flush"]);
    let _ = srv.child.kill();
    let _ = srv.child.wait();
    let e = util::fails(&["serve", "--backend", &s.origin, "--listen", "127.0.0.1:0"]);
    assert!(e.contains("holds 2 dirty block(s)"), "{e}");
}

fn file_of(path: &Path, bytes: &[u8], len: u64) {
    let f = std::fs::File::create(path).unwrap();
    f.set_len(len).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, bytes, 0).unwrap();
}

fn poke(path: &Path, off: u64, bytes: &[u8]) {
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, bytes, off).unwrap();
}

#[test]
fn format_refuses_data_file_systems_volumes_and_the_origin_itself() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let origin = d.join("new.img");
    std::fs::File::create(&origin).unwrap().set_len(ORIGIN).unwrap();
    let o = origin.to_str().unwrap();
    // The arguments swapped: a file of data given as the cache device.
    let precious = d.join("precious.img");
    let data: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8 + 1).collect();
    std::fs::write(&precious, &data).unwrap();
    let e = util::fails(&["cache", "format", precious.to_str().unwrap(), "--origin", o]);
    assert!(e.contains("holds data (non-zero bytes at offset 0)") && e.contains("--force"), "{e}");
    assert!(std::fs::read(&precious).unwrap() == data, "nothing was written");
    // Data after a hole is found too; zeroes written out are empty.
    let sparse = d.join("sparse.img");
    file_of(&sparse, &[], 8 << 20);
    poke(&sparse, 6 << 20, b"x");
    let e = util::fails(&["cache", "format", sparse.to_str().unwrap(), "--origin", o]);
    assert!(e.contains(&format!("non-zero bytes at offset {}", 6 << 20)), "{e}");
    let zeroes = d.join("zeroes.img");
    std::fs::write(&zeroes, vec![0u8; 4 << 20]).unwrap();
    util::ok(&["cache", "format", zeroes.to_str().unwrap(), "--origin", o]);
    // Signatures, each named.
    let cases: &[(&str, u64, &[u8], &str)] = &[
        ("xfs", 0, b"XFSB", "an XFS file system"),
        ("btrfs", 65536 + 64, b"_BHRfS_M", "a btrfs file system"),
        ("swap", 4086, b"SWAPSPACE2", "a Linux swap area"),
        ("gpt", 512, b"EFI PART", "a GPT partition table"),
        ("luks", 0, b"LUKS\xba\xbe", "a LUKS encrypted volume"),
        ("lvm", 512, b"LABELONE", "an LVM physical volume"),
        (
            "bcache",
            4096 + 24,
            &[0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81],
            "a bcache device",
        ),
    ];
    for &(name, off, magic, what) in cases {
        let p = d.join(format!("{name}.img"));
        file_of(&p, &[], 4 << 20);
        poke(&p, off, magic);
        if name == "lvm" {
            poke(&p, 512 + 24, b"LVM2 001");
        }
        let e = util::fails(&["cache", "format", p.to_str().unwrap(), "--origin", o]);
        assert!(e.contains(&format!("holds {what}")), "{name}: {e}");
    }
    let mbr = d.join("mbr.img");
    file_of(&mbr, &[], 4 << 20);
    poke(&mbr, 446 + 4, &[0x83]);
    poke(&mbr, 510, &[0x55, 0xaa]);
    let e = util::fails(&["cache", "format", mbr.to_str().unwrap(), "--origin", o]);
    assert!(e.contains("holds an MBR (DOS) partition table"), "{e}");
    // A real ext4 image, and a real swap area.
    if have("mkfs.ext4") {
        let ext4 = d.join("ext4.img");
        file_of(&ext4, &[], 16 << 20);
        let st = std::process::Command::new("mkfs.ext4").args(["-q", "-F", "-L", "home"]).arg(&ext4).status().unwrap();
        assert!(st.success());
        let before = std::fs::read(&ext4).unwrap();
        let e = util::fails(&["cache", "format", ext4.to_str().unwrap(), "--origin", o]);
        assert!(e.contains("holds an ext4 file system labelled 'home'"), "{e}");
        assert!(std::fs::read(&ext4).unwrap() == before);
        // --force overwrites it.
        util::ok(&["cache", "format", ext4.to_str().unwrap(), "--origin", o, "--force"]);
        util::ok(&["cache", "check", ext4.to_str().unwrap(), "--origin", o]);
    }
    if have("mkswap") {
        let swap = d.join("real-swap.img");
        file_of(&swap, &[], 4 << 20);
        let st = std::process::Command::new("mkswap").arg(&swap).output().unwrap();
        assert!(st.status.success());
        let e = util::fails(&["cache", "format", swap.to_str().unwrap(), "--origin", o]);
        assert!(e.contains("a Linux swap area"), "{e}");
    }
    // The origin as its own cache: by its path, a hard link or a symbolic link; --force does not change that.
    let link = d.join("hard.img");
    std::fs::hard_link(&origin, &link).unwrap();
    let sym = d.join("sym.img");
    std::os::unix::fs::symlink(&origin, &sym).unwrap();
    for p in [o, link.to_str().unwrap(), sym.to_str().unwrap()] {
        for force in [false, true] {
            let mut a = vec!["cache", "format", p, "--origin", o];
            if force {
                a.push("--force");
            }
            let e = util::fails(&a);
            assert!(e.contains("itself: a cache device must be another file or device"), "{p}: {e}");
        }
    }
    assert!(std::fs::read(&origin).unwrap().iter().all(|&b| b == 0));
}

#[test]
fn format_size_creates_the_file_and_never_resizes_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let origin = d.join("o.img");
    std::fs::File::create(&origin).unwrap().set_len(ORIGIN).unwrap();
    let o = origin.to_str().unwrap();
    let dev = d.join("c.dev");
    let v = dev.to_str().unwrap();
    let e = util::fails(&["cache", "format", v, "--origin", o]);
    assert!(e.contains("does not exist (give --size to create it"), "{e}");
    // Too small: an error in the user's own words, and no file left behind.
    let e = util::fails(&["cache", "format", v, "--origin", o, "--size", "4KiB"]);
    assert!(e.contains("--size 4KiB is too small"), "{e}");
    assert!(!dev.exists(), "a failed format removes the file it created");
    let out = util::ok(&["cache", "format", v, "--origin", o, "--size", "4MiB"]);
    assert!(out.contains("formatted"), "{out}");
    assert_eq!(std::fs::metadata(&dev).unwrap().len(), 4 << 20);
    let e = util::fails(&["cache", "format", v, "--origin", o, "--size", "8MiB", "--force"]);
    assert!(e.contains("exists with 4194304 B, and --size 8MiB is 8388608 B") && e.contains("not resized"), "{e}");
    assert_eq!(std::fs::metadata(&dev).unwrap().len(), 4 << 20);
    // The same size is fine (refused only because it is a cache device already).
    let e = util::fails(&["cache", "format", v, "--origin", o, "--size", "4MiB"]);
    assert!(e.contains("already holds a Blockwell cache device"), "{e}");
}

#[test]
fn a_failed_start_removes_the_cache_device_it_created_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let origin = d.join("o.img");
    std::fs::File::create(&origin).unwrap().set_len(ORIGIN).unwrap();
    let o = origin.to_str().unwrap();
    let dev = d.join("new.img");
    let v = dev.to_str().unwrap();
    let serve = |extra: &[&str]| {
        let mut a = vec!["serve", "--backend", o, "--cache-dev", v, "--listen", "127.0.0.1:0"];
        a.extend(extra);
        util::fails(&a)
    };
    let e = serve(&["--cache-dev-size", "4KiB"]);
    assert!(e.contains("--cache-dev-size 4KiB is too small"), "{e}");
    assert!(!dev.exists(), "the 4 KiB file is gone");
    // Created and formatted, then refused (a policy that needs the future): removed too.
    let e = serve(&["--cache-dev-size", "4MiB", "--cache-dev-policy", "opt"]);
    assert!(e.contains("opt"), "{e}");
    assert!(!dev.exists(), "the formatted file is gone");
    // Created, formatted and opened, then the start fails (its address is taken): removed too.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let e = util::fails(&["serve", "--backend", o, "--cache-dev", v, "--cache-dev-size", "4MiB", "--listen", &addr]);
    assert!(e.contains(&format!("--listen {addr}")), "{e}");
    assert!(!dev.exists(), "a start that failed late removes the file too");
    // A file that was there before is never removed, whatever fails.
    std::fs::write(&dev, b"mine").unwrap();
    let e = serve(&["--cache-dev-size", "4MiB"]);
    assert!(e.contains("exists with 4 B, and --cache-dev-size 4MiB is 4194304 B"), "{e}");
    assert_eq!(std::fs::read(&dev).unwrap(), b"mine");
    std::fs::remove_file(&dev).unwrap();
    // The next attempt with another size works.
    let srv = Served::start(&["--backend", o, "--cache-dev", v, "--cache-dev-size", "4MiB"]);
    stop(srv);
    assert_eq!(std::fs::metadata(&dev).unwrap().len(), 4 << 20);
}

/// `blockwell ARGS` with the state directory `state`; asserts exit 2 and returns stderr.
fn fails_in(state: &Path, args: &[&str]) -> String {
    let o = util::bin().env("BLOCKWELL_STATE_DIR", state).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "blockwell {args:?}: {err}");
    err
}

fn serve_in(state: &Path, args: &[&str]) -> Served {
    let mut c = util::bin();
    c.env("BLOCKWELL_STATE_DIR", state).args(["serve", "--listen", "127.0.0.1:0"]).args(args);
    c.stderr(std::process::Stdio::piped());
    Served::spawn(c)
}

#[test]
fn a_block_device_origin_keeps_its_record_in_the_state_directory() {
    if !util::root("a loop device") || !have("losetup") || !have("qemu-io") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let img = d.join("origin.img");
    std::fs::File::create(&img).unwrap().set_len(ORIGIN).unwrap();
    let out = std::process::Command::new("losetup").args(["--find", "--show"]).arg(&img).output().unwrap();
    assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
    struct Loop(String);
    impl Drop for Loop {
        fn drop(&mut self) {
            let _ = std::process::Command::new("losetup").args(["-d", &self.0]).status();
        }
    }
    let lo = Loop(String::from_utf8(out.stdout).unwrap().trim().to_string());
    let o = lo.0.as_str();
    let state = d.join("state");
    let dev = d.join("cache.dev");
    std::fs::File::create(&dev).unwrap().set_len(4 << 20).unwrap();
    let v = dev.to_str().unwrap();
    let ok = util::bin().env("BLOCKWELL_STATE_DIR", &state).args(["cache", "format", v, "--origin", o]).status();
    assert!(ok.unwrap().success());
    let cached = ["--backend", o, "--cache-dev", v, "--mode", "write-back", "--cleaner", "none", "--cache", "0"];
    let srv = serve_in(&state, &cached);
    qemu_io(&srv.uri, &["write -P 0xab 0 64k", "flush"]);
    stop(srv);
    let records: Vec<_> = std::fs::read_dir(state.join("origins")).unwrap().flatten().collect();
    assert_eq!(records.len(), 1, "one record, for the block device");
    let text = std::fs::read_to_string(records[0].path()).unwrap();
    assert!(text.contains(" dirty 16 path ") && text.contains("cache.dev"), "{text}");
    let e = fails_in(&state, &["serve", "--backend", o, "--listen", "127.0.0.1:0"]);
    assert!(e.contains("holds 16 dirty block(s) of it"), "{e}");
    // Forced alone and written: the cache device notices through the record's nonce.
    let srv = serve_in(&state, &["--backend", o, "--force"]);
    qemu_io(&srv.uri, &["write -P 0xcd 0 4k", "flush"]);
    stop(srv);
    let mut a = cached.to_vec();
    a.insert(0, "serve");
    a.extend(["--listen", "127.0.0.1:0"]);
    let e = fails_in(&state, &a);
    assert!(e.contains("written without this cache device"), "{e}");
    drop(lo);
}

/// `cache format` with its two paths swapped: the origin of a dirty cache device is not formatted, and a cache
/// device is not taken as an origin; `--force` still can.
#[test]
fn format_refuses_swapped_arguments_an_origin_of_a_cache_and_a_cache_as_origin() {
    if !have("qemu-io") {
        return;
    }
    let s = setup();
    dirty_cache(&s);
    let before = std::fs::read(&s.dev).unwrap();
    let e = util::fails(&["cache", "format", &s.origin, "--origin", &s.dev]);
    assert!(e.contains(&format!("{} is the origin of the cache device", s.origin)), "{e}");
    assert!(e.contains("which held 16 dirty block(s) of it") && e.contains("--force"), "{e}");
    // Another file as the target, the cache device as the origin: refused for the origin.
    let other = s.d.join("other.img");
    std::fs::File::create(&other).unwrap().set_len(4 << 20).unwrap();
    let e = util::fails(&["cache", "format", other.to_str().unwrap(), "--origin", &s.dev]);
    assert!(e.contains(&format!("--origin {} is a Blockwell cache device, not an origin", s.dev)), "{e}");
    assert_eq!(std::fs::read(&s.dev).unwrap(), before, "the cache device is untouched");
    assert!(s.origin_bytes(0, 65536).iter().all(|&b| b == 0), "the origin is untouched");
    util::ok(&["cache", "format", other.to_str().unwrap(), "--origin", &s.dev, "--force"]);
}
