//! REDCAP, the RAM Enhanced Disk Cache Project (seed `000_*`: "Effects of the file system and the cache size
//! on REDCAP"; the design is from the authors' first REDCAP paper, which the seed cites as \[2\]).
//!
//! REDCAP is "a new level in the cache hierarchy ... just between the page cache and the disk cache, which works
//! as an extension in the main memory of the disk cache": a cache of `N` *segments* of `S` consecutive blocks
//! that "imitates the behavior of the disk's one by prefetching some consecutive blocks". This module has its
//! two parts, both free of time and I/O like the rest of the engine:
//!
//! - [`Redcap`], the segment cache. "The prefetching is performed only when a read operation takes places and a
//!   cache miss occurs. It is not performed during write requests or on a cache hit": [`Redcap::read`] reports
//!   the blocks that hit and, for every touched segment not cached, the read of the whole *aligned* segment
//!   (blocks `s*S .. (s+1)*S`, clipped at the device end). "REDCAP does not take part in writes, it only updates
//!   its cache, and sends write requests to disk": [`Redcap::write`] counts the cached blocks whose copies the
//!   driver must update, allocates nothing and does not change recency; the driver writes to the disk.
//!   Replacement is LRU over segments: the seed does not name the policy, and LRU is what the disk caches REDCAP
//!   imitates use for their segments. Presets (seed §3): `64x128k` (8 MB) and `128x128k` (16 MB); "the segment
//!   size has been fixed at 128 KB ... the maximum request size allowed by the operating system".
//! - [`RedcapControl`], the activation–deactivation algorithm: it "compares the time that the REDCAP cache needs
//!   to process the requests, with the estimated time to process them without cache, and turns the cache on/off
//!   accordingly ... independent of the underlying device, because it only takes into account the I/O time of
//!   the issued disk requests". "The initial state of REDCAP is active." While off, the cache "simulate\[s\] the
//!   cache behavior when it is inactive" (the seed blames the small loss on 512 KB strided reads on that
//!   simulation): the driver keeps calling [`Redcap::read`] so the segment state stays current, but executes
//!   the demand requests directly, and estimates the time the cache would have taken.
//!
//! The seeds do not give the controller's constants, so Blockwell's are documented here: decisions are taken
//! at the end of each *period* of `period` requests (default 64) on the sums over that period of the two
//! times; the cache switches off when `with > without × (1 + margin)` and back on when
//! `with × (1 + margin) < without`, `margin_pct` default 5 (hysteresis: a tie keeps the current state). A
//! back-off damps flapping: when the cache is switched off at most [`SHORT_ON_PERIODS`] periods after being
//! switched on, the estimate that switched it on proved wrong, and it then stays off for a hold of 1, 2, 4 …
//! periods (doubling at each such reversal, up to `max_hold_periods`, default 64) before the estimate may switch
//! it on again; a switch-off after a longer active stretch clears the hold. Each
//! observation has one measured time and one estimated time: while active the driver measures the I/O time with
//! the cache and estimates the time without it (a shadow disk model fed the demand stream alone); while off it
//! measures the time without the cache and estimates the time with it (the shadow disk model fed the segment
//! reads [`Redcap::read`] proposes). The controller counts the measured time spent active and inactive and the
//! number of switches.
//!
//! **State**: 24 bytes per segment slot (segment key, length, LRU links) plus the index's 16-byte entry (key and
//! slot) and control byte per segment; no per-block state.

use crate::key::{BlockKey, MAX_BLOCK};
use crate::prefetch::{Fetch, U64Map};

/// Configuration errors.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum RedcapError {
    #[error("segments: must be between 1 and 2^31, got {0}")]
    Segments(usize),
    #[error("segment_blocks: must be at least 1, got {0}")]
    SegmentBlocks(u64),
    #[error("unknown REDCAP preset '{0}' (known: 64x128k, 128x128k)")]
    Preset(String),
    #[error("period: must be at least 1 request")]
    Period,
}

/// Size of a [`Redcap`] cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedcapConfig {
    /// Number of segments (N).
    pub segments: usize,
    /// Blocks per segment (S).
    pub segment_blocks: u64,
}

