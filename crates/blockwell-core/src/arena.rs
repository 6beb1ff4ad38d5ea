//! Index-linked lists over an arena, and a handle-only hash index.
//!
//! Entries live in one `Vec`; a [`Handle`] is the entry's index plus one, so `0` means "none" and an
//! `Option<Handle>` costs nothing extra. Several [`List`]s (ARC's T1/T2/B1/B2, 2Q's A1in/Am/A1out...) share one
//! arena; moving an entry between lists is O(1) and allocates nothing. The [`KeyIndex`] stores only handles
//! (4 bytes a bucket plus hashbrown's 1-byte tag) and finds keys through the arena.
//!
//! [`Links`] keep two spare bits (the top bits of `prev` and `next`) for the owner: policies use the first as
//! the "prefetched, not yet accessed" flag of seed 001 §4 and the second for a per-entry bit of their own
//! (SIEVE's visited bit), so an LRU or SIEVE entry is 16 bytes: key, prev, next.

use crate::key::BlockKey;
use hashbrown::HashTable;
use std::num::NonZeroU32;

/// A reference to an arena entry.
pub type Handle = NonZeroU32;

const NIL: u32 = 0;
const FLAG: u32 = 1 << 31;
const MASK: u32 = !FLAG;

/// Largest number of entries an arena can hold (handles use 31 bits).
pub const MAX_ENTRIES: usize = (MASK - 1) as usize;

/// Intrusive list links, plus two spare flag bits for the owner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Links {
    prev: u32,
    next: u32,
}

impl Links {
    #[inline]
    fn prev(&self) -> u32 {
        self.prev & MASK
    }
    #[inline]
    fn set_prev(&mut self, p: u32) {
        self.prev = (self.prev & FLAG) | p;
    }
    #[inline]
    fn next(&self) -> u32 {
        self.next & MASK
    }
    #[inline]
    fn set_next(&mut self, n: u32) {
        self.next = (self.next & FLAG) | n;
    }
    /// The owner's second flag bit.
    #[inline]
    pub fn flag2(&self) -> bool {
        self.next & FLAG != 0
    }
    /// Sets the owner's second flag bit.
    #[inline]
    pub fn set_flag2(&mut self, on: bool) {
        if on {
            self.next |= FLAG
        } else {
            self.next &= MASK
        }
    }
    /// The owner's flag bit.
    #[inline]
    pub fn flag(&self) -> bool {
        self.prev & FLAG != 0
    }
    /// Sets the owner's flag bit.
    #[inline]
    pub fn set_flag(&mut self, on: bool) {
        if on {
            self.prev |= FLAG
        } else {
            self.prev &= MASK
        }
    }
}

/// An entry that can sit on a [`List`].
pub trait Linked {
    fn links(&self) -> &Links;
    fn links_mut(&mut self) -> &mut Links;
}

/// Implements [`Linked`] for an entry type whose links are its `links` field.
macro_rules! linked_by_field {
    ($t:ty) => {
        impl $crate::arena::Linked for $t {
            #[inline]
            fn links(&self) -> &$crate::arena::Links {
                &self.links
            }
            #[inline]
            fn links_mut(&mut self) -> &mut $crate::arena::Links {
                &mut self.links
            }
        }
    };
}
pub(crate) use linked_by_field;

/// An entry that has a key, so that a [`KeyIndex`] can find it.
pub trait Keyed {
    fn key(&self) -> BlockKey;
}

/// Implements [`Keyed`] for an entry type whose key is its `key` field, a [`BlockKey`] or a [`PackedKey`].
macro_rules! keyed_by_field {
    ($t:ty) => {
        impl $crate::arena::Keyed for $t {
            #[inline]
            fn key(&self) -> $crate::key::BlockKey {
                $crate::key::BlockKey::from(self.key)
            }
        }
    };
}
pub(crate) use keyed_by_field;

