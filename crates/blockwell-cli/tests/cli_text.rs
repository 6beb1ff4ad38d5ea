//! What a new user reads: option errors in the option's own words, tables that stay aligned whatever the policy
//! names, plots whose legend covers no data and that say where they went, help and output that name papers and
//! features, and a README whose counts are the software's.

mod util;

use std::path::{Path, PathBuf};
use util::{fails, ok, run};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A small generated trace (CSV with time stamps) in `dir`.
fn trace(dir: &Path) -> PathBuf {
    let t = dir.join("t.csv");
    run_ok(&["trace", "gen", "zipf", "--requests", "20000", "--blocks", "4000", "--format", "csv", "-o", s(&t)]);
    t
}

/// Runs `blockwell` and asserts success; returns (stdout, stderr).
fn run_ok(args: &[&str]) -> (String, String) {
    let o = run(args);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "blockwell {args:?} failed ({:?}):\n{err}", o.status);
    (String::from_utf8(o.stdout).unwrap(), err)
}

#[test]
fn negative_numbers_get_the_options_own_message() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path());
    let e = fails(&["sim", "--trace", s(&t), "--cache", "-5"]);
    assert!(e.ends_with("'-5' for '--cache <SIZE,...>': '-5': a size cannot be negative"), "{e}");
    let e = fails(&["sim", "--trace", s(&t), "--cache", "1%,-0.5"]);
    assert!(e.ends_with("'1%,-0.5' for '--cache <SIZE,...>': '-0.5': a size cannot be negative"), "{e}");
    let e = fails(&["serve", "--backend", s(&t), "--cache", "-5"]);
    assert!(e.ends_with("'-5' for '--cache <SIZE>': '-5': a size cannot be negative"), "{e}");
    let e = fails(&["serve", "--backend", s(&t), "--sequential-cutoff", "-1"]);
    assert!(e.ends_with("'-1' for '--sequential-cutoff <SIZE>': '-1': a size cannot be negative"), "{e}");
    for (cmd, flag) in [
        (&["demo"][..], "--threads"),
        (&["sim", "--trace", s(&t)][..], "--threads"),
        (&["mrc", "--trace", s(&t), "--policy", "lru"][..], "--threads"),
    ] {
        let e = fails(&[cmd, &[flag, "-1"]].concat());
        assert_eq!(e, format!("blockwell: error: invalid value '-1' for '{flag} <N>': '-1' is not a number of threads (a whole number, 0 or more)"));
    }
    // Any option with a numeric value: the value reaches its parser, which names the option.
    let e = fails(&["trace", "gen", "zipf", "-o", "x.csv", "--requests", "-3"]);
    assert!(e.contains("'-3' for '--requests <N>'"), "{e}");
}

#[test]
fn an_empty_list_item_is_named() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path());
    let e = fails(&["sim", "--trace", s(&t), "--cache", "1,,2%"]);
    assert!(e.ends_with("'1,,2%': item 2 of 3 is empty"), "{e}");
    let e = fails(&["sim", "--trace", s(&t), "--cache", "1%,"]);
    assert!(e.ends_with("'1%,': item 2 of 2 is empty (a trailing comma?)"), "{e}");
    let e = fails(&["sim", "--trace", s(&t), "--policy", "lru,,arc"]);
    assert!(e.contains("--policy") && e.ends_with("'lru,,arc': item 2 of 3 is empty"), "{e}");
}

/// The (policy, cache_blocks) pairs of `sim --csv`.
fn caches(csv: &str) -> Vec<(String, String)> {
    let mut lines = csv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let (p, c) = (col("policy"), col("cache_blocks"));
    lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[p].to_string(), f[c].to_string())
        })
        .collect()
}

#[test]
fn all_combines_with_other_policies_and_each_cache_runs_once() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path());
    let n = blockwell_core::PolicyKind::ALL.len();
    let all = caches(&ok(&["sim", "--trace", s(&t), "--policy", "all,lru", "--cache", "5%", "--csv"]));
    assert_eq!(all.len(), n, "every policy once, lru not twice: {all:?}");
    let more = caches(&ok(&["sim", "--trace", s(&t), "--policy", "all,lru-k(k=3)", "--cache", "5%", "--csv"]));
    assert_eq!(more.len(), n + 1, "a variant adds to all: {more:?}");
    assert_eq!(more.last().unwrap().0, "lru-k(k=3)");
    let dup = caches(&ok(&["sim", "--trace", s(&t), "--policy", "lru,arc,lru", "--cache", "5%,64KiB,5%", "--csv"]));
    let five = &all[0].1;
    let want: Vec<(&str, &str)> = vec![("lru", five), ("lru", "16"), ("arc", five), ("arc", "16")];
    let got: Vec<(&str, &str)> = dup.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    assert_eq!(got, want, "duplicates simulated once, in the order first given");
}

