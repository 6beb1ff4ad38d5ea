//! The Linux page cache's two-list LRU: an inactive list where pages enter, an active list for pages referenced
//! twice, a `PG_referenced` bit per page.
//!
//! **Paper.** The replacement the kernels of seeds `000_*` (Linux 2.6.14) and `001_*` (Linux 2.4) ran for
//! page-cache pages, as `mm/swap.c` (`mark_page_accessed`) and `mm/vmscan.c` (`refill_inactive_zone`,
//! `shrink_list`) implement it for unmapped file pages; described in M. Gorman, *Understanding the Linux Virtual
//! Memory Manager* (Prentice Hall 2004), ch. 10, and close to 2Q (Johnson & Shasha, VLDB'94) without ghosts.
//! - A page read on demand enters the inactive list's head and is marked referenced (the read calls
//!   `mark_page_accessed`).
//! - An access (`mark_page_accessed`): an inactive page already referenced is activated (to the active list's head,
//!   bit cleared); any other page not referenced gets the bit; pages do not move otherwise.
//! - Room is made at the inactive list's tail: its last page is evicted, referenced or not (for unmapped page-cache
//!   pages `shrink_list` does not reactivate on the bit). Before that, while the active list holds more than
//!   `active_ratio` of the cache, or when the inactive list is empty, the active list's tail page moves to the
//!   inactive head with its bit kept (`refill_inactive_zone` for unmapped pages).
//!
//! Linux 2.6.14 balanced the two lists by scanning each in proportion to its size under memory pressure; this
//! model uses the explicit bound later kernels adopted for file pages (`inactive_file_is_low`: the active list
//! may not outgrow the inactive one, `active_ratio = 0.5`). Not compared with libcachesim, which has no such
//! policy; tested against a small model of these rules.
//!
//! **Prefetch adaptation.** What Linux does with read-ahead pages: they enter the inactive head *not* referenced
//! (flagged prefetched, not yet accessed), so an unused read-ahead page is the first to go. Its first demand access
//! sets the bit (a prefetch hit); a second activates it. A prefetch of a resident page changes nothing.
//!
//! **Parameters** ([`TwoListConfig`]): `active_ratio`, the largest share of the cache the active list keeps
//! before its tail is demoted, in (0, 1); 0.5 under every preset.
//!
//! **Metadata.** One arena entry per resident block: 20 bytes (key as two `u32`, two 31-bit links plus the prefetch
//! flag, a state byte with the list and the referenced bit), plus the handle index at 5 bytes a bucket, sized for
//! twice the entries: ≈ 31–43 bytes per cached block. No ghost entries.
//!
//! **Cost.** O(1) per access and prefetched block; an eviction demotes at most one active page per insertion once
//! the lists are balanced.

use super::multilist::{MultiList, LIST};
use super::{Access, Evicted, Outcome, Policy};
use crate::key::BlockKey;
use serde::{Deserialize, Serialize};

/// The two-list LRU's parameter.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TwoListConfig {
    /// Largest share of the cache the active list holds before its tail is demoted; in (0, 1).
    pub active_ratio: f64,
}

impl Default for TwoListConfig {
    fn default() -> Self {
        TwoListConfig { active_ratio: 0.5 }
    }
}

const INACTIVE: u8 = 0;
const ACTIVE: u8 = 1;
/// `PG_referenced`, above the list bits of the state byte.
const REFERENCED: u8 = 0b100;

/// The two-list LRU. Each list's front is its head (newest end).
#[derive(Clone, Debug)]
pub struct TwoList {
    /// Most pages the active list keeps before its tail is demoted (at least one when the cache has two blocks).
    active_max: usize,
    lists: MultiList<2>,
}

impl TwoList {
    /// Makes room for one page: balances the lists, then evicts the inactive tail.
    #[inline]
    fn make_room(&mut self, out: &mut Vec<Evicted>) {
        let l = &mut self.lists;
        while l.resident() >= l.capacity() {
            while l.len(ACTIVE) > self.active_max || (l.is_empty(INACTIVE) && !l.is_empty(ACTIVE)) {
                let Some(h) = l.pop_back(ACTIVE) else { break };
                let referenced = l.node(h).state & REFERENCED;
                l.push_front(h, INACTIVE | referenced);
            }
            let Some(h) = l.pop_back(INACTIVE) else { return };
            l.evict(h, out);
        }
    }

    /// Keys of the inactive and active lists, each head first (for tests and debugging).
    pub fn lists(&self) -> [Vec<BlockKey>; 2] {
        [INACTIVE, ACTIVE].map(|l| self.lists.keys(l))
    }