/// A [`BlockKey`] stored as two `u32`, so that an entry holding it needs only 4-byte alignment (key, links and a
/// byte or two of state then take 20 bytes instead of 24).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackedKey([u32; 2]);

impl PackedKey {
    #[inline]
    pub const fn new(key: BlockKey) -> Self {
        let raw = key.raw();
        PackedKey([raw as u32, (raw >> 32) as u32])
    }

    #[inline]
    pub const fn get(self) -> BlockKey {
        BlockKey::from_raw(((self.0[1] as u64) << 32) | self.0[0] as u64)
    }
}

impl From<PackedKey> for BlockKey {
    #[inline]
    fn from(key: PackedKey) -> BlockKey {
        key.get()
    }
}

/// A slab of entries addressed by [`Handle`]; freed slots are reused (free list through `Links::next`).
#[derive(Clone, Debug)]
pub struct Arena<T> {
    slots: Vec<T>,
    free: u32,
    len: usize,
}

impl<T: Linked> Arena<T> {
    /// An arena with room for `n` entries before it grows.
    pub fn with_capacity(n: usize) -> Self {
        Arena { slots: Vec::with_capacity(n), free: NIL, len: 0 }
    }

    /// Live entries.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes reserved by the arena's storage.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<T>()
    }

    /// Stores `value` (its links are reset) and returns its handle.
    #[inline]
    pub fn alloc(&mut self, mut value: T) -> Handle {
        *value.links_mut() = Links::default();
        self.len += 1;
        if self.free != NIL {
            let h = self.free;
            let slot = &mut self.slots[(h - 1) as usize];
            self.free = slot.links().next();
            *slot = value;
            return Handle::new(h).expect("free handle is non-zero");
        }
        assert!(self.slots.len() < MAX_ENTRIES, "arena full");
        self.slots.push(value);
        Handle::new(self.slots.len() as u32).expect("len >= 1")
    }

    /// Frees `h`; the entry must not be on any list. The slot's value stays until reused.
    #[inline]
    pub fn free(&mut self, h: Handle) {
        let free = self.free;
        let links = self.slots[(h.get() - 1) as usize].links_mut();
        *links = Links { prev: NIL, next: free };
        self.free = h.get();
        self.len -= 1;
    }

    /// Unlinks `h` from `list`, which it must be on, and frees it.
    #[inline]
    pub fn free_from(&mut self, list: &mut List, h: Handle) {
        list.remove(self, h);
        self.free(h);
    }

    #[inline]
    pub fn get(&self, h: Handle) -> &T {
        &self.slots[(h.get() - 1) as usize]
    }

    #[inline]
    pub fn get_mut(&mut self, h: Handle) -> &mut T {
        &mut self.slots[(h.get() - 1) as usize]
    }
}

impl<T: Linked> std::ops::Index<Handle> for Arena<T> {
    type Output = T;
    #[inline]
    fn index(&self, h: Handle) -> &T {
        self.get(h)
    }
}

impl<T: Linked> std::ops::IndexMut<Handle> for Arena<T> {
    #[inline]
    fn index_mut(&mut self, h: Handle) -> &mut T {
        self.get_mut(h)
    }
}

#[inline]
fn handle(raw: u32) -> Option<Handle> {
    Handle::new(raw)
}

/// A doubly linked list of arena entries. `front` is the most recently inserted end (MRU for LRU lists),
/// `back` the oldest. All operations are O(1) except iteration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct List {
    head: u32,
    tail: u32,
    len: u32,
}

impl List {
    pub const fn new() -> Self {
        List { head: NIL, tail: NIL, len: 0 }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline]
    pub fn front(&self) -> Option<Handle> {
        handle(self.head)
    }

    #[inline]
    pub fn back(&self) -> Option<Handle> {
        handle(self.tail)
    }

    /// The entry after `h` (towards the back).
    #[inline]
    pub fn next_of<T: Linked>(arena: &Arena<T>, h: Handle) -> Option<Handle> {
        handle(arena[h].links().next())
    }

