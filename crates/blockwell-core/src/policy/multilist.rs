//! The plumbing ARC, CAR and 2Q share: a few [`List`]s over one arena, the first two holding resident blocks
//! (T1 and T2, A1in and Am) and the others only the keys of evicted blocks (ghosts: B1 and B2, A1out), one
//! [`KeyIndex`] over all of them, and the moves these policies make between them: insert at a list's front, unlink,
//! evict, demote to a ghost list, trim a ghost list, and the checks of `validate()`.
//!
//! Every entry is a [`Node`] of 20 bytes: the key as two `u32` (so the entry has 4-byte alignment), two 31-bit links
//! plus the "prefetched, not yet accessed" flag, and a state byte whose low two bits name the list the entry is on
//! and whose other bits belong to the policy (ARC's and CAR's "came from a ghost list", CAR's reference bit).
//!
//! The second half of the module is what ARC and CAR have in common beyond that: the lists T1, T2, B1, B2, the
//! adaptation of the target size `p`, and the prefetch adaptation of seed `001_*` §4 ([`Adaptive`]).

use super::{evict, Access, Evicted};
use crate::arena::{Arena, Handle, KeyIndex, Keyed, Links, List, PackedKey};
use crate::key::BlockKey;

/// The bits of [`Node::state`] that name the entry's list.
pub(super) const LIST: u8 = 0b11;
/// Lists `0..RESIDENT_LISTS` hold resident blocks, the others ghost keys.
const RESIDENT_LISTS: u8 = 2;

/// An entry of a [`MultiList`]: a resident block or a ghost key.
#[derive(Clone, Debug)]
pub(super) struct Node {
    key: PackedKey,
    /// The flag bit is "prefetched, not yet accessed" (never set on ghost keys).
    pub links: Links,
    /// The list in the low two bits ([`LIST`]), the policy's own bits above.
    pub state: u8,
}

impl Node {
    #[inline]
    fn new(key: BlockKey, state: u8) -> Self {
        Node { key: PackedKey::new(key), links: Links::default(), state }
    }

    /// The list the entry is on.
    #[inline]
    pub fn list(&self) -> u8 {
        self.state & LIST
    }
}

crate::arena::linked_by_field!(Node);
crate::arena::keyed_by_field!(Node);

/// `N` lists over one arena with one index, for a cache of `capacity` blocks. Every list's front is its newest
/// (MRU) end. Lists are named by number (`0..N`), which is also what the low bits of an entry's state say.
#[derive(Clone, Debug)]
pub(super) struct MultiList<const N: usize> {
    capacity: usize,
    arena: Arena<Node>,
    /// Resident and ghost entries alike.
    index: KeyIndex,
    lists: [List; N],
}

