//! Offline repair of a damaged cache device (`blockwell cache repair`), in the spirit of dm-cache's
//! `cache_repair`: it salvages only the mappings it can prove, names every slot and origin block it cannot
//! vouch for, and writes nothing unless asked.
//!
//! What it can prove: the checkpoint's table blocks that pass their checksums, and every journal commit that is
//! complete (all its parts valid), applied in sequence order. A commit that is incomplete while later commits
//! exist is *damaged*: its records are unknown, so every slot whose last known record is older than the last
//! damaged commit may have been changed by it, and cannot be vouched for. Of those, a clean copy whose data
//! still has its checksum is dropped safely (the origin holds it); every other mapped one (a dirty block, or a
//! clean copy whose data changed) is named, with where its data lies on the device. Slots of a damaged table
//! block that no later commit names are unknown and named too. Every mapping kept is verified against its data
//! checksum: a clean copy that fails is dropped, a dirty one is named (after a clean shutdown) or kept as found
//! (after a crash: a write the crash interrupted may have changed it).
//!
//! Written (with `write`), the result is a new checkpoint of the kept mappings in the table copy not in use,
//! then both superblock copies pointing at it, marked shut down cleanly, with the journal restarted after every
//! sequence number seen: an interruption leaves the device as it was.

use crate::dev::Dev;
use crate::record::{
    decode_journal_block, decode_journal_block_unchecked, decode_table_block, encode_table_block, Entry, Record,
    ENTRIES_PER_BLOCK,
};
use crate::superblock::{read_copies, Superblock};
use crate::{Error, META_BLOCK};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// A mapped slot (or a slot of unknown mapping) that the repair cannot vouch for; not kept.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unvouched {
    pub slot: u64,
    /// The origin block the slot held by its last known record (`None`: unknown).
    pub block: Option<u64>,
    pub dirty: bool,
    /// Byte offset of the slot's data on the device (to read it with `dd`).
    pub offset: u64,
    pub why: String,
}

/// What a repair found and did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RepairReport {
    /// Damaged checkpoint table blocks.
    pub damaged_table_blocks: Vec<u64>,
    /// Journal commits that are incomplete while later ones exist.
    pub damaged_commits: Vec<u64>,
    /// Complete commits applied.
    pub commits_applied: u64,
    /// Mappings kept, and how many of them are dirty.
    pub kept: u64,
    pub kept_dirty: u64,
    /// Dirty blocks kept although their data differs from the recorded checksum (after a crash).
    pub kept_as_found: u64,
    /// Clean copies dropped (the origin holds their data).
    pub dropped_clean: u64,
    /// Free slots a damaged commit may have mapped (their data is left in place, not kept).
    pub free_unproven: u64,
    pub unvouched: Vec<Unvouched>,
    /// The result was written to the device.
    pub written: bool,
}

#[derive(Clone, Copy)]
struct Known {
    entry: Entry,
    /// Sequence of the commit that set it (0: the checkpoint).
    seq: u64,
}

