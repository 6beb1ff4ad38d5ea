//! `blockwell serve --content` and a config file's shared `[content]` cache, driven as a user would: the real
//! binary, real NBD clients (qemu-io, qemu-img, nbdcopy, cmp), `blockwell status`, SIGTERM, and the backing files
//! checked for exactly the acknowledged data. Each test skips with "SKIPPED: <tool> not installed" when a client
//! is missing (`scripts/test.sh` installs them).

mod util;

use std::path::Path;
use std::process::Command;
use util::serve::{disk, have, http_get, qemu_io, status, Served};

/// `len` bytes made of 4 KiB blocks, `distinct` different ones repeated in turn, none of them zero.
fn blocks(len: usize, distinct: usize, seed: u32) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let b = ((i / 4096) % distinct) as u32;
            let x = (i % 4096) as u32 ^ b.wrapping_mul(2654435761) ^ seed;
            (x.wrapping_mul(2246822519) >> 24) as u8 | 1
        })
        .collect()
}

fn json(sock: &Path) -> serde_json::Value {
    serde_json::from_str(&status(sock, true)).unwrap()
}

/// The export named `name` in a `status --json` reply.
fn export<'a>(j: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    j["exports"].as_array().unwrap().iter().find(|e| e["name"] == name).unwrap()
}

fn cmp(a: &Path, b: &Path) {
    let ok = Command::new("cmp").args([a, b]).status().unwrap().success();
    assert!(ok, "cmp {} {}", a.display(), b.display());
}

#[test]
fn qemu_io_patterns_and_silent_rewrites() {
    if !have("qemu-io") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 16);
    let sock = d.path().join("ctl.sock");
    let s = Served::start(&[
        "--backend",
        img.to_str().unwrap(),
        "--content",
        "--cache",
        "1MiB",
        "--policy",
        "arc",
        "--control",
        sock.to_str().unwrap(),
    ]);
    qemu_io(
        &s.uri,
        &[
            "write -P 0xab 0 2M",
            "read -P 0xab 0 2M",
            "write -P 0x11 4095 3",
            "read -P 0x11 4095 3",
            "read -P 0xab 0 4095",
            "read -P 0xab 4098 8190",
            "write -P 0x22 8M 64k",
            "write -P 0x33 8392704 100",
            "read -P 0x33 8392704 100",
            "discard 8M 32k",
            "write -z 8421376 32k",
            "read -P 0 8421376 32k",
            "flush",
        ],
    );
    let before = export(&json(&sock), "blockwell").clone();
    assert_eq!(before["cache"]["write_requests"], 4, "{before}"); // discard and write -z are not writes
                                                                  // The same 2 MiB again: every block but the two the 0x11 write changed is a silent write (those two are one
                                                                  // backend write); then the 0x11 bytes again, a change again (one more).
    qemu_io(&s.uri, &["write -P 0xab 0 2M", "read -P 0xab 8192 1M", "write -P 0x11 4095 3"]);
    let after = export(&json(&sock), "blockwell").clone();
    let c = &after["content"];
    assert_eq!(c["categories"]["silent_write"], 510, "{c}");
    assert_eq!(c["backend_block_writes_avoided"], 510, "{c}");
    assert_eq!(after["cache"]["backend_writes"], before["cache"]["backend_writes"].as_u64().unwrap() + 2, "{after}");
    assert_eq!(c["shared"]["policy"], "arc");
    let st = status(&sock, false);
    assert!(st.starts_with("blockwell: write-through, 16.00 MiB (32768 sectors), backend "), "{st}");
    assert!(st.contains("\n  content     volume 0, read_hit ") && st.contains(", silent_write 510, "), "{st}");
    let (ok, out) = s.stop();
    assert!(ok && out.contains("stopped;") && out.contains("silent_write 510"), "{out}");
    let f = std::fs::read(&img).unwrap();
    let mut want = vec![0u8; 16 << 20];
    want[..2 << 20].fill(0xab);
    want[4095..4098].fill(0x11);
    want[8 << 20..(8 << 20) + (64 << 10)].fill(0x22);
    want[8392704..8392804].fill(0x33);
    want[(8 << 20) + (32 << 10)..(8 << 20) + (64 << 10)].fill(0);
    // The discarded 32 KiB may read as anything; compare around it.
    let hole = (8 << 20)..(8 << 20) + (32 << 10);
    assert!(f[..hole.start] == want[..hole.start] && f[hole.end..] == want[hole.end..], "backing file differs");
}

