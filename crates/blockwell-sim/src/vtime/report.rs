//! What a time-aware run measured, and a table printer.

use super::level::LevelCounters;
use crate::analysis::human_bytes;
use serde::{Deserialize, Serialize};
use std::fmt::{self, Write as _};

/// Device requests of one kind, after clustering.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct IoCount {
    pub requests: u64,
    pub blocks: u64,
    /// Mean request size in blocks (seed `001_*` Table 5); `None` (undefined, not 0) without requests.
    pub mean_blocks: Option<f64>,
}

/// What the device did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct DeviceReport {
    /// The disk model's description.
    pub model: String,
    /// The queue's scheduler (`FIFO`, `C-LOOK`, `CFQ`).
    #[serde(default)]
    pub scheduler: String,
    /// Reads a process waited for (demand misses and synchronous read-ahead).
    pub sync_reads: IoCount,
    /// Reads nobody waited for when issued (asynchronous read-ahead).
    pub async_reads: IoCount,
    pub writes: IoCount,
    /// Blocks read from the disk (synchronous + asynchronous).
    pub blocks_read: u64,
    /// Reads merged into a queued read (not counted as requests; their blocks are).
    pub merged: u64,
    /// Requests served.
    pub served: u64,
    /// Time the device spent serving requests.
    pub busy_ns: u64,
    /// Application time minus busy time.
    pub idle_ns: u64,
    /// Mean time from queueing to completion (`None` when nothing was served).
    pub mean_response_ns: Option<f64>,
    /// Longest queue seen (requests waiting, not counting the one in service).
    pub max_queue: u64,
}

/// One cache level.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LevelReport {
    pub policy: String,
    pub prefetcher: String,
    pub capacity_blocks: u64,
    pub counters: LevelCounters,
    /// Demand read blocks found resident / demand read blocks. Each ratio is `None` (undefined: JSON `null`,
    /// an empty CSV field, `-` in the table), never 0, when its denominator is 0.
    pub hit_ratio: Option<f64>,
    /// Prefetched blocks that were demanded (resident or still in flight) / prefetched blocks.
    pub prefetch_accuracy: Option<f64>,
    /// Prefetch hits / (prefetch hits + demand read misses): the share of the misses the prefetcher removed
    /// (`blockwell_core::stats`, the same definition as `blockwell sim`).
    pub prefetch_coverage: Option<f64>,
}

impl LevelReport {
    pub(crate) fn new(policy: String, prefetcher: String, capacity_blocks: u64, c: LevelCounters) -> Self {
        let r = blockwell_core::stats::ratio;
        LevelReport {
            policy,
            prefetcher,
            capacity_blocks,
            hit_ratio: r(c.read_hits, c.read_blocks),
            prefetch_accuracy: r(c.prefetch_hits + c.prefetch_late, c.prefetch_issued),
            prefetch_coverage: r(c.prefetch_hits, c.prefetch_hits + (c.read_blocks - c.read_hits)),
            counters: c,
        }
    }
}

/// Everything a time-aware run measured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub workload: String,
    pub block_size: u64,
    pub processes: u64,
    /// Process requests completed.
    pub requests: u64,
    /// The page cache (file-level workloads with a page cache).
    pub page_cache: Option<LevelReport>,
    /// The block-level cache, when configured.
    pub block_cache: Option<LevelReport>,
    /// The device (with a cache device: the origin under it).
    pub device: DeviceReport,
    /// The cache device, when configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_dev: Option<super::CacheDevReport>,
    /// REDCAP, when configured.
    pub redcap: Option<super::RedcapReport>,
    /// Time at which the last process finished (the application's completion time), from time 0.
    pub app_time_ns: u64,
    /// Mean time from issue to completion of a process request (`None` when none completed).
    pub mean_request_ns: Option<f64>,
    /// Events the simulation processed.
    pub events: u64,
}

impl Report {
    /// The hit ratio the application sees: the page cache's for file workloads, else the block cache's; `None`
    /// without a cache level or without demand reads.
    pub fn hit_ratio(&self) -> Option<f64> {
        self.page_cache.as_ref().or(self.block_cache.as_ref()).and_then(|l| l.hit_ratio)
    }

    /// Total device read requests (synchronous + asynchronous).
    pub fn disk_reads(&self) -> u64 {
        self.device.sync_reads.requests + self.device.async_reads.requests
    }