#[test]
fn serve_blames_policy_for_an_offline_policy() {
    let d = tempfile::tempdir().unwrap();
    let img = d.path().join("disk.img");
    std::fs::write(&img, vec![0u8; 1 << 20]).unwrap();
    let e = fails(&["serve", "--backend", s(&img), "--policy", "opt", "--unix", s(&d.path().join("s.sock"))]);
    assert!(e.starts_with("blockwell: error: --policy opt: the policy needs the future"), "{e}");
}

#[test]
fn a_bad_plot_name_names_the_option_once() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path());
    let gif = d.path().join("x.gif");
    let want = format!("blockwell: error: --plot {}: the file name must end in .png or .svg", gif.display());
    assert_eq!(fails(&["sim", "--trace", s(&t), "--interval", "5000", "--plot", s(&gif)]), want);
    assert_eq!(fails(&["mrc", "--trace", s(&t), "--plot", s(&gif)]), want);
}

/// The lines of the table that starts at the line beginning with `head` and ends at the first blank line.
fn table<'a>(out: &'a str, head: &str) -> Vec<&'a str> {
    out.lines().skip_while(|l| !l.trim_start().starts_with(head)).take_while(|l| !l.trim().is_empty()).collect()
}

/// Asserts that every line of `rows` ends at the same column and that each column's right edge (where a field
/// ends and spaces start) is the same in every row: right-aligned numbers under right-aligned headings.
fn assert_aligned(rows: &[&str]) {
    assert!(rows.len() > 1, "{rows:?}");
    let ends = |l: &str| -> Vec<usize> {
        let c: Vec<char> = l.chars().collect();
        (0..c.len()).filter(|&i| c[i] != ' ' && (i + 1 == c.len() || c[i + 1] == ' ')).map(|i| i + 1).collect()
    };
    // The first column is left-aligned text: compare the columns after it.
    let right = |l: &str| -> Vec<usize> { ends(l).into_iter().skip(1).collect() };
    let want = right(rows[1]);
    for r in rows {
        assert_eq!(right(r).len(), want.len(), "{r:?} in\n{}", rows.join("\n"));
        assert_eq!(right(r), want, "misaligned row {r:?} in\n{}", rows.join("\n"));
    }
}

#[test]
fn demo_tables_stay_aligned_whatever_the_policy_names() {
    let out = ok(&["demo", "--requests", "20000"]);
    for block in out.split("\nworkload ").skip(1) {
        let rows: Vec<&str> =
            table(block, "policy").into_iter().take_while(|l| !l.trim_start().starts_with("best online")).collect();
        assert_eq!(rows.len(), 1 + blockwell_core::PolicyKind::ALL.len(), "{block}");
        assert!(rows.iter().any(|r| r.trim_start().starts_with("hyperbolic ")), "{block}");
        // The headings are multi-word (`1% = 40 blocks`): their last word ends where the numbers end.
        let heads: Vec<usize> = {
            let c: Vec<char> = rows[0].chars().collect();
            let mut v: Vec<usize> =
                (0..c.len()).filter(|&i| c[i] == 's' && (i + 1 == c.len() || c[i + 1] == ' ')).map(|i| i + 1).collect();
            v.dedup();
            v
        };
        let body: Vec<&str> = rows[1..].to_vec();
        assert_aligned(&body);
        let c: Vec<char> = body[0].chars().collect();
        let ends: Vec<usize> = (0..c.len())
            .filter(|&i| c[i] != ' ' && (i + 1 == c.len() || c[i + 1] == ' '))
            .map(|i| i + 1)
            .skip(1)
            .collect();
        assert_eq!(heads, ends, "headings over their columns:\n{}", rows.join("\n"));
    }
}

#[test]
fn mrc_policy_table_stays_aligned_for_long_specs() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path());
    let long = "2q(a_in_ratio=0.3,a_out_ratio=0.75)";
    let out = ok(&["mrc", "--trace", s(&t), "--policy", &format!("lru,{long}"), "--cache", "5%,20%"]);
    let rows = table(&out, "policy");
    assert_eq!(rows.len(), 5, "{out}");
    assert!(rows.iter().any(|r| r.starts_with(long)), "{out}");
    let widths: Vec<usize> = rows.iter().map(|r| r.chars().count()).collect();
    assert!(widths.iter().all(|&w| w == widths[0]), "every line as long as the header:\n{out}");
    assert_aligned(&rows[1..]);
}

/// The x coordinates of the `<text ...>label</text>` elements of an SVG.
fn text_x(svg: &str, label: &str) -> Vec<f64> {
    svg.split("<text")
        .filter(|t| {
            t.split_once('>').and_then(|(_, rest)| rest.split("</text>").next()).is_some_and(|c| c.trim() == label)
        })
        .filter_map(|t| attr(t, "x"))
        .collect()
}

