//! Counters: block level and request level, reads and writes apart, plus prefetch and eviction counts.
//!
//! A request hits only if every block it touches hits (DESIGN.md, "Semantics that must be right").

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
    /// Block-level miss ratio (0 when there were no blocks).
    pub fn block_miss_ratio(&self) -> f64 {
        ratio(self.block_misses(), self.blocks)
    }
    /// Request-level miss ratio (0 when there were no requests).
    pub fn request_miss_ratio(&self) -> f64 {
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

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        a as f64 / b as f64
    }
}

/// All of a cache's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub read: OpStats,
    pub write: OpStats,
    /// Blocks inserted by prefetches.
    pub prefetch_inserted: u64,
    /// Prefetched blocks later accessed on demand.
    pub prefetch_used: u64,
    /// Prefetched blocks evicted (or removed) without a demand access.
    pub prefetch_wasted: u64,
    /// Blocks evicted to make room.
    pub evictions: u64,
}

impl Stats {
    /// Reads and writes together.
    pub fn total(&self) -> OpStats {
        let mut t = self.read;
        t += self.write;
        t
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
        assert!((s.read.block_miss_ratio() - 0.5).abs() < 1e-12);
        assert!((s.total().request_miss_ratio() - 3.0 / 5.0).abs() < 1e-12);
        assert_eq!(OpStats::default().block_miss_ratio(), 0.0);
    }
}
