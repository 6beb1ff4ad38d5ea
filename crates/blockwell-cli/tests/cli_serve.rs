//! `blockwell serve` driven as a user would: the real binary, real NBD clients (qemu-io, nbdinfo, nbdcopy,
//! qemu-img), SIGTERM for a graceful stop, and the backing file checked for exactly the acknowledged data.
//! Each test skips with "SKIPPED: <tool> not installed" when a client is missing (`scripts/test.sh` installs them).

mod util;

use util::serve::{disk, have, http_get, qemu_io, status, Served};

use std::io::Read;
use std::process::Command;

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
    assert!(out.contains("stopped;") && out.contains("\n  reads       "), "{out}");
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
    let e = util::fails(&["serve", "--backend", b, "--policy", "opt"]);
    assert!(e.starts_with("blockwell: error: --policy opt: the policy needs the future"), "{e}");
    assert!(util::fails(&["serve", "--backend", b, "--policy", "lirs", "--preset", "libcachesim"]).contains("quirks"));
    assert!(util::fails(&["serve", "--backend", b, "--delay", "floppy"]).contains("--delay"));
    let e = util::fails(&["serve", "--backend", b, "--delay", "wd1200bb(spin=1)"]);
    assert!(e.contains("--delay") && e.contains("spin"), "{e}");
    let e = util::fails(&["serve", "--backend", b, "--prefetch", "linux24(max=0x)"]);
    assert!(e.contains("--prefetch") && e.contains("max"), "{e}");
    assert!(util::fails(&["serve", "--backend", b, "--mode", "write-back"]).contains("--mode"));
    assert!(util::fails(&["serve", "--backend", b, "--listen", "nowhere"]).contains("--listen"));
}

#[test]
fn toml_config_serves_two_exports_one_read_only() {
    if !have("qemu-io") || !have("nbdinfo") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::File::create(d.path().join("a.img")).unwrap().set_len(4 << 20).unwrap();
    std::fs::File::create(d.path().join("b.img")).unwrap().set_len(2 << 20).unwrap();
    let cfg = d.path().join("exports.toml");
    std::fs::write(
        &cfg,
        "control = \"ctl.sock\"\n\n\
         [[export]]\nname = \"a\"\ndescription = \"writable\"\nbackend = \"a.img\"\ncache = \"1MiB\"\npolicy = \"arc\"\n\
         admission = \"tinylfu\"\n\n\
         [[export]]\nname = \"b\"\nbackend = \"b.img\"\nread_only = true\ncache = 0\n",
    )
    .unwrap();
    let s = Served::start(&["--config", cfg.to_str().unwrap()]);
    assert_eq!(s.uris.len(), 2, "{}", s.banner);
    let server = s.uri.trim_end_matches("/a");
    let info = Command::new("nbdinfo").args(["--list", "--json", server]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    let names: Vec<&str> =
        v["exports"].as_array().unwrap().iter().map(|e| e["export-name"].as_str().unwrap()).collect();
    assert_eq!(names, ["a", "b"]);
    let a = v["exports"].as_array().unwrap().iter().find(|e| e["export-name"] == "a").unwrap();
    assert_eq!(a["description"], "writable");
    assert_eq!(a["is_read_only"], false);
    let b = v["exports"].as_array().unwrap().iter().find(|e| e["export-name"] == "b").unwrap();
    assert_eq!(b["is_read_only"], true);
    assert_eq!(b["export-size"], 2 << 20);
    qemu_io(&s.uris[0], &["write -P 0x5a 0 64k", "read -P 0x5a 0 64k", "flush"]);
    let out = Command::new("qemu-io").args(["-f", "raw", &s.uris[1], "-c", "write -P 1 0 4k"]).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success() || text.contains("ermission") || text.contains("read-only"), "{text}");
    // The control socket is relative to the config file.
    let st = status(&d.path().join("ctl.sock"), false);
    assert!(st.starts_with("a: write-through, 4.00 MiB (8192 sectors), backend "), "{st}");
    assert!(st.contains("\n  cache       arc, 256 blocks, "), "{st}");
    assert!(st.contains("\nb: read-only, 2.00 MiB (4096 sectors), backend "), "{st}");
    assert!(st.ends_with("\n  cache       off\n  reads       0 requests, 0 B\n  writes      0 requests, 0 B; 0 B zeroed in 0 requests, 0 B trimmed in 0 requests; 0 flushes\n"), "{st}");
    let (ok, rest) = s.stop();
    assert!(
        ok && rest.contains("stopped; a: ")
            && rest.contains("blocks 16 hits")
            && rest.contains("stopped; b: read-only"),
        "{rest}"
    );
    assert!(!d.path().join("ctl.sock").exists(), "the control socket is removed on stop");
    let f = std::fs::read(d.path().join("a.img")).unwrap();
    assert!(f[..64 << 10].iter().all(|&x| x == 0x5a) && f[64 << 10..].iter().all(|&x| x == 0));
    assert!(std::fs::read(d.path().join("b.img")).unwrap().iter().all(|&x| x == 0), "b untouched");
}

