//! The block allocator behind the `block-groups` layout: ext2/ext3's allocation within block groups as Linux
//! 2.6.14 (seed 000's kernel) does it, reduced to what decides where a file's blocks go.
//!
//! - **Groups and bitmaps.** Each group has a bitmap of its blocks; its first `reserved` blocks (bitmaps and
//!   inode table) are in use from the start. Allocation takes the first free block at or after a *goal*.
//! - **Goals** (`ext3_find_goal`/`ext3_find_near`, the same in ext2): a file's next block goes after its last
//!   one; its first block goes to the start of its directory's group plus a *colour*,
//!   `(pid % 16) × blocks_per_group / 16`, so files started by different processes begin 1/16 of a group
//!   apart. The writer's pid is modelled as `writer + base`, `base` drawn from the layout seed; `colours` = 1
//!   puts every first goal at the group start.
//! - **Reservation windows** (ext3 since 2.6.10, `fs/ext3/balloc.c`; `rsv_min` > 0): each open file owns a
//!   window of blocks no other file may allocate from, initially `rsv_min` (8 blocks, `EXT3_DEFAULT_RESERVE_
//!   BLOCKS`). The file allocates inside its window from its goal; when the window is used up (or the goal left
//!   it) a new window is placed at the first place at or after the goal that overlaps no other file's window
//!   and whose first free block lies inside it (`find_next_reservable_window` and `alloc_new_reservation`),
//!   and if more than half the old window was allocated the size doubles, up to `rsv_max` (1027 blocks,
//!   `EXT3_MAX_RESERVE_BLOCKS`). A group with fewer free blocks than the window size is allocated from
//!   without a window. Closing the file (here: after its last block) releases the window; its unused blocks
//!   were never allocated. So concurrent sequential writers leapfrog each other in windows of 32 KiB growing
//!   to 4 MiB, instead of interleaving block by block as ext2 does.
//! - **Full groups**: the other groups are tried in order from their start, then the goal group from its start
//!   (`ext3_new_blocks`'s loop); when every group is full a new group is added past the end.
//!
//! Not modelled: ext2's search for a free byte of the bitmap and its 8-block preallocation (without windows a
//! goal that is taken moves to the first free block after it), indirect blocks (one per 1024 data blocks), the
//! journal, Orlov's choice of groups (the layout picks directory groups itself), and delayed effects of the
//! page cache (allocation happens in the order of the creation schedule).

use std::collections::BTreeMap;

/// The reservation-window state of one file being written.
#[derive(Clone, Debug, Default)]
pub(super) struct FileAlloc {
    /// The group the file is being allocated in, and the goal (group-relative) of its next block.
    pub group: Option<usize>,
    goal: u64,
    /// Its window (group, start, end exclusive), if it has one.
    window: Option<(usize, u64, u64)>,
    /// Blocks allocated in the current window.
    hits: u64,
    /// Size of the next window, in blocks.
    goal_size: u64,
}

/// Bitmaps and reservation windows of every group.
pub(super) struct Groups {
    /// Blocks per group.
    per: u64,
    /// Blocks in use at the start of each group.
    reserved: u64,
    /// Window size bounds in blocks (`min` 0: no windows).
    rsv_min: u64,
    rsv_max: u64,
    bitmap: Vec<Vec<u64>>,
    free: Vec<u64>,
    /// Per group: start → end (exclusive) of every reserved window.
    windows: Vec<BTreeMap<u64, u64>>,
}

impl Groups {
    pub fn new(groups: u64, per: u64, reserved: u64, rsv_min: u64, rsv_max: u64) -> Self {
        let mut g = Groups {
            per,
            reserved,
            rsv_min,
            rsv_max: rsv_max.max(rsv_min),
            bitmap: Vec::new(),
            free: Vec::new(),
            windows: Vec::new(),
        };
        for _ in 0..groups.max(1) {
            g.add_group();
        }
        g
    }

    pub fn len(&self) -> usize {
        self.free.len()
    }

    fn add_group(&mut self) -> usize {
        let words = self.per.div_ceil(64) as usize;
        let mut bm = vec![0u64; words];
        // Metadata at the start, and the bits past the group's end, are never free.
        for b in (0..self.reserved).chain(self.per..words as u64 * 64) {
            bm[(b / 64) as usize] |= 1 << (b % 64);
        }
        self.bitmap.push(bm);
        self.free.push(self.per - self.reserved);
        self.windows.push(BTreeMap::new());
        self.free.len() - 1
    }

