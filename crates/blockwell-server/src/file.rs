//! [`FileBackend`]: positional I/O on a regular file or a block device.
//!
//! - reads and writes are `pread`/`pwrite` ([`FileExt`]), so requests on many threads share one descriptor;
//! - FLUSH is `fdatasync`; a FUA write is the write followed by `fdatasync`;
//! - TRIM punches a hole (`fallocate(PUNCH_HOLE | KEEP_SIZE)`) where the file system supports it and is a
//!   no-op elsewhere; WRITE_ZEROES punches a hole when allowed to, else writes zero buffers;
//! - BLOCK_STATUS answers from `SEEK_DATA`/`SEEK_HOLE` on regular files;
//! - `O_DIRECT` ([`FileOptions::direct`]) goes through an aligned bounce buffer in [`DIRECT_ALIGN`] units, so
//!   callers may still send unaligned requests. File systems that refuse `O_DIRECT` (tmpfs) fail at open.

use crate::backend::Backend;
use crate::claim::{self, Claim, ClaimError};
use rustix::fs::{FallocateFlags, SeekFrom};
use rustix::io::Errno;
use std::fs::{File, OpenOptions};
use std::io::{self, Seek};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Alignment of offsets, lengths and buffers under `O_DIRECT`.
pub const DIRECT_ALIGN: u64 = 4096;

/// Size of the zero buffer used by WRITE_ZEROES when it cannot punch a hole.
const ZERO_CHUNK: usize = 1 << 20;

/// How to open a [`FileBackend`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FileOptions {
    /// Open read-only; writes, TRIM and WRITE_ZEROES are refused (EPERM).
    pub read_only: bool,
    /// Open with `O_DIRECT` (bypass the page cache).
    pub direct: bool,
    /// What to claim of the file ([`crate::claim`]): exclusive unless told otherwise.
    pub claim: Claim,
}

impl FileOptions {
    /// Read-only, as `claim`.
    pub fn read_only(claim: Claim) -> Self {
        FileOptions { read_only: true, direct: false, claim }
    }

    /// Read and write, exclusively.
    pub fn writable() -> Self {
        FileOptions::default()
    }
}

