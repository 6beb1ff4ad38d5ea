//! Content-based block caching: one copy of each block content, shared by every address that holds it.
//!
//! **Paper.** Morrey & Grunwald, "Content-Based Block Caching" (seed `003_*`, 2006). Its three structures are
//! here: the *LUN map* (volume map: address → shared block, [`KeyIndex`] over reference entries), the *block
//! cache* (each block entry keeps the list of addresses referencing it), and the *content hash table* (a bucket
//! array of chained block handles, sized as a fraction of the cache). The hash is only a hint: every block on the
//! bucket's chain is checked with the caller's `confirm` callback (live mode: a full byte comparison; simulation:
//! digest equality), and each call is counted as a *full comparison* (paper §4.1, Figure 4).
//!
//! **Operations (paper §2.1, Figure 3).** Per block: a read hit touches the block; a read miss reads the device
//! and looks the content up (content hit: add a reference; content miss: insert a block). A write to a mapped
//! address with the same content is a *silent write*: no device write, nothing else changes. A write with new
//! content to an address that is the block's only reference rewrites the block in place (*private write*; if
//! the new content is elsewhere in the cache, the address joins that block and the old block is discarded). With
//! several references the address leaves the old block and joins (content hit) or creates (content miss) a
//! block. A write to an unmapped address joins or creates a block. [`Category`] is exactly Table 1's nine rows;
//! every block access lands in exactly one. Writes are write-through (as in the paper's DiskSim cache): every
//! write except a silent one is a device write; nothing is ever dirty.
//!
//! **Budget.** `capacity_bytes` holds: the hash table (`capacity × hash_fraction`, 4-byte buckets) when
//! `charge_hash_table` is on; and *slots* of `block_size` bytes, `slots = (capacity − table) / block_size`. A slot
//! holds a data block (with its first reference, as an offset cache's block holds its address) or a *reference
//! page*: room for `block_size / ref_bytes` extra references (the second and later references of blocks). So
//! references and blocks share the budget, as the paper says ("the LUN map could theoretically consume all cache
//! space"): a cache full of shared blocks converts block slots into reference pages and back.
//!
//! **Replacement, under any policy.** The replacement policy (any of [`crate::policy`], built with `slots`
//! capacity) orders the slot owners: data blocks and reference pages. A block's policy key is the address that
//! created it (so a policy's history — ARC's ghosts, 2Q's A1out — recognizes an address whose content returns, and
//! with no duplicate content the policy sees exactly the calls an offset cache makes); it is touched on every
//! access through any of its addresses and on content hits. Reference pages have internal keys (volume 65535) and
//! the newest is touched whenever an extra reference is added.
//! When a block is inserted or a new page is needed and the slots are full, the policy picks the victim as it
//! would for a new block:
//! - a data block victim is freed with all its references (the LUN map entries are invalidated);
//! - a reference-page victim means reference space is what the policy values least: references are dropped, least
//!   recently used first across the whole cache, until the extra references fit the remaining pages; a block left
//!   with no reference is freed.
//!
//! Under LRU this is the paper's rule in spirit — the least recently used references go first, a block dies with
//! its last reference, and the block/reference ratio is "controlled entirely by the LRU algorithm" — with one
//! difference: the paper drops the LRU *block's* LRU reference, we drop the globally LRU reference (the two agree
//! unless a block has both a very old and a very recent address). Offline policies (OPT) are rejected: content
//! blocks have no next-use time. Measured (`docs/experiments/dedup.md`): content caching gains under LRU, ARC,
//! S3-FIFO and CLOCK but loses under 2Q, whose FIFO A1in treats each new reference page as a one-time block.
//!
//! **Parameters and defaults** ([`DedupConfig`]): `hash_fraction` 1/64 (the paper's choice), `charge_hash_table`
//! true, `ref_bytes` 48 (what an extra reference costs here, below), block size 4 KiB.
//!
//! **Metadata** (sizes checked by a unit test). Per block entry 48 bytes (policy key, 16-byte content hash, chain
//! link, reference-list head and count, arena links; aligned to 16) plus 11.4–22.9 bytes of policy-key index
//! plus the policy's own per-entry cost (LRU: 27.4–38.9 B). Per reference 32 bytes (address key, block handle,
//! global-LRU links, block-list links) plus 11.4–22.9 bytes of LUN-map index: the default `ref_bytes` 48 charges
//! that, i.e. 85 extra references per 4 KiB reference page. Per hash bucket 4 bytes. The first reference and the
//! block entry are not charged, as [`crate::BlockCache`] charges no metadata: with no duplicate content and
//! `charge_hash_table` off, a content cache behaves exactly like an offset cache of the same size (tested in
//! `tests/dedup.rs` for every online policy).
//!
//! **Cost.** O(1) per access plus the bucket chain's length (the full comparisons) and, on eviction, the victim's
//! references.

