//! Linux 2.4 read-ahead, as seed `001_*` (Butt, Gniady, Hu: "The performance impact of kernel prefetching on
//! buffer cache replacement algorithms", SIGMETRICS'05) §2.1 describes it (`generic_file_readahead` in
//! Linux 2.4 `mm/filemap.c`: `f_raend`, `f_ralen`, `f_rawin`, `f_ramax`).
//!
//! Per stream (an open file) the prefetcher keeps the *current read-ahead group* (the blocks prefetched on the
//! last access that prefetched), the *previous read-ahead group*, and the *read-ahead window* (their union).
//! The paper's rules, with its words, for a read request whose first block is `B` and last block `L`:
//!
//! 1. **Synchronous (conservative) prefetching.** "On the first access (A1) to a file ... it reads the
//!    on-demand accessed block and prefetches a minimum number of blocks following the on-demand accessed
//!    block. The minimum number of blocks prefetched is at least one, and is typically three. This prefetching
//!    is called synchronous prefetching, as the prefetched blocks are read along with the on-demand accessed
//!    block." The same happens when "the block is outside the read-ahead window": the group becomes
//!    `L+1 ..` and the window "is reset to the new read-ahead group". These fetches are `sync` when a block of
//!    the request is absent (the demand read they ride on); on a request that hits entirely nothing waits, so
//!    the group is proposed as a background read (the 2.4 source issues no read-ahead at all there; the paper
//!    does not distinguish hits, and the group's blocks are usually cached already and skipped).
//! 2. **First-block rule.** "An exception is that if A1 is to the first block in the file, the kernel assumes
//!    the following accesses to be sequential." Modelled as in the 2.4 source the paper summarises: an access at
//!    block 0 of a stream not yet read counts as sequential and its synchronous group has `min` blocks (default
//!    3), while any other synchronous group (A1 elsewhere, or an access outside the window) has `cold` blocks
//!    (default 1: "at least one"; §2.2: in Linux "one extra block is always read from the disk even if the
//!    access falls outside the read-ahead window"; §5.3.2 on tpc-h: "the number of synchronous disk requests,
//!    each of which prefetches an extra block, ... an almost equal number of asynchronous disk requests ...,
//!    each of which prefetches between 2 to 4 blocks", i.e. groups of 1 doubling to 2 and 4). Set `cold=3` for
//!    the paper's simplified text, in which every synchronous group has the minimum size; `first_block=false`
//!    gives every first access `min`.
//! 3. **Sequential detection and doubling.** "If the block accessed by A2 is in the previous read-ahead group
//!    [the group of the previous access, our *current* group] ... the kernel decides that the file is being
//!    accessed sequentially ... The size of the previous read-ahead group ... is doubled to determine the number
//!    of blocks (N) to be prefetched on this access. However, N is never increased beyond a pre-specified maximum
//!    (usually 32 blocks). The kernel then attempts to prefetch the N contiguous blocks that follow the blocks in
//!    the previous read-ahead group." These fetches are asynchronous. The new group becomes current, the old one
//!    previous.
//! 4. **Special case: block in flight.** "Before the actual I/O operation on a prefetched block is completed, an
//!    on-demand access to the block may arrive. When this happens, the kernel does not perform any further
//!    prefetching." (A request starting in the window with a block that the [`BlockView`] reports
//!    [`BlockState::InFlight`]; the state is left unchanged.) Case (i) also requires that the block "has
//!    already been prefetched": a request whose first block is in the window but absent (its prefetch was
//!    evicted unused) prefetches nothing either, as in the 2.4 source, where such a page is read locked and
//!    `generic_file_readahead` issues nothing for a locked page inside the window.
//! 5. **Special case: previous group.** "An on-demand accessed block is found in the read-ahead window but not
//!    in the current read-ahead group, i.e., it is found in the previous read-ahead group. Further prefetching
//!    is not performed in this case either."
//!
//! Only reads prefetch ("only considers prefetching for read accesses"); writes are ignored. A multi-block
//! request is one access classified by its first block (the paper's simplification), and groups follow its last
//! block. No fetch crosses [`Demand::end`] (the file's end; the kernel stops at `end_index`). "Some blocks in
//! the coverage of the read-ahead group already exist in the cache, in which case they are not prefetched, but
//! are included in the current read-ahead group": the group is proposed whole and the driver skips resident
//! blocks.
//!
//! **Parameters** (`linux24(min=3,cold=1,max=32,first_block=true,demand_in_window=false)`): `min` synchronous
//! group after a first access at block 0 (default 3), `cold` synchronous group otherwise (default 1), `max`
//! largest group (default 32 blocks), `first_block` the first-block rule (default true), `demand_in_window`
//! (default false) the 2.4 source's window after a synchronous read-ahead, which also holds the demand blocks:
//! the current group becomes `B ..= L + size` instead of `L+1 ..= L + size`, so re-reading a block just read
//! (tpc-h's second read of a page) is sequential and reads twice the group ahead, asynchronously, and a
//! sequential scan's groups grow from 4 blocks (3 + the demand block) instead of 3.
//!
//! **State**: 32 bytes per stream (two groups of two `u64`) plus the stream id and hashbrown's control byte in
//! the table (41 bytes a stream in all, before the table's spare room).

