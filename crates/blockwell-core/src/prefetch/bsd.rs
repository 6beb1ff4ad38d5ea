//! 4.4BSD clustering read-ahead, as seed `001_*` §2.2 describes it (McKusick et al., *The Design and
//! Implementation of the 4.4BSD Operating System*, `cluster_read` in `vfs_cluster.c`).
//!
//! The paper's rules, with its words:
//!
//! 1. **Sequential detection.** "An access is considered sequential if it is either to the last accessed block,
//!    or a block immediately following the last accessed block, i.e., access to a block B is sequential if last
//!    access was to block B or B-1." For a multi-block request, B is its first block and the last accessed block
//!    is the last block of the previous request. The first access of a stream is sequential when it is to block
//!    0 (the last block of a fresh vnode is taken as -1, as `v_lastr` makes block 0 follow it).
//! 2. **Prefetching and doubling.** "For sequential accesses, the file system prefetches one or more additional
//!    blocks. The number of blocks that are prefetched is doubled on each disk read. However, it does not exceed
//!    the maximum cluster size (usually 32) or the remaining blocks of a file." A disk read happens when a block
//!    of the request is absent: the read-ahead of the current size follows the request and is read with it
//!    (`sync`). When the request hits but reaches the most recent read-ahead run, the next run is read
//!    asynchronously after the prefetched region (`cluster_read`'s asynchronous read-ahead). Each read doubles
//!    the size, starting from `initial` (default 1) up to `max` (default 32); nothing past [`Demand::end`].
//! 3. **Halving.** "It may happen that a prefetched block is evicted before it is used even once. If the
//!    accesses remain sequential, the block will be subsequently accessed but will not be found in the cache
//!    ... This is addressed by halving the number of blocks to be prefetched on each access whenever such an
//!    event occurs." Detected as a sequential access to a block inside the region this stream prefetched that
//!    the [`BlockView`] reports absent.
//! 4. **No prefetching on non-sequential accesses.** "If the access is not sequential, no prefetching is used";
//!    the size restarts at `initial` and the prefetched region is forgotten.
//!
//! "If the file only occupies a fraction of the last block allocated to it, this final fragmented block is not
//! prefetched": drivers model it by passing an [`Demand::end`] that excludes a final fragment. Writes are
//! ignored.
//!
//! **Parameters** (`bsd(initial=1,max=32)`).
//!
//! **State**: 40 bytes per stream (five `u64`) plus the stream id and control byte in the table.

use super::{push_fetch, state_of, BlockState, BlockView, Demand, Fetch, Prefetcher, PrefetcherConfig, U64Map};
use crate::cache::Op;
use serde::{Deserialize, Serialize};

/// Parameters of [`Bsd`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BsdConfig {
    /// Read-ahead size of the first prefetch of a sequential run, in blocks.
    pub initial: u64,
    /// Maximum cluster size, in blocks.
    pub max: u64,
}

impl Default for BsdConfig {
    fn default() -> Self {
        BsdConfig { initial: 1, max: 32 }
    }
}

impl PrefetcherConfig for BsdConfig {
    fn check(&self) -> Result<(), String> {
        if self.max == 0 {
            return Err("max: must be at least 1 block".into());
        }
        if self.initial == 0 || self.initial > self.max {
            return Err(format!("initial: must be between 1 and max ({})", self.max));
        }
        Ok(())
    }