use crate::arena::{Arena, Handle, KeyIndex, Keyed, Links, List};
use crate::cache::{CacheError, Op, MAX_BLOCK_SIZE, MIN_BLOCK_SIZE};
use crate::key::BlockKey;
use crate::policy::{Access, DynPolicy, Evicted, Outcome, PolicyError, PolicySpec, Preset};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// A block of the content cache (the handle of its entry, stable while the block is resident). Live drivers use
/// it to name the data slot that holds the block's bytes.
pub type BlockId = Handle;

/// Bytes per hash-table bucket (one block handle).
pub const BUCKET_BYTES: u64 = 4;

/// The volume whose key space the cache uses for its own policy keys (reference pages, and blocks whose
/// creating address cannot serve as their key). Addresses on it are never used as policy keys.
pub const INTERNAL_VOLUME: u64 = 0xFFFF;
/// Policy keys of blocks with no address key: `INTERNAL | counter`.
const INTERNAL: u64 = INTERNAL_VOLUME << 48;
/// Policy keys of reference pages: `PAGE_BASE | counter`.
const PAGE_BASE: u64 = INTERNAL | (1 << 47);

/// Settings of a content cache.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct DedupConfig {
    pub block_size: u64,
    /// The whole budget: blocks, reference pages and (when charged) the hash table.
    pub capacity_bytes: u64,
    /// Hash table size as a fraction of `capacity_bytes` (paper: 1/128 … 1/8; default 1/64).
    pub hash_fraction: f64,
    /// Whether the hash table is taken out of the budget (off: the paper's "ideal" table in dedicated memory).
    pub charge_hash_table: bool,
    /// Budget bytes one extra reference costs (`block_size / ref_bytes` references per reference page).
    pub ref_bytes: u64,
}

impl Default for DedupConfig {
    fn default() -> Self {
        DedupConfig {
            block_size: 4096,
            capacity_bytes: 64 << 20,
            hash_fraction: 1.0 / 64.0,
            charge_hash_table: true,
            ref_bytes: 48,
        }
    }
}

/// Configuration errors of a content cache.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DedupError {
    #[error(transparent)]
    Cache(#[from] CacheError),
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("hash fraction {0} is not in (0, 1)")]
    HashFraction(f64),
    #[error("ref_bytes {ref_bytes} must be between 1 and the block size {block_size}")]
    RefBytes { ref_bytes: u64, block_size: u64 },
    #[error("policy '{0}' needs next-use times, which content blocks do not have")]
    Offline(String),
    #[error("policy built with {got} blocks, the content cache needs {want} slots")]
    PolicyCapacity { got: usize, want: usize },
}

impl DedupConfig {
    /// Checks the settings.
    pub fn check(&self) -> Result<(), DedupError> {
        let bs = self.block_size;
        if !bs.is_power_of_two() || !(MIN_BLOCK_SIZE..=MAX_BLOCK_SIZE).contains(&bs) {
            return Err(CacheError::BlockSize(bs).into());
        }
        if !(self.hash_fraction > 0.0 && self.hash_fraction < 1.0) {
            return Err(DedupError::HashFraction(self.hash_fraction));
        }
        if self.ref_bytes == 0 || self.ref_bytes > bs {
            return Err(DedupError::RefBytes { ref_bytes: self.ref_bytes, block_size: bs });
        }
        let slots = self.slots();
        if slots == 0 {
            return Err(CacheError::TooSmall { bytes: self.capacity_bytes, block_size: bs }.into());
        }
        let limit = (crate::arena::MAX_ENTRIES / 4) as u64;
        if slots as u64 > limit {
            return Err(CacheError::TooLarge { bytes: self.capacity_bytes, blocks: slots as u64, limit }.into());
        }
        Ok(())
    }

    /// Hash-table buckets (at least one).
    pub fn buckets(&self) -> usize {
        ((self.capacity_bytes as f64 * self.hash_fraction) as u64 / BUCKET_BYTES).max(1) as usize
    }

    /// Bytes of the hash table.
    pub fn table_bytes(&self) -> u64 {
        self.buckets() as u64 * BUCKET_BYTES
    }

    /// Bytes of the budget the hash table takes (0 when not charged).
    pub fn charged_table_bytes(&self) -> u64 {
        if self.charge_hash_table {
            self.table_bytes()
        } else {
            0
        }
    }

    /// Slots of `block_size` bytes left for blocks and reference pages.
    pub fn slots(&self) -> usize {
        (self.capacity_bytes.saturating_sub(self.charged_table_bytes()) / self.block_size.max(1)) as usize
    }

    /// Extra references per reference page.
    pub fn refs_per_page(&self) -> u64 {
        (self.block_size / self.ref_bytes.max(1)).max(1)
    }
}

/// The nine rows of the paper's Table 1. Every block access is exactly one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    ReadHit,
    ReadMissContentHit,
    ReadMissContentMiss,
    /// Write hit in the LUN map, different content, multiple references, content miss.
    WriteHitMultiContentMiss,
    /// Write miss in the LUN map, content miss.
    WriteMissContentMiss,
    /// Write hit in the LUN map, different content, multiple references, content hit.
    WriteHitMultiContentHit,
    /// Write miss in the LUN map, content hit.
    WriteMissContentHit,
    /// Write hit in the LUN map, different content, single reference.
    PrivateWrite,
    /// Write hit in the LUN map, same content.
    SilentWrite,
}

