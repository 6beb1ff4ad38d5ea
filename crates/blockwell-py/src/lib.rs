//! `blockwell._native`: the Rust side of the `blockwell` Python package (`python/blockwell/`, which wraps it in
//! pandas DataFrames and documents it).
//!
//! - `TraceBatches`: a trace read in batches of numpy arrays, by every reader of `blockwell-trace`.
//! - `sim`: `blockwell sim`'s one-pass replay of a trace through every (policy × size), the GIL released
//!   while it runs; the report comes back as the JSON `blockwell sim --json` prints.
//! - `experiments::experiment`: `blockwell experiment`'s simulator grids, their `--csv` tables back.
//! - `Cache`: one cache level (the engine's [`CacheLevel`], the same step `sim` and the server drive) for
//!   step-by-step experiments, with a bulk `Cache::access_many` over numpy arrays.
//!
//! Errors are Python exceptions carrying the engine's message: `TraceError` (a `ValueError`) for a trace
//! that does not read, naming `file:line`; `ValueError` for a bad setting, naming it.

use blockwell_core::admission::AdmissionSpec;
use blockwell_core::level::{self, CacheLevel, Fate, LevelConfig, StepPlan};
use blockwell_core::policy::{DynPolicy, PolicySpec, Preset};
use blockwell_core::prefetch::{PrefetcherKind, PrefetcherSpec};
use blockwell_core::{CacheConfig, Op};
use blockwell_sim::replay::{replay, CacheSpec, ReplayConfig, ReplayHooks};
use blockwell_sim::size::SizeSpec;
use blockwell_trace::{Format, ReaderOptions, Request, TraceError as EngineTraceError, TraceReader};
use numpy::{IntoPyArray, PyReadonlyArray1};
use pyo3::exceptions::{PyStopIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

mod experiments;
mod hooks;
use hooks::{HookErrors, PyPolicy};

/// The extension's own allocator: the engine's batch buffers and policy tables do not go through the host's
/// glibc malloc, whose tuning a host may change for every allocation in the process (Dask's workers set
/// `MALLOC_TRIM_THRESHOLD_`, which turns off glibc's dynamic mmap threshold and made tasks 20-40 % slower).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pyo3::create_exception!(_native, TraceError, PyValueError, "A trace that does not read; the message names file:line.");

fn trace_err(e: EngineTraceError) -> PyErr {
    TraceError::new_err(e.to_string())
}

fn value_err(what: &str, e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(format!("{what}: {e}"))
}

/// An object's state, for one call at a time (Python threads may share the object).
fn locked<T>(m: &Mutex<T>) -> PyResult<MutexGuard<'_, T>> {
    m.lock().map_err(|_| PyValueError::new_err("an earlier call on this object failed midway"))
}

/// How to open a trace: the same options as the command line's `--format`, `--skip-bad-lines`,
/// `--object-size`, `--csv-columns`.
#[derive(Clone)]
struct Source {
    path: PathBuf,
    format: Option<Format>,
    options: ReaderOptions,
}

impl Source {
    fn new(
        path: PathBuf,
        format: Option<&str>,
        skip_bad_lines: u64,
        object_size: &str,
        csv_columns: Option<&str>,
    ) -> PyResult<Source> {
        let format = format.map(Format::from_name).transpose().map_err(|e| value_err("format", e))?;
        let object_size = blockwell_sim::size::parse_bytes(object_size).map_err(|e| value_err("object_size", e))?;
        let csv = csv_columns
            .map(blockwell_trace::formats::csv::CsvMapping::parse)
            .transpose()
            .map_err(|e| value_err("csv_columns", e))?;
        Ok(Source { path, format, options: ReaderOptions { skip_bad_lines, csv, object_size: Some(object_size) } })
    }

    /// The trace's file name, as results name it.
    fn name(&self) -> String {
        self.path.file_name().map_or_else(|| self.path.display().to_string(), |n| n.to_string_lossy().into_owned())
    }

