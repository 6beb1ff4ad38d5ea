//! [`Metadata`]: formatting a device, opening it (validating and replaying), committing records,
//! checkpointing, and the state changes of the superblock (clean shutdown, mode, detach).

use crate::dev::Dev;
use crate::layout::Geometry;
use crate::record::{
    decode_journal_block, decode_journal_block_unchecked, decode_table_block, encode_journal_block, encode_table_block,
    Entry, JournalHeader, Record, ENTRIES_PER_BLOCK,
};
use crate::superblock::{read_copies, CacheMode, OriginId, Superblock, FORMAT_VERSION, MAX_PATH};
use crate::{Error, META_BLOCK};

/// Table blocks written per `write_at` during a checkpoint.
const TABLE_CHUNK: u64 = 256;

/// How to format a device.
#[derive(Clone, Debug)]
pub struct FormatOptions {
    pub block_size: u64,
    pub origin: OriginId,
    pub origin_path: String,
    pub mode: CacheMode,
    /// Journal blocks (default: as many as one table copy, at least 64).
    pub journal_blocks: Option<u64>,
    /// Overwrite a device that already holds a Blockwell cache (or anything with its magic).
    pub force: bool,
}

/// What opening a device must find.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    pub origin: OriginId,
    /// Recorded in the superblock (informational).
    pub origin_path: String,
    /// The block size the caller expects, if it has one.
    pub block_size: Option<u32>,
    /// The mode the device is opened in (recorded).
    pub mode: CacheMode,
}

/// What to do, when the origin was written without the device since it last had it, with its dirty blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StaleDirty {
    /// Refuse to open ([`Error::StaleDirty`]), writing nothing.
    #[default]
    Refuse,
    /// Keep them: they are served and written back over the origin's newer data.
    Keep,
    /// Drop them: the origin's data wins.
    Discard,
}

/// The origin's write nonce, checked by [`Metadata::open_checked`] against the one the device recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OriginCheck {
    /// The origin's nonce now (0: it records none).
    pub nonce: u64,
    /// The nonce to record, and for the caller to give the origin, when the device cannot keep the origin's:
    /// a fresh random value, not 0.
    pub new_nonce: u64,
    pub stale: StaleDirty,
}

/// What opening found.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Recovery {
    /// The previous user shut down cleanly (nothing to replay).
    pub clean_shutdown: bool,
    /// The device had been detached: its contents were discarded (the origin alone was current).
    pub was_detached: bool,
    /// The mode recorded by the previous user.
    pub previous_mode: Option<CacheMode>,
    /// Journal commits replayed onto the checkpoint.
    pub commits_replayed: u64,
    pub records_replayed: u64,
    /// A commit whose blocks were not all written was found at the end of the journal and ignored.
    pub torn_commit: bool,
    /// Slots mapped and dirty after recovery.
    pub mapped: u64,
    pub dirty: u64,
    /// The origin was written without the device since it last had it (its write nonce differs).
    pub origin_written_without_device: bool,
    /// Blocks dropped for that reason (clean copies, and dirty ones with [`StaleDirty::Discard`]).
    pub stale_dropped: u64,
    /// Dirty blocks kept although the origin was written since ([`StaleDirty::Keep`]).
    pub stale_dirty_kept: u64,
}

/// Metadata I/O counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct MetaStats {
    pub commits: u64,
    pub records: u64,
    pub journal_blocks_written: u64,
    pub checkpoints: u64,
    pub superblock_writes: u64,
    pub syncs: u64,
}

/// The metadata of an open cache device: the durable table (checkpoint plus replayed journal) mirrored in
/// memory, and where the next commit goes. Every method that writes leaves the device consistent; after a
/// write error the metadata is *failed* and refuses further writes (the caller degrades).
pub struct Metadata {
    sb: Superblock,
    /// The superblock copy written last.
    sb_copy: usize,
    table: Vec<Entry>,
    /// Next journal block to write, and blocks written since the checkpoint.
    journal_pos: u64,
    journal_live: u64,
    next_seq: u64,
    stats: MetaStats,
    failed: bool,
}

/// The decoded state of a device, before any decision (shared by [`Metadata::open`] and [`crate::check`]).
pub(crate) struct Loaded {
    pub sb: Superblock,
    pub sb_copy: usize,
    pub entries: Vec<Entry>,
    pub journal_pos: u64,
    pub journal_live: u64,
    pub next_seq: u64,
    pub commits: u64,
    pub records: u64,
    pub torn: bool,
    /// The journal is damaged before its end (later commits exist after the one that ended the replay).
    pub damage: Option<JournalDamage>,
}

