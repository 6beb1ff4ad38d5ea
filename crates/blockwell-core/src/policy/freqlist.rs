//! The LFU expert LeCaR and CACHEUS share: resident entries grouped by access frequency, one FIFO per frequency,
//! the frequencies in increasing order, as libCacheSim's `freq_node_t` chains are (`LeCaR.c`, `CR_LFU.c`), but with
//! only the non-empty frequencies on an ordered list, so that the least frequency is always the list's front
//! (libCacheSim scans the frequencies above an emptied minimum one by one).
//!
//! An entry enters the tail of its frequency's FIFO (on insertion, and on every hit, which moves it to the next
//! frequency's tail): the head of a FIFO is the entry that reached that frequency longest ago, the tail the most
//! recent. LeCaR's LFU evicts the least frequency's head, CACHEUS's CR-LFU its tail.
//!
//! Each entry carries [`FreqLinks`]: its neighbours in its FIFO and its frequency's bucket, in 12 bytes, with 4
//! spare bits for the owner. While the entry is in no bucket (a ghost key), the owner may keep a 64-bit and a
//! 28-bit value in the same space. Frequencies saturate at [`FREQ_MAX`]; bucket handles fit the 28 bits because
//! there are at most as many buckets as distinct frequencies.

use crate::arena::{Arena, Handle, Linked, Links, List, PackedKey};
use crate::key::BlockKey;

/// Largest frequency counted (2²⁸ − 1); further hits leave the entry at this frequency.
pub(crate) const FREQ_MAX: u32 = (1 << 28) - 1;
const LOW: u32 = FREQ_MAX;
const OWNER_SHIFT: u32 = 28;

/// An entry's place in the frequency lists, or the owner's values while it is in none. 12 bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FreqLinks {
    prev: u32,
    next: u32,
    /// Low 28 bits: the bucket's handle (or the owner's 28-bit value); high 4 bits: the owner's.
    word: u32,
}

impl FreqLinks {
    /// The owner's 4 bits.
    #[inline]
    pub fn bits(&self) -> u8 {
        (self.word >> OWNER_SHIFT) as u8
    }

    /// Sets the owner's 4 bits (`bits` < 16).
    #[inline]
    pub fn set_bits(&mut self, bits: u8) {
        self.word = (self.word & LOW) | (u32::from(bits & 0xf) << OWNER_SHIFT);
    }

    /// The 64-bit value kept while the entry is in no bucket.
    #[inline]
    pub fn stash64(&self) -> u64 {
        (u64::from(self.next) << 32) | u64::from(self.prev)
    }

    #[inline]
    pub fn set_stash64(&mut self, v: u64) {
        self.prev = v as u32;
        self.next = (v >> 32) as u32;
    }

    /// The 28-bit value kept while the entry is in no bucket.
    #[inline]
    pub fn stash28(&self) -> u32 {
        self.word & LOW
    }

    /// Keeps `v` (at most [`FREQ_MAX`], larger values are cut to it) while the entry is in no bucket.
    #[inline]
    pub fn set_stash28(&mut self, v: u32) {
        self.word = (self.word & !LOW) | v.min(FREQ_MAX);
    }

    #[inline]
    fn bucket(&self) -> u32 {
        self.word & LOW
    }

    #[inline]
    fn set_bucket(&mut self, b: u32) {
        self.word = (self.word & !LOW) | b;
    }
}

/// An arena entry that can be in the frequency lists.
pub(crate) trait FreqNode: Linked {
    fn freq_links(&self) -> &FreqLinks;
    fn freq_links_mut(&mut self) -> &mut FreqLinks;
}

/// The arena entry of a policy with an LFU expert (LeCaR, CACHEUS): a key, its place on one of the policy's lists,
/// and its place in the frequency lists, whose owner bits (and, while the entry is in no bucket, spare values)
/// the policy uses as it likes.
#[derive(Clone, Debug)]
pub(crate) struct FreqEntry {
    pub key: PackedKey,
    pub links: Links,
    pub freq: FreqLinks,
}

crate::arena::linked_by_field!(FreqEntry);
crate::arena::keyed_by_field!(FreqEntry);

