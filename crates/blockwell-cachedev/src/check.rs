//! Offline inspection of a cache device (`blockwell cache check` and `blockwell cache status`), in the spirit of
//! dm-cache's `cache_check`: both superblock copies, the checkpoint's table, the journal replay and the mapping,
//! every problem listed, nothing written. [`check`] also reads every mapped slot and verifies its data against the
//! checksum its entry records; [`check_metadata`] (for `cache status`) reads the metadata only.

use crate::dev::Dev;
use crate::meta::{check_mapping, load};
use crate::record::Entry;
use crate::superblock::{read_copies, OriginId, Superblock};
use crate::{Error, META_BLOCK};
use serde::Serialize;

/// What a check found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    /// No problem found.
    pub ok: bool,
    pub problems: Vec<String>,
    /// Each superblock copy: `valid (generation N)`, `damaged: ...` or `empty`.
    pub superblocks: [String; 2],
    pub uuid: String,
    pub version: u32,
    pub block_size: u32,
    pub slots: u64,
    pub data_offset: u64,
    pub mode: String,
    pub origin: String,
    pub origin_size: u64,
    pub origin_path: String,
    pub clean_shutdown: bool,
    pub detached: bool,
    pub mounts: u64,
    pub created: u64,
    pub checkpoint_seq: u64,
    pub journal_blocks: u64,
    /// Commits the journal holds after the checkpoint (replayed by the next open).
    pub journal_commits: u64,
    pub journal_records: u64,
    /// A commit at the end of the journal was incomplete (ignored by recovery).
    pub torn_commit: bool,
    /// The commit that cannot be read although later ones exist (the journal is damaged before its end).
    pub damaged_commit: Option<u64>,
    pub mapped: u64,
    pub dirty: u64,
    pub free: u64,
    /// The slots' data was verified against the checksums (`false`: metadata only).
    pub data_verified: bool,
    /// Mapped slots whose data was checked, and how many of them failed.
    pub data_checked: u64,
    pub data_mismatched: u64,
    /// Dirty slots without a checksum (written before dirty blocks were checksummed).
    pub data_unchecksummed: u64,
    /// Findings that are not problems (what recovery will do about them).
    pub notes: Vec<String>,
}

/// Mismatches listed one by one before the rest are counted.
const LIST: usize = 20;

/// Inspects `dev`, data checksums included. `Err` only when it is not a cache device at all or cannot be read;
/// damage is reported in [`Report::problems`]. With `origin`, the origin identity is compared too.
pub fn check(dev: &dyn Dev, origin: Option<OriginId>) -> Result<Report, Error> {
    inspect(dev, origin, true)
}

/// [`check`] without reading the slots' data.
pub fn check_metadata(dev: &dyn Dev, origin: Option<OriginId>) -> Result<Report, Error> {
    inspect(dev, origin, false)
}

fn inspect(dev: &dyn Dev, origin: Option<OriginId>, data: bool) -> Result<Report, Error> {
    if dev.size() < 2 * META_BLOCK {
        return Err(Error::NotFormatted);
    }
    let mut head = vec![0u8; 2 * META_BLOCK as usize];
    dev.read_at(&mut head, 0).map_err(|source| Error::Io { what: "reading the superblocks", source })?;
    let copies = read_copies(&head);
    let mut r = Report::default();
    for (i, s) in copies.status.iter().enumerate() {
        r.superblocks[i] = match s {
            Ok(sb) => format!("valid (generation {})", sb.generation),
            Err(None) => "empty".to_string(),
            Err(Some(e)) => format!("damaged: {e}"),
        };
    }
    let Some((_, sb)) = copies.chosen else {
        return match copies.status.into_iter().find_map(|s| s.err().flatten()) {
            Some(e @ (Error::NewerFormat { .. } | Error::UnknownFeatures(_))) => Err(e),
            Some(e) => {
                r.problems.push(format!("both superblock copies are unusable ({e})"));
                Ok(r)
            }
            None => Err(Error::NotFormatted),
        };
    };
    if copies.status.iter().any(|s| s.is_err()) {
        r.problems.push("one superblock copy is damaged or missing (the other is used)".to_string());
    }
    r.uuid = sb.uuid_string();
    r.version = sb.version;
    r.block_size = sb.geometry.block_size;
    r.slots = sb.geometry.slots;
    r.data_offset = sb.geometry.data_offset;
    r.mode = sb.mode.to_string();
    r.origin = uuid::Uuid::from_bytes(sb.origin.uuid).hyphenated().to_string();
    r.origin_size = sb.origin.size;
    r.origin_path = sb.origin_path.clone();
    r.clean_shutdown = sb.clean;
    r.detached = sb.detached;
    r.mounts = sb.mounts;
    r.created = sb.created;
    r.checkpoint_seq = sb.checkpoint_seq;
    r.journal_blocks = sb.geometry.journal_blocks;
    if let Some(o) = origin {
        if o != sb.origin {
            r.problems.push(format!("belongs to origin {}, not {o}", sb.origin));
        }
    }
    match load(dev) {
        Ok(l) => {
            r.journal_commits = l.commits;
            r.journal_records = l.records;
            r.torn_commit = l.torn;
            if let Some(d) = &l.damage {
                r.damaged_commit = Some(d.seq);
                r.problems.push(format!(
                    "{}; the next open refuses the device (`blockwell cache repair` salvages what it can prove)",
                    d.describe()
                ));
            }
            r.mapped = l.entries.iter().filter(|e| !e.is_free()).count() as u64;
            r.dirty = l.entries.iter().filter(|e| e.dirty).count() as u64;
            r.free = r.slots - r.mapped;
            let blocks = sb.origin.size.div_ceil(u64::from(sb.geometry.block_size));
            if let Err(e) = check_mapping(&l.entries, blocks) {
                r.problems.push(format!("mapping: {e}"));
            } else if data {
                verify_data(dev, &sb, &l.entries, &mut r)?;
            }
        }
        Err(e) => r.problems.push(e.to_string()),
    }
    r.ok = r.problems.is_empty();
    Ok(r)
}