fn attr(element: &str, name: &str) -> Option<f64> {
    let i = element.find(&format!(" {name}=\""))? + name.len() + 3;
    element[i..].split('"').next()?.parse().ok()
}

/// The points of every `<polyline>` of an SVG.
fn polylines(svg: &str) -> Vec<Vec<(f64, f64)>> {
    svg.split("<polyline")
        .skip(1)
        .map(|p| {
            let i = p.find("points=\"").unwrap() + 8;
            p[i..]
                .split('"')
                .next()
                .unwrap()
                .split_whitespace()
                .map(|xy| {
                    let (x, y) = xy.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect()
        })
        .collect()
}

/// Asserts that the legend (labels `labels`) is beside the data: right of every data line and mark, where only
/// the legend's own short line (and mark) per label is drawn.
fn assert_legend_beside_data(svg: &str, labels: &[&str], marked: bool) {
    let xs: Vec<f64> =
        labels.iter().map(|l| *text_x(svg, l).first().unwrap_or_else(|| panic!("no label {l}"))).collect();
    let left = xs.iter().copied().fold(f64::MAX, f64::min) - 45.0;
    let lines = polylines(svg);
    let in_legend: Vec<&Vec<(f64, f64)>> = lines.iter().filter(|p| p.iter().any(|&(x, _)| x >= left)).collect();
    assert_eq!(in_legend.len(), labels.len(), "only the legend's own lines right of {left}: {in_legend:?}");
    for p in in_legend {
        assert!(p.len() == 2 && p[0].1 == p[1].1 && p.iter().all(|&(x, _)| x >= left), "{p:?}");
    }
    let circles: Vec<f64> = svg.split("<circle").skip(1).filter_map(|c| attr(c, "cx")).collect();
    let legend_marks = circles.iter().filter(|&&x| x >= left).count();
    assert_eq!(legend_marks, if marked { labels.len() } else { 0 }, "marks right of {left}: {circles:?}");
    if marked {
        assert!(circles.len() > labels.len(), "the data's points are marked too");
    }
}

#[test]
fn plots_put_the_legend_beside_the_data_and_say_where_they_went() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path());
    let svg = d.path().join("mrc.svg");
    let (_, err) = run_ok(&["mrc", "--trace", s(&t), "--points", "8", "--plot", s(&svg), "--csv"]);
    assert_eq!(err, format!("blockwell: wrote the plot to {}\n", svg.display()));
    assert_legend_beside_data(&std::fs::read_to_string(&svg).unwrap(), &["LRU (exact)"], true);

    let svg = d.path().join("policies.svg");
    let (_, err) = run_ok(&["mrc", "--trace", s(&t), "--policy", "lru,arc,s3fifo", "--points", "6", "--plot", s(&svg)]);
    assert_eq!(err, format!("blockwell: wrote the plot to {}\n", svg.display()));
    assert_legend_beside_data(&std::fs::read_to_string(&svg).unwrap(), &["lru", "arc", "s3fifo"], true);

    // Per interval: each interval's ratio held over the interval (as the Python package's step plot).
    let svg = d.path().join("time.svg");
    let (out, err) = run_ok(&[
        "sim",
        "--trace",
        s(&t),
        "--policy",
        "lru,arc",
        "--cache",
        "5%",
        "--interval",
        "5000",
        "--plot",
        s(&svg),
        "--csv",
    ]);
    assert_eq!(err, format!("blockwell: wrote the plot to {}\n", svg.display()));
    let blocks = caches(&out)[0].1.clone();
    let text = std::fs::read_to_string(&svg).unwrap();
    let labels = [format!("lru / {blocks} blocks"), format!("arc / {blocks} blocks")];
    assert_legend_beside_data(&text, &[&labels[0], &labels[1]], false);
    let steps = polylines(&text).into_iter().max_by_key(Vec::len).unwrap();
    assert_eq!(steps.len(), 2 * 4, "4 intervals, each a level from its start to its end: {steps:?}");
    for w in steps.windows(2) {
        assert!(w[0].0 == w[1].0 || w[0].1 == w[1].1, "steps are horizontal or vertical: {w:?}");
    }
}

