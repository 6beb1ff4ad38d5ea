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
//!   would get them, queued as its process would have issued it without the cache (below).
//! - **Inactive**: the request goes to the device as if there were no REDCAP (measured), while the cache keeps
//!   being simulated: its segment state is updated and a second shadow disk serves the segment reads it would
//!   have issued (estimated). When the controller switches the cache back on, its contents are dropped: the
//!   shadow segments were never read, so they hold no data.
//!
//! The controller decides on sums over periods of requests ([`blockwell_core::redcap::RedcapControlConfig`]);
//! a request's observation is made when its last device request completes.
//!
//! **How the shadows are fed ([`Shadow`]).** A shadow must see the requests as the system it stands for would
//! have issued them. While REDCAP wins, processes run faster than they would without it; fed every request as
//! it arrives (`arrival`), shadow 0 got each process's requests in bursts, C-LOOK sorted them into
//! near-sequential sweeps, and the estimate of the time without the cache came out far too small (with 4 KiB
//! strided reads from 4 processes, over an order of magnitude below the time measured without REDCAP), so the
//! controller switched off a cache that was winning by far. By default (`closed-loop`) each closed-loop
//! process replays *its own loop* in each shadow: the shadow requests of its next request are queued only once
//! its previous synchronous shadow requests have completed in that shadow, plus the think time it spent for
//! real in between (asynchronous read-ahead of the same request goes with it). On that example the estimate is
//! the time measured without REDCAP to the nanosecond (`tests/vtime_properties.rs`). A shadow that replays a
//! slower system falls behind the real run; at most `lag` requests of a process (default 8) wait, and requests
//! beyond are not replayed and left out of the controller's sums ([`RedcapReport::shadow_skipped`]), so the
//! controller's information trails the real run by a few requests per process instead of by the whole run.

use super::device::{DevReq, Device, Started};
use super::Scheduler;
use blockwell_core::redcap::{ReadPlan, Redcap, RedcapConfig, RedcapControl, RedcapControlConfig, RedcapError};
use blockwell_disk::DiskModel;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

/// REDCAP's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedcapSetup {
    pub cache: RedcapConfig,
    pub control: RedcapControlConfig,
    /// How the shadow devices are fed (see the module doc).
    pub shadow: Shadow,
}

/// How REDCAP's shadow devices are fed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shadow {
    /// Each process replays its own closed loop in each shadow (the default): the shadow requests of a
    /// process's request are queued once its previous synchronous shadow requests have completed *in that
    /// shadow* and it has thought as long as it did for real, as it would have run without (or with) the cache.
    /// At most `lag` requests of one process wait so (0: no limit); a request arriving when `lag` wait is not
    /// replayed and its observation is left out of the controller's sums, which bounds how far the
    /// controller's information trails the real run. Open-loop runs feed the shadows as [`Shadow::Arrival`].
    ClosedLoop { lag: usize },
    /// Every shadow request is queued when the real request arrives; at most `depth × processes` are queued at
    /// once, the rest wait in arrival order (0: no limit).
    Arrival { depth: usize },
}

/// Default [`Shadow::ClosedLoop`] lag: requests waiting per process.
pub const SHADOW_LAG: usize = 8;

impl Default for Shadow {
    fn default() -> Self {
        Shadow::ClosedLoop { lag: SHADOW_LAG }
    }
}

impl fmt::Display for Shadow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Shadow::ClosedLoop { lag: SHADOW_LAG } => write!(f, "closed-loop"),
            Shadow::ClosedLoop { lag } => write!(f, "closed-loop(lag={lag})"),
            Shadow::Arrival { depth: 0 } => write!(f, "arrival"),
            Shadow::Arrival { depth } => write!(f, "arrival(depth={depth})"),
        }
    }
}

/// A [`Shadow`] that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad REDCAP shadow '{spec}': {reason} (expected closed-loop, closed-loop(lag=N), arrival or arrival(depth=N))")]
pub struct ShadowParseError {
    pub spec: String,
    pub reason: String,
}

