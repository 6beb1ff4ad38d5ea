//! The identity of an origin: its size and a UUID that a cache device records, so that a device formatted
//! for one origin is never used in front of another.
//!
//! On a regular file the UUID lives in the extended attribute `user.blockwell.origin` (16 bytes), written when
//! a cache is first formatted for the file (`stamp`) and read afterwards: it follows the file through renames
//! and copies that keep extended attributes, and a different file of the same size does not have it. Block
//! devices and file systems without user extended attributes get a UUID derived from the origin's canonical
//! path instead (weaker: another device at the same path, of the same size, would match).
//!
//! ## The origin's state: which cache device holds its newest data, and a write nonce
//! An origin also keeps a small [`OriginState`] record, so that it is never served without a cache device that
//! holds dirty blocks for it, and a cache device notices that its origin was written without it:
//! - `cache`: the cache device attached to it ([`CacheHold`]: UUID, path, and its dirty blocks at its last clean
//!   stop, or "in use" while attached or after a crash). Opening the origin without that device is refused
//!   while the device holds dirty blocks (counted on the device itself when it can be read).
//! - `nonce`: a random value replaced whenever something other than the attached cache device opens the origin
//!   for writing. A cache device records the nonce it last saw (its superblock's `origin_nonce`); a different
//!   value on the origin means its clean copies may be stale (dropped) and its dirty blocks older than the
//!   origin's data (refused unless forced or discarded).
//!
//! On a regular file the record is the extended attribute `user.blockwell.state` (text, readable with
//! `getfattr -n user.blockwell.state`). A block device, or a file on a file system without user extended
//! attributes, has nowhere to keep it: the record is a file in the state directory (`$BLOCKWELL_STATE_DIR`, else
//! `/var/lib/blockwell`), `origins/<identity>.state`, keyed by the identity above. That record is only as good as
//! its key and its directory: it is not seen by another machine or under another state directory, and a device
//! reached by another path is another origin to it.

use blockwell_cachedev::OriginId;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

/// The extended attribute holding an origin's state record on a regular file.
pub const STATE_XATTR: &str = "user.blockwell.state";
/// The environment variable naming the state directory.
pub const STATE_DIR_ENV: &str = "BLOCKWELL_STATE_DIR";
/// The state directory when `BLOCKWELL_STATE_DIR` is not set.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/blockwell";
const STATE_HEADER: &str = "blockwell origin state 1";

/// The extended attribute holding an origin's UUID.
pub const XATTR: &str = "user.blockwell.origin";

/// Where an identity came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentitySource {
    /// Read from the extended attribute.
    Xattr,
    /// Written to the extended attribute now.
    Stamped,
    /// Derived from the canonical path.
    Path,
}