impl RedcapConfig {
    /// `segments` segments of `segment_kib` KiB at `block_size`-byte blocks.
    pub fn from_kib(segments: usize, segment_kib: u64, block_size: u64) -> Self {
        RedcapConfig { segments, segment_blocks: crate::prefetch::kib_to_blocks(segment_kib, block_size) }
    }

    /// The seed's configurations: `64x128k` and `128x128k`.
    pub fn preset(name: &str, block_size: u64) -> Result<Self, RedcapError> {
        match name.to_ascii_lowercase().as_str() {
            "64x128k" | "64x128kb" => Ok(Self::from_kib(64, 128, block_size)),
            "128x128k" | "128x128kb" => Ok(Self::from_kib(128, 128, block_size)),
            _ => Err(RedcapError::Preset(name.to_string())),
        }
    }
}

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Slot {
    /// Raw key of the segment's first block.
    seg: u64,
    /// Blocks of the segment that exist (the last segment of a device may be short).
    len: u32,
    prev: u32,
    next: u32,
}

/// What a read found, and what to read for it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadPlan {
    /// Blocks of the request found in the cache.
    pub hit_blocks: u64,
    /// Blocks of the request not found.
    pub miss_blocks: u64,
    /// Whole-segment reads (synchronous: the request waits), one per missed segment, in ascending order.
    pub fetches: Vec<Fetch>,
    /// First blocks of the segments evicted to make room, in eviction order.
    pub evicted: Vec<BlockKey>,
}

impl ReadPlan {
    /// The request hit: every block was cached.
    pub fn is_hit(&self) -> bool {
        self.miss_blocks == 0
    }

    pub fn clear(&mut self) {
        self.hit_blocks = 0;
        self.miss_blocks = 0;
        self.fetches.clear();
        self.evicted.clear();
    }
}

/// The REDCAP segment cache (see the module docs).
#[derive(Clone, Debug)]
pub struct Redcap {
    config: RedcapConfig,
    slots: Vec<Slot>,
    index: U64Map<u32>,
    /// Most recently used.
    head: u32,
    /// Least recently used.
    tail: u32,
    reads: u64,
    read_hits: u64,
    segment_fetches: u64,
}

impl Redcap {
    pub fn new(config: RedcapConfig) -> Result<Self, RedcapError> {
        if config.segments == 0 || config.segments > (1 << 31) {
            return Err(RedcapError::Segments(config.segments));
        }
        if config.segment_blocks == 0 || config.segment_blocks > u32::MAX as u64 {
            return Err(RedcapError::SegmentBlocks(config.segment_blocks));
        }
        Ok(Redcap {
            config,
            slots: Vec::with_capacity(config.segments),
            index: U64Map::with_capacity_and_hasher(config.segments, Default::default()),
            head: NIL,
            tail: NIL,
            reads: 0,
            read_hits: 0,
            segment_fetches: 0,
        })
    }

    pub fn config(&self) -> RedcapConfig {
        self.config
    }

    /// Cached segments.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// (read requests, read requests that hit entirely, segment reads issued).
    pub fn counters(&self) -> (u64, u64, u64) {
        (self.reads, self.read_hits, self.segment_fetches)
    }

    fn seg_of(&self, key: BlockKey) -> (u64, u64) {
        let s = self.config.segment_blocks;
        let start = key.block() / s * s;
        (BlockKey::from_raw(key.raw() - (key.block() - start)).raw(), start)
    }

    /// Is this block cached?
    pub fn contains(&self, key: BlockKey) -> bool {
        let (seg, start) = self.seg_of(key);
        self.index.get(&seg).is_some_and(|&i| key.block() - start < self.slots[i as usize].len as u64)
    }

    /// Segments, most recently used first (first block of each).
    pub fn segments_mru(&self) -> Vec<BlockKey> {
        let mut v = Vec::with_capacity(self.len());
        let mut i = self.head;
        while i != NIL {
            v.push(BlockKey::from_raw(self.slots[i as usize].seg));
            i = self.slots[i as usize].next;
        }
        v
    }

