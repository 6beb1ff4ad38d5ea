//! One writer per backing store: the claim a server takes on every file or block device it opens.
//!
//! - Every file gets a `flock` (exclusive or shared, as the claim) and an open-file-description lock
//!   (`F_OFD_SETLK`) over all of its bytes, as qemu takes: a write lock when it is open for writing, a read
//!   lock otherwise. Both belong to the open file, not the process, so two exports of one server on the same
//!   file conflict as two servers do; the whole-file OFD lock also conflicts with qemu's byte locks on an
//!   image it has open for writing (and a qemu writer with a reader's read lock).
//! - A block device is also opened with `O_EXCL` for an exclusive claim, which the kernel refuses (`EBUSY`)
//!   while the device is mounted or claimed by another exclusive opener (device-mapper, md, bcache, another
//!   server); and a mounted block device is refused whatever the claim.
//!
//! A refusal names the holder when it can: the processes that have the file open with a lock (found in
//! `/proc/PID/fdinfo`), the mount point, or the kernel holder (`/sys/dev/block/M:m/holders`).

use nix::fcntl::{fcntl, FcntlArg};
use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

/// What a server claims of a file it opens.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Claim {
    /// Nobody else may claim it: one writer, or one reader that wants it alone.
    #[default]
    Exclusive,
    /// Other shared claims are fine; an exclusive one is refused (readers sharing a file, `--shared`).
    Shared,
    /// No claim (a short look at a file's size).
    Unclaimed,
}

/// Why a claim was refused.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("{path} is in use by {holder}: one writer per backing store")]
    InUse { path: PathBuf, holder: String },
    #[error("{path} is a mounted block device (mounted at {at}): unmount it first")]
    Mounted { path: PathBuf, at: String },
    #[error("cannot lock {path}: {source}")]
    Lock { path: PathBuf, source: io::Error },
}

/// Before opening `path` (`meta`: its metadata, following links): refuses a mounted block device, and returns
/// the open flags the claim needs (`O_EXCL` for an exclusive claim on a block device).
pub fn open_flags(path: &Path, meta: &Metadata, claim: Claim) -> Result<i32, ClaimError> {
    if claim == Claim::Unclaimed || !meta.file_type().is_block_device() {
        return Ok(0);
    }
    if let Some(at) = mount_point(meta.rdev()) {
        return Err(ClaimError::Mounted { path: path.into(), at });
    }
    Ok(if claim == Claim::Exclusive { rustix::fs::OFlags::EXCL.bits() as i32 } else { 0 })
}

/// The error for an open of `path` that failed with `EBUSY` under [`open_flags`]' `O_EXCL`.
pub fn busy(path: &Path, meta: &Metadata) -> ClaimError {
    let rdev = meta.rdev();
    if let Some(at) = mount_point(rdev) {
        return ClaimError::Mounted { path: path.into(), at };
    }
    let (maj, min) = (rustix::fs::major(rdev), rustix::fs::minor(rdev));
    let kernel: Vec<String> = std::fs::read_dir(format!("/sys/dev/block/{maj}:{min}/holders"))
        .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    let holder = if !kernel.is_empty() {
        format!("the kernel ({})", kernel.join(", "))
    } else {
        describe(&openers(|m| m.file_type().is_block_device() && m.rdev() == rdev, false))
    };
    ClaimError::InUse { path: path.into(), holder }
}

/// Takes the claim's locks on the open `file` (at `path`): a `flock` (exclusive or shared), which keeps
/// Blockwell processes apart whatever their open mode, and an OFD lock (write when the file is open for
/// writing under an exclusive claim, else read), which also keeps qemu and other OFD lockers apart from a
/// writer.
pub fn lock(file: &File, path: &Path, claim: Claim) -> Result<(), ClaimError> {
    use rustix::fs::{FlockOperation, OFlags};
    let err = |source: io::Error| ClaimError::Lock { path: path.into(), source };
    let flock = match claim {
        Claim::Exclusive => FlockOperation::NonBlockingLockExclusive,
        Claim::Shared => FlockOperation::NonBlockingLockShared,
        Claim::Unclaimed => return Ok(()),
    };
    let access = rustix::fs::fcntl_getfl(file).map_err(|e| err(e.into()))? & OFlags::RWMODE;
    let writer = claim == Claim::Exclusive && access != OFlags::RDONLY;
    let typ = if writer { libc::F_WRLCK } else { libc::F_RDLCK };
    let fl = libc::flock { l_type: typ as i16, l_whence: libc::SEEK_SET as i16, l_start: 0, l_len: 0, l_pid: 0 };
    let taken = match rustix::fs::flock(file, flock) {
        Ok(()) => fcntl(file.as_raw_fd(), FcntlArg::F_OFD_SETLK(&fl)).map(|_| ()).map_err(io::Error::from),
        Err(e) => Err(e.into()),
    };
    match taken {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EACCES)) => {
            let meta = file.metadata().map_err(err)?;
            let (dev, ino) = (meta.dev(), meta.ino());
            let holders = openers(|m| m.dev() == dev && m.ino() == ino, true);
            Err(ClaimError::InUse { path: path.into(), holder: describe(&holders) })
        }
        Err(e) => Err(err(e)),
    }
}