impl Category {
    /// In Table 1's order.
    pub const ALL: [Category; 9] = [
        Category::ReadHit,
        Category::ReadMissContentHit,
        Category::ReadMissContentMiss,
        Category::WriteHitMultiContentMiss,
        Category::WriteMissContentMiss,
        Category::WriteHitMultiContentHit,
        Category::WriteMissContentHit,
        Category::PrivateWrite,
        Category::SilentWrite,
    ];

    /// Position in [`Category::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// Table 1's wording.
    pub fn label(self) -> &'static str {
        match self {
            Category::ReadHit => "read hit",
            Category::ReadMissContentHit => "read miss, content hit",
            Category::ReadMissContentMiss => "read miss, content miss",
            Category::WriteHitMultiContentMiss => "write hit, different content, multiple refs, content miss",
            Category::WriteMissContentMiss => "write miss, content miss",
            Category::WriteHitMultiContentHit => "write hit, different content, multiple refs, content hit",
            Category::WriteMissContentHit => "write miss, content hit",
            Category::PrivateWrite => "write hit, different content, single ref (private write)",
            Category::SilentWrite => "write hit, same content (silent write)",
        }
    }

    /// A short name for CSV columns.
    pub fn short(self) -> &'static str {
        match self {
            Category::ReadHit => "read_hit",
            Category::ReadMissContentHit => "read_miss_content_hit",
            Category::ReadMissContentMiss => "read_miss_content_miss",
            Category::WriteHitMultiContentMiss => "write_hit_multi_content_miss",
            Category::WriteMissContentMiss => "write_miss_content_miss",
            Category::WriteHitMultiContentHit => "write_hit_multi_content_hit",
            Category::WriteMissContentHit => "write_miss_content_hit",
            Category::PrivateWrite => "private_write",
            Category::SilentWrite => "silent_write",
        }
    }

    /// Table 1, "Costs a disk I/O".
    pub fn costs_io(self) -> bool {
        !matches!(self, Category::ReadHit | Category::SilentWrite)
    }

    /// Table 1, "Causes an eviction" (when the cache is full).
    pub fn may_evict(self) -> bool {
        matches!(
            self,
            Category::ReadMissContentMiss | Category::WriteHitMultiContentMiss | Category::WriteMissContentMiss
        )
    }

    pub fn is_read(self) -> bool {
        matches!(self, Category::ReadHit | Category::ReadMissContentHit | Category::ReadMissContentMiss)
    }
}

/// Counters of a content cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DedupStats {
    /// Block accesses per [`Category`], in [`Category::ALL`] order.
    pub categories: [u64; 9],
    /// Content-hash-table lookups (one per block whose content had to be placed: "inserts").
    pub lookups: u64,
    /// `confirm` calls on hash-chain candidates (paper's "full comparisons").
    pub full_comparisons: u64,
    /// `confirm` calls comparing a write with its address's current block (silent-write detection).
    pub address_comparisons: u64,
    /// Data blocks allocated.
    pub blocks_inserted: u64,
    /// Data blocks the policy evicted.
    pub blocks_evicted: u64,
    /// Data blocks freed because they lost their last reference (reference eviction or a private write whose
    /// content was already cached).
    pub blocks_released: u64,
    /// References dropped to make room for other references.
    pub refs_dropped: u64,
    /// Reference pages the policy evicted.
    pub pages_evicted: u64,
}

impl DedupStats {
    pub fn get(&self, c: Category) -> u64 {
        self.categories[c.index()]
    }

    /// Block accesses counted.
    pub fn accesses(&self) -> u64 {
        self.categories.iter().sum()
    }

    pub fn reads(&self) -> u64 {
        Category::ALL.iter().filter(|c| c.is_read()).map(|&c| self.get(c)).sum()
    }

    pub fn writes(&self) -> u64 {
        self.accesses() - self.reads()
    }

    /// Read hits over reads; `None` (undefined, not 0) with no reads.
    pub fn read_hit_rate(&self) -> Option<f64> {
        crate::stats::ratio(self.get(Category::ReadHit), self.reads())
    }

    /// Device block reads (every read miss).
    pub fn device_reads(&self) -> u64 {
        self.reads() - self.get(Category::ReadHit)
    }

    /// Device block writes (every write but silent ones).
    pub fn device_writes(&self) -> u64 {
        self.writes() - self.get(Category::SilentWrite)
    }

    /// Full comparisons per lookup.
    pub fn comparisons_per_insert(&self) -> f64 {
        if self.lookups == 0 {
            0.0
        } else {
            self.full_comparisons as f64 / self.lookups as f64
        }
    }
}

/// A hash-chain candidate shown to `confirm`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub block: BlockId,
    /// The content hash stored with the block.
    pub hash: u128,
}

