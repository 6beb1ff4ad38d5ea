//! Prefetchers: one module per prefetcher behind the small [`Prefetcher`] trait. They observe and propose
//! (libCacheSim's `prefetcher_t` hooks): they see demand requests per stream (a file, a process or a volume),
//! first demand hits on prefetched blocks and evictions, and return block ranges to fetch. The driver (the
//! virtual-time simulator or the live server) decides what is admitted, the clusterer ([`crate::cluster`])
//! turns the fetches into device requests, and only the driver knows time: a prefetcher reads no clock.
//!
//! A driver calls, for each demand request, [`Prefetcher::on_demand`] *before* serving it, with a
//! [`BlockView`] that says which blocks are resident or still in flight; the returned [`Fetch`]es marked
//! `sync` are read together with the demand misses (the request waits for them), the others are issued
//! asynchronously.
//!
//! Prefetchers are named on the command line with a [`PrefetcherSpec`] (`none`, `linux24(max=32)`,
//! `linux26(max_kb=128)`, `ondemand(max_kb=128)`, `stride(depth=4)`, `bsd`, `obl`, `redcap(segment_kb=128)`); [`list`] gives every
//! one with its parameters and defaults. Adding a prefetcher is one new file and one line in the `registry!`
//! invocation below ([`PrefetcherKind`]).
//!
//! | module | what it models |
//! |---|---|
//! | [`linux24`] | Linux 2.4 read-ahead groups and window (seed `001_*` §2.1) |
//! | [`linux26`] | Linux 2.6.14 current/ahead window read-ahead (the kernel of seed `000_*`) |
//! | [`bsd`] | 4.4BSD clustering read-ahead (seed `001_*` §2.2) |
//! | [`ondemand`] | current Linux on-demand read-ahead (`mm/readahead.c`) |
//! | [`obl`] | one-block lookahead |
//! | [`stride`] | constant-stride detection |
//! | [`redcap`] | REDCAP's whole-segment fetch on read misses, with its activation controller (seed `000_*`) |

use crate::cache::Op;
use crate::key::BlockKey;
use crate::policy::Evicted;

/// Where a block is, as the driver knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Neither cached nor being read.
    Absent,
    /// Cached.
    Resident,
    /// A read for it has been issued and has not completed (seed `001_*` §5.2).
    InFlight,
}

/// The driver's answer to "where is this block?".
pub trait BlockView {
    fn state(&self, key: BlockKey) -> BlockState;
}

/// A view for drivers without in-flight reads: every block is absent.
pub struct NothingCached;

impl BlockView for NothingCached {
    fn state(&self, _key: BlockKey) -> BlockState {
        BlockState::Absent
    }
}

/// One demand request as a prefetcher sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Demand {
    /// The stream the request belongs to: an open file, a process or a volume, as the driver chooses. Read-ahead
    /// state is kept per stream.
    pub stream: u64,
    pub op: Op,
    /// First block of the request.
    pub first: BlockKey,
    /// Number of blocks (>= 1).
    pub n: u64,
    /// One past the last block of the stream (a file's end), which read-ahead never crosses; `u64::MAX` when the
    /// stream is unbounded (a volume).
    pub end: u64,
}

/// Blocks the prefetcher wants read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fetch {
    pub first: BlockKey,
    pub n: u64,
    /// The demand request waits for these blocks (Linux 2.4's synchronous read-ahead group); otherwise the read
    /// is asynchronous.
    pub sync: bool,
}

/// A prefetcher: observes demand requests and proposes block ranges.
pub trait Prefetcher: Send {
    /// A demand request is about to be served. Push the ranges to read into `out` (it is not cleared). Ranges may
    /// include blocks that are resident or in flight; the driver skips those.
    fn on_demand(&mut self, demand: &Demand, view: &dyn BlockView, out: &mut Vec<Fetch>);

    /// A block brought by a prefetch was accessed on demand for the first time.
    fn on_prefetch_hit(&mut self, stream: u64, key: BlockKey) {
        let _ = (stream, key);
    }

