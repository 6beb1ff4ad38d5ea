//! File-level workload generators: seed `000_*`'s five benchmarks (REDCAP) and seed `001_*`'s workload classes
//! (prefetch-aware buffer caching), behind one registry.
//!
//! A workload is named like a policy: `strided-4k`, `strided-4k(procs=8,file_mb=64)`, `random(dist=zipf)`.
//! [`WorkloadSpec::parse`] checks the name and every parameter (unknown parameters, wrong types and values out of
//! range are errors naming the parameter); [`WorkloadSpec::build`] generates the [`Workload`]. [`list`] gives
//! every generator with its parameters, defaults and meaning. The same spec (seed included, a parameter of
//! every generator that draws random numbers) always gives the same workload.
//!
//! Generators and their interpretation of the papers: `docs/workloads.md`. All requests are closed-loop
//! (`at_ns = None`) with `think_ns = think_us × 1000`. Files are created by the processes that use them
//! ([`crate::workload::FileInfo::writer`]), all at the same time, so block-group layouts interleave them
//! ([`crate::layout`]).

mod apps;
mod classes;
mod redcap;

use crate::gen::Rng;
use crate::workload::{FileInfo, FileRequest, Workload};
use blockwell_core::Op;
use serde::{de::DeserializeOwned, Serialize};
use serde_json::{Map, Value};

pub use apps::{
    paper_app, CscopeConfig, GccConfig, GlimpseConfig, MultiConfig, PaperApp, TpcConfig, ViewperfConfig, PAPER_BLOCK,
    TABLE2,
};
pub use classes::{Dist, LoopConfig, MixConfig, RandomConfig};
pub use redcap::{IorConfig, KernelReadConfig, StridedConfig, TacConfig};

/// Most processes a generator makes (the REDCAP paper runs 1 to 32).
pub const MAX_PROCS: u32 = 32;

/// Most requests a generated workload may have (a guard against typos such as `file_mb=1000000`).
pub const MAX_REQUESTS: u64 = 50_000_000;

/// Errors naming the workload and the parameter.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SpecError {
    #[error(transparent)]
    Unknown(#[from] blockwell_core::spec::UnknownName),
    #[error("workload spec '{spec}': {message}")]
    Syntax { spec: String, message: String },
    #[error("workload '{workload}': unknown parameter '{param}' (known: {known})")]
    UnknownParam { workload: String, param: String, known: String },
    #[error("workload '{workload}': parameter '{param}': {message}")]
    BadValue { workload: String, param: String, message: String },
    #[error("workload '{workload}': {requests} requests is more than {max}; lower the scale parameters")]
    TooLarge { workload: String, requests: u64, max: u64 },
}

/// A generator's parameters: defaults per registry entry, a range check naming the bad parameter, and the
/// generation itself.
pub(crate) trait Params: Serialize + DeserializeOwned + Clone {
    /// Each parameter with its meaning (the keys are exactly the serialized field names; a test checks it).
    const DOCS: &'static [(&'static str, &'static str)];
    /// `Err((parameter, message))` for values out of range.
    fn check(&self) -> Result<(), (&'static str, String)>;
    /// Requests the workload will have (checked against [`MAX_REQUESTS`] before generating).
    fn requests(&self) -> u64;
    fn generate(&self, name: &str) -> Workload;
}

macro_rules! registry {
    ($( $variant:ident => $ty:ty = $default:expr, $name:literal, $summary:literal; )*) => {
        blockwell_core::spec_registry! {
            /// Every workload generator. The one registry: names, summaries, defaults, construction.
            #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
            pub enum WorkloadKind: "workload" { $( $variant => $name, [], $summary; )* }
        }

        impl WorkloadKind {
            /// The default parameters, as a JSON object.
            pub fn defaults(self) -> Map<String, Value> {
                match self { $(WorkloadKind::$variant => to_map(&$default)),* }
            }

            /// Parameter names with their meaning.
            pub fn param_docs(self) -> &'static [(&'static str, &'static str)] {
                match self { $(WorkloadKind::$variant => <$ty as Params>::DOCS),* }
            }

            fn check(self, overrides: &Map<String, Value>) -> Result<(), SpecError> {
                match self { $(WorkloadKind::$variant => resolve::<$ty>(self, overrides).map(drop)),* }
            }

            fn build(self, overrides: &Map<String, Value>, label: &str) -> Result<Workload, SpecError> {
                match self { $(WorkloadKind::$variant => Ok(resolve::<$ty>(self, overrides)?.generate(label))),* }
            }
        }
    };
}

