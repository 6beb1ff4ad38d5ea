//! The backend trait: what the NBD server serves and what each layer wraps.

use std::io;

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

    /// Writes are refused.
    /// Serves a read only if it can be done at once from memory, without I/O or waiting (a cache hit on every
    /// block): `true` when `buf` was filled and the read counted as served; `false` when nothing was done and the
    /// read must go through [`Backend::read_at`]. The NBD server answers such reads on the thread that read the
    /// request, without a hand-off. The default never takes the fast path.
    fn try_read_fast(&self, buf: &mut [u8], offset: u64) -> bool {
        let _ = (buf, offset);
        false
    }

    /// Like [`Backend::try_read_fast`], but instead of copying, appends to `out` shared references to the
    /// backend's own memory holding the range, in order (so a server can hand them to `writev` and save a
    /// copy). `true` when served; `false` (and `out` unchanged) when not possible. The default never is.
    fn try_read_shared(&self, offset: u64, len: u64, out: &mut Vec<SharedBytes>) -> bool {
        let _ = (offset, len, out);
        false
    }

    /// Hint that these reads (offset, length) are about to be offered to [`Backend::try_read_fast`], in this
    /// order: a backend may look up their metadata now, all together, so that the memory misses of independent
    /// lookups overlap instead of being paid one request at a time. A no-op is correct.
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

/// Part of a shared, immutable buffer: `buf[start..end]` (see [`Backend::try_read_shared`]).
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

    fn try_read_fast(&self, buf: &mut [u8], offset: u64) -> bool {
        self.read_at(buf, offset).is_ok()
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
            fn try_read_fast(&$this, buf: &mut [u8], offset: u64) -> bool {
                $inner.try_read_fast(buf, offset)
            }
            fn try_read_shared(&$this, offset: u64, len: u64, out: &mut Vec<$crate::backend::SharedBytes>) -> bool {
                $inner.try_read_shared(offset, len, out)
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
