//! What `blockwell serve` says about itself, driven as a user would (the real binary, qemu-io, `blockwell status`
//! and `blockwell cache` on its control socket): every line and counter names the device it counts (the RAM
//! cache, the cache device, the backend or origin), the mode shown is the current one, slots and the blocks the
//! policy may hold are told apart, TRIM and WRITE_ZEROES are not counted as written bytes, an export without a
//! RAM cache still counts its requests, the start line names both caches, the stop summary says each counter
//! once, and a control-socket error is printed once.

mod util;

use util::serve::{have, qemu_io, status, Served};

/// An 8 MiB origin, a 1 MiB RAM cache over a 4 MiB write-back cache device that is never cleaned, with a
/// control socket.
fn two_levels(d: &std::path::Path) -> Served {
    std::fs::File::create(d.join("origin.img")).unwrap().set_len(8 << 20).unwrap();
    Served::start(&[
        "--backend",
        d.join("origin.img").to_str().unwrap(),
        "--cache",
        "1MiB",
        "--cache-dev",
        d.join("cache.dev").to_str().unwrap(),
        "--cache-dev-size",
        "4MiB",
        "--mode",
        "write-back",
        "--cleaner",
        "none",
        "--control",
        d.join("ctl.sock").to_str().unwrap(),
    ])
}

fn json(ctl: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&status(ctl, true)).unwrap()
}

#[test]
fn each_status_line_names_the_device_it_counts() {
    if !have("qemu-io") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ctl = d.join("ctl.sock");
    let s = two_levels(d);
    // A write of 256 KiB, a zero-write of 512 KiB and a trim of 256 KiB, then a read of what was written.
    qemu_io(
        &s.uri,
        &["write -P 1 0 256k", "flush", "write -z 1M 512k", "discard 2M 256k", "flush", "read -P 1 0 256k"],
    );
    let j = json(&ctl);
    let e = &j["exports"][0];
    let (c, t) = (&e["cache"], &e["cache_dev"]);
    // The RAM cache's backend counters count its traffic with the cache device, and say so.
    assert_eq!(e["cache_below"], "cache_dev", "{e}");
    // Zero-writes and trims are counted apart from written bytes.
    assert_eq!(c["backend_bytes_written"], 256 << 10, "{c}");
    assert_eq!((c["backend_zero_writes"].as_u64(), c["backend_bytes_zeroed"].as_u64()), (Some(1), Some(512 << 10)));
    assert_eq!((c["backend_trims"].as_u64(), c["backend_bytes_trimmed"].as_u64()), (Some(1), Some(256 << 10)));
    // Write-back with no cleaner: nothing written reached the origin; the zero-write and the trim did.
    assert_eq!(t["origin_write_bytes"], 0, "{t}");
    let st = status(&ctl, false);
    let header = format!(
        "blockwell: write-back, 8.00 MiB (16384 sectors), backend {}, cache device {}\n",
        d.join("origin.img").display(),
        d.join("cache.dev").display()
    );
    assert!(st.starts_with(&header), "{st}");
    assert!(!st.contains("\n  backend "), "no line says backend for the cache device's traffic: {st}");
    let below = "\n  ram <-> dev 0 B read from the cache device in 0 requests, 256.00 KiB written to it in 1 request; \
                 512.00 KiB zeroed in 1 request, 256.00 KiB trimmed in 1 request\n";
    assert!(st.contains(below), "{st}");
    // The origin's line: nothing read or written, the zero-write and the trim passed on.
    let origin = "\n  origin      0 B read in 0 requests, 0 B written in 0 requests; 512.00 KiB zeroed in 1 request, \
                  256.00 KiB trimmed in 1 request\n";
    assert!(st.contains(origin), "{st}");
    // Slots and the blocks the policy may hold, told apart.
    let (slots, cap) = (t["slots"].as_u64().unwrap(), t["capacity_blocks"].as_u64().unwrap());
    assert!(cap < slots, "{t}");
    let want =
        format!("{slots} slots of 4096 B ({cap} for cached blocks, {} reserved for writes in flight)", slots - cap);
    assert!(st.contains(&want), "{st}");
    // After a switch to write-through, the header and JSON say so.
    util::ok(&["cache", "mode", "write-through", "--control", ctl.to_str().unwrap()]);
    let j = json(&ctl);
    assert_eq!(j["exports"][0]["mode"], "write-through", "{j}");
    assert!(status(&ctl, false).starts_with("blockwell: write-through, 8.00 MiB"));
    // The origin line counts the write-back the switch made.
    let st = status(&ctl, false);
    assert!(st.contains("\n  origin      0 B read in 0 requests, 256.00 KiB written in "), "{st}");
    let (ok, _) = s.stop();
    assert!(ok);
}