/// The identity of the origin open as `file` at `path`, of `size` bytes. With `stamp`, a regular file without
/// the attribute gets a new UUID written to it; without, it is identified by its path.
pub fn identity(path: &Path, file: &File, size: u64, stamp: bool) -> io::Result<(OriginId, IdentitySource)> {
    let regular = file.metadata()?.file_type().is_file();
    if regular {
        let mut buf = [0u8; 16];
        match rustix::fs::fgetxattr(file, XATTR, &mut buf) {
            Ok(16) => return Ok((OriginId { size, uuid: buf }, IdentitySource::Xattr)),
            Ok(_) | Err(rustix::io::Errno::NODATA) if stamp => {
                let uuid = *uuid::Uuid::new_v4().as_bytes();
                match rustix::fs::fsetxattr(file, XATTR, &uuid, rustix::fs::XattrFlags::empty()) {
                    Ok(()) => return Ok((OriginId { size, uuid }, IdentitySource::Stamped)),
                    Err(e) if unsupported(e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(_) | Err(rustix::io::Errno::NODATA) => {}
            Err(e) if unsupported(e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let _ = file.metadata()?.file_type().is_block_device();
    let canon = std::fs::canonicalize(path)?;
    let h = xxhash_rust::xxh3::xxh3_128(canon.as_os_str().as_encoded_bytes());
    Ok((OriginId { size, uuid: h.to_le_bytes() }, IdentitySource::Path))
}

/// The cache device attached to an origin, as the origin records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheHold {
    /// The cache device's UUID.
    pub uuid: [u8; 16],
    /// Where it was when it was attached.
    pub path: String,
    /// Its dirty blocks at its last clean stop; `None` while it is in use (or was not stopped cleanly).
    pub dirty: Option<u64>,
}

/// What an origin records about its cache device and its writers. See the module documentation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OriginState {
    /// Replaced by every writer other than the attached cache device; 0: never set.
    pub nonce: u64,
    pub cache: Option<CacheHold>,
}

impl OriginState {
    /// The text form stored.
    pub fn encode(&self) -> String {
        let mut s = format!("{STATE_HEADER}\nnonce {:016x}\n", self.nonce);
        if let Some(c) = &self.cache {
            let dirty = c.dirty.map_or_else(|| "in-use".to_string(), |d| d.to_string());
            s.push_str(&format!(
                "cache {} dirty {dirty} path {}\n",
                uuid::Uuid::from_bytes(c.uuid).hyphenated(),
                c.path
            ));
        }
        s
    }

    /// Parses [`OriginState::encode`]'s text; `Err`: what is wrong.
    pub fn decode(text: &str) -> Result<OriginState, String> {
        let mut lines = text.lines();
        if lines.next() != Some(STATE_HEADER) {
            return Err(format!("it does not start with '{STATE_HEADER}'"));
        }
        let mut st = OriginState::default();
        for (n, line) in lines.enumerate() {
            let bad = || format!("line {}: '{line}'", n + 2);
            if let Some(v) = line.strip_prefix("nonce ") {
                st.nonce = u64::from_str_radix(v, 16).map_err(|_| bad())?;
            } else if let Some(v) = line.strip_prefix("cache ") {
                let (uuid, rest) = v.split_once(" dirty ").ok_or_else(bad)?;
                let (dirty, path) = rest.split_once(" path ").ok_or_else(bad)?;
                let uuid = uuid::Uuid::parse_str(uuid).map_err(|_| bad())?;
                let dirty = if dirty == "in-use" { None } else { Some(dirty.parse().map_err(|_| bad())?) };
                st.cache = Some(CacheHold { uuid: *uuid.as_bytes(), path: path.to_string(), dirty });
            } else if !line.is_empty() {
                return Err(bad());
            }
        }
        Ok(st)
    }
}

/// A fresh nonce: random, never 0.
pub fn new_nonce() -> u64 {
    let b = uuid::Uuid::new_v4();
    u64::from_le_bytes(b.as_bytes()[..8].try_into().expect("8 bytes")).max(1)
}

/// Errors reading or writing an origin's state record.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read the origin's state record ({at}): {source}")]
    Read { at: String, source: io::Error },
    #[error("cannot write the origin's state record ({at}): {source}")]
    Write { at: String, source: io::Error },
    #[error("the origin's state record ({at}) is damaged: {why}; remove it only if no cache device holds dirty blocks for this origin")]
    Damaged { at: String, why: String },
}

/// Where an origin's [`OriginState`] is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// The extended attribute `user.blockwell.state` of this regular file.
    Xattr(PathBuf),
    /// A file in the state directory.
    File(PathBuf),
}

impl Record {
    /// Where the state of the origin open as `file` at `path` is kept: its extended attribute when it is a
    /// regular file on a file system that has them, else a file in the state directory keyed by its
    /// path-derived identity.
    pub fn locate(path: &Path, file: &File) -> io::Result<Record> {
        if file.metadata()?.file_type().is_file() {
            let mut buf = [0u8; 0];
            match rustix::fs::fgetxattr(file, STATE_XATTR, &mut buf) {
                Err(e) if unsupported(e) => {}
                _ => return Ok(Record::Xattr(path.to_path_buf())),
            }
        }
        let canon = std::fs::canonicalize(path)?;
        let h = xxhash_rust::xxh3::xxh3_128(canon.as_os_str().as_encoded_bytes());
        let key = uuid::Uuid::from_bytes(h.to_le_bytes()).hyphenated().to_string();
        Ok(Record::File(state_dir().join("origins").join(format!("{key}.state"))))
    }

    /// Where, for messages.
    pub fn describe(&self) -> String {
        match self {
            Record::Xattr(p) => format!("extended attribute {STATE_XATTR} of {}", p.display()),
            Record::File(p) => p.display().to_string(),
        }
    }

    /// The recorded state; `None` when there is no record (no cache device was ever attached).
    pub fn read(&self) -> Result<Option<OriginState>, StateError> {
        let rerr = |source| StateError::Read { at: self.describe(), source };
        let bytes = match self {
            Record::Xattr(p) => {
                let f = File::open(p).map_err(rerr)?;
                let mut buf = vec![0u8; 4096];
                match rustix::fs::fgetxattr(&f, STATE_XATTR, &mut buf) {
                    Ok(n) => {
                        buf.truncate(n);
                        buf
                    }
                    Err(rustix::io::Errno::NODATA) => return Ok(None),
                    Err(e) => return Err(rerr(e.into())),
                }
            }
            Record::File(p) => match std::fs::read(p) {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(rerr(e)),
            },
        };
        let text = String::from_utf8(bytes)
            .map_err(|_| StateError::Damaged { at: self.describe(), why: "not UTF-8".into() })?;
        OriginState::decode(&text).map(Some).map_err(|why| StateError::Damaged { at: self.describe(), why })
    }

    /// Replaces the record, durably (synced before it returns).
    pub fn write(&self, st: &OriginState) -> Result<(), StateError> {
        let werr = |source| StateError::Write { at: self.describe(), source };
        let text = st.encode();
        match self {
            Record::Xattr(p) => {
                let f = File::open(p).map_err(werr)?;
                rustix::fs::fsetxattr(&f, STATE_XATTR, text.as_bytes(), rustix::fs::XattrFlags::empty())
                    .map_err(|e| werr(e.into()))?;
                f.sync_all().map_err(werr)
            }
            Record::File(p) => {
                let dir = p.parent().expect("a record file has a directory");
                std::fs::create_dir_all(dir).map_err(werr)?;
                let tmp = p.with_extension(format!("tmp{}", std::process::id()));
                let mut f = File::create(&tmp).map_err(werr)?;
                use std::io::Write as _;
                f.write_all(text.as_bytes()).and_then(|()| f.sync_all()).map_err(werr)?;
                std::fs::rename(&tmp, p).map_err(werr)?;
                File::open(dir).and_then(|d| d.sync_all()).map_err(werr)
            }
        }
    }
}

/// The state directory: `$BLOCKWELL_STATE_DIR`, else `/var/lib/blockwell`.
pub fn state_dir() -> PathBuf {
    std::env::var_os(STATE_DIR_ENV).filter(|v| !v.is_empty()).map_or_else(|| DEFAULT_STATE_DIR.into(), PathBuf::from)
}

/// What a cache device that an origin records as attached holds now: `Ok(n)` dirty blocks counted on the
/// device (read-only, its journal replayed in memory), or `Err(why)` when the device cannot tell (gone,
/// reformatted, unreadable), with the recorded count then standing for it.
pub fn held_dirty(hold: &CacheHold) -> Result<u64, String> {
    let dev = blockwell_cachedev::FileDev::open(Path::new(&hold.path), true).map_err(|e| format!("{e}"))?;
    let r = blockwell_cachedev::check::check(&dev, None).map_err(|e| e.to_string())?;
    let want = uuid::Uuid::from_bytes(hold.uuid).hyphenated().to_string();
    if r.uuid != want {
        return Err(format!("it now holds another cache device (UUID {})", r.uuid));
    }
    if r.detached {
        return Ok(0);
    }
    Ok(r.dirty)
}

/// Why opening the origin without the cache device `hold` would lose or hide data, if it would: `None` when
/// the device holds no dirty blocks. The text names the device, its dirty blocks and what is at stake.
pub fn hold_refusal(hold: &CacheHold) -> Option<String> {
    let name = format!("{} (UUID {})", hold.path, uuid::Uuid::from_bytes(hold.uuid).hyphenated());
    let what = match (held_dirty(hold), hold.dirty) {
        (Ok(0), _) => return None,
        (Ok(n), _) => format!("the cache device {name} holds {n} dirty block(s) of it"),
        (Err(_), Some(0)) => return None,
        (Err(why), Some(n)) => {
            format!("the cache device {name} held {n} dirty block(s) of it at its last clean stop ({why})")
        }
        (Err(why), None) => format!(
            "the cache device {name} was attached and not stopped cleanly, and may hold dirty blocks of it ({why})"
        ),
    };
    Some(format!(
        "{what}: without it the origin's data there is stale, and a write to the origin would make those \
         blocks stale in turn (the cache device then refuses them, or, forced, writes them back over the newer \
         data); serve it with its cache device, or write them back first with `blockwell cache flush` or \
         `blockwell cache detach`; --force goes ahead without it"
    ))
}

/// What a tier keeps on its origin's state record: where it is, and what to do about another device's or its
/// own stale dirty blocks.
#[derive(Clone, Debug)]
pub struct OriginGuard {
    pub record: Record,
    /// The cache device's path, recorded on the origin.
    pub cache_path: String,
    /// Open although another cache device holds dirty blocks of the origin, and keep this device's dirty
    /// blocks although the origin was written without it (they are written back over the newer data).
    pub force: bool,
    /// Drop this device's dirty blocks when the origin was written without it (the origin's data wins).
    pub discard_stale: bool,
}

impl OriginGuard {
    /// What the device does with stale dirty blocks.
    pub fn stale(&self) -> blockwell_cachedev::StaleDirty {
        use blockwell_cachedev::StaleDirty;
        match (self.discard_stale, self.force) {
            (true, _) => StaleDirty::Discard,
            (false, true) => StaleDirty::Keep,
            (false, false) => StaleDirty::Refuse,
        }
    }
}

fn unsupported(e: rustix::io::Errno) -> bool {
    e == rustix::io::Errno::NOTSUP || e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::PERM
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_records_round_trip_and_damage_is_named() {
        let st = OriginState {
            nonce: 0xdead_beef_0000_0001,
            cache: Some(CacheHold { uuid: [7; 16], path: "/var/cache/my cache.dev".into(), dirty: Some(12) }),
        };
        assert_eq!(OriginState::decode(&st.encode()).unwrap(), st);
        let inuse = OriginState { cache: Some(CacheHold { dirty: None, ..st.cache.clone().unwrap() }), ..st };
        assert_eq!(OriginState::decode(&inuse.encode()).unwrap(), inuse);
        assert_eq!(OriginState::decode(&OriginState::default().encode()).unwrap(), OriginState::default());
        assert!(OriginState::decode("something else\n").unwrap_err().contains("does not start"));
        let e = OriginState::decode("blockwell origin state 1\nnonce zz\n").unwrap_err();
        assert_eq!(e, "line 2: 'nonce zz'");
    }

    #[test]
    fn a_file_keeps_its_record_in_an_attribute_or_the_state_directory() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.img");
        std::fs::write(&a, vec![0u8; 8192]).unwrap();
        let rec = Record::locate(&a, &File::open(&a).unwrap()).unwrap();
        assert_eq!(rec.read().unwrap(), None, "no record yet");
        let st = OriginState { nonce: 5, cache: None };
        rec.write(&st).unwrap();
        assert_eq!(rec.read().unwrap(), Some(st));
        let f = Record::File(dir.path().join("s/origins/x.state"));
        f.write(&OriginState { nonce: 9, cache: None }).unwrap();
        assert_eq!(f.read().unwrap().unwrap().nonce, 9);
        std::fs::write(dir.path().join("s/origins/x.state"), "junk").unwrap();
        assert!(matches!(f.read(), Err(StateError::Damaged { .. })));
    }

    #[test]
    fn a_stamped_file_keeps_its_identity_and_another_file_differs() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.img");
        let b = dir.path().join("b.img");
        std::fs::write(&a, vec![0u8; 8192]).unwrap();
        std::fs::write(&b, vec![0u8; 8192]).unwrap();
        let fa = File::open(&a).unwrap();
        let (id1, src1) = identity(&a, &fa, 8192, true).unwrap();
        let (id2, src2) = identity(&a, &fa, 8192, false).unwrap();
        assert_eq!(id1, id2);
        let fb = File::open(&b).unwrap();
        let (id3, _) = identity(&b, &fb, 8192, false).unwrap();
        assert_ne!(id1, id3, "another file of the same size is another origin");
        match src1 {
            IdentitySource::Stamped => assert_eq!(src2, IdentitySource::Xattr),
            // A file system without user xattrs: identified by path, still stable.
            IdentitySource::Path => assert_eq!(src2, IdentitySource::Path),
            IdentitySource::Xattr => panic!("a fresh file has no attribute"),
        }
    }
}
