//! Miss-ratio curves of any policy by simulating one cache per size in one pass ([`crate::replay`]); with a
//! sampling rate R, miniature simulation (Waldspurger, Saemundsson, Ahmad and Park, "Cache Modeling and
//! Optimization using Miniature Simulations", USENIX ATC'17): only the blocks SHARDS samples at rate R are
//! replayed ([`ReplayConfig::sample`]), each cache scaled by R, and each point is reported at the full size it
//! stands for (the scaled size / R). A sampled point's miss ratio is its misses over the accesses the sample
//! should have had (R × the trace's block accesses): SHARDS_adj (Waldspurger et al., FAST'15), which takes the
//! surplus or shortfall of sampled accesses to be hits on the few hot blocks that happened (not) to be sampled,
//! as [`crate::mrc`] does for LRU. For LRU the two give the same curve (tested by the CLI's tests).

use crate::replay::{replay, CacheSize, CacheSpec, ReplayConfig, ReplayError, ReplayHooks, ReplayReport};
use crate::size::SizeSpec;
use blockwell_core::policy::PolicySpec;
use blockwell_trace::{TraceError, TraceReader};
use serde::Serialize;

/// One point of one policy's curve.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Point {
    pub policy: String,
    /// The full-size cache the point stands for (the simulated cache / the sampling rate).
    pub cache_blocks: u64,
    pub cache_bytes: u64,
    /// The cache simulated on the sampled blocks.
    pub sampled_cache_blocks: u64,
    /// Block miss ratio (sampled: with SHARDS_adj).
    pub miss_ratio: f64,
}

/// Where a curve's points are: given sizes, or `n` even shares of the footprint.
#[derive(Clone, Debug)]
pub enum Sizes {
    Given(Vec<SizeSpec>),
    Points(usize),
}

/// Errors of a curve.
#[derive(Debug, thiserror::Error)]
pub enum MiniError {
    #[error(transparent)]
    Replay(#[from] ReplayError),
    #[error("sampling rate {0} is not in (0, 1]")]
    Rate(f64),
    #[error("{0} holds no {1} B block")]
    Size(SizeSpec, u64),
    #[error("no cache size (points must be at least 1)")]
    NoSizes,
}

/// The caches of the curves: every policy at every size, sizes in blocks scaled by `rate`.
fn caches(policies: &[PolicySpec], sizes: &Sizes, block_size: u64, rate: f64) -> Result<Vec<CacheSpec>, MiniError> {
    let sizes: Vec<CacheSize> = match sizes {
        Sizes::Given(list) => list
            .iter()
            .map(|s| match *s {
                SizeSpec::Percent(p) => Ok(CacheSize::PercentOfFootprint(p)),
                s => match s.blocks(block_size, 0) {
                    0 => Err(MiniError::Size(s, block_size)),
                    b => Ok(CacheSize::Blocks(((b as f64 * rate).round() as u64).max(1))),
                },
            })
            .collect::<Result<_, _>>()?,
        Sizes::Points(0) => return Err(MiniError::NoSizes),
        Sizes::Points(n) => (1..=*n).map(|i| CacheSize::PercentOfFootprint(100.0 * i as f64 / *n as f64)).collect(),
    };
    Ok(policies.iter().flat_map(|p| sizes.iter().map(|&size| CacheSpec { policy: p.clone(), size })).collect())
}

/// The curves of `policies` at `sizes` over the trace `open` opens, sampled at `rate` (1: full simulation);
/// `cfg` gives the block size, preset, filters and threads (its `sample` is set here). Returns the replay's
/// report and the points, in policy then size order.
pub fn curves(
    open: &dyn Fn() -> Result<Box<dyn TraceReader>, TraceError>,
    policies: &[PolicySpec],
    sizes: &Sizes,
    rate: f64,
    cfg: &ReplayConfig,
) -> Result<(ReplayReport, Vec<Point>), MiniError> {
    if !(rate > 0.0 && rate <= 1.0) {
        return Err(MiniError::Rate(rate));
    }
    let caches = caches(policies, sizes, cfg.block_size, rate)?;
    let cfg = ReplayConfig { sample: (rate < 1.0).then_some(rate), ..cfg.clone() };
    let r = replay(open, &caches, &cfg, ReplayHooks::default())?;
    let points = points(&r, rate);
    Ok((r, points))
}

fn points(r: &ReplayReport, rate: f64) -> Vec<Point> {
    let expected = r.unsampled_block_accesses.map(|n| n as f64 * rate);
    r.results
        .iter()
        .map(|c| {
            let full = ((c.cache_blocks as f64 / rate).round() as u64).max(c.cache_blocks);
            Point {
                policy: c.policy.clone(),
                cache_blocks: full,
                cache_bytes: full * r.block_size,
                sampled_cache_blocks: c.cache_blocks,
                miss_ratio: match expected {
                    Some(e) if e > 0.0 => (c.stats.total().block_misses() as f64 / e).min(1.0),
                    // (The replay refuses a trace without block accesses, so the ratio is defined.)
                    _ => c.stats.total().block_miss_ratio().unwrap_or(f64::NAN),
                },
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::VecReader;
    use blockwell_trace::Request;

    #[test]
    fn full_simulation_points_and_scaled_sizes() {
        let v: Vec<Request> = (0..20_000u64)
            .map(|i| Request { offset: ((i * 7919) % 3000) * 4096, len: 4096, ..Default::default() })
            .collect();
        let open = || -> Result<Box<dyn TraceReader>, TraceError> { Ok(Box::new(VecReader::new(v.clone()))) };
        let lru = [PolicySpec::parse("lru").unwrap()];
        let cfg = ReplayConfig::default();
        let (r, p) = curves(&open, &lru, &Sizes::Points(4), 1.0, &cfg).unwrap();
        assert_eq!(p.iter().map(|p| p.cache_blocks).collect::<Vec<_>>(), [750, 1500, 2250, 3000]);
        assert_eq!(r.unsampled_block_accesses, None);
        assert_eq!(p[3].miss_ratio, 3000.0 / 20_000.0, "the whole footprint: cold misses only");
        let given = Sizes::Given(vec![SizeSpec::Blocks(1000), SizeSpec::Bytes(8 << 20)]);
        let (_, p) = curves(&open, &lru, &given, 0.5, &cfg).unwrap();
        assert_eq!(
            p.iter().map(|p| (p.sampled_cache_blocks, p.cache_blocks)).collect::<Vec<_>>(),
            [(500, 1000), (1024, 2048)]
        );
        assert!(matches!(curves(&open, &lru, &given, 1.5, &cfg), Err(MiniError::Rate(_))));
        assert!(matches!(curves(&open, &lru, &Sizes::Points(0), 1.0, &cfg), Err(MiniError::NoSizes)));
        let tiny = Sizes::Given(vec![SizeSpec::Bytes(100)]);
        assert_eq!(curves(&open, &lru, &tiny, 1.0, &cfg).unwrap_err().to_string(), "100 B holds no 4096 B block");
    }
}