#[test]
fn bad_config_files_are_one_error_line_naming_file_and_key() {
    let d = tempfile::tempdir().unwrap();
    disk(d.path(), 1);
    let cfg = d.path().join("exports.toml");
    let c = cfg.to_str().unwrap();
    let fails = |text: &str| {
        std::fs::write(&cfg, text).unwrap();
        util::fails(&["serve", "--config", c])
    };
    // An unknown key and a bad value: the file, the line and column, the export and the key.
    let e = fails("[[export]]\nname = \"a\"\nbackend = \"disk.img\"\npolcy = \"lru\"\n");
    assert!(e.contains("exports.toml:4:1: export \"a\": unknown key 'polcy' (known: name, "), "{e}");
    let e = fails("[[export]]\nname = \"a\"\nbackend = \"disk.img\"\ncache = \"12XB\"\n");
    assert!(e.contains("exports.toml:4:9: export \"a\": cache: '12XB': unknown unit 'XB'"), "{e}");
    let e = fails("[[export]]\nname = \"a\"\nbackend = \"disk.img\"\n[[export]]\nname = \"b\"\nbackend = \"disk.img\"\npreset = \"x\"\n");
    assert!(
        e.ends_with(
            "exports.toml:7:10: export \"b\": preset: unknown preset 'x' (known: default, libcachesim, butt05)"
        ),
        "{e}"
    );
    let e = fails("[[export]]\nname = \"a\"\nbackend = \"disk.img\"\nadmission = \"prob:2\"\n");
    assert!(
        e.contains("exports.toml:4:13: export \"a\": admission: bad admission 'prob:2': prob:P needs 0 < P <= 1"),
        "{e}"
    );
    let e = fails("listen = \"127.0.0.1:0\"\nsched = \"fifo\"\n[[export]]\nname = \"a\"\nbackend = \"disk.img\"\n");
    assert!(e.ends_with("exports.toml:2:9: sched: must be \"batch\" or \"normal\", not \"fifo\""), "{e}");
    let e =
        fails("[[export]]\nname = \"a\"\nbackend = \"disk.img\"\n[[export]]\nname = \"a\"\nbackend = \"disk.img\"\n");
    assert!(e.contains("exports.toml: duplicate export name \"a\""), "{e}");
    let e = fails("[[export]]\nname = \"a\"\ncache = \"1MiB\"\n");
    assert!(e.contains("exports.toml: export \"a\": missing key 'backend'"), "{e}");
    let e = fails("[[export]]\nname = \"a\"\nbackend = \"nope.img\"\n");
    assert!(e.contains("exports.toml: export \"a\": backend") && e.contains("nope.img"), "{e}");
    let e = fails("[[export]\nname = 1\n");
    assert!(e.contains("exports.toml:1:"), "{e}");
    let e = util::fails(&["serve", "--config", c, "--backend", "disk.img"]);
    assert!(e.contains("cannot be combined with a config file"), "{e}");
    let e = util::fails(&["serve", "--config", d.path().join("missing.toml").to_str().unwrap()]);
    assert!(e.contains("missing.toml"), "{e}");
    assert!(util::fails(&["serve"]).contains("--backend PATH (one export) or --config FILE"));
}