/// Salvages what `dev` proves (see the module docs); writes the result when `write`.
pub fn repair(dev: &dyn Dev, write: bool) -> Result<RepairReport, Error> {
    let io = |what: &'static str| move |source| Error::Io { what, source };
    if dev.size() < 2 * META_BLOCK {
        return Err(Error::NotFormatted);
    }
    let mut head = vec![0u8; 2 * META_BLOCK as usize];
    dev.read_at(&mut head, 0).map_err(io("reading the superblocks"))?;
    let copies = read_copies(&head);
    let Some((_, sb)) = copies.chosen else {
        return Err(match copies.status.into_iter().find_map(|s| s.err().flatten()) {
            Some(e @ (Error::NewerFormat { .. } | Error::UnknownFeatures(_))) => e,
            Some(e) => Error::Corrupt(format!("both superblock copies are damaged ({e}); nothing to repair from")),
            None => Error::NotFormatted,
        });
    };
    let g = sb.geometry;
    if dev.size() < g.needed_size() {
        return Err(Error::Truncated { size: dev.size(), needed: g.needed_size() });
    }
    let mut r = RepairReport::default();
    // The checkpoint, block by block.
    let mut known: Vec<Option<Known>> = Vec::with_capacity(g.slots as usize);
    let mut block = vec![0u8; META_BLOCK as usize];
    let copy = sb.checkpoint_table as usize;
    for i in 0..g.table_blocks {
        let count = (g.slots - i * ENTRIES_PER_BLOCK as u64).min(ENTRIES_PER_BLOCK as u64) as usize;
        dev.read_at(&mut block, g.table_offset[copy] + i * META_BLOCK).map_err(io("reading the slot table"))?;
        let mut out = Vec::with_capacity(count);
        if decode_table_block(&sb.uuid, &block, sb.checkpoint_seq, i, count, &mut out).is_ok() {
            known.extend(out.into_iter().map(|entry| Some(Known { entry, seq: 0 })));
        } else {
            r.damaged_table_blocks.push(i);
            known.extend(std::iter::repeat(None).take(count));
        }
    }
    // Every valid journal block of this lap, by commit sequence, then by mount.
    type Parts = BTreeMap<u16, Vec<Record>>;
    let mut commits: BTreeMap<u64, HashMap<(u64, u16), Parts>> = BTreeMap::new();
    // Blocks that fail their checks: what they appear to say (sequence, records), as hints.
    let mut unreadable: Vec<(u64, Vec<Record>)> = Vec::new();
    for pos in 0..g.journal_blocks {
        dev.read_at(&mut block, g.journal_offset + pos * META_BLOCK).map_err(io("reading the journal"))?;
        match decode_journal_block(&sb.uuid, &block) {
            Some((h, recs)) if h.seq >= sb.journal_seq => {
                commits.entry(h.seq).or_default().entry((h.mount, h.parts)).or_default().insert(h.part, recs);
            }
            Some(_) => {}
            None => unreadable.push(decode_journal_block_unchecked(&block)),
        }
    }
    let last_seq = commits.keys().next_back().copied();
    let mut last_damaged = None;
    if let Some(last) = last_seq {
        for seq in sb.journal_seq..=last {
            // The complete version of the commit (of the latest mount, should there be two).
            let complete = commits.get(&seq).and_then(|m| {
                m.iter()
                    .filter(|((_, parts), p)| p.len() == usize::from(*parts))
                    .max_by_key(|((mount, _), _)| *mount)
                    .map(|(_, p)| p)
            });
            match complete {
                Some(parts) => {
                    for rec in parts.values().flatten() {
                        if let Some(k) = known.get_mut(rec.slot as usize) {
                            *k = Some(Known { entry: rec.entry, seq });
                        }
                    }
                    r.commits_applied += 1;
                }
                // The newest commit incomplete: a torn tail, as recovery treats it.
                None if seq == last => {}
                None => {
                    r.damaged_commits.push(seq);
                    last_damaged = Some(seq);
                }
            }
        }
    }
    // Slots that unreadable blocks of a damaged commit appear to name (unverified).
    let mut hinted: HashMap<u64, (u64, Entry)> = HashMap::new();
    for (seq, recs) in &unreadable {
        if r.damaged_commits.contains(seq) {
            for rec in recs.iter().filter(|rec| rec.slot < g.slots) {
                hinted.insert(rec.slot, (*seq, rec.entry));
            }
        }
    }
    // What to keep.
    let bs = u64::from(g.block_size);
    let origin_blocks = sb.origin.size.div_ceil(bs);
    let mut table = vec![Entry::FREE; g.slots as usize];
    let mut owner: HashMap<u64, (u64, u64)> = HashMap::new(); // block -> (slot, seq)
    let mut data = vec![0u8; bs as usize];
    for (slot, k) in known.iter().enumerate() {
        let slot = slot as u64;
        let offset = g.slot_offset(slot);
        let Some(k) = k else {
            r.unvouched.push(Unvouched {
                slot,
                block: None,
                dirty: false,
                offset,
                why: format!(
                    "table block {} is damaged and no later commit names this slot: its mapping is unknown",
                    slot / ENTRIES_PER_BLOCK as u64
                ),
            });
            continue;
        };
        let e = k.entry;
        let unproven = last_damaged.is_some_and(|d| k.seq < d);
        if let Some((seq, h)) = hinted.get(&slot).filter(|_| unproven) {
            // Named by the damaged commit itself: its data may be a block that commit recorded.
            r.unvouched.push(Unvouched {
                slot,
                block: (!h.is_free()).then_some(h.block),
                dirty: h.dirty,
                offset,
                why: format!(
                    "the damaged commit {seq} appears (unverified) to record {}",
                    if h.is_free() { "it free".to_string() } else { format!("block {} in it", h.block) }
                ),
            });
            continue;
        }
        if e.is_free() {
            if unproven {
                r.free_unproven += 1;
            }
            continue;
        }
        if e.block >= origin_blocks {
            r.unvouched.push(Unvouched {
                slot,
                block: Some(e.block),
                dirty: e.dirty,
                offset,
                why: format!("names block {} beyond the origin's {origin_blocks} blocks", e.block),
            });
            continue;
        }
        let len = (sb.origin.size - e.block * bs).min(bs) as usize;
        dev.read_at(&mut data[..len], offset).map_err(io("reading the data slots"))?;
        let crc = crc32c::crc32c(&data[..len]);
        let matches = e.data_crc().map_or(true, |c| c == crc);
        let kept = match (unproven, e.dirty, matches) {
            (_, false, true) if unproven => {
                r.dropped_clean += 1;
                None
            }
            (true, dirty, _) => {
                let d = last_damaged.expect("unproven");
                r.unvouched.push(Unvouched {
                    slot,
                    block: Some(e.block),
                    dirty,
                    offset,
                    why: if dirty {
                        format!("dirty by its last known record, which the damaged commit {d} may have changed")
                    } else {
                        format!("a clean copy whose data changed; the damaged commit {d} may have made it dirty")
                    },
                });
                None
            }
            (false, false, false) => {
                r.dropped_clean += 1;
                None
            }
            (false, true, false) if !sb.clean => {
                r.kept_as_found += 1;
                Some(Entry::dirty_crc(e.block, crc))
            }
            (false, true, false) => {
                r.unvouched.push(Unvouched {
                    slot,
                    block: Some(e.block),
                    dirty: true,
                    offset,
                    why: "dirty, and its data fails the checksum recorded at the clean shutdown".to_string(),
                });
                None
            }
            (false, _, true) => Some(if e.dirty { Entry::dirty_crc(e.block, crc) } else { e }),
        };
        let Some(entry) = kept else { continue };
        // Two slots for one block: the later record wins.
        if let Some(&(other, seq)) = owner.get(&e.block) {
            if seq >= k.seq {
                drop_duplicate(&mut r, &mut table, slot, entry, g.slot_offset(slot), other);
                continue;
            }
            let old = table[other as usize];
            drop_duplicate(&mut r, &mut table, other, old, g.slot_offset(other), slot);
        }
        owner.insert(e.block, (slot, k.seq));
        table[slot as usize] = Entry { hint: 0, ..entry };
    }
    r.kept = table.iter().filter(|e| !e.is_free()).count() as u64;
    r.kept_dirty = table.iter().filter(|e| e.dirty).count() as u64;
    if write {
        let journal_seq = last_seq.map_or(sb.journal_seq, |s| s + 1);
        write_checkpoint(dev, sb, &table, journal_seq)?;
        r.written = true;
    }
    Ok(r)
}

