//! `blockwell sim` over several traces (`--trace` repeated, or a glob pattern): one document with each trace's
//! results exactly as its own run gives them, in the order the traces were given; a failing trace leaves the
//! others' results, is reported on stderr as a single run reports it, and makes the exit code 1.

mod util;

use std::path::Path;

const SMALL: &str = "version,time,op,size,lbn\n\
1,10,28,4096,0\n\
1,20,28,8192,8\n\
1,30,2a,4096,0\n\
1,40,28,4096,16\n\
1,50,28,12288,0\n";

/// A vscsi trace whose third line does not parse.
const BAD: &str = "version,time,op,size,lbn\n1,10,28,4096,0\n1,20,zz,4096,8\n";

fn write(dir: &Path, name: &str, body: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, body).unwrap();
    p.to_str().unwrap().to_string()
}

/// A Zipf trace in MSR format (detected from its first line), different for each seed.
fn zipf(dir: &Path, name: &str, seed: &str) -> String {
    let p = dir.join(name);
    let p = p.to_str().unwrap().to_string();
    util::ok(&[
        "trace",
        "gen",
        "zipf",
        "--alpha",
        "0.9",
        "--requests",
        "3000",
        "--blocks",
        "500",
        "--write-ratio",
        "0.3",
        "--seed",
        seed,
        "--format",
        "msr",
        "--output",
        &p,
    ]);
    p
}

/// `blockwell sim` with `traces` (each after its own `--trace`) and `rest`.
fn sim_args<'a>(traces: &[&'a str], rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["sim"];
    for t in traces {
        args.extend(["--trace", t]);
    }
    args.extend(rest);
    args
}

/// What several traces' CSV must be: `trace,` and the single-trace header, then each trace's own rows (from a
/// run of its own) behind its name.
fn expected_csv(traces: &[&str], rest: &[&str]) -> String {
    let mut want = String::new();
    for t in traces {
        let one = util::ok(&sim_args(&[t], rest));
        let mut lines = one.lines();
        let header = lines.next().unwrap();
        if want.is_empty() {
            want = format!("trace,{header}\n");
        }
        for row in lines {
            want.push_str(&format!("{t},{row}\n"));
        }
    }
    want
}

fn stderr_lines(o: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr).lines().map(str::to_string).collect()
}

#[test]
fn each_trace_gives_exactly_the_numbers_of_its_own_run() {
    let d = tempfile::tempdir().unwrap();
    let small = write(d.path(), "small.csv", SMALL);
    let z1 = zipf(d.path(), "z1.csv", "1");
    let z2 = zipf(d.path(), "z2.csv", "2");
    let traces = [z2.as_str(), small.as_str(), z1.as_str()];
    // Percentages are of each trace's own footprint; OPT needs each trace's own pre-pass.
    let rest = ["--policy", "lru,arc,opt", "--cache", "2blocks,10%,64KiB", "--csv"];
    let want = expected_csv(&traces, &rest);
    assert_eq!(want.lines().count(), 1 + 3 * 9, "{want}");
    assert_eq!(util::ok(&sim_args(&traces, &rest)), want);
    // Any thread budget gives the same document: fewer threads than traces, more, and one.
    for threads in ["1", "2", "7"] {
        let args = sim_args(&traces, &[&rest[..], &["--threads", threads]].concat());
        assert_eq!(util::ok(&args), want, "--threads {threads}");
    }
    // Several files after one --trace (what a shell makes of an unquoted pattern) are several traces too.
    let mut args = vec!["sim", "--trace"];
    args.extend(traces);
    args.extend(rest);
    assert_eq!(util::ok(&args), want);
}

