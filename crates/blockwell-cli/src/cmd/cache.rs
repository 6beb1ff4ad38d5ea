//! `blockwell cache`: the persistent cache device offline (format, check, status, flush, detach) and, through a
//! running server's control socket, flush and mode switch.

use super::options::{parse_arg, BlockSize};
use super::tier::{create_if_missing, format, origin_identity, DevSize};
use anyhow::{anyhow, bail, Context};
use blockwell_cachedev::check::{check, check_metadata};
use blockwell_cachedev::{CacheMode, FileDev};
use blockwell_server::claim::Claim;
use blockwell_server::control::{self, Request};
use blockwell_server::file::{FileBackend, FileOptions};
use blockwell_server::tier::{BackendDev, TierBackend, TierConfig};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Format a file or block device as a cache device for the origin ORIGIN. Refused, unless --force, over
    /// anything but zeroes: a cache device, a file system, a partition table, a volume or other data; always
    /// refused over the origin itself.
    Format {
        /// The cache device: an existing file or block device, or a file to create with --size.
        path: PathBuf,
        /// Create PATH with this size when it does not exist (an existing file must have this size; it is not
        /// resized). A format that fails removes the file it created.
        #[arg(long, value_name = "SIZE", value_parser = parse_arg::<DevSize>)]
        size: Option<DevSize>,
        /// The origin (backend) it will cache; a regular file gets an identity attribute
        /// (user.blockwell.origin).
        #[arg(long, value_name = "PATH")]
        origin: PathBuf,
        /// Block size of the cache, a power of two from 512 B to 1 MiB.
        #[arg(long, value_name = "SIZE", default_value = "4KiB", value_parser = parse_arg::<BlockSize>)]
        block_size: BlockSize,
        /// The mode recorded (serve's --mode decides at each start).
        #[arg(long, value_name = "MODE", default_value = "write-back", value_parser = parse_arg::<CacheMode>)]
        mode: CacheMode,
        /// Overwrite whatever PATH holds: a Blockwell cache device (its dirty blocks are lost), a file system,
        /// partition table, volume or data.
        #[arg(long)]
        force: bool,
    },
    /// Verify a cache device offline: superblocks, slot table, journal, mapping, and the data of every mapped
    /// slot against its checksum. Exit 1 when it finds a problem.
    Check {
        /// The cache device (a file or block device not in use).
        path: PathBuf,
        /// Also check that the device belongs to this origin.
        #[arg(long, value_name = "PATH")]
        origin: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Salvage a cache device whose metadata is damaged (dm-cache's cache_repair): keep only the mappings it
    /// can prove and verify, name every slot and origin block it cannot vouch for. Writes nothing without
    /// --write.
    Repair {
        /// The cache device (not in use).
        path: PathBuf,
        /// Write the salvaged mappings as a new checkpoint (the slots named are dropped from the cache).
        #[arg(long)]
        write: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Describe a cache device: its origin, mode, state, and how many blocks it holds and how many are dirty.
    Status {
        /// The cache device (a file or block device not in use).
        path: PathBuf,
        /// Print the description as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write every dirty block back to the origin: of the device PATH (not in use), or of a running server's
    /// cache devices (--control).
    Flush {
        /// The cache device (offline).
        #[arg(required_unless_present = "control")]
        path: Option<PathBuf>,
        /// The origin (default: the one the device records).
        #[arg(long, value_name = "PATH")]
        origin: Option<PathBuf>,
        /// A running `blockwell serve --control PATH` (or `mount`): flush its cache devices.
        #[arg(long, value_name = "PATH", conflicts_with_all = ["path", "origin"])]
        control: Option<PathBuf>,
        /// With --control: only this export's.
        #[arg(long, requires = "control")]
        export: Option<String>,
        #[command(flatten)]
        stale: StaleArgs,
    },
    /// Write every dirty block back, then mark the device detached: the origin alone is current and can be
    /// used without the cache (lvmcache's --splitcache). The next start over it finds it empty.
    Detach {
        /// The cache device (a file or block device not in use).
        path: PathBuf,
        /// The origin to write the dirty blocks to (default: the one the device records).
        #[arg(long, value_name = "PATH")]
        origin: Option<PathBuf>,
        #[command(flatten)]
        stale: StaleArgs,
    },
    /// Switch the write mode of a running server's cache devices (leaving write-back writes every dirty block
    /// back first).
    Mode {
        /// write-back, write-through, write-around or read-only.
        #[arg(value_parser = parse_arg::<CacheMode>)]
        mode: CacheMode,
        /// The running server's control socket (default: that of `blockwell serve --control` without a path).
        #[arg(long, value_name = "PATH")]
        control: Option<PathBuf>,
        /// Only this export's cache device (default: every export's).
        #[arg(long)]
        export: Option<String>,
    },
}

/// What `flush` and `detach` do with dirty blocks that the origin's newer writes made stale.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct StaleArgs {
    /// Go ahead although the origin was written without this cache device since it last had it: its dirty
    /// blocks are written back over the origin's newer data. Also when another cache device holds dirty
    /// blocks of the origin.
    #[arg(long)]
    force: bool,
    /// When the origin was written without this cache device since it last had it, drop its dirty blocks
    /// (the origin's data wins) instead of refusing.
    #[arg(long, conflicts_with = "force")]
    discard_stale: bool,
}

pub fn run(c: Command) -> anyhow::Result<ExitCode> {
    match c {
        Command::Format { path, size: dev_size, origin, block_size, mode, force } => {
            let size = FileBackend::open(&origin, FileOptions::read_only(Claim::Unclaimed))
                .with_context(|| format!("--origin {}", origin.display()))?;
            let size = blockwell_server::backend::Backend::size(&size);
            let created = create_if_missing(&path, dev_size.as_ref(), "--size")?;
            let sb = format(&path, &origin, size, block_size.get(), mode, force).map_err(|e| {
                match (e.downcast_ref::<blockwell_cachedev::Error>(), &dev_size) {
                    (Some(blockwell_cachedev::Error::TooSmall { needed, .. }), Some(s)) => anyhow!(
                        "{}: --size {} is too small for a cache device of {} B blocks: it needs at least {needed} B",
                        path.display(),
                        s.text,
                        block_size.get()
                    ),
                    _ => e,
                }
            })?;
            created.keep();
            println!(
                "blockwell: formatted {} for {} ({} B): {} slots of {} B, uuid {}",
                path.display(),
                origin.display(),
                size,
                sb.geometry.slots,
                sb.geometry.block_size,
                sb.uuid_string()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { path, origin, json } => {
            let dev = open_dev(&path)?;
            let id = match &origin {
                Some(o) => Some(origin_identity(o, file_size(o)?, false)?.0),
                None => None,
            };
            let r = check(&dev, id).with_context(|| path.display().to_string())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", r.text());
            }
            Ok(if r.ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Command::Repair { path, write, json } => {
            let r = if write {
                let f = FileBackend::open(&path, FileOptions::writable())
                    .with_context(|| format!("opening {}", path.display()))?;
                let dev = FileDev::from_file(f.into_file()).with_context(|| format!("opening {}", path.display()))?;
                blockwell_cachedev::repair::repair(&dev, true)
            } else {
                blockwell_cachedev::repair::repair(&open_dev(&path)?, false)
            }
            .with_context(|| path.display().to_string())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", r.text(&path.display().to_string()));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { path, json } => {
            let dev = open_dev(&path)?;
            let r = check_metadata(&dev, None).with_context(|| path.display().to_string())?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print!("{}", r.text());
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Flush { path: Some(path), origin, control: None, stale, .. } => {
            let tier = open_offline(&path, origin.as_deref(), stale)?;
            let n = tier.clean_all().with_context(|| path.display().to_string())?;
            tier.close().with_context(|| path.display().to_string())?;
            println!("blockwell: {}: {n} dirty block(s) written back", path.display());
            Ok(ExitCode::SUCCESS)
        }
        Command::Flush { control: Some(_), stale, .. } if stale.force || stale.discard_stale => {
            bail!("--force and --discard-stale apply to a cache device PATH offline, not to --control")
        }
        Command::Flush { control: Some(c), export, .. } => remote(&c, Request::CacheFlush(export)),
        Command::Flush { .. } => bail!("give the cache device PATH, or --control"),
        Command::Detach { path, origin, stale } => {
            let tier = open_offline(&path, origin.as_deref(), stale)?;
            let before = tier.snapshot().dirty_blocks;
            tier.detach().with_context(|| path.display().to_string())?;
            println!(
                "blockwell: {}: detached ({before} dirty block(s) written back); the origin is current",
                path.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Mode { mode, control, export } => {
            let c = control.unwrap_or_else(control::default_control_path);
            remote(&c, Request::CacheMode(mode, export))
        }
    }
}

fn file_size(p: &Path) -> anyhow::Result<u64> {
    let f = FileBackend::open(p, FileOptions::read_only(Claim::Unclaimed))?;
    Ok(blockwell_server::backend::Backend::size(&f))
}

/// Opens a cache device to read it (`check`, `status`): refused while a server has it.
fn open_dev(path: &Path) -> anyhow::Result<FileDev> {
    let f = FileBackend::open(path, FileOptions::read_only(Claim::Shared))?;
    FileDev::from_file(f.into_file()).with_context(|| format!("opening {}", path.display()))
}

/// Opens the cache device `path` over its origin (given, or as recorded), in the mode it records, with no
/// background cleaning.
fn open_offline(path: &Path, origin: Option<&Path>, stale: StaleArgs) -> anyhow::Result<TierBackend<FileBackend>> {
    let r = check_metadata(&open_dev(path)?, None).with_context(|| path.display().to_string())?;
    if let Some(p) = r.problems.first() {
        bail!("{}: {p} (`blockwell cache check` lists every problem)", path.display());
    }
    let origin: PathBuf = match origin {
        Some(o) => o.to_path_buf(),
        None if !r.origin_path.is_empty() => PathBuf::from(&r.origin_path),
        None => bail!("{}: the device records no origin path; give --origin", path.display()),
    };
    let o =
        FileBackend::open(&origin, FileOptions::writable()).with_context(|| format!("origin {}", origin.display()))?;
    let size = blockwell_server::backend::Backend::size(&o);
    let (id, _) = origin_identity(&origin, size, false)?;
    let mode: CacheMode = r.mode.parse().map_err(|e: String| anyhow!(e))?;
    let mut cfg = TierConfig::new(id, origin.display().to_string());
    cfg.mode = mode;
    cfg.cleaner = blockwell_core::cleaner::CleanerSpec::None;
    cfg.origin_guard = Some(super::tier::origin_guard(&origin, path, stale.force, stale.discard_stale)?);
    let file =
        FileBackend::open(path, FileOptions::writable()).with_context(|| format!("opening {}", path.display()))?;
    let dev: Arc<dyn blockwell_cachedev::Dev> = Arc::new(BackendDev(file));
    TierBackend::open(o, dev, cfg).with_context(|| path.display().to_string())
}

/// Sends a cache command to a running server and prints its reply: the `ok:` lines on stdout; `error:` lines
/// fail the command, each said once (as the error, on stderr).
fn remote(socket: &Path, req: Request) -> anyhow::Result<ExitCode> {
    let reply = control::request_within(socket, req, Duration::from_secs(24 * 3600))
        .map_err(|e| super::status::no_answer(socket, e))?;
    let (errors, ok): (Vec<&str>, Vec<&str>) = reply.lines().partition(|l| l.starts_with("error: "));
    for line in ok {
        println!("{line}");
    }
    if !errors.is_empty() {
        let errors: Vec<&str> = errors.iter().map(|l| l.trim_start_matches("error: ")).collect();
        bail!("{}: {}", socket.display(), errors.join("; "));
    }
    Ok(ExitCode::SUCCESS)
}
