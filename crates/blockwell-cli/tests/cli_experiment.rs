//! `blockwell tsim`, `blockwell workload gen` and `blockwell experiment redcap|prefetch-policies` driven as a
//! user would: real properties of their output (the seed papers' headline findings at reduced scale),
//! determinism, plots, round trips, and errors naming the option.

mod util;

use serde_json::Value;

fn json(args: &[&str]) -> Value {
    let out = util::ok(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("blockwell {args:?}: not JSON ({e}):\n{out}"))
}

fn svgs(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".svg"))
        .collect();
    v.sort();
    for n in &v {
        let body = std::fs::read_to_string(dir.join(n)).unwrap();
        assert!(body.starts_with("<svg") && body.contains("</svg>") && body.len() > 2000, "{n}");
    }
    v
}

#[test]
fn experiment_redcap_quick_reproduces_the_strided_gain_and_is_deterministic() {
    let d = tempfile::tempdir().unwrap();
    let plots = d.path().join("plots");
    let args = ["experiment", "redcap", "--quick", "--json"];
    let first = util::ok(&[&args[..], &["--plot", plots.to_str().unwrap()]].concat());
    let again = util::ok(&[&args[..], &["--threads", "1"]].concat());
    assert_eq!(first, again, "the same grid gives the same JSON whatever the thread count");
    let v: Value = serde_json::from_str(&first).unwrap();
    let cells = v["cells"].as_array().unwrap();
    // Five benchmarks × {1, 8} processes × {block-groups, scattered} × 64x128k.
    assert_eq!(cells.len(), 5 * 2 * 2);
    let cell = |b: &str, p: u64, l: &str| {
        cells
            .iter()
            .find(|c| c["benchmark"] == b && c["procs"] == p && c["layout"] == l)
            .unwrap_or_else(|| panic!("no cell {b} {p} {l}"))
    };
    // Seed 000: REDCAP cuts the 4 KiB strided read of 8 processes on block groups (ext3) by >= 40 % (measured
    // +93.6 %). Linux 2.6.14's read-ahead (the grid's default) sends every strided 4 KiB read to the disk, so
    // one process gains too (measured +63.5 %: REDCAP's segment serves 16 reads per disk command).
    let s8 = cell("strided-4k", 8, "block-groups");
    assert!(s8["improvement"].as_f64().unwrap() >= 0.40, "{s8}");
    // The controller keeps the winning cache on (its closed-loop shadow; measured 100 % of the time).
    assert!(s8["active_fraction"].as_f64().unwrap() > 0.9, "{s8}");
    assert_eq!(v["shadow"], "closed-loop");
    let s1 = cell("strided-4k", 1, "block-groups");
    assert!(s1["improvement"].as_f64().unwrap() >= 0.30, "{s1}");
    // ... kernel-read with 8 processes gains far more on block groups than on the scattered layout (measured
    // +71.3 % and +6.6 %), and IOR stays within 3 % on block groups.
    let kb = cell("kernel-read", 8, "block-groups")["improvement"].as_f64().unwrap();
    let ks = cell("kernel-read", 8, "scattered")["improvement"].as_f64().unwrap();
    assert!(kb > 0.3 && kb > 2.0 * ks, "block groups {kb}, scattered {ks}");
    let ior = cell("ior", 8, "block-groups")["improvement"].as_f64().unwrap();
    assert!(ior.abs() <= 0.03, "ior {ior}");
    for c in cells {
        // The mean of the 3 paired runs (the quick grid's default), each with its own start jitter.
        let runs: Vec<f64> = c["improvement_runs"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(runs.len(), 3, "{c}");
        let mean = runs.iter().sum::<f64>() / 3.0;
        assert!((c["improvement"].as_f64().unwrap() - mean).abs() < 1e-9, "{c}");
        assert!(c["improvement_ci95"].as_f64().unwrap() >= 0.0, "{c}");
    }
    // One run without jitter: the improvement is exactly 1 - with / without.
    let one = util::ok(&[&args[..], &["--runs", "1", "--start-jitter-ms", "0", "--benchmarks", "strided-4k"]].concat());
    let v1: Value = serde_json::from_str(&one).unwrap();
    for c in v1["cells"].as_array().unwrap() {
        let (with, without) = (c["time_with_ns"].as_f64().unwrap(), c["time_without_ns"].as_f64().unwrap());
        assert!((c["improvement"].as_f64().unwrap() - (1.0 - with / without)).abs() < 1e-9, "{c}");
        assert_eq!(c["improvement_ci95"].as_f64().unwrap(), 0.0, "{c}");
    }
    assert_eq!(
        svgs(&plots),
        [
            "redcap-ior.svg",
            "redcap-kernel-read.svg",
            "redcap-strided-4k.svg",
            "redcap-strided-512k.svg",
            "redcap-tac.svg"
        ]
    );
    // The table: one block per benchmark, rows = processes, columns = layout × configuration.
    let t = util::ok(&["experiment", "redcap", "--quick", "--benchmarks", "strided-4k"]);
    assert!(t.contains("block-groups 64x128k") && t.contains("scattered 64x128k"), "{t}");
    let row8 = t.lines().find(|l| l.trim_start().starts_with("8 ")).unwrap();
    assert_eq!(row8.matches('%').count(), 4, "{row8}");
    let csv = util::ok(&["experiment", "redcap", "--quick", "--benchmarks", "strided-4k", "--procs", "8", "--csv"]);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 1 + 2, "{csv}");
    assert!(lines[0].starts_with("benchmark,procs,layout,config,"));
    assert!(lines[1].starts_with("\"strided-4k\",8,\"block-groups\",64x128k,"), "{csv}");
}

