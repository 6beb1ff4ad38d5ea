//! Counters of the live cache ([`crate::cache::CachedBackend`]): the engine's counters
//! ([`blockwell_core::Stats`], defined once in `blockwell_core::stats` and the same in `sim`) plus what only the
//! driver sees (NBD requests, backend traffic, slots, the prefetch queue).

use crate::backend::{Backend, OnMiss, ReadInto, ReadOutcome};
use blockwell_core::stats::Stats;
use serde::Serialize;
use std::fmt::Write as _;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// Driver-side counters, updated without the cache lock.
#[derive(Debug, Default)]
pub struct Counters {
    pub read_requests: AtomicU64,
    pub write_requests: AtomicU64,
    /// Read requests served entirely from RAM.
    pub read_request_hits: AtomicU64,
    pub cache_requests: AtomicU64,
    pub backend_reads: AtomicU64,
    pub backend_bytes_read: AtomicU64,
    pub backend_writes: AtomicU64,
    pub backend_bytes_written: AtomicU64,
    pub backend_zero_writes: AtomicU64,
    pub backend_bytes_zeroed: AtomicU64,
    pub backend_trims: AtomicU64,
    pub backend_bytes_trimmed: AtomicU64,
    /// The content cache's own: fetched blocks not installed because a write overtook the fetch (the block
    /// cache counts these in its engine).
    pub fills_dropped: AtomicU64,
    /// The content cache's own: blocks dropped by TRIM, WRITE_ZEROES and failed writes.
    pub invalidations: AtomicU64,
    pub prefetch_blocks_read: AtomicU64,
    pub prefetch_dropped: AtomicU64,
    pub redcap_switches: AtomicU64,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// A consistent-enough copy of every counter (serde-serializable).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StatsSnapshot {
    pub read_requests: u64,
    pub write_requests: u64,
    pub read_request_hits: u64,
    pub cache_requests: u64,
    pub read_block_hits: u64,
    pub read_block_misses: u64,
    pub write_block_hits: u64,
    pub write_block_misses: u64,
    pub backend_reads: u64,
    pub backend_bytes_read: u64,
    pub backend_writes: u64,
    /// Bytes of data written to the backend (WRITE_ZEROES and TRIM are counted apart, below).
    pub backend_bytes_written: u64,
    /// WRITE_ZEROES requests passed to the backend, and the bytes they zeroed.
    pub backend_zero_writes: u64,
    pub backend_bytes_zeroed: u64,
    /// TRIM requests passed to the backend, and the bytes they discarded.
    pub backend_trims: u64,
    pub backend_bytes_trimmed: u64,
    pub evictions: u64,
    /// Demand read blocks found in flight (misses that waited; see `blockwell_core::stats`).
    pub delayed_hits: u64,
    pub prefetch_issued: u64,
    pub prefetch_used: u64,
    pub prefetch_late: u64,
    pub prefetch_wasted: u64,
    pub slots_allocated: u64,
    pub capacity_blocks: u64,
    pub resident_blocks: u64,
    pub bypassed: u64,
    pub admission_rejections: u64,
    pub fills_dropped: u64,
    pub invalidations: u64,
    /// Blocks read from the backend by prefetches (synchronous segment or read-ahead groups and asynchronous
    /// windows), not counting the demand blocks read with them.
    pub prefetch_blocks_read: u64,
    /// Asynchronous prefetch ranges dropped because the worker's queue was full.
    pub prefetch_dropped: u64,
    /// With the `redcap` prefetcher: whether REDCAP is switched on now (`None` with another prefetcher).
    pub redcap_active: Option<bool>,
    /// With the `redcap` prefetcher: how many times the activation algorithm switched it on or off.
    pub redcap_switches: u64,
    /// The engine's counters as `blockwell sim` reports them (`blockwell_core::Stats`).
    pub engine: Stats,
}

impl StatsSnapshot {
    pub(crate) fn build(c: &Counters, engine: &Stats, slots: u64, capacity: u64, resident: u64) -> Self {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            read_requests: g(&c.read_requests),
            write_requests: g(&c.write_requests),
            read_request_hits: g(&c.read_request_hits),
            cache_requests: g(&c.cache_requests),
            read_block_hits: engine.read.block_hits,
            read_block_misses: engine.read.block_misses(),
            write_block_hits: engine.write.block_hits,
            write_block_misses: engine.write.block_misses(),
            backend_reads: g(&c.backend_reads),
            backend_bytes_read: g(&c.backend_bytes_read),
            backend_writes: g(&c.backend_writes),
            backend_bytes_written: g(&c.backend_bytes_written),
            backend_zero_writes: g(&c.backend_zero_writes),
            backend_bytes_zeroed: g(&c.backend_bytes_zeroed),
            backend_trims: g(&c.backend_trims),
            backend_bytes_trimmed: g(&c.backend_bytes_trimmed),
            evictions: engine.evictions,
            delayed_hits: engine.delayed_hits,
            prefetch_issued: engine.prefetch_issued,
            prefetch_used: engine.prefetch_used,
            prefetch_late: engine.prefetch_late,
            prefetch_wasted: engine.prefetch_wasted,
            slots_allocated: slots,
            capacity_blocks: capacity,
            resident_blocks: resident,
            bypassed: engine.bypassed,
            admission_rejections: engine.admission_rejections,
            fills_dropped: engine.fills_dropped,
            invalidations: engine.invalidations,
            prefetch_blocks_read: g(&c.prefetch_blocks_read),
            prefetch_dropped: g(&c.prefetch_dropped),
            redcap_active: None,
            redcap_switches: g(&c.redcap_switches),
            engine: *engine,
        }
    }

    /// One line of `key value` pairs, like `dmsetup status` (the engine's nested counters as `engine.read.blocks`).
    pub fn to_status_line(&self) -> String {
        fn walk(prefix: &str, v: &serde_json::Value, s: &mut String) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, x) in m {
                        let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                        walk(&key, x, s);
                    }
                }
                x => {
                    if !s.is_empty() {
                        s.push(' ');
                    }
                    let _ = write!(s, "{prefix} {x}");
                }
            }
        }
        let mut s = String::new();
        walk("", &serde_json::to_value(self).expect("snapshot serializes"), &mut s);
        s
    }
}

