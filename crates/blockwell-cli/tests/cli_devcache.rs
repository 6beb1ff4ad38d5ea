//! `blockwell experiment device-caches --quick` (seed 004 live): fio over NBD against the emulated HDD and SSD,
//! Blockwell's write-back SSD tier, its write-through RAM cache and nbdkit's write-back cache filter, then the
//! kill -9 durability check. Checks the report's structure and what holds even in a 1-second-per-job run.
//! Needs fio (with its nbd engine) and nbdkit (nbd plugin, cache filter): `scripts/test.sh` installs them. When
//! they are missing the test fails under CI=true and is skipped, saying so, elsewhere.

mod util;

use serde_json::Value;
use std::process::{Command, Stdio};

/// What is missing of the tools the experiment drives.
fn missing_tools() -> Vec<&'static str> {
    let mut missing = Vec::new();
    let fio_nbd = Command::new("fio")
        .arg("--enghelp=nbd")
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains("uri"));
    if !fio_nbd {
        missing.push("fio with its nbd engine");
    }
    let nbdkit = Command::new("nbdkit")
        .args(["--filter=cache", "--dump-plugin", "nbd"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !nbdkit {
        missing.push("nbdkit with its nbd plugin and cache filter");
    }
    missing
}

/// True when the tools are there; otherwise fails under CI=true, or prints SKIPPED and returns false.
fn tools_or_skip() -> bool {
    let missing = missing_tools();
    if missing.is_empty() {
        return true;
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    assert!(!ci, "CI=true but {} missing (scripts/test.sh installs fio and nbdkit)", missing.join(" and "));
    eprintln!("SKIPPED: {} not installed (scripts/test.sh installs them)", missing.join(" and "));
    false
}

fn mbps(setup: &Value, job: &str) -> f64 {
    let j = setup["jobs"].as_array().unwrap().iter().find(|j| j["job"] == job).unwrap();
    j["mbps"].as_f64().unwrap()
}

#[test]
fn device_caches_quick_shows_the_write_back_gain_and_who_survives_kill_9() {
    if !tools_or_skip() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let out = util::ok(&["experiment", "device-caches", "--quick", "--json", "--dir", d.path().to_str().unwrap()]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}):\n{out}"));
    assert_eq!(v["size"], 64 << 20);
    assert_eq!(v["rounds"], 1);
    assert_eq!(v["hdd"], "hdd-004");
    assert_eq!(v["ssd"], "ssd-004");
    let setups = v["setups"].as_array().unwrap();
    let keys: Vec<&str> = setups.iter().map(|s| s["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["hdd", "ssd", "wb-ssd", "wt-ram", "nbdkit-wb"]);
    for s in setups {
        let jobs: Vec<&str> = s["jobs"].as_array().unwrap().iter().map(|j| j["job"].as_str().unwrap()).collect();
        assert_eq!(jobs, ["seq-read", "seq-write", "rand-read", "rand-write"], "{}", s["key"]);
        for j in s["jobs"].as_array().unwrap() {
            assert!(j["mbps"].as_f64().unwrap() > 0.0 && j["iops"].as_f64().unwrap() > 0.0, "{j}");
        }
        // The caches are filled before their read jobs; the devices alone are not.
        assert_eq!(s["warmup"].is_object(), !matches!(s["key"].as_str(), Some("hdd" | "ssd")), "{}", s["key"]);
    }
    let get = |k: &str| setups.iter().find(|s| s["key"] == k).unwrap();
    let (hdd, ssd, wb, wt) = (get("hdd"), get("ssd"), get("wb-ssd"), get("wt-ram"));
    // The article's rows sit beside ours, in its column order (seq read, seq write, rand read, rand write).
    assert_eq!(wb["article"][0]["name"], "FlashCache");
    assert_eq!(wt["article"][0]["mbps"], serde_json::json!([794.0, 70.0, 901.0, 2.0]));
    // The emulated HDD is slow on random I/O (the article: 2 MB/s; over this 64 MiB region the seeks are
    // shorter) and fast on sequential I/O.
    let hdd_rw = mbps(hdd, "rand-write");
    assert!(hdd_rw < 6.0 && mbps(hdd, "rand-read") < 6.0, "{hdd}");
    assert!(mbps(hdd, "seq-write") > 10.0 * hdd_rw, "{hdd}");
    // Write-back on the SSD tier: random writes go at the SSD's pace, many times the HDD's (issue 18 asks for
    // 20x at full length; measured 20x in quick runs too, 10x asserted for a loaded machine).
    let wb_rw = mbps(wb, "rand-write");
    assert!(wb_rw >= 10.0 * hdd_rw, "write-back {wb_rw} vs HDD {hdd_rw}");
    assert!(wb_rw >= 0.5 * mbps(ssd, "rand-write"), "write-back {wb_rw} vs SSD {}", mbps(ssd, "rand-write"));
    // Warm reads come from the SSD tier and the RAM cache, not from the HDD.
    assert!(mbps(wb, "rand-read") >= 0.5 * mbps(ssd, "rand-read"), "{wb}");
    assert!(mbps(wt, "rand-read") >= 10.0 * mbps(hdd, "rand-read"), "{wt}");
    // Write-through (RapidCache's setup): random writes stay at the HDD's pace.
    assert!(mbps(wt, "rand-write") < 3.0 * hdd_rw.max(1.0), "{wt}");
    // The tier's counters: the random reads were hits.
    let tier = &wb["status"]["cache_dev"];
    assert!(tier["read_hits"].as_u64().unwrap() > 0, "{tier}");
    // The targets are computed and printed with their values.
    let targets: Vec<&str> = v["targets"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(targets, ["wb-randwrite-vs-ssd", "wb-randwrite-vs-hdd", "wb-randread-vs-ssd"]);
    // Durability. Blockwell: what was flushed, and what was acknowledged a commit interval before the kill,
    // both come back from the cache device. nbdkit: its FLUSH wrote region A through to the HDD, so A survives
    // on the origin; region B was only in its cache (a temporary file of the killed process) and is gone.
    let dur = v["durability"].as_array().unwrap();
    assert_eq!(dur.len(), 2);
    let (bw, nk) = (&dur[0], &dur[1]);
    assert_eq!(bw["key"], "wb-ssd");
    let n = bw["flushed"]["blocks"].as_u64().unwrap();
    assert_eq!(n, 512, "2 MiB regions");
    assert_eq!(bw["flushed"]["read_back"].as_u64().unwrap(), n, "{bw}");
    assert_eq!(bw["unflushed"]["read_back"].as_u64().unwrap(), n, "{bw}");
    assert_eq!(nk["key"], "nbdkit-wb");
    assert_eq!(nk["flushed"]["read_back"].as_u64().unwrap(), n, "{nk}");
    assert_eq!(nk["flushed"]["on_origin"].as_u64().unwrap(), n, "{nk}");
    assert_eq!(nk["unflushed"]["read_back"].as_u64().unwrap(), 0, "{nk}");
    assert_eq!(nk["unflushed"]["on_origin"].as_u64().unwrap(), 0, "{nk}");
    // Everything started was stopped and the work directory holds no image or socket.
    let left: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".log"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn device_caches_bad_options_are_one_line_errors() {
    let e = util::fails(&["experiment", "device-caches", "--configs", "hdd,bcache"]);
    assert!(e.contains("--configs") && e.contains("unknown setup 'bcache'") && e.contains("nbdkit-wb"), "{e}");
    let e = util::fails(&["experiment", "device-caches", "--size", "3MiB"]);
    assert!(e.contains("--size"), "{e}");
    let e = util::fails(&["experiment", "device-caches", "--runtime", "0"]);
    assert!(e.contains("--runtime"), "{e}");
    let e = util::fails(&["experiment", "device-caches", "--rounds", "0"]);
    assert!(e.contains("--rounds"), "{e}");
    let e = util::fails(&["experiment", "device-caches", "--hdd", "floppy"]);
    assert!(e.contains("--hdd") && e.contains("floppy"), "{e}");
}
