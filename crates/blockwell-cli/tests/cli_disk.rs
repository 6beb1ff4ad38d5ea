//! `blockwell disk`: list, time, validate (against DiskSim's measured traces when `../shared` is present).

mod util;

use std::path::PathBuf;
use util::{fails, ok};

fn disk_reference() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/disk");
    if p.join("barracuda.trace").is_file() && p.join("cheetah9LP.trace").is_file() {
        Some(p)
    } else {
        util::skip("../shared/reference/disk (DiskSim validation traces) is not beside the repository");
        None
    }
}

#[test]
fn list_names_every_preset() {
    let out = ok(&["disk", "list"]);
    for name in [
        "barracuda",
        "cheetah9lp",
        "wd1200bb",
        "hp97560",
        "hdd-004",
        "sata-ssd",
        "nvme-ssd",
        "ssd-004",
        "memory",
        "ecs",
    ] {
        assert!(out.contains(name), "{name} missing from:\n{out}");
    }
}

#[test]
fn time_one_request() {
    let out = ok(&["disk", "time", "--model", "memory(slowdown=4)", "--op", "read", "--sector", "0", "--sectors", "8"]);
    assert!(out.contains(": 7800 ns"), "{out}");
    let out = ok(&["disk", "time", "--model", "barracuda", "--op", "write", "--sectors", "4"]);
    // Write cache: overhead (write miss after read, 1.05363 ms) + 4 × 0.134 ms on the bus.
    assert!(out.contains(": 1589630 ns"), "{out}");
}

#[test]
fn bench_sequential_beats_random_on_a_disk() {
    let mean = |pattern: &str| -> f64 {
        let out = ok(&["disk", "bench", "--model", "wd1200bb", "--pattern", pattern, "--count", "500"]);
        let at = out.find("mean ").expect("a mean") + 5;
        out[at..].split_whitespace().next().unwrap().parse().unwrap()
    };
    let (rnd, seq) = (mean("random"), mean("sequential"));
    assert!(seq * 10.0 < rnd, "sequential {seq} ms vs random {rnd} ms");
    let e = fails(&["disk", "bench", "--pattern", "zigzag"]);
    assert!(e.contains("--pattern"), "{e}");
}

/// `--queue`: the closed loop the live emulator serves in. Seed 004's calibrated devices give the article's
/// numbers at 16 requests in flight (the server's workers per connection) over a 1 GiB region.
#[test]
fn bench_queue_gives_the_calibrated_rates_of_the_seed_004_devices() {
    let mbps = |model: &str, pattern: &str, op: &str| -> f64 {
        let out = ok(&[
            "disk",
            "bench",
            "--model",
            model,
            "--pattern",
            pattern,
            "--op",
            op,
            "--queue",
            "16",
            "--span",
            "1GiB",
            "--count",
            "20000",
        ]);
        let last = out.lines().last().expect("a result line");
        let at = last.find(" MB/s").expect("a rate");
        last[..at].rsplit(' ').next().unwrap().parse().unwrap()
    };
    let near = |v: f64, want: f64, tol: f64| (v - want).abs() <= tol * want;
    let s = mbps("hdd-004", "sequential", "read");
    assert!(near(s, 115.0, 0.03), "HDD sequential read {s}");
    let s = mbps("hdd-004", "sequential", "write");
    assert!(near(s, 72.0, 0.03), "HDD sequential write {s}");
    let r = mbps("hdd-004", "random", "read");
    assert!(near(r, 2.0, 0.2), "HDD random read {r}");
    let fifo = mbps("hdd-004(ncq=1)", "random", "read");
    assert!(fifo < r / 2.0, "without command queueing {fifo} vs {r}");
    let s = mbps("ssd-004", "sequential", "read");
    assert!(near(s, 231.0, 0.01), "SSD sequential read {s}");
    let r = mbps("ssd-004", "random", "write");
    assert!(near(r, 72.0, 0.05), "SSD random write {r}");
    let e = fails(&["disk", "bench", "--queue", "0"]);
    assert!(e.contains("--queue"), "{e}");
    let e = fails(&["disk", "bench", "--queue", "4", "--gap-us", "10"]);
    assert!(e.contains("--gap-us"), "{e}");
}

#[test]
fn bad_specs_and_options_are_one_line_errors() {
    let e = fails(&["disk", "time", "--model", "floppy"]);
    assert!(e.contains("unknown disk model 'floppy'"), "{e}");
    let e = fails(&["disk", "time", "--model", "ssd(channels=0)"]);
    assert!(e.contains("channels"), "{e}");
    let e = fails(&["disk", "time", "--op", "erase"]);
    assert!(e.contains("--op"), "{e}");
}

#[test]
fn malformed_trace_line_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.trace");
    std::fs::write(&p, "R Hit 100 4 870.0 1000.0\nR Hit 104 x 870.0 1000.0\n").unwrap();
    let e = fails(&["disk", "validate", "--trace", p.to_str().unwrap()]);
    assert!(e.contains("bad.trace:2: expected a block count, found 'x'"), "{e}");
    let e = fails(&["disk", "validate", "--trace", dir.path().join("missing").to_str().unwrap()]);
    assert!(e.contains("missing"), "{e}");
}

#[test]
fn validate_both_disks_within_5_percent_with_plot_and_json() {
    let Some(dir) = disk_reference() else { return };
    let tmp = tempfile::tempdir().unwrap();
    for (model, trace) in [("barracuda", "barracuda.trace"), ("cheetah9lp", "cheetah9LP.trace")] {
        let trace = dir.join(trace);
        let svg = tmp.path().join(format!("{model}.svg"));
        let out = ok(&[
            "disk",
            "validate",
            "--model",
            model,
            "--trace",
            trace.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ]);
        assert!(out.contains("relative error of the mean") && out.contains("demerit"), "{out}");
        let svg_text = std::fs::read_to_string(&svg).unwrap();
        assert!(svg_text.starts_with("<svg") && svg_text.contains("measured") && svg_text.contains("simulated"));

        let json = ok(&["disk", "validate", "--model", model, "--trace", trace.to_str().unwrap(), "--json"]);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["requests"], 10_000);
        let err = v["relative_error"].as_f64().unwrap();
        assert!(err.abs() < 0.05, "{model}: relative error {err}");
        assert!(v["demerit_pct"].as_f64().unwrap() > 0.0);
        // Deterministic: a second run prints the same numbers.
        let again = ok(&["disk", "validate", "--model", model, "--trace", trace.to_str().unwrap(), "--json"]);
        assert_eq!(json, again);
    }
}
