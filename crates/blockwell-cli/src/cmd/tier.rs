//! The persistent cache device of `serve` and `mount` (`--cache-dev`): its options ([`TierArgs`], also the keys
//! of a config file's `[[export]]`), opening or creating it over an export's backend, and its counters in
//! status lines and Prometheus text.

use super::options::{de, parse_arg, ways, Associativity, Bytes};
use super::serve::Delay;
use anyhow::{anyhow, bail, Context};
use blockwell_cachedev::probe::{probe, Contents};
use blockwell_cachedev::{CacheMode, FormatOptions, Metadata};
use blockwell_core::admission::AdmissionSpec;
use blockwell_core::cleaner::CleanerSpec;
use blockwell_core::policy::{PolicySpec, Preset};
use blockwell_server::backend::Backend;
use blockwell_server::delay::DelayBackend;
use blockwell_server::file::{FileBackend, FileOptions};
use blockwell_server::tier::origin::{hold_refusal, identity, new_nonce, IdentitySource, OriginGuard, Record};
use blockwell_server::tier::target::{data_regions, same_file};
use blockwell_server::tier::{BackendDev, TierBackend, TierConfig, TierSnapshot};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A tier over whatever the export's backend stack is.
pub type Tier = TierBackend<Box<dyn Backend>>;

/// The cache device's defaults, shared with `sim --cache-dev-size` (the simulated tier).
pub const DEFAULT_POLICY: &str = "lru";
pub const DEFAULT_PROMOTE: &str = "always";
pub const DEFAULT_CUTOFF: &str = "4MiB";
pub const DEFAULT_CLEANER: &str = "pi";

/// The persistent cache device (an SSD cache): a cache level on a fast device between the RAM cache
/// and the backend. In a config file, the same keys in the export's table.
#[derive(clap::Args, serde::Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TierArgs {
    /// A persistent cache level on this file or block device, formatted by `blockwell cache format` (with
    /// --cache-dev-size, a file that does not exist yet is created and formatted). `--mode` applies to it:
    /// write-back needs it.
    #[arg(long, value_name = "PATH")]
    pub cache_dev: Option<PathBuf>,

    /// The size of the cache-device file to create when it does not exist (an existing file must have this
    /// size; it is not resized). A start that fails removes the file it created.
    #[arg(long, value_name = "SIZE", value_parser = parse_arg::<DevSize>)]
    pub cache_dev_size: Option<DevSize>,

    /// When the backend was written without the cache device since it last had it, drop the device's dirty
    /// blocks (older than the backend's data) instead of refusing to start; --force keeps them instead.
    #[arg(long)]
    pub discard_stale: bool,

    /// The cache device's replacement policy (any engine policy, with parameters: `lru`, `fifo`, `arc`,
    /// `s3fifo`...).
    #[arg(long, value_name = "POLICY", default_value = DEFAULT_POLICY, value_parser = parse_arg::<PolicySpec>)]
    #[serde(deserialize_with = "de::from_str")]
    pub cache_dev_policy: PolicySpec,

    /// Set associativity of the cache device's policy: sets of N blocks, eviction only within a block's set
    /// (FlashCache's 512-way; see --associativity). Left out: fully associative.
    #[arg(long, value_name = "N", value_parser = parse_arg::<Associativity>)]
    pub cache_dev_associativity: Option<Associativity>,

    /// Which read misses are copied into the cache device: `always`, `n-hit:N` (on a block's N-th miss),
    /// `tinylfu`, `bloom` or `prob:P` (as --admission).
    #[arg(long, value_name = "SPEC", default_value = DEFAULT_PROMOTE, value_parser = parse_arg::<AdmissionSpec>)]
    #[serde(deserialize_with = "de::from_str")]
    pub promote: AdmissionSpec,

    /// Back-to-back runs of at least this many bytes bypass the cache device (bcache's sequential_cutoff);
    /// 0 turns it off. Blocks it already holds are still updated.
    #[arg(long, value_name = "SIZE", default_value = DEFAULT_CUTOFF, value_parser = parse_arg::<Bytes>)]
    pub cache_dev_cutoff: Bytes,

    /// How dirty blocks are written back: `pi` (bcache's rate controller: `pi(percent=10)` keeps about 10 %
    /// dirty), `watermark` (EnhanceIO's thresholds: `watermark(high=30,low=10)`), or `none` (only on eviction,
    /// `blockwell cache flush` and detach).
    #[arg(long, value_name = "SPEC", default_value = DEFAULT_CLEANER, value_parser = parse_arg::<CleanerSpec>)]
    #[serde(deserialize_with = "de::from_str")]
    pub cleaner: CleanerSpec,

    /// The longest a write's metadata waits for a commit when no FLUSH asks for one, in milliseconds.
    #[arg(long, value_name = "MS", default_value = "1000")]
    pub commit_ms: u64,

    /// Emulate a device under the cache device, as `--delay` does under the backend (`ssd`, a disk model).
    #[arg(long, value_name = "SPEC", default_value = "none", value_parser = parse_arg::<Delay>)]
    pub cache_dev_delay: Delay,
}