    fn open(&self) -> Result<Box<dyn TraceReader>, EngineTraceError> {
        blockwell_trace::open(&self.path, self.format, &self.options)
    }
}

/// A trace read in batches: each `next()` is a dict of numpy arrays `time_ns` (uint64), `volume` (uint32),
/// `op` (uint8: 0 read, 1 write), `offset` and `len` (uint64, bytes), at most `batch_size` requests long.
/// `volumes` names the volumes seen so far (index = `volume`).
#[pyclass(module = "blockwell._native")]
struct TraceBatches {
    state: Mutex<Reading>,
    batch_size: usize,
}

/// The reader (None once it is exhausted), the batch buffer it fills, and the volume names it read (kept when
/// the reader is dropped at the end, so that `volumes` names them after the last batch too).
struct Reading {
    reader: Option<Box<dyn TraceReader>>,
    buf: Vec<Request>,
    volumes: Vec<String>,
}

#[pymethods]
impl TraceBatches {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let n = self.batch_size;
        let mut state = locked(&self.state)?;
        let Reading { reader, buf, volumes } = &mut *state;
        let Some(r) = reader.as_mut() else { return Err(PyStopIteration::new_err(())) };
        let got = py.detach(|| r.read_batch(buf, n)).map_err(trace_err)?;
        if got == 0 {
            *volumes = r.volumes().to_vec();
            *reader = None;
            return Err(PyStopIteration::new_err(()));
        }
        let d = PyDict::new(py);
        d.set_item("time_ns", buf.iter().map(|r| r.time_ns).collect::<Vec<u64>>().into_pyarray(py))?;
        d.set_item("volume", buf.iter().map(|r| r.volume).collect::<Vec<u32>>().into_pyarray(py))?;
        d.set_item("op", buf.iter().map(|r| u8::from(r.op == Op::Write)).collect::<Vec<u8>>().into_pyarray(py))?;
        d.set_item("offset", buf.iter().map(|r| r.offset).collect::<Vec<u64>>().into_pyarray(py))?;
        d.set_item("len", buf.iter().map(|r| r.len).collect::<Vec<u64>>().into_pyarray(py))?;
        Ok(d)
    }

    /// Names of the volumes seen so far, indexed by the `volume` column.
    #[getter]
    fn volumes(&self) -> PyResult<Vec<String>> {
        let state = locked(&self.state)?;
        Ok(state.reader.as_ref().map_or_else(|| state.volumes.clone(), |r| r.volumes().to_vec()))
    }

    /// Malformed lines skipped so far (with `skip_bad_lines`).
    #[getter]
    fn skipped_lines(&self) -> PyResult<u64> {
        Ok(locked(&self.state)?.reader.as_ref().map_or(0, |r| r.skipped().count))
    }
}

/// Opens a trace for reading in batches (see [`TraceBatches`]).
#[pyfunction]
#[pyo3(signature = (path, format=None, *, skip_bad_lines=0, object_size="4096", csv_columns=None, batch_size=65536))]
fn read_trace(
    path: PathBuf,
    format: Option<&str>,
    skip_bad_lines: u64,
    object_size: &str,
    csv_columns: Option<&str>,
    batch_size: usize,
) -> PyResult<TraceBatches> {
    let src = Source::new(path, format, skip_bad_lines, object_size, csv_columns)?;
    let reader = src.open().map_err(trace_err)?;
    let buf = Vec::with_capacity(batch_size.clamp(1, 1 << 20));
    Ok(TraceBatches {
        state: Mutex::new(Reading { reader: Some(reader), buf, volumes: Vec::new() }),
        batch_size: batch_size.max(1),
    })
}

fn policies(list: Vec<String>) -> PyResult<Vec<PolicySpec>> {
    list.iter().map(|p| p.parse::<PolicySpec>().map_err(|e| value_err("policies", e))).collect()
}

fn prefetcher(s: &str) -> PyResult<PrefetcherSpec> {
    s.parse::<PrefetcherSpec>().map_err(|e| value_err("prefetch", e))
}

fn admission(s: &str) -> PyResult<AdmissionSpec> {
    s.parse::<AdmissionSpec>().map_err(|e| value_err("admission", e))
}

