//! The CFQ I/O scheduler as Linux 2.6.14–2.6.16 had it (time-sliced CFQ, `block/cfq-iosched.c`): the scheduler of
//! seed `000_*`'s experiments ("The Complete Fair Queuing (CFQ) scheduler has been used in all the
//! experiments").
//!
//! - **One queue per process** for its reads (`cfq_queue_pid`: a read's queue is its process's); writes go to
//!   one shared asynchronous queue (the kernel's `CFQ_KEY_ASYNC`, where page-cache write-back lands).
//! - **Time slices, round robin.** The queue being served (the *active* queue) dispatches until its slice ends:
//!   100 ms for a process queue (`cfq_slice_sync`, best-effort priority 4), 40 ms or 16 requests for the
//!   asynchronous queue (`cfq_slice_async`, `cfq_slice_async_rq`). The slice starts at its first dispatch.
//!   Queues wait in a list ordered by when each was last served (`service_last`: its slice ended or its last
//!   request completed), oldest first; a new queue goes after those never served.
//! - **Anticipation (the idle window).** When the active process queue runs empty within its slice, the disk
//!   waits up to `cfq_slice_idle` (10 ms) for that process's next request instead of seeking away; a request
//!   from it is dispatched at once. When the wait ends with no request, the slice ends, unless no other queue
//!   has requests, in which case the wait is renewed until the slice ends (`cfq_idle_slice_timer`). A process
//!   stops being waited for when its mean think time (time from its last completed request to its next
//!   request, an exponentially weighted mean, `cfq_update_io_thinktime`) exceeds the idle window after more
//!   than 80 samples' worth of weight.
//! - **Within a queue**, the request closest ahead of the head is served next; one behind it within 16 MiB
//!   (`cfq_back_max`) counts twice its distance (`cfq_back_penalty`); when none is within reach, the lowest
//!   sector (wrap around), as `cfq_choose_req`. Once per slice, a request older than its FIFO deadline
//!   (125 ms for a process queue, 250 ms for the asynchronous one, `cfq_fifo_expire`) goes first.
//!
//! Simplified: one request at a time at the device (the disk of seed `000_*` is a PATA drive without command
//! queueing), so the kernel's dispatch quantum and in-driver depth do not arise; every process has the same
//! priority, so there is one round-robin list and no preemption (2.6.14 preempts only for queues of another
//! class or for a synchronous request while an asynchronous queue is served, which the seed's read-only
//! benchmarks never meet); jiffies are nanoseconds.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// The queue of requests no process waits for in the kernel's sense: writes.
pub(crate) const ASYNC_QUEUE: u32 = u32::MAX;

const MS: u64 = 1_000_000;
/// `cfq_slice_async` (HZ/25); `cfq_slice_sync` is [`CfqTuning::slice_ns`].
const SLICE_ASYNC_NS: u64 = 40 * MS;
/// `cfq_prio_to_maxrq` for priority 4 with `cfq_slice_async_rq` = 2: 2 × (2 + 2 × 3).
const ASYNC_MAX_REQUESTS: u64 = 16;
#[cfg(test)]
const SLICE_IDLE_NS: u64 = CfqTuning::LINUX_2_6_14.idle_ns;
/// `cfq_fifo_expire` (HZ/8 synchronous, HZ/4 asynchronous).
const FIFO_EXPIRE_SYNC_NS: u64 = 125 * MS;
const FIFO_EXPIRE_ASYNC_NS: u64 = 250 * MS;
/// `cfq_back_max` (16 MiB) in 512-byte sectors, and `cfq_back_penalty`.
const BACK_MAX_SECTORS: u64 = 16 * 1024 * 2;
const BACK_PENALTY: u64 = 2;
/// `sample_valid`: the think-time mean counts once the samples' weight passes 80 (of 256).
const SAMPLES_VALID: u64 = 80;

/// A queued request as CFQ indexes it: (start sector, arrival sequence), the device queue's key.
pub(crate) type ReqKey = (u64, u64);

