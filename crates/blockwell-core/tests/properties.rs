//! Properties every registered policy must have, checked on random traces with random prefetches and
//! removals: invariants (`validate()`) after every step, capacity never exceeded, hits + misses = accesses,
//! a cache as large as the footprint misses only cold, OPT never misses more than any policy, identical
//! runs give identical results, and `contains` agrees with a model built from what the policy reported.

use blockwell_core::policy::{Access, DynPolicy, Evicted, Outcome, PolicyKind, PolicySpec, Preset, NEVER};
use blockwell_core::BlockKey;
use proptest::prelude::*;
use std::collections::{HashMap, HashSet};

#[derive(Clone, Debug)]
enum Step {
    Access(u64),
    Prefetch(Vec<u64>),
    Remove(u64),
}

fn step(universe: u64) -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => (0..universe).prop_map(Step::Access),
        1 => proptest::collection::vec(0..universe, 1..5).prop_map(Step::Prefetch),
        1 => (0..universe).prop_map(Step::Remove),
    ]
}

fn key(b: u64) -> BlockKey {
    BlockKey::new((b % 3) as u32, b).unwrap()
}

/// Next-use times (counted in demand accesses) of each step's demand access.
fn next_uses(steps: &[Step]) -> Vec<u64> {
    let mut next = vec![NEVER; steps.len()];
    let mut last: HashMap<u64, u64> = HashMap::new();
    let mut t = steps.iter().filter(|s| matches!(s, Step::Access(_))).count() as u64;
    for (i, s) in steps.iter().enumerate().rev() {
        if let Step::Access(b) = s {
            t -= 1;
            if let Some(j) = last.insert(*b, t) {
                next[i] = j;
            }
        }
    }
    next
}

/// Next demand use of block `b` after step `i` (for prefetch candidates).
fn next_use_after(steps: &[Step], i: usize, b: u64) -> u64 {
    let mut t = steps[..=i].iter().filter(|s| matches!(s, Step::Access(_))).count() as u64;
    for s in &steps[i + 1..] {
        if let Step::Access(x) = s {
            if *x == b {
                return t;
            }
            t += 1;
        }
    }
    NEVER
}

struct Run {
    outcomes: Vec<Outcome>,
    misses: u64,
    accesses: u64,
}

/// `exact`: the policy keeps to its capacity and reports every eviction (false only for configurations that
/// declare `libcachesim_quirks`, which reproduce a peer's over-capacity bug for exact comparisons).
fn run_checked(p: &mut dyn DynPolicy, steps: &[Step], exact: bool) -> Result<Run, TestCaseError> {
    if exact {
        return run(p, steps);
    }
    let next = next_uses(steps);
    let mut out = Vec::new();
    let mut r = Run { outcomes: vec![], misses: 0, accesses: 0 };
    for (i, s) in steps.iter().enumerate() {
        out.clear();
        match s {
            Step::Access(b) => {
                let o = p.access(Access::with_next_use(key(*b), next[i]), &mut out);
                r.accesses += 1;
                r.misses += u64::from(!o.is_hit());
                r.outcomes.push(o);
            }
            Step::Prefetch(bs) => {
                let mut seen = HashSet::new();
                let group: Vec<Access> =
                    bs.iter().filter(|&&b| seen.insert(b)).take(p.capacity()).map(|&b| Access::new(key(b))).collect();
                p.prefetch(&group, &mut out);
            }
            Step::Remove(b) => {
                p.remove(key(*b));
            }
        }
        if let Err(e) = p.validate() {
            return Err(TestCaseError::fail(format!("step {i} ({s:?}): {e}")));
        }
    }
    Ok(r)
}

