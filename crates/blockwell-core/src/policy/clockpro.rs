//! CLOCK-Pro: CLOCK with hot and cold pages, test periods and non-resident cold pages, three hands.
//!
//! **Paper.** S. Jiang, F. Chen and X. Zhang, "CLOCK-Pro: An Effective Improvement of the CLOCK Replacement",
//! USENIX Annual Technical Conference (USENIX ATC '05), 2005. LIRS's idea (keep blocks by reuse distance, not
//! recency) on a CLOCK. Resident blocks are *hot* (small reuse distance) or *cold*; a cold block starts a *test
//! period* when it is faulted in, and a reuse within it shows a reuse distance small enough to make it hot. Cold
//! blocks evicted during their test period stay on the clock as *non-resident* cold entries (at most
//! `nonresident_ratio`·c of them) until their test ends, so that a fault on one still counts as a reuse. All
//! entries share one circular list; "the list head" is just behind `HAND_hot`, where faulted blocks go. The
//! number of resident cold blocks is adapted: the target m_c grows by 1 when a cold block is reused in its test
//! period and shrinks by 1 when a test period ends without a reuse (bounded by `cold_min_ratio`·c and
//! `cold_max_ratio`·c); hot blocks are limited to c − m_c.
//!
//! - *Hit*: the block's reference bit is set. Nothing moves.
//! - *Fault*: if the cache is full, `HAND_cold` runs first (below). Then, if the key still has a non-resident
//!   entry, the block becomes hot at the list head (m_c + 1, then `HAND_hot` runs while hot blocks exceed
//!   c − m_c); otherwise it goes to the list head as a cold block in its test period, or as a hot block during
//!   warm-up (the cache had a free slot and hot blocks are fewer than c − m_c). Then, while the non-resident
//!   entries exceed their bound, `HAND_test` runs.
//! - `HAND_cold` looks for a victim among resident cold blocks, skipping others. A referenced block in its test
//!   period turns hot (its bit cleared, moved to the list head, m_c + 1, `HAND_hot` runs while hot blocks exceed
//!   c − m_c); a referenced block not in its test period starts one (bit cleared, moved to the list head); the
//!   first unreferenced block is evicted: it stays as a non-resident entry if it is in its test period, else it
//!   leaves the clock. The hand then rests on the next entry.
//! - `HAND_hot` clears the bit of referenced hot blocks, turns the first unreferenced one cold (not in a test
//!   period) and stops after it; on the way it ends the test period of every cold entry it passes (a non-resident
//!   one leaves the clock).
//! - `HAND_test` ends the test period of the next cold entry in one (removing it if non-resident).
//! - Ending a test period adapts m_c: + 1 if the block was referenced during it, − 1 otherwise.
//!
//! When `HAND_cold` finds only hot blocks (possible after m_c shrank), `HAND_hot` first turns one cold. The warm-up
//! is not in the paper's text: it is how LIRS fills its LIR set, and what the Caffeine simulator's `ClockPro`
//! does; without it a loop longer than c + the non-resident bound never makes a block hot and misses every access
//! (with it, CLOCK-Pro keeps part of the loop, as LIRS does).
//!
//! **libcachesim 0.3.5's `ClockPro`** (`ClockPro.c`, `ClockPro(init_ref=0, init_ratio_cold=0.5)`) never evicts:
//! its `can_insert` refuses a block when the resident cold blocks have reached their target m_c =
//! ⌊c·`init_ratio_cold`⌋, every block enters cold, and its hands run only when an insert finds the cache full,
//! which the refusal prevents (it admits at most m_c ≤ c blocks). It caches the first ⌊c/2⌋ distinct blocks and
//! misses every other access, at every cache size. `libcachesim_quirks` (on in the `Libcachesim` preset only)
//! reproduces that: m_c starts at ⌊c·`cold_init_ratio`⌋ unclamped and a block is admitted (on a demand miss or a
//! prefetch) only while the resident cold blocks number fewer than m_c. Blockwell then equals libcachesim miss
//! for miss; it is not CLOCK-Pro, and a live cache refuses the flag. (Its hands, had they run, differ from the
//! paper's: every cold block counts as in its test period, `HAND_hot` ends no test period, and a block faulted
//! in from a non-resident entry becomes hot without being cached.)
//!
//! **Prefetch adaptation (seed `001_*` §4, in its spirit; the seed does not study CLOCK-Pro).** A prefetched block
//! goes to the list head as a cold block, flagged *not yet accessed*, **not** in a test period (a prefetch is
//! not a reference), after making room as a fault does. Its first demand access clears the flag, returns
//! [`Outcome::PrefetchHit`] and counts as the fault it saved: the block starts its test period where it is
//! (the reference bit stays clear), or turns hot there during warm-up. A prefetch of a key with a non-resident entry consumes the entry: the block
//! goes to the list head as a cold block still in the test period it had, flagged, and m_c is not adapted; its
//! first demand access then makes it hot (m_c + 1), as the fault would have, if the test period is still running.
//! Ending the test period of a flagged block does not adapt m_c. A flagged block that `HAND_cold` reaches is
//! evicted and leaves the clock (no non-resident entry) and is reported with `unused_prefetch: true`.
//!
//! **Parameters** ([`ClockProConfig`]):
//!
//! | preset | `cold_init_ratio` | `cold_min_ratio` | `cold_max_ratio` | `nonresident_ratio` | `libcachesim_quirks` |
//! |---|---|---|---|---|---|
//! | `Default` | 0.01 | 0.01 | 0.99 | 1.0 | false |
//! | `Libcachesim` | 0.5 | 0.01 | 0.99 | 1.0 | true |
//! | `Butt05` | 0.01 | 0.01 | 0.99 | 1.0 | false (seed `001_*` has no CLOCK-Pro) |
//!
//! m_c starts at ⌊c·`cold_init_ratio`⌋ and stays within [⌊c·`cold_min_ratio`⌋, ⌊c·`cold_max_ratio`⌋], the bounds
//! clamped to 1 ≤ min ≤ max ≤ c (a 1-block cache has no hot block and works as CLOCK with test periods). The paper
//! bounds non-resident entries by c (`nonresident_ratio` 1). The 1 % and 99 % bounds, and starting at the lower one
//! (as LIRS starts with 1 % of the cache for HIR blocks), are those of the Caffeine simulator's `ClockPro`.
//! 0.5 is the libcachesim class's `init_ratio_cold`.
//!
//! **Metadata.** 16 bytes per entry in the arena (8-byte key, two 31-bit links) and a 1-byte state (hot, cold or
//! non-resident; reference bit; test period; prefetch flag) in a side array, for the resident blocks and the
//! non-resident entries alike, plus the handle index (4 bytes + 1 tag byte per bucket, reserved for twice the
//! entries: 11.4–22.9 bytes per entry). Everything is sized up front for c + ⌊c·`nonresident_ratio`⌋ + 1
//! entries: 57–80 bytes per cached block at the default ratio, the non-resident entries included.
//!
//! **Cost.** A hit is one lookup and a bit set. A fault is O(1) amortized: every step of a hand clears a bit,
//! ends a test period, removes an entry or evicts, and hits and faults set at most one bit or start one test
//! period each; one fault can move a hand around the clock. [`Policy::victim`] replays `HAND_cold` (and any
//! `HAND_hot` run it triggers) on a copy-on-write view of the entries it touches, changing nothing. No allocation
//! per access once the arena and index have grown.