#[test]
fn a_trace_without_time_stamps_has_no_rate() {
    let d = tempfile::tempdir().unwrap();
    let plain = d.path().join("ids.plain");
    std::fs::write(&plain, "1\n2\n3\n1\n").unwrap();
    let out = ok(&["trace", "stats", "--trace", s(&plain), "--format", "plain"]);
    let line = out.lines().find(|l| l.starts_with("time span")).unwrap();
    assert_eq!(line, "time span         none: every request has time stamp 0 ns, so no request rate");
    assert!(!out.contains("requests/s"), "{out}");
    // JSON: the undefined rate is null, never 0.
    let json = ok(&["trace", "stats", "--trace", s(&plain), "--format", "plain", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert!(v["time"]["requests_per_sec"].is_null(), "{json}");
    let t = trace(d.path());
    let out = ok(&["trace", "stats", "--trace", s(&t)]);
    assert!(out.lines().any(|l| l.starts_with("time span") && l.ends_with("requests/s")), "{out}");
}

#[test]
fn generating_no_requests_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("t.csv");
    let e = fails(&["trace", "gen", "zipf", "--requests", "0", "-o", s(&out)]);
    assert_eq!(
        e,
        "blockwell: error: --requests 0: a trace needs at least 1 request (every command refuses an empty trace)"
    );
    assert!(!out.exists(), "nothing written");
}

/// Phrases that name the project's internals instead of papers and features.
const INTERNAL: &[&str] = &["seed 0", "seed `0", "seed00", "seed's", "issue 1", "issue #"];

#[test]
fn help_and_listings_name_papers_and_features() {
    let mut texts = vec![("list".to_string(), ok(&["list"])), ("disk list".to_string(), ok(&["disk", "list"]))];
    let top = ok(&["--help"]);
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 10, "{top}");
    texts.push(("--help".into(), top));
    for c in &commands {
        texts.push((format!("{c} --help"), ok(&[c, "--help"])));
    }
    for sub in ["device-caches", "prefetch-policies", "redcap", "dedup", "es-equivalence"] {
        texts.push((format!("experiment {sub} --help"), ok(&["experiment", sub, "--help"])));
    }
    for (what, text) in &texts {
        let lower = text.to_lowercase();
        for p in INTERNAL {
            assert!(!lower.contains(p), "blockwell {what} says '{p}':\n{text}");
        }
    }
    // What serve's help says about its cache options holds for serve: one policy, no footprint percentages.
    let serve = ok(&["serve", "--help"]).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(!serve.contains("`all`") && !serve.contains("footprint"), "{serve}");
    let sim = ok(&["sim", "--help"]).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(sim.contains("`all` for every policy") && sim.contains("percentages of the trace's footprint"), "{sim}");
}

#[test]
fn the_preset_of_butt_et_al_has_a_name_and_keeps_its_old_one() {
    let d = tempfile::tempdir().unwrap();
    let t = trace(d.path());
    let run =
        |preset: &str| ok(&["mrc", "--trace", s(&t), "--policy", "2q", "--preset", preset, "--cache", "5%", "--json"]);
    let new = run("butt05");
    assert!(new.contains("\"preset\": \"butt05\""), "{new}");
    assert_eq!(run("seed001"), new, "the former name is the same preset");
}

#[test]
fn readme_counts_are_the_softwares() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md")).unwrap();
    let n = blockwell_core::PolicyKind::ALL.len();
    assert!(readme.contains(&format!("**{n} replacement policies**")), "README's policy count is not {n}");
    let policies =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/policies.md")).unwrap();
    let words = ["Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten"];
    let tens = ["", "", "Twenty", "Thirty"];
    let word = format!("{}-{}", tens[n / 10], words[n % 10].to_lowercase());
    assert!(
        policies.starts_with("# Replacement policies\n\n") && policies.contains(&format!("{word} policies")),
        "docs/policies.md's count is not {word}"
    );
    // The list names each policy once.
    let list = readme.split(&format!("**{n} replacement policies**")).nth(1).unwrap().split("Presets:").next().unwrap();
    let names = list.split(':').nth(1).unwrap().split_whitespace().collect::<Vec<_>>().join(" ").replace(" and ", ", ");
    assert_eq!(names.split(", ").filter(|s| !s.trim().is_empty()).count(), n, "{names}");
    let lower = readme.to_lowercase();
    for p in INTERNAL {
        assert!(!lower.contains(p), "README says '{p}'");
    }
}

#[test]
fn the_dedup_policy_table_stays_aligned_for_long_specs() {
    let long = "2q(a_in_ratio=0.3,a_out_ratio=0.75)";
    let out = ok(&[
        "experiment",
        "dedup",
        "--requests",
        "5000",
        "--blocks",
        "2000",
        "--sizes",
        "1MiB",
        "--volumes",
        "2",
        "--policies",
        &format!("lru,{long}"),
        "--policy-size",
        "1MiB",
    ]);
    let rows = table(&out, "policy ");
    assert_eq!(rows.len(), 3, "{out}");
    assert!(rows[2].starts_with(long), "{out}");
    let widths: Vec<usize> = rows.iter().map(|r| r.chars().count()).collect();
    assert!(widths.iter().all(|&w| w == widths[0]), "every line as long as the header:\n{out}");
}