    /// A plain-text table.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let ms = |ns: u64| ns as f64 / 1e6;
        let _ = writeln!(
            s,
            "workload {} ({} processes, {} requests, {} B blocks)",
            self.workload, self.processes, self.requests, self.block_size
        );
        let _ = writeln!(
            s,
            "{:<12} {:>10} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9}",
            "level", "capacity", "hit%", "demand", "in-flight", "pf-issued", "accuracy", "coverage"
        );
        for (name, l) in [("page cache", &self.page_cache), ("block cache", &self.block_cache)] {
            if let Some(l) = l {
                let c = &l.counters;
                let _ = writeln!(
                    s,
                    "{:<12} {:>10} {:>8} {:>10} {:>10} {:>9} {:>9} {:>9}",
                    name,
                    l.capacity_blocks,
                    percent(l.hit_ratio, 2),
                    c.read_blocks,
                    c.inflight_waits,
                    c.prefetch_issued,
                    percent(l.prefetch_accuracy, 1),
                    percent(l.prefetch_coverage, 1)
                );
                let _ = writeln!(s, "{:<12} policy {} prefetcher {}", "", l.policy, l.prefetcher);
            }
        }
        if let Some(r) = &self.redcap {
            let _ = writeln!(
                s,
                "redcap {}x{} blocks: active {:.1}% of the time ({:.1}% of I/O time), {} switches in {} periods, {} segment reads, {} observations not replayed by the shadow",
                r.segments,
                r.segment_blocks,
                r.active_fraction * 100.0,
                r.active_io_fraction * 100.0,
                r.switches,
                r.periods,
                r.segment_reads,
                r.shadow_skipped
            );
        }
        if let Some(t) = &self.cache_dev {
            t.table(&mut s, self.block_size);
        }
        let d = &self.device;
        let name = if self.cache_dev.is_some() { "origin device" } else { "device" };
        let _ = writeln!(s, "{name} {}; scheduler {}", d.model, d.scheduler);
        requests_table(&mut s, d);
        let _ = writeln!(
            s,
            "app time {:.3} ms, {name} busy {:.3} ms, idle {:.3} ms, mean request {}",
            ms(self.app_time_ns),
            ms(d.busy_ns),
            ms(d.idle_ns),
            self.mean_request_ns.map_or("-".to_string(), |ns| format!("{:.3} ms", ns / 1e6))
        );
        if let Some(t) = &self.cache_dev {
            let _ = writeln!(
                s,
                "cache device busy {:.3} ms ({} of the app time), {} requests, mean response {}",
                ms(t.device.busy_ns),
                percent(blockwell_core::stats::ratio(t.device.busy_ns, self.app_time_ns), 1),
                t.device.served,
                t.device.mean_response_ns.map_or("-".to_string(), |ns| format!("{:.3} ms", ns / 1e6))
            );
        }
        s
    }
}

/// A device's requests by kind.
fn requests_table(s: &mut String, d: &DeviceReport) {
    let _ = writeln!(s, "{:<12} {:>10} {:>10} {:>10}", "requests", "count", "blocks", "mean size");
    for (name, c) in [("sync reads", d.sync_reads), ("async reads", d.async_reads), ("writes", d.writes)] {
        let mean = c.mean_blocks.map_or("-".to_string(), |m| format!("{m:.2}"));
        let _ = writeln!(s, "{:<12} {:>10} {:>10} {:>10}", name, c.requests, c.blocks, mean);
    }
}

/// A ratio as a percentage with `decimals` decimals, `-` when undefined.
fn percent(r: Option<f64>, decimals: usize) -> String {
    r.map_or("-".to_string(), |r| format!("{:.decimals$}%", r * 100.0))
}

impl super::CacheDevReport {
    /// The cache device's lines of [`Report::table`].
    fn table(&self, s: &mut String, block_size: u64) {
        let b = |x: u64| human_bytes(x);
        let c = &self.counters;
        let _ = writeln!(
            s,
            "cache device {} {} ({} blocks), {}, promote {}, cutoff {}, cleaner {} every {:.0} ms",
            self.policy,
            b(self.capacity_blocks * block_size),
            self.capacity_blocks,
            self.mode.name(),
            self.promote,
            b(self.sequential_cutoff),
            self.cleaner,
            self.clean_interval_ns as f64 / 1e6
        );
        let _ = writeln!(
            s,
            "{:<12} read hits {} ({} of {} blocks), write hits {} ({} of {}), {} promoted, {} demoted",
            "",
            percent(self.read_hit_ratio, 2),
            c.read_hits,
            c.read_hits + c.read_misses,
            percent(self.write_hit_ratio, 2),
            c.write_hits,
            c.write_hits + c.write_misses,
            c.promotions,
            c.demotions
        );
        let _ = writeln!(
            s,
            "{:<12} origin reads {} ({}), origin writes {} ({}) for {} written: {} absorbed",
            "",
            c.origin_reads,
            b(c.origin_read_bytes),
            c.origin_writes,
            b(c.origin_write_bytes),
            b(self.client_write_bytes),
            self.write_reduction.map_or("-".to_string(), |w| format!("{:.1}%", w * 100.0))
        );
        let _ = writeln!(
            s,
            "{:<12} cleaned {} blocks in {} writes ({} dirty evictions, {} passes); throttled {} requests for \
             {:.3} ms",
            "",
            c.cleaned_blocks,
            c.clean_writes,
            c.dirty_evictions,
            self.clean_passes,
            self.throttled_requests,
            self.throttle_ns as f64 / 1e6
        );
        let _ = writeln!(
            s,
            "{:<12} dirty blocks: max {}, mean {:.1}, final {}",
            "", self.dirty.max_blocks, self.dirty.mean_blocks, self.dirty.final_blocks
        );
        let d = &self.device;
        let _ = writeln!(s, "cache device {}; scheduler {}", d.model, d.scheduler);
        requests_table(s, d);
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table())
    }
}
