//! LIRS: low inter-reference recency set.
//!
//! **Paper.** S. Jiang and X. Zhang, "LIRS: An Efficient Low Inter-reference Recency Set Replacement Policy to
//! Improve Buffer Cache Performance", SIGMETRICS 2002. Blocks with a small inter-reference recency (IRR) are LIR
//! blocks and own `Llirs` frames; the others are HIR blocks and share `Lhirs` frames. Stack S holds the LIR
//! blocks and every block (resident or not) referenced more recently than the least recent LIR block; queue Q
//! holds the resident HIR blocks in LRU order and supplies the victims. A hit on an HIR block that still has an
//! entry in S (its IRR is below the oldest LIR recency) promotes it to LIR and demotes the bottom LIR block of S
//! to Q; *stack pruning* then removes HIR entries from the bottom of S so that the bottom is always LIR.
//! Non-resident HIR entries in S are this policy's ghosts.
//!
//! **Prefetch adaptation (seed `001_*` §4, "LIRS").** Prefetched blocks are *not* pushed on S (that would distort
//! the recency history); they go to the resident-HIR portion: the MRU end of Q, flagged *not yet accessed*, and
//! an entry they already had in S (a non-resident HIR entry) stays where it is. On the first demand access
//! ([`Outcome::PrefetchHit`]): if the block has an entry in S it is treated as LIRS treats an HIR block found in
//! S, i.e. it becomes LIR; if it has none it is treated as a fresh access: pushed on S as a resident HIR block
//! and moved to the MRU end of Q (or made LIR while the LIR set is not yet full, as for any first access). A
//! prefetched block evicted from Q unaccessed leaves no non-resident entry of its own (an entry it had in S
//! before the prefetch reverts to non-resident) and is reported as an unused prefetch.
//!
//! **Parameters** ([`LirsConfig`]).
//! - `hir_ratio`: share of the capacity for resident HIR blocks, `Lhirs = max(1, floor(hir_ratio × capacity))`,
//!   `Llirs = capacity − Lhirs`. Must be in (0, 1).
//! - `stack_bound`: bound on the length of S as a multiple of the capacity (0 = unbounded, else ≥ 1). After each
//!   access, while S is longer than `floor(stack_bound × capacity)`, the *oldest non-resident HIR entry* (the one
//!   that became non-resident first, which is also the lowest one in S) is removed from S; resident entries are
//!   never removed, so S may stay above the bound when it has no non-resident entry left.
//! - `libcachesim_quirks`: reproduce libCacheSim 0.3.5's `LIRS.c` bit for bit (see below).
//!
//! | preset | `hir_ratio` | `stack_bound` | `libcachesim_quirks` |
//! |---|---|---|---|
//! | `Preset::Default` | 0.01 | 2 | false |
//! | `Preset::Libcachesim` | 0.01 | 2 | true |
//! | `Preset::Butt05` | 0.10 | 2 | false |
//!
//! `Preset::Default` takes libcachesim's parameters (HIR share 1 %, S bounded at twice the cache size) with the
//! paper's operations. Seed `001_*` Table 4 gives "HIR = 10 % of cache, LRU stack = 2 × cache size"; its §4 text
//! says the authors suggest 1 %. `Preset::Butt05` follows the table.
//!
//! **libCacheSim 0.3.5 (`cache/eviction/LIRS.c`).** Same `Lhirs`/`Llirs` rounding, and S is bounded at 2 × the
//! cache size by removing the oldest non-resident entries after every request (as above). Its operations differ
//! from the paper in ways that change miss counts; `libcachesim_quirks = true` reproduces them (checked equal to
//! libcachesim 0.3.5 on generated and CloudPhysics traces):
//! 1. A hit on a resident HIR block that has no entry in S demotes the bottom LIR block(s) of S to Q while the
//!    LIR count is at `Llirs`, although the block stays HIR (the paper only moves it to the top of S and the MRU
//!    end of Q). Making room in Q for the demoted block can evict the very block being hit when `Lhirs = 1`
//!    (capacity < 200); libcachesim then keeps it as a resident HIR entry of S outside Q (here a *phantom*),
//!    still a hit when accessed again and then promoted to LIR, or forgotten when pruned from the bottom of S.
//!    Phantoms are not counted in libcachesim's occupancy, so in this mode [`Policy::len`] can exceed the
//!    capacity by the number of phantoms (and by LIR blocks counted out of libcachesim's LIR counter, next item).
//! 2. Demotion takes whatever entry is at the bottom of S. Pruning never removes the top entry of S, so with a
//!    tiny LIR set a phantom can reach the bottom; it is then "demoted" into Q and libcachesim's LIR counter
//!    drops although no LIR block left. Decisions use that counter (kept here as `lirs`), not the true count.
//! 3. With capacity 1 (`Llirs = 0`) libcachesim refuses to insert anything: every access misses.
//!
//! Without the quirks, capacity 1 runs with an empty LIR set (every block is HIR, which is LRU of one block).
//! [`Policy::remove`] keeps the history: a removed block that has an entry in S becomes a non-resident HIR entry.
//!
//! **Metadata.** 24 bytes per entry in the arena (8-byte key; S links; Q links shared with the list of
//! non-resident entries; the LIR, resident and prefetched flags live in the links' spare bits) plus the handle
//! index (4 bytes + 1 tag byte per bucket, reserved for twice the entries so that churn never grows it: 11.4–22.9
//! bytes per entry): 35–47 bytes per cached block and the same per non-resident (ghost) entry. With `stack_bound = 2` there are at
//! most about `capacity + Lhirs` non-resident entries.
//!
//! **Cost.** O(1) amortized per access, prefetch and eviction (one hash lookup; pruning removes each entry at
//! most once). No allocation per access once the arena and index have grown to their working size.

use super::{Access, Evicted, Outcome, Policy, Preset};
use crate::arena::{Arena, Handle, KeyIndex, Linked, Links, List};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// LIRS parameters (see the module docs for the presets).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LirsConfig {
    /// Share of the capacity for resident HIR blocks: `Lhirs = max(1, floor(hir_ratio × capacity))`; in (0, 1).
    pub hir_ratio: f64,
    /// Bound on the length of stack S as a multiple of the capacity; 0 = unbounded, otherwise ≥ 1.
    pub stack_bound: f64,
    /// Reproduce libCacheSim 0.3.5's deviations from the paper (see the module docs).
    pub libcachesim_quirks: bool,
}