impl FreqEntry {
    pub fn new(key: BlockKey) -> Self {
        FreqEntry { key: PackedKey::new(key), links: Links::default(), freq: FreqLinks::default() }
    }
}

impl FreqNode for FreqEntry {
    #[inline]
    fn freq_links(&self) -> &FreqLinks {
        &self.freq
    }
    #[inline]
    fn freq_links_mut(&mut self) -> &mut FreqLinks {
        &mut self.freq
    }
}

/// One frequency's FIFO of entries.
#[derive(Clone, Debug)]
struct Bucket {
    links: Links,
    freq: u32,
    head: u32,
    tail: u32,
}

crate::arena::linked_by_field!(Bucket);

#[inline]
fn handle(raw: u32) -> Option<Handle> {
    Handle::new(raw)
}

/// See the module docs.
#[derive(Clone, Debug)]
pub(crate) struct FreqLists {
    buckets: Arena<Bucket>,
    /// Non-empty buckets, front = least frequency.
    order: List,
    len: usize,
}

impl FreqLists {
    /// Empty lists with room for `buckets` frequencies before they grow.
    pub fn with_capacity(buckets: usize) -> Self {
        FreqLists { buckets: Arena::with_capacity(buckets), order: List::new(), len: 0 }
    }

    /// Entries in the lists.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// The frequency of `h`, which is in the lists.
    #[inline]
    pub fn freq<T: FreqNode>(&self, nodes: &Arena<T>, h: Handle) -> u32 {
        match handle(nodes[h].freq_links().bucket()) {
            Some(b) => self.buckets[b].freq,
            None => 0,
        }
    }

    /// The entry that reached the least frequency first (LeCaR's LFU victim).
    #[inline]
    pub fn min_oldest(&self) -> Option<Handle> {
        handle(self.buckets[self.order.front()?].head)
    }

    /// The entry that reached the least frequency last (CR-LFU's victim).
    #[inline]
    pub fn min_newest(&self) -> Option<Handle> {
        handle(self.buckets[self.order.front()?].tail)
    }

    /// A new bucket of frequency `freq` (on no list).
    #[inline]
    fn new_bucket(&mut self, freq: u32) -> Handle {
        let b = self.buckets.alloc(Bucket { links: Links::default(), freq, head: 0, tail: 0 });
        debug_assert!(b.get() <= LOW, "more buckets than frequencies");
        b
    }

    /// Appends `h` (in no bucket) to bucket `b`'s tail.
    #[inline]
    fn append<T: FreqNode>(&mut self, nodes: &mut Arena<T>, b: Handle, h: Handle) {
        let tail = self.buckets[b].tail;
        {
            let l = nodes[h].freq_links_mut();
            l.prev = tail;
            l.next = 0;
            l.set_bucket(b.get());
        }
        match handle(tail) {
            Some(t) => nodes[t].freq_links_mut().next = h.get(),
            None => self.buckets[b].head = h.get(),
        }
        self.buckets[b].tail = h.get();
        self.len += 1;
    }

    /// Unlinks `h` from its bucket's FIFO, leaving the bucket (possibly empty) in place. Returns the bucket.
    #[inline]
    fn unlink<T: FreqNode>(&mut self, nodes: &mut Arena<T>, h: Handle) -> Handle {
        let FreqLinks { prev, next, word } = *nodes[h].freq_links();
        let b = handle(word & LOW).expect("entry in a bucket");
        match handle(prev) {
            Some(p) => nodes[p].freq_links_mut().next = next,
            None => self.buckets[b].head = next,
        }
        match handle(next) {
            Some(n) => nodes[n].freq_links_mut().prev = prev,
            None => self.buckets[b].tail = prev,
        }
        let l = nodes[h].freq_links_mut();
        l.prev = 0;
        l.next = 0;
        l.set_bucket(0);
        self.len -= 1;
        b
    }

    /// Drops bucket `b` if it is empty.
    #[inline]
    fn drop_if_empty(&mut self, b: Handle) {
        if self.buckets[b].head == 0 {
            self.buckets.free_from(&mut self.order, b);
        }
    }

