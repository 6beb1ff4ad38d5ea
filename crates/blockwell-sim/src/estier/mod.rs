//! Extended storage (seed `002_*`, Koob, Elliott & Cockburn, "An Empirical Evaluation of Semiconductor File
//! Memory as a Disk Cache"): a slower, cheaper, block-addressable memory tier ("file memory") between the DRAM
//! page cache and the disk, and the paper's equivalent-capacity analysis (its Table II).
//!
//! What it models. A page-level hierarchy replayed sequentially, one operation at a time, with a time sum per
//! level (the paper measures single-threaded benchmarks, PostMark and Bonnie's seek phase, and its Figure 5
//! models file memory as delay elements on page copies, so a sequential sum is the paper's model):
//!
//! ```text
//!   user ── copy, dram_ns ──> DRAM page cache (policy, dram_blocks; 0 = none, the paper's Fig. 1(a))
//!                                  │  transfer: dram_ns × slowdown + transfer_ns per page
//!                             extended-storage tier (policy, es_blocks; inclusive or exclusive)
//!                                  │  disk model (DiskSpec, e.g. cheetah9lp), one 4 KiB request per page
//!                                 disk
//! ```
//!
//! Every page that enters or leaves the tier costs one *tier transfer* (`dram_ns × slowdown + transfer_ns`,
//! the per-block cost of [`blockwell_disk::MemoryModel`] plus a fixed per-transfer cost); every page the user
//! reads or writes through the DRAM page cache costs one DRAM copy (`dram_ns`); every disk read or write costs
//! what the disk model says. Total time = DRAM time + tier time + disk time, all integer nanoseconds.
//!
//! - No page cache (`dram_blocks = 0`, the paper's experimental model, Fig. 1(a)/Fig. 5): the tier is the only
//!   cache. A read hit copies tier → user (1 transfer); a read miss reads the disk, fills the tier and copies to
//!   the user (2 transfers); a write copies user → tier (1 transfer) and dirties the page.
//! - With a page cache (Fig. 1(b)), `inclusive`: every page in DRAM is also in the tier. A read miss in both
//!   reads the disk into DRAM and copies the page into the tier (1 transfer); a tier hit copies tier → DRAM
//!   (1 transfer). A dirty page evicted from DRAM is written into the tier (1 transfer); a page the tier evicts
//!   is also dropped from DRAM (back-invalidation; a dirty DRAM copy goes straight to disk).
//! - `exclusive` (victim tier): a page is in at most one of DRAM and the tier. A read miss in both reads the
//!   disk into DRAM (no transfer); every page DRAM evicts, clean or dirty, moves to the tier (1 transfer); a tier
//!   hit moves the page up (1 transfer, removed from the tier).
//! - Writes are whole-page overwrites (a write miss reads nothing; workloads that write part of a page read it
//!   first). Write-back: a dirty page reaches the disk when the tier (or, with no tier, DRAM) evicts it, and
//!   the disk write's time is charged then. Deleting a page (a PostMark file delete) drops it from every level
//!   without writing it back, as truncation does.
//! - An [`EsOp::Mark`] starts the measured phase: statistics and times restart from zero, cache contents stay.
//!
//! Parameters and defaults ([`EsConfig::default`]):
//!
//! | parameter | default | meaning / source |
//! |---|---|---|
//! | `block_size` | 4096 | page size (seed 002: page-addressable extended storage, x86 4 KiB pages) |
//! | `dram_blocks`, `dram_policy` | 0, `lru` | DRAM page cache; 0 = none (seed 002's experimental model) |
//! | `es_blocks`, `es_policy` | 131072 (512 MiB), `lru` | tier capacity; LRU as the Linux page cache the paper's ESDC inherits |
//! | `slowdown` | 1 | file-memory access time relative to DRAM (seed 002 §V: 1 to 5) |
//! | `dram_ns` | 1950 | DRAM copy of one page (`MemoryParams::dram()`: 4 KiB at PC2100's 2.1 GB/s) |
//! | `transfer_ns` | 0 | fixed extra cost per tier transfer (controller, bounce buffer) |
//! | `mode` | inclusive | inclusive or exclusive (only matters with a page cache) |
//! | `disk` | `cheetah9lp` | disk model (seed 002 used a Seagate Cheetah ST318405LW, 10k rpm) |
//!
//! Submodules: [`workloads`] (PostMark-like and Bonnie-like page streams) and [`search`] (equivalent-capacity
//! bisection, the Table II layout and the break-even price ratio). User guide: `docs/extended-storage.md`.

