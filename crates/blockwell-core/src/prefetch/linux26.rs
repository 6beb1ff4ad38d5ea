//! Linux 2.6 window read-ahead as in Linux 2.6.14, the kernel of seed `000_*` (REDCAP: "a Linux Kernel 2.6.14
//! with REDCAP", against "the vanilla Linux Kernel 2.6.14"): `mm/readahead.c` (`page_cache_readahead`,
//! `make_ahead_window`, `blockable_page_cache_readahead`, `check_ra_success`, `get_init_ra_size`,
//! `get_next_ra_size`, `ra_off`, `handle_ra_miss`) and the read loop that drives it, `do_generic_mapping_read` in
//! `mm/filemap.c`. This is Steven Pratt's current/ahead window design (2.6.11) with Oleg Nesterov's sequential
//! detection (`offset == prev_page + 1`, March 2005, in 2.6.12). Linux 2.6.17 changed two things this module does
//! *not* do: `get_init_ra_size` became ×4 / ×2 instead of squaring / `max/4`, and `prev_page` was clamped to the
//! ahead window (`recheck:`, `reset_ahead_window`). 2.6.23 replaced the scheme by on-demand read-ahead
//! ([`super::ondemand`]).
//!
//! Sources, re-expressed (no code copied): a 2.6.12–2.6.16 `mm/readahead.c` (the text with `ra_off` zeroing the
//! ahead window and `goto out` when the first ahead window fails), the 2.6.11 text before it, a 2.6.1x
//! `do_generic_mapping_read`, and the LKML patches that changed the file after 2.6.14 — Oleg Nesterov,
//! "readahead: ->prev_page can overrun the ahead window", and Steven Pratt's `get_init_ra_size` change as
//! resent by Oleg Nesterov, both against 2.6.16-rc3 (26 Feb 2006), whose context lines show the code followed here.
//! No 2.6.14 tree was at hand to diff against line by line.
//!
//! Per stream (an open file, `struct file_ra_state`): the *current window* `start, size`, the *ahead window*
//! `ahead_start, ahead_size` (`ahead_start == 0`: none), `prev_page` (the last page the algorithm looked at; none
//! at first, the kernel's `-1`), the flags MISS and INCACHE, and `cache_hit`. `max` is `max_kb` in blocks (the
//! device's `ra_pages`, `VM_MAX_READAHEAD` 128 KiB = 32 pages) and `min` is `min_kb` (`VM_MIN_READAHEAD`, 16 KiB).
//! Blocks are the kernel's pages.
//!
//! **The read loop.** For a read of blocks `B ..= L`: `next = B`; for each block `i` in order, if `i == next` then
//! `next = page_cache_readahead(i, L + 1 - i)`; then if block `i` is not in the page cache (absent in the
//! [`BlockView`] and not read earlier in this call) it is a *miss*: `handle_ra_miss` sets MISS, clears INCACHE and
//! zeroes `cache_hit`, and the block is read on its own (the driver's demand read). The loop stops at
//! [`Demand::end`] (the file's end); `req` counts the whole request, as the kernel's `last_index` does.
//!
//! **`page_cache_readahead(offset, req)`**, returning the next block at which the loop calls again:
//! 1. If `offset == prev_page`, `req -= 1`, and if something is left `offset += 1` (sub-page reads of one page do
//!    not move the window).
//! 2. *Sequential* means `offset == prev_page + 1`; so the first read of a stream is sequential only at block 0.
//!    `prev_page = offset`; `newsize = min(req, max)`; if `newsize == 0` or INCACHE is set, nothing more.
//!    Otherwise `prev_page += newsize - 1`.
//! 3. Sequential with no current window (`size == 0`): the *initial window* `start = offset`, `size =
//!    get_init_ra_size(newsize, max)`, read at once; if `req >= max` (a read of at least the maximum) the ahead
//!    window is read at once too (forced: kept even if all its blocks are cached).
//! 4. Not sequential: a *random read*. Read-ahead is turned off (`ra_off`: both windows and the flags cleared) and
//!    only the `newsize` blocks asked for are read. So 4 KiB strided reads (blocks 0, 2, 4, ...) and backward reads
//!    (`tac`) get no read-ahead at all after the first window: every read that misses is one small disk request
//!    for its own blocks. ([`super::linux24`] reads ahead on a strided stream; [`super::ondemand`] does not either.)
//! 5. Sequential with a current window: if there is no ahead window, make one (if that fails, stop). When
//!    `prev_page` reaches the ahead window, the ahead window becomes the current one and a new ahead window is made.
//!
//! `make_ahead_window`: `ahead_size = get_next_ra_size()`, `ahead_start = start + size`, read it; if that fails and
//! it was not forced, the ahead window is dropped. `get_init_ra_size(n, max)`: round `n` up to a power of two; its
//! square if at most `max/64`, else `max/4` if at most `max/4`, else `max` (a 1-block read with `max` 32 gets 8).
//! `get_next_ra_size()`, from the current size `cur`: with MISS set, clear it and take `max(cur - 2, min)`;
//! otherwise `4·cur` below `max/16`, else `2·cur`; at most `max`.
//!
//! **Reading a range** (`blockable_page_cache_readahead` + `check_ra_success`). The range is clipped at
//! [`Demand::end`]; `actual` is the number of its blocks not in the page cache (`__do_page_cache_readahead`
//! skips every page present, locked under I/O or not: [`BlockState::Resident`] or [`BlockState::InFlight`]).
//! With `actual > 0` the range is proposed as one [`Fetch`] and `cache_hit = 0`. With `actual == 0` nothing is
//! proposed and `cache_hit` grows by the range's unclipped size; at `VM_MAX_CACHE_HIT` ([`MAX_CACHE_HIT`], 256
//! blocks) read-ahead turns off (`ra_off`) and INCACHE is set, which skips all read-ahead until the next miss:
//! re-reading a cached file stops consulting the windows after 256 cached blocks.
//!
//! A fetch is `sync` when it holds a block of the request that is not in the page cache (the reader waits for
//! it: the initial window, a random read, a forced ahead window under a large read), otherwise asynchronous (an
//! ahead window read ahead of the reader).
//!
//! Worked numbers (4 KiB reads, `max` 32): one-block sequential reads from block 0 read `[0, 8)` with the first
//! read, the ahead window `[8, 24)` at the second, `[24, 56)` when the reader reaches block 8, `[56, 88)` at block
//! 24, then 32 blocks each time. A 128 KiB read at block 0 reads `[0, 32)` and `[32, 64)` at once.
//!
//! Not modelled: request-queue congestion (`bdi_read_congested`: a non-blocking ahead window is skipped when the
//! queue is congested; here it never is, so the kernel's `block` argument makes no difference),
//! `max_sane_readahead`, the 2 MiB chunking of forced read-ahead, page allocation failures, `mmap` read-around
//! (`filemap_nopage`), `fadvise`/`madvise`. Writes are ignored. At block sizes other than 4 KiB the KiB parameters
//! are converted to blocks and [`MAX_CACHE_HIT`] stays 256 blocks.
//!
//! **Parameters** (`linux26(max_kb=128,min_kb=16)`): `max_kb` the maximum window (the device's read-ahead, default
//! 128 KiB), `min_kb` the smallest window after a read-ahead miss (default 16 KiB); converted with the cache's
//! block size.
//!
//! **State**: 48 bytes per stream (four window `u64`s, `prev_page`, a `u32` `cache_hit`, two flags) plus the
//! stream id and hashbrown's control byte in the table (57 bytes a stream in all, before the table's spare room).

