//! Drives the real `blockwell` binary: `trace gen` → `trace stats` → `mrc` (table, CSV, PNG and SVG plots),
//! `trace convert`, and error handling (exit code 2, one clear line on stderr).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bw(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_blockwell")).args(args).output().expect("run blockwell")
}

/// Runs and expects success; returns stdout.
fn ok(args: &[&str]) -> String {
    let o = bw(args);
    assert!(o.status.success(), "blockwell {args:?} failed ({:?}):\n{}", o.status, String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).expect("utf-8 stdout")
}

/// Runs and expects exit code 2 with exactly one line on stderr; returns that line.
fn fails(args: &[&str]) -> String {
    let o = bw(args);
    assert_eq!(o.status.code(), Some(2), "blockwell {args:?}: {}", String::from_utf8_lossy(&o.stdout));
    let err = String::from_utf8(o.stderr).unwrap();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one error line expected, got:\n{err}");
    assert!(lines[0].starts_with("blockwell: error: "), "{err}");
    lines[0].to_string()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn gen_zipf(dir: &Path, name: &str, seed: &str) -> PathBuf {
    let out = dir.join(name);
    ok(&[
        "trace",
        "gen",
        "zipf",
        "--requests",
        "30k",
        "--blocks",
        "5000",
        "--alpha",
        "0.8",
        "--write-ratio",
        "0.2",
        "--seed",
        seed,
        "--output",
        s(&out),
    ]);
    out
}

/// Parses the `mrc` table: (cache_blocks, miss_ratio) rows.
fn table(stdout: &str) -> Vec<(u64, f64)> {
    stdout
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("cache_blocks"))
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // cache_blocks, cache_bytes (number and unit), %footprint, miss_ratio
            (f[0].parse().unwrap(), f[4].parse().unwrap())
        })
        .collect()
}

#[test]
fn gen_stats_mrc_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let trace = gen_zipf(dir.path(), "z.vscsi", "42");

    let json: serde_json::Value =
        serde_json::from_str(&ok(&["trace", "stats", "--trace", s(&trace), "--json"])).unwrap();
    assert_eq!(json["requests"], 30_000);
    let footprint = json["footprint_blocks"].as_u64().unwrap();
    assert!(footprint > 1000 && footprint <= 5000, "{footprint}");
    let writes = json["writes"]["requests"].as_f64().unwrap() / 30_000.0;
    assert!((writes - 0.2).abs() < 0.02, "{writes}");
    assert_eq!(json["sizes"]["min"], 4096);
    assert_eq!(json["reuse"]["cold"].as_u64().unwrap(), footprint);

    let text = ok(&["trace", "stats", "--trace", s(&trace)]);
    assert!(text.contains(&format!("footprint         {footprint} blocks of 4096 B")), "{text}");
    assert!(text.contains("reuse distance"), "{text}");

    let csv = dir.path().join("mrc.csv");
    let png = dir.path().join("mrc.png");
    let out = ok(&["mrc", "--trace", s(&trace), "--sizes", "1%,10%,50%,100%", "--plot", s(&png)]);
    assert!(out.contains(&format!("footprint {footprint} blocks")), "{out}");
    let rows = table(&out);
    assert_eq!(rows.len(), 4, "{out}");
    assert!(rows.windows(2).all(|w| w[1].1 <= w[0].1), "LRU's curve does not increase: {rows:?}");
    let cold = footprint as f64 / 30_000.0;
    assert!((rows[3].1 - cold).abs() < 1e-6, "at the footprint only cold misses remain: {rows:?}");

    // --csv and --json print the same points instead of the table (-o: into a file), as everywhere.
    let sizes = ["mrc", "--trace", s(&trace), "--cache", "1%,10%,50%,100%"];
    assert_eq!(ok(&[&sizes[..], &["--csv", "-o", s(&csv)]].concat()), "");
    let json: serde_json::Value = serde_json::from_str(&ok(&[&sizes[..], &["--json"]].concat())).unwrap();
    assert_eq!(json["footprint_blocks"], footprint);
    assert_eq!(json["points"].as_array().unwrap().len(), 4);
    assert_eq!(json["points"][0]["cache_blocks"], rows[0].0);
    let csv_text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = csv_text.lines();
    assert_eq!(lines.next(), Some("cache_blocks,cache_bytes,miss_ratio"));
    let first: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(first[0].parse::<u64>().unwrap(), rows[0].0);
    assert_eq!(first[1].parse::<u64>().unwrap(), rows[0].0 * 4096);
    assert_eq!(lines.count(), 3);

    let png_bytes = std::fs::read(&png).unwrap();
    assert!(png_bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG file");
    assert!(png_bytes.len() > 5000, "a PNG with content: {} bytes", png_bytes.len());

    let svg = dir.path().join("mrc.svg");
    ok(&["mrc", "--trace", s(&trace), "--points", "5", "--plot", s(&svg)]);
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(svg_text.starts_with("<svg") && svg_text.trim_end().ends_with("</svg>"));
    assert!(svg_text.contains("miss ratio"), "the SVG is labelled");
}