pub mod search;
pub mod workloads;

use crate::mrc::KeyMap;
use blockwell_core::cache::CacheConfig;
use blockwell_core::level::{CacheLevel, Fate, LevelConfig, Request, StepPlan};
use blockwell_core::policy::{PolicyError, Preset};
use blockwell_core::{BlockKey, Op, PolicySpec};
use blockwell_disk::{DiskModel, DiskRequest, DiskSpec, MemoryModel, MemoryParams};
use serde::Serialize;

pub use search::{equivalence_table, equivalent_capacity, EqRow, Equivalence, EsTable, SearchConfig};
pub use workloads::{BonnieConfig, EsWorkload, PostmarkConfig};

/// Errors of the extended-storage simulator, naming the setting.
#[derive(Debug, thiserror::Error)]
pub enum EsError {
    #[error("policy: {0}")]
    Policy(#[from] PolicyError),
    #[error("disk model: {0}")]
    Disk(#[from] blockwell_disk::SpecError),
    #[error("tier timing: {0}")]
    Memory(#[from] blockwell_disk::ParamError),
    #[error("block size {0} is not a power of two between 512 B and 1 MiB")]
    BlockSize(u64),
    #[error("page {0} is beyond the largest addressable block")]
    Page(u64),
    #[error("{0}")]
    Invalid(String),
}

/// Inclusive or exclusive (victim) tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EsMode {
    /// Every page in DRAM is also in the tier.
    #[default]
    Inclusive,
    /// A page is in at most one of DRAM and the tier; DRAM's victims go to the tier.
    Exclusive,
}

impl EsMode {
    pub fn name(self) -> &'static str {
        match self {
            EsMode::Inclusive => "inclusive",
            EsMode::Exclusive => "exclusive",
        }
    }

    pub fn from_name(s: &str) -> Result<Self, EsError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "inclusive" | "incl" => Ok(EsMode::Inclusive),
            "exclusive" | "excl" | "victim" => Ok(EsMode::Exclusive),
            _ => Err(EsError::Invalid(format!("unknown tier mode '{s}' (known: inclusive, exclusive)"))),
        }
    }
}

/// A hierarchy's configuration (see the module doc for defaults and sources).
#[derive(Clone, Debug)]
pub struct EsConfig {
    pub block_size: u64,
    pub dram_blocks: usize,
    pub dram_policy: PolicySpec,
    pub es_blocks: usize,
    pub es_policy: PolicySpec,
    pub slowdown: f64,
    pub dram_ns: u64,
    pub transfer_ns: u64,
    pub mode: EsMode,
    pub disk: DiskSpec,
}

impl Default for EsConfig {
    fn default() -> Self {
        let lru = PolicySpec::new(blockwell_core::PolicyKind::Lru);
        EsConfig {
            block_size: 4096,
            dram_blocks: 0,
            dram_policy: lru.clone(),
            es_blocks: 131_072,
            es_policy: lru,
            slowdown: 1.0,
            dram_ns: MemoryParams::dram().dram_ns,
            transfer_ns: 0,
            mode: EsMode::Inclusive,
            // A registry preset: parsing it cannot fail (a unit test builds it).
            disk: DiskSpec::parse("cheetah9lp").unwrap_or_else(|_| unreachable!("cheetah9lp is a preset")),
        }
    }
}

impl EsConfig {
    /// Nanoseconds of one tier transfer: the memory model's cost of one block at `slowdown`, plus
    /// `transfer_ns`.
    pub fn tier_transfer_ns(&self) -> Result<u64, EsError> {
        if !self.block_size.is_power_of_two() || !(512..=1 << 20).contains(&self.block_size) {
            return Err(EsError::BlockSize(self.block_size));
        }
        let p = MemoryParams {
            name: "es".into(),
            slowdown: self.slowdown,
            block_kib: (self.block_size / 1024).max(1) as u32,
            dram_ns: self.dram_ns,
            capacity_gb: 1.0,
        };
        let mut m = MemoryModel::new(p)?;
        let sectors = self.block_size / blockwell_disk::SECTOR;
        Ok(m.service(0, &DiskRequest::read(0, sectors)).saturating_add(self.transfer_ns))
    }
}

