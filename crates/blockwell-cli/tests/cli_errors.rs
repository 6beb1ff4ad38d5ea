//! Errors a new user meets, through the real binary: each is one line on stderr, exit code 2, naming the file
//! or option once, with no Rust debug values; and nothing is computed for an output that cannot be written.

mod util;

use std::io::Write;
use std::path::{Path, PathBuf};
use util::{fails, ok, run};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A small generated CSV trace with writes on three volumes.
fn trace(dir: &Path) -> PathBuf {
    let p = dir.join("z.csv");
    let args = ["trace", "gen", "zipf", "--requests", "20k", "--blocks", "3000", "--write-ratio", "0.3"];
    ok(&[&args[..], &["--volumes", "3", "--format", "csv", "-o", s(&p)]].concat());
    p
}

/// No `{:?}` output: `Os { code: .. }`, `Some(..)`, quoted maps and enum variants.
fn assert_no_debug(line: &str) {
    for bad in ["Os {", "kind:", "Some(", "None", "String(", "Number(", "Blocks(", "Bytes(", "Percent(", "{\""] {
        assert!(!line.contains(bad), "a debug value in: {line}");
    }
}

#[test]
fn a_missing_trace_or_a_directory_is_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.csv");
    let d = dir.path().join("adir");
    std::fs::create_dir(&d).unwrap();
    for path in [&missing, &d] {
        for cmd in [&["sim", "--trace"][..], &["mrc", "--trace"], &["trace", "stats", "--trace"]] {
            let mut args = cmd.to_vec();
            args.push(s(path));
            args.extend(["--format", "csv"]);
            let e = fails(&args);
            assert_eq!(e.matches(s(path)).count(), 1, "{e}");
            let cause = if path == &missing { "No such file or directory" } else { "Is a directory" };
            assert_eq!(e.matches(cause).count(), 1, "{e}");
            assert_no_debug(&e);
        }
    }
}

#[test]
fn a_truncated_gz_or_zst_trace_says_so_with_the_last_line() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read(trace(dir.path())).unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&text).unwrap();
    let gz = gz.finish().unwrap();
    let cut = dir.path().join("cut.csv.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).unwrap();
    for cmd in ["sim", "mrc"] {
        let e = fails(&[cmd, "--trace", s(&cut)]);
        let want = format!("blockwell: error: {}: truncated compressed stream after line ", cut.display());
        assert!(e.starts_with(&want), "{e}");
        let line: u64 = e[want.len()..].split(' ').next().unwrap().parse().unwrap();
        assert!(line > 100 && line < 20_001, "{e}");
    }
}

#[test]
fn option_errors_show_values_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let e = fails(&["sim", "--trace", s(&t), "--policy", "lru-k(k=abc)", "--cache", "10blocks"]);
    assert!(e.contains("k=\"abc\""), "{e}");
    assert_no_debug(&e);
    let e = fails(&["mrc", "--trace", s(&t), "--sizes", "0blocks"]);
    assert!(e.contains("--cache: 0blocks holds no 4096 B block"), "{e}");
    assert_no_debug(&e);
}

#[test]
fn mrc_checks_its_output_files_before_reading_the_trace() {
    let dir = tempfile::tempdir().unwrap();
    // A trace whose last line is malformed: reading it would fail, so an error about the output proves that the
    // output was checked first.
    let t = trace(dir.path());
    let mut f = std::fs::OpenOptions::new().append(true).open(&t).unwrap();
    f.write_all(b"not,a,request\n").unwrap();
    assert!(fails(&["mrc", "--trace", s(&t)]).contains("z.csv:20002: "));
    let e = fails(&["mrc", "--trace", s(&t), "--plot", "/nonexistent-dir/x.svg"]);
    assert!(e.starts_with("blockwell: error: --plot /nonexistent-dir/x.svg: No such file or directory"), "{e}");
    let e = fails(&["mrc", "--trace", s(&t), "--csv", "-o", "/nonexistent-dir/x.csv"]);
    assert!(e.starts_with("blockwell: error: --output /nonexistent-dir/x.csv: "), "{e}");
    let e = fails(&["mrc", "--trace", s(&t), "-o", "/nonexistent-dir/out.json", "--json"]);
    assert!(e.starts_with("blockwell: error: --output /nonexistent-dir/out.json: "), "{e}");
    let e = fails(&["sim", "--trace", s(&t), "-o", "/nonexistent-dir/out.txt"]);
    assert!(e.starts_with("blockwell: error: --output /nonexistent-dir/out.txt: "), "{e}");
    // The check leaves no file behind.
    let good = trace(dir.path());
    let plot = dir.path().join("p.svg");
    let e = fails(&["mrc", "--trace", s(&good), "--plot", s(&plot), "--sizes", "0blocks"]);
    assert!(e.contains("--cache"), "{e}");
    assert!(!plot.exists());
}

