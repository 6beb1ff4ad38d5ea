//! `blockwell sim --admission` with the admission filters (`tinylfu`, `bloom`, `prob:P`) on a scan-plus-hot-set
//! trace: what each does to the hit ratio, that runs repeat, and the errors of bad specs.

mod util;

use serde_json::Value;

/// A hot set of 1,000 blocks taking half the requests, the other half a scan over 19,000 more: 60,000 requests.
fn scan_hot(dir: &std::path::Path) -> String {
    let t = dir.join("scan-hot.csv");
    let t = t.to_str().unwrap().to_string();
    util::ok(&[
        "trace",
        "gen",
        "scan-hot",
        "--requests",
        "60k",
        "--blocks",
        "20k",
        "--hot-blocks",
        "1000",
        "--hot-fraction",
        "0.5",
        "-o",
        &t,
    ]);
    t
}

/// Read block hits and admission rejections of each policy, and the admission the report names.
fn sim(trace: &str, admission: &str) -> (Vec<(String, u64, u64)>, Value) {
    let out = util::ok(&[
        "sim",
        "--trace",
        trace,
        "--policy",
        "lru,clock,arc",
        "--cache",
        "800blocks",
        "--admission",
        admission,
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let rows = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let s = &r["stats"];
            let n = |x: &Value| x.as_u64().unwrap();
            (r["policy"].as_str().unwrap().to_string(), n(&s["read"]["block_hits"]), n(&s["admission_rejections"]))
        })
        .collect();
    (rows, v["admission"].clone())
}

#[test]
fn filters_keep_the_scan_out_of_lru_and_clock() {
    let d = tempfile::tempdir().unwrap();
    let t = scan_hot(d.path());
    let (always, name) = sim(&t, "always");
    assert_eq!(name, "always");
    assert!(always.iter().all(|r| r.2 == 0), "{always:?}");
    for spec in ["tinylfu", "bloom", "n-hit:2"] {
        let (rows, name) = sim(&t, spec);
        assert_eq!(name, spec);
        for (a, f) in always.iter().zip(&rows) {
            assert!(f.2 > 0, "{spec}: {f:?} rejected nothing");
            // The scan washes the hot set out of LRU and CLOCK; a filter that keeps one-time blocks out raises
            // their hit counts. ARC resists scans by itself: it is only required to run.
            if a.0 != "arc" {
                assert!(f.1 > a.1, "{spec}: {} hits {} with it, {} without", a.0, f.1, a.1);
            }
        }
    }
    // `prob:P` rejects about 1 - P of the misses, the same ones on every run, and other ones with another seed.
    let (p, name) = sim(&t, "prob:0.2");
    assert_eq!(name, "prob:0.2");
    assert_eq!(sim(&t, "prob:0.2").0, p, "deterministic");
    let (q, name) = sim(&t, "prob:0.2:seed=5");
    assert_eq!(name, "prob:0.2:seed=5");
    assert_ne!(q, p);
    for r in &p {
        let rejected = r.2 as f64 / (60_000 - r.1) as f64;
        assert!((rejected - 0.8).abs() < 0.02, "{r:?}: {rejected} of the misses rejected");
    }
}

#[test]
fn bad_admission_specs_are_one_error_line_naming_the_flag() {
    let d = tempfile::tempdir().unwrap();
    let t = scan_hot(d.path());
    for (bad, says) in [
        ("prob:2", "0 < P <= 1"),
        ("prob:0", "0 < P <= 1"),
        ("prob:0.5:seed=x", "seed=S"),
        ("tinylfu:sample=0", "sample=N"),
        ("bloom:1", "takes no parameters"),
        ("lfu", "unknown rule"),
    ] {
        let e = util::fails(&["sim", "--trace", &t, "--admission", bad]);
        assert!(e.contains("--admission") && e.contains(bad) && e.contains(says), "{bad}: {e}");
        assert!(e.contains("tinylfu") && e.contains("bloom") && e.contains("prob:P"), "lists the rules: {e}");
    }
    // The cache device's promotion takes the same rules.
    let e = util::fails(&["sim", "--trace", &t, "--cache-dev-size", "1MiB", "--promote", "prob:7"]);
    assert!(e.contains("--promote") && e.contains("0 < P <= 1"), "{e}");
    let out = util::ok(&[
        "sim",
        "--trace",
        &t,
        "--cache",
        "100blocks",
        "--cache-dev-size",
        "800blocks",
        "--promote",
        "tinylfu",
    ]);
    assert!(out.contains("cache device"), "{out}");
}