fn preset(s: &str) -> PyResult<Preset> {
    s.parse::<Preset>().map_err(|e| value_err("preset", e))
}

fn check_block_size(block_size: u64) -> PyResult<u64> {
    CacheConfig::new(block_size, block_size).map(|_| block_size).map_err(|e| value_err("block_size", e))
}

/// Replays a trace through every (policy × cache size), as `blockwell sim --json`; returns that JSON text.
#[pyfunction]
#[pyo3(signature = (
    trace, policies_, caches, *, format=None, block_size=4096, preset_="default", prefetch="none",
    admission_="always", sequential_cutoff="0", associativity=None, reads_only=false, warmup="0", volumes=None,
    threads=0, skip_bad_lines=0, object_size="4096", csv_columns=None, interval=0
))]
#[allow(clippy::too_many_arguments)]
fn sim(
    py: Python<'_>,
    trace: PathBuf,
    policies_: Vec<String>,
    caches: Vec<String>,
    format: Option<&str>,
    block_size: u64,
    preset_: &str,
    prefetch: &str,
    admission_: &str,
    sequential_cutoff: &str,
    associativity: Option<usize>,
    reads_only: bool,
    warmup: &str,
    volumes: Option<Vec<String>>,
    threads: usize,
    skip_bad_lines: u64,
    object_size: &str,
    csv_columns: Option<&str>,
    interval: u64,
) -> PyResult<String> {
    let src = Source::new(trace, format, skip_bad_lines, object_size, csv_columns)?;
    let bs = check_block_size(block_size)?;
    let mut specs = Vec::new();
    for p in policies(policies_)? {
        for c in &caches {
            let size = c.parse::<SizeSpec>().and_then(|s| s.cache_size(bs)).map_err(|e| value_err("cache", e))?;
            specs.push(CacheSpec { policy: p.clone(), size });
        }
    }
    let associativity = match associativity {
        None => None,
        Some(w) => Some(NonZeroUsize::new(w).ok_or_else(|| value_err("associativity", "must be at least 1"))?),
    };
    let warmup = blockwell_sim::replay::Warmup::parse(warmup).map_err(|e| value_err("warmup", e))?;
    let cfg = ReplayConfig {
        block_size: bs,
        preset: preset(preset_)?,
        reads_only,
        volumes,
        warmup,
        sample: None,
        threads,
        prefetch: prefetcher(prefetch)?,
        admission: admission(admission_)?,
        sequential_cutoff: blockwell_sim::size::parse_bytes(sequential_cutoff)
            .map_err(|e| value_err("sequential_cutoff", e))?,
        associativity,
        interval,
    };
    let report = py.detach(|| replay(&|| src.open(), &specs, &cfg, ReplayHooks::default())).map_err(|e| match e {
        blockwell_sim::replay::ReplayError::Trace(t) => trace_err(t),
        e => PyValueError::new_err(format!("{}: {e}", src.path.display())),
    })?;
    let mut v = serde_json::to_value(&report).map_err(|e| value_err("report", e))?;
    v["trace"] = src.path.display().to_string().into();
    v["prefetch"] = cfg.prefetch.label().into();
    v["admission"] = cfg.admission.to_string().into();
    v["sequential_cutoff"] = cfg.sequential_cutoff.into();
    // The rows of `blockwell sim --csv` (and, with an interval, of `--interval N --csv`): one schema.
    v["rows"] = blockwell_sim::rows::sim_rows(&report).iter().map(|r| r.json()).collect();
    v["interval_rows"] = blockwell_sim::rows::interval_rows(&report).iter().map(|r| r.json()).collect();
    Ok(v.to_string())
}

/// The columns of `blockwell sim --csv` (without `trace`), in order.
#[pyfunction]
fn sim_columns() -> Vec<&'static str> {
    blockwell_sim::rows::sim_columns()
}

/// The columns of `blockwell sim --interval N --csv` (without `trace`), in order.
#[pyfunction]
fn interval_columns() -> Vec<&'static str> {
    blockwell_sim::rows::interval_columns()
}