use super::{
    kib_to_blocks, push_fetch, state_of, BlockState, BlockView, Demand, Fetch, Prefetcher, PrefetcherConfig, U64Map,
};
use crate::cache::Op;
use serde::{Deserialize, Serialize};

/// `VM_MAX_CACHE_HIT`: blocks found cached by read-ahead, in a row, after which read-ahead turns itself off.
pub const MAX_CACHE_HIT: u64 = 256;

/// `prev_page` before the first read of a stream (the kernel's `-1`).
pub const NO_PAGE: u64 = u64::MAX;

/// Parameters of [`Linux26`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Linux26Config {
    /// Maximum read-ahead window in KiB (the device's `ra_pages`; `VM_MAX_READAHEAD` is 128).
    pub max_kb: u64,
    /// Smallest window after a read-ahead miss, in KiB (`VM_MIN_READAHEAD` is 16).
    pub min_kb: u64,
}

impl Default for Linux26Config {
    fn default() -> Self {
        Linux26Config { max_kb: 128, min_kb: 16 }
    }
}

impl PrefetcherConfig for Linux26Config {
    fn check(&self) -> Result<(), String> {
        if self.max_kb == 0 {
            return Err("max_kb: must be at least 1 (use 'none' to disable read-ahead)".into());
        }
        if self.min_kb == 0 || self.min_kb > self.max_kb {
            return Err(format!("min_kb: must be between 1 and max_kb ({})", self.max_kb));
        }
        Ok(())
    }

