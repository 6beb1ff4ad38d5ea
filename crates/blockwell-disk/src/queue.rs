//! [`DeviceQueue`]: a device model on a timeline with the requests waiting for it, the one place that decides
//! when each request starts and completes. The live slow-disk emulator (`blockwell-server`'s `DelayBackend`)
//! and `blockwell disk bench --queue` both use it, so the emulator's order is the one the model is measured in.
//!
//! - A model that keeps its own parallel units ([`DiskModel::overlapping`], the SSD) starts each request at its
//!   arrival (never before the previous start: the timeline does not go back).
//! - Any other model serves one request at a time. Requests wait in arrival order; each time the device is free
//!   (or a request arrives at an idle device) it starts the next one at `max(free, arrival of the first)`: the
//!   first waiting request, or with command queueing ([`DiskModel::queue_depth`] > 1) the one
//!   [`DiskModel::pick`] chooses among the first `queue_depth` of those that had arrived by then. A request
//!   passed over `4 × queue_depth` times in a row goes next.

use crate::{DiskModel, DiskRequest};
use std::collections::VecDeque;

/// A waiting request.
#[derive(Clone, Copy, Debug)]
struct Waiting {
    id: u64,
    req: DiskRequest,
    arrival: u64,
}

/// A device and its queue (see the module doc). Times are nanoseconds on the caller's timeline.
pub struct DeviceQueue {
    model: Box<dyn DiskModel>,
    overlapping: bool,
    depth: usize,
    /// When the device finishes the last request it started.
    free_at: u64,
    /// The latest time given to the model.
    last: u64,
    queue: VecDeque<Waiting>,
    /// How many times in a row the oldest waiting request was passed over.
    passed: usize,
}

impl DeviceQueue {
    pub fn new(model: Box<dyn DiskModel>) -> DeviceQueue {
        DeviceQueue {
            overlapping: model.overlapping(),
            depth: model.queue_depth().max(1),
            model,
            free_at: 0,
            last: 0,
            queue: VecDeque::new(),
            passed: 0,
        }
    }

    /// Whether requests start at their arrival (the model's own parallel units) instead of waiting here.
    pub fn overlapping(&self) -> bool {
        self.overlapping
    }

    /// How many requests are waiting.
    pub fn waiting(&self) -> usize {
        self.queue.len()
    }

    pub fn describe(&self) -> String {
        self.model.describe()
    }

    /// Submits request `id`, which arrived at `arrival`. An overlapping model starts it now: its completion
    /// time is returned. Otherwise it waits (placed after the requests that arrived no later than it) until
    /// [`Self::dispatch`] starts it, and `None` is returned.
    pub fn submit(&mut self, id: u64, req: DiskRequest, arrival: u64) -> Option<u64> {
        if self.overlapping {
            let start = arrival.max(self.last);
            self.last = start;
            return Some(start + self.model.service(start, &req));
        }
        let at = self.queue.iter().rposition(|w| w.arrival <= arrival).map_or(0, |i| i + 1);
        self.queue.insert(at, Waiting { id, req, arrival });
        None
    }

    /// Starts, in the device's order, every waiting request the device starts by `now`, calling
    /// `started(id, completion)` for each.
    pub fn dispatch(&mut self, now: u64, mut started: impl FnMut(u64, u64)) {
        while let Some(first) = self.queue.front() {
            let t = self.free_at.max(first.arrival);
            if t > now {
                break;
            }
            let k = self.queue.iter().take(self.depth).take_while(|w| w.arrival <= t).count();
            let idx = if k <= 1 || self.passed >= 4 * self.depth {
                0
            } else {
                let reqs: Vec<DiskRequest> = self.queue.iter().take(k).map(|w| w.req).collect();
                self.model.pick(t, &reqs).min(k - 1)
            };
            self.passed = if idx == 0 { 0 } else { self.passed + 1 };
            let w = self.queue.remove(idx).expect("idx < k <= queue length");
            self.free_at = t + self.model.service(t, &w.req);
            self.last = t;
            started(w.id, self.free_at);
        }
    }

    /// Serves `req` alone, starting at `now` or when the device is free if later (for callers that keep their
    /// own order); returns its service time.
    pub fn serve_now(&mut self, now: u64, req: &DiskRequest) -> u64 {
        let start = now.max(self.last).max(if self.overlapping { 0 } else { self.free_at });
        self.last = start;
        let t = self.model.service(start, req);
        if !self.overlapping {
            self.free_at = start + t;
        }
        t
    }
}

