//! The clusterer: merges block fetches into device requests of contiguous blocks.
//!
//! Seed `001_*` §2.1: "After the kernel has issued I/O requests for blocks that it intends to prefetch, I/O
//! clustering is invoked to minimize the number of disk requests that are issued by clustering multiple I/O
//! requests into a single disk request." Blockwell's clusterer takes the block fetches of one decision (a
//! demand request's misses and the prefetcher's [`Fetch`]es, in any order, possibly overlapping) and returns
//! [`DeviceRead`]s:
//!
//! - runs of consecutive blocks of one volume, at most `max_blocks` long (default 16 blocks = 64 KiB at 4 KiB
//!   blocks, the "clustered to 64KB (typically)" of seed 001 §1); longer runs are split into maximal pieces from
//!   their start;
//! - synchronous and asynchronous blocks are never merged; a block asked for both ways is read synchronously
//!   only (the demand waits for it anyway);
//! - never across volumes (keys of different volumes are never contiguous);
//! - deterministic order: synchronous reads first, then asynchronous ones, each by ascending key.
//!
//! With [`Clusterer::cluster_view`] blocks that the driver reports resident or in flight are dropped first, so a
//! cached block splits a run (as in the kernel, where a cached page is not read again).
//!
//! **State**: two scratch vectors reused across calls (32 bytes per range of the largest call).

use crate::key::{BlockKey, BLOCK_BITS, MAX_BLOCK};
use crate::prefetch::{BlockState, BlockView, Fetch};

/// Default largest device request: 64 KiB.
pub const DEFAULT_MAX_KIB: u64 = 64;

/// One device request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRead {
    pub first: BlockKey,
    pub n: u64,
    pub sync: bool,
}

/// Errors of the clusterer's configuration.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ClusterError {
    #[error("max_blocks must be at least 1")]
    ZeroMax,
}

/// Merges fetches into device reads (see the module docs).
#[derive(Clone, Debug)]
pub struct Clusterer {
    max_blocks: u64,
    // Half-open raw-key ranges; u128 so that the end of the last volume's last block does not overflow.
    sync: Vec<(u128, u128)>,
    asyn: Vec<(u128, u128)>,
}

impl Clusterer {
    /// A clusterer producing requests of at most `max_blocks` blocks.
    pub fn new(max_blocks: u64) -> Result<Self, ClusterError> {
        if max_blocks == 0 {
            return Err(ClusterError::ZeroMax);
        }
        Ok(Clusterer { max_blocks, sync: Vec::new(), asyn: Vec::new() })
    }

    /// A clusterer with a maximum of `max_kib` KiB at `block_size`-byte blocks (at least one block).
    pub fn with_kib(max_kib: u64, block_size: u64) -> Self {
        Clusterer {
            max_blocks: crate::prefetch::kib_to_blocks(max_kib, block_size),
            sync: Vec::new(),
            asyn: Vec::new(),
        }
    }

    pub fn max_blocks(&self) -> u64 {
        self.max_blocks
    }

    /// Appends to `out` the device reads covering every block of `fetches`.
    pub fn cluster(&mut self, fetches: &[Fetch], out: &mut Vec<DeviceRead>) {
        self.sync.clear();
        self.asyn.clear();
        for f in fetches {
            push_range(if f.sync { &mut self.sync } else { &mut self.asyn }, f.first, f.n);
        }
        self.finish(out);
    }

    /// Like [`Clusterer::cluster`] for plain keys, all `sync` or all asynchronous.
    pub fn cluster_keys(&mut self, keys: &[BlockKey], sync: bool, out: &mut Vec<DeviceRead>) {
        self.sync.clear();
        self.asyn.clear();
        for &k in keys {
            push_range(if sync { &mut self.sync } else { &mut self.asyn }, k, 1);
        }
        self.finish(out);
    }

    /// Like [`Clusterer::cluster`], dropping first the blocks `view` reports resident or in flight.
    pub fn cluster_view(&mut self, fetches: &[Fetch], view: &dyn BlockView, out: &mut Vec<DeviceRead>) {
        self.sync.clear();
        self.asyn.clear();
        for f in fetches {
            let list = if f.sync { &mut self.sync } else { &mut self.asyn };
            let mut run: Option<(BlockKey, u64)> = None;
            let vol = f.first.volume();
            let start = f.first.block();
            let stop = start.saturating_add(f.n).min(MAX_BLOCK + 1);
            for b in start..stop {
                let Some(k) = BlockKey::new(vol, b) else { break };
                if view.state(k) == BlockState::Absent {
                    run = Some(match run {
                        Some((s, n)) => (s, n + 1),
                        None => (k, 1),
                    });
                } else if let Some((s, n)) = run.take() {
                    push_range(list, s, n);
                }
            }
            if let Some((s, n)) = run {
                push_range(list, s, n);
            }
        }
        self.finish(out);
    }

    fn finish(&mut self, out: &mut Vec<DeviceRead>) {
        coalesce(&mut self.sync);
        coalesce(&mut self.asyn);
        subtract(&mut self.asyn, &self.sync);
        for (list, sync) in [(&self.sync, true), (&self.asyn, false)] {
            for &(start, stop) in list.iter() {
                let mut s = start;
                while s < stop {
                    let n = (stop - s).min(self.max_blocks as u128);
                    out.push(DeviceRead { first: BlockKey::from_raw(s as u64), n: n as u64, sync });
                    s += n;
                }
            }
        }
    }
}

impl Default for Clusterer {
    /// 16 blocks (64 KiB at 4 KiB blocks).
    fn default() -> Self {
        Clusterer::with_kib(DEFAULT_MAX_KIB, 4096)
    }
}