#[test]
fn experiment_prefetch_policies_quick_shows_prefetching_narrowing_the_opt_lru_gap() {
    let d = tempfile::tempdir().unwrap();
    let plots = d.path().join("p");
    let args = ["experiment", "prefetch-policies", "--quick", "--json"];
    let text = util::ok(&[&args[..], &["--plot", plots.to_str().unwrap()]].concat());
    assert_eq!(util::ok(&args), text, "the same command twice gives the same JSON, times included");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["source"], "loop(files=500)");
    assert_eq!(v["policies"].as_array().unwrap().len(), 8, "the paper's eight policies");
    let sizes: Vec<u64> = v["sizes"].as_array().unwrap().iter().map(|s| s.as_u64().unwrap()).collect();
    assert_eq!(sizes.len(), 3);
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 8 * 2 * 3);
    let get = |pol: &str, pf: &str, b: u64, key: &str| {
        points
            .iter()
            .find(|p| p["policy"] == pol && p["prefetch"] == pf && p["cache_blocks"] == b)
            .unwrap_or_else(|| panic!("no point {pol} {pf} {b}"))[key]
            .as_f64()
            .unwrap()
    };
    // Seed 001 §5.3.1: below the footprint, prefetching narrows the OPT-LRU hit-ratio gap on a looping workload,
    // and clustering the read-ahead cuts the number of disk requests.
    for &b in &sizes[..2] {
        let gap = |pf: &str| get("opt", pf, b, "hit_ratio") - get("lru", pf, b, "hit_ratio");
        assert!(gap("none") > 0.0 && gap("linux24") < gap("none"), "{b} blocks: {} vs {}", gap("none"), gap("linux24"));
        assert!(get("lru", "linux24", b, "disk_requests") < get("lru", "none", b, "disk_requests"));
    }
    assert_eq!(svgs(&plots), ["disk-requests.svg", "hit-ratio.svg", "time.svg"]);
    let png = d.path().join("png");
    util::ok(&["experiment", "prefetch-policies", "--quick", "--plot", png.to_str().unwrap(), "--plot-format", "png"]);
    for m in ["disk-requests", "hit-ratio", "time"] {
        let bytes = std::fs::read(png.join(format!("{m}.png"))).unwrap();
        assert!(bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000, "{m}.png");
    }
    // Seed 001 §5.3.2: on random reads, read-ahead reads more blocks and takes longer.
    let v = json(&[
        "experiment",
        "prefetch-policies",
        "--workload",
        "random(requests=3000)",
        "--policies",
        "lru",
        "--sizes",
        "10%",
        "--json",
    ]);
    let p = v["points"].as_array().unwrap();
    assert_eq!(p.len(), 2);
    assert_eq!((p[0]["prefetch"].as_str(), p[1]["prefetch"].as_str()), (Some("none"), Some("linux24")));
    assert!(p[1]["blocks_read"].as_u64() > p[0]["blocks_read"].as_u64(), "{v}");
    assert!(p[1]["app_time_ns"].as_u64() > p[0]["app_time_ns"].as_u64(), "{v}");
    // The tables: one per metric plus Table 5's columns.
    let t = util::ok(&["experiment", "prefetch-policies", "--quick", "--policies", "opt,lru"]);
    for needle in ["hit ratio (%)", "disk requests", "execution time (s)", "Table 5", "opt / linux24", "lru / none"] {
        assert!(t.contains(needle), "{needle}:\n{t}");
    }
}