use super::{push_fetch, state_of, BlockState, BlockView, Demand, Fetch, Prefetcher, PrefetcherConfig, U64Map};
use crate::cache::Op;
use serde::{Deserialize, Serialize};

/// Parameters of [`Linux24`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Linux24Config {
    /// Blocks of the synchronous group when the access is assumed sequential (first access at block 0).
    pub min: u64,
    /// Blocks of any other synchronous group (first access elsewhere, access outside the window).
    pub cold: u64,
    /// Largest read-ahead group, in blocks.
    pub max: u64,
    /// Apply the first-block rule; when false every first access reads `min` blocks ahead.
    pub first_block: bool,
    /// Count the demand blocks of a synchronous read-ahead in the new current group, as Linux 2.4's
    /// `generic_file_readahead` does (`f_ralen = 1 + ahead`, the window ending at `f_raend`): a second access to
    /// the block just read is then sequential and reads ahead asynchronously. False: the group is the prefetched
    /// blocks only, as the paper describes it.
    #[serde(default)]
    pub demand_in_window: bool,
}

impl Default for Linux24Config {
    fn default() -> Self {
        Linux24Config { min: 3, cold: 1, max: 32, first_block: true, demand_in_window: false }
    }
}

impl PrefetcherConfig for Linux24Config {
    fn check(&self) -> Result<(), String> {
        if self.max == 0 {
            return Err("max: must be at least 1 block".into());
        }
        if self.min == 0 || self.min > self.max {
            return Err(format!("min: must be between 1 and max ({})", self.max));
        }
        if self.cold > self.max {
            return Err(format!("cold: must be at most max ({})", self.max));
        }
        Ok(())
    }

    fn build(&self, _block_size: u64) -> Box<dyn super::Prefetcher> {
        Box::new(Linux24::new(self.clone()))
    }
}

/// A run of blocks `start .. start+len`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Group {
    pub start: u64,
    pub len: u64,
}

