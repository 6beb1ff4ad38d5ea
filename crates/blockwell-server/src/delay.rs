//! [`DelayBackend`]: a slow-disk emulation layer (nbdkit's `delay` filter, with a bandwidth term).
//!
//! Each request waits for the time a [`ServiceTime`] model gives, then goes to the wrapped backend. The model
//! is a trait: [`LinearServiceTime`] is `latency + len / bandwidth`, slept by each request; with
//! [`DelayConfig::serialize`] set, requests pass one at a time through a single "head" mutex, as on a
//! single-spindle disk, so that concurrency does not make the emulated device faster than the device.
//!
//! [`DiskServiceTime`] runs one of `blockwell-disk`'s device models (seek, rotation, zones, on-disk buffer,
//! command queueing, SSD channels: the same models the time-aware simulator uses) on its own timeline, in
//! nanoseconds since the emulator started, through a [`blockwell_disk::DeviceQueue`]: a disk serves one request
//! at a time, in arrival order or, with command queueing (`ncq`), as the disk picks among the requests waiting
//! when it becomes free; an SSD takes each request at its arrival on its channels. Each request's start and
//! completion are fixed on the timeline and its thread sleeps until the completion. A request arrives when the
//! NBD server read it off the socket, so the order the worker threads happen to reach the emulator in does not
//! reorder a client's stream (a disk's read-ahead and a sequential write run depend on that order). Because a
//! completion is fixed on the timeline, a late wake-up of a sleeping thread delays that reply but not the
//! device: the emulated device keeps the model's throughput whenever enough requests are in flight.

use crate::backend::Backend;
use serde::Serialize;
use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread::Thread;
use std::time::{Duration, Instant};

use blockwell_disk::{DeviceQueue, DiskModel, DiskOp, DiskRequest, SECTOR};

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
    /// The service time of one request on an idle device, starting now.
    fn service_time(&self, kind: IoKind, offset: u64, len: u64) -> Duration;

    /// Blocks the calling thread until the device has served the request; returns the time that took
    /// (queueing included). The default sleeps [`Self::service_time`]: a [`DelayBackend`] that serializes holds
    /// its head around it.
    fn wait(&self, kind: IoKind, offset: u64, len: u64) -> Duration {
        let t = self.service_time(kind, offset, len);
        std::thread::sleep(t);
        t
    }

    /// Whether [`Self::wait`] orders concurrent requests itself (a [`DelayBackend`] then takes no head lock).
    fn schedules(&self) -> bool {
        false
    }
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

/// A `blockwell-disk` device model on its own timeline (nanoseconds since the emulator was built): head
/// position, rotation, the on-disk buffer and the SSD's busy channels carry from one request to the next. FLUSH
/// and TRIM take no time (the models have no write-back cache state to drain by default).
///
/// [`ServiceTime::wait`] (what a [`DelayBackend`] uses) submits each request to a [`DeviceQueue`], which fixes
/// its start and completion on the timeline (a disk: one at a time, in arrival order or as its command queue
/// picks; an SSD: at its arrival, on its channels), and sleeps until that completion. A request's arrival is
/// when the server read it off the socket ([`crate::backend::take_arrival`]), or when it reaches the emulator
/// for accesses of no client request. [`ServiceTime::service_time`] serves one request starting now, or when
/// the device is free (for callers that keep their own order).
pub struct DiskServiceTime {
    dev: Mutex<Device>,
    start: Instant,
}

/// The queue and the threads waiting for their requests to start.
struct Device {
    queue: DeviceQueue,
    /// Completion times of started requests whose threads have not collected them yet.
    done: HashMap<u64, u64>,
    /// The threads of the waiting requests.
    threads: HashMap<u64, Thread>,
    next_id: u64,
}

impl Device {
    /// Starts what the device starts by `now` and wakes those requests' threads.
    fn dispatch(&mut self, now: u64) {
        let Device { queue, done, threads, .. } = self;
        queue.dispatch(now, |id, completion| {
            done.insert(id, completion);
            if let Some(t) = threads.remove(&id) {
                t.unpark();
            }
        });
    }
}

