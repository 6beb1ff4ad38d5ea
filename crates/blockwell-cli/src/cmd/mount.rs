//! `blockwell mount`: a cached file or device exported as ONE file through FUSE, so that `losetup`, `mkfs`
//! and `mount` put a real filesystem on top of the cache.
//!
//! The layer stack is the one `blockwell serve` builds (file backend, optional `--delay` slow-disk emulator,
//! optional `--cache`); the export is `<MOUNTPOINT>/<NAME>`. SIGINT or SIGTERM unmounts (waiting while a loop
//! device still holds the file), flushes the backend, prints the cache's counters and exits 0.
//
// TODO(lead): the stack options and `stack()` duplicate `serve.rs`'s; both should flatten one shared
// `StackArgs` (serve.rs was off limits when this was written).

use super::common::parse_bytes;
use anyhow::Context;
use blockwell_core::policy::{PolicySpec, Preset};
use blockwell_server::backend::Backend;
use blockwell_server::cache::{CachedBackend, CachedConfig, WriteMode};
use blockwell_server::delay::{DelayBackend, DelayConfig};
use blockwell_server::file::{FileBackend, FileOptions};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The file or block device to cache and export.
    #[arg(long, value_name = "PATH")]
    pub backend: PathBuf,

    /// An existing directory to mount on; the export appears as <DIR>/<NAME>.
    #[arg(long, value_name = "DIR")]
    pub mountpoint: PathBuf,

    /// The exported file's name.
    #[arg(long, default_value = "disk")]
    pub name: String,

    /// Threads serving FUSE reads and writes.
    #[arg(long, default_value_t = 4)]
    pub threads: usize,

    /// Open the backend with O_DIRECT (bypass the page cache; I/O goes through aligned bounce buffers).
    #[arg(long)]
    pub direct: bool,

    /// RAM cache size (`64MiB`, `1GiB`); `0` exports the backend without a cache.
    #[arg(long, default_value = "64MiB")]
    pub cache: String,

    /// Cache block size, a power of two from 512 B to 1 MiB.
    #[arg(long, default_value = "4KiB")]
    pub block_size: String,

    /// Replacement policy, with optional parameters (`lru`, `arc`, `2q(a_in_ratio=0.3)`; see `blockwell list`).
    #[arg(long, default_value = "lru")]
    pub policy: String,

    /// Parameter preset for the policy: default or seed001.
    #[arg(long, default_value = "default")]
    pub preset: String,

    /// Write mode: write-through (a write is acknowledged once the backend has it; fsync reaches the backend
    /// as fdatasync), write-around (writes go to the backend and drop cached copies), read-only.
    #[arg(long, default_value = "write-through")]
    pub mode: String,

    /// Admission: `always`, or `n-hit:N` (a block enters the cache on its N-th miss).
    #[arg(long, default_value = "always")]
    pub admission: String,

    /// A sequential stream reaching this many bytes bypasses the cache (`0` = off), like bcache's
    /// sequential_cutoff.
    #[arg(long, default_value = "0")]
    pub sequential_cutoff: String,

    /// Emulate a slow device under the cache: `hdd`, `ssd`, or `none`.
    #[arg(long, default_value = "none")]
    pub delay: String,

    /// Export the file read-only (mode 0444, writes fail with EROFS).
    #[arg(long)]
    pub read_only: bool,
}

/// Renders the cache's counters as one status line.
type StatusFn = Box<dyn Fn() -> String + Send + Sync>;

/// Builds the layer stack: the backend to export and, with a cache, its status line.
fn stack(a: &Args) -> anyhow::Result<(Arc<dyn Backend>, Option<StatusFn>)> {
    let m: WriteMode = a.mode.parse().context("--mode")?;
    let mode = if a.read_only { WriteMode::ReadOnly } else { m };
    let read_only = mode == WriteMode::ReadOnly;
    let file = FileBackend::open(&a.backend, FileOptions { read_only, direct: a.direct }).context("--backend")?;
    let delayed: Box<dyn Backend> = match a.delay.as_str() {
        "none" => Box::new(file),
        name => {
            let cfg = DelayConfig::preset(name)
                .with_context(|| format!("--delay: unknown device '{name}' (known: hdd, ssd, none)"))?;
            Box::new(DelayBackend::new(file, cfg))
        }
    };
    let capacity_bytes = parse_bytes(&a.cache).context("--cache")?;
    if capacity_bytes == 0 {
        return Ok((Arc::from(delayed), None));
    }
    let config = CachedConfig {
        block_size: super::sim::block_size(&a.block_size)?,
        capacity_bytes,
        policy: PolicySpec::parse(&a.policy).context("--policy")?,
        preset: Preset::from_name(&a.preset)
            .with_context(|| format!("--preset: unknown preset '{}' (known: default, seed001)", a.preset))?,
        mode,
        admission: a.admission.parse().context("--admission")?,
        sequential_cutoff: parse_bytes(&a.sequential_cutoff).context("--sequential-cutoff")?,
    };
    let cached = Arc::new(CachedBackend::new(delayed, config).context("--cache")?);
    let c = cached.clone();
    Ok((cached, Some(Box::new(move || c.snapshot().to_status_line()))))
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    if !a.mountpoint.is_dir() {
        anyhow::bail!("--mountpoint: {} is not a directory", a.mountpoint.display());
    }
    let (backend, status) = stack(&a)?;
    // Handlers first, so a signal that arrives while mounting still ends in a clean unmount.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    let opts = blockwell_fuse::Options {
        name: a.name.clone(),
        threads: a.threads,
        read_only: a.read_only,
        ..Default::default()
    };
    let mut mounted = blockwell_fuse::mount(backend.clone(), &a.mountpoint, &opts)?;
    println!("blockwell: mounted {} at {}", a.backend.display(), mounted.file().display());
    use std::io::Write as _;
    std::io::stdout().flush()?;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // A loop device or an open file keeps the mount busy: keep serving and retry until it is released.
    let mut warned = false;
    loop {
        match mounted.try_unmount() {
            Err(e) if e.is_busy() => {
                if !warned {
                    eprintln!(
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
    backend.flush().context("flushing the backend")?;
    match status {
        Some(s) => println!("blockwell: unmounted; {}", s()),
        None => println!("blockwell: unmounted"),
    }
    Ok(ExitCode::SUCCESS)
}