impl<const N: usize> MultiList<N> {
    /// Lists for a cache of `capacity` blocks, with the arena and the index sized for `entries` resident and ghost
    /// entries. Every miss removes and inserts keys, and hashbrown rehashes in place only while at most half full
    /// (else it grows), so under churn the index settles at twice its entries: it is sized so from the start.
    pub fn new(capacity: usize, entries: usize) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        MultiList {
            capacity,
            arena: Arena::with_capacity(entries),
            index: KeyIndex::with_capacity(entries),
            lists: [List::new(); N],
        }
    }

    #[inline]
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The entry of `key`, resident or ghost.
    #[inline]
    pub fn get(&self, key: BlockKey) -> Option<Handle> {
        self.index.get(&self.arena, key)
    }

    /// Is `key` resident?
    #[inline]
    pub fn contains(&self, key: BlockKey) -> bool {
        self.get(key).is_some_and(|h| self.arena[h].list() < RESIDENT_LISTS)
    }

    #[inline]
    pub fn node(&self, h: Handle) -> &Node {
        &self.arena[h]
    }

    #[inline]
    pub fn node_mut(&mut self, h: Handle) -> &mut Node {
        &mut self.arena[h]
    }

    /// Length of list `list`.
    #[inline]
    pub fn len(&self, list: u8) -> usize {
        self.lists[list as usize].len()
    }

    #[inline]
    pub fn is_empty(&self, list: u8) -> bool {
        self.lists[list as usize].is_empty()
    }

    /// Resident blocks (lists 0 and 1).
    #[inline]
    pub fn resident(&self) -> usize {
        self.lists[0].len() + self.lists[1].len()
    }

    /// A new entry for `key` (not indexed yet) at the front of the list `state` names, flagged `prefetched`.
    #[inline]
    pub fn insert(&mut self, key: BlockKey, state: u8, prefetched: bool) -> Handle {
        let h = self.arena.alloc(Node::new(key, state));
        self.arena[h].links.set_flag(prefetched);
        self.index.insert(&self.arena, h);
        self.lists[(state & LIST) as usize].push_front(&mut self.arena, h);
        h
    }

    /// Sets the state of `h`, which is on no list, and puts it at the front of the list the state names.
    #[inline]
    pub fn push_front(&mut self, h: Handle, state: u8) {
        self.arena[h].state = state;
        self.lists[(state & LIST) as usize].push_front(&mut self.arena, h);
    }

    /// Takes `h` off its list (it stays indexed, with its state, until pushed again or forgotten).
    #[inline]
    pub fn unlink(&mut self, h: Handle) {
        let list = self.arena[h].list();
        self.lists[list as usize].remove(&mut self.arena, h);
    }

    /// Moves `h` to the front of its list.
    #[inline]
    pub fn move_to_front(&mut self, h: Handle) {
        let list = self.arena[h].list();
        self.lists[list as usize].move_to_front(&mut self.arena, h);
    }

    /// The oldest entry of list `list`.
    #[inline]
    pub fn back(&self, list: u8) -> Option<Handle> {
        self.lists[list as usize].back()
    }

    /// The entry after `h` towards the front (newer end) of its list.
    #[inline]
    pub fn newer(&self, h: Handle) -> Option<Handle> {
        List::prev_of(&self.arena, h)
    }

    /// The key of entry `h`.
    #[inline]
    pub fn key_of(&self, h: Handle) -> BlockKey {
        self.arena[h].key()
    }

    /// [`super::Victim::Block`] of the oldest entry of list `list`, or [`super::Victim::None`] when it is empty.
    #[inline]
    pub fn back_victim(&self, list: u8) -> super::Victim {
        self.back(list).map_or(super::Victim::None, |h| super::Victim::Block(self.key_of(h)))
    }

    /// Takes the oldest entry off list `list`.
    #[inline]
    pub fn pop_back(&mut self, list: u8) -> Option<Handle> {
        self.lists[list as usize].pop_back(&mut self.arena)
    }

    /// Forgets the oldest key of list `list`, if any (trims a ghost list).
    #[inline]
    pub fn drop_back(&mut self, list: u8) {
        if let Some(h) = self.pop_back(list) {
            self.index.forget(&mut self.arena, h);
        }
    }

    /// Forgets the oldest keys of list `list` while it holds more than `max`.
    #[inline]
    pub fn trim(&mut self, list: u8, max: usize) {
        while self.len(list) > max {
            self.drop_back(list);
        }
    }

    /// Evicts the resident block `h`, which is on no list, without a ghost (see [`evict`]).
    #[inline]
    pub fn evict(&mut self, h: Handle, out: &mut Vec<Evicted>) {
        evict(&mut self.arena, &mut self.index, h, out);
    }

    /// Evicts the resident block `h`, which is on no list, and not an unused prefetch, keeping its key at the front
    /// of ghost list `ghost`.
    #[inline]
    pub fn demote(&mut self, h: Handle, ghost: u8, out: &mut Vec<Evicted>) {
        debug_assert!(ghost >= RESIDENT_LISTS && !self.arena[h].links.flag());
        out.push(Evicted { key: self.arena[h].key(), unused_prefetch: false });
        self.push_front(h, ghost);
    }

    /// Evicts the resident block `h`, which is on no list: an unused prefetch is forgotten (seed `001_*` §4: never
    /// remembered in a ghost list), any other block is demoted to ghost list `ghost`.
    #[inline]
    pub fn retire(&mut self, h: Handle, ghost: u8, out: &mut Vec<Evicted>) {
        if self.arena[h].links.flag() {
            self.evict(h, out);
        } else {
            self.demote(h, ghost, out);
        }
    }

    /// Drops `key` if resident ([`Policy::remove`](super::Policy::remove)); ghost history is kept.
    pub fn remove(&mut self, key: BlockKey) -> bool {
        let Some(h) = self.get(key) else { return false };
        let list = self.arena[h].list();
        if list >= RESIDENT_LISTS {
            return false;
        }
        self.index.remove(&self.arena, key);
        self.arena.free_from(&mut self.lists[list as usize], h);
        true
    }

    /// The entries of list `list`, front (newest) first.
    pub fn iter(&self, list: u8) -> impl Iterator<Item = &Node> + '_ {
        self.lists[list as usize].iter(&self.arena).map(|h| &self.arena[h])
    }

    /// The keys of list `list`, front (newest) first (for tests and debugging).
    pub fn keys(&self, list: u8) -> Vec<BlockKey> {
        self.iter(list).map(Node::key).collect()
    }

    /// Checks the links of every list; that each entry's state names the list it is on, that its key is indexed to
    /// it, that no ghost key carries the prefetch flag, and `check(list, entry)`; that the resident blocks fit the
    /// capacity; and that lists, index and arena agree in size. `names` name the lists in messages.
    pub fn validate(&self, names: [&str; N], check: impl Fn(u8, &Node) -> Result<(), String>) -> Result<(), String> {
        let mut total = 0;
        for (id, (list, name)) in self.lists.iter().zip(names).enumerate() {
            let id = id as u8;
            list.check(&self.arena).map_err(|e| format!("{name}: {e}"))?;
            total += list.len();
            for h in list.iter(&self.arena) {
                let n = &self.arena[h];
                let key = n.key();
                if n.list() != id {
                    return Err(format!("key {key} on {name} but its state says list {}", n.list()));
                }
                if id >= RESIDENT_LISTS && n.links.flag() {
                    return Err(format!("ghost key {key} on {name} carries the prefetch flag"));
                }
                if self.index.get(&self.arena, key) != Some(h) {
                    return Err(format!("key {key} on {name} but not indexed to its entry"));
                }
                check(id, n).map_err(|e| format!("key {key} on {name}: {e}"))?;
            }
        }
        let lengths = || {
            let l = self.lists.iter().zip(names).map(|(l, name)| format!("|{name}|={}", l.len()));
            l.collect::<Vec<_>>().join(" ")
        };
        if self.resident() > self.capacity {
            return Err(format!("{} resident blocks over capacity {} ({})", self.resident(), self.capacity, lengths()));
        }
        if self.index.len() != total || self.arena.len() != total {
            return Err(format!(
                "lists hold {total} entries, index {}, arena {} ({})",
                self.index.len(),
                self.arena.len(),
                lengths()
            ));
        }
        Ok(())
    }

    /// Bytes of heap the arena and the index occupy.
    pub fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes() + self.index.heap_bytes()
    }
}

