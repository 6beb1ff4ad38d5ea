//! Block data of the live cache: block-sized slots allocated lazily up to the budget and a map from block
//! number to slot, kept in step with the engine (a block has a slot exactly when the engine says it is
//! resident with its data).
//!
//! Slots are `Arc<[u8]>` so that a large read can copy a block after letting go of the cache's lock: a slot
//! still held by such a reader is never written in place (a write copies it first; reuse allocates anew).
//!
//! **Cost** per cached block: the block's bytes behind one allocation (the `Arc` counts precede them), 16 B of
//! slot pointer and about 24 B in the map.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// Hash of a block number for the slot map: one multiply and a fold (SipHash costs more than the rest of a
/// cache hit). The map holds at most as many entries as the cache has blocks.
#[derive(Default)]
pub(crate) struct BlockHasher(u64);

impl Hasher for BlockHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0 ^ u64::from(b));
        }
    }
    fn write_u64(&mut self, x: u64) {
        let h = (self.0 ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = h ^ (h >> 32);
    }
}

/// A block's bytes. `Arc<[u8]>` keeps the length in the pointer and the bytes right after the counts, so a hit
/// touches one allocation.
pub(crate) type Slot = Arc<[u8]>;

/// The slots and the block → slot map.
pub(crate) struct Slots {
    map: HashMap<u64, u32, BuildHasherDefault<BlockHasher>>,
    slots: Vec<Slot>,
    free: Vec<u32>,
    capacity: usize,
    block_size: usize,
}

impl Slots {
    pub fn new(capacity: usize, block_size: usize) -> Self {
        Slots { map: HashMap::default(), slots: Vec::new(), free: Vec::new(), capacity, block_size }
    }

    /// The slot holding `block`'s data.
    #[inline]
    pub fn get(&self, block: u64) -> Option<&Slot> {
        self.map.get(&block).map(|&s| &self.slots[s as usize])
    }

    /// Slots allocated so far.
    pub fn allocated(&self) -> usize {
        self.slots.len()
    }

    /// Frees `block`'s slot, if it has one.
    pub fn remove(&mut self, block: u64) {
        if let Some(s) = self.map.remove(&block) {
            self.free.push(s);
        }
    }

    /// Puts `data` (one block, possibly short at the end of the device) in a slot for `block`. False when no
    /// slot is free (the engine then holds more blocks with data than the budget: a bug; the block is not
    /// cached).
    pub fn install(&mut self, block: u64, data: &[u8]) -> bool {
        let slot = match self.map.get(&block) {
            Some(&s) => s,
            None => match self.free.pop() {
                Some(s) => s,
                None if self.slots.len() < self.capacity => {
                    self.slots.push(new_slot(self.block_size));
                    (self.slots.len() - 1) as u32
                }
                None => {
                    debug_assert!(false, "no free slot with {} slots", self.slots.len());
                    return false;
                }
            },
        };
        let arc = &mut self.slots[slot as usize];
        if Arc::get_mut(arc).is_none() {
            // A reader still copies the slot's previous block: leave that memory to it.
            *arc = new_slot(self.block_size);
        }
        let s = Arc::get_mut(arc).expect("the slot was just made unique");
        s[..data.len()].copy_from_slice(data);
        s[data.len()..].fill(0);
        self.map.insert(block, slot);
        true
    }

    /// `block`'s bytes to write in place, copied first if a reader still holds the slot (copy on write).
    pub fn get_mut(&mut self, block: u64) -> Option<&mut [u8]> {
        let &s = self.map.get(&block)?;
        let slot = &mut self.slots[s as usize];
        if Arc::get_mut(slot).is_none() {
            *slot = Arc::from(&slot[..]);
        }
        Some(Arc::get_mut(slot).expect("the slot was just made unique"))
    }

    /// Every block with a slot.
    pub fn blocks(&self) -> impl Iterator<Item = u64> + '_ {
        self.map.keys().copied()
    }

    /// Checks that slots are not shared, every slot is used or free, and no more exist than the budget.
    pub fn validate(&self) -> Result<(), String> {
        if self.slots.len() > self.capacity {
            return Err(format!("{} slots for {} blocks", self.slots.len(), self.capacity));
        }
        let mut used = vec![false; self.slots.len()];
        for &s in &self.free {
            if std::mem::replace(&mut used[s as usize], true) {
                return Err(format!("slot {s} freed twice"));
            }
        }
        for (&b, &s) in &self.map {
            if std::mem::replace(&mut used[s as usize], true) {
                return Err(format!("slot {s} of block {b} is shared or free"));
            }
        }
        match used.iter().position(|u| !u) {
            Some(s) => Err(format!("slot {s} leaked")),
            None => Ok(()),
        }
    }
}

fn new_slot(block_size: usize) -> Slot {
    Arc::from(vec![0u8; block_size])
}