#[test]
fn globs_expand_sorted_in_the_place_they_are_given() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("traces");
    std::fs::create_dir_all(dir.join("sub.csv")).unwrap();
    let first = write(d.path(), "first.csv", SMALL);
    let c = zipf(&dir, "c.csv", "3");
    let a = zipf(&dir, "a.csv", "1");
    let b = write(&dir, "b.csv", SMALL);
    write(&dir, ".hidden.csv", BAD);
    write(&dir, "notes.txt", "not a trace\n");
    let pattern = format!("{}/*.csv", dir.display());
    let rest = ["-p", "lru", "-c", "1%,10%"];

    // The given order, the pattern's files sorted where it stands; no directory, no dot file.
    let csv = util::ok(&sim_args(&[&first, &pattern], &[&rest[..], &["--csv"]].concat()));
    assert_eq!(csv, expected_csv(&[&first, &a, &b, &c], &[&rest[..], &["--csv"]].concat()));
    let json: serde_json::Value =
        serde_json::from_str(&util::ok(&sim_args(&[&pattern, &first], &[&rest[..], &["--json"]].concat()))).unwrap();
    let names: Vec<&str> = json.as_array().unwrap().iter().map(|r| r["trace"].as_str().unwrap()).collect();
    assert_eq!(names, [&a, &b, &c, &first]);

    // The table: a block per trace (its summary line, header and rows), in order, then the legend once.
    let table = util::ok(&sim_args(&[&pattern], &rest));
    let summaries: Vec<&str> = table.lines().filter(|l| l.starts_with("trace ")).collect();
    assert_eq!(summaries.len(), 3, "{table}");
    for (line, t) in summaries.iter().zip([&a, &b, &c]) {
        assert!(line.starts_with(&format!("trace {t}: ")), "{table}");
    }
    for t in [&a, &b, &c] {
        let one = util::ok(&sim_args(&[t], &rest));
        let block: String = one.lines().take(5).map(|l| format!("{l}\n")).collect();
        assert!(table.contains(&block), "{t}'s block as its own run prints it:\n{block}\nin:\n{table}");
    }
    assert_eq!(table.matches("miss ratios: ").count(), 1, "{table}");
    assert_eq!(table.lines().filter(|l| l.is_empty()).count(), 2, "a blank line between blocks:\n{table}");

    // A pattern is several traces' document even when it finds one.
    let one: serde_json::Value = serde_json::from_str(&util::ok(&sim_args(
        &[&format!("{}/a*.csv", dir.display())],
        &[&rest[..], &["--json"]].concat(),
    )))
    .unwrap();
    assert_eq!(one.as_array().map(Vec::len), Some(1), "{one}");

    // A pattern that matches nothing is one error naming the option and the pattern.
    let none = format!("{}/*.zst", dir.display());
    assert_eq!(
        util::fails(&sim_args(&[&first, &none], &rest)),
        format!("blockwell: error: --trace '{none}': no file matches the pattern")
    );
    // A plain path that does not exist, alone, is today's error.
    let missing = dir.join("missing.csv");
    let e = util::fails(&sim_args(&[missing.to_str().unwrap()], &rest));
    assert_eq!(e, format!("blockwell: error: {}: No such file or directory (os error 2)", missing.display()));
}