#[test]
fn experiment_prefetch_policies_runs_seed_001s_applications_at_the_papers_cache_sizes() {
    // `--workload cscope`: the generator named after the application, at Figure 3's 32-256 MB mapped onto the
    // generated data (260 MB in the paper).
    let v = json(&[
        "experiment",
        "prefetch-policies",
        "--workload",
        "cscope(scale=0.01)",
        "--policies",
        "lru,2q",
        "--json",
    ]);
    assert_eq!(v["source"], "cscope(scale=0.01)");
    let sizes: Vec<u64> = v["sizes"].as_array().unwrap().iter().map(|s| s.as_u64().unwrap()).collect();
    let data_blocks: f64 = 260.0 * 0.01 * 256.0; // 2.6 MiB in 4 KiB blocks
    let want: Vec<u64> =
        [32.0f64, 64.0, 128.0, 256.0].iter().map(|mb| (mb / 260.0 * data_blocks).round() as u64).collect();
    for (got, want) in sizes.iter().zip(&want) {
        assert!(got.abs_diff(*want) <= 2, "{sizes:?} vs {want:?}");
    }
    assert_eq!(v["points"].as_array().unwrap().len(), 2 * 2 * 4);
    // Every application and mix runs (one tiny size, one policy).
    for w in [
        "glimpse(scale=0.002)",
        "gcc(scale=0.02)",
        "viewperf(scale=0.005)",
        "tpc-r(scale=0.0005)",
        "multi3(scale=0.001)",
    ] {
        let v = json(&[
            "experiment",
            "prefetch-policies",
            "--workload",
            w,
            "--policies",
            "lru",
            "--cache",
            "50%",
            "--json",
        ]);
        assert_eq!(v["points"].as_array().unwrap().len(), 2, "{w}");
    }
    let e = util::fails(&["experiment", "prefetch-policies", "--workload", "cscope(scale=0)"]);
    assert!(e.contains("scale"), "{e}");
}