/// Drops the older of two slots mapping one block (named when dirty).
fn drop_duplicate(r: &mut RepairReport, table: &mut [Entry], slot: u64, e: Entry, offset: u64, winner: u64) {
    table[slot as usize] = Entry::FREE;
    if e.dirty {
        r.unvouched.push(Unvouched {
            slot,
            block: Some(e.block),
            dirty: true,
            offset,
            why: format!("slot {winner} holds the same block by a later record"),
        });
    } else {
        r.dropped_clean += 1;
    }
}

/// The repaired table as a new checkpoint, then both superblock copies.
fn write_checkpoint(dev: &dyn Dev, mut sb: Superblock, table: &[Entry], journal_seq: u64) -> Result<(), Error> {
    let io = |what: &'static str| move |source| Error::Io { what, source };
    let g = sb.geometry;
    let copy = 1 - sb.checkpoint_table as usize;
    let seq = sb.checkpoint_seq + 1;
    let mut buf = Vec::with_capacity((g.table_blocks * META_BLOCK) as usize);
    for (i, chunk) in table.chunks(ENTRIES_PER_BLOCK).enumerate() {
        buf.extend(encode_table_block(&sb.uuid, seq, i as u64, chunk));
    }
    dev.write_at(&buf, g.table_offset[copy]).map_err(io("writing the slot table"))?;
    dev.sync().map_err(io("syncing the cache device"))?;
    sb.checkpoint_table = copy as u8;
    sb.checkpoint_seq = seq;
    sb.journal_head = 0;
    sb.journal_seq = journal_seq.max(sb.journal_seq);
    sb.clean = true;
    for c in 0..2u64 {
        sb.generation += 1;
        dev.write_at(&sb.encode(), c * META_BLOCK).map_err(io("writing the superblock"))?;
        dev.sync().map_err(io("syncing the cache device"))?;
    }
    Ok(())
}

