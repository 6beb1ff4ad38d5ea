//! Replacement policies: one module per policy behind the small [`Policy`] trait, and the one registry
//! ([`PolicyKind`]) that the CLI, the simulator and the server use to name and build them.
//!
//! A policy tracks keys and per-entry state only; it never sees data. It owns its arena of entries
//! (resident and ghost) and its handle-only index ([`crate::arena`]). Demand accesses go through
//! [`Policy::access`]; prefetched blocks through [`Policy::prefetch`], which every policy adapts as
//! seed `001_*` §4 says (prefetched blocks are flagged "not yet accessed", their first demand access counts as
//! the first reference, and they are never remembered in a ghost list when evicted unaccessed).
//!
//! Adding a policy is one new file and one line in the `registry!` invocation below. [`setassoc`] is not a policy
//! of the registry but a wrapper: any of them run per set of a set-associative cache (FlashCache's associativity),
//! built by [`PolicySpec::build_with_associativity`] when a cache asks for it.

use crate::arena::{Arena, Handle, KeyIndex, Keyed, Linked};
use crate::key::BlockKey;
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{Map, Value};
use std::fmt::Debug;
use std::num::NonZeroUsize;

pub mod arc;
pub mod cacheus;
pub mod car;
pub mod clock;
pub mod clockpro;
pub mod fifo;
mod freqlist;
pub(crate) mod handle_heap;
pub mod hyperbolic;
pub mod lecar;
pub mod lhd;
pub mod lirs;
pub mod lrfu;
pub mod lru;
pub mod lruk;
pub mod mq;
pub mod mru;
mod multilist;
mod onelist;
pub mod opt;
pub mod random;
pub mod s3fifo;
pub mod setassoc;
pub mod sieve;
pub mod twolist;
pub mod twoq;
pub mod wtinylfu;

#[cfg(test)]
mod proptest_model;
#[cfg(test)]
mod testutil;
#[cfg(test)]
mod victim_tests;

/// One demand access or prefetch candidate as a policy sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    pub key: BlockKey,
    /// Logical time (index of the block access in the trace) of the next demand access to this key,
    /// or [`NEVER`]. Only OPT reads it; the simulator fills it with a reverse pass over the trace.
    pub next_use: u64,
}

/// `next_use` of a block that is never accessed again (or when the future is unknown).
pub const NEVER: u64 = u64::MAX;

impl Access {
    #[inline]
    pub const fn new(key: BlockKey) -> Self {
        Access { key, next_use: NEVER }
    }

    #[inline]
    pub const fn with_next_use(key: BlockKey, next_use: u64) -> Self {
        Access { key, next_use }
    }
}

/// What a demand access found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not resident: the block was inserted (policies may decline, e.g. OPT for a block never used again).
    Miss,
    /// Resident and already accessed on demand before.
    Hit,
    /// Resident, brought in by a prefetch and accessed on demand for the first time now.
    PrefetchHit,
}

impl Outcome {
    #[inline]
    pub fn is_hit(self) -> bool {
        !matches!(self, Outcome::Miss)
    }
}

/// A block that left the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Evicted {
    pub key: BlockKey,
    /// It was prefetched and never accessed on demand (a wasted prefetch).
    pub unused_prefetch: bool,
}

/// Named parameter sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// Each policy's documented defaults (see the module docs).
    #[default]
    Default,
    /// The defaults of the libcachesim 0.3.5 classes, so results compare exactly.
    Libcachesim,
    /// Table 4 of Butt, Gniady & Hu, "The performance impact of kernel prefetching on buffer cache replacement
    /// algorithms" (SIGMETRICS'05): ghost caches equal to the cache size, etc. Named `butt05`; the former name
    /// `seed001` is accepted too.
    #[serde(rename = "butt05", alias = "seed001")]
    Butt05,
}