impl Default for LirsConfig {
    fn default() -> Self {
        LirsConfig { hir_ratio: 0.01, stack_bound: 2.0, libcachesim_quirks: false }
    }
}

/// Spare top bit of a Q link (handles use 31 bits).
const BIT: u32 = 1 << 31;
const MASK: u32 = !BIT;

/// Links for Q or for the list of non-resident entries (an entry is never on both). The top bit of `prev`
/// is the LIR flag, the top bit of `next` the resident flag.
#[derive(Clone, Copy, Debug, Default)]
struct QLinks {
    prev: u32,
    next: u32,
}

#[derive(Clone, Debug)]
struct Node {
    key: BlockKey,
    /// Stack S links; their flag is "prefetched, not yet accessed".
    s: Links,
    q: QLinks,
}

impl Node {
    #[inline]
    fn new(key: BlockKey, lir: bool, resident: bool) -> Self {
        Node {
            key,
            s: Links::default(),
            q: QLinks { prev: if lir { BIT } else { 0 }, next: if resident { BIT } else { 0 } },
        }
    }
    #[inline]
    fn is_lir(&self) -> bool {
        self.q.prev & BIT != 0
    }
    #[inline]
    fn set_lir(&mut self, on: bool) {
        self.q.prev = (self.q.prev & MASK) | if on { BIT } else { 0 };
    }
    #[inline]
    fn resident(&self) -> bool {
        self.q.next & BIT != 0
    }
    #[inline]
    fn set_resident(&mut self, on: bool) {
        self.q.next = (self.q.next & MASK) | if on { BIT } else { 0 };
    }
    #[inline]
    fn prefetched(&self) -> bool {
        self.s.flag()
    }
}

impl Linked for Node {
    #[inline]
    fn links(&self) -> &Links {
        &self.s
    }
    #[inline]
    fn links_mut(&mut self) -> &mut Links {
        &mut self.s
    }
}

crate::arena::keyed_by_field!(Node);

/// A doubly linked list through [`Node::q`] (Q, or the non-resident list). Front = most recent.
#[derive(Clone, Copy, Debug, Default)]
struct QList {
    head: u32,
    tail: u32,
    len: u32,
}

impl QList {
    #[inline]
    fn len(&self) -> usize {
        self.len as usize
    }
    #[inline]
    fn back(&self) -> Option<Handle> {
        Handle::new(self.tail)
    }
    /// Is `h` linked on this list? (Only meaningful for a list `h` could be on.)
    #[inline]
    fn linked(&self, a: &Arena<Node>, h: Handle) -> bool {
        a[h].q.prev & MASK != 0 || self.head == h.get()
    }
    #[inline]
    fn push_front(&mut self, a: &mut Arena<Node>, h: Handle) {
        let old = self.head;
        {
            let q = &mut a[h].q;
            q.prev &= BIT;
            q.next = (q.next & BIT) | old;
        }
        match Handle::new(old) {
            Some(o) => {
                let q = &mut a[o].q;
                q.prev = (q.prev & BIT) | h.get();
            }
            None => self.tail = h.get(),
        }
        self.head = h.get();
        self.len += 1;
    }
    #[inline]
    fn remove(&mut self, a: &mut Arena<Node>, h: Handle) {
        let (prev, next) = {
            let q = a[h].q;
            (q.prev & MASK, q.next & MASK)
        };
        match Handle::new(prev) {
            Some(p) => {
                let q = &mut a[p].q;
                q.next = (q.next & BIT) | next;
            }
            None => self.head = next,
        }
        match Handle::new(next) {
            Some(n) => {
                let q = &mut a[n].q;
                q.prev = (q.prev & BIT) | prev;
            }
            None => self.tail = prev,
        }
        let q = &mut a[h].q;
        q.prev &= BIT;
        q.next &= BIT;
        self.len -= 1;
    }
    #[inline]
    fn move_to_front(&mut self, a: &mut Arena<Node>, h: Handle) {
        if self.head != h.get() {
            self.remove(a, h);
            self.push_front(a, h);
        }
    }
    /// Handles front to back, checking the links on the way.
    fn walk(&self, a: &Arena<Node>) -> Result<Vec<Handle>, String> {
        let mut out = Vec::with_capacity(self.len());
        let mut prev = 0u32;
        let mut cur = self.head;
        while let Some(h) = Handle::new(cur) {
            if out.len() > self.len() {
                return Err(format!("list longer than its length {} (cycle?)", self.len));
            }
            let q = a[h].q;
            if q.prev & MASK != prev {
                return Err(format!("entry {cur}: prev {} but came from {prev}", q.prev & MASK));
            }
            out.push(h);
            prev = cur;
            cur = q.next & MASK;
        }
        if prev != self.tail || out.len() != self.len() {
            return Err(format!("tail {} / length {} but walked {} entries to {prev}", self.tail, self.len, out.len()));
        }
        Ok(out)
    }
}

/// The LIRS policy.
#[derive(Clone, Debug)]
pub struct Lirs {
    capacity: usize,
    /// `Llirs`.
    lir_limit: usize,
    /// `Lhirs`.
    hir_limit: usize,
    /// Longest S allowed before non-resident entries are dropped; 0 = unbounded.
    max_stack: usize,
    quirks: bool,
    arena: Arena<Node>,
    index: KeyIndex,
    /// Stack S, front = top (most recent).
    s: List,
    /// Resident HIR blocks, front = MRU end; victims come from the back.
    q: QList,
    /// Non-resident HIR entries of S, front = most recently made non-resident.
    nh: QList,
    /// The LIR count the decisions use: the number of LIR blocks, except under `libcachesim_quirks` (item 2).
    lirs: usize,
    /// Resident blocks.
    resident: usize,
}

/// A block's state as the tests see it.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Lir,
    Hir,
    NonResident,
}

impl Lirs {
    /// `Llirs`, the frames for LIR blocks.
    pub fn lir_limit(&self) -> usize {
        self.lir_limit
    }

    /// `Lhirs`, the frames for resident HIR blocks.
    pub fn hir_limit(&self) -> usize {
        self.hir_limit
    }

    #[inline]
    fn in_s(&self, h: Handle) -> bool {
        List::prev_of(&self.arena, h).is_some() || self.s.front() == Some(h)
    }

    /// Is the resident HIR block `h` on Q (not a phantom)?
    #[inline]
    fn in_q(&self, h: Handle) -> bool {
        self.q.linked(&self.arena, h)
    }