impl Group {
    fn contains(self, b: u64) -> bool {
        b >= self.start && b - self.start < self.len
    }
    fn end(self) -> u64 {
        self.start.saturating_add(self.len)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Stream {
    prev: Group,
    cur: Group,
}

/// Linux 2.4 read-ahead (see the module docs).
#[derive(Debug)]
pub struct Linux24 {
    config: Linux24Config,
    streams: U64Map<Stream>,
}

impl Linux24 {
    pub fn new(config: Linux24Config) -> Self {
        Linux24 { config, streams: U64Map::default() }
    }

    /// The (previous, current) read-ahead groups of a stream; the window is their union.
    pub fn groups(&self, stream: u64) -> Option<(Group, Group)> {
        self.streams.get(&stream).map(|s| (s.prev, s.cur))
    }
}

impl Prefetcher for Linux24 {
    fn on_demand(&mut self, d: &Demand, view: &dyn BlockView, out: &mut Vec<Fetch>) {
        if d.op != Op::Read || d.n == 0 {
            return;
        }
        let b = d.first.block();
        let last = b.saturating_add(d.n - 1);
        let vol = d.first.volume();
        let c = &self.config;
        let new_stream = !self.streams.contains_key(&d.stream);
        let st = self.streams.entry(d.stream).or_default();
        let in_window = st.cur.contains(b) || st.prev.contains(b);
        if in_window && (b..=last).any(|x| state_of(view, d.first, x) == BlockState::InFlight) {
            return; // special case 1
        }
        if in_window && state_of(view, d.first, b) == BlockState::Absent {
            return; // in the window but not "already been prefetched" (evicted unused): no read-ahead
        }
        if st.cur.contains(b) {
            // Sequential: asynchronous prefetch of twice the group, after the group.
            let n = st.cur.len.saturating_mul(2).min(c.max);
            let start = st.cur.end().max(last.saturating_add(1));
            let stop = start.saturating_add(n).min(d.end);
            push_fetch(out, vol, start, stop, false);
            st.prev = st.cur;
            st.cur = Group { start, len: stop.saturating_sub(start) };
        } else if st.prev.contains(b) {
            // Special case 2: no further prefetching.
        } else {
            let size = if !c.first_block || (new_stream && b == 0) { c.min } else { c.cold };
            let start = last.saturating_add(1);
            let stop = start.saturating_add(size).min(d.end);
            // "Read along with the on-demand accessed block": synchronous when there is a demand read to ride
            // on; when every block of the request is cached nothing waits, so the group is read in background.
            let miss = (b..=last).any(|x| state_of(view, d.first, x) == BlockState::Absent);
            push_fetch(out, vol, start, stop, miss);
            st.prev = Group::default();
            let from = if c.demand_in_window { b } else { start };
            st.cur = Group { start: from, len: stop.saturating_sub(from) };
        }
    }

    fn end_stream(&mut self, stream: u64) {
        self.streams.remove(&stream);
    }

    fn heap_bytes(&self) -> usize {
        self.streams.capacity() * (std::mem::size_of::<(u64, Stream)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    fn lx() -> Linux24 {
        Linux24::new(Linux24Config::default())
    }

    #[test]
    fn sequential_scan_from_block_0_reads_3_then_doubles_to_32() {
        let mut p = lx();
        let reqs: Vec<(u64, u64)> = (0..200).map(|b| (b, 1)).collect();
        let f = run(&mut p, &reqs, 10_000);
        let sizes: Vec<(u64, u64, bool)> = f.iter().flat_map(|x| triples(x)).collect();
        assert_eq!(
            sizes[..7],
            [
                (1, 3, true),
                (4, 6, false),
                (10, 12, false),
                (22, 24, false),
                (46, 32, false),
                (78, 32, false),
                (110, 32, false)
            ]
        );
        // The triggers: block 0 (sync), then the first block of each current group.
        let triggers: Vec<usize> = f.iter().enumerate().filter(|(_, x)| !x.is_empty()).map(|(i, _)| i).collect();
        assert_eq!(triggers[..6], [0, 1, 4, 10, 22, 46]);
    }

    #[test]
    fn demand_in_window_makes_a_reread_sequential() {
        // tpc-h's pattern: a random page read twice. The paper's window holds only the prefetched block, so the
        // second read of page 500 (outside it) is a new synchronous access whose one-block group is cached.
        let reqs = [(500, 1), (500, 1), (900, 1)];
        let paper = run(&mut lx(), &reqs, 10_000);
        assert_eq!(triples(&paper[0]), [(501, 1, true)]);
        assert_eq!(triples(&paper[1]), [(501, 1, false)], "proposed again, cached, skipped by the driver");
        // With the 2.4 source's window (500..=501) the reread is sequential: twice the group, asynchronously.
        let cfg = Linux24Config { demand_in_window: true, ..Linux24Config::default() };
        let mut p = Linux24::new(cfg.clone());
        let src = run(&mut p, &reqs, 10_000);
        assert_eq!(triples(&src[0]), [(501, 1, true)]);
        assert_eq!(triples(&src[1]), [(502, 4, false)]);
        // Page 900, outside the window: a new synchronous group that holds the demand block.
        assert_eq!(triples(&src[2]), [(901, 1, true)]);
        assert_eq!(p.groups(1), Some((Group::default(), Group { start: 900, len: 2 })));
        // A sequential scan from block 0 grows from 4 blocks (3 + the demand block): 8, 16, 32.
        let mut p = Linux24::new(cfg);
        let reqs: Vec<(u64, u64)> = (0..100).map(|b| (b, 1)).collect();
        let sizes: Vec<(u64, u64, bool)> = run(&mut p, &reqs, 10_000).iter().flat_map(|x| triples(x)).collect();
        assert_eq!(sizes[..5], [(1, 3, true), (4, 8, false), (12, 16, false), (28, 32, false), (60, 32, false)]);
    }

    #[test]
    fn previous_group_access_does_not_prefetch() {
        let mut p = lx();
        let f = run(&mut p, &[(0, 1), (1, 1), (2, 1), (3, 1)], 1000);
        // 1 is in the current group (1..4) and prefetches 4..10; 2 and 3 are then in the previous group.
        assert_eq!(triples(&f[1]), [(4, 6, false)]);
        assert!(f[2].is_empty() && f[3].is_empty());
        assert_eq!(p.groups(1), Some((Group { start: 1, len: 3 }, Group { start: 4, len: 6 })));
    }

    #[test]
    fn in_flight_block_stops_prefetching_and_keeps_state() {
        let mut p = lx();
        let mut view = SetView::default();
        let mut out = Vec::new();
        p.on_demand(&read(1, 0, 1, 1000), &view, &mut out);
        assert_eq!(triples(&out), [(1, 3, true)]);
        // Block 1 is still being read when its demand access arrives.
        view.inflight.insert(k(1));
        out.clear();
        p.on_demand(&read(1, 1, 1, 1000), &view, &mut out);
        assert!(out.is_empty());
        assert_eq!(p.groups(1), Some((Group::default(), Group { start: 1, len: 3 })));
        // Once it completed, the next access in the group prefetches asynchronously.
        view.inflight.clear();
        view.resident.extend([k(1), k(2), k(3)]);
        p.on_demand(&read(1, 2, 1, 1000), &view, &mut out);
        assert_eq!(triples(&out), [(4, 6, false)]);
    }

    #[test]
    fn first_block_rule_and_random_accesses() {
        // A first access elsewhere than block 0 reads only `cold` (1) block ahead, then doubles from there.
        let mut p = lx();
        let f = run(&mut p, &[(5, 1), (6, 1), (7, 1), (8, 1), (9, 1)], 1000);
        assert_eq!(triples(&f[0]), [(6, 1, true)]);
        assert_eq!(triples(&f[1]), [(7, 2, false)]);
        assert_eq!(triples(&f[2]), [(9, 4, false)]);
        assert!(f[3].is_empty(), "8 is in the previous group");
        assert_eq!(triples(&f[4]), [(13, 8, false)]);
        // Random accesses: each reads one synchronous block after it and nothing more.
        let mut p = lx();
        let f = run(&mut p, &[(100, 1), (7, 1), (500, 1), (40, 1)], 1000);
        for (x, b) in f.iter().zip([100, 7, 500, 40]) {
            assert_eq!(triples(x), [(b + 1, 1, true)]);
        }
        // Without the rule every first access gets the minimum; cold=3 makes every synchronous group 3.
        let mut p = Linux24::new(Linux24Config { first_block: false, ..Default::default() });
        assert_eq!(triples(&run(&mut p, &[(5, 1)], 1000)[0]), [(6, 3, true)]);
        let mut p = Linux24::new(Linux24Config { cold: 3, ..Default::default() });
        let f = run(&mut p, &[(5, 1), (50, 1)], 1000);
        assert_eq!(triples(&f[1]), [(51, 3, true)]);
    }

    #[test]
    fn an_evicted_prefetch_in_the_window_prefetches_nothing() {
        let mut p = lx();
        let mut view = SetView::default();
        let mut out = Vec::new();
        p.on_demand(&read(1, 0, 1, 1000), &view, &mut out);
        view.resident.extend([k(0), k(2), k(3)]); // block 1 was prefetched and evicted
        out.clear();
        p.on_demand(&read(1, 1, 1, 1000), &view, &mut out);
        assert!(out.is_empty());
        p.on_demand(&read(1, 2, 1, 1000), &view, &mut out);
        assert_eq!(triples(&out), [(4, 6, false)], "the next prefetched block continues the stream");
    }

    #[test]
    fn synchronous_only_with_a_demand_miss() {
        let mut p = lx();
        let mut view = SetView::default();
        view.resident.extend((0..10).map(k));
        let mut out = Vec::new();
        p.on_demand(&read(1, 5, 1, 1000), &view, &mut out);
        assert_eq!(triples(&out), [(6, 1, false)], "a hit outside the window waits for nothing");
        out.clear();
        p.on_demand(&read(1, 50, 1, 1000), &view, &mut out);
        assert_eq!(triples(&out), [(51, 1, true)]);
    }

    #[test]
    fn never_reads_past_the_end_and_ignores_writes() {
        let mut p = lx();
        let reqs: Vec<(u64, u64)> = (0..20).map(|b| (b, 1)).collect();
        let f = run(&mut p, &reqs, 12);
        let mut max_end = 0;
        for x in &f {
            for y in x {
                max_end = max_end.max(y.first.block() + y.n);
            }
        }
        assert_eq!(max_end, 12);
        let mut p = lx();
        let mut out = Vec::new();
        let mut d = read(1, 0, 4, 100);
        d.op = Op::Write;
        p.on_demand(&d, &SetView::default(), &mut out);
        assert!(out.is_empty());
        assert_eq!(p.groups(1), None);
    }

    #[test]
    fn multi_block_requests_follow_their_last_block() {
        let mut p = lx();
        let f = run(&mut p, &[(0, 4), (4, 4), (8, 4)], 1000);
        assert_eq!(triples(&f[0]), [(4, 3, true)]);
        assert_eq!(triples(&f[1]), [(8, 6, false)]);
        assert_eq!(triples(&f[2]), [(14, 12, false)]);
    }

    #[test]
    fn state_size_is_as_documented() {
        assert_eq!(std::mem::size_of::<Stream>(), 32);
    }
}