/// What one block access did. No I/O was done: the driver reads the device when `device_read`, writes it when
/// `device_write`, and stores the data into `block` when `fill`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DedupPlan {
    pub category: Option<Category>,
    pub device_read: bool,
    pub device_write: bool,
    /// The block now holding the address's content, if the address is still mapped after the access.
    pub block: Option<BlockId>,
    /// `block` is newly allocated or rewritten: the driver stores the access's data into it.
    pub fill: bool,
    /// Blocks freed during the access (their slots may be reused).
    pub freed: Vec<BlockId>,
    /// Addresses whose reference was dropped to make room (they will miss next time).
    pub dropped: Vec<BlockKey>,
}

impl DedupPlan {
    pub fn clear(&mut self) {
        self.category = None;
        self.device_read = false;
        self.device_write = false;
        self.block = None;
        self.fill = false;
        self.freed.clear();
        self.dropped.clear();
    }
}

#[derive(Clone, Debug, Default)]
struct Block {
    /// The block's key in the policy (see [`ContentCache::new_pkey`]).
    pkey: BlockKey,
    hash: u128,
    /// Next block on the hash chain (0: none).
    hnext: u32,
    /// First reference of the block's reference list (0: none).
    rhead: u32,
    nrefs: u32,
    links: Links,
}
crate::arena::linked_by_field!(Block);
impl Keyed for Block {
    fn key(&self) -> BlockKey {
        self.pkey
    }
}

#[derive(Clone, Debug)]
struct Ref {
    key: BlockKey,
    block: Handle,
    /// Global reference recency (front = most recent).
    links: Links,
    bprev: u32,
    bnext: u32,
}
crate::arena::linked_by_field!(Ref);
impl Keyed for Ref {
    fn key(&self) -> BlockKey {
        self.key
    }
}

fn h(raw: u32) -> Option<Handle> {
    Handle::new(raw)
}

fn bucket_of(hash: u128, buckets: usize) -> usize {
    let x = (hash as u64) ^ ((hash >> 64) as u64);
    (BlockKey::from_raw(x).hash64() % buckets as u64) as usize
}

/// A content-based cache over a replacement policy. See the module documentation.
pub struct ContentCache<P: DynPolicy + ?Sized> {
    cfg: DedupConfig,
    policy: Box<P>,
    blocks: Arena<Block>,
    refs: Arena<Ref>,
    /// The LUN map: address → reference.
    map: KeyIndex,
    /// Blocks by policy key.
    by_pkey: KeyIndex,
    next_internal: u64,
    ref_lru: List,
    table: Vec<u32>,
    /// Extra references: Σ over blocks of (references − 1).
    extra: u64,
    /// Live reference pages (policy keys; ordered, so that every choice among them is deterministic).
    pages: BTreeSet<u64>,
    next_page: u64,
    stats: DedupStats,
    victims: Vec<Evicted>,
}

impl ContentCache<dyn DynPolicy> {
    /// Builds a content cache with the policy of `spec`, sized to `cfg.slots()`.
    pub fn build(cfg: DedupConfig, spec: &PolicySpec, preset: Preset) -> Result<Self, DedupError> {
        cfg.check()?;
        if spec.kind.needs_next_use() {
            return Err(DedupError::Offline(spec.label().to_string()));
        }
        let p = spec.build(preset, cfg.slots())?;
        ContentCache::new(cfg, p)
    }
}

impl<P: DynPolicy + ?Sized> ContentCache<P> {
    /// A content cache over `policy`, which must have `cfg.slots()` capacity.
    pub fn new(cfg: DedupConfig, policy: Box<P>) -> Result<Self, DedupError> {
        cfg.check()?;
        let slots = cfg.slots();
        if policy.capacity() != slots {
            return Err(DedupError::PolicyCapacity { got: policy.capacity(), want: slots });
        }
        Ok(ContentCache {
            cfg,
            policy,
            blocks: Arena::with_capacity(slots.min(1 << 20)),
            refs: Arena::with_capacity(slots.min(1 << 20)),
            map: KeyIndex::with_capacity(slots.min(1 << 20)),
            by_pkey: KeyIndex::with_capacity(slots.min(1 << 20)),
            next_internal: 0,
            ref_lru: List::new(),
            table: vec![0; cfg.buckets()],
            extra: 0,
            pages: BTreeSet::new(),
            next_page: 0,
            stats: DedupStats::default(),
            victims: Vec::new(),
        })
    }

    pub fn config(&self) -> &DedupConfig {
        &self.cfg
    }

    pub fn stats(&self) -> &DedupStats {
        &self.stats
    }

    /// Zeroes the counters; the contents stay.
    pub fn reset_stats(&mut self) {
        self.stats = DedupStats::default();
    }

    pub fn policy(&self) -> &P {
        &self.policy
    }

    /// Resident data blocks.
    pub fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Mapped addresses.
    pub fn references(&self) -> usize {
        self.refs.len()
    }

    /// Reference pages in use.
    pub fn pages(&self) -> usize {
        self.pages.len()
    }

    /// Budget bytes in use: blocks and pages at the block size, plus the charged hash table.
    pub fn used_bytes(&self) -> u64 {
        (self.blocks.len() + self.pages.len()) as u64 * self.cfg.block_size + self.cfg.charged_table_bytes()
    }