/// Counters of one cache level (DRAM page cache or tier), in pages.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LevelStats {
    pub read_hits: u64,
    pub read_misses: u64,
    pub write_hits: u64,
    pub write_misses: u64,
    /// Pages copied out of this level (to the user or the level above or the disk).
    pub pages_read: u64,
    /// Pages copied into this level (from the user, another level or the disk).
    pub pages_written: u64,
    pub evictions: u64,
    pub dirty_evictions: u64,
    pub time_ns: u64,
}

impl LevelStats {
    /// Read misses / read lookups at this level; `None` (undefined, not 0) when it saw no read.
    pub fn read_miss_rate(&self) -> Option<f64> {
        ratio(self.read_misses, self.read_hits + self.read_misses)
    }

    /// All misses / all lookups at this level; `None` when it saw no lookup.
    pub fn miss_rate(&self) -> Option<f64> {
        let m = self.read_misses + self.write_misses;
        ratio(m, m + self.read_hits + self.write_hits)
    }
}

use blockwell_core::stats::ratio;

/// Page transfers between levels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Transfers {
    pub user_to_es: u64,
    pub es_to_user: u64,
    pub es_to_dram: u64,
    pub dram_to_es: u64,
    pub disk_to_es: u64,
    pub es_to_disk: u64,
    pub disk_to_dram: u64,
    pub dram_to_disk: u64,
}

impl Transfers {
    /// Transfers into or out of the tier (each costs one tier transfer time).
    pub fn tier(&self) -> u64 {
        self.user_to_es + self.es_to_user + self.es_to_dram + self.dram_to_es + self.disk_to_es + self.es_to_disk
    }
}

/// Disk counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DiskStats {
    pub pages_read: u64,
    pub pages_written: u64,
    pub time_ns: u64,
}

/// What a run measured (after the last [`EsOp::Mark`], or all of it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EsReport {
    pub user_reads: u64,
    pub user_writes: u64,
    pub deletes: u64,
    pub dram: LevelStats,
    pub es: LevelStats,
    pub disk: DiskStats,
    pub transfers: Transfers,
    /// Pages the tier evicted that DRAM also held (inclusive mode), dropped from DRAM.
    pub back_invalidations: u64,
    /// DRAM + tier + disk time.
    pub total_ns: u64,
}

impl EsReport {
    /// Pages read from disk / pages the user read: the hierarchy's global read miss rate (`None` without user
    /// reads).
    pub fn global_read_miss_rate(&self) -> Option<f64> {
        ratio(self.disk.pages_read, self.user_reads)
    }
}

/// One page-level operation of a workload. Pages are numbered in one logical space (file pages, as laid out on
/// the disk: page `p` is at byte `p × block_size`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EsOp {
    Read(u64),
    Write(u64),
    /// The page's file was deleted or truncated: dropped everywhere, never written back.
    Delete(u64),
    /// Start of the measured phase.
    Mark,
}

/// One level of the hierarchy: the engine's cache step ([`CacheLevel`]) over pages, whose per-block dirty bit
/// and victims carry what write-back needs. Reads complete at once (the hierarchy is replayed sequentially).
struct Level {
    step: CacheLevel,
    plan: StepPlan,
    /// Resident pages (for [`Hierarchy::validate`]'s inclusion check: a policy does not list its keys).
    pages: KeyMap<()>,
}

/// Pages are keyed as blocks of this size (the level's byte budget is counted in them).
const PAGE: u64 = 4096;

impl Level {
    fn new(spec: &PolicySpec, blocks: usize) -> Result<Option<Level>, EsError> {
        if blocks == 0 {
            return Ok(None);
        }
        let cc = CacheConfig::new(PAGE, blocks as u64 * PAGE).map_err(|e| EsError::Invalid(e.to_string()))?;
        let step = CacheLevel::new(LevelConfig::new(cc), spec.build(Preset::Default, blocks)?, None);
        Ok(Some(Level { step, plan: StepPlan::default(), pages: KeyMap::default() }))
    }

    fn contains(&self, k: BlockKey) -> bool {
        self.step.has_data(k)
    }