    /// A block left the cache.
    fn on_evict(&mut self, evicted: &Evicted) {
        let _ = evicted;
    }

    /// The stream ended (file closed): forget its state.
    fn end_stream(&mut self, stream: u64) {
        let _ = stream;
    }

    /// I/O time of one request with the prefetcher's fetches and without them, in ns (one measured by the
    /// driver, the other estimated with a shadow disk model). Added for self-deactivating prefetchers (REDCAP's
    /// activation–deactivation algorithm, [`redcap::RedcapPrefetch`]); the others ignore it, so drivers without
    /// timing need not call it.
    fn on_io_time(&mut self, with_ns: u64, without_ns: u64) {
        let _ = (with_ns, without_ns);
    }

    /// Whether the prefetcher currently proposes fetches (false while a self-deactivating prefetcher is off);
    /// drivers use it to know which time is measured and which is estimated in [`Prefetcher::on_io_time`].
    fn is_active(&self) -> bool {
        true
    }

    /// Bytes of heap the prefetcher's state uses.
    fn heap_bytes(&self) -> usize {
        0
    }
}

/// No prefetching.
#[derive(Clone, Debug, Default)]
pub struct NoPrefetch;

impl Prefetcher for NoPrefetch {
    fn on_demand(&mut self, _demand: &Demand, _view: &dyn BlockView, _out: &mut Vec<Fetch>) {}
}

pub mod bsd;
pub mod linux24;
pub mod linux26;
pub mod obl;
pub mod ondemand;
pub mod redcap;
pub mod stride;

use serde::{de::DeserializeOwned, Serialize};
use serde_json::{Map, Value};
use std::fmt::Debug;

/// A fixed, seedless hasher for `u64` keys (streams, packed block keys): the SplitMix64 finaliser of
/// [`BlockKey::hash64`]. Lookups only; no output depends on iteration order.
#[derive(Clone, Copy, Debug, Default)]
pub struct U64Hasher(u64);

impl std::hash::Hasher for U64Hasher {
    fn finish(&self) -> u64 {
        BlockKey::from_raw(self.0).hash64()
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.0 = x;
    }
}

/// A hash map keyed by `u64` with [`U64Hasher`].
pub type U64Map<V> = hashbrown::HashMap<u64, V, std::hash::BuildHasherDefault<U64Hasher>>;

/// Pushes the fetch of blocks `start .. stop` of `volume` (clipped to the largest block a key can hold);
/// nothing when the range is empty. Returns the number of blocks pushed.
pub(crate) fn push_fetch(out: &mut Vec<Fetch>, volume: u32, start: u64, stop: u64, sync: bool) -> u64 {
    let stop = stop.min(crate::key::MAX_BLOCK + 1);
    if start >= stop {
        return 0;
    }
    match BlockKey::new(volume, start) {
        Some(first) => {
            out.push(Fetch { first, n: stop - start, sync });
            stop - start
        }
        None => 0,
    }
}

/// The state of block `block` of the volume of `like`, as `view` reports it (absent when it cannot be keyed).
pub(crate) fn state_of(view: &dyn BlockView, like: BlockKey, block: u64) -> BlockState {
    BlockKey::new(like.volume(), block).map_or(BlockState::Absent, |k| view.state(k))
}

/// A prefetcher's parameters: a serde struct whose fields are the spec's `key=value` parameters.
pub trait PrefetcherConfig: Default + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// Rejects values that make no sense; `Err` names the parameter and says why.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }

    /// Builds the prefetcher for a cache of `block_size`-byte blocks (parameters given in KiB are converted).
    fn build(&self, block_size: u64) -> Box<dyn Prefetcher>;
}

/// [`NoPrefetch`] takes no parameters.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoPrefetchConfig {}

impl PrefetcherConfig for NoPrefetchConfig {
    fn build(&self, _block_size: u64) -> Box<dyn Prefetcher> {
        Box::new(NoPrefetch)
    }
}

