//! Linux on-demand read-ahead (`mm/readahead.c`: `page_cache_sync_ra`, `page_cache_async_ra`,
//! `ondemand_readahead`, `get_init_ra_size`, `get_next_ra_size`; `filemap_get_pages` in `mm/filemap.c` for when
//! each is called), as in the 5.x kernels and up to 6.9, where `ondemand_readahead` serves both the synchronous
//! and the asynchronous path. Later kernels restructured these functions (the synchronous path no longer takes
//! the "expected index" branch and consults the page cache for history instead); that variant is not modelled.
//! Written from the kernel source without a kernel to compare against, so the modelled subset is listed
//! exactly; `prev` is the last block read, as `prev_pos` is kept by `do_generic_file_read`.
//!
//! Per stream (an open file, `struct file_ra_state`): the current window `start, size, async_size`, the
//! position of the last block read (`prev_pos`), and the block carrying the `PG_readahead` *marker*
//! (`start + size - async_size`). For a read of blocks `B ..= L`, scanning from `B`:
//!
//! - **Synchronous read-ahead** at the first absent block `x` (a page-cache miss), with `req = L + 1 - x`:
//!   - `x == 0`: initial window;
//!   - `x` is the expected index (`start + size - async_size`, or `start + size`): sequential, the window moves
//!     on: `start += size; size = get_next_ra_size(size); async_size = size`;
//!   - `req > max`: initial window (an oversize read);
//!   - `x` is `prev` or `prev + 1` (a sequential cache miss): initial window;
//!   - otherwise a **random read**: no read-ahead at all, only the request (the kernel's
//!     `do_page_cache_ra(ractl, req_size, 0)`); the window is left alone and only `prev` moves, so a later
//!     sequential miss starts again from an initial window.
//! - **Initial window** at `x`: `start = x; size = get_init_ra_size(req, max); async_size = size - req` (or
//!   `size` when `size <= req`). `get_init_ra_size`: round `req` up to a power of two; ×4 if `<= max/32`, ×2 if
//!   `<= max/4`, else `max`. When a window (from any path) starts at the triggering block and
//!   `size == async_size` (it would hit its own marker at once), the next window is merged in: `size += get_next_ra_size(size)` when that fits in `max`, else `size = max`,
//!   `async_size = max/2`.
//! - **Asynchronous read-ahead** when the scan reaches the marker block and it is present (resident or in
//!   flight: the kernel tests `PG_readahead` before waiting for the page): the marker is cleared; if it is the
//!   expected index the window moves on as above; otherwise (an old window) the next window starts at the first
//!   absent block after the marker within `max` (`page_cache_next_miss`), with `size =
//!   get_next_ra_size(gap + req)`, `async_size = size` (none if no gap within `max`).
//! - `get_next_ra_size(cur)`: ×4 if `cur < max/16`, ×2 if `cur <= max/2`, else `max`.
//! - Every window issued sets the marker at `start + size - async_size`. The window is proposed as one fetch of
//!   the blocks after the request (the request's own blocks are the demand read): `sync` for synchronous
//!   read-ahead, asynchronous for the marker-triggered one. Windows are clipped at [`Demand::end`] (the kernel
//!   stops at EOF), and a marker beyond the end is not set.
//! - A marker block that leaves the cache loses its mark ([`Prefetcher::on_evict`]); the next access then misses
//!   and goes through synchronous read-ahead, as in the kernel.
//!
//! Not modelled: `try_context_readahead` (history in the page cache for interleaved streams; removed in 6.x),
//! large folios / `page_cache_ra_order` orders (block granularity here), the `bdi->io_pages` enlargement of `max`
//! for large requests, `FMODE_RANDOM` / `POSIX_FADV_*`, and `mmap` read-around. Writes are ignored.
//!
//! **Parameters** (`ondemand(max_kb=128)`): `max_kb` the maximum window (the kernel's `read_ahead_kb`, default
//! 128 KiB = 32 blocks of 4 KiB; converted with the cache's block size).
//!
//! **State**: 56 bytes per stream (the window, the last block read, the marker) plus the stream id and control
//! byte in the table, and 17 bytes per live marker (an index from the
//! marked block to its stream, for evictions).

use super::{kib_to_blocks, push_fetch, BlockState, BlockView, Demand, Fetch, Prefetcher, PrefetcherConfig, U64Map};
use crate::cache::Op;
use crate::key::BlockKey;
use crate::policy::Evicted;
use serde::{Deserialize, Serialize};

/// Parameters of [`Ondemand`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OndemandConfig {
    /// Maximum read-ahead window in KiB (`/sys/block/*/queue/read_ahead_kb`).
    pub max_kb: u64,
}

