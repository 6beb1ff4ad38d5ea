//! Options that several subcommands take, each defined once with its documentation (DESIGN convention 8): the
//! cache options ([`CacheArgs`], [`AdmitArgs`]), the output options ([`OutputArgs`]), and the typed values they
//! parse into. clap parses a flag, and serde a key of `serve`'s config file, through the same `FromStr`, so a
//! value is accepted, refused and explained alike wherever it is given.

use super::common::{parse_bytes, SizeSpec};
use anyhow::{bail, Context};
use blockwell_core::admission::AdmissionSpec;
use blockwell_core::policy::{PolicySpec, Preset};
use blockwell_core::prefetch::{PrefetcherKind, PrefetcherSpec};
use std::fmt::{Debug, Display};
use std::io::Write;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::str::FromStr;

/// clap value parser for a `FromStr` type: the error is the type's own message.
pub fn parse_arg<T: FromStr>(s: &str) -> Result<T, String>
where
    T::Err: Display,
{
    s.parse().map_err(|e: T::Err| e.to_string())
}

/// clap value parser of `--threads N`: a number of threads (what 0 means is each command's).
pub fn parse_threads(s: &str) -> Result<usize, String> {
    s.trim().parse::<usize>().map_err(|_| format!("'{s}' is not a number of threads (a whole number, 0 or more)"))
}

/// The values of `T`'s flags when none is given (their clap defaults).
pub fn defaults<T: clap::Args>() -> T {
    let m = T::augment_args(clap::Command::new("blockwell")).get_matches_from(["blockwell"]);
    T::from_arg_matches(&m).expect("every flag has a default")
}

// ---------------------------------------------------------------------------------------------------------------
// Typed values

/// A byte count: `4096`, `4KiB`, `64MiB`, `1.5GiB`, `10MB` (SI); in a config file also a bare integer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bytes(pub u64);

impl FromStr for Bytes {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        parse_bytes(s).map(Bytes)
    }
}

/// A cache block size: a power of two from 512 B to 1 MiB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSize(u64);

impl BlockSize {
    pub fn get(self) -> u64 {
        self.0
    }
}

impl Default for BlockSize {
    fn default() -> Self {
        BlockSize(4096)
    }
}

impl FromStr for BlockSize {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let b = parse_bytes(s)?;
        if !b.is_power_of_two() || !(512..=1 << 20).contains(&b) {
            bail!("{s} is not a power of two between 512 B and 1 MiB");
        }
        Ok(BlockSize(b))
    }
}

/// The size of one cache where there is no trace to take a percentage of: bytes (`64MiB`) or blocks
/// (`16384blocks`); `0` is no cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FixedSize {
    Bytes(u64),
    Blocks(u64),
}

impl FixedSize {
    /// The size in bytes at `block_size`.
    pub fn bytes(self, block_size: u64) -> u64 {
        match self {
            FixedSize::Bytes(b) => b,
            FixedSize::Blocks(n) => n.saturating_mul(block_size),
        }
    }
}

impl FromStr for FixedSize {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match SizeSpec::parse(s)? {
            SizeSpec::Bytes(b) => Ok(FixedSize::Bytes(b)),
            SizeSpec::Blocks(n) => Ok(FixedSize::Blocks(n)),
            SizeSpec::Percent(_) => {
                bail!(
                    "'{s}': a percentage of a footprint needs a trace; give bytes (`64MiB`) or blocks (`16384blocks`)"
                )
            }
        }
    }
}

/// A fraction in (0, 1), as `1/64` or `0.015625`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fraction(pub f64);

impl FromStr for Fraction {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        let t = s.trim();
        let x = match t.split_once('/') {
            Some((a, b)) => a.trim().parse::<f64>().ok().zip(b.trim().parse::<f64>().ok()).map(|(a, b)| a / b),
            None => t.parse::<f64>().ok(),
        };
        match x {
            Some(x) if x > 0.0 && x < 1.0 => Ok(Fraction(x)),
            _ => bail!("'{s}' is not a fraction between 0 and 1 (e.g. 1/64 or 0.015625)"),
        }
    }
}

/// Set associativity: blocks per set, at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Associativity(pub NonZeroUsize);

impl Associativity {
    pub fn get(self) -> NonZeroUsize {
        self.0
    }
}

impl FromStr for Associativity {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Self> {
        match s.trim().parse::<usize>() {
            Ok(0) => bail!(
                "0 ways: the associativity is the number of blocks per set, at least 1 (leave it out for a fully \
                 associative cache)"
            ),
            Ok(n) => Ok(Associativity(NonZeroUsize::new(n).expect("not 0"))),
            Err(_) => bail!("'{s}' is not a number of blocks per set (e.g. 512)"),
        }
    }
}

