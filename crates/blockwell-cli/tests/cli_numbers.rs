//! Numbers that mean what they say, driven through the real binary: an undefined ratio is empty in CSV, `null`
//! in JSON and `-` in tables (never 0); every result row carries the settings that produced it; `trace convert`
//! to an object-id format keeps the trace's unit or refuses to round it.

mod util;

use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

/// Reads, writes and a re-read: vscsi, 512-byte sectors.
const SMALL: &str = "version,time,op,size,lbn\n\
1,10,28,4096,0\n\
1,20,28,8192,8\n\
1,30,2a,4096,0\n\
1,40,28,4096,16\n\
1,50,28,12288,0\n";

/// The fields of a CSV line (quoted fields unquoted).
fn fields(line: &str) -> Vec<String> {
    let (mut out, mut cur, mut quoted, mut chars) = (Vec::new(), String::new(), false, line.chars().peekable());
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// A CSV's rows as maps from column to field.
fn csv_rows(csv: &str) -> Vec<HashMap<String, String>> {
    let mut lines = csv.lines();
    let header = fields(lines.next().expect("a header"));
    lines
        .map(|l| {
            let f = fields(l);
            assert_eq!(f.len(), header.len(), "{l}");
            header.iter().cloned().zip(f).collect()
        })
        .collect()
}

fn json(args: &[&str]) -> Value {
    let out = util::ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("blockwell {args:?}: not JSON ({e}):\n{out}"))
}

#[test]
fn sim_writes_undefined_ratios_as_empty_null_and_dash_never_0() {
    let d = tempfile::tempdir().unwrap();
    let t = write(d.path(), "small.csv", SMALL);
    let args = ["sim", "--trace", &t, "--policy", "lru", "--cache", "2blocks", "--reads-only"];
    // CSV: no writes (reads only) and no prefetcher: those ratios are empty; the read ratios are numbers.
    let rows = csv_rows(&util::ok(&[&args[..], &["--csv"]].concat()));
    let r = &rows[0];
    for k in ["write_block_miss_ratio", "prefetch_accuracy"] {
        assert_eq!(r[k], "", "{k} is undefined: {r:?}");
    }
    assert!(r["read_block_miss_ratio"].parse::<f64>().unwrap() > 0.0, "{r:?}");
    assert_eq!(r["write_blocks"], "0");
    // JSON: null.
    let v = json(&[&args[..], &["--json"]].concat());
    let ratios = &v["results"][0]["ratios"];
    assert_eq!(ratios["write_block_miss_ratio"], Value::Null, "{ratios}");
    assert_eq!(ratios["write_request_miss_ratio"], Value::Null, "{ratios}");
    assert_eq!(ratios["prefetch_accuracy"], Value::Null, "{ratios}");
    assert!(ratios["read_block_miss_ratio"].as_f64().unwrap() > 0.0, "{ratios}");
    // Table: `-`.
    let table = util::ok(&args);
    let row = table.lines().find(|l| l.starts_with("lru")).unwrap();
    let cells: Vec<&str> = row.split_whitespace().collect();
    // policy, cache (2 words), blocks | block: all, read, write | request: all, read, write
    assert_eq!((cells[7], cells[11]), ("-", "-"), "{table}");

    // A warm-up as long as the trace counts nothing: every ratio is undefined.
    let warm = ["sim", "--trace", &t, "--policy", "lru", "--cache", "2blocks", "--warmup", "5", "--csv"];
    let r = &csv_rows(&util::ok(&warm))[0];
    for k in ["block_miss_ratio", "read_block_miss_ratio", "request_miss_ratio", "prefetch_coverage"] {
        assert_eq!(r[k], "", "{k}: {r:?}");
    }
    // --interval: an interval's ratios are the same rows' schema.
    let iv =
        csv_rows(&util::ok(&["sim", "--trace", &t, "--cache", "2blocks", "--interval", "2", "--csv", "--reads-only"]));
    assert_eq!(iv.len(), 2, "4 reads in intervals of 2: {iv:?}");
    assert!(iv.iter().all(|r| r["block_miss_ratio"].parse::<f64>().is_ok()), "{iv:?}");
}