impl Default for TierArgs {
    fn default() -> Self {
        super::options::defaults()
    }
}

/// The size of a cache device to create (`--cache-dev-size`, `cache format --size`): the bytes, and the text as
/// typed, which errors show.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DevSize {
    pub bytes: u64,
    pub text: String,
}

impl std::str::FromStr for DevSize {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        Ok(DevSize { bytes: super::common::parse_bytes(s)?, text: s.trim().to_string() })
    }
}

super::options::deserialize_from_str!(DevSize);

/// A cache-device file created by this run: removed when dropped, unless [`Created::keep`] was called (a failed
/// start removes exactly what it created, never a file that was there before).
pub struct Created(Option<PathBuf>);

impl Created {
    /// Nothing created.
    pub fn none() -> Created {
        Created(None)
    }

    pub fn is_new(&self) -> bool {
        self.0.is_some()
    }

    /// The file stays.
    pub fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for Created {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Cache-device files this process created for a start that is not finished: removed if it fails.
static STARTING: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

impl Created {
    /// The file stays while the start goes on; [`removing_created`] removes it if the start fails.
    pub fn until_started(mut self) {
        if let Some(p) = self.0.take() {
            STARTING.lock().unwrap_or_else(|e| e.into_inner()).push(p);
        }
    }
}

/// The start succeeded (serving, mounted): the files it created stay.
pub fn started() {
    STARTING.lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// Runs a start (`serve`, `mount`); when it fails before [`started`], removes the cache-device files it
/// created (after everything it opened is closed), and only those.
pub fn removing_created(
    f: impl FnOnce() -> anyhow::Result<std::process::ExitCode>,
) -> anyhow::Result<std::process::ExitCode> {
    let r = f();
    let created = std::mem::take(&mut *STARTING.lock().unwrap_or_else(|e| e.into_inner()));
    if r.is_err() {
        for p in created {
            let _ = std::fs::remove_file(p);
        }
    }
    r
}

/// Creates the cache-device file `path` of `size` (`flag`: the option that gave it, for errors) when it does
/// not exist; checks that an existing one has that size (it is never resized). Without a size, `path` must
/// exist.
pub fn create_if_missing(path: &Path, size: Option<&DevSize>, flag: &str) -> anyhow::Result<Created> {
    match (std::fs::metadata(path), size) {
        (Ok(m), Some(s)) if m.is_file() && m.len() != s.bytes => bail!(
            "{} exists with {} B, and {flag} {} is {} B: an existing file is not resized (give its size, or \
             another path)",
            path.display(),
            m.len(),
            s.text,
            s.bytes
        ),
        (Ok(_), _) => Ok(Created::none()),
        (Err(e), Some(s)) if e.kind() == std::io::ErrorKind::NotFound => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .with_context(|| format!("creating {}", path.display()))?;
            let created = Created(Some(path.to_path_buf()));
            f.set_len(s.bytes).with_context(|| format!("sizing {} to {flag} {}", path.display(), s.text))?;
            Ok(created)
        }
        (Err(e), None) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "{} does not exist (give {flag} to create it, or format a device with `blockwell cache format`)",
            path.display()
        ),
        (Err(e), _) => Err(anyhow!(e).context(path.display().to_string())),
    }
}

/// The identity of the origin at `path` (`stamp`: give a regular file one if it has none).
pub fn origin_identity(
    path: &Path,
    size: u64,
    stamp: bool,
) -> anyhow::Result<(blockwell_cachedev::OriginId, IdentitySource)> {
    let f = std::fs::File::open(path).with_context(|| format!("opening the origin {}", path.display()))?;
    identity(path, &f, size, stamp).with_context(|| format!("the identity of the origin {}", path.display()))
}

/// Before the origin at `path` is opened without a cache device: refuses (unless `force`) while a cache device
/// holds dirty blocks of it, and, when it is opened for writing, replaces its write nonce (durably, before any
/// write) so that its cache devices notice. An origin that never had a cache device attached is left alone.
pub fn guard_alone(path: &Path, writable: bool, force: bool) -> anyhow::Result<()> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let record = Record::locate(path, &f).with_context(|| path.display().to_string())?;
    let Some(mut st) = record.read()? else { return Ok(()) };
    if let Some(why) = st.cache.as_ref().and_then(hold_refusal) {
        if !force {
            bail!("{}: {why}", path.display());
        }
        eprintln!("blockwell: warning: --force: {}: {why}", path.display());
    }
    if writable {
        st.nonce = new_nonce();
        record.write(&st)?;
    }
    Ok(())
}

