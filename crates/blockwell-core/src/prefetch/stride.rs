//! A constant-stride detector per stream (the reference-prediction-table idea of Chen & Baer, "Effective
//! hardware-based data prefetching for high-performance processors", IEEE TC 1995, applied to block requests).
//!
//! Linux read-ahead only recognises sequential streams, so 4 KiB reads every 8 KiB, or every 512 KiB (seed
//! `000_*`'s "4 KB Strided Read" and "512 KB Strided Read", which "the Original Kernel ... does not detect"),
//! get no prefetching at all. This prefetcher remembers, per stream, the first block of the last request and
//! the last *stride* (difference of first blocks, positive or negative). A request whose stride equals the last
//! one *confirms* it; after `confirm` confirmations (default 2: three requests equally spaced) it proposes, as
//! asynchronous fetches of the request's size, the next strided requests up to `depth_now` strides ahead.
//! `depth_now` ramps up: 1 at the first confirmed access, doubling on each further one, up to `depth`
//! (default 8). Requests already proposed are not proposed again, so in the steady state each access proposes
//! one request `depth` strides ahead. A different stride restarts the detection (and the ramp). A contiguous
//! stream (stride = request size) is a stride like any other. Nothing is proposed before block 0 or past
//! [`Demand::end`]; writes are ignored.
//!
//! Detection is per stream: a driver that interleaves several strided processes on one stream (a volume) should
//! give each process its own stream.
//!
//! **Parameters** (`stride(confirm=2,depth=8)`): `confirm` confirmations before prefetching (>= 1, default 2),
//! `depth` largest number of strided requests ahead (>= 1, default 8).
//!
//! **State**: 48 bytes per stream (last first block, stride, confirmations, current depth, farthest request
//! proposed) plus the stream id and control byte in the table.

use super::{push_fetch, BlockView, Demand, Fetch, Prefetcher, PrefetcherConfig, U64Map};
use crate::cache::Op;
use serde::{Deserialize, Serialize};

/// Parameters of [`Stride`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StrideConfig {
    /// Confirmations of a stride before prefetching.
    pub confirm: u32,
    /// Largest number of strided requests proposed ahead.
    pub depth: u64,
}

impl Default for StrideConfig {
    fn default() -> Self {
        StrideConfig { confirm: 2, depth: 8 }
    }
}

impl PrefetcherConfig for StrideConfig {
    fn check(&self) -> Result<(), String> {
        if self.confirm == 0 {
            return Err("confirm: must be at least 1".into());
        }
        if self.depth == 0 || self.depth > 1 << 20 {
            return Err("depth: must be between 1 and 2^20".into());
        }
        Ok(())
    }

