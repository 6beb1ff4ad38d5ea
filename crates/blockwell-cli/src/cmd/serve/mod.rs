//! `blockwell serve`: RAM caches in front of files or block devices, served over NBD.
//!
//! The layers of one export, bottom up: the file backend (positional I/O, fdatasync, hole punching), an
//! optional slow-disk emulator (`delay`), an optional RAM cache driven by the same engine as `blockwell sim`
//! (`cache`) or content-based cache (`content`, one cache that several exports can share), and the NBD server.
//! One export comes from the flags; several from `--config FILE` (TOML, see `docs/serve.md`). Both describe an
//! export's layers with one [`StackArgs`] (its cache options are the [`CacheArgs`] and [`AdmitArgs`] that `sim`
//! takes too), and a shared content cache with one [`ContentArgs`]; a config file deserialises into these same
//! types, one key per flag.
//!
//! Around the server: an optional control socket (`--control`, read by `blockwell status`), an optional
//! loopback Prometheus endpoint (`--metrics`), and one log line per event on stderr (`--log-format`).
//! SIGHUP reloads the TLS certificates and the config file's exports (`reload`); SIGINT or SIGTERM stops
//! accepting, drains in-flight requests, flushes, prints the counters and exits 0.

use super::options::{
    de, defaults, deserialize_from_str, parse_arg, AdmitArgs, BlockSize, CacheArgs, FixedSize, Fraction, One,
};
use super::tier::{Tier, TierArgs};
use anyhow::{anyhow, bail, Context};
use blockwell_cachedev::CacheMode;
use blockwell_core::admission::AdmissionSpec;
use blockwell_core::dedup::Category;
use blockwell_core::policy::{PolicySpec, Preset};
use blockwell_core::prefetch::PrefetcherKind;
use blockwell_server::backend::Backend;
use blockwell_server::cache::{CachedBackend, CachedConfig, WriteMode};
use blockwell_server::claim::Claim;
use blockwell_server::content::{ContentBackend, ContentConfig, ContentSnapshot, ContentStore};
use blockwell_server::control::{self, Request};
use blockwell_server::delay::{DelayBackend, DelayConfig, DelayStats};
use blockwell_server::file::{FileBackend, FileOptions};
use blockwell_server::nbd::proto::TlsMode;
use blockwell_server::nbd::{tls, ConnEvent, Export, Scheduling, Server, ServerConfig, DEFAULT_BUSY_POLL};
use blockwell_server::stats::{CountedBackend, RequestSnapshot, StatsSnapshot};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;
use toml::de::{DeString, DeTable, DeValue};
use toml::Spanned;
use tracing::{info, warn};

mod log;
mod reload;
use log::Json;
pub use log::{LogFormat, LogLevel};

/// The layer stack of one export: backend, slow-disk emulation, RAM cache. The flags of `blockwell serve`
/// (and of any command serving one cached device) and the keys of an `[[export]]` table in a config file.
#[derive(clap::Args, serde::Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct StackArgs {
    /// The file or block device to cache and serve.
    #[arg(long, value_name = "PATH")]
    pub backend: Option<PathBuf>,

    /// Open the backend with O_DIRECT (bypass the page cache; I/O goes through aligned bounce buffers).
    #[arg(long)]
    pub direct: bool,

    // The RAM cache (`--cache 0`: none). In a config file, the same keys in the export's table.
    #[command(flatten)]
    #[serde(skip)]
    pub cache: CacheArgs<One>,

    #[command(flatten)]
    #[serde(skip)]
    pub admit: AdmitArgs,

    // The persistent cache device. In a config file, the same keys in the export's table.
    #[command(flatten)]
    #[serde(skip)]
    pub tier: TierArgs,

    /// Write mode: write-through (a write is acknowledged once the backend has it; FLUSH and FUA reach the
    /// backend as fdatasync), write-around (writes go to the backend and drop cached copies), read-only, or
    /// write-back (with --cache-dev: a write is acknowledged once the cache device has it; FLUSH makes it and
    /// the metadata that finds it durable there; the cleaner writes it to the backend later).
    #[arg(long, value_name = "MODE", default_value = "write-through", value_parser = parse_arg::<CacheMode>)]
    #[serde(deserialize_with = "de::from_str")]
    pub mode: CacheMode,

    /// Emulate a slow device under the cache: `hdd` (8 ms + 100 MB/s per request, one head), `ssd`, a disk
    /// model of `blockwell disk list` (`wd1200bb`, `hdd-004`, `ssd-004`, `sata-ssd`...: seek, rotation, on-disk
    /// buffer, command queueing, SSD channels, on the model's own timeline), or `none`. With a fast model, also
    /// give --sched normal (sleeping requests are woken on time).
    #[arg(long, value_name = "SPEC", default_value = "none", value_parser = parse_arg::<Delay>)]
    pub delay: Delay,

    /// Refuse writes (the export is advertised read-only).
    #[arg(long)]
    pub read_only: bool,

    /// Serve the backend although a cache device holds dirty blocks of it (the backend's data there is stale,
    /// and writing it makes those blocks stale in turn); with --cache-dev, also keep that device's dirty blocks
    /// although the backend was written without it since (they are served and written back over the newer
    /// data; --discard-stale drops them instead).
    #[arg(long)]
    pub force: bool,

    /// With --read-only: share the backend with other readers (a shared lock) instead of claiming it alone.
    /// Without it, a backend is claimed exclusively: a second server, mount or export on the same file or
    /// device is refused, naming the holder.
    #[arg(long)]
    pub shared: bool,

    /// Content-based cache (Morrey & Grunwald, "Content-Based Block Caching"): the `--cache` budget holds one copy of each distinct
    /// block content, shared by every address holding it; a hash match is confirmed by a full byte comparison,
    /// and a write of the bytes already cached at that address (a silent write) is not sent to the backend.
    /// Takes --cache, --block-size, --policy, --preset and --hash-fraction; write-through or read-only; no
    /// --prefetch, --admission or --sequential-cutoff. In a config file, exports share one content cache.
    #[arg(long)]
    pub content: bool,

    /// With --content: the size of the content hash table as a fraction of --cache, charged against it (`1/64`
    /// or `0.015625`; the paper's default).
    #[arg(long, value_name = "FRACTION", default_value = "1/64", value_parser = parse_arg::<Fraction>)]
    pub hash_fraction: Fraction,

    /// Name options as config-file keys (`cache`) rather than flags (`--cache`) in errors.
    #[arg(skip)]
    #[serde(skip)]
    pub toml_keys: bool,
}

/// A slow-disk emulation (`--delay`): `none`, `hdd`, `ssd` or a disk model; checked when parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct Delay(String);

impl FromStr for Delay {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let s = s.trim();
        if s != "none" {
            if let Err(e) = DelayConfig::parse(s) {
                bail!("{e} (or hdd, ssd: a fixed latency + bandwidth; none)");
            }
        }
        Ok(Delay(s.to_string()))
    }
}

impl Delay {
    /// The emulator's configuration, or `None` for `none`.
    pub fn config(&self) -> Option<DelayConfig> {
        (self.0 != "none").then(|| DelayConfig::parse(&self.0).expect("checked when parsed"))
    }
}

/// `--busy-poll-us` / `busy_poll_us`: microseconds, up to one second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BusyPollUs(u64);

/// An integer from `lo` to `hi`, or the error every such flag and key gives.
fn int_in(s: &str, lo: u64, hi: u64) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(format!("must be an integer from {lo} to {hi}, not {s}")),
    }
}

impl FromStr for BusyPollUs {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        int_in(s, 0, MAX_BUSY_POLL_US).map(BusyPollUs)
    }
}

/// `--sched` / `sched`: one of [`SCHED_NAMES`].
#[derive(Clone, Copy, Debug, PartialEq)]
struct Sched(Scheduling);

impl FromStr for Sched {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_sched(s).map(Sched).ok_or_else(|| format!("must be \"batch\" or \"normal\", not {s:?}"))
    }
}

/// `--handshake-timeout`, `--idle-timeout`, `--shutdown-timeout` and their config keys: seconds (a decimal),
/// from 0 to one day; 0 turns the handshake and idle limits off.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Seconds(f64);

impl Seconds {
    /// The duration, or None for 0.
    fn limit(self) -> Option<Duration> {
        (self.0 > 0.0).then(|| Duration::from_secs_f64(self.0))
    }
}

impl FromStr for Seconds {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().parse::<f64>() {
            Ok(x) if (0.0..=86_400.0).contains(&x) => Ok(Seconds(x)),
            _ => Err(format!("must be a number of seconds from 0 to 86400, not {s}")),
        }
    }
}

/// `--max-connections` / `max_connections`: 1 to 65536.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MaxConnections(usize);

impl FromStr for MaxConnections {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        int_in(s, 1, 65_536).map(|n| MaxConnections(n as usize))
    }
}

/// `--socket-mode` / `socket_mode`: the NBD Unix socket's file mode, in octal (`0600`, `660`).
#[derive(Clone, Copy, Debug, PartialEq, serde::Deserialize)]
#[serde(try_from = "String")]
pub struct SocketMode(u32);

impl FromStr for SocketMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let digits = t.strip_prefix("0o").unwrap_or(t);
        match u32::from_str_radix(digits, 8) {
            Ok(m) if (3..=4).contains(&digits.len()) && m <= 0o777 => Ok(SocketMode(m)),
            _ => Err(format!("must be an octal file mode from 000 to 0777, such as 0660, not {s:?}")),
        }
    }
}

impl TryFrom<String> for SocketMode {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

/// `--tls` / `tls`: off, on or require (nbdkit's `--tls`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TlsArg(TlsMode);

impl FromStr for TlsArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "off" => Ok(TlsArg(TlsMode::Off)),
            "on" => Ok(TlsArg(TlsMode::On)),
            "require" => Ok(TlsArg(TlsMode::Require)),
            _ => Err(format!("must be off, on or require, not {s:?}")),
        }
    }
}

deserialize_from_str!(Delay, BusyPollUs, Sched, Seconds, MaxConnections, TlsArg);

/// Handles on the counters of a built stack.
#[derive(Clone)]
pub struct StackStats {
    pub cache: Option<Arc<CachedBackend<Box<dyn Backend>>>>,
    pub content: Option<Arc<ContentBackend<Box<dyn Backend>>>>,
    pub delay: Option<Arc<DelayBackend<FileBackend>>>,
    /// The persistent cache device, when there is one.
    pub tier: Option<Arc<Tier>>,
    /// Without a RAM or content cache: the requests counted on their way down.
    pub requests: Option<Arc<CountedBackend<Box<dyn Backend>>>>,
}

impl StackStats {
    /// The cache device's counters.
    pub fn tier(&self) -> Option<blockwell_server::tier::TierSnapshot> {
        self.tier.as_ref().map(|t| t.snapshot())
    }

    /// The cache's counters (for a content export: its counters in the same shape).
    pub fn snapshot(&self) -> Option<StatsSnapshot> {
        match (&self.cache, &self.content) {
            (Some(c), _) => Some(c.snapshot()),
            (None, Some(c)) => Some(c.snapshot()),
            (None, None) => None,
        }
    }

    /// A content export's Table 1 counters and the shared cache's.
    pub fn content(&self) -> Option<ContentSnapshot> {
        self.content.as_ref().map(|c| c.content_snapshot())
    }

    pub fn delay(&self) -> Option<DelayStats> {
        self.delay.as_ref().map(|d| d.stats())
    }

    /// The requests of an export without a RAM or content cache.
    pub fn requests(&self) -> Option<RequestSnapshot> {
        self.requests.as_ref().map(|r| r.snapshot())
    }
}