#[test]
fn status_and_metrics_of_a_running_server() {
    if !have("qemu-io") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 8);
    let sock = d.path().join("ctl.sock");
    let s = Served::start(&[
        "--backend",
        img.to_str().unwrap(),
        "--cache",
        "1MiB",
        "--control",
        sock.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ]);
    qemu_io(&s.uri, &["read 0 64k", "read 0 64k"]);
    let st = status(&sock, false);
    // Labelled lines, with the hit ratios: the second 64 KiB read hit in full.
    assert!(st.starts_with("blockwell: write-through, 8.00 MiB (16384 sectors), backend "), "{st}");
    assert!(st.contains("\n  cache       lru, 256 blocks, 16 resident\n"), "{st}");
    let reads = "\n  reads       2 requests, 1 hits, hit ratio 0.5000; blocks 16 hits, 16 misses, hit ratio 0.5000\n";
    assert!(st.contains(reads), "{st}");
    assert!(st.contains("\n  writes      0 requests; blocks 0 hits, 0 misses, hit ratio -\n"), "{st}");
    assert!(st.contains("\n  backend     64.00 KiB read in "), "{st}");
    assert!(st.ends_with("\n  redcap      n/a\n"), "{st}");
    let j: serde_json::Value = serde_json::from_str(&status(&sock, true)).unwrap();
    let e = &j["exports"][0];
    assert_eq!(e["name"], "blockwell");
    assert_eq!(e["cache"]["read_block_hits"], 16);
    assert_eq!(e["cache"]["read_requests"], 2);
    assert_eq!(e["delay"], serde_json::Value::Null);
    let m = http_get(&s.metrics_addr(), "/metrics");
    assert!(m.starts_with("HTTP/1.1 200 OK\r\n") && m.contains("text/plain; version=0.0.4"), "{m}");
    assert!(m.contains("# TYPE blockwell_block_hits_total counter\n"), "{m}");
    assert!(m.contains("\nblockwell_block_hits_total{export=\"blockwell\",op=\"read\"} 16\n"), "{m}");
    // Connections: qemu-io's one, closed cleanly.
    for line in [
        "\nblockwell_connections 0\n",
        "\nblockwell_connections_total 1\n",
        "\nblockwell_connection_errors_total 0\n",
        "\nblockwell_log_lines_dropped_total 0\n",
    ] {
        assert!(m.contains(line), "{line:?} in {m}");
    }
    assert!(http_get(&s.metrics_addr(), "/").starts_with("HTTP/1.1 404"));
    let (ok, _) = s.stop();
    assert!(ok);
}

/// `--prefetch redcap`: qemu-io reads through a REDCAP cache; the status shows it active and the segment
/// fetches in the counters, and the data read is the image's.
#[test]
fn redcap_prefetch_through_a_real_client() {
    if !have("qemu-io") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 8);
    {
        use std::io::Write as _;
        let mut f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
        f.write_all(&vec![0x5a; 1 << 20]).unwrap();
    }
    let sock = d.path().join("ctl.sock");
    let s = Served::start(&[
        "--backend",
        img.to_str().unwrap(),
        "--cache",
        "2MiB",
        "--prefetch",
        "redcap(segment_kb=128)",
        // On a fast backend (the page cache) whether segments pay off is a matter of noise; on the emulated
        // disk they clearly do.
        "--delay",
        "hdd",
        "--control",
        sock.to_str().unwrap(),
    ]);
    // 4 KiB reads, one every 8 KiB, over 1 MiB: after the 4 probe misses, each 128 KiB segment is one backend
    // read and serves the next 15 reads of it.
    let cmds: Vec<String> = (0..128).map(|i| format!("read -P 0x5a {} 4k", i * 8192)).collect();
    let cmds: Vec<&str> = cmds.iter().map(String::as_str).collect();
    qemu_io(&s.uri, &cmds);
    let st = status(&sock, false);
    assert!(st.contains("\n  redcap      on, 0 switches\n"), "{st}");
    let j: serde_json::Value = serde_json::from_str(&status(&sock, true)).unwrap();
    let e = &j["exports"][0];
    assert_eq!(e["redcap"]["active"], true, "{e}");
    let c = &e["cache"];
    assert!(c["prefetch_used"].as_u64().unwrap() >= 100, "{c}");
    assert!(c["backend_reads"].as_u64().unwrap() <= 16, "{c}");
    let (ok, _) = s.stop();
    assert!(ok);
}

/// `--delay` with a disk model: a write and a read-back through the emulated WD1200BB (seed 000's disk).
#[test]
fn disk_model_under_the_cache() {
    if !have("qemu-io") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 4);
    let s = Served::start(&["--backend", img.to_str().unwrap(), "--cache", "0", "--delay", "wd1200bb"]);
    qemu_io(&s.uri, &["write -P 0x3c 64k 64k", "read -P 0x3c 64k 64k", "read -P 0 0 4k"]);
    let (ok, out) = s.stop();
    assert!(ok, "{out}");
    assert!(std::fs::read(&img).unwrap()[65536..131072].iter().all(|&b| b == 0x3c));
}