/// The ways of an optional associativity, for the engine.
pub fn ways(a: Option<Associativity>) -> Option<NonZeroUsize> {
    a.map(Associativity::get)
}

/// A comma-separated list; commas inside parentheses belong to an item (`lru,lru-k(k=3,crp=20)`). An empty
/// item (`1%,,5%`, a trailing comma) is refused, naming it; an item given twice is kept once, where it first
/// appears.
#[derive(Clone, Debug, PartialEq)]
pub struct List<T>(pub Vec<T>);

/// The items of `s`, each parsed by `parse` into one or more values (`all` is several policies); an empty
/// item is an error naming its place, and a value already given is left out.
fn parse_items<T: PartialEq>(s: &str, mut parse: impl FnMut(&str) -> Result<Vec<T>, String>) -> Result<Vec<T>, String> {
    if s.trim().is_empty() {
        return Err("no value given".into());
    }
    let all = blockwell_core::spec::split_items(s);
    let mut out: Vec<T> = Vec::new();
    for (i, item) in all.iter().enumerate() {
        if item.is_empty() {
            let place = if i + 1 == all.len() { " (a trailing comma?)".to_string() } else { String::new() };
            return Err(format!("'{s}': item {} of {} is empty{place}", i + 1, all.len()));
        }
        for v in parse(item)? {
            if !out.contains(&v) {
                out.push(v);
            }
        }
    }
    Ok(out)
}

impl<T: FromStr + PartialEq> FromStr for List<T>
where
    T::Err: Display,
{
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        parse_items(s, |x| x.parse().map(|v| vec![v]).map_err(|e: T::Err| e.to_string())).map(List)
    }
}

impl<T> std::ops::Deref for List<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

/// Policies for a command that runs several: a list of policy specs, where `all` stands for every policy
/// (`all`, or `all,lru-k(k=3)` for every policy and one more variant); a policy given twice runs once.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyList(pub Vec<PolicySpec>);

impl FromStr for PolicyList {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let parse = |x: &str| -> Result<Vec<PolicySpec>, String> {
            if x.eq_ignore_ascii_case("all") {
                return Ok(blockwell_core::PolicyKind::ALL.iter().map(|&k| PolicySpec::new(k)).collect());
            }
            x.parse::<PolicySpec>().map(|p| vec![p]).map_err(|e| e.to_string())
        };
        // The same policy with the same parameters, however spelled, is one cache.
        let specs = parse_items(s, parse)?;
        let mut out: Vec<PolicySpec> = Vec::new();
        for p in specs {
            if !out.iter().any(|q| q.kind == p.kind && q.overrides == p.overrides) {
                out.push(p);
            }
        }
        Ok(PolicyList(out))
    }
}

impl std::ops::Deref for PolicyList {
    type Target = [PolicySpec];
    fn deref(&self) -> &[PolicySpec] {
        &self.0
    }
}

/// serde helpers: a config file's values parsed by the same `FromStr` as the flags.
pub mod de {
    use serde::de::{Deserializer, Error, Visitor};
    use std::fmt::{self, Display};
    use std::marker::PhantomData;
    use std::str::FromStr;

    /// A value written as a string (or, for sizes and fractions, a number), parsed by its `FromStr`.
    pub fn from_str<'de, D: Deserializer<'de>, T: FromStr>(d: D) -> Result<T, D::Error>
    where
        T::Err: Display,
    {
        struct V<T>(PhantomData<T>);
        impl<T: FromStr> Visitor<'_> for V<T>
        where
            T::Err: Display,
        {
            type Value = T;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: Error>(self, s: &str) -> Result<T, E> {
                s.parse().map_err(|e: T::Err| E::custom(e))
            }
            fn visit_i64<E: Error>(self, v: i64) -> Result<T, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_u64<E: Error>(self, v: u64) -> Result<T, E> {
                self.visit_str(&v.to_string())
            }
            fn visit_f64<E: Error>(self, v: f64) -> Result<T, E> {
                self.visit_str(&v.to_string())
            }
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// `Deserialize` through `FromStr` (see [`de::from_str`]).
macro_rules! deserialize_from_str {
    ($($t:ty),*) => {$(
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                de::from_str(d)
            }
        }
    )*};
}
pub(crate) use deserialize_from_str;

deserialize_from_str!(Bytes, BlockSize, FixedSize, Fraction, Associativity);

// ---------------------------------------------------------------------------------------------------------------
// Cache options

/// How many caches a command runs with the cache options: [`One`] (`serve`, `mount`, `tsim`), or [`Many`]
/// (`sim`: every combination of a list of policies and a list of sizes, in one pass).
pub trait Arity: Clone + Debug + PartialEq + Send + Sync + 'static {
    /// What `--policy` takes.
    type Policy: Clone + Debug + PartialEq + Send + Sync + 'static + FromStr<Err: Display>;
    /// What `--cache` takes.
    type Cache: Clone + Debug + PartialEq + Send + Sync + 'static + FromStr<Err: Display>;
    /// Value names in the help.
    const POLICY: &'static str;
    const CACHE: &'static str;
    /// `--cache` when not given.
    const DEFAULT_CACHE: &'static str;
    /// The help of `--policy` and `--cache`: what the commands of this arity accept, and nothing else.
    const POLICY_HELP: &'static str;
    const CACHE_HELP: &'static str;
}