#[derive(Debug)]
struct Queue {
    /// Queued requests in sector order.
    sorted: BTreeSet<ReqKey>,
    /// Queued requests in arrival order: (sequence, sector, arrival time).
    fifo: BTreeSet<(u64, u64, u64)>,
    /// Position in the round-robin list while it has requests: (last served, insertion order).
    rr: Option<(u64, u64)>,
    service_last: u64,
    idle_window: bool,
    ttime_samples: u64,
    ttime_total: u64,
    ttime_mean: u64,
    /// When the process's last read completed (its first request's arrival before any).
    last_end: u64,
}

impl Queue {
    fn new(now: u64) -> Queue {
        Queue {
            sorted: BTreeSet::new(),
            fifo: BTreeSet::new(),
            rr: None,
            service_last: 0,
            idle_window: true,
            ttime_samples: 0,
            ttime_total: 0,
            ttime_mean: 0,
            last_end: now,
        }
    }

    /// `cfq_update_io_thinktime` and `cfq_update_idle_window` for a read arriving at `now`, with an idle window
    /// of `idle_ns` (0: never wait).
    fn think(&mut self, now: u64, idle_ns: u64) {
        if idle_ns == 0 {
            self.idle_window = false;
            return;
        }
        let ttime = now.saturating_sub(self.last_end).min(2 * idle_ns);
        self.ttime_samples = (7 * self.ttime_samples + 256) / 8;
        self.ttime_total = (7 * self.ttime_total + 256 * ttime) / 8;
        self.ttime_mean = (self.ttime_total + 128) / self.ttime_samples;
        if self.ttime_samples > SAMPLES_VALID {
            self.idle_window = self.ttime_mean <= idle_ns;
        }
    }
}

#[derive(Debug)]
struct Active {
    queue: u32,
    /// Set at the slice's first dispatch.
    slice_end: Option<u64>,
    /// Waiting for the process's next request until then (the idle timer).
    wait_until: Option<u64>,
    /// The FIFO was checked and an expired request served this slice.
    fifo_expired: bool,
    dispatched: u64,
}

/// What the scheduler wants the device to do now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pick {
    /// Serve this request.
    Dispatch(ReqKey),
    /// Stay idle and call back at this time (an idle timer was armed).
    Arm(u64),
    /// Stay idle (nothing queued, or a timer is already armed).
    Nothing,
}

/// CFQ's two time constants that matter for reads: the slice a process queue gets and the idle window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CfqTuning {
    /// `cfq_slice_sync`: how long a process queue is served, in nanoseconds.
    pub slice_ns: u64,
    /// `cfq_slice_idle`: how long the disk waits for the served process's next read, in nanoseconds (0: never).
    pub idle_ns: u64,
}

impl CfqTuning {
    /// Linux 2.6.14's values: 100 ms slices (HZ/10), a 10 ms idle window (HZ/100).
    pub const LINUX_2_6_14: CfqTuning = CfqTuning { slice_ns: 100 * MS, idle_ns: 10 * MS };
}

impl Default for CfqTuning {
    fn default() -> Self {
        Self::LINUX_2_6_14
    }
}

#[derive(Debug, Default)]
pub(crate) struct Cfq {
    tuning: CfqTuning,
    /// Looked up by queue key only, never iterated.
    queues: HashMap<u32, Queue>,
    /// Queues with requests, by (last served, insertion order).
    rr: BTreeMap<(u64, u64), u32>,
    order: u64,
    active: Option<Active>,
}

impl Cfq {
    pub(crate) fn new(tuning: CfqTuning) -> Self {
        Cfq { tuning, ..Cfq::default() }
    }

    fn rr_remove(&mut self, k: u32) {
        if let Some(pos) = self.queues.get_mut(&k).and_then(|q| q.rr.take()) {
            self.rr.remove(&pos);
        }
    }