#[test]
fn structured_logs_are_one_json_object_per_line() {
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 1);
    let mut s = Served::start(&["--backend", img.to_str().unwrap(), "--log-format", "json"]);
    let mut err = s.child.stderr.take().unwrap();
    // One client session: nbdinfo connects, opens the export, asks and disconnects.
    if have("nbdinfo") {
        let out = std::process::Command::new("nbdinfo").args(["--size", &s.uri]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let (ok, _) = s.stop();
    assert!(ok);
    let mut text = String::new();
    err.read_to_string(&mut text).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let events: Vec<&str> = lines.iter().map(|v| v["event"].as_str().unwrap()).collect();
    if have("nbdinfo") {
        assert_eq!(events, ["export", "start", "connect", "open", "disconnect", "stop", "summary"], "{text}");
        assert!(lines[2]["peer"].as_str().unwrap().starts_with("127.0.0.1:"), "{text}");
        assert_eq!(lines[3]["export"], lines[0]["name"], "{text}");
        assert!(lines[4].get("error").is_none(), "nbdinfo ends cleanly: {text}");
    } else {
        assert_eq!(events, ["export", "start", "stop", "summary"], "{text}");
    }
    assert!(lines.iter().all(|v| v["level"] == "info" && v["ts"].as_f64().unwrap() > 1.7e9), "{text}");
}

/// `--log-level warn` keeps the info events (start, connections, summary) out; a refused connection, a
/// warning, still comes out.
#[test]
fn the_log_level_filters_events() {
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 1);
    let args = ["--backend", img.to_str().unwrap(), "--log-level", "warn", "--max-connections", "1"];
    let mut s = Served::start(&args);
    let mut err = s.child.stderr.take().unwrap();
    let held = std::net::TcpStream::connect(s.addr()).unwrap();
    // The server reads the first connection's greeting reply before the second arrives: wait for it to count.
    let mut greeting = [0u8; 18];
    std::io::Read::read_exact(&mut &held, &mut greeting).unwrap();
    let refused = std::net::TcpStream::connect(s.addr()).unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(std::io::Read::read(&mut &refused, &mut buf).unwrap(), 0, "closed unserved");
    drop(held);
    let (ok, _) = s.stop();
    assert!(ok);
    let mut text = String::new();
    err.read_to_string(&mut text).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].starts_with("blockwell: refuse level=warn peer=127.0.0.1:"), "{text}");
    assert!(lines[0].ends_with(r#"reason="1 connections open (--max-connections)""#), "{text}");
}

#[test]
fn status_without_a_server_and_public_metrics_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let e = util::fails(&["status", "--control", d.path().join("none.sock").to_str().unwrap()]);
    assert!(
        e.contains("cannot connect to") && e.contains("(is blockwell serve or mount running with --control?)"),
        "{e}"
    );
    let img = disk(d.path(), 1);
    let e = util::fails(&["serve", "--backend", img.to_str().unwrap(), "--metrics", "0.0.0.0:9100"]);
    assert!(e.contains("--metrics") && e.contains("non-loopback"), "{e}");
}

/// User + system CPU seconds of a process (all its threads), from /proc.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    ticks as f64 / 100.0 // USER_HZ, 100 on Linux
}