    /// Evicts the resident HIR block at the back of Q. If it is `keep` (the block being hit, see quirk 1) it
    /// stays resident outside Q instead.
    fn evict_hir(&mut self, keep: Option<Handle>, out: &mut Vec<Evicted>) {
        let Some(t) = self.q.back() else { return };
        self.q.remove(&mut self.arena, t);
        if Some(t) == keep {
            return;
        }
        self.resident -= 1;
        if self.in_s(t) {
            let n = &mut self.arena[t];
            out.push(Evicted { key: n.key, unused_prefetch: n.prefetched() });
            n.set_resident(false);
            n.s.set_flag(false);
            self.nh.push_front(&mut self.arena, t);
        } else {
            super::evict(&mut self.arena, &mut self.index, t, out);
        }
    }

    /// Demotes the bottom entry of S (an LIR block, except under quirk 2) to the MRU end of Q, making room in Q
    /// first, then prunes S.
    fn evict_lir(&mut self, keep: Option<Handle>, out: &mut Vec<Evicted>) {
        let Some(t) = self.s.back() else { return };
        self.lirs = self.lirs.saturating_sub(1);
        self.s.remove(&mut self.arena, t);
        let n = &self.arena[t];
        if n.is_lir() {
            self.arena[t].set_lir(false);
        } else if !n.resident() {
            // Quirk 2 with a non-resident entry at the bottom (not seen in practice): it becomes resident in Q.
            self.nh.remove(&mut self.arena, t);
            self.arena[t].set_resident(true);
            self.resident += 1;
        } else if self.in_q(t) {
            self.q.remove(&mut self.arena, t);
        }
        while self.q.len() + 1 > self.hir_limit {
            self.evict_hir(keep, out);
        }
        self.q.push_front(&mut self.arena, t);
        self.prune(false, out);
    }

    /// Stack pruning: removes HIR entries from the bottom of S until the bottom is LIR or S has one entry left
    /// (the top entry can be the block being promoted). A phantom reaching the bottom is forgotten (evicted),
    /// as libcachesim does. `from_remove` (after [`Policy::remove`]): the top entry is pruned too, phantoms stop
    /// the pruning instead.
    fn prune(&mut self, from_remove: bool, out: &mut Vec<Evicted>) {
        while let Some(t) = self.s.back() {
            if self.s.front() == Some(t) && !from_remove {
                break;
            }
            let n = &self.arena[t];
            if n.is_lir() {
                break;
            }
            if !n.resident() {
                self.s.remove(&mut self.arena, t);
                self.nh.remove(&mut self.arena, t);
                self.index.forget(&mut self.arena, t);
            } else if self.in_q(t) {
                self.s.remove(&mut self.arena, t);
            } else if from_remove {
                break;
            } else {
                self.s.remove(&mut self.arena, t);
                self.resident -= 1;
                super::evict(&mut self.arena, &mut self.index, t, out);
            }
        }
    }

    /// After a block became LIR without a demotion (the LIR set had room, which after [`Policy::remove`] can
    /// happen with HIR entries in S): prune so that the bottom of S is LIR again. libcachesim does not.
    #[inline]
    fn settle(&mut self, out: &mut Vec<Evicted>) {
        if !self.quirks {
            self.prune(false, out);
        }
    }

    /// Drops the oldest non-resident entries while S is over its bound.
    #[inline]
    fn limit_stack(&mut self) {
        if self.max_stack == 0 {
            return;
        }
        while self.s.len() > self.max_stack {
            let Some(t) = self.nh.back() else { break };
            self.nh.remove(&mut self.arena, t);
            self.s.remove(&mut self.arena, t);
            self.index.forget(&mut self.arena, t);
        }
    }

    /// A hit on a resident HIR block with an entry in S (or a phantom): it becomes LIR.
    fn hit_hir_in_s(&mut self, h: Handle, out: &mut Vec<Evicted>) {
        self.s.move_to_front(&mut self.arena, h);
        if self.in_q(h) {
            self.q.remove(&mut self.arena, h);
        }
        if self.lir_limit == 0 {
            // Capacity 1 without quirks: no LIR frame; the block stays HIR at the MRU end of Q.
            self.q.push_front(&mut self.arena, h);
            return;
        }
        let demote = self.lirs + 1 > self.lir_limit;
        while self.lirs + 1 > self.lir_limit {
            self.evict_lir(None, out);
        }
        self.arena[h].set_lir(true);
        self.lirs += 1;
        if !demote {
            self.settle(out);
        }
    }

    /// A hit on a resident HIR block without an entry in S: it stays HIR, goes to the MRU end of Q and the top
    /// of S (quirk 1: after demoting LIR blocks).
    fn hit_hir_q_only(&mut self, h: Handle, out: &mut Vec<Evicted>) {
        self.q.move_to_front(&mut self.arena, h);
        if self.quirks {
            while self.lirs + 1 > self.lir_limit {
                self.evict_lir(Some(h), out);
            }
        }
        self.s.push_front(&mut self.arena, h);
    }

    /// A miss on a block with a non-resident entry in S: it becomes LIR.
    fn miss_nonresident(&mut self, h: Handle, out: &mut Vec<Evicted>) {
        self.s.move_to_front(&mut self.arena, h);
        if self.lir_limit == 0 {
            while self.q.len() + 1 > self.hir_limit {
                self.evict_hir(None, out);
            }
            self.nh.remove(&mut self.arena, h);
            self.arena[h].set_resident(true);
            self.q.push_front(&mut self.arena, h);
            self.resident += 1;
            return;
        }
        let demote = self.lirs + 1 > self.lir_limit;
        while self.lirs + 1 > self.lir_limit {
            self.evict_lir(None, out);
        }
        self.nh.remove(&mut self.arena, h);
        let n = &mut self.arena[h];
        n.set_resident(true);
        n.set_lir(true);
        self.lirs += 1;
        self.resident += 1;
        if !demote {
            self.settle(out);
        }
    }

