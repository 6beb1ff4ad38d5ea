//! The cache-device level as both tier simulators drive it: the one-pass replay of `blockwell sim
//! --cache-dev-size` ([`crate::tier`]) and the time-aware simulator's cache device ([`crate::vtime`], `blockwell
//! tsim --cache-dev-size`).
//!
//! The level is the engine's [`CacheLevel`], configured as `blockwell serve --cache-dev` configures it
//! ([`level_config`]): promotion by its own admission rule and sequential cutoff, the write policy of the mode
//! ([`DevMode`]), no allocation of a block a write covers only in part, no limit on the reads it clusters.
//! What the drivers share beyond that is the bookkeeping of one step, so that both count alike: where each
//! block of a read comes from (`read_runs`), where each block of a write goes (`write_split`), which evicted
//! blocks are written back and how (`victim_runs`), the counters under `blockwell status`'s names
//! ([`DevCounters`]) and the dirty blocks over time (`DirtySampler`).

use crate::replay::CacheSize;
use blockwell_core::admission::AdmissionSpec;
use blockwell_core::cache::CacheConfig;
use blockwell_core::cleaner::CleanerSpec;
use blockwell_core::key::BlockKey;
use blockwell_core::level::{CacheLevel, Fate, LevelConfig, Victim, WritePolicy};
use blockwell_core::policy::PolicySpec;
use blockwell_core::prefetch::BlockState;
pub use blockwell_core::stats::DevCounters;
use serde::{Deserialize, Serialize};

/// What writes do at the cache device (the modes of `serve --cache-dev`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DevMode {
    /// A write goes to the device; the cleaner writes it to the origin later.
    WriteBack,
    /// A write goes to the origin, then to the device.
    WriteThrough,
    /// A write goes to the origin and drops the device's copy.
    WriteAround,
}

impl DevMode {
    pub fn name(self) -> &'static str {
        match self {
            DevMode::WriteBack => "write-back",
            DevMode::WriteThrough => "write-through",
            DevMode::WriteAround => "write-around",
        }
    }

    /// The engine's write policy for the mode.
    pub fn write_policy(self) -> WritePolicy {
        match self {
            DevMode::WriteBack => WritePolicy::Back,
            DevMode::WriteThrough => WritePolicy::Allocate,
            DevMode::WriteAround => WritePolicy::Around,
        }
    }
}

/// The cache-device level of a two-level replay.
#[derive(Clone, Debug)]
pub struct DevSpec {
    pub policy: PolicySpec,
    pub size: CacheSize,
    pub mode: DevMode,
    /// Which read misses are copied into the device (`--promote`).
    pub promote: AdmissionSpec,
    /// Back-to-back runs of at least this many bytes bypass the device; 0 turns it off.
    pub sequential_cutoff: u64,
    pub cleaner: CleanerSpec,
    /// The longest origin write a cleaning pass builds, in blocks.
    pub clean_run_blocks: u64,
    /// Sets of this many blocks (FlashCache's associativity); `None`: fully associative.
    pub associativity: Option<std::num::NonZeroUsize>,
}

impl DevSpec {
    /// An LRU device of `blocks` blocks in `mode` with `cleaner` (e.g. `none`), promoting every miss, no cutoff,
    /// fully associative: the tests' starting point.
    pub fn lru(mode: DevMode, blocks: u64, cleaner: CleanerSpec) -> DevSpec {
        DevSpec {
            policy: PolicySpec::new(blockwell_core::PolicyKind::Lru),
            size: CacheSize::Blocks(blocks),
            mode,
            promote: AdmissionSpec::Always,
            sequential_cutoff: 0,
            cleaner,
            clean_run_blocks: 256,
            associativity: None,
        }
    }
}

/// The level's configuration for `spec` over `cache`, as the live tier sets it.
pub fn level_config(cache: CacheConfig, spec: &DevSpec) -> LevelConfig {
    let mut lc = LevelConfig::new(cache);
    lc.admission = spec.promote;
    lc.sequential_cutoff = spec.sequential_cutoff;
    lc.write = spec.mode.write_policy();
    lc.partial_write_allocate = false;
    lc.cluster_max_blocks = u64::from(u32::MAX);
    lc
}

/// 1 − origin write bytes / client write bytes (`None` without client writes).
pub fn write_reduction(client_write_bytes: u64, origin_write_bytes: u64) -> Option<f64> {
    (client_write_bytes > 0).then(|| 1.0 - origin_write_bytes as f64 / client_write_bytes as f64)
}

/// One run of consecutive blocks of a read at the device level, and where it is read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ReadRun {
    pub first: BlockKey,
    pub n: u64,
    /// From the cache device (else from the origin).
    pub from_dev: bool,
}