    /// One demand access of `k`; victims (key, dirty) go to `victims`. Returns whether `k` is resident after.
    fn access(&mut self, k: BlockKey, victims: &mut Vec<(BlockKey, bool)>) -> bool {
        self.step.access(&Request::blocks(Op::Read, k, 1, PAGE), &mut self.plan);
        self.step.complete_all();
        for v in &self.plan.victims {
            self.pages.remove(&v.key.raw());
            victims.push((v.key, v.dirty));
        }
        let resident = self.step.has_data(k);
        if resident {
            self.pages.insert(k.raw(), ());
        }
        resident
    }

    /// A hit: updates the policy's state.
    fn touch(&mut self, k: BlockKey) {
        let resident = self.access(k, &mut Vec::new());
        debug_assert!(resident && self.plan.fates == [Fate::Hit]);
    }

    /// Inserts `k` (not resident) with its dirty flag; victims (key, dirty) go to `victims`.
    fn insert(&mut self, k: BlockKey, dirty: bool, victims: &mut Vec<(BlockKey, bool)>) {
        if self.access(k, victims) && dirty {
            self.step.set_dirty(k, true);
        }
    }

    fn set_dirty(&mut self, k: BlockKey) {
        self.step.set_dirty(k, true);
    }

    /// Drops `k`; `Some(dirty)` when it was resident.
    fn remove(&mut self, k: BlockKey) -> Option<bool> {
        let dirty = self.step.is_dirty(k);
        self.pages.remove(&k.raw());
        (self.step.invalidate(k, 1) > 0).then_some(dirty)
    }
}

/// The hierarchy, driven one operation at a time ([`Hierarchy::apply`]) or by [`simulate`].
pub struct Hierarchy {
    mode: EsMode,
    dram: Option<Level>,
    es: Option<Level>,
    disk: Box<dyn DiskModel>,
    dram_ns: u64,
    tier_ns: u64,
    sectors_per_page: u64,
    clock_ns: u64,
    r: EsReport,
    victims: Vec<(BlockKey, bool)>,
    es_victims: Vec<(BlockKey, bool)>,
}

impl Hierarchy {
    pub fn new(cfg: &EsConfig) -> Result<Hierarchy, EsError> {
        let tier_ns = cfg.tier_transfer_ns()?;
        Ok(Hierarchy {
            mode: cfg.mode,
            dram: Level::new(&cfg.dram_policy, cfg.dram_blocks)?,
            es: Level::new(&cfg.es_policy, cfg.es_blocks)?,
            disk: cfg.disk.build()?,
            dram_ns: cfg.dram_ns,
            tier_ns,
            sectors_per_page: cfg.block_size / blockwell_disk::SECTOR,
            clock_ns: 0,
            r: EsReport::default(),
            victims: Vec::new(),
            es_victims: Vec::new(),
        })
    }

    /// What was measured so far (since the last [`EsOp::Mark`]).
    pub fn report(&self) -> EsReport {
        self.r
    }

    /// Is `page` in the DRAM page cache / in the tier?
    pub fn in_dram(&self, page: u64) -> bool {
        BlockKey::new(0, page).is_some_and(|k| self.dram.as_ref().is_some_and(|l| l.contains(k)))
    }

    pub fn in_es(&self, page: u64) -> bool {
        BlockKey::new(0, page).is_some_and(|k| self.es.as_ref().is_some_and(|l| l.contains(k)))
    }

