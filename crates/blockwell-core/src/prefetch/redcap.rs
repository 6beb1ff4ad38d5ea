//! REDCAP's segment fetch as a prefetcher over any block policy (seed `000_*`; the segment cache itself and
//! its activation controller are in [`crate::redcap`]).
//!
//! On a read request with at least one absent block the prefetcher proposes, synchronously, every aligned
//! segment of `segment_kb` KiB that the request touches and that holds an absent block ("the prefetching is
//! performed only when a read operation takes places and a cache miss occurs. It is not performed during
//! write requests or on a cache hit"). Segments are clipped at [`Demand::end`]. The blocks then live in the
//! block cache under its own policy: this is how the live server offers "redcap" over LRU, ARC, ...; the
//! simulator's faithful REDCAP level is [`crate::redcap::Redcap`] (a segment cache with LRU over segments)
//! plus [`crate::redcap::RedcapControl`].
//!
//! The activation–deactivation algorithm is available here too: a driver that measures I/O times passes them
//! to [`Prefetcher::on_io_time`] (measured with the segment fetches, estimated without them while active; the
//! reverse while inactive), and while the controller says "off" the prefetcher proposes nothing;
//! [`RedcapPrefetch::segments_for`] still tells a driver what it would fetch, for the shadow estimate. (Through a
//! `dyn Prefetcher` that is not reachable; the simulator's REDCAP level uses [`crate::redcap::Redcap`], whose
//! segment state is the shadow by construction.)
//!
//! **Parameters** (`redcap(segment_kb=128,period=64,margin_pct=5,max_hold=64)`; `max_hold` is the controller's
//! back-off limit in periods, 0 for none: [`crate::redcap::RedcapControlConfig::max_hold_periods`]).
//!
//! **State**: 160 bytes in all (the segment size and the controller's sums and counters); nothing per stream,
//! no heap.

use super::{kib_to_blocks, push_fetch, state_of, BlockState, BlockView, Demand, Fetch, Prefetcher, PrefetcherConfig};
use crate::cache::Op;
use crate::redcap::{RedcapControl, RedcapControlConfig};
use serde::{Deserialize, Serialize};

/// Parameters of [`RedcapPrefetch`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedcapPrefetchConfig {
    /// Segment size in KiB (128 in the REDCAP paper).
    pub segment_kb: u64,
    /// Requests per activation decision.
    pub period: u64,
    /// Percentage by which the cache must lose (or win, while off) to switch.
    pub margin_pct: u64,
    /// Back-off limit in periods (0: none).
    pub max_hold: u64,
}

impl Default for RedcapPrefetchConfig {
    fn default() -> Self {
        let c = RedcapControlConfig::default();
        RedcapPrefetchConfig {
            segment_kb: 128,
            period: c.period,
            margin_pct: c.margin_pct,
            max_hold: c.max_hold_periods,
        }
    }
}

impl PrefetcherConfig for RedcapPrefetchConfig {
    fn check(&self) -> Result<(), String> {
        if self.segment_kb == 0 {
            return Err("segment_kb: must be at least 1".into());
        }
        if self.period == 0 {
            return Err("period: must be at least 1 request".into());
        }
        Ok(())
    }

    fn build(&self, block_size: u64) -> Box<dyn Prefetcher> {
        let control =
            RedcapControlConfig { period: self.period, margin_pct: self.margin_pct, max_hold_periods: self.max_hold };
        Box::new(RedcapPrefetch::new(kib_to_blocks(self.segment_kb, block_size), control))
    }
}

/// REDCAP's segment fetch on read misses (see the module docs).
#[derive(Clone, Debug)]
pub struct RedcapPrefetch {
    segment_blocks: u64,
    control: RedcapControl,
}