impl Preset {
    pub const ALL: &'static [Preset] = &[Preset::Default, Preset::Libcachesim, Preset::Butt05];

    /// Former names still accepted: (alias, preset).
    pub const ALIASES: &'static [(&'static str, Preset)] = &[("seed001", Preset::Butt05)];

    pub fn name(self) -> &'static str {
        match self {
            Preset::Default => "default",
            Preset::Libcachesim => "libcachesim",
            Preset::Butt05 => "butt05",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|p| p.name().eq_ignore_ascii_case(s))
            .or_else(|| Self::ALIASES.iter().find(|(alias, _)| alias.eq_ignore_ascii_case(s)).map(|&(_, p)| p))
    }
}

/// A replacement policy over a capacity counted in blocks.
pub trait Policy: Send + 'static {
    /// Parameters. Unknown fields are rejected; missing fields take the preset's value.
    type Config: Default + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static;

    /// Whether the policy reads [`Access::next_use`] (an offline policy such as OPT): drivers then compute
    /// next-use times with a reverse pass over the trace.
    const NEEDS_NEXT_USE: bool = false;

    /// The parameters a preset gives (default: `Config::default()`).
    fn preset(preset: Preset) -> Self::Config {
        let _ = preset;
        Self::Config::default()
    }

    /// Rejects parameter values that make no sense (negative rates, zero queues...); `Err` says which and why.
    /// Called by [`PolicySpec::config`] after the typed round-trip, so bad values fail when parsed.
    fn check_config(c: &Self::Config) -> Result<(), String> {
        let _ = c;
        Ok(())
    }

    /// Whether `config` reproduces libcachesim 0.3.5's defects for exact comparisons (`libcachesim_quirks`): the
    /// policy may then hold more blocks than its capacity (LIRS) or admit nothing (S3-FIFO, 2Q in tiny caches), so
    /// a live cache refuses it. Default: no.
    fn libcachesim_quirks(config: &Self::Config) -> bool {
        let _ = config;
        false
    }

    /// A policy holding at most `capacity` (>= 1) blocks.
    fn new(capacity: usize, config: &Self::Config) -> Self
    where
        Self: Sized;

    /// Capacity in blocks.
    fn capacity(&self) -> usize;

    /// Resident blocks (ghost entries not counted).
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Is `key` resident?
    fn contains(&self, key: BlockKey) -> bool;

    /// A demand access: on a hit update the policy's state; on a miss insert the block (evicting into `out`).
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome;

    /// A demand access to a block only if it is resident: updates the policy's state as [`Policy::access`]
    /// does (a hit may evict, as LIRS's pruning can) and returns [`Outcome::Hit`] or [`Outcome::PrefetchHit`];
    /// `None`, changing nothing, when it is not. The default looks the block up twice; the list policies, whose
    /// lookup is most of a hit, do it once.
    #[inline]
    fn hit(&mut self, access: Access, out: &mut Vec<Evicted>) -> Option<Outcome> {
        if self.contains(access.key) {
            Some(self.access(access, out))
        } else {
            None
        }
    }

    /// Inserts blocks brought in by one prefetch (one group, typically one device request). Blocks already
    /// resident are left alone (a prefetch is not a reference). Returns how many were inserted.
    ///
    /// Contract: the group's keys are distinct and there are at most `capacity()` of them
    /// ([`crate::BlockCache::prefetch`] ensures it for drivers).
    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize;

    /// Drops `key` if resident (e.g. invalidated by a write-around write). Ghost history is kept.
    fn remove(&mut self, key: BlockKey) -> bool;

    /// Checks the policy's invariants; `Err` names the first one broken.
    fn validate(&self) -> Result<(), String>;

    /// Bytes of heap the policy's metadata occupies now (arena, index, ghosts).
    fn heap_bytes(&self) -> usize;

    /// Which block a demand miss of `incoming` (not resident) would evict now, changing nothing: what a
    /// victim-comparing admission rule (TinyLFU) weighs the newcomer against. The default says
    /// [`Victim::Unknown`].
    fn victim(&self, incoming: BlockKey) -> Victim {
        let _ = incoming;
        Victim::Unknown
    }

    /// Whether [`Policy::hint`] does anything: a driver that knows the coming requests (the simulator's replay)
    /// then tells the policy of each a few requests ahead.
    const HINTS: bool = false;

    /// `key` will be accessed soon: the policy may start loading what its lookup will read (a prefetch into the
    /// processor's cache). Changes no state and no result; the default does nothing.
    #[inline]
    fn hint(&self, key: BlockKey) {
        let _ = key;
    }
}

