//! The tier's in-memory state, guarded by one mutex: the engine's level, where each cached block's data lies
//! (slot table and block map), what the durable metadata says of each slot, the free pool, and the records
//! waiting for the next commit.
//!
//! ## A slot's life
//! `Free` → `Filling(b)` (allocated for a promotion or a new write; not readable) → `Valid(b)` (in the map)
//! → `Free` again when its block is evicted clean, invalidated or written back after a dirty eviction. A
//! slot enters the free pool only when the durable metadata says it is free, no record for it awaits a
//! commit, and no reader holds it: a slot that recovery could still map to its old block is never
//! overwritten with another block's data.
//!
//! A block whose slot was released while the metadata may still map it there (`durably_held`) must not be
//! written to the origin before a commit: recovery could otherwise find the older cached copy and call it
//! clean.
//!
//! ## Dirty blocks outside the engine
//! A dirty block the engine evicts keeps its slot (it is the only current copy) and stays in the map, listed
//! in `evicted`, until the cleaner has written it back; reads and writes find it there.

use blockwell_cachedev::{Entry, Record};
use blockwell_core::level::{CacheLevel, StepPlan, Victim};
use blockwell_core::BlockKey;
use std::collections::{BTreeSet, HashMap};

/// Block → slot.
pub(crate) type BlockMap = HashMap<u64, u32, std::hash::BuildHasherDefault<crate::cache::BlockHasher>>;

/// What a slot holds now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Use {
    Free,
    /// Allocated for this block; its data is being written.
    Filling(u64),
    /// Holds this block's current data.
    Valid(u64),
}

/// One slot.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Slot {
    pub used: Use,
    /// The entry the durable metadata holds for this slot (after the last completed commit).
    pub durable: Entry,
    /// Records for this slot pushed and not yet committed.
    pub unsettled: u32,
    /// The block recorded in `durably_held` for this slot.
    pub held: Option<u64>,
    /// The data is newer than the origin's.
    pub dirty: bool,
    /// CRC-32C of the data, when known (whole-block writes, fills, cleaning, a clean entry from recovery).
    pub crc: Option<u32>,
    /// The data was checked against `crc` (or written) since the device was opened.
    pub verified: bool,
    /// A dirty block recovered after a crash and not read since: a write the crash interrupted may have changed
    /// its data after the checksum was committed, so a mismatch is adopted as found, not reported as damage.
    pub adopt: bool,
    /// Reads and writes of the slot's data in progress.
    pub readers: u32,
    pub writers: u32,
    /// Incremented by every write into the slot (the cleaner compares it before and after a write-back).
    pub gen: u32,
    /// In the free pool.
    pub pooled: bool,
    /// A write-back of the slot's data is in progress (one at a time: a second one could land on the origin
    /// after a newer write that reached the origin once the block had left the cache).
    pub cleaning: bool,
    /// Access stamp (policy hint at shutdown).
    pub stamp: u32,
}

impl Slot {
    fn new(durable: Entry) -> Slot {
        Slot {
            used: Use::Free,
            durable,
            unsettled: 0,
            held: None,
            dirty: false,
            crc: None,
            verified: false,
            adopt: false,
            readers: 0,
            writers: 0,
            gen: 0,
            pooled: false,
            cleaning: false,
            stamp: 0,
        }
    }
}

/// Everything the tier's lock guards.
pub(crate) struct State {
    pub level: CacheLevel,
    pub plan: StepPlan,
    pub slots: Vec<Slot>,
    /// Block → slot, for `Valid` slots.
    pub map: BlockMap,
    /// Dirty blocks the engine evicted, still in their slots until written back.
    pub evicted: BTreeSet<u64>,
    /// Slots free durably and unused.
    pub free: Vec<u32>,
    /// Records for the next commit, in order.
    pub pending: Vec<Record>,
    /// Blocks that the durable metadata maps (or may map, once the commits in progress land) to a slot that no
    /// longer holds them: a write to the origin for such a block waits for a commit.
    pub durably_held: HashMap<u64, u32>,
    /// FREE records in `pending` (slots a commit would return to the pool).
    pub pending_frees: usize,
    /// Set when the tier stops trusting its device; the reason.
    pub degraded: Option<String>,
    /// Access stamps.
    pub clock: u32,
    /// Records a commit in progress has taken.
    pub in_commit: usize,
    /// Blocks whose write-back to the origin is in flight: any other write of them to the origin waits.
    pub writing_back: std::collections::HashSet<u64>,
    /// What writes do now.
    pub mode: blockwell_cachedev::CacheMode,
}