    /// The first free block of group `gi` in `from .. to`.
    fn first_free(&self, gi: usize, from: u64, to: u64) -> Option<u64> {
        let bm = &self.bitmap[gi];
        let to = to.min(self.per);
        let mut b = from;
        while b < to {
            let w = (b / 64) as usize;
            let free = !bm[w] >> (b % 64);
            if free != 0 {
                let c = b + u64::from(free.trailing_zeros());
                return (c < to).then_some(c);
            }
            b = (w as u64 + 1) * 64;
        }
        None
    }

    /// Marks up to `want` consecutive free blocks from `start` (which is free) below `limit` as used.
    fn take(&mut self, gi: usize, start: u64, limit: u64, want: u64) -> u64 {
        let mut b = start;
        while b < limit.min(self.per) && b - start < want {
            let (w, bit) = ((b / 64) as usize, b % 64);
            if self.bitmap[gi][w] & (1 << bit) != 0 {
                break;
            }
            self.bitmap[gi][w] |= 1 << bit;
            b += 1;
        }
        self.free[gi] -= b - start;
        b - start
    }

    /// Where a new window of `size` blocks goes in group `gi`, searching from `from`: the first start that
    /// overlaps no reserved window and whose first free block lies inside the window.
    fn find_window(&self, gi: usize, from: u64, size: u64) -> Option<(u64, u64)> {
        let mut cur = from;
        loop {
            // Skip the windows in the way (they do not overlap each other, so the one starting last before
            // the candidate's end is the only one to check).
            while let Some((_, &e)) = self.windows[gi].range(..cur + size).next_back().filter(|(_, &e)| e > cur) {
                cur = e;
            }
            if cur >= self.per {
                return None;
            }
            let end = (cur + size).min(self.per);
            let ff = self.first_free(gi, cur, self.per)?;
            if ff < end {
                return Some((cur, end));
            }
            cur = ff;
        }
    }

    fn drop_window(&mut self, st: &mut FileAlloc) {
        if let Some((gi, s, _)) = st.window.take() {
            self.windows[gi].remove(&s);
        }
    }

    /// A file starts: its first goal is `goal` (group-relative) in group `gi`.
    pub fn open(&self, gi: usize, goal: u64) -> FileAlloc {
        FileAlloc { group: Some(gi), goal, window: None, hits: 0, goal_size: self.rsv_min }
    }

    /// The file is complete (closed): its window is released.
    pub fn close(&mut self, st: &mut FileAlloc) {
        self.drop_window(st);
    }

    /// Allocates the next run of at most `want` blocks for the file; returns (group, first block in the group,
    /// blocks). Always allocates at least one block (adds a group when all are full).
    pub fn alloc(&mut self, st: &mut FileAlloc, want: u64) -> (usize, u64, u64) {
        let gi = st.group.unwrap_or(0);
        let n = self.len();
        let tries = std::iter::once((gi, st.goal)).chain((1..=n).map(|k| ((gi + k) % n, 0)));
        for (g, goal) in tries {
            if let Some((s, got)) = self.try_group(st, g, goal, want) {
                st.group = Some(g);
                st.goal = s + got;
                return (g, s, got);
            }
        }
        let g = self.add_group();
        let (s, got) = self.try_group(st, g, 0, want).unwrap_or((self.reserved, 0));
        debug_assert!(got > 0, "a new group has room");
        st.group = Some(g);
        st.goal = s + got;
        (g, s, got)
    }

