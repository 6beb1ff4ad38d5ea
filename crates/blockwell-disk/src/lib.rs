//! # blockwell-disk
//!
//! Device timing models. A model answers one question: how long does this request take, given what the device
//! did before? It has state (head position, angular position at a time, buffer contents) but reads no clock: the
//! caller passes the time at which the device starts serving the request. Queueing is the caller's business;
//! a model serves one request at a time.

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

/// A device timing model.
pub trait DiskModel: Send {
    /// Starts serving `req` at `now_ns` (nanoseconds on the caller's clock; never less than the previous call's
    /// `now_ns` + the service time it returned) and returns its service time in nanoseconds. Sectors beyond the
    /// capacity wrap around.
    fn service(&mut self, now_ns: u64, req: &DiskRequest) -> u64;

    /// Capacity in sectors.
    fn capacity_sectors(&self) -> u64;

    /// Back to the power-on state (head at cylinder 0, empty buffer).
    fn reset(&mut self);

    /// A fresh copy in the power-on state (e.g. for a shadow estimate of the time without a cache).
    fn boxed_clone(&self) -> Box<dyn DiskModel>;

    /// A short description (preset name and main parameters) for reports.
    fn describe(&self) -> String;
}
