//! `blockwell sim` driven as a user would: outputs, determinism, and bad input (one clear error line, exit 2).

mod util;

use std::io::Write;

fn vscsi(dir: &std::path::Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(body.as_bytes()).unwrap();
    p.to_str().unwrap().to_string()
}

/// `csv` without its column `name`.
fn without(csv: &str, name: &str) -> String {
    // The fields of a line as written (a quoted field keeps its quotes and commas).
    let split = |l: &str| {
        let (mut out, mut cur, mut quoted) = (Vec::new(), String::new(), false);
        for c in l.chars() {
            match c {
                '"' => {
                    quoted = !quoted;
                    cur.push(c);
                }
                ',' if !quoted => out.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        out.push(cur);
        out
    };
    let k = split(csv.lines().next().unwrap()).iter().position(|c| c == name).unwrap();
    csv.lines()
        .map(|l| {
            split(l).into_iter().enumerate().filter(|(i, _)| *i != k).map(|(_, f)| f).collect::<Vec<_>>().join(",")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

const SMALL: &str = "version,time,op,size,lbn\n\
1,10,28,4096,0\n\
1,20,28,8192,8\n\
1,30,2a,4096,0\n\
1,40,28,4096,16\n\
1,50,28,12288,0\n";

#[test]
fn csv_json_and_table_agree_and_repeat() {
    let d = tempfile::tempdir().unwrap();
    let t = vscsi(d.path(), "small.csv", SMALL);
    let args = ["sim", "--trace", &t, "--policy", "lru,lru", "--cache", "2blocks,100%"];
    let json1 = util::ok(&[&args[..], &["--json"]].concat());
    let json2 = util::ok(&[&args[..], &["--json", "--threads", "1"]].concat());
    assert_eq!(json1, json2, "identical runs (any thread count) give identical results");
    let v: serde_json::Value = serde_json::from_str(&json1).unwrap();
    // blocks: 0 | 1,2 | 0(w) | 2 | 0,1,2 -> 8 block accesses over 3 distinct blocks
    assert_eq!(v["requests"], 5);
    assert_eq!(v["block_accesses"], 8);
    assert_eq!(v["footprint_blocks"], 3);
    let big = &v["results"][1];
    assert_eq!(big["cache_blocks"], 3);
    // With the whole footprint cached, only the 3 cold misses remain.
    let s = &big["stats"];
    let misses = s["read"]["blocks"].as_u64().unwrap() - s["read"]["block_hits"].as_u64().unwrap()
        + s["write"]["blocks"].as_u64().unwrap()
        - s["write"]["block_hits"].as_u64().unwrap();
    assert_eq!(misses, 3);
    // Request level: the write of block 0 and the last read (0,1,2 all resident) hit; so does the read of 2.
    assert_eq!(s["write"]["request_hits"], 1);
    assert_eq!(s["read"]["request_hits"], 2);
    let csv = util::ok(&[&args[..], &["--csv"]].concat());
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 3, "header + 2 caches: lru given twice runs once");
    assert!(lines[0].starts_with("policy,cache_blocks,cache_bytes"));
    let table = util::ok(&args);
    assert!(table.contains("footprint 3 blocks"), "{table}");
}

#[test]
fn reads_only_warmup_and_output_file() {
    let d = tempfile::tempdir().unwrap();
    let t = vscsi(d.path(), "small.csv", SMALL);
    let out = d.path().join("out.json");
    util::ok(&[
        "sim",
        "--trace",
        &t,
        "--cache",
        "8KiB",
        "--reads-only",
        "--warmup",
        "1",
        "--json",
        "-o",
        out.to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap();
    assert_eq!(v["requests"], 4);
    assert_eq!(v["results"][0]["cache_blocks"], 2);
    assert_eq!(v["results"][0]["stats"]["read"]["requests"], 3, "the first request is warm-up");
    assert_eq!(v["results"][0]["stats"]["write"]["requests"], 0);
}

#[test]
fn bad_input_gives_one_clear_line_and_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let good = vscsi(d.path(), "good.csv", SMALL);
    let bad = vscsi(d.path(), "bad.csv", "version,time,op,size,lbn\n1,10,28,4096,0\n1,20,zz,4096,8\n");
    let e = util::fails(&["sim", "--trace", &bad]);
    assert!(e.contains("bad.csv:3: expected a SCSI opcode"), "{e}");
    // --skip-bad-lines counts and reports instead.
    let o = util::run(&["sim", "--trace", &bad, "--skip-bad-lines", "5", "--cache", "1blocks"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("skipped 1 malformed line"));

    let empty = vscsi(d.path(), "empty.csv", "version,time,op,size,lbn\n");
    assert!(util::fails(&["sim", "--trace", &empty]).contains("no requests"));
    let missing = d.path().join("nope.csv");
    assert!(util::fails(&["sim", "--trace", missing.to_str().unwrap()]).contains("nope.csv"));
    let unknown = vscsi(d.path(), "mystery.txt", "hello world\n");
    assert!(util::fails(&["sim", "--trace", &unknown]).contains("--format"));
    assert!(util::fails(&["sim", "--trace", &good, "--policy", "nosuch"]).contains("unknown policy 'nosuch'"));
    assert!(util::fails(&["sim", "--trace", &good, "--policy", "lru(x=1)"])
        .contains("unknown parameter (this policy takes none)"));
    assert!(util::fails(&["sim", "--trace", &good, "--cache", "12XB"]).contains("--cache"));
    assert!(util::fails(&["sim", "--trace", &good, "--cache", "100B"]).contains("smaller than one"));
    assert!(util::fails(&["sim", "--trace", &good, "--cache", "0blocks"]).contains("holds no"));
    assert!(util::fails(&["sim", "--trace", &good, "--cache", "1PB"]).contains("--cache"));
    assert!(util::fails(&["sim", "--trace", &good, "--block-size", "3000"]).contains("--block-size"));
    assert!(util::fails(&["sim", "--trace", &good, "--preset", "x"]).contains("--preset"));
    assert!(util::fails(&["sim", "--trace", &good, "--format", "x"]).contains("unknown trace format 'x'"));
    assert!(
        util::fails(&["sim", "--trace", &good, "--reads-only", "--volumes", "nope"]).contains("no volume named nope")
    );
}

#[test]
fn demo_ranks_every_policy_on_both_workloads() {
    let out = util::ok(&["demo", "--requests", "20000"]);
    assert_eq!(out.lines().filter(|l| l.starts_with("workload ")).count(), 2, "{out}");
    for k in blockwell_core::PolicyKind::ALL {
        let rows = out.lines().filter(|l| l.split_whitespace().next() == Some(k.name())).count();
        assert_eq!(rows, 2, "{} should have one row per workload:\n{out}", k.name());
    }
    // OPT is the offline bound: first in both rankings.
    let lines: Vec<&str> = out.lines().collect();
    let firsts: Vec<&str> = lines
        .windows(2)
        .filter(|w| w[0].trim_start().starts_with("policy"))
        .map(|w| w[1].split_whitespace().next().unwrap_or(""))
        .collect();
    assert_eq!(firsts, ["opt", "opt"], "{out}");
    assert!(out.contains("best online policy"));
    assert_eq!(out, util::ok(&["demo", "--requests", "20000", "--threads", "1"]), "deterministic");
}

#[test]
fn truncated_files_are_one_clear_error() {
    let d = tempfile::tempdir().unwrap();
    // oracleGeneral: two whole 24-byte records and 5 stray bytes.
    let mut rec = Vec::new();
    for (i, id) in [7u64, 8].iter().enumerate() {
        rec.extend_from_slice(&(i as u32).to_le_bytes());
        rec.extend_from_slice(&id.to_le_bytes());
        rec.extend_from_slice(&4096u32.to_le_bytes());
        rec.extend_from_slice(&(-1i64).to_le_bytes());
    }
    rec.extend_from_slice(&[1, 2, 3, 4, 5]);
    let og = d.path().join("t.oracleGeneral");
    std::fs::write(&og, &rec).unwrap();
    let e = util::fails(&["sim", "--trace", og.to_str().unwrap()]);
    assert!(e.contains("t.oracleGeneral:3: expected a 24-byte record"), "{e}");
    // A gzip file cut in half.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(SMALL.repeat(200).as_bytes()).unwrap();
    let bytes = gz.finish().unwrap();
    let cut = d.path().join("cut.csv.gz");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let e = util::fails(&["sim", "--trace", cut.to_str().unwrap(), "--format", "vscsi"]);
    assert!(e.contains("cut.csv.gz"), "{e}");
}

#[test]
fn volumes_filter_by_name() {
    let d = tempfile::tempdir().unwrap();
    // MSR Cambridge lines on two volumes, hm_0 and hm_1.
    let mut body = String::new();
    for i in 0..6u64 {
        let disk = i % 2;
        body.push_str(&format!("{},hm,{disk},Read,{},4096,100\n", 128166372000000000u64 + i, (i / 2) * 4096));
    }
    let t = vscsi(d.path(), "hm.csv", &body);
    let all: serde_json::Value =
        serde_json::from_str(&util::ok(&["sim", "-t", &t, "-f", "msr", "-c", "10blocks", "--json"])).unwrap();
    assert_eq!(all["requests"], 6);
    assert_eq!(all["results"][0]["stats"]["read"]["block_hits"], 0, "the same offsets on two volumes are two blocks");
    let one: serde_json::Value = serde_json::from_str(&util::ok(&[
        "sim",
        "-t",
        &t,
        "-f",
        "msr",
        "-c",
        "10blocks",
        "--volumes",
        "hm_1",
        "--json",
    ]))
    .unwrap();
    assert_eq!(one["requests"], 3);
}

#[test]
fn converted_oracle_trace_gives_the_same_block_level_results() {
    let Some(shared) = util::shared() else { return };
    let d = tempfile::tempdir().unwrap();
    let src = shared.join("traces/cloudphysics/cloudPhysicsIO.csv");
    let og = d.path().join("cp.oracleGeneral.zst");
    util::ok(&[
        "trace",
        "convert",
        "--trace",
        src.to_str().unwrap(),
        "--to",
        "oracle",
        "--output",
        og.to_str().unwrap(),
        // oracleGeneral has no op: the writes are left out, and the source is simulated without them too.
        "--reads-only",
        // The trace has 512-byte requests: 4 KiB objects (the block size simulated) are asked for, not implied.
        "--object-size",
        "4096",
    ]);
    let run = |t: &str| -> Vec<(u64, u64)> {
        let v: serde_json::Value = serde_json::from_str(&util::ok(&[
            "sim",
            "-t",
            t,
            "-p",
            "lru,arc,opt",
            "-c",
            "1%,10%",
            "--preset",
            "libcachesim",
            "--reads-only",
            "--json",
        ]))
        .unwrap();
        v["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let s = &r["stats"];
                let blocks = s["read"]["blocks"].as_u64().unwrap() + s["write"]["blocks"].as_u64().unwrap();
                let hits = s["read"]["block_hits"].as_u64().unwrap() + s["write"]["block_hits"].as_u64().unwrap();
                (blocks, hits)
            })
            .collect()
    };
    let a = run(src.to_str().unwrap());
    let b = run(og.to_str().unwrap());
    assert_eq!(a.len(), 6);
    assert_eq!(a, b, "one oracleGeneral record per 4 KiB block: same block accesses, same hits");
}

#[test]
fn list_names_every_policy_format_and_preset_parameters() {
    let out = util::ok(&["list"]);
    for k in blockwell_core::PolicyKind::ALL {
        assert!(out.lines().any(|l| l.split_whitespace().next() == Some(k.name())), "{} missing:\n{out}", k.name());
    }
    for f in blockwell_trace::Format::ALL {
        assert!(out.contains(&format!("  {:<10} ", f.name())), "format {} missing", f.name());
    }
    // Presets differ where the papers say so: 2Q's ghost is the cache size under butt05.
    assert!(out.contains(r#"butt05       {"a_in_ratio":0.25,"a_out_ratio":1.0,"libcachesim_quirks":false}"#), "{out}");
}

/// A sequential scan in requests of one block: `obl` (one-block lookahead) turns most misses into prefetch hits.
#[test]
fn prefetch_admission_and_cutoff_change_the_counts_and_are_reported() {
    let d = tempfile::tempdir().unwrap();
    let mut body = String::from("version,time,op,size,lbn\n");
    for i in 0..200u64 {
        body.push_str(&format!("1,{},28,4096,{}\n", i * 10, (i % 100) * 8));
    }
    let t = vscsi(d.path(), "scan.csv", &body);
    let base = ["sim", "--trace", &t, "--policy", "lru", "--cache", "1000blocks", "--json"];
    let run = |extra: &[&str]| -> serde_json::Value {
        serde_json::from_str(&util::ok(&[&base[..], extra].concat())).unwrap()
    };
    let plain = run(&[]);
    assert_eq!(plain["results"][0]["stats"]["read"]["block_hits"], 100, "the second pass hits");
    assert_eq!(plain["results"][0]["ratios"]["read_block_miss_ratio"], 0.5);
    assert_eq!(plain["prefetch"], "none");

    let pf = run(&["--prefetch", "obl(every_access=true)"]);
    let s = &pf["results"][0]["stats"];
    assert_eq!(s["read"]["block_hits"], 199, "every block after the first was prefetched in time: {s}");
    assert_eq!(s["prefetch_used"], 99);
    let r = &pf["results"][0]["ratios"];
    assert!((r["prefetch_coverage"].as_f64().unwrap() - 99.0 / 100.0).abs() < 1e-9, "{r}");
    assert!(r["prefetch_accuracy"].as_f64().unwrap() > 0.95, "{r}");
    let table = util::ok(&["sim", "--trace", &t, "--policy", "lru", "--cache", "1000blocks", "--prefetch", "obl"]);
    assert!(table.contains("pf accur") && table.contains("prefetch accuracy:"), "{table}");
    // Each cache is one row, its prefetch columns included.
    assert!(table.lines().any(|l| l.starts_with("lru ") && l.matches('|').count() == 3), "{table}");
    assert!(!table.lines().any(|l| l.trim().is_empty() || l.starts_with(" |")), "{table}");

    let adm = run(&["--admission", "n-hit:2"]);
    let s = &adm["results"][0]["stats"];
    assert_eq!((s["admission_rejections"].as_u64(), s["read"]["block_hits"].as_u64()), (Some(100), Some(0)), "{s}");
    assert_eq!(adm["admission"], "n-hit:2");

    let cut = run(&["--sequential-cutoff", "16KiB"]);
    let s = &cut["results"][0]["stats"];
    assert!(s["bypassed"].as_u64().unwrap() > 150, "{s}");

    // Typed flags are checked by clap: exit 2, the flag and the value named.
    for (flag, bad) in [("--admission", "sometimes"), ("--prefetch", "nope"), ("--sequential-cutoff", "lots")] {
        let o = util::run(&["sim", "--trace", &t, flag, bad]);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(e.contains(flag) && e.contains(bad), "{e}");
    }
}

/// Every command that takes the cache options takes the same preset names (those `blockwell list` names) and
/// gives the same one-line error for a bad one, as for a bad policy or cache size: the options are defined once.
#[test]
fn every_cache_command_takes_the_same_options_with_the_same_errors() {
    let d = tempfile::tempdir().unwrap();
    let missing = d.path().join("missing");
    let m = missing.to_str().unwrap();
    // Each command, with arguments that make it fail after parsing (so that a value it accepts leads to
    // another error, never a run).
    let commands: [&[&str]; 6] = [
        &["sim", "--trace", m],
        &["serve", "--backend", m],
        &["mount", "--backend", m, "--mountpoint", m],
        &["tsim", "--trace", m],
        &["experiment", "prefetch-policies", "--trace", m],
        &["experiment", "prefetch-policies", "--workload", "loop(files=0)"],
    ];
    let list = util::ok(&["list"]);
    let presets = list.lines().find_map(|l| l.strip_prefix("presets: ")).expect("list names the presets");
    let presets: Vec<&str> = presets.split(", ").collect();
    assert_eq!(presets, ["default", "libcachesim", "butt05"]);
    for cmd in commands {
        for p in &presets {
            let e = util::fails(&[cmd, &["--preset", p]].concat());
            assert!(!e.contains("--preset"), "blockwell {cmd:?} --preset {p}: {e}");
        }
    }
    let same = |flag: &str, value: &str, want: &str| {
        for cmd in commands {
            let e = util::fails(&[cmd, &[flag, value]].concat());
            assert_eq!(e, want, "blockwell {cmd:?} {flag} {value}");
        }
    };
    same(
        "--preset",
        "libcachesim2",
        "blockwell: error: invalid value 'libcachesim2' for '--preset <PRESET>': unknown preset 'libcachesim2' \
         (known: default, libcachesim, butt05)",
    );
    // The single-cache commands (sim takes lists: `<POLICY,...>`).
    let known = blockwell_core::PolicyKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ");
    for cmd in &commands[1..4] {
        let e = util::fails(&[cmd, &["--policy", "nosuch"][..]].concat());
        assert_eq!(
            e,
            format!(
                "blockwell: error: invalid value 'nosuch' for '--policy <POLICY>': unknown policy 'nosuch' (known: {known})"
            )
        );
        let e = util::fails(&[cmd, &["--block-size", "3000"][..]].concat());
        assert_eq!(
            e,
            "blockwell: error: invalid value '3000' for '--block-size <SIZE>': 3000 is not a power of two between \
             512 B and 1 MiB"
        );
        let e = util::fails(&[cmd, &["--cache", "12XB"][..]].concat());
        assert!(
            e.starts_with("blockwell: error: invalid value '12XB' for '--cache <SIZE>': '12XB': unknown unit"),
            "{e}"
        );
    }
    let e = util::fails(&["sim", "--trace", m, "--policy", "lru,nosuch"]);
    assert!(
        e.starts_with(
            "blockwell: error: invalid value 'lru,nosuch' for '--policy <POLICY,...>': unknown policy 'nosuch'"
        ),
        "{e}"
    );
    let e = util::fails(&["experiment", "prefetch-policies", "--policy", "lru,nosuch"]);
    assert!(
        e.starts_with(
            "blockwell: error: invalid value 'lru,nosuch' for '--policy <POLICY,...>': unknown policy 'nosuch'"
        ),
        "{e}"
    );
}

#[test]
fn a_simulated_cache_device_reports_both_levels_and_refuses_nonsense() {
    let d = tempfile::tempdir().unwrap();
    let t = d.path().join("zipf.csv");
    let t = t.to_str().unwrap();
    util::ok(&[
        "trace",
        "gen",
        "zipf",
        "--alpha",
        "0.9",
        "--requests",
        "20000",
        "--blocks",
        "3000",
        "--write-ratio",
        "0.3",
        "--format",
        "msr",
        "--output",
        t,
    ]);
    let args = ["sim", "--trace", t, "--format", "msr", "--cache", "0,100blocks", "--cache-dev-size", "20%"];
    let json = util::ok(&[&args[..], &["--json", "--cleaner", "watermark", "--dirty-every", "1000"]].concat());
    assert_eq!(
        json,
        util::ok(&[&args[..], &["--json", "--cleaner", "watermark", "--dirty-every", "1000"]].concat()),
        "deterministic"
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let r = v["results"].as_array().unwrap();
    assert_eq!(r.len(), 2, "one row per RAM size");
    assert!(r[0]["ram"].is_null() && r[1]["ram"].is_object(), "{v}");
    for x in r {
        let c = &x["tier"];
        let n = |k: &str| c[k].as_u64().unwrap();
        assert!(n("read_hits") > 0 && n("write_hits") > 0 && n("cleaned_blocks") > 0, "{c}");
        assert_eq!(x["dirty"]["series"].as_array().unwrap().len(), 20, "{x}");
        let cap = x["dev_blocks"].as_u64().unwrap();
        // Cleaned before each request down to 10 % once at 30 %: at most 30 % plus one request's blocks.
        let max = x["dirty"]["max_blocks"].as_u64().unwrap();
        assert!(max > cap / 10 && max <= cap * 30 / 100 + 1, "watermark: {max} of {cap} dirty");
    }
    // The RAM level takes read hits away from the device.
    assert!(r[1]["tier"]["read_requests"].as_u64() < r[0]["tier"]["read_requests"].as_u64());
    // CSV and the table carry the same rows.
    let csv = util::ok(&[&args[..], &["--csv", "--cleaner", "watermark"]].concat());
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv.lines().nth(1).unwrap().contains(&format!(",{},", r[0]["tier"]["read_hits"])), "{csv}");
    let table = util::ok(&[&args[..], &["--mode", "write-through"]].concat());
    assert!(table.contains("write-through") && table.contains("lru 400.00 KiB"), "{table}");
    // Set associativity of the device: ways beyond its size change nothing; 8 ways change the counts.
    let plain = util::ok(&[&args[..], &["--csv", "--cleaner", "watermark"]].concat());
    let wide =
        util::ok(&[&args[..], &["--csv", "--cleaner", "watermark", "--cache-dev-associativity", "100000"]].concat());
    // (The rows say which associativity produced them: that column alone differs.)
    assert_eq!(without(&plain, "dev_associativity"), without(&wide, "dev_associativity"));
    assert_ne!(plain, wide);
    let table = util::ok(&[&args[..], &["--cache-dev-associativity", "8", "--associativity", "4"]].concat());
    assert!(table.contains("8-way set associative"), "{table}");
    let narrow =
        util::ok(&[&args[..], &["--csv", "--cleaner", "watermark", "--cache-dev-associativity", "8"]].concat());
    assert_ne!(plain, narrow);
    // Without time stamps and with a time-based cleaner, the report says the cleaner never ran.
    let lis = d.path().join("t.lis");
    std::fs::write(&lis, "0 8 0 0\n100 8 0 0\n0 8 0 0\n").unwrap();
    let out = util::ok(&["sim", "--trace", lis.to_str().unwrap(), "--cache", "0", "--cache-dev-size", "10blocks"]);
    assert!(out.contains("no time stamps"), "{out}");
    // Nonsense is refused, naming the option.
    let e = util::fails(&[&args[..], &["--mode", "read-only"]].concat());
    assert!(e.contains("--mode read-only"), "{e}");
    let e = util::fails(&[&args[..8], &["--cache-dev-size", "0"]].concat());
    assert!(e.contains("--cache-dev-size"), "{e}");
    let e = util::fails(&[&args[..], &["--cache-dev-policy", "opt"]].concat());
    assert!(e.contains("OPT"), "{e}");
    // Warm-up by time: the generated requests are 100 us apart, so 500 ms are the first 5000 requests; one
    // longer than the trace leaves nothing counted.
    let warm = |w: &str| util::ok(&[&args[..], &["--json", "--cleaner", "watermark", "--warmup", w]].concat());
    let by_count = warm("5000");
    let v: serde_json::Value = serde_json::from_str(&by_count).unwrap();
    let mut by_time: serde_json::Value = serde_json::from_str(&warm("500ms")).unwrap();
    // The same numbers; the settings say which warm-up produced them.
    assert_eq!((&by_time["settings"]["warmup"], &v["settings"]["warmup"]), (&"500000000ns".into(), &"5000".into()));
    by_time["settings"]["warmup"] = v["settings"]["warmup"].clone();
    assert_eq!(by_time, v);
    assert_eq!(v["warmup_requests"], 5000);
    let v: serde_json::Value = serde_json::from_str(&warm("1h")).unwrap();
    assert_eq!(v["warmup_requests"], 20000);
    assert_eq!(v["results"][0]["tier"]["read_hits"], 0, "{v}");
}

#[test]
fn interval_counts_add_up_and_plot() {
    let d = tempfile::tempdir().unwrap();
    // 40 requests: blocks 0..4 then 100..104, repeated: the second half misses in a 4-block cache at first.
    let mut body = String::from("version,time,op,size,lbn\n");
    for i in 0..40u64 {
        let base = if i < 20 { 0 } else { 800 };
        body.push_str(&format!("1,{},28,4096,{}\n", i * 10, base + (i % 4) * 8));
    }
    let t = vscsi(d.path(), "shift.csv", &body);
    let args = ["sim", "--trace", &t, "--policy", "lru", "--cache", "4blocks", "--warmup", "5"];
    let csv = util::ok(&[&args[..], &["--interval", "10", "--csv"]].concat());
    let rows: Vec<Vec<&str>> = csv.lines().skip(1).map(|l| l.split(',').collect()).collect();
    // 35 counted requests: intervals ending at 15, 25, 35 and a last one of 5 at 40.
    assert_eq!(rows.iter().map(|r| r[3]).collect::<Vec<_>>(), ["15", "25", "35", "40"], "{csv}");
    let misses: u64 = rows.iter().map(|r| r[6].parse::<u64>().unwrap()).sum();
    let total: serde_json::Value = serde_json::from_str(&util::ok(&[&args[..], &["--json"]].concat())).unwrap();
    let st = &total["results"][0]["stats"]["read"];
    assert_eq!(misses, st["blocks"].as_u64().unwrap() - st["block_hits"].as_u64().unwrap());
    // The working set changes at request 20: that interval misses, the ones around it hit.
    assert_eq!(rows.iter().map(|r| r[6]).collect::<Vec<_>>(), ["0", "4", "0", "0"], "{csv}");
    let json: serde_json::Value =
        serde_json::from_str(&util::ok(&[&args[..], &["--interval", "10", "--json"]].concat())).unwrap();
    assert_eq!(json["results"][0]["intervals"].as_array().unwrap().len(), 4);
    let table = util::ok(&[&args[..], &["--interval", "10"]].concat());
    assert!(table.contains("block miss ratio per interval") && table.contains("0.400000"), "{table}");
    let png = d.path().join("over.png");
    util::ok(&[&args[..], &["--interval", "10", "--plot", png.to_str().unwrap()]].concat());
    assert!(std::fs::read(&png).unwrap().starts_with(b"\x89PNG"));
    // Request i is at i × 10 s: 50 s of warm-up are the first 5 requests.
    let by_time = ["sim", "--trace", &t, "--policy", "lru", "--cache", "4blocks", "--warmup", "50s"];
    let csv_by_time = util::ok(&[&by_time[..], &["--interval", "10", "--csv"]].concat());
    // (The rows say which warm-up produced them: that column alone differs.)
    assert_eq!(without(&csv_by_time, "warmup"), without(&csv, "warmup"));
    assert!(csv_by_time.lines().nth(1).unwrap().ends_with(",50000000000ns,"), "{csv_by_time}");
    let all = util::ok(&["sim", "--trace", &t, "--policy", "lru", "--cache", "4blocks", "--warmup", "1h", "--json"]);
    let all: serde_json::Value = serde_json::from_str(&all).unwrap();
    assert_eq!(
        (all["warmup_requests"].as_u64(), all["results"][0]["stats"]["read"]["blocks"].as_u64()),
        (Some(40), Some(0))
    );
    let e = util::fails(&["sim", "--trace", &t, "--policy", "lru", "--cache", "4blocks", "--warmup", "3 days"]);
    assert!(e.contains("--warmup") && e.contains("unknown unit"), "{e}");
    let e = util::fails(&[&args[..], &["--interval", "0"]].concat());
    assert!(e.contains("--interval: must be at least 1 request"), "{e}");
    let e =
        util::fails(&["sim", "--trace", &t, "--trace", &t, "--policy", "lru", "--cache", "4blocks", "--interval", "5"]);
    assert!(e.contains("--interval: one --trace FILE"), "{e}");
}