    /// Checks the mode's invariant (inclusive: DRAM ⊆ tier; exclusive: DRAM ∩ tier = ∅), that each level's
    /// bookkeeping matches its policy, and that no level is over capacity.
    pub fn validate(&self) -> Result<(), String> {
        for (name, l) in [("dram", &self.dram), ("es", &self.es)] {
            if let Some(l) = l {
                l.step.validate()?;
                let p = l.step.policy();
                if l.pages.len() != p.len() || l.pages.len() > p.capacity() {
                    return Err(format!("{name}: {} pages tracked, policy holds {}", l.pages.len(), p.len()));
                }
            }
        }
        if let (Some(d), Some(e)) = (&self.dram, &self.es) {
            for &k in d.pages.keys() {
                let in_es = e.pages.contains_key(&k);
                match self.mode {
                    EsMode::Inclusive if !in_es => return Err(format!("inclusive: page {k} in DRAM, not in the tier")),
                    EsMode::Exclusive if in_es => return Err(format!("exclusive: page {k} in DRAM and the tier")),
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Applies one operation.
    pub fn apply(&mut self, op: EsOp) -> Result<(), EsError> {
        let key = |p: u64| BlockKey::new(0, p).ok_or(EsError::Page(p));
        match op {
            EsOp::Read(p) => self.read(key(p)?),
            EsOp::Write(p) => self.write(key(p)?),
            EsOp::Delete(p) => self.delete(key(p)?),
            EsOp::Mark => self.r = EsReport::default(),
        }
        Ok(())
    }

    fn dram_copy(&mut self) {
        self.r.dram.time_ns += self.dram_ns;
        self.r.total_ns += self.dram_ns;
        self.clock_ns += self.dram_ns;
    }

    fn tier(&mut self) -> &mut Transfers {
        self.r.es.time_ns += self.tier_ns;
        self.r.total_ns += self.tier_ns;
        self.clock_ns += self.tier_ns;
        &mut self.r.transfers
    }

    fn disk_io(&mut self, k: BlockKey, write: bool) {
        let sector = k.block().saturating_mul(self.sectors_per_page);
        let req = if write {
            self.r.disk.pages_written += 1;
            DiskRequest::write(sector, self.sectors_per_page)
        } else {
            self.r.disk.pages_read += 1;
            DiskRequest::read(sector, self.sectors_per_page)
        };
        let t = self.disk.service(self.clock_ns, &req);
        self.r.disk.time_ns += t;
        self.r.total_ns += t;
        self.clock_ns += t;
    }

    fn read(&mut self, k: BlockKey) {
        self.r.user_reads += 1;
        if self.dram.is_none() {
            return self.read_es_only(k);
        }
        if let Some(d) = self.dram.as_mut().filter(|d| d.contains(k)) {
            d.touch(k);
            self.r.dram.read_hits += 1;
            self.r.dram.pages_read += 1;
            return self.dram_copy();
        }
        self.r.dram.read_misses += 1;
        let es_hit = self.es.as_ref().is_some_and(|e| e.contains(k));
        if es_hit {
            self.r.es.read_hits += 1;
            self.r.es.pages_read += 1;
            self.tier().es_to_dram += 1;
            let dirty = match (self.mode, self.es.as_mut()) {
                (EsMode::Exclusive, Some(e)) => e.remove(k).unwrap_or(false),
                (EsMode::Inclusive, Some(e)) => {
                    e.touch(k);
                    false
                }
                _ => false,
            };
            self.insert_dram(k, dirty);
        } else {
            if self.es.is_some() {
                self.r.es.read_misses += 1;
            }
            self.disk_io(k, false);
            self.r.transfers.disk_to_dram += 1;
            if self.mode == EsMode::Inclusive && self.es.is_some() {
                self.tier().dram_to_es += 1;
                self.r.es.pages_written += 1;
                self.insert_es(k, false);
            }
            self.insert_dram(k, false);
        }
        self.r.dram.pages_written += 1;
        self.r.dram.pages_read += 1;
        self.dram_copy();
    }

    fn read_es_only(&mut self, k: BlockKey) {
        let Some(e) = self.es.as_mut() else {
            // No cache at all: disk to the user directly.
            self.disk_io(k, false);
            return self.dram_copy();
        };
        if e.contains(k) {
            e.touch(k);
            self.r.es.read_hits += 1;
        } else {
            self.r.es.read_misses += 1;
            self.disk_io(k, false);
            self.tier().disk_to_es += 1;
            self.r.es.pages_written += 1;
            self.insert_es(k, false);
        }
        self.r.es.pages_read += 1;
        self.tier().es_to_user += 1;
    }

    fn write(&mut self, k: BlockKey) {
        self.r.user_writes += 1;
        if self.dram.is_none() {
            let Some(e) = self.es.as_mut() else {
                return self.disk_io(k, true);
            };
            if e.contains(k) {
                e.touch(k);
                e.set_dirty(k);
                self.r.es.write_hits += 1;
            } else {
                self.r.es.write_misses += 1;
                self.insert_es(k, true);
            }
            self.r.es.pages_written += 1;
            self.tier().user_to_es += 1;
            return;
        }
        if let Some(d) = self.dram.as_mut().filter(|d| d.contains(k)) {
            d.touch(k);
            d.set_dirty(k);
            self.r.dram.write_hits += 1;
        } else {
            self.r.dram.write_misses += 1;
            match (self.mode, self.es.as_mut()) {
                // The tier's copy is superseded by the new data in DRAM.
                (EsMode::Exclusive, Some(e)) => {
                    if e.remove(k).is_some() {
                        self.r.es.write_hits += 1;
                    } else {
                        self.r.es.write_misses += 1;
                    }
                }
                // Inclusion: the tier holds a slot for every DRAM page; its data arrives when DRAM writes back.
                (EsMode::Inclusive, Some(e)) => {
                    if e.contains(k) {
                        e.touch(k);
                        self.r.es.write_hits += 1;
                    } else {
                        self.r.es.write_misses += 1;
                        self.insert_es(k, false);
                    }
                }
                _ => {}
            }
            self.insert_dram(k, true);
        }
        self.r.dram.pages_written += 1;
        self.dram_copy();
    }

    fn delete(&mut self, k: BlockKey) {
        self.r.deletes += 1;
        if let Some(d) = self.dram.as_mut() {
            d.remove(k);
        }
        if let Some(e) = self.es.as_mut() {
            e.remove(k);
        }
    }

    fn insert_dram(&mut self, k: BlockKey, dirty: bool) {
        let mut victims = std::mem::take(&mut self.victims);
        victims.clear();
        if let Some(d) = self.dram.as_mut() {
            d.insert(k, dirty, &mut victims);
        }
        for &(v, v_dirty) in &victims {
            self.r.dram.evictions += 1;
            self.r.dram.dirty_evictions += u64::from(v_dirty);
            match (self.mode, self.es.is_some()) {
                (EsMode::Exclusive, true) => {
                    self.r.dram.pages_read += 1;
                    self.r.es.pages_written += 1;
                    self.tier().dram_to_es += 1;
                    self.insert_es(v, v_dirty);
                }
                (EsMode::Inclusive, true) if v_dirty => {
                    self.r.dram.pages_read += 1;
                    if let Some(e) = self.es.as_mut().filter(|e| e.contains(v)) {
                        e.set_dirty(v);
                        self.r.es.pages_written += 1;
                        self.tier().dram_to_es += 1;
                    } else {
                        // Inclusion keeps this from happening; write through to disk if it does.
                        self.r.transfers.dram_to_disk += 1;
                        self.disk_io(v, true);
                    }
                }
                (_, false) if v_dirty => {
                    self.r.dram.pages_read += 1;
                    self.r.transfers.dram_to_disk += 1;
                    self.disk_io(v, true);
                }
                _ => {}
            }
        }
        self.victims = victims;
    }

    fn insert_es(&mut self, k: BlockKey, dirty: bool) {
        let mut victims = std::mem::take(&mut self.es_victims);
        victims.clear();
        if let Some(e) = self.es.as_mut() {
            e.insert(k, dirty, &mut victims);
        }
        for &(v, es_dirty) in &victims {
            self.r.es.evictions += 1;
            let mut dram_dirty = false;
            if self.mode == EsMode::Inclusive {
                if let Some(d) = self.dram.as_mut() {
                    if let Some(dd) = d.remove(v) {
                        self.r.back_invalidations += 1;
                        dram_dirty = dd;
                    }
                }
            }
            if dram_dirty {
                // DRAM holds the newest data: it goes to disk from there.
                self.r.es.dirty_evictions += 1;
                self.r.dram.pages_read += 1;
                self.r.transfers.dram_to_disk += 1;
                self.disk_io(v, true);
            } else if es_dirty {
                self.r.es.dirty_evictions += 1;
                self.r.es.pages_read += 1;
                self.tier().es_to_disk += 1;
                self.disk_io(v, true);
            }
        }
        self.es_victims = victims;
    }
}

/// Replays `w` through a hierarchy built from `cfg`; the report covers the measured phase.
pub fn simulate(cfg: &EsConfig, w: &EsWorkload) -> Result<EsReport, EsError> {
    let mut h = Hierarchy::new(cfg)?;
    for &op in &w.ops {
        h.apply(op)?;
    }
    Ok(h.report())
}

#[cfg(test)]
mod rate_tests {
    use super::*;

    #[test]
    fn a_rate_of_nothing_is_undefined_not_0() {
        let none = LevelStats::default();
        assert_eq!((none.read_miss_rate(), none.miss_rate()), (None, None));
        assert_eq!(EsReport::default().global_read_miss_rate(), None);
        let some = LevelStats { read_hits: 3, read_misses: 1, ..LevelStats::default() };
        assert_eq!((some.read_miss_rate(), some.miss_rate()), (Some(0.25), Some(0.25)));
    }
}