impl RepairReport {
    /// The report as lines for a person.
    pub fn text(&self, path: &str) -> String {
        let mut s = String::new();
        let mut line = |k: &str, v: String| s.push_str(&format!("{k:<16} {v}\n"));
        let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        if self.damaged_table_blocks.is_empty() && self.damaged_commits.is_empty() {
            line("metadata", "no damaged table block or journal commit".into());
        }
        if !self.damaged_table_blocks.is_empty() {
            line("damaged", format!("slot table block(s) {}", list(&self.damaged_table_blocks)));
        }
        if !self.damaged_commits.is_empty() {
            line("damaged", format!("journal commit(s) {}", list(&self.damaged_commits)));
        }
        line("replayed", format!("{} complete journal commit(s)", self.commits_applied));
        line(
            "salvaged",
            format!("{} mapping(s) proven and verified against their data ({} dirty)", self.kept, self.kept_dirty),
        );
        if self.kept_as_found > 0 {
            line(
                "kept as found",
                format!(
                    "{} dirty block(s) whose data differs from the checksum (a write the crash interrupted)",
                    self.kept_as_found
                ),
            );
        }
        line("dropped", format!("{} clean copies (the origin holds their data)", self.dropped_clean));
        if self.free_unproven > 0 {
            line(
                "unproven free",
                format!(
                    "{} free slot(s) a damaged commit may have mapped (their data is left in place, not kept)",
                    self.free_unproven
                ),
            );
        }
        line("cannot vouch", format!("{} slot(s), not kept:", self.unvouched.len()));
        for u in &self.unvouched {
            let what = match u.block {
                Some(b) => format!("origin block {b} ({})", if u.dirty { "dirty" } else { "clean" }),
                None => "origin block unknown".to_string(),
            };
            line("", format!("slot {}: {what}, data at byte {} of {path}: {}", u.slot, u.offset, u.why));
        }
        line(
            "result",
            if self.written {
                "written: a new checkpoint of the salvaged mappings; the device opens again".into()
            } else {
                "nothing written (`--write` writes this result)".into()
            },
        );
        s
    }
}