    fn unlink(&mut self, i: u32) {
        let Slot { prev, next, .. } = self.slots[i as usize];
        if prev == NIL {
            self.head = next;
        } else {
            self.slots[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.slots[next as usize].prev = prev;
        }
    }

    fn push_front(&mut self, i: u32) {
        self.slots[i as usize].prev = NIL;
        self.slots[i as usize].next = self.head;
        if self.head != NIL {
            self.slots[self.head as usize].prev = i;
        }
        self.head = i;
        if self.tail == NIL {
            self.tail = i;
        }
    }

    /// A read of `n` blocks from `first` on a device (volume) of `end` blocks: the hits, and for each touched
    /// segment not cached the read of the whole aligned segment (clipped at `end`), which is inserted at once
    /// (evicting the least recently used segments). Hit segments become most recently used. `plan` is cleared
    /// first.
    pub fn read(&mut self, first: BlockKey, n: u64, end: u64, plan: &mut ReadPlan) {
        plan.clear();
        if n == 0 {
            return;
        }
        self.reads += 1;
        let vol = first.volume();
        let s = self.config.segment_blocks;
        let last = first.block().saturating_add(n - 1).min(MAX_BLOCK);
        let mut seg_start = first.block() / s * s;
        loop {
            let lo = first.block().max(seg_start);
            let hi = last.min(seg_start.saturating_add(s - 1));
            let touched = hi - lo + 1;
            let Some(seg_key) = BlockKey::new(vol, seg_start) else { break };
            if let Some(&i) = self.index.get(&seg_key.raw()) {
                let valid_end = seg_start + self.slots[i as usize].len as u64;
                let hit = valid_end.saturating_sub(lo).min(touched);
                plan.hit_blocks += hit;
                plan.miss_blocks += touched - hit;
                self.unlink(i);
                self.push_front(i);
            } else {
                plan.miss_blocks += touched;
                let seg_end = seg_start.saturating_add(s).min(end.max(hi + 1)).min(MAX_BLOCK + 1);
                let len = seg_end - seg_start;
                plan.fetches.push(Fetch { first: seg_key, n: len, sync: true });
                self.segment_fetches += 1;
                self.insert(seg_key, len as u32, plan);
            }
            match seg_start.checked_add(s) {
                Some(next) if next <= last => seg_start = next,
                _ => break,
            }
        }
        if plan.miss_blocks == 0 {
            self.read_hits += 1;
        }
    }

    fn insert(&mut self, seg: BlockKey, len: u32, plan: &mut ReadPlan) {
        let i = if self.slots.len() < self.config.segments {
            self.slots.push(Slot { seg: seg.raw(), len, prev: NIL, next: NIL });
            (self.slots.len() - 1) as u32
        } else {
            let v = self.tail;
            self.unlink(v);
            let old = self.slots[v as usize].seg;
            self.index.remove(&old);
            plan.evicted.push(BlockKey::from_raw(old));
            self.slots[v as usize].seg = seg.raw();
            self.slots[v as usize].len = len;
            v
        };
        self.index.insert(seg.raw(), i);
        self.push_front(i);
    }

    /// A write of `n` blocks from `first`: the number of cached blocks whose copies are updated. Nothing is
    /// allocated, recency does not change; the write itself goes to the disk (the driver's job).
    pub fn write(&mut self, first: BlockKey, n: u64) -> u64 {
        let s = self.config.segment_blocks;
        let vol = first.volume();
        let mut updated = 0;
        if n == 0 {
            return 0;
        }
        let last = first.block().saturating_add(n - 1).min(MAX_BLOCK);
        let mut seg_start = first.block() / s * s;
        loop {
            let lo = first.block().max(seg_start);
            let hi = last.min(seg_start.saturating_add(s - 1));
            if let Some(&i) = BlockKey::new(vol, seg_start).and_then(|k| self.index.get(&k.raw())) {
                let valid_end = seg_start + self.slots[i as usize].len as u64;
                updated += valid_end.min(hi + 1).saturating_sub(lo);
            }
            match seg_start.checked_add(s) {
                Some(next) if next <= last => seg_start = next,
                _ => break,
            }
        }
        updated
    }

    /// Heap bytes of the segment table and index.
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + self.index.capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
    }

    /// Checks the LRU list against the index.
    pub fn validate(&self) -> Result<(), String> {
        let mru = self.segments_mru();
        if mru.len() != self.index.len() {
            return Err(format!("list has {} segments, index {}", mru.len(), self.index.len()));
        }
        if mru.len() > self.config.segments {
            return Err("more segments than configured".into());
        }
        for k in &mru {
            if k.block() % self.config.segment_blocks != 0 {
                return Err(format!("segment {k} is not aligned"));
            }
            if !self.index.contains_key(&k.raw()) {
                return Err(format!("segment {k} is listed but not indexed"));
            }
        }
        Ok(())
    }
}

