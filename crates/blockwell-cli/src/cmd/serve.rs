//! `blockwell serve`: a RAM cache in front of a file or block device, served over NBD.
//!
//! The layers, bottom up: the file backend (positional I/O, fdatasync, hole punching), an optional slow-disk
//! emulator (`--delay`), an optional RAM cache driven by the same engine as `blockwell sim` (`--cache`), and the
//! NBD server. SIGINT or SIGTERM stops accepting, drains in-flight requests, flushes, prints the cache's
//! counters and exits 0.

use super::common::parse_bytes;
use anyhow::Context;
use blockwell_core::policy::{PolicySpec, Preset};
use blockwell_server::backend::Backend;
use blockwell_server::cache::{Admission, CachedBackend, CachedConfig, WriteMode};
use blockwell_server::delay::{DelayBackend, DelayConfig};
use blockwell_server::file::{FileBackend, FileOptions};
use blockwell_server::nbd::{Export, Server, ServerConfig};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The file or block device to cache and serve.
    #[arg(long, value_name = "PATH")]
    pub backend: PathBuf,

    /// Open the backend with O_DIRECT (bypass the page cache; I/O goes through aligned bounce buffers).
    #[arg(long)]
    pub direct: bool,

    /// RAM cache size (`64MiB`, `1GiB`); `0` serves the backend without a cache.
    #[arg(long, default_value = "64MiB")]
    pub cache: String,

    /// Cache block size, a power of two from 512 B to 1 MiB.
    #[arg(long, default_value = "4KiB")]
    pub block_size: String,

    /// Replacement policy, with optional parameters (`lru`, `arc`, `2q(a_in_ratio=0.3)`; see `blockwell list`).
    #[arg(long, default_value = "lru")]
    pub policy: String,

    /// Parameter preset for the policy: default or seed001 (libcachesim's emulation of peer defects that
    /// can exceed the capacity is refused here).
    #[arg(long, default_value = "default")]
    pub preset: String,

    /// Write mode: write-through (a write is acknowledged once the backend has it; FLUSH and FUA reach the
    /// backend as fdatasync), write-around (writes go to the backend and drop cached copies), read-only.
    #[arg(long, default_value = "write-through")]
    pub mode: String,

    /// Admission: `always`, or `n-hit:N` (a block enters the cache on its N-th miss).
    #[arg(long, default_value = "always")]
    pub admission: String,

    /// A sequential stream reaching this many bytes bypasses the cache (`0` = off), like bcache's
    /// sequential_cutoff.
    #[arg(long, default_value = "0")]
    pub sequential_cutoff: String,

    /// Emulate a slow device under the cache: `hdd` (8 ms + 100 MB/s per request, one head), `ssd`, or `none`.
    #[arg(long, default_value = "none")]
    pub delay: String,

    /// TCP address to listen on (NBD's port is 10809). Port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:10809", conflicts_with = "unix")]
    pub listen: String,

    /// Listen on a Unix socket at PATH instead of TCP.
    #[arg(long, value_name = "PATH")]
    pub unix: Option<PathBuf>,

    /// The export's name.
    #[arg(long, default_value = "blockwell")]
    pub export_name: String,

    /// The export's description (shown by `nbdinfo --list`).
    #[arg(long)]
    pub description: Option<String>,

    /// Refuse writes (the export is advertised read-only).
    #[arg(long)]
    pub read_only: bool,
}

/// Parses `--mode` and `--read-only` together.
fn mode(a: &Args) -> anyhow::Result<WriteMode> {
    let m: WriteMode = a.mode.parse().context("--mode")?;
    Ok(if a.read_only { WriteMode::ReadOnly } else { m })
}

/// Renders the cache's counters as one status line.
type StatusFn = Arc<dyn Fn() -> String + Send + Sync>;

/// Builds the layer stack: the backend to serve and, with a cache, its status line.
fn backend(a: &Args) -> anyhow::Result<(Arc<dyn Backend>, Option<StatusFn>)> {
    let mode = mode(a)?;
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
    let cache_bytes = parse_bytes(&a.cache).context("--cache")?;
    if cache_bytes == 0 {
        return Ok((Arc::from(delayed), None));
    }
    let block_size = super::sim::block_size(&a.block_size)?;
    let preset = Preset::from_name(&a.preset)
        .with_context(|| format!("--preset: unknown preset '{}' (known: default, seed001)", a.preset))?;
    let policy = PolicySpec::parse(&a.policy).context("--policy")?;
    let admission: Admission = a.admission.parse().context("--admission")?;
    let cutoff = parse_bytes(&a.sequential_cutoff).context("--sequential-cutoff")?;
    let config = CachedConfig {
        block_size,
        capacity_bytes: cache_bytes,
        policy,
        preset,
        mode,
        admission,
        sequential_cutoff: cutoff,
    };
    let cached = Arc::new(CachedBackend::new(delayed, config).context("--cache")?);
    let status = {
        let c = cached.clone();
        Arc::new(move || c.snapshot().to_status_line()) as StatusFn
    };
    Ok((cached, Some(status)))
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    let (backend, status) = backend(&a)?;
    let size = backend.size();
    let mut export = Export::new(&a.export_name, backend);
    if let Some(d) = &a.description {
        export = export.description(d);
    }
    if mode(&a)? == WriteMode::ReadOnly {
        export = export.read_only();
    }
    let config = ServerConfig::from(vec![export]);
    let server = match &a.unix {
        Some(p) => Server::bind_unix(p, config).with_context(|| format!("--unix {}", p.display()))?,
        None => {
            let addr: std::net::SocketAddr =
                a.listen.parse().with_context(|| format!("--listen: '{}' is not an address:port", a.listen))?;
            if !addr.ip().is_loopback() {
                eprintln!("blockwell: warning: listening on {addr}, beyond this machine; NBD has no authentication");
            }
            Server::bind_tcp(addr, config).with_context(|| format!("--listen {addr}"))?
        }
    };
    let uri = match &a.unix {
        Some(p) => format!("nbd+unix:///{}?socket={}", a.export_name, p.display()),
        None => format!("nbd://{}/{}", server.local_addr().map(|x| x.to_string()).unwrap_or_default(), a.export_name),
    };
    // SIGINT/SIGTERM set a flag; the main thread then shuts the server down gracefully.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    let handle = server.spawn().context("starting the server")?;
    println!("blockwell: serving {} ({size} bytes) at {uri}", a.backend.display());
    use std::io::Write as _;
    std::io::stdout().flush()?;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    handle.shutdown().context("shutting down")?;
    if let Some(s) = status {
        println!("blockwell: stopped; {}", s());
    } else {
        println!("blockwell: stopped");
    }
    Ok(ExitCode::SUCCESS)
}
