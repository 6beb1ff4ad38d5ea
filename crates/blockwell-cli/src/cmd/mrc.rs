//! `blockwell mrc` (being written).
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_a: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("mrc is not written yet")
}