#[test]
fn qemu_img_convert_and_compare_round_trip() {
    if !have("qemu-img") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 8);
    let src = d.path().join("src.img");
    std::fs::write(&src, blocks(8 << 20, 300, 1)).unwrap();
    let s = Served::start(&["--backend", img.to_str().unwrap(), "--content", "--cache", "2MiB", "--policy", "2q"]);
    let run = |args: &[&str]| {
        let o = Command::new("qemu-img").args(args).output().unwrap();
        assert!(o.status.success(), "qemu-img {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    run(&["convert", "-n", "-f", "raw", "-O", "raw", src.to_str().unwrap(), &s.uri]);
    run(&["compare", "-f", "raw", "-F", "raw", src.to_str().unwrap(), &s.uri]);
    let (ok, _) = s.stop();
    assert!(ok);
    cmp(&src, &img);
}

#[test]
fn nbdcopy_round_trip_with_cmp() {
    if !have("nbdcopy") || !have("cmp") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 16);
    let src = d.path().join("src.bin");
    std::fs::write(&src, blocks(16 << 20, 1000, 2)).unwrap();
    let s = Served::start(&["--backend", img.to_str().unwrap(), "--content", "--cache", "1MiB", "--policy", "s3fifo"]);
    assert!(Command::new("nbdcopy").args([src.to_str().unwrap(), &s.uri]).status().unwrap().success());
    let back = d.path().join("back.bin");
    assert!(Command::new("nbdcopy").args([&s.uri, back.to_str().unwrap()]).status().unwrap().success());
    cmp(&src, &back);
    let (ok, _) = s.stop();
    assert!(ok);
    cmp(&src, &img);
}

/// The paper's unified cache: two exports share one content cache. Export B's image already holds the data
/// written through A (a clone), so B's reads are content hits and the cache holds one copy; rewriting the same
/// data through A is silent.
#[test]
fn two_exports_share_one_content_cache() {
    if !have("nbdcopy") || !have("cmp") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let data = blocks(1 << 20, 256, 3);
    std::fs::File::create(d.path().join("a.img")).unwrap().set_len(1 << 20).unwrap();
    std::fs::write(d.path().join("b.img"), &data).unwrap();
    let src = d.path().join("src.bin");
    std::fs::write(&src, &data).unwrap();
    let cfg = d.path().join("exports.toml");
    std::fs::write(
        &cfg,
        "control = \"ctl.sock\"\nmetrics = \"127.0.0.1:0\"\n\n\
         [content]\ncache = \"8MiB\"\npolicy = \"lru\"\nhash_fraction = \"1/64\"\n\n\
         [[export]]\nname = \"a\"\nbackend = \"a.img\"\ncontent = true\n\n\
         [[export]]\nname = \"b\"\nbackend = \"b.img\"\ncontent = true\n",
    )
    .unwrap();
    let s = Served::start(&["--config", cfg.to_str().unwrap()]);
    let sock = d.path().join("ctl.sock");
    assert!(Command::new("nbdcopy").args([src.to_str().unwrap(), &s.uris[0]]).status().unwrap().success());
    let out = d.path().join("out.bin");
    assert!(Command::new("nbdcopy").args([&s.uris[1], out.to_str().unwrap()]).status().unwrap().success());
    cmp(&src, &out);
    let j = json(&sock);
    let (a, b) = (export(&j, "a"), export(&j, "b"));
    assert_eq!(a["content"]["categories"]["write_miss_content_miss"], 256, "{a}");
    assert_eq!(b["content"]["categories"]["read_miss_content_hit"], 256, "{b}");
    assert_eq!(b["content"]["categories"]["read_miss_content_miss"], 0, "{b}");
    assert_eq!(b["content"]["volume"], 1);
    let shared = &b["content"]["shared"];
    assert_eq!((shared["resident_blocks"].as_u64(), shared["references"].as_u64()), (Some(256), Some(512)));
    assert_eq!(shared["exports"], 2);
    assert!(b["content"]["full_comparisons"].as_u64().unwrap() >= 256, "{b}");
    let writes = a["cache"]["backend_writes"].as_u64().unwrap();
    // The same data again through A: silent, no backend write.
    assert!(Command::new("nbdcopy").args([src.to_str().unwrap(), &s.uris[0]]).status().unwrap().success());
    let j = json(&sock);
    let a = export(&j, "a");
    assert_eq!(a["content"]["categories"]["silent_write"], 256, "{a}");
    assert_eq!(a["content"]["backend_block_writes_avoided"], 256, "{a}");
    assert_eq!(a["cache"]["backend_writes"].as_u64().unwrap(), writes, "{a}");
    let m = http_get(&s.metrics_addr(), "/metrics");
    assert!(
        m.contains("\nblockwell_content_accesses_total{export=\"b\",category=\"read_miss_content_hit\"} 256\n"),
        "{m}"
    );
    assert!(m.contains("\nblockwell_content_backend_block_writes_avoided_total{export=\"a\"} 256\n"), "{m}");
    assert!(m.contains("\nblockwell_content_shared_blocks{export=\"a\"} 256\n"), "{m}");
    let (ok, rest) = s.stop();
    assert!(ok && rest.contains("stopped; a: ") && rest.contains("stopped; b: "), "{rest}");
    cmp(&src, &d.path().join("a.img"));
    cmp(&src, &d.path().join("b.img"));
}

