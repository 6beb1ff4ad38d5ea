//! Prefetchers: one module per prefetcher behind the small [`Prefetcher`] trait. They observe and propose
//! (libCacheSim's `prefetcher_t` hooks): they see demand requests per stream (a file, a process or a volume),
//! first demand hits on prefetched blocks and evictions, and return block ranges to fetch. The driver (the
//! virtual-time simulator or the live server) decides what is admitted, the clusterer ([`crate::cluster`])
//! turns the fetches into device requests, and only the driver knows time: a prefetcher reads no clock.
//!
//! A driver calls, for each demand request, [`Prefetcher::on_demand`] *before* serving it, with a
//! [`BlockView`] that says which blocks are resident or still in flight; the returned [`Fetch`]es marked
//! `sync` are read together with the demand misses (the request waits for them), the others are issued
//! asynchronously.
//!
//! Adding a prefetcher is one new file and one line in [`PrefetcherKind`].

use crate::cache::Op;
use crate::key::BlockKey;
use crate::policy::Evicted;

/// Where a block is, as the driver knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// Neither cached nor being read.
    Absent,
    /// Cached.
    Resident,
    /// A read for it has been issued and has not completed (seed `001_*` §5.2).
    InFlight,
}

/// The driver's answer to "where is this block?".
pub trait BlockView {
    fn state(&self, key: BlockKey) -> BlockState;
}

/// A view for drivers without in-flight reads: every block is absent.
pub struct NothingCached;

impl BlockView for NothingCached {
    fn state(&self, _key: BlockKey) -> BlockState {
        BlockState::Absent
    }
}

/// One demand request as a prefetcher sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Demand {
    /// The stream the request belongs to: an open file, a process or a volume, as the driver chooses. Read-ahead
    /// state is kept per stream.
    pub stream: u64,
    pub op: Op,
    /// First block of the request.
    pub first: BlockKey,
    /// Number of blocks (>= 1).
    pub n: u64,
    /// One past the last block of the stream (a file's end), which read-ahead never crosses; `u64::MAX` when the
    /// stream is unbounded (a volume).
    pub end: u64,
}

/// Blocks the prefetcher wants read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fetch {
    pub first: BlockKey,
    pub n: u64,
    /// The demand request waits for these blocks (Linux 2.4's synchronous read-ahead group); otherwise the read
    /// is asynchronous.
    pub sync: bool,
}

/// A prefetcher: observes demand requests and proposes block ranges.
pub trait Prefetcher: Send {
    /// A demand request is about to be served. Push the ranges to read into `out` (it is not cleared). Ranges may
    /// include blocks that are resident or in flight; the driver skips those.
    fn on_demand(&mut self, demand: &Demand, view: &dyn BlockView, out: &mut Vec<Fetch>);

    /// A block brought by a prefetch was accessed on demand for the first time.
    fn on_prefetch_hit(&mut self, stream: u64, key: BlockKey) {
        let _ = (stream, key);
    }

    /// A block left the cache.
    fn on_evict(&mut self, evicted: &Evicted) {
        let _ = evicted;
    }

    /// The stream ended (file closed): forget its state.
    fn end_stream(&mut self, stream: u64) {
        let _ = stream;
    }

    /// Bytes of heap the prefetcher's state uses.
    fn heap_bytes(&self) -> usize {
        0
    }
}

/// No prefetching.
#[derive(Clone, Debug, Default)]
pub struct NoPrefetch;

impl Prefetcher for NoPrefetch {
    fn on_demand(&mut self, _demand: &Demand, _view: &dyn BlockView, _out: &mut Vec<Fetch>) {}
}
