//! The subcommands, one module each, and options they share.

use std::process::ExitCode;

pub mod cache;
pub mod common;
pub mod demo;
pub mod disk;
pub mod experiment;
pub mod experiment_dedup;
pub mod experiment_devcache;
pub mod experiment_es;
pub mod mount;
pub mod mrc;
pub mod mrc_mini;
pub mod options;
pub mod plot;
pub mod serve;
pub mod sim;
pub mod sim_interval;
pub mod sim_tier;
pub mod status;
pub mod tier;
pub mod trace;
pub mod tsim;

/// `blockwell list`
pub fn list() -> anyhow::Result<ExitCode> {
    use blockwell_core::policy::{PolicyKind, Preset};
    use blockwell_core::PolicySpec;
    println!("policies (parameters under each preset; override as name(key=value,...)):");
    for e in PolicyKind::REGISTRY.list() {
        println!("  {:<10} {}", e.name, e.summary);
        if !e.aliases.is_empty() {
            println!("  {:<10}   also: {}", "", e.aliases.join(", "));
        }
        let spec = PolicySpec::new(e.kind);
        let configs: Vec<(Preset, String)> =
            Preset::ALL.iter().map(|&p| (p, spec.config(p).map(|c| c.to_string()).unwrap_or_default())).collect();
        if configs.iter().all(|(_, c)| c == "{}") {
            continue;
        }
        for (p, c) in &configs {
            println!("  {:<10}   {:<12} {c}", "", p.name());
        }
    }
    println!("presets: {}", Preset::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "));
    println!("trace formats:");
    for f in blockwell_trace::Format::ALL {
        println!("  {:<10} {}", f.name(), f.summary());
    }
    println!("prefetchers (defaults; override as name(key=value,...)):");
    for p in blockwell_core::prefetch::list() {
        println!("  {:<10} {}", p.name, p.summary);
        if !p.params.is_empty() {
            let ps: Vec<String> = p.params.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!("  {:<10}   {}", "", ps.join(", "));
        }
    }
    println!("disk models (blockwell disk list for details):");
    for (name, summary) in blockwell_disk::spec::list() {
        println!("  {name:<10} {summary}");
    }
    println!("file layouts:");
    for e in blockwell_sim::layout::LayoutKind::REGISTRY.list() {
        println!("  {:<14} {}", e.name, e.summary);
    }
    println!("workload generators (defaults; override as name(key=value,...)):");
    for g in blockwell_sim::workloads::list() {
        println!("  {:<14} {}", g.name, g.summary);
        if !g.params.is_empty() {
            let ps: Vec<String> = g.params.iter().map(|(k, v, _)| format!("{k}={v}")).collect();
            println!("  {:<14}   {}", "", ps.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}