/// Errors naming a prefetcher or its parameters.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PrefetchError {
    #[error(transparent)]
    Unknown(#[from] crate::spec::UnknownName),
    #[error("prefetcher '{prefetcher}': bad parameter '{param}': {message}")]
    BadParam { prefetcher: String, param: String, message: String },
    #[error("prefetcher '{prefetcher}': invalid configuration: {message}")]
    Invalid { prefetcher: String, message: String },
    #[error("block size must be a power of two of at least 512 bytes, got {0}")]
    BlockSize(u64),
}

macro_rules! registry {
    ($( $variant:ident => $cfg:path, $name:literal, [$($alias:literal),*], $summary:literal; )*) => {
        crate::spec_registry! {
            /// Every prefetcher Blockwell has. The one registry: names, aliases, summaries, construction.
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
            pub enum PrefetcherKind: "prefetcher" { $( $variant => $name, [$($alias),*], $summary; )* }
        }

        impl PrefetcherKind {
            /// The default parameters, as a JSON object.
            pub fn defaults(self) -> Value {
                match self {
                    $(PrefetcherKind::$variant => serde_json::to_value(<$cfg>::default())
                        .unwrap_or(Value::Null)),*
                }
            }

            /// Typed round trip of `config`, the config's own checks, then construction.
            fn build_value(self, config: Value, block_size: u64) -> Result<Box<dyn Prefetcher>, (bool, String)> {
                match self {
                    $(PrefetcherKind::$variant => {
                        let c: $cfg = serde_json::from_value(config).map_err(|e| (false, e.to_string()))?;
                        c.check().map_err(|e| (true, e))?;
                        Ok(c.build(block_size))
                    })*
                }
            }
        }
    };
}

registry! {
    NoPrefetch => NoPrefetchConfig, "none", ["off", "no"], "no prefetching";
    Linux24 => linux24::Linux24Config, "linux24", ["linux2.4", "linux-2.4"],
        "Linux 2.4 read-ahead: per-stream read-ahead group and window, synchronous minimum, doubling (Butt et al. §2.1)";
    Linux26 => linux26::Linux26Config, "linux26", ["linux2.6", "linux-2.6"],
        "Linux 2.6.14 read-ahead: current and ahead windows, sequential only if the next page, else off (the REDCAP paper's kernel)";
    Bsd => bsd::BsdConfig, "bsd", ["4.4bsd", "ffs"],
        "4.4BSD clustering: sequential if B or B-1 was last, doubling, halving after a wasted prefetch (Butt et al. §2.2)";
    Ondemand => ondemand::OndemandConfig, "ondemand", ["linux", "readahead"],
        "current Linux on-demand read-ahead: initial window from request size, ramp-up, async marker";
    Obl => obl::OblConfig, "obl", ["one-block-lookahead"], "one-block lookahead: on a miss (or every access) fetch the next block";
    Stride => stride::StrideConfig, "stride", [], "constant-stride detector: after k confirmations fetch the next strided requests";
    Redcap => redcap::RedcapPrefetchConfig, "redcap", [],
        "REDCAP segment fetch: on a read miss fetch the whole aligned segment (the REDCAP paper)";
}

/// One registry entry as [`list`] reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct PrefetcherInfo {
    pub kind: PrefetcherKind,
    pub name: &'static str,
    pub summary: &'static str,
    /// Parameter names and default values, in name order.
    pub params: Vec<(String, Value)>,
}

/// Every prefetcher with its parameters and their defaults (for `--help`, docs and reports).
pub fn list() -> Vec<PrefetcherInfo> {
    PrefetcherKind::REGISTRY
        .list()
        .iter()
        .map(|e| PrefetcherInfo {
            kind: e.kind,
            name: e.name,
            summary: e.summary,
            params: match e.kind.defaults() {
                Value::Object(m) => m.into_iter().collect(),
                _ => Vec::new(),
            },
        })
        .collect()
}

/// A prefetcher with parameter overrides, as written on the command line: `none`, `linux24(max=32)`,
/// `ondemand(max_kb=128)`, `stride(depth=4,confirm=2)`. Values are JSON scalars; bare words are strings.
#[derive(Clone, Debug, PartialEq)]
pub struct PrefetcherSpec {
    pub kind: PrefetcherKind,
    pub overrides: Map<String, Value>,
    text: String,
}

