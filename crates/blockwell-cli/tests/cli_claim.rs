//! One writer per backing store: a second server, mount, export or cache command on a file or device in use is
//! refused with an error naming the holder; `--read-only --shared` lets readers share; a mounted block device
//! is refused.

mod util;

use std::path::Path;
use std::process::Command;

use util::fs::sh_ok as sh;
use util::serve::Served;
use util::{fails, ok};

fn disk(dir: &Path, name: &str) -> String {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(16 << 20).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn a_second_writer_is_refused_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let d = disk(dir.path(), "disk.img");
    let first = Served::start(&["--backend", &d]);
    let holder = format!("disk.img is in use by process {} (", first.child.id());
    for args in [
        vec!["serve", "--backend", &d, "--listen", "127.0.0.1:0"],
        vec!["serve", "--backend", &d, "--listen", "127.0.0.1:0", "--read-only", "--shared"],
        vec!["serve", "--backend", &d, "--listen", "127.0.0.1:0", "--read-only"],
        vec!["mount", "--backend", &d, "--mountpoint", dir.path().to_str().unwrap()],
    ] {
        let e = fails(&args);
        assert!(e.contains("--backend") && e.contains(&holder) && e.contains("blockwell serve"), "{args:?}: {e}");
    }
    let (ok, out) = first.stop();
    assert!(ok, "{out}");
    // Once it has gone, the file is free again.
    let again = Served::start(&["--backend", &d]);
    assert!(again.stop().0);
}

#[test]
fn readers_share_with_shared_and_keep_writers_out() {
    let dir = tempfile::tempdir().unwrap();
    let d = disk(dir.path(), "disk.img");
    let e = fails(&["serve", "--backend", &d, "--shared"]);
    assert!(e.contains("--shared needs --read-only"), "{e}");
    let a = Served::start(&["--backend", &d, "--read-only", "--shared"]);
    let b = Served::start(&["--backend", &d, "--read-only", "--shared"]);
    let e = fails(&["serve", "--backend", &d, "--listen", "127.0.0.1:0"]);
    assert!(e.contains(&format!("process {} (", a.child.id())) && e.contains(", shared)"), "{e}");
    // An exclusive reader is refused too: it asked for the file alone.
    let e = fails(&["serve", "--backend", &d, "--listen", "127.0.0.1:0", "--read-only"]);
    assert!(e.contains("is in use by"), "{e}");
    assert!(a.stop().0 && b.stop().0);
}

#[test]
fn two_exports_of_one_config_on_one_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    disk(dir.path(), "disk.img");
    let cfg = dir.path().join("exports.toml");
    std::fs::write(
        &cfg,
        "listen = \"127.0.0.1:0\"\n[[export]]\nname = \"a\"\nbackend = \"disk.img\"\n\
         [[export]]\nname = \"b\"\nbackend = \"./disk.img\"\n",
    )
    .unwrap();
    let e = fails(&["serve", "--config", cfg.to_str().unwrap()]);
    assert!(e.contains("export \"b\"") && e.contains("disk.img is in use by this process"), "{e}");
    // Two read-only shared exports of one file are fine.
    std::fs::write(
        &cfg,
        "listen = \"127.0.0.1:0\"\n[[export]]\nname = \"a\"\nbackend = \"disk.img\"\nread_only = true\nshared = true\n\
         [[export]]\nname = \"b\"\nbackend = \"disk.img\"\nread_only = true\nshared = true\n",
    )
    .unwrap();
    let s = Served::start(&["--config", cfg.to_str().unwrap()]);
    assert!(s.banner.contains("/a") && s.banner.contains("/b"), "{}", s.banner);
}

#[test]
fn a_cache_device_in_use_is_refused_to_other_commands() {
    let dir = tempfile::tempdir().unwrap();
    let d = disk(dir.path(), "disk.img");
    let dev = dir.path().join("cache.img");
    let dev = dev.to_str().unwrap();
    let s = Served::start(&["--backend", &d, "--cache-dev", dev, "--cache-dev-size", "8MiB"]);
    let holder = format!("cache.img is in use by process {} (", s.child.id());
    let e = fails(&["cache", "format", dev, "--origin", &d, "--force"]);
    assert!(e.contains(&holder), "{e}");
    let e = fails(&["cache", "check", dev]);
    assert!(e.contains(&holder), "{e}");
    // A second server with its own backend but the same cache device.
    let other = disk(dir.path(), "other.img");
    let e = fails(&["serve", "--backend", &other, "--cache-dev", dev, "--listen", "127.0.0.1:0"]);
    assert!(e.contains(&holder), "{e}");
    assert!(s.stop().0);
    assert!(ok(&["cache", "check", dev]).contains("clean"));
}

#[test]
fn a_block_device_is_claimed_with_o_excl_and_refused_while_mounted() {
    if !util::root("a loop device") || !util::serve::have("losetup") || !util::serve::have("mkfs.ext4") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = disk(dir.path(), "fs.img");
    let loopdev = sh("losetup", &["--find", "--show", &img]).trim().to_string();
    // Detached (and unmounted) whatever happens below.
    struct Loop(String, std::path::PathBuf);
    impl Drop for Loop {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.1).status();
            let _ = Command::new("losetup").args(["-d", &self.0]).status();
        }
    }
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let guard = Loop(loopdev.clone(), mnt.clone());
    // Served exclusively: a second opener with O_EXCL is refused.
    let s = Served::start(&["--backend", &loopdev, "--cache", "1MiB"]);
    let e = fails(&["serve", "--backend", &loopdev, "--listen", "127.0.0.1:0"]);
    assert!(e.contains(&format!("is in use by process {} (", s.child.id())), "{e}");
    assert!(s.stop().0);
    // Mounted: refused whatever the claim, naming the mount point.
    sh("mkfs.ext4", &["-q", &loopdev]);
    sh("mount", &[&loopdev, mnt.to_str().unwrap()]);
    for extra in [&[][..], &["--read-only", "--shared"][..]] {
        let mut args = vec!["serve", "--backend", &loopdev, "--listen", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let e = fails(&args);
        assert!(e.contains("is a mounted block device (mounted at ") && e.contains("/mnt)"), "{e}");
    }
    drop(guard);
}