    /// The block an address maps to.
    pub fn lookup(&self, key: BlockKey) -> Option<BlockId> {
        self.map.get(&self.refs, key).map(|r| self.refs[r].block)
    }

    /// The content hash stored with a resident block.
    pub fn hash_of(&self, b: BlockId) -> u128 {
        self.blocks[b].hash
    }

    /// References of a block.
    pub fn refs_of(&self, b: BlockId) -> u32 {
        self.blocks[b].nrefs
    }

    // ---- read path (live: `read`, device read, `fill_read`; simulation: `access_sim`) ----

    /// First half of a read: on a hit the block is touched, counted and returned in the plan; on a miss the plan
    /// asks for a device read and the driver calls [`ContentCache::fill_read`] with the data's hash.
    pub fn read(&mut self, key: BlockKey, plan: &mut DedupPlan) {
        plan.clear();
        if let Some(r) = self.map.get(&self.refs, key) {
            let b = self.refs[r].block;
            self.touch_ref(r);
            self.touch_block(b, plan);
            plan.category = Some(Category::ReadHit);
            plan.block = self.lookup(key);
            self.count(Category::ReadHit);
        } else {
            plan.device_read = true;
        }
    }

    /// Second half of a read miss: places the block read from the device (`hash`; `confirm` compares a cached
    /// candidate with the data read). Must follow a [`ContentCache::read`] that missed.
    pub fn fill_read(
        &mut self,
        key: BlockKey,
        hash: u128,
        confirm: &mut dyn FnMut(Candidate) -> bool,
        plan: &mut DedupPlan,
    ) {
        plan.clear();
        plan.device_read = true;
        if self.map.get(&self.refs, key).is_some() {
            // Not a miss any more (the driver raced itself): count a hit, leave the cache alone.
            plan.category = Some(Category::ReadHit);
            plan.device_read = false;
            plan.block = self.lookup(key);
            self.count(Category::ReadHit);
            return;
        }
        let cat = if self.attach(key, hash, confirm, plan) {
            Category::ReadMissContentHit
        } else {
            Category::ReadMissContentMiss
        };
        plan.category = Some(cat);
        plan.block = self.lookup(key);
        self.count(cat);
    }

    /// A block write of content `hash` to `key`. `confirm` compares a cached block with the data written.
    pub fn write(
        &mut self,
        key: BlockKey,
        hash: u128,
        confirm: &mut dyn FnMut(Candidate) -> bool,
        plan: &mut DedupPlan,
    ) {
        plan.clear();
        let cat = match self.map.get(&self.refs, key) {
            Some(r) => {
                let old = self.refs[r].block;
                self.stats.address_comparisons += 1;
                if self.blocks[old].hash == hash && confirm(Candidate { block: old, hash }) {
                    Category::SilentWrite
                } else if self.blocks[old].nrefs == 1 {
                    self.private_write(r, old, hash, confirm, plan);
                    Category::PrivateWrite
                } else {
                    // Leave the shared block first (no eviction needed for the reference that moves).
                    self.drop_ref(r);
                    if self.attach(key, hash, confirm, plan) {
                        Category::WriteHitMultiContentHit
                    } else {
                        Category::WriteHitMultiContentMiss
                    }
                }
            }
            None => {
                if self.attach(key, hash, confirm, plan) {
                    Category::WriteMissContentHit
                } else {
                    Category::WriteMissContentMiss
                }
            }
        };
        plan.category = Some(cat);
        plan.device_write = cat != Category::SilentWrite;
        plan.block = self.lookup(key);
        self.count(cat);
    }

    /// Forgets an address whose device contents changed outside the cache (a TRIM, a failed device write, a
    /// live driver's race): its reference is dropped, and its block freed (`plan.freed`) if that was the last
    /// reference. Not a block access: no category is counted. Returns whether the address was mapped.
    pub fn invalidate(&mut self, key: BlockKey, plan: &mut DedupPlan) -> bool {
        plan.clear();
        let Some(r) = self.map.get(&self.refs, key) else { return false };
        let b = self.refs[r].block;
        self.drop_ref(r);
        if self.blocks[b].nrefs == 0 {
            self.free_block(b, false, plan);
        }
        self.rebalance(plan);
        true
    }

    /// One block access in simulation: the trace's digest is the content's identity (`confirm` is equality).
    pub fn access_sim(&mut self, op: Op, key: BlockKey, digest: u128, plan: &mut DedupPlan) -> Category {
        let mut eq = |c: Candidate| c.hash == digest;
        match op {
            Op::Read => {
                self.read(key, plan);
                if plan.device_read {
                    self.fill_read(key, digest, &mut eq, plan);
                }
            }
            Op::Write => self.write(key, digest, &mut eq, plan),
        }
        plan.category.unwrap_or(Category::ReadHit)
    }

    fn count(&mut self, c: Category) {
        self.stats.categories[c.index()] += 1;
    }

    // ---- internals ----

    fn block_key(&self, b: Handle) -> BlockKey {
        self.blocks[b].pkey
    }

