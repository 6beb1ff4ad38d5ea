//! The backend trait: what the NBD server serves and what each layer wraps.

use std::cell::Cell;
use std::io;
use std::time::Instant;

thread_local! {
    static ARRIVAL: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Records that the request the calling thread is about to serve reached the server at `at` (the NBD
/// connection calls this with the time it read the request off the socket, in the client's order).
pub fn set_arrival(at: Instant) {
    ARRIVAL.with(|a| a.set(Some(at)));
}

/// When the request this thread serves reached the server, once: the first device access of the request takes
/// it, so that a slow-device emulator queues the request in the client's order and not in the order the worker
/// threads happen to reach it; later accesses of the same request, and threads serving no client request (a
/// cleaner), get `None` (they arrive when they are made).
pub fn take_arrival() -> Option<Instant> {
    ARRIVAL.with(|a| a.take())
}

/// A block device or anything that acts like one. Methods take `&self` so that many requests can be in
/// flight at once; implementations synchronize internally.
///
/// Offsets and lengths are in bytes and already checked by the caller to lie within `size()`.
pub trait Backend: Send + Sync {
    /// Size in bytes.
    fn size(&self) -> u64;

    /// Fills `buf` from `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;

    /// Writes `buf` at `offset`. When `fua` is set, the data must be on stable storage before this returns.
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> io::Result<()>;

    /// Makes every completed write durable (NBD_CMD_FLUSH: fdatasync on a file).
    fn flush(&self) -> io::Result<()>;

    /// Discards a range (NBD_CMD_TRIM); reading it afterwards may return anything. A no-op is correct.
    fn trim(&self, offset: u64, len: u64, fua: bool) -> io::Result<()>;

    /// Writes zeroes over a range (NBD_CMD_WRITE_ZEROES). `may_trim`: the range may be deallocated instead
    /// (NBD_CMD_FLAG_NO_HOLE clear), as long as it then reads as zeroes.
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> io::Result<()>;

    /// Hint that a range will be read soon (NBD_CMD_CACHE): a cache may prefetch it. A no-op is correct.
    fn cache(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Ok(())
    }

    /// The one read call of a server: serves the read at once from memory when every byte is there (a cache
    /// hit on every block), into `into`; otherwise, with [`OnMiss::Fetch`] and [`ReadInto::Copy`], performs the
    /// read with its I/O (a cache plans it under the same lock acquisition that found the miss); with
    /// [`OnMiss::Decline`], or a [`ReadInto::Share`] it cannot make, does nothing (`out` unchanged) and answers
    /// [`ReadOutcome::NeedsIo`]. The NBD server offers small reads with `Decline` on the thread that read the
    /// request (answered inline, no hand-off) and hands the others to a worker with `Fetch`. The default serves
    /// a `Copy` through [`Backend::read_at`] when asked to fetch, and declines everything else.
    fn read(&self, offset: u64, into: ReadInto<'_>, on_miss: OnMiss) -> io::Result<ReadOutcome> {
        match (into, on_miss) {
            (ReadInto::Copy(buf), OnMiss::Fetch) => self.read_at(buf, offset).map(|()| ReadOutcome::Served),
            _ => Ok(ReadOutcome::NeedsIo),
        }
    }

    /// Hint that these reads (offset, length) are about to be offered to [`Backend::read`], in this order: a
    /// backend may look up their metadata now, all together, so that the memory misses of independent lookups
    /// overlap instead of being paid one request at a time. A no-op is correct.
    fn hint_reads(&self, reads: &[(u64, u32)]) {
        let _ = reads;
    }

    fn is_read_only(&self) -> bool {
        false
    }

    /// Whether several connections to this backend see each other's completed writes and a FLUSH on one
    /// connection covers writes completed on all (NBD_FLAG_CAN_MULTI_CONN). True only if that holds.
    fn can_multi_conn(&self) -> bool {
        false
    }

    /// Allocation status of a range, for NBD_CMD_BLOCK_STATUS (`base:allocation`), where the backend knows
    /// holes: extents (length, flags) covering the start of the range, `flags` bit 0 = hole, bit 1 = reads
    /// as zeroes. `None`: the backend does not know (the server then does not offer the context).
    fn block_status(&self, offset: u64, len: u64) -> Option<io::Result<Vec<(u64, u32)>>> {
        let _ = (offset, len);
        None
    }
}

/// Where a read's data goes ([`Backend::read`]).
pub enum ReadInto<'a> {
    /// Copied into this buffer; the read is `buf.len()` bytes.
    Copy(&'a mut [u8]),
    /// Shared references to the backend's memory holding `len` bytes, appended to `out` in order (for `writev`,
    /// saving a copy).
    Share { len: u64, out: &'a mut Vec<SharedBytes> },
}

impl ReadInto<'_> {
    /// Bytes read.
    pub fn len(&self) -> u64 {
        match self {
            ReadInto::Copy(b) => b.len() as u64,
            ReadInto::Share { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What [`Backend::read`] does when the data is not all in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnMiss {
    /// Read it (I/O, waiting).
    Fetch,
    /// Do nothing; answer [`ReadOutcome::NeedsIo`].
    Decline,
}

/// What [`Backend::read`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The read was served and counted.
    Served,
    /// Nothing was done: the read needs I/O (call again with [`OnMiss::Fetch`]).
    NeedsIo,
}

/// Part of a shared, immutable buffer: `buf[start..end]` (see [`ReadInto::Share`]).
#[derive(Clone, Debug)]
pub struct SharedBytes {
    pub buf: std::sync::Arc<[u8]>,
    pub start: usize,
    pub end: usize,
}

impl SharedBytes {
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
}

/// A backend in memory (tests, `nbdkit memory`-like exports).
pub struct MemBackend {
    data: std::sync::RwLock<Vec<u8>>,
    read_only: bool,
}

impl MemBackend {
    pub fn new(size: usize) -> Self {
        MemBackend { data: std::sync::RwLock::new(vec![0; size]), read_only: false }
    }

    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// A copy of the contents (tests).
    pub fn snapshot(&self) -> Vec<u8> {
        self.data.read().expect("lock").clone()
    }
}

impl Backend for MemBackend {
    fn size(&self) -> u64 {
        self.data.read().expect("lock").len() as u64
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let d = self.data.read().expect("lock");
        let o = offset as usize;
        buf.copy_from_slice(&d[o..o + buf.len()]);
        Ok(())
    }

    /// Memory: every read is served at once.
    fn read(&self, offset: u64, into: ReadInto<'_>, _on_miss: OnMiss) -> io::Result<ReadOutcome> {
        match into {
            ReadInto::Copy(buf) => self.read_at(buf, offset).map(|()| ReadOutcome::Served),
            ReadInto::Share { .. } => Ok(ReadOutcome::NeedsIo),
        }
    }

    fn write_at(&self, buf: &[u8], offset: u64, _fua: bool) -> io::Result<()> {
        let mut d = self.data.write().expect("lock");
        let o = offset as usize;
        d[o..o + buf.len()].copy_from_slice(buf);
        Ok(())
    }

    fn flush(&self) -> io::Result<()> {
        Ok(())
    }

    fn trim(&self, _offset: u64, _len: u64, _fua: bool) -> io::Result<()> {
        Ok(())
    }

    fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool, _fua: bool) -> io::Result<()> {
        let mut d = self.data.write().expect("lock");
        d[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }

    fn can_multi_conn(&self) -> bool {
        true
    }
}

/// Forwards every method, so layers can be stacked at run time (`Box<dyn Backend>`, `Arc<dyn Backend>`).
/// Implements [`Backend`] for `$ty` by forwarding every method to `$inner` (an expression over `$this`, the
/// `self` of the methods): smart pointers, and wrappers that keep their layer behind a field.
macro_rules! forward_backend {
    ([$($g:tt)*] $ty:ty, $this:ident => $inner:expr) => {
        impl<$($g)*> Backend for $ty {
            fn size(&$this) -> u64 {
                $inner.size()
            }
            fn read_at(&$this, buf: &mut [u8], offset: u64) -> io::Result<()> {
                $inner.read_at(buf, offset)
            }
            fn write_at(&$this, buf: &[u8], offset: u64, fua: bool) -> io::Result<()> {
                $inner.write_at(buf, offset, fua)
            }
            fn flush(&$this) -> io::Result<()> {
                $inner.flush()
            }
            fn trim(&$this, offset: u64, len: u64, fua: bool) -> io::Result<()> {
                $inner.trim(offset, len, fua)
            }
            fn write_zeroes(&$this, offset: u64, len: u64, may_trim: bool, fua: bool) -> io::Result<()> {
                $inner.write_zeroes(offset, len, may_trim, fua)
            }
            fn cache(&$this, offset: u64, len: u64) -> io::Result<()> {
                $inner.cache(offset, len)
            }
            fn read(
                &$this,
                offset: u64,
                into: $crate::backend::ReadInto<'_>,
                on_miss: $crate::backend::OnMiss,
            ) -> io::Result<$crate::backend::ReadOutcome> {
                $inner.read(offset, into, on_miss)
            }
            fn hint_reads(&$this, reads: &[(u64, u32)]) {
                $inner.hint_reads(reads)
            }
            fn is_read_only(&$this) -> bool {
                $inner.is_read_only()
            }
            fn can_multi_conn(&$this) -> bool {
                $inner.can_multi_conn()
            }
            fn block_status(&$this, offset: u64, len: u64) -> Option<io::Result<Vec<(u64, u32)>>> {
                $inner.block_status(offset, len)
            }
        }
    };
}
pub(crate) use forward_backend;

use std::sync::Arc;
forward_backend!([T: Backend + ?Sized] Box<T>, self => (**self));
forward_backend!([T: Backend + ?Sized] Arc<T>, self => (**self));

/// Striped write locks: writes (and TRIM, WRITE_ZEROES) to overlapping blocks hold the same stripes, so a cache
/// layer and its backend see them in the same order. Used by [`crate::cache`] and [`crate::content`].
pub(crate) struct WriteStripes(Vec<std::sync::Mutex<()>>);

impl WriteStripes {
    /// Number of stripes.
    const N: usize = 64;

    pub(crate) fn new() -> Self {
        WriteStripes((0..Self::N).map(|_| std::sync::Mutex::new(())).collect())
    }

    /// Locks the stripes of blocks `first..first+n`, in stripe order (no deadlock between overlapping ranges).
    pub(crate) fn lock(&self, first: u64, n: u64) -> Vec<std::sync::MutexGuard<'_, ()>> {
        let mut idx: Vec<usize> = if n >= Self::N as u64 {
            (0..Self::N).collect()
        } else {
            (first..first + n).map(|b| (b % Self::N as u64) as usize).collect()
        };
        idx.sort_unstable();
        idx.dedup();
        idx.into_iter().map(|i| self.0[i].lock().unwrap_or_else(|e| e.into_inner())).collect()
    }

    /// A TRIM or WRITE_ZEROES through a cache layer: refused on a read-only layer; otherwise `op` runs on the
    /// backend while the stripes of the blocks it touches are held, and `invalidate(first, n)` then drops the
    /// layer's copies of those blocks whatever `op` returned (after a failed discard the backend's bytes are
    /// unknown).
    pub(crate) fn discard(
        &self,
        read_only: bool,
        block_size: u64,
        (offset, len): (u64, u64),
        op: impl FnOnce() -> std::io::Result<()>,
        invalidate: impl FnOnce(u64, u64),
    ) -> std::io::Result<()> {
        refuse_writes(read_only)?;
        let (first, n) = blockwell_core::key::block_span(offset, len, block_size);
        let _stripes = self.lock(first, n);
        let r = op();
        invalidate(first, n);
        r
    }
}

/// `Err(EPERM)` for a write to a read-only layer.
pub(crate) fn refuse_writes(read_only: bool) -> std::io::Result<()> {
    if read_only {
        Err(std::io::Error::from_raw_os_error(1)) // EPERM
    } else {
        Ok(())
    }
}