impl Default for StackArgs {
    /// The flags' defaults (defined once, on the flags).
    fn default() -> Self {
        defaults()
    }
}

impl StackArgs {
    /// How an option is named in errors: `--block-size` or `block_size`.
    fn key(&self, k: &str) -> String {
        option_key(self.toml_keys, k)
    }

    /// The write mode, from `mode` and `read_only` together.
    pub fn write_mode(&self) -> CacheMode {
        if self.read_only {
            CacheMode::ReadOnly
        } else {
            self.mode
        }
    }

    /// What the RAM cache does with writes: under a write-back cache device, write-through into it.
    fn ram_mode(mode: CacheMode) -> WriteMode {
        match mode {
            CacheMode::WriteBack | CacheMode::WriteThrough => WriteMode::WriteThrough,
            CacheMode::WriteAround => WriteMode::WriteAround,
            CacheMode::ReadOnly => WriteMode::ReadOnly,
        }
    }

    /// The content cache's settings from these options (one export served from the flags).
    pub fn content_args(&self) -> ContentArgs {
        ContentArgs {
            cache: self.cache.cache,
            block_size: self.cache.block_size,
            policy: self.cache.policy.clone(),
            preset: self.cache.preset,
            hash_fraction: self.hash_fraction,
            toml_keys: self.toml_keys,
        }
    }

    /// Checks the options that content mode cannot take. With flags, also the content cache's own settings (in a
    /// config file, the `[content]` table has them).
    fn check_content(&self) -> anyhow::Result<()> {
        if !self.content {
            if self.hash_fraction != StackArgs::default().hash_fraction {
                bail!("{} needs {}", self.key("hash_fraction"), self.key("content"));
            }
            return Ok(());
        }
        let content = self.key("content");
        let why = "the content cache does not implement it";
        if self.cache.prefetch.kind != PrefetcherKind::NoPrefetch {
            bail!(
                "{} cannot be combined with {content} ({why}); use {} none",
                self.key("prefetch"),
                self.key("prefetch")
            );
        }
        if self.admit.admission != AdmissionSpec::Always {
            bail!("{} cannot be combined with {content} ({why})", self.key("admission"));
        }
        if self.cache.associativity.is_some() {
            bail!("{} cannot be combined with {content} ({why})", self.key("associativity"));
        }
        if self.admit.sequential_cutoff.0 != 0 {
            bail!("{} cannot be combined with {content} ({why})", self.key("sequential_cutoff"));
        }
        if matches!(self.write_mode(), CacheMode::WriteAround | CacheMode::WriteBack) {
            bail!(
                "{} {} cannot be combined with {content} (write-through or read-only)",
                self.key("mode"),
                self.write_mode()
            );
        }
        if self.tier.cache_dev.is_some() {
            bail!("{} cannot be combined with {content}", self.key("cache_dev"));
        }
        if !self.toml_keys {
            self.content_args().config()?;
        }
        Ok(())
    }

    /// Checks the options together without opening anything (each was checked when parsed).
    pub fn check(&self) -> anyhow::Result<()> {
        self.check_content()?;
        if self.cache.policy.kind.needs_next_use() {
            bail!(
                "{} {}: the policy needs the future (next-use times), which a live cache does not have; it runs in \
                 `blockwell sim`",
                self.key("policy"),
                self.cache.policy.label()
            );
        }
        if self.shared && self.write_mode() != CacheMode::ReadOnly {
            bail!(
                "{} needs {} (only readers share a backend; a writer claims it alone)",
                self.key("shared"),
                self.key("read_only")
            );
        }
        if self.force && self.tier.discard_stale {
            bail!(
                "{} and {} contradict each other (keep a cache device's stale dirty blocks, or drop them)",
                self.key("force"),
                self.key("discard_stale")
            );
        }
        if self.tier.cache_dev.is_none() {
            if self.write_mode() == CacheMode::WriteBack {
                bail!(
                    "{} write-back needs {} (a RAM cache would lose acknowledged writes in a crash)",
                    self.key("mode"),
                    self.key("cache_dev")
                );
            }
            if self.tier.cache_dev_size.is_some() {
                bail!("{} needs {}", self.key("cache_dev_size"), self.key("cache_dev"));
            }
            if self.tier.cache_dev_associativity.is_some() {
                bail!("{} needs {}", self.key("cache_dev_associativity"), self.key("cache_dev"));
            }
            if self.tier.discard_stale {
                bail!("{} needs {}", self.key("discard_stale"), self.key("cache_dev"));
            }
        }
        if !self.content
            && self.cache.associativity.is_some()
            && self.cache.cache.bytes(self.cache.block_size.get()) == 0
        {
            bail!(
                "{} needs a RAM cache ({} is 0){}",
                self.key("associativity"),
                self.key("cache"),
                if self.tier.cache_dev.is_some() {
                    format!("; the cache device's is {}", self.key("cache_dev_associativity"))
                } else {
                    String::new()
                }
            );
        }
        Ok(())
    }

    /// The cache's configuration, or `None` for `cache = 0`.
    fn cache_config(&self, mode: CacheMode) -> Option<CachedConfig> {
        let mode = Self::ram_mode(mode);
        let block_size = self.cache.block_size.get();
        let capacity_bytes = self.cache.cache.bytes(block_size);
        (capacity_bytes != 0).then(|| CachedConfig {
            block_size,
            capacity_bytes,
            policy: self.cache.policy.clone(),
            preset: self.cache.preset,
            mode,
            admission: self.admit.admission,
            sequential_cutoff: self.admit.sequential_cutoff.0,
            prefetch: self.cache.prefetch.clone(),
            associativity: self.cache.ways(),
        })
    }

    /// Opens the backend and builds the layers: the backend to serve and, with a delay or a cache, handles on
    /// their counters. With `--content`, a content cache of its own.
    pub fn build(&self) -> anyhow::Result<(Arc<dyn Backend>, Option<StackStats>)> {
        self.build_in(None)
    }

    /// Like [`StackArgs::build`]; a content export joins `store` when given (a config file's shared cache).
    pub fn build_in(
        &self,
        store: Option<&Arc<ContentStore>>,
    ) -> anyhow::Result<(Arc<dyn Backend>, Option<StackStats>)> {
        let mode = self.write_mode();
        self.check()?;
        let path = self.backend.as_ref().ok_or_else(|| anyhow!("{} is required", self.key("backend")))?;
        let read_only = mode == CacheMode::ReadOnly;
        let claim = if self.shared { Claim::Shared } else { Claim::Exclusive };
        let file = FileBackend::open(path, FileOptions { read_only, direct: self.direct, claim })
            .with_context(|| self.key("backend"))?;
        if self.tier.cache_dev.is_none() {
            super::tier::guard_alone(path, !read_only, self.force).with_context(|| self.key("backend"))?;
        }
        let (lower, delay): (Box<dyn Backend>, _) = match self.delay.config() {
            None => (Box::new(file), None),
            Some(cfg) => {
                let d = Arc::new(DelayBackend::new(file, cfg));
                (Box::new(d.clone()), Some(d))
            }
        };
        let (lower, tier): (Box<dyn Backend>, _) = match &self.tier.cache_dev {
            None => (lower, None),
            Some(_) => {
                let t = self.tier.build(
                    lower,
                    path,
                    self.cache.block_size.get(),
                    mode,
                    self.cache.preset,
                    self.force,
                    |k| self.key(k),
                )?;
                (Box::new(t.clone()), Some(t))
            }
        };
        if self.content {
            let store = match store {
                Some(s) => s.clone(),
                None => self.content_args().build()?,
            };
            let c = Arc::new(store.attach(lower, read_only).with_context(|| self.key("content"))?);
            return Ok((c.clone(), Some(StackStats { cache: None, content: Some(c), delay, tier, requests: None })));
        }
        let Some(config) = self.cache_config(mode) else {
            // No cache to count the requests: a layer counts them.
            let counted = Arc::new(CountedBackend::new(lower));
            let stats = StackStats { cache: None, content: None, delay, tier, requests: Some(counted.clone()) };
            return Ok((counted, Some(stats)));
        };
        let cached = Arc::new(CachedBackend::new(lower, config).with_context(|| self.key("cache"))?);
        Ok((cached.clone(), Some(StackStats { cache: Some(cached), content: None, delay, tier, requests: None })))
    }
}

/// The settings of a content cache: from the flags (`--content`) or a config file's `[content]` table, which
/// every export with `content = true` shares. The keys are the flags' (the same types, the same defaults).
#[derive(serde::Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ContentArgs {
    pub cache: FixedSize,
    pub block_size: BlockSize,
    #[serde(deserialize_with = "de::from_str")]
    pub policy: PolicySpec,
    #[serde(deserialize_with = "de::from_str")]
    pub preset: Preset,
    pub hash_fraction: Fraction,
    /// Name options as config-file keys.
    #[serde(skip)]
    pub toml_keys: bool,
}

impl Default for ContentArgs {
    /// The flags' defaults.
    fn default() -> Self {
        StackArgs::default().content_args()
    }
}

/// How an option is named in errors: the TOML key (`block_size`) for a config file, else the flag
/// (`--block-size`).
fn option_key(toml_keys: bool, k: &str) -> String {
    if toml_keys {
        k.to_string()
    } else {
        format!("--{}", k.replace('_', "-"))
    }
}

impl ContentArgs {
    fn key(&self, k: &str) -> String {
        option_key(self.toml_keys, k)
    }

    /// The content cache's configuration, checked (the budget leaves at least one slot, the policy is online).
    pub fn config(&self) -> anyhow::Result<ContentConfig> {
        let block_size = self.block_size.get();
        let cache_bytes = self.cache.bytes(block_size);
        if cache_bytes == 0 {
            bail!("{}: a content cache needs a size (e.g. 64MiB), not 0", self.key("cache"));
        }
        let policy = self.policy.clone();
        if policy.kind.needs_next_use() {
            bail!(
                "{}: policy '{}' needs next-use times, which a live content cache does not have",
                self.key("policy"),
                policy.label()
            );
        }
        let hash_fraction = self.hash_fraction.0;
        let c = ContentConfig { block_size, capacity_bytes: cache_bytes, hash_fraction, policy, preset: self.preset };
        blockwell_core::dedup::DedupConfig {
            block_size,
            capacity_bytes: cache_bytes,
            hash_fraction,
            ..Default::default()
        }
        .check()
        .with_context(|| self.key("cache"))?;
        Ok(c)
    }

    /// Builds the content cache.
    pub fn build(&self) -> anyhow::Result<Arc<ContentStore>> {
        let c = self.config()?;
        ContentStore::new(c).with_context(|| self.key("policy"))
    }
}

/// One export: its NBD name and description, and its layers.
#[derive(Clone, Debug, PartialEq)]
pub struct ExportConfig {
    pub name: String,
    pub description: Option<String>,
    pub stack: StackArgs,
}

/// The names `--sched` and `sched` take.
const SCHED_NAMES: [&str; 2] = ["batch", "normal"];

/// `--sched`: one of [`SCHED_NAMES`] (listed in the help and the error), as a [`Scheduling`].
fn sched_parser() -> impl clap::builder::TypedValueParser<Value = Scheduling> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(SCHED_NAMES)
        .map(|s| parse_sched(&s).expect("clap admits only SCHED_NAMES"))
}

/// A connection scheduling policy by name (one of [`SCHED_NAMES`]).
fn parse_sched(name: &str) -> Option<Scheduling> {
    match name {
        "batch" => Some(Scheduling::Batch),
        "normal" => Some(Scheduling::Normal),
        _ => None,
    }
}