/// The state record of the origin at `path`, checked and kept by a cache device at `dev`.
pub fn origin_guard(path: &Path, dev: &Path, force: bool, discard_stale: bool) -> anyhow::Result<OriginGuard> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let record = Record::locate(path, &f).with_context(|| path.display().to_string())?;
    let cache_path = std::fs::canonicalize(dev).unwrap_or_else(|_| dev.to_path_buf()).display().to_string();
    Ok(OriginGuard { record, cache_path, force, discard_stale })
}

/// The swapped-arguments mistakes `cache format` refuses without `--force`: formatting an origin that a cache
/// device is attached to or holds dirty blocks of (its state record says so), and taking a Blockwell cache device
/// as the origin.
fn refuse_swapped(dev: &Path, origin: &Path) -> anyhow::Result<()> {
    if let Ok(f) = std::fs::File::open(dev) {
        let hold = Record::locate(dev, &f).ok().and_then(|r| r.read().ok().flatten()).and_then(|st| st.cache);
        if let Some(h) = hold {
            let state = match h.dirty {
                Some(n) => format!("which held {n} dirty block(s) of it at its last clean stop"),
                None => "which is attached to it (in use, or not stopped cleanly)".to_string(),
            };
            bail!(
                "{} is the origin of the cache device {}, {state}: formatting it as a cache device destroys that \
                 origin's data (the arguments swapped? `blockwell cache format CACHE_DEV --origin ORIGIN`; \
                 `--force` overwrites it)",
                dev.display(),
                h.path
            );
        }
    }
    let mut head = [0u8; 8];
    let is_cache = std::fs::File::open(origin)
        .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut head, 0))
        .is_ok_and(|()| head == blockwell_cachedev::MAGIC);
    if is_cache {
        bail!(
            "--origin {} is a Blockwell cache device, not an origin (the arguments swapped? `blockwell cache format \
             CACHE_DEV --origin ORIGIN`; `--force` formats anyway)",
            origin.display()
        );
    }
    Ok(())
}