/// `--cache 0` (no RAM cache) still counts the requests and bytes of each kind.
#[test]
fn an_export_without_a_ram_cache_counts_its_requests() {
    if !have("qemu-io") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let img = util::serve::disk(d, 4);
    let ctl = d.join("ctl.sock");
    let s = Served::start(&[
        "--backend",
        img.to_str().unwrap(),
        "--cache",
        "0",
        "--control",
        ctl.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
    ]);
    qemu_io(&s.uri, &["write -P 1 0 64k", "read 0 128k", "write -z 1M 32k", "discard 2M 16k", "flush"]);
    let j = json(&ctl);
    let r = &j["exports"][0]["requests"];
    assert_eq!(j["exports"][0]["cache"], serde_json::Value::Null);
    for (k, v) in [
        ("read_requests", 1),
        ("read_bytes", 128 << 10),
        ("write_requests", 1),
        ("write_bytes", 64 << 10),
        ("zero_writes", 1),
        ("bytes_zeroed", 32 << 10),
        ("trims", 1),
        ("bytes_trimmed", 16 << 10),
    ] {
        assert_eq!(r[k], v, "{k}: {r}");
    }
    assert!(r["flushes"].as_u64().unwrap() >= 1, "{r}");
    let st = status(&ctl, false);
    assert!(st.contains("\n  cache       off\n"), "{st}");
    assert!(st.contains("\n  reads       1 request, 128.00 KiB\n"), "{st}");
    assert!(
        st.contains(
            "\n  writes      1 request, 64.00 KiB; 32.00 KiB zeroed in 1 request, 16.00 KiB trimmed in 1 request"
        ),
        "{st}"
    );
    let m = util::serve::http_get(&s.metrics_addr(), "/metrics");
    for line in [
        "blockwell_uncached_requests_total{export=\"blockwell\",op=\"read\"} 1\n",
        "blockwell_uncached_bytes_total{export=\"blockwell\",op=\"read\"} 131072\n",
        "blockwell_uncached_bytes_total{export=\"blockwell\",op=\"write\"} 65536\n",
        "blockwell_uncached_bytes_total{export=\"blockwell\",op=\"zero\"} 32768\n",
        "blockwell_uncached_bytes_total{export=\"blockwell\",op=\"trim\"} 16384\n",
    ] {
        assert!(m.contains(line), "{line}: {m}");
    }
    let (ok, out) = s.stop();
    assert!(ok && out.contains("\n  reads       1 request, 128.00 KiB\n"), "{out}");
}

/// The start line names the RAM cache and the cache device (path, size, mode); the stop summary is the status
/// text, each counter once.
#[test]
fn the_start_line_names_both_caches_and_the_summary_says_each_counter_once() {
    if !have("qemu-io") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let s = two_levels(d);
    let want = format!(
        "blockwell: serving {} (8.00 MiB) through a RAM cache (lru, 1.00 MiB) and the cache device {} (4.00 MiB, \
         write-back) at nbd://",
        d.join("origin.img").display(),
        d.join("cache.dev").display()
    );
    assert!(s.banner.contains(&want), "{}", s.banner);
    qemu_io(&s.uri, &["write -P 1 0 64k", "read -P 1 0 64k"]);
    let live = status(&d.join("ctl.sock"), false);
    let (ok, out) = s.stop();
    assert!(ok, "{out}");
    assert!(out.starts_with("blockwell: stopped; blockwell: write-back, 8.00 MiB"), "{out}");
    assert!(!out.contains("engine."), "{out}");
    // The summary is the status text (as at the last status request, with the device's final counters).
    let lines = |t: &str| t.lines().map(|l| l.split_once(' ').map_or(l, |x| x.0).to_string()).collect::<Vec<_>>();
    assert_eq!(lines(out.trim_start_matches("blockwell: stopped; ")), lines(&live), "{out}");
}

/// A cache command on a server without a cache device: the error once, on stderr, and nothing on stdout.
#[test]
fn a_control_error_is_printed_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let img = util::serve::disk(d, 1);
    let ctl = d.join("ctl.sock");
    let _s = Served::start(&["--backend", img.to_str().unwrap(), "--control", ctl.to_str().unwrap()]);
    let c = ctl.to_str().unwrap();
    for args in [vec!["cache", "flush", "--control", c], vec!["cache", "mode", "write-through", "--control", c]] {
        let o = util::run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&o.stdout), "", "{args:?}: nothing on stdout");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err, format!("blockwell: error: {c}: no export has a cache device\n"), "{args:?}");
    }
}