/// A commit that ended the replay although later commits of the same device exist in the ring: not a torn
/// tail (a commit starts only after the one before it is synced) but damage, and the records of the later
/// commits are not replayed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct JournalDamage {
    /// The commit that cannot be read, and the ring index of its first unreadable block.
    pub seq: u64,
    pub block: u64,
    /// The later commits found (sequence numbers, ascending, distinct).
    pub later: Vec<u64>,
}

impl JournalDamage {
    pub fn describe(&self) -> String {
        let first = self.later.first().copied().unwrap_or(self.seq + 1);
        let last = self.later.last().copied().unwrap_or(first);
        let range = if first == last { format!("commit {first}") } else { format!("commits {first} to {last}") };
        format!(
            "the journal is damaged before its end: commit {} (journal block {}) cannot be read, but {} later \
             commit(s) exist ({range}); replaying up to the damage would lose FLUSHed writes",
            self.seq,
            self.block,
            self.later.len()
        )
    }
}

fn io(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { what, source }
}

/// Reads and validates the superblocks, the checkpoint's table copy and the journal.
pub(crate) fn load(dev: &dyn Dev) -> Result<Loaded, Error> {
    if dev.size() < 2 * META_BLOCK {
        return Err(Error::NotFormatted);
    }
    let mut head = vec![0u8; 2 * META_BLOCK as usize];
    dev.read_at(&mut head, 0).map_err(io("reading the superblocks"))?;
    let copies = read_copies(&head);
    let Some((sb_copy, sb)) = copies.chosen else {
        // Prefer the most telling error: a newer format, unknown features, then damage, then nothing at all.
        let errs: Vec<Error> = copies.status.into_iter().filter_map(|s| s.err().flatten()).collect();
        if let Some(e) = errs.iter().position(|e| matches!(e, Error::NewerFormat { .. } | Error::UnknownFeatures(_))) {
            return Err(errs.into_iter().nth(e).expect("index found"));
        }
        return Err(if errs.is_empty() {
            Error::NotFormatted
        } else {
            Error::Corrupt(format!("both superblock copies are damaged ({})", errs[0]))
        });
    };
    let g = sb.geometry;
    let needed = g.needed_size();
    if dev.size() < needed {
        return Err(Error::Truncated { size: dev.size(), needed });
    }
    let entries = read_table(dev, &sb, sb.checkpoint_table as usize, sb.checkpoint_seq)?;
    let mut l = Loaded {
        sb,
        sb_copy,
        entries,
        journal_pos: 0,
        journal_live: 0,
        next_seq: 0,
        commits: 0,
        records: 0,
        torn: false,
        damage: None,
    };
    replay(dev, &mut l)?;
    Ok(l)
}

fn read_table(dev: &dyn Dev, sb: &Superblock, copy: usize, seq: u64) -> Result<Vec<Entry>, Error> {
    let g = &sb.geometry;
    let mut entries = Vec::with_capacity(g.slots as usize);
    let mut buf = Vec::new();
    let mut index = 0u64;
    while index < g.table_blocks {
        let n = TABLE_CHUNK.min(g.table_blocks - index);
        buf.resize((n * META_BLOCK) as usize, 0);
        dev.read_at(&mut buf, g.table_offset[copy] + index * META_BLOCK).map_err(io("reading the slot table"))?;
        for (k, b) in buf.chunks(META_BLOCK as usize).enumerate() {
            let i = index + k as u64;
            let count = (g.slots - i * ENTRIES_PER_BLOCK as u64).min(ENTRIES_PER_BLOCK as u64) as usize;
            decode_table_block(&sb.uuid, b, seq, i, count, &mut entries)
                .map_err(|e| Error::Corrupt(format!("slot table copy {copy}, block {i}: {e}")))?;
        }
        index += n;
    }
    Ok(entries)
}