// ARC and CAR.

/// T1: resident blocks seen once recently (ARC, CAR).
pub(super) const T1: u8 = 0;
/// T2: resident blocks seen at least twice.
pub(super) const T2: u8 = 1;
/// B1: ghost keys of blocks evicted from T1.
pub(super) const B1: u8 = 2;
/// B2: ghost keys of blocks evicted from T2.
pub(super) const B2: u8 = 3;
/// A prefetched, not yet accessed T1 block whose key was in B1 or B2: its first demand access moves it to T2.
pub(super) const FROM_GHOST: u8 = 0b100;

impl MultiList<4> {
    /// ARC's and CAR's lists for a cache of `capacity` blocks: the directory holds up to `2c` keys.
    pub fn adaptive(capacity: usize) -> Self {
        MultiList::new(capacity, capacity.saturating_mul(2))
    }

    /// The target size `p` of T1 after a demand hit in B1 (`in_b2 == false`) or B2: grown by
    /// δ = max(|B2|/|B1|, 1) up to `c`, or shrunk by max(|B1|/|B2|, 1) down to 0, δ a real quotient and |B1|,
    /// |B2| as they are now (the key that hit still counted).
    #[inline]
    pub fn adapt(&self, p: f64, in_b2: bool) -> f64 {
        let (b1, b2) = (self.len(B1) as f64, self.len(B2) as f64);
        if in_b2 {
            (p - (b1 / b2).max(1.0)).max(0.0)
        } else {
            (p + (b2 / b1).max(1.0)).min(self.capacity as f64)
        }
    }

    /// The first demand access to a prefetched block (always on T1): it clears the flag and goes to T1's front, or
    /// to T2's if its key had been in a ghost list (the demand ghost hit it stands for would have put it there).
    #[inline]
    pub fn first_access(&mut self, h: Handle) {
        let n = self.node_mut(h);
        n.links.set_flag(false);
        let to = if n.state & FROM_GHOST != 0 { T2 } else { T1 };
        self.unlink(h);
        self.push_front(h, to);
    }

