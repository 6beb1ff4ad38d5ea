//! Single-file FUSE export of a block backend: a directory holding ONE regular file (default name `disk`)
//! whose size is the backend's size, so `losetup` + `mkfs` + `mount` put a real filesystem on top of a
//! cached device.
//!
//! Built on the `fuser` crate without libfuse: as root the kernel mount is done directly (or through the
//! `fusermount3` helper from Debian's `fuse3` package when auto-unmount is requested); unprivileged users need
//! `fusermount3`.
//!
//! Mapping, per FUSE operation:
//! - `read` → [`Backend::read_at`]; `write` → [`Backend::write_at`], with FUA when the file was opened with
//!   `O_SYNC`/`O_DSYNC`. Requests past the end are clamped (reads return short; a write starting at or past
//!   the end fails with `ENOSPC`, like a block device).
//! - `fsync` and `flush` (every `close`) → [`Backend::flush`].
//! - `fallocate(PUNCH_HOLE|KEEP_SIZE)` → [`Backend::write_zeroes`] with `may_trim` (a punched hole must read
//!   as zeroes, which a plain trim does not promise); `ZERO_RANGE` → `write_zeroes` without trimming; plain
//!   allocation inside the file is a no-op; anything that would change the size or shift data → error.
//! - `setattr`: the size is fixed (`EPERM` for any other size, including `O_TRUNC`), as are mode and owner;
//!   time updates are accepted and ignored.
//! - Every open uses `FOPEN_DIRECT_IO`, so the kernel page cache above does not hide the cache's behaviour.
//!
//! The FUSE session loop reads requests one at a time; data requests are handed to a small pool of worker
//! threads, so several reads and writes reach the backend concurrently (the backend synchronizes internally).

use blockwell_server::backend::Backend;
use fuser::consts::FOPEN_DIRECT_IO;
use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, MountOption, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};
use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

/// Inode of the directory (the mount's root).
const ROOT_INO: u64 = fuser::FUSE_ROOT_ID;
/// Inode of the one file.
const FILE_INO: u64 = 2;
/// How long the kernel may cache attributes and entries: nothing changes behind its back.
const TTL: Duration = Duration::from_secs(1);
/// The largest request the kernel is asked to send (needs FUSE_MAX_PAGES, Linux ≥ 4.20; older kernels use
/// 128 KiB).
const MAX_WRITE: u32 = 1 << 20;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{}: not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("mountpoint {}", path.display())]
    Mountpoint { path: PathBuf, source: io::Error },
    #[error("file name '{0}' is not a single path component")]
    BadName(String),
    #[error("mounting FUSE at {} (needs /dev/fuse, and root or fusermount3 from the fuse3 package)", path.display())]
    Mount { path: PathBuf, source: io::Error },
    #[error("unmounting {}", path.display())]
    Unmount { path: PathBuf, source: io::Error },
    #[error("{}: the FUSE session thread ended abnormally", .0.display())]
    Session(PathBuf),
}

impl Error {
    /// The mount is still in use (`EBUSY`: a loop device or an open file holds the export); retry later.
    pub fn is_busy(&self) -> bool {
        matches!(self, Error::Unmount { source, .. } if source.raw_os_error() == Some(libc::EBUSY))
    }
}

/// What to export and how.
#[derive(Clone, Debug)]
pub struct Options {
    /// The file's name inside the mount (default `disk`).
    pub name: String,
    /// Worker threads serving reads and writes (default 4).
    pub threads: usize,
    /// Refuse writes (mode 0444, `EROFS`); also implied by [`Backend::is_read_only`].
    pub read_only: bool,
    /// The source shown in `/proc/mounts` (default `blockwell`).
    pub fsname: String,
}