    /// A miss on a block LIRS has no record of: LIR while the LIR set has room, else resident HIR.
    fn miss_new(&mut self, key: BlockKey, out: &mut Vec<Evicted>) {
        if self.quirks && self.lir_limit == 0 {
            return; // quirk 3
        }
        let lir = self.lirs < self.lir_limit;
        if !lir {
            while self.q.len() + 1 > self.hir_limit {
                self.evict_hir(None, out);
            }
        }
        let h = self.arena.alloc(Node::new(key, lir, true));
        self.index.insert(&self.arena, h);
        self.s.push_front(&mut self.arena, h);
        self.resident += 1;
        if lir {
            self.lirs += 1;
            self.settle(out);
        } else {
            self.q.push_front(&mut self.arena, h);
        }
    }

    /// The first demand access to a prefetched block (Butt et al. §4).
    fn first_access_prefetched(&mut self, h: Handle, out: &mut Vec<Evicted>) {
        self.arena[h].s.set_flag(false);
        if self.in_s(h) {
            // It had a (non-resident) entry in S before the prefetch: LIRS makes such a block LIR.
            self.hit_hir_in_s(h, out);
        } else if self.lirs < self.lir_limit {
            // A fresh access while the LIR set has room.
            self.q.remove(&mut self.arena, h);
            self.s.push_front(&mut self.arena, h);
            self.arena[h].set_lir(true);
            self.lirs += 1;
            self.settle(out);
        } else {
            // A fresh HIR access: top of S, MRU end of Q.
            self.q.move_to_front(&mut self.arena, h);
            self.s.push_front(&mut self.arena, h);
        }
    }

    /// Stack S from top to bottom, for tests.
    #[cfg(test)]
    fn stack(&self) -> Vec<(u64, St)> {
        self.s.iter(&self.arena).map(|h| (self.arena[h].key.block(), self.state(h))).collect()
    }

    /// Q from MRU to LRU end, for tests.
    #[cfg(test)]
    fn queue(&self) -> Vec<u64> {
        self.q.walk(&self.arena).unwrap().into_iter().map(|h| self.arena[h].key.block()).collect()
    }

    #[cfg(test)]
    fn state(&self, h: Handle) -> St {
        let n = &self.arena[h];
        match (n.resident(), n.is_lir()) {
            (false, _) => St::NonResident,
            (true, true) => St::Lir,
            (true, false) => St::Hir,
        }
    }
}

impl Policy for Lirs {
    type Config = LirsConfig;

    fn preset(preset: Preset) -> LirsConfig {
        match preset {
            Preset::Default => LirsConfig::default(),
            Preset::Libcachesim => LirsConfig { libcachesim_quirks: true, ..LirsConfig::default() },
            Preset::Butt05 => LirsConfig { hir_ratio: 0.10, stack_bound: 2.0, libcachesim_quirks: false },
        }
    }

    fn check_config(c: &LirsConfig) -> Result<(), String> {
        if !(c.hir_ratio > 0.0 && c.hir_ratio < 1.0) {
            return Err(format!("hir_ratio must be in (0, 1), got {}", c.hir_ratio));
        }
        if !(c.stack_bound == 0.0 || (c.stack_bound.is_finite() && c.stack_bound >= 1.0)) {
            return Err(format!("stack_bound must be 0 (unbounded) or at least 1, got {}", c.stack_bound));
        }
        Ok(())
    }

    fn libcachesim_quirks(c: &LirsConfig) -> bool {
        c.libcachesim_quirks
    }