fn run(p: &mut dyn DynPolicy, steps: &[Step]) -> Result<Run, TestCaseError> {
    let next = next_uses(steps);
    let mut resident: HashSet<BlockKey> = HashSet::new();
    let mut out: Vec<Evicted> = Vec::new();
    let mut r = Run { outcomes: vec![], misses: 0, accesses: 0 };
    for (i, s) in steps.iter().enumerate() {
        out.clear();
        match s {
            Step::Access(b) => {
                let k = key(*b);
                let was = resident.contains(&k);
                let o = p.access(Access::with_next_use(k, next[i]), &mut out);
                prop_assert_eq!(o.is_hit(), was, "step {}: hit/miss disagrees with the model for {:?}", i, k);
                r.accesses += 1;
                if !o.is_hit() {
                    r.misses += 1;
                }
                r.outcomes.push(o);
                for e in &out {
                    prop_assert!(resident.remove(&e.key), "step {}: evicted {:?} was not resident", i, e.key);
                }
                if p.contains(k) {
                    resident.insert(k);
                }
            }
            Step::Prefetch(bs) => {
                // The trait's contract: distinct keys, at most `capacity` of them.
                let mut seen = HashSet::new();
                let group: Vec<Access> = bs
                    .iter()
                    .filter(|&&b| seen.insert(b))
                    .take(p.capacity())
                    .map(|&b| Access::with_next_use(key(b), next_use_after(steps, i, b)))
                    .collect();
                // A block of the group may be evicted by the group itself and come back, so the bound is
                // the number of distinct keys.
                let uniq = group.iter().map(|a| a.key).collect::<HashSet<_>>().len();
                let n = p.prefetch(&group, &mut out);
                prop_assert!(n <= uniq, "step {}: inserted {} blocks of a group of {} keys", i, n, uniq);
                for e in &out {
                    let was = resident.remove(&e.key) || group.iter().any(|a| a.key == e.key);
                    prop_assert!(was, "step {}: evicted {:?} was neither resident nor prefetched", i, e.key);
                }
                for a in &group {
                    if p.contains(a.key) {
                        resident.insert(a.key);
                    }
                }
            }
            Step::Remove(b) => {
                let k = key(*b);
                prop_assert_eq!(p.remove(k), resident.remove(&k), "step {}: remove disagrees", i);
            }
        }
        if let Err(e) = p.validate() {
            return Err(TestCaseError::fail(format!("step {i} ({s:?}): {e}")));
        }
        prop_assert!(p.len() <= p.capacity(), "step {}: {} blocks over capacity {}", i, p.len(), p.capacity());
        prop_assert_eq!(p.len(), resident.len(), "step {}: len disagrees with the model", i);
        for k in &resident {
            prop_assert!(p.contains(*k), "step {}: {:?} should be resident", i, k);
        }
    }
    Ok(r)
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256)
}

fn build(k: PolicyKind, preset: Preset, cap: usize) -> Box<dyn DynPolicy> {
    PolicySpec::new(k).build(preset, cap).unwrap()
}

proptest! {
    // 256 cases by default; PROPTEST_CASES=N for a longer hunt.
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_and_runs_repeat(
        steps in proptest::collection::vec(step(40), 1..400),
        cap in 1usize..24,
        preset in prop_oneof![Just(Preset::Default), Just(Preset::Libcachesim), Just(Preset::Butt05)],
    ) {
        for &k in PolicyKind::ALL {
            let quirks = PolicySpec::new(k).libcachesim_quirks(preset).unwrap();
            let a = run_checked(build(k, preset, cap).as_mut(), &steps, !quirks)
                .map_err(|e| TestCaseError::fail(format!("{} ({preset:?}, cap {cap}): {e}", k.name())))?;
            let b = run_checked(build(k, preset, cap).as_mut(), &steps, !quirks)?;
            prop_assert_eq!(&a.outcomes, &b.outcomes, "{}: two identical runs differ", k.name());
            prop_assert_eq!(a.accesses, a.outcomes.len() as u64);
        }
    }

    #[test]
    fn demand_only_big_cache_misses_only_cold_and_opt_is_best(
        ids in proptest::collection::vec(0u64..60, 1..500),
        cap in 1usize..30,
    ) {
        let steps: Vec<Step> = ids.iter().map(|&b| Step::Access(b)).collect();
        let distinct = ids.iter().collect::<HashSet<_>>().len() as u64;
        let mut opt_misses = None;
        let mut others: Vec<(String, u64)> = vec![];
        for &k in PolicyKind::ALL {
            let big = run(build(k, Preset::Default, distinct as usize).as_mut(), &steps)?;
            prop_assert_eq!(big.misses, distinct, "{}: cache = footprint must miss only cold", k.name());
            let r = run(build(k, Preset::Default, cap).as_mut(), &steps)?;
            prop_assert_eq!(r.accesses, ids.len() as u64);
            if k.needs_next_use() {
                opt_misses = Some(r.misses);
            } else {
                others.push((k.name().to_string(), r.misses));
            }
        }
        if let Some(o) = opt_misses {
            for (name, m) in others {
                prop_assert!(o <= m, "OPT missed {} > {} of {}", o, m, name);
            }
        }
    }
}
