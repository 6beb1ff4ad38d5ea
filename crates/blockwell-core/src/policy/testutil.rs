//! Helpers the policies' unit tests share.

use super::{Access, Evicted, Outcome, Policy};
use crate::key::BlockKey;

/// The pseudo-random, skewed block sequence over `0..m` that the W-TinyLFU, LeCaR and CACHEUS tests' libcachesim
/// numbers were computed on (PCG's LCG step, the smaller of two residues of the high bits).
pub(crate) fn skewed(n: usize, m: u64) -> Vec<u64> {
    let mut x: u64 = 1;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let r = x >> 33;
            (r % m).min((r / m) % m)
        })
        .collect()
}

/// Block `b` of volume 0.
pub(crate) fn k(b: u64) -> BlockKey {
    BlockKey::new(0, b).expect("small block number")
}

/// Blocks `v` of volume 0.
pub(crate) fn keys(v: &[u64]) -> Vec<BlockKey> {
    v.iter().map(|&b| k(b)).collect()
}

/// A demand access to block `b`, with the invariants checked after it: the outcome and the victims.
pub(crate) fn acc<P: Policy>(p: &mut P, b: u64) -> (Outcome, Vec<Evicted>) {
    let mut out = Vec::new();
    let o = p.access(Access::new(k(b)), &mut out);
    p.validate().unwrap();
    (o, out)
}

/// A prefetch of blocks `bs` as one group, with the invariants checked after it: how many were inserted, and the
/// victims.
pub(crate) fn pf<P: Policy>(p: &mut P, bs: &[u64]) -> (usize, Vec<Evicted>) {
    let mut out = Vec::new();
    let g: Vec<Access> = bs.iter().map(|&b| Access::new(k(b))).collect();
    let n = p.prefetch(&g, &mut out);
    p.validate().unwrap();
    (n, out)
}

/// Block `b` evicted, `unused_prefetch` if it was prefetched and never accessed.
pub(crate) fn ev(b: u64, unused_prefetch: bool) -> Evicted {
    Evicted { key: k(b), unused_prefetch }
}
