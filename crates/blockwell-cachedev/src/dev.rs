//! [`Dev`]: positional I/O on the cache device, and its two implementations: a file or block device
//! ([`FileDev`]) and memory ([`MemDev`], for tests).

use std::fs::{File, OpenOptions};
use std::io::{self, Seek};
use std::os::unix::fs::{FileExt, FileTypeExt};
use std::path::Path;
use std::sync::RwLock;

/// A cache device as the metadata code sees it. Writes may sit in a volatile cache until [`Dev::sync`].
pub trait Dev: Send + Sync {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` from `offset` (the range lies within the device).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes `buf` at `offset` (the range lies within the device).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every completed write durable.
    fn sync(&self) -> io::Result<()>;
}

/// A regular file or a block device, with `pread`/`pwrite` and `fdatasync`.
pub struct FileDev {
    file: File,
    size: u64,
}

impl FileDev {
    /// Opens an existing file or block device for reading and writing (`read_only`: reading only).
    pub fn open(path: &Path, read_only: bool) -> io::Result<FileDev> {
        let file = OpenOptions::new().read(true).write(!read_only).open(path)?;
        Self::from_file(file)
    }

    /// Wraps an open file or block device.
    pub fn from_file(mut file: File) -> io::Result<FileDev> {
        let meta = file.metadata()?;
        let size = if meta.file_type().is_block_device() { file.seek(io::SeekFrom::End(0))? } else { meta.len() };
        Ok(FileDev { file, size })
    }

    pub fn file(&self) -> &File {
        &self.file
    }
}

impl Dev for FileDev {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// A device in memory; [`Dev::sync`] does nothing (tests).
pub struct MemDev {
    data: RwLock<Vec<u8>>,
}

impl MemDev {
    pub fn new(size: usize) -> MemDev {
        MemDev { data: RwLock::new(vec![0; size]) }
    }

    /// A device holding `bytes`.
    pub fn from_bytes(bytes: Vec<u8>) -> MemDev {
        MemDev { data: RwLock::new(bytes) }
    }

    /// A copy of the contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.data.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Changes bytes in place (tests that corrupt a device).
    pub fn poke(&self, offset: usize, bytes: &[u8]) {
        self.data.write().unwrap_or_else(|e| e.into_inner())[offset..offset + bytes.len()].copy_from_slice(bytes);
    }
}

impl Dev for MemDev {
    fn size(&self) -> u64 {
        self.data.read().unwrap_or_else(|e| e.into_inner()).len() as u64
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let d = self.data.read().unwrap_or_else(|e| e.into_inner());
        let o = offset as usize;
        let src = d.get(o..o + buf.len()).ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut d = self.data.write().unwrap_or_else(|e| e.into_inner());
        let o = offset as usize;
        let dst = d.get_mut(o..o + buf.len()).ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        dst.copy_from_slice(buf);
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

impl<D: Dev + ?Sized> Dev for &D {
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        (**self).sync()
    }
}

impl<D: Dev + ?Sized> Dev for std::sync::Arc<D> {
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        (**self).sync()
    }
}
