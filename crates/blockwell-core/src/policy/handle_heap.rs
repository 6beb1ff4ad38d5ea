//! A binary heap of arena [`Handle`]s whose entries remember their own position, so that any entry can be
//! re-prioritised or removed in O(log n). Used by the policies that evict by a priority rather than by list
//! order (LRFU, OPT).
//!
//! The heap stores only handles (4 bytes an entry); each arena entry stores its position (4 bytes, via
//! [`HeapSlot`]). The order is given by the caller on every operation as `before(a, b)`: "`a` is evicted before
//! `b`". It must be a strict total order over the entries (policies break ties on the key), so the top, and
//! therefore every eviction, is deterministic. The backing `Vec` is reserved up front and never reallocates
//! while the number of entries stays within that reservation.

use crate::arena::{Arena, Handle, Linked};

/// An arena entry that can sit on a [`HandleHeap`].
pub(crate) trait HeapSlot {
    fn heap_pos(&self) -> u32;
    fn set_heap_pos(&mut self, pos: u32);
}

/// See the module docs.
#[derive(Clone, Debug, Default)]
pub(crate) struct HandleHeap {
    v: Vec<Handle>,
}

impl HandleHeap {
    pub fn with_capacity(n: usize) -> Self {
        HandleHeap { v: Vec::with_capacity(n) }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.v.len()
    }

    /// The entry evicted first.
    #[inline]
    pub fn peek(&self) -> Option<Handle> {
        self.v.first().copied()
    }

    /// Bytes reserved by the heap's storage.
    pub fn heap_bytes(&self) -> usize {
        self.v.capacity() * std::mem::size_of::<Handle>()
    }