/// Replays the journal's complete commits onto `l.entries`.
fn replay(dev: &dyn Dev, l: &mut Loaded) -> Result<(), Error> {
    let g = l.sb.geometry;
    let uuid = l.sb.uuid;
    let ring = g.journal_blocks;
    let mut pos = l.sb.journal_head;
    let mut seq = l.sb.journal_seq;
    let mut used = 0u64;
    let mut hint = l.entries.iter().map(|e| e.hint).max().unwrap_or(0);
    let mut block = vec![0u8; META_BLOCK as usize];
    // The ring index of the block that ended the replay.
    let mut stop = pos;
    let read = |pos: u64, block: &mut Vec<u8>| -> Result<(), Error> {
        dev.read_at(block, g.journal_offset + pos * META_BLOCK).map_err(io("reading the journal"))
    };
    'commits: while used < ring {
        read(pos, &mut block)?;
        let Some((h, first)) = decode_journal_block(&uuid, &block) else {
            // A block that fails its checks but names the next commit: that commit was being written (or was
            // damaged since; without a later commit the two cannot be told apart).
            l.torn |= decode_journal_block_unchecked(&block).0 == seq;
            break;
        };
        if h.seq != seq || h.part != 0 {
            // Not the next commit (never written, or left from an earlier lap of the ring).
            if h.seq == seq {
                l.torn = true;
            }
            break;
        }
        let parts = u64::from(h.parts);
        if used + parts > ring {
            l.torn = true;
            break;
        }
        let mut records = first;
        for p in 1..parts {
            read((pos + p) % ring, &mut block)?;
            match decode_journal_block(&uuid, &block) {
                Some((hp, r))
                    if hp.seq == seq && hp.mount == h.mount && u64::from(hp.part) == p && hp.parts == h.parts =>
                {
                    records.extend(r)
                }
                _ => {
                    l.torn = true;
                    stop = (pos + p) % ring;
                    break 'commits;
                }
            }
        }
        for r in &records {
            let Some(e) = l.entries.get_mut(r.slot as usize) else {
                return Err(Error::Corrupt(format!(
                    "journal commit {seq}: a record for slot {} of {} slots",
                    r.slot, g.slots
                )));
            };
            *e = r.entry;
            if !e.is_free() {
                hint = hint.saturating_add(1);
                e.hint = hint;
            }
        }
        l.commits += 1;
        l.records += records.len() as u64;
        pos = (pos + parts) % ring;
        stop = pos;
        used += parts;
        seq += 1;
    }
    if used < ring {
        // A commit is written only after the one before it is synced: a later commit in the rest of the ring
        // proves that the one that ended the replay was complete once, and is damaged now.
        let mut later = std::collections::BTreeSet::new();
        let mut buf = Vec::new();
        let mut k = 0u64;
        while k < ring - used {
            let at = (pos + k) % ring;
            let n = TABLE_CHUNK.min(ring - used - k).min(ring - at);
            buf.resize((n * META_BLOCK) as usize, 0);
            dev.read_at(&mut buf, g.journal_offset + at * META_BLOCK).map_err(io("reading the journal"))?;
            for b in buf.chunks(META_BLOCK as usize) {
                if let Some((h, _)) = decode_journal_block(&uuid, b) {
                    if h.seq > seq {
                        later.insert(h.seq);
                    }
                }
            }
            k += n;
        }
        if !later.is_empty() {
            l.damage = Some(JournalDamage { seq, block: stop, later: later.into_iter().collect() });
        }
    }
    l.journal_pos = pos;
    l.journal_live = used;
    l.next_seq = seq;
    Ok(())
}

/// Checks that no origin block is held by two slots and that every block lies within the origin.
pub(crate) fn check_mapping(entries: &[Entry], origin_blocks: u64) -> Result<(), String> {
    let mut seen = std::collections::HashMap::with_capacity(entries.len());
    for (slot, e) in entries.iter().enumerate() {
        if e.is_free() {
            continue;
        }
        if e.block >= origin_blocks {
            return Err(format!("slot {slot} holds block {} beyond the origin's {} blocks", e.block, origin_blocks));
        }
        if let Some(other) = seen.insert(e.block, slot) {
            return Err(format!("block {} is held by slots {other} and {slot}", e.block));
        }
    }
    Ok(())
}