#[test]
fn experiment_prefetch_policies_on_a_block_trace() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("loop.csv");
    util::ok(&["trace", "gen", "loop", "--output", t.to_str().unwrap(), "--requests", "3000", "--blocks", "1000"]);
    let v = json(&[
        "experiment",
        "prefetch-policies",
        "--trace",
        t.to_str().unwrap(),
        "--policies",
        "opt,lru",
        "--sizes",
        "50%,100%",
        "--json",
    ]);
    assert_eq!(v["footprint_blocks"], 1000);
    assert_eq!(v["layout"], Value::Null);
    let p = v["points"].as_array().unwrap();
    assert_eq!(p.len(), 2 * 2 * 2);
    // A loop over 1000 blocks: at 100 % everything but the first pass hits; at 50 % LRU never hits, OPT does.
    let hr = |i: usize| p[i]["hit_ratio"].as_f64().unwrap();
    // Order: opt/none 50%, opt/none 100%, opt/linux24 ..., lru/none 50%, lru/none 100%, ...
    assert!(hr(0) > 0.25, "{}", p[0]);
    assert_eq!(hr(4), 0.0, "{}", p[4]);
    assert!((hr(5) - 2.0 / 3.0).abs() < 0.01, "{}", p[5]);
}

#[test]
fn tsim_runs_a_workload_a_file_trace_and_a_block_trace() {
    let d = tempfile::tempdir().unwrap();
    let spec = "strided-4k(procs=4,file_mb=4)";
    let common = ["--layout", "block-groups", "--page-cache", "64MiB", "--redcap", "64x128k", "--json"];
    let w = json(&[&["tsim", "--workload", spec][..], &common].concat());
    assert_eq!(w["processes"], 4);
    assert_eq!(w["requests"], 4 * 512);
    assert!(w["app_time_ns"].as_u64().unwrap() > 0);
    assert!(w["redcap"]["segment_reads"].as_u64().unwrap() > 0);
    assert_eq!(w["page_cache"]["prefetcher"], "linux24");
    // Save the workload, replay it: the same report (but for the workload's name).
    let f = d.path().join("w.csv");
    util::ok(&["workload", "gen", spec, "--output", f.to_str().unwrap()]);
    let mut r = json(&[&["tsim", "--file-trace", f.to_str().unwrap()][..], &common].concat());
    let mut w2 = w.clone();
    assert_ne!(r["workload"], w2["workload"]);
    r["workload"] = Value::Null;
    w2["workload"] = Value::Null;
    assert_eq!((&r["settings"]["source"], &w2["settings"]["source"]), (&"file-trace".into(), &"workload".into()));
    r["settings"]["source"] = Value::Null;
    w2["settings"]["source"] = Value::Null;
    assert_eq!(r, w2, "replaying the saved workload gives the same report");
    // The table names the levels and the time.
    let t = util::ok(&["tsim", "--workload", spec, "--block-cache", "8MiB", "--block-prefetch", "obl"]);
    assert!(t.contains("page cache") && t.contains("block cache") && t.contains("app time"), "{t}");
    assert!(t.contains("scheduler C-LOOK"), "{t}");
    // CFQ (seed 000's scheduler) serves each process in its own time slice: with 2.6.14's read-ahead every 4 KiB
    // strided read is a disk read, and those of one process follow each other, so the drive's read-ahead buffer
    // serves most of them and the run is much faster than C-LOOK's, which alternates between the processes.
    let seed000 = ["--page-prefetch", "linux26", "--json"];
    let cfq = json(&[&["tsim", "--workload", spec, "--scheduler", "cfq"][..], &common[..4], &seed000].concat());
    let clook = json(&[&["tsim", "--workload", spec][..], &common[..4], &seed000].concat());
    assert_eq!(cfq["device"]["scheduler"], "CFQ");
    assert_eq!(cfq["device"]["served"], clook["device"]["served"]);
    assert!(
        cfq["app_time_ns"].as_u64().unwrap() * 3 < clook["app_time_ns"].as_u64().unwrap(),
        "CFQ {} ns, C-LOOK {} ns",
        cfq["app_time_ns"],
        clook["app_time_ns"]
    );

    // A block trace: no page cache, a block-level LRU.
    let bt = d.path().join("z.csv");
    util::ok(&["trace", "gen", "zipf", "--output", bt.to_str().unwrap(), "--requests", "2000", "--blocks", "4000"]);
    let args = ["tsim", "--trace", bt.to_str().unwrap(), "--block-cache", "4MiB", "--disk", "cheetah9lp", "--json"];
    let b = json(&args);
    assert_eq!(b["requests"], 2000);
    assert_eq!(b["page_cache"], Value::Null);
    let hr = b["block_cache"]["hit_ratio"].as_f64().unwrap();
    assert!(hr > 0.1 && hr < 1.0, "{hr}");
    assert_eq!(json(&args), b, "deterministic, time included");
    // Open loop at the trace's time stamps (100 µs apart) with a slow disk: requests overlap.
    let open = json(&[&args[..], &["--open-loop"]].concat());
    assert!(open["app_time_ns"].as_u64() < b["app_time_ns"].as_u64());
}

