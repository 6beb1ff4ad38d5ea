//! The proof that `blockwell sim` and `blockwell serve` run one engine: the same request stream (reads and
//! writes, sequential runs and reuse) replayed by `sim` with a prefetcher and admission, and sent to `serve`
//! over NBD at queue depth 1 by a real client (`nbdsh`, libnbd), gives the same engine counters, block for
//! block (`blockwell status --json`'s `engine` against `sim --json`'s `stats`).
//!
//! The stream is block-aligned (the simulator allocates a partly written block, the server cannot) and the
//! prefetcher's reads are synchronous (`obl(sync=true)`): the server performs asynchronous prefetches on a
//! worker thread, whose timing a QD1 client cannot control, while the simulator's reads complete at once.

mod util;

use blockwell_testkit::Rng;
use serde_json::Value;
use std::fmt::Write as _;
use std::process::Command;
use util::serve::{have, status, Served};

const BS: u64 = 4096;
const DEVICE_BLOCKS: u64 = 2048;

/// A deterministic stream: random reuse of a hot set, sequential runs and cold reads; a quarter writes.
fn stream() -> Vec<(bool, u64, u64)> {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut out = Vec::new();
    while out.len() < 3000 {
        let write = rng.next() % 4 == 0;
        match rng.next() % 10 {
            // A sequential run of 4..=20 requests of 1..=4 blocks.
            0 | 1 => push_run(&mut out, &mut rng, write, DEVICE_BLOCKS - 100, 17),
            // Reuse: a hot set of 64 blocks.
            2..=7 => out.push((write, rng.next() % 64 * 7, 1 + rng.next() % 2)),
            // Cold.
            _ => out.push((write, rng.next() % (DEVICE_BLOCKS - 8), 1 + rng.next() % 8)),
        }
    }
    out
}

/// Appends a sequential run of 4 to `3 + more` requests of 1 to 4 blocks each, from a random block below `below`.
fn push_run(out: &mut Vec<(bool, u64, u64)>, rng: &mut Rng, write: bool, below: u64, more: u64) {
    let mut b = rng.below(below);
    for _ in 0..4 + rng.below(more) {
        let n = 1 + rng.below(4);
        out.push((write, b, n));
        b += n;
    }
}

/// The stream as an MSR Cambridge trace (byte offsets and sizes).
fn msr(reqs: &[(bool, u64, u64)]) -> String {
    let mut s = String::new();
    for (i, &(w, b, n)) in reqs.iter().enumerate() {
        let _ = writeln!(
            s,
            "{},host,0,{},{},{},100",
            128166372000000000u64 + i as u64 * 10_000,
            if w { "Write" } else { "Read" },
            b * BS,
            n * BS
        );
    }
    s
}

/// The nbdsh script that sends the stream at queue depth 1.
fn driver(reqs: &[(bool, u64, u64)]) -> String {
    let mut s = String::from("reqs = [\n");
    for &(w, b, n) in reqs {
        let _ = writeln!(s, "({}, {}, {}),", u8::from(w), b * BS, n * BS);
    }
    s.push_str(
        "]\nfor i, (w, off, n) in enumerate(reqs):\n    if w:\n        h.pwrite(bytes([i % 251]) * n, off)\n    \
         else:\n        h.pread(n, off)\n",
    );
    s
}

/// Sends the stream to the server at `uri` at queue depth 1 with nbdsh (the script goes in `dir`).
fn drive(dir: &std::path::Path, uri: &str, reqs: &[(bool, u64, u64)]) {
    let script = dir.join("drive.py");
    std::fs::write(&script, driver(reqs)).unwrap();
    // nbdsh runs `python3 -m nbd`; the python3 first on PATH may not be the one the Debian package serves.
    let out = Command::new("/usr/bin/python3")
        .args(["-m", "nbd", "-u", uri, "-c", &format!("exec(open({:?}).read())", script.to_str().unwrap())])
        .output()
        .unwrap();
    assert!(out.status.success(), "nbdsh: {}", String::from_utf8_lossy(&out.stderr));
}