#[test]
fn mrc_json_and_output_file() {
    let dir = tempfile::tempdir().unwrap();
    let trace = gen_zipf(dir.path(), "z.vscsi", "42");
    let text = ok(&["mrc", "--trace", s(&trace), "--points", "5"]);
    let json: serde_json::Value =
        serde_json::from_str(&ok(&["mrc", "--trace", s(&trace), "--points", "5", "--json"])).unwrap();
    assert_eq!(json["trace"], s(&trace));
    assert_eq!(json["requests"], 30_000);
    assert_eq!(json["sampling"]["method"], "exact");
    let points: Vec<(u64, f64)> = json["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["cache_blocks"].as_u64().unwrap(), p["miss_ratio"].as_f64().unwrap()))
        .collect();
    let rows = table(&text);
    assert_eq!(points.len(), 5);
    for ((b, m), (tb, tm)) in points.iter().zip(&rows) {
        assert_eq!(b, tb);
        assert!((m - tm).abs() < 1e-6, "{m} vs {tm}");
    }
    // -o writes the same output to the file, nothing to stdout.
    let out = dir.path().join("out.json");
    assert_eq!(ok(&["mrc", "--trace", s(&trace), "--points", "5", "--json", "-o", s(&out)]), "");
    let from_file: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(from_file, json);
    let out = dir.path().join("out.txt");
    assert_eq!(ok(&["mrc", "--trace", s(&trace), "--points", "5", "--output", s(&out)]), "");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), text);
}

#[test]
fn shards_is_close_to_exact_and_reads_only_counts_fewer_accesses() {
    let dir = tempfile::tempdir().unwrap();
    let trace = gen_zipf(dir.path(), "z.vscsi", "42");
    let sizes = "10%,30%,60%";
    let exact = table(&ok(&["mrc", "--trace", s(&trace), "--sizes", sizes]));
    let out = ok(&["mrc", "--trace", s(&trace), "--sizes", sizes, "--sample", "0.5"]);
    assert!(out.contains("SHARDS at rate 0.5"), "{out}");
    let sampled = table(&out);
    for (e, x) in exact.iter().zip(&sampled) {
        assert!((e.1 - x.1).abs() < 0.05, "exact {exact:?} vs SHARDS {sampled:?}");
    }
    let fixed = ok(&["mrc", "--trace", s(&trace), "--shards-max", "500"]);
    assert!(fixed.contains("fixed-size SHARDS (500 blocks)"), "{fixed}");

    let reads = ok(&["mrc", "--trace", s(&trace), "--reads-only", "--points", "2"]);
    assert!(reads.contains("(reads only)"), "{reads}");
    let words: Vec<&str> = reads.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "block").unwrap();
    let n: u64 = words[at - 1].parse().unwrap();
    assert!((22_000..26_000).contains(&n), "about 80% of 30000 accesses are reads: {n}");
}

#[test]
fn gen_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let a = std::fs::read(gen_zipf(dir.path(), "a.vscsi", "7")).unwrap();
    let b = std::fs::read(gen_zipf(dir.path(), "b.vscsi", "7")).unwrap();
    let c = std::fs::read(gen_zipf(dir.path(), "c.vscsi", "8")).unwrap();
    assert_eq!(a, b, "same seed, same file");
    assert_ne!(a, c, "another seed, another file");
    for w in ["uniform", "sequential", "loop", "scan-hot"] {
        let out = dir.path().join(format!("{w}.vscsi"));
        ok(&["trace", "gen", w, "--requests", "2000", "--blocks", "1000", "-o", s(&out)]);
        let stats: serde_json::Value =
            serde_json::from_str(&ok(&["trace", "stats", "-t", s(&out), "--json", "--no-reuse"])).unwrap();
        assert_eq!(stats["requests"], 2000, "{w}");
        if w == "loop" {
            assert_eq!(stats["footprint_blocks"], 1000);
            assert!(stats["sequential_fraction"].as_f64().unwrap() > 0.99);
        }
    }
}

