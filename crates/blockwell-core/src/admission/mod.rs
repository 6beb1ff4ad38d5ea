//! Admission: which missed blocks enter a cache level ([`crate::level::CacheLevel`]).
//!
//! A demand miss that admission keeps out is still read (the request needs its data) but the block is not
//! inserted into the policy, so it evicts nothing; the level counts it in `admission_rejections`. Prefetched
//! blocks are the prefetcher's decision and are not filtered.
//!
//! - `always`: every missed block is admitted.
//! - `n-hit:N`: a block is admitted on its N-th miss within a bounded history of recent misses (as many entries
//!   as the cache has blocks, FIFO-forgotten), as in CacheLib's and bcache's "admit on second hit" rules.
//!   `n-hit:1` is `always`.
//!
//! More rules plug in through [`AdmissionFilter`] ([`Admission::custom`]).
//!
//! **State** (`n-hit`): per remembered block 8 B of key and 16 B of (count, sequence) in a hash map, plus 16 B
//! in the FIFO; at most `2 × capacity + 1` FIFO entries.

use crate::prefetch::U64Map;
use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;

/// A rule deciding whether a missed block enters the cache. Deterministic: no clock, no randomness unless
/// seeded in the filter.
pub trait AdmissionFilter: Send {
    /// A demand miss of `key` (raw block key): admit it?
    fn admit(&mut self, key: u64) -> bool;
    /// Bytes of heap the filter uses.
    fn heap_bytes(&self) -> usize {
        0
    }
}

/// The admission rule of a level, as named on the command line and in configs (`always`, `n-hit:N`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AdmissionSpec {
    #[default]
    Always,
    /// Admit on the N-th miss (N >= 2).
    NHit(u32),
}

/// A bad admission spec.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad admission '{0}' (expected 'always' or 'n-hit:N' with N >= 1)")]
pub struct AdmissionError(pub String);

impl FromStr for AdmissionSpec {
    type Err = AdmissionError;
    fn from_str(s: &str) -> Result<Self, AdmissionError> {
        let t = s.trim().to_ascii_lowercase();
        if t == "always" {
            return Ok(AdmissionSpec::Always);
        }
        match t.strip_prefix("n-hit:").map(|n| n.trim().parse::<u32>()) {
            Some(Ok(1)) => Ok(AdmissionSpec::Always),
            Some(Ok(n)) if n >= 2 => Ok(AdmissionSpec::NHit(n)),
            _ => Err(AdmissionError(s.to_string())),
        }
    }
}

impl fmt::Display for AdmissionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdmissionSpec::Always => f.write_str("always"),
            AdmissionSpec::NHit(n) => write!(f, "n-hit:{n}"),
        }
    }
}

impl serde::Serialize for AdmissionSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for AdmissionSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl AdmissionSpec {
    /// The rule for a cache of `capacity` blocks.
    pub fn build(self, capacity: usize) -> Admission {
        match self {
            AdmissionSpec::Always => Admission::Always,
            AdmissionSpec::NHit(n) => Admission::NHit(MissHistory::new(n, capacity)),
        }
    }
}

/// A level's admission rule, built.
#[derive(Default)]
pub enum Admission {
    #[default]
    Always,
    NHit(MissHistory),
    Custom(Box<dyn AdmissionFilter>),
}

impl Admission {
    /// A rule of the caller's.
    pub fn custom(filter: Box<dyn AdmissionFilter>) -> Self {
        Admission::Custom(filter)
    }

    /// Admits everything (no work per miss).
    #[inline]
    pub fn is_always(&self) -> bool {
        matches!(self, Admission::Always)
    }

    /// A demand miss of `key`: admit it?
    #[inline]
    pub fn admit(&mut self, key: u64) -> bool {
        match self {
            Admission::Always => true,
            Admission::NHit(h) => h.admit(key),
            Admission::Custom(f) => f.admit(key),
        }
    }

    pub fn heap_bytes(&self) -> usize {
        match self {
            Admission::Always => 0,
            Admission::NHit(h) => h.heap_bytes(),
            Admission::Custom(f) => f.heap_bytes(),
        }
    }
}

/// The bounded recent-miss history of `n-hit` admission.
pub struct MissHistory {
    n: u32,
    cap: usize,
    seq: u64,
    counts: U64Map<(u32, u64)>,
    fifo: VecDeque<(u64, u64)>,
}

impl MissHistory {
    /// Admit on the `n`-th miss, remembering at most `capacity` blocks (at least one).
    pub fn new(n: u32, capacity: usize) -> Self {
        MissHistory { n: n.max(1), cap: capacity.max(1), seq: 0, counts: U64Map::default(), fifo: VecDeque::new() }
    }

    /// Records a miss of `key`; true when it is the N-th (the block is then forgotten and admitted).
    pub fn admit(&mut self, key: u64) -> bool {
        self.seq += 1;
        let seq = self.seq;
        let e = self.counts.entry(key).or_insert_with(|| {
            self.fifo.push_back((key, seq));
            (0, seq)
        });
        e.0 += 1;
        if e.0 >= self.n {
            self.counts.remove(&key);
            return true;
        }
        while self.counts.len() > self.cap {
            let Some((b, s)) = self.fifo.pop_front() else { break };
            if self.counts.get(&b).is_some_and(|e| e.1 == s) {
                self.counts.remove(&b);
            }
        }
        // Entries of forgotten blocks linger in the FIFO; keep it bounded too.
        while self.fifo.len() > 2 * self.cap + 1 {
            let Some((b, s)) = self.fifo.pop_front() else { break };
            if self.counts.get(&b).is_some_and(|e| e.1 == s) {
                self.counts.remove(&b);
            }
        }
        false
    }

    pub fn heap_bytes(&self) -> usize {
        self.counts.capacity() * 25 + self.fifo.capacity() * 16
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_print() {
        assert_eq!("always".parse::<AdmissionSpec>(), Ok(AdmissionSpec::Always));
        assert_eq!(" N-HIT:2 ".parse::<AdmissionSpec>(), Ok(AdmissionSpec::NHit(2)));
        assert_eq!("n-hit:1".parse::<AdmissionSpec>(), Ok(AdmissionSpec::Always));
        assert!("n-hit:0".parse::<AdmissionSpec>().is_err());
        assert!("sometimes".parse::<AdmissionSpec>().unwrap_err().to_string().contains("'sometimes'"));
        assert_eq!(AdmissionSpec::NHit(3).to_string(), "n-hit:3");
    }

    #[test]
    fn n_hit_admits_on_the_nth_miss_and_forgets_old_misses() {
        let mut a = AdmissionSpec::NHit(2).build(2);
        assert!(!a.admit(1));
        assert!(a.admit(1), "second miss of 1");
        assert!(!a.admit(1), "admission forgets the block");
        // A history of two blocks forgets the oldest.
        assert!(!a.admit(2));
        assert!(!a.admit(3));
        assert!(!a.admit(4));
        assert!(!a.admit(2), "2 was forgotten: this is its first remembered miss");
        assert!(a.admit(4));
    }
}