    fn build(&self, _block_size: u64) -> Box<dyn Prefetcher> {
        Box::new(Bsd::new(self.clone()))
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Stream {
    /// Last block accessed.
    last: u64,
    /// Read-ahead size of the next disk read.
    ra: u64,
    /// Region prefetched by the current sequential run: `lo .. hi`; `run` starts the most recent read-ahead.
    lo: u64,
    run: u64,
    hi: u64,
}

/// 4.4BSD read-ahead (see the module docs).
#[derive(Debug)]
pub struct Bsd {
    config: BsdConfig,
    streams: U64Map<Stream>,
}

impl Bsd {
    pub fn new(config: BsdConfig) -> Self {
        Bsd { config, streams: U64Map::default() }
    }

    /// The read-ahead size of a stream's next disk read.
    pub fn next_size(&self, stream: u64) -> Option<u64> {
        self.streams.get(&stream).map(|s| s.ra)
    }
}

impl Prefetcher for Bsd {
    fn on_demand(&mut self, d: &Demand, view: &dyn BlockView, out: &mut Vec<Fetch>) {
        if d.op != Op::Read || d.n == 0 {
            return;
        }
        let b = d.first.block();
        let last = b.saturating_add(d.n - 1);
        let c = &self.config;
        let st = match self.streams.get_mut(&d.stream) {
            Some(st) => {
                let seq = b == st.last || Some(b) == st.last.checked_add(1);
                if !seq {
                    *st = Stream { last, ra: c.initial, ..Stream::default() };
                    return;
                }
                st
            }
            None => {
                let st = Stream { last, ra: c.initial, ..Stream::default() };
                self.streams.insert(d.stream, st);
                if b != 0 {
                    return;
                }
                match self.streams.get_mut(&d.stream) {
                    Some(st) => st,
                    None => return,
                }
            }
        };
        st.last = last;
        let absent = |x: u64| state_of(view, d.first, x) == BlockState::Absent;
        if (b..=last).any(|x| x >= st.lo && x < st.hi && absent(x)) {
            st.ra = (st.ra / 2).max(1); // a prefetched block was evicted unused
        }
        let miss = (b..=last).any(absent);
        let (start, sync) = if miss {
            (last.saturating_add(1), true)
        } else if last.saturating_add(1) >= st.run && st.hi > st.lo {
            (st.hi.max(last.saturating_add(1)), false)
        } else {
            return;
        };
        let stop = start.saturating_add(st.ra).min(d.end);
        if push_fetch(out, d.first.volume(), start, stop, sync) == 0 {
            return;
        }
        if st.hi <= st.lo || start > st.hi {
            st.lo = start;
        }
        st.run = start;
        st.hi = stop;
        st.ra = st.ra.saturating_mul(2).min(c.max);
    }

    fn end_stream(&mut self, stream: u64) {
        self.streams.remove(&stream);
    }

    fn heap_bytes(&self) -> usize {
        self.streams.capacity() * (std::mem::size_of::<(u64, Stream)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use super::*;

    #[test]
    fn sequential_reads_double_up_to_the_cluster_size() {
        let mut p = Bsd::new(BsdConfig::default());
        let reqs: Vec<(u64, u64)> = (0..150).map(|b| (b, 1)).collect();
        let f = run(&mut p, &reqs, 10_000);
        let all: Vec<(u64, u64, bool)> = f.iter().flat_map(|x| triples(x)).collect();
        assert_eq!(
            all[..8],
            [
                (1, 1, true),
                (2, 2, false),
                (4, 4, false),
                (8, 8, false),
                (16, 16, false),
                (32, 32, false),
                (64, 32, false),
                (96, 32, false)
            ]
        );
    }

    #[test]
    fn non_sequential_accesses_prefetch_nothing() {
        let mut p = Bsd::new(BsdConfig::default());
        let f = run(&mut p, &[(5, 1), (50, 1), (20, 1), (7, 1)], 1000);
        assert!(f.iter().all(|x| x.is_empty()), "{f:?}");
        // B or B-1: a re-read of the last block and the next block are sequential.
        let f = run(&mut p, &[(8, 1), (8, 1)], 1000);
        assert_eq!(triples(&f[0]), [(9, 1, true)]);
    }

    #[test]
    fn halves_after_a_prefetched_block_was_evicted_unused() {
        let mut p = Bsd::new(BsdConfig::default());
        let mut view = SetView::default();
        let mut out = Vec::new();
        for b in 0..=7 {
            out.clear();
            let d = read(1, b, 1, 1000);
            p.on_demand(&d, &view, &mut out);
            view.complete(&d, &out);
        }
        // Prefetched so far: 1..32; the next read-ahead would be 32 blocks.
        assert_eq!(p.next_size(1), Some(32));
        // Block 8 was prefetched but evicted before use: the sequential access misses and the size halves.
        view.resident.remove(&k(8));
        out.clear();
        p.on_demand(&read(1, 8, 1, 1000), &view, &mut out);
        assert_eq!(triples(&out), [(9, 16, true)], "halved from 32, read with the miss");
        assert_eq!(p.next_size(1), Some(32), "doubled again by this read");
    }

    #[test]
    fn stops_at_the_end_of_the_file() {
        let mut p = Bsd::new(BsdConfig::default());
        let reqs: Vec<(u64, u64)> = (0..10).map(|b| (b, 1)).collect();
        let f = run(&mut p, &reqs, 6);
        assert!(f.iter().flatten().all(|x| x.first.block() + x.n <= 6));
        assert_eq!(f.iter().flatten().map(|x| x.n).sum::<u64>(), 5);
    }

    #[test]
    fn state_size_is_as_documented() {
        assert_eq!(std::mem::size_of::<Stream>(), 40);
    }
}