/// What [`Policy::victim`] says of the next demand miss.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Victim {
    /// The miss would evict nothing (the cache has room, or the policy would not insert the block).
    None,
    /// The miss would evict this block.
    Block(BlockKey),
    /// The policy cannot say without changing its state.
    Unknown,
}

/// The common prefetch rule of policies whose prefetched blocks go where a missed block would: insert every
/// key of the group that is not resident (with `insert(policy, key, out)`, which flags it as prefetched) and
/// leave resident ones alone. Returns how many were inserted.
pub(crate) fn prefetch_missing<P: Policy>(
    p: &mut P,
    group: &[Access],
    out: &mut Vec<Evicted>,
    mut insert: impl FnMut(&mut P, BlockKey, &mut Vec<Evicted>),
) -> usize {
    let mut n = 0;
    for a in group {
        if !p.contains(a.key) {
            insert(p, a.key, out);
            n += 1;
        }
    }
    n
}

/// Evicts entry `h`, which is on no list, and reports it: drops its key from the index, frees it, and pushes it to
/// `out` as an unused prefetch if its flag ("prefetched, not yet accessed") is set. For a block that leaves no ghost.
#[inline(always)]
pub(crate) fn evict<T: Keyed + Linked>(arena: &mut Arena<T>, index: &mut KeyIndex, h: Handle, out: &mut Vec<Evicted>) {
    let unused_prefetch = arena[h].links().flag();
    let key = index.forget(arena, h);
    out.push(Evicted { key, unused_prefetch });
}

/// Object-safe view of a [`Policy`], for callers that pick the policy at run time (the live server).
pub trait DynPolicy: Send {
    fn capacity(&self) -> usize;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn contains(&self, key: BlockKey) -> bool;
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome;
    fn hit(&mut self, access: Access, out: &mut Vec<Evicted>) -> Option<Outcome>;
    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize;
    fn remove(&mut self, key: BlockKey) -> bool;
    fn validate(&self) -> Result<(), String>;
    fn heap_bytes(&self) -> usize;
    fn victim(&self, incoming: BlockKey) -> Victim {
        let _ = incoming;
        Victim::Unknown
    }
}

impl<P: Policy> DynPolicy for P {
    fn capacity(&self) -> usize {
        Policy::capacity(self)
    }
    fn len(&self) -> usize {
        Policy::len(self)
    }
    fn contains(&self, key: BlockKey) -> bool {
        Policy::contains(self, key)
    }
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        Policy::access(self, access, out)
    }
    fn hit(&mut self, access: Access, out: &mut Vec<Evicted>) -> Option<Outcome> {
        Policy::hit(self, access, out)
    }
    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        Policy::prefetch(self, group, out)
    }
    fn remove(&mut self, key: BlockKey) -> bool {
        Policy::remove(self, key)
    }
    fn validate(&self) -> Result<(), String> {
        Policy::validate(self)
    }
    fn heap_bytes(&self) -> usize {
        Policy::heap_bytes(self)
    }
    fn victim(&self, incoming: BlockKey) -> Victim {
        Policy::victim(self, incoming)
    }
}