    fn try_group(&mut self, st: &mut FileAlloc, gi: usize, goal: u64, want: u64) -> Option<(u64, u64)> {
        if self.free[gi] == 0 || goal >= self.per {
            return None;
        }
        if self.rsv_min > 0 {
            // The first free block from the goal in the file's window, if the goal is in it.
            let mut start = match st.window {
                Some((wg, ws, we)) if wg == gi && goal >= ws && goal < we => self.first_free(gi, goal, we),
                _ => None,
            };
            if start.is_none() {
                if let Some((_, ws, we)) = st.window {
                    if st.hits > (we - ws) / 2 {
                        st.goal_size = (st.goal_size * 2).min(self.rsv_max);
                    }
                }
                self.drop_window(st);
                if self.free[gi] >= st.goal_size {
                    let (ws, we) = self.find_window(gi, goal, st.goal_size)?;
                    self.windows[gi].insert(ws, we);
                    st.window = Some((gi, ws, we));
                    st.hits = 0;
                    start = Some(self.first_free(gi, goal.max(ws), we)?);
                }
            }
            if let (Some(s), Some((_, _, we))) = (start, st.window) {
                let got = self.take(gi, s, we, want);
                st.hits += got;
                return Some((s, got));
            }
        }
        // No window: the first free block at or after the goal.
        let s = self.first_free(gi, goal, self.per)?;
        Some((s, self.take(gi, s, self.per, want)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(rsv: (u64, u64)) -> Groups {
        Groups::new(1, 1024, 2, rsv.0, rsv.1)
    }

    #[test]
    fn a_lone_writer_is_one_extent_after_the_metadata() {
        let mut g = groups((8, 64));
        let mut f = g.open(0, 0);
        let (mut runs, mut placed) = (Vec::new(), 0);
        while placed < 100 {
            let r = g.alloc(&mut f, 5.min(100 - placed));
            placed += r.2;
            runs.push(r);
        }
        // Contiguous from block 2, the first free one.
        let mut next = 2;
        for &(gi, s, n) in &runs {
            assert_eq!((gi, s), (0, next));
            next += n;
        }
        assert_eq!(next, 102);
    }

    #[test]
    fn windows_double_and_keep_concurrent_writers_apart() {
        let mut g = groups((8, 64));
        let (mut a, mut b) = (g.open(0, 0), g.open(0, 0));
        let (mut ea, mut eb) = (Vec::new(), Vec::new());
        // Two writers alternate 2-block chunks from the same goal.
        for _ in 0..100 {
            ea.push(g.alloc(&mut a, 2));
            eb.push(g.alloc(&mut b, 2));
        }
        let extents = |v: &[(usize, u64, u64)]| {
            let mut out: Vec<(u64, u64)> = Vec::new();
            for &(_, s, n) in v {
                match out.last_mut() {
                    Some(l) if l.0 + l.1 == s => l.1 += n,
                    _ => out.push((s, n)),
                }
            }
            out
        };
        let (xa, xb) = (extents(&ea), extents(&eb));
        // a: windows of 8 (6 blocks after the metadata), 16, 32, 64, 64, ... (b's windows between them).
        let sizes: Vec<u64> = xa.iter().map(|e| e.1).collect();
        assert_eq!(&sizes[..4], &[6, 16, 32, 64], "{xa:?}");
        assert!(xb.iter().all(|e| e.1 >= 8), "{xb:?}");
        // No block twice.
        let mut all: Vec<u64> = xa.iter().chain(&xb).flat_map(|&(s, n)| s..s + n).collect();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 400);
    }

    #[test]
    fn without_windows_concurrent_writers_interleave_chunk_by_chunk() {
        let mut g = groups((0, 0));
        let (mut a, mut b) = (g.open(0, 0), g.open(0, 0));
        for i in 0..10 {
            assert_eq!(g.alloc(&mut a, 2), (0, 2 + 4 * i, 2));
            assert_eq!(g.alloc(&mut b, 2), (0, 4 + 4 * i, 2));
        }
    }

    #[test]
    fn a_closed_files_unused_window_is_free_again() {
        let mut g = groups((8, 64));
        let mut a = g.open(0, 0);
        assert_eq!(g.alloc(&mut a, 3), (0, 2, 3));
        let mut b = g.open(0, 0);
        // a's window 0..8 is reserved: b starts after it.
        assert_eq!(g.alloc(&mut b, 1), (0, 8, 1));
        g.close(&mut a);
        let mut c = g.open(0, 0);
        assert_eq!(g.alloc(&mut c, 1), (0, 5, 1));
    }

    #[test]
    fn full_groups_spill_and_a_group_is_added_at_the_end() {
        let mut g = Groups::new(2, 64, 4, 8, 32);
        let mut a = g.open(1, 0);
        let mut placed = 0;
        let mut seen = Vec::new();
        while placed < 150 {
            let (gi, s, n) = g.alloc(&mut a, 7);
            assert!(n > 0 && s >= 4 && s + n <= 64);
            seen.push(gi);
            placed += n;
        }
        // Group 1 first, then group 0, then a new group 2.
        seen.dedup();
        assert_eq!(seen, vec![1, 0, 2]);
        assert_eq!(g.len(), 3);
    }
}