impl PrefetcherSpec {
    pub fn new(kind: PrefetcherKind) -> Self {
        PrefetcherSpec { kind, overrides: Map::new(), text: kind.name().to_string() }
    }

    /// Parses `name` or `name(key=value,...)`; unknown names, unknown parameters, bad types and bad values are
    /// errors naming them.
    pub fn parse(s: &str) -> Result<Self, PrefetchError> {
        let s = s.trim();
        let text = crate::spec::split_spec(s).map_err(|e| {
            let prefetcher = s.split('(').next().unwrap_or(s).trim().to_string();
            let param = match &e {
                crate::spec::SpecSyntaxError::NotKeyValue(kv) => kv.clone(),
                crate::spec::SpecSyntaxError::NoClosingParen => s.to_string(),
            };
            PrefetchError::BadParam { prefetcher, param, message: e.to_string() }
        })?;
        let kind = PrefetcherKind::from_name(text.name)?;
        let mut overrides = Map::new();
        for (k, v) in text.params {
            overrides.insert(k, crate::spec::json_value(v));
        }
        let spec = PrefetcherSpec { kind, overrides, text: s.to_string() };
        spec.config()?;
        spec.build(4096)?;
        Ok(spec)
    }

    /// The text the spec was parsed from (the prefetcher's label in reports).
    pub fn label(&self) -> &str {
        &self.text
    }

    /// The resolved configuration (defaults with the overrides applied), as JSON.
    pub fn config(&self) -> Result<Value, PrefetchError> {
        let mut v = self.kind.defaults();
        let m = match &mut v {
            Value::Object(m) => m,
            _ => {
                return Err(PrefetchError::Invalid {
                    prefetcher: self.kind.name().into(),
                    message: "configuration is not an object".into(),
                })
            }
        };
        for (k, x) in &self.overrides {
            if !m.contains_key(k) {
                let known = m.keys().cloned().collect::<Vec<_>>().join(", ");
                return Err(PrefetchError::BadParam {
                    prefetcher: self.kind.name().into(),
                    param: k.clone(),
                    message: if known.is_empty() {
                        "this prefetcher takes no parameters".into()
                    } else {
                        format!("unknown parameter (known: {known})")
                    },
                });
            }
            m.insert(k.clone(), x.clone());
        }
        Ok(v)
    }

    /// Builds the prefetcher for `block_size`-byte blocks.
    pub fn build(&self, block_size: u64) -> Result<Box<dyn Prefetcher>, PrefetchError> {
        if block_size < 512 || !block_size.is_power_of_two() {
            return Err(PrefetchError::BlockSize(block_size));
        }
        let config = self.config()?;
        self.kind.build_value(config, block_size).map_err(|(checked, message)| {
            if checked {
                PrefetchError::Invalid { prefetcher: self.kind.name().into(), message }
            } else {
                // serde names the field in its message ("invalid type: ... for key `max`" or similar); name
                // every override so the user sees which one was given.
                PrefetchError::BadParam {
                    prefetcher: self.kind.name().into(),
                    param: self.overrides.keys().cloned().collect::<Vec<_>>().join(","),
                    message,
                }
            }
        })
    }
}