    /// The policy key of a new block created by `addr`: the address itself, so that a policy's history (ARC's
    /// ghosts, 2Q's A1out…) recognizes an address whose content comes back, and so that with no duplicate content
    /// the policy sees exactly what it sees in an offset cache; a fresh internal key when another resident block
    /// already holds that key (its creator moved to other content) or the address is on [`INTERNAL_VOLUME`].
    fn new_pkey(&mut self, addr: BlockKey) -> BlockKey {
        if addr.raw() >> 48 != INTERNAL_VOLUME && self.by_pkey.get(&self.blocks, addr).is_none() {
            return addr;
        }
        let k = BlockKey::from_raw(INTERNAL | (self.next_internal & ((1 << 47) - 1)));
        self.next_internal += 1;
        k
    }

    /// Looks `hash` up in the content table, confirming each chain member.
    /// Points `key` (which has no reference) at the cached block holding `hash` — a content hit, `true` — or at
    /// a new block inserted for it (`false`).
    fn attach(
        &mut self,
        key: BlockKey,
        hash: u128,
        confirm: &mut dyn FnMut(Candidate) -> bool,
        plan: &mut DedupPlan,
    ) -> bool {
        match self.find(hash, confirm) {
            Some(t) => {
                self.touch_block(t, plan);
                self.add_ref(key, t, plan);
                true
            }
            None => {
                self.insert_block(key, hash, plan);
                false
            }
        }
    }

    fn find(&mut self, hash: u128, confirm: &mut dyn FnMut(Candidate) -> bool) -> Option<Handle> {
        self.stats.lookups += 1;
        let mut cur = self.table[bucket_of(hash, self.table.len())];
        while let Some(b) = h(cur) {
            self.stats.full_comparisons += 1;
            let c = Candidate { block: b, hash: self.blocks[b].hash };
            if confirm(c) {
                return Some(b);
            }
            cur = self.blocks[b].hnext;
        }
        None
    }

    fn chain_insert(&mut self, b: Handle) {
        let i = bucket_of(self.blocks[b].hash, self.table.len());
        self.blocks[b].hnext = self.table[i];
        self.table[i] = b.get();
    }

    fn chain_remove(&mut self, b: Handle) {
        let i = bucket_of(self.blocks[b].hash, self.table.len());
        let mut prev: Option<Handle> = None;
        let mut cur = self.table[i];
        while let Some(x) = h(cur) {
            let next = self.blocks[x].hnext;
            if x == b {
                match prev {
                    None => self.table[i] = next,
                    Some(p) => self.blocks[p].hnext = next,
                }
                self.blocks[b].hnext = 0;
                return;
            }
            prev = Some(x);
            cur = next;
        }
    }

    fn touch_ref(&mut self, r: Handle) {
        self.ref_lru.move_to_front(&mut self.refs, r);
    }

    /// A demand access of the block in the policy (a hit: recency/frequency update).
    fn touch_block(&mut self, b: Handle, plan: &mut DedupPlan) {
        self.victims.clear();
        let mut v = std::mem::take(&mut self.victims);
        let o = self.policy.access(Access::new(self.block_key(b)), &mut v);
        debug_assert!(o.is_hit() || o == Outcome::Miss);
        self.handle_victims(&mut v, plan);
        self.victims = v;
    }

    /// Allocates a block for `hash` with `key` as its reference.
    fn insert_block(&mut self, key: BlockKey, hash: u128, plan: &mut DedupPlan) {
        let pkey = self.new_pkey(key);
        let b = self.blocks.alloc(Block { pkey, hash, ..Block::default() });
        self.by_pkey.insert(&self.blocks, b);
        self.stats.blocks_inserted += 1;
        self.chain_insert(b);
        self.attach_ref(key, b);
        plan.fill = true;
        let mut v = std::mem::take(&mut self.victims);
        v.clear();
        self.policy.access(Access::new(pkey), &mut v);
        let declined = !self.policy.contains(self.block_key(b));
        self.handle_victims(&mut v, plan);
        self.victims = v;
        if declined && self.blocks_alive(b) {
            // The policy declined the block: it is not cached.
            self.free_block(b, false, plan);
        }
    }

    /// Whether `b`, allocated during the current access, is still resident (a resident block always has a
    /// reference; a freed one has none, and no block is allocated after it within one access).
    fn blocks_alive(&self, b: Handle) -> bool {
        self.blocks[b].nrefs > 0
    }

    /// Rewrites a single-reference block (paper: "private write").
    fn private_write(
        &mut self,
        r: Handle,
        old: Handle,
        hash: u128,
        confirm: &mut dyn FnMut(Candidate) -> bool,
        plan: &mut DedupPlan,
    ) {
        let key = self.refs[r].key;
        self.chain_remove(old);
        match self.find(hash, confirm) {
            Some(t) => {
                // The content is elsewhere: join it, discard the old block (its slot frees first).
                self.free_block(old, false, plan);
                self.stats.blocks_released += 1;
                self.touch_block(t, plan);
                self.add_ref(key, t, plan);
            }
            None => {
                self.blocks[old].hash = hash;
                self.chain_insert(old);
                self.touch_ref(r);
                self.touch_block(old, plan);
                plan.fill = true;
            }
        }
    }

