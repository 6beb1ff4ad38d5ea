//! The device: a queue of requests (FIFO, C-LOOK or CFQ), one served at a time through a disk model.

use super::cfq::{Cfq, Pick, ASYNC_QUEUE};
use super::report::{DeviceReport, IoCount};
use super::Scheduler;
use blockwell_disk::{DiskModel, DiskOp, DiskRequest};
use std::collections::{BTreeMap, HashMap};

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
    /// The cache-device tier's operation this request carries out (never merged).
    pub tier: Option<u32>,
    /// The process the request is issued for: CFQ's queue, and the process a REDCAP closed-loop shadow replays.
    pub owner: Option<u32>,
    /// Arrival order.
    pub seq: u64,
    /// Arrival time.
    pub queued_at: u64,
}

impl DevReq {
    /// A REDCAP shadow read of `sectors` sectors (`n` blocks) at `sector`, for observation `tag`.
    pub fn shadow_read(sector: u64, sectors: u64, n: u64, sync: bool, tag: u32) -> DevReq {
        DevReq {
            op: DiskOp::Read,
            first_key: 0,
            n,
            sector,
            sectors,
            sync,
            job: None,
            tag: Some(tag),
            tier: None,
            owner: None,
            seq: 0,
            queued_at: 0,
        }
    }
}

pub(crate) struct Device {
    model: Box<dyn DiskModel>,
    scheduler: Scheduler,
    /// Queued requests by arrival (`seq`) for FIFO, by (start sector, `seq`) for C-LOOK and CFQ.
    queue: BTreeMap<(u64, u64), DevReq>,
    /// CFQ's per-process queues (CFQ only).
    cfq: Option<Cfq>,
    /// The request being served, its completion time and its service time.
    current: Option<(DevReq, u64, u64)>,
    /// End sector of the last request served (C-LOOK's head position).
    head: u64,
    seq: u64,
    pub report: DeviceReport,
    /// Sum over requests of (completion − arrival).
    response_sum: u128,
    /// Back-merging: largest merged request in blocks (0: no merging), and the queued mergeable reads by the
    /// key one past their last block.
    merge_max: u64,
    ends: HashMap<u64, (u64, u64)>,
}

impl Device {
    /// A device; `merge_max` > 0 merges a read into a queued read that ends where it starts (up to that many
    /// blocks).
    pub fn new(model: Box<dyn DiskModel>, scheduler: Scheduler, merge_max: u64) -> Device {
        let describe = model.describe();
        Device {
            model,
            scheduler,
            queue: BTreeMap::new(),
            cfq: match scheduler {
                Scheduler::Cfq(t) => Some(Cfq::new(t)),
                _ => None,
            },
            current: None,
            head: 0,
            seq: 0,
            report: DeviceReport {
                model: describe,
                scheduler: scheduler.label().to_string(),
                ..DeviceReport::default()
            },
            response_sum: 0,
            merge_max,
            ends: HashMap::new(),
        }
    }

    /// Queues a request (its `seq` and `queued_at` are set here). When the read is merged into a queued one,
    /// returns `Some(tag)` with the merged read's own tag (its observation gets no service time of its own).
    pub fn submit(&mut self, mut r: DevReq, now: u64) -> Option<Option<u32>> {
        r.seq = self.seq;
        r.queued_at = now;
        self.seq += 1;
        let count: &mut IoCount = match (r.op, r.sync) {
            (DiskOp::Write, _) => &mut self.report.writes,
            (DiskOp::Read, true) => &mut self.report.sync_reads,
            (DiskOp::Read, false) => &mut self.report.async_reads,
        };
        count.blocks += r.n;
        let mergeable = self.merge_max > 0 && r.op == DiskOp::Read && r.job.is_none() && r.tier.is_none();
        if mergeable {
            if let Some(&qk) = self.ends.get(&r.first_key) {
                if let Some(q) = self.queue.get_mut(&qk) {
                    if q.sync == r.sync && q.tag.is_some() == r.tag.is_some() && q.n + r.n <= self.merge_max {
                        self.ends.remove(&r.first_key);
                        q.n += r.n;
                        q.sectors += r.sectors;
                        self.ends.insert(q.first_key + q.n, qk);
                        self.report.merged += 1;
                        return Some(r.tag);
                    }
                }
            }
        }
        count.requests += 1;
        let key = match self.scheduler {
            Scheduler::Fifo => (r.seq, 0),
            Scheduler::CLook | Scheduler::Cfq(_) => (r.sector, r.seq),
        };
        if mergeable {
            self.ends.insert(r.first_key + r.n, key);
        }
        if let Some(cfq) = self.cfq.as_mut() {
            cfq.add(cfq_queue(&r), key, r.op == DiskOp::Read, now);
        }
        self.queue.insert(key, r);
        self.report.max_queue = self.report.max_queue.max(self.queue.len() as u64);
        None
    }