    /// The entry before `h` (towards the front).
    #[inline]
    pub fn prev_of<T: Linked>(arena: &Arena<T>, h: Handle) -> Option<Handle> {
        handle(arena[h].links().prev())
    }

    /// Puts `h` (not on any list) at the front.
    #[inline]
    pub fn push_front<T: Linked>(&mut self, arena: &mut Arena<T>, h: Handle) {
        let old = self.head;
        {
            let l = arena[h].links_mut();
            l.set_prev(NIL);
            l.set_next(old);
        }
        if let Some(o) = handle(old) {
            arena[o].links_mut().set_prev(h.get());
        } else {
            self.tail = h.get();
        }
        self.head = h.get();
        self.len += 1;
    }

    /// Puts `h` (not on any list) at the back.
    #[inline]
    pub fn push_back<T: Linked>(&mut self, arena: &mut Arena<T>, h: Handle) {
        let old = self.tail;
        {
            let l = arena[h].links_mut();
            l.set_prev(old);
            l.set_next(NIL);
        }
        if let Some(o) = handle(old) {
            arena[o].links_mut().set_next(h.get());
        } else {
            self.head = h.get();
        }
        self.tail = h.get();
        self.len += 1;
    }

    /// Inserts `h` (not on any list) just before `at` (towards the front).
    pub fn insert_before<T: Linked>(&mut self, arena: &mut Arena<T>, at: Handle, h: Handle) {
        let prev = arena[at].links().prev();
        match handle(prev) {
            None => self.push_front(arena, h),
            Some(p) => {
                {
                    let l = arena[h].links_mut();
                    l.set_prev(prev);
                    l.set_next(at.get());
                }
                arena[p].links_mut().set_next(h.get());
                arena[at].links_mut().set_prev(h.get());
                self.len += 1;
            }
        }
    }

    /// Unlinks `h`, which must be on this list.
    #[inline]
    pub fn remove<T: Linked>(&mut self, arena: &mut Arena<T>, h: Handle) {
        let (prev, next) = {
            let l = arena[h].links();
            (l.prev(), l.next())
        };
        match handle(prev) {
            Some(p) => arena[p].links_mut().set_next(next),
            None => self.head = next,
        }
        match handle(next) {
            Some(n) => arena[n].links_mut().set_prev(prev),
            None => self.tail = prev,
        }
        let l = arena[h].links_mut();
        l.set_prev(NIL);
        l.set_next(NIL);
        self.len -= 1;
    }

    /// Removes and returns the back entry.
    #[inline]
    pub fn pop_back<T: Linked>(&mut self, arena: &mut Arena<T>) -> Option<Handle> {
        let h = self.back()?;
        self.remove(arena, h);
        Some(h)
    }

    /// Removes and returns the front entry.
    #[inline]
    pub fn pop_front<T: Linked>(&mut self, arena: &mut Arena<T>) -> Option<Handle> {
        let h = self.front()?;
        self.remove(arena, h);
        Some(h)
    }

    /// Moves `h`, already on this list, to the front.
    #[inline]
    pub fn move_to_front<T: Linked>(&mut self, arena: &mut Arena<T>, h: Handle) {
        if self.head == h.get() {
            return;
        }
        self.remove(arena, h);
        self.push_front(arena, h);
    }

    /// Iterates from front to back.
    pub fn iter<'a, T: Linked>(&self, arena: &'a Arena<T>) -> ListIter<'a, T> {
        ListIter { arena, cur: self.head, left: self.len as usize }
    }

    /// Checks the links: both directions agree, the length is right, no cycle. For `validate()`.
    pub fn check<T: Linked>(&self, arena: &Arena<T>) -> Result<(), String> {
        let mut n = 0usize;
        let mut prev = NIL;
        let mut cur = self.head;
        while let Some(h) = handle(cur) {
            if n > self.len as usize {
                return Err(format!("list longer than its length {} (cycle?)", self.len));
            }
            let l = arena[h].links();
            if l.prev() != prev {
                return Err(format!("entry {cur}: prev {} but came from {prev}", l.prev()));
            }
            prev = cur;
            cur = l.next();
            n += 1;
        }
        if prev != self.tail {
            return Err(format!("tail {} but walk ended at {prev}", self.tail));
        }
        if n != self.len as usize {
            return Err(format!("length {} but {n} entries linked", self.len));
        }
        Ok(())
    }
}

