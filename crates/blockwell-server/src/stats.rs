//! Counters of the live cache ([`crate::cache::CachedBackend`]): the engine's block-level counters
//! ([`blockwell_core::Stats`]) plus what only the driver sees (backend traffic, slots, bypasses, admission).

use blockwell_core::stats::Stats;
use serde::Serialize;
use std::fmt::Write as _;
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
    /// Requests that bypassed the cache (sequential cutoff).
    pub bypassed: AtomicU64,
    /// Missed blocks the admission policy kept out.
    pub admission_rejections: AtomicU64,
    /// Blocks the engine counted as hits whose data was still being fetched by another request (read from
    /// the backend instead).
    pub pending_hits: AtomicU64,
    /// Fetched blocks not installed because a write or eviction overtook the fetch.
    pub fills_dropped: AtomicU64,
    /// Missed read blocks that never reached the engine (kept out by admission).
    pub read_uncounted_misses: AtomicU64,
    /// Written blocks that missed and never reached the engine (partial blocks are not allocated; whole ones
    /// kept out by admission).
    pub write_uncounted_misses: AtomicU64,
    /// Blocks dropped by write-around writes, TRIM, WRITE_ZEROES and bypassed writes.
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
    pub backend_bytes_written: u64,
    pub evictions: u64,
    pub prefetch_issued: u64,
    pub prefetch_used: u64,
    pub prefetch_wasted: u64,
    pub slots_allocated: u64,
    pub capacity_blocks: u64,
    pub resident_blocks: u64,
    pub bypassed: u64,
    pub admission_rejections: u64,
    pub pending_hits: u64,
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
            // Blocks kept out of the engine are misses all the same.
            read_block_misses: engine.read.block_misses() + g(&c.read_uncounted_misses),
            write_block_hits: engine.write.block_hits,
            write_block_misses: engine.write.block_misses() + g(&c.write_uncounted_misses),
            backend_reads: g(&c.backend_reads),
            backend_bytes_read: g(&c.backend_bytes_read),
            backend_writes: g(&c.backend_writes),
            backend_bytes_written: g(&c.backend_bytes_written),
            evictions: engine.evictions,
            prefetch_issued: engine.prefetch_inserted,
            prefetch_used: engine.prefetch_used,
            prefetch_wasted: engine.prefetch_wasted,
            slots_allocated: slots,
            capacity_blocks: capacity,
            resident_blocks: resident,
            bypassed: g(&c.bypassed),
            admission_rejections: g(&c.admission_rejections),
            pending_hits: g(&c.pending_hits),
            fills_dropped: g(&c.fills_dropped),
            invalidations: g(&c.invalidations),
            prefetch_blocks_read: g(&c.prefetch_blocks_read),
            prefetch_dropped: g(&c.prefetch_dropped),
            redcap_active: None,
            redcap_switches: g(&c.redcap_switches),
        }
    }

    /// One line of `key value` pairs, like `dmsetup status`.
    pub fn to_status_line(&self) -> String {
        let v = serde_json::to_value(self).expect("snapshot serializes");
        let mut s = String::new();
        if let serde_json::Value::Object(m) = v {
            for (k, x) in m {
                if !s.is_empty() {
                    s.push(' ');
                }
                let _ = write!(s, "{k} {x}");
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line_has_every_counter() {
        let c = Counters::default();
        Counters::add(&c.bypassed, 3);
        let s = StatsSnapshot::build(&c, &Stats::default(), 2, 8, 1);
        let line = s.to_status_line();
        assert!(line.contains("bypassed 3"), "{line}");
        assert!(line.contains("slots_allocated 2"), "{line}");
        assert_eq!(line.split(' ').count(), 2 * 28, "{line}");
        assert!(!line.contains('\n'));
    }
}
