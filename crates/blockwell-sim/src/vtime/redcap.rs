//! REDCAP on the virtual clock (seed `000_*`): the segment cache ([`blockwell_core::redcap::Redcap`]) between
//! the layout and the device, and its activation–deactivation controller
//! ([`blockwell_core::redcap::RedcapControl`]) fed with times this driver measures and estimates.
//!
//! For each block-level read request (one run of consecutive blocks from the page cache or a trace):
//!
//! - **Active**: the cache answers; every missed segment is read whole as one device request (128 KiB
//!   segments are "the maximum request size allowed by the operating system", so they are not split by the
//!   clusterer). The *measured* time is the service time of those device requests; the *estimated* time
//!   without the cache is what a shadow device (its own queue and scheduler over a fresh copy of the disk model,
//!   [`blockwell_disk::DiskModel::boxed_clone`]) takes for the request's blocks alone, clustered as the device
//!   would get them, queued at the request's arrival among the other requests' shadow reads.
//! - **Inactive**: the request goes to the device as if there were no REDCAP (measured), while the cache keeps
//!   being simulated: its segment state is updated and a second shadow disk serves the segment reads it would
//!   have issued (estimated). When the controller switches the cache back on, its contents are dropped: the
//!   shadow segments were never read, so they hold no data.
//!
//! The controller decides on sums over periods of requests ([`blockwell_core::redcap::RedcapControlConfig`]);
//! a request's observation is made when its last device request completes.
//!
//! **The shadows' queue.** A shadow is fed the requests at the times they arrive *with the current state*. While
//! REDCAP wins, processes run faster than they would without it, so the demand stream reaches shadow 0 faster
//! than the device would see it without the cache; with every request queued at once, C-LOOK sorts a long queue
//! into near-sequential sweeps and the estimate of the time without the cache comes out optimistic (and
//! REDCAP's gain underestimated). [`RedcapSetup::shadow_depth`] bounds the shadow's queue at `n` requests per
//! process (the rest wait in arrival order), closer to what closed-loop processes without the cache would queue,
//! at the price of a pessimistic estimate when read-ahead keeps more than `n` requests per process in flight.
//! The default is unbounded; `docs/experiments/redcap.md` measures both.

use super::device::{DevReq, Device};
use super::Scheduler;
use blockwell_core::redcap::{ReadPlan, Redcap, RedcapConfig, RedcapControl, RedcapControlConfig, RedcapError};
use blockwell_disk::DiskModel;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// REDCAP's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedcapSetup {
    pub cache: RedcapConfig,
    pub control: RedcapControlConfig,
    /// Queue limit of the shadow devices, per process: `0` (default) queues every shadow request at once (the
    /// scheduler may reorder them all); `n` lets at most `n × processes` wait, the rest wait in arrival order, as
    /// a closed-loop system without the cache would queue them. See the module doc.
    pub shadow_depth: usize,
}

impl RedcapSetup {
    /// The seed's configurations (`64x128k`, `128x128k`) with the default controller.
    pub fn preset(name: &str, block_size: u64) -> Result<Self, RedcapError> {
        Ok(RedcapSetup {
            cache: RedcapConfig::preset(name, block_size)?,
            control: RedcapControlConfig::default(),
            shadow_depth: 0,
        })
    }
}

/// What REDCAP did.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RedcapReport {
    pub segments: u64,
    pub segment_blocks: u64,
    /// Fraction of the simulated time (until the last process finished or the last device read completed,
    /// whichever is later) during which the cache was active.
    pub active_fraction: f64,
    /// Fraction of the measured I/O time spent active (the controller's own count).
    pub active_io_fraction: f64,
    /// On/off switches.
    pub switches: u64,
    /// Times of the first 64 switches (the cache starts active, so they alternate off, on, off...).
    pub switch_times_ns: Vec<u64>,
    /// Controller decisions (periods).
    pub periods: u64,
    /// Whole-segment device reads issued while active.
    pub segment_reads: u64,
    /// Sums over all observations: I/O time with the cache and without it (one measured, one estimated each).
    pub with_ns: u64,
    pub without_ns: u64,
    /// State at the end.
    pub active_at_end: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Pending {
    estimate: u64,
    measured: u64,
    /// Device and shadow requests not yet completed, plus one while the observation is still being built
    /// (released by [`RedcapLevel::seal`]), so that a request completing early — a read merged into a queued one
    /// completes at once — cannot complete the observation before all its requests are counted.
    outstanding: u32,
    active: bool,
}

