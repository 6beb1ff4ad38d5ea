//! The subcommands, one module each, and options they share.

use std::process::ExitCode;

pub mod common;
pub mod demo;
pub mod mrc;
pub mod sim;
pub mod trace;

/// `blockwell list`
pub fn list() -> anyhow::Result<ExitCode> {
    use blockwell_core::policy::{PolicyKind, Preset};
    println!("policies:");
    for k in PolicyKind::ALL {
        println!("  {:<10} {}", k.name(), k.summary());
    }
    println!("presets: {}", Preset::ALL.iter().map(|p| p.name()).collect::<Vec<_>>().join(", "));
    println!("trace formats:");
    for f in blockwell_trace::Format::ALL {
        println!("  {:<10} {}", f.name(), f.summary());
    }
    Ok(ExitCode::SUCCESS)
}