registry! {
    KernelRead => KernelReadConfig = KernelReadConfig::default(), "kernel-read",
        "each process reads its own copy of a kernel-source-like tree of small files, whole, directory by directory";
    Ior => IorConfig = IorConfig::default(), "ior",
        "IOR read: each process reads its own file (or its block of one shared file) sequentially";
    Tac => TacConfig = TacConfig::default(), "tac",
        "tac: each process reads its own file backward, last request-sized piece first";
    Strided4k => StridedConfig = StridedConfig::with_request_kb(4), "strided-4k",
        "each process reads 4 KiB every 8 KiB of its own file (read 4 KiB, skip 4 KiB)";
    Strided512k => StridedConfig = StridedConfig::with_request_kb(512), "strided-512k",
        "each process reads 512 KiB every 1 MiB of its own file (read 512 KiB, skip 512 KiB)";
    Loop => LoopConfig = LoopConfig::default(), "loop",
        "looping sequential (Butt et al.'s cscope class): read a file set whole, over and over";
    Random => RandomConfig = RandomConfig::default(), "random",
        "random reads (Butt et al.'s tpc-h class): block-aligned reads, uniform or Zipf, in a few large files";
    MixSeq => MixConfig = MixConfig::seq(), "mix-seq",
        "mostly sequential mix (like Butt et al.'s multi1): two looping processes and one random reader";
    MixRandom => MixConfig = MixConfig::random(), "mix-random",
        "mostly random mix (like Butt et al.'s multi3): one looping process and two random readers";
    Cscope => CscopeConfig = CscopeConfig::default(), "cscope",
        "Butt et al.'s cscope: each query reads the cross-reference database and a share of the source files, 2 blocks at a time";
    Glimpse => GlimpseConfig = GlimpseConfig::default(), "glimpse",
        "Butt et al.'s glimpse: each query reads the index in large chunks, then a few text files (72 % of them 1-2 blocks)";
    Gcc => GccConfig = GccConfig::default(), "gcc",
        "Butt et al.'s gcc: compile each source file, reading it and popular headers from a 4 MB set (scaled)";
    Viewperf => ViewperfConfig = ViewperfConfig::default(), "viewperf",
        "Butt et al.'s viewperf: a few large data files read whole in loops, 1 block at a time, CPU-bound";
    TpcH => TpcConfig = TpcConfig::h(), "tpc-h",
        "Butt et al.'s tpc-h: MySQL reading 256-byte records at random blocks of 49 files, each block read twice";
    TpcR => TpcConfig = TpcConfig::r(), "tpc-r",
        "Butt et al.'s tpc-r: as tpc-h with Table 2's tpc-r data size and references";
    Multi1 => MultiConfig = MultiConfig::multi1(), "multi1",
        "Butt et al.'s multi1: cscope and gcc at the same time";
    Multi2 => MultiConfig = MultiConfig::multi2(), "multi2",
        "Butt et al.'s multi2: cscope, gcc and viewperf at the same time";
    Multi3 => MultiConfig = MultiConfig::multi3(), "multi3",
        "Butt et al.'s multi3: glimpse and tpc-h at the same time";
}

fn to_map<T: Serialize>(t: &T) -> Map<String, Value> {
    match serde_json::to_value(t) {
        Ok(Value::Object(m)) => m,
        _ => Map::new(),
    }
}