#[test]
fn every_sim_row_carries_the_settings_that_produced_it() {
    let d = tempfile::tempdir().unwrap();
    let t = write(d.path(), "small.csv", SMALL);
    let run = |admission: &str| {
        let out = util::ok(&["sim", "--trace", &t, "--cache", "2blocks", "--admission", admission, "--csv"]);
        csv_rows(&out).remove(0)
    };
    // Three runs that differ only in --admission: their rows say so.
    let rows = [run("always"), run("n-hit:2"), run("prob:0.5")];
    let names: Vec<&str> = rows.iter().map(|r| r["admission"].as_str()).collect();
    assert_eq!(names, ["always", "n-hit:2", "prob:0.5"]);
    let r = &rows[0];
    for (k, v) in [
        ("block_size", "4096"),
        ("preset", "default"),
        ("prefetch", "none"),
        ("sequential_cutoff", "0"),
        ("reads_only", "false"),
        ("warmup", "0"),
        ("volumes", ""),
    ] {
        assert_eq!(r[k], v, "{k}: {r:?}");
    }
    let o = util::ok(&[
        "sim",
        "--trace",
        &t,
        "--cache",
        "2blocks",
        "--prefetch",
        "obl",
        "--sequential-cutoff",
        "64KiB",
        "--warmup",
        "1",
        "--preset",
        "libcachesim",
        "--csv",
    ]);
    let r = &csv_rows(&o)[0];
    assert_eq!(
        (r["prefetch"].as_str(), r["sequential_cutoff"].as_str(), r["warmup"].as_str(), r["preset"].as_str()),
        ("obl", "65536", "1", "libcachesim"),
        "{r:?}"
    );
    // JSON: every result carries them too.
    let v = json(&["sim", "--trace", &t, "--cache", "2blocks,3blocks", "--admission", "n-hit:2", "--json"]);
    for res in v["results"].as_array().unwrap() {
        assert_eq!(res["settings"]["admission"], "n-hit:2", "{res}");
        assert_eq!(res["settings"]["reads_only"], false, "{res}");
    }
    // Intervals too.
    let iv = csv_rows(&util::ok(&["sim", "--trace", &t, "--cache", "2blocks", "--interval", "2", "--csv"]));
    assert!(iv.iter().all(|r| r["admission"] == "always" && r["block_size"] == "4096"), "{iv:?}");
}

#[test]
fn the_tier_report_carries_its_settings_and_leaves_what_is_undefined_empty() {
    let d = tempfile::tempdir().unwrap();
    let t = write(d.path(), "small.csv", SMALL);
    let base = ["sim", "--trace", &t, "--cache-dev-size", "4blocks", "--request-interval-us", "100"];
    let rows = csv_rows(&util::ok(&[&base[..], &["--cache", "0", "--reads-only", "--csv"]].concat()));
    let r = &rows[0];
    // No RAM level: its counters and ratio are empty, not 0; no writes: the device's write miss ratio too.
    for k in ["ram_read_blocks", "ram_read_block_misses", "ram_read_block_miss_ratio", "dev_write_miss_ratio"] {
        assert_eq!(r[k], "", "{k}: {r:?}");
    }
    assert!(r["dev_read_miss_ratio"].parse::<f64>().is_ok(), "{r:?}");
    for (k, v) in
        [("promote", "always"), ("reads_only", "true"), ("request_interval_us", "100"), ("admission", "always")]
    {
        assert_eq!(r[k], v, "{k}: {r:?}");
    }
    let rows = csv_rows(&util::ok(&[&base[..], &["--promote", "n-hit:2", "--csv"]].concat()));
    assert_eq!(rows[0]["promote"], "n-hit:2");
}

#[test]
fn tsim_shows_undefined_ratios_as_undefined_and_carries_its_settings() {
    let d = tempfile::tempdir().unwrap();
    let t = write(d.path(), "small.csv", SMALL);
    // A block cache without a prefetcher: its accuracy is undefined (nothing prefetched).
    let args = ["tsim", "--trace", &t, "--block-cache", "1MiB", "--disk", "cheetah9lp"];
    let v = json(&[&args[..], &["--json"]].concat());
    assert_eq!(v["block_cache"]["prefetch_accuracy"], Value::Null, "{v}");
    assert!(v["block_cache"]["hit_ratio"].as_f64().is_some(), "{v}");
    assert_eq!(v["device"]["writes"]["mean_blocks"].is_null(), v["device"]["writes"]["requests"] == 0, "{v}");
    assert_eq!(v["settings"]["disk"], "cheetah9lp", "{v}");
    assert_eq!(v["settings"]["block_policy"], "lru", "{v}");
    let csv = util::ok(&[&args[..], &["--csv"]].concat());
    let r = &csv_rows(&csv)[0];
    assert_eq!(r["block_cache.prefetch_accuracy"], "", "{r:?}");
    assert_eq!(r["settings.disk"], "cheetah9lp", "{r:?}");
    let table = util::ok(&args);
    let row = table.lines().find(|l| l.starts_with("block cache")).unwrap();
    // block cache | capacity hit% demand in-flight pf-issued accuracy coverage: nothing prefetched, so the
    // accuracy is undefined; the coverage is 0 (read misses, none removed).
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((cells[6], cells[7], cells[8]), ("0", "-", "0.0%"), "{table}");
}

