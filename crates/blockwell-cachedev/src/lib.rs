//! # blockwell-cachedev
//!
//! The on-disk format of Blockwell's persistent cache device (the `--cache-dev` tier of `blockwell serve` and
//! `blockwell mount`), and the metadata machinery that keeps it crash-consistent. No policy and no cache logic
//! live here: a device is a fixed array of *slots* of one block size, and the metadata says, for each slot,
//! which origin block it holds and whether that copy is dirty (newer than the origin).
//!
//! ## Layout (all integers little-endian; the full description is `docs/cache-device-format.md`)
//! ```text
//! 0       superblock, copy A (4 KiB)        magic, version, UUID, block size, geometry, origin identity,
//! 4 KiB   superblock, copy B (4 KiB)        clean-shutdown and detached flags, checkpoint and journal heads
//! 8 KiB   slot table, copy 0                one 24-byte entry per slot, 169 per 4 KiB block
//! ...     slot table, copy 1
//! ...     journal                           a ring of 4 KiB blocks of 24-byte records (slot -> entry)
//! aligned data                              slot i at data_offset + i * block_size
//! ```
//! Every metadata block carries a CRC-32C ([`crc32c`]) seeded with the device's UUID, so a block from an
//! earlier format of the same device, a torn write or a flipped bit is detected and never trusted.
//!
//! ## Crash consistency: a checkpointed table plus a journal
//! The durable state is the table copy the superblock names (the *checkpoint*) with the journal's complete
//! commits after it replayed in order. A commit ([`Metadata::commit`]) syncs the device (so the data its
//! records point to is durable first), appends its records as one or more journal blocks that all carry the
//! commit's sequence number and the mount count, and syncs again; recovery replays commits while every block
//! of the next one is present and valid and stops at the first that is not (a torn tail is an uncommitted
//! commit). When the ring is full, a checkpoint writes the whole table to the other copy, syncs, then points
//! the superblock at it (two superblock copies, written alternately with a generation number, so a torn
//! superblock write leaves the other one).
//!
//! The choice against the two peers: dm-cache keeps its mapping in a transactional copy-on-write B-tree
//! (`persistent-data`), committed by flipping the superblock; bcache journals B-tree keys and writes B-tree
//! nodes log-structured. A cache device's mapping is dense (every slot has exactly one entry) and small
//! (24 bytes a slot), so a flat table needs no tree: a commit costs its records, not a path of tree nodes, and
//! a checkpoint is one sequential write, amortised over a ring's worth of records.

pub mod check;
pub mod crash;
pub mod dev;
pub mod layout;
mod meta;
pub mod probe;
mod record;
pub mod repair;
pub mod superblock;

pub use dev::{Dev, FileDev, MemDev};
pub use layout::Geometry;
pub use meta::{FormatOptions, MetaStats, Metadata, OpenOptions, OriginCheck, Recovery, StaleDirty};
pub use record::{Entry, Record, ENTRIES_PER_BLOCK};
pub use superblock::{CacheMode, OriginId, Superblock, FORMAT_VERSION, MAGIC};

use std::io;

/// Size of every metadata block.
pub const META_BLOCK: u64 = 4096;

/// Errors opening, formatting or writing a cache device. Each names what is wrong with the device; none of
/// them leaves anything written to it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("not a Blockwell cache device (no superblock; `blockwell cache format` makes one)")]
    NotFormatted,
    #[error("corrupt metadata: {0}")]
    Corrupt(String),
    /// A commit before the end of the journal is unreadable while later ones exist (see `blockwell cache
    /// repair`).
    #[error("corrupt metadata: {why}; the device is refused (`blockwell cache repair` salvages what it can prove)")]
    JournalDamaged { seq: u64, block: u64, why: String },
    #[error("format version {found} is newer than this Blockwell understands ({supported}); use a newer Blockwell")]
    NewerFormat { found: u32, supported: u32 },
    #[error("the device uses features this Blockwell does not know (incompatible flags {0:#x})")]
    UnknownFeatures(u32),
    #[error("the cache device belongs to another origin: it records {found}, this origin is {expected}")]
    OriginMismatch { expected: OriginId, found: OriginId },
    #[error("block size {asked} B asked, but the cache device was formatted with {found} B blocks")]
    BlockSize { asked: u32, found: u32 },
    #[error("the device is {size} B but its format needs {needed} B (truncated?)")]
    Truncated { size: u64, needed: u64 },
    #[error("{size} B is too small for a cache device of {block_size} B blocks (at least {needed} B)")]
    TooSmall { size: u64, block_size: u32, needed: u64 },
    #[error("block size {0} B: must be a power of two from 512 B to 1 MiB")]
    BadBlockSize(u64),
    #[error("origin path is {0} bytes; at most 1024 are recorded")]
    PathTooLong(usize),
    #[error("the device already holds {0}; `blockwell cache format --force` overwrites it")]
    Formatted(String),
    #[error("the cache device's metadata could not be written earlier; it accepts no more writes")]
    Failed,
    #[error(
        "the origin was written without this cache device since it last had it: the device's {dirty} dirty \
         block(s) are older than what the origin may hold there now (--force keeps them, so they are served and \
         written back over the origin's newer data; --discard-stale drops them and keeps the origin's)"
    )]
    StaleDirty { dirty: u64 },
    #[error("cannot detach while dirty blocks remain: {0}")]
    Dirty(String),
    #[error("{what}: {source}")]
    Io { what: &'static str, source: io::Error },
}

/// CRC-32C of a metadata block, seeded with the device UUID, over the block with its checksum field (bytes
/// `at..at+4`) taken as zero.
pub(crate) fn block_crc(uuid: &[u8; 16], block: &[u8], at: usize) -> u32 {
    let c = crc32c::crc32c(uuid);
    let c = crc32c::crc32c_append(c, &block[..at]);
    let c = crc32c::crc32c_append(c, &[0; 4]);
    crc32c::crc32c_append(c, &block[at + 4..])
}

pub(crate) fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}

pub(crate) fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub(crate) fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

pub(crate) fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