pub(crate) struct RedcapLevel {
    setup: RedcapSetup,
    pub cache: Redcap,
    pub control: RedcapControl,
    pub plan: ReadPlan,
    /// Shadow devices (queue, scheduler and a fresh copy of the disk model): [0] serves the demand stream alone
    /// (the time without the cache, while active), [1] the segment reads the cache would issue (while inactive).
    pub shadows: [Device; 2],
    /// Shadow requests waiting for room in their shadow's queue, in arrival order.
    backlog: [VecDeque<DevReq>; 2],
    /// Most requests queued at a shadow at once ([`RedcapSetup::shadow_depth`] × processes; unlimited for 0).
    depth: usize,
    pending: Vec<Pending>,
    free: Vec<u32>,
    active_since: u64,
    active_ns: u64,
    switch_times: Vec<u64>,
    /// Device size in blocks (segments are clipped there).
    pub end_blocks: u64,
    pub segment_reads: u64,
    with_sum: u64,
    without_sum: u64,
}

impl RedcapLevel {
    pub fn new(
        setup: RedcapSetup,
        disk: &dyn DiskModel,
        scheduler: Scheduler,
        end_blocks: u64,
        procs: usize,
    ) -> Result<Self, RedcapError> {
        Ok(RedcapLevel {
            setup,
            cache: Redcap::new(setup.cache)?,
            control: RedcapControl::new(setup.control)?,
            plan: ReadPlan::default(),
            shadows: [Device::new(disk.boxed_clone(), scheduler, 0), Device::new(disk.boxed_clone(), scheduler, 0)],
            backlog: [VecDeque::new(), VecDeque::new()],
            depth: if setup.shadow_depth == 0 { usize::MAX } else { setup.shadow_depth.saturating_mul(procs.max(1)) },
            pending: Vec::new(),
            free: Vec::new(),
            active_since: 0,
            active_ns: 0,
            switch_times: Vec::new(),
            end_blocks,
            segment_reads: 0,
            with_sum: 0,
            without_sum: 0,
        })
    }

    pub fn is_active(&self) -> bool {
        self.control.is_active()
    }

    /// Queues a shadow request on shadow `k` (or in its backlog when the shadow's queue is full); returns the
    /// completion time of a request the shadow started.
    pub fn shadow_submit(&mut self, k: usize, r: DevReq, now: u64) -> Option<u64> {
        if self.shadows[k].queued() >= self.depth {
            self.backlog[k].push_back(r);
            return None;
        }
        let _ = self.shadows[k].submit(r, now);
        self.shadows[k].start_next(now)
    }

    /// Shadow `k` finished its request: it and its service time, and the completion time of the next request
    /// it started (moving one request from the backlog into its queue).
    pub fn shadow_finish(&mut self, k: usize, now: u64) -> (Option<(DevReq, u64)>, Option<u64>) {
        let done = self.shadows[k].finish();
        if let Some(r) = self.backlog[k].pop_front() {
            let _ = self.shadows[k].submit(r, now);
        }
        (done, self.shadows[k].start_next(now))
    }

    /// Opens an observation for one request; [`RedcapLevel::seal`] it once all its requests are added.
    pub fn open(&mut self) -> u32 {
        let p = Pending { estimate: 0, measured: 0, outstanding: 1, active: self.is_active() };
        match self.free.pop() {
            Some(i) => {
                self.pending[i as usize] = p;
                i
            }
            None => {
                self.pending.push(p);
                (self.pending.len() - 1) as u32
            }
        }
    }

    pub fn add_device_request(&mut self, id: u32) {
        self.pending[id as usize].outstanding += 1;
    }

    /// Every request of observation `id` has been added: it completes when they have (at once if none is left).
    pub fn seal(&mut self, id: u32, now: u64) {
        self.complete_one(id, now);
    }

    /// A device request of observation `id` completed after `service_ns` on the real device (`shadow` false)
    /// or on a shadow (a read merged into a queued one: 0).
    pub fn progress(&mut self, id: u32, service_ns: u64, shadow: bool, now: u64) {
        let p = &mut self.pending[id as usize];
        if shadow {
            p.estimate += service_ns;
        } else {
            p.measured += service_ns;
        }
        self.complete_one(id, now);
    }