#[test]
fn a_failing_trace_leaves_the_others_results_and_exits_1() {
    let d = tempfile::tempdir().unwrap();
    let good1 = write(d.path(), "good1.csv", SMALL);
    let bad = write(d.path(), "bad.csv", BAD);
    let good2 = zipf(d.path(), "good2.csv", "5");
    let missing = d.path().join("missing.csv");
    let missing = missing.to_str().unwrap();
    let traces = [good1.as_str(), bad.as_str(), good2.as_str(), missing];
    let rest = ["-p", "lru,arc", "-c", "2blocks,10%"];
    // Each failure as a run of that trace alone reports it.
    let bad_error = util::fails(&sim_args(&[&bad], &rest));
    assert!(bad_error.contains("bad.csv:3: expected a SCSI opcode"), "{bad_error}");
    let missing_error = util::fails(&sim_args(&[missing], &rest));

    // CSV: the good traces' rows, exactly; the failed ones have none.
    let o = util::run(&sim_args(&traces, &[&rest[..], &["--csv"]].concat()));
    assert_eq!(o.status.code(), Some(1), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(stderr_lines(&o), [bad_error.clone(), missing_error.clone()], "in the order given");
    assert_eq!(
        String::from_utf8(o.stdout).unwrap(),
        expected_csv(&[&good1, &good2], &[&rest[..], &["--csv"]].concat())
    );

    // JSON: every trace in its place, a failed one with its error.
    let o = util::run(&sim_args(&traces, &[&rest[..], &["--json"]].concat()));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr_lines(&o), [bad_error.clone(), missing_error.clone()]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let all = v.as_array().unwrap();
    assert_eq!(all.len(), 4);
    assert_eq!(all[0]["trace"], good1.as_str());
    assert_eq!(all[0]["results"].as_array().map(Vec::len), Some(4));
    let err = |line: &str| line.strip_prefix("blockwell: error: ").unwrap().to_string();
    assert_eq!(all[1], serde_json::json!({ "trace": bad, "error": err(&bad_error) }));
    assert_eq!(all[2]["trace"], good2.as_str());
    assert_eq!(all[3], serde_json::json!({ "trace": missing, "error": err(&missing_error) }));

    // The table: the good blocks, and a line for each failed trace in its place.
    let o = util::run(&sim_args(&traces, &rest));
    assert_eq!(o.status.code(), Some(1));
    let table = String::from_utf8(o.stdout).unwrap();
    let firsts: Vec<&str> = table.lines().filter(|l| l.starts_with("trace ")).collect();
    assert_eq!(firsts.len(), 4, "{table}");
    assert!(firsts[0].starts_with(&format!("trace {good1}: 5 requests")), "{table}");
    assert_eq!(firsts[1], format!("trace {bad}: error: {}", err(&bad_error)));
    assert!(firsts[2].starts_with(&format!("trace {good2}: 3000 requests")), "{table}");
    assert_eq!(firsts[3], format!("trace {missing}: error: {}", err(&missing_error)));

    // Every trace failing: still one document, and exit 1.
    let o = util::run(&sim_args(&[&bad, missing], &[&rest[..], &["--csv"]].concat()));
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(String::from_utf8(o.stdout).unwrap().lines().count(), 1, "the header alone");
}

#[test]
fn json_is_an_array_of_the_single_trace_reports() {
    let d = tempfile::tempdir().unwrap();
    let small = write(d.path(), "small.csv", SMALL);
    let z = zipf(d.path(), "z.csv", "4");
    let rest = ["-p", "lru,s3fifo", "-c", "1%,5%", "--prefetch", "obl", "--warmup", "10", "--json"];
    let out = d.path().join("out.json");
    util::ok(&sim_args(&[&z, &small], &[&rest[..], &["-o", out.to_str().unwrap()]].concat()));
    let many: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let many = many.as_array().expect("an array, one report per trace");
    assert_eq!(many.len(), 2);
    for (report, t) in many.iter().zip([&z, &small]) {
        let one: serde_json::Value = serde_json::from_str(&util::ok(&sim_args(&[t], &rest))).unwrap();
        assert_eq!(report, &one, "{t}: the report its own run gives, its `trace` included");
        assert_eq!(report["trace"], t.as_str());
    }
}

#[test]
fn shared_options_are_checked_once_and_the_tier_takes_one_trace() {
    let d = tempfile::tempdir().unwrap();
    let a = write(d.path(), "a.csv", SMALL);
    let b = write(d.path(), "b.csv", SMALL);
    // A bad cache configuration is one error, exactly as with one trace (exit 2), not one per trace.
    for rest in [
        &["-c", "0blocks"][..],
        &["--format", "nosuch"],
        &["--associativity", "2", "--preset", "libcachesim", "-p", "2q"],
    ] {
        let one = util::fails(&sim_args(&[&a], rest));
        assert_eq!(util::fails(&sim_args(&[&a, &b], rest)), one, "{rest:?}");
    }
    let e = util::fails(&sim_args(&[&a, &b], &["--cache-dev-size", "10%"]));
    assert!(e.contains("--cache-dev-size") && e.contains("--trace"), "{e}");
    let pattern = format!("{}/*.csv", d.path().display());
    let e = util::fails(&sim_args(&[&pattern], &["--cache", "0", "--cache-dev-size", "10%"]));
    assert!(e.contains("--cache-dev-size") && e.contains("--trace"), "{e}");
    let unwritable = d.path().join("no/such/dir/out.csv");
    let e = util::fails(&sim_args(&[&a, &b], &["--csv", "-o", unwritable.to_str().unwrap()]));
    assert!(e.contains("--output"), "{e}");
}

/// The real traces beside the repository: the ARC traces by a pattern give the numbers of their own runs.
#[test]
fn real_traces_by_a_pattern() {
    let Some(shared) = util::shared() else { return };
    let pattern = format!("{}/traces/arc/*.lis.zst", shared.display());
    let rest = ["--block-size", "512", "--policy", "lru,arc", "--cache", "1%,10%", "--csv"];
    let files = [
        shared.join("traces/arc/OLTP.lis.zst").to_str().unwrap().to_string(),
        shared.join("traces/arc/P3.lis.zst").to_str().unwrap().to_string(),
    ];
    let want = expected_csv(&[&files[0], &files[1]], &rest);
    assert_eq!(util::ok(&sim_args(&[&pattern], &rest)), want);
}

#[test]
fn skipped_lines_are_reported_per_trace_by_name() {
    let d = tempfile::tempdir().unwrap();
    let (a, b) = (write(d.path(), "a.csv", BAD), write(d.path(), "b.csv", SMALL));
    let o = util::run(&sim_args(&[&a, &b], &["--skip-bad-lines", "5", "--csv"]));
    assert!(o.status.success());
    let err = stderr_lines(&o);
    assert_eq!(err[0], format!("blockwell: skipped 1 malformed line(s) of {a}; first:"), "{err:?}");
    assert!(err[1].contains("a.csv:3"), "{err:?}");
    assert_eq!(err.len(), 2, "b.csv has no malformed line: {err:?}");
}