    fn build(&self, block_size: u64) -> Box<dyn Prefetcher> {
        Box::new(Linux26::new(kib_to_blocks(self.max_kb, block_size), kib_to_blocks(self.min_kb, block_size)))
    }
}

/// A stream's read-ahead state (2.6.14's `struct file_ra_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RaState {
    /// Current window.
    pub start: u64,
    pub size: u64,
    /// Ahead window; `ahead_start == 0` means none.
    pub ahead_start: u64,
    pub ahead_size: u64,
    /// The last block the algorithm looked at ([`NO_PAGE`] before the first read).
    pub prev_page: u64,
    /// Blocks found cached by read-ahead since it last read something.
    pub cache_hit: u32,
    /// RA_FLAG_MISS: a block the loop needed was not cached; the next ahead window shrinks.
    pub miss: bool,
    /// RA_FLAG_INCACHE: read-ahead is off until the next miss.
    pub incache: bool,
}

impl Default for RaState {
    fn default() -> Self {
        RaState {
            start: 0,
            size: 0,
            ahead_start: 0,
            ahead_size: 0,
            prev_page: NO_PAGE,
            cache_hit: 0,
            miss: false,
            incache: false,
        }
    }
}

impl RaState {
    /// `ra_off`: no windows, no flags (`prev_page` and `cache_hit` stay).
    fn off(&mut self) {
        self.start = 0;
        self.size = 0;
        self.ahead_start = 0;
        self.ahead_size = 0;
        self.miss = false;
        self.incache = false;
    }
}

/// `get_init_ra_size` of 2.6.11–2.6.16.
pub fn init_ra_size(size: u64, max: u64) -> u64 {
    let n = size.max(1).checked_next_power_of_two().unwrap_or(u64::MAX);
    if n <= max / 64 {
        n.saturating_mul(n)
    } else if n <= max / 4 {
        max / 4
    } else {
        max
    }
}

/// `get_next_ra_size` for a current window of `cur` blocks (the caller clears MISS).
pub fn next_ra_size(cur: u64, max: u64, min: u64, miss: bool) -> u64 {
    let n = if miss {
        // `max(cur - 2, min)` in unsigned arithmetic: below 2 blocks the difference wraps and the cap gives `max`.
        cur.wrapping_sub(2).max(min)
    } else if cur < max / 16 {
        cur.saturating_mul(4)
    } else {
        cur.saturating_mul(2)
    };
    n.min(max)
}

/// Linux 2.6.14 window read-ahead (see the module docs).
#[derive(Debug)]
pub struct Linux26 {
    max: u64,
    min: u64,
    streams: U64Map<RaState>,
}

/// One read request as the kernel's read loop sees it.
struct Call<'a> {
    d: &'a Demand,
    view: &'a dyn BlockView,
    /// Blocks read in this call (read-ahead ranges and demand misses) as sorted, disjoint, non-adjacent runs
    /// `[start, stop)`: in the page cache from then on.
    read: Vec<(u64, u64)>,
    out: &'a mut Vec<Fetch>,
}