    /// One fewer thing observation `id` waits for; at zero it is observed and its slot freed.
    fn complete_one(&mut self, id: u32, now: u64) {
        let p = &mut self.pending[id as usize];
        debug_assert!(p.outstanding > 0, "observation {id} completed twice");
        p.outstanding = p.outstanding.saturating_sub(1);
        if p.outstanding > 0 {
            return;
        }
        let p = *p;
        self.free.push(id);
        let (with, without) = if p.active { (p.measured, p.estimate) } else { (p.estimate, p.measured) };
        self.with_sum += with;
        self.without_sum += without;
        let switched = self.control.observe(with, without);
        if switched.is_some() && self.switch_times.len() < 64 {
            self.switch_times.push(now);
        }
        match switched {
            Some(true) => {
                self.active_since = now;
                // The shadow segments were never read: the cache starts empty.
                if let Ok(c) = Redcap::new(self.setup.cache) {
                    self.cache = c;
                }
            }
            Some(false) => self.active_ns += now - self.active_since,
            None => {}
        }
    }

    /// The report, `end` being the time of the last event.
    pub fn report(&self, end: u64) -> RedcapReport {
        let mut active = self.active_ns;
        if self.is_active() {
            active += end.saturating_sub(self.active_since);
        }
        RedcapReport {
            segments: self.setup.cache.segments as u64,
            segment_blocks: self.setup.cache.segment_blocks,
            // Shadow reads may complete (and switch the cache) after `end`; that time is not counted.
            active_fraction: if end == 0 { 1.0 } else { active.min(end) as f64 / end as f64 },
            active_io_fraction: self.control.active_fraction(),
            switches: self.control.switches(),
            switch_times_ns: self.switch_times.clone(),
            periods: self.control.periods(),
            segment_reads: self.segment_reads,
            with_ns: self.with_sum,
            without_ns: self.without_sum,
            active_at_end: self.is_active(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwell_core::redcap::RedcapControlConfig;
    use blockwell_disk::{hdd::HddModel, presets};

    fn level(period: u64) -> RedcapLevel {
        let disk = HddModel::new(presets::wd1200bb()).unwrap();
        let mut setup = RedcapSetup::preset("64x128k", 4096).unwrap();
        setup.control = RedcapControlConfig { period, ..RedcapControlConfig::default() };
        RedcapLevel::new(setup, &disk, Scheduler::CLook, 1 << 20, 1).unwrap()
    }

    /// A read merged into a queued one completes at once (service 0) while its observation is still being
    /// built: the observation must complete exactly once, after the seal, and its slot must be freed once
    /// (a slot freed twice let two live observations share one record and corrupted the controller's sums).
    #[test]
    fn an_early_completion_does_not_complete_the_observation_twice() {
        // Periods of one request: the controller's period count is the number of observations made.
        let mut rc = level(1);
        let id = rc.open();
        rc.add_device_request(id);
        rc.progress(id, 0, false, 10); // merged at once
        assert_eq!(rc.control.periods(), 0, "not observed before the seal");
        rc.add_device_request(id); // a shadow estimate still to come
        rc.seal(id, 10);
        assert_eq!(rc.control.periods(), 0, "still waiting for the shadow");
        rc.progress(id, 7_000, true, 20);
        assert_eq!(rc.control.periods(), 1);
        let r = rc.report(20);
        assert_eq!((r.with_ns, r.without_ns), (0, 7_000), "observed once: measured 0, estimated 7 us");
        // The slot is free exactly once: two new observations get distinct slots.
        let (a, b) = (rc.open(), rc.open());
        assert_ne!(a, b);
        rc.seal(a, 30);
        rc.seal(b, 30);
        assert_eq!(rc.control.periods(), 3);
        assert_eq!(rc.report(30).without_ns, 7_000, "empty observations add nothing");
    }

    /// An observation with no request completes at its seal; the controller sees one request per observation.
    #[test]
    fn each_observation_is_seen_once_by_the_controller() {
        let mut rc = level(4);
        for i in 0..8u64 {
            let id = rc.open();
            rc.add_device_request(id);
            rc.add_device_request(id);
            rc.progress(id, 100, false, i);
            rc.seal(id, i);
            rc.progress(id, 1_000, true, i);
        }
        assert_eq!(rc.control.periods(), 2, "8 observations, periods of 4");
        let r = rc.report(8);
        assert_eq!((r.with_ns, r.without_ns), (800, 8_000));
    }
}
