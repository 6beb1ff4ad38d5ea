//! Counters of a cache level: the one definition used by `sim`, `tsim`, the live server's `status`, its JSON
//! and its Prometheus text alike.
//!
//! - **Block level** (`read` / `write`, [`OpStats`]): every block a demand request touches is one access. A
//!   block *hits* when its data is in the level when the request arrives. A block whose read is still in
//!   flight (issued by an earlier request or a prefetch) is a **miss that waits**: it issues no new read and
//!   is counted once in `delayed_hits` (seed `001_*` §5.2: "a demand access to a block whose prefetch has not
//!   completed is a miss"). A miss that admission keeps out, or a request that bypasses the level, is a miss.
//! - **Request level**: a request hits only if every block it touches hits (DESIGN.md, "Semantics that must
//!   be right").
//! - **Prefetch**: `prefetch_issued` blocks were read by the prefetcher (or inserted by a driver's prefetch
//!   call); of those, `prefetch_used` were found resident by their first demand access, `prefetch_late` were
//!   first demanded while still in flight, and `prefetch_wasted` left the level without any demand access.
//!   Accuracy is `(used + late) / issued`; coverage is `used / (used + read block misses)`, the share of the
//!   demand misses the prefetcher removed.
//! - **Level**: `evictions` (blocks evicted to make room), `admission_rejections` (missed blocks admission kept
//!   out), `bypassed` (requests that skipped the level: sequential cutoff), `invalidations` (resident blocks
//!   dropped by a write-around write, TRIM, a partial write over an in-flight block or a failed read),
//!   `fills_dropped` (completed reads not installed because a write, an eviction or an invalidation overtook
//!   them).
//! - **Write-back**: `dirty_write_hits` (writes to blocks already dirty: overwrites the level absorbed, which
//!   the next level never sees), `dirty_evictions` (dirty blocks evicted, each written back: dm-cache's
//!   "replaced dirty blocks"), `cleaned` (dirty blocks written back by cleaning, flushing or detaching).

use serde::{Deserialize, Serialize};
use std::ops::AddAssign;

/// Counters for one kind of operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpStats {
    pub requests: u64,
    pub request_hits: u64,
    pub blocks: u64,
    pub block_hits: u64,
}

impl OpStats {
    pub fn block_misses(&self) -> u64 {
        self.blocks - self.block_hits
    }
    pub fn request_misses(&self) -> u64 {
        self.requests - self.request_hits
    }
    /// Block-level miss ratio; `None` (undefined, not 0) when there were no blocks.
    pub fn block_miss_ratio(&self) -> Option<f64> {
        ratio(self.block_misses(), self.blocks)
    }
    /// Request-level miss ratio; `None` (undefined, not 0) when there were no requests.
    pub fn request_miss_ratio(&self) -> Option<f64> {
        ratio(self.request_misses(), self.requests)
    }
}

impl AddAssign for OpStats {
    fn add_assign(&mut self, o: Self) {
        self.requests += o.requests;
        self.request_hits += o.request_hits;
        self.blocks += o.blocks;
        self.block_hits += o.block_hits;
    }
}

/// `a / b`, or `None` when `b` is 0: a ratio of nothing is undefined, and reports show it as undefined (an
/// empty CSV field, JSON `null`, `-` in tables), never as 0.
pub fn ratio(a: u64, b: u64) -> Option<f64> {
    (b != 0).then(|| a as f64 / b as f64)
}

/// All of a cache's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub read: OpStats,
    pub write: OpStats,
    /// Demand read blocks found in flight: misses that waited for a read already issued.
    pub delayed_hits: u64,
    /// Blocks read (or inserted) by prefetches.
    pub prefetch_issued: u64,
    /// Prefetched blocks found resident by their first demand access.
    pub prefetch_used: u64,
    /// Prefetched blocks first demanded while still in flight (right, but late).
    pub prefetch_late: u64,
    /// Prefetched blocks evicted (or removed) without a demand access.
    pub prefetch_wasted: u64,
    /// Blocks evicted to make room.
    pub evictions: u64,
    /// Missed blocks admission kept out.
    pub admission_rejections: u64,
    /// Requests that bypassed the level (sequential cutoff).
    pub bypassed: u64,
    /// Resident blocks dropped (write-around, TRIM, partial write over an in-flight block, failed read).
    pub invalidations: u64,
    /// Completed reads not installed because something overtook them.
    pub fills_dropped: u64,
    /// Writes to blocks already dirty (absorbed overwrites).
    #[serde(default)]
    pub dirty_write_hits: u64,
    /// Dirty blocks evicted (each written back to the next level).
    #[serde(default)]
    pub dirty_evictions: u64,
    /// Dirty blocks written back by cleaning.
    #[serde(default)]
    pub cleaned: u64,
}