#[test]
fn convert_keeps_the_block_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let trace = gen_zipf(dir.path(), "z.vscsi", "42");
    // plain has no op: its conversion keeps the reads (--reads-only), and is compared with the source's reads.
    let plain = dir.path().join("z.txt");
    ok(&["trace", "convert", "--trace", s(&trace), "--to", "plain", "--output", s(&plain), "--reads-only"]);
    let copy = dir.path().join("copy.vscsi.gz");
    ok(&["trace", "convert", "--trace", s(&trace), "--to", "vscsi", "--output", s(&copy)]);
    let args = ["--sizes", "5%,20%,70%"];
    let want = ok(&[&["mrc", "--trace", s(&trace)][..], &args].concat());
    let want_reads = ok(&[&["mrc", "--trace", s(&trace), "--reads-only"][..], &args].concat());
    let from_plain = ok(&[&["mrc", "--trace", s(&plain), "--format", "plain"][..], &args].concat());
    let from_copy = ok(&[&["mrc", "--trace", s(&copy)][..], &args].concat());
    assert_eq!(table(&want_reads), table(&from_plain));
    assert_eq!(table(&want), table(&from_copy));
    let line = fails(&["trace", "convert", "--trace", s(&trace), "--to", "vscsi", "--output", s(&trace)]);
    assert!(line.contains("is the input trace"), "{line}");
}

/// The exact curve on the CloudPhysics trace equals libCacheSim's LRU (shared/reference/libcachesim-cloudphysics.md).
#[test]
fn cloudphysics_exact_mrc_matches_lru_reference() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        here.join("../../../shared/traces/cloudphysics/cloudPhysicsIO.csv"),
        "/work/shared/traces/cloudphysics/cloudPhysicsIO.csv".into(),
    ];
    let Some(trace) = candidates.iter().find(|p| p.exists()) else {
        eprintln!("skipped: cloudPhysicsIO.csv not found beside the repository");
        return;
    };
    let out = ok(&["mrc", "--trace", s(trace), "--sizes", "2692blocks,13460blocks,26921blocks"]);
    assert!(out.contains("1141869 block accesses"), "{out}");
    assert!(out.contains("footprint 269210 blocks"), "{out}");
    assert_eq!(table(&out), vec![(2692, 0.896869), (13460, 0.887102), (26921, 0.874098)]);
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.vscsi");
    std::fs::write(&bad, "version,time,op,size,lbn\n1,10,28,4096,8\n1,20,zz,4096,16\n").unwrap();
    let line = fails(&["mrc", "--trace", s(&bad)]);
    assert!(line.contains("bad.vscsi:3: expected a SCSI opcode"), "{line}");
    let line = fails(&["trace", "stats", "--trace", s(&bad)]);
    assert!(line.contains("bad.vscsi:3"), "{line}");

    let missing = dir.path().join("missing.vscsi");
    assert!(fails(&["mrc", "--trace", s(&missing), "--format", "vscsi"]).contains("missing.vscsi"));
    assert!(fails(&["mrc", "--trace", s(&bad), "--sample", "1.5"]).contains("sampling rate 1.5"));
    assert!(fails(&["mrc", "--trace", s(&bad), "--block-size", "1000"]).contains("power of two"));
    assert!(fails(&["mrc", "--trace", s(&bad), "--plot", "x.pdf"]).contains(".png or .svg"));
    let good = dir.path().join("good.vscsi");
    std::fs::write(&good, "version,time,op,size,lbn\n1,10,28,4096,8\n").unwrap();
    assert!(fails(&["mrc", "--trace", s(&good), "--sizes", "100B"]).contains("100 B holds no 4096 B block"));
    let out = dir.path().join("x.vscsi");
    assert!(fails(&["trace", "gen", "zipf", "--write-ratio", "2", "-o", s(&out)]).contains("--write-ratio 2"));
    assert!(fails(&["trace", "gen", "loop", "--request-size", "1000", "-o", s(&out)]).contains("multiple of 512"));
    assert!(fails(&["trace", "gen", "zipf", "--format", "nope", "-o", s(&out)]).contains("unknown trace format"));
}