/// One cache: one policy, one size in bytes or blocks (64 MiB unless given).
#[derive(Clone, Debug, PartialEq)]
pub struct One;

impl Arity for One {
    type Policy = PolicySpec;
    type Cache = FixedSize;
    const POLICY: &'static str = "POLICY";
    const CACHE: &'static str = "SIZE";
    const DEFAULT_CACHE: &'static str = "64MiB";
    const POLICY_HELP: &'static str = "Replacement policy, with optional parameters: `lru`, `arc`, \
        `2q(a_in_ratio=0.3)`, `lru-k(k=3,crp=20)` (see `blockwell list`)";
    const CACHE_HELP: &'static str = "Cache size: bytes with a unit (`64MiB`) or blocks (`16384blocks`); `0` for \
        no RAM cache";
}

/// Every combination of comma-separated policies (or `all`) and comma-separated sizes, which may be
/// percentages of the trace's footprint (1%, 5% and 10% unless given).
#[derive(Clone, Debug, PartialEq)]
pub struct Many;

impl Arity for Many {
    type Policy = PolicyList;
    type Cache = List<SizeSpec>;
    const POLICY: &'static str = "POLICY,...";
    const CACHE: &'static str = "SIZE,...";
    const DEFAULT_CACHE: &'static str = "1%,5%,10%";
    const POLICY_HELP: &'static str = "Replacement policies, comma separated, each with optional parameters: \
        `lru,arc`, `2q(a_in_ratio=0.3)`, `lru-k(k=3,crp=20)` (see `blockwell list`); `all` for every policy \
        (`all,lru-k(k=3)` adds a variant). Every policy runs at every --cache size";
    const CACHE_HELP: &'static str = "Cache sizes, comma separated: bytes with a unit (`64MiB`), blocks \
        (`16384blocks`) or percentages of the trace's footprint (`1%`, measured in a first pass). With \
        --cache-dev-size, the RAM cache above the device, `0` for none";
}

/// The cache options: the policy, the size, the block size, the policy's parameter preset and the prefetcher,
/// parsed into the engine's types. `sim` takes lists ([`Many`]); `serve`, `mount` and `tsim` one cache
/// ([`One`]); the keys of `serve`'s config file are these fields.
#[derive(clap::Args, serde::Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields, bound = "CacheArgs<A>: Default")]
pub struct CacheArgs<A: Arity = One> {
    // The replacement policy or policies (help: `Arity::POLICY_HELP`).
    #[arg(long, short = 'p', value_name = A::POLICY, default_value = "lru", value_parser = parse_arg::<A::Policy>, help = A::POLICY_HELP)]
    #[serde(deserialize_with = "de::from_str")]
    pub policy: A::Policy,

    // The cache size or sizes (help: `Arity::CACHE_HELP`).
    #[arg(long, short = 'c', value_name = A::CACHE, default_value = A::DEFAULT_CACHE, value_parser = parse_arg::<A::Cache>, help = A::CACHE_HELP)]
    #[serde(deserialize_with = "de::from_str")]
    pub cache: A::Cache,

    /// Cache block size, a power of two from 512 B to 1 MiB.
    #[arg(long, short = 'b', value_name = "SIZE", default_value = "4KiB", value_parser = parse_arg::<BlockSize>)]
    pub block_size: BlockSize,

