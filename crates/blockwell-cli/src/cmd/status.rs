//! `blockwell status`: ask a running `blockwell serve --control` for its counters.

use anyhow::{anyhow, bail};
use blockwell_server::control::{self, Request};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The server's control socket (default: `$XDG_RUNTIME_DIR/blockwell.sock`, else
    /// `/tmp/blockwell-<uid>.sock`, as for `blockwell serve --control`).
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,

    /// Print every counter of every export as JSON (the cache's and the slow-disk emulator's).
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let path = a.control.unwrap_or_else(control::default_control_path);
    let req = if a.json { Request::StatusJson } else { Request::Status };
    let reply = control::request(&path, req).map_err(|e| {
        anyhow!("cannot connect to {} ({e}) (is blockwell serve running with --control?)", path.display())
    })?;
    if let Some(msg) = reply.strip_prefix("error: ") {
        bail!("{}: {}", path.display(), msg.trim());
    }
    print!("{reply}");
    Ok(ExitCode::SUCCESS)
}
