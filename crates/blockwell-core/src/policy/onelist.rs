//! The plumbing FIFO, LRU, CLOCK and SIEVE share: every resident block on one [`List`] over an arena, one
//! [`KeyIndex`], the capacity; storing a block at the list's front, evicting one, removing one, and the checks of
//! `validate()`. Each policy keeps its own choice of victim, and its own entry type where it needs one (so its
//! entry size stays what its docs say); FIFO and LRU share [`Entry`].

use super::{evict, Evicted, Outcome};
use crate::arena::{Arena, Handle, KeyIndex, Keyed, Linked, Links, List};
use crate::key::BlockKey;

/// The entry of FIFO and LRU: the key and the links, whose flag is "prefetched, not yet accessed". 16 bytes.
#[derive(Clone, Debug)]
pub(super) struct Entry {
    key: BlockKey,
    links: Links,
}

impl Entry {
    #[inline]
    pub fn new(key: BlockKey) -> Self {
        Entry { key, links: Links::default() }
    }
}

crate::arena::linked_by_field!(Entry);
crate::arena::keyed_by_field!(Entry);

/// The resident blocks of a one-list policy of `capacity` blocks. The list's front is its newest end.
#[derive(Clone, Debug)]
pub(super) struct OneList<T> {
    capacity: usize,
    pub arena: Arena<T>,
    pub index: KeyIndex,
    pub list: List,
}

impl<T: Keyed + Linked> OneList<T> {
    /// Room for `capacity` (>= 1) blocks; the arena and the index are sized for them up front.
    pub fn new(capacity: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        OneList {
            capacity,
            arena: Arena::with_capacity(capacity),
            index: KeyIndex::with_capacity(capacity),
            list: List::new(),
        }
    }

    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// A demand hit on `h` for a recency list: `h` to the front, then [`OneList::first_use`].
    #[inline(always)]
    pub fn hit_to_front(&mut self, h: Handle) -> Outcome {
        self.list.move_to_front(&mut self.arena, h);
        self.first_use(h)
    }

    /// Resident keys from the front (newest) to the back (for tests and debugging).
    pub fn keys(&self) -> Vec<BlockKey> {
        self.iter().map(|(_, e)| e.key()).collect()
    }

    /// A demand access to resident `h`: clears its "prefetched, not yet accessed" flag, and says whether this was
    /// a prefetched block's first access.
    #[inline(always)]
    pub fn first_use(&mut self, h: Handle) -> Outcome {
        let links = self.arena[h].links_mut();
        if links.flag() {
            links.set_flag(false);
            Outcome::PrefetchHit
        } else {
            Outcome::Hit
        }
    }

    /// Resident blocks.
    #[inline]
    pub fn len(&self) -> usize {
        self.arena.len()
    }

