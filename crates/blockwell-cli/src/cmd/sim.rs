//! `blockwell sim` (being written).
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_a: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("sim is not written yet")
}
