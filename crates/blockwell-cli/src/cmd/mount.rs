//! `blockwell mount`: a cached file or device exported as ONE file through FUSE, so that `losetup`, `mkfs`
//! and `mount` put a real filesystem on top of the cache.
//!
//! The layer stack is the one `blockwell serve` builds (file backend, optional `--delay` slow-disk emulator,
//! optional `--cache`); the export is `<MOUNTPOINT>/<NAME>`. SIGINT or SIGTERM unmounts (waiting while a loop
//! device still holds the file), flushes the backend, prints the cache's counters and exits 0; so does an
//! unmount from outside (`fusermount3 -u`, `umount`). `--control` answers `blockwell status` as `serve` does.

use super::serve::{control_path, serve_control, Current, Live, StackArgs};
use anyhow::Context;
use blockwell_cachedev::CacheMode;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The layer stack under the file: backend, cache, policy, mode, delay (the same options as `serve`).
    #[command(flatten)]
    pub stack: StackArgs,

    /// An existing directory to mount on; the export appears as `<DIR>/<NAME>`.
    #[arg(long, value_name = "DIR")]
    pub mountpoint: PathBuf,

    /// The exported file's name.
    #[arg(long, default_value = "disk")]
    pub name: String,

    /// Threads serving FUSE reads and writes.
    #[arg(long, value_name = "N", default_value = "4", value_parser = super::options::parse_threads)]
    pub threads: usize,

    /// Answer `blockwell status` on a Unix socket at PATH; without PATH, the default socket of `blockwell serve
    /// --control`. The socket is owner-only (0600).
    #[arg(long, value_name = "PATH")]
    #[allow(clippy::option_option)]
    pub control: Option<Option<PathBuf>>,
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    super::tier::removing_created(|| run_started(a))
}

fn run_started(a: Args) -> anyhow::Result<ExitCode> {
    if !a.mountpoint.is_dir() {
        anyhow::bail!("--mountpoint: {} is not a directory", a.mountpoint.display());
    }
    let (backend, stats) = a.stack.build()?;
    let mode = a.stack.write_mode();
    let read_only = mode == CacheMode::ReadOnly;
    let source = a.stack.backend.clone().unwrap_or_default();
    let live = Current::new(vec![Live::new(&a.name, &a.stack, backend.size(), mode, stats.clone())]);
    let control = a.control.as_ref().map(|c| control_path(c.as_deref()));
    let ctl = control.as_deref().map(|p| serve_control(p, live.clone())).transpose()?;
    // Handlers first, so a signal that arrives while mounting still ends in a clean unmount.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    let opts = blockwell_fuse::Options { name: a.name.clone(), threads: a.threads, read_only, ..Default::default() };
    let mut mounted = blockwell_fuse::mount(backend.clone(), &a.mountpoint, &opts)?;
    super::tier::started();
    say!("blockwell: mounted {} at {}", source.display(), mounted.file().display());
    if let Some(p) = &control {
        say!("blockwell: control socket at {}", p.display());
    }
    // A stdout nobody reads any more loses these lines, and stops nothing.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    while !stop.load(Ordering::Relaxed) {
        if mounted.is_unmounted() {
            say!("blockwell: {} was unmounted from outside", a.mountpoint.display());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // A loop device or an open file keeps the mount busy: keep serving and retry until it is released.
    let mut warned = false;
    loop {
        match mounted.try_unmount() {
            Err(e) if e.is_busy() => {
                if !warned {
                    warn_line!(
                        "blockwell: {} is busy (a loop device or an open file); still serving until it is released",
                        mounted.file().display()
                    );
                    warned = true;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            r => break r?,
        }
    }
    drop(ctl);
    backend.flush().context("flushing the backend")?;
    let text: String = live.now().iter().map(|l| l.text()).collect();
    say!("blockwell: unmounted; {}", text.trim_end());
    Ok(ExitCode::SUCCESS)
}