/// Resolves `overrides` over `kind`'s defaults into `P`: unknown parameters, wrong types (each parameter
/// checked alone, so the error names it), values out of range and oversized workloads are errors.
fn resolve<P: Params>(kind: WorkloadKind, overrides: &Map<String, Value>) -> Result<P, SpecError> {
    let base = kind.defaults();
    let workload = || kind.name().to_string();
    let mut merged = base.clone();
    for (k, v) in overrides {
        if !base.contains_key(k) {
            return Err(SpecError::UnknownParam {
                workload: workload(),
                param: k.clone(),
                known: base.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        }
        let mut one = base.clone();
        one.insert(k.clone(), v.clone());
        if let Err(e) = serde_json::from_value::<P>(Value::Object(one)) {
            return Err(SpecError::BadValue { workload: workload(), param: k.clone(), message: e.to_string() });
        }
        merged.insert(k.clone(), v.clone());
    }
    let p: P = serde_json::from_value(Value::Object(merged))
        .map_err(|e| SpecError::Syntax { spec: workload(), message: e.to_string() })?;
    p.check().map_err(|(param, message)| SpecError::BadValue { workload: workload(), param: param.into(), message })?;
    let requests = p.requests();
    if requests > MAX_REQUESTS {
        return Err(SpecError::TooLarge { workload: workload(), requests, max: MAX_REQUESTS });
    }
    Ok(p)
}

/// A generator with parameter overrides, as written on a command line: `tac`, `ior(procs=8,shared=true)`.
/// Values are JSON scalars (`8`, `0.9`, `true`); bare words are strings (`dist=zipf`).
#[derive(Clone, Debug, PartialEq)]
pub struct WorkloadSpec {
    pub kind: WorkloadKind,
    /// Overridden parameters (names with `-` turned into `_`).
    pub overrides: Map<String, Value>,
    text: String,
}

impl WorkloadSpec {
    pub fn new(kind: WorkloadKind) -> Self {
        WorkloadSpec { kind, overrides: Map::new(), text: kind.name().to_string() }
    }

    /// Parses `name` or `name(key=value,...)` and checks the parameters (names, types, ranges, size) without
    /// generating anything.
    pub fn parse(s: &str) -> Result<Self, SpecError> {
        let s = s.trim();
        let text = blockwell_core::spec::split_spec(s)
            .map_err(|e| SpecError::Syntax { spec: s.to_string(), message: e.to_string() })?;
        let kind = WorkloadKind::from_name(text.name)?;
        let mut overrides = Map::new();
        for (k, v) in text.params {
            overrides.insert(k, blockwell_core::spec::json_value(v));
        }
        let spec = WorkloadSpec { kind, overrides, text: s.to_string() };
        spec.params()?;
        Ok(spec)
    }

    /// The text the spec was parsed from (the generated workload's name).
    pub fn label(&self) -> &str {
        &self.text
    }

    /// The resolved parameters (defaults with the overrides), checked.
    pub fn params(&self) -> Result<Map<String, Value>, SpecError> {
        self.kind.check(&self.overrides)?;
        let mut m = self.kind.defaults();
        m.extend(self.overrides.clone());
        Ok(m)
    }

    /// Generates the workload.
    pub fn build(&self) -> Result<Workload, SpecError> {
        self.kind.build(&self.overrides, &self.text)
    }
}

/// Parses and builds in one step.
pub fn generate(spec: &str) -> Result<Workload, SpecError> {
    WorkloadSpec::parse(spec)?.build()
}

/// Parses a comma-separated list of specs, keeping commas inside parentheses:
/// `tac,strided-4k(procs=8,file_mb=64),ior`.
pub fn parse_workload_list(s: &str) -> Result<Vec<WorkloadSpec>, SpecError> {
    blockwell_core::spec::split_list(s).into_iter().map(WorkloadSpec::parse).collect()
}

/// One generator as [`list`] describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct GeneratorInfo {
    pub name: &'static str,
    pub summary: &'static str,
    /// (parameter, default as JSON text, meaning).
    pub params: Vec<(&'static str, String, &'static str)>,
}

/// Every generator with its parameters and their defaults.
pub fn list() -> Vec<GeneratorInfo> {
    WorkloadKind::REGISTRY
        .list()
        .iter()
        .map(|e| {
            let d = e.kind.defaults();
            GeneratorInfo {
                name: e.name,
                summary: e.summary,
                params: e
                    .kind
                    .param_docs()
                    .iter()
                    .map(|&(p, doc)| (p, d.get(p).map_or_else(String::new, |v| v.to_string()), doc))
                    .collect(),
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------------------------
// Shared pieces of the generators

pub(crate) const KIB: u64 = 1 << 10;
pub(crate) const MIB: u64 = 1 << 20;

/// `procs` in 1..=32.
pub(crate) fn check_procs(procs: u32) -> Result<(), (&'static str, String)> {
    if (1..=MAX_PROCS).contains(&procs) {
        Ok(())
    } else {
        Err(("procs", format!("{procs} is not between 1 and {MAX_PROCS}")))
    }
}

/// `v >= 1`.
pub(crate) fn check_positive(name: &'static str, v: u64) -> Result<(), (&'static str, String)> {
    if v >= 1 {
        Ok(())
    } else {
        Err((name, "must be at least 1".into()))
    }
}

/// `lo <= v <= hi`.
pub(crate) fn check_range(name: &'static str, v: u64, lo: u64, hi: u64) -> Result<(), (&'static str, String)> {
    if (lo..=hi).contains(&v) {
        Ok(())
    } else {
        Err((name, format!("{v} is not between {lo} and {hi}")))
    }
}

/// A closed-loop read of `len` bytes at `offset`.
pub(crate) fn read(file: u32, offset: u64, len: u64, think_ns: u64) -> FileRequest {
    FileRequest { file, op: Op::Read, offset, len, think_ns, at_ns: None }
}

/// Appends reads of `file`'s bytes `from..to` in order, `req` bytes each (the last one shorter).
pub(crate) fn read_forward(out: &mut Vec<FileRequest>, file: u32, from: u64, to: u64, req: u64, think_ns: u64) {
    let mut at = from;
    while at < to {
        let len = req.min(to - at);
        out.push(read(file, at, len, think_ns));
        at += len;
    }
}

/// Sizes of `n` files, log-normal with median `median` bytes and shape `sigma` (ln-space standard
/// deviation), clamped to `1..=max` bytes. Box–Muller normal deviates from `rng`.
pub(crate) fn lognormal_sizes(rng: &mut Rng, n: u64, median: f64, sigma: f64, max: u64) -> Vec<u64> {
    (0..n)
        .map(|_| {
            let u1 = 1.0 - rng.next_f64(); // (0, 1]
            let u2 = rng.next_f64();
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            let s = (median * (sigma * z).exp()).round();
            (s as u64).clamp(1, max.max(1))
        })
        .collect()
}

/// Requests of a whole-file forward read of each size in `sizes` with `req`-byte requests.
pub(crate) fn requests_for(sizes: &[u64], req: u64) -> u64 {
    sizes.iter().map(|s| s.div_ceil(req.max(1))).sum()
}

/// Files `info` with a `name` and no requests yet, for generators to fill.
pub(crate) fn workload(name: &str, files: Vec<FileInfo>, processes: Vec<Vec<FileRequest>>) -> Workload {
    Workload { name: name.to_string(), files, processes }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_name_exactly_the_parameters() {
        for &k in WorkloadKind::ALL {
            let d = k.defaults();
            let mut keys: Vec<&str> = d.keys().map(String::as_str).collect();
            let mut docs: Vec<&str> = k.param_docs().iter().map(|d| d.0).collect();
            keys.sort_unstable();
            docs.sort_unstable();
            assert_eq!(keys, docs, "{}", k.name());
        }
    }

    #[test]
    fn every_generator_is_found_by_its_name() {
        assert_eq!(WorkloadKind::REGISTRY.validate(WorkloadKind::ALL), Ok(()));
        assert_eq!(WorkloadKind::from_name(" Strided_4K ").unwrap(), WorkloadKind::Strided4k);
        let e = WorkloadSpec::parse("nope(procs=2)").unwrap_err();
        assert_eq!(e.to_string(), format!("unknown workload 'nope' (known: {})", WorkloadKind::REGISTRY.known()));
    }

    #[test]
    fn defaults_pass_their_own_checks() {
        for &k in WorkloadKind::ALL {
            WorkloadSpec::parse(k.name()).unwrap_or_else(|e| panic!("{}: {e}", k.name()));
        }
    }

    #[test]
    fn lists_split_outside_parentheses() {
        let l = parse_workload_list("tac, strided-4k(procs=8,file_mb=64),ior").unwrap();
        assert_eq!(
            l.iter().map(|s| s.kind).collect::<Vec<_>>(),
            [WorkloadKind::Tac, WorkloadKind::Strided4k, WorkloadKind::Ior]
        );
        assert_eq!(l[1].label(), "strided-4k(procs=8,file_mb=64)");
        assert!(parse_workload_list("tac,(").is_err());
        assert!(parse_workload_list("").unwrap().is_empty());
    }

    #[test]
    fn lognormal_median_is_close() {
        let mut rng = Rng::new(3);
        let mut s = lognormal_sizes(&mut rng, 20_001, 8192.0, 1.5, 1 << 30);
        s.sort_unstable();
        let median = s[10_000] as f64;
        assert!((median / 8192.0 - 1.0).abs() < 0.06, "{median}");
    }
}
