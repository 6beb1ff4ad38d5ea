//! Slot entries, journal records, and the codecs of table and journal blocks.
//!
//! A table block: a 32-byte header (magic `BWTB`, CRC-32C, checkpoint sequence, block index, entry count)
//! and up to [`ENTRIES_PER_BLOCK`] entries. A journal block: a 32-byte header (magic `BWJN`, CRC-32C, commit
//! sequence, mount count, part, parts, record count) and up to [`ENTRIES_PER_BLOCK`] records. Entries and
//! records share one 24-byte layout: origin block (or [`Entry::FREE_BLOCK`]) u64, flags u32 (bit 0 dirty, bit 1
//! the dirty entry's data CRC is set), data CRC u32, hint u32, slot u32 (a table entry's own index, checked when
//! read).

use crate::{block_crc, get_u16, get_u32, get_u64, put_u16, put_u32, put_u64, META_BLOCK};

/// Entries (or records) in one 4 KiB block.
pub const ENTRIES_PER_BLOCK: usize = ((META_BLOCK as usize) - HEADER) / ENTRY;

const HEADER: usize = 32;
const ENTRY: usize = 24;
const TABLE_MAGIC: u32 = u32::from_le_bytes(*b"BWTB");
const JOURNAL_MAGIC: u32 = u32::from_le_bytes(*b"BWJN");
const CRC_AT: usize = 4;
const FLAG_DIRTY: u32 = 1;
/// A dirty entry whose `crc` is its data's checksum (devices of the data-checksum feature; before it, a dirty
/// entry's CRC was 0 and unknown).
const FLAG_DATA_CRC: u32 = 2;

/// What one slot holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The origin block whose copy the slot holds, or [`Entry::FREE`].
    pub block: u64,
    /// The copy is newer than the origin's.
    pub dirty: bool,
    /// A policy hint (larger: used more recently); kept at checkpoints, 0 from the journal.
    pub hint: u32,
    /// CRC-32C of the slot's data (see [`Entry::data_crc`]): recovery keeps a clean block only while its data
    /// still has this checksum, and a dirty block whose data fails it is reported, never served.
    pub crc: u32,
    /// `crc` is the data's checksum. Always for a clean entry; for a dirty one, when it was written with its
    /// checksum (a dirty entry of an older device, or of a block whose checksum could not be computed, has none).
    pub has_crc: bool,
}

impl Entry {
    pub const FREE_BLOCK: u64 = u64::MAX;
    pub const FREE: Entry = Entry { block: Self::FREE_BLOCK, dirty: false, hint: 0, crc: 0, has_crc: false };

    /// A dirty entry whose data's checksum is not known.
    pub fn dirty(block: u64) -> Entry {
        Entry { block, dirty: true, hint: 0, crc: 0, has_crc: false }
    }

    /// A dirty entry whose data has checksum `crc`.
    pub fn dirty_crc(block: u64, crc: u32) -> Entry {
        Entry { block, dirty: true, hint: 0, crc, has_crc: true }
    }

    /// A clean entry whose data has checksum `crc`.
    pub fn clean(block: u64, crc: u32) -> Entry {
        Entry { block, dirty: false, hint: 0, crc, has_crc: true }
    }

    /// The checksum the slot's data must have, when the entry records one.
    pub fn data_crc(&self) -> Option<u32> {
        (!self.is_free() && self.has_crc).then_some(self.crc)
    }

    #[inline]
    pub fn is_free(&self) -> bool {
        self.block == Self::FREE_BLOCK
    }

    fn encode(&self, b: &mut [u8], slot: u64) {
        put_u64(b, 0, self.block);
        let flags = match (self.dirty, self.has_crc) {
            (true, true) => FLAG_DIRTY | FLAG_DATA_CRC,
            (true, false) => FLAG_DIRTY,
            (false, _) => 0,
        };
        put_u32(b, 8, flags);
        put_u32(b, 12, self.crc);
        put_u32(b, 16, self.hint);
        put_u32(b, 20, slot as u32);
    }