fn mrc_err(e: blockwell_sim::mrc::MrcError) -> PyErr {
    match e {
        blockwell_sim::mrc::MrcError::Trace(t) => trace_err(t),
        e => PyValueError::new_err(e.to_string()),
    }
}

/// Miss-ratio curves of `policies` by simulation, miniature at `sample` < 1 ([`blockwell_sim::mini`]), as
/// `blockwell mrc --policy --json`: at `sizes` or `points` even shares of the footprint. Returns JSON text.
#[pyfunction]
#[pyo3(signature = (
    trace, policies_, *, sizes=None, points=20, sample=1.0, block_size=4096, reads_only=false, preset_="default",
    threads=0, format=None, skip_bad_lines=0, object_size="4096", csv_columns=None
))]
#[allow(clippy::too_many_arguments)]
fn mrc_policies(
    py: Python<'_>,
    trace: PathBuf,
    policies_: Vec<String>,
    sizes: Option<Vec<String>>,
    points: usize,
    sample: f64,
    block_size: u64,
    reads_only: bool,
    preset_: &str,
    threads: usize,
    format: Option<&str>,
    skip_bad_lines: u64,
    object_size: &str,
    csv_columns: Option<&str>,
) -> PyResult<String> {
    use blockwell_sim::mini::{curves, MiniError, Sizes};
    let src = Source::new(trace, format, skip_bad_lines, object_size, csv_columns)?;
    let sizes = match sizes {
        Some(list) => Sizes::Given(
            list.iter().map(|s| s.parse::<SizeSpec>()).collect::<Result<_, _>>().map_err(|e| value_err("sizes", e))?,
        ),
        None => Sizes::Points(points),
    };
    let cfg = ReplayConfig {
        block_size: check_block_size(block_size)?,
        preset: preset(preset_)?,
        reads_only,
        threads,
        ..ReplayConfig::default()
    };
    let specs = policies(policies_)?;
    let (r, pts) = py.detach(|| curves(&|| src.open(), &specs, &sizes, sample, &cfg)).map_err(|e| match e {
        MiniError::Replay(blockwell_sim::replay::ReplayError::Trace(t)) => trace_err(t),
        MiniError::Rate(_) => value_err("sample", e),
        MiniError::Size(..) | MiniError::NoSizes => value_err("sizes", e),
        e => PyValueError::new_err(format!("{}: {e}", src.path.display())),
    })?;
    let v = serde_json::json!({
        "trace": src.path.display().to_string(),
        "block_size": r.block_size,
        "preset": r.preset,
        "sample_rate": sample,
        "sampled_block_accesses": r.block_accesses,
        "points": pts,
    });
    Ok(v.to_string())
}