fn compare(policy: &str, prefetch: &str, admission: &str, cutoff: &str) {
    let d = tempfile::tempdir().unwrap();
    let reqs = stream();
    let trace = d.path().join("stream.csv");
    std::fs::write(&trace, msr(&reqs)).unwrap();
    // The cache-step options, the same for both.
    let step = ["--policy", policy, "--prefetch", prefetch, "--admission", admission, "--sequential-cutoff", cutoff];
    let trace_args = ["sim", "--trace", trace.to_str().unwrap(), "--format", "msr", "--cache", "256blocks", "--json"];
    let sim = util::ok(&[&trace_args[..], &step[..]].concat());
    let sim: Value = serde_json::from_str(&sim).unwrap();
    let sim_stats = &sim["results"][0]["stats"];

    let backend = d.path().join("disk.img");
    std::fs::File::create(&backend).unwrap().set_len(DEVICE_BLOCKS * BS).unwrap();
    let sock = d.path().join("ctl.sock");
    let cache = (256 * BS).to_string();
    let serve = ["--backend", backend.to_str().unwrap(), "--cache", &cache, "--control", sock.to_str().unwrap()];
    let s = Served::start(&[&serve[..], &step[..]].concat());
    drive(d.path(), &s.uri, &reqs);
    let st: Value = serde_json::from_str(&status(&sock, true)).unwrap();
    let live = &st["exports"][0]["cache"]["engine"];
    assert!(live.is_object(), "no engine counters in status: {st}");
    assert_eq!(sim_stats, live, "{policy} {prefetch} {admission}: sim (left) and serve (right) differ");
    // The stream exercised what it is meant to.
    let n = |k: &str| live[k].as_u64().unwrap();
    assert!(live["read"]["block_hits"].as_u64().unwrap() > 300, "{live}");
    assert!(live["write"]["blocks"].as_u64().unwrap() > 500, "{live}");
    assert!(n("evictions") > 20, "{live}");
    if prefetch != "none" {
        assert!(n("prefetch_issued") > 100 && n("prefetch_used") > 10, "{live}");
    }
    if admission != "always" {
        assert!(n("admission_rejections") > 100, "{live}");
    }
    if cutoff != "0" {
        assert!(n("bypassed") > 10, "{live}");
    }
    let (ok, _) = s.stop();
    assert!(ok);
}

#[test]
fn sim_and_serve_count_the_same_with_prefetch_and_admission() {
    if !have_nbdsh() {
        return;
    }
    compare("lru", "obl(sync=true,blocks=2)", "n-hit:2", "0");
    compare("arc", "obl(sync=true)", "always", "64KiB");
    compare("s3fifo", "none", "n-hit:2", "64KiB");
    compare("clock", "none", "tinylfu", "0");
}

/// Whether nbdsh (python3-libnbd for /usr/bin/python3) is there; in CI its absence fails the test.
fn have_nbdsh() -> bool {
    let nbd = Command::new("/usr/bin/python3").args(["-c", "import nbd"]).status().is_ok_and(|s| s.success());
    if have("nbdsh") && nbd {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "nbdsh (python3-libnbd) is missing in CI: scripts/test.sh installs it");
    util::skip("nbdsh (python3-libnbd) is not installed for /usr/bin/python3");
    false
}

/// A stream for the cache device: reads of a read region (hot reuse, sequential runs, cold), writes of a write
/// region (overwrites of a hot set, runs), and, with `reread`, reads of blocks written in the last eight
/// requests.
///
/// Reads never touch a write-region block that may have been evicted: the server writes an evicted dirty block
/// back on its cleaner thread, after the reply, and a read that overtakes that write-back finds the block still
/// in its slot (it comes back dirty, where the simulator, which writes back at once, reads it from the origin
/// clean). Under LRU a block written in the last eight requests (at most 32 blocks) is resident in a device of
/// hundreds of blocks.
fn dev_stream(reread: bool) -> Vec<(bool, u64, u64)> {
    const READ: u64 = 1400;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out: Vec<(bool, u64, u64)> = Vec::new();
    while out.len() < 3000 {
        match rng.next() % 12 {
            0 => push_run(&mut out, &mut rng, false, READ - 100, 12),
            1..=4 => out.push((false, rng.next() % 96 * 5, 1 + rng.next() % 2)),
            5 => out.push((false, rng.next() % (READ - 8), 1 + rng.next() % 8)),
            6..=8 => out.push((true, READ + rng.next() % 48 * 3, 1 + rng.next() % 3)),
            9 => out.push((true, READ + rng.next() % (DEVICE_BLOCKS - READ - 8), 1 + rng.next() % 8)),
            _ if reread => {
                let recent: Vec<(u64, u64)> =
                    out[out.len().saturating_sub(8)..].iter().filter(|r| r.0).map(|r| (r.1, r.2)).collect();
                if !recent.is_empty() {
                    let (b, n) = recent[(rng.next() % recent.len() as u64) as usize];
                    out.push((false, b, n));
                }
            }
            _ => {}
        }
    }
    out
}

