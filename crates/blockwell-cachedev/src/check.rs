//! Offline inspection of a cache device (`blockwell cache check` and `blockwell cache status`), in the spirit of
//! dm-cache's `cache_check`: both superblock copies, the checkpoint's table, the journal replay and the mapping,
//! every problem listed, nothing written.

use crate::dev::Dev;
use crate::meta::{check_mapping, load};
use crate::superblock::{read_copies, OriginId};
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
    pub mapped: u64,
    pub dirty: u64,
    pub free: u64,
}

/// Inspects `dev`. `Err` only when it is not a cache device at all or cannot be read; damage is reported in
/// [`Report::problems`]. With `origin`, the origin identity is compared too.
pub fn check(dev: &dyn Dev, origin: Option<OriginId>) -> Result<Report, Error> {
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
            r.mapped = l.entries.iter().filter(|e| !e.is_free()).count() as u64;
            r.dirty = l.entries.iter().filter(|e| e.dirty).count() as u64;
            r.free = r.slots - r.mapped;
            let blocks = sb.origin.size.div_ceil(u64::from(sb.geometry.block_size));
            if let Err(e) = check_mapping(&l.entries, blocks) {
                r.problems.push(format!("mapping: {e}"));
            }
        }
        Err(e) => r.problems.push(e.to_string()),
    }
    r.ok = r.problems.is_empty();
    Ok(r)
}

impl Report {
    /// The report as `key: value` lines.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let mut line = |k: &str, v: String| {
            s.push_str(&format!("{k:<16} {v}\n"));
        };
        line("result", if self.ok { "clean".into() } else { format!("{} problem(s)", self.problems.len()) });
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
                if self.torn_commit { "; an incomplete commit at the end (ignored)" } else { "" }
            ),
        );
        line("opened", format!("{} time(s)", self.mounts));
        s
    }
}