impl State {
    pub fn new(level: CacheLevel, entries: &[Entry], mode: blockwell_cachedev::CacheMode) -> State {
        let slots: Vec<Slot> = entries.iter().map(|&e| Slot::new(e)).collect();
        State {
            level,
            plan: StepPlan::default(),
            slots,
            map: BlockMap::default(),
            evicted: BTreeSet::new(),
            free: Vec::new(),
            pending: Vec::new(),
            durably_held: HashMap::new(),
            pending_frees: 0,
            degraded: None,
            clock: 0,
            in_commit: 0,
            writing_back: std::collections::HashSet::new(),
            mode,
        }
    }

    pub fn slot_of(&self, block: u64) -> Option<u32> {
        self.map.get(&block).copied()
    }

    /// Takes a slot from the free pool.
    pub fn alloc(&mut self, block: u64) -> Option<u32> {
        let s = self.free.pop()?;
        let slot = &mut self.slots[s as usize];
        debug_assert!(slot.used == Use::Free && slot.durable.is_free() && slot.readers == 0);
        slot.pooled = false;
        slot.used = Use::Filling(block);
        slot.dirty = false;
        slot.crc = None;
        slot.verified = true;
        slot.adopt = false;
        Some(s)
    }

    /// A `Filling` slot now holds its block's data.
    pub fn install(&mut self, s: u32, dirty: bool, crc: u32) {
        let slot = &mut self.slots[s as usize];
        let Use::Filling(b) = slot.used else { unreachable!("install of a slot that is not filling") };
        slot.used = Use::Valid(b);
        slot.dirty = dirty;
        slot.crc = Some(crc);
        slot.verified = true;
        self.clock = self.clock.wrapping_add(1);
        slot.stamp = self.clock;
        let entry = if dirty { Entry::dirty_crc(b, crc) } else { Entry::clean(b, crc) };
        self.record(s, entry);
        let old = self.map.insert(b, s);
        debug_assert!(old.is_none(), "block {b} had a slot");
    }

    /// Queues a record for the next commit.
    pub fn record(&mut self, s: u32, entry: Entry) {
        self.slots[s as usize].unsettled += 1;
        if entry.is_free() {
            self.pending_frees += 1;
        }
        self.pending.push(Record { slot: u64::from(s), entry });
    }

    /// Marks a valid slot dirty, with a record when the metadata does not say so yet.
    pub fn make_dirty(&mut self, s: u32) {
        let slot = &mut self.slots[s as usize];
        if slot.dirty {
            return;
        }
        slot.dirty = true;
        let Use::Valid(b) = slot.used else { unreachable!("make_dirty of a slot without a block") };
        self.record(s, Entry::dirty(b));
    }

    /// A dirty slot's data was written: the metadata gets its new checksum (or learns that it is unknown), so
    /// that the entry never names a checksum the data no longer has once a commit covers the write.
    pub fn dirty_written(&mut self, s: u32, crc: Option<u32>) {
        let slot = &mut self.slots[s as usize];
        slot.crc = crc;
        slot.adopt = false;
        if let (Use::Valid(b), true) = (slot.used, slot.dirty) {
            self.record(s, crc.map_or(Entry::dirty(b), |c| Entry::dirty_crc(b, c)));
        }
    }

    /// Frees a slot (its block leaves the cache): a FREE record when the metadata may map it, and the pool
    /// once that is durable and no reader holds it.
    pub fn release(&mut self, s: u32) {
        let slot = &mut self.slots[s as usize];
        let block = match slot.used {
            Use::Valid(b) | Use::Filling(b) => Some(b),
            Use::Free => None,
        };
        if let Use::Valid(b) = slot.used {
            if self.map.get(&b) == Some(&s) {
                self.map.remove(&b);
            }
            self.evicted.remove(&b);
        }
        slot.used = Use::Free;
        slot.dirty = false;
        slot.crc = None;
        slot.adopt = false;
        if slot.durable.is_free() && slot.unsettled == 0 {
            self.pool(s);
            return;
        }
        if let Some(b) = block {
            slot.held = Some(b);
            self.durably_held.insert(b, s);
        }
        self.record(s, Entry::FREE);
    }