impl DiskServiceTime {
    pub fn new(model: Box<dyn DiskModel>) -> Self {
        let dev = Device { queue: DeviceQueue::new(model), done: HashMap::new(), threads: HashMap::new(), next_id: 0 };
        DiskServiceTime { dev: Mutex::new(dev), start: Instant::now() }
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Device> {
        self.dev.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn request(kind: IoKind, offset: u64, len: u64) -> Option<DiskRequest> {
        let op = match kind {
            IoKind::Read => DiskOp::Read,
            IoKind::Write | IoKind::WriteZeroes => DiskOp::Write,
            IoKind::Flush | IoKind::Trim => return None,
        };
        let sector = offset / SECTOR;
        let sectors = ((offset % SECTOR + len).div_ceil(SECTOR)).max(1);
        Some(DiskRequest { op, sector, sectors })
    }

    /// Sleeps until `deadline` on the timeline.
    fn sleep_until(&self, deadline: u64) {
        let now = self.now();
        if deadline > now {
            std::thread::sleep(Duration::from_nanos(deadline - now));
        }
    }
}

impl ServiceTime for DiskServiceTime {
    fn service_time(&self, kind: IoKind, offset: u64, len: u64) -> Duration {
        let Some(req) = Self::request(kind, offset, len) else { return Duration::ZERO };
        let now = self.now();
        Duration::from_nanos(self.lock().queue.serve_now(now, &req))
    }

    fn wait(&self, kind: IoKind, offset: u64, len: u64) -> Duration {
        let stamp = crate::backend::take_arrival();
        let Some(req) = Self::request(kind, offset, len) else { return Duration::ZERO };
        let stamp = stamp.map(|a| a.saturating_duration_since(self.start).as_nanos() as u64);
        let mut d = self.lock();
        let now = self.now();
        let arrival = stamp.map_or(now, |a| a.min(now));
        let id = d.next_id;
        d.next_id += 1;
        let deadline = match d.queue.submit(id, req, arrival) {
            Some(completion) => completion,
            None => {
                d.threads.insert(id, std::thread::current());
                d.dispatch(now);
                loop {
                    if let Some(done) = d.done.remove(&id) {
                        break done;
                    }
                    drop(d);
                    std::thread::park();
                    d = self.lock();
                }
            }
        };
        let queued = !d.queue.overlapping();
        drop(d);
        self.sleep_until(deadline);
        if queued {
            // The device is free now (on its timeline) unless it has started another request since: start the
            // next one.
            let mut d = self.lock();
            if d.queue.waiting() > 0 {
                let now = self.now();
                d.dispatch(now);
            }
        }
        Duration::from_nanos(deadline - arrival)
    }

    fn schedules(&self) -> bool {
        true
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
    /// Total time added, in nanoseconds: for a device model, each request's wait from its arrival to its
    /// completion on the device (queueing included).
    pub delay_ns: u64,
}

/// How a [`DelayBackend`] behaves.
pub struct DelayConfig {
    pub model: Box<dyn ServiceTime>,
    /// Serve one request at a time (a single head). A model that [schedules](ServiceTime::schedules) requests
    /// itself ([`DiskServiceTime`]) keeps its own order and takes no head.
    pub serialize: bool,
}

impl DelayConfig {
    /// A preset name (`hdd`, `ssd`) with a serialized head.
    pub fn preset(name: &str) -> Option<Self> {
        LinearServiceTime::preset(name).map(|m| DelayConfig { model: Box::new(m), serialize: true })
    }

    /// A `blockwell-disk` model (`wd1200bb`, `cheetah9lp`, `sata-ssd`, `hdd-004`, `barracuda(write_cache=0)`, ...;
    /// see `blockwell disk list`) on its own timeline.
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

    /// Waits for the request's service (holding the head if serialized and the model does not schedule), then
    /// runs `f`.
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
        if self.model.schedules() {
            let t = self.model.wait(kind, offset, len);
            self.delay_ns.fetch_add(t.as_nanos() as u64, Ordering::Relaxed);
            return f();
        }
        // The head first: a stateful model must see requests in the order the device serves them.
        let _head = self.head.as_ref().map(|m| m.lock().unwrap_or_else(|e| e.into_inner()));
        let t = self.model.wait(kind, offset, len);
        self.delay_ns.fetch_add(t.as_nanos() as u64, Ordering::Relaxed);
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
