//! One-block lookahead (OBL; A. J. Smith, "Sequentiality and prefetching in database systems", TODS 1978, and
//! "Cache memories", Computing Surveys 1982: *prefetch on miss* and *always prefetch*).
//!
//! On a read request `B ..= L` the prefetcher proposes blocks `L+1 ..= L+blocks`: only when a block of the
//! request is absent (a miss; the default, `every_access=false`), or on every read (`every_access=true`). The
//! fetch is asynchronous unless `sync=true` (then it is read together with the demand miss and the clusterer
//! can merge them into one device request). Writes are ignored; nothing is proposed past [`Demand::end`].
//!
//! **Parameters** (`obl(blocks=1,every_access=false,sync=false)`): `blocks` lookahead (default 1),
//! `every_access` (default false), `sync` (default false).
//!
//! **State**: none per stream.

use super::{push_fetch, state_of, BlockState, BlockView, Demand, Fetch, Prefetcher, PrefetcherConfig};
use crate::cache::Op;
use serde::{Deserialize, Serialize};

/// Parameters of [`Obl`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OblConfig {
    /// Blocks fetched after the request.
    pub blocks: u64,
    /// Prefetch on every read, not only on misses.
    pub every_access: bool,
    /// Read the lookahead with the demand miss (synchronously).
    pub sync: bool,
}

impl Default for OblConfig {
    fn default() -> Self {
        OblConfig { blocks: 1, every_access: false, sync: false }
    }
}

impl PrefetcherConfig for OblConfig {
    fn check(&self) -> Result<(), String> {
        if self.blocks == 0 {
            return Err("blocks: must be at least 1".into());
        }
        Ok(())
    }

    fn build(&self, _block_size: u64) -> Box<dyn Prefetcher> {
        Box::new(Obl { config: self.clone() })
    }
}

/// One-block lookahead (see the module docs).
#[derive(Clone, Debug)]
pub struct Obl {
    config: OblConfig,
}

impl Obl {
    pub fn new(config: OblConfig) -> Self {
        Obl { config }
    }
}

impl Prefetcher for Obl {
    fn on_demand(&mut self, d: &Demand, view: &dyn BlockView, out: &mut Vec<Fetch>) {
        if d.op != Op::Read || d.n == 0 {
            return;
        }
        let b = d.first.block();
        let last = b.saturating_add(d.n - 1);
        let miss = || (b..=last).any(|x| state_of(view, d.first, x) == BlockState::Absent);
        if self.config.every_access || miss() {
            let start = last.saturating_add(1);
            let stop = start.saturating_add(self.config.blocks).min(d.end);
            push_fetch(out, d.first.volume(), start, stop, self.config.sync);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn fetches_the_next_block_on_a_miss_only() {
        let mut p = Obl::new(OblConfig::default());
        let mut view = SetView::default();
        let mut out = Vec::new();
        p.on_demand(&read(1, 10, 2, 100), &view, &mut out);
        assert_eq!(triples(&out), [(12, 1, false)]);
        view.resident.extend([k(10), k(11), k(12)]);
        out.clear();
        p.on_demand(&read(1, 10, 2, 100), &view, &mut out);
        assert!(out.is_empty(), "a hit prefetches nothing");
        p.on_demand(&read(1, 99, 1, 100), &SetView::default(), &mut out);
        assert!(out.is_empty(), "never past the end");
    }

    #[test]
    fn every_access_and_sync_variants() {
        let mut p = Obl::new(OblConfig { blocks: 2, every_access: true, sync: true });
        let mut view = SetView::default();
        view.resident.insert(k(5));
        let mut out = Vec::new();
        p.on_demand(&read(1, 5, 1, 100), &view, &mut out);
        assert_eq!(triples(&out), [(6, 2, true)]);
        let mut d = read(1, 5, 1, 100);
        d.op = Op::Write;
        out.clear();
        p.on_demand(&d, &view, &mut out);
        assert!(out.is_empty());
    }
}
