//! The device: a queue of requests (FIFO or C-LOOK), one served at a time through a disk model.

use super::report::{DeviceReport, IoCount};
use super::Scheduler;
use blockwell_disk::{DiskModel, DiskOp, DiskRequest};

/// One device request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DevReq {
    pub op: DiskOp,
    /// Block-level key (raw) of the first block; the request covers `n` consecutive keys.
    pub first_key: u64,
    pub n: u64,
    pub sector: u64,
    pub sectors: u64,
    /// A process waits for it (demand or synchronous read-ahead, or a write).
    pub sync: bool,
    /// The write's job, which waits for this request (writes only).
    pub job: Option<u32>,
    /// The REDCAP observation this request belongs to.
    pub tag: Option<u32>,
    /// Arrival order.
    pub seq: u64,
    /// Arrival time.
    pub queued_at: u64,
}

pub(crate) struct Device {
    model: Box<dyn DiskModel>,
    scheduler: Scheduler,
    queue: Vec<DevReq>,
    /// The request being served, its completion time and its service time.
    current: Option<(DevReq, u64, u64)>,
    /// End sector of the last request served (C-LOOK's head position).
    head: u64,
    seq: u64,
    pub report: DeviceReport,
    /// Sum over requests of (completion − arrival).
    response_sum: u128,
}

impl Device {
    pub fn new(model: Box<dyn DiskModel>, scheduler: Scheduler) -> Device {
        let describe = model.describe();
        Device {
            model,
            scheduler,
            queue: Vec::new(),
            current: None,
            head: 0,
            seq: 0,
            report: DeviceReport { model: describe, ..DeviceReport::default() },
            response_sum: 0,
        }
    }

    /// Queues a request (its `seq` and `queued_at` are set here).
    pub fn submit(&mut self, mut r: DevReq, now: u64) {
        r.seq = self.seq;
        r.queued_at = now;
        self.seq += 1;
        let count: &mut IoCount = match (r.op, r.sync) {
            (DiskOp::Write, _) => &mut self.report.writes,
            (DiskOp::Read, true) => &mut self.report.sync_reads,
            (DiskOp::Read, false) => &mut self.report.async_reads,
        };
        count.requests += 1;
        count.blocks += r.n;
        self.queue.push(r);
        self.report.max_queue = self.report.max_queue.max(self.queue.len() as u64);
    }

    /// When idle with queued work, starts the next request at `now`; returns its completion time.
    pub fn start_next(&mut self, now: u64) -> Option<u64> {
        if self.current.is_some() || self.queue.is_empty() {
            return None;
        }
        let i = match self.scheduler {
            Scheduler::Fifo => 0,
            Scheduler::CLook => {
                let pick = |ge: bool| {
                    self.queue
                        .iter()
                        .enumerate()
                        .filter(|(_, r)| !ge || r.sector >= self.head)
                        .min_by_key(|(_, r)| (r.sector, r.seq))
                        .map(|(i, _)| i)
                };
                pick(true).or_else(|| pick(false)).unwrap_or(0)
            }
        };
        let r = self.queue.remove(i);
        let t = self.model.service(now, &DiskRequest { op: r.op, sector: r.sector, sectors: r.sectors });
        self.report.busy_ns += t;
        self.head = r.sector + r.sectors;
        let done = now + t;
        self.current = Some((r, done, t));
        Some(done)
    }

    /// The request in service completes: it and its service time.
    pub fn finish(&mut self) -> Option<(DevReq, u64)> {
        let (r, done, t) = self.current.take()?;
        self.response_sum += u128::from(done - r.queued_at);
        self.report.served += 1;
        Some((r, t))
    }

    pub fn finish_report(&mut self, app_time: u64) -> DeviceReport {
        let mut rep = self.report.clone();
        rep.idle_ns = app_time.saturating_sub(rep.busy_ns);
        rep.mean_response_ns = if rep.served == 0 { 0.0 } else { self.response_sum as f64 / rep.served as f64 };
        for c in [&mut rep.sync_reads, &mut rep.async_reads, &mut rep.writes] {
            c.mean_blocks = if c.requests == 0 { 0.0 } else { c.blocks as f64 / c.requests as f64 };
        }
        rep.blocks_read = rep.sync_reads.blocks + rep.async_reads.blocks;
        rep
    }
}
