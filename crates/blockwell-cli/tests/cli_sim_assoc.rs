//! `blockwell sim --associativity`: set conflicts cost misses, a set as large as the cache changes nothing, and
//! bad values are one clear error naming the option.

mod util;

use blockwell_testkit::Rng;
use serde_json::Value;

/// A vscsi trace (4 KiB reads, `lbn` in 512 B sectors) of `blocks`, in order.
fn trace(dir: &std::path::Path, name: &str, blocks: impl Iterator<Item = u64>) -> String {
    let mut body = String::from("version,time,op,size,lbn\n");
    for (t, b) in blocks.enumerate() {
        body.push_str(&format!("1,{t},28,4096,{}\n", b * 8));
    }
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

fn sim(args: &[&str]) -> Value {
    serde_json::from_str(&util::ok(&[&["sim", "--json"], args].concat())).unwrap()
}

fn miss_ratio(r: &Value) -> f64 {
    r["ratios"]["block_miss_ratio"].as_f64().unwrap()
}

/// 4096 blocks are 8 sets of 512. Two requests in three loop over 1024 blocks in two runs of 512 that both map to
/// set 0 (blocks 0..512 and 4096..4608: FlashCache's hash is (block / 512) mod 8); the third is a random block of
/// 512..2560 (sets 1 to 4). The footprint (at most 3072 blocks) fits the cache, so fully associative it misses only
/// cold, whatever the policy.
fn conflicts() -> impl Iterator<Item = u64> {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut j = 0u64;
    (0..30_000u64).map(move |i| {
        let x = rng.next();
        if i % 3 == 2 {
            512 + x % 2048
        } else {
            j = (j + 1) % 1024;
            (j / 512) * 4096 + j % 512
        }
    })
}

#[test]
fn set_conflicts_cost_misses_that_full_associativity_avoids() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path(), "conflicts.csv", conflicts());
    let base = ["--trace", &t, "--cache", "4096blocks", "--policy", "lru,fifo,arc,s3fifo,opt"];
    let full = sim(&base);
    let assoc = sim(&[&base[..], &["--associativity", "512"]].concat());
    let footprint = full["footprint_blocks"].as_u64().unwrap();
    assert!(footprint <= 4096, "the footprint ({footprint}) fits the cache");
    for (f, a) in full["results"].as_array().unwrap().iter().zip(assoc["results"].as_array().unwrap()) {
        let policy = f["policy"].as_str().unwrap();
        assert_eq!(a["policy"], f["policy"]);
        assert_eq!((&f["associativity"], &f["sets"]), (&Value::Null, &Value::from(1)), "{policy}");
        assert_eq!((&a["associativity"], &a["sets"]), (&Value::from(512), &Value::from(8)), "{policy}");
        let cold = footprint as f64 / full["block_accesses"].as_f64().unwrap();
        assert!((miss_ratio(f) - cold).abs() < 1e-12, "{policy}: fully associative misses only cold");
        assert!(
            miss_ratio(a) >= miss_ratio(f) + 0.1,
            "{policy}: 512-way {} vs fully associative {}",
            miss_ratio(a),
            miss_ratio(f)
        );
    }
    // The table says it; the CSV has the ways and sets of each cache.
    let table = util::ok(&[&["sim"], &base[..], &["--associativity", "512"]].concat());
    assert!(table.lines().next().unwrap().ends_with("512-way set associative"), "{table}");
    let csv = util::ok(&[&["sim", "--csv"], &base[..], &["--associativity", "512"]].concat());
    let lines: Vec<&str> = csv.lines().collect();
    // (Followed by the settings that produced each row.)
    assert!(lines[0].contains(",associativity,sets,preset,"), "{}", lines[0]);
    assert!(lines[1..].iter().all(|l| l.contains(",512,8,default,")), "{csv}");
}

#[test]
fn ways_at_least_the_cache_is_fully_associative_exactly() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path(), "conflicts.csv", conflicts());
    let base = ["--trace", &t, "--cache", "1000blocks,4096blocks", "--policy", "all"];
    let full = sim(&base);
    for ways in ["4096", "1000000"] {
        let same = sim(&[&base[..], &["--associativity", ways]].concat());
        for (f, s) in full["results"].as_array().unwrap().iter().zip(same["results"].as_array().unwrap()) {
            assert_eq!(f["stats"], s["stats"], "{} at {} blocks, {ways} ways", f["policy"], f["cache_blocks"]);
            assert_eq!(s["sets"], 1);
        }
    }
}

#[test]
fn bad_associativity_is_one_error_naming_the_option() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path(), "small.csv", 0..10);
    let e = util::fails(&["sim", "--trace", &t, "--associativity", "0"]);
    assert!(e.contains("--associativity") && e.contains("at least 1"), "{e}");
    let e = util::fails(&["sim", "--trace", &t, "--associativity=-3"]);
    assert!(e.contains("--associativity") && e.contains("not a number of blocks per set"), "{e}");
    let e = util::fails(&["sim", "--trace", &t, "--associativity", "8", "--preset", "libcachesim", "-p", "lirs"]);
    assert!(e.contains("--associativity") && e.contains("libcachesim_quirks"), "{e}");
}