/// Converts a size in KiB to whole blocks (at least one).
pub(crate) fn kib_to_blocks(kib: u64, block_size: u64) -> u64 {
    (kib.saturating_mul(1024) / block_size.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_prefetcher_builds_from_its_defaults() {
        for info in list() {
            let spec = PrefetcherSpec::parse(info.name).unwrap();
            assert_eq!(spec.kind, info.kind);
            let mut p = spec.build(4096).unwrap();
            let mut out = Vec::new();
            let d = Demand { stream: 1, op: Op::Read, first: BlockKey::new(0, 0).unwrap(), n: 1, end: 1000 };
            p.on_demand(&d, &NothingCached, &mut out);
            assert!(out.iter().all(|f| f.first.block() + f.n <= 1000), "{}: {out:?}", info.name);
        }
    }

    #[test]
    fn spec_errors_name_the_parameter() {
        let e = PrefetcherSpec::parse("linux24(bogus=1)").unwrap_err();
        assert!(matches!(&e, PrefetchError::BadParam { param, .. } if param == "bogus"), "{e}");
        let e = PrefetcherSpec::parse("linux24(max=-3)").unwrap_err();
        assert!(e.to_string().contains("max"), "{e}");
        let e = PrefetcherSpec::parse("linux24(max=0)").unwrap_err();
        assert!(e.to_string().contains("max"), "{e}");
        let e = PrefetcherSpec::parse("nope").unwrap_err();
        assert!(e.to_string().contains("unknown prefetcher 'nope'") && e.to_string().contains("linux24"), "{e}");
        let e = PrefetcherSpec::parse("none(x=1)").unwrap_err();
        assert!(e.to_string().contains("no parameters"), "{e}");
        let e = PrefetcherSpec::parse("stride(depth=4").unwrap_err();
        assert!(e.to_string().contains("closing"), "{e}");
        assert!(PrefetcherSpec::parse("ondemand(max_kb=128)").is_ok());
        assert!(PrefetcherSpec::parse("stride(depth=4)").is_ok());
        assert!(PrefetcherSpec::parse("Linux-24(max=16)").is_ok());
        assert!(PrefetcherSpec::new(PrefetcherKind::Obl).build(1000).is_err());
    }

    #[test]
    fn list_reports_parameters_and_defaults() {
        let l = list();
        let lx = l.iter().find(|i| i.kind == PrefetcherKind::Linux24).unwrap();
        assert!(lx.params.iter().any(|(k, v)| k == "max" && v == &Value::from(32)), "{:?}", lx.params);
        let od = l.iter().find(|i| i.kind == PrefetcherKind::Ondemand).unwrap();
        assert!(od.params.iter().any(|(k, v)| k == "max_kb" && v == &Value::from(128)));
        assert!(l.iter().find(|i| i.kind == PrefetcherKind::NoPrefetch).unwrap().params.is_empty());
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    use super::*;
    use std::collections::BTreeSet;

    /// A driver's view from two sets.
    #[derive(Default)]
    pub struct SetView {
        pub resident: BTreeSet<BlockKey>,
        pub inflight: BTreeSet<BlockKey>,
    }

    impl BlockView for SetView {
        fn state(&self, key: BlockKey) -> BlockState {
            if self.inflight.contains(&key) {
                BlockState::InFlight
            } else if self.resident.contains(&key) {
                BlockState::Resident
            } else {
                BlockState::Absent
            }
        }
    }

    impl SetView {
        /// Marks the demand blocks and every fetched block resident (reads complete at once).
        pub fn complete(&mut self, d: &Demand, fetches: &[Fetch]) {
            for b in d.first.block()..d.first.block() + d.n {
                self.resident.insert(k(b));
            }
            for f in fetches {
                for b in f.first.block()..f.first.block() + f.n {
                    self.inflight.remove(&k(b));
                    self.resident.insert(k(b));
                }
            }
        }
    }

    pub fn k(b: u64) -> BlockKey {
        BlockKey::new(0, b).unwrap()
    }

    pub fn read(stream: u64, first: u64, n: u64, end: u64) -> Demand {
        Demand { stream, op: Op::Read, first: k(first), n, end }
    }

    /// Runs reads of `(first, n)` on stream 1 with every read completing at once; the fetches of each request.
    pub fn run(p: &mut dyn Prefetcher, reqs: &[(u64, u64)], end: u64) -> Vec<Vec<Fetch>> {
        let mut view = SetView::default();
        let mut all = Vec::new();
        for &(first, n) in reqs {
            let d = read(1, first, n, end);
            let mut out = Vec::new();
            p.on_demand(&d, &view, &mut out);
            view.complete(&d, &out);
            all.push(out);
        }
        all
    }

    /// `(first block, n, sync)` of fetches, for compact assertions.
    pub fn triples(f: &[Fetch]) -> Vec<(u64, u64, bool)> {
        f.iter().map(|f| (f.first.block(), f.n, f.sync)).collect()
    }
}