fn origin_blocks(sb: &Superblock) -> u64 {
    sb.origin.size.div_ceil(u64::from(sb.geometry.block_size))
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl Metadata {
    /// Formats `dev`: an empty table, an empty journal, and the superblocks. Refuses a device that already
    /// holds a Blockwell cache unless `force`. The old superblocks are wiped first, so an interrupted format
    /// leaves a device that is not a cache rather than a half-written one.
    /// Returns the new superblock; [`Metadata::open`] opens the device for use.
    pub fn format(dev: &dyn Dev, opts: &FormatOptions) -> Result<Superblock, Error> {
        if opts.origin_path.len() > MAX_PATH {
            return Err(Error::PathTooLong(opts.origin_path.len()));
        }
        let geometry = Geometry::for_size(dev.size(), opts.block_size, opts.journal_blocks)?;
        if !opts.force {
            let mut head = vec![0u8; 2 * META_BLOCK as usize];
            dev.read_at(&mut head, 0).map_err(io("reading the superblocks"))?;
            if head[0..8] == crate::MAGIC || head[4096..4104] == crate::MAGIC {
                let what = match read_copies(&head).chosen {
                    Some((_, sb)) => {
                        format!("a Blockwell cache device (UUID {}, origin {})", sb.uuid_string(), sb.origin)
                    }
                    None => "a damaged Blockwell cache device".to_string(),
                };
                return Err(Error::Formatted(what));
            }
        }
        dev.write_at(&vec![0u8; 2 * META_BLOCK as usize], 0).map_err(io("wiping the old superblocks"))?;
        dev.sync().map_err(io("syncing the cache device"))?;
        let sb = Superblock {
            version: FORMAT_VERSION,
            generation: 0,
            uuid: *uuid::Uuid::new_v4().as_bytes(),
            geometry,
            mode: opts.mode,
            origin: opts.origin,
            origin_path: opts.origin_path.clone(),
            clean: true,
            detached: false,
            checkpoint_table: 0,
            checkpoint_seq: 1,
            journal_head: 0,
            journal_seq: 1,
            mounts: 0,
            created: now(),
            origin_nonce: 0,
        };
        let mut m = Metadata {
            table: vec![Entry::FREE; geometry.slots as usize],
            sb,
            sb_copy: 1,
            journal_pos: 0,
            journal_live: 0,
            next_seq: 1,
            stats: MetaStats::default(),
            failed: false,
        };
        m.write_table(dev, 0, 1)?;
        m.sync(dev)?;
        // Both copies, so that either one alone identifies the device.
        m.write_superblock(dev)?;
        m.write_superblock(dev)?;
        Ok(m.sb)
    }

    /// Opens a formatted device: validates the superblock, the origin identity and the block size, reads the
    /// checkpoint, replays the journal, checks the mapping, then records the open (not clean, mounted once
    /// more) in the superblock before returning. A detached device comes back empty.
    pub fn open(dev: &dyn Dev, opts: &OpenOptions) -> Result<(Metadata, Recovery), Error> {
        Self::open_checked(dev, opts, None)
    }

    /// [`Metadata::open`], also checking the origin's write nonce (`origin`): when the device recorded one and the
    /// origin now has another, the origin was written without the device, so its clean copies are dropped and
    /// its dirty blocks refused, kept or dropped as `origin.stale` says, before anything is written. The device
    /// then records the origin's nonce, or `origin.new_nonce` when it did not hold the origin's (the caller gives
    /// the origin that value next: [`Superblock::origin_nonce`] of [`Metadata::superblock`]).
    pub fn open_checked(
        dev: &dyn Dev,
        opts: &OpenOptions,
        origin: Option<OriginCheck>,
    ) -> Result<(Metadata, Recovery), Error> {
        if opts.origin_path.len() > MAX_PATH {
            return Err(Error::PathTooLong(opts.origin_path.len()));
        }
        let l = load(dev)?;
        if let Some(d) = &l.damage {
            return Err(Error::JournalDamaged { seq: d.seq, block: d.block, why: d.describe() });
        }
        if l.sb.origin != opts.origin {
            return Err(Error::OriginMismatch { expected: opts.origin, found: l.sb.origin });
        }
        if let Some(bs) = opts.block_size {
            if bs != l.sb.geometry.block_size {
                return Err(Error::BlockSize { asked: bs, found: l.sb.geometry.block_size });
            }
        }
        check_mapping(&l.entries, origin_blocks(&l.sb)).map_err(Error::Corrupt)?;
        let recorded = l.sb.origin_nonce;
        let stale = origin.filter(|o| recorded != 0 && recorded != o.nonce && !l.sb.detached);
        if let Some(o) = stale {
            let dirty = l.entries.iter().filter(|e| e.dirty).count() as u64;
            if dirty > 0 && o.stale == StaleDirty::Refuse {
                return Err(Error::StaleDirty { dirty });
            }
        }
        let mut recovery = Recovery {
            clean_shutdown: l.sb.clean,
            was_detached: l.sb.detached,
            previous_mode: Some(l.sb.mode),
            commits_replayed: l.commits,
            records_replayed: l.records,
            torn_commit: l.torn,
            ..Recovery::default()
        };
        let mut m = Metadata {
            sb: l.sb,
            sb_copy: l.sb_copy,
            table: l.entries,
            journal_pos: l.journal_pos,
            journal_live: l.journal_live,
            next_seq: l.next_seq,
            stats: MetaStats::default(),
            failed: false,
        };
        m.sb.clean = false;
        m.sb.mounts += 1;
        m.sb.mode = opts.mode;
        m.sb.origin_path = opts.origin_path.clone();
        if let Some(o) = origin {
            m.sb.origin_nonce = if recorded != 0 && recorded == o.nonce { o.nonce } else { o.new_nonce };
        }
        let mut forget = false;
        if let Some(o) = stale {
            // Clean copies may be older than the origin; dirty ones are older than what was written there.
            recovery.origin_written_without_device = true;
            for e in m.table.iter_mut().filter(|e| !e.is_free()) {
                if e.dirty && o.stale == StaleDirty::Keep {
                    recovery.stale_dirty_kept += 1;
                } else {
                    *e = Entry::FREE;
                    recovery.stale_dropped += 1;
                }
            }
            forget = recovery.stale_dropped > 0;
        }
        if forget {
            m.checkpoint(dev)?;
        } else if m.sb.detached {
            // The origin alone is current: forget every mapping, durably, before anything is cached again.
            m.table.fill(Entry::FREE);
            m.sb.detached = false;
            m.checkpoint(dev)?;
        } else {
            m.write_superblock(dev)?;
        }
        recovery.mapped = m.table.iter().filter(|e| !e.is_free()).count() as u64;
        recovery.dirty = m.table.iter().filter(|e| e.dirty).count() as u64;
        Ok((m, recovery))
    }

    pub fn superblock(&self) -> &Superblock {
        &self.sb
    }

    pub fn geometry(&self) -> &Geometry {
        &self.sb.geometry
    }

    /// The durable table: what recovery would find now.
    pub fn entries(&self) -> &[Entry] {
        &self.table
    }

    pub fn stats(&self) -> MetaStats {
        self.stats
    }

    /// A write failed: nothing more is written.
    pub fn is_failed(&self) -> bool {
        self.failed
    }

    fn guard<T>(&mut self, r: Result<T, Error>) -> Result<T, Error> {
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn check_failed(&self) -> Result<(), Error> {
        if self.failed {
            Err(Error::Failed)
        } else {
            Ok(())
        }
    }

    fn sync(&mut self, dev: &dyn Dev) -> Result<(), Error> {
        self.stats.syncs += 1;
        let r = dev.sync().map_err(io("syncing the cache device"));
        self.guard(r)
    }

    /// Makes `records` durable, in order, after everything written to the device before the call: syncs the
    /// device, appends the records to the journal (checkpointing first when the ring is full), syncs again.
    /// With no records it only syncs.
    pub fn commit(&mut self, dev: &dyn Dev, records: &[Record]) -> Result<(), Error> {
        self.check_failed()?;
        for r in records {
            if r.slot >= self.sb.geometry.slots {
                return Err(Error::Corrupt(format!("record for slot {} of {}", r.slot, self.sb.geometry.slots)));
            }
        }
        self.sync(dev)?;
        if records.is_empty() {
            return Ok(());
        }
        let ring = self.sb.geometry.journal_blocks;
        let parts = (records.len() as u64).div_ceil(ENTRIES_PER_BLOCK as u64);
        if parts > ring.min(u64::from(u16::MAX)) {
            // Larger than the journal: apply and checkpoint.
            self.apply(records);
            return self.checkpoint(dev);
        }
        if self.journal_live + parts > ring {
            self.checkpoint(dev)?;
        }
        let mut blocks = Vec::with_capacity((parts * META_BLOCK) as usize);
        for (p, chunk) in records.chunks(ENTRIES_PER_BLOCK).enumerate() {
            let h = JournalHeader { seq: self.next_seq, mount: self.sb.mounts, part: p as u16, parts: parts as u16 };
            blocks.extend(encode_journal_block(&self.sb.uuid, h, chunk));
        }
        // One write per contiguous piece of the ring.
        let g = self.sb.geometry;
        let first = (ring - self.journal_pos).min(parts);
        let (a, b) = blocks.split_at((first * META_BLOCK) as usize);
        let r = dev.write_at(a, g.journal_offset + self.journal_pos * META_BLOCK).map_err(io("writing the journal"));
        self.guard(r)?;
        if !b.is_empty() {
            let r = dev.write_at(b, g.journal_offset).map_err(io("writing the journal"));
            self.guard(r)?;
        }
        self.sync(dev)?;
        self.apply(records);
        self.journal_pos = (self.journal_pos + parts) % ring;
        self.journal_live += parts;
        self.next_seq += 1;
        self.stats.commits += 1;
        self.stats.records += records.len() as u64;
        self.stats.journal_blocks_written += parts;
        Ok(())
    }

    fn apply(&mut self, records: &[Record]) {
        for r in records {
            self.table[r.slot as usize] = r.entry;
        }
    }

    /// Writes the whole table to the other copy, then points the superblock at it (the journal restarts
    /// there).
    pub fn checkpoint(&mut self, dev: &dyn Dev) -> Result<(), Error> {
        self.check_failed()?;
        let copy = 1 - self.sb.checkpoint_table as usize;
        let seq = self.sb.checkpoint_seq + 1;
        self.write_table(dev, copy, seq)?;
        self.sync(dev)?;
        self.sb.checkpoint_table = copy as u8;
        self.sb.checkpoint_seq = seq;
        self.sb.journal_head = self.journal_pos;
        self.sb.journal_seq = self.next_seq;
        self.write_superblock(dev)?;
        self.journal_live = 0;
        self.stats.checkpoints += 1;
        Ok(())
    }

    fn write_table(&mut self, dev: &dyn Dev, copy: usize, seq: u64) -> Result<(), Error> {
        let g = self.sb.geometry;
        let mut index = 0u64;
        while index < g.table_blocks {
            let n = TABLE_CHUNK.min(g.table_blocks - index);
            let mut buf = Vec::with_capacity((n * META_BLOCK) as usize);
            for i in index..index + n {
                let lo = (i as usize) * ENTRIES_PER_BLOCK;
                let hi = (lo + ENTRIES_PER_BLOCK).min(self.table.len());
                buf.extend(encode_table_block(&self.sb.uuid, seq, i, &self.table[lo..hi]));
            }
            let r = dev.write_at(&buf, g.table_offset[copy] + index * META_BLOCK).map_err(io("writing the slot table"));
            self.guard(r)?;
            index += n;
        }
        Ok(())
    }

    /// Writes the superblock to the copy not written last, with the next generation, and syncs.
    fn write_superblock(&mut self, dev: &dyn Dev) -> Result<(), Error> {
        self.check_failed()?;
        self.sb.generation += 1;
        let copy = 1 - self.sb_copy;
        let r = dev.write_at(&self.sb.encode(), copy as u64 * META_BLOCK).map_err(io("writing the superblock"));
        self.guard(r)?;
        self.sb_copy = copy;
        self.stats.superblock_writes += 1;
        self.sync(dev)
    }

    /// Frees every slot whose entry `keep` refuses (the caller's recovery policy), durably.
    pub fn retain(&mut self, dev: &dyn Dev, mut keep: impl FnMut(&Entry) -> bool) -> Result<u64, Error> {
        let records: Vec<Record> = self
            .table
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.is_free() && !keep(e))
            .map(|(slot, _)| Record { slot: slot as u64, entry: Entry::FREE })
            .collect();
        let n = records.len() as u64;
        if n > 0 {
            self.commit(dev, &records)?;
        }
        Ok(n)
    }

    /// A clean shutdown: a checkpoint carrying the policy hints (`hint(slot)`), marked clean.
    pub fn shutdown(&mut self, dev: &dyn Dev, mut hint: impl FnMut(u64) -> u32) -> Result<(), Error> {
        self.check_failed()?;
        for (slot, e) in self.table.iter_mut().enumerate() {
            e.hint = if e.is_free() { 0 } else { hint(slot as u64) };
        }
        self.sb.clean = true;
        self.checkpoint(dev)
    }

    /// Records a new mode.
    pub fn set_mode(&mut self, dev: &dyn Dev, mode: CacheMode) -> Result<(), Error> {
        self.sb.mode = mode;
        self.write_superblock(dev)
    }

    /// Detaches: every mapping is forgotten and the device is marked detached and clean. The caller must have
    /// written every dirty block back to the origin and made the origin durable; refused while any entry is
    /// dirty.
    pub fn detach(&mut self, dev: &dyn Dev) -> Result<(), Error> {
        if let Some(slot) = self.table.iter().position(|e| e.dirty) {
            return Err(Error::Dirty(format!("slot {slot} still holds dirty block {}", self.table[slot].block)));
        }
        self.table.fill(Entry::FREE);
        self.sb.detached = true;
        self.sb.clean = true;
        self.checkpoint(dev)
    }
}

#[cfg(test)]
mod tests;