use super::{Access, Evicted, Outcome, Policy, Preset, Victim};
use crate::arena::{Arena, Handle, KeyIndex, Keyed, Links, List};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// CLOCK-Pro's parameters.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClockProConfig {
    /// Initial target of resident cold blocks, as a fraction of the cache (libcachesim `init_ratio_cold`).
    pub cold_init_ratio: f64,
    /// Lower bound of the cold target, as a fraction of the cache (at least one block).
    pub cold_min_ratio: f64,
    /// Upper bound of the cold target, as a fraction of the cache.
    pub cold_max_ratio: f64,
    /// Most non-resident cold entries kept, as a fraction of the cache (the paper: 1).
    pub nonresident_ratio: f64,
    /// Reproduce libcachesim 0.3.5's `ClockPro`, which admits blocks only while the cold blocks are below their
    /// initial target and never evicts (see the module docs).
    pub libcachesim_quirks: bool,
}

impl Default for ClockProConfig {
    fn default() -> Self {
        ClockProConfig {
            cold_init_ratio: 0.01,
            cold_min_ratio: 0.01,
            cold_max_ratio: 0.99,
            nonresident_ratio: 1.0,
            libcachesim_quirks: false,
        }
    }
}

/// Entry kinds (the state byte's low 2 bits).
const KIND: u8 = 3;
const HOT: u8 = 1;
const COLD: u8 = 2;
const GHOST: u8 = 3;
/// Reference bit.
const REF: u8 = 4;
/// In its test period.
const TEST: u8 = 8;
/// Prefetched, not yet accessed on demand.
const PREFETCHED: u8 = 16;

#[derive(Clone, Debug)]
struct Node {
    key: crate::arena::PackedKey,
    links: Links,
}

crate::arena::linked_by_field!(Node);
crate::arena::keyed_by_field!(Node);

/// The clock's view that the hands need: entry states, ring order and moves. [`Real`] is the policy's own
/// entries; [`Dry`] a copy-on-write view over them, for [`Policy::victim`].
trait Ring {
    fn st(&self, h: Handle) -> u8;
    fn set_st(&mut self, h: Handle, s: u8);
    /// The entry after `h` on the clock (the direction the hands move), `h` itself if it is alone.
    fn next(&self, h: Handle) -> Handle;
    /// Takes `h` off the clock.
    fn unlink(&mut self, h: Handle);
    /// Puts `h` (off the clock) just before `at`, or alone on an empty clock.
    fn insert_before(&mut self, at: Option<Handle>, h: Handle);
    /// Forgets a non-resident entry taken off the clock.
    fn discard(&mut self, h: Handle);
}

/// Hands, counts and the cold target: everything but the entries.
#[derive(Clone, Copy, Debug)]
struct Core {
    capacity: usize,
    hand_hot: Option<Handle>,
    hand_cold: Option<Handle>,
    hand_test: Option<Handle>,
    n_hot: usize,
    n_cold: usize,
    n_ghost: usize,
    /// m_c, the target number of resident cold blocks.
    cold_target: usize,
    cold_min: usize,
    cold_max: usize,
    max_ghosts: usize,
    quirks: bool,
}

impl Core {
    /// Warm-up: the cache has a free slot and hot blocks are fewer than c − m_c, so a fault enters hot.
    #[inline]
    fn warming(&self) -> bool {
        !self.quirks
            && self.n_hot + self.n_cold < self.capacity
            && self.n_hot < self.capacity - self.cold_target.min(self.capacity)
    }

    #[inline]
    fn adapt(&mut self, up: bool) {
        if self.quirks {
            return;
        }
        self.cold_target = if up { self.cold_target + 1 } else { self.cold_target.saturating_sub(1) };
        self.cold_target = self.cold_target.clamp(self.cold_min, self.cold_max);
    }

    /// Takes `h` off the clock, moving any hand on it to the next entry.
    fn detach<R: Ring>(&mut self, r: &mut R, h: Handle) {
        let n = r.next(h);
        let to = if n == h { None } else { Some(n) };
        for hand in [&mut self.hand_hot, &mut self.hand_cold, &mut self.hand_test] {
            if *hand == Some(h) {
                *hand = to;
            }
        }
        r.unlink(h);
    }

    /// Puts `h` (off the clock) at the list head, just behind `HAND_hot`.
    fn put_at_head<R: Ring>(&mut self, r: &mut R, h: Handle) {
        r.insert_before(self.hand_hot, h);
        if self.hand_hot.is_none() {
            self.hand_hot = Some(h);
            self.hand_cold = Some(h);
            self.hand_test = Some(h);
        }
    }

    fn move_to_head<R: Ring>(&mut self, r: &mut R, h: Handle) {
        self.detach(r, h);
        self.put_at_head(r, h);
    }