    /// Puts queue `k` (back) into the round-robin list by its `service_last` (`cfq_resort_rr_list`).
    fn rr_insert(&mut self, k: u32) {
        self.rr_remove(k);
        let Some(q) = self.queues.get_mut(&k) else { return };
        let pos = (q.service_last, self.order);
        self.order += 1;
        q.rr = Some(pos);
        self.rr.insert(pos, k);
    }

    /// A request `key` of queue `k` arrives at `now` (a read when `read`).
    pub fn add(&mut self, k: u32, key: ReqKey, read: bool, now: u64) {
        let q = self.queues.entry(k).or_insert_with(|| Queue::new(now));
        q.sorted.insert(key);
        q.fifo.insert((key.1, key.0, now));
        let on_rr = q.rr.is_some();
        if read && k != ASYNC_QUEUE {
            q.think(now, self.tuning.idle_ns);
        }
        if !on_rr {
            self.rr_insert(k);
        }
    }

    /// Request `key` of queue `k`, which arrived at `queued_at`, leaves the queue for the disk.
    pub fn remove(&mut self, k: u32, key: ReqKey, queued_at: u64) {
        let Some(q) = self.queues.get_mut(&k) else { return };
        q.sorted.remove(&key);
        q.fifo.remove(&(key.1, key.0, queued_at));
        if q.sorted.is_empty() {
            self.rr_remove(k);
        }
    }

    /// A request of queue `k` completed at `now` (`cfq_completed_request`).
    pub fn completed(&mut self, k: u32, read: bool, now: u64) {
        let Some(q) = self.queues.get_mut(&k) else { return };
        if read {
            q.last_end = now;
        }
        q.service_last = now;
        if q.rr.is_some() {
            self.rr_insert(k);
        }
    }

    fn expire(&mut self, now: u64) {
        let Some(a) = self.active.take() else { return };
        if let Some(q) = self.queues.get_mut(&a.queue) {
            q.service_last = now;
            if q.rr.is_some() {
                self.rr_insert(a.queue);
            }
        }
    }

    /// The next request to serve with the disk head at `head` (`cfq_select_queue` and the dispatch).
    pub fn select(&mut self, now: u64, head: u64) -> Pick {
        loop {
            let Some(a) = self.active.as_mut() else {
                let Some((_, &k)) = self.rr.first_key_value() else { return Pick::Nothing };
                self.active =
                    Some(Active { queue: k, slice_end: None, wait_until: None, fifo_expired: false, dispatched: 0 });
                continue;
            };
            let k = a.queue;
            let Some(q) = self.queues.get(&k) else {
                self.active = None;
                continue;
            };
            let slice_over = a.slice_end.is_some_and(|e| now > e);
            if a.wait_until.is_none() && slice_over {
                self.expire(now);
                continue;
            }
            if !q.sorted.is_empty() {
                a.wait_until = None;
                let expire = if k == ASYNC_QUEUE { FIFO_EXPIRE_ASYNC_NS } else { FIFO_EXPIRE_SYNC_NS };
                let old = q.fifo.first().filter(|f| !a.fifo_expired && now > f.2 + expire).map(|f| (f.1, f.0));
                if old.is_some() {
                    a.fifo_expired = true;
                }
                let key = old.unwrap_or_else(|| choose(&q.sorted, head));
                a.dispatched += 1;
                let slice = if k == ASYNC_QUEUE { SLICE_ASYNC_NS } else { self.tuning.slice_ns };
                a.slice_end.get_or_insert(now + slice);
                if k == ASYNC_QUEUE && a.dispatched >= ASYNC_MAX_REQUESTS {
                    self.expire(now);
                }
                return Pick::Dispatch(key);
            }
            match a.wait_until {
                // A timer is armed and not yet due (an earlier wait's timer firing late changes nothing).
                Some(t) if now < t => return Pick::Nothing,
                Some(_) => {
                    // The idle timer fired with no request: keep waiting while no one else wants the disk.
                    let t = now + self.tuning.idle_ns;
                    if !slice_over && self.rr.is_empty() && self.tuning.idle_ns > 0 {
                        a.wait_until = Some(t);
                        return Pick::Arm(t);
                    }
                }
                None => {
                    if k != ASYNC_QUEUE && q.idle_window && a.slice_end.is_some_and(|e| now < e) {
                        let t = now + self.tuning.idle_ns;
                        a.wait_until = Some(t);
                        return Pick::Arm(t);
                    }
                }
            }
            self.expire(now);
        }
    }
}