impl Default for OndemandConfig {
    fn default() -> Self {
        OndemandConfig { max_kb: 128 }
    }
}

impl PrefetcherConfig for OndemandConfig {
    fn check(&self) -> Result<(), String> {
        if self.max_kb == 0 {
            return Err("max_kb: must be at least 1 (use 'none' to disable read-ahead)".into());
        }
        Ok(())
    }

    fn build(&self, block_size: u64) -> Box<dyn Prefetcher> {
        Box::new(Ondemand::new(kib_to_blocks(self.max_kb, block_size)))
    }
}

/// A stream's read-ahead state (`struct file_ra_state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub start: u64,
    pub size: u64,
    pub async_size: u64,
    /// Last block read.
    pub prev: Option<u64>,
    /// The marked block.
    pub marker: Option<u64>,
}

/// `get_init_ra_size`.
pub fn init_ra_size(req: u64, max: u64) -> u64 {
    let n = req.max(1).checked_next_power_of_two().unwrap_or(u64::MAX);
    if n <= max / 32 {
        n * 4
    } else if n <= max / 4 {
        n * 2
    } else {
        max
    }
}

/// `get_next_ra_size`.
pub fn next_ra_size(cur: u64, max: u64) -> u64 {
    if cur < max / 16 {
        cur * 4
    } else if cur <= max / 2 {
        cur * 2
    } else {
        max
    }
}

/// Linux on-demand read-ahead (see the module docs).
#[derive(Debug)]
pub struct Ondemand {
    max: u64,
    streams: U64Map<Window>,
    /// Marked block (raw key) → stream.
    markers: U64Map<u64>,
}

impl Ondemand {
    /// Windows of at most `max` (>= 1) blocks.
    pub fn new(max: u64) -> Self {
        Ondemand { max: max.max(1), streams: U64Map::default(), markers: U64Map::default() }
    }

    /// A stream's state.
    pub fn window(&self, stream: u64) -> Option<Window> {
        self.streams.get(&stream).copied()
    }
}

/// Blocks of the current call's windows, seen as in flight.
struct Overlay(Vec<(u64, u64)>);

impl Overlay {
    fn has(&self, b: u64) -> bool {
        self.0.iter().any(|&(s, e)| b >= s && b < e)
    }
}

impl Ondemand {
    /// Issues the window in `w`: proposes its blocks after `last`, sets the marker.
    #[allow(clippy::too_many_arguments)]
    fn issue(
        &mut self,
        stream: u64,
        w: &mut Window,
        d: &Demand,
        last: u64,
        sync: bool,
        overlay: &mut Overlay,
        out: &mut Vec<Fetch>,
    ) {
        let stop = w.start.saturating_add(w.size).min(d.end);
        push_fetch(out, d.first.volume(), w.start.max(last.saturating_add(1)), stop, sync);
        overlay.0.push((w.start, stop));
        if let Some(old) = w.marker.take().and_then(|m| BlockKey::new(d.first.volume(), m)) {
            self.markers.remove(&old.raw());
        }
        let mark = w.start.saturating_add(w.size - w.async_size);
        if w.async_size > 0 && mark < stop {
            if let Some(key) = BlockKey::new(d.first.volume(), mark) {
                w.marker = Some(mark);
                self.markers.insert(key.raw(), stream);
            }
        }
    }

    /// `ondemand_readahead`; `Some(true)` when a window was issued.
    #[allow(clippy::too_many_arguments)]
    fn readahead(
        &mut self,
        w: &mut Window,
        d: &Demand,
        view: &dyn BlockView,
        overlay: &mut Overlay,
        index: u64,
        req: u64,
        hit_marker: bool,
        out: &mut Vec<Fetch>,
    ) {
        let max = self.max;
        let last = d.first.block().saturating_add(d.n - 1);
        let expected = w.start.saturating_add(w.size) - w.async_size;
        let initial = |w: &mut Window| {
            w.start = index;
            w.size = init_ra_size(req, max);
            w.async_size = if w.size > req { w.size - req } else { w.size };
        };
        if index == 0 {
            initial(w);
        } else if w.size > 0 && (index == expected || index == w.start.saturating_add(w.size)) {
            w.start = w.start.saturating_add(w.size);
            w.size = next_ra_size(w.size, max);
            w.async_size = w.size;
        } else if hit_marker {
            let present = |b: u64| {
                overlay.has(b)
                    || BlockKey::new(d.first.volume(), b).is_some_and(|k| view.state(k) != BlockState::Absent)
            };
            let limit = index.saturating_add(max);
            let mut s = index.saturating_add(1);
            while s <= limit && present(s) {
                s += 1;
            }
            if s > limit {
                return;
            }
            w.start = s;
            w.size = next_ra_size((s - index).saturating_add(req), max);
            w.async_size = w.size;
        } else if req > max || w.prev.is_some_and(|p| index == p || Some(index) == p.checked_add(1)) {
            initial(w);
        } else {
            return; // random read: only the request
        }
        if index == w.start && w.size == w.async_size {
            let add = next_ra_size(w.size, max);
            if w.size + add <= max {
                w.async_size = add;
                w.size += add;
            } else {
                w.size = max;
                w.async_size = max / 2;
            }
        }
        self.issue(d.stream, w, d, last, !hit_marker, overlay, out);
    }
}