    fn build(&self, _block_size: u64) -> Box<dyn Prefetcher> {
        Box::new(Stride::new(self.clone()))
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Stream {
    last: u64,
    stride: i64,
    confirms: u32,
    depth_now: u64,
    /// First block of the farthest strided request proposed, when any.
    ahead: Option<u64>,
}

/// The stride detector (see the module docs).
#[derive(Debug)]
pub struct Stride {
    config: StrideConfig,
    streams: U64Map<Stream>,
}

impl Stride {
    pub fn new(config: StrideConfig) -> Self {
        Stride { config, streams: U64Map::default() }
    }

    /// The stride (in blocks) a stream is confirmed on, when it is.
    pub fn stride(&self, stream: u64) -> Option<i64> {
        self.streams.get(&stream).filter(|s| s.confirms >= self.config.confirm).map(|s| s.stride)
    }
}

impl Prefetcher for Stride {
    fn on_demand(&mut self, d: &Demand, _view: &dyn BlockView, out: &mut Vec<Fetch>) {
        if d.op != Op::Read || d.n == 0 {
            return;
        }
        let b = d.first.block();
        let Some(st) = self.streams.get_mut(&d.stream) else {
            self.streams.insert(d.stream, Stream { last: b, ..Stream::default() });
            return;
        };
        let delta = b as i128 - st.last as i128;
        st.last = b;
        if delta == 0 {
            return;
        }
        let Ok(delta) = i64::try_from(delta) else {
            *st = Stream { last: b, ..Stream::default() };
            return;
        };
        if delta == st.stride {
            st.confirms = st.confirms.saturating_add(1);
        } else {
            *st = Stream { last: b, stride: delta, confirms: 1, depth_now: 0, ahead: None };
        }
        if st.confirms < self.config.confirm {
            return;
        }
        st.depth_now = if st.depth_now == 0 { 1 } else { st.depth_now.saturating_mul(2) }.min(self.config.depth);
        for i in 1..=st.depth_now {
            let Some(s) = (i as i128).checked_mul(delta as i128).map(|x| b as i128 + x) else { break };
            if s < 0 || s >= d.end as i128 || s > u64::MAX as i128 {
                break;
            }
            let s = s as u64;
            let already = match st.ahead {
                Some(a) if delta > 0 => s <= a,
                Some(a) => s >= a,
                None => false,
            };
            if already {
                continue;
            }
            push_fetch(out, d.first.volume(), s, s.saturating_add(d.n).min(d.end), false);
            st.ahead = Some(s);
        }
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

    fn strided(start: u64, stride: i64, n: u64, count: u64) -> Vec<(u64, u64)> {
        (0..count).map(|i| ((start as i64 + i as i64 * stride) as u64, n)).collect()
    }

    /// Fraction of the requests after the first `skip` whose blocks were all prefetched before the access.
    fn covered(reqs: &[(u64, u64)], fetches: &[Vec<Fetch>], skip: usize) -> f64 {
        let mut have = std::collections::BTreeSet::new();
        let mut hits = 0;
        for (i, (&(b, n), f)) in reqs.iter().zip(fetches).enumerate() {
            if i >= skip && (b..b + n).all(|x| have.contains(&x)) {
                hits += 1;
            }
            for x in f {
                have.extend(x.first.block()..x.first.block() + x.n);
            }
        }
        hits as f64 / (reqs.len() - skip) as f64
    }

    #[test]
    fn detects_4k_reads_every_8k_and_ramps_up() {
        let mut p = Stride::new(StrideConfig::default());
        let reqs = strided(0, 2, 1, 200);
        let f = run(&mut p, &reqs, 1 << 20);
        assert!(f[0].is_empty() && f[1].is_empty(), "one stride is not a pattern");
        assert_eq!(triples(&f[2]), [(6, 1, false)], "confirmed twice: depth 1");
        assert_eq!(triples(&f[3]), [(8, 1, false), (10, 1, false)], "depth 2");
        assert_eq!(triples(&f[4]), [(12, 1, false), (14, 1, false), (16, 1, false)], "depth 4, 10 already proposed");
        assert_eq!(triples(&f[10]), [(20 + 16, 1, false)], "steady state: one request 8 strides ahead");
        assert_eq!(p.stride(1), Some(2));
        assert_eq!(covered(&reqs, &f, 3), 1.0);
    }

    #[test]
    fn detects_512k_strides_of_4k_and_64k_reads() {
        for n in [1, 16] {
            let mut p = Stride::new(StrideConfig { confirm: 2, depth: 4 });
            let reqs = strided(1000, 128, n, 100);
            let f = run(&mut p, &reqs, 1 << 30);
            assert_eq!(triples(&f[2]), [(1000 + 3 * 128, n, false)]);
            assert!(f.iter().flatten().all(|x| x.n == n && (x.first.block() - 1000) % 128 == 0));
            assert_eq!(covered(&reqs, &f, 3), 1.0);
        }
    }

    #[test]
    fn backward_strides_stop_at_block_0_and_changes_restart() {
        let mut p = Stride::new(StrideConfig::default());
        let reqs = strided(20, -4, 1, 6); // 20 16 12 8 4 0
        let f = run(&mut p, &reqs, 1000);
        assert_eq!(triples(&f[2]), [(8, 1, false)]);
        assert_eq!(triples(&f[3]), [(4, 1, false), (0, 1, false)]);
        assert!(f[4].is_empty() && f[5].is_empty(), "nothing before block 0");
        // Random requests never confirm a stride.
        let mut p = Stride::new(StrideConfig::default());
        let f = run(&mut p, &[(5, 1), (90, 1), (13, 1), (400, 1), (7, 1), (77, 1)], 1000);
        assert!(f.iter().all(|x| x.is_empty()));
        assert_eq!(p.stride(1), None);
    }

    #[test]
    fn never_past_the_end() {
        let mut p = Stride::new(StrideConfig::default());
        let f = run(&mut p, &strided(0, 10, 4, 10), 95);
        for x in f.iter().flatten() {
            assert!(x.first.block() + x.n <= 95, "{x:?}");
        }
    }

    #[test]
    fn state_size_is_as_documented() {
        assert_eq!(std::mem::size_of::<Stream>(), 48);
    }
}