/// `cfq_choose_req` over a queue: the nearest request ahead of `head`, or behind it within `cfq_back_max` at
/// twice the distance; when neither is in reach, the lowest sector.
fn choose(sorted: &BTreeSet<ReqKey>, head: u64) -> ReqKey {
    let ahead = sorted.range((head, 0)..).next().copied();
    let behind = sorted.range(..(head, 0)).next_back().copied().filter(|b| b.0 + BACK_MAX_SECTORS >= head);
    match (ahead, behind) {
        (Some(a), Some(b)) => {
            let da = a.0 - head;
            let db = (head - b.0) * BACK_PENALTY;
            // Equal distances: the higher sector, as the kernel's tie-break.
            if da <= db {
                a
            } else {
                b
            }
        }
        (Some(a), None) => a,
        (None, Some(b)) => b,
        (None, None) => sorted.first().copied().unwrap_or((head, 0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue_of(cfq: &mut Cfq, k: u32, sectors: &[u64], now: u64) {
        for (i, &s) in sectors.iter().enumerate() {
            cfq.add(k, (s, u64::from(k) * 1000 + i as u64), true, now);
        }
    }

    /// Dispatches (and completes at once) until the scheduler stops; returns the sectors served.
    fn drain(cfq: &mut Cfq, now: &mut u64, step: u64) -> (Vec<u64>, Pick) {
        let mut served = Vec::new();
        loop {
            match cfq.select(*now, 0) {
                Pick::Dispatch(key) => {
                    let k = (key.1 / 1000) as u32;
                    cfq.remove(k, key, 0);
                    *now += step;
                    cfq.completed(k, true, *now);
                    served.push(key.0);
                }
                other => return (served, other),
            }
        }
    }

    #[test]
    fn a_slice_serves_one_process_then_the_next_in_round_robin() {
        let mut cfq = Cfq::default();
        queue_of(&mut cfq, 1, &[100, 300, 200], 0);
        queue_of(&mut cfq, 2, &[50, 60], 0);
        let mut now = 0;
        // Process 1's queue in sector order, then (it runs empty and waits 10 ms for process 1, timer due).
        let (served, pick) = drain(&mut cfq, &mut now, MS);
        assert_eq!(served, vec![100, 200, 300]);
        assert_eq!(pick, Pick::Arm(3 * MS + SLICE_IDLE_NS));
        // Before the timer, nothing; when it fires with process 2 waiting, the slice ends and process 2 runs.
        assert_eq!(cfq.select(now + MS, 0), Pick::Nothing);
        now += SLICE_IDLE_NS;
        let (served, _) = drain(&mut cfq, &mut now, MS);
        assert_eq!(served, vec![50, 60]);
    }

    #[test]
    fn a_request_from_the_waited_for_process_goes_at_once() {
        let mut cfq = Cfq::default();
        queue_of(&mut cfq, 1, &[100], 0);
        queue_of(&mut cfq, 2, &[5000], 0);
        let mut now = 0;
        let (served, pick) = drain(&mut cfq, &mut now, MS);
        assert_eq!((served, pick), (vec![100], Pick::Arm(MS + SLICE_IDLE_NS)));
        now += 2 * MS;
        cfq.add(1, (132, 1001), true, now);
        assert_eq!(cfq.select(now, 132), Pick::Dispatch((132, 1001)));
    }

    #[test]
    fn the_slice_ends_after_100_ms_even_with_requests_left() {
        let mut cfq = Cfq::default();
        let many: Vec<u64> = (0..200).map(|i| i * 8).collect();
        queue_of(&mut cfq, 1, &many, 0);
        queue_of(&mut cfq, 2, &[1_000_000], 0);
        let mut now = 0;
        let mut first_two = Vec::new();
        // 1 ms per request: process 1 gets requests at 0..=100 ms (101: "after" the end), then process 2.
        while first_two.len() < 103 {
            let key = match cfq.select(now, 0) {
                Pick::Dispatch(key) => key,
                // Process 2 ran empty: the disk waits for it, then goes back to process 1.
                Pick::Arm(t) => {
                    now = t;
                    continue;
                }
                Pick::Nothing => panic!("idle with work queued"),
            };
            let k = (key.1 / 1000) as u32;
            cfq.remove(k, key, 0);
            now += MS;
            cfq.completed(k, true, now);
            first_two.push(k);
        }
        assert!(first_two[..101].iter().all(|&k| k == 1), "{first_two:?}");
        assert_eq!(first_two[101], 2);
        assert_eq!(first_two[102], 1);
    }

    #[test]
    fn alone_the_waiting_continues_until_the_slice_ends() {
        let mut cfq = Cfq::default();
        queue_of(&mut cfq, 1, &[100], 0);
        let mut now = 0;
        let (_, pick) = drain(&mut cfq, &mut now, MS);
        assert_eq!(pick, Pick::Arm(11 * MS));
        // No one else has requests: the timer renews the wait.
        now = 11 * MS;
        assert_eq!(cfq.select(now, 0), Pick::Arm(21 * MS));
        // Past the slice's end (100 ms after its first dispatch), the queue expires.
        now = 101 * MS;
        assert_eq!(cfq.select(now, 0), Pick::Nothing);
        assert!(cfq.active.is_none());
    }

    #[test]
    fn a_process_that_thinks_longer_than_the_idle_window_is_not_waited_for() {
        let mut cfq = Cfq::default();
        let mut now = 0;
        for i in 0..30u64 {
            cfq.add(1, (i * 8, 1000 + i), true, now);
            let Pick::Dispatch(key) = cfq.select(now, 0) else { panic!() };
            cfq.remove(1, key, now);
            now += MS;
            cfq.completed(1, true, now);
            if i < 29 {
                now += 30 * MS;
            }
            cfq.active = None;
        }
        let q = &cfq.queues[&1];
        assert!(!q.idle_window && q.ttime_mean > SLICE_IDLE_NS, "{q:?}");
    }

    #[test]
    fn an_expired_request_goes_first_once_per_slice_and_writes_share_one_queue() {
        let mut cfq = Cfq::default();
        cfq.add(ASYNC_QUEUE, (9000, 1), false, 0);
        cfq.add(ASYNC_QUEUE, (100, 2), false, 0);
        cfq.add(ASYNC_QUEUE, (200, 3), false, 0);
        // Past 250 ms, the oldest (sector 9000) goes first although the head is at 0; then the nearest to the
        // head again: 200, behind it but within 16 MiB.
        let now = 300 * MS;
        assert_eq!(cfq.select(now, 0), Pick::Dispatch((9000, 1)));
        cfq.remove(ASYNC_QUEUE, (9000, 1), 0);
        assert_eq!(cfq.select(now, 9008), Pick::Dispatch((200, 3)));
        cfq.remove(ASYNC_QUEUE, (200, 3), 0);
        assert_eq!(cfq.select(now, 208), Pick::Dispatch((100, 2)));
    }

    #[test]
    fn choose_prefers_short_backward_seeks_at_twice_their_distance() {
        let set: BTreeSet<ReqKey> = [(1000, 0), (1300, 1), (700, 2)].into_iter().collect();
        // Head at 1100: ahead 200, behind 100 × 2 = 200: ahead wins ties.
        assert_eq!(choose(&set, 1100), (1300, 1));
        // Head at 1050: ahead 250, behind 50 × 2 = 100.
        assert_eq!(choose(&set, 1050), (1000, 0));
        // Nothing ahead and all behind beyond 16 MiB: the lowest sector.
        assert_eq!(choose(&set, 1300 + BACK_MAX_SECTORS + 10), (700, 2));
    }
}