/// Where the block device `rdev` is mounted, from `/proc/self/mountinfo`.
fn mount_point(rdev: u64) -> Option<String> {
    let want = format!("{}:{}", rustix::fs::major(rdev), rustix::fs::minor(rdev));
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(2) == Some(&want.as_str())).then(|| f.get(4).unwrap_or(&"?").to_string())
    })
}

/// One process that has the file open: its PID, command line, and whether it holds a write lock.
struct Opener {
    pid: u32,
    cmdline: String,
    writes: bool,
}

/// The processes with an open file descriptor whose target `matches`; with `locked`, only those whose
/// descriptor holds a lock. Processes this user cannot inspect are not seen.
fn openers(matches: impl Fn(&Metadata) -> bool, locked: bool) -> Vec<Opener> {
    let mut out = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return out };
    for p in procs.flatten() {
        let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            if !std::fs::metadata(fd.path()).is_ok_and(|m| matches(&m)) {
                continue;
            }
            let info = std::fs::read_to_string(p.path().join("fdinfo").join(fd.file_name())).unwrap_or_default();
            let locks: Vec<&str> = info.lines().filter(|l| l.starts_with("lock:")).collect();
            if locked && locks.is_empty() {
                continue;
            }
            let cmdline = std::fs::read(p.path().join("cmdline"))
                .map(|c| c.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect::<Vec<_>>())
                .unwrap_or_default()
                .join(" ");
            out.push(Opener {
                pid,
                cmdline: cmdline.trim().to_string(),
                writes: locks.iter().any(|l| l.contains("WRITE")),
            });
            break;
        }
    }
    out
}

fn describe(openers: &[Opener]) -> String {
    if openers.is_empty() {
        return "another process (not visible to this user)".into();
    }
    let me = std::process::id();
    let one = |o: &Opener| {
        let how = if o.writes { "" } else { ", shared" };
        if o.pid == me {
            format!("this process{how}")
        } else {
            let mut cmd = o.cmdline.clone();
            if cmd.chars().count() > 100 {
                cmd = cmd.chars().take(97).collect::<String>() + "...";
            }
            format!("process {} ({cmd}{how})", o.pid)
        }
    };
    openers.iter().map(one).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(p: &Path) -> File {
        std::fs::OpenOptions::new().read(true).write(true).open(p).unwrap()
    }

    #[test]
    fn exclusive_excludes_everyone_shared_only_writers() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        std::fs::write(&p, [0; 4096]).unwrap();
        let a = open(&p);
        lock(&a, &p, Claim::Exclusive).unwrap();
        // A second open file in the same process conflicts: OFD locks belong to the open file.
        let b = open(&p);
        let e = lock(&b, &p, Claim::Exclusive).unwrap_err().to_string();
        assert!(e.contains("in use by this process"), "{e}");
        assert!(lock(&b, &p, Claim::Shared).is_err());
        lock(&b, &p, Claim::Unclaimed).unwrap();
        drop(a);
        lock(&b, &p, Claim::Shared).unwrap();
        let c = open(&p);
        lock(&c, &p, Claim::Shared).unwrap();
        let d = open(&p);
        let e = lock(&d, &p, Claim::Exclusive).unwrap_err().to_string();
        assert!(e.contains("this process, shared"), "{e}");
        drop((b, c));
        lock(&d, &p, Claim::Exclusive).unwrap();
    }

    #[test]
    fn regular_files_need_no_open_flags() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("img");
        std::fs::write(&p, [0; 512]).unwrap();
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(open_flags(&p, &m, Claim::Exclusive).unwrap(), 0);
    }
}