/// `sim --cache-dev-size` and `serve --cache-dev` in write-back with no cleaner: the same engine counters and
/// the same tier counters, except the write-backs of evicted dirty blocks, which the server does on its
/// cleaner thread at a time the client does not see (the origin writes and their requests depend on how
/// the server's passes grouped them; that every evicted dirty block was written back is checked).
fn compare_dev(policy: &str, promote: &str, cutoff: &str, reread: bool) {
    let d = tempfile::tempdir().unwrap();
    let reqs = dev_stream(reread);
    let trace = d.path().join("stream.csv");
    std::fs::write(&trace, msr(&reqs)).unwrap();
    let backend = d.path().join("disk.img");
    std::fs::File::create(&backend).unwrap().set_len(DEVICE_BLOCKS * BS).unwrap();
    let sock = d.path().join("ctl.sock");
    let dev = d.path().join("cache.dev");
    let opts = ["--cache-dev-policy", policy, "--promote", promote, "--cache-dev-cutoff", cutoff, "--cleaner", "none"];
    let serve = [
        "--backend",
        backend.to_str().unwrap(),
        "--cache",
        "0",
        "--cache-dev",
        dev.to_str().unwrap(),
        "--cache-dev-size",
        "1MiB",
        "--mode",
        "write-back",
        "--control",
        sock.to_str().unwrap(),
    ];
    let s = Served::start(&[&serve[..], &opts[..]].concat());
    drive(d.path(), &s.uri, &reqs);
    let st: Value = serde_json::from_str(&status(&sock, true)).unwrap();
    let live = st["exports"][0]["cache_dev"].clone();
    assert!(live.is_object(), "no cache_dev counters in status: {st}");
    let (ok, _) = s.stop();
    assert!(ok);

    let cap = format!("{}blocks", live["capacity_blocks"].as_u64().unwrap());
    let trace_args = ["sim", "--trace", trace.to_str().unwrap(), "--format", "msr", "--cache", "0", "--json"];
    let dev_args = ["--cache-dev-size", &cap, "--mode", "write-back"];
    let sim: Value = serde_json::from_str(&util::ok(&[&trace_args[..], &dev_args[..], &opts[..]].concat())).unwrap();
    let sim = &sim["results"][0]["tier"];
    let same = [
        "read_requests",
        "write_requests",
        "read_hits",
        "read_misses",
        "write_hits",
        "write_misses",
        "promotions",
        "demotions",
        "dirty_evictions",
        "dirty_write_hits",
        "bypassed",
        "admission_rejections",
        "uncached_reads",
        "uncached_writes",
        "origin_read_bytes",
        // A write the engine passes to the origin (not admitted, bypassed) goes into the block's slot instead
        // on the server while an eviction's write-back of that block is pending: compared only where no write
        // passes.
        if promote == "always" && cutoff == "0" { "dev_write_blocks" } else { "origin_read_bytes" },
    ];
    let differ: Vec<String> = same
        .iter()
        .filter(|k| sim[**k] != live[**k])
        .map(|k| format!("{k}: sim {} serve {}", sim[*k], live[*k]))
        .collect();
    assert!(differ.is_empty(), "{policy} {promote} {cutoff}: {differ:?}\nsim {sim}\nserve {live}");
    // Every dirty block evicted was written back by both (the server by the time it stopped).
    let n = |v: &Value, k: &str| v[k].as_u64().unwrap();
    assert_eq!(n(sim, "cleaned_blocks"), n(sim, "dirty_evictions"), "{sim}");
    // The stream exercised what it is meant to.
    assert!(n(sim, "read_hits") > 300 && n(sim, "write_hits") > 150, "{sim}");
    assert!(n(sim, "dirty_evictions") > 20 && n(sim, "demotions") > 20, "{sim}");
    assert!(n(sim, "dirty_write_hits") > 100, "{sim}");
    if promote != "always" {
        assert!(n(sim, "admission_rejections") > 100, "{sim}");
    }
    if cutoff != "0" {
        assert!(n(sim, "bypassed") > 10, "{sim}");
    }
}

#[test]
fn sim_and_serve_count_the_same_on_a_write_back_cache_device() {
    if !have_nbdsh() {
        return;
    }
    compare_dev("lru", "always", "0", true);
    compare_dev("arc", "n-hit:2", "0", false);
    compare_dev("s3fifo", "always", "64KiB", false);
}

