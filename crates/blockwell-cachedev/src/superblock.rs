//! The superblock: identity, geometry, origin identity, state flags and where recovery starts. Two copies (at
//! 0 and 4 KiB), written alternately; the valid copy with the higher generation wins.

use crate::layout::Geometry;
use crate::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64, Error, META_BLOCK};
use std::fmt;

/// The first 8 bytes of a cache device.
pub const MAGIC: [u8; 8] = *b"BLKWLCD\0";
/// The format this code writes and the newest it reads.
pub const FORMAT_VERSION: u32 = 1;
/// Incompatible feature: dirty entries may carry their data's checksum (entry flag bit 1). Written by every
/// superblock write of this code, so that an older Blockwell refuses the device instead of its entries.
pub const INCOMPAT_DATA_CRC: u32 = 1;
/// Incompatible-feature bits this code understands.
const KNOWN_INCOMPAT: u32 = INCOMPAT_DATA_CRC;
/// Longest origin path recorded.
pub const MAX_PATH: usize = 1024;

/// Where the origin write nonce lies (after the longest origin path).
const NONCE_AT: usize = 1216;

const FLAG_CLEAN: u32 = 1;
const FLAG_DETACHED: u32 = 2;
const CRC_AT: usize = 16;

/// What writes do at this cache level; recorded so that recovery knows what the contents promise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CacheMode {
    WriteBack,
    WriteThrough,
    WriteAround,
    ReadOnly,
}

impl CacheMode {
    pub const ALL: [CacheMode; 4] =
        [CacheMode::WriteBack, CacheMode::WriteThrough, CacheMode::WriteAround, CacheMode::ReadOnly];

    pub fn name(self) -> &'static str {
        match self {
            CacheMode::WriteBack => "write-back",
            CacheMode::WriteThrough => "write-through",
            CacheMode::WriteAround => "write-around",
            CacheMode::ReadOnly => "read-only",
        }
    }

    fn code(self) -> u32 {
        match self {
            CacheMode::WriteBack => 1,
            CacheMode::WriteThrough => 2,
            CacheMode::WriteAround => 3,
            CacheMode::ReadOnly => 4,
        }
    }

    fn from_code(c: u32) -> Option<CacheMode> {
        Self::ALL.into_iter().find(|m| m.code() == c)
    }
}

impl std::str::FromStr for CacheMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| format!("unknown mode '{s}' (known: write-back, write-through, write-around, read-only)"))
    }
}

impl fmt::Display for CacheMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Which origin a cache device belongs to: its size and a UUID (stamped on the origin, or recorded for it,
/// when the cache was formatted).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OriginId {
    pub size: u64,
    pub uuid: [u8; 16],
}

impl fmt::Display for OriginId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} B)", uuid::Uuid::from_bytes(self.uuid).hyphenated(), self.size)
    }
}

/// The decoded superblock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    pub version: u32,
    pub generation: u64,
    pub uuid: [u8; 16],
    pub geometry: Geometry,
    pub mode: CacheMode,
    pub origin: OriginId,
    /// The origin's path when the cache was formatted or last attached (informational).
    pub origin_path: String,
    /// The last user shut down cleanly: the table copy holds everything, with policy hints.
    pub clean: bool,
    /// Detached: every dirty block was written back and the origin alone is current.
    pub detached: bool,
    /// The table copy (0 or 1) of the last checkpoint, and its sequence number.
    pub checkpoint_table: u8,
    pub checkpoint_seq: u64,
    /// Where journal replay starts (block index in the ring) and the sequence number of the first commit there.
    pub journal_head: u64,
    pub journal_seq: u64,
    /// Times the device was opened for writing.
    pub mounts: u64,
    /// When it was formatted (seconds since the epoch).
    pub created: u64,
    /// The origin's write nonce when this device last had it: the origin keeps the same value until something
    /// other than this device opens it for writing (see `blockwell_server::tier::origin`). 0: none recorded (a
    /// device never attached, or written by a Blockwell that kept none).
    pub origin_nonce: u64,
}

impl Superblock {
    pub fn uuid_string(&self) -> String {
        uuid::Uuid::from_bytes(self.uuid).hyphenated().to_string()
    }