/// Formats `dev` (a path) as a cache for the origin at `origin` of `origin_size` bytes.
pub fn format(
    dev: &Path,
    origin: &Path,
    origin_size: u64,
    block_size: u64,
    mode: CacheMode,
    force: bool,
) -> anyhow::Result<blockwell_cachedev::Superblock> {
    let (dm, om) = (std::fs::metadata(dev), std::fs::metadata(origin));
    if let (Ok(dm), Ok(om)) = (&dm, &om) {
        if same_file(dm, om) {
            bail!(
                "{} is the origin {} itself: a cache device must be another file or device (formatting it would \
                 destroy the origin's data)",
                dev.display(),
                origin.display()
            );
        }
    }
    if !force {
        refuse_swapped(dev, origin)?;
    }
    let f = FileBackend::open(dev, FileOptions::writable())?;
    let file = f.into_file();
    let d = blockwell_cachedev::FileDev::from_file(file.try_clone().with_context(|| dev.display().to_string())?)
        .with_context(|| format!("opening {}", dev.display()))?;
    if !force && blockwell_cachedev::superblock::current(&d).is_none() {
        let head = {
            let mut b = [0u8; 8];
            let _ = blockwell_cachedev::Dev::read_at(&d, &mut b, 0);
            b
        };
        // A Blockwell cache device (even a damaged one) is named by `Metadata::format`.
        if head != blockwell_cachedev::MAGIC {
            let regions = data_regions(&file, blockwell_cachedev::Dev::size(&d))
                .with_context(|| format!("reading {}", dev.display()))?;
            let found = probe(&d, &regions).with_context(|| format!("reading {}", dev.display()))?;
            let what = match found {
                Contents::Empty => None,
                Contents::Signature(s) => Some(s),
                Contents::Data(at) => Some(format!("data (non-zero bytes at offset {at}) that is not a cache device")),
            };
            if let Some(what) = what {
                bail!(
                    "{} holds {what}; formatting it as a cache device destroys that (`blockwell cache format \
                     --force` overwrites it)",
                    dev.display()
                );
            }
        }
    }
    let (id, _) = origin_identity(origin, origin_size, true)?;
    let path = std::fs::canonicalize(origin).unwrap_or_else(|_| origin.to_path_buf());
    let opts = FormatOptions {
        block_size,
        origin: id,
        origin_path: path.display().to_string(),
        mode,
        journal_blocks: None,
        force,
    };
    Metadata::format(&d, &opts).with_context(|| dev.display().to_string())
}

impl TierArgs {
    /// The tier's configuration for an origin identified by `id` at `origin_path`.
    fn config(
        &self,
        id: blockwell_cachedev::OriginId,
        origin_path: &Path,
        mode: CacheMode,
        preset: Preset,
    ) -> TierConfig {
        let mut c = TierConfig::new(id, origin_path.display().to_string());
        c.mode = mode;
        c.policy = self.cache_dev_policy.clone();
        c.preset = preset;
        c.associativity = ways(self.cache_dev_associativity);
        c.admission = self.promote;
        c.sequential_cutoff = self.cache_dev_cutoff.0;
        c.cleaner = self.cleaner;
        c.commit_interval = Duration::from_millis(self.commit_ms.max(1));
        c
    }