    /// Ends the test period of cold entry `h` (resident or not); a non-resident one leaves the clock.
    fn end_test<R: Ring>(&mut self, r: &mut R, h: Handle) {
        let s = r.st(h);
        if s & KIND == GHOST {
            self.adapt(false);
            self.n_ghost -= 1;
            self.detach(r, h);
            r.discard(h);
        } else {
            if s & PREFETCHED == 0 {
                self.adapt(s & REF != 0);
            }
            r.set_st(h, s & !TEST);
        }
    }

    /// `HAND_hot` until it has turned one hot block cold (there is one).
    fn run_hot<R: Ring>(&mut self, r: &mut R) {
        while let Some(h) = self.hand_hot {
            let s = r.st(h);
            let next = r.next(h);
            match s & KIND {
                HOT if s & REF != 0 => {
                    r.set_st(h, s & !REF);
                    self.hand_hot = Some(next);
                }
                HOT => {
                    r.set_st(h, COLD);
                    self.n_hot -= 1;
                    self.n_cold += 1;
                    self.hand_hot = Some(next);
                    return;
                }
                GHOST => self.end_test(r, h), // moves the hand to `next`
                _ => {
                    if s & TEST != 0 {
                        self.end_test(r, h);
                    }
                    self.hand_hot = Some(next);
                }
            }
        }
    }

    /// `HAND_hot` while hot blocks exceed c − m_c.
    fn enforce_hot<R: Ring>(&mut self, r: &mut R) {
        while self.n_hot > 0 && self.n_hot > self.capacity - self.cold_target.min(self.capacity) {
            self.run_hot(r);
        }
    }

    /// Cold block `h` (resident, referenced during its test period) turns hot at the list head.
    fn promote<R: Ring>(&mut self, r: &mut R, h: Handle) {
        r.set_st(h, HOT);
        self.n_cold -= 1;
        self.n_hot += 1;
        self.adapt(true);
        self.move_to_head(r, h);
        self.enforce_hot(r);
    }

    /// `HAND_cold` until it finds the victim: a resident, unreferenced cold block, which it returns unchanged
    /// (the hand rests on the next entry). The cache is full.
    fn reclaim<R: Ring>(&mut self, r: &mut R) -> Option<Handle> {
        loop {
            if self.n_cold == 0 {
                if self.n_hot == 0 {
                    return None;
                }
                self.run_hot(r);
            }
            let h = self.hand_cold?;
            let s = r.st(h);
            let next = r.next(h);
            if s & KIND != COLD {
                self.hand_cold = Some(next);
                continue;
            }
            if s & REF == 0 {
                self.hand_cold = Some(next);
                return Some(h);
            }
            self.hand_cold = Some(next);
            if s & TEST != 0 {
                self.promote(r, h);
            } else {
                r.set_st(h, (s & !REF) | TEST);
                self.move_to_head(r, h);
            }
        }
    }

    /// `HAND_test` until it has ended one test period.
    fn run_test<R: Ring>(&mut self, r: &mut R) {
        while let Some(h) = self.hand_test {
            let s = r.st(h);
            let next = r.next(h);
            let in_test = s & KIND == GHOST || (s & KIND == COLD && s & TEST != 0);
            if in_test {
                self.end_test(r, h);
            }
            if self.hand_test == Some(h) {
                self.hand_test = Some(next);
            }
            if in_test {
                return;
            }
        }
    }
}

/// The policy's own entries.
struct Real<'a> {
    arena: &'a mut Arena<Node>,
    list: &'a mut List,
    st: &'a mut [u8],
    index: &'a mut KeyIndex,
}

impl Ring for Real<'_> {
    #[inline]
    fn st(&self, h: Handle) -> u8 {
        self.st[slot(h)]
    }
    #[inline]
    fn set_st(&mut self, h: Handle, s: u8) {
        self.st[slot(h)] = s;
    }
    #[inline]
    fn next(&self, h: Handle) -> Handle {
        List::next_of(self.arena, h).or(self.list.front()).unwrap_or(h)
    }
    #[inline]
    fn unlink(&mut self, h: Handle) {
        self.list.remove(self.arena, h);
    }
    #[inline]
    fn insert_before(&mut self, at: Option<Handle>, h: Handle) {
        match at {
            Some(a) => self.list.insert_before(self.arena, a, h),
            None => self.list.push_front(self.arena, h),
        }
    }
    #[inline]
    fn discard(&mut self, h: Handle) {
        self.st[slot(h)] = 0;
        self.index.forget(self.arena, h);
    }
}

/// A copy-on-write view of the entries: states and links changed by a dry run live in small maps.
struct Dry<'a> {
    arena: &'a Arena<Node>,
    base_st: &'a [u8],
    st: HashMap<Handle, u8>,
    /// Changed (prev, next) links, `None` at the ends of the underlying list.
    links: HashMap<Handle, (Option<Handle>, Option<Handle>)>,
    front: Option<Handle>,
}

impl Dry<'_> {
    fn links_of(&self, h: Handle) -> (Option<Handle>, Option<Handle>) {
        match self.links.get(&h) {
            Some(&l) => l,
            None => (List::prev_of(self.arena, h), List::next_of(self.arena, h)),
        }
    }
    fn set_prev(&mut self, h: Handle, p: Option<Handle>) {
        let l = self.links_of(h);
        self.links.insert(h, (p, l.1));
    }
    fn set_next(&mut self, h: Handle, n: Option<Handle>) {
        let l = self.links_of(h);
        self.links.insert(h, (l.0, n));
    }
}

impl Ring for Dry<'_> {
    fn st(&self, h: Handle) -> u8 {
        self.st.get(&h).copied().unwrap_or(self.base_st[slot(h)])
    }
    fn set_st(&mut self, h: Handle, s: u8) {
        self.st.insert(h, s);
    }
    fn next(&self, h: Handle) -> Handle {
        self.links_of(h).1.or(self.front).unwrap_or(h)
    }
    fn unlink(&mut self, h: Handle) {
        let (p, n) = self.links_of(h);
        match p {
            Some(p) => self.set_next(p, n),
            None => self.front = n,
        }
        if let Some(n) = n {
            self.set_prev(n, p);
        }
        self.links.insert(h, (None, None));
    }
    fn insert_before(&mut self, at: Option<Handle>, h: Handle) {
        match at {
            None => {
                self.front = Some(h);
                self.links.insert(h, (None, None));
            }
            Some(a) => {
                let p = self.links_of(a).0;
                self.links.insert(h, (p, Some(a)));
                match p {
                    Some(p) => self.set_next(p, Some(h)),
                    None => self.front = Some(h),
                }
                self.set_prev(a, Some(h));
            }
        }
    }
    fn discard(&mut self, _h: Handle) {}
}