impl Default for Options {
    fn default() -> Self {
        Options { name: "disk".into(), threads: 4, read_only: false, fsname: "blockwell".into() }
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A fixed pool of threads running jobs from one queue.
struct Pool {
    tx: Option<mpsc::Sender<Job>>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    fn new(threads: usize) -> Pool {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let workers = (0..threads.max(1))
            .map(|i| {
                let rx = rx.clone();
                std::thread::Builder::new()
                    .name(format!("blockwell-fuse-{i}"))
                    .spawn(move || loop {
                        let job = rx.lock().expect("pool lock").recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => return,
                        }
                    })
                    .expect("spawn FUSE worker")
            })
            .collect();
        Pool { tx: Some(tx), workers }
    }

    fn run(&self, job: impl FnOnce() + Send + 'static) {
        if let Some(tx) = &self.tx {
            // The workers only stop when `tx` is dropped, so sending cannot fail here.
            let _ = tx.send(Box::new(job));
        }
    }

    /// Waits for every queued job, then stops the workers.
    fn finish(&mut self) {
        self.tx = None;
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// The FUSE filesystem: one directory, one file.
struct DiskFs {
    backend: Arc<dyn Backend>,
    name: String,
    size: u64,
    read_only: bool,
    uid: u32,
    gid: u32,
    mounted_at: SystemTime,
    pool: Pool,
    /// Signalled once the session has ended and every in-flight request is done.
    done: Option<mpsc::Sender<()>>,
}

/// Maps an I/O error to the errno FUSE returns.
fn errno(e: &io::Error) -> i32 {
    if let Some(raw) = e.raw_os_error() {
        return raw;
    }
    use io::ErrorKind::*;
    match e.kind() {
        NotFound => libc::ENOENT,
        PermissionDenied => libc::EACCES,
        InvalidInput | InvalidData => libc::EINVAL,
        Unsupported => libc::EOPNOTSUPP,
        UnexpectedEof => libc::EIO,
        OutOfMemory => libc::ENOMEM,
        _ => libc::EIO,
    }
}

impl DiskFs {
    fn attr(&self, ino: u64) -> FileAttr {
        let (kind, perm, size, nlink) = match ino {
            ROOT_INO => (FileType::Directory, 0o755, 0, 2),
            _ => (FileType::RegularFile, if self.read_only { 0o444 } else { 0o644 }, self.size, 1),
        };
        FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: self.mounted_at,
            mtime: self.mounted_at,
            ctime: self.mounted_at,
            crtime: self.mounted_at,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    /// `offset` as bytes inside the file, or `EINVAL`.
    fn offset(offset: i64) -> Result<u64, i32> {
        u64::try_from(offset).map_err(|_| libc::EINVAL)
    }
}

impl Filesystem for DiskFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), i32> {
        // Let the kernel send large requests and several direct I/Os at once; older kernels ignore this.
        let _ = config.set_max_write(MAX_WRITE);
        let _ = config.set_max_readahead(MAX_WRITE);
        let _ = config.add_capabilities(fuser::consts::FUSE_ASYNC_DIO);
        Ok(())
    }

    fn destroy(&mut self) {
        self.pool.finish();
        if let Some(done) = self.done.take() {
            let _ = done.send(());
        }
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        if parent == ROOT_INO && name == OsStr::new(&self.name) {
            reply.entry(&TTL, &self.attr(FILE_INO), 0);
        } else {
            reply.error(libc::ENOENT);
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        match ino {
            ROOT_INO | FILE_INO => reply.attr(&TTL, &self.attr(ino)),
            _ => reply.error(libc::ENOENT),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        if ino != ROOT_INO && ino != FILE_INO {
            return reply.error(libc::ENOENT);
        }
        let attr = self.attr(ino);
        let fixed_size = size.is_some_and(|s| ino != FILE_INO || s != self.size);
        let changes_mode = mode.is_some_and(|m| (m & 0o7777) as u16 != attr.perm);
        let changes_owner = uid.is_some_and(|u| u != attr.uid) || gid.is_some_and(|g| g != attr.gid);
        if fixed_size || changes_mode || changes_owner {
            return reply.error(libc::EPERM);
        }
        reply.attr(&TTL, &attr);
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        if ino != FILE_INO {
            return reply.error(libc::EISDIR);
        }
        if self.read_only && flags & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(libc::EROFS);
        }
        reply.opened(0, FOPEN_DIRECT_IO);
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        if ino != FILE_INO {
            return reply.error(libc::EISDIR);
        }
        let offset = match Self::offset(offset) {
            Ok(o) => o,
            Err(e) => return reply.error(e),
        };
        let len = (size as u64).min(self.size.saturating_sub(offset)) as usize;
        if len == 0 {
            return reply.data(&[]);
        }
        let backend = self.backend.clone();
        self.pool.run(move || {
            let mut buf = vec![0u8; len];
            match backend.read_at(&mut buf, offset) {
                Ok(()) => reply.data(&buf),
                Err(e) => reply.error(errno(&e)),
            }
        });
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        if ino != FILE_INO {
            return reply.error(libc::EISDIR);
        }
        if self.read_only {
            return reply.error(libc::EROFS);
        }
        let offset = match Self::offset(offset) {
            Ok(o) => o,
            Err(e) => return reply.error(e),
        };
        if offset >= self.size {
            return reply.error(libc::ENOSPC);
        }
        let len = (data.len() as u64).min(self.size - offset) as usize;
        let data = data[..len].to_vec();
        let fua = flags & (libc::O_SYNC | libc::O_DSYNC) != 0;
        let backend = self.backend.clone();
        self.pool.run(move || match backend.write_at(&data, offset, fua) {
            Ok(()) => reply.written(len as u32),
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lock_owner: u64, reply: ReplyEmpty) {
        self.sync(reply);
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _datasync: bool, reply: ReplyEmpty) {
        self.sync(reply);
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if ino != FILE_INO {
            return reply.error(libc::EISDIR);
        }
        let (offset, length) = match (Self::offset(offset), Self::offset(length)) {
            (Ok(o), Ok(l)) if l > 0 => (o, l),
            _ => return reply.error(libc::EINVAL),
        };
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let end = offset.saturating_add(length);
        let op = mode & !libc::FALLOC_FL_KEEP_SIZE;
        if op == 0 {
            // Allocation: everything inside the file already is.
            return if end <= self.size || keep_size { reply.ok() } else { reply.error(libc::EFBIG) };
        }
        if self.read_only {
            return reply.error(libc::EROFS);
        }
        let may_trim = match op {
            libc::FALLOC_FL_PUNCH_HOLE if keep_size => true,
            libc::FALLOC_FL_ZERO_RANGE => false,
            _ => return reply.error(libc::EOPNOTSUPP),
        };
        if !keep_size && end > self.size {
            return reply.error(libc::EFBIG);
        }
        let end = end.min(self.size);
        if offset >= end {
            return reply.ok();
        }
        let backend = self.backend.clone();
        self.pool.run(move || match backend.write_zeroes(offset, end - offset, may_trim, false) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn readdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, offset: i64, mut reply: ReplyDirectory) {
        if ino != ROOT_INO {
            return reply.error(libc::ENOTDIR);
        }
        let entries = [
            (ROOT_INO, FileType::Directory, "."),
            (ROOT_INO, FileType::Directory, ".."),
            (FILE_INO, FileType::RegularFile, self.name.as_str()),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(*ino, i as i64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let blocks = self.size.div_ceil(4096);
        reply.statfs(blocks, 0, 0, 2, 0, 4096, 255, 4096);
    }
}

impl DiskFs {
    fn sync(&self, reply: ReplyEmpty) {
        if self.read_only {
            return reply.ok();
        }
        let backend = self.backend.clone();
        self.pool.run(move || match backend.flush() {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        });
    }
}

/// A live mount; [`Mounted::unmount`] ends it cleanly. Dropping it unmounts too (lazily, without waiting).
pub struct Mounted {
    session: Option<fuser::BackgroundSession>,
    mountpoint: PathBuf,
    file: PathBuf,
    done: mpsc::Receiver<()>,
    /// The session has ended (unmounted by us or from outside) and every in-flight request is done.
    ended: bool,
}

impl Mounted {
    /// The exported file (`<mountpoint>/<name>`).
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The directory it is mounted on.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Whether the filesystem has been unmounted from outside (`fusermount3 -u`, `umount`): then the session
    /// has ended and every request it took is done; [`Mounted::try_unmount`] has nothing left to do.
    pub fn is_unmounted(&mut self) -> bool {
        if !self.ended {
            match self.done.try_recv() {
                Ok(()) | Err(mpsc::TryRecvError::Disconnected) => {
                    self.ended = true;
                    drop(self.session.take());
                }
                Err(mpsc::TryRecvError::Empty) => {}
            }
        }
        self.ended
    }

    /// Tries once to unmount. `Err` with `EBUSY` (e.g. a loop device still uses the file): the export
    /// keeps serving and the caller may retry. On success, waits until every in-flight request is done.
    /// Nothing to do (`Ok`) when it was unmounted from outside.
    pub fn try_unmount(&mut self) -> Result<(), Error> {
        if self.is_unmounted() {
            return Ok(());
        }
        let err = |source| Error::Unmount { path: self.mountpoint.clone(), source };
        match rustix::mount::unmount(&self.mountpoint, rustix::mount::UnmountFlags::empty()) {
            Ok(()) => {}
            // Unprivileged: the setuid helper unmounts.
            Err(rustix::io::Errno::PERM) => {
                let out =
                    std::process::Command::new("fusermount3").arg("-u").arg(&self.mountpoint).output().map_err(&err)?;
                if !out.status.success() {
                    let msg = String::from_utf8_lossy(&out.stderr).trim().to_string();
                    let kind = if msg.contains("busy") {
                        io::Error::from_raw_os_error(libc::EBUSY)
                    } else {
                        io::Error::other(msg)
                    };
                    return Err(err(kind));
                }
            }
            Err(e) => return Err(err(e.into())),
        }
        // Unmounted: the session loop sees ENODEV, ends, and the filesystem drains its workers.
        drop(self.session.take());
        let r = self.done.recv().map_err(|_| Error::Session(self.mountpoint.clone()));
        self.ended = true;
        r
    }

    /// Unmounts, retrying while the mount is busy, for at most `timeout`.
    pub fn unmount(mut self, timeout: Duration) -> Result<(), Error> {
        let start = std::time::Instant::now();
        loop {
            match self.try_unmount() {
                Err(e) if e.is_busy() && start.elapsed() < timeout => std::thread::sleep(Duration::from_millis(100)),
                r => return r,
            }
        }
    }
}

/// Mounts `backend` as `<mountpoint>/<opts.name>` and serves it from background threads until unmounted.
/// Requests auto-unmount (the mount disappears if this process dies) where `fusermount3` allows it, and
/// falls back to a plain mount otherwise.
pub fn mount(backend: Arc<dyn Backend>, mountpoint: &Path, opts: &Options) -> Result<Mounted, Error> {
    let meta =
        std::fs::metadata(mountpoint).map_err(|source| Error::Mountpoint { path: mountpoint.to_path_buf(), source })?;
    if !meta.is_dir() {
        return Err(Error::NotADirectory(mountpoint.to_path_buf()));
    }
    if opts.name.is_empty() || opts.name == "." || opts.name == ".." || opts.name.contains('/') {
        return Err(Error::BadName(opts.name.clone()));
    }
    let read_only = opts.read_only || backend.is_read_only();
    let base = vec![
        MountOption::FSName(opts.fsname.clone()),
        MountOption::Subtype("blockwell".into()),
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
        MountOption::NoExec,
        if read_only { MountOption::RO } else { MountOption::RW },
    ];
    let new_fs = |done| DiskFs {
        size: backend.size(),
        backend: backend.clone(),
        name: opts.name.clone(),
        read_only,
        uid: rustix::process::geteuid().as_raw(),
        gid: rustix::process::getegid().as_raw(),
        mounted_at: SystemTime::now(),
        pool: Pool::new(opts.threads),
        done: Some(done),
    };
    let mut auto = base.clone();
    auto.extend([MountOption::AutoUnmount, MountOption::AllowRoot]);
    let (tx, rx) = mpsc::channel();
    let (session, done) = match fuser::spawn_mount2(new_fs(tx), mountpoint, &auto) {
        Ok(s) => (s, rx),
        Err(_) => {
            let (tx, rx) = mpsc::channel();
            let s = fuser::spawn_mount2(new_fs(tx), mountpoint, &base)
                .map_err(|source| Error::Mount { path: mountpoint.to_path_buf(), source })?;
            (s, rx)
        }
    };
    Ok(Mounted {
        session: Some(session),
        mountpoint: mountpoint.to_path_buf(),
        file: mountpoint.join(&opts.name),
        done,
        ended: false,
    })
}