/// Busy polling (`--busy-poll-us`) is adaptive: a client that sends requests back to back is answered, the
/// data is right, and once the client goes quiet the server sleeps instead of polling. Polling for 200 ms
/// after every quiet spell would show up as most of a CPU second in the idle window.
#[test]
fn busy_polling_serves_back_to_back_requests_and_sleeps_when_the_client_is_idle() {
    use std::io::Write;
    use std::net::TcpStream;
    use std::time::Duration;
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 1);
    let mut data = vec![0u8; 1 << 20];
    for (i, b) in data.iter_mut().enumerate() {
        *b = (i * 7 / 4096) as u8;
    }
    std::fs::write(&img, &data).unwrap();
    let s = Served::start(&["--backend", img.to_str().unwrap(), "--busy-poll-us", "200000"]);
    let addr = s.uri.trim_start_matches("nbd://").split('/').next().unwrap().to_string();
    let mut c = TcpStream::connect(&addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // Fixed newstyle, no zero padding, NBD_OPT_EXPORT_NAME "".
    let mut greeting = [0u8; 18];
    c.read_exact(&mut greeting).unwrap();
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    c.write_all(&3u32.to_be_bytes()).unwrap();
    let mut opt = b"IHAVEOPT".to_vec();
    opt.extend(1u32.to_be_bytes());
    opt.extend(0u32.to_be_bytes());
    c.write_all(&opt).unwrap();
    let mut export = [0u8; 10];
    c.read_exact(&mut export).unwrap();
    assert_eq!(u64::from_be_bytes(export[..8].try_into().unwrap()), 1 << 20);
    // 2,000 reads of 4 KiB back to back (simple replies: structured replies were not asked for).
    let mut block = vec![0u8; 4096];
    for i in 0..2000u64 {
        let off = (i * 37 % 256) * 4096;
        let mut req = 0x2560_9513u32.to_be_bytes().to_vec();
        req.extend(0u16.to_be_bytes());
        req.extend(0u16.to_be_bytes());
        req.extend(i.to_be_bytes());
        req.extend(off.to_be_bytes());
        req.extend(4096u32.to_be_bytes());
        c.write_all(&req).unwrap();
        let mut h = [0u8; 16];
        c.read_exact(&mut h).unwrap();
        assert_eq!(u32::from_be_bytes(h[..4].try_into().unwrap()), 0x6744_6698);
        assert_eq!(u32::from_be_bytes(h[4..8].try_into().unwrap()), 0, "no error");
        assert_eq!(u64::from_be_bytes(h[8..].try_into().unwrap()), i, "cookie");
        c.read_exact(&mut block).unwrap();
        assert_eq!(block, data[off as usize..off as usize + 4096], "read {i} at {off}");
    }
    // Quiet: the one poll after the last request ends within 200 ms; then the server must sleep.
    std::thread::sleep(Duration::from_millis(400));
    let before = cpu_seconds(s.child.id());
    std::thread::sleep(Duration::from_secs(1));
    let idle = cpu_seconds(s.child.id()) - before;
    assert!(idle < 0.2, "the server used {idle:.2} s of CPU in 1 s with an idle client");
    drop(c);
    let (ok, out) = s.stop();
    assert!(ok, "{out}");
}

/// The scheduling policy in a /proc `stat` file (field 41: 0 SCHED_OTHER, 3 SCHED_BATCH).
fn policy(stat: &std::path::Path) -> u32 {
    let stat = std::fs::read_to_string(stat).unwrap();
    // The fields after the command name, which is in parentheses and may contain spaces.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(41 - 3).unwrap().parse().unwrap()
}

/// The scheduling policies of a process's NBD connection threads.
fn connection_policies(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = t.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !comm.starts_with("nbd-conn") {
            continue;
        }
        out.push(policy(&dir.join("stat")));
    }
    out
}

/// `--sched`: connection threads run under SCHED_BATCH by default and under SCHED_OTHER with `normal`; the
/// accept thread keeps the normal policy either way.
#[test]
fn sched_sets_the_connection_threads_policy() {
    use std::net::TcpStream;
    let d = tempfile::tempdir().unwrap();
    let img = disk(d.path(), 1);
    for (args, want) in [(&[][..], 3), (&["--sched", "normal"][..], 0), (&["--sched", "batch"][..], 3)] {
        let mut a = vec!["--backend", img.to_str().unwrap()];
        a.extend_from_slice(args);
        let s = Served::start(&a);
        let addr = s.uri.trim_start_matches("nbd://").split('/').next().unwrap().to_string();
        let mut c = TcpStream::connect(&addr).unwrap();
        // The greeting comes from the connection thread, after it has set its policy.
        let mut greeting = [0u8; 18];
        c.read_exact(&mut greeting).unwrap();
        assert_eq!(&greeting[..8], b"NBDMAGIC");
        assert_eq!(connection_policies(s.child.id()), vec![want], "{args:?}");
        let main = policy(format!("/proc/{}/stat", s.child.id()).as_ref());
        assert_eq!(main, 0, "the main thread stays normal");
        drop(c);
        let (ok, out) = s.stop();
        assert!(ok, "{out}");
    }
}