/// Everything `blockwell serve` runs, from the flags or a config file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServeConfig {
    pub listen: Option<String>,
    pub unix: Option<PathBuf>,
    /// The mode of the `unix` socket (`socket_mode`; None: 0600).
    pub socket_mode: Option<SocketMode>,
    pub control: Option<PathBuf>,
    pub metrics: Option<String>,
    /// Busy polling for the next request, in microseconds (`busy_poll_us`; None: the server's default).
    pub busy_poll_us: Option<u64>,
    /// The connection threads' scheduling policy (`sched`; None: the server's default).
    pub sched: Option<Scheduling>,
    /// Connection limits (`max_connections`, `handshake_timeout`, `idle_timeout`, `shutdown_timeout`; None:
    /// the server's defaults).
    pub max_connections: Option<usize>,
    pub handshake_timeout: Option<Seconds>,
    pub idle_timeout: Option<Seconds>,
    pub shutdown_timeout: Option<Seconds>,
    /// TLS (`tls`, `tls_certificates`, `tls_verify_peer`), listing (`list`), the default export
    /// (`default_export`) and plain TCP beyond loopback (`allow_insecure_listen`).
    pub tls: Option<TlsArg>,
    pub tls_certificates: Option<PathBuf>,
    pub tls_verify_peer: bool,
    pub list: Option<bool>,
    pub default_export: Option<String>,
    pub allow_insecure_listen: bool,
    /// Where to write the server's PID once it is ready (`pidfile`).
    pub pidfile: Option<PathBuf>,
    /// The content cache shared by the exports with `content = true` (from `[content]`, or from the flags).
    pub content: Option<ContentArgs>,
    pub exports: Vec<ExportConfig>,
}

impl ServeConfig {
    /// The TLS mode (off unless given).
    fn tls_mode(&self) -> TlsMode {
        self.tls.map_or(TlsMode::Off, |t| t.0)
    }

    /// Checks the network options together: TLS needs certificates (and they need TLS), the default export
    /// exists, and a TCP address beyond loopback needs `--tls require` or `--allow-insecure-listen`.
    fn check_network(&self) -> anyhow::Result<()> {
        let mode = self.tls_mode();
        if mode != TlsMode::Off && self.tls_certificates.is_none() {
            bail!("--tls {} needs --tls-certificates DIR (server-cert.pem, server-key.pem)", tls_name(mode));
        }
        if mode == TlsMode::Off && (self.tls_certificates.is_some() || self.tls_verify_peer) {
            bail!("--tls-certificates and --tls-verify-peer need --tls on or --tls require");
        }
        if let Some(d) = &self.default_export {
            if !self.exports.iter().any(|e| &e.name == d) {
                bail!("--default-export {d:?}: no export has that name");
            }
        }
        if self.unix.is_none() {
            let addr = self.listen_addr()?;
            self.check_reach(addr, &format!("--listen {addr}"))?;
        }
        Ok(())
    }

    /// The TCP address to listen on (`--listen`, by default 127.0.0.1:10809).
    fn listen_addr(&self) -> anyhow::Result<SocketAddr> {
        let listen = self.listen.as_deref().unwrap_or("127.0.0.1:10809");
        listen.parse().map_err(|_| anyhow!("--listen: '{listen}' is not an address:port"))
    }

    /// A TCP address beyond loopback needs `--tls require` or `--allow-insecure-listen`; `what` names where the
    /// address comes from.
    fn check_reach(&self, addr: SocketAddr, what: &str) -> anyhow::Result<()> {
        if !addr.ip().is_loopback() && self.tls_mode() != TlsMode::Require && !self.allow_insecure_listen {
            bail!(
                "{what} is beyond this machine: without --tls require anyone who can reach it can read and write \
                 the exports; give --tls require with --tls-certificates, or --allow-insecure-listen"
            );
        }
        Ok(())
    }
}

fn tls_name(m: TlsMode) -> &'static str {
    match m {
        TlsMode::Off => "off",
        TlsMode::On => "on",
        TlsMode::Require => "require",
    }
}

/// Largest `--busy-poll-us` / `busy_poll_us` (one second).
const MAX_BUSY_POLL_US: u64 = 1_000_000;

/// The top-level keys of a config file, beside the `[content]` table and the `[[export]]` tables.
#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct TopKeys {
    listen: Option<String>,
    unix: Option<PathBuf>,
    socket_mode: Option<SocketMode>,
    control: Option<PathBuf>,
    metrics: Option<String>,
    busy_poll_us: Option<BusyPollUs>,
    sched: Option<Sched>,
    max_connections: Option<MaxConnections>,
    handshake_timeout: Option<Seconds>,
    idle_timeout: Option<Seconds>,
    shutdown_timeout: Option<Seconds>,
    tls: Option<TlsArg>,
    tls_certificates: Option<PathBuf>,
    tls_verify_peer: bool,
    list: Option<bool>,
    default_export: Option<String>,
    allow_insecure_listen: bool,
    pidfile: Option<PathBuf>,
}

/// The keys of an `[[export]]` table beside its layers ([`StackArgs`], [`CacheArgs`], [`AdmitArgs`]).
#[derive(serde::Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
struct ExportKeys {
    name: Option<String>,
    description: Option<String>,
}

impl ServeConfig {
    /// Reads a TOML config file. Every error is one line naming the file (with the line and column where the
    /// text is at fault), the table or export, and the key.
    pub fn load(path: &Path) -> anyhow::Result<ServeConfig> {
        let text = std::fs::read_to_string(path).with_context(|| format!("--config {}", path.display()))?;
        let base = path.parent().unwrap_or(Path::new("."));
        Self::parse(&text, &path.display().to_string(), base)
    }

    /// Parses config text; `file` names it in errors, relative backend and socket paths are taken from `base`.
    pub fn parse(text: &str, file: &str, base: &Path) -> anyhow::Result<ServeConfig> {
        let at = |e: KeyError, table: &str| e.locate(file, text, table);
        let root = DeTable::parse(text).map_err(|e| at(KeyError::from(e), ""))?;
        let mut top = Table::new(root.span(), root.into_inner());
        let content = top.remove("content");
        let exports = top.remove("export");
        let keys: TopKeys = top.take().and_then(|k| top.finish().map(|()| k)).map_err(|e| at(e, ""))?;
        let mut cfg = ServeConfig {
            listen: keys.listen,
            unix: keys.unix.map(|p| base.join(p)),
            socket_mode: keys.socket_mode,
            control: keys.control.map(|p| base.join(p)),
            metrics: keys.metrics,
            busy_poll_us: keys.busy_poll_us.map(|b| b.0),
            sched: keys.sched.map(|s| s.0),
            max_connections: keys.max_connections.map(|m| m.0),
            handshake_timeout: keys.handshake_timeout,
            idle_timeout: keys.idle_timeout,
            shutdown_timeout: keys.shutdown_timeout,
            tls: keys.tls,
            tls_certificates: keys.tls_certificates.map(|p| base.join(p)),
            tls_verify_peer: keys.tls_verify_peer,
            list: keys.list,
            default_export: keys.default_export,
            allow_insecure_listen: keys.allow_insecure_listen,
            pidfile: keys.pidfile.map(|p| base.join(p)),
            ..ServeConfig::default()
        };
        if let Some(v) = content {
            let mut t = Table::of(v, "'content' must be a table ([content])").map_err(|e| at(e, ""))?;
            let mut c: ContentArgs = t.take().and_then(|c| t.finish().map(|()| c)).map_err(|e| at(e, "[content]"))?;
            c.toml_keys = true;
            c.config().with_context(|| format!("{file}: [content]"))?;
            cfg.content = Some(c);
        }
        let exports = match exports.map(|v| (v.span(), v.into_inner())) {
            None => bail!("{file}: no [[export]] tables"),
            Some((_, DeValue::Array(a))) => a,
            Some((span, _)) => {
                let e = KeyError::at(span, "'export' must be an array of tables ([[export]])");
                return Err(at(e, ""));
            }
        };
        let content_keys = fields_of::<ContentArgs>();
        let mut names = HashSet::new();
        for (i, e) in exports.into_iter().enumerate() {
            let numbered = format!("export #{}", i + 1);
            let mut t = Table::of(e, "not a table").map_err(|e| at(e, &numbered))?;
            let keys: ExportKeys = t.take().map_err(|e| at(e, &numbered))?;
            let name = match keys.name {
                Some(n) if !n.is_empty() => n,
                Some(_) => bail!("{file}: {numbered}: 'name' must be a non-empty string"),
                None => bail!("{file}: {numbered}: missing key 'name'"),
            };
            let export = format!("export \"{name}\"");
            let mut stack = (|| {
                let mut stack: StackArgs = t.take()?;
                stack.cache = t.take()?;
                stack.admit = t.take()?;
                stack.tier = t.take()?;
                t.finish()?;
                Ok(stack)
            })()
            .map_err(|e| at(e, &export))?;
            stack.toml_keys = true;
            stack.backend = match stack.backend {
                Some(b) => Some(base.join(b)),
                None => bail!("{file}: {export}: missing key 'backend'"),
            };
            stack.tier.cache_dev = stack.tier.cache_dev.map(|d| base.join(d));
            if stack.content {
                if let Some(k) = content_keys.iter().find(|k| t.had(k)) {
                    bail!(
                        "{file}: {export}: '{k}' cannot be set on an export with content = true (the shared cache's \
                         {k} is in [content])"
                    );
                }
            }
            stack.check().with_context(|| format!("{file}: {export}"))?;
            if !names.insert(name.clone()) {
                bail!("{file}: duplicate export name \"{name}\"");
            }
            if stack.content && cfg.content.is_none() {
                bail!(
                    "{file}: {export}: content = true needs a top-level [content] table (the shared cache's {})",
                    content_keys.join(", ")
                );
            }
            cfg.exports.push(ExportConfig { name, description: keys.description, stack });
        }
        if cfg.exports.is_empty() {
            bail!("{file}: no [[export]] tables");
        }
        if cfg.content.is_some() && !cfg.exports.iter().any(|e| e.stack.content) {
            bail!("{file}: [content]: no export has content = true");
        }
        Ok(cfg)
    }
}

/// A config-file error: what, and where when known (the key, and the byte range of the text at fault).
#[derive(Debug)]
struct KeyError {
    key: Option<String>,
    span: Option<Range<usize>>,
    message: String,
}

impl From<toml::de::Error> for KeyError {
    fn from(e: toml::de::Error) -> Self {
        KeyError { key: None, span: e.span(), message: e.message().trim().replace('\n', "; ") }
    }
}

impl KeyError {
    fn at(span: Range<usize>, message: &str) -> Self {
        KeyError { key: None, span: Some(span), message: message.to_string() }
    }

    /// One line: `FILE:LINE:COLUMN: TABLE: KEY: MESSAGE`, each part when known.
    fn locate(self, file: &str, text: &str, table: &str) -> anyhow::Error {
        let mut s = file.to_string();
        if let Some(start) = self.span.map(|r| r.start.min(text.len())) {
            let before = &text[..start];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().unwrap_or_default().chars().count() + 1;
            let _ = write!(s, ":{line}:{column}");
        }
        for part in [Some(table), self.key.as_deref()].into_iter().flatten().filter(|p| !p.is_empty()) {
            let _ = write!(s, ": {part}");
        }
        anyhow!("{s}: {}", self.message)
    }
}

/// The field names of a struct that derives `Deserialize` (the keys it takes).
fn fields_of<'de, T: serde::Deserialize<'de>>() -> &'static [&'static str] {
    use serde::de::{Error, Visitor};
    struct Probe<'a>(&'a mut &'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for Probe<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(Error::custom("fields taken"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(Probe(&mut fields));
    fields
}

