//! Shared pieces of the tier tests: an origin backend on a logged device, and building a tier over two such
//! devices.

#![allow(dead_code)]

use blockwell_cachedev::crash::{Clock, CrashDev};
use blockwell_cachedev::{CacheMode, Dev, FormatOptions, Metadata, OriginId};
use blockwell_core::cleaner::CleanerSpec;
use blockwell_server::backend::Backend;
use blockwell_server::tier::{TierBackend, TierConfig};
use std::io;
use std::sync::Arc;
use std::time::Duration;

pub const BS: u64 = 4096;
pub const ORIGIN_ID: OriginId = OriginId { size: 0, uuid: [0x42; 16] };

/// An origin on a logged device: FLUSH and FUA are syncs; TRIM discards nothing (reads keep the old bytes,
/// which TRIM allows).
pub struct DevOrigin(pub Arc<CrashDev>);

impl Backend for DevOrigin {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> io::Result<()> {
        self.0.write_at(buf, offset)?;
        if fua {
            self.0.sync()?;
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.0.sync()
    }
    fn trim(&self, _offset: u64, _len: u64, fua: bool) -> io::Result<()> {
        if fua {
            self.0.sync()?;
        }
        Ok(())
    }
    fn write_zeroes(&self, offset: u64, len: u64, _may_trim: bool, fua: bool) -> io::Result<()> {
        self.write_at(&vec![0u8; len as usize], offset, fua)
    }
    fn can_multi_conn(&self) -> bool {
        true
    }
}

pub fn origin_id(size: u64) -> OriginId {
    OriginId { size, ..ORIGIN_ID }
}

/// Formats `dev` as a cache for an origin of `origin_size` bytes.
pub fn format(dev: &dyn Dev, origin_size: u64, mode: CacheMode) {
    Metadata::format(
        dev,
        &FormatOptions {
            block_size: BS,
            origin: origin_id(origin_size),
            origin_path: "/test/origin".into(),
            mode,
            journal_blocks: None,
            force: true,
        },
    )
    .unwrap();
}

pub fn config(origin_size: u64, mode: CacheMode) -> TierConfig {
    let mut c = TierConfig::new(origin_id(origin_size), "/test/origin".into());
    c.mode = mode;
    c.cleaner = CleanerSpec::None;
    c.sequential_cutoff = 0;
    // The background threads stay out of the way; tests drive commits and cleaning.
    c.commit_interval = Duration::from_secs(3600);
    c.clean_interval = Duration::from_secs(3600);
    c
}

/// A fresh pair of logged devices on one clock, the cache formatted.
pub fn devices(cache_bytes: usize, origin_bytes: usize, mode: CacheMode) -> (Clock, Arc<CrashDev>, Arc<CrashDev>) {
    let clock = Clock::new();
    let cache = Arc::new(CrashDev::new(cache_bytes, clock.clone()));
    let origin = Arc::new(CrashDev::new(origin_bytes, clock.clone()));
    format(&*cache, origin_bytes as u64, mode);
    (clock, cache, origin)
}

pub fn open(cache: Arc<dyn Dev>, origin: Arc<CrashDev>, cfg: TierConfig) -> TierBackend<DevOrigin> {
    TierBackend::open(DevOrigin(origin), cache, cfg).unwrap()
}

/// A buffer whose every 512-byte sector names the write (`id`) and the sector's absolute number.
pub fn pattern(id: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    for (i, sec) in b.chunks_mut(512).enumerate() {
        let n = offset / 512 + i as u64;
        for w in sec.chunks_mut(16) {
            w[..8].copy_from_slice(&id.to_le_bytes());
            w[8..16].copy_from_slice(&n.to_le_bytes());
        }
    }
    b
}

/// Which write a sector holds: `Some(0)` for zeroes, `Some(id)` for a pattern of `sector`, `None` for
/// anything else (garbage).
pub fn sector_id(sector: &[u8], n: u64) -> Option<u64> {
    if sector.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let id = u64::from_le_bytes(sector[..8].try_into().unwrap());
    let ok = sector.chunks(16).all(|w| {
        u64::from_le_bytes(w[..8].try_into().unwrap()) == id && u64::from_le_bytes(w[8..16].try_into().unwrap()) == n
    });
    ok.then_some(id)
}

pub use blockwell_testkit::Rng;

/// A device whose reads and writes can be made to fail (EIO), for the fault tests.
pub struct FaultDev {
    pub inner: Arc<dyn Dev>,
    pub fail_reads: std::sync::atomic::AtomicBool,
    pub fail_writes: std::sync::atomic::AtomicBool,
}

impl FaultDev {
    pub fn new(inner: Arc<dyn Dev>) -> Arc<FaultDev> {
        Arc::new(FaultDev { inner, fail_reads: false.into(), fail_writes: false.into() })
    }

    fn check(flag: &std::sync::atomic::AtomicBool) -> io::Result<()> {
        if flag.load(std::sync::atomic::Ordering::SeqCst) {
            Err(io::Error::from_raw_os_error(5))
        } else {
            Ok(())
        }
    }
}

impl Dev for FaultDev {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        Self::check(&self.fail_reads)?;
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        Self::check(&self.fail_writes)?;
        self.inner.write_at(buf, offset)
    }
    fn sync(&self) -> io::Result<()> {
        Self::check(&self.fail_writes)?;
        self.inner.sync()
    }
}

/// An origin whose writes (and flushes) can be made to fail.
pub struct FaultOrigin {
    pub inner: DevOrigin,
    pub fail_writes: std::sync::atomic::AtomicBool,
}

impl Backend for FaultOrigin {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> io::Result<()> {
        FaultDev::check(&self.fail_writes)?;
        self.inner.write_at(buf, offset, fua)
    }
    fn flush(&self) -> io::Result<()> {
        FaultDev::check(&self.fail_writes)?;
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u64, fua: bool) -> io::Result<()> {
        self.inner.trim(offset, len, fua)
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> io::Result<()> {
        FaultDev::check(&self.fail_writes)?;
        self.inner.write_zeroes(offset, len, may_trim, fua)
    }
}