/// Parameters of [`RedcapControl`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedcapControlConfig {
    /// Requests per decision.
    pub period: u64,
    /// The cache must lose (or, while off, win) by more than this percentage of the other time to switch.
    pub margin_pct: u64,
    /// Back-off limit, in periods (0: no back-off, decide every period). When the cache is switched off after
    /// having been on for at most [`SHORT_ON_PERIODS`] periods, it has just been switched on by an estimate that
    /// proved wrong: the controller then keeps it off for a hold of 1, 2, 4 … periods (doubling at each such
    /// quick reversal, up to this limit) before it may switch it on again. A switch-off after a longer active
    /// stretch clears the hold.
    pub max_hold_periods: u64,
}

/// An active stretch of at most this many periods that ends in a switch-off doubles the hold (see
/// [`RedcapControlConfig::max_hold_periods`]).
pub const SHORT_ON_PERIODS: u64 = 2;

impl Default for RedcapControlConfig {
    fn default() -> Self {
        RedcapControlConfig { period: 64, margin_pct: 5, max_hold_periods: 64 }
    }
}

/// The activation–deactivation controller (see the module docs). Initial state: active.
#[derive(Clone, Debug)]
pub struct RedcapControl {
    config: RedcapControlConfig,
    active: bool,
    with_ns: u128,
    without_ns: u128,
    requests: u64,
    switches: u64,
    active_ns: u128,
    inactive_ns: u128,
    periods: u64,
    /// Periods decided in the current state.
    in_state: u64,
    /// Periods the cache must stay off after the last switch-off (the back-off).
    hold: u64,
    /// Periods decided while the cache was held off.
    held: u64,
}

impl RedcapControl {
    pub fn new(config: RedcapControlConfig) -> Result<Self, RedcapError> {
        if config.period == 0 {
            return Err(RedcapError::Period);
        }
        Ok(Self::new_clamped(config))
    }

    /// Like [`RedcapControl::new`], with a zero period taken as 1.
    pub(crate) fn new_clamped(config: RedcapControlConfig) -> Self {
        RedcapControl {
            config: RedcapControlConfig { period: config.period.max(1), ..config },
            active: true,
            with_ns: 0,
            without_ns: 0,
            requests: 0,
            switches: 0,
            active_ns: 0,
            inactive_ns: 0,
            periods: 0,
            in_state: 0,
            hold: 0,
            held: 0,
        }
    }

    /// Is the cache serving requests now?
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// One request: its I/O time with the cache and without it, in ns (one measured, one estimated, depending on
    /// the state). At the end of a period the controller decides; returns the new state when it switched.
    pub fn observe(&mut self, with_ns: u64, without_ns: u64) -> Option<bool> {
        self.with_ns += with_ns as u128;
        self.without_ns += without_ns as u128;
        if self.active {
            self.active_ns += with_ns as u128;
        } else {
            self.inactive_ns += without_ns as u128;
        }
        self.requests += 1;
        if self.requests >= self.config.period {
            self.end_period()
        } else {
            None
        }
    }

    /// Ends the current period now (for drivers with time-based periods) and decides; returns the new state when
    /// it switched. An empty period decides nothing.
    pub fn end_period(&mut self) -> Option<bool> {
        if self.requests == 0 {
            return None;
        }
        let m = self.config.margin_pct as u128;
        let (w, wo) = (self.with_ns, self.without_ns);
        self.with_ns = 0;
        self.without_ns = 0;
        self.requests = 0;
        self.periods += 1;
        self.in_state += 1;
        let switch = if self.active {
            w * 100 > wo * (100 + m)
        } else {
            let wins = w * (100 + m) < wo * 100;
            if wins && self.in_state <= self.hold {
                self.held += 1;
            }
            wins && self.in_state > self.hold
        };
        if !switch {
            return None;
        }
        if self.active {
            // Switching off: a quick reversal of the last switch-on doubles the hold, a long stretch clears it.
            let max = self.config.max_hold_periods;
            self.hold = if max > 0 && self.switches > 0 && self.in_state <= SHORT_ON_PERIODS {
                (self.hold * 2).clamp(1, max)
            } else {
                0
            };
        }
        self.active = !self.active;
        self.switches += 1;
        self.in_state = 0;
        Some(self.active)
    }

