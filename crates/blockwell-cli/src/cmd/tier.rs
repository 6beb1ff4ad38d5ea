//! The persistent cache device of `serve` and `mount` (`--cache-dev`): its options ([`TierArgs`], also the keys
//! of a config file's `[[export]]`), opening or creating it over an export's backend, and its counters in
//! status lines and Prometheus text.

use super::options::{de, parse_arg, ways, Associativity, Bytes};
use super::serve::Delay;
use anyhow::{anyhow, bail, Context};
use blockwell_cachedev::{CacheMode, FormatOptions, Metadata};
use blockwell_core::admission::AdmissionSpec;
use blockwell_core::cleaner::CleanerSpec;
use blockwell_core::policy::{PolicySpec, Preset};
use blockwell_server::backend::Backend;
use blockwell_server::delay::DelayBackend;
use blockwell_server::file::{FileBackend, FileOptions};
use blockwell_server::tier::origin::{identity, IdentitySource};
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

    /// The size of the cache-device file to create when it does not exist.
    #[arg(long, value_name = "SIZE", value_parser = parse_arg::<Bytes>)]
    pub cache_dev_size: Option<Bytes>,

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

/// Creates (when `size` is given and `path` does not exist) or checks the cache-device file.
fn create_if_missing(path: &Path, size: Option<u64>) -> anyhow::Result<bool> {
    match (std::fs::metadata(path), size) {
        (Ok(m), Some(s)) if m.is_file() && m.len() != s => {
            bail!("{} exists with {} B; --cache-dev-size {s} differs", path.display(), m.len())
        }
        (Ok(_), _) => Ok(false),
        (Err(e), Some(s)) if e.kind() == std::io::ErrorKind::NotFound => {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .with_context(|| format!("creating {}", path.display()))?;
            f.set_len(s).with_context(|| format!("sizing {}", path.display()))?;
            Ok(true)
        }
        (Err(e), None) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "{} does not exist (give --cache-dev-size to create it, or format a device with `blockwell cache \
             format`)",
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

/// Formats `dev` (a path) as a cache for the origin at `origin` of `origin_size` bytes.
pub fn format(
    dev: &Path,
    origin: &Path,
    origin_size: u64,
    block_size: u64,
    mode: CacheMode,
    force: bool,
) -> anyhow::Result<blockwell_cachedev::Superblock> {
    let (id, _) = origin_identity(origin, origin_size, true)?;
    let f = FileBackend::open(dev, FileOptions::writable())?;
    let d =
        blockwell_cachedev::FileDev::from_file(f.into_file()).with_context(|| format!("opening {}", dev.display()))?;
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
    pub fn build(
        &self,
        origin: Box<dyn Backend>,
        origin_path: &Path,
        block_size: u64,
        mode: CacheMode,
        preset: Preset,
        key: impl Fn(&str) -> String,
    ) -> anyhow::Result<Arc<Tier>> {
        let path = self.cache_dev.as_ref().expect("build is called with a cache device");
        let ctx = || format!("{} {}", key("cache_dev"), path.display());
        let created = create_if_missing(path, self.cache_dev_size.map(|b| b.0)).with_context(ctx)?;
        let size = origin.size();
        if created {
            format(path, origin_path, size, block_size, mode, false).with_context(ctx)?;
        }
        let (id, source) = origin_identity(origin_path, size, false).with_context(ctx)?;
        let file = FileBackend::open(path, FileOptions::writable()).with_context(ctx)?;
        let dev: Arc<dyn blockwell_cachedev::Dev> = match self.cache_dev_delay.config() {
            None => Arc::new(BackendDev(file)),
            Some(cfg) => Arc::new(BackendDev(DelayBackend::new(file, cfg))),
        };
        let canon = std::fs::canonicalize(origin_path).unwrap_or_else(|_| origin_path.to_path_buf());
        let tier = TierBackend::open(origin, dev, self.config(id, &canon, mode, preset)).map_err(|e| {
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
        Ok(Arc::new(tier.with_context(ctx)?))
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
        ("blockwell_cache_dev_commits_total", "counter", "Metadata commits.", |t| vec![("", t.commits as f64)]),
        ("blockwell_cache_dev_degraded", "gauge", "1 once the cache device is no longer trusted.", |t| {
            vec![("", f64::from(u8::from(t.degraded.is_some())))]
        }),
    ]
}