/// The result of [`closed_loop`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LoopResult {
    pub requests: u64,
    /// From the first arrival to the last completion.
    pub elapsed_ns: u64,
    /// Mean time from arrival to completion.
    pub mean_latency_ns: f64,
}

/// Runs `count` requests from `next` through `model` with `outstanding` of them in flight at all times (a new
/// one arrives when one completes, as fio's `iodepth` does), in the order a [`DeviceQueue`] gives.
pub fn closed_loop(
    model: Box<dyn DiskModel>,
    outstanding: usize,
    count: u64,
    mut next: impl FnMut(u64) -> DiskRequest,
) -> LoopResult {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut q = DeviceQueue::new(model);
    let mut done: BinaryHeap<Reverse<(u64, u64)>> = BinaryHeap::new();
    let mut arrivals: Vec<u64> = Vec::new();
    let (mut completed, mut latency, mut end) = (0u64, 0u128, 0u64);
    let mut submit = |q: &mut DeviceQueue, done: &mut BinaryHeap<Reverse<(u64, u64)>>, arrivals: &mut Vec<u64>, at| {
        let id = arrivals.len() as u64;
        arrivals.push(at);
        if let Some(c) = q.submit(id, next(id), at) {
            done.push(Reverse((c, id)));
        }
    };
    for _ in 0..(outstanding.max(1) as u64).min(count) {
        submit(&mut q, &mut done, &mut arrivals, 0);
    }
    q.dispatch(0, |id, c| done.push(Reverse((c, id))));
    while let Some(Reverse((t, id))) = done.pop() {
        completed += 1;
        end = end.max(t);
        latency += u128::from(t - arrivals[id as usize]);
        if (arrivals.len() as u64) < count {
            submit(&mut q, &mut done, &mut arrivals, t);
        }
        q.dispatch(t, |id, c| done.push(Reverse((c, id))));
    }
    LoopResult {
        requests: completed,
        elapsed_ns: end,
        mean_latency_ns: if completed > 0 { latency as f64 / completed as f64 } else { 0.0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DiskOp, DiskSpec};

    fn lcg(x: &mut u64) -> u64 {
        *x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *x >> 11
    }

    #[test]
    fn a_fifo_disk_serves_in_arrival_order_one_at_a_time() {
        let mut q = DeviceQueue::new(DiskSpec::model("barracuda").unwrap());
        assert!(!q.overlapping());
        // Submitted out of order; the earlier arrival goes first.
        assert_eq!(q.submit(1, DiskRequest::read(8, 8), 10), None);
        assert_eq!(q.submit(0, DiskRequest::read(0, 8), 5), None);
        let mut order = Vec::new();
        q.dispatch(0, |id, c| order.push((id, c)));
        assert!(order.is_empty(), "nothing has arrived by 0");
        q.dispatch(u64::MAX, |id, c| order.push((id, c)));
        assert_eq!(order.iter().map(|o| o.0).collect::<Vec<_>>(), [0, 1]);
        assert!(order[1].1 > order[0].1, "one at a time");
        assert_eq!(q.waiting(), 0);
    }

    #[test]
    fn command_queueing_beats_first_come_first_served_on_random_reads() {
        let run = |spec: &str, depth: usize| {
            let mut x = 3;
            let span = 2_000_000; // 1 GiB at the outer edge
            let r = closed_loop(DiskSpec::model(spec).unwrap(), depth, 2000, |_| DiskRequest {
                op: DiskOp::Read,
                sector: lcg(&mut x) % (span / 8) * 8,
                sectors: 8,
            });
            2000.0 * 4096.0 / r.elapsed_ns as f64 * 1e3 // MB/s
        };
        let fifo = run("hdd-004(ncq=1)", 16);
        let ncq = run("hdd-004", 16);
        let ncq1 = run("hdd-004", 1);
        assert!(ncq > 2.0 * fifo, "NCQ {ncq:.2} MB/s vs FIFO {fifo:.2} MB/s");
        assert!((ncq1 - fifo).abs() < 0.2 * fifo, "one request in flight: nothing to reorder ({ncq1:.2} vs {fifo:.2})");
    }

    #[test]
    fn an_ssd_overlaps_requests_on_its_channels() {
        let seq = |n: usize| {
            let r = closed_loop(DiskSpec::model("ssd(channels=4)").unwrap(), n, 4000, |i| DiskRequest::read(i * 8, 8));
            4000.0 * 4096.0 / r.elapsed_ns as f64 * 1e3
        };
        let (one, four) = (seq(1), seq(4));
        assert!(four > 3.5 * one, "4 in flight on 4 channels: {four:.0} vs {one:.0} MB/s");
    }
}