    /// Policy parameter preset: default (each policy's documented defaults), libcachesim (the defaults of
    /// libcachesim 0.3.5, for exact comparisons), butt05 (Table 4 of Butt et al., SIGMETRICS'05, on kernel
    /// prefetching and buffer-cache replacement). `serve` and `mount` refuse a preset
    /// that lets the policy hold more than its capacity (libcachesim_quirks).
    #[arg(long, value_name = "PRESET", default_value = "default", value_parser = parse_arg::<Preset>)]
    #[serde(deserialize_with = "de::from_str")]
    pub preset: Preset,

    /// Prefetcher: none, obl, linux24, linux26, ondemand, bsd, stride, redcap, each with optional parameters
    /// (`linux24(max=32)`, `redcap(segment_kb=128)`; see `blockwell list`). Prefetched blocks enter the policy
    /// through its prefetch path.
    #[arg(long, value_name = "SPEC", default_value = "none", value_parser = parse_arg::<PrefetcherSpec>)]
    #[serde(deserialize_with = "de::from_str")]
    pub prefetch: PrefetcherSpec,

    /// Set associativity: split the cache into sets of N blocks, each running the policy over its own blocks, so
    /// that a block is evicted only for a block of its set (FlashCache's 512-way: a block's set is
    /// (block / N) mod sets). Left out: fully associative, as is N at least the cache's blocks. Not with
    /// libcachesim_quirks presets.
    #[arg(long, value_name = "N", value_parser = parse_arg::<Associativity>)]
    pub associativity: Option<Associativity>,
}

impl<A: Arity> Default for CacheArgs<A> {
    /// The flags' defaults.
    fn default() -> Self {
        defaults()
    }
}

impl<A: Arity> CacheArgs<A> {
    /// A prefetcher other than `none` was given.
    pub fn prefetching(&self) -> bool {
        self.prefetch.kind != PrefetcherKind::NoPrefetch
    }

    /// `--associativity` for the engine: blocks per set, or `None` (fully associative).
    pub fn ways(&self) -> Option<NonZeroUsize> {
        ways(self.associativity)
    }
}

/// What enters a cache: the admission rule and the sequential cutoff (`sim`, `serve`, `mount`; the time-aware
/// simulator has neither).
#[derive(clap::Args, serde::Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct AdmitArgs {
    /// Which missed blocks enter the cache: `always`; `n-hit:N` (on the N-th miss within a recent-miss history
    /// as long as the cache); `tinylfu` (when more frequent than the block it would evict; `tinylfu:sample=N`
    /// ages the sketch every N x capacity accesses, default 10); `bloom` (on a block's second miss, remembered in
    /// a Bloom filter); `prob:P` (with probability P, `prob:P:seed=S` for another seed).
    #[arg(long, value_name = "SPEC", default_value = "always", value_parser = parse_arg::<AdmissionSpec>)]
    #[serde(deserialize_with = "de::from_str")]
    pub admission: AdmissionSpec,

    /// A back-to-back run of requests reaching this many bytes bypasses the cache (bcache's
    /// sequential_cutoff); 0 turns it off.
    #[arg(long, value_name = "SIZE", default_value = "0", value_parser = parse_arg::<Bytes>)]
    pub sequential_cutoff: Bytes,
}

