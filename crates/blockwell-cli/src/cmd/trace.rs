//! `blockwell trace stats|gen|convert` (being written).
use std::process::ExitCode;

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Footprint, request sizes, read/write mix, sequentiality, reuse distances.
    Stats,
}

pub fn run(_c: Command) -> anyhow::Result<ExitCode> {
    anyhow::bail!("trace tools are not written yet")
}