#[test]
fn oracle_format_on_a_file_that_is_not_one_names_file_and_record() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let text = std::fs::read(&t).unwrap();
    // Not a whole number of 24-byte records: refused before anything is simulated.
    let odd = dir.path().join("odd.bin");
    let n = text.len() / 24 * 24;
    std::fs::write(&odd, &text[..n - 5]).unwrap();
    let records = (n - 5) / 24;
    for cmd in ["sim", "mrc", "trace"] {
        let args: Vec<&str> = match cmd {
            "trace" => vec!["trace", "stats", "--trace", s(&odd), "--format", "oracle"],
            c => vec![c, "--trace", s(&odd), "--format", "oracle"],
        };
        let e = fails(&args);
        let want = format!(
            "blockwell: error: {}:{}: expected a 24-byte record (record {} at byte offset {}), found 19 bytes",
            odd.display(),
            records + 1,
            records + 1,
            records * 24
        );
        assert_eq!(e, want);
    }
    // A whole number of records of text: the first record is implausible.
    let whole = dir.path().join("whole.bin");
    std::fs::write(&whole, &text[..n]).unwrap();
    let e = fails(&["sim", "--trace", s(&whole), "--format", "oracle"]);
    assert!(e.starts_with(&format!("blockwell: error: {}:1: expected a next_access_vtime", whole.display())), "{e}");
    // Zeros.
    let zeros = dir.path().join("zeros.oracleGeneral");
    std::fs::write(&zeros, vec![0u8; 24 * 1000]).unwrap();
    let e = fails(&["mrc", "--trace", s(&zeros)]);
    assert!(e.starts_with(&format!("blockwell: error: {}:1: expected a nonzero obj_size", zeros.display())), "{e}");
    // A real one converts and reads back.
    let o = dir.path().join("z.oracleGeneral");
    ok(&["trace", "convert", "--trace", s(&t), "--to", "oracle", "-o", s(&o), "--reads-only"]);
    assert!(ok(&["mrc", "--trace", s(&o)]).contains("requests"));
}

#[test]
fn an_empty_trace_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.csv");
    std::fs::write(&empty, "").unwrap();
    let header_only = dir.path().join("header.csv");
    std::fs::write(&header_only, "time_ns,volume,op,offset,len\n").unwrap();
    for t in [&empty, &header_only] {
        for cmd in ["sim", "mrc"] {
            let e = fails(&[cmd, "--trace", s(t)]);
            assert_eq!(e, format!("blockwell: error: {}: the trace has no requests", t.display()), "{cmd}");
        }
    }
    // Also when the filters leave nothing.
    let reads = dir.path().join("writes.csv");
    std::fs::write(&reads, "time_ns,volume,op,offset,len\n0,a,W,0,4096\n").unwrap();
    let e = fails(&["sim", "--trace", s(&reads), "--reads-only"]);
    assert_eq!(e, format!("blockwell: error: {}: the trace has no requests left after the filters", reads.display()));
    let e = fails(&["mrc", "--trace", s(&reads), "--reads-only"]);
    assert_eq!(e, format!("blockwell: error: {}: the trace has no requests left after --reads-only", reads.display()));
}

#[test]
fn volumes_that_match_nothing_are_listed() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    for cache in ["64KiB", "10%"] {
        let e = fails(&["sim", "--trace", s(&t), "--volumes", "nope,7", "--cache", cache]);
        assert_eq!(
            e,
            format!("blockwell: error: {}: no volume named nope, 7 in the trace; its volumes: 0, 2, 1", t.display())
        );
    }
    let out = ok(&["sim", "--trace", s(&t), "--volumes", "nope,2", "--cache", "64KiB", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v["requests"].as_u64().unwrap() > 5000, "{v}");
}