#[test]
fn experiment_prefetch_policies_leaves_the_accuracy_of_no_prefetcher_empty() {
    let v = json(&["experiment", "prefetch-policies", "--quick", "--policies", "lru", "--json"]);
    let points = v["points"].as_array().unwrap();
    for p in points {
        let none = p["prefetch"] == "none";
        assert_eq!(p["prefetch_accuracy"].is_null(), none, "{p}");
    }
    let csv = util::ok(&["experiment", "prefetch-policies", "--quick", "--policies", "lru", "--csv"]);
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let k = header.iter().position(|h| *h == "prefetch_accuracy").unwrap();
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f[k].is_empty(), f[1] == "\"none\"", "{l}");
    }
}

/// An ARC-style `.lis` trace: 512-byte pages, two of them in each 4 KiB block.
fn lis(dir: &Path) -> String {
    let mut body = String::new();
    for round in 0..3 {
        for page in [1u64, 2, 9, 10, 17, 3, 1, 18] {
            body.push_str(&format!("{} 1 0 {round}\n", page));
        }
    }
    write(dir, "t.lis", &body)
}

fn lru_misses(trace: &str, extra: &[&str]) -> (u64, u64) {
    let args = [
        &["sim", "--trace", trace, "--policy", "lru", "--cache", "3blocks", "--block-size", "512", "--json"][..],
        extra,
    ]
    .concat();
    let v = json(&args);
    let s = &v["results"][0]["stats"]["read"];
    (s["blocks"].as_u64().unwrap(), s["block_hits"].as_u64().unwrap())
}

#[test]
fn converting_a_lis_trace_to_an_object_format_keeps_its_512_byte_pages() {
    let d = tempfile::tempdir().unwrap();
    let t = lis(d.path());
    let plain = d.path().join("t.plain");
    let o = util::run(&["trace", "convert", "--trace", &t, "--to", "plain", "--output", plain.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("512-byte objects") && err.contains("--object-size 512"), "{err}");
    // One id per page, the page numbers themselves: nothing merged.
    let ids: Vec<u64> = std::fs::read_to_string(&plain).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(&ids[..8], [1, 2, 9, 10, 17, 3, 1, 18]);
    // Replayed at the trace's unit, the same numbers as the original.
    assert_eq!(
        lru_misses(plain.to_str().unwrap(), &["--format", "plain", "--object-size", "512"]),
        lru_misses(&t, &[])
    );
    // The oracle format too.
    let og = d.path().join("t.oracle");
    util::ok(&["trace", "convert", "--trace", &t, "--to", "oracle", "--output", og.to_str().unwrap()]);
    assert_eq!(lru_misses(og.to_str().unwrap(), &["--object-size", "512"]), lru_misses(&t, &[]));
}

#[test]
fn converting_requests_that_are_not_whole_objects_is_refused_without_object_size() {
    let d = tempfile::tempdir().unwrap();
    // A 512-byte read at sector 1: not a whole 4 KiB object.
    let t = write(d.path(), "s.csv", "version,time,op,size,lbn\n1,10,28,4096,0\n1,20,28,512,1\n1,30,28,4096,8\n");
    let out = d.path().join("s.oracle");
    let args = ["trace", "convert", "--trace", &t, "--to", "oracle", "--output", out.to_str().unwrap()];
    let e = util::fails(&args);
    assert!(e.contains("--object-size 512") && e.contains("1 request(s)") && e.contains("512 B at byte 512"), "{e}");
    assert!(!out.exists(), "nothing written");
    // With --object-size the user chose the size: rounded, with a note.
    let o = util::run(&[&args[..], &["--object-size", "4096"]].concat());
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("note: 1 request(s) are not whole 4096-byte objects"), "{err}");
    // Aligned requests convert at 4 KiB without a word.
    let a = write(d.path(), "a.csv", "version,time,op,size,lbn\n1,10,28,4096,0\n1,20,28,8192,8\n");
    let o = util::run(&[
        "trace",
        "convert",
        "--trace",
        &a,
        "--to",
        "plain",
        "--output",
        d.path().join("a.plain").to_str().unwrap(),
    ]);
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stderr).contains("note"));
}