    /// The 4 KiB encoding.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = vec![0u8; META_BLOCK as usize];
        b[0..8].copy_from_slice(&MAGIC);
        put_u32(&mut b, 8, self.version);
        put_u32(&mut b, 12, INCOMPAT_DATA_CRC);
        let flags = if self.clean { FLAG_CLEAN } else { 0 } | if self.detached { FLAG_DETACHED } else { 0 };
        put_u32(&mut b, 20, flags);
        put_u64(&mut b, 24, self.generation);
        b[32..48].copy_from_slice(&self.uuid);
        let g = &self.geometry;
        put_u32(&mut b, 48, g.block_size);
        put_u32(&mut b, 52, self.mode.code());
        put_u64(&mut b, 56, g.slots);
        put_u64(&mut b, 64, g.table_blocks);
        put_u64(&mut b, 72, g.journal_blocks);
        put_u64(&mut b, 80, g.table_offset[0]);
        put_u64(&mut b, 88, g.table_offset[1]);
        put_u64(&mut b, 96, g.journal_offset);
        put_u64(&mut b, 104, g.data_offset);
        put_u64(&mut b, 112, self.origin.size);
        b[120..136].copy_from_slice(&self.origin.uuid);
        put_u32(&mut b, 136, u32::from(self.checkpoint_table));
        put_u64(&mut b, 144, self.checkpoint_seq);
        put_u64(&mut b, 152, self.journal_head);
        put_u64(&mut b, 160, self.journal_seq);
        put_u64(&mut b, 168, self.mounts);
        put_u64(&mut b, 176, self.created);
        let path = self.origin_path.as_bytes();
        let n = path.len().min(MAX_PATH);
        put_u16(&mut b, 184, n as u16);
        b[186..186 + n].copy_from_slice(&path[..n]);
        put_u64(&mut b, NONCE_AT, self.origin_nonce);
        let crc = crc(&b);
        put_u32(&mut b, CRC_AT, crc);
        b
    }

    /// Decodes one copy. `Err(None)`: no magic (never formatted); `Err(Some(..))`: a damaged or incompatible
    /// superblock, saying why.
    pub fn decode(b: &[u8]) -> Result<Superblock, Option<Error>> {
        if b[0..8] != MAGIC {
            return Err(None);
        }
        if get_u32(b, CRC_AT) != crc(b) {
            return Err(Some(Error::Corrupt("superblock checksum mismatch".to_string())));
        }
        let version = get_u32(b, 8);
        if version > FORMAT_VERSION {
            return Err(Some(Error::NewerFormat { found: version, supported: FORMAT_VERSION }));
        }
        let incompat = get_u32(b, 12);
        if incompat & !KNOWN_INCOMPAT != 0 {
            return Err(Some(Error::UnknownFeatures(incompat)));
        }
        let corrupt = |m: &str| Some(Error::Corrupt(format!("superblock: {m}")));
        let flags = get_u32(b, 20);
        if flags & !(FLAG_CLEAN | FLAG_DETACHED) != 0 {
            return Err(corrupt(&format!("unknown flags {flags:#x}")));
        }
        let mode = CacheMode::from_code(get_u32(b, 52)).ok_or_else(|| corrupt("unknown cache mode"))?;
        let geometry = Geometry {
            block_size: get_u32(b, 48),
            slots: get_u64(b, 56),
            table_blocks: get_u64(b, 64),
            journal_blocks: get_u64(b, 72),
            table_offset: [get_u64(b, 80), get_u64(b, 88)],
            journal_offset: get_u64(b, 96),
            data_offset: get_u64(b, 104),
        };
        geometry.check(u64::MAX).map_err(|e| corrupt(&e))?;
        let checkpoint_table = get_u32(b, 136);
        if checkpoint_table > 1 {
            return Err(corrupt("checkpoint table is neither 0 nor 1"));
        }
        let journal_head = get_u64(b, 152);
        if journal_head >= geometry.journal_blocks {
            return Err(corrupt("journal head outside the journal"));
        }
        let n = (get_u16(b, 184) as usize).min(MAX_PATH);
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&b[32..48]);
        let mut ouuid = [0u8; 16];
        ouuid.copy_from_slice(&b[120..136]);
        Ok(Superblock {
            version,
            generation: get_u64(b, 24),
            uuid,
            geometry,
            mode,
            origin: OriginId { size: get_u64(b, 112), uuid: ouuid },
            origin_path: String::from_utf8_lossy(&b[186..186 + n]).into_owned(),
            clean: flags & FLAG_CLEAN != 0,
            detached: flags & FLAG_DETACHED != 0,
            checkpoint_table: checkpoint_table as u8,
            checkpoint_seq: get_u64(b, 144),
            journal_head,
            journal_seq: get_u64(b, 160),
            mounts: get_u64(b, 168),
            created: get_u64(b, 176),
            origin_nonce: get_u64(b, NONCE_AT),
        })
    }
}