    /// Puts a free, durably free, settled, unread slot in the pool.
    pub fn pool(&mut self, s: u32) {
        let slot = &mut self.slots[s as usize];
        if slot.used == Use::Free && slot.durable.is_free() && slot.unsettled == 0 && slot.readers == 0 && !slot.pooled
        {
            slot.pooled = true;
            if let Some(b) = slot.held.take() {
                if self.durably_held.get(&b) == Some(&s) {
                    self.durably_held.remove(&b);
                }
            }
            self.free.push(s);
        }
    }

    /// A reader or writer is done with a slot.
    pub fn unpin_reader(&mut self, s: u32) {
        self.slots[s as usize].readers -= 1;
        self.pool(s);
    }

    /// The records of a commit are durable.
    pub fn committed(&mut self, records: &[Record]) {
        for r in records {
            let s = r.slot as u32;
            let slot = &mut self.slots[s as usize];
            slot.durable = r.entry;
            slot.unsettled -= 1;
            if r.entry.is_free() {
                self.pending_frees -= 1;
            }
            self.pool(s);
        }
    }

    /// A commit failed: its records are not known durable, and never will be (the metadata refuses writes).
    pub fn commit_failed(&mut self, records: &[Record]) {
        for r in records {
            self.slots[r.slot as usize].unsettled -= 1;
            if r.entry.is_free() {
                self.pending_frees -= 1;
            }
        }
    }

    /// Victims of an engine step: clean ones leave (their slots are released), dirty ones stay in their slots
    /// until written back.
    pub fn victims(&mut self, victims: &[Victim]) {
        for v in victims {
            let b = v.key.block();
            let Some(s) = self.slot_of(b) else { continue };
            if self.slots[s as usize].dirty {
                self.evicted.insert(b);
            } else {
                self.release(s);
            }
        }
    }

    /// Drops a block from the cache (engine and slot), whatever its state: TRIM, WRITE_ZEROES, a failed write,
    /// a clean block whose data failed its check. Returns whether it had a slot.
    pub fn drop_block(&mut self, b: u64) -> bool {
        self.level.invalidate(key(b), 1);
        match self.slot_of(b) {
            Some(s) => {
                self.release(s);
                true
            }
            None => false,
        }
    }

    /// Checks that the map, the slots, the engine and the pool agree.
    pub fn validate(&self) -> Result<(), String> {
        self.level.validate()?;
        for (&b, &s) in self.map.iter() {
            let slot = &self.slots[s as usize];
            if slot.used != Use::Valid(b) {
                return Err(format!("block {b} maps to slot {s}, which holds {:?}", slot.used));
            }
            let engine = self.level.has_data(key(b));
            let evicted = self.evicted.contains(&b);
            if engine == evicted {
                return Err(format!("block {b}: engine holds it {engine}, evicted {evicted}"));
            }
            if evicted && !slot.dirty {
                return Err(format!("evicted block {b} is not dirty"));
            }
            if engine && slot.dirty != self.level.is_dirty(key(b)) {
                return Err(format!(
                    "block {b}: slot dirty {}, engine dirty {}",
                    slot.dirty,
                    self.level.is_dirty(key(b))
                ));
            }
        }
        for &s in &self.free {
            let slot = &self.slots[s as usize];
            if slot.used != Use::Free || !slot.durable.is_free() || !slot.pooled || slot.unsettled != 0 {
                return Err(format!("pooled slot {s} is {:?}, durable {:?}", slot.used, slot.durable));
            }
        }
        let unsettled: u32 = self.slots.iter().map(|s| s.unsettled).sum();
        if unsettled as usize != self.pending.len() + self.in_commit {
            return Err(format!(
                "{unsettled} unsettled records, {} pending, {} committing",
                self.pending.len(),
                self.in_commit
            ));
        }
        let valid = self.slots.iter().filter(|s| matches!(s.used, Use::Valid(_))).count();
        if valid != self.map.len() {
            return Err(format!("{valid} valid slots, {} mapped", self.map.len()));
        }
        Ok(())
    }
}

/// The engine key of an origin block.
pub(crate) fn key(block: u64) -> BlockKey {
    BlockKey::new(0, block).expect("block numbers are checked against the origin size when the tier opens")
}