#[test]
fn read_only_content_export_serves_reads_and_refuses_writes() {
    if !have("qemu-io") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 4);
    std::fs::write(&img, vec![0x7e; 4 << 20]).unwrap();
    let s = Served::start(&["--backend", img.to_str().unwrap(), "--content", "--read-only"]);
    // A read-only export is opened read-only (-r).
    let out = Command::new("qemu-io")
        .args(["-r", "-f", "raw", &s.uri, "-c", "read -P 0x7e 0 4M", "-c", "read -P 0x7e 1000 5000"])
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("fail") && text.contains("read 5000/5000"), "{text}");
    let out = Command::new("qemu-io").args(["-f", "raw", &s.uri, "-c", "write -P 1 0 4k"]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() || text.contains("ermission") || text.contains("read-only"), "{text}");
    drop(s);
    assert!(std::fs::read(&img).unwrap().iter().all(|&b| b == 0x7e), "nothing written");
}

#[test]
fn bad_content_options_are_one_clear_error() {
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 1);
    let b = img.to_str().unwrap();
    let fails = |extra: &[&str]| {
        let mut a = vec!["serve", "--backend", b];
        a.extend(extra);
        util::fails(&a)
    };
    let e = fails(&["--content", "--policy", "opt"]);
    assert!(e.contains("--policy") && e.contains("next-use"), "{e}");
    let e = fails(&["--content", "--prefetch", "obl"]);
    assert!(e.contains("--prefetch cannot be combined with --content"), "{e}");
    assert!(fails(&["--content", "--admission", "n-hit:2"]).contains("--admission cannot be combined with --content"));
    assert!(fails(&["--content", "--sequential-cutoff", "1MiB"]).contains("--sequential-cutoff"));
    assert!(fails(&["--content", "--mode", "write-around"]).contains("--mode write-around"));
    assert!(fails(&["--content", "--cache", "0"]).contains("--cache"));
    let e = fails(&["--content", "--hash-fraction", "3"]);
    assert!(e.contains("'--hash-fraction <FRACTION>': '3' is not a fraction"), "{e}");
    assert!(fails(&["--hash-fraction", "1/32"]).contains("--hash-fraction needs --content"));
    assert!(fails(&["--content", "--policy", "lirs", "--preset", "libcachesim"]).contains("quirks"));
    let cfg = d.path().join("exports.toml");
    std::fs::write(&cfg, "[[export]]\nname = \"a\"\nbackend = \"disk.img\"\ncontent = true\n").unwrap();
    let e = util::fails(&["serve", "--config", cfg.to_str().unwrap()]);
    assert!(e.contains("exports.toml: export \"a\": content = true needs a top-level [content] table"), "{e}");
    std::fs::write(
        &cfg,
        "[content]\npolicy = \"belady\"\n[[export]]\nname = \"a\"\nbackend = \"disk.img\"\ncontent = true\n",
    )
    .unwrap();
    let e = util::fails(&["serve", "--config", cfg.to_str().unwrap()]);
    assert!(e.contains("exports.toml: [content]: policy"), "{e}");
}