/// ARC's OLTP trace: converted and replayed at its unit, the miss ratio of the original.
#[test]
fn the_oltp_trace_converted_gives_the_original_miss_ratio() {
    let Some(shared) = util::shared() else { return };
    let d = tempfile::tempdir().unwrap();
    let src = shared.join("traces/arc/OLTP.lis.zst");
    let og = d.path().join("oltp.oracle.zst");
    util::ok(&[
        "trace",
        "convert",
        "--trace",
        src.to_str().unwrap(),
        "--to",
        "oracle",
        "--output",
        og.to_str().unwrap(),
    ]);
    let ratio = |t: &str, extra: &[&str]| {
        let args =
            [&["sim", "--trace", t, "--policy", "lru", "--cache", "1%", "--block-size", "512", "--csv"][..], extra]
                .concat();
        csv_rows(&util::ok(&args))[0]["block_miss_ratio"].clone()
    };
    assert_eq!(ratio(og.to_str().unwrap(), &["--object-size", "512"]), ratio(src.to_str().unwrap(), &[]));
}

#[test]
fn experiment_dedup_leaves_the_hit_rates_of_a_write_only_workload_undefined() {
    let d = tempfile::tempdir().unwrap();
    let (json_out, csv_dir) = (d.path().join("d.json"), d.path().join("csv"));
    let table = util::ok(&[
        "experiment",
        "dedup",
        "--requests",
        "2000",
        "--blocks",
        "500",
        "--sizes",
        "1MiB",
        "--volumes",
        "2",
        "--policies",
        "lru",
        "--policy-size",
        "1MiB",
        "--write-ratio",
        "1",
        "--json",
        json_out.to_str().unwrap(),
        "--csv",
        csv_dir.to_str().unwrap(),
    ]);
    // No reads: no read hit rate, in the JSON, the CSV and the tables.
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json_out).unwrap()).unwrap();
    for k in ["private_offset", "private_content", "unified_offset", "unified_content"] {
        assert_eq!(v["volumes"][0][k], Value::Null, "{k}: {}", v["volumes"]);
    }
    assert_eq!(v["fractions"][0]["read_hit_rate"], Value::Null, "{}", v["fractions"]);
    let sizes = csv_rows(&std::fs::read_to_string(csv_dir.join("sizes.csv")).unwrap());
    for k in ["offset_read_hit_rate", "content_read_hit_rate", "ideal_read_hit_rate"] {
        assert_eq!(sizes[0][k], "", "{k}: {sizes:?}");
    }
    assert!(!table.contains("0.0%"), "{table}");
    // The Table 3 row: cache (2 words), offset, content, ideal.
    let row: Vec<&str> =
        table.lines().find(|l| l.trim_start().starts_with("1.00 MiB")).unwrap().split_whitespace().collect();
    assert_eq!(row[2..5], ["-", "-", "-"], "{table}");
}

#[test]
fn experiment_es_equivalence_levels_leave_the_miss_rate_of_a_level_without_reads_undefined() {
    let out = util::ok(&[
        "experiment",
        "es-equivalence",
        "--workload",
        "bonnie",
        "--scale",
        "0.05",
        "--sizes",
        "25%",
        "--slowdowns",
        "1",
        "--dram-ns",
        "210000",
        "--levels",
    ]);
    // The slowest tier's run: its DRAM level saw no read, so its read miss rate is `-`, not 0.0000.
    let header = out.lines().position(|l| l.starts_with("workload   es_MiB")).unwrap();
    let row: Vec<&str> = out.lines().nth(header + 1).unwrap().split_whitespace().collect();
    assert_eq!(row[0], "bonnie", "{out}");
    assert_eq!(row[5], "-", "dram_mr: {out}");
    assert!(row[6].parse::<f64>().unwrap() > 0.0, "es_mr: {out}");
}