    /// The entry and the slot it names.
    fn decode(b: &[u8]) -> Result<(Entry, u64), String> {
        let block = get_u64(b, 0);
        let flags = get_u32(b, 8);
        if flags & !(FLAG_DIRTY | FLAG_DATA_CRC) != 0 {
            return Err(format!("unknown entry flags {flags:#x}"));
        }
        if block == Self::FREE_BLOCK && flags != 0 {
            return Err("a free slot marked dirty".to_string());
        }
        if flags == FLAG_DATA_CRC {
            return Err("a clean entry with the dirty-checksum flag".to_string());
        }
        let dirty = flags & FLAG_DIRTY != 0;
        let has_crc = block != Self::FREE_BLOCK && (!dirty || flags & FLAG_DATA_CRC != 0);
        let e = Entry { block, dirty, crc: get_u32(b, 12), hint: get_u32(b, 16), has_crc };
        Ok((e, u64::from(get_u32(b, 20))))
    }
}

/// One change of the durable table: slot `slot` now holds `entry`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub slot: u64,
    pub entry: Entry,
}

/// Encodes table block `index` of checkpoint `seq` from `entries` (at most [`ENTRIES_PER_BLOCK`]).
pub(crate) fn encode_table_block(uuid: &[u8; 16], seq: u64, index: u64, entries: &[Entry]) -> Vec<u8> {
    debug_assert!(entries.len() <= ENTRIES_PER_BLOCK);
    let mut b = vec![0u8; META_BLOCK as usize];
    put_u32(&mut b, 0, TABLE_MAGIC);
    put_u64(&mut b, 8, seq);
    put_u64(&mut b, 16, index);
    put_u32(&mut b, 24, entries.len() as u32);
    let first = index * ENTRIES_PER_BLOCK as u64;
    for (i, e) in entries.iter().enumerate() {
        e.encode(&mut b[HEADER + ENTRY * i..HEADER + ENTRY * (i + 1)], first + i as u64);
    }
    let crc = block_crc(uuid, &b, CRC_AT);
    put_u32(&mut b, CRC_AT, crc);
    b
}

/// Decodes table block `index`, which must belong to checkpoint `seq` and hold `count` entries.
pub(crate) fn decode_table_block(
    uuid: &[u8; 16],
    b: &[u8],
    seq: u64,
    index: u64,
    count: usize,
    out: &mut Vec<Entry>,
) -> Result<(), String> {
    if get_u32(b, 0) != TABLE_MAGIC {
        return Err("not a table block (bad magic)".to_string());
    }
    if get_u32(b, CRC_AT) != block_crc(uuid, b, CRC_AT) {
        return Err("checksum mismatch".to_string());
    }
    let (s, i, n) = (get_u64(b, 8), get_u64(b, 16), get_u32(b, 24) as usize);
    if s != seq || i != index {
        return Err(format!("belongs to checkpoint {s} block {i}, expected checkpoint {seq} block {index}"));
    }
    if n != count {
        return Err(format!("holds {n} entries, expected {count}"));
    }
    let first = index * ENTRIES_PER_BLOCK as u64;
    for k in 0..n {
        let (e, slot) =
            Entry::decode(&b[HEADER + ENTRY * k..HEADER + ENTRY * (k + 1)]).map_err(|e| format!("entry {k}: {e}"))?;
        if slot != first + k as u64 {
            return Err(format!("entry {k} names slot {slot}"));
        }
        out.push(e);
    }
    Ok(())
}

/// The header of a journal block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct JournalHeader {
    pub seq: u64,
    pub mount: u64,
    pub part: u16,
    pub parts: u16,
}

/// Encodes part `part` of `parts` of commit `seq` (written under mount count `mount`).
pub(crate) fn encode_journal_block(uuid: &[u8; 16], h: JournalHeader, records: &[Record]) -> Vec<u8> {
    debug_assert!(records.len() <= ENTRIES_PER_BLOCK);
    let mut b = vec![0u8; META_BLOCK as usize];
    put_u32(&mut b, 0, JOURNAL_MAGIC);
    put_u64(&mut b, 8, h.seq);
    put_u64(&mut b, 16, h.mount);
    put_u16(&mut b, 24, h.part);
    put_u16(&mut b, 26, h.parts);
    put_u16(&mut b, 28, records.len() as u16);
    for (i, r) in records.iter().enumerate() {
        let at = HEADER + ENTRY * i;
        let e = Entry { hint: 0, ..r.entry };
        e.encode(&mut b[at..at + ENTRY], r.slot);
    }
    let crc = block_crc(uuid, &b, CRC_AT);
    put_u32(&mut b, CRC_AT, crc);
    b
}