    /// Periods the cache was kept off by the back-off although its estimate said it would win or tie.
    pub fn held_periods(&self) -> u64 {
        self.held
    }

    /// The current back-off hold, in periods.
    pub fn hold_periods(&self) -> u64 {
        self.hold
    }

    /// Number of on/off switches so far.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// Periods decided so far.
    pub fn periods(&self) -> u64 {
        self.periods
    }

    /// Measured I/O time (ns) while active and while inactive.
    pub fn measured_ns(&self) -> (u128, u128) {
        (self.active_ns, self.inactive_ns)
    }

    /// Fraction of the measured I/O time spent with the cache active (1.0 before any observation).
    pub fn active_fraction(&self) -> f64 {
        let total = self.active_ns + self.inactive_ns;
        if total == 0 {
            if self.active {
                1.0
            } else {
                0.0
            }
        } else {
            self.active_ns as f64 / total as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(b: u64) -> BlockKey {
        BlockKey::new(0, b).unwrap()
    }

    fn rc(n: usize, s: u64) -> Redcap {
        Redcap::new(RedcapConfig { segments: n, segment_blocks: s }).unwrap()
    }

    #[test]
    fn presets() {
        assert_eq!(RedcapConfig::preset("64x128k", 4096).unwrap(), RedcapConfig { segments: 64, segment_blocks: 32 });
        assert_eq!(RedcapConfig::preset("128x128K", 4096).unwrap(), RedcapConfig { segments: 128, segment_blocks: 32 });
        assert_eq!(RedcapConfig::preset("128x128k", 512).unwrap().segment_blocks, 256);
        assert!(RedcapConfig::preset("1x1", 4096).is_err());
        assert!(Redcap::new(RedcapConfig { segments: 0, segment_blocks: 32 }).is_err());
        assert!(Redcap::new(RedcapConfig { segments: 1, segment_blocks: 0 }).is_err());
    }

    #[test]
    fn miss_fetches_the_aligned_segment_and_hits_fetch_nothing() {
        let mut c = rc(4, 32);
        let mut p = ReadPlan::default();
        c.read(k(70), 1, 1000, &mut p);
        assert_eq!(p.fetches, vec![Fetch { first: k(64), n: 32, sync: true }]);
        assert_eq!((p.hit_blocks, p.miss_blocks), (0, 1));
        c.read(k(64), 32, 1000, &mut p);
        assert!(p.is_hit() && p.fetches.is_empty());
        assert_eq!(p.hit_blocks, 32);
        // A request across a boundary: one segment hits, the other is fetched whole.
        c.read(k(90), 10, 1000, &mut p);
        assert_eq!(p.fetches, vec![Fetch { first: k(96), n: 32, sync: true }]);
        assert_eq!((p.hit_blocks, p.miss_blocks), (6, 4));
        // The device's last segment is clipped at its end.
        c.read(k(970), 2, 980, &mut p);
        assert_eq!(p.fetches, vec![Fetch { first: k(960), n: 20, sync: true }]);
        assert_eq!(c.counters(), (4, 1, 3));
        c.validate().unwrap();
    }

    #[test]
    fn writes_update_cached_copies_without_allocating() {
        let mut c = rc(4, 32);
        let mut p = ReadPlan::default();
        assert_eq!(c.write(k(0), 8), 0);
        assert!(c.is_empty(), "writes do not allocate");
        c.read(k(0), 1, 1000, &mut p);
        c.read(k(100), 1, 1000, &mut p);
        let before = c.segments_mru();
        assert_eq!(c.write(k(30), 4), 2, "blocks 30 and 31 are cached, 32 and 33 are not");
        assert_eq!(c.write(k(0), 200), 64);
        assert_eq!(c.segments_mru(), before, "writes do not change recency");
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn lru_over_segments() {
        let mut c = rc(2, 8);
        let mut p = ReadPlan::default();
        c.read(k(0), 1, 1000, &mut p); // segment 0
        c.read(k(8), 1, 1000, &mut p); // segment 8
        c.read(k(1), 1, 1000, &mut p); // hit: 0 becomes MRU
        assert_eq!(c.segments_mru(), vec![k(0), k(8)]);
        c.read(k(16), 1, 1000, &mut p);
        assert_eq!(p.evicted, vec![k(8)]);
        assert!(c.contains(k(7)) && !c.contains(k(8)) && c.contains(k(23)));
        c.validate().unwrap();
        // Volumes do not share segments.
        let mut p2 = ReadPlan::default();
        c.read(BlockKey::new(1, 0).unwrap(), 1, 1000, &mut p2);
        assert_eq!(p2.fetches[0].first, BlockKey::new(1, 0).unwrap());
    }

    #[test]
    fn controller_switches_off_when_losing_and_on_when_the_shadow_wins() {
        let mut c = RedcapControl::new(RedcapControlConfig { period: 4, margin_pct: 5, max_hold_periods: 0 }).unwrap();
        assert!(c.is_active(), "initial state is active");
        // A winning period keeps it on.
        for _ in 0..4 {
            c.observe(50, 100);
        }
        assert!(c.is_active());
        // A losing period (cache 2x slower) switches it off at the period's end.
        for i in 0..4 {
            let r = c.observe(200, 100);
            assert_eq!(r, if i == 3 { Some(false) } else { None });
        }
        assert!(!c.is_active());
        // Within the margin: no switch back.
        for _ in 0..4 {
            c.observe(97, 100);
        }
        assert!(!c.is_active());
        // The shadow says it would win clearly: back on.
        for _ in 0..3 {
            c.observe(30, 100);
        }
        assert_eq!(c.end_period(), Some(true));
        assert_eq!(c.switches(), 2);
        assert_eq!(c.periods(), 4);
        // Measured: active 4*50 + 4*200 = 1000; inactive 4*100 + 3*100 = 700.
        assert_eq!(c.measured_ns(), (1000, 700));
        assert!((c.active_fraction() - 1000.0 / 1700.0).abs() < 1e-12);
        assert_eq!(c.end_period(), None, "empty period");
        assert!(RedcapControl::new(RedcapControlConfig { period: 0, margin_pct: 5, max_hold_periods: 0 }).is_err());
    }

    #[test]
    fn back_off_doubles_the_hold_after_each_quick_reversal() {
        let mut c = RedcapControl::new(RedcapControlConfig { period: 1, margin_pct: 5, max_hold_periods: 4 }).unwrap();
        let (lose, win) = ((200, 100), (50, 100));
        // A long active stretch, then a loss: off, no hold.
        for _ in 0..5 {
            assert_eq!(c.observe(win.0, win.1), None);
        }
        assert_eq!(c.observe(lose.0, lose.1), Some(false));
        assert_eq!(c.hold_periods(), 0);
        assert_eq!(c.observe(win.0, win.1), Some(true), "no hold: the first winning estimate switches it on");
        // Lost again right away: a quick reversal, hold 1, then 2, then 4, capped at 4.
        for want in [1, 2, 4, 4] {
            assert_eq!(c.observe(lose.0, lose.1), Some(false));
            assert_eq!(c.hold_periods(), want);
            for _ in 0..want {
                assert_eq!(c.observe(win.0, win.1), None, "held off");
            }
            assert_eq!(c.observe(win.0, win.1), Some(true));
        }
        assert_eq!(c.held_periods(), 1 + 2 + 4 + 4);
        // Staying on for longer than SHORT_ON_PERIODS, then losing, clears the hold.
        for _ in 0..=SHORT_ON_PERIODS {
            c.observe(win.0, win.1);
        }
        assert_eq!(c.observe(lose.0, lose.1), Some(false));
        assert_eq!(c.hold_periods(), 0);
        // Without back-off (limit 0) the controller decides every period.
        let mut c = RedcapControl::new(RedcapControlConfig { period: 1, margin_pct: 5, max_hold_periods: 0 }).unwrap();
        for _ in 0..10 {
            assert_eq!(c.observe(lose.0, lose.1), Some(false));
            assert_eq!(c.observe(win.0, win.1), Some(true));
        }
        assert_eq!(c.held_periods(), 0);
    }

    #[test]
    fn state_size_is_as_documented() {
        assert_eq!(std::mem::size_of::<Slot>(), 24);
    }
}