    /// Whether `key` is resident with its referenced bit set.
    pub fn referenced(&self, key: BlockKey) -> bool {
        self.lists.get(key).is_some_and(|h| self.lists.node(h).state & REFERENCED != 0)
    }
}

impl Policy for TwoList {
    type Config = TwoListConfig;

    fn check_config(c: &TwoListConfig) -> Result<(), String> {
        if !(c.active_ratio > 0.0 && c.active_ratio < 1.0) {
            return Err(format!("active_ratio must be in (0, 1), got {}", c.active_ratio));
        }
        Ok(())
    }

    fn new(capacity: usize, config: &TwoListConfig) -> Self {
        assert!(capacity >= 1, "capacity must be at least one block");
        if let Err(e) = Self::check_config(config) {
            panic!("invalid two-list configuration: {e}");
        }
        // The inactive list keeps at least one page, the active list at least one when there is room for both.
        let active_max = ((capacity as f64 * config.active_ratio) as usize).clamp(1, capacity.saturating_sub(1).max(1));
        TwoList { active_max, lists: MultiList::new(capacity, capacity) }
    }

    fn capacity(&self) -> usize {
        self.lists.capacity()
    }

    fn len(&self) -> usize {
        self.lists.resident()
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.lists.contains(key)
    }

    #[inline]
    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        let Some(h) = self.lists.get(access.key) else {
            self.make_room(out);
            self.lists.insert(access.key, INACTIVE | REFERENCED, false);
            return Outcome::Miss;
        };
        let l = &mut self.lists;
        let state = l.node(h).state;
        if state & LIST == INACTIVE && state & REFERENCED != 0 {
            l.unlink(h);
            l.push_front(h, ACTIVE);
        } else {
            l.node_mut(h).state = state | REFERENCED;
        }
        let links = &mut l.node_mut(h).links;
        if links.flag() {
            links.set_flag(false);
            Outcome::PrefetchHit
        } else {
            Outcome::Hit
        }
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        let mut n = 0;
        for a in group {
            if self.lists.contains(a.key) {
                continue;
            }
            self.make_room(out);
            self.lists.insert(a.key, INACTIVE, true);
            n += 1;
        }
        n
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        self.lists.remove(key)
    }

    fn validate(&self) -> Result<(), String> {
        self.lists.validate(["inactive", "active"], |_, n| {
            if n.state & !(LIST | REFERENCED) != 0 {
                return Err(format!("stray state bits {:#x}", n.state));
            }
            if n.links.flag() && n.state & REFERENCED != 0 {
                return Err("an unused prefetch marked referenced".into());
            }
            Ok(())
        })?;
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.lists.heap_bytes()
    }

    /// Exact: the inactive list's tail when it has blocks (balancing pushes demoted pages in at its head); when
    /// it is empty, the active tail, the first page balancing would demote.
    fn victim(&self, incoming: BlockKey) -> super::Victim {
        let l = &self.lists;
        if l.contains(incoming) || l.resident() < l.capacity() {
            return super::Victim::None;
        }
        if l.is_empty(INACTIVE) {
            l.back_victim(ACTIVE)
        } else {
            l.back_victim(INACTIVE)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::testutil::k;
    use proptest::prelude::*;

    fn acc(p: &mut TwoList, b: u64) -> (Outcome, Vec<Evicted>) {
        let mut out = Vec::new();
        let o = p.access(Access::new(k(b)), &mut out);
        p.validate().unwrap();
        (o, out)
    }

    fn keys(v: &[u64]) -> Vec<BlockKey> {
        v.iter().map(|&b| k(b)).collect()
    }

    #[test]
    fn pages_enter_inactive_referenced_and_a_second_access_activates() {
        let mut p = TwoList::new(4, &TwoListConfig::default());
        for b in [1, 2, 3] {
            assert_eq!(acc(&mut p, b).0, Outcome::Miss);
        }
        assert!(p.referenced(k(1)));
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        assert_eq!(p.lists(), [keys(&[3, 1]), keys(&[2])]);
        assert!(!p.referenced(k(2)), "activation clears the bit");
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        assert!(p.referenced(k(2)), "an active page gets the bit");
        assert_eq!(p.lists(), [keys(&[3, 1]), keys(&[2])], "and does not move");
    }

    #[test]
    fn evicts_the_inactive_tail_and_demotes_the_active_tail_past_the_ratio() {
        let mut p = TwoList::new(4, &TwoListConfig::default()); // active_max = 2
        for b in [1, 2, 3, 4, 1, 2, 3] {
            acc(&mut p, b);
        }
        // 1, 2, 3 were activated in turn; 4 is inactive.
        assert_eq!(p.lists(), [keys(&[4]), keys(&[3, 2, 1])]);
        let (o, out) = acc(&mut p, 5);
        assert_eq!(o, Outcome::Miss);
        // Active (3 > 2) gives its tail 1 to the inactive head, then the inactive tail 4 goes.
        assert_eq!(out, vec![Evicted { key: k(4), unused_prefetch: false }]);
        assert_eq!(p.lists(), [keys(&[5, 1]), keys(&[3, 2])]);
        // A scan of new pages never touches the active list once it is within bounds.
        for b in 10..20 {
            acc(&mut p, b);
        }
        assert_eq!(p.lists()[1], keys(&[3, 2]));
    }

    #[test]
    fn unused_read_ahead_goes_first_and_is_reported() {
        let mut p = TwoList::new(3, &TwoListConfig::default());
        acc(&mut p, 1);
        let mut out = Vec::new();
        assert_eq!(p.prefetch(&[Access::new(k(2)), Access::new(k(3)), Access::new(k(1))], &mut out), 2);
        assert!(!p.referenced(k(2)));
        assert_eq!(acc(&mut p, 2).0, Outcome::PrefetchHit);
        assert!(p.referenced(k(2)), "first demand access sets the bit");
        assert_eq!(acc(&mut p, 2).0, Outcome::Hit);
        assert_eq!(p.lists(), [keys(&[3, 1]), keys(&[2])]);
        let (_, out) = acc(&mut p, 4);
        assert_eq!(out, vec![Evicted { key: k(1), unused_prefetch: false }]);
        let (_, out) = acc(&mut p, 5);
        assert_eq!(out, vec![Evicted { key: k(3), unused_prefetch: true }]);
    }

    #[test]
    fn tiny_caches_and_bad_ratios() {
        let mut p = TwoList::new(1, &TwoListConfig::default());
        for b in [1, 1, 1, 2, 2, 1] {
            acc(&mut p, b);
        }
        assert_eq!(p.len(), 1);
        assert!(TwoList::check_config(&TwoListConfig { active_ratio: 1.0 }).is_err());
        assert!(TwoList::check_config(&TwoListConfig { active_ratio: 0.0 }).is_err());
    }

    #[test]
    fn metadata_is_as_documented() {
        let c = 20_000;
        let mut p = TwoList::new(c, &TwoListConfig::default());
        let mut out = Vec::new();
        for b in 0..(3 * c as u64) {
            p.access(Access::new(k(b % (c as u64 + c as u64 / 2))), &mut out);
        }
        let per_block = p.heap_bytes() as f64 / c as f64;
        assert!((31.0..=43.0).contains(&per_block), "{per_block} bytes per cached block");
    }

    /// The rules of the module doc on plain vectors (head first), demand accesses only.
    fn model(capacity: usize, active_max: usize, trace: &[u64]) -> Vec<bool> {
        // (block, referenced), head first.
        let mut inactive: Vec<(u64, bool)> = Vec::new();
        let mut active: Vec<(u64, bool)> = Vec::new();
        let mut hits = Vec::new();
        for &b in trace {
            if let Some(i) = inactive.iter().position(|e| e.0 == b) {
                if inactive[i].1 {
                    inactive.remove(i);
                    active.insert(0, (b, false));
                } else {
                    inactive[i].1 = true;
                }
                hits.push(true);
            } else if let Some(i) = active.iter().position(|e| e.0 == b) {
                active[i].1 = true;
                hits.push(true);
            } else {
                while inactive.len() + active.len() >= capacity {
                    while active.len() > active_max || (inactive.is_empty() && !active.is_empty()) {
                        let e = active.pop().unwrap();
                        inactive.insert(0, e);
                    }
                    inactive.pop();
                }
                inactive.insert(0, (b, true));
                hits.push(false);
            }
        }
        hits
    }

    proptest! {
        #[test]
        fn equals_the_model(capacity in 1usize..12, ratio in 0.1f64..0.9, trace in proptest::collection::vec(0u64..20, 0..300)) {
            let config = TwoListConfig { active_ratio: ratio };
            let mut p = TwoList::new(capacity, &config);
            let got: Vec<bool> = trace.iter().map(|&b| acc(&mut p, b).0 != Outcome::Miss).collect();
            prop_assert_eq!(got, model(capacity, p.active_max, &trace));
        }
    }
}