    /// Opens the cache device over `origin` (the backend stack under it; `origin_path` the backend's file),
    /// creating and formatting a missing file when `--cache-dev-size` is given. `key` names options in errors.
    #[allow(clippy::too_many_arguments)] // the export's settings the device does not keep, one by one
    pub fn build(
        &self,
        origin: Box<dyn Backend>,
        origin_path: &Path,
        block_size: u64,
        mode: CacheMode,
        preset: Preset,
        force: bool,
        key: impl Fn(&str) -> String,
    ) -> anyhow::Result<Arc<Tier>> {
        let path = self.cache_dev.as_ref().expect("build is called with a cache device");
        let ctx = || format!("{} {}", key("cache_dev"), path.display());
        let created =
            create_if_missing(path, self.cache_dev_size.as_ref(), &key("cache_dev_size")).with_context(ctx)?;
        let size = origin.size();
        if created.is_new() {
            let small = |e: anyhow::Error| match (e.downcast_ref::<blockwell_cachedev::Error>(), &self.cache_dev_size) {
                (Some(blockwell_cachedev::Error::TooSmall { needed, .. }), Some(s)) => anyhow!(
                    "{} {} is too small for a cache device of {block_size} B blocks: it needs at least {needed} B \
                     ({} KiB)",
                    key("cache_dev_size"),
                    s.text,
                    needed.div_ceil(1024)
                ),
                _ => e,
            };
            format(path, origin_path, size, block_size, mode, false).map_err(small).with_context(ctx)?;
        }
        let (id, source) = origin_identity(origin_path, size, false).with_context(ctx)?;
        let file = FileBackend::open(path, FileOptions::writable()).with_context(ctx)?;
        let dev: Arc<dyn blockwell_cachedev::Dev> = match self.cache_dev_delay.config() {
            None => Arc::new(BackendDev(file)),
            Some(cfg) => Arc::new(BackendDev(DelayBackend::new(file, cfg))),
        };
        let canon = std::fs::canonicalize(origin_path).unwrap_or_else(|_| origin_path.to_path_buf());
        let mut cfg = self.config(id, &canon, mode, preset);
        cfg.origin_guard = Some(origin_guard(origin_path, path, force, self.discard_stale).with_context(ctx)?);
        let tier = TierBackend::open(origin, dev, cfg).map_err(|e| {
            let hint = match (&e, source) {
                (
                    blockwell_server::tier::TierError::Device(blockwell_cachedev::Error::OriginMismatch { .. }),
                    IdentitySource::Path,
                ) => {
                    " (the origin has no user.blockwell.origin attribute: it was copied without extended attributes, \
                     or is another file or device)"
                }
                _ => "",
            };
            anyhow!("{e}{hint}")
        });
        let tier = Arc::new(tier.with_context(ctx)?);
        created.until_started();
        Ok(tier)
    }
}

/// `key value` pairs of a tier's counters for a status line.
pub fn status_fields(t: &TierSnapshot) -> String {
    let mut s = format!("cache_dev {} {}", t.mode, t.policy);
    if let Some(w) = t.associativity {
        let _ = write!(s, " associativity {w}");
    }
    let _ =
        write!(s, " slots {} cached {} dirty {} ({:.1}%)", t.slots, t.cached_blocks, t.dirty_blocks, t.dirty_percent);
    let _ = write!(
        s,
        " read_hits {} read_misses {} write_hits {} write_misses {} dirty_write_hits {} promotions {} demotions {} \
         dirty_evictions {} cleaned {} uncached_reads {} uncached_writes {} dev_errors {} origin_errors {}",
        t.counters.read_hits,
        t.counters.read_misses,
        t.counters.write_hits,
        t.counters.write_misses,
        t.counters.dirty_write_hits,
        t.counters.promotions,
        t.counters.demotions,
        t.counters.dirty_evictions,
        t.counters.cleaned_blocks,
        t.counters.uncached_reads,
        t.counters.uncached_writes,
        t.dev_read_errors + t.dev_write_errors + t.checksum_failures,
        t.origin_read_errors + t.origin_write_errors
    );
    if let Some(d) = &t.degraded {
        let _ = write!(s, " degraded \"{d}\"");
    }
    s
}