#[test]
fn tsim_simulates_a_cache_device_between_the_block_level_and_the_disk() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("w.csv");
    let t = t.to_str().unwrap();
    let gen = ["trace", "gen", "uniform", "--requests", "1500", "--blocks", "262144", "--write-ratio", "1", "--format"];
    util::ok(&[&gen[..], &["msr", "--output", t]].concat());
    let base = ["tsim", "--trace", t, "--format", "msr", "--think-us", "0", "--json"];
    let dev = ["--cache-dev-size", "256MiB", "--cache-dev-disk", "sata-ssd"];
    let none = json(&base);
    assert!(none.get("cache_dev").is_none(), "no cache device, no report of one: {none}");
    let wb = json(&[&base[..], &dev, &["--mode", "write-back"]].concat());
    let wt = json(&[&base[..], &dev, &["--mode", "write-through"]].concat());
    let app = |v: &Value| v["app_time_ns"].as_u64().unwrap();
    // Random writes: write-back absorbs them in the SSD; write-through pays the HDD as without a cache device.
    assert!(app(&wb) * 20 < app(&wt), "write-back {} write-through {}", app(&wb), app(&wt));
    assert!(app(&wt) as f64 / app(&none) as f64 > 0.95, "write-through {} none {}", app(&wt), app(&none));
    let c = &wb["cache_dev"];
    assert_eq!(c["mode"], "write-back");
    assert_eq!(c["counters"]["write_requests"], 1500);
    assert_eq!(c["counters"]["origin_writes"], 0);
    assert_eq!(c["dirty"]["final_blocks"], c["counters"]["write_misses"]);
    assert_eq!(wb["device"]["writes"]["requests"], 0, "nothing reached the origin");
    assert_eq!(c["device"]["writes"]["requests"], 1500);
    assert_eq!(wt["cache_dev"]["device"]["writes"]["requests"], 1500, "write-through writes both");
    assert_eq!(wt["device"]["writes"]["requests"], 1500);
    // A small device with an eager cleaner: cleaning traffic at the origin, deterministic, time included.
    let small = [&base[..], &["--cache-dev-size", "1000blocks", "--cleaner", "watermark(high=10,low=5)"]].concat();
    let small = [&small[..], &["--dirty-every", "100"]].concat();
    let s = json(&small);
    assert_eq!(json(&small), s, "deterministic");
    let n = |k: &str| s["cache_dev"]["counters"][k].as_u64().unwrap();
    assert!(n("cleaned_blocks") > 0 && n("clean_writes") > 0 && n("origin_writes") > 0, "{}", s["cache_dev"]);
    assert!(s["cache_dev"]["clean_passes"].as_u64().unwrap() > 0);
    assert_eq!(s["cache_dev"]["dirty"]["series"].as_array().unwrap().len(), 15);
    // The table and CSV carry it.
    let table = util::ok(&[&base[..5], &dev, &["--mode", "write-through"]].concat());
    for needle in ["cache device lru 256.00 MiB", "write-through", "origin device wd1200bb", "cache device sata-ssd"] {
        assert!(table.contains(needle), "{needle}: {table}");
    }
    let csv = util::ok(&[&base[..5], &dev, &["--csv"]].concat());
    assert!(csv.lines().next().unwrap().contains("cache_dev.counters.origin_writes"), "{csv}");
}