fn crc(b: &[u8]) -> u32 {
    let c = crc32c::crc32c(&b[..CRC_AT]);
    let c = crc32c::crc32c_append(c, &[0; 4]);
    crc32c::crc32c_append(c, &b[CRC_AT + 4..META_BLOCK as usize])
}

/// Both copies, decoded: the chosen one (highest valid generation) and what was wrong with each.
pub(crate) struct Copies {
    pub chosen: Option<(usize, Superblock)>,
    pub status: [Result<Superblock, Option<Error>>; 2],
}

/// The superblock `dev` uses now (the valid copy with the higher generation), if it has one; nothing else is
/// checked.
pub fn current(dev: &dyn crate::Dev) -> Option<Superblock> {
    let mut head = vec![0u8; 2 * META_BLOCK as usize];
    if dev.size() < 2 * META_BLOCK || dev.read_at(&mut head, 0).is_err() {
        return None;
    }
    read_copies(&head).chosen.map(|(_, sb)| sb)
}

/// Reads and decodes both copies from the first 8 KiB.
pub(crate) fn read_copies(first_8k: &[u8]) -> Copies {
    let status = [Superblock::decode(&first_8k[..4096]), Superblock::decode(&first_8k[4096..8192])];
    let chosen = status
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.as_ref().ok().map(|s| (i, s.clone())))
        .max_by_key(|(i, s)| (s.generation, std::cmp::Reverse(*i)));
    Copies { chosen, status }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sb() -> Superblock {
        Superblock {
            version: FORMAT_VERSION,
            generation: 3,
            uuid: [1; 16],
            geometry: Geometry::for_size(8 << 20, 4096, None).unwrap(),
            mode: CacheMode::WriteBack,
            origin: OriginId { size: 1 << 30, uuid: [2; 16] },
            origin_path: "/var/lib/disk.img".into(),
            clean: true,
            detached: false,
            checkpoint_table: 1,
            checkpoint_seq: 4,
            journal_head: 7,
            journal_seq: 11,
            mounts: 2,
            created: 1_700_000_000,
            origin_nonce: 0x0123_4567_89ab_cdef,
        }
    }

    #[test]
    fn round_trips_and_rejects_damage_and_newer_versions() {
        let s = sb();
        let b = s.encode();
        assert_eq!(Superblock::decode(&b).unwrap(), s);
        let mut c = b.clone();
        c[300] ^= 4;
        assert!(matches!(Superblock::decode(&c), Err(Some(Error::Corrupt(_)))));
        assert!(matches!(Superblock::decode(&vec![0; 4096]), Err(None)));
        let newer = Superblock { version: FORMAT_VERSION + 1, ..s.clone() }.encode();
        assert!(matches!(Superblock::decode(&newer), Err(Some(Error::NewerFormat { found: 2, supported: 1 }))));
    }

    #[test]
    fn the_valid_copy_with_the_higher_generation_wins() {
        let a = sb().encode();
        let b = Superblock { generation: 4, clean: false, ..sb() }.encode();
        let both = [a.clone(), b.clone()].concat();
        assert_eq!(read_copies(&both).chosen.unwrap().0, 1);
        let mut torn = b.clone();
        torn[100..].fill(0);
        let one = [a, torn].concat();
        let c = read_copies(&one);
        assert_eq!(c.chosen.unwrap().1.generation, 3, "a torn newer copy falls back to the older one");
        assert!(c.status[1].is_err());
    }
}