    /// No room for another block.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.arena.len() >= self.capacity
    }

    #[inline]
    pub fn get(&self, key: BlockKey) -> Option<Handle> {
        self.index.get(&self.arena, key)
    }

    #[inline]
    pub fn contains(&self, key: BlockKey) -> bool {
        self.get(key).is_some()
    }

    /// Stores `entry`, whose key is not resident, at the front of the list, flagged `prefetched`. The caller has
    /// made room. (Inlined into its callers: passed by value through memory, the 16-byte entry would be written
    /// as two halves and read back whole, which the store buffer cannot forward.)
    #[inline(always)]
    pub fn push_front(&mut self, entry: T, prefetched: bool) -> Handle {
        let h = self.arena.alloc(entry);
        self.arena[h].links_mut().set_flag(prefetched);
        self.index.insert(&self.arena, h);
        self.list.push_front(&mut self.arena, h);
        h
    }

    /// FIFO's and LRU's insertion: evicts the back (oldest) entry while the cache is full, then stores `entry` at
    /// the front as [`OneList::push_front`] does.
    #[inline(always)]
    pub fn push_front_evicting_back(&mut self, entry: T, prefetched: bool, out: &mut Vec<Evicted>) {
        while self.is_full() {
            let Some(h) = self.list.back() else { break };
            self.evict(h, out);
        }
        self.push_front(entry, prefetched);
    }

    /// [`super::Policy::victim`] of FIFO and LRU: the back entry when the cache is full and `key` is not
    /// resident, else nothing.
    #[inline]
    pub fn back_victim(&self, key: BlockKey) -> super::Victim {
        match self.list.back() {
            Some(h) if self.is_full() && !self.contains(key) => super::Victim::Block(self.arena[h].key()),
            _ => super::Victim::None,
        }
    }

    /// Evicts `h`, which is on the list, and reports it (see [`evict`]).
    #[inline]
    pub fn evict(&mut self, h: Handle, out: &mut Vec<Evicted>) {
        self.list.remove(&mut self.arena, h);
        evict(&mut self.arena, &mut self.index, h, out);
    }

    /// Drops `key` if resident. Returns whether it was.
    pub fn remove(&mut self, key: BlockKey) -> bool {
        match self.index.remove(&self.arena, key) {
            Some(h) => {
                self.arena.free_from(&mut self.list, h);
                true
            }
            None => false,
        }
    }

    /// The entries from the front (newest) to the back.
    pub fn iter(&self) -> impl Iterator<Item = (Handle, &T)> + '_ {
        self.list.iter(&self.arena).map(|h| (h, &self.arena[h]))
    }

    /// Checks the list's links, that list, index and arena agree in size, the capacity, and that every listed
    /// entry is indexed under its key.
    pub fn validate(&self) -> Result<(), String> {
        let (list, arena, index) = (&self.list, &self.arena, &self.index);
        list.check(arena)?;
        if list.len() != arena.len() || index.len() != arena.len() {
            return Err(format!("list {} / index {} / arena {} disagree", list.len(), index.len(), arena.len()));
        }
        if arena.len() > self.capacity {
            return Err(format!("{} blocks over capacity {}", arena.len(), self.capacity));
        }
        for h in list.iter(arena) {
            let key = arena[h].key();
            if index.get(arena, key) != Some(h) {
                return Err(format!("key {key} on the list but not indexed"));
            }
        }
        Ok(())
    }

    /// Bytes of heap the arena and the index occupy.
    pub fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes() + self.index.heap_bytes()
    }
}

/// The [`super::Policy`] methods a one-list policy shares, written inside its `impl Policy`: capacity, length,
/// lookup, a demand access (a hit is the policy's `on_hit(Handle) -> Outcome`, a miss its
/// `insert(key, prefetched, out)`), the single-lookup [`super::Policy::hit`] and prefetching (missing blocks of
/// a group inserted with their "prefetched" flag). The type has its blocks in a `blocks: OneList<_>` field.
macro_rules! one_list_policy_methods {
    () => {
        fn capacity(&self) -> usize {
            self.blocks.capacity()
        }

        fn len(&self) -> usize {
            self.blocks.len()
        }

        fn contains(&self, key: BlockKey) -> bool {
            self.blocks.contains(key)
        }

        #[inline(always)]
        fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
            match self.blocks.get(access.key) {
                Some(h) => self.on_hit(h),
                None => {
                    self.insert(access.key, false, out);
                    Outcome::Miss
                }
            }
        }

        #[inline]
        fn hit(&mut self, access: Access, _out: &mut Vec<Evicted>) -> Option<Outcome> {
            self.blocks.get(access.key).map(|h| self.on_hit(h))
        }

        fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
            $crate::policy::prefetch_missing(self, group, out, |p, key, out| p.insert(key, true, out))
        }
    };
    // A policy whose whole state is its `OneList` (FIFO, LRU, MRU): removal, checks and memory are the list's.
    (list_only) => {
        $crate::policy::onelist::one_list_policy_methods!();

        fn remove(&mut self, key: BlockKey) -> bool {
            self.blocks.remove(key)
        }

        fn validate(&self) -> Result<(), String> {
            self.blocks.validate()
        }

        fn heap_bytes(&self) -> usize {
            self.blocks.heap_bytes()
        }
    };
}
pub(super) use one_list_policy_methods;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_is_16_bytes() {
        assert_eq!(std::mem::size_of::<Entry>(), 16, "FIFO's and LRU's docs state the metadata per block");
    }
}