/// One table of a config file, its keys handed out to the structs that take them ([`Table::take`]): an export's
/// table holds the keys of several structs, each deserialised on its own so that an error names its key.
struct Table<'i> {
    span: Range<usize>,
    entries: Vec<(Spanned<DeString<'i>>, Spanned<DeValue<'i>>)>,
    /// Every key the table had, and the keys the structs take so far.
    had: Vec<String>,
    known: Vec<&'static str>,
}

impl<'i> Table<'i> {
    fn new(span: Range<usize>, t: DeTable<'i>) -> Self {
        let entries: Vec<_> = t.into_iter().collect();
        let had = entries.iter().map(|(k, _)| k.get_ref().to_string()).collect();
        Table { span, entries, had, known: Vec::new() }
    }

    /// A value that must be a table.
    fn of(v: Spanned<DeValue<'i>>, not_a_table: &str) -> Result<Self, KeyError> {
        let span = v.span();
        match v.into_inner() {
            DeValue::Table(t) => Ok(Table::new(span, t)),
            _ => Err(KeyError::at(span, not_a_table)),
        }
    }

    /// Whether the table had `key`.
    fn had(&self, key: &str) -> bool {
        self.had.iter().any(|k| k == key)
    }

    /// Takes `key` out (a nested table, handled apart).
    fn remove(&mut self, key: &'static str) -> Option<Spanned<DeValue<'i>>> {
        self.known.push(key);
        let i = self.entries.iter().position(|(k, _)| k.get_ref() == key)?;
        Some(self.entries.remove(i).1)
    }

    /// Deserialises `T` from the keys that are its fields, taking them out of the table.
    fn take<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, KeyError> {
        let fields = fields_of::<T>();
        self.known.extend(fields);
        let (mine, rest) =
            std::mem::take(&mut self.entries).into_iter().partition(|(k, _)| fields.contains(&&**k.get_ref()));
        self.entries = rest;
        let mine: Vec<(Spanned<DeString<'i>>, Spanned<DeValue<'i>>)> = mine;
        let spans: Vec<(String, Range<usize>, Range<usize>)> =
            mine.iter().map(|(k, v)| (k.get_ref().to_string(), k.span(), v.span())).collect();
        let mut table = DeTable::new();
        for (k, v) in mine {
            table.insert(k, v);
        }
        let value = Spanned::new(self.span.clone(), DeValue::Table(table));
        T::deserialize(toml::de::ValueDeserializer::from(value)).map_err(|e| {
            let mut e = KeyError::from(e);
            // The key whose name or value the error points at.
            e.key = e.span.as_ref().and_then(|s| {
                spans
                    .iter()
                    .find(|(_, k, v)| (k.start <= s.start && s.end <= k.end) || (v.start <= s.start && s.end <= v.end))
                    .map(|(name, _, _)| name.clone())
            });
            e
        })
    }

    /// The keys no struct took are errors.
    fn finish(&self) -> Result<(), KeyError> {
        match self.entries.first() {
            None => Ok(()),
            Some((k, _)) => Err(KeyError::at(
                k.span(),
                &format!("unknown key '{}' (known: {})", k.get_ref(), self.known.join(", ")),
            )),
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub stack: StackArgs,

    /// Serve the exports of a TOML config file (see docs/serve.md) instead of one export from the flags;
    /// SIGHUP reads it again (exports added, kept or retired; see docs/serve.md).
    /// `--listen`, `--unix`, `--control` and `--metrics` given on the command line override the file's.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// TCP address to listen on (NBD's port is 10809; default 127.0.0.1:10809). Port 0 picks a free port.
    #[arg(long, conflicts_with = "unix")]
    pub listen: Option<String>,

    /// Listen on a Unix socket at PATH instead of TCP.
    #[arg(long, value_name = "PATH")]
    pub unix: Option<PathBuf>,

    /// The file mode of the --unix socket, in octal, whatever the umask (who may connect). Default 0600: only
    /// the server's user.
    #[arg(long, value_name = "MODE", value_parser = parse_arg::<SocketMode>)]
    pub socket_mode: Option<SocketMode>,

    /// The export's name (default `blockwell`).
    #[arg(long)]
    pub export_name: Option<String>,

    /// The export's description (shown by `nbdinfo --list`).
    #[arg(long)]
    pub description: Option<String>,

    /// Answer `blockwell status` on a Unix socket at PATH; without PATH, `$XDG_RUNTIME_DIR/blockwell.sock`, or
    /// else `/run/blockwell/control.sock` for root and `/tmp/blockwell-<uid>/control.sock` for other users (a
    /// directory made 0700 and refused if anyone else can write it). The socket is owner-only (0600).
    #[arg(long, value_name = "PATH")]
    #[allow(clippy::option_option)]
    pub control: Option<Option<PathBuf>>,

    /// Serve Prometheus metrics at http://ADDR/metrics; ADDR must be a loopback address (e.g.
    /// 127.0.0.1:9100): the endpoint has no authentication.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,

    /// Poll a connection's socket for up to N microseconds for the next request before sleeping, when the
    /// previous request came that quickly (adaptive: a client that pauses longer gets a plain wait).
    /// Saves the wake-up of a sleeping CPU at low queue depth (about 2x the IOPS at QD1, docs/performance.md)
    /// for at most N µs of CPU per request; 0 turns it off. Default 50.
    #[arg(long, value_name = "N", value_parser = parse_arg::<BusyPollUs>)]
    pub busy_poll_us: Option<BusyPollUs>,

    /// CPU scheduling policy of the connection threads. batch (Linux SCHED_BATCH): a connection woken by a
    /// request does not preempt the task on its CPU, so a client sharing that CPU queues more requests and
    /// they are answered in one batch (QD32 with fio on the same CPU: 1.16x the IOPS over TCP, 1.04x over a
    /// Unix socket, docs/performance.md); on a CPU kept busy by other work a reply may wait for that task's
    /// time slice. normal: SCHED_OTHER. Default batch.
    #[arg(long, value_name = "POLICY", value_parser = sched_parser())]
    pub sched: Option<Scheduling>,

    /// Serve at most N connections at once; a client connecting beyond that is closed at once. Default 1024.
    #[arg(long, value_name = "N", value_parser = parse_arg::<MaxConnections>)]
    pub max_connections: Option<MaxConnections>,

    /// A client must finish the NBD handshake within SECS of connecting, or it is disconnected (0: no limit).
    /// Default 10.
    #[arg(long, value_name = "SECS", value_parser = parse_arg::<Seconds>)]
    pub handshake_timeout: Option<Seconds>,

    /// Disconnect a client that sends no request for SECS (0, the default: never). An idle connection costs
    /// no CPU either way.
    #[arg(long, value_name = "SECS", value_parser = parse_arg::<Seconds>)]
    pub idle_timeout: Option<Seconds>,

    /// On SIGTERM or SIGINT, connections stop reading requests at once and get SECS to answer the ones in
    /// flight; replies a client has not read by then are dropped with its connection. Default 10.
    #[arg(long, value_name = "SECS", value_parser = parse_arg::<Seconds>)]
    pub shutdown_timeout: Option<Seconds>,

    /// TLS: off (the default), on (a client may upgrade with NBD_OPT_STARTTLS) or require (every client must
    /// before anything else; nbdkit's --tls=require). Needs --tls-certificates.
    #[arg(long, value_name = "MODE", value_parser = parse_arg::<TlsArg>)]
    pub tls: Option<TlsArg>,

    /// A directory with server-cert.pem, server-key.pem and (with --tls-verify-peer) ca-cert.pem: the layout
    /// of qemu's tls-creds-x509 and nbdkit's --tls-certificates.
    #[arg(long, value_name = "DIR")]
    pub tls_certificates: Option<PathBuf>,

    /// Clients must present a certificate signed by ca-cert.pem: who holds one may connect, nobody else.
    #[arg(long)]
    pub tls_verify_peer: bool,

    /// Refuse NBD_OPT_LIST (the export names stay private; a client must know the name it asks for).
    #[arg(long)]
    pub no_list: bool,

    /// The export an empty export name selects. Default: the only export when there is one; with several,
    /// the empty name is unknown unless this names one.
    #[arg(long, value_name = "NAME")]
    pub default_export: Option<String>,

    /// Listen on a TCP address beyond loopback without --tls require (anyone who can reach it can read and
    /// write the exports). Without it such a --listen is refused.
    #[arg(long)]
    pub allow_insecure_listen: bool,

    /// Write the server's PID to PATH once it is ready, and remove the file when it stops.
    #[arg(long, value_name = "PATH")]
    pub pidfile: Option<PathBuf>,

    /// Log format on stderr: one line per event (start, connections, reload, stop, summary).
    #[arg(long, value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// The least severe events logged: error, warn, info (start, connections, reload, stop, summary) or debug
    /// (also the server library's diagnostics).
    #[arg(long, value_enum, default_value = "info")]
    pub log_level: LogLevel,
}

impl Args {
    /// The configuration: the file's, with command-line overrides, or one export from the flags.
    fn config(&self) -> anyhow::Result<ServeConfig> {
        let mut cfg = match &self.config {
            Some(path) => {
                if self.stack != StackArgs::default() || self.export_name.is_some() || self.description.is_some() {
                    bail!(
                        "--config {}: per-export flags (--backend, --cache, --export-name, ...) cannot be combined \
                         with a config file; put them in its [[export]] tables",
                        path.display()
                    );
                }
                ServeConfig::load(path)?
            }
            None => {
                if self.stack.backend.is_none() {
                    bail!("--backend PATH (one export) or --config FILE (several) is required");
                }
                ServeConfig {
                    content: self.stack.content.then(|| self.stack.content_args()),
                    exports: vec![ExportConfig {
                        name: self.export_name.clone().unwrap_or_else(|| "blockwell".into()),
                        description: self.description.clone(),
                        stack: self.stack.clone(),
                    }],
                    ..ServeConfig::default()
                }
            }
        };
        if self.listen.is_some() || self.unix.is_some() {
            cfg.listen = self.listen.clone();
            cfg.unix = self.unix.clone();
        }
        if self.socket_mode.is_some() {
            cfg.socket_mode = self.socket_mode;
        }
        if cfg.socket_mode.is_some() && cfg.unix.is_none() {
            bail!("socket_mode (--socket-mode) needs a Unix socket (unix, --unix)");
        }
        if let Some(c) = &self.control {
            cfg.control = Some(control_path(c.as_deref()));
        }
        if let Some(m) = &self.metrics {
            cfg.metrics = Some(m.clone());
        }
        if let Some(b) = self.busy_poll_us {
            cfg.busy_poll_us = Some(b.0);
        }
        if self.sched.is_some() {
            cfg.sched = self.sched;
        }
        if let Some(m) = self.max_connections {
            cfg.max_connections = Some(m.0);
        }
        if self.tls.is_some() {
            cfg.tls = self.tls;
        }
        if let Some(d) = &self.tls_certificates {
            cfg.tls_certificates = Some(d.clone());
        }
        cfg.tls_verify_peer |= self.tls_verify_peer;
        if self.no_list {
            cfg.list = Some(false);
        }
        if let Some(d) = &self.default_export {
            cfg.default_export = Some(d.clone());
        }
        cfg.allow_insecure_listen |= self.allow_insecure_listen;
        if let Some(p) = &self.pidfile {
            cfg.pidfile = Some(p.clone());
        }
        cfg.check_network()?;
        for (flag, key) in [
            (self.handshake_timeout, &mut cfg.handshake_timeout),
            (self.idle_timeout, &mut cfg.idle_timeout),
            (self.shutdown_timeout, &mut cfg.shutdown_timeout),
        ] {
            if flag.is_some() {
                *key = flag;
            }
        }
        Ok(cfg)
    }
}

/// Builds one export of a config: its layers (claiming its files) and what status shows of it. `file`, the
/// config file, names the export in errors.
fn build_export(
    e: &ExportConfig,
    store: Option<&Arc<ContentStore>>,
    file: Option<&Path>,
) -> anyhow::Result<(Export, Live)> {
    let (backend, stats) = match file {
        Some(file) => e.stack.build_in(store).with_context(|| format!("{}: export \"{}\"", file.display(), e.name))?,
        None => e.stack.build_in(store)?,
    };
    let mode = e.stack.write_mode();
    let size = backend.size();
    let mut export = Export::new(&e.name, backend);
    if let Some(d) = &e.description {
        export = export.description(d);
    }
    if mode == CacheMode::ReadOnly {
        export = export.read_only();
    }
    Ok((export, Live::new(&e.name, &e.stack, size, mode, stats)))
}

/// The exports served now, as status, metrics and the control socket see them; a reload swaps the list.
pub(crate) struct Current(std::sync::RwLock<Arc<[Arc<Live>]>>);

impl Current {
    pub(crate) fn new(live: Vec<Live>) -> Arc<Current> {
        Arc::new(Current(std::sync::RwLock::new(live.into_iter().map(Arc::new).collect())))
    }

    pub(crate) fn now(&self) -> Arc<[Arc<Live>]> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set(&self, live: Vec<Arc<Live>>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = live.into();
    }
}

/// A built export, kept for status, metrics and the summary (also `blockwell mount`'s one file).
pub(crate) struct Live {
    name: String,
    backend: PathBuf,
    size: u64,
    /// The mode it started in (a cache device's can change: [`Live::mode`]).
    mode: CacheMode,
    policy: String,
    /// The RAM or content cache's capacity in bytes (0: none).
    ram_bytes: u64,
    /// The cache device's path.
    cache_dev: Option<PathBuf>,
    stats: Option<StackStats>,
}

impl Live {
    /// The export `name` of the stack `stack` (already built, with the counters `stats`).
    pub(crate) fn new(name: &str, stack: &StackArgs, size: u64, mode: CacheMode, stats: Option<StackStats>) -> Live {
        let policy = match stats.as_ref().map(|s| (&s.cache, &s.content)) {
            Some((Some(_), _)) => stack.cache.policy.kind.name().to_string(),
            Some((None, Some(c))) => c.store().config().policy.kind.name().to_string(),
            _ => "none".into(),
        };
        let ram_bytes = match stats.as_ref().map(|s| (&s.cache, &s.content)) {
            Some((Some(_), _)) => stack.cache.cache.bytes(stack.cache.block_size.get()),
            Some((None, Some(c))) => c.store().config().capacity_bytes,
            _ => 0,
        };
        Live {
            name: name.to_string(),
            backend: stack.backend.clone().unwrap_or_default(),
            size,
            mode,
            policy,
            ram_bytes,
            cache_dev: stack.tier.cache_dev.clone(),
            stats,
        }
    }

    /// The write mode now: the cache device's, which `blockwell cache mode` switches; else the one it started in.
    fn mode(&self) -> String {
        match self.stats.as_ref().and_then(|s| s.tier()) {
            Some(t) => t.mode,
            None => self.mode.name().to_string(),
        }
    }

    /// The start line: what it serves, through which caches, at `uri`.
    fn start_line(&self, uri: &str) -> String {
        use blockwell_sim::analysis::human_bytes;
        let kind = if self.stats.as_ref().is_some_and(|s| s.content.is_some()) { "content" } else { "RAM" };
        let tier = self.stats.as_ref().and_then(|s| s.tier());
        let ram = (self.ram_bytes > 0).then(|| match &tier {
            Some(_) => format!("a {kind} cache ({}, {})", self.policy, human_bytes(self.ram_bytes)),
            None => format!("a {kind} cache ({}, {}, {})", self.policy, human_bytes(self.ram_bytes), self.mode()),
        });
        let dev = match (&self.cache_dev, &tier) {
            (Some(p), Some(t)) => {
                let len = std::fs::metadata(p).map_or(0, |m| m.len());
                let len = if len == 0 { t.slots * t.block_size } else { len };
                Some(format!("the cache device {} ({}, {})", p.display(), human_bytes(len), t.mode))
            }
            _ => None,
        };
        let through = match (ram, dev) {
            (Some(r), Some(d)) => format!(" through {r} and {d}"),
            (Some(x), None) | (None, Some(x)) => format!(" through {x}"),
            (None, None) => format!(" without a cache, {}", self.mode()),
        };
        format!("blockwell: serving {} ({}){through} at {uri}", self.backend.display(), human_bytes(self.size))
    }

    /// The export's counters as `blockwell status` prints them.
    pub(crate) fn text(&self) -> String {
        super::status::text(&json!({ "exports": [self.json()] }))
    }

    /// `<name>: 0 <sectors> blockwell <mode> <policy> <cache blocks> <resident> key value ...`, like
    /// `dmsetup status`.
    fn status_line(&self) -> String {
        let mut s = format!("{}: 0 {} blockwell {}", self.name, self.size / 512, self.mode());
        match self.stats.as_ref().and_then(|x| x.snapshot()) {
            Some(c) => {
                let _ = write!(
                    s,
                    " {} {} {} read_hits {} read_misses {} write_hits {} write_misses {} prefetch_issued {} \
                     prefetch_used {} prefetch_wasted {} evictions {} bytes_from_backend {}",
                    self.policy,
                    c.capacity_blocks,
                    c.resident_blocks,
                    c.read_block_hits,
                    c.read_block_misses,
                    c.write_block_hits,
                    c.write_block_misses,
                    c.prefetch_issued,
                    c.prefetch_used,
                    c.prefetch_wasted,
                    c.evictions,
                    c.backend_bytes_read
                );
            }
            None => s.push_str(" none 0 0 cache off"),
        }
        if let Some(c) = self.stats.as_ref().and_then(|x| x.content()) {
            s.push(' ');
            s.push_str(&content_fields(&c));
        }
        if let Some(t) = self.stats.as_ref().and_then(|x| x.tier()) {
            s.push(' ');
            s.push_str(&super::tier::status_fields(&t));
        }
        // REDCAP's state when it is the prefetcher: on or off (its activation algorithm) and switches so far.
        match self.stats.as_ref().and_then(|x| x.snapshot()) {
            Some(c) if c.redcap_active.is_some() => {
                let on = if c.redcap_active == Some(true) { "on" } else { "off" };
                let _ = write!(s, " redcap {on} switches {}", c.redcap_switches);
            }
            _ => s.push_str(" redcap n/a"),
        }
        s
    }

    /// Logs the `export` event: what it serves, at `uri`.
    fn log_export(&self, uri: &str) {
        info!(
            name = self.name.as_str(),
            backend = %self.backend.display(),
            size = self.size,
            mode = self.mode().as_str(),
            policy = self.policy.as_str(),
            uri,
            "export"
        );
    }

    /// The export's end: a clean shutdown of its cache device (everything committed, marked clean, dirty
    /// blocks kept), then its `summary` events (the cache device's, then the RAM cache's and content cache's).
    fn finish(&self) {
        let stats = self.stats.as_ref();
        if let Some(t) = stats.and_then(|s| s.tier.as_ref()) {
            if let Err(e) = t.shutdown() {
                tracing::error!(name = self.name.as_str(), cache_dev = %e, "error");
            }
        }
        if let Some(t) = stats.and_then(|s| s.tier()) {
            info!(name = self.name.as_str(), cache_dev = ?Json(json!(t)), "summary");
        }
        info!(
            name = self.name.as_str(),
            cache = ?Json(json!(stats.and_then(|s| s.snapshot()))),
            content = ?Json(json!(stats.and_then(|s| s.content()))),
            delay = ?Json(json!(stats.and_then(|s| s.delay()))),
            "summary"
        );
    }

    fn json(&self) -> Value {
        let stats = self.stats.as_ref();
        let snapshot = stats.and_then(|s| s.snapshot());
        let tier = stats.and_then(|s| s.tier());
        let mut cache_dev = json!(tier);
        if let (Some(o), Some(p)) = (cache_dev.as_object_mut(), &self.cache_dev) {
            o.insert("path".into(), json!(p));
        }
        json!({
            "name": self.name,
            "backend": self.backend,
            "size": self.size,
            "mode": self.mode(),
            "policy": self.policy,
            "cache": snapshot,
            // What the cache's `backend_*` counters count: its traffic with the cache device or the backend.
            "cache_below": snapshot.as_ref().map(|_| if tier.is_some() { "cache_dev" } else { "backend" }),
            "requests": stats.and_then(|s| s.requests()),
            "delay": stats.and_then(|s| s.delay()),
            "content": stats.and_then(|s| s.content()),
            "cache_dev": cache_dev,
            "redcap": stats.and_then(|s| s.snapshot()).and_then(|c| {
                c.redcap_active.map(|a| json!({"active": a, "switches": c.redcap_switches}))
            }),
        })
    }
}

/// A content export's counters for the status line: `content volume V read_hit N ... silent_write N
/// full_comparisons N comparisons_per_insert X writes_avoided N` (this export's; the shared cache's are in
/// `--json`).
fn content_fields(c: &ContentSnapshot) -> String {
    let mut s = format!("content volume {}", c.volume);
    for cat in Category::ALL {
        let _ = write!(s, " {} {}", cat.short(), c.categories.get(cat));
    }
    let _ = write!(
        s,
        " full_comparisons {} comparisons_per_insert {:.3} writes_avoided {}",
        c.full_comparisons, c.comparisons_per_insert, c.backend_block_writes_avoided
    );
    s
}

fn status_text(live: &[Arc<Live>]) -> String {
    live.iter().map(|l| l.status_line() + "\n").collect()
}

fn status_json(live: &[Arc<Live>]) -> String {
    json!({ "exports": live.iter().map(|l| l.json()).collect::<Vec<_>>() }).to_string() + "\n"
}

/// Escapes a Prometheus label value.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The Prometheus text exposition (format 0.0.4) of every export's counters.
/// The server's connection counters, kept from its connection events for the metrics endpoint.
#[derive(Default)]
pub(crate) struct ConnStats {
    open: std::sync::atomic::AtomicU64,
    total: std::sync::atomic::AtomicU64,
    tls: std::sync::atomic::AtomicU64,
    refused: std::sync::atomic::AtomicU64,
    errors: std::sync::atomic::AtomicU64,
}

impl ConnStats {
    fn count(&self, e: &ConnEvent) {
        use std::sync::atomic::Ordering::Relaxed;
        match e {
            ConnEvent::Connected { .. } => {
                self.open.fetch_add(1, Relaxed);
                self.total.fetch_add(1, Relaxed);
            }
            ConnEvent::Opened { tls: true, .. } => drop(self.tls.fetch_add(1, Relaxed)),
            ConnEvent::Opened { .. } => {}
            ConnEvent::Closed { error, .. } => {
                self.open.fetch_sub(1, Relaxed);
                if error.is_some() {
                    self.errors.fetch_add(1, Relaxed);
                }
            }
            ConnEvent::Refused { .. } => drop(self.refused.fetch_add(1, Relaxed)),
        }
    }

    fn metrics(&self, out: &mut String) {
        use std::sync::atomic::Ordering::Relaxed;
        let families = [
            ("blockwell_connections", "gauge", "Client connections open.", &self.open),
            ("blockwell_connections_total", "counter", "Client connections accepted.", &self.total),
            ("blockwell_tls_connections_total", "counter", "Connections that entered transmission over TLS.", &self.tls),
            (
                "blockwell_connections_refused_total",
                "counter",
                "Connections closed unserved (--max-connections, or no thread for them).",
                &self.refused,
            ),
            (
                "blockwell_connection_errors_total",
                "counter",
                "Connections ended by a protocol error, a time limit, a failed TLS handshake or a client that vanished.",
                &self.errors,
            ),
        ];
        for (name, ty, help, v) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {ty}\n{name} {}", v.load(Relaxed));
        }
        let name = "blockwell_log_lines_dropped_total";
        let help = "Log lines dropped because the reader of stderr fell behind (the server never waits for it).";
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}", log::dropped_lines());
    }
}

fn metrics_text(live: &[Arc<Live>], conns: Option<&ConnStats>) -> String {
    let live: Vec<&Live> = live.iter().map(|l| &**l).collect();
    type Get = fn(&StatsSnapshot) -> u64;
    /// A metric family: name, type, help, and its series as (extra labels, value).
    type Family = (&'static str, &'static str, &'static str, &'static [(&'static str, Get)]);
    let cache_series: &[Family] = &[
        (
            "blockwell_block_hits_total",
            "counter",
            "Cache block hits.",
            &[("op=\"read\"", |s| s.read_block_hits), ("op=\"write\"", |s| s.write_block_hits)],
        ),
        (
            "blockwell_block_misses_total",
            "counter",
            "Cache block misses.",
            &[("op=\"read\"", |s| s.read_block_misses), ("op=\"write\"", |s| s.write_block_misses)],
        ),
        (
            "blockwell_requests_total",
            "counter",
            "Client requests reaching the cache.",
            &[("op=\"read\"", |s| s.read_requests), ("op=\"write\"", |s| s.write_requests)],
        ),
        (
            "blockwell_read_request_hits_total",
            "counter",
            "Read requests whose every block hit.",
            &[("", |s| s.read_request_hits)],
        ),
        (
            "blockwell_backend_requests_total",
            "counter",
            "Requests the RAM cache sent to the level below it (below=\"cache_dev\": the cache device; \
             below=\"backend\": the backend).",
            &[
                ("op=\"read\"", |s| s.backend_reads),
                ("op=\"write\"", |s| s.backend_writes),
                ("op=\"zero\"", |s| s.backend_zero_writes),
                ("op=\"trim\"", |s| s.backend_trims),
            ],
        ),
        (
            "blockwell_backend_bytes_total",
            "counter",
            "Bytes moved between the RAM cache and the level below it (below=\"cache_dev\" or \"backend\"); zeroed \
             and trimmed bytes are not written bytes.",
            &[
                ("op=\"read\"", |s| s.backend_bytes_read),
                ("op=\"write\"", |s| s.backend_bytes_written),
                ("op=\"zero\"", |s| s.backend_bytes_zeroed),
                ("op=\"trim\"", |s| s.backend_bytes_trimmed),
            ],
        ),
        ("blockwell_evictions_total", "counter", "Blocks evicted.", &[("", |s| s.evictions)]),
        ("blockwell_prefetch_issued_total", "counter", "Blocks prefetched.", &[("", |s| s.prefetch_issued)]),
        ("blockwell_prefetch_used_total", "counter", "Prefetched blocks later hit.", &[("", |s| s.prefetch_used)]),
        (
            "blockwell_prefetch_late_total",
            "counter",
            "Prefetched blocks first demanded while still in flight.",
            &[("", |s| s.prefetch_late)],
        ),
        (
            "blockwell_delayed_hits_total",
            "counter",
            "Demand read blocks found in flight (misses that waited for a read already issued).",
            &[("", |s| s.delayed_hits)],
        ),
        (
            "blockwell_prefetch_wasted_total",
            "counter",
            "Prefetched blocks evicted unused.",
            &[("", |s| s.prefetch_wasted)],
        ),
        (
            "blockwell_bypassed_total",
            "counter",
            "Requests that bypassed the cache (sequential cutoff).",
            &[("", |s| s.bypassed)],
        ),
        (
            "blockwell_admission_rejections_total",
            "counter",
            "Missed blocks not admitted.",
            &[("", |s| s.admission_rejections)],
        ),
        (
            "blockwell_invalidations_total",
            "counter",
            "Cached blocks dropped by writes or trims.",
            &[("", |s| s.invalidations)],
        ),
        (
            "blockwell_prefetch_blocks_read_total",
            "counter",
            "Blocks read from the backend by prefetches.",
            &[("", |s| s.prefetch_blocks_read)],
        ),
        (
            "blockwell_prefetch_dropped_total",
            "counter",
            "Asynchronous prefetch ranges dropped (queue full).",
            &[("", |s| s.prefetch_dropped)],
        ),
        (
            "blockwell_redcap_switches_total",
            "counter",
            "Times REDCAP's activation algorithm switched it on or off.",
            &[("", |s| s.redcap_switches)],
        ),
        (
            "blockwell_redcap_active",
            "gauge",
            "1 while REDCAP is on, 0 while it is off or not the prefetcher.",
            &[("", |s| u64::from(s.redcap_active == Some(true)))],
        ),
        ("blockwell_cache_capacity_blocks", "gauge", "Cache capacity in blocks.", &[("", |s| s.capacity_blocks)]),
        ("blockwell_cache_resident_blocks", "gauge", "Blocks in the cache.", &[("", |s| s.resident_blocks)]),
    ];
    let snaps: Vec<(&Live, Option<StatsSnapshot>, Option<DelayStats>)> = live
        .iter()
        .map(|l| (*l, l.stats.as_ref().and_then(|s| s.snapshot()), l.stats.as_ref().and_then(|s| s.delay())))
        .collect();
    let mut out = String::new();
    if let Some(c) = conns {
        c.metrics(&mut out);
    }
    let head = |out: &mut String, name: &str, ty: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {ty}");
    };
    let series = |out: &mut String, name: &str, export: &str, extra: &str, v: u64| {
        let sep = if extra.is_empty() { "" } else { "," };
        let _ = writeln!(out, "{name}{{export=\"{}\"{sep}{extra}}} {v}", label(export));
    };
    head(&mut out, "blockwell_export_size_bytes", "gauge", "Size of the export in bytes.");
    for (l, _, _) in &snaps {
        series(&mut out, "blockwell_export_size_bytes", &l.name, "", l.size);
    }
    for (name, ty, help, parts) in cache_series {
        head(&mut out, name, ty, help);
        for (l, snap, _) in &snaps {
            if let Some(s) = snap {
                // The backend series say which device is below the RAM cache.
                let below = match l.cache_dev.is_some() {
                    _ if !name.starts_with("blockwell_backend_") => "",
                    true => ",below=\"cache_dev\"",
                    false => ",below=\"backend\"",
                };
                for (extra, get) in parts.iter() {
                    series(&mut out, name, &l.name, &format!("{extra}{below}"), get(s));
                }
            }
        }
    }
    // Exports without a cache: their requests as the clients made them.
    let counted: Vec<(&Live, RequestSnapshot)> =
        live.iter().filter_map(|l| Some((*l, l.stats.as_ref()?.requests()?))).collect();
    if !counted.is_empty() {
        type RGet = fn(&RequestSnapshot) -> [(&'static str, u64); 4];
        let families: [(&str, &str, RGet); 2] = [
            ("blockwell_uncached_requests_total", "Requests of an export without a cache.", |r| {
                [("read", r.read_requests), ("write", r.write_requests), ("zero", r.zero_writes), ("trim", r.trims)]
            }),
            ("blockwell_uncached_bytes_total", "Bytes of the requests of an export without a cache.", |r| {
                [("read", r.read_bytes), ("write", r.write_bytes), ("zero", r.bytes_zeroed), ("trim", r.bytes_trimmed)]
            }),
        ];
        for (name, help, get) in families {
            head(&mut out, name, "counter", help);
            for (l, r) in &counted {
                for (op, v) in get(r) {
                    series(&mut out, name, &l.name, &format!("op=\"{op}\""), v);
                }
            }
        }
    }
    let tiers: Vec<(&Live, blockwell_server::tier::TierSnapshot)> =
        live.iter().filter_map(|l| Some((*l, l.stats.as_ref()?.tier()?))).collect();
    if !tiers.is_empty() {
        for (name, ty, help, get) in super::tier::metric_families() {
            head(&mut out, name, ty, help);
            for (l, t) in &tiers {
                for (extra, v) in get(t) {
                    let sep = if extra.is_empty() { "" } else { "," };
                    let _ = writeln!(out, "{name}{{export=\"{}\"{sep}{extra}}} {v}", label(&l.name));
                }
            }
        }
    }
    let contents: Vec<(&Live, ContentSnapshot)> =
        live.iter().filter_map(|l| Some((*l, l.stats.as_ref()?.content()?))).collect();
    if !contents.is_empty() {
        let name = "blockwell_content_accesses_total";
        head(&mut out, name, "counter", "Block accesses of a content export, per category of the paper's Table 1.");
        for (l, c) in &contents {
            for cat in Category::ALL {
                series(&mut out, name, &l.name, &format!("category=\"{}\"", cat.short()), c.categories.get(cat));
            }
        }
        type CGet = fn(&ContentSnapshot) -> u64;
        let families: &[(&str, &str, &str, CGet)] = &[
            (
                "blockwell_content_lookups_total",
                "counter",
                "Content hash table lookups (blocks whose content had to be placed).",
                |c| c.lookups,
            ),
            (
                "blockwell_content_full_comparisons_total",
                "counter",
                "Byte comparisons with hash-chain candidates (the paper's full comparisons).",
                |c| c.full_comparisons,
            ),
            (
                "blockwell_content_backend_block_reads_avoided_total",
                "counter",
                "Block reads served from the content cache.",
                |c| c.backend_block_reads_avoided,
            ),
            (
                "blockwell_content_backend_block_writes_avoided_total",
                "counter",
                "Written blocks not sent to the backend (silent writes).",
                |c| c.backend_block_writes_avoided,
            ),
            (
                "blockwell_content_shared_blocks",
                "gauge",
                "Distinct blocks in the content cache this export shares.",
                |c| c.shared.resident_blocks,
            ),
            (
                "blockwell_content_shared_references",
                "gauge",
                "Addresses (of every export) mapped in the content cache this export shares.",
                |c| c.shared.references,
            ),
        ];
        for (name, ty, help, get) in families {
            head(&mut out, name, ty, help);
            for (l, c) in &contents {
                series(&mut out, name, &l.name, "", get(c));
            }
        }
    }
    if snaps.iter().any(|(_, _, d)| d.is_some()) {
        head(&mut out, "blockwell_delay_requests_total", "counter", "Requests through the slow-disk emulator.");
        for (l, _, d) in &snaps {
            if let Some(d) = d {
                for (op, v) in [("read", d.reads), ("write", d.writes), ("other", d.other)] {
                    series(&mut out, "blockwell_delay_requests_total", &l.name, &format!("op=\"{op}\""), v);
                }
            }
        }
        head(&mut out, "blockwell_delay_seconds_total", "counter", "Time added by the slow-disk emulator.");
        for (l, _, d) in &snaps {
            if let Some(d) = d {
                let _ = writeln!(
                    out,
                    "blockwell_delay_seconds_total{{export=\"{}\"}} {}",
                    label(&l.name),
                    d.delay_ns as f64 / 1e9
                );
            }
        }
    }
    out
}

pub fn run(a: Args) -> anyhow::Result<ExitCode> {
    super::tier::removing_created(|| run_started(a))
}

fn run_started(a: Args) -> anyhow::Result<ExitCode> {
    let cfg = a.config()?;
    let _log = log::init(a.log_format, a.log_level);
    let mut live = Vec::new();
    let mut exports = Vec::new();
    // One content cache, shared by every export with content = true.
    let store = match (&cfg.content, &a.config) {
        (None, _) => None,
        (Some(c), Some(file)) => Some(c.build().with_context(|| format!("{}: [content]", file.display()))?),
        (Some(c), None) => Some(c.build()?),
    };
    for e in &cfg.exports {
        let (export, l) = build_export(e, store.as_ref(), a.config.as_deref())?;
        exports.push(export);
        live.push(l);
    }
    let live = Current::new(live);

    let busy_poll = cfg.busy_poll_us.map_or(DEFAULT_BUSY_POLL, Duration::from_micros);
    let scheduling = cfg.sched.unwrap_or_default();
    let mut config = ServerConfig::from(exports).with_busy_poll(busy_poll).with_scheduling(scheduling);
    if let Some(n) = cfg.max_connections {
        config = config.with_max_connections(n);
    }
    if let Some(t) = cfg.handshake_timeout {
        config = config.with_handshake_timeout(t.limit());
    }
    if let Some(t) = cfg.idle_timeout {
        config = config.with_idle_timeout(t.limit());
    }
    if let Some(t) = cfg.shutdown_timeout {
        config = config.with_shutdown_timeout(Duration::from_secs_f64(t.0));
    }
    let tls = match &cfg.tls_certificates {
        Some(dir) => Some(tls::load(dir, cfg.tls_verify_peer).context("--tls-certificates")?),
        None => None,
    };
    let config = config
        .with_tls(cfg.tls_mode(), tls)
        .with_list(cfg.list.unwrap_or(true))
        .with_default_export(cfg.default_export.clone());
    let conn_stats = Arc::new(ConnStats::default());
    let counted = conn_stats.clone();
    let config = config.with_events(Arc::new(move |e: &ConnEvent| {
        counted.count(e);
        match e {
            ConnEvent::Connected { id, peer } => info!(conn = id, peer = peer.as_str(), "connect"),
            ConnEvent::Opened { id, export, tls } => info!(conn = id, export = export.as_str(), tls, "open"),
            ConnEvent::Closed { id, requests, error: None } => info!(conn = id, requests, "disconnect"),
            ConnEvent::Closed { id, requests, error: Some(err) } => {
                info!(conn = id, requests, error = err.as_str(), "disconnect")
            }
            ConnEvent::Refused { peer, reason } => warn!(peer = peer.as_str(), reason = reason.as_str(), "refuse"),
        }
    }));
    // Socket activation (systemd's LISTEN_FDS) replaces --listen and --unix: the server takes the first socket.
    let (server, unix_path) = match activated(&cfg)? {
        Some(Activated::Tcp(l)) => (Server::from_tcp(l, config).context("the activated socket")?, None),
        Some(Activated::Unix(l, path)) => (Server::from_unix(l, config).context("the activated socket")?, path),
        None => match &cfg.unix {
            Some(p) => {
                let mode = cfg.socket_mode.map_or(0o600, |m| m.0);
                let server =
                    Server::bind_unix_mode(p, mode, config).with_context(|| format!("--unix {}", p.display()))?;
                (server, Some(p.clone()))
            }
            None => {
                let addr = cfg.listen_addr()?;
                (Server::bind_tcp(addr, config).with_context(|| format!("--listen {addr}"))?, None)
            }
        },
    };
    let metrics = match &cfg.metrics {
        Some(m) => {
            let addr: SocketAddr = m.parse().with_context(|| format!("--metrics: '{m}' is not an address:port"))?;
            let l = live.clone();
            let c = conn_stats.clone();
            Some(
                control::serve_metrics(addr, Arc::new(move || metrics_text(&l.now(), Some(&c))))
                    .context("--metrics")?,
            )
        }
        None => None,
    };
    let ctl = cfg.control.as_deref().map(|p| serve_control(p, live.clone())).transpose()?;
    // A client must use TLS: nbds:// (a client that may or may not gets the plain URI).
    let s = if cfg.tls_mode() == TlsMode::Require { "s" } else { "" };
    let tcp = server.local_addr().map(|x| x.to_string()).unwrap_or_default();
    let uri = |name: &str| match &unix_path {
        Some(p) => format!("nbd{s}+unix:///{name}?socket={}", p.display()),
        None => format!("nbd{s}://{tcp}/{name}"),
    };
    let first = live.now();

    // The main thread sleeps until a signal: SIGHUP reloads (the TLS certificates and the config file's
    // exports, see `reload`); SIGINT or SIGTERM shut the server down gracefully.
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]).context("installing signal handlers")?;
    let handle = server.spawn().context("starting the server")?;
    super::tier::started();
    for l in first.iter() {
        say!("{}", l.start_line(&uri(&l.name)));
    }
    if let Some(m) = &metrics {
        say!("blockwell: metrics at http://{}/metrics", m.local_addr().map(|x| x.to_string()).unwrap_or_default());
    }
    if let Some(p) = &cfg.control {
        say!("blockwell: control socket at {}", p.display());
    }
    say!(
        "blockwell: ready ({} export{}; SIGINT or SIGTERM stops)",
        first.len(),
        if first.len() == 1 { "" } else { "s" }
    );
    // A stdout nobody reads any more loses these lines, and stops nothing.
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let pidfile = cfg.pidfile.as_deref().map(Pidfile::write).transpose()?;
    // Under systemd (Type=notify): ready now. Without NOTIFY_SOCKET this does nothing.
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    for l in first.iter() {
        l.log_export(&uri(&l.name));
    }
    drop(first);
    let listen = unix_path.as_ref().map(|p| p.display().to_string()).or_else(|| server_addr(&handle));
    info!(
        exports = live.now().len(),
        listen = ?Json(json!(listen)),
        control = ?Json(json!(cfg.control)),
        metrics = ?Json(json!(metrics.as_ref().and_then(|m| m.local_addr()).map(|a| a.to_string()))),
        "start"
    );
    let mut reloader =
        reload::Reloader { args: &a, cfg, store, handle: &handle, current: live.clone(), uri: &uri, retiring: vec![] };
    let signal = signals.forever().find(|&sig| {
        if sig == SIGHUP {
            reloader.reload();
        }
        sig != SIGHUP
    });
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
    info!(reason = "signal", signal = ?Json(json!(signal.and_then(signal_hook::low_level::signal_name))), "stop");
    let retiring = reloader.retiring;
    handle.shutdown().context("shutting down")?;
    // Exports removed by a reload close once their last connection has (all have, now).
    for t in retiring {
        let _ = t.join();
    }
    drop(pidfile);
    drop(ctl);
    drop(metrics);
    let live = live.now();
    for l in live.iter() {
        l.finish();
        // The export's counters as `blockwell status` shows them (every counter is in the `summary` log event).
        say!("blockwell: stopped; {}", l.text().trim_end());
    }
    Ok(ExitCode::SUCCESS)
}

/// A listening socket handed over by a service manager (`LISTEN_FDS`/`LISTEN_PID`, the first one).
enum Activated {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener, Option<PathBuf>),
}

/// The activated socket, if the service manager passed one. A TCP address beyond loopback follows the rule of
/// `--listen`.
fn activated(cfg: &ServeConfig) -> anyhow::Result<Option<Activated>> {
    let mut fds = listenfd::ListenFd::from_env();
    if fds.len() == 0 {
        return Ok(None);
    }
    if let Ok(Some(l)) = fds.take_tcp_listener(0) {
        let addr = l.local_addr().context("the activated socket")?;
        cfg.check_reach(addr, &format!("the activated socket listens on {addr}, which"))?;
        return Ok(Some(Activated::Tcp(l)));
    }
    match fds.take_unix_listener(0) {
        Ok(Some(l)) => {
            let path = l.local_addr().ok().and_then(|a| a.as_pathname().map(Path::to_path_buf));
            Ok(Some(Activated::Unix(l, path)))
        }
        _ => bail!("LISTEN_FDS: the first socket is neither a listening TCP nor a Unix stream socket"),
    }
}

/// `--pidfile`: the server's PID, written once it is ready (whole, by a rename) and removed when it stops.
struct Pidfile(PathBuf);

impl Pidfile {
    fn write(path: &Path) -> anyhow::Result<Pidfile> {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, format!("{}\n", std::process::id()))
            .and_then(|()| std::fs::rename(&tmp, path))
            .with_context(|| format!("--pidfile {}", path.display()))?;
        Ok(Pidfile(path.to_path_buf()))
    }
}

impl Drop for Pidfile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Answers `blockwell status` for `live` on the control socket `path` (`--control`).
pub(crate) fn serve_control(path: &Path, live: Arc<Current>) -> anyhow::Result<control::Endpoint> {
    let render = Arc::new(move |r: Request| match r {
        Request::Status => status_text(&live.now()),
        Request::StatusJson => status_json(&live.now()),
        Request::CacheFlush(name) => {
            cache_command(&live.now(), name.as_deref(), |t| t.clean_all().map(|n| format!("{n} block(s) written back")))
        }
        Request::CacheMode(mode, name) => {
            cache_command(&live.now(), name.as_deref(), |t| t.set_mode(mode).map(|()| format!("now {mode}")))
        }
    });
    control::serve_control(path, render).context("--control")
}

/// Runs `f` on the cache device of every export (or of the one named), one reply line each.
fn cache_command(live: &[Arc<Live>], name: Option<&str>, f: impl Fn(&Tier) -> std::io::Result<String>) -> String {
    let mut out = String::new();
    for l in live.iter().filter(|l| name.map_or(true, |n| n == l.name)) {
        let Some(t) = l.stats.as_ref().and_then(|s| s.tier.as_ref()) else { continue };
        let _ = match f(t) {
            Ok(msg) => writeln!(out, "ok: {}: {msg}", l.name),
            Err(e) => writeln!(out, "error: {}: {e}", l.name),
        };
    }
    if out.is_empty() {
        match name {
            Some(n) => format!("error: no export named {n} with a cache device\n"),
            None => "error: no export has a cache device\n".to_string(),
        }
    } else {
        out
    }
}

/// `--control` as given: without a path, the default socket.
pub(crate) fn control_path(given: Option<&Path>) -> PathBuf {
    given.map_or_else(control::default_control_path, Path::to_path_buf)
}

fn server_addr(h: &blockwell_server::nbd::ServerHandle) -> Option<String> {
    h.local_addr().map(|a| a.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<ServeConfig> {
        ServeConfig::parse(text, "exports.toml", Path::new("/srv"))
    }

    #[test]
    fn toml_with_two_exports() {
        let c = parse(
            "listen = \"127.0.0.1:0\"\ncontrol = \"c.sock\"\n\
             [[export]]\nname = \"a\"\nbackend = \"a.img\"\ncache = \"1MiB\"\npolicy = \"arc\"\n\
             [[export]]\nname = \"b\"\nbackend = \"/abs/b.img\"\nread_only = true\ncache = 0\ndelay = \"hdd\"\n",
        )
        .unwrap();
        assert_eq!(c.control, Some(PathBuf::from("/srv/c.sock")));
        assert_eq!(c.exports.len(), 2);
        assert_eq!(c.exports[0].stack.backend, Some(PathBuf::from("/srv/a.img")));
        assert_eq!(c.exports[0].stack.cache.policy.label(), "arc");
        assert_eq!(c.exports[0].stack.cache.block_size.get(), 4096, "unset keys take the flags' defaults");
        assert_eq!(c.exports[1].stack.backend, Some(PathBuf::from("/abs/b.img")));
        assert!(c.exports[1].stack.read_only);
        assert_eq!(c.exports[1].stack.cache.cache, FixedSize::Bytes(0));
        assert!(c.exports[1].stack.delay.config().is_some());
        assert_eq!(c.busy_poll_us, None, "unset: the server's default");
        assert_eq!(c.sched, None, "unset: the server's default");
    }

    #[test]
    fn toml_sched() {
        let export = "[[export]]\nname = \"a\"\nbackend = \"a\"\n";
        assert_eq!(parse(&format!("sched = \"batch\"\n{export}")).unwrap().sched, Some(Scheduling::Batch));
        assert_eq!(parse(&format!("sched = \"normal\"\n{export}")).unwrap().sched, Some(Scheduling::Normal));
        let x = format!("{:#}", parse(&format!("sched = \"fifo\"\n{export}")).unwrap_err());
        assert_eq!(x, "exports.toml:1:9: sched: must be \"batch\" or \"normal\", not \"fifo\"");
        let x = format!("{:#}", parse(&format!("sched = 1\n{export}")).unwrap_err());
        assert_eq!(x, "exports.toml:1:9: sched: must be \"batch\" or \"normal\", not \"1\"");
    }

    #[test]
    fn toml_busy_poll_us() {
        let export = "[[export]]\nname = \"a\"\nbackend = \"a\"\n";
        assert_eq!(parse(&format!("busy_poll_us = 0\n{export}")).unwrap().busy_poll_us, Some(0));
        assert_eq!(parse(&format!("busy_poll_us = 200\n{export}")).unwrap().busy_poll_us, Some(200));
        for (bad, shown) in [("-1", "-1"), ("\"50us\"", "50us"), ("2000000", "2000000")] {
            let x = format!("{:#}", parse(&format!("busy_poll_us = {bad}\n{export}")).unwrap_err());
            assert_eq!(
                x,
                format!("exports.toml:1:16: busy_poll_us: must be an integer from 0 to 1000000, not {shown}")
            );
        }
    }

    #[test]
    fn toml_connection_limits() {
        let export = "[[export]]\nname = \"a\"\nbackend = \"a\"\n";
        let c = parse(&format!(
            "max_connections = 8\nhandshake_timeout = 2.5\nidle_timeout = 0\nshutdown_timeout = 3\n{export}"
        ))
        .unwrap();
        assert_eq!(c.max_connections, Some(8));
        assert_eq!(c.handshake_timeout.and_then(Seconds::limit), Some(Duration::from_millis(2500)));
        assert_eq!(c.idle_timeout, Some(Seconds(0.0)));
        assert_eq!(c.idle_timeout.and_then(Seconds::limit), None, "0: no limit");
        assert_eq!(c.shutdown_timeout, Some(Seconds(3.0)));
        let x = format!("{:#}", parse(&format!("max_connections = 0\n{export}")).unwrap_err());
        assert_eq!(x, "exports.toml:1:19: max_connections: must be an integer from 1 to 65536, not 0");
        let x = format!("{:#}", parse(&format!("idle_timeout = -1\n{export}")).unwrap_err());
        assert_eq!(x, "exports.toml:1:16: idle_timeout: must be a number of seconds from 0 to 86400, not -1");
    }

    #[test]
    fn toml_errors_name_the_file_export_and_key() {
        let e = |t: &str| format!("{:#}", parse(t).unwrap_err());
        let ex = "[[export]]\nname = \"a\"\nbackend = \"a\"\n";
        let x = e(&format!("{ex}polcy = \"lru\"\n"));
        assert!(
            x.starts_with("exports.toml:4:1: export \"a\": unknown key 'polcy' (known: name, description, backend"),
            "{x}"
        );
        let x = e("[[export]]\nname = \"a\"\nbackend = \"a\"\n[[export]]\nname = \"a\"\nbackend = \"b\"\n");
        assert_eq!(x, "exports.toml: duplicate export name \"a\"");
        let x = e("[[export]]\nname = \"a\"\n");
        assert_eq!(x, "exports.toml: export \"a\": missing key 'backend'");
        assert_eq!(e("[[export]]\nbackend = \"a\"\n"), "exports.toml: export #1: missing key 'name'");
        let x = e(&format!("lisen = \"x\"\n{ex}"));
        assert!(x.starts_with("exports.toml:1:1: unknown key 'lisen'"), "{x}");
        // A value is parsed by the type the flag parses into, and its error names the line, export and key.
        let x = e(&format!("{ex}policy = \"nosuch\"\n"));
        assert!(x.starts_with("exports.toml:4:10: export \"a\": policy: unknown policy 'nosuch'"), "{x}");
        let x = e(&format!("{ex}block_size = \"3KiB\"\n"));
        assert_eq!(
            x,
            "exports.toml:4:14: export \"a\": block_size: 3KiB is not a power of two between 512 B and 1 MiB"
        );
        let x = e(&format!("{ex}preset = \"x\"\n"));
        assert_eq!(
            x,
            "exports.toml:4:10: export \"a\": preset: unknown preset 'x' (known: default, libcachesim, butt05)"
        );
        let x = e(&format!("{ex}read_only = \"yes\"\n"));
        assert_eq!(x, "exports.toml:4:13: export \"a\": read_only: invalid type: string \"yes\", expected a boolean");
        let x = e(&format!("{ex}cache = \"5%\"\n"));
        assert!(
            x.starts_with("exports.toml:4:9: export \"a\": cache: '5%': a percentage of a footprint needs a trace"),
            "{x}"
        );
        let x = e(&format!("{ex}delay = \"floppy\"\n"));
        assert!(x.starts_with("exports.toml:4:9: export \"a\": delay: unknown disk model 'floppy'"), "{x}");
        let x = e("[[export]\n");
        assert!(x.starts_with("exports.toml:1:10: ") && !x.contains('\n'), "{x}");
        assert_eq!(e("listen = \"x\"\n"), "exports.toml: no [[export]] tables");
        assert_eq!(e("export = 1\n"), "exports.toml:1:10: 'export' must be an array of tables ([[export]])");
    }

    #[test]
    fn toml_associativity_of_the_ram_cache_and_the_cache_device() {
        let c = parse(
            "[[export]]\nname = \"a\"\nbackend = \"a.img\"\ncache = \"1MiB\"\nassociativity = 64\n\
             cache_dev = \"a.cache\"\ncache_dev_associativity = 512\n",
        )
        .unwrap();
        let stack = &c.exports[0].stack;
        assert_eq!(stack.cache.ways(), std::num::NonZeroUsize::new(64));
        let ram = stack.cache_config(CacheMode::WriteThrough).unwrap();
        assert_eq!(ram.associativity, std::num::NonZeroUsize::new(64));
        assert_eq!(stack.tier.cache_dev_associativity.map(|a| a.get().get()), Some(512));
        let e = |t: &str| format!("{:#}", parse(t).unwrap_err());
        let ex = "[[export]]\nname = \"a\"\nbackend = \"a\"\n";
        let x = e(&format!("{ex}associativity = 0\n"));
        assert!(x.starts_with("exports.toml:4:17: export \"a\": associativity: 0 ways"), "{x}");
        let x = e(&format!("{ex}cache_dev_associativity = 8\n"));
        assert_eq!(x, "exports.toml: export \"a\": cache_dev_associativity needs cache_dev");
        let x = e(&format!("{ex}cache = 0\nassociativity = 8\n"));
        assert_eq!(x, "exports.toml: export \"a\": associativity needs a RAM cache (cache is 0)");
        let x = e(&format!("[content]\n{ex}content = true\nassociativity = 8\n"));
        assert!(x.contains("export \"a\": associativity cannot be combined with content"), "{x}");
    }

    #[test]
    fn toml_content_table_is_shared_by_content_exports() {
        let c = parse(
            "[content]\ncache = \"8MiB\"\npolicy = \"arc\"\nhash_fraction = 0.03125\n\
             [[export]]\nname = \"a\"\nbackend = \"a.img\"\ncontent = true\n\
             [[export]]\nname = \"b\"\nbackend = \"b.img\"\ncontent = true\nread_only = true\n\
             [[export]]\nname = \"c\"\nbackend = \"c.img\"\ncache = \"1MiB\"\n",
        )
        .unwrap();
        let ct = c.content.as_ref().unwrap();
        assert_eq!((ct.cache, ct.policy.label(), ct.block_size.get()), (FixedSize::Bytes(8 << 20), "arc", 4096));
        let cfg = ct.config().unwrap();
        assert_eq!((cfg.capacity_bytes, cfg.hash_fraction), (8 << 20, 0.03125));
        assert!(c.exports[0].stack.content && c.exports[1].stack.content && !c.exports[2].stack.content);
    }

    #[test]
    fn toml_content_errors_name_the_table_and_key() {
        let e = |t: &str| format!("{:#}", parse(t).unwrap_err());
        let ex = "[[export]]\nname = \"a\"\nbackend = \"a\"\ncontent = true\n";
        let x = e(ex);
        assert!(x.starts_with("exports.toml: export \"a\": content = true needs a top-level [content] table"), "{x}");
        let x = e(&format!("[content]\ncache = \"1MiB\"\ncahce = 1\n{ex}"));
        assert!(x.starts_with("exports.toml:3:1: [content]: unknown key 'cahce'"), "{x}");
        let x = e(&format!("[content]\npolicy = \"opt\"\n{ex}"));
        assert!(x.starts_with("exports.toml: [content]: policy: policy 'opt' needs next-use times"), "{x}");
        let x = e(&format!("[content]\nhash_fraction = \"2\"\n{ex}"));
        assert!(x.starts_with("exports.toml:2:17: [content]: hash_fraction: '2' is not a fraction"), "{x}");
        let x = e(&format!("[content]\ncache = 0\n{ex}"));
        assert!(x.starts_with("exports.toml: [content]: cache: "), "{x}");
        let x = e(&format!("[content]\n{ex}policy = \"lru\"\n"));
        assert!(x.contains("export \"a\": 'policy' cannot be set on an export with content = true"), "{x}");
        let x = e(&format!("[content]\n{ex}hash_fraction = \"1/32\"\n"));
        assert!(x.contains("export \"a\": 'hash_fraction' cannot be set on an export with content = true"), "{x}");
        let x = e(&format!("[content]\n{ex}prefetch = \"obl\"\n"));
        assert!(x.contains("export \"a\": prefetch cannot be combined with content"), "{x}");
        let x = e(&format!("[content]\n{ex}mode = \"write-around\"\n"));
        assert!(x.contains("export \"a\": mode write-around cannot be combined with content"), "{x}");
        let x = e("[content]\n[[export]]\nname = \"a\"\nbackend = \"a\"\n");
        assert_eq!(x, "exports.toml: [content]: no export has content = true");
    }

    #[test]
    fn status_and_metrics_render_without_a_cache() {
        let l = vec![Arc::new(Live {
            name: "a\"b".into(),
            backend: "/x".into(),
            size: 1 << 20,
            mode: CacheMode::ReadOnly,
            policy: "none".into(),
            ram_bytes: 0,
            cache_dev: None,
            stats: None,
        })];
        assert_eq!(status_text(&l), "a\"b: 0 2048 blockwell read-only none 0 0 cache off redcap n/a\n");
        let m = metrics_text(&l, None);
        assert!(m.contains("blockwell_export_size_bytes{export=\"a\\\"b\"} 1048576\n"), "{m}");
        let v: Value = serde_json::from_str(&status_json(&l)).unwrap();
        assert_eq!(v["exports"][0]["cache"], Value::Null);
    }
}