impl Call<'_> {
    /// In the page cache: resident or in flight in the view, or read earlier in this call.
    fn present(&self, b: u64) -> bool {
        let i = self.read.partition_point(|&(_, stop)| stop <= b);
        self.read.get(i).is_some_and(|&(start, _)| start <= b)
            || state_of(self.view, self.d.first, b) != BlockState::Absent
    }

    /// Records `lo .. hi` as read in this call.
    fn mark(&mut self, lo: u64, hi: u64) {
        let i = self.read.partition_point(|&(_, stop)| stop < lo);
        let (mut s, mut e, mut j) = (lo, hi, i);
        while j < self.read.len() && self.read[j].0 <= hi {
            s = s.min(self.read[j].0);
            e = e.max(self.read[j].1);
            j += 1;
        }
        self.read.splice(i..j, [(s, e)]);
    }

    /// `__do_page_cache_readahead`: reads the blocks of `start .. start + n` before the file's end that are not
    /// in the page cache, proposing the clipped range as one fetch; returns how many there were.
    fn read_range(&mut self, start: u64, n: u64) -> u64 {
        let stop = start.saturating_add(n).min(self.d.end);
        if start >= stop {
            return 0;
        }
        let actual = (start..stop).filter(|&b| !self.present(b)).count() as u64;
        if actual > 0 {
            let first = self.d.first.block();
            let req_stop = first.saturating_add(self.d.n);
            let sync = (start.max(first)..stop.min(req_stop)).any(|b| !self.present(b));
            push_fetch(self.out, self.d.first.volume(), start, stop, sync);
            self.mark(start, stop);
        }
        actual
    }
}

impl Linux26 {
    /// Windows of at most `max` blocks, at least `min` after a miss (both at least 1).
    pub fn new(max: u64, min: u64) -> Self {
        Linux26 { max: max.max(1), min: min.max(1), streams: U64Map::default() }
    }

    /// A stream's state.
    pub fn state(&self, stream: u64) -> Option<RaState> {
        self.streams.get(&stream).copied()
    }

    /// `blockable_page_cache_readahead` with `check_ra_success`: false when read-ahead turned itself off.
    fn read_ahead(ra: &mut RaState, call: &mut Call<'_>, start: u64, n: u64) -> bool {
        if call.read_range(start, n) > 0 {
            ra.cache_hit = 0;
            return true;
        }
        ra.cache_hit = ra.cache_hit.saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        if u64::from(ra.cache_hit) >= MAX_CACHE_HIT {
            ra.off();
            ra.incache = true;
            return false;
        }
        true
    }

    /// `make_ahead_window`.
    fn make_ahead_window(&self, ra: &mut RaState, call: &mut Call<'_>, force: bool) -> bool {
        ra.ahead_size = next_ra_size(ra.size, self.max, self.min, ra.miss);
        ra.miss = false;
        ra.ahead_start = ra.start.saturating_add(ra.size);
        let ok = Self::read_ahead(ra, call, ra.ahead_start, ra.ahead_size);
        if !ok && !force {
            ra.ahead_start = 0;
            ra.ahead_size = 0;
        }
        ok
    }

    /// `page_cache_readahead`: returns the next block at which the read loop calls again.
    fn page_cache_readahead(&self, ra: &mut RaState, call: &mut Call<'_>, mut offset: u64, mut req: u64) -> u64 {
        if offset == ra.prev_page {
            req -= 1;
            if req > 0 {
                offset += 1;
            }
        }
        let sequential = offset == ra.prev_page.wrapping_add(1);
        ra.prev_page = offset;
        let newsize = req.min(self.max);
        if newsize == 0 || ra.incache {
            return ra.prev_page.wrapping_add(1);
        }
        ra.prev_page = offset.saturating_add(newsize - 1);
        if sequential && ra.size == 0 {
            // First sequential access: the initial window, and with a large read the ahead window too.
            ra.start = offset;
            ra.size = init_ra_size(newsize, self.max);
            if Self::read_ahead(ra, call, offset, ra.size) && req >= self.max {
                self.make_ahead_window(ra, call, true);
            }
        } else if !sequential {
            // Random read: only what was asked, and read-ahead off.
            ra.off();
            Self::read_ahead(ra, call, offset, newsize);
        } else if (ra.ahead_start != 0 || self.make_ahead_window(ra, call, false)) && ra.prev_page >= ra.ahead_start {
            // Crossed into the ahead window: it becomes current, and a new ahead window is read.
            ra.start = ra.ahead_start;
            ra.size = ra.ahead_size;
            self.make_ahead_window(ra, call, false);
        }
        ra.prev_page.wrapping_add(1)
    }
}