/// Errors naming a policy or its parameters.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PolicyError {
    #[error("unknown policy '{name}' (known: {known})")]
    Unknown { name: String, known: String },
    #[error("policy '{policy}': bad parameters '{params}': {message}")]
    BadParams { policy: String, params: String, message: String },
    #[error("policy '{policy}': invalid configuration: {message}")]
    Invalid { policy: String, message: String },
    #[error("cache capacity must be at least one block")]
    ZeroCapacity,
    #[error(
        "policy '{policy}' with preset '{preset}' reproduces libcachesim's defects (libcachesim_quirks) and may hold \
         more blocks than its capacity: it cannot run set-associative (use another preset)"
    )]
    AssociativityQuirks { policy: String, preset: &'static str },
}

/// Generic code run on a concrete policy type chosen at run time (see [`PolicySpec::visit`]).
pub trait PolicyVisitor {
    type Output;
    fn visit<P: Policy>(self, config: P::Config) -> Self::Output;
}

macro_rules! registry {
    ($( $variant:ident => $ty:path, $name:literal, [$($alias:literal),*], $summary:literal; )*) => {
        crate::spec_registry! {
            /// Every policy Blockwell has. The one registry: names, aliases, summaries, construction.
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
            pub enum PolicyKind: "policy" { $( $variant => $name, [$($alias),*], $summary; )* }
        }

        impl PolicyKind {
            /// Whether the policy needs next-use times ([`Policy::NEEDS_NEXT_USE`]).
            pub fn needs_next_use(self) -> bool {
                match self { $(PolicyKind::$variant => <$ty as Policy>::NEEDS_NEXT_USE),* }
            }

            fn preset_value(self, preset: Preset) -> Value {
                match self {
                    $(PolicyKind::$variant => serde_json::to_value(<$ty as Policy>::preset(preset))
                        .expect("policy configs serialize")),*
                }
            }

            fn visit_value<V: PolicyVisitor>(self, config: Value, v: V) -> Result<V::Output, String> {
                match self {
                    $(PolicyKind::$variant => {
                        let c: <$ty as Policy>::Config = serde_json::from_value(config).map_err(|e| e.to_string())?;
                        Ok(v.visit::<$ty>(c))
                    })*
                }
            }
        }
    };
}

registry! {
    Fifo => fifo::Fifo, "fifo", [], "first in, first out";
    Lru => lru::Lru, "lru", [], "least recently used";
    Clock => clock::Clock, "clock", [], "CLOCK (second chance) with an n-bit reference counter";
    LruK => lruk::LruK, "lru-k", ["lruk", "lru2"], "evict the oldest K-th most recent reference (O'Neil et al. 1993)";
    TwoQ => twoq::TwoQ, "2q", ["twoq", "two-q"], "2Q: FIFO A1in, ghost A1out, LRU Am (Johnson & Shasha, VLDB'94)";
    Lirs => lirs::Lirs, "lirs", [], "low inter-reference recency set (Jiang & Zhang 2002)";
    Lrfu => lrfu::Lrfu, "lrfu", [], "least recently/frequently used: combined recency and frequency, decaying by lambda";
    Mq => mq::Mq, "mq", [], "multi-queue: LRU queues by frequency, demotion after a lifetime, frequency history";
    ClockPro => clockpro::ClockPro, "clock-pro", ["clockpro"], "CLOCK-Pro: hot/cold blocks, test periods, non-resident entries, three hands (Jiang et al., USENIX ATC'05)";
    Arc => arc::Arc, "arc", [], "adaptive replacement cache (Megiddo & Modha, FAST'03)";
    Car => car::Car, "car", [], "CLOCK with adaptive replacement (Bansal & Modha, FAST'04)";
    S3Fifo => s3fifo::S3Fifo, "s3fifo", ["s3-fifo"], "S3-FIFO: small probation FIFO, main FIFO-reinsertion, ghost";
    Sieve => sieve::Sieve, "sieve", [], "SIEVE: FIFO with a visited bit and a hand that stays in place";
    WTinyLfu => wtinylfu::WTinyLfu, "w-tinylfu", ["wtinylfu", "tinylfu", "w-tiny-lfu"], "W-TinyLFU: LRU window, SLRU main cache, frequency-sketch admission (Einziger et al. 2017)";
    Lhd => lhd::Lhd, "lhd", [], "LHD: evict the sampled block of least hit density, learned from age histograms (Beckmann et al., NSDI'18)";
    Hyperbolic => hyperbolic::Hyperbolic, "hyperbolic", [], "Hyperbolic caching: evict the sampled block of fewest hits per time in the cache (Blankstein et al., ATC'17)";
    TwoList => twolist::TwoList, "two-list", ["linux-lru", "active-inactive"], "the Linux page cache's active/inactive two-list LRU with a referenced bit";
    Mru => mru::Mru, "mru", [], "most recently used: evict the block used last (Chou & DeWitt, VLDB'85, for loops)";
    Random => random::Random, "random", ["rand"], "evict a block chosen at random (seeded, deterministic)";
    LeCar => lecar::LeCar, "lecar", ["le-car"], "LeCaR: LRU and LFU experts weighted by regret minimisation (Vietri et al., HotStorage'18)";
    Cacheus => cacheus::Cacheus, "cacheus", [], "CACHEUS: SR-LRU and CR-LFU experts, regret weights, adaptive learning rate (Rodriguez et al., FAST'21)";
    Opt => opt::Opt, "opt", ["belady"], "Belady's optimal offline policy: evict the block used farthest in the future";
}