impl Prefetcher for Ondemand {
    fn on_demand(&mut self, d: &Demand, view: &dyn BlockView, out: &mut Vec<Fetch>) {
        if d.op != Op::Read || d.n == 0 {
            return;
        }
        let b = d.first.block();
        let last = b.saturating_add(d.n - 1);
        let mut w = self.streams.get(&d.stream).copied().unwrap_or_default();
        let mut overlay = Overlay(Vec::new());
        let mut pos = b;
        // Each step issues a window or moves past the request; the bound only guards against a logic error.
        for _ in 0..64 {
            let absent = |x: u64, o: &Overlay| {
                !o.has(x) && BlockKey::new(d.first.volume(), x).map_or(true, |k| view.state(k) == BlockState::Absent)
            };
            let event = (pos..=last).find(|&x| absent(x, &overlay) || w.marker == Some(x));
            let Some(x) = event else { break };
            let req = last - x + 1;
            if absent(x, &overlay) {
                self.readahead(&mut w, d, view, &mut overlay, x, req, false, out);
                if !overlay.has(x) {
                    // Random read: the driver reads the rest of the request; no read-ahead for it.
                    break;
                }
                pos = x;
            } else {
                // The marked block is present: clear the mark, asynchronous read-ahead.
                if let Some(key) = BlockKey::new(d.first.volume(), x) {
                    self.markers.remove(&key.raw());
                }
                w.marker = None;
                self.readahead(&mut w, d, view, &mut overlay, x, req, true, out);
                pos = x.saturating_add(1);
            }
            if pos > last {
                break;
            }
        }
        w.prev = Some(last);
        self.streams.insert(d.stream, w);
    }

    fn on_evict(&mut self, evicted: &Evicted) {
        if let Some(stream) = self.markers.remove(&evicted.key.raw()) {
            if let Some(w) = self.streams.get_mut(&stream) {
                if w.marker == Some(evicted.key.block()) {
                    w.marker = None;
                }
            }
        }
    }

    fn end_stream(&mut self, stream: u64) {
        if let Some(w) = self.streams.remove(&stream) {
            // Markers are per block; the stream's one is found by its block in every volume it may be in.
            if let Some(m) = w.marker {
                self.markers.retain(|k, s| !(*s == stream && BlockKey::from_raw(*k).block() == m));
            }
        }
    }