    /// The handles in heap order (for checks).
    pub fn iter(&self) -> impl Iterator<Item = Handle> + '_ {
        self.v.iter().copied()
    }

    /// Adds `h`, which must not be on the heap.
    #[inline]
    pub fn push<T, F>(&mut self, arena: &mut Arena<T>, h: Handle, before: F)
    where
        T: Linked + HeapSlot,
        F: Fn(&T, &T) -> bool,
    {
        let i = self.v.len();
        self.v.push(h);
        arena[h].set_heap_pos(i as u32);
        self.sift_up(arena, i, &before);
    }

    /// Removes and returns the top.
    #[inline]
    pub fn pop<T, F>(&mut self, arena: &mut Arena<T>, before: F) -> Option<Handle>
    where
        T: Linked + HeapSlot,
        F: Fn(&T, &T) -> bool,
    {
        let top = self.peek()?;
        self.remove(arena, top, before);
        Some(top)
    }

    /// Removes `h`, which must be on the heap.
    #[inline]
    pub fn remove<T, F>(&mut self, arena: &mut Arena<T>, h: Handle, before: F)
    where
        T: Linked + HeapSlot,
        F: Fn(&T, &T) -> bool,
    {
        let i = arena[h].heap_pos() as usize;
        debug_assert_eq!(self.v[i], h, "heap position out of date");
        let last = self.v.pop().expect("non-empty heap");
        if i < self.v.len() {
            self.v[i] = last;
            arena[last].set_heap_pos(i as u32);
            self.fix(arena, i, &before);
        }
    }

    /// Restores the order after `h`'s priority changed.
    #[inline]
    pub fn update<T, F>(&mut self, arena: &mut Arena<T>, h: Handle, before: F)
    where
        T: Linked + HeapSlot,
        F: Fn(&T, &T) -> bool,
    {
        let i = arena[h].heap_pos() as usize;
        debug_assert_eq!(self.v[i], h, "heap position out of date");
        self.fix(arena, i, &before);
    }

    #[inline]
    fn fix<T, F>(&mut self, arena: &mut Arena<T>, i: usize, before: &F)
    where
        T: Linked + HeapSlot,
        F: Fn(&T, &T) -> bool,
    {
        if i > 0 && before(&arena[self.v[i]], &arena[self.v[(i - 1) / 2]]) {
            self.sift_up(arena, i, before);
        } else {
            self.sift_down(arena, i, before);
        }
    }

    fn sift_up<T, F>(&mut self, arena: &mut Arena<T>, mut i: usize, before: &F)
    where
        T: Linked + HeapSlot,
        F: Fn(&T, &T) -> bool,
    {
        let h = self.v[i];
        while i > 0 {
            let p = (i - 1) / 2;
            let ph = self.v[p];
            if !before(&arena[h], &arena[ph]) {
                break;
            }
            self.v[i] = ph;
            arena[ph].set_heap_pos(i as u32);
            i = p;
        }
        self.v[i] = h;
        arena[h].set_heap_pos(i as u32);
    }

    fn sift_down<T, F>(&mut self, arena: &mut Arena<T>, mut i: usize, before: &F)
    where
        T: Linked + HeapSlot,
        F: Fn(&T, &T) -> bool,
    {
        let n = self.v.len();
        let h = self.v[i];
        loop {
            let l = 2 * i + 1;
            if l >= n {
                break;
            }
            let r = l + 1;
            let c = if r < n && before(&arena[self.v[r]], &arena[self.v[l]]) { r } else { l };
            let ch = self.v[c];
            if !before(&arena[ch], &arena[h]) {
                break;
            }
            self.v[i] = ch;
            arena[ch].set_heap_pos(i as u32);
            i = c;
        }
        self.v[i] = h;
        arena[h].set_heap_pos(i as u32);
    }

    /// Checks positions and the heap order. For `validate()`.
    pub fn check<T, F>(&self, arena: &Arena<T>, before: F) -> Result<(), String>
    where
        T: Linked + HeapSlot,
        F: Fn(&T, &T) -> bool,
    {
        for (i, &h) in self.v.iter().enumerate() {
            if arena[h].heap_pos() as usize != i {
                return Err(format!("heap slot {i} holds entry {h} whose position says {}", arena[h].heap_pos()));
            }
            if i > 0 {
                let p = self.v[(i - 1) / 2];
                if before(&arena[h], &arena[p]) {
                    return Err(format!("heap order broken at slot {i} (entry {h} before its parent {p})"));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::Links;

    #[derive(Clone, Debug, Default)]
    struct E {
        prio: u64,
        pos: u32,
        links: Links,
    }
    impl Linked for E {
        fn links(&self) -> &Links {
            &self.links
        }
        fn links_mut(&mut self) -> &mut Links {
            &mut self.links
        }
    }
    impl HeapSlot for E {
        fn heap_pos(&self) -> u32 {
            self.pos
        }
        fn set_heap_pos(&mut self, pos: u32) {
            self.pos = pos
        }
    }
    fn before(a: &E, b: &E) -> bool {
        a.prio < b.prio
    }

    #[test]
    fn pops_in_order_after_updates_and_removals() {
        let mut a = Arena::with_capacity(16);
        let mut hp = HandleHeap::with_capacity(16);
        let hs: Vec<_> = [50u64, 10, 40, 30, 20, 60, 5]
            .iter()
            .map(|&p| {
                let h = a.alloc(E { prio: p, ..E::default() });
                hp.push(&mut a, h, before);
                h
            })
            .collect();
        hp.check(&a, before).unwrap();
        a[hs[0]].prio = 1; // 50 -> 1
        hp.update(&mut a, hs[0], before);
        a[hs[6]].prio = 100; // 5 -> 100
        hp.update(&mut a, hs[6], before);
        hp.remove(&mut a, hs[3], before); // drop 30
        hp.check(&a, before).unwrap();
        let mut got = Vec::new();
        while let Some(h) = hp.pop(&mut a, before) {
            hp.check(&a, before).unwrap();
            got.push(a[h].prio);
        }
        assert_eq!(got, vec![1, 10, 20, 40, 60, 100]);
    }
}