/// The LRU miss-ratio curve in one pass (exact, or SHARDS-sampled with `sample` or `shards_max`), as
/// `blockwell mrc --json`: at `sizes` (as `--cache` takes them) or at `points` even sizes. Returns JSON text.
#[pyfunction]
#[pyo3(signature = (
    trace, *, sizes=None, points=20, block_size=4096, reads_only=false, sample=None, shards_max=None, format=None,
    skip_bad_lines=0, object_size="4096", csv_columns=None
))]
#[allow(clippy::too_many_arguments)]
fn mrc(
    py: Python<'_>,
    trace: PathBuf,
    sizes: Option<Vec<String>>,
    points: usize,
    block_size: u64,
    reads_only: bool,
    sample: Option<f64>,
    shards_max: Option<usize>,
    format: Option<&str>,
    skip_bad_lines: u64,
    object_size: &str,
    csv_columns: Option<&str>,
) -> PyResult<String> {
    use blockwell_sim::mrc::{from_reader, MrcConfig, Sampling};
    let src = Source::new(trace, format, skip_bad_lines, object_size, csv_columns)?;
    let sampling = match (sample, shards_max) {
        (Some(_), Some(_)) => return Err(value_err("sample", "give sample or shards_max, not both")),
        (Some(r), None) => Sampling::Rate(r),
        (None, Some(n)) => Sampling::MaxBlocks(n),
        (None, None) => Sampling::Exact,
    };
    let config = MrcConfig { block_size, reads_only, sampling };
    config.validate().map_err(|e| value_err(if sample.is_some() { "sample" } else { "block_size" }, e))?;
    let sizes: Option<Vec<SizeSpec>> = sizes
        .map(|l| l.iter().map(|s| s.parse::<SizeSpec>().map_err(|e| value_err("sizes", e))).collect())
        .transpose()?;
    if points == 0 {
        return Err(value_err("points", "must be at least 1"));
    }
    let curve = py.detach(|| {
        let mut reader = src.open()?;
        from_reader(reader.as_mut(), config)
    });
    let curve = curve.map_err(mrc_err)?;
    let blocks: Vec<u64> = match &sizes {
        Some(list) => list
            .iter()
            .map(|s| match s.blocks(block_size, curve.footprint) {
                0 => Err(value_err("sizes", format!("{s} holds no {block_size} B block"))),
                b => Ok(b),
            })
            .collect::<PyResult<_>>()?,
        None => curve.even_sizes(points),
    };
    let pts: Vec<serde_json::Value> = curve
        .curve(&blocks)
        .iter()
        .map(|p| serde_json::json!({"cache_blocks": p.cache_blocks, "cache_bytes": p.cache_bytes, "miss_ratio": p.miss_ratio}))
        .collect();
    Ok(serde_json::json!({
        "trace": src.path.display().to_string(),
        "block_size": curve.block_size,
        "reads_only": curve.reads_only,
        "exact": curve.is_exact(),
        "final_rate": curve.final_rate,
        "requests": curve.requests,
        "accesses": curve.accesses,
        "footprint": curve.footprint,
        "points": pts,
    })
    .to_string())
}

/// A trace's summary, as `blockwell trace stats --json` (without its `trace` key). Returns JSON text.
#[pyfunction]
#[pyo3(signature = (trace, *, block_size=4096, reuse=true, format=None, skip_bad_lines=0, object_size="4096", csv_columns=None))]
#[allow(clippy::too_many_arguments)]
fn trace_stats(
    py: Python<'_>,
    trace: PathBuf,
    block_size: u64,
    reuse: bool,
    format: Option<&str>,
    skip_bad_lines: u64,
    object_size: &str,
    csv_columns: Option<&str>,
) -> PyResult<String> {
    use blockwell_sim::analysis::{StatsBuilder, StatsConfig};
    let src = Source::new(trace, format, skip_bad_lines, object_size, csv_columns)?;
    let mut builder = StatsBuilder::new(StatsConfig { block_size, reuse }).map_err(|e| value_err("block_size", e))?;
    let stats = py.detach(|| -> Result<_, blockwell_sim::mrc::MrcError> {
        let mut reader = src.open()?;
        let mut buf = Vec::with_capacity(4096);
        while reader.read_batch(&mut buf, 4096)? > 0 {
            for r in &buf {
                builder.request(r)?;
            }
        }
        Ok(builder.finish(reader.volumes()))
    });
    serde_json::to_string(&stats.map_err(mrc_err)?).map_err(|e| value_err("stats", e))
}

/// One cache level driven request by request: the engine's cache step (policy, prefetcher, admission,
/// sequential cutoff), with reads completing at once as in `sim`.
#[pyclass(module = "blockwell._native")]
struct Cache {
    stepper: Mutex<Stepper>,
    block_size: u64,
    policy: String,
    /// Errors raised by a Python policy's hooks ([`hooks`]).
    hook_errors: HookErrors,
}