/// The series of a metric family for one export: (extra labels, value).
type Series = fn(&TierSnapshot) -> Vec<(&'static str, f64)>;

/// Prometheus families of the tiers' counters: `(name, type, help, series)`.
pub fn metric_families() -> &'static [(&'static str, &'static str, &'static str, Series)] {
    &[
        ("blockwell_cache_dev_block_hits_total", "counter", "Cache-device block hits.", |t| {
            vec![("op=\"read\"", t.counters.read_hits as f64), ("op=\"write\"", t.counters.write_hits as f64)]
        }),
        ("blockwell_cache_dev_block_misses_total", "counter", "Cache-device block misses.", |t| {
            vec![("op=\"read\"", t.counters.read_misses as f64), ("op=\"write\"", t.counters.write_misses as f64)]
        }),
        (
            "blockwell_cache_dev_dirty_blocks",
            "gauge",
            "Dirty blocks on the cache device (data at risk of the device).",
            |t| vec![("", t.dirty_blocks as f64)],
        ),
        ("blockwell_cache_dev_cached_blocks", "gauge", "Blocks on the cache device.", |t| {
            vec![("", t.cached_blocks as f64)]
        }),
        ("blockwell_cache_dev_slots", "gauge", "Data slots of the cache device.", |t| vec![("", t.slots as f64)]),
        (
            "blockwell_cache_dev_promotions_total",
            "counter",
            "Blocks copied from the origin into the cache device.",
            |t| vec![("", t.counters.promotions as f64)],
        ),
        ("blockwell_cache_dev_demotions_total", "counter", "Clean blocks evicted from the cache device.", |t| {
            vec![("", t.counters.demotions as f64)]
        }),
        (
            "blockwell_cache_dev_dirty_evictions_total",
            "counter",
            "Dirty blocks evicted (replaced dirty blocks).",
            |t| vec![("", t.counters.dirty_evictions as f64)],
        ),
        ("blockwell_cache_dev_cleaned_blocks_total", "counter", "Dirty blocks written back to the origin.", |t| {
            vec![("", t.counters.cleaned_blocks as f64)]
        }),
        ("blockwell_cache_dev_dirty_write_hits_total", "counter", "Writes to blocks already dirty (absorbed).", |t| {
            vec![("", t.counters.dirty_write_hits as f64)]
        }),
        (
            "blockwell_cache_dev_uncached_total",
            "counter",
            "Requests that bypassed the cache device (sequential cutoff).",
            |t| {
                vec![
                    ("op=\"read\"", t.counters.uncached_reads as f64),
                    ("op=\"write\"", t.counters.uncached_writes as f64),
                ]
            },
        ),
        ("blockwell_cache_dev_errors_total", "counter", "I/O errors and checksum failures.", |t| {
            vec![
                ("dev=\"cache\",op=\"read\"", t.dev_read_errors as f64),
                ("dev=\"cache\",op=\"write\"", t.dev_write_errors as f64),
                ("dev=\"cache\",op=\"checksum\"", t.checksum_failures as f64),
                ("dev=\"origin\",op=\"read\"", t.origin_read_errors as f64),
                ("dev=\"origin\",op=\"write\"", t.origin_write_errors as f64),
            ]
        }),
        (
            "blockwell_cache_dev_origin_requests_total",
            "counter",
            "Requests the cache device level sent to the origin (write-backs and write-through writes included).",
            |t| {
                vec![
                    ("op=\"read\"", t.counters.origin_reads as f64),
                    ("op=\"write\"", t.counters.origin_writes as f64),
                    ("op=\"zero\"", t.origin_zero_writes as f64),
                    ("op=\"trim\"", t.origin_trims as f64),
                ]
            },
        ),
        (
            "blockwell_cache_dev_origin_bytes_total",
            "counter",
            "Bytes moved between the cache device level and the origin.",
            |t| {
                vec![
                    ("op=\"read\"", t.counters.origin_read_bytes as f64),
                    ("op=\"write\"", t.counters.origin_write_bytes as f64),
                    ("op=\"zero\"", t.origin_bytes_zeroed as f64),
                    ("op=\"trim\"", t.origin_bytes_trimmed as f64),
                ]
            },
        ),
        ("blockwell_cache_dev_commits_total", "counter", "Metadata commits.", |t| vec![("", t.commits as f64)]),
        ("blockwell_cache_dev_degraded", "gauge", "1 once the cache device is no longer trusted.", |t| {
            vec![("", f64::from(u8::from(t.degraded.is_some())))]
        }),
    ]
}