#[test]
fn errors_name_the_option() {
    for (args, needle) in [
        (&["tsim", "--workload", "strided-4k", "--disk", "nope"][..], "--disk"),
        (&["tsim", "--workload", "strided-4k", "--layout", "ext9"][..], "--layout"),
        (&["tsim", "--workload", "strided-4k", "--layout", "block-groups(rsv_max=1)"][..], "rsv_max"),
        (&["tsim", "--workload", "strided-4k", "--layout", "block-groups(colours=0)"][..], "--layout"),
        (&["tsim", "--workload", "strided-4k(procs=99)"][..], "--workload"),
        (&["tsim", "--workload", "strided-4k", "--page-prefetch", "psychic"][..], "--page-prefetch"),
        (&["tsim", "--workload", "strided-4k", "--redcap", "3x3k"][..], "--redcap"),
        (&["tsim", "--workload", "strided-4k", "--scheduler", "noop"][..], "--scheduler"),
        (&["tsim", "--workload", "strided-4k", "--page-cache", "12XB"][..], "--page-cache"),
        (&["tsim", "--file-trace", "/nonexistent/w.csv"][..], "--file-trace"),
        (&["tsim"][..], "--workload"),
        (&["experiment", "redcap", "--procs", "0"][..], "--procs"),
        (&["experiment", "redcap", "--layouts", "block-groups,ext9"][..], "--layouts"),
        (&["experiment", "redcap", "--layouts", "block-groups(rsv_min=1,rsv_max=0)"][..], "--layouts"),
        (&["experiment", "redcap", "--configs", "3x3k"][..], "--configs"),
        (&["experiment", "redcap", "--benchmarks", "strided-4k,nope"][..], "--benchmarks"),
        (&["experiment", "redcap", "--scale", "0"][..], "--scale"),
        (&["experiment", "redcap", "--runs", "0"][..], "--runs"),
        (&["experiment", "redcap", "--start-jitter-ms=-1"][..], "--start-jitter-ms"),
        (&["experiment", "redcap", "--shadow", "open"][..], "--shadow"),
        (
            &["tsim", "--workload", "strided-4k", "--redcap", "64x128k", "--redcap-shadow", "arrival(lag=1)"][..],
            "--redcap-shadow",
        ),
        (&["tsim", "--workload", "strided-4k", "--start-jitter-ms", "nan"][..], "--start-jitter-ms"),
        (
            &["tsim", "--workload", "strided-4k", "--cache-dev-size", "1MiB", "--cache-dev-disk", "nope"][..],
            "--cache-dev-disk",
        ),
        (
            &["tsim", "--workload", "strided-4k", "--cache-dev-size", "1MiB", "--mode", "read-only"][..],
            "--mode read-only",
        ),
        (&["tsim", "--workload", "strided-4k", "--cache-dev-size", "0"][..], "--cache-dev-size"),
        (&["tsim", "--workload", "strided-4k", "--cache-dev-size", "1MiB", "--redcap", "64x128k"][..], "--redcap"),
        (
            &["tsim", "--workload", "strided-4k", "--cache-dev-size", "1MiB", "--clean-interval-ms", "0"][..],
            "--clean-interval-ms",
        ),
        (&["tsim", "--workload", "strided-4k", "--cache-dev-size", "1MiB", "--cache-dev-policy", "opt"][..], "OPT"),
        // --sizes and --policies are aliases of --cache and --policy, the names errors give.
        (&["experiment", "prefetch-policies", "--sizes", "1XB"][..], "--cache"),
        (&["experiment", "prefetch-policies", "--policies", "lru,nope"][..], "--policy"),
        (&["experiment", "prefetch-policies", "--cache", "0blocks"][..], "--cache: 0 blocks"),
        (&["experiment", "prefetch-policies", "--workload", "loop(files=0)"][..], "--workload"),
        (&["experiment", "prefetch-policies", "--prefetch", "none,psychic"][..], "--prefetch"),
        (&["experiment", "prefetch-policies", "--block-size", "1000"][..], "--block-size"),
        (&["experiment", "redcap", "--quick", "--plot", "/tmp/x", "--plot-format", "pdf"][..], "--plot-format"),
        (&["experiment", "prefetch-policies", "--trace", "/nonexistent/t.csv"][..], "--trace"),
        (&["workload", "gen", "tac(file_mb=0)", "--output", "/tmp/never-written.csv"][..], "workload spec"),
    ] {
        let line = util::fails(args);
        assert!(line.contains(needle), "blockwell {args:?}: {line}");
    }
}