/// Unknown policy names keep [`PolicyError::Unknown`]'s fields ([`crate::spec::UnknownName`]'s message).
impl From<crate::spec::UnknownName> for PolicyError {
    fn from(u: crate::spec::UnknownName) -> Self {
        PolicyError::Unknown { name: u.name, known: u.known }
    }
}

/// A policy with parameter overrides, as written on the command line: `arc`, `lru-k(k=3,crp=20)`,
/// `clock(bits=2)`. Values are JSON scalars (`0.25`, `true`, `"x"`); bare words are strings.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicySpec {
    pub kind: PolicyKind,
    pub overrides: Map<String, Value>,
    text: String,
}

impl PolicySpec {
    pub fn new(kind: PolicyKind) -> Self {
        PolicySpec { kind, overrides: Map::new(), text: kind.name().to_string() }
    }

    /// Parses `name` or `name(key=value,...)`.
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        let s = s.trim();
        let text = crate::spec::split_spec(s).map_err(|e| {
            let policy = s.split('(').next().unwrap_or(s).trim().to_string();
            let params = s.to_string();
            PolicyError::BadParams { policy, params, message: e.to_string() }
        })?;
        let kind = PolicyKind::from_name(text.name)?;
        let mut overrides = Map::new();
        for (k, v) in text.params {
            overrides.insert(k, crate::spec::json_value(v));
        }
        let spec = PolicySpec { kind, overrides, text: s.to_string() };
        // Reject unknown keys and bad types now, not in the middle of a run.
        spec.config(Preset::Default)?;
        Ok(spec)
    }

    /// The text the spec was parsed from (used as the policy's label in reports).
    pub fn label(&self) -> &str {
        &self.text
    }

    /// The resolved configuration under `preset`, as JSON (for reports).
    pub fn config(&self, preset: Preset) -> Result<Value, PolicyError> {
        let mut v = self.kind.preset_value(preset);
        if let Value::Object(m) = &mut v {
            for (k, x) in &self.overrides {
                if !m.contains_key(k) {
                    return Err(PolicyError::BadParams {
                        policy: self.kind.name().into(),
                        params: k.clone(),
                        message: if m.is_empty() {
                            "unknown parameter (this policy takes none)".to_string()
                        } else {
                            format!("unknown parameter (known: {})", m.keys().cloned().collect::<Vec<_>>().join(", "))
                        },
                    });
                }
                m.insert(k.clone(), x.clone());
            }
        } else if !self.overrides.is_empty() {
            return Err(PolicyError::BadParams {
                policy: self.kind.name().into(),
                params: self.params_text(),
                message: "this policy takes no parameters".into(),
            });
        }
        // Round-trip through the typed config to check types, then the policy's own value checks.
        self.kind
            .visit_value(v.clone(), CheckVisitor)
            .map_err(|message| PolicyError::BadParams {
                policy: self.kind.name().into(),
                params: self.params_text(),
                message,
            })?
            .map_err(|message| PolicyError::Invalid { policy: self.kind.name().into(), message })?;
        Ok(v)
    }

    /// The overrides as written: `k=3, crp=20` (for messages).
    fn params_text(&self) -> String {
        self.overrides.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
    }

    /// Runs `v` on the concrete policy type with its resolved configuration.
    pub fn visit<V: PolicyVisitor>(&self, preset: Preset, v: V) -> Result<V::Output, PolicyError> {
        let config = self.config(preset)?;
        self.kind.visit_value(config, v).map_err(|message| PolicyError::BadParams {
            policy: self.kind.name().into(),
            params: self.params_text(),
            message,
        })
    }

    /// Builds a boxed policy of `capacity` blocks.
    pub fn build(&self, preset: Preset, capacity: usize) -> Result<Box<dyn DynPolicy>, PolicyError> {
        if capacity == 0 {
            return Err(PolicyError::ZeroCapacity);
        }
        struct Build(usize);
        impl PolicyVisitor for Build {
            type Output = Box<dyn DynPolicy>;
            fn visit<P: Policy>(self, config: P::Config) -> Self::Output {
                Box::new(P::new(self.0, &config))
            }
        }
        self.visit(preset, Build(capacity))
    }

    /// Builds a boxed policy of `capacity` blocks, `ways`-way set-associative ([`setassoc::SetAssoc`]) when `ways`
    /// is given and smaller than the capacity; otherwise exactly [`PolicySpec::build`] (the same type, no wrapper).
    /// Refuses a configuration with `libcachesim_quirks` whenever `ways` is given
    /// ([`PolicySpec::check_associativity`]).
    pub fn build_with_associativity(
        &self,
        preset: Preset,
        capacity: usize,
        ways: Option<NonZeroUsize>,
    ) -> Result<Box<dyn DynPolicy>, PolicyError> {
        if ways.is_some() {
            self.check_associativity(preset)?;
        }
        let Some(ways) = setassoc::split_ways(capacity, ways) else {
            return self.build(preset, capacity);
        };
        struct Build(usize, NonZeroUsize);
        impl PolicyVisitor for Build {
            type Output = Box<dyn DynPolicy>;
            fn visit<P: Policy>(self, config: P::Config) -> Self::Output {
                Box::new(setassoc::SetAssoc::<P>::with_ways(self.0, self.1, &config))
            }
        }
        self.visit(preset, Build(capacity, ways))
    }

    /// Whether the policy can run set-associative under `preset`: not with `libcachesim_quirks`, which may let a
    /// set hold more blocks than its ways.
    pub fn check_associativity(&self, preset: Preset) -> Result<(), PolicyError> {
        if self.libcachesim_quirks(preset)? {
            return Err(PolicyError::AssociativityQuirks { policy: self.label().to_string(), preset: preset.name() });
        }
        Ok(())
    }

    /// Whether the configuration under `preset` reproduces libcachesim's defects ([`Policy::libcachesim_quirks`]).
    pub fn libcachesim_quirks(&self, preset: Preset) -> Result<bool, PolicyError> {
        struct Quirks;
        impl PolicyVisitor for Quirks {
            type Output = bool;
            fn visit<P: Policy>(self, config: P::Config) -> bool {
                P::libcachesim_quirks(&config)
            }
        }
        self.visit(preset, Quirks)
    }
}

