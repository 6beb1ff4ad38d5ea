//! [`Geometry`]: where the superblocks, the two table copies, the journal and the data slots lie.

use crate::record::ENTRIES_PER_BLOCK;
use crate::{Error, META_BLOCK};

/// Fewest data slots a device may have.
pub const MIN_SLOTS: u64 = 16;

/// Fewest journal blocks (the journal is at least as large as one table copy, and at least this).
pub const MIN_JOURNAL_BLOCKS: u64 = 64;

/// Devices of at least this size align the data region to 1 MiB (flash erase blocks); smaller ones to the block
/// size.
const ALIGN_1M_FROM: u64 = 256 << 20;

/// The regions of a formatted device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub block_size: u32,
    /// Data slots (cache capacity in blocks).
    pub slots: u64,
    /// 4 KiB blocks of one table copy.
    pub table_blocks: u64,
    /// 4 KiB blocks of the journal ring.
    pub journal_blocks: u64,
    pub table_offset: [u64; 2],
    pub journal_offset: u64,
    pub data_offset: u64,
}

/// Checks a block size: a power of two from 512 B to 1 MiB.
pub fn check_block_size(bs: u64) -> Result<u32, Error> {
    if bs.is_power_of_two() && (512..=1 << 20).contains(&bs) {
        Ok(bs as u32)
    } else {
        Err(Error::BadBlockSize(bs))
    }
}

impl Geometry {
    /// The largest geometry that fits a device of `size` bytes; `journal_blocks` overrides the default journal
    /// size (as large as one table copy, at least [`MIN_JOURNAL_BLOCKS`]).
    pub fn for_size(size: u64, block_size: u64, journal_blocks: Option<u64>) -> Result<Geometry, Error> {
        let bs = check_block_size(block_size)?;
        // The largest slot count whose layout fits (the layout's size grows with the slot count).
        let fits = |n: u64| Self::with_slots(size, bs, n, journal_blocks).needed_size() <= size;
        let (mut lo, mut hi) = (0u64, size / block_size + 1);
        while lo + 1 < hi {
            let mid = lo + (hi - lo) / 2;
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        if lo < MIN_SLOTS || !fits(lo) {
            let needed = Self::with_slots(u64::MAX, bs, MIN_SLOTS, journal_blocks).needed_size();
            return Err(Error::TooSmall { size, block_size: bs, needed });
        }
        Ok(Self::with_slots(size, bs, lo, journal_blocks))
    }

    fn with_slots(size: u64, bs: u32, slots: u64, journal_blocks: Option<u64>) -> Geometry {
        let table_blocks = slots.div_ceil(ENTRIES_PER_BLOCK as u64).max(1);
        let journal_blocks = journal_blocks.unwrap_or(table_blocks).max(MIN_JOURNAL_BLOCKS);
        let t0 = 2 * META_BLOCK;
        let t1 = t0 + table_blocks * META_BLOCK;
        let journal_offset = t1 + table_blocks * META_BLOCK;
        let meta_end = journal_offset + journal_blocks * META_BLOCK;
        let align = if size >= ALIGN_1M_FROM { 1 << 20 } else { u64::from(bs).max(META_BLOCK) };
        Geometry {
            block_size: bs,
            slots,
            table_blocks,
            journal_blocks,
            table_offset: [t0, t1],
            journal_offset,
            data_offset: meta_end.div_ceil(align) * align,
        }
    }

    /// Byte offset of slot `slot`'s data.
    #[inline]
    pub fn slot_offset(&self, slot: u64) -> u64 {
        self.data_offset + slot * u64::from(self.block_size)
    }

    /// Bytes the format occupies.
    pub fn needed_size(&self) -> u64 {
        self.slot_offset(self.slots)
    }

    /// Checks that the regions are in order, do not overlap and fit in `size` bytes.
    pub fn check(&self, size: u64) -> Result<(), String> {
        check_block_size(u64::from(self.block_size)).map_err(|e| e.to_string())?;
        let t = self.table_blocks * META_BLOCK;
        let want_table = self.slots.div_ceil(ENTRIES_PER_BLOCK as u64).max(1);
        if self.slots == 0 || self.table_blocks != want_table {
            return Err(format!(
                "{} slots need {} table blocks, superblock says {}",
                self.slots, want_table, self.table_blocks
            ));
        }
        let ordered = self.table_offset[0] >= 2 * META_BLOCK
            && self.table_offset[1] >= self.table_offset[0] + t
            && self.journal_offset >= self.table_offset[1] + t
            && self.journal_blocks >= 1
            && self.data_offset >= self.journal_offset + self.journal_blocks * META_BLOCK;
        if !ordered {
            return Err("metadata regions overlap".to_string());
        }
        let _ = size;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_fills_the_device_without_overlap() {
        for &(size, bs) in &[(4u64 << 20, 4096u64), (64 << 20, 4096), (1 << 30, 4096), (1 << 30, 65536), (8 << 20, 512)]
        {
            let g = Geometry::for_size(size, bs, None).unwrap();
            g.check(size).unwrap();
            assert!(g.needed_size() <= size, "{size} {bs}: {g:?}");
            // One more slot would not fit.
            let bigger = Geometry::with_slots(size, g.block_size, g.slots + 1, None);
            assert!(bigger.needed_size() > size, "{size} {bs}");
            assert_eq!(g.data_offset % u64::from(g.block_size), 0);
        }
        let g = Geometry::for_size(1 << 30, 4096, None).unwrap();
        assert_eq!(g.data_offset % (1 << 20), 0, "large devices align data to 1 MiB");
        assert!(g.slots > 255_000, "{g:?}");
    }

    #[test]
    fn too_small_and_bad_block_sizes_are_errors() {
        assert!(matches!(Geometry::for_size(32 << 10, 4096, None), Err(Error::TooSmall { .. })));
        assert!(matches!(Geometry::for_size(1 << 20, 3000, None), Err(Error::BadBlockSize(3000))));
    }
}
