//! Block keys and byte-range math.
//!
//! A block key is (volume, block number) at the cache's block size. It is packed into one `u64`
//! (16 bits of volume, 48 bits of block number) so that the index and the arena store 8 bytes per key.
//! 48 bits of block number address 1 EiB at 4 KiB blocks and 128 PiB at 512 B blocks.

use std::fmt;

/// Bits of the packed key given to the block number.
pub const BLOCK_BITS: u32 = 48;
/// Largest block number a key can hold.
pub const MAX_BLOCK: u64 = (1 << BLOCK_BITS) - 1;
/// Largest volume number a key can hold.
pub const MAX_VOLUME: u32 = u16::MAX as u32;

/// (volume, block number), packed into one `u64`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct BlockKey(u64);

impl BlockKey {
    /// Builds a key; `None` when the volume or block number does not fit (see [`MAX_VOLUME`], [`MAX_BLOCK`]).
    #[inline]
    pub fn new(volume: u32, block: u64) -> Option<Self> {
        if volume > MAX_VOLUME || block > MAX_BLOCK {
            return None;
        }
        Some(BlockKey(((volume as u64) << BLOCK_BITS) | block))
    }

    /// Builds a key from its packed form (as returned by [`BlockKey::raw`]).
    #[inline]
    pub const fn from_raw(raw: u64) -> Self {
        BlockKey(raw)
    }

    /// The packed form: volume in the top 16 bits, block number in the low 48.
    #[inline]
    pub const fn raw(self) -> u64 {
        self.0
    }

    /// The volume number.
    #[inline]
    pub const fn volume(self) -> u32 {
        (self.0 >> BLOCK_BITS) as u32
    }

    /// The block number within the volume.
    #[inline]
    pub const fn block(self) -> u64 {
        self.0 & MAX_BLOCK
    }

    /// The key of the next block of the same volume (wrapping inside the volume is not checked).
    #[inline]
    pub const fn next(self) -> Self {
        BlockKey(self.0 + 1)
    }

    /// A well-mixed 64-bit hash of the key (multiplicative, high bits good for hashbrown's tags).
    #[inline]
    pub const fn hash64(self) -> u64 {
        let x = self.0 ^ (self.0 >> 29);
        let x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        let x = x ^ (x >> 32);
        x.wrapping_mul(0x94d0_49bb_1331_11eb)
    }
}

impl fmt::Debug for BlockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.volume(), self.block())
    }
}

impl fmt::Display for BlockKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The inclusive range of blocks that a byte range `offset .. offset+len` touches, as
/// `(first, count)`. A zero-length request touches no block (`count == 0`).
#[inline]
pub fn block_span(offset: u64, len: u64, block_size: u64) -> (u64, u64) {
    // Every cache block size is a power of two: shifts, not the two 64-bit divisions (tens of cycles each, on
    // every request of a replay).
    let (first, last) = if block_size.is_power_of_two() {
        let shift = block_size.trailing_zeros();
        (offset >> shift, (offset + len.saturating_sub(1)) >> shift)
    } else {
        (offset / block_size, (offset + len.saturating_sub(1)) / block_size)
    };
    if len == 0 {
        return (first, 0);
    }
    (first, last - first + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pack_roundtrip() {
        let k = BlockKey::new(7, 123_456_789).unwrap();
        assert_eq!(k.volume(), 7);
        assert_eq!(k.block(), 123_456_789);
        assert_eq!(BlockKey::from_raw(k.raw()), k);
        assert!(BlockKey::new(MAX_VOLUME + 1, 0).is_none());
        assert!(BlockKey::new(0, MAX_BLOCK + 1).is_none());
        assert_eq!(BlockKey::new(MAX_VOLUME, MAX_BLOCK).unwrap().block(), MAX_BLOCK);
    }

    #[test]
    fn spans() {
        assert_eq!(block_span(0, 4096, 4096), (0, 1));
        assert_eq!(block_span(1, 4096, 4096), (0, 2));
        assert_eq!(block_span(4095, 2, 4096), (0, 2));
        assert_eq!(block_span(8192, 1, 4096), (2, 1));
        assert_eq!(block_span(100, 0, 4096), (0, 0));
        assert_eq!(block_span(1000, 2000, 1000), (1, 2), "a block size that is not a power of two divides");
        // cloudphysics example: lbn 40409911 * 512, 6656 bytes
        let off = 40_409_911u64 * 512;
        assert_eq!(block_span(off, 6656, 4096), (off / 4096, (off + 6655) / 4096 - off / 4096 + 1));
    }
}