    fn new(capacity: usize, config: &LirsConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        let hir_limit = ((config.hir_ratio * capacity as f64) as usize).clamp(1, capacity);
        let max_stack = (config.stack_bound * capacity as f64) as usize;
        let n = capacity + capacity.min(1 << 20);
        Lirs {
            capacity,
            lir_limit: capacity - hir_limit,
            hir_limit,
            max_stack,
            quirks: config.libcachesim_quirks,
            arena: Arena::with_capacity(n),
            index: KeyIndex::with_capacity(n),
            s: List::new(),
            q: QList::default(),
            nh: QList::default(),
            lirs: 0,
            resident: 0,
        }
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.resident
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.index.get(&self.arena, key).is_some_and(|h| self.arena[h].resident())
    }

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        let outcome = match self.index.get(&self.arena, access.key) {
            None => {
                self.miss_new(access.key, out);
                Outcome::Miss
            }
            Some(h) => {
                let n = &self.arena[h];
                if !n.resident() {
                    self.miss_nonresident(h, out);
                    Outcome::Miss
                } else if n.prefetched() {
                    self.first_access_prefetched(h, out);
                    Outcome::PrefetchHit
                } else if n.is_lir() {
                    self.s.move_to_front(&mut self.arena, h);
                    self.prune(false, out);
                    Outcome::Hit
                } else if self.in_s(h) {
                    self.hit_hir_in_s(h, out);
                    Outcome::Hit
                } else {
                    self.hit_hir_q_only(h, out);
                    Outcome::Hit
                }
            }
        };
        self.limit_stack();
        outcome
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        let mut inserted = 0;
        for a in group {
            let found = self.index.get(&self.arena, a.key);
            if found.is_some_and(|h| self.arena[h].resident()) || (self.quirks && self.lir_limit == 0) {
                continue;
            }
            while self.q.len() + 1 > self.hir_limit {
                self.evict_hir(None, out);
            }
            let h = match found {
                Some(h) => {
                    // A non-resident entry of S: it keeps its place in S.
                    self.nh.remove(&mut self.arena, h);
                    self.arena[h].set_resident(true);
                    h
                }
                None => {
                    let h = self.arena.alloc(Node::new(a.key, false, true));
                    self.index.insert(&self.arena, h);
                    h
                }
            };
            self.arena[h].s.set_flag(true);
            self.q.push_front(&mut self.arena, h);
            self.resident += 1;
            inserted += 1;
        }
        inserted
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        let Some(h) = self.index.get(&self.arena, key) else { return false };
        if !self.arena[h].resident() {
            return false;
        }
        self.resident -= 1;
        let was_lir = self.arena[h].is_lir();
        if was_lir {
            self.lirs = self.lirs.saturating_sub(1);
        } else if self.in_q(h) {
            self.q.remove(&mut self.arena, h);
        }
        if self.in_s(h) {
            // Keep the history: a non-resident HIR entry where the block was.
            let n = &mut self.arena[h];
            n.set_lir(false);
            n.set_resident(false);
            n.s.set_flag(false);
            self.nh.push_front(&mut self.arena, h);
            if was_lir {
                // Pruning never evicts here (phantoms, which only quirks create, stop it).
                let mut none = Vec::new();
                self.prune(true, &mut none);
                debug_assert!(none.is_empty());
            }
        } else {
            self.index.forget(&mut self.arena, h);
        }
        true
    }

    fn validate(&self) -> Result<(), String> {
        self.s.check(&self.arena)?;
        let q = self.q.walk(&self.arena).map_err(|e| format!("Q: {e}"))?;
        let nh = self.nh.walk(&self.arena).map_err(|e| format!("non-resident list: {e}"))?;
        if self.index.len() != self.arena.len() {
            return Err(format!("index {} / arena {} disagree", self.index.len(), self.arena.len()));
        }
        let (mut lir, mut res, mut in_s, mut phantoms, mut q_only) = (0usize, 0usize, 0usize, 0usize, 0usize);
        for h in self.s.iter(&self.arena) {
            let n = &self.arena[h];
            in_s += 1;
            if self.index.get(&self.arena, n.key) != Some(h) {
                return Err(format!("key {} in S but not indexed", n.key));
            }
            if n.is_lir() {
                lir += 1;
                res += 1;
            } else if n.resident() {
                res += 1;
                if !self.in_q(h) {
                    phantoms += 1;
                }
            } else if !self.nh.linked(&self.arena, h) {
                return Err(format!("non-resident entry {} not on the non-resident list", n.key));
            }
        }
        if in_s != self.s.len() {
            return Err("S length".into());
        }
        for &h in &q {
            let n = &self.arena[h];
            if n.is_lir() || !n.resident() {
                return Err(format!("Q holds {} which is not a resident HIR block", n.key));
            }
            if self.index.get(&self.arena, n.key) != Some(h) {
                return Err(format!("key {} in Q but not indexed", n.key));
            }
            if !self.in_s(h) {
                res += 1;
                q_only += 1;
            }
        }
        if in_s + q_only != self.arena.len() {
            return Err(format!("{} entries, {in_s} in S and {q_only} only in Q: leaked entries", self.arena.len()));
        }
        for &h in &nh {
            let n = &self.arena[h];
            if n.resident() || n.is_lir() || !self.in_s(h) {
                return Err(format!("{} on the non-resident list is resident, LIR, or not in S", n.key));
            }
        }
        let nonres = self.arena.len() - res;
        if nonres != nh.len() {
            return Err(format!("{} non-resident entries but {} on the non-resident list", nonres, nh.len()));
        }
        if res != self.resident {
            return Err(format!("{res} resident blocks found, {} counted", self.resident));
        }
        if q.len() > self.hir_limit {
            return Err(format!("{} resident HIR blocks in Q over Lhirs {}", q.len(), self.hir_limit));
        }
        if self.max_stack > 0 && self.s.len() > self.max_stack && !nh.is_empty() {
            return Err(format!(
                "S has {} entries over its bound {} with non-resident entries left",
                in_s, self.max_stack
            ));
        }
        if !self.quirks {
            if phantoms > 0 {
                return Err(format!("{phantoms} resident HIR blocks outside Q"));
            }
            if lir != self.lirs || lir > self.lir_limit {
                return Err(format!("{lir} LIR blocks, counted {}, Llirs {}", self.lirs, self.lir_limit));
            }
            if self.resident > self.capacity {
                return Err(format!("{} blocks over capacity {}", self.resident, self.capacity));
            }
            if lir > 0 && self.s.back().is_some_and(|b| !self.arena[b].is_lir()) {
                return Err(format!("bottom of S ({}) is not LIR", self.arena[self.s.back().unwrap()].key));
            }
        } else if self.lirs > self.lir_limit || self.lirs > lir {
            return Err(format!(
                "LIR counter {} over Llirs {} or over the {lir} LIR blocks",
                self.lirs, self.lir_limit
            ));
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes() + self.index.heap_bytes()
    }

    /// Exact without `libcachesim_quirks`. A new block evicts Q's LRU block when the LIR set is full and Q has no
    /// room, else nothing. A block with a non-resident entry in S becomes LIR: with the LIR set full, the bottom
    /// LIR block of S is demoted to Q, which first evicts Q's LRU block when Q has no room, else nothing (the
    /// pruning that follows forgets non-resident entries and evicts nothing). Under the quirks the demotion may
    /// also be of a non-LIR entry, or repeat, or the pruning evict a phantom: a phantom is found by a read-only
    /// walk up S, the other two cases (quirk 2 only) say `Unknown`. A resident key (a hit, which in LIRS may
    /// demote and evict) says `Unknown`.
    fn victim(&self, incoming: BlockKey) -> super::Victim {
        use super::Victim;
        let q_victim = || {
            if self.q.len() + 1 > self.hir_limit {
                self.q.back().map_or(Victim::None, |t| Victim::Block(self.arena[t].key))
            } else {
                Victim::None
            }
        };
        let h = match self.index.get(&self.arena, incoming) {
            None if (self.quirks && self.lir_limit == 0) || self.lirs < self.lir_limit => return Victim::None,
            None => return q_victim(),
            Some(h) if self.arena[h].resident() => return Victim::Unknown,
            Some(h) => h,
        };
        // miss_nonresident: `h` goes to the top of S first.
        if self.lir_limit == 0 {
            return q_victim();
        }
        if self.lirs < self.lir_limit {
            return Victim::None;
        }
        if self.lirs > self.lir_limit {
            return Victim::Unknown; // quirk 2: several demotions
        }
        let below = |x: Handle| {
            List::prev_of(&self.arena, x).filter(|&y| y != h).or_else(|| {
                // Skip `h`, which has moved to the top.
                List::prev_of(&self.arena, x).and_then(|y| List::prev_of(&self.arena, y))
            })
        };
        let bottom = self.s.back().and_then(|b| if b == h { below(b) } else { Some(b) });
        let Some(t) = bottom.filter(|&t| self.arena[t].is_lir()) else { return Victim::Unknown };
        if self.q.len() + 1 > self.hir_limit {
            return q_victim();
        }
        // The pruning after the demotion, from the entry above `t` up to (not including) the top, `h`.
        let mut x = below(t);
        while let Some(e) = x {
            let n = &self.arena[e];
            if n.is_lir() {
                break;
            }
            if n.resident() && !self.in_q(e) {
                return Victim::Block(n.key); // a phantom (quirks only)
            }
            x = below(e);
        }
        Victim::None
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model::{self as model, Op, Reference};
    use super::*;
    use crate::policy::testutil::k;
    use proptest::prelude::*;

    /// Capacity 3 split as Llirs = 2, Lhirs = 1.
    fn small(quirks: bool) -> Lirs {
        let p = Lirs::new(3, &LirsConfig { hir_ratio: 0.34, stack_bound: 0.0, libcachesim_quirks: quirks });
        assert_eq!((p.lir_limit(), p.hir_limit()), (2, 1));
        p
    }

    fn acc(p: &mut Lirs, b: u64) -> (Outcome, Vec<u64>) {
        let mut out = Vec::new();
        let o = p.access(Access::new(k(b)), &mut out);
        p.validate().unwrap_or_else(|e| panic!("after access {b}: {e}"));
        (o, out.iter().map(|e| e.key.block()).collect())
    }

    use Outcome::{Hit, Miss, PrefetchHit};
    use St::{Hir as H, Lir as L, NonResident as N};

    #[test]
    fn hand_worked_sequence() {
        let mut p = small(false);
        assert_eq!(acc(&mut p, 1), (Miss, vec![]));
        assert_eq!(acc(&mut p, 2), (Miss, vec![]));
        assert_eq!(p.stack(), vec![(2, L), (1, L)], "LIR set fills first");
        assert_eq!(acc(&mut p, 3), (Miss, vec![]));
        assert_eq!(p.stack(), vec![(3, H), (2, L), (1, L)]);
        assert_eq!(p.queue(), vec![3]);
        // Q is full: 3 leaves the cache but stays in S as a non-resident HIR entry.
        assert_eq!(acc(&mut p, 4), (Miss, vec![3]));
        assert_eq!(p.stack(), vec![(4, H), (3, N), (2, L), (1, L)]);
        // 3 is re-referenced while in S: its IRR is small, so it becomes LIR; the bottom LIR block (1) is
        // demoted to Q after Q's victim (4) leaves.
        assert_eq!(acc(&mut p, 3), (Miss, vec![4]));
        assert_eq!(p.stack(), vec![(3, L), (4, N), (2, L)]);
        assert_eq!(p.queue(), vec![1]);
        // A hit on a resident HIR block with no entry in S: stays HIR, goes on top of S.
        assert_eq!(acc(&mut p, 1), (Hit, vec![]));
        assert_eq!(p.stack(), vec![(1, H), (3, L), (4, N), (2, L)]);
        // A hit on the bottom LIR block: it moves to the top, and pruning drops 4's entry.
        assert_eq!(acc(&mut p, 2), (Hit, vec![]));
        assert_eq!(p.stack(), vec![(2, L), (1, H), (3, L)]);
        // A hit on a resident HIR block in S: becomes LIR, 3 (bottom LIR) goes to Q, pruning stops at 2.
        assert_eq!(acc(&mut p, 1), (Hit, vec![]));
        assert_eq!(p.stack(), vec![(1, L), (2, L)]);
        assert_eq!(p.queue(), vec![3]);
        // 3 has no entry in S any more: evicting it leaves no ghost.
        assert_eq!(acc(&mut p, 5), (Miss, vec![3]));
        assert_eq!(p.stack(), vec![(5, H), (1, L), (2, L)]);
        assert_eq!(acc(&mut p, 3), (Miss, vec![5]));
        assert_eq!(p.stack(), vec![(3, H), (5, N), (1, L), (2, L)], "3 is new again: HIR");
        assert_eq!(p.len(), 3);
    }

    #[test]
    fn paper_figure_loop_keeps_lir_set() {
        // A loop one block longer than the cache: LRU misses every time, LIRS keeps Llirs blocks hitting.
        let mut p = Lirs::new(10, &LirsConfig::default());
        let mut hits = 0;
        for round in 0..20 {
            for b in 0..11 {
                if acc(&mut p, b).0.is_hit() && round > 0 {
                    hits += 1;
                }
            }
        }
        assert!(hits >= 19 * 9, "{hits}");
    }

    #[test]
    fn stack_bound_drops_oldest_non_resident_entries() {
        // Capacity 3, S bounded at 1 × capacity = 3 entries.
        let mut p = Lirs::new(3, &LirsConfig { hir_ratio: 0.34, stack_bound: 1.0, libcachesim_quirks: false });
        for b in [1, 2, 3, 4] {
            acc(&mut p, b);
        }
        // S would be 4 H, 3 N, 2 L, 1 L: over the bound, the non-resident 3 goes.
        assert_eq!(p.stack(), vec![(4, H), (2, L), (1, L)]);
        acc(&mut p, 5);
        assert_eq!(p.stack(), vec![(5, H), (2, L), (1, L)]);
        // Only resident entries left: S may not shrink further.
        assert_eq!(acc(&mut p, 2).0, Hit);
        assert_eq!(acc(&mut p, 6).1, vec![5]);
        assert_eq!(p.stack(), vec![(6, H), (2, L), (1, L)]);
        let mut unbounded = small(false);
        for b in 1..=10 {
            acc(&mut unbounded, b);
        }
        assert_eq!(unbounded.stack().len(), 10, "no bound: all non-resident entries stay above the LIR blocks");
    }

    #[test]
    fn libcachesim_quirk_demotes_on_q_only_hit_and_makes_phantoms() {
        let mut p = small(true);
        for b in [1, 2, 3] {
            acc(&mut p, b);
        }
        acc(&mut p, 2); // LIR hit, 1 at the bottom
        acc(&mut p, 3); // 3 resident HIR in S: becomes LIR, 1 is demoted to Q
        assert_eq!(p.stack(), vec![(3, L), (2, L)]);
        assert_eq!(p.queue(), vec![1]);
        // Paper: 1 stays HIR and goes on top of S. libcachesim also demotes the bottom LIR (2) to Q, which with
        // Lhirs = 1 evicts 1 itself from Q; 1 stays a hit-able resident HIR entry of S (a phantom).
        assert_eq!(acc(&mut p, 1), (Hit, vec![]));
        assert_eq!(p.stack(), vec![(1, H), (3, L)]);
        assert_eq!(p.queue(), vec![2]);
        assert_eq!(p.len(), 3);
        // The LIR set is short of one block now, so a new block is LIR: four resident blocks in a cache of 3.
        assert_eq!(acc(&mut p, 4), (Miss, vec![]));
        assert_eq!(p.len(), 4);
        assert!(p.contains(k(1)));
        // A hit on the phantom promotes it.
        assert_eq!(acc(&mut p, 1).0, Hit);
        assert_eq!(p.stack()[0], (1, L));
        let mut clean = small(false);
        for b in [1, 2, 3, 2, 3] {
            acc(&mut clean, b);
        }
        assert_eq!(acc(&mut clean, 1), (Hit, vec![]));
        assert_eq!(clean.stack(), vec![(1, H), (3, L), (2, L)]);
        assert_eq!(clean.queue(), vec![1]);
    }

    #[test]
    fn libcachesim_capacity_one_caches_nothing() {
        let mut q = Lirs::new(1, &Lirs::preset(Preset::Libcachesim));
        for b in [1, 1, 1] {
            assert_eq!(acc(&mut q, b).0, Miss);
        }
        assert_eq!(q.len(), 0);
        let mut p = Lirs::new(1, &Lirs::preset(Preset::Default));
        assert_eq!(acc(&mut p, 1).0, Miss);
        assert_eq!(acc(&mut p, 1).0, Hit);
        assert_eq!(acc(&mut p, 2), (Miss, vec![1]));
        assert_eq!(acc(&mut p, 1), (Miss, vec![2]));
    }

    #[test]
    fn prefetched_block_without_history_enters_as_fresh_hir() {
        let mut p = small(false);
        for b in [1, 2] {
            acc(&mut p, b);
        }
        let mut out = Vec::new();
        assert_eq!(p.prefetch(&[Access::new(k(7)), Access::new(k(1))], &mut out), 1);
        p.validate().unwrap();
        assert_eq!(p.stack(), vec![(2, L), (1, L)], "prefetch does not touch S");
        assert_eq!(p.queue(), vec![7]);
        assert_eq!(acc(&mut p, 7), (PrefetchHit, vec![]));
        assert_eq!(p.stack(), vec![(7, H), (2, L), (1, L)]);
        assert_eq!(acc(&mut p, 7), (Hit, vec![]), "second access: an HIR block in S becomes LIR");
        assert_eq!(p.stack(), vec![(7, L), (2, L)]);
        assert_eq!(p.queue(), vec![1]);
    }

    #[test]
    fn prefetched_block_with_stack_entry_becomes_lir() {
        let mut p = small(false);
        for b in [1, 2, 3, 4] {
            acc(&mut p, b);
        }
        assert_eq!(p.stack(), vec![(4, H), (3, N), (2, L), (1, L)]);
        let mut out = Vec::new();
        p.prefetch(&[Access::new(k(3))], &mut out);
        p.validate().unwrap();
        assert_eq!(out, vec![Evicted { key: k(4), unused_prefetch: false }]);
        assert_eq!(p.stack(), vec![(4, N), (3, H), (2, L), (1, L)], "3 keeps its place in S");
        assert_eq!(acc(&mut p, 3), (PrefetchHit, vec![]));
        assert_eq!(p.stack(), vec![(3, L), (4, N), (2, L)]);
        assert_eq!(p.queue(), vec![1]);
    }

    #[test]
    fn unaccessed_prefetch_leaves_no_ghost() {
        let mut p = small(false);
        for b in [1, 2] {
            acc(&mut p, b);
        }
        let mut out = Vec::new();
        p.prefetch(&[Access::new(k(8))], &mut out);
        assert_eq!(acc(&mut p, 9), (Miss, vec![8]));
        assert_eq!(p.stack(), vec![(9, H), (2, L), (1, L)], "no non-resident entry for 8");
        // A prefetched block that had a non-resident entry reverts to it.
        acc(&mut p, 10); // 9 becomes non-resident
        p.prefetch(&[Access::new(k(9))], &mut out);
        out.clear();
        acc(&mut p, 11);
        assert_eq!(p.stack(), vec![(11, H), (10, N), (9, N), (2, L), (1, L)]);
        let mut out = Vec::new();
        p.prefetch(&[Access::new(k(12))], &mut out);
        assert_eq!(out, vec![Evicted { key: k(11), unused_prefetch: false }]);
        out.clear();
        acc(&mut p, 13);
        p.validate().unwrap();
    }

    #[test]
    fn remove_keeps_history() {
        let mut p = small(false);
        for b in [1, 2, 3] {
            acc(&mut p, b);
        }
        assert!(p.remove(k(1)));
        assert!(!p.remove(k(1)));
        p.validate().unwrap();
        assert_eq!(p.stack(), vec![(3, H), (2, L)], "1 was the bottom: pruned away");
        assert!(p.remove(k(3)));
        p.validate().unwrap();
        assert_eq!(p.stack(), vec![(3, N), (2, L)]);
        assert_eq!(acc(&mut p, 3), (Miss, vec![]));
        assert_eq!(p.stack(), vec![(3, L), (2, L)], "LIR set had room");
        assert_eq!(p.len(), 2);
    }

    #[test]
    fn entry_sizes_match_the_module_docs() {
        assert_eq!(std::mem::size_of::<Node>(), 24);
    }

    #[test]
    fn config_is_checked() {
        use crate::policy::{PolicyError, PolicySpec};
        assert!(matches!(PolicySpec::parse("lirs(hir_ratio=1.5)"), Err(PolicyError::Invalid { .. })));
        assert!(matches!(PolicySpec::parse("lirs(stack_bound=0.5)"), Err(PolicyError::Invalid { .. })));
        assert!(PolicySpec::parse("lirs(hir_ratio=0.1,stack_bound=0)").is_ok());
        assert!(PolicySpec::parse("lirs(bogus=1)").is_err());
    }

    /// An obviously-correct LIRS over vectors (paper operations, the prefetch adaptation above), O(n) a step.
    #[derive(Default)]
    struct Model {
        cap: usize,
        llirs: usize,
        lhirs: usize,
        bound: usize,
        /// (key, lir, resident), top first.
        s: Vec<(u64, bool, bool)>,
        /// Resident HIR blocks, MRU first: (key, prefetched).
        q: Vec<(u64, bool)>,
        /// Non-resident entries, most recently made non-resident first.
        nh: Vec<u64>,
    }

    impl Model {
        fn pos(&self, b: u64) -> Option<usize> {
            self.s.iter().position(|e| e.0 == b)
        }
        fn qpos(&self, b: u64) -> Option<usize> {
            self.q.iter().position(|e| e.0 == b)
        }
        fn lirs(&self) -> usize {
            self.s.iter().filter(|e| e.1).count()
        }
        fn resident(&self, b: u64) -> bool {
            self.qpos(b).is_some() || self.pos(b).is_some_and(|i| self.s[i].1)
        }
        fn top(&mut self, b: u64, lir: bool, res: bool) {
            if let Some(i) = self.pos(b) {
                self.s.remove(i);
            }
            self.s.insert(0, (b, lir, res));
        }
        fn evict_hir(&mut self, out: &mut Vec<u64>) {
            let (b, _) = self.q.pop().unwrap();
            out.push(b);
            if let Some(i) = self.pos(b) {
                self.s[i].2 = false;
                self.nh.insert(0, b);
            }
        }
        fn prune(&mut self) {
            self.prune_to(1)
        }
        fn prune_to(&mut self, keep: usize) {
            while self.s.len() > keep && !self.s.last().unwrap().1 {
                let (b, _, res) = self.s.pop().unwrap();
                if !res {
                    self.nh.retain(|&x| x != b);
                }
            }
        }
        fn demote(&mut self, out: &mut Vec<u64>) {
            let (b, lir, _) = self.s.pop().unwrap();
            assert!(lir);
            if self.q.len() == self.lhirs {
                self.evict_hir(out);
            }
            self.q.insert(0, (b, false));
            self.prune();
        }
        fn make_lir(&mut self, b: u64, out: &mut Vec<u64>) {
            self.top(b, true, true);
            if self.lirs() > self.llirs {
                self.demote(out);
            }
        }
    }

    impl Reference for Model {
        fn len(&self) -> usize {
            self.lirs() + self.q.len()
        }
        fn access(&mut self, b: u64, out: &mut Vec<u64>) -> Outcome {
            let o = if let Some(qi) = self.qpos(b) {
                let (_, pf) = self.q.remove(qi);
                let in_s = self.pos(b).is_some();
                if self.llirs == 0 {
                    self.top(b, false, true);
                    self.q.insert(0, (b, false));
                } else if in_s {
                    self.make_lir(b, out);
                } else if pf && self.lirs() < self.llirs {
                    self.top(b, true, true);
                } else {
                    self.top(b, false, true);
                    self.q.insert(0, (b, false));
                }
                if pf {
                    Outcome::PrefetchHit
                } else {
                    Outcome::Hit
                }
            } else if let Some(i) = self.pos(b) {
                if self.s[i].1 {
                    self.top(b, true, true);
                    self.prune();
                    Outcome::Hit
                } else {
                    self.nh.retain(|&x| x != b);
                    if self.llirs == 0 {
                        if self.q.len() == self.lhirs {
                            self.evict_hir(out);
                        }
                        self.top(b, false, true);
                        self.q.insert(0, (b, false));
                    } else {
                        // Frees a frame first if the cache is full, as the paper does.
                        if self.len() == self.cap {
                            self.evict_hir(out);
                        }
                        self.make_lir(b, out);
                    }
                    Outcome::Miss
                }
            } else {
                if self.lirs() < self.llirs {
                    self.top(b, true, true);
                } else {
                    if self.q.len() == self.lhirs {
                        self.evict_hir(out);
                    }
                    self.top(b, false, true);
                    self.q.insert(0, (b, false));
                }
                Outcome::Miss
            };
            if self.lirs() > 0 {
                self.prune();
            }
            while self.bound > 0 && self.s.len() > self.bound && !self.nh.is_empty() {
                let b = self.nh.pop().unwrap();
                let i = self.pos(b).unwrap();
                self.s.remove(i);
            }
            o
        }
        fn prefetch(&mut self, b: u64, out: &mut Vec<u64>) -> bool {
            if self.resident(b) {
                return false;
            }
            if self.q.len() == self.lhirs {
                self.evict_hir(out);
            }
            if let Some(i) = self.pos(b) {
                self.s[i].2 = true;
                self.nh.retain(|&x| x != b);
            }
            self.q.insert(0, (b, true));
            true
        }
        fn remove(&mut self, b: u64) -> bool {
            if !self.resident(b) {
                return false;
            }
            if let Some(qi) = self.qpos(b) {
                self.q.remove(qi);
            }
            if let Some(i) = self.pos(b) {
                let was_lir = self.s[i].1;
                self.s[i] = (b, false, false);
                self.nh.insert(0, b);
                if was_lir {
                    self.prune_to(0);
                }
            }
            true
        }
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (0u64..24).prop_map(Op::Access),
            1 => proptest::collection::vec(0u64..24, 1..4).prop_map(Op::Prefetch),
            1 => (0u64..24).prop_map(Op::Remove),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn agrees_with_vector_model(
            cap in 1usize..9,
            ratio in prop_oneof![Just(0.01), Just(0.1), Just(0.3), Just(0.5), Just(0.9)],
            bound in prop_oneof![Just(0.0), Just(1.0), Just(2.0), Just(3.0)],
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            let cfg = LirsConfig { hir_ratio: ratio, stack_bound: bound, libcachesim_quirks: false };
            let mut p = Lirs::new(cap, &cfg);
            let mut m = Model { cap, llirs: p.lir_limit(), lhirs: p.hir_limit(), bound: p.max_stack, ..Model::default() };
            for (i, op) in ops.iter().enumerate() {
                model::check_step(&mut p, &mut m, i, op)?;
                let st: Vec<(u64, bool, bool)> = p
                    .s
                    .iter(&p.arena)
                    .map(|h| (p.arena[h].key.block(), p.arena[h].is_lir(), p.arena[h].resident()))
                    .collect();
                prop_assert_eq!(&st, &m.s, "S at step {} {:?}", i, op);
            }
        }

        #[test]
        fn quirks_mode_keeps_its_invariants(
            cap in 1usize..9,
            ops in proptest::collection::vec(op(), 1..300),
        ) {
            let mut p = Lirs::new(cap, &Lirs::preset(Preset::Libcachesim));
            let mut out = Vec::new();
            for (i, op) in ops.iter().enumerate() {
                match op {
                    Op::Access(b) => { p.access(Access::new(k(*b)), &mut out); }
                    Op::Prefetch(bs) => {
                        let group: Vec<Access> = bs.iter().map(|&b| Access::new(k(b))).collect();
                        p.prefetch(&group, &mut out);
                    }
                    Op::Remove(b) => { p.remove(k(*b)); }
                }
                if let Err(e) = p.validate() {
                    return Err(TestCaseError::fail(format!("step {i} {op:?}: {e}")));
                }
            }
        }
    }
}