#[pymethods]
impl Cache {
    #[new]
    #[pyo3(signature = (policy, size, *, block_size=4096, preset_="default", prefetch="none", admission_="always", sequential_cutoff="0"))]
    fn new(
        policy: &Bound<'_, PyAny>,
        size: &str,
        block_size: u64,
        preset_: &str,
        prefetch: &str,
        admission_: &str,
        sequential_cutoff: &str,
    ) -> PyResult<Cache> {
        let bs = check_block_size(block_size)?;
        let size = size.parse::<SizeSpec>().map_err(|e| value_err("size", e))?;
        if size.needs_footprint() {
            return Err(value_err("size", "a percentage needs the whole trace; give bytes or blocks"));
        }
        let blocks = size.blocks(bs, 0);
        let config = CacheConfig::new(bs, blocks.saturating_mul(bs)).map_err(|e| value_err("size", e))?;
        let hook_errors = HookErrors::default();
        let (p, label): (Box<dyn DynPolicy>, String) = match policy.extract::<String>() {
            Ok(name) => {
                let spec = name.parse::<PolicySpec>().map_err(|e| value_err("policy", e))?;
                if spec.kind.needs_next_use() {
                    return Err(value_err(
                        "policy",
                        format!("{} needs the future of the trace; use blockwell.sim", spec.label()),
                    ));
                }
                let p = config.build_policy(&spec, preset(preset_)?).map_err(|e| value_err("policy", e))?;
                (p, spec.label().to_string())
            }
            // A policy written in Python: a class (called with the capacity in blocks) or an object.
            Err(_) => {
                for hook in ["access", "insert", "evict", "remove"] {
                    if !policy.hasattr(hook)? {
                        return Err(value_err("policy", format!("a Python policy needs a method {hook}()")));
                    }
                }
                let obj = if policy.is_instance_of::<pyo3::types::PyType>() {
                    policy.call1((config.capacity_blocks(),))?
                } else {
                    policy.clone()
                };
                let label = obj.get_type().name()?.to_string();
                let p = PyPolicy::new(obj.unbind(), config.capacity_blocks(), hook_errors.clone());
                (Box::new(p), label)
            }
        };
        let pf = prefetcher(prefetch)?;
        let pf = match pf.kind {
            PrefetcherKind::NoPrefetch => None,
            _ => Some(pf.build(bs).map_err(|e| value_err("prefetch", e))?),
        };
        let mut lc = LevelConfig::new(config);
        lc.admission = admission(admission_)?;
        lc.sequential_cutoff =
            blockwell_sim::size::parse_bytes(sequential_cutoff).map_err(|e| value_err("sequential_cutoff", e))?;
        Ok(Cache {
            stepper: Mutex::new(Stepper {
                level: CacheLevel::new(lc, p, pf),
                plan: StepPlan::default(),
                block_size: bs,
            }),
            block_size: bs,
            policy: label,
            hook_errors,
        })
    }

    /// One request: `op` is "read"/"r"/0 or "write"/"w"/1. Returns `(hit_blocks, missed_blocks)` of the request's
    /// blocks (a miss: fetched, or passed to the next level).
    #[pyo3(signature = (op, offset, length, volume=0))]
    fn access(&self, op: &Bound<'_, PyAny>, offset: u64, length: u64, volume: u32) -> PyResult<(u64, u64)> {
        let op = parse_op(op)?;
        let r = locked(&self.stepper)?.step(op, volume, offset, length);
        self.hook_errors.check()?;
        r
    }

    /// Many requests at engine speed (the GIL released): numpy arrays `op` (0 read, 1 write), `offset`,
    /// `length` and optionally `volume`, all the same length. Returns `(hit_blocks, missed_blocks)` summed.
    #[pyo3(signature = (op, offset, length, volume=None))]
    fn access_many(
        &self,
        py: Python<'_>,
        op: PyReadonlyArray1<'_, u8>,
        offset: PyReadonlyArray1<'_, u64>,
        length: PyReadonlyArray1<'_, u64>,
        volume: Option<PyReadonlyArray1<'_, u32>>,
    ) -> PyResult<(u64, u64)> {
        let (op, offset, length) = (op.as_slice()?, offset.as_slice()?, length.as_slice()?);
        let volume = volume.as_ref().map(|v| v.as_slice()).transpose()?;
        if offset.len() != op.len() || length.len() != op.len() || volume.is_some_and(|v| v.len() != op.len()) {
            return Err(PyValueError::new_err("op, offset, length and volume must have the same length"));
        }
        let mut guard = locked(&self.stepper)?;
        let stepper: &mut Stepper = &mut guard;
        let errors = &self.hook_errors;
        py.detach(|| {
            let (mut hits, mut misses) = (0, 0);
            for i in 0..op.len() {
                let o = if op[i] == 0 { Op::Read } else { Op::Write };
                let (h, m) = stepper.step(o, volume.map_or(0, |v| v[i]), offset[i], length[i])?;
                hits += h;
                misses += m;
                // A Python policy's hook raised: stop at the request that made it.
                errors.check()?;
            }
            Ok((hits, misses))
        })
    }