    /// Links a new reference of `key` to `b` (no budget check).
    fn attach_ref(&mut self, key: BlockKey, b: Handle) -> Handle {
        let head = self.blocks[b].rhead;
        let r = self.refs.alloc(Ref { key, block: b, links: Links::default(), bprev: 0, bnext: head });
        if let Some(hd) = h(head) {
            self.refs[hd].bprev = r.get();
        }
        let blk = &mut self.blocks[b];
        blk.rhead = r.get();
        blk.nrefs += 1;
        if blk.nrefs > 1 {
            self.extra += 1;
        }
        self.map.insert(&self.refs, r);
        self.ref_lru.push_front(&mut self.refs, r);
        r
    }

    /// Adds a reference of `key` to the resident block `b`, making room for it.
    fn add_ref(&mut self, key: BlockKey, b: Handle, plan: &mut DedupPlan) {
        if self.blocks[b].nrefs == 0 {
            return; // `b` was freed while making room (e.g. the policy's own victim): nothing to join.
        }
        self.attach_ref(key, b);
        if self.blocks[b].nrefs == 1 {
            return;
        }
        let mut v = std::mem::take(&mut self.victims);
        v.clear();
        if self.extra > self.pages.len() as u64 * self.cfg.refs_per_page() {
            // A new reference page: the policy makes room for it as for a new block.
            let id = PAGE_BASE + self.next_page;
            self.next_page += 1;
            self.pages.insert(id);
            self.policy.access(Access::new(BlockKey::from_raw(id)), &mut v);
            if !self.policy.contains(BlockKey::from_raw(id)) {
                self.pages.remove(&id);
            }
        } else if let Some(&id) = self.pages.last() {
            // Reference space was used: the newest page is touched, so the policy sees references in use.
            self.policy.access(Access::new(BlockKey::from_raw(id)), &mut v);
        }
        self.handle_victims(&mut v, plan);
        self.victims = v;
    }

    /// Processes the policy's victims, then restores the reference budget.
    fn handle_victims(&mut self, v: &mut Vec<Evicted>, plan: &mut DedupPlan) {
        for e in v.drain(..) {
            let raw = e.key.raw();
            if raw >= PAGE_BASE {
                if self.pages.remove(&raw) {
                    self.stats.pages_evicted += 1;
                }
            } else if let Some(b) = self.by_pkey.get(&self.blocks, e.key) {
                self.stats.blocks_evicted += 1;
                self.free_block(b, true, plan);
            }
        }
        self.rebalance(plan);
    }

    /// Drops least recently used references until the extra ones fit the pages, then returns spare pages.
    fn rebalance(&mut self, plan: &mut DedupPlan) {
        let per = self.cfg.refs_per_page();
        while self.extra > self.pages.len() as u64 * per {
            let Some(r) = self.ref_lru.back() else { break };
            let b = self.refs[r].block;
            plan.dropped.push(self.refs[r].key);
            self.stats.refs_dropped += 1;
            self.drop_ref(r);
            if self.blocks[b].nrefs == 0 {
                self.stats.blocks_released += 1;
                self.free_block(b, false, plan);
            }
        }
        while (self.pages.len() as u64).saturating_sub(1) * per >= self.extra && !self.pages.is_empty() {
            let Some(id) = self.pages.pop_first() else { break };
            self.policy.remove(BlockKey::from_raw(id));
        }
    }

    /// Unlinks and frees a reference (the block stays, possibly with no reference).
    fn drop_ref(&mut self, r: Handle) {
        let (key, b, bprev, bnext) = {
            let x = &self.refs[r];
            (x.key, x.block, x.bprev, x.bnext)
        };
        match h(bprev) {
            Some(p) => self.refs[p].bnext = bnext,
            None => self.blocks[b].rhead = bnext,
        }
        if let Some(n) = h(bnext) {
            self.refs[n].bprev = bprev;
        }
        let blk = &mut self.blocks[b];
        if blk.nrefs > 1 {
            self.extra -= 1;
        }
        blk.nrefs -= 1;
        self.map.remove(&self.refs, key);
        self.ref_lru.remove(&mut self.refs, r);
        self.refs.free(r);
    }

    /// Frees a block and its references. `evicted`: the policy already dropped it.
    fn free_block(&mut self, b: Handle, evicted: bool, plan: &mut DedupPlan) {
        while let Some(r) = h(self.blocks[b].rhead) {
            if evicted {
                plan.dropped.push(self.refs[r].key);
            }
            self.drop_ref(r);
        }
        self.chain_remove(b);
        let pkey = self.block_key(b);
        if !evicted {
            self.policy.remove(pkey);
        }
        self.by_pkey.remove(&self.blocks, pkey);
        self.blocks[b].hash = 0;
        self.blocks.free(b);
        plan.freed.push(b);
    }