/// The requests of an export without a RAM or content cache, as its clients made them: how many of each kind
/// and their bytes ([`CountedBackend`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RequestSnapshot {
    pub read_requests: u64,
    pub read_bytes: u64,
    pub write_requests: u64,
    pub write_bytes: u64,
    /// WRITE_ZEROES requests and the bytes they zeroed (not counted as written bytes).
    pub zero_writes: u64,
    pub bytes_zeroed: u64,
    /// TRIM requests and the bytes they discarded.
    pub trims: u64,
    pub bytes_trimmed: u64,
    pub flushes: u64,
}

#[derive(Debug, Default)]
struct RequestCounters {
    read_requests: AtomicU64,
    read_bytes: AtomicU64,
    write_requests: AtomicU64,
    write_bytes: AtomicU64,
    zero_writes: AtomicU64,
    bytes_zeroed: AtomicU64,
    trims: AtomicU64,
    bytes_trimmed: AtomicU64,
    flushes: AtomicU64,
}

/// A layer that counts the requests through it, for an export that has no cache to count them: two relaxed
/// atomic additions per request.
pub struct CountedBackend<B> {
    inner: B,
    c: RequestCounters,
}

impl<B: Backend> CountedBackend<B> {
    pub fn new(inner: B) -> Self {
        CountedBackend { inner, c: RequestCounters::default() }
    }

    /// The counts so far.
    pub fn snapshot(&self) -> RequestSnapshot {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.c;
        RequestSnapshot {
            read_requests: g(&c.read_requests),
            read_bytes: g(&c.read_bytes),
            write_requests: g(&c.write_requests),
            write_bytes: g(&c.write_bytes),
            zero_writes: g(&c.zero_writes),
            bytes_zeroed: g(&c.bytes_zeroed),
            trims: g(&c.trims),
            bytes_trimmed: g(&c.bytes_trimmed),
            flushes: g(&c.flushes),
        }
    }

    fn count(requests: &AtomicU64, bytes: &AtomicU64, n: u64) {
        Counters::add(requests, 1);
        Counters::add(bytes, n);
    }
}

impl<B: Backend> Backend for CountedBackend<B> {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        Self::count(&self.c.read_requests, &self.c.read_bytes, buf.len() as u64);
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> io::Result<()> {
        Self::count(&self.c.write_requests, &self.c.write_bytes, buf.len() as u64);
        self.inner.write_at(buf, offset, fua)
    }
    fn flush(&self) -> io::Result<()> {
        Counters::add(&self.c.flushes, 1);
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u64, fua: bool) -> io::Result<()> {
        Self::count(&self.c.trims, &self.c.bytes_trimmed, len);
        self.inner.trim(offset, len, fua)
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> io::Result<()> {
        Self::count(&self.c.zero_writes, &self.c.bytes_zeroed, len);
        self.inner.write_zeroes(offset, len, may_trim, fua)
    }
    fn cache(&self, offset: u64, len: u64) -> io::Result<()> {
        self.inner.cache(offset, len)
    }
    /// Counted once served (a read declined for want of I/O comes back with [`OnMiss::Fetch`]).
    fn read(&self, offset: u64, into: ReadInto<'_>, on_miss: OnMiss) -> io::Result<ReadOutcome> {
        let n = into.len();
        let r = self.inner.read(offset, into, on_miss)?;
        if r == ReadOutcome::Served {
            Self::count(&self.c.read_requests, &self.c.read_bytes, n);
        }
        Ok(r)
    }
    fn hint_reads(&self, reads: &[(u64, u32)]) {
        self.inner.hint_reads(reads)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line_has_every_counter() {
        let c = Counters::default();
        Counters::add(&c.backend_reads, 3);
        let engine = Stats { bypassed: 4, ..Default::default() };
        let s = StatsSnapshot::build(&c, &engine, 2, 8, 1);
        let line = s.to_status_line();
        assert!(line.contains("backend_reads 3"), "{line}");
        assert!(line.contains("bypassed 4"), "{line}");
        assert!(line.contains("engine.bypassed 4"), "{line}");
        assert!(line.contains("engine.read.block_hits 0"), "{line}");
        assert!(line.contains("slots_allocated 2"), "{line}");
        assert!(line.contains("engine.cleaned 0"), "{line}");
        assert!(line.contains("engine.dirty_evictions 0"), "{line}");
        assert!(line.contains("engine.dirty_write_hits 0"), "{line}");
        // 32 server counters and 22 engine counters, each a name and a value.
        assert_eq!(line.split(' ').count(), 2 * (32 + 22), "{line}");
        assert!(!line.contains('\n'));
    }
}