    /// The counters so far, as `blockwell sim --json` prints a cache's `stats`.
    #[getter]
    fn stats(&self) -> PyResult<String> {
        serde_json::to_string(locked(&self.stepper)?.level.stats()).map_err(|e| value_err("stats", e))
    }

    /// Blocks in the cache now.
    fn __len__(&self) -> PyResult<usize> {
        Ok(locked(&self.stepper)?.level.policy().len())
    }

    /// Capacity in blocks.
    #[getter]
    fn capacity(&self) -> PyResult<usize> {
        Ok(locked(&self.stepper)?.level.config().cache.capacity_blocks())
    }

    #[getter]
    fn block_size(&self) -> u64 {
        self.block_size
    }

    #[getter]
    fn policy(&self) -> String {
        self.policy.clone()
    }

    /// Zeroes the counters (the contents stay: a warm-up).
    fn reset_stats(&self) -> PyResult<()> {
        locked(&self.stepper)?.level.reset_stats();
        Ok(())
    }
}

fn parse_op(op: &Bound<'_, PyAny>) -> PyResult<Op> {
    if let Ok(n) = op.extract::<u8>() {
        return match n {
            0 => Ok(Op::Read),
            1 => Ok(Op::Write),
            _ => Err(value_err("op", format!("{n} (use 0 for read, 1 for write)"))),
        };
    }
    let s: String = op.extract().map_err(|_| value_err("op", "expected 'read', 'write', 0 or 1"))?;
    match s.to_ascii_lowercase().as_str() {
        "read" | "r" => Ok(Op::Read),
        "write" | "w" => Ok(Op::Write),
        _ => Err(value_err("op", format!("'{s}' (use 'read' or 'write')"))),
    }
}

/// A [`Cache`]'s level and the plan buffer it fills.
struct Stepper {
    level: CacheLevel,
    plan: StepPlan,
    block_size: u64,
}

impl Stepper {
    /// One request through the level, completing its reads at once; (hit blocks, missed blocks).
    fn step(&mut self, op: Op, volume: u32, offset: u64, length: u64) -> PyResult<(u64, u64)> {
        let req =
            level::Request::bytes(op, volume, offset, length, self.block_size).map_err(|e| value_err("request", e))?;
        self.level.access(&req, &mut self.plan);
        self.level.complete_all();
        let hits = self.plan.fates.iter().filter(|f| matches!(f, Fate::Hit | Fate::Update)).count() as u64;
        Ok((hits, self.plan.fates.len() as u64 - hits))
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("TraceError", m.py().get_type::<TraceError>())?;
    m.add_function(wrap_pyfunction!(read_trace, m)?)?;
    m.add_function(wrap_pyfunction!(sim, m)?)?;
    m.add_function(wrap_pyfunction!(sim_columns, m)?)?;
    m.add_function(wrap_pyfunction!(interval_columns, m)?)?;
    m.add_function(wrap_pyfunction!(mrc, m)?)?;
    m.add_function(wrap_pyfunction!(mrc_policies, m)?)?;
    m.add_function(wrap_pyfunction!(trace_stats, m)?)?;
    m.add_function(wrap_pyfunction!(experiments::experiment, m)?)?;
    m.add_class::<TraceBatches>()?;
    m.add_class::<Cache>()?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