    /// Checks every invariant; `Err` names the first broken. For tests (O(size)).
    pub fn validate(&self) -> Result<(), String> {
        self.policy.validate()?;
        self.ref_lru.check(&self.refs)?;
        if self.ref_lru.len() != self.refs.len() || self.map.len() != self.refs.len() {
            return Err(format!("refs {} / lru {} / map {}", self.refs.len(), self.ref_lru.len(), self.map.len()));
        }
        if self.policy.len() != self.blocks.len() + self.pages.len() {
            return Err(format!(
                "policy holds {} but blocks {} + pages {}",
                self.policy.len(),
                self.blocks.len(),
                self.pages.len()
            ));
        }
        if self.used_bytes() > self.cfg.capacity_bytes {
            return Err(format!("{} bytes used over the budget {}", self.used_bytes(), self.cfg.capacity_bytes));
        }
        if self.extra > self.pages.len() as u64 * self.cfg.refs_per_page() {
            return Err(format!("{} extra refs over {} pages", self.extra, self.pages.len()));
        }
        for &id in &self.pages {
            if !self.policy.contains(BlockKey::from_raw(id)) {
                return Err(format!("page {id} not in the policy"));
            }
        }
        // Walk the hash table: every chained block once, in its bucket, resident in the policy.
        let mut chained = 0usize;
        let mut extra = 0u64;
        let mut refs = 0usize;
        for (i, &head) in self.table.iter().enumerate() {
            let mut cur = head;
            while let Some(b) = h(cur) {
                chained += 1;
                if chained > self.blocks.len() {
                    return Err("hash chains hold more blocks than exist (cycle?)".into());
                }
                let blk = &self.blocks[b];
                if bucket_of(blk.hash, self.table.len()) != i {
                    return Err(format!("block {b} in bucket {i}, hash says otherwise"));
                }
                if !self.policy.contains(blk.pkey) || self.by_pkey.get(&self.blocks, blk.pkey) != Some(b) {
                    return Err(format!("block {b} ({}) not in the policy or its index", blk.pkey));
                }
                if blk.nrefs == 0 {
                    return Err(format!("block {b} has no reference"));
                }
                let mut n = 0u32;
                let mut prev = 0u32;
                let mut r = blk.rhead;
                while let Some(x) = h(r) {
                    let e = &self.refs[x];
                    if e.block != b || e.bprev != prev {
                        return Err(format!("reference {} badly linked to block {b}", e.key));
                    }
                    if self.map.get(&self.refs, e.key) != Some(x) {
                        return Err(format!("reference {} not in the LUN map", e.key));
                    }
                    n += 1;
                    if n > blk.nrefs {
                        return Err(format!("block {b}: more references than counted"));
                    }
                    prev = r;
                    r = e.bnext;
                }
                if n != blk.nrefs {
                    return Err(format!("block {b}: {n} references linked, {} counted", blk.nrefs));
                }
                refs += n as usize;
                extra += n as u64 - 1;
                cur = blk.hnext;
            }
        }
        if chained != self.blocks.len() {
            return Err(format!("{chained} blocks chained, {} allocated", self.blocks.len()));
        }
        if self.by_pkey.len() != self.blocks.len() {
            return Err(format!(
                "{} blocks indexed by policy key, {} allocated",
                self.by_pkey.len(),
                self.blocks.len()
            ));
        }
        if refs != self.refs.len() || extra != self.extra {
            return Err(format!("references {refs}/{} extra {extra}/{}", self.refs.len(), self.extra));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidate_drops_a_reference_and_frees_a_block_with_none_left() {
        let cfg = DedupConfig { capacity_bytes: 64 * 4096, ..DedupConfig::default() };
        let mut c = ContentCache::build(cfg, &PolicySpec::new(crate::PolicyKind::Lru), Preset::Default).unwrap();
        let mut p = DedupPlan::default();
        let (a, b) = (BlockKey::new(0, 1).unwrap(), BlockKey::new(1, 1).unwrap());
        c.access_sim(Op::Write, a, 7, &mut p);
        assert_eq!(c.access_sim(Op::Write, b, 7, &mut p), Category::WriteMissContentHit);
        let blk = c.lookup(a).unwrap();
        assert!(c.invalidate(a, &mut p));
        assert!(p.freed.is_empty() && c.lookup(a).is_none() && c.lookup(b) == Some(blk));
        c.validate().unwrap();
        assert!(c.invalidate(b, &mut p));
        assert_eq!(p.freed, vec![blk]);
        assert!(!c.invalidate(b, &mut p));
        assert_eq!((c.blocks(), c.references(), c.pages()), (0, 0, 0));
        assert_eq!(c.stats().accesses(), 2, "invalidation is not an access");
        c.validate().unwrap();
    }

    #[test]
    fn metadata_sizes_match_the_module_doc() {
        // The module doc's "Metadata" paragraph quotes these.
        assert_eq!(std::mem::size_of::<Block>(), 48);
        assert_eq!(std::mem::size_of::<Ref>(), 32);
        assert_eq!(DedupConfig::default().refs_per_page(), 85);
    }
}