    /// Puts `h` (in no bucket) at the tail of frequency `freq`'s FIFO (`freq` is taken into 1..=[`FREQ_MAX`]).
    #[inline]
    pub fn push<T: FreqNode>(&mut self, nodes: &mut Arena<T>, h: Handle, freq: u32) {
        let freq = freq.clamp(1, FREQ_MAX);
        // The first bucket of frequency >= freq: walk from the front, unless freq is beyond the back.
        let at = match self.order.back() {
            None => None,
            Some(last) if self.buckets[last].freq < freq => None,
            Some(last) if self.buckets[last].freq == freq => Some(last),
            Some(_) => {
                let mut cur = self.order.front();
                while let Some(b) = cur {
                    if self.buckets[b].freq >= freq {
                        break;
                    }
                    cur = List::next_of(&self.buckets, b);
                }
                cur
            }
        };
        let b = match at {
            Some(b) if self.buckets[b].freq == freq => b,
            Some(before) => {
                let nb = self.new_bucket(freq);
                self.order.insert_before(&mut self.buckets, before, nb);
                nb
            }
            None => {
                let nb = self.new_bucket(freq);
                self.order.push_back(&mut self.buckets, nb);
                nb
            }
        };
        self.append(nodes, b, h);
    }

    /// A hit on `h`: it moves to the tail of the next frequency's FIFO (its own tail at [`FREQ_MAX`]).
    #[inline]
    pub fn bump<T: FreqNode>(&mut self, nodes: &mut Arena<T>, h: Handle) {
        let b = handle(nodes[h].freq_links().bucket()).expect("entry in a bucket");
        let f = self.buckets[b].freq;
        if f >= FREQ_MAX {
            return self.requeue(nodes, h);
        }
        let next = List::next_of(&self.buckets, b);
        let target = match next {
            Some(n) if self.buckets[n].freq == f + 1 => n,
            _ => {
                let bk = &self.buckets[b];
                if bk.head == h.get() && bk.tail == h.get() {
                    // Alone at f, and f + 1 is not there: the bucket becomes f + 1's, in place.
                    self.buckets[b].freq = f + 1;
                    return;
                }
                let nb = self.new_bucket(f + 1);
                match next {
                    Some(n) => self.order.insert_before(&mut self.buckets, n, nb),
                    None => self.order.push_back(&mut self.buckets, nb),
                }
                nb
            }
        };
        let old = self.unlink(nodes, h);
        self.drop_if_empty(old);
        self.append(nodes, target, h);
    }

    /// Moves `h` to the tail of its own frequency's FIFO.
    #[inline]
    pub fn requeue<T: FreqNode>(&mut self, nodes: &mut Arena<T>, h: Handle) {
        let b = self.unlink(nodes, h);
        self.append(nodes, b, h);
    }

    /// Takes `h` out of the lists.
    #[inline]
    pub fn remove<T: FreqNode>(&mut self, nodes: &mut Arena<T>, h: Handle) {
        let b = self.unlink(nodes, h);
        self.drop_if_empty(b);
    }

    /// Entries from the least frequency up, each FIFO head first, with their frequencies (for tests).
    pub fn entries<T: FreqNode>(&self, nodes: &Arena<T>) -> Vec<(Handle, u32)> {
        let mut v = Vec::with_capacity(self.len);
        for b in self.order.iter(&self.buckets) {
            let mut cur = self.buckets[b].head;
            while let Some(h) = handle(cur) {
                v.push((h, self.buckets[b].freq));
                cur = nodes[h].freq_links().next;
                if v.len() > self.len {
                    break;
                }
            }
        }
        v
    }