impl FromStr for Shadow {
    type Err = ShadowParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        use blockwell_core::spec::{split_spec, SpecSyntaxError};
        let err = |reason: &str| ShadowParseError { spec: s.to_string(), reason: reason.to_string() };
        let text = split_spec(s).map_err(|e| match e {
            SpecSyntaxError::NoClosingParen => err("unbalanced parentheses"),
            SpecSyntaxError::NotKeyValue(kv) => err(&format!("'{kv}' is not key=value")),
        })?;
        let (mut shadow, key) = match text.name {
            "closed-loop" => (Shadow::default(), "lag"),
            "arrival" => (Shadow::Arrival { depth: 0 }, "depth"),
            other => return Err(err(&format!("unknown kind '{other}'"))),
        };
        for (k, v) in text.params {
            if k != key {
                return Err(err(&format!("unknown parameter '{k}' (this kind takes '{key}')")));
            }
            let n: usize = v.parse().map_err(|_| err(&format!("{key}: '{v}' is not a count")))?;
            shadow = match shadow {
                Shadow::ClosedLoop { .. } => Shadow::ClosedLoop { lag: n },
                Shadow::Arrival { .. } => Shadow::Arrival { depth: n },
            };
        }
        Ok(shadow)
    }
}

impl RedcapSetup {
    /// The seed's configurations (`64x128k`, `128x128k`) with the default controller.
    pub fn preset(name: &str, block_size: u64) -> Result<Self, RedcapError> {
        Ok(RedcapSetup {
            cache: RedcapConfig::preset(name, block_size)?,
            control: RedcapControlConfig::default(),
            shadow: Shadow::default(),
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
    /// Observations a closed-loop shadow did not replay because their process trailed the real run by
    /// [`Shadow::ClosedLoop`]'s `lag` requests; they are not in `with_ns`/`without_ns` nor in any decision.
    #[serde(default)]
    pub shadow_skipped: u64,
}

/// A shadow wants the driver to call it back at a time: [`RedcapLevel::shadow_finish`] for shadow `k`
/// (`Done(k)`), or [`RedcapLevel::shadow_release`] for shadow `k` and process `p` (`Release(k, p)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ShadowWake {
    Done(u8),
    Release(u8, u32),
    /// Shadow `k`'s scheduler wants [`RedcapLevel::shadow_kick`] (CFQ's idle timer).
    Timer(u8),
}

/// Who a shadow batch is replayed for (closed-loop shadows).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Owner {
    pub proc: u32,
    /// The process's request (its index): the batches of one request are issued together.
    pub issue: u64,
    /// The process's total think time (time with no request outstanding) when it issued the request.
    pub idle_ns: u64,
}

/// The shadow requests one process request produced, waiting for the process's previous ones.
#[derive(Debug)]
struct Batch {
    issue: u64,
    arrival: u64,
    idle_ns: u64,
    reqs: Vec<DevReq>,
}

/// One process's closed loop in one shadow.
#[derive(Debug, Default)]
struct ShadowProc {
    waiting: VecDeque<Batch>,
    /// Synchronous requests of the released batches not yet completed in the shadow.
    outstanding: u32,
    /// The request of the last released batch (later batches of the same request go at once).
    released_issue: Option<u64>,
    /// Think-time stamp of the last released batch that had synchronous requests, and when they completed.
    blocking_idle_ns: u64,
    done_at: u64,
    /// A [`ShadowWake::Release`] is scheduled.
    release_pending: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Pending {
    estimate: u64,
    measured: u64,
    /// Not replayed by a closed-loop shadow (its process lagged too far): not shown to the controller.
    void: bool,
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
    /// Per shadow, each process's closed loop (empty when the shadows are not closed-loop).
    procs: [Vec<ShadowProc>; 2],
    /// Most batches waiting per process in a closed-loop shadow (`usize::MAX`: no limit).
    lag: usize,
    /// Observations left out because their process's shadow lagged.
    pub voided: u64,
    /// Most requests queued at a shadow at once ([`Shadow::Arrival`] depth × processes; `usize::MAX`: no limit).
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
        closed_loop_processes: bool,
    ) -> Result<Self, RedcapError> {
        let (closed_loop, lag, depth) = match setup.shadow {
            Shadow::ClosedLoop { lag } if closed_loop_processes => (true, if lag == 0 { usize::MAX } else { lag }, 0),
            Shadow::ClosedLoop { .. } => (false, usize::MAX, 0),
            Shadow::Arrival { depth } => (false, usize::MAX, depth),
        };
        let per_proc = || if closed_loop { (0..procs).map(|_| ShadowProc::default()).collect() } else { Vec::new() };
        Ok(RedcapLevel {
            setup,
            cache: Redcap::new(setup.cache)?,
            control: RedcapControl::new(setup.control)?,
            plan: ReadPlan::default(),
            shadows: [Device::new(disk.boxed_clone(), scheduler, 0), Device::new(disk.boxed_clone(), scheduler, 0)],
            backlog: [VecDeque::new(), VecDeque::new()],
            procs: [per_proc(), per_proc()],
            lag,
            voided: 0,
            depth: if depth == 0 { usize::MAX } else { depth.saturating_mul(procs.max(1)) },
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

    /// Queues a shadow request on shadow `k` (or in its backlog when the shadow's queue is full); a started
    /// request's completion goes to `wake`.
    fn shadow_submit(&mut self, k: usize, r: DevReq, now: u64, wake: &mut Vec<(u64, ShadowWake)>) {
        if self.shadows[k].queued() >= self.depth {
            self.backlog[k].push_back(r);
            return;
        }
        let _ = self.shadows[k].submit(r, now);
        self.shadow_kick(k, now, wake);
    }

    /// Starts shadow `k`'s next request if it is idle (its completion, or a scheduler timer, goes to `wake`).
    pub fn shadow_kick(&mut self, k: usize, now: u64, wake: &mut Vec<(u64, ShadowWake)>) {
        match self.shadows[k].start_next(now) {
            Some(Started::Request(done)) => wake.push((done, ShadowWake::Done(k as u8))),
            Some(Started::Timer(t)) => wake.push((t, ShadowWake::Timer(k as u8))),
            None => {}
        }
    }

    /// The shadow requests of one process request (`owner`), arriving at `now`: queued on shadow `k` at once,
    /// or, for a closed-loop shadow, once the process's earlier synchronous shadow requests have completed and
    /// it has thought as long as it did for real. Times to call back go to `wake`.
    pub fn shadow_batch(
        &mut self,
        k: usize,
        owner: Option<Owner>,
        reqs: Vec<DevReq>,
        now: u64,
        wake: &mut Vec<(u64, ShadowWake)>,
    ) {
        // Without closed-loop shadows there are no per-process loops.
        let Some(o) = owner.filter(|o| (o.proc as usize) < self.procs[k].len()) else {
            // Still the issuing process's requests, for a scheduler with per-process queues.
            for r in reqs {
                self.shadow_submit(k, DevReq { owner: owner.map(|o| o.proc), ..r }, now, wake);
            }
            return;
        };
        let p = o.proc as usize;
        let owned = reqs.into_iter().map(|r| DevReq { owner: Some(o.proc), ..r });
        let sp = &mut self.procs[k][p];
        if let Some(b) = sp.waiting.back_mut().filter(|b| b.issue == o.issue) {
            // Another batch of a request that is waiting: it waits with it.
            b.reqs.extend(owned);
        } else if sp.waiting.is_empty() && sp.released_issue == Some(o.issue) {
            // The request's first batch is already in the shadow: the rest is issued with it.
            let owned: Vec<DevReq> = owned.collect();
            self.release(k, p, owned, now, wake);
        } else if sp.waiting.len() >= self.lag {
            // Too far behind: not replayed, and its observations are not shown to the controller.
            for r in owned {
                if let Some(id) = r.tag {
                    self.pending[id as usize].void = true;
                    self.complete_one(id, now);
                }
            }
        } else {
            sp.waiting.push_back(Batch { issue: o.issue, arrival: now, idle_ns: o.idle_ns, reqs: owned.collect() });
            self.try_release(k, p, now, wake);
        }
    }

    /// Queues released requests of process `p` on shadow `k`.
    fn release(&mut self, k: usize, p: usize, reqs: Vec<DevReq>, now: u64, wake: &mut Vec<(u64, ShadowWake)>) {
        self.procs[k][p].outstanding += reqs.iter().filter(|r| r.sync).count() as u32;
        for r in reqs {
            self.shadow_submit(k, r, now, wake);
        }
    }

    /// Releases process `p`'s waiting batches on shadow `k` while its loop allows.
    fn try_release(&mut self, k: usize, p: usize, now: u64, wake: &mut Vec<(u64, ShadowWake)>) {
        loop {
            let sp = &mut self.procs[k][p];
            if sp.outstanding > 0 || sp.release_pending {
                return;
            }
            let Some(b) = sp.waiting.front() else { return };
            // After its last synchronous shadow requests completed, the process thinks as long as it did.
            let at = b.arrival.max(sp.done_at.saturating_add(b.idle_ns.saturating_sub(sp.blocking_idle_ns)));
            if at > now {
                sp.release_pending = true;
                wake.push((at, ShadowWake::Release(k as u8, p as u32)));
                return;
            }
            let Some(b) = sp.waiting.pop_front() else { return };
            sp.released_issue = Some(b.issue);
            if b.reqs.iter().any(|r| r.sync) {
                sp.blocking_idle_ns = b.idle_ns;
            }
            self.release(k, p, b.reqs, now, wake);
        }
    }

    /// A [`ShadowWake::Release`] came due.
    pub fn shadow_release(&mut self, k: usize, p: usize, now: u64, wake: &mut Vec<(u64, ShadowWake)>) {
        if let Some(sp) = self.procs[k].get_mut(p) {
            sp.release_pending = false;
            self.try_release(k, p, now, wake);
        }
    }

    /// Shadow `k` finished its request: it and its service time. It starts its next request (moving one
    /// request from the backlog into its queue) before the process the finished request was replayed for
    /// issues its next one.
    pub fn shadow_finish(&mut self, k: usize, now: u64, wake: &mut Vec<(u64, ShadowWake)>) -> Option<(DevReq, u64)> {
        let done = self.shadows[k].finish();
        if let Some(r) = self.backlog[k].pop_front() {
            let _ = self.shadows[k].submit(r, now);
        }
        self.shadow_kick(k, now, wake);
        if let Some((r, _)) = &done {
            if let (true, Some(p)) = (r.sync, r.owner) {
                let p = p as usize;
                if let Some(sp) = self.procs[k].get_mut(p) {
                    sp.outstanding = sp.outstanding.saturating_sub(1);
                    if sp.outstanding == 0 {
                        sp.done_at = now;
                        self.try_release(k, p, now, wake);
                    }
                }
            }
        }
        done
    }

    /// Opens an observation for one request; [`RedcapLevel::seal`] it once all its requests are added.
    pub fn open(&mut self) -> u32 {
        let p = Pending { estimate: 0, measured: 0, void: false, outstanding: 1, active: self.is_active() };
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
        if p.void {
            self.voided += 1;
            return;
        }
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
            shadow_skipped: self.voided,
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
        RedcapLevel::new(setup, &disk, Scheduler::CLook, 1 << 20, 1, true).unwrap()
    }

    /// A level with `procs` closed-loop processes whose shadows are fed as `shadow` says.
    fn closed(procs: usize, shadow: Shadow) -> RedcapLevel {
        let disk = HddModel::new(presets::wd1200bb()).unwrap();
        let setup = RedcapSetup { shadow, ..RedcapSetup::preset("64x128k", 4096).unwrap() };
        RedcapLevel::new(setup, &disk, Scheduler::CLook, 1 << 20, procs, true).unwrap()
    }

    /// A one-request observation's shadow read of `sectors` at `sector`, sealed; the batch goes to shadow 0.
    fn read(
        rc: &mut RedcapLevel,
        owner: Owner,
        sector: u64,
        sync: bool,
        now: u64,
        wake: &mut Vec<(u64, ShadowWake)>,
    ) -> u32 {
        let id = rc.open();
        rc.add_device_request(id);
        rc.shadow_batch(0, Some(owner), vec![DevReq::shadow_read(sector, 8, 1, sync, id)], now, wake);
        rc.seal(id, now);
        id
    }

    fn own(proc: u32, issue: u64, idle_ns: u64) -> Owner {
        Owner { proc, issue, idle_ns }
    }

    fn dones(wake: &[(u64, ShadowWake)]) -> Vec<u64> {
        wake.iter().filter(|w| w.1 == ShadowWake::Done(0)).map(|w| w.0).collect()
    }

    /// Closed loop: a process's next shadow request is queued only when its previous synchronous one has
    /// completed in the shadow; another process's request is queued at once; an asynchronous batch of the
    /// same request goes with it.
    #[test]
    fn a_closed_loop_shadow_replays_each_process_one_request_at_a_time() {
        let mut rc = closed(2, Shadow::default());
        let mut wake = Vec::new();
        read(&mut rc, own(0, 1, 0), 0, true, 0, &mut wake);
        read(&mut rc, own(0, 1, 0), 8, false, 0, &mut wake); // its read-ahead: issued with it
        read(&mut rc, own(0, 2, 0), 1 << 20, true, 0, &mut wake); // its next request: waits
        read(&mut rc, own(1, 1, 0), 1 << 21, true, 0, &mut wake); // another process: queued
        let first = dones(&wake);
        assert_eq!(first.len(), 1, "one request in service: {wake:?}");
        assert_eq!(rc.shadows[0].queued(), 2, "process 0's read-ahead and process 1's read wait in the queue");
        wake.clear();
        let (r, _) = rc.shadow_finish(0, first[0], &mut wake).unwrap();
        assert_eq!((r.sector, r.owner), (0, Some(0)));
        // C-LOOK serves the read-ahead at sector 8 next; process 0's next request joins the queue now.
        assert_eq!(rc.shadows[0].queued(), 2, "process 1's read and process 0's second request");
        let mut served = Vec::new();
        let mut next = dones(&wake);
        while let Some(&t) = next.first() {
            wake.clear();
            let (r, _) = rc.shadow_finish(0, t, &mut wake).unwrap();
            served.push(r.sector);
            next = dones(&wake);
        }
        assert_eq!(served, vec![8, 1 << 20, 1 << 21]);
        assert_eq!(rc.control.periods(), 0, "periods of 64");
        assert_eq!(rc.report(0).without_ns, 0, "no observation is complete before its period ends");
    }

    /// A process that thought for 5 ms (real time) between two requests thinks as long in the shadow, counted
    /// from the shadow completion of its previous request.
    #[test]
    fn the_shadow_keeps_the_think_time() {
        let mut rc = closed(1, Shadow::default());
        let mut wake = Vec::new();
        read(&mut rc, own(0, 1, 0), 0, true, 0, &mut wake);
        let t = dones(&wake)[0];
        read(&mut rc, own(0, 2, 5_000_000), 1 << 20, true, 1_000, &mut wake);
        wake.clear();
        rc.shadow_finish(0, t, &mut wake);
        assert_eq!(wake, vec![(t + 5_000_000, ShadowWake::Release(0, 0))]);
        assert_eq!(rc.shadows[0].queued(), 0);
        wake.clear();
        rc.shadow_release(0, 0, t + 5_000_000, &mut wake);
        assert_eq!(dones(&wake).len(), 1, "released and started: {wake:?}");
    }

    /// At most `lag` requests of a process wait; a request beyond is not replayed and its observation is not
    /// shown to the controller. `lag=0` keeps every request.
    #[test]
    fn requests_beyond_the_lag_are_not_replayed_nor_observed() {
        for (shadow, skipped) in [(Shadow::ClosedLoop { lag: 1 }, 2), (Shadow::ClosedLoop { lag: 0 }, 0)] {
            let mut rc = closed(1, shadow);
            let mut wake = Vec::new();
            for issue in 1..=4 {
                read(&mut rc, own(0, issue, 0), issue << 20, true, 0, &mut wake);
            }
            // Issue 1 in service, issue 2 waiting, issues 3 and 4 dropped (lag 1).
            assert_eq!(rc.voided, skipped, "{shadow}");
            let mut n = 0;
            let mut next = dones(&wake);
            while let Some(&t) = next.first() {
                wake.clear();
                rc.shadow_finish(0, t, &mut wake).unwrap();
                n += 1;
                next = dones(&wake);
            }
            assert_eq!(n, 4 - skipped, "{shadow}: requests replayed");
            assert_eq!(rc.report(0).shadow_skipped, skipped);
        }
    }

    /// Open-loop runs (and `arrival`) queue every shadow request on arrival.
    #[test]
    fn arrival_and_open_loop_shadows_queue_everything_at_once() {
        let disk = HddModel::new(presets::wd1200bb()).unwrap();
        let open =
            RedcapLevel::new(RedcapSetup::preset("64x128k", 4096).unwrap(), &disk, Scheduler::CLook, 1 << 20, 1, false);
        for mut rc in [closed(1, Shadow::Arrival { depth: 0 }), open.unwrap()] {
            let mut wake = Vec::new();
            for issue in 1..=3 {
                read(&mut rc, own(0, issue, 0), issue << 20, true, 0, &mut wake);
            }
            assert_eq!(rc.shadows[0].queued(), 2);
        }
    }

    #[test]
    fn shadow_specs_parse_and_print() {
        for (text, shadow) in [
            ("closed-loop", Shadow::ClosedLoop { lag: SHADOW_LAG }),
            ("closed-loop(lag=0)", Shadow::ClosedLoop { lag: 0 }),
            ("arrival", Shadow::Arrival { depth: 0 }),
            ("arrival(depth=1)", Shadow::Arrival { depth: 1 }),
        ] {
            assert_eq!(text.parse::<Shadow>(), Ok(shadow));
            assert_eq!(shadow.to_string(), text);
        }
        assert_eq!(" closed-loop( lag = 3 ) ".parse::<Shadow>(), Ok(Shadow::ClosedLoop { lag: 3 }));
        assert_eq!("closed-loop(lag=8)".parse::<Shadow>().unwrap().to_string(), "closed-loop");
        for (bad, says) in [
            ("open", "unknown kind 'open'"),
            ("closed-loop(depth=1)", "unknown parameter 'depth' (this kind takes 'lag')"),
            ("arrival(depth=x)", "depth: 'x' is not a count"),
            ("arrival(depth)", "'depth' is not key=value"),
            ("closed-loop(lag=1", "unbalanced parentheses"),
        ] {
            let e = bad.parse::<Shadow>().unwrap_err().to_string();
            assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
        }
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