#[test]
fn convert_and_gen_refuse_writes_to_formats_without_an_op() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let writes = std::fs::read_to_string(&t).unwrap().lines().filter(|l| l.contains(",W,")).count();
    assert!(writes > 5000);
    // One volume, so that the single-volume formats can hold it.
    let one = dir.path().join("one.csv");
    ok(&["trace", "gen", "zipf", "--requests", "2000", "--write-ratio", "0.5", "--format", "csv", "-o", s(&one)]);
    let one_writes = std::fs::read_to_string(&one).unwrap().lines().filter(|l| l.contains(",W,")).count();
    for to in ["lis", "plain", "oracle"] {
        let out = dir.path().join(format!("out.{to}"));
        let e = fails(&["trace", "convert", "--trace", s(&one), "--to", to, "-o", s(&out)]);
        assert_eq!(
            e,
            format!(
                "blockwell: error: --to {to}: the {to} format has no operation field, so the trace's {one_writes} \
                 write request(s) would be written as reads; pass --reads-only to convert only the reads"
            )
        );
        assert!(!out.exists(), "nothing written");
        let o = run(&["trace", "convert", "--trace", s(&one), "--to", to, "-o", s(&out), "--reads-only"]);
        assert!(o.status.success());
        let msg = String::from_utf8_lossy(&o.stderr);
        let reads = 2000 - one_writes;
        assert_eq!(
            msg.trim(),
            format!(
                "blockwell: wrote {reads} requests to {} ({to}){}, left out {one_writes} write request(s)",
                out.display(),
                // Object-id formats say the object size to read them with.
                if to == "lis" { "" } else { " as 4096-byte objects (read it with --object-size 4096)" },
            )
        );
        let back = ok(&["trace", "stats", "--trace", s(&out), "--format", to, "--json"]);
        let v: serde_json::Value = serde_json::from_str(&back).unwrap();
        assert_eq!(v["requests"], reads as u64);
    }
    // Formats with an op keep the writes, without --reads-only.
    let out = dir.path().join("out.vscsi");
    ok(&["trace", "convert", "--trace", s(&one), "--to", "vscsi", "-o", s(&out)]);
    let e =
        fails(&["trace", "gen", "zipf", "--write-ratio", "0.1", "--format", "lis", "-o", s(&dir.path().join("g.lis"))]);
    assert!(e.contains("--write-ratio 0.1: the lis format has no operation field"), "{e}");
}

#[test]
fn no_progress_bar_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let t = trace(dir.path());
    let quiet = |args: &[&str]| {
        let o = run(args);
        assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stderr).unwrap()
    };
    assert_eq!(quiet(&["mrc", "--trace", s(&t)]), "");
    assert_eq!(quiet(&["sim", "--trace", s(&t)]), "");
    assert_eq!(quiet(&["trace", "stats", "--trace", s(&t)]), "");
    let out = dir.path().join("c.vscsi.zst");
    let e = quiet(&["trace", "convert", "--trace", s(&t), "--to", "csv", "-o", s(&out)]);
    assert_eq!(e, format!("blockwell: wrote 20000 requests to {} (csv)\n", out.display()));
    let e = quiet(&[
        "experiment",
        "prefetch-policies",
        "--trace",
        s(&t),
        "--sizes",
        "10%",
        "--policies",
        "lru",
        "--prefetch",
        "none",
    ]);
    assert_eq!(e, "");
}

/// Under a pseudo-terminal (`script`), the bar is drawn on stderr and cleared at the end.
#[test]
fn a_progress_bar_on_a_terminal() {
    if std::process::Command::new("script").arg("--version").output().is_err() {
        util::skip("script (util-linux) is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.csv");
    let args = ["trace", "gen", "zipf", "--requests", "1M", "--blocks", "100k", "--format", "csv", "-o", s(&big)];
    ok(&args);
    let bin = env!("CARGO_BIN_EXE_blockwell");
    let cmd = format!("{bin} mrc --trace {} > /dev/null", big.display());
    let o = std::process::Command::new("script").args(["-qec", &cmd, "/dev/null"]).output().unwrap();
    let tty = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{tty}");
    assert!(tty.contains("reading") && tty.contains("MiB"), "no bar drawn: {tty:?}");
}