/// Decodes a journal block: `None` when it is not a valid journal block of this device (torn, stale from an
/// earlier format, never written).
pub(crate) fn decode_journal_block(uuid: &[u8; 16], b: &[u8]) -> Option<(JournalHeader, Vec<Record>)> {
    if get_u32(b, 0) != JOURNAL_MAGIC || get_u32(b, CRC_AT) != block_crc(uuid, b, CRC_AT) {
        return None;
    }
    let h = JournalHeader { seq: get_u64(b, 8), mount: get_u64(b, 16), part: get_u16(b, 24), parts: get_u16(b, 26) };
    let n = get_u16(b, 28) as usize;
    if n > ENTRIES_PER_BLOCK || h.parts == 0 || h.part >= h.parts {
        return None;
    }
    let mut out = Vec::with_capacity(n);
    for k in 0..n {
        let at = HEADER + ENTRY * k;
        let (entry, slot) = Entry::decode(&b[at..at + ENTRY]).ok()?;
        out.push(Record { slot, entry });
    }
    Some((h, out))
}

/// What a journal block that fails its checks still appears to say: its sequence number and the records that
/// decode (nothing here is trusted; `blockwell cache repair` names these slots as hints).
pub(crate) fn decode_journal_block_unchecked(b: &[u8]) -> (u64, Vec<Record>) {
    let n = (get_u16(b, 28) as usize).min(ENTRIES_PER_BLOCK);
    let recs = (0..n)
        .filter_map(|k| {
            let at = HEADER + ENTRY * k;
            Entry::decode(&b[at..at + ENTRY]).ok().map(|(entry, slot)| Record { slot, entry })
        })
        .collect();
    (get_u64(b, 8), recs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const U: [u8; 16] = [7; 16];

    #[test]
    fn table_blocks_round_trip_and_detect_damage() {
        let entries: Vec<Entry> = (0..ENTRIES_PER_BLOCK as u64)
            .map(|i| match i % 3 {
                0 => Entry::FREE,
                1 => Entry::dirty(i * 7),
                _ => Entry::clean(i * 7, i as u32 * 31),
            })
            .collect();
        let mut entries = entries;
        entries[1] = Entry::dirty_crc(7, 0xfeed);
        let b = encode_table_block(&U, 5, 2, &entries);
        let mut out = Vec::new();
        decode_table_block(&U, &b, 5, 2, entries.len(), &mut out).unwrap();
        assert_eq!(out, entries);
        // Another device's block, another checkpoint, another index, one flipped bit.
        assert!(decode_table_block(&[8; 16], &b, 5, 2, entries.len(), &mut Vec::new()).is_err());
        assert!(decode_table_block(&U, &b, 6, 2, entries.len(), &mut Vec::new()).is_err());
        assert!(decode_table_block(&U, &b, 5, 3, entries.len(), &mut Vec::new()).is_err());
        assert_eq!((out[1].data_crc(), out[4].data_crc(), out[0].data_crc()), (Some(0xfeed), None, None));
        for bit in [0usize, 100, 4095 * 8] {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_table_block(&U, &c, 5, 2, entries.len(), &mut Vec::new()).is_err(), "bit {bit}");
        }
    }

    #[test]
    fn journal_blocks_round_trip_and_detect_damage() {
        let recs: Vec<Record> = (0..40)
            .map(|i| Record {
                slot: i * 3,
                entry: if i % 2 == 1 { Entry::dirty(1000 + i) } else { Entry::clean(1000 + i, 77) },
            })
            .collect();
        let h = JournalHeader { seq: 9, mount: 2, part: 1, parts: 3 };
        let b = encode_journal_block(&U, h, &recs);
        let (h2, r2) = decode_journal_block(&U, &b).unwrap();
        assert_eq!((h2, r2), (h, recs));
        let mut torn = b.clone();
        torn[100..].fill(0);
        assert!(decode_journal_block(&U, &torn).is_none(), "a torn block is not trusted");
        assert!(decode_journal_block(&[1; 16], &b).is_none(), "a block of another format is not trusted");
        assert!(decode_journal_block(&U, &vec![0; 4096]).is_none());
    }
}
