//! [`DelayBackend`]: a slow-disk emulation layer (nbdkit's `delay` filter, with a bandwidth term).
//!
//! Each request sleeps for the time a [`ServiceTime`] model gives, then goes to the wrapped backend. With
//! [`DelayConfig::serialize`] set, requests pass one at a time through a single "head" mutex, as on a
//! single-spindle disk, so that concurrency does not make the emulated device faster than the device. The model
//! is a trait: [`LinearServiceTime`] is `latency + len / bandwidth`; [`DiskServiceTime`] runs one of
//! `blockwell-disk`'s device models (seek, rotation, zones, on-disk buffer: the same models the time-aware
//! simulator uses) on the wall clock.

use crate::backend::Backend;
use serde::Serialize;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use blockwell_disk::{DiskModel, DiskOp, DiskRequest, SECTOR};

/// Kind of request, as a service-time model sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
}

/// How long the device takes to serve one request.
pub trait ServiceTime: Send + Sync {
    fn service_time(&self, kind: IoKind, offset: u64, len: u64) -> Duration;
}

/// `latency + len / bandwidth` for reads, writes and WRITE_ZEROES; `latency` alone for FLUSH and TRIM.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearServiceTime {
    pub latency: Duration,
    /// Bytes per second; 0 means infinite.
    pub bandwidth: u64,
}

impl LinearServiceTime {
    /// 8 ms per request and 100 MB/s: a hard disk doing random I/O.
    pub const HDD: LinearServiceTime = LinearServiceTime { latency: Duration::from_millis(8), bandwidth: 100_000_000 };
    /// 100 µs per request and 500 MB/s: a SATA SSD.
    pub const SSD: LinearServiceTime =
        LinearServiceTime { latency: Duration::from_micros(100), bandwidth: 500_000_000 };

    /// A named preset: `hdd` or `ssd`.
    pub fn preset(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "hdd" => Some(Self::HDD),
            "ssd" => Some(Self::SSD),
            _ => None,
        }
    }
}

impl ServiceTime for LinearServiceTime {
    fn service_time(&self, kind: IoKind, _offset: u64, len: u64) -> Duration {
        let transfer = match kind {
            IoKind::Read | IoKind::Write | IoKind::WriteZeroes if self.bandwidth > 0 => {
                Duration::from_nanos((len as u128 * 1_000_000_000 / self.bandwidth as u128) as u64)
            }
            _ => Duration::ZERO,
        };
        self.latency + transfer
    }
}

/// A `blockwell-disk` device model on the wall clock: a request's service time is what the model says for it
/// starting now (time since the emulator was built), so head position, rotation and the on-disk buffer carry
/// from one request to the next. FLUSH and TRIM take no time (the models have no write-back cache state to
/// drain by default). Use it with [`DelayConfig::serialize`] (a disk serves one request at a time), which
/// [`DelayConfig::disk`] sets.
pub struct DiskServiceTime {
    model: Mutex<Box<dyn DiskModel>>,
    start: Instant,
}

impl DiskServiceTime {
    pub fn new(model: Box<dyn DiskModel>) -> Self {
        DiskServiceTime { model: Mutex::new(model), start: Instant::now() }
    }
}

impl ServiceTime for DiskServiceTime {
    fn service_time(&self, kind: IoKind, offset: u64, len: u64) -> Duration {
        let op = match kind {
            IoKind::Read => DiskOp::Read,
            IoKind::Write | IoKind::WriteZeroes => DiskOp::Write,
            IoKind::Flush | IoKind::Trim => return Duration::ZERO,
        };
        let sector = offset / SECTOR;
        let sectors = ((offset % SECTOR + len).div_ceil(SECTOR)).max(1);
        let now = self.start.elapsed().as_nanos() as u64;
        let mut m = self.model.lock().unwrap_or_else(|e| e.into_inner());
        Duration::from_nanos(m.service(now, &DiskRequest { op, sector, sectors }))
    }
}

/// Requests and bytes that went through a [`DelayBackend`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DelayStats {
    pub reads: u64,
    pub writes: u64,
    pub other: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Total time slept, in nanoseconds.
    pub delay_ns: u64,
}

/// How a [`DelayBackend`] behaves.
pub struct DelayConfig {
    pub model: Box<dyn ServiceTime>,
    /// Serve one request at a time (a single head).
    pub serialize: bool,
}