struct CheckVisitor;
impl PolicyVisitor for CheckVisitor {
    type Output = Result<(), String>;
    fn visit<P: Policy>(self, config: P::Config) -> Result<(), String> {
        P::check_config(&config)
    }
}

/// Parses a comma-separated list of specs, keeping commas inside parentheses: `lru,lru-k(k=3,crp=5),arc`.
pub fn parse_policy_list(s: &str) -> Result<Vec<PolicySpec>, PolicyError> {
    crate::spec::split_list(s).into_iter().map(PolicySpec::parse).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwell_testkit::Rng;

    #[test]
    fn names_resolve_case_and_dash_insensitive() {
        assert_eq!(PolicyKind::from_name("LRU").unwrap(), PolicyKind::Lru);
        let e = PolicyKind::from_name("nope").unwrap_err();
        assert!(e.to_string().contains("unknown policy 'nope'"), "{e}");
        assert!(e.to_string().contains("lru"), "{e}");
    }

    #[test]
    fn every_policy_builds_under_every_preset() {
        for &k in PolicyKind::ALL {
            for &p in Preset::ALL {
                let b = PolicySpec::new(k).build(p, 16).unwrap();
                assert_eq!(b.capacity(), 16, "{k:?} {p:?}");
                b.validate().unwrap();
            }
        }
    }

    #[test]
    fn hit_is_contains_then_access_for_every_policy() {
        for &k in PolicyKind::ALL {
            for &p in Preset::ALL {
                let mut a = PolicySpec::new(k).build(p, 32).unwrap();
                let mut b = PolicySpec::new(k).build(p, 32).unwrap();
                let (mut va, mut vb) = (Vec::new(), Vec::new());
                let mut rng = Rng(0x9e37_79b9u64 + k as u64);
                for i in 0..4000u64 {
                    let x = rng.next();
                    let acc = Access::with_next_use(BlockKey::new(0, x % 96).unwrap(), i + x % 500);
                    let ha = a.hit(acc, &mut va);
                    let hb = if b.contains(acc.key) { Some(b.access(acc, &mut vb)) } else { None };
                    assert_eq!(ha, hb, "{k:?} {p:?} step {i}");
                    if ha.is_none() {
                        assert_eq!(a.access(acc, &mut va), b.access(acc, &mut vb), "{k:?} {p:?} step {i}");
                    }
                    assert_eq!(va, vb, "{k:?} {p:?} step {i}");
                }
            }
        }
    }

    #[test]
    fn unknown_param_is_an_error_naming_it() {
        let e = PolicySpec::parse("lru(bogus=1)").unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }

    #[test]
    fn libcachesim_quirks_is_the_configs_flag() {
        for &k in PolicyKind::ALL {
            for &p in Preset::ALL {
                let spec = PolicySpec::new(k);
                let flag = spec.config(p).unwrap().get("libcachesim_quirks") == Some(&Value::Bool(true));
                assert_eq!(spec.libcachesim_quirks(p).unwrap(), flag, "{k:?} {p:?}");
            }
        }
        assert!(PolicySpec::parse("lirs(libcachesim_quirks=true)")
            .unwrap()
            .libcachesim_quirks(Preset::Default)
            .unwrap());
        assert!(!PolicySpec::parse("2q(libcachesim_quirks=false)")
            .unwrap()
            .libcachesim_quirks(Preset::Libcachesim)
            .unwrap());
        assert!(!PolicySpec::new(PolicyKind::Arc).libcachesim_quirks(Preset::Libcachesim).unwrap());
    }

    #[test]
    fn list_split_respects_parentheses() {
        let l = parse_policy_list("lru, lru").unwrap();
        assert_eq!(l.len(), 2);
        assert!(parse_policy_list("lru,(").is_err());
    }
}