/// Errors opening a file backend, naming the path.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot open {path}: {source}")]
    Open { path: PathBuf, source: io::Error },
    #[error("cannot open {path} with O_DIRECT: the file system refuses it ({source}); open without direct I/O")]
    DirectUnsupported { path: PathBuf, source: io::Error },
    #[error("{path}: size {size} B is not a multiple of {DIRECT_ALIGN} B, which O_DIRECT needs")]
    DirectUnaligned { path: PathBuf, size: u64 },
    #[error("{path} is neither a regular file nor a block device")]
    NotAFile { path: PathBuf },
    #[error("cannot find the size of {path}: {source}")]
    Size { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Claim(#[from] ClaimError),
}

/// A regular file or block device served with positional I/O.
pub struct FileBackend {
    file: File,
    size: u64,
    read_only: bool,
    direct: bool,
    regular: bool,
    /// Cleared when `fallocate(PUNCH_HOLE)` reports it is unsupported.
    punch: AtomicBool,
    /// Serializes `O_DIRECT` writes (unaligned ones are read-modify-write cycles of whole units).
    rmw: Mutex<()>,
}

impl FileBackend {
    /// Opens `path` (which must exist).
    pub fn open(path: impl AsRef<Path>, opts: FileOptions) -> Result<Self, FileError> {
        let path = path.as_ref();
        let before = std::fs::metadata(path).map_err(|source| FileError::Open { path: path.into(), source })?;
        let mut flags = claim::open_flags(path, &before, opts.claim)?;
        if opts.direct {
            flags |= rustix::fs::OFlags::DIRECT.bits() as i32;
        }
        let mut oo = OpenOptions::new();
        oo.read(true).write(!opts.read_only).custom_flags(flags);
        let file = oo.open(path).map_err(|source| match source.raw_os_error() {
            Some(e) if e == Errno::INVAL.raw_os_error() && opts.direct => {
                FileError::DirectUnsupported { path: path.into(), source }
            }
            Some(e) if e == Errno::BUSY.raw_os_error() && flags != 0 => claim::busy(path, &before).into(),
            _ => FileError::Open { path: path.into(), source },
        })?;
        claim::lock(&file, path, opts.claim)?;
        let meta = file.metadata().map_err(|source| FileError::Size { path: path.into(), source })?;
        let ft = meta.file_type();
        let regular = ft.is_file();
        let size = if regular {
            meta.len()
        } else if ft.is_block_device() {
            (&file).seek(io::SeekFrom::End(0)).map_err(|source| FileError::Size { path: path.into(), source })?
        } else {
            return Err(FileError::NotAFile { path: path.into() });
        };
        if opts.direct && size % DIRECT_ALIGN != 0 {
            return Err(FileError::DirectUnaligned { path: path.into(), size });
        }
        Ok(FileBackend {
            file,
            size,
            read_only: opts.read_only,
            direct: opts.direct,
            regular,
            punch: AtomicBool::new(true),
            rmw: Mutex::new(()),
        })
    }

    /// The open file, with its claim (it lasts as long as the file stays open).
    pub fn into_file(self) -> File {
        self.file
    }

    /// Whether the file was opened with `O_DIRECT`.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    fn check_writable(&self) -> io::Result<()> {
        if self.read_only {
            Err(io::Error::from_raw_os_error(Errno::PERM.raw_os_error()))
        } else {
            Ok(())
        }
    }

    /// Punches a hole; `Ok(false)` when the file system cannot (then nothing was done).
    fn punch_hole(&self, offset: u64, len: u64) -> io::Result<bool> {
        if len == 0 || !self.punch.load(Ordering::Relaxed) {
            return Ok(len == 0);
        }
        match rustix::fs::fallocate(&self.file, FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE, offset, len) {
            Ok(()) => Ok(true),
            Err(e) if e == Errno::OPNOTSUPP || e == Errno::NOSYS || e == Errno::INVAL => {
                self.punch.store(false, Ordering::Relaxed);
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn sync_if(&self, fua: bool) -> io::Result<()> {
        if fua {
            self.file.sync_data()
        } else {
            Ok(())
        }
    }

    /// Reads the aligned range `[start, start + buf.len())` into an aligned `buf`, zero-filling past EOF.
    fn direct_read_aligned(&self, buf: &mut [u8], start: u64) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let n = self.file.read_at(&mut buf[done..], start + done as u64)?;
            if n == 0 {
                buf[done..].fill(0);
                break;
            }
            done += n;
        }
        Ok(())
    }

    fn direct_read(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let (start, end) = align_out(offset, buf.len() as u64);
        let mut bounce = AlignedBuf::new((end - start) as usize);
        self.direct_read_aligned(bounce.as_mut(), start)?;
        let skip = (offset - start) as usize;
        buf.copy_from_slice(&bounce.as_mut()[skip..skip + buf.len()]);
        Ok(())
    }

    fn direct_write(&self, data: &[u8], offset: u64) -> io::Result<()> {
        let (start, end) = align_out(offset, data.len() as u64);
        let mut bounce = AlignedBuf::new((end - start) as usize);
        let skip = (offset - start) as usize;
        let aligned = skip == 0 && data.len() % DIRECT_ALIGN as usize == 0;
        // Every direct write takes the lock: an aligned write landing between another write's read and write
        // back of a shared unit would otherwise be undone by it.
        let _guard = self.rmw.lock().unwrap_or_else(|e| e.into_inner());
        let b = bounce.as_mut();
        if !aligned {
            // Read the partial head and tail units, then patch.
            let a = DIRECT_ALIGN as usize;
            self.direct_read_aligned(&mut b[..a], start)?;
            if b.len() > a {
                let l = b.len();
                self.direct_read_aligned(&mut b[l - a..], end - DIRECT_ALIGN)?;
            }
        }
        b[skip..skip + data.len()].copy_from_slice(data);
        self.file.write_all_at(b, start)
    }
}

/// `[offset, offset + len)` widened to [`DIRECT_ALIGN`] boundaries.
fn align_out(offset: u64, len: u64) -> (u64, u64) {
    let start = offset / DIRECT_ALIGN * DIRECT_ALIGN;
    let end = (offset + len).div_ceil(DIRECT_ALIGN) * DIRECT_ALIGN;
    (start, end)
}

/// A byte buffer whose start is aligned to [`DIRECT_ALIGN`]: a larger `Vec` and an aligned window into it.
struct AlignedBuf {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let a = DIRECT_ALIGN as usize;
        let buf = vec![0u8; len + a];
        let addr = buf.as_ptr() as usize;
        let start = (a - addr % a) % a;
        AlignedBuf { buf, start, len }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

impl Backend for FileBackend {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.direct {
            self.direct_read(buf, offset)
        } else {
            self.file.read_exact_at(buf, offset)
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> io::Result<()> {
        self.check_writable()?;
        if self.direct {
            self.direct_write(buf, offset)?;
        } else {
            self.file.write_all_at(buf, offset)?;
        }
        self.sync_if(fua)
    }

    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn trim(&self, offset: u64, len: u64, fua: bool) -> io::Result<()> {
        self.check_writable()?;
        self.punch_hole(offset, len)?;
        self.sync_if(fua)
    }

    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> io::Result<()> {
        self.check_writable()?;
        if !(may_trim && self.punch_hole(offset, len)?) {
            let zeroes = vec![0u8; ZERO_CHUNK.min(len as usize)];
            let mut pos = offset;
            let end = offset + len;
            while pos < end {
                let n = (end - pos).min(ZERO_CHUNK as u64) as usize;
                if self.direct {
                    self.direct_write(&zeroes[..n], pos)?;
                } else {
                    self.file.write_all_at(&zeroes[..n], pos)?;
                }
                pos += n as u64;
            }
        }
        self.sync_if(fua)
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn can_multi_conn(&self) -> bool {
        true
    }

    fn block_status(&self, offset: u64, len: u64) -> Option<io::Result<Vec<(u64, u32)>>> {
        if !self.regular {
            return None;
        }
        Some(self.extents(offset, len))
    }
}

impl FileBackend {
    /// Extents of `[offset, offset+len)` from SEEK_DATA/SEEK_HOLE: flags 0 = data, 3 = hole reading as zeroes.
    fn extents(&self, offset: u64, len: u64) -> io::Result<Vec<(u64, u32)>> {
        let end = (offset + len).min(self.size);
        let mut out: Vec<(u64, u32)> = Vec::new();
        let mut push = |l: u64, f: u32| match out.last_mut() {
            Some(last) if last.1 == f => last.0 += l,
            _ => out.push((l, f)),
        };
        let mut pos = offset;
        while pos < end {
            let data = match rustix::fs::seek(&self.file, SeekFrom::Data(pos)) {
                Ok(d) => d,
                Err(e) if e == Errno::NXIO => self.size,
                // The file system cannot tell: everything is data.
                Err(e) if e == Errno::INVAL || e == Errno::OPNOTSUPP => {
                    push(end - pos, 0);
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            if data > pos {
                let h = data.min(end);
                push(h - pos, 3);
                pos = h;
                continue;
            }
            let hole = match rustix::fs::seek(&self.file, SeekFrom::Hole(pos)) {
                Ok(h) => h,
                Err(e) if e == Errno::NXIO => self.size,
                Err(e) => return Err(e.into()),
            };
            let d = hole.clamp(pos + 1, end);
            push(d - pos, 0);
            pos = d;
        }
        Ok(out)
    }
}