    /// Requests waiting in the queue (not the one in service).
    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    /// When idle with queued work, starts the next request at `now` ([`Started::Request`]). CFQ may instead
    /// keep the disk idle, waiting for the process it serves ([`Started::Timer`]).
    pub fn start_next(&mut self, now: u64) -> Option<Started> {
        if self.current.is_some() || self.queue.is_empty() {
            return None;
        }
        let next = match self.scheduler {
            Scheduler::Fifo => self.queue.first_key_value().map(|(k, _)| *k),
            // The lowest start sector at or after the head, else the lowest of all (wrap around).
            Scheduler::CLook => {
                self.queue.range((self.head, 0)..).next().or_else(|| self.queue.first_key_value()).map(|(k, _)| *k)
            }
            Scheduler::Cfq(_) => match self.cfq.as_mut()?.select(now, self.head) {
                Pick::Dispatch(k) => Some(k),
                Pick::Arm(t) => return Some(Started::Timer(t)),
                Pick::Nothing => None,
            },
        };
        let k = next?;
        let r = self.queue.remove(&k)?;
        if let Some(cfq) = self.cfq.as_mut() {
            cfq.remove(cfq_queue(&r), k, r.queued_at);
        }
        let end = r.first_key + r.n;
        if self.ends.get(&end) == Some(&k) {
            self.ends.remove(&end);
        }
        let t = self.model.service(now, &DiskRequest { op: r.op, sector: r.sector, sectors: r.sectors });
        self.report.busy_ns += t;
        self.head = r.sector + r.sectors;
        let done = now + t;
        self.current = Some((r, done, t));
        Some(Started::Request(done))
    }

    /// The request in service completes: it and its service time.
    pub fn finish(&mut self) -> Option<(DevReq, u64)> {
        let (r, done, t) = self.current.take()?;
        if let Some(cfq) = self.cfq.as_mut() {
            cfq.completed(cfq_queue(&r), r.op == DiskOp::Read, done);
        }
        self.response_sum += u128::from(done - r.queued_at);
        self.report.served += 1;
        Some((r, t))
    }

    pub fn finish_report(&mut self, app_time: u64) -> DeviceReport {
        let mut rep = self.report.clone();
        rep.idle_ns = app_time.saturating_sub(rep.busy_ns);
        rep.mean_response_ns = (rep.served != 0).then(|| self.response_sum as f64 / rep.served as f64);
        for c in [&mut rep.sync_reads, &mut rep.async_reads, &mut rep.writes] {
            c.mean_blocks = (c.requests != 0).then(|| c.blocks as f64 / c.requests as f64);
        }
        rep.blocks_read = rep.sync_reads.blocks + rep.async_reads.blocks;
        rep
    }
}

/// What [`Device::start_next`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Started {
    /// A request went to the disk; it completes at this time.
    Request(u64),
    /// The scheduler keeps the disk idle and wants `start_next` called again at this time (CFQ's idle timer).
    Timer(u64),
}

/// CFQ's queue for a request: its process's for a read, the shared asynchronous queue for a write (and for a
/// read no process issued).
fn cfq_queue(r: &DevReq) -> u32 {
    match (r.op, r.owner) {
        (DiskOp::Read, Some(p)) => p,
        _ => ASYNC_QUEUE,
    }
}