    /// Checks the order (increasing frequencies, no empty bucket), each FIFO's links both ways, every entry's
    /// bucket, and the count. For `validate()`.
    pub fn check<T: FreqNode>(&self, nodes: &Arena<T>) -> Result<(), String> {
        self.order.check(&self.buckets).map_err(|e| format!("frequency order: {e}"))?;
        if self.order.len() != self.buckets.len() {
            return Err(format!("{} buckets allocated, {} ordered", self.buckets.len(), self.order.len()));
        }
        let mut n = 0usize;
        let mut last = 0u32;
        for b in self.order.iter(&self.buckets) {
            let bk = &self.buckets[b];
            if bk.freq <= last || bk.freq > FREQ_MAX {
                return Err(format!("frequency {} after {last}", bk.freq));
            }
            last = bk.freq;
            if bk.head == 0 {
                return Err(format!("empty bucket of frequency {}", bk.freq));
            }
            let mut prev = 0u32;
            let mut cur = bk.head;
            while let Some(h) = handle(cur) {
                let l = nodes[h].freq_links();
                if l.bucket() != b.get() {
                    return Err(format!("entry {h} in the FIFO of frequency {} names bucket {}", bk.freq, l.bucket()));
                }
                if l.prev != prev {
                    return Err(format!("entry {h} of frequency {}: prev {} but came from {prev}", bk.freq, l.prev));
                }
                n += 1;
                if n > self.len {
                    return Err(format!("more entries linked than the count {}", self.len));
                }
                prev = cur;
                cur = l.next;
            }
            if prev != bk.tail {
                return Err(format!("frequency {}: tail {} but the walk ended at {prev}", bk.freq, bk.tail));
            }
        }
        if n != self.len {
            return Err(format!("count {} but {n} entries linked", self.len));
        }
        Ok(())
    }

    /// Bytes reserved by the buckets.
    pub fn heap_bytes(&self) -> usize {
        self.buckets.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, Default)]
    struct E {
        links: Links,
        fl: FreqLinks,
    }
    crate::arena::linked_by_field!(E);
    impl FreqNode for E {
        fn freq_links(&self) -> &FreqLinks {
            &self.fl
        }
        fn freq_links_mut(&mut self) -> &mut FreqLinks {
            &mut self.fl
        }
    }

    fn state(f: &FreqLists, a: &Arena<E>) -> Vec<(u32, u32)> {
        f.entries(a).into_iter().map(|(h, q)| (h.get(), q)).collect()
    }

    #[test]
    fn fifos_by_frequency_in_order() {
        let mut a = Arena::with_capacity(8);
        let mut f = FreqLists::with_capacity(0);
        let hs: Vec<Handle> = (0..5).map(|_| a.alloc(E::default())).collect();
        for &h in &hs[..3] {
            f.push(&mut a, h, 1);
        }
        f.bump(&mut a, hs[0]);
        f.bump(&mut a, hs[0]); // alone at 2: renamed in place to 3
        f.bump(&mut a, hs[1]);
        assert_eq!(state(&f, &a), vec![(3, 1), (2, 2), (1, 3)]);
        f.push(&mut a, hs[3], 7);
        f.push(&mut a, hs[4], 2);
        assert_eq!(state(&f, &a), vec![(3, 1), (2, 2), (5, 2), (1, 3), (4, 7)]);
        assert_eq!((f.min_oldest(), f.min_newest()), (Some(hs[2]), Some(hs[2])));
        f.remove(&mut a, hs[2]);
        assert_eq!((f.min_oldest(), f.min_newest()), (Some(hs[1]), Some(hs[4])));
        f.requeue(&mut a, hs[1]);
        assert_eq!(state(&f, &a), vec![(5, 2), (2, 2), (1, 3), (4, 7)]);
        assert_eq!(f.freq(&a, hs[3]), 7);
        f.check(&a).unwrap();
        assert_eq!(f.len(), 4);
    }

    #[test]
    fn owner_bits_and_stashes_survive() {
        let mut a = Arena::with_capacity(2);
        let mut f = FreqLists::with_capacity(0);
        let h = a.alloc(E::default());
        a[h].fl.set_bits(0b1010);
        f.push(&mut a, h, 1);
        f.bump(&mut a, h);
        f.remove(&mut a, h);
        assert_eq!(a[h].fl.bits(), 0b1010);
        a[h].fl.set_stash64(u64::MAX - 5);
        a[h].fl.set_stash28(u32::MAX);
        assert_eq!((a[h].fl.stash64(), a[h].fl.stash28(), a[h].fl.bits()), (u64::MAX - 5, FREQ_MAX, 0b1010));
    }
}