impl DelayConfig {
    /// A preset name (`hdd`, `ssd`) with a serialized head.
    pub fn preset(name: &str) -> Option<Self> {
        LinearServiceTime::preset(name).map(|m| DelayConfig { model: Box::new(m), serialize: true })
    }

    /// A `blockwell-disk` model (`wd1200bb`, `cheetah9lp`, `sata-ssd`, `barracuda(write_cache=0)`, ...; see
    /// `blockwell disk list`) with a serialized head.
    pub fn disk(spec: &str) -> Result<Self, blockwell_disk::spec::SpecError> {
        let model = blockwell_disk::spec::DiskSpec::model(spec)?;
        Ok(DelayConfig { model: Box::new(DiskServiceTime::new(model)), serialize: true })
    }

    /// `hdd`/`ssd` (the linear presets) or any `blockwell-disk` model spec.
    pub fn parse(spec: &str) -> Result<Self, blockwell_disk::spec::SpecError> {
        match Self::preset(spec) {
            Some(c) => Ok(c),
            None => Self::disk(spec),
        }
    }
}

/// A backend that is slower than the one it wraps.
pub struct DelayBackend<B> {
    inner: B,
    model: Box<dyn ServiceTime>,
    head: Option<Mutex<()>>,
    reads: AtomicU64,
    writes: AtomicU64,
    other: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    delay_ns: AtomicU64,
}

impl<B: Backend> DelayBackend<B> {
    pub fn new(inner: B, config: DelayConfig) -> Self {
        DelayBackend {
            inner,
            model: config.model,
            head: config.serialize.then(|| Mutex::new(())),
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            other: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            bytes_written: AtomicU64::new(0),
            delay_ns: AtomicU64::new(0),
        }
    }

    pub fn inner(&self) -> &B {
        &self.inner
    }

    pub fn stats(&self) -> DelayStats {
        DelayStats {
            reads: self.reads.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
            bytes_read: self.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.bytes_written.load(Ordering::Relaxed),
            delay_ns: self.delay_ns.load(Ordering::Relaxed),
        }
    }

    /// Sleeps for the request's service time (holding the head if serialized), then runs `f`.
    fn serve<T>(&self, kind: IoKind, offset: u64, len: u64, f: impl FnOnce() -> T) -> T {
        let (count, bytes) = match kind {
            IoKind::Read => (&self.reads, Some(&self.bytes_read)),
            IoKind::Write | IoKind::WriteZeroes => (&self.writes, Some(&self.bytes_written)),
            IoKind::Flush | IoKind::Trim => (&self.other, None),
        };
        count.fetch_add(1, Ordering::Relaxed);
        if let Some(b) = bytes {
            b.fetch_add(len, Ordering::Relaxed);
        }
        // The head first: a stateful model must see requests in the order the device serves them.
        let _head = self.head.as_ref().map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
        let t = self.model.service_time(kind, offset, len);
        self.delay_ns.fetch_add(t.as_nanos() as u64, Ordering::Relaxed);
        std::thread::sleep(t);
        f()
    }
}

impl<B: Backend> Backend for DelayBackend<B> {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let len = buf.len() as u64;
        self.serve(IoKind::Read, offset, len, || self.inner.read_at(buf, offset))
    }

    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> io::Result<()> {
        self.serve(IoKind::Write, offset, buf.len() as u64, || self.inner.write_at(buf, offset, fua))
    }

    fn flush(&self) -> io::Result<()> {
        self.serve(IoKind::Flush, 0, 0, || self.inner.flush())
    }

    fn trim(&self, offset: u64, len: u64, fua: bool) -> io::Result<()> {
        self.serve(IoKind::Trim, offset, len, || self.inner.trim(offset, len, fua))
    }

    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> io::Result<()> {
        self.serve(IoKind::WriteZeroes, offset, len, || self.inner.write_zeroes(offset, len, may_trim, fua))
    }

    fn cache(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.cache(offset, len)
    }

    fn is_read_only(&self) -> bool {
        self.inner.is_read_only()
    }

    fn can_multi_conn(&self) -> bool {
        self.inner.can_multi_conn()
    }

    fn block_status(&self, offset: u64, len: u64) -> Option<io::Result<Vec<(u64, u32)>>> {
        self.inner.block_status(offset, len)
    }
}