/// `blockwell experiment dedup` through the binary: content caching beats offset caching on a trace with
/// duplicate content, never on one without (its hash table charged), and the run is deterministic.
#[test]
fn experiment_dedup_content_beats_offset_only_with_duplicates() {
    let d = tempfile::tempdir().unwrap();
    let args = |dup: &str, out: &str| -> Vec<String> {
        [
            "experiment",
            "dedup",
            "--requests",
            "30000",
            "--blocks",
            "8000",
            "--sizes",
            "2MiB,8MiB",
            "--volumes",
            "2",
            "--policies",
            "lru,arc",
            "--policy-size",
            "8MiB",
            "--dup-ratio",
            dup,
            "--zero-fraction",
            "0",
            "--cross-volume",
            "0",
            "--rewrite-ratio",
            "0",
            "--json",
            out,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let run = |dup: &str, name: &str| -> String {
        let out = d.path().join(name);
        let a = args(dup, out.to_str().unwrap());
        util::ok(&a.iter().map(String::as_str).collect::<Vec<_>>());
        std::fs::read_to_string(out).unwrap()
    };
    let with = run("0.5", "with.json");
    assert_eq!(with, run("0.5", "again.json"), "deterministic");
    let j: Value = serde_json::from_str(&with).unwrap();
    let without: Value = serde_json::from_str(&run("0", "without.json")).unwrap();
    // The unified-vs-private table: read hit rates of offset and content caches of the same budget.
    let rate = |v: &Value, k: &str| v["volumes"][0][k].as_f64().unwrap_or_else(|| panic!("{k} in {v}"));
    assert!(rate(&j, "private_content") > rate(&j, "private_offset"), "{j}");
    assert!(rate(&j, "unified_content") > rate(&j, "unified_offset"), "{j}");
    assert!(rate(&without, "private_content") <= rate(&without, "private_offset"), "{without}");
    assert!(rate(&without, "unified_content") <= rate(&without, "unified_offset"), "{without}");
}

/// `blockwell experiment es-equivalence` through the binary: ratio 1 at slowdown 1, larger when slower.
#[test]
fn experiment_es_equivalence_ratio_grows_with_slowdown() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("es.json");
    util::ok(&[
        "experiment",
        "es-equivalence",
        "--workload",
        "bonnie",
        "--scale",
        "0.05",
        "--sizes",
        "25%,50%",
        "--slowdowns",
        "1,3",
        "--dram-ns",
        "210000",
        "--json",
        "-o",
        out.to_str().unwrap(),
    ]);
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let rows = &j[0]["rows"];
    assert_eq!(j[0]["workload"], "bonnie");
    assert_eq!((rows[0]["slowdown"].as_f64(), rows[0]["mean_ratio"].as_f64()), (Some(1.0), Some(1.0)), "{j}");
    assert!(rows[1]["mean_ratio"].as_f64().unwrap() > 1.1, "a 3x slower tier needs more capacity: {j}");
    assert!(rows[1]["break_even_price"].as_f64().unwrap() < 1.0, "{j}");
    let e = util::fails(&["experiment", "es-equivalence", "--slowdowns", "0"]);
    assert!(e.contains("--slowdowns"), "{e}");
}