impl Prefetcher for Linux26 {
    fn on_demand(&mut self, d: &Demand, view: &dyn BlockView, out: &mut Vec<Fetch>) {
        if d.op != Op::Read || d.n == 0 {
            return;
        }
        let first = d.first.block();
        let last_index = first.saturating_add(d.n);
        let stop = last_index.min(d.end);
        if first >= stop {
            return; // at or past the file's end: the kernel's loop reads nothing
        }
        let mut ra = self.streams.get(&d.stream).copied().unwrap_or_default();
        let mut call = Call { d, view, read: Vec::new(), out };
        let mut next = first;
        for index in first..stop {
            if index == next {
                next = self.page_cache_readahead(&mut ra, &mut call, index, last_index - index);
            }
            if !call.present(index) {
                // `handle_ra_miss`; the block is then read on its own (the driver's demand read).
                ra.miss = true;
                ra.incache = false;
                ra.cache_hit = 0;
                call.mark(index, index + 1);
            }
        }
        self.streams.insert(d.stream, ra);
    }

    fn end_stream(&mut self, stream: u64) {
        self.streams.remove(&stream);
    }

    fn heap_bytes(&self) -> usize {
        self.streams.capacity() * (std::mem::size_of::<(u64, RaState)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::super::linux24::{Linux24, Linux24Config};
    use super::super::testutil::*;
    use super::super::PrefetcherSpec;
    use super::*;

    fn lx() -> Linux26 {
        Linux26::new(32, 4)
    }

    fn all(f: &[Vec<Fetch>]) -> Vec<(u64, u64, bool)> {
        f.iter().flat_map(|x| triples(x)).collect()
    }

    fn triggers(f: &[Vec<Fetch>]) -> Vec<usize> {
        f.iter().enumerate().filter(|(_, x)| !x.is_empty()).map(|(i, _)| i).collect()
    }

    /// Reads block `b` (one block) through `view`, completing at once; the fetches.
    fn step(p: &mut Linux26, view: &mut SetView, b: u64, end: u64) -> Vec<(u64, u64, bool)> {
        let d = read(1, b, 1, end);
        let mut out = Vec::new();
        p.on_demand(&d, view, &mut out);
        view.complete(&d, &out);
        triples(&out)
    }

    #[test]
    fn window_sizes_of_2_6_14() {
        assert_eq!(init_ra_size(1, 32), 8, "max/64 is 0: a 1-page read gets max/4");
        assert_eq!(init_ra_size(8, 32), 8);
        assert_eq!(init_ra_size(9, 32), 32);
        assert_eq!(init_ra_size(32, 32), 32);
        assert_eq!(init_ra_size(1, 256), 1, "1 <= max/64: squared");
        assert_eq!(init_ra_size(2, 256), 4);
        assert_eq!(init_ra_size(3, 256), 16);
        assert_eq!(init_ra_size(5, 256), 64);
        assert_eq!(init_ra_size(65, 256), 256);
        assert_eq!(next_ra_size(1, 32, 4, false), 4, "below max/16: x4");
        assert_eq!(next_ra_size(8, 32, 4, false), 16);
        assert_eq!(next_ra_size(16, 32, 4, false), 32);
        assert_eq!(next_ra_size(32, 32, 4, false), 32);
        assert_eq!(next_ra_size(16, 32, 4, true), 14, "a miss: cur - 2");
        assert_eq!(next_ra_size(5, 32, 4, true), 4, "but not below min");
        assert_eq!(next_ra_size(1, 32, 4, true), 32, "unsigned cur - 2 wraps below 2, capped at max");
    }

    #[test]
    fn sequential_4k_reads_initial_window_8_then_ahead_windows_16_32_32() {
        let mut p = lx();
        let reqs: Vec<(u64, u64)> = (0..200).map(|b| (b, 1)).collect();
        let f = run(&mut p, &reqs, 10_000);
        assert_eq!(
            all(&f)[..7],
            [
                (0, 8, true),
                (8, 16, false),
                (24, 32, false),
                (56, 32, false),
                (88, 32, false),
                (120, 32, false),
                (152, 32, false)
            ]
        );
        // The initial window with the first read, the first ahead window at the next sequential read, then a new
        // ahead window each time the reader crosses into the previous one.
        assert_eq!(triggers(&f)[..7], [0, 1, 8, 24, 56, 88, 120]);
        let s = p.state(1).unwrap();
        assert_eq!((s.start, s.size, s.ahead_start, s.ahead_size, s.prev_page), (184, 32, 216, 32, 199));
    }

    #[test]
    fn a_read_of_max_blocks_issues_initial_and_ahead_windows_at_once() {
        let mut p = lx();
        let f = run(&mut p, &[(0, 32), (32, 32), (64, 32)], 1000);
        assert_eq!(triples(&f[0]), [(0, 32, true), (32, 32, false)]);
        assert_eq!(triples(&f[1]), [(64, 32, false)]);
        assert_eq!(triples(&f[2]), [(96, 32, false)]);
        // Larger than max: the loop calls again at block 32, where the forced ahead window becomes current.
        let mut p = lx();
        let f = run(&mut p, &[(0, 64)], 1000);
        assert_eq!(triples(&f[0]), [(0, 32, true), (32, 32, true), (64, 32, false)]);
        // Smaller multi-block reads: initial window from the rounded size, then ahead windows.
        let mut p = lx();
        let f = run(&mut p, &[(0, 4), (4, 4), (8, 4)], 1000);
        assert_eq!(all(&f), [(0, 8, true), (8, 16, false), (24, 32, false)]);
    }

    #[test]
    fn strided_4k_reads_get_no_read_ahead_after_the_initial_window_unlike_linux24() {
        let reqs: Vec<(u64, u64)> = (0..=20).map(|i| (i * 2, 1)).collect();
        let mut p = lx();
        let f = run(&mut p, &reqs, 1000);
        assert_eq!(triples(&f[0]), [(0, 8, true)]);
        assert!(f[1..4].iter().all(|x| x.is_empty()), "blocks 2, 4, 6 are in the initial window: {f:?}");
        for (x, &(b, _)) in f.iter().zip(&reqs).skip(4) {
            assert_eq!(triples(x), [(b, 1, true)], "block {b}: its own page, one small synchronous read");
        }
        let s = p.state(1).unwrap();
        assert_eq!((s.size, s.ahead_start), (0, 0), "read-ahead is off");
        // Linux 2.4's model sees block B+2 inside its read-ahead group and keeps reading ahead asynchronously.
        let mut l24 = Linux24::new(Linux24Config::default());
        let g = run(&mut l24, &reqs, 1000);
        let ahead = |f: &[Vec<Fetch>]| f.iter().flatten().filter(|x| !x.sync).map(|x| x.n).sum::<u64>();
        assert_eq!(ahead(&f), 0);
        assert!(ahead(&g) >= 40, "linux24 reads ahead on a strided stream: {g:?}");
        let read = |f: &[Vec<Fetch>]| f.iter().flatten().map(|x| x.n).sum::<u64>();
        assert_eq!(read(&f), 8 + 17);
        assert!(read(&g) > read(&f));
    }

    #[test]
    fn backward_reads_get_no_read_ahead() {
        let mut p = lx();
        let reqs: Vec<(u64, u64)> = (0..100).rev().map(|b| (b, 1)).collect();
        let f = run(&mut p, &reqs, 100);
        for (x, &(b, _)) in f.iter().zip(&reqs) {
            assert_eq!(triples(x), [(b, 1, true)]);
        }
    }

    #[test]
    fn a_first_read_elsewhere_than_block_0_is_random_and_the_next_one_starts_a_window() {
        let mut p = lx();
        let f = run(&mut p, &[(50, 1), (51, 1), (52, 1)], 1000);
        assert_eq!(triples(&f[0]), [(50, 1, true)]);
        assert_eq!(triples(&f[1]), [(51, 8, true)], "51 follows 50: initial window");
        assert_eq!(triples(&f[2]), [(59, 16, false)]);
        let mut p = lx();
        let f = run(&mut p, &[(50, 4), (7, 2)], 1000);
        assert_eq!(triples(&f[0]), [(50, 4, true)]);
        assert_eq!(triples(&f[1]), [(7, 2, true)]);
    }

    #[test]
    fn rereading_the_same_block_changes_nothing() {
        let mut p = lx();
        let mut view = SetView::default();
        assert_eq!(step(&mut p, &mut view, 0, 1000), [(0, 8, true)]);
        assert_eq!(step(&mut p, &mut view, 1, 1000), [(8, 16, false)]);
        let before = p.state(1).unwrap();
        assert!(step(&mut p, &mut view, 1, 1000).is_empty());
        assert_eq!(p.state(1).unwrap(), before);
        // A two-block read starting at the same block counts from the next one: still sequential.
        let d = read(1, 1, 2, 1000);
        let mut out = Vec::new();
        p.on_demand(&d, &view, &mut out);
        assert!(out.is_empty());
        assert_eq!(p.state(1).unwrap().prev_page, 2);
    }

    #[test]
    fn an_evicted_block_sets_miss_and_the_next_ahead_window_shrinks() {
        let mut p = lx();
        let mut view = SetView::default();
        assert_eq!(step(&mut p, &mut view, 0, 1000), [(0, 8, true)]);
        assert_eq!(step(&mut p, &mut view, 1, 1000), [(8, 16, false)]);
        view.resident.remove(&k(5)); // read-ahead thrashing: block 5 was evicted before use
        for b in 2..5 {
            assert!(step(&mut p, &mut view, b, 1000).is_empty());
        }
        assert!(step(&mut p, &mut view, 5, 1000).is_empty(), "the miss is the demand read alone");
        assert!(p.state(1).unwrap().miss);
        assert!(step(&mut p, &mut view, 6, 1000).is_empty());
        assert!(step(&mut p, &mut view, 7, 1000).is_empty());
        assert_eq!(step(&mut p, &mut view, 8, 1000), [(24, 14, false)], "max(16 - 2, min) instead of 32");
        assert!(!p.state(1).unwrap().miss);
        // An in-flight block is in the page cache: no miss.
        view.resident.remove(&k(9));
        view.inflight.insert(k(9));
        assert!(step(&mut p, &mut view, 9, 1000).is_empty());
        assert!(!p.state(1).unwrap().miss);
    }

    #[test]
    fn a_cached_file_turns_read_ahead_off_after_256_cached_blocks_until_a_miss() {
        let mut p = lx();
        let mut view = SetView::default();
        view.resident.extend((0..300).map(k));
        for b in 0..300 {
            assert!(step(&mut p, &mut view, b, 1000).is_empty(), "block {b}");
            // Windows [0,8), [8,24), then 32 at a time: the one issued at block 216 reaches 280 >= 256 blocks.
            assert_eq!(p.state(1).unwrap().incache, b >= 216, "block {b}");
        }
        let s = p.state(1).unwrap();
        assert_eq!((s.size, s.ahead_start, s.cache_hit), (0, 0, 280));
        // Without INCACHE the ahead window issued at block 248 would have covered 280..312; instead block 300 is
        // a plain miss, which turns read-ahead back on: the next read starts an initial window.
        assert!(step(&mut p, &mut view, 300, 1000).is_empty());
        let s = p.state(1).unwrap();
        assert!(!s.incache && s.miss && s.cache_hit == 0);
        assert_eq!(step(&mut p, &mut view, 301, 1000), [(301, 8, true)]);
        assert_eq!(step(&mut p, &mut view, 302, 1000), [(309, 6, false)], "MISS still set: max(8 - 2, 4)");
    }

    #[test]
    fn random_reads_of_cached_blocks_also_count_as_cache_hits() {
        let mut p = lx();
        let mut view = SetView::default();
        view.resident.extend((0..1000).map(k));
        for i in 0..256 {
            step(&mut p, &mut view, (i * 3) % 1000 + 1, 1000);
        }
        assert!(p.state(1).unwrap().incache);
    }

    #[test]
    fn clipped_at_the_end_writes_ignored_end_stream_forgets() {
        let mut p = lx();
        let f = run(&mut p, &(0..20).map(|b| (b, 1)).collect::<Vec<_>>(), 12);
        assert_eq!(all(&f), [(0, 8, true), (8, 4, false)]);
        assert!(f.iter().flatten().all(|x| x.first.block() + x.n <= 12));
        // A whole-file read of a 20-block file: the forced ahead window stops at the end.
        let mut p = lx();
        let f = run(&mut p, &[(0, 32)], 20);
        assert_eq!(triples(&f[0]), [(0, 20, true)]);
        let mut p = lx();
        let mut d = read(1, 0, 4, 100);
        d.op = Op::Write;
        let mut out = Vec::new();
        p.on_demand(&d, &SetView::default(), &mut out);
        assert!(out.is_empty());
        assert_eq!(p.state(1), None);
        let f = run(&mut p, &[(0, 1), (1, 1)], 1000);
        assert_eq!(all(&f), [(0, 8, true), (8, 16, false)]);
        p.end_stream(1);
        assert_eq!(p.state(1), None);
        let f = run(&mut p, &[(1, 1)], 1000);
        assert_eq!(triples(&f[0]), [(1, 1, true)], "a new stream: block 1 first is random");
    }

    #[test]
    fn streams_are_independent() {
        let mut p = lx();
        let mut view = SetView::default();
        let mut out = Vec::new();
        p.on_demand(&read(1, 0, 1, 1000), &view, &mut out);
        p.on_demand(&read(2, 500, 1, 1000), &view, &mut out);
        assert_eq!(triples(&out), [(0, 8, true), (500, 1, true)]);
        view.complete(&read(1, 0, 1, 1000), &out);
        out.clear();
        p.on_demand(&read(1, 1, 1, 1000), &view, &mut out);
        assert_eq!(triples(&out), [(8, 16, false)]);
        assert!(p.heap_bytes() > 0);
    }

    #[test]
    fn registry_and_block_size_conversion() {
        assert!(PrefetcherSpec::parse("linux26(max_kb=64)").is_ok());
        assert!(PrefetcherSpec::parse("linux-2.6(min_kb=8)").is_ok());
        assert_eq!(PrefetcherSpec::parse("Linux2.6").unwrap().kind, super::super::PrefetcherKind::Linux26);
        let e = PrefetcherSpec::parse("linux26(max_kb=0)").unwrap_err();
        assert!(e.to_string().contains("max_kb"), "{e}");
        let e = PrefetcherSpec::parse("linux26(min_kb=256)").unwrap_err();
        assert!(e.to_string().contains("min_kb"), "{e}");
        let e = PrefetcherSpec::parse("linux26(max=32)").unwrap_err();
        assert!(e.to_string().contains("'max'"), "{e}");
        // 512-byte blocks: max 256 blocks, and 2.6.14 squares small requests: a 1-block read gets a 1-block window.
        let mut p = Linux26Config::default().build(512);
        let f = run(p.as_mut(), &[(0, 1), (1, 1)], 100_000);
        assert_eq!(triples(&f[0]), [(0, 1, true)]);
        // The first ahead window [1, 5) (x4 below max/16) holds the demand block, which at once crosses into it:
        // it becomes current and the next ahead window [5, 21) is read in background.
        assert_eq!(triples(&f[1]), [(1, 4, true), (5, 16, false)]);
    }

    #[test]
    fn state_size_is_as_documented() {
        assert_eq!(std::mem::size_of::<RaState>(), 48);
    }
}