/// `mrc --policy`: a curve per policy by simulation. Full simulation of LRU equals the exact stack-distance
/// curve; a miniature simulation replays the sampled blocks through caches scaled by the rate and stays close
/// to the full one; ARC differs from LRU.
#[test]
fn policy_curves_by_full_and_miniature_simulation() {
    let dir = tempfile::tempdir().unwrap();
    let trace = gen_zipf(dir.path(), "z.vscsi", "42");
    let sizes = "500blocks,2000blocks,6000blocks";
    let exact: serde_json::Value =
        serde_json::from_str(&ok(&["mrc", "--trace", s(&trace), "--sizes", sizes, "--json"])).unwrap();
    let full: serde_json::Value =
        serde_json::from_str(&ok(&["mrc", "--trace", s(&trace), "--sizes", sizes, "--policy", "lru,arc", "--json"]))
            .unwrap();
    let (e, f) = (exact["points"].as_array().unwrap(), full["points"].as_array().unwrap());
    assert_eq!(f.len(), 6);
    for (x, y) in e.iter().zip(&f[..3]) {
        assert_eq!(
            (x["cache_blocks"].as_u64(), x["miss_ratio"].as_f64()),
            (y["cache_blocks"].as_u64(), y["miss_ratio"].as_f64())
        );
    }
    assert!(f[3..].iter().zip(&f[..3]).any(|(arc, lru)| arc["miss_ratio"] != lru["miss_ratio"]), "{full}");
    let mini: serde_json::Value = serde_json::from_str(&ok(&[
        "mrc",
        "--trace",
        s(&trace),
        "--sizes",
        sizes,
        "--policy",
        "lru,arc",
        "--sample",
        "0.25",
        "--json",
    ]))
    .unwrap();
    let m = mini["points"].as_array().unwrap();
    assert_eq!(
        m.iter().map(|p| p["sampled_cache_blocks"].as_u64().unwrap()).collect::<Vec<_>>(),
        [125, 500, 1500, 125, 500, 1500]
    );
    // LRU's miniature simulation is SHARDS (with SHARDS_adj) by another road: the same numbers.
    let shards: serde_json::Value =
        serde_json::from_str(&ok(&["mrc", "--trace", s(&trace), "--sizes", sizes, "--sample", "0.25", "--json"]))
            .unwrap();
    for (x, y) in m[..3].iter().zip(shards["points"].as_array().unwrap()) {
        assert!((x["miss_ratio"].as_f64().unwrap() - y["miss_ratio"].as_f64().unwrap()).abs() < 1e-9, "{x} vs {y}");
    }
    for (x, y) in m.iter().zip(f) {
        assert_eq!(x["cache_blocks"], y["cache_blocks"]);
        let d = (x["miss_ratio"].as_f64().unwrap() - y["miss_ratio"].as_f64().unwrap()).abs();
        assert!(d < 0.05, "miniature {x} vs full {y}");
    }
    assert!(mini["sampled_block_accesses"].as_u64().unwrap() < 30_000 / 2);
    let csv = ok(&["mrc", "--trace", s(&trace), "--sizes", sizes, "--policy", "s3fifo", "--sample", "0.5", "--csv"]);
    assert!(csv.starts_with("policy,cache_blocks,cache_bytes,sampled_cache_blocks,miss_ratio\ns3fifo,500,"), "{csv}");
    let png = dir.path().join("c.png");
    ok(&["mrc", "--trace", s(&trace), "--points", "4", "--policy", "lru,2q", "--sample", "0.5", "--plot", s(&png)]);
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    let e = fails(&["mrc", "--trace", s(&trace), "--policy", "lru", "--sample", "2"]);
    assert!(e.contains("--sample: sampling rate 2 is not in (0, 1]"), "{e}");
    let e = fails(&["mrc", "--trace", s(&trace), "--sample", "0"]);
    assert!(e.contains("--sample: sampling rate 0 is not in (0, 1]"), "{e}");
}