impl Stats {
    /// Reads and writes together.
    pub fn total(&self) -> OpStats {
        let mut t = self.read;
        t += self.write;
        t
    }

    /// Share of prefetched blocks that were demanded (in time or late); `None` without prefetches.
    pub fn prefetch_accuracy(&self) -> Option<f64> {
        ratio(self.prefetch_used + self.prefetch_late, self.prefetch_issued)
    }

    /// Share of the demand read misses the prefetcher removed: `used / (used + read block misses)`; `None`
    /// when there was neither a prefetch hit nor a read miss.
    pub fn prefetch_coverage(&self) -> Option<f64> {
        ratio(self.prefetch_used, self.prefetch_used + self.read.block_misses())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_and_totals() {
        let s = Stats {
            read: OpStats { requests: 4, request_hits: 1, blocks: 10, block_hits: 5 },
            write: OpStats { requests: 1, request_hits: 1, blocks: 2, block_hits: 2 },
            ..Default::default()
        };
        assert_eq!(s.total().blocks, 12);
        assert!((s.read.block_miss_ratio().unwrap() - 0.5).abs() < 1e-12);
        assert!((s.total().request_miss_ratio().unwrap() - 3.0 / 5.0).abs() < 1e-12);
        assert_eq!(OpStats::default().block_miss_ratio(), None, "no blocks: undefined, not 0");
        assert_eq!(s.prefetch_accuracy(), None, "no prefetches: undefined, not 0");
        assert_eq!(s.prefetch_coverage(), Some(0.0), "read misses and no prefetch hits: 0");
    }
}

/// A cache-device level's counters (FlashCache- and dm-cache-style), beside the engine's [`Stats`] of that
/// level: the one definition that `sim --cache-dev-size`, `tsim --cache-dev-size` and the live tier's
/// `blockwell status` (where it is flattened into the snapshot) count and name alike.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevCounters {
    pub read_requests: u64,
    pub write_requests: u64,
    pub read_hits: u64,
    pub read_misses: u64,
    pub write_hits: u64,
    pub write_misses: u64,
    /// Blocks copied from the origin into the device.
    pub promotions: u64,
    /// Clean blocks evicted.
    pub demotions: u64,
    /// Dirty blocks evicted (replaced dirty blocks; written back before their slot is reused).
    pub dirty_evictions: u64,
    /// Dirty blocks written back (by the cleaner and on eviction), and the origin writes that carried them.
    pub cleaned_blocks: u64,
    pub clean_writes: u64,
    /// Writes to blocks that were already dirty (absorbed by the cache).
    pub dirty_write_hits: u64,
    /// Requests that bypassed the device (sequential cutoff), and blocks admission kept out.
    pub bypassed: u64,
    pub admission_rejections: u64,
    pub uncached_reads: u64,
    pub uncached_writes: u64,
    pub dev_read_blocks: u64,
    pub dev_write_blocks: u64,
    /// Origin read requests and bytes, write requests and bytes (cleaning included).
    pub origin_reads: u64,
    pub origin_read_bytes: u64,
    pub origin_writes: u64,
    pub origin_write_bytes: u64,
}

impl DevCounters {
    /// One origin write of `bytes`.
    pub fn origin_write(&mut self, bytes: u64) {
        self.origin_writes += 1;
        self.origin_write_bytes += bytes;
    }

    /// These counters with the ones the engine keeps (hits and misses, dirty evictions and write hits,
    /// bypassed blocks, admission rejections) filled in from the level's `stats`.
    pub fn with_engine(self, st: &Stats) -> DevCounters {
        DevCounters {
            read_hits: st.read.block_hits,
            read_misses: st.read.block_misses(),
            write_hits: st.write.block_hits,
            write_misses: st.write.block_misses(),
            dirty_evictions: st.dirty_evictions,
            dirty_write_hits: st.dirty_write_hits,
            bypassed: st.bypassed,
            admission_rejections: st.admission_rejections,
            ..self
        }
    }
}
