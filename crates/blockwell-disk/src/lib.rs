//! # blockwell-disk
//!
//! Device timing models. A model answers one question: how long does this request take, given what the device
//! did before? It has state (head position, angular position at a time, buffer contents) but reads no clock: the
//! caller passes the time at which the device starts serving the request. Queueing is the caller's business;
//! a model serves one request at a time, except that it says which of several waiting requests a drive with
//! command queueing serves next ([`DiskModel::pick`]), and that a model with parallel units of its own (the SSD)
//! takes overlapping requests ([`DiskModel::overlapping`]).
//!
//! - [`hdd`]: a hard disk (two-regime seek curve, rotation with angular position, zones, track and cylinder
//!   switches with skew, per-command overheads, bus transfer, and the on-disk segmented buffer with read-ahead and
//!   an optional write cache). Presets with cited parameters are in [`presets`].
//! - [`ssd`]: per-op latency, bandwidth and parallel channels.
//! - [`memory`]: a memory tier (latency per block × a slowdown factor relative to DRAM), for seed `002_*`'s
//!   extended storage.
//! - [`queue`]: a device on a timeline with its waiting requests (command queueing, SSD channels): the order the
//!   live emulator serves requests in, and `blockwell disk bench --queue`'s closed loop.
//! - [`spec`]: the one registry: [`DiskSpec::parse`] turns `"barracuda"`, `"ssd(read_us=80,channels=8)"` or
//!   `"memory(slowdown=4)"` into a `Box<dyn DiskModel>`; [`spec::list`] names every preset.
//! - [`validate`]: replays DiskSim's validation traces (measured service times of real disks) through a model and
//!   compares the distributions (mean, Ruemmler-Wilkes demerit).

pub mod hdd;
pub mod memory;
pub mod presets;
pub mod queue;
pub mod spec;
pub mod ssd;
pub mod validate;

pub use hdd::{HddModel, HddParams, SeekCurve, Zone};
pub use memory::{MemoryModel, MemoryParams};
pub use queue::{closed_loop, DeviceQueue, LoopResult};
pub use spec::{DiskSpec, SpecError};
pub use ssd::{SsdModel, SsdParams};
pub use validate::{ValidateError, Validation};

/// A model parameter that makes no sense; the message names the parameter and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParamError(pub String);

/// Bytes per sector: request addresses and sizes are in 512 B sectors.
pub const SECTOR: u64 = 512;

/// Read or write, as a device sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskOp {
    Read,
    Write,
}

/// One device request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskRequest {
    pub op: DiskOp,
    /// First sector.
    pub sector: u64,
    /// Number of sectors (>= 1).
    pub sectors: u64,
}

impl DiskRequest {
    pub const fn read(sector: u64, sectors: u64) -> Self {
        DiskRequest { op: DiskOp::Read, sector, sectors }
    }

    pub const fn write(sector: u64, sectors: u64) -> Self {
        DiskRequest { op: DiskOp::Write, sector, sectors }
    }
}

/// A device timing model.
pub trait DiskModel: Send {
    /// Starts serving `req` at `now_ns` (nanoseconds on the caller's clock; never less than the previous call's
    /// `now_ns` + the service time it returned, or for an [`overlapping`](Self::overlapping) model never less than
    /// the previous call's `now_ns`) and returns its service time in nanoseconds. Sectors beyond the capacity
    /// wrap around; a request is at least one sector and at most the capacity (models clamp `sectors`).
    fn service(&mut self, now_ns: u64, req: &DiskRequest) -> u64;

    /// How many waiting requests the device chooses among (command queueing); 1: first come, first served.
    fn queue_depth(&self) -> usize {
        1
    }

    /// Which of `queued` (waiting requests in arrival order) the device serves next if it starts at `now_ns`.
    /// The state does not change. The default, and any model with a [`queue_depth`](Self::queue_depth) of 1,
    /// takes the first.
    fn pick(&self, _now_ns: u64, _queued: &[DiskRequest]) -> usize {
        0
    }

    /// Whether the model keeps its own parallel units busy (the SSD's channels), so that a caller may start
    /// each request at its arrival, before the previous one completed. Otherwise requests must be served one
    /// at a time.
    fn overlapping(&self) -> bool {
        false
    }

    /// Capacity in sectors.
    fn capacity_sectors(&self) -> u64;

    /// Back to the power-on state (head at cylinder 0, empty buffer).
    fn reset(&mut self);

    /// A fresh copy in the power-on state (e.g. for a shadow estimate of the time without a cache).
    fn boxed_clone(&self) -> Box<dyn DiskModel>;

    /// A short description (preset name and main parameters) for reports.
    fn describe(&self) -> String;
}

/// Milliseconds (as in data sheets and DiskSim parameter files) to integer nanoseconds, rounded.
pub(crate) fn ms_to_ns(ms: f64) -> u64 {
    if ms.is_finite() && ms > 0.0 {
        (ms * 1e6).round() as u64
    } else {
        0
    }
}