/// Where the blocks of a read served by `fates` (blocks `first..`) come from: blocks the device holds from it
/// (a bypassed read's too, as the tier serves them), the others from the origin, in runs of consecutive
/// blocks; a block whose read is in flight at the level ([`Fate::Wait`]) comes with that read and ends a run.
/// Counts the device's blocks read and the origin's reads.
pub(crate) fn read_runs(
    level: &CacheLevel,
    fates: &[Fate],
    first: BlockKey,
    bs: u64,
    c: &mut DevCounters,
    out: &mut Vec<ReadRun>,
) {
    out.clear();
    let mut cur: Option<ReadRun> = None;
    for (i, &f) in fates.iter().enumerate() {
        let key = BlockKey::from_raw(first.raw() + i as u64);
        let from = match f {
            Fate::Wait => None,
            Fate::Hit => Some(true),
            Fate::Pass => Some(level.has_data(key)),
            _ => Some(false),
        };
        match (cur.as_mut(), from) {
            (Some(r), Some(d)) if r.from_dev == d => r.n += 1,
            (_, from) => {
                out.extend(cur.take());
                cur = from.map(|from_dev| ReadRun { first: key, n: 1, from_dev });
            }
        }
    }
    out.extend(cur);
    for r in out.iter() {
        if r.from_dev {
            c.dev_read_blocks += r.n;
        } else {
            c.origin_reads += 1;
            c.origin_read_bytes += r.n * bs;
        }
    }
}

/// Where the blocks of a write (bytes `offset..offset+len`, blocks `first..`, served by `fates`) go: a block
/// the level updated or allocated is written to the device (`dev`; under write-back it is now dirty), and so
/// is one whose read is in flight (`in_flight`: its data arrives with the write's, dirty under write-back once
/// it is in); in write-back, every other block's bytes go to the origin, in byte runs (`origin`, counted as
/// origin writes). Write-through and write-around have written the whole request to the origin already.
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_split(
    level: &mut CacheLevel,
    fates: &[Fate],
    first: BlockKey,
    offset: u64,
    len: u64,
    bs: u64,
    mode: DevMode,
    c: &mut DevCounters,
    dev: &mut Vec<BlockKey>,
    in_flight: &mut Vec<BlockKey>,
    origin: &mut Vec<(u64, u64)>,
) {
    dev.clear();
    in_flight.clear();
    origin.clear();
    let back = mode == DevMode::WriteBack;
    for (i, &f) in fates.iter().enumerate() {
        let key = BlockKey::from_raw(first.raw() + i as u64);
        let written = matches!(f, Fate::Update | Fate::Allocate);
        if written && level.has_data(key) {
            c.dev_write_blocks += 1;
            if back {
                level.set_dirty(key, true);
            }
            dev.push(key);
        } else if written && level.state(key) == BlockState::InFlight {
            c.dev_write_blocks += 1;
            in_flight.push(key);
            dev.push(key);
        } else if back {
            // Not in the device: this block's bytes go to the origin.
            let b = key.block();
            let lo = (b * bs).max(offset);
            let hi = ((b + 1) * bs).min(offset + len);
            match origin.last_mut() {
                Some((_, e)) if *e == lo => *e = hi,
                _ => origin.push((lo, hi)),
            }
        }
    }
    for &(s, e) in origin.iter() {
        c.origin_write(e - s);
    }
}

/// The victims of a device-level step: clean ones leave (demotions), dirty ones are written back at once, in
/// runs of consecutive blocks of at most `max_run` (sorted by key, appended to `out`), each run a device read
/// and an origin write, counted here.
pub(crate) fn victim_runs(victims: &[Victim], max_run: u64, bs: u64, c: &mut DevCounters, out: &mut Vec<ReadRun>) {
    let mut dirty: Vec<u64> = Vec::new();
    for v in victims {
        if v.dirty {
            dirty.push(v.key.raw());
        } else {
            c.demotions += 1;
        }
    }
    dirty.sort_unstable();
    let mut i = 0;
    while i < dirty.len() {
        let mut j = i + 1;
        while j < dirty.len() && dirty[j] == dirty[j - 1] + 1 && (j - i) < max_run as usize {
            j += 1;
        }
        let n = (j - i) as u64;
        c.clean_writes += 1;
        c.cleaned_blocks += n;
        c.dev_read_blocks += n;
        c.origin_write(n * bs);
        out.push(ReadRun { first: BlockKey::from_raw(dirty[i]), n, from_dev: true });
        i = j;
    }
}

/// One point of the dirty series.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirtyPoint {
    /// Requests replayed (counted ones, after the warm-up).
    pub request: u64,
    pub time_ns: u64,
    pub dirty_blocks: u64,
}

/// The dirty blocks over the run: what a lost cache device would take with it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DirtyReport {
    pub max_blocks: u64,
    /// Mean over requests (sampled after each one).
    pub mean_blocks: f64,
    pub final_blocks: u64,
    pub series: Vec<DirtyPoint>,
}

/// Samples the dirty blocks after each request.
#[derive(Clone, Debug, Default)]
pub(crate) struct DirtySampler {
    report: DirtyReport,
    sum: u128,
    n: u64,
}

impl DirtySampler {
    /// `dirty` blocks after request `index` (1-based) at `now_ns`; a series point every `every` requests.
    pub fn sample(&mut self, index: u64, now_ns: u64, dirty: u64, every: u64) {
        self.report.max_blocks = self.report.max_blocks.max(dirty);
        self.sum += u128::from(dirty);
        self.n += 1;
        if every > 0 && index % every == 0 {
            self.report.series.push(DirtyPoint { request: index, time_ns: now_ns, dirty_blocks: dirty });
        }
    }

    /// The report, with `final_blocks` dirty at the end.
    pub fn finish(self, final_blocks: u64) -> DirtyReport {
        DirtyReport {
            final_blocks,
            mean_blocks: if self.n == 0 { 0.0 } else { self.sum as f64 / self.n as f64 },
            ..self.report
        }
    }
}