/// `tsim` with a zero-time device counts what `sim` counts, for a stream of one-block reads. (With requests of
/// several blocks the two differ slightly by design: `tsim` inserts a missed block when its read completes,
/// after the request's hits were touched, `sim` in request order; docs/architecture.md, "Insertion time".)
#[test]
fn tsim_with_a_zero_time_device_counts_what_sim_counts() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("zipf.csv");
    let t = t.to_str().unwrap();
    util::ok(
        &["trace", "gen", "zipf", "--alpha", "0.9", "--requests", "20000", "--blocks", "3000", "--format", "msr"]
            .iter()
            .copied()
            .chain(["--output", t])
            .collect::<Vec<_>>(),
    );
    for p in ["lru", "arc", "s3fifo", "lirs", "2q"] {
        let sim: Value = serde_json::from_str(&util::ok(&[
            "sim",
            "--trace",
            t,
            "--format",
            "msr",
            "--policy",
            p,
            "--cache",
            "500blocks",
            "--json",
        ]))
        .unwrap();
        let tsim: Value = serde_json::from_str(&util::ok(&[
            "tsim",
            "--trace",
            t,
            "--format",
            "msr",
            "--block-cache",
            "500blocks",
            "--block-policy",
            p,
            "--disk",
            "memory(dram_ns=0)",
            "--json",
        ]))
        .unwrap();
        let s = &sim["results"][0]["stats"]["read"];
        let c = &tsim["block_cache"]["counters"];
        assert_eq!(
            (&s["requests"], &s["request_hits"], &s["blocks"], &s["block_hits"]),
            (&c["read_requests"], &c["read_request_hits"], &c["read_blocks"], &c["read_hits"]),
            "{p}: sim {s} tsim {c}"
        );
        assert!(c["read_hits"].as_u64().unwrap() > 10_000, "{p}: {c}");
        assert_eq!(sim["results"][0]["stats"]["evictions"], c["evictions"], "{p}");
    }
}

/// `tsim --cache-dev-size` with zero-time devices counts what `sim --cache-dev-size` counts, for a stream of
/// one-block requests (reads and writes), in every mode: the tier's counters and the dirty blocks. (Requests of
/// several blocks differ as the block level's do, above.)
#[test]
fn tsim_with_zero_time_devices_counts_what_sim_counts_on_a_cache_device() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("zipf.csv");
    let t = t.to_str().unwrap();
    let gen = ["trace", "gen", "zipf", "--alpha", "0.9", "--requests", "20000", "--blocks", "3000"];
    util::ok(&[&gen[..], &["--write-ratio", "0.3", "--format", "msr", "--output", t]].concat());
    let zero = ["--disk", "memory(dram_ns=0)", "--cache-dev-disk", "memory(dram_ns=0)"];
    for mode in ["write-back", "write-through", "write-around"] {
        for opts in [
            &["--cache-dev-policy", "lru"][..],
            &["--cache-dev-policy", "arc", "--promote", "n-hit:2"],
            &["--cache-dev-policy", "s3fifo", "--cache-dev-cutoff", "64KiB"],
        ] {
            let common = [&["--trace", t, "--format", "msr", "--json", "--cache-dev-size", "500blocks"][..], opts];
            let common = [&common.concat()[..], &["--mode", mode, "--cleaner", "none"]].concat();
            let sim: Value =
                serde_json::from_str(&util::ok(&[&["sim", "--cache", "0"][..], &common].concat())).unwrap();
            let tsim: Value = serde_json::from_str(&util::ok(&[&["tsim"][..], &zero, &common].concat())).unwrap();
            let (s, v) = (&sim["results"][0], &tsim["cache_dev"]);
            assert_eq!(s["tier"], v["counters"], "{mode} {opts:?}");
            assert_eq!(s["dev"], v["stats"], "{mode} {opts:?}");
            for k in ["max_blocks", "mean_blocks", "final_blocks"] {
                assert_eq!(s["dirty"][k], v["dirty"][k], "{mode} {opts:?} {k}");
            }
            let n = |k: &str| s["tier"][k].as_u64().unwrap();
            assert!(n("read_hits") > 5000 && n("promotions") > 1000, "{mode} {opts:?}: {}", s["tier"]);
            if mode == "write-back" {
                assert!(n("dirty_evictions") > 500 && n("dirty_write_hits") > 500, "{opts:?}: {}", s["tier"]);
            }
        }
    }
}