/// Pushes the raw-key range of `n` blocks from `first`, clipped at the end of its volume.
fn push_range(list: &mut Vec<(u128, u128)>, first: BlockKey, n: u64) {
    let room = MAX_BLOCK - first.block() + 1;
    let n = n.min(room);
    if n > 0 {
        list.push((first.raw() as u128, first.raw() as u128 + n as u128));
    }
}

/// Sorts and merges overlapping or adjacent ranges of the same volume.
fn coalesce(list: &mut Vec<(u128, u128)>) {
    list.sort_unstable();
    let mut w = 0;
    for i in 0..list.len() {
        let (s, e) = list[i];
        if w > 0 {
            let (ps, pe) = list[w - 1];
            if s <= pe && (ps >> BLOCK_BITS) == (s >> BLOCK_BITS) {
                list[w - 1].1 = pe.max(e);
                continue;
            }
        }
        list[w] = (s, e);
        w += 1;
    }
    list.truncate(w);
}

/// Removes from `a` (coalesced) every block in `b` (coalesced).
fn subtract(a: &mut Vec<(u128, u128)>, b: &[(u128, u128)]) {
    if b.is_empty() {
        return;
    }
    let mut out = Vec::with_capacity(a.len());
    let mut j = 0;
    for &(s0, e) in a.iter() {
        let mut s = s0;
        while j < b.len() && b[j].1 <= s {
            j += 1;
        }
        let mut jj = j;
        while s < e {
            if jj < b.len() && b[jj].0 < e {
                let (bs, be) = b[jj];
                if bs > s {
                    out.push((s, bs));
                }
                s = s.max(be);
                jj += 1;
            } else {
                out.push((s, e));
                break;
            }
        }
    }
    *a = out;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(v: u32, b: u64) -> BlockKey {
        BlockKey::new(v, b).unwrap()
    }
    fn f(b: u64, n: u64, sync: bool) -> Fetch {
        Fetch { first: k(0, b), n, sync }
    }
    fn t(r: &[DeviceRead]) -> Vec<(u32, u64, u64, bool)> {
        r.iter().map(|r| (r.first.volume(), r.first.block(), r.n, r.sync)).collect()
    }

    #[test]
    fn merges_contiguous_and_splits_at_max() {
        let mut c = Clusterer::new(16).unwrap();
        let mut out = Vec::new();
        // 40 contiguous blocks given out of order and overlapping.
        c.cluster(&[f(20, 20, false), f(0, 10, false), f(8, 14, false)], &mut out);
        assert_eq!(t(&out), [(0, 0, 16, false), (0, 16, 16, false), (0, 32, 8, false)]);
        assert_eq!(Clusterer::default().max_blocks(), 16);
        assert_eq!(Clusterer::with_kib(64, 512).max_blocks(), 128);
        assert_eq!(Clusterer::new(0).unwrap_err(), ClusterError::ZeroMax);
    }

    #[test]
    fn never_mixes_sync_and_async_and_sync_wins_overlaps() {
        let mut c = Clusterer::new(64).unwrap();
        let mut out = Vec::new();
        c.cluster(&[f(10, 10, false), f(0, 4, true), f(4, 8, false), f(14, 2, true)], &mut out);
        assert_eq!(t(&out), [(0, 0, 4, true), (0, 14, 2, true), (0, 4, 10, false), (0, 16, 4, false)]);
    }

    #[test]
    fn never_across_volumes_and_gaps_split() {
        let mut c = Clusterer::new(64).unwrap();
        let mut out = Vec::new();
        let keys = [k(1, 0), k(0, MAX_BLOCK), k(0, MAX_BLOCK - 1), k(1, 1), k(0, 5), k(0, 7)];
        c.cluster_keys(&keys, true, &mut out);
        assert_eq!(t(&out), [(0, 5, 1, true), (0, 7, 1, true), (0, MAX_BLOCK - 1, 2, true), (1, 0, 2, true)]);
        // The very last key of the key space.
        out.clear();
        let last = BlockKey::new(crate::key::MAX_VOLUME, MAX_BLOCK).unwrap();
        c.cluster(&[Fetch { first: last, n: 3, sync: true }], &mut out);
        assert_eq!(out, vec![DeviceRead { first: last, n: 1, sync: true }]);
        // A fetch running off the end of a volume is clipped there.
        out.clear();
        c.cluster(&[Fetch { first: k(0, MAX_BLOCK), n: 5, sync: false }], &mut out);
        assert_eq!(t(&out), [(0, MAX_BLOCK, 1, false)]);
    }

    #[test]
    fn view_drops_cached_and_in_flight_blocks() {
        use crate::prefetch::testutil::SetView;
        let mut view = SetView::default();
        view.resident.insert(k(0, 3));
        view.inflight.insert(k(0, 6));
        let mut c = Clusterer::new(64).unwrap();
        let mut out = Vec::new();
        c.cluster_view(&[f(0, 10, true)], &view, &mut out);
        assert_eq!(t(&out), [(0, 0, 3, true), (0, 4, 2, true), (0, 7, 3, true)]);
    }

    #[test]
    fn order_is_deterministic_whatever_the_input_order() {
        let mut fs = vec![f(9, 3, false), f(1, 2, true), f(30, 1, false), f(2, 5, true), f(100, 40, false)];
        let mut c = Clusterer::new(16).unwrap();
        let mut a = Vec::new();
        c.cluster(&fs, &mut a);
        fs.reverse();
        let mut b = Vec::new();
        c.cluster(&fs, &mut b);
        assert_eq!(a, b);
        let total: u64 = a.iter().map(|r| r.n).sum();
        assert_eq!(total, 6 + 3 + 1 + 40);
    }
}