/// Reads every mapped slot and compares its data with the checksum its entry records.
fn verify_data(dev: &dyn Dev, sb: &Superblock, entries: &[Entry], r: &mut Report) -> Result<(), Error> {
    r.data_verified = true;
    let bs = u64::from(sb.geometry.block_size);
    let mut buf = vec![0u8; bs as usize];
    let mut bad: Vec<String> = Vec::new();
    for (slot, e) in entries.iter().enumerate() {
        let Some(want) = e.data_crc() else {
            if e.dirty {
                r.data_unchecksummed += 1;
            }
            continue;
        };
        let len = (sb.origin.size - e.block * bs).min(bs) as usize;
        dev.read_at(&mut buf[..len], sb.geometry.slot_offset(slot as u64))
            .map_err(|source| Error::Io { what: "reading the data slots", source })?;
        r.data_checked += 1;
        if crc32c::crc32c(&buf[..len]) != want {
            r.data_mismatched += 1;
            let what = if e.dirty { "dirty" } else { "clean" };
            bad.push(format!("slot {slot} (origin block {}, {what}): data checksum mismatch", e.block));
        }
    }
    let more = bad.len().saturating_sub(LIST);
    bad.truncate(LIST);
    if more > 0 {
        bad.push(format!("... and {more} more slot(s) whose data fails its checksum"));
    }
    if sb.clean || sb.detached {
        // After a clean shutdown every checksum was committed with its data: a mismatch is damage.
        r.problems.extend(bad);
    } else if !bad.is_empty() {
        // After a crash, a write the crash interrupted may have changed a block after its checksum was committed.
        r.notes.push(format!(
            "{} slot(s) differ from their recorded checksum; the device was not shut down cleanly, so each is a \
             write the crash interrupted or damage: recovery keeps a dirty one as found and drops a clean one",
            r.data_mismatched
        ));
        r.notes.extend(bad);
    }
    Ok(())
}

impl Report {
    /// The report as `key: value` lines.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let mut line = |k: &str, v: String| {
            s.push_str(&format!("{k:<16} {v}\n"));
        };
        // "clean" would read as "no dirty data": the result says whether problems were found.
        line(
            "result",
            if self.ok { "no problems found".into() } else { format!("{} problem(s) found", self.problems.len()) },
        );
        for p in &self.problems {
            line("problem", p.clone());
        }
        line("superblock A", self.superblocks[0].clone());
        line("superblock B", self.superblocks[1].clone());
        if self.uuid.is_empty() {
            return s;
        }
        line("uuid", self.uuid.clone());
        line("format version", self.version.to_string());
        line("block size", format!("{} B", self.block_size));
        line("slots", format!("{} ({} mapped, {} dirty, {} free)", self.slots, self.mapped, self.dirty, self.free));
        line("mode", self.mode.clone());
        line("origin", format!("{} ({} B) {}", self.origin, self.origin_size, self.origin_path));
        line(
            "state",
            match (self.detached, self.clean_shutdown) {
                (true, _) => "detached (the origin alone is current)".into(),
                (false, true) => "shut down cleanly".into(),
                (false, false) => "not shut down cleanly (open, or crashed: the next open recovers)".into(),
            },
        );
        line(
            "journal",
            format!(
                "{} commit(s), {} record(s) after checkpoint {}{}",
                self.journal_commits,
                self.journal_records,
                self.checkpoint_seq,
                match (self.damaged_commit, self.torn_commit) {
                    (Some(c), _) => format!("; commit {c} is damaged and the later ones are not replayed"),
                    (None, true) => "; an incomplete commit at the end (ignored)".to_string(),
                    (None, false) => String::new(),
                }
            ),
        );
        line("opened", format!("{} time(s)", self.mounts));
        line(
            "data",
            if !self.data_verified {
                "not verified (`blockwell cache check` verifies every mapped slot's checksum)".into()
            } else {
                let mut d = format!(
                    "{} mapped slot(s) verified against their checksums, {} mismatch(es)",
                    self.data_checked, self.data_mismatched
                );
                if self.data_unchecksummed > 0 {
                    d.push_str(&format!(
                        "; {} dirty slot(s) carry no checksum (older format)",
                        self.data_unchecksummed
                    ));
                }
                d
            },
        );
        for n in &self.notes {
            line("note", n.clone());
        }
        s
    }
}