/// The CLOCK-Pro policy. The clock is `list` read front to back and wrapping around; the hands move that way.
#[derive(Clone, Debug)]
pub struct ClockPro {
    core: Core,
    arena: Arena<Node>,
    list: List,
    /// Each entry's state byte, indexed by handle.
    st: Vec<u8>,
    index: KeyIndex,
}

#[inline]
fn slot(h: Handle) -> usize {
    (h.get() - 1) as usize
}

impl ClockPro {
    #[inline]
    fn real(&mut self) -> (&mut Core, Real<'_>) {
        (
            &mut self.core,
            Real { arena: &mut self.arena, list: &mut self.list, st: &mut self.st, index: &mut self.index },
        )
    }

    /// Evicts the victim `HAND_cold` finds, leaving a non-resident entry if it was in its test period, then bounds
    /// the non-resident entries.
    fn evict_one(&mut self, out: &mut Vec<Evicted>) {
        let (core, mut r) = self.real();
        let Some(v) = core.reclaim(&mut r) else { return };
        let s = r.st(v);
        let key = r.arena[v].key();
        out.push(Evicted { key, unused_prefetch: s & PREFETCHED != 0 });
        core.n_cold -= 1;
        if s & TEST != 0 && s & PREFETCHED == 0 {
            r.set_st(v, GHOST);
            core.n_ghost += 1;
        } else {
            core.detach(&mut r, v);
            r.discard(v);
        }
        while core.n_ghost > core.max_ghosts {
            core.run_test(&mut r);
        }
    }

    /// A fault (or a prefetch) of `key`, not resident: makes room, then inserts. Returns whether it was inserted.
    fn fault(&mut self, key: BlockKey, prefetched: bool, out: &mut Vec<Evicted>) -> bool {
        if self.core.quirks && self.core.n_cold >= self.core.cold_target {
            return false;
        }
        let warm = !prefetched && self.core.warming();
        if self.core.n_hot + self.core.n_cold >= self.core.capacity {
            self.evict_one(out);
        }
        match self.index.get(&self.arena, key) {
            Some(h) => {
                // A non-resident entry still in its test period.
                let (core, mut r) = self.real();
                core.n_ghost -= 1;
                if prefetched {
                    r.set_st(h, COLD | TEST | PREFETCHED);
                    core.n_cold += 1;
                    core.move_to_head(&mut r, h);
                } else {
                    r.set_st(h, COLD);
                    core.n_cold += 1;
                    core.promote(&mut r, h);
                }
            }
            None => {
                let h = self.arena.alloc(Node { key: crate::arena::PackedKey::new(key), links: Links::default() });
                if self.st.len() <= slot(h) {
                    self.st.resize(slot(h) + 1, 0);
                }
                self.index.insert(&self.arena, h);
                let (core, mut r) = self.real();
                if warm {
                    r.set_st(h, HOT);
                    core.n_hot += 1;
                } else {
                    r.set_st(h, if prefetched { COLD | PREFETCHED } else { COLD | TEST });
                    core.n_cold += 1;
                }
                core.put_at_head(&mut r, h);
            }
        }
        true
    }

    /// A demand access to resident entry `h`.
    #[inline]
    fn on_hit(&mut self, h: Handle) -> Outcome {
        let s = self.st[slot(h)];
        if s & PREFETCHED == 0 {
            self.st[slot(h)] = s | REF;
            return Outcome::Hit;
        }
        if s & TEST != 0 {
            // Prefetched over a non-resident entry whose test period is still running: the fault it saved
            // would have made the block hot.
            let (core, mut r) = self.real();
            core.promote(&mut r, h);
        } else if self.core.warming() {
            // The fault it saved would have found room for a hot block.
            self.st[slot(h)] = HOT;
            self.core.n_cold -= 1;
            self.core.n_hot += 1;
        } else {
            self.st[slot(h)] = (s & !PREFETCHED) | TEST;
        }
        Outcome::PrefetchHit
    }

    /// The resident entry of `key`.
    #[inline]
    fn resident(&self, key: BlockKey) -> Option<Handle> {
        self.index.get(&self.arena, key).filter(|&h| self.st[slot(h)] & KIND != GHOST)
    }

    /// The clock from `HAND_hot` on: (key, kind 'H'/'C'/'N', referenced, in test, prefetched). For tests.
    #[cfg(test)]
    fn entries(&self) -> Vec<(BlockKey, char, bool, bool, bool)> {
        let mut v = Vec::new();
        let Some(start) = self.core.hand_hot else { return v };
        let mut h = start;
        loop {
            let s = self.st[slot(h)];
            let kind = match s & KIND {
                HOT => 'H',
                COLD => 'C',
                _ => 'N',
            };
            v.push((self.arena[h].key(), kind, s & REF != 0, s & TEST != 0, s & PREFETCHED != 0));
            h = List::next_of(&self.arena, h).or(self.list.front()).unwrap_or(start);
            if h == start || v.len() > self.list.len() {
                return v;
            }
        }
    }

    /// The current cold target m_c.
    pub fn cold_target(&self) -> usize {
        self.core.cold_target
    }
}

impl Policy for ClockPro {
    type Config = ClockProConfig;

    fn preset(preset: Preset) -> ClockProConfig {
        match preset {
            Preset::Libcachesim => {
                ClockProConfig { cold_init_ratio: 0.5, libcachesim_quirks: true, ..ClockProConfig::default() }
            }
            Preset::Default | Preset::Butt05 => ClockProConfig::default(),
        }
    }