    fn heap_bytes(&self) -> usize {
        self.streams.capacity() * (std::mem::size_of::<(u64, Window)>() + 1)
            + self.markers.capacity() * (std::mem::size_of::<(u64, u64)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn window_sizes_from_request_sizes() {
        assert_eq!(init_ra_size(1, 32), 4);
        assert_eq!(init_ra_size(2, 32), 4);
        assert_eq!(init_ra_size(3, 32), 8);
        assert_eq!(init_ra_size(8, 32), 16);
        assert_eq!(init_ra_size(9, 32), 32);
        assert_eq!(next_ra_size(1, 32), 4);
        assert_eq!(next_ra_size(4, 32), 8);
        assert_eq!(next_ra_size(16, 32), 32);
        assert_eq!(next_ra_size(32, 32), 32);
        assert_eq!(init_ra_size(1, 256), 4);
        assert_eq!(init_ra_size(16, 256), 32);
        assert_eq!(next_ra_size(8, 256), 32);
    }

    #[test]
    fn sequential_4k_reads_ramp_4_8_16_32_with_async_markers() {
        let mut p = Ondemand::new(32);
        let reqs: Vec<(u64, u64)> = (0..100).map(|b| (b, 1)).collect();
        let f = run(&mut p, &reqs, 10_000);
        let all: Vec<(u64, u64, bool)> = f.iter().flat_map(|x| triples(x)).collect();
        // Window [0,4) read with block 0 (the demand), marker on 1; then windows of 8, 16, 32, 32 async.
        assert_eq!(all[..5], [(1, 3, true), (4, 8, false), (12, 16, false), (28, 32, false), (60, 32, false)]);
        let triggers: Vec<usize> = f.iter().enumerate().filter(|(_, x)| !x.is_empty()).map(|(i, _)| i).collect();
        assert_eq!(triggers[..5], [0, 1, 4, 12, 28], "each marker is the first block of its window");
    }

    #[test]
    fn a_window_that_would_hit_its_own_marker_merges_the_next_one() {
        let mut p = Ondemand::new(32);
        // Window [0, 4) with its marker on 1; the reader skips to 4, the end of the window: sequential, the window
        // moves on to [4, 12) with async_size 8, which would mark 4 itself, so [12, 28) is merged in.
        let f = run(&mut p, &[(0, 1), (4, 1)], 10_000);
        assert_eq!(triples(&f[1]), [(5, 23, true)]);
        let w = p.window(1).unwrap();
        assert_eq!((w.start, w.size, w.async_size, w.marker), (4, 24, 16, Some(12)));
    }

    #[test]
    fn large_requests_start_at_the_maximum() {
        let mut p = Ondemand::new(32);
        let f = run(&mut p, &[(0, 16), (16, 16), (32, 16), (48, 16)], 10_000);
        assert_eq!(triples(&f[0]), [(16, 16, true)]);
        assert_eq!(triples(&f[1]), [(32, 32, false)], "marker on 16");
        assert_eq!(triples(&f[2]), [(64, 32, false)], "marker on 32");
        assert!(f[3].is_empty());
    }

    #[test]
    fn marker_fires_while_in_flight_and_only_there() {
        let mut p = Ondemand::new(32);
        let mut view = SetView::default();
        let mut out = Vec::new();
        p.on_demand(&read(1, 0, 1, 1000), &view, &mut out);
        assert_eq!(p.window(1).unwrap().marker, Some(1));
        view.resident.insert(k(0));
        view.inflight.extend([k(1), k(2), k(3)]);
        out.clear();
        p.on_demand(&read(1, 2, 1, 1000), &view, &mut out);
        assert!(out.is_empty(), "an unmarked block in the window triggers nothing");
        p.on_demand(&read(1, 1, 1, 1000), &view, &mut out);
        assert_eq!(triples(&out), [(4, 8, false)], "the marked block triggers even in flight");
        assert_eq!(p.window(1).unwrap().marker, Some(4));
        // The mark leaves with its block: the next access misses and re-enters by synchronous read-ahead.
        p.on_evict(&Evicted { key: k(4), unused_prefetch: true });
        assert_eq!(p.window(1).unwrap().marker, None);
        out.clear();
        p.on_demand(&read(1, 4, 1, 1000), &SetView::default(), &mut out);
        // 4 is the expected index, so the kernel moves the window on past [4, 12) (taken as read) and reads
        // [12, 28) with the demand; block 4 itself is the demand read.
        assert_eq!(triples(&out), [(12, 16, true)]);
    }

    #[test]
    fn random_reads_get_no_read_ahead_and_a_sequential_miss_restarts() {
        let mut p = Ondemand::new(32);
        let f = run(&mut p, &[(100, 1), (7, 1), (500, 2), (40, 1), (41, 1)], 10_000);
        assert!(f[..4].iter().all(|x| x.is_empty()), "{f:?}");
        assert_eq!(triples(&f[4]), [(42, 3, true)], "41 follows 40: initial window of 4 from 41");
        // The kernel misses 4 KiB strided reads entirely.
        let mut p = Ondemand::new(32);
        let reqs: Vec<(u64, u64)> = (0..50).map(|i| (i * 2 + 1, 1)).collect();
        assert!(run(&mut p, &reqs, 10_000).iter().all(|x| x.is_empty()));
    }

    #[test]
    fn clipped_at_the_end_and_block_size_conversion() {
        let mut p = Ondemand::new(32);
        let f = run(&mut p, &(0..10).map(|b| (b, 1)).collect::<Vec<_>>(), 6);
        assert!(f.iter().flatten().all(|x| x.first.block() + x.n <= 6));
        let mut big = OndemandConfig::default().build(512);
        let f = run(big.as_mut(), &[(0, 1), (1, 1)], 100_000);
        assert_eq!(triples(&f[0]), [(1, 3, true)], "max 256 blocks of 512 B: initial window 4");
        assert_eq!(triples(&f[1]), [(4, 16, false)], "then x4 while below max/16");
    }

    #[test]
    fn state_size_is_as_documented() {
        assert_eq!(std::mem::size_of::<Window>(), 56);
    }
}
