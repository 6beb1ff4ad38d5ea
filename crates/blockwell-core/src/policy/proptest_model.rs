//! Test-only harness: drives any [`Policy`] with random demand accesses, prefetch groups and removals, calls
//! `validate()` after every step, and checks it against the simplest model there is: the set of blocks that were
//! inserted and not yet reported evicted or removed (plus which of them are unused prefetches).

use super::testutil::k;
use super::{Access, Evicted, Outcome, Policy};
use proptest::prelude::*;
use std::collections::HashSet;

/// Keys are drawn from `0..UNIVERSE`.
pub(crate) const UNIVERSE: u64 = 24;

/// One step of a random run.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Access(u64),
    Prefetch(Vec<u64>),
    Remove(u64),
}

/// Random steps, mostly demand accesses.
pub(crate) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..UNIVERSE).prop_map(Op::Access),
        2 => prop::collection::vec(0..UNIVERSE, 1..6).prop_map(Op::Prefetch),
        1 => (0..UNIVERSE).prop_map(Op::Remove),
    ]
}

/// The model: resident blocks, and the subset that was prefetched and not yet accessed.
#[derive(Default)]
struct Model {
    resident: HashSet<u64>,
    unused: HashSet<u64>,
}

impl Model {
    fn evicted(&mut self, e: &Evicted) -> Result<(), TestCaseError> {
        let b = e.key.block();
        prop_assert!(self.resident.remove(&b), "evicted {} was not resident", b);
        prop_assert_eq!(e.unused_prefetch, self.unused.remove(&b), "unused_prefetch of {}", b);
        Ok(())
    }
}

/// Runs `ops` on `p`, checking every step. A prefetch group is also replayed one block at a time on a clone,
/// which must end in the same state with the same victims (a group is inserted in order).
pub(crate) fn run<P: Policy + Clone>(p: P, ops: &[Op]) -> Result<(), TestCaseError> {
    run_with(p, ops, false)
}

/// [`run`] for a policy that may decline to admit a block (`may_decline`): a declined block evicts nothing.
pub(crate) fn run_with<P: Policy + Clone>(mut p: P, ops: &[Op], may_decline: bool) -> Result<(), TestCaseError> {
    let cap = p.capacity();
    let mut m = Model::default();
    let mut out = Vec::new();
    for o in ops {
        out.clear();
        match o {
            &Op::Access(b) => {
                let r = p.access(Access::new(k(b)), &mut out);
                prop_assert!(out.len() <= 1, "an access to {} evicted {:?}", b, out);
                for e in &out {
                    prop_assert!(e.key != k(b), "the accessed block {} was evicted", b);
                    m.evicted(e)?;
                }
                prop_assert_eq!(r.is_hit(), m.resident.contains(&b), "hit/miss of {}", b);
                prop_assert_eq!(r == Outcome::PrefetchHit, m.unused.remove(&b), "prefetch hit of {}", b);
                if p.contains(k(b)) {
                    m.resident.insert(b);
                } else {
                    prop_assert!(may_decline, "miss on {} not admitted", b);
                    prop_assert!(r == Outcome::Miss && out.is_empty(), "declined {} but evicted {:?}", b, out);
                }
            }
            Op::Prefetch(bs) => {
                let group: Vec<_> = bs.iter().map(|&b| Access::new(k(b))).collect();
                let mut q = p.clone();
                let n = p.prefetch(&group, &mut out);
                let mut n1 = 0;
                let mut out1 = Vec::new();
                for a in &group {
                    let b = a.key.block();
                    let from = out1.len();
                    let was = m.resident.contains(&b);
                    let i = q.prefetch(std::slice::from_ref(a), &mut out1);
                    for e in &out1[from..] {
                        prop_assert!(e.key != a.key, "the prefetched block {} was evicted at once", b);
                        m.evicted(e)?;
                    }
                    prop_assert!(
                        i <= 1 && !(was && i == 1),
                        "prefetch of {} inserted {} blocks (resident: {})",
                        b,
                        i,
                        was
                    );
                    prop_assert_eq!(i == 1, q.contains(a.key) && !was);
                    prop_assert!(i == 1 || was || may_decline, "prefetch of {} not admitted", b);
                    if i == 1 {
                        m.resident.insert(b);
                        m.unused.insert(b);
                    }
                    n1 += i;
                    q.validate().map_err(TestCaseError::fail)?;
                }
                prop_assert_eq!(n, n1);
                prop_assert_eq!(&out, &out1);
                for b in 0..UNIVERSE {
                    prop_assert_eq!(p.contains(k(b)), q.contains(k(b)), "group vs one at a time: {}", b);
                }
            }
            &Op::Remove(b) => {
                prop_assert_eq!(p.remove(k(b)), m.resident.remove(&b));
                m.unused.remove(&b);
            }
        }
        p.validate().map_err(TestCaseError::fail)?;
        prop_assert!(p.len() <= cap, "{} blocks over capacity {}", p.len(), cap);
        prop_assert_eq!(p.len(), m.resident.len());
        for b in 0..UNIVERSE {
            prop_assert_eq!(p.contains(k(b)), m.resident.contains(&b), "contains({})", b);
        }
    }
    Ok(())
}

/// An exact reference model of one policy (a plain, slow transcription of its algorithm): what each step returns
/// and which blocks it evicts, in order.
pub(crate) trait Reference {
    /// A demand access to block `b`; pushes the evicted blocks to `evicted`.
    fn access(&mut self, b: u64, evicted: &mut Vec<u64>) -> Outcome;
    /// A prefetch of block `b`; returns whether it was inserted.
    fn prefetch(&mut self, b: u64, evicted: &mut Vec<u64>) -> bool;
    fn remove(&mut self, b: u64) -> bool;
    /// Resident blocks.
    fn len(&self) -> usize;
}

/// Runs step `i`, `op`, on `p` and on its reference model `m` and checks that they agree: the outcome, the number
/// of blocks a prefetch inserted (the model prefetches the group one block at a time), the evicted blocks in order,
/// the result of a removal, and the number of resident blocks; and that `p` passes `validate()` and keeps to its
/// capacity.
pub(crate) fn check_step<P: Policy, M: Reference>(
    p: &mut P,
    m: &mut M,
    i: usize,
    op: &Op,
) -> Result<(), TestCaseError> {
    let (mut out, mut mout) = (Vec::new(), Vec::new());
    match op {
        &Op::Access(b) => {
            let o = p.access(Access::new(k(b)), &mut out);
            prop_assert_eq!(o, m.access(b, &mut mout), "step {} {:?}", i, op);
        }
        Op::Prefetch(bs) => {
            let group: Vec<Access> = bs.iter().map(|&b| Access::new(k(b))).collect();
            let n = p.prefetch(&group, &mut out);
            let mut mn = 0;
            for &b in bs {
                mn += m.prefetch(b, &mut mout) as usize;
            }
            prop_assert_eq!(n, mn);
        }
        &Op::Remove(b) => prop_assert_eq!(p.remove(k(b)), m.remove(b)),
    }
    let ev: Vec<u64> = out.iter().map(|e| e.key.block()).collect();
    prop_assert_eq!(&ev, &mout, "evictions at step {} {:?}", i, op);
    if let Err(e) = p.validate() {
        return Err(TestCaseError::fail(format!("step {i} {op:?}: {e}")));
    }
    prop_assert!(p.len() <= p.capacity());
    prop_assert_eq!(p.len(), m.len());
    Ok(())
}
