//! Seed 001 §4's two OPT rules under prefetching, through the public registry (the policy's unit tests check
//! the same rules from inside): wrong prefetches are immediately evictable, and blocks of one prefetch group do
//! not evict each other.

use blockwell_core::policy::{Access, NEVER};
use blockwell_core::{BlockKey, Evicted, Outcome, PolicySpec, Preset};

fn k(b: u64) -> BlockKey {
    BlockKey::new(0, b).unwrap()
}

#[test]
fn wrong_prefetches_are_immediately_evictable() {
    let mut p = PolicySpec::parse("opt").unwrap().build(Preset::Default, 4).unwrap();
    let mut out = Vec::new();
    for (b, next) in [(1, 10), (2, 11), (3, 12), (4, 13)] {
        assert_eq!(p.access(Access::with_next_use(k(b), next), &mut out), Outcome::Miss);
    }
    assert!(out.is_empty());
    // Full: a prefetched block never used again displaces nothing and is reported as a wasted prefetch.
    assert_eq!(p.prefetch(&[Access::with_next_use(k(50), NEVER)], &mut out), 1);
    assert_eq!(out, vec![Evicted { key: k(50), unused_prefetch: true }]);
    assert!(!p.contains(k(50)));
    for b in 1..=4 {
        assert!(p.contains(k(b)), "no demand block was displaced for a wrong prefetch");
    }
    // With room, a wrong prefetch is kept but is the first victim of the next insertion.
    let mut p = PolicySpec::parse("opt").unwrap().build(Preset::Default, 3).unwrap();
    out.clear();
    p.access(Access::with_next_use(k(1), 10), &mut out);
    p.access(Access::with_next_use(k(2), 11), &mut out);
    assert_eq!(p.prefetch(&[Access::with_next_use(k(60), NEVER)], &mut out), 1);
    assert!(p.contains(k(60)));
    assert_eq!(p.access(Access::with_next_use(k(3), 12), &mut out), Outcome::Miss);
    assert_eq!(out, vec![Evicted { key: k(60), unused_prefetch: true }]);
    p.validate().unwrap();
}

#[test]
fn one_prefetch_group_does_not_evict_its_own_blocks() {
    let mut p = PolicySpec::parse("opt").unwrap().build(Preset::Default, 4).unwrap();
    let mut out = Vec::new();
    p.access(Access::with_next_use(k(1), 100), &mut out);
    p.access(Access::with_next_use(k(2), 200), &mut out);
    // A group of five into two free slots: members may displace 1 and 2 (used later than all of them), and the
    // one left over is dropped itself, never a sibling placed before it.
    let group: Vec<Access> = (10..15).map(|b| Access::with_next_use(k(b), 20 + b)).collect();
    assert_eq!(p.prefetch(&group, &mut out), 5);
    let evicted: Vec<u64> = out.iter().map(|e| e.key.block()).collect();
    assert_eq!(evicted, [2, 1, 14], "{out:?}");
    assert!(out[2].unused_prefetch && !out[0].unused_prefetch);
    for b in 10..14 {
        assert!(p.contains(k(b)));
    }
    p.validate().unwrap();
}