impl RedcapPrefetch {
    /// Segments of `segment_blocks` (>= 1) blocks; the controller decides every `control.period` requests (a
    /// zero period is taken as 1).
    pub fn new(segment_blocks: u64, control: RedcapControlConfig) -> Self {
        let control = RedcapControl::new_clamped(control);
        RedcapPrefetch { segment_blocks: segment_blocks.max(1), control }
    }

    pub fn control(&self) -> &RedcapControl {
        &self.control
    }
}

impl RedcapPrefetch {
    /// The segment reads the prefetcher proposes for `d` when active, whatever its state: while it is off, a
    /// driver feeds these to its shadow disk model to estimate the time with REDCAP.
    pub fn segments_for(&self, d: &Demand, view: &dyn BlockView, out: &mut Vec<Fetch>) {
        if d.op != Op::Read || d.n == 0 {
            return;
        }
        let s = self.segment_blocks;
        let b = d.first.block();
        let last = b.saturating_add(d.n - 1);
        let mut seg = b / s * s;
        loop {
            let lo = b.max(seg);
            let hi = last.min(seg.saturating_add(s - 1));
            if (lo..=hi).any(|x| state_of(view, d.first, x) == BlockState::Absent) {
                let stop = seg.saturating_add(s).min(d.end.max(hi.saturating_add(1)));
                push_fetch(out, d.first.volume(), seg, stop, true);
            }
            match seg.checked_add(s) {
                Some(next) if next <= last => seg = next,
                _ => break,
            }
        }
    }
}

impl Prefetcher for RedcapPrefetch {
    fn on_demand(&mut self, d: &Demand, view: &dyn BlockView, out: &mut Vec<Fetch>) {
        if self.control.is_active() {
            self.segments_for(d, view, out);
        }
    }

    fn on_io_time(&mut self, with_ns: u64, without_ns: u64) {
        self.control.observe(with_ns, without_ns);
    }

    fn is_active(&self) -> bool {
        self.control.is_active()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn fetches_touched_segments_on_a_miss() {
        let mut p = RedcapPrefetch::new(32, RedcapControlConfig { period: 4, margin_pct: 5, max_hold_periods: 0 });
        let mut view = SetView::default();
        let mut out = Vec::new();
        p.on_demand(&read(1, 30, 4, 1000), &view, &mut out);
        assert_eq!(triples(&out), [(0, 32, true), (32, 32, true)]);
        // A hit proposes nothing; a partial hit only the segment with the absent block.
        view.resident.extend((0..32).map(k));
        out.clear();
        p.on_demand(&read(1, 1, 2, 1000), &view, &mut out);
        assert!(out.is_empty());
        p.on_demand(&read(1, 30, 4, 1000), &view, &mut out);
        assert_eq!(triples(&out), [(32, 32, true)]);
        out.clear();
        p.on_demand(&read(1, 970, 1, 980), &SetView::default(), &mut out);
        assert_eq!(triples(&out), [(960, 20, true)], "clipped at the end");
    }

    #[test]
    fn switched_off_by_its_controller() {
        let mut p = RedcapPrefetch::new(32, RedcapControlConfig { period: 2, margin_pct: 5, max_hold_periods: 0 });
        assert!(Prefetcher::is_active(&p));
        p.on_io_time(300, 100);
        p.on_io_time(300, 100);
        assert!(!Prefetcher::is_active(&p));
        let mut out = Vec::new();
        p.on_demand(&read(1, 5, 1, 1000), &SetView::default(), &mut out);
        assert!(out.is_empty());
        assert_eq!(p.control().switches(), 1);
        p.segments_for(&read(1, 5, 1, 1000), &SetView::default(), &mut out);
        assert_eq!(triples(&out), [(0, 32, true)], "what it would fetch, for the shadow estimate");
        // The shadow says it would win: back on.
        p.on_io_time(10, 100);
        p.on_io_time(10, 100);
        assert!(Prefetcher::is_active(&p));
    }

    #[test]
    fn state_size_is_as_documented() {
        assert_eq!(std::mem::size_of::<RedcapPrefetch>(), 160);
    }
}