    /// [`MultiList::validate`] with what ARC and CAR also keep: the prefetch flag and the came-from-ghost mark only
    /// on T1, the mark only with the flag, |T1| + |B1| ≤ c, at most 2c keys in all, 0 ≤ `p` ≤ c.
    pub fn validate_adaptive(&self, p: f64, check: impl Fn(u8, &Node) -> Result<(), String>) -> Result<(), String> {
        self.validate(["T1", "T2", "B1", "B2"], |id, n| {
            if id != T1 && (n.links.flag() || n.state & FROM_GHOST != 0) {
                return Err("carries a T1-only prefetch mark".into());
            }
            if n.state & FROM_GHOST != 0 && !n.links.flag() {
                return Err("came-from-ghost mark without the prefetch flag".into());
            }
            check(id, n)
        })?;
        let c = self.capacity;
        let (t1, b1) = (self.len(T1), self.len(B1));
        if t1 + b1 > c {
            return Err(format!("|T1| + |B1| = {t1} + {b1} > c = {c}"));
        }
        let total = self.resident() + b1 + self.len(B2);
        if total > 2 * c {
            return Err(format!("directory holds {total} > 2c = {} keys", 2 * c));
        }
        if !(0.0..=c as f64).contains(&p) {
            return Err(format!("p = {p} outside [0, {c}]"));
        }
        Ok(())
    }
}

/// ARC or CAR: the part of the policy that differs (how room is made), for the parts they share.
pub(super) trait Adaptive {
    fn lists_mut(&mut self) -> &mut MultiList<4>;

    /// Makes room for a block that is in no list and will go to T1 (evicting into `out`).
    fn make_room_for_t1(&mut self, out: &mut Vec<Evicted>);

    /// The prefetch path (seed `001_*` §4): a prefetched block goes to T1's front, flagged. A key found in B1 or B2
    /// is taken out of its ghost list first (without adapting `p`: a prefetch is not a demand reference) and marked
    /// as coming from a ghost list. Room is made as for a demand miss in no list. Resident blocks are left alone.
    fn prefetch_to_t1(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        let mut n = 0;
        for a in group {
            let lists = self.lists_mut();
            match lists.get(a.key) {
                Some(h) if lists.node(h).list() <= T2 => continue,
                Some(h) => {
                    lists.unlink(h);
                    self.make_room_for_t1(out);
                    let lists = self.lists_mut();
                    lists.node_mut(h).links.set_flag(true);
                    lists.push_front(h, T1 | FROM_GHOST);
                }
                None => {
                    self.make_room_for_t1(out);
                    self.lists_mut().insert(a.key, T1, true);
                }
            }
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testutil::k;

    #[test]
    fn entry_is_20_bytes() {
        assert_eq!(std::mem::size_of::<Node>(), 20, "ARC's, CAR's and 2Q's docs state the metadata per entry");
    }

    #[test]
    fn moves_between_lists_keep_the_books() {
        let mut m = MultiList::<3>::new(2, 4);
        let a = m.insert(k(1), 0, false);
        m.insert(k(2), 0, true);
        assert_eq!(m.keys(0), vec![k(2), k(1)]);
        assert!(m.contains(k(1)) && m.contains(k(2)));
        m.unlink(a);
        m.push_front(a, 1);
        m.validate(["a", "b", "g"], |_, _| Ok(())).unwrap();
        // An unused prefetch leaves no ghost; a demand block does.
        let mut out = Vec::new();
        let h = m.pop_back(0).unwrap();
        m.retire(h, 2, &mut out);
        let h = m.pop_back(1).unwrap();
        m.retire(h, 2, &mut out);
        assert_eq!(
            out,
            vec![Evicted { key: k(2), unused_prefetch: true }, Evicted { key: k(1), unused_prefetch: false }]
        );
        assert_eq!(m.keys(2), vec![k(1)]);
        assert!(!m.contains(k(1)) && m.get(k(1)).is_some(), "a ghost is indexed but not resident");
        assert!(!m.remove(k(1)), "ghost history is kept");
        m.validate(["a", "b", "g"], |_, _| Ok(())).unwrap();
        m.insert(k(3), 0, false);
        m.insert(k(4), 2, false);
        m.trim(2, 1);
        assert_eq!(m.keys(2), vec![k(4)], "the oldest ghost goes first");
        assert!(m.remove(k(3)));
        assert_eq!((m.resident(), m.get(k(1))), (0, None));
        m.validate(["a", "b", "g"], |_, _| Ok(())).unwrap();
    }

    #[test]
    fn validate_names_a_state_that_disagrees_with_the_list() {
        let mut m = MultiList::<4>::adaptive(2);
        let h = m.insert(k(1), T1, false);
        m.node_mut(h).state = T2;
        let e = m.validate_adaptive(0.0, |_, _| Ok(())).unwrap_err();
        assert!(e.contains("on T1 but its state says list 1"), "{e}");
    }
}
