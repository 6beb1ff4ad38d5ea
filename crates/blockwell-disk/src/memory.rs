//! A memory-tier timing model: seed `002_*`'s extended storage ("file memory"), a block-addressable DRAM-like
//! store that is `slowdown` times slower than DRAM.
//!
//! What it models: a request of `n` bytes costs `ceil(n / block) × dram_ns_per_block × slowdown`, for reads
//! and writes alike; no state, no parallelism. Seed 002 emulates file memory by copying each page between main
//! memory and the uncached extended-storage region `slowdown` times (its Figure 5 "delay elements"), so the
//! cost per block scales with the factor, which is what this model does.
//!
//! Parameters and defaults:
//!
//! | parameter | default | source |
//! |---|---|---|
//! | `slowdown` | 1 (DRAM); `ecs` preset: 3 | seed 002 §V: slowdown factor of file memory relative to DRAM (1 = DRAM, 3 = the paper's middle curve) |
//! | `block_kib` | 4 | seed 002: page-addressable extended storage (4 KiB x86 pages) |
//! | `dram_ns` | 1950 | assumption: one uncached 4 KiB copy at PC2100 DDR's 2.1 GB/s peak (seed 002 Table I memory) |
//! | `capacity_gb` | 1 | seed 002: extended storage up to 1.4 GB, 1 GB working sets |

use crate::{DiskModel, DiskRequest, SECTOR};
use serde::{Deserialize, Serialize};

/// Memory-tier parameters (see the module doc).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MemoryParams {
    pub name: String,
    pub slowdown: f64,
    pub block_kib: u32,
    pub dram_ns: u64,
    pub capacity_gb: f64,
}

impl MemoryParams {
    /// DRAM (`slowdown = 1`): the `memory` defaults.
    pub fn dram() -> Self {
        MemoryParams { name: "memory".into(), slowdown: 1.0, block_kib: 4, dram_ns: 1950, capacity_gb: 1.0 }
    }

    /// Seed 002's extended storage with file memory three times slower than DRAM.
    pub fn ecs() -> Self {
        MemoryParams { name: "ecs".into(), slowdown: 3.0, ..MemoryParams::dram() }
    }

    /// Rejects values the model cannot use; the error names the parameter.
    pub fn check(&self) -> Result<(), crate::ParamError> {
        self.problems().map_err(crate::ParamError)
    }

    fn problems(&self) -> Result<(), String> {
        if !(self.slowdown.is_finite() && self.slowdown > 0.0) {
            return Err(format!("slowdown must be > 0 (is {})", self.slowdown));
        }
        if self.block_kib == 0 {
            return Err("block_kib must be > 0".into());
        }
        if !(self.capacity_gb.is_finite() && self.capacity_gb * 1e9 >= SECTOR as f64) {
            return Err(format!("capacity_gb must be > 0 (is {})", self.capacity_gb));
        }
        Ok(())
    }
}

/// The memory-tier model (see the module doc).
#[derive(Clone, Debug)]
pub struct MemoryModel {
    p: MemoryParams,
    per_block_ns: u64,
    block_sectors: u64,
    cap: u64,
}

impl MemoryModel {
    pub fn new(p: MemoryParams) -> Result<MemoryModel, crate::ParamError> {
        p.check()?;
        Ok(MemoryModel {
            per_block_ns: (p.dram_ns as f64 * p.slowdown).round() as u64,
            block_sectors: (u64::from(p.block_kib) * 1024).div_ceil(SECTOR),
            cap: ((p.capacity_gb * 1e9) as u64 / SECTOR).max(1),
            p,
        })
    }

    pub fn params(&self) -> &MemoryParams {
        &self.p
    }
}

impl DiskModel for MemoryModel {
    fn service(&mut self, _now_ns: u64, req: &DiskRequest) -> u64 {
        let start = req.sector % self.cap;
        let n = req.sectors.clamp(1, self.cap);
        let blocks = (start + n - 1) / self.block_sectors - start / self.block_sectors + 1;
        blocks * self.per_block_ns
    }

    fn capacity_sectors(&self) -> u64 {
        self.cap
    }

    fn reset(&mut self) {}

    fn boxed_clone(&self) -> Box<dyn DiskModel> {
        Box::new(self.clone())
    }

    fn describe(&self) -> String {
        let p = &self.p;
        format!(
            "{}: {} ns per {} KiB block x slowdown {} = {} ns, {} GB",
            p.name, p.dram_ns, p.block_kib, p.slowdown, self.per_block_ns, p.capacity_gb
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_blocks_times_latency_times_slowdown() {
        let mut dram = MemoryModel::new(MemoryParams::dram()).unwrap();
        let mut ecs = MemoryModel::new(MemoryParams::ecs()).unwrap();
        assert_eq!(dram.service(0, &DiskRequest::read(0, 8)), 1950);
        assert_eq!(dram.service(0, &DiskRequest::read(4, 8)), 2 * 1950, "straddles two 4 KiB blocks");
        assert_eq!(ecs.service(0, &DiskRequest::write(0, 64)), 8 * 3 * 1950);
        assert!(MemoryModel::new(MemoryParams { slowdown: 0.0, ..MemoryParams::dram() }).is_err());
    }
}