impl Default for AdmitArgs {
    /// The flags' defaults.
    fn default() -> Self {
        defaults()
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Output options

/// How a command prints its report: a table (default), CSV or JSON, on standard output or into a file.
#[derive(clap::Args, Clone, Debug, Default, PartialEq)]
pub struct OutputArgs {
    /// Print CSV instead of the table.
    #[arg(long, conflicts_with = "json")]
    pub csv: bool,

    /// Print JSON instead of the table.
    #[arg(long)]
    pub json: bool,

    /// Write the output to FILE instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// What [`OutputArgs`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Table,
    Csv,
    Json,
}

impl OutputArgs {
    pub fn format(&self) -> Format {
        if self.json {
            Format::Json
        } else if self.csv {
            Format::Csv
        } else {
            Format::Table
        }
    }

    /// Writes the rendered output to `--output` or standard output.
    pub fn write(&self, text: &str) -> anyhow::Result<()> {
        match &self.output {
            Some(p) => std::fs::write(p, text).with_context(|| format!("--output {}", p.display())),
            None => Ok(std::io::stdout().lock().write_all(text.as_bytes())?),
        }
    }

    /// Renders `value` for `--json` (pretty, with a final newline).
    pub fn json<T: serde::Serialize + ?Sized>(value: &T) -> anyhow::Result<String> {
        let mut s = serde_json::to_string_pretty(value)?;
        s.push('\n');
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Sim {
        #[command(flatten)]
        cache: CacheArgs<Many>,
    }

    #[derive(Parser, Debug)]
    struct Serve {
        #[command(flatten)]
        cache: CacheArgs<One>,
    }

    #[test]
    fn one_and_many_share_the_flags() {
        let s = Sim::parse_from(["x", "--policy", "lru,lru-k(k=3,crp=20)", "-c", "1%,64MiB"]);
        assert_eq!(s.cache.policy.len(), 2);
        assert_eq!(s.cache.cache.0, vec![SizeSpec::Percent(1.0), SizeSpec::Bytes(64 << 20)]);
        assert_eq!(Sim::parse_from(["x", "-p", "all"]).cache.policy.len(), blockwell_core::PolicyKind::ALL.len());
        let one = Serve::parse_from(["x", "--policy", "arc", "--cache", "16blocks", "--preset", "seed001"]);
        assert_eq!(one.cache.policy.label(), "arc");
        assert_eq!(one.cache.cache.bytes(4096), 65536);
        assert_eq!(one.cache.preset, Preset::Butt05);
        let d = CacheArgs::<One>::default();
        assert_eq!((d.cache, d.block_size.get(), d.preset), (FixedSize::Bytes(64 << 20), 4096, Preset::Default));
        assert_eq!(CacheArgs::<Many>::default().cache.len(), 3);
        let e = Serve::try_parse_from(["x", "--cache", "5%"]).unwrap_err().to_string();
        assert!(e.contains("--cache") && e.contains("needs a trace"), "{e}");
        let e = Serve::try_parse_from(["x", "--policy", "lru,arc"]).unwrap_err().to_string();
        assert!(e.contains("--policy"), "{e}");
        let e = Sim::try_parse_from(["x", "--block-size", "3000"]).unwrap_err().to_string();
        assert!(e.contains("3000 is not a power of two"), "{e}");
    }

    #[test]
    fn values_deserialize_through_from_str() {
        let c: CacheArgs<One> = toml::from_str("cache = 1048576\npolicy = \"2q\"\nblock_size = \"8KiB\"\n").unwrap();
        assert_eq!((c.cache, c.block_size.get()), (FixedSize::Bytes(1 << 20), 8192));
        assert_eq!(c.preset, Preset::Default, "unset keys take the flags' defaults");
        let e = toml::from_str::<CacheArgs<One>>("preset = \"x\"\n").unwrap_err();
        assert_eq!(e.message(), "unknown preset 'x' (known: default, libcachesim, butt05)");
        let e = toml::from_str::<CacheArgs<One>>("polcy = \"lru\"\n").unwrap_err();
        assert!(e.message().contains("unknown field `polcy`"), "{}", e.message());
    }

    #[test]
    fn associativity_is_a_positive_number_of_ways_by_flag_or_key() {
        assert_eq!(CacheArgs::<One>::default().ways(), None, "fully associative unless asked");
        let s = Sim::parse_from(["x", "--associativity", "512"]);
        assert_eq!(s.cache.ways(), NonZeroUsize::new(512));
        let e = Serve::try_parse_from(["x", "--associativity", "0"]).unwrap_err().to_string();
        assert!(e.contains("--associativity") && e.contains("at least 1"), "{e}");
        let e = Sim::try_parse_from(["x", "--associativity", "many"]).unwrap_err().to_string();
        assert!(e.contains("--associativity") && e.contains("not a number of blocks per set"), "{e}");
        let c: CacheArgs<One> = toml::from_str("associativity = 64\n").unwrap();
        assert_eq!(c.ways(), NonZeroUsize::new(64));
        let c: CacheArgs<One> = toml::from_str("associativity = \"8\"\n").unwrap();
        assert_eq!(c.ways(), NonZeroUsize::new(8));
        let e = toml::from_str::<CacheArgs<One>>("associativity = 0\n").unwrap_err();
        assert!(e.message().contains("at least 1"), "{}", e.message());
    }

    #[test]
    fn fractions_are_ratios_or_decimals_strictly_between_0_and_1() {
        assert_eq!("1/64".parse::<Fraction>().unwrap(), Fraction(1.0 / 64.0));
        assert_eq!(" 0.25 ".parse::<Fraction>().unwrap(), Fraction(0.25));
        for bad in ["1/1", "0", "2", "1/x", "half"] {
            let e = bad.parse::<Fraction>().unwrap_err().to_string();
            assert!(e.starts_with(&format!("'{bad}' is not a fraction between 0 and 1")), "{e}");
        }
    }
}