/// Iterator over a [`List`], front to back.
pub struct ListIter<'a, T> {
    arena: &'a Arena<T>,
    cur: u32,
    left: usize,
}

impl<T: Linked> Iterator for ListIter<'_, T> {
    type Item = Handle;
    fn next(&mut self) -> Option<Handle> {
        let h = handle(self.cur)?;
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        self.cur = self.arena[h].links().next();
        Some(h)
    }
}

/// A hash index from [`BlockKey`] to [`Handle`] that stores only handles: the key is read from the arena.
#[derive(Clone, Debug, Default)]
pub struct KeyIndex {
    table: HashTable<Handle>,
}

impl KeyIndex {
    /// An index for up to `n` live keys under churn (keys removed and inserted all the time) that never has to
    /// grow. hashbrown removes into tombstones and, when they use up its spare room, rehashes in place only if
    /// the table is at most half full; otherwise it doubles, briefly holding both tables. Reserving for `2n`
    /// keeps every rehash in place, so memory is fixed from the start: 4 + 1 bytes per bucket, 16n/7 to 32n/7
    /// buckets, i.e. 11.4–22.9 bytes per key depending on where `n` falls between powers of two.
    pub fn with_capacity(n: usize) -> Self {
        KeyIndex { table: HashTable::with_capacity(n.saturating_mul(2)) }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.table.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Bytes reserved by the table (buckets of 4 bytes plus 1 tag byte each).
    pub fn heap_bytes(&self) -> usize {
        let buckets = if self.table.capacity() == 0 { 0 } else { (self.table.capacity() * 8 / 7).next_power_of_two() };
        buckets * (std::mem::size_of::<Handle>() + 1)
    }

    #[inline]
    pub fn get<T: Keyed + Linked>(&self, arena: &Arena<T>, key: BlockKey) -> Option<Handle> {
        self.table.find(key.hash64(), |&h| arena[h].key() == key).copied()
    }

    /// Adds `h` under `arena[h].key()`; the key must not be present.
    #[inline]
    pub fn insert<T: Keyed + Linked>(&mut self, arena: &Arena<T>, h: Handle) {
        let key = arena[h].key();
        self.table.insert_unique(key.hash64(), h, |&x| arena[x].key().hash64());
    }

    /// Removes `key`, returning its handle.
    #[inline]
    pub fn remove<T: Keyed + Linked>(&mut self, arena: &Arena<T>, key: BlockKey) -> Option<Handle> {
        match self.table.find_entry(key.hash64(), |&h| arena[h].key() == key) {
            Ok(e) => Some(e.remove().0),
            Err(_) => None,
        }
    }

    /// Forgets entry `h`, which is on no list: removes its key and frees it. Returns the key.
    #[inline]
    pub fn forget<T: Keyed + Linked>(&mut self, arena: &mut Arena<T>, h: Handle) -> BlockKey {
        let key = arena[h].key();
        let found = self.remove(arena, key);
        debug_assert_eq!(found, Some(h), "key {key} indexed to another entry");
        arena.free(h);
        key
    }

    /// Iterates over all handles (unspecified order).
    pub fn handles(&self) -> impl Iterator<Item = Handle> + '_ {
        self.table.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug)]
    struct E {
        k: BlockKey,
        l: Links,
    }
    impl Linked for E {
        fn links(&self) -> &Links {
            &self.l
        }
        fn links_mut(&mut self) -> &mut Links {
            &mut self.l
        }
    }
    impl Keyed for E {
        fn key(&self) -> BlockKey {
            self.k
        }
    }
    fn e(i: u64) -> E {
        E { k: BlockKey::from_raw(i), l: Links::default() }
    }

    #[test]
    fn list_ops_keep_order_and_flags() {
        let mut a = Arena::with_capacity(4);
        let mut l = List::new();
        let hs: Vec<_> = (1..=4).map(|i| a.alloc(e(i))).collect();
        for &h in &hs {
            l.push_front(&mut a, h);
        }
        a[hs[1]].links_mut().set_flag(true);
        let keys = |l: &List, a: &Arena<E>| l.iter(a).map(|h| a[h].k.raw()).collect::<Vec<_>>();
        assert_eq!(keys(&l, &a), vec![4, 3, 2, 1]);
        l.move_to_front(&mut a, hs[1]);
        assert_eq!(keys(&l, &a), vec![2, 4, 3, 1]);
        assert!(a[hs[1]].links().flag(), "flag survives moves");
        assert_eq!(l.pop_back(&mut a), Some(hs[0]));
        l.insert_before(&mut a, hs[2], hs[0]);
        assert_eq!(keys(&l, &a), vec![2, 4, 1, 3]);
        l.check(&a).unwrap();
        l.remove(&mut a, hs[3]);
        a.free(hs[3]);
        assert_eq!(a.len(), 3);
        let h5 = a.alloc(e(5));
        assert_eq!(h5, hs[3], "freed slot reused");
        l.push_back(&mut a, h5);
        assert_eq!(keys(&l, &a), vec![2, 1, 3, 5]);
        l.check(&a).unwrap();
    }

    #[test]
    fn index_finds_by_key() {
        let mut a = Arena::with_capacity(0);
        let mut idx = KeyIndex::with_capacity(0);
        let hs: Vec<_> = (0..1000).map(|i| a.alloc(e(i * 7))).collect();
        for &h in &hs {
            idx.insert(&a, h);
        }
        assert_eq!(idx.get(&a, BlockKey::from_raw(70)), Some(hs[10]));
        assert_eq!(idx.get(&a, BlockKey::from_raw(71)), None);
        assert_eq!(idx.remove(&a, BlockKey::from_raw(70)), Some(hs[10]));
        assert_eq!(idx.get(&a, BlockKey::from_raw(70)), None);
        assert_eq!(idx.len(), 999);
    }

    #[test]
    fn free_from_and_forget_release_the_slot() {
        let mut a = Arena::with_capacity(4);
        let mut idx = KeyIndex::with_capacity(4);
        let mut l = List::new();
        let hs: Vec<_> = (1..=3).map(|i| a.alloc(e(i))).collect();
        for &h in &hs {
            idx.insert(&a, h);
            l.push_front(&mut a, h);
        }
        assert_eq!(idx.remove(&a, BlockKey::from_raw(2)), Some(hs[1]));
        a.free_from(&mut l, hs[1]);
        l.check(&a).unwrap();
        assert_eq!((l.len(), a.len()), (2, 2));
        assert_eq!(l.pop_back(&mut a), Some(hs[0]));
        assert_eq!(idx.forget(&mut a, hs[0]), BlockKey::from_raw(1));
        assert_eq!((idx.len(), a.len()), (1, 1));
        assert_eq!(idx.get(&a, BlockKey::from_raw(1)), None);
        assert_eq!(a.alloc(e(9)), hs[0], "the last slot freed is reused first");
    }

    #[test]
    fn packed_key_round_trips() {
        for raw in [0, 1, u64::from(u32::MAX), 1 << 32, u64::MAX, 0xfedc_ba98_7654_3210] {
            assert_eq!(PackedKey::new(BlockKey::from_raw(raw)).get().raw(), raw);
        }
        assert_eq!(std::mem::align_of::<PackedKey>(), 4);
    }
}