    fn check_config(c: &ClockProConfig) -> Result<(), String> {
        for (name, v) in [
            ("cold_init_ratio", c.cold_init_ratio),
            ("cold_min_ratio", c.cold_min_ratio),
            ("cold_max_ratio", c.cold_max_ratio),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} must be within 0..=1, not {v}"));
            }
        }
        if c.cold_min_ratio > c.cold_max_ratio {
            return Err(format!("cold_min_ratio {} over cold_max_ratio {}", c.cold_min_ratio, c.cold_max_ratio));
        }
        if !(0.0..=16.0).contains(&c.nonresident_ratio) {
            return Err(format!("nonresident_ratio must be within 0..=16, not {}", c.nonresident_ratio));
        }
        Ok(())
    }

    fn libcachesim_quirks(c: &ClockProConfig) -> bool {
        c.libcachesim_quirks
    }

    fn new(capacity: usize, c: &ClockProConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        if let Err(e) = Self::check_config(c) {
            panic!("invalid CLOCK-Pro configuration: {e}");
        }
        let of = |r: f64| (capacity as f64 * r) as usize;
        let cold_min = of(c.cold_min_ratio).clamp(1, capacity);
        let cold_max = of(c.cold_max_ratio).clamp(cold_min, capacity);
        let cold_target =
            if c.libcachesim_quirks { of(c.cold_init_ratio) } else { of(c.cold_init_ratio).clamp(cold_min, cold_max) };
        let max_ghosts = of(c.nonresident_ratio);
        let entries = capacity + max_ghosts + 1;
        ClockPro {
            core: Core {
                capacity,
                hand_hot: None,
                hand_cold: None,
                hand_test: None,
                n_hot: 0,
                n_cold: 0,
                n_ghost: 0,
                cold_target,
                cold_min,
                cold_max,
                max_ghosts,
                quirks: c.libcachesim_quirks,
            },
            arena: Arena::with_capacity(entries),
            list: List::new(),
            st: vec![0; entries],
            index: KeyIndex::with_capacity(entries),
        }
    }

    fn capacity(&self) -> usize {
        self.core.capacity
    }

    fn len(&self) -> usize {
        self.core.n_hot + self.core.n_cold
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.resident(key).is_some()
    }

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        match self.resident(access.key) {
            Some(h) => self.on_hit(h),
            None => {
                self.fault(access.key, false, out);
                Outcome::Miss
            }
        }
    }

    #[inline]
    fn hit(&mut self, access: Access, _out: &mut Vec<Evicted>) -> Option<Outcome> {
        self.resident(access.key).map(|h| self.on_hit(h))
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        let mut n = 0;
        for a in group {
            if !self.contains(a.key) && self.fault(a.key, true, out) {
                n += 1;
            }
        }
        n
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        let Some(h) = self.resident(key) else { return false };
        let (core, mut r) = self.real();
        if r.st(h) & KIND == HOT {
            core.n_hot -= 1;
        } else {
            core.n_cold -= 1;
        }
        core.detach(&mut r, h);
        r.discard(h);
        true
    }

    fn validate(&self) -> Result<(), String> {
        let c = &self.core;
        self.list.check(&self.arena)?;
        let (mut hot, mut cold, mut ghost) = (0, 0, 0);
        for h in self.list.iter(&self.arena) {
            let s = self.st[slot(h)];
            let key = self.arena[h].key();
            match s & KIND {
                HOT if s & (TEST | PREFETCHED) != 0 => return Err(format!("hot {key} in test or prefetched")),
                HOT => hot += 1,
                COLD if s & PREFETCHED != 0 && s & REF != 0 => {
                    return Err(format!("unaccessed prefetched {key} referenced"))
                }
                COLD => cold += 1,
                GHOST if s & !KIND != 0 => return Err(format!("non-resident {key} with bits {s:#x}")),
                GHOST => ghost += 1,
                _ => return Err(format!("{key} on the clock with no state")),
            }
            if self.index.get(&self.arena, key) != Some(h) {
                return Err(format!("{key} on the clock but not indexed"));
            }
        }
        if (hot, cold, ghost) != (c.n_hot, c.n_cold, c.n_ghost) {
            return Err(format!(
                "counted hot/cold/non-resident {hot}/{cold}/{ghost}, recorded {}/{}/{}",
                c.n_hot, c.n_cold, c.n_ghost
            ));
        }
        if self.index.len() != self.list.len() || self.arena.len() != self.list.len() {
            return Err(format!(
                "clock {} / index {} / arena {} disagree",
                self.list.len(),
                self.index.len(),
                self.arena.len()
            ));
        }
        if hot + cold > c.capacity {
            return Err(format!("{} blocks over capacity {}", hot + cold, c.capacity));
        }
        if ghost > c.max_ghosts {
            return Err(format!("{ghost} non-resident entries over {}", c.max_ghosts));
        }
        if !c.quirks && !(c.cold_min..=c.cold_max).contains(&c.cold_target) {
            return Err(format!("cold target {} outside {}..={}", c.cold_target, c.cold_min, c.cold_max));
        }
        for (name, hand) in [("hot", c.hand_hot), ("cold", c.hand_cold), ("test", c.hand_test)] {
            match hand {
                None if !self.list.is_empty() => return Err(format!("no {name} hand on a non-empty clock")),
                Some(h) if self.st.get(slot(h)).copied().unwrap_or(0) == 0 => {
                    return Err(format!("{name} hand on a free entry"))
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.arena.heap_bytes() + self.st.capacity() + self.index.heap_bytes()
    }

    fn victim(&self, incoming: BlockKey) -> Victim {
        let c = &self.core;
        if self.contains(incoming) || (c.quirks && c.n_cold >= c.cold_target) || c.n_hot + c.n_cold < c.capacity {
            return Victim::None;
        }
        let mut dry = Dry {
            arena: &self.arena,
            base_st: &self.st,
            st: HashMap::new(),
            links: HashMap::new(),
            front: self.list.front(),
        };
        let mut core = self.core;
        match core.reclaim(&mut dry) {
            Some(v) => Victim::Block(self.arena[v].key()),
            None => Victim::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::proptest_model as model;
    use super::super::{PolicyKind, PolicySpec};
    use super::*;
    use crate::policy::testutil::{acc, ev, k, pf};
    use blockwell_testkit::Rng;
    use proptest::prelude::*;

    fn cp(cap: usize) -> ClockPro {
        ClockPro::new(cap, &ClockProConfig::default())
    }

    fn with(cap: usize, init: f64, min: f64, max: f64, nonres: f64) -> ClockPro {
        ClockPro::new(
            cap,
            &ClockProConfig {
                cold_init_ratio: init,
                cold_min_ratio: min,
                cold_max_ratio: max,
                nonresident_ratio: nonres,
                libcachesim_quirks: false,
            },
        )
    }

    /// The clock as a string from `HAND_hot` on: H/C/N per entry, lower case when referenced, `t` after
    /// an entry in its test period, `p` after a prefetched one.
    fn clock(p: &ClockPro) -> String {
        p.entries()
            .into_iter()
            .map(|(key, kind, r, t, pf)| {
                let k = if r { kind.to_ascii_lowercase() } else { kind };
                format!("{}{}{}{}", k, key.block(), if t { "t" } else { "" }, if pf { "p" } else { "" })
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn warm_up_hot_then_cold_test_periods_and_promotions() {
        let mut p = cp(3);
        for b in [1, 2, 3] {
            assert_eq!(acc(&mut p, b), (Outcome::Miss, vec![]));
        }
        // Warm-up: faults enter hot while hot blocks are fewer than c - m_c = 2; then cold in a test period.
        assert_eq!(clock(&p), "H1 H2 C3t");
        assert_eq!(p.cold_target(), 1);
        assert_eq!(acc(&mut p, 3).0, Outcome::Hit);
        assert_eq!(clock(&p), "H1 H2 c3t");
        // HAND_cold passes 1 and 2 and finds 3 referenced in its test: hot (m_c 2, so 1 hot block allowed), and
        // HAND_hot turns 1 and 2 cold; HAND_cold goes on and evicts 1 (not in a test period: it leaves the clock).
        assert_eq!(p.victim(k(4)), Victim::Block(k(1)));
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(p.cold_target(), 2);
        assert_eq!(clock(&p), "H3 C2 C4t");
        // 2 referenced out of a test period: it starts one at the list head; 4, unreferenced in its test, is evicted
        // and stays as a non-resident entry.
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        assert_eq!(p.victim(k(5)), Victim::Block(k(4)));
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![ev(4, false)]));
        assert_eq!(clock(&p), "H3 N4 C2t C5t");
        // A fault on 4's entry: HAND_cold evicts 2 (non-resident now), 4 turns hot at the list head (m_c stays at
        // its maximum 2) and HAND_hot turns 3 cold.
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(2, false)]));
        assert_eq!(clock(&p), "N2 C5t H4 C3");
        assert_eq!(p.cold_target(), 2);
        assert!(p.contains(k(4)) && !p.contains(k(2)));
    }

    #[test]
    fn hand_test_bounds_the_non_resident_entries() {
        let mut p = cp(2);
        acc(&mut p, 1);
        acc(&mut p, 2);
        acc(&mut p, 3); // 2 evicted in its test: non-resident
        assert_eq!(clock(&p), "H1 N2 C3t");
        acc(&mut p, 4); // HAND_cold passes 1 and 2, evicts 3
        assert_eq!(clock(&p), "H1 N2 N3 C4t");
        // A third non-resident entry is one over the bound c = 2: HAND_test removes 2, the oldest.
        assert_eq!(acc(&mut p, 5), (Outcome::Miss, vec![ev(4, false)]));
        assert_eq!(clock(&p), "H1 N3 N4 C5t");
    }

    #[test]
    fn capacity_one_works_as_a_clock_with_test_periods() {
        let mut p = cp(1);
        acc(&mut p, 1);
        acc(&mut p, 1);
        // 1 referenced in its test: promoted, then HAND_hot turns it cold again (no room for a hot block), HAND_cold
        // evicts it; 1 leaves the clock (not in test any more).
        assert_eq!(acc(&mut p, 2), (Outcome::Miss, vec![ev(1, false)]));
        assert_eq!(acc(&mut p, 3), (Outcome::Miss, vec![ev(2, false)]));
        assert_eq!(acc(&mut p, 3).0, Outcome::Hit);
        p.validate().unwrap();
    }

    #[test]
    fn scans_do_not_flush_hot_blocks() {
        // A hot set of 50 blocks, used alone at first (it warms up hot), then interleaved with a long scan that
        // touches two new blocks per hot access: CLOCK-Pro keeps the hot set (LRU would miss every hot access).
        let mut p = cp(100);
        for b in 0..50 {
            acc(&mut p, b);
        }
        let mut misses_hot = 0;
        for round in 0..50u64 {
            for b in 0..50 {
                if acc(&mut p, b).0 == Outcome::Miss {
                    misses_hot += 1;
                }
                acc(&mut p, 1_000 + round * 200 + b);
                acc(&mut p, 1_000 + round * 200 + 100 + b);
            }
        }
        assert_eq!(misses_hot, 0);
    }

    #[test]
    fn prefetched_blocks_start_their_test_period_at_their_first_access() {
        let mut p = cp(3);
        acc(&mut p, 1);
        assert_eq!(pf(&mut p, &[2, 3, 1]), (2, vec![]));
        assert_eq!(clock(&p), "H1 C2p C3p", "a prefetch is not a reference: cold, no test period");
        assert_eq!(acc(&mut p, 2).0, Outcome::PrefetchHit);
        assert_eq!(clock(&p), "H1 C2t C3p", "in its test period, not referenced, not moved");
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        // HAND_cold: 1 hot, passed; 2 referenced in its test, promoted (HAND_hot turns 1 cold); 3, an unused
        // prefetch, evicted and off the clock.
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![ev(3, true)]));
        assert_eq!(clock(&p), "H2 C1 C4t");
        // During warm-up the first access of a prefetched block makes it hot, as its fault would have.
        let mut q = cp(4);
        assert_eq!(pf(&mut q, &[1]), (1, vec![]));
        assert_eq!(acc(&mut q, 1).0, Outcome::PrefetchHit);
        assert_eq!(clock(&q), "H1");
    }

    #[test]
    fn a_prefetch_consumes_a_non_resident_entry_and_the_first_access_promotes() {
        let mut p = cp(2);
        acc(&mut p, 1);
        acc(&mut p, 2);
        acc(&mut p, 3); // 2 evicted, non-resident
        assert_eq!(clock(&p), "H1 N2 C3t");
        let target = p.cold_target();
        assert_eq!(pf(&mut p, &[2]), (1, vec![ev(3, false)]));
        assert!(clock(&p).contains("C2tp"), "{}", clock(&p));
        assert_eq!(p.cold_target(), target, "a prefetch does not adapt m_c");
        assert_eq!(acc(&mut p, 2).0, Outcome::PrefetchHit);
        assert!(clock(&p).contains("H2"), "{}", clock(&p));
    }

    #[test]
    fn remove_keeps_non_resident_entries() {
        let mut p = cp(2);
        acc(&mut p, 1);
        acc(&mut p, 2);
        acc(&mut p, 3); // 2 non-resident
        assert!(!p.remove(k(2)));
        assert!(p.remove(k(3)));
        assert!(!p.remove(k(3)));
        p.validate().unwrap();
        assert_eq!(acc(&mut p, 4), (Outcome::Miss, vec![]));
        assert!(clock(&p).contains("N2"));
    }

    #[test]
    fn libcachesim_quirks_admit_the_first_half_and_never_evict() {
        let mut p = ClockPro::new(10, &ClockPro::preset(Preset::Libcachesim));
        let mut hits = 0;
        for round in 0..3 {
            for b in 0..20 {
                let (o, out) = acc(&mut p, b);
                assert!(out.is_empty());
                if o.is_hit() {
                    hits += 1;
                    assert!(b < 5 && round > 0);
                }
                assert_eq!(p.victim(k(100)), Victim::None);
            }
        }
        assert_eq!(hits, 10);
        assert_eq!(p.len(), 5);
        assert_eq!(pf(&mut p, &[50]), (0, vec![]));
        let mut p1 = ClockPro::new(1, &ClockPro::preset(Preset::Libcachesim));
        assert_eq!(acc(&mut p1, 1), (Outcome::Miss, vec![]));
        assert_eq!(p1.len(), 0, "a 1-block cache has m_c = 0: nothing is admitted");
    }

    #[test]
    fn victim_is_what_the_next_miss_evicts() {
        let mut rng = Rng(5);
        for cap in [1usize, 2, 3, 8, 40] {
            for nonres in [0.0, 1.0, 2.0] {
                let mut p = with(cap, 0.3, 0.01, 0.99, nonres);
                let mut out = Vec::new();
                for _ in 0..4000 {
                    let b = rng.next() % (cap as u64 * 3);
                    let v = p.victim(k(b));
                    out.clear();
                    match rng.next() % 10 {
                        0 => {
                            p.remove(k(b));
                            continue;
                        }
                        1 => {
                            p.prefetch(&[Access::new(k(b))], &mut out);
                            continue;
                        }
                        _ => {}
                    }
                    p.access(Access::new(k(b)), &mut out);
                    p.validate().unwrap();
                    match v {
                        Victim::Block(x) => assert_eq!(out.iter().map(|e| e.key).collect::<Vec<_>>(), vec![x]),
                        Victim::None => assert!(out.is_empty()),
                        Victim::Unknown => panic!("CLOCK-Pro always knows"),
                    }
                }
            }
        }
    }

    #[test]
    fn metadata_is_as_documented() {
        assert_eq!(std::mem::size_of::<Node>(), 16);
        for cap in [1_000, 10_000, 100_000, 1 << 20] {
            let per_block = cp(cap).heap_bytes() as f64 / cap as f64;
            assert!((57.0..=80.0).contains(&per_block), "{per_block} bytes per block at {cap}");
        }
    }

    #[test]
    fn presets_and_checks() {
        let spec = PolicySpec::new(PolicyKind::ClockPro);
        assert!(spec.libcachesim_quirks(Preset::Libcachesim).unwrap());
        assert!(!spec.libcachesim_quirks(Preset::Default).unwrap());
        assert_eq!(spec.config(Preset::Libcachesim).unwrap()["cold_init_ratio"], 0.5);
        assert!(PolicySpec::parse("clockpro(cold_init_ratio=0.2)").is_ok());
        for bad in ["clock-pro(cold_init_ratio=1.5)", "clock-pro(cold_min_ratio=0.5,cold_max_ratio=0.4)"] {
            assert!(PolicySpec::parse(bad).is_err(), "{bad}");
        }
    }

    /// A plain transcription of the rules in the module docs: the clock is a `Vec` of entries, the hands hold
    /// keys.
    #[derive(Clone, Debug)]
    struct Model {
        cap: usize,
        ring: Vec<(u64, u8)>,
        hot: Option<u64>,
        cold: Option<u64>,
        test: Option<u64>,
        mc: usize,
        min: usize,
        max: usize,
        max_ghosts: usize,
    }

    impl Model {
        fn new(cap: usize, init: f64, min: f64, max: f64, nonres: f64) -> Self {
            let of = |r: f64| (cap as f64 * r) as usize;
            let min = of(min).clamp(1, cap);
            let max = of(max).clamp(min, cap);
            Model {
                cap,
                ring: vec![],
                hot: None,
                cold: None,
                test: None,
                mc: of(init).clamp(min, max),
                min,
                max,
                max_ghosts: of(nonres),
            }
        }
        fn pos(&self, b: u64) -> Option<usize> {
            self.ring.iter().position(|e| e.0 == b)
        }
        fn st(&self, b: u64) -> u8 {
            self.ring[self.pos(b).unwrap()].1
        }
        fn set(&mut self, b: u64, s: u8) {
            let i = self.pos(b).unwrap();
            self.ring[i].1 = s;
        }
        fn next(&self, b: u64) -> u64 {
            self.ring[(self.pos(b).unwrap() + 1) % self.ring.len()].0
        }
        fn count(&self, kind: u8) -> usize {
            self.ring.iter().filter(|e| e.1 & KIND == kind).count()
        }
        fn adapt(&mut self, up: bool) {
            self.mc = if up { self.mc + 1 } else { self.mc.saturating_sub(1) }.clamp(self.min, self.max);
        }
        fn take(&mut self, b: u64) {
            let n = self.next(b);
            let to = if n == b { None } else { Some(n) };
            for h in [&mut self.hot, &mut self.cold, &mut self.test] {
                if *h == Some(b) {
                    *h = to;
                }
            }
            let i = self.pos(b).unwrap();
            self.ring.remove(i);
        }
        fn put_at_head(&mut self, b: u64, s: u8) {
            match self.hot {
                None => {
                    self.ring.push((b, s));
                    (self.hot, self.cold, self.test) = (Some(b), Some(b), Some(b));
                }
                Some(h) => {
                    let i = self.pos(h).unwrap();
                    self.ring.insert(i, (b, s));
                }
            }
        }
        fn end_test(&mut self, b: u64) {
            let s = self.st(b);
            if s & KIND == GHOST {
                self.adapt(false);
                self.take(b);
            } else {
                if s & PREFETCHED == 0 {
                    self.adapt(s & REF != 0);
                }
                self.set(b, s & !TEST);
            }
        }
        fn run_hot(&mut self) {
            loop {
                let b = self.hot.unwrap();
                let s = self.st(b);
                let next = self.next(b);
                if s & KIND == HOT {
                    self.hot = Some(next);
                    if s & REF != 0 {
                        self.set(b, HOT);
                    } else {
                        self.set(b, COLD);
                        return;
                    }
                } else if s & KIND == GHOST {
                    self.end_test(b);
                } else {
                    if s & TEST != 0 {
                        self.end_test(b);
                    }
                    self.hot = Some(next);
                }
            }
        }
        fn promote(&mut self, b: u64) {
            self.adapt(true);
            self.take(b);
            self.put_at_head(b, HOT);
            while self.count(HOT) > 0 && self.count(HOT) > self.cap - self.mc {
                self.run_hot();
            }
        }
        fn evict(&mut self, evicted: &mut Vec<u64>) {
            let v = loop {
                if self.count(COLD) == 0 {
                    self.run_hot();
                }
                let b = self.cold.unwrap();
                let s = self.st(b);
                self.cold = Some(self.next(b));
                if s & KIND != COLD {
                    continue;
                }
                if s & REF == 0 {
                    break b;
                }
                if s & TEST != 0 {
                    self.promote(b);
                } else {
                    self.take(b);
                    self.put_at_head(b, COLD | TEST);
                }
            };
            evicted.push(v);
            let s = self.st(v);
            if s & TEST != 0 && s & PREFETCHED == 0 {
                self.set(v, GHOST);
            } else {
                self.take(v);
            }
            while self.count(GHOST) > self.max_ghosts {
                loop {
                    let b = self.test.unwrap();
                    let s = self.st(b);
                    let next = self.next(b);
                    let in_test = s & KIND == GHOST || (s & KIND == COLD && s & TEST != 0);
                    if in_test {
                        self.end_test(b);
                    }
                    if self.test == Some(b) {
                        self.test = Some(next);
                    }
                    if in_test {
                        break;
                    }
                }
            }
        }
        fn resident(&self, b: u64) -> bool {
            self.pos(b).is_some_and(|i| self.ring[i].1 & KIND != GHOST)
        }
        fn warming(&self) -> bool {
            self.count(HOT) + self.count(COLD) < self.cap && self.count(HOT) < self.cap - self.mc
        }
        fn fault(&mut self, b: u64, prefetched: bool, evicted: &mut Vec<u64>) {
            let warm = !prefetched && self.warming();
            if self.count(HOT) + self.count(COLD) >= self.cap {
                self.evict(evicted);
            }
            if self.pos(b).is_some() {
                if prefetched {
                    self.take(b);
                    self.put_at_head(b, COLD | TEST | PREFETCHED);
                } else {
                    self.set(b, COLD);
                    self.promote(b);
                }
            } else if warm {
                self.put_at_head(b, HOT);
            } else {
                self.put_at_head(b, if prefetched { COLD | PREFETCHED } else { COLD | TEST });
            }
        }
    }

    impl model::Reference for Model {
        fn access(&mut self, b: u64, evicted: &mut Vec<u64>) -> Outcome {
            if !self.resident(b) {
                self.fault(b, false, evicted);
                return Outcome::Miss;
            }
            let s = self.st(b);
            if s & PREFETCHED == 0 {
                self.set(b, s | REF);
                Outcome::Hit
            } else {
                if s & TEST != 0 {
                    self.set(b, COLD);
                    self.promote(b);
                } else if self.warming() {
                    self.set(b, HOT);
                } else {
                    self.set(b, (s & !PREFETCHED) | TEST);
                }
                Outcome::PrefetchHit
            }
        }
        fn prefetch(&mut self, b: u64, evicted: &mut Vec<u64>) -> bool {
            if self.resident(b) {
                return false;
            }
            self.fault(b, true, evicted);
            true
        }
        fn remove(&mut self, b: u64) -> bool {
            if !self.resident(b) {
                return false;
            }
            self.take(b);
            true
        }
        fn len(&self) -> usize {
            self.count(HOT) + self.count(COLD)
        }
    }

    proptest! {
        #[test]
        fn agrees_with_a_set_model(
            cap in 1usize..9,
            nonres in prop_oneof![Just(0.0), Just(1.0), Just(2.0)],
            ops in prop::collection::vec(model::op(), 1..300),
        ) {
            model::run(with(cap, 0.3, 0.01, 0.99, nonres), &ops)?;
        }

        #[test]
        fn agrees_with_the_reference_model(
            cap in 1usize..9,
            init in 0.0f64..1.0,
            nonres in prop_oneof![Just(0.0), Just(0.5), Just(1.0), Just(2.0)],
            ops in prop::collection::vec(model::op(), 1..300),
        ) {
            let mut p = with(cap, init, 0.01, 0.99, nonres);
            let mut m = Model::new(cap, init, 0.01, 0.99, nonres);
            for (i, op) in ops.iter().enumerate() {
                model::check_step(&mut p, &mut m, i, op)?;
                prop_assert_eq!(p.cold_target(), m.mc, "m_c at step {}", i);
            }
        }
    }
}
