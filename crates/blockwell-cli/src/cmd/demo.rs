//! `blockwell demo`: every policy on two small workloads built into the binary (deterministic generators),
//! ranked by miss ratio at two cache sizes. The README's first command.

use blockwell_core::policy::{PolicyKind, PolicySpec, Preset};
use blockwell_sim::analysis::human_bytes;
use blockwell_sim::gen::{GenConfig, Generator, Workload};
use blockwell_sim::replay::{replay, CacheSize, CacheSpec, ReplayConfig};
use std::io::Write;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Requests per workload.
    #[arg(long, default_value_t = 400_000)]
    pub requests: u64,

    /// Worker threads (default: one per core).
    #[arg(long, value_name = "N", default_value = "0", value_parser = super::options::parse_threads)]
    pub threads: usize,
}

/// The built-in workloads: (title, generator settings).
fn workloads(requests: u64) -> Vec<(&'static str, GenConfig)> {
    vec![
        (
            "Zipf(0.9) popularity over 100,000 blocks, 20 % writes",
            GenConfig {
                workload: Workload::Zipf,
                requests,
                blocks: 100_000,
                alpha: 0.9,
                write_ratio: 0.2,
                ..GenConfig::default()
            },
        ),
        (
            "a 10,000-block hot set (60 % of requests) under sequential scans of 200,000 blocks",
            GenConfig {
                workload: Workload::ScanHot,
                requests,
                blocks: 200_000,
                hot_blocks: Some(10_000),
                hot_fraction: 0.6,
                ..GenConfig::default()
            },
        ),
    ]
}

/// The ranking: a column of policy names as wide as the longest, then a column per cache size, each as wide as
/// its heading (`1% = 1000 blocks`), so that every line is aligned whatever the names.
fn table(head: &[String], rows: &[(&str, Vec<f64>)]) -> String {
    let name_w = rows.iter().map(|r| r.0.chars().count()).chain(["policy".len()]).max().unwrap_or(6);
    let widths: Vec<usize> = head.iter().map(|h| h.chars().count().max(8)).collect();
    let mut s = format!("  {:<name_w$}", "policy");
    for (h, w) in head.iter().zip(&widths) {
        s.push_str(&format!("  {h:>w$}"));
    }
    s.push('\n');
    for (name, ratios) in rows {
        s.push_str(&format!("  {name:<name_w$}"));
        for (r, w) in ratios.iter().zip(&widths) {
            s.push_str(&format!("  {r:>w$.4}"));
        }
        s.push('\n');
    }
    s
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let sizes = [1.0, 5.0, 10.0];
    // Written, not printed: a closed pipe (`blockwell demo | head`) ends the command quietly.
    let mut out = std::io::stdout().lock();
    writeln!(out, "Blockwell demo: all {} policies on two workloads built into the binary.", PolicyKind::ALL.len())?;
    writeln!(
        out,
        "Block-level miss ratios (lower is better), 4 KiB blocks, each workload replayed once for all caches.\n"
    )?;
    for (i, (title, cfg)) in workloads(a.requests).into_iter().enumerate() {
        cfg.validate()?;
        let caches: Vec<CacheSpec> = PolicyKind::ALL
            .iter()
            .flat_map(|&k| {
                sizes
                    .iter()
                    .map(move |&p| CacheSpec { policy: PolicySpec::new(k), size: CacheSize::PercentOfFootprint(p) })
            })
            .collect();
        let open =
            || Ok(Box::new(Generator::new(cfg.clone()).expect("validated")) as Box<dyn blockwell_trace::TraceReader>);
        let report = replay(
            &open,
            &caches,
            &ReplayConfig { threads: a.threads, preset: Preset::Default, ..ReplayConfig::default() },
            Default::default(),
        )?;
        let footprint = report.footprint_blocks.unwrap_or(0);
        writeln!(out, "workload {}: {title}", i + 1)?;
        writeln!(
            out,
            "  {} requests, footprint {footprint} blocks ({})",
            report.requests,
            human_bytes(footprint * 4096)
        )?;
        let n = sizes.len();
        let mut rows: Vec<(&str, Vec<f64>)> = report
            .results
            .chunks(n)
            .map(|c| {
                (
                    c[0].policy.as_str(),
                    c.iter().map(|r| r.stats.total().block_miss_ratio().unwrap_or(f64::NAN)).collect(),
                )
            })
            .collect();
        rows.sort_by(|x, y| x.1[n - 1].total_cmp(&y.1[n - 1]).then(x.0.cmp(y.0)));
        let head: Vec<String> =
            report.results[..n].iter().zip(sizes).map(|(r, p)| format!("{p}% = {} blocks", r.cache_blocks)).collect();
        write!(out, "{}", table(&head, &rows))?;
        let best = rows.iter().find(|r| r.0 != "opt").map(|r| r.0).unwrap_or("-");
        let lru = rows.iter().find(|r| r.0 == "lru").map(|r| r.1[n - 1]).unwrap_or(f64::NAN);
        let best_ratio = rows.iter().find(|r| r.0 == best).map(|r| r.1[n - 1]).unwrap_or(f64::NAN);
        writeln!(
            out,
            "  best online policy at {}%: {best} ({best_ratio:.4} vs LRU {lru:.4}); OPT is the offline bound\n",
            sizes[n - 1]
        )?;
    }
    writeln!(out, "Try it on a real trace: blockwell sim --trace FILE --policy all --cache 1%,5%,10%")?;
    Ok(ExitCode::SUCCESS)
}
