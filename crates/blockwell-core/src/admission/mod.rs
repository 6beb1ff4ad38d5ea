//! Admission: which missed blocks enter a cache level ([`crate::level::CacheLevel`]), in front of any policy.
//!
//! A demand miss that admission keeps out is still read (the request needs its data) but the block is not
//! inserted into the policy, so it evicts nothing; the level counts it in `admission_rejections`. Prefetched
//! blocks are the prefetcher's decision and are not filtered.
//!
//! | spec | rule | state (c = capacity in blocks) | module |
//! |---|---|---|---|
//! | `always` | every missed block is admitted | none | |
//! | `n-hit:N` | admitted on its N-th miss within a history of the last c missed blocks | ≤ 40 B per remembered block, at most c blocks | [`nhit`] |
//! | `tinylfu[:sample=N]` | admitted when its estimated frequency exceeds that of the block the policy would evict | 8–16 B per block (sketch) + 5·N/10 B per block (doorkeeper) | [`tinylfu`] |
//! | `bloom` | admitted on a miss if it missed before (a Bloom filter of 2c keys, cleared when full) | 2.5 B per block | [`bloom`] |
//! | `prob:P[:seed=S]` | admitted with probability P | 16 B | [`prob`] |
//!
//! `n-hit:1` is `always`. Names are case-insensitive; parameters follow the name after colons
//! (`prob:0.2:seed=7`, `tinylfu:sample=16`), as `n-hit:N` always did.
//!
//! **What a filter sees.** [`Admission::record`] on every demand access the level serves (reads and allocating
//! writes, hits, misses and waits on blocks in flight; not requests that bypass the level), then, on a demand
//! miss, [`Admission::admit`] with what the policy would evict for it ([`crate::Policy::victim`]), asked only of
//! a filter that weighs the victim (`tinylfu`, or a custom filter whose [`AdmissionFilter::needs_victim`] says
//! so). `always` does no work at all, and a level with `always`, no prefetcher and no cutoff still takes the
//! plain per-block path ([`crate::LevelConfig::is_plain`]).
//!
//! **Victims.** Every policy in the registry names its victim exactly ([`crate::Policy::victim`]), except OPT
//! with `bypass` (the choice depends on the missed block's next use, which the query does not carry), LIRS under
//! `libcachesim_quirks` when its miscounted LIR set would demote a non-LIR entry or several, and policies that
//! do not implement it (the trait's default, `Unknown`). TinyLFU admits when the victim is unknown, as when the
//! cache has room. With [`crate::level::Insert::OnCompletion`] (the time-aware simulator) the victim is the one
//! the policy names when the miss is issued.
//!
//! More rules plug in through [`AdmissionFilter`] ([`Admission::custom`]).
//!
//! **Determinism.** Every filter is a function of the accesses it is shown: no clock, and `prob`'s generator is
//! seeded from its spec.

pub mod bloom;
pub mod nhit;
pub mod prob;
pub mod tinylfu;

pub use bloom::SecondHit;
pub use nhit::MissHistory;
pub use prob::ProbAdmission;
pub use tinylfu::TinyLfu;

use crate::policy::Victim;
use std::fmt;
use std::str::FromStr;

/// A rule deciding whether a missed block enters the cache. Deterministic: no clock, no randomness unless
/// seeded in the filter.
pub trait AdmissionFilter: Send {
    /// A demand miss of `key` (raw block key): admit it?
    fn admit(&mut self, key: u64) -> bool;

    /// Whether the filter weighs a miss against the block the policy would evict for it: the level then asks
    /// the policy ([`crate::Policy::victim`], which may walk a CLOCK hand) and calls
    /// [`AdmissionFilter::admit_over`] with the answer. Default: no.
    fn needs_victim(&self) -> bool {
        false
    }

    /// A demand miss of `key`, with `victim`, what the policy would evict for it ([`Victim::Unknown`] when
    /// [`AdmissionFilter::needs_victim`] is false). Default: [`AdmissionFilter::admit`].
    fn admit_over(&mut self, key: u64, victim: Victim) -> bool {
        let _ = victim;
        self.admit(key)
    }

    /// Every demand access to `key` (hits too), before the miss's `admit`. Default: nothing.
    fn record(&mut self, key: u64) {
        let _ = key;
    }

    /// Bytes of heap the filter uses.
    fn heap_bytes(&self) -> usize {
        0
    }
}

/// The admission rule of a level, as named on the command line and in configs (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AdmissionSpec {
    #[default]
    Always,
    /// Admit on the N-th miss (N >= 2).
    NHit(u32),
    /// TinyLFU: admit when more frequent than the victim; the sketch ages every `sample` × capacity accesses.
    TinyLfu { sample: u32 },
    /// Admit a block that missed before (a Bloom filter).
    Bloom,
    /// Admit with probability `threshold` / 10⁷ ([`prob::SCALE`]), from the generator seeded with `seed`.
    Prob { threshold: u32, seed: u64 },
}

/// What the admission specs look like, for error messages.
pub const KNOWN: &str = "always, n-hit:N (N >= 1), tinylfu[:sample=N], bloom, prob:P[:seed=S] (0 < P <= 1)";

/// A bad admission spec.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("bad admission '{spec}': {reason} (expected one of: {KNOWN})")]
pub struct AdmissionError {
    pub spec: String,
    pub reason: String,
}

impl FromStr for AdmissionSpec {
    type Err = AdmissionError;
    fn from_str(s: &str) -> Result<Self, AdmissionError> {
        let bad = |reason: &str| AdmissionError { spec: s.to_string(), reason: reason.to_string() };
        let t = s.trim().to_ascii_lowercase();
        let mut parts = t.split(':').map(str::trim);
        let name = parts.next().unwrap_or("");
        let args: Vec<&str> = parts.collect();
        // `key=value` parameters after the positional ones; each known key at most once.
        let keyed = |args: &[&str], keys: &[&str]| -> Result<Vec<Option<String>>, AdmissionError> {
            let mut vals = vec![None; keys.len()];
            for a in args {
                let (k, v) = a.split_once('=').ok_or_else(|| bad(&format!("expected key=value, found '{a}'")))?;
                let i = keys
                    .iter()
                    .position(|&x| x == k.trim())
                    .ok_or_else(|| bad(&format!("unknown parameter '{}' (known: {})", k.trim(), keys.join(", "))))?;
                if vals[i].replace(v.trim().to_string()).is_some() {
                    return Err(bad(&format!("parameter '{}' given twice", keys[i])));
                }
            }
            Ok(vals)
        };
        match (name, args.as_slice()) {
            ("always", []) => Ok(AdmissionSpec::Always),
            ("n-hit", [n]) => match n.parse::<u32>() {
                Ok(1) => Ok(AdmissionSpec::Always),
                Ok(n) if n >= 2 => Ok(AdmissionSpec::NHit(n)),
                _ => Err(bad("n-hit:N needs a whole number N >= 1")),
            },
            ("tinylfu", rest) => {
                let sample = match keyed(rest, &["sample"])?.pop().flatten() {
                    None => tinylfu::DEFAULT_SAMPLE,
                    Some(v) => v
                        .parse::<u32>()
                        .ok()
                        .filter(|&n| (1..=1_000_000).contains(&n))
                        .ok_or_else(|| bad("tinylfu:sample=N needs a whole number N in 1..=1000000"))?,
                };
                Ok(AdmissionSpec::TinyLfu { sample })
            }
            ("bloom", []) => Ok(AdmissionSpec::Bloom),
            ("prob", [p, rest @ ..]) => {
                let p: f64 = p.parse().map_err(|_| bad(&format!("prob:P needs a number P, found '{p}'")))?;
                if !(p > 0.0 && p <= 1.0) {
                    return Err(bad("prob:P needs 0 < P <= 1"));
                }
                let threshold = prob::threshold(p).ok_or_else(|| bad("prob:P below 1e-7 would admit nothing"))?;
                let seed = match keyed(rest, &["seed"])?.pop().flatten() {
                    None => 0,
                    Some(v) => v.parse::<u64>().map_err(|_| bad("prob:P:seed=S needs a whole number S >= 0"))?,
                };
                Ok(AdmissionSpec::Prob { threshold, seed })
            }
            ("always" | "bloom", _) => Err(bad(&format!("'{name}' takes no parameters"))),
            ("n-hit", _) => Err(bad("n-hit:N needs a whole number N >= 1")),
            ("prob", _) => Err(bad("prob:P needs a probability P")),
            _ => Err(bad("unknown rule")),
        }
    }
}

impl fmt::Display for AdmissionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdmissionSpec::Always => f.write_str("always"),
            AdmissionSpec::NHit(n) => write!(f, "n-hit:{n}"),
            AdmissionSpec::TinyLfu { sample } if *sample == tinylfu::DEFAULT_SAMPLE => f.write_str("tinylfu"),
            AdmissionSpec::TinyLfu { sample } => write!(f, "tinylfu:sample={sample}"),
            AdmissionSpec::Bloom => f.write_str("bloom"),
            AdmissionSpec::Prob { threshold, seed } => {
                write!(f, "prob:{}", f64::from(*threshold) / f64::from(prob::SCALE))?;
                if *seed != 0 {
                    write!(f, ":seed={seed}")?;
                }
                Ok(())
            }
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
            AdmissionSpec::TinyLfu { sample } => Admission::TinyLfu(TinyLfu::new(capacity, sample)),
            AdmissionSpec::Bloom => Admission::Bloom(SecondHit::new(capacity)),
            AdmissionSpec::Prob { threshold, seed } => Admission::Prob(ProbAdmission::new(threshold, seed)),
        }
    }
}

/// A level's admission rule, built.
#[derive(Default)]
pub enum Admission {
    #[default]
    Always,
    NHit(MissHistory),
    TinyLfu(TinyLfu),
    Bloom(SecondHit),
    Prob(ProbAdmission),
    Custom(Box<dyn AdmissionFilter>),
}

impl Admission {
    /// A rule of the caller's.
    pub fn custom(filter: Box<dyn AdmissionFilter>) -> Self {
        Admission::Custom(filter)
    }

    /// Admits everything (no work per access or miss).
    #[inline]
    pub fn is_always(&self) -> bool {
        matches!(self, Admission::Always)
    }

    /// Whether [`Admission::admit`] weighs the policy's victim (the caller then asks the policy for it).
    #[inline]
    pub fn needs_victim(&self) -> bool {
        match self {
            Admission::TinyLfu(_) => true,
            Admission::Custom(f) => f.needs_victim(),
            _ => false,
        }
    }

    /// A demand access to `key` (hits too), before a miss's [`Admission::admit`].
    #[inline]
    pub fn record(&mut self, key: u64) {
        match self {
            Admission::TinyLfu(t) => t.record(key),
            Admission::Custom(f) => f.record(key),
            _ => {}
        }
    }

    /// A demand miss of `key`: admit it? `victim` is what the policy would evict for it when
    /// [`Admission::needs_victim`] (otherwise [`Victim::Unknown`], which no rule but TinyLFU reads).
    #[inline]
    pub fn admit(&mut self, key: u64, victim: Victim) -> bool {
        match self {
            Admission::Always => true,
            Admission::NHit(h) => h.admit(key),
            Admission::TinyLfu(t) => t.admit_over(key, victim),
            Admission::Bloom(b) => b.admit(key),
            Admission::Prob(p) => p.admit(key),
            Admission::Custom(f) => f.admit_over(key, victim),
        }
    }

    pub fn heap_bytes(&self) -> usize {
        match self {
            Admission::Always => 0,
            Admission::NHit(h) => h.heap_bytes(),
            Admission::TinyLfu(t) => t.heap_bytes(),
            Admission::Bloom(b) => b.heap_bytes(),
            Admission::Prob(p) => p.heap_bytes(),
            Admission::Custom(f) => f.heap_bytes(),
        }
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
        assert_eq!("TinyLFU".parse::<AdmissionSpec>(), Ok(AdmissionSpec::TinyLfu { sample: 10 }));
        assert_eq!("tinylfu:sample=16".parse::<AdmissionSpec>(), Ok(AdmissionSpec::TinyLfu { sample: 16 }));
        assert_eq!("bloom".parse::<AdmissionSpec>(), Ok(AdmissionSpec::Bloom));
        assert_eq!("prob:0.2".parse::<AdmissionSpec>(), Ok(AdmissionSpec::Prob { threshold: 2_000_000, seed: 0 }));
        assert_eq!(
            "prob:0.1 : seed=7".parse::<AdmissionSpec>(),
            Ok(AdmissionSpec::Prob { threshold: 1_000_000, seed: 7 })
        );
        assert_eq!("prob:1".parse::<AdmissionSpec>(), Ok(AdmissionSpec::Prob { threshold: 10_000_000, seed: 0 }));
        for s in ["always", "n-hit:4", "tinylfu", "tinylfu:sample=3", "bloom", "prob:0.25", "prob:0.3:seed=9", "prob:1"]
        {
            let spec: AdmissionSpec = s.parse().unwrap();
            assert_eq!(spec.to_string(), s, "prints as parsed");
            assert_eq!(spec.to_string().parse::<AdmissionSpec>(), Ok(spec), "round trip");
        }
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let err = |s: &str| s.parse::<AdmissionSpec>().unwrap_err().to_string();
        for (s, says) in [
            ("prob:0", "0 < P <= 1"),
            ("prob:1.5", "0 < P <= 1"),
            ("prob:-0.1", "0 < P <= 1"),
            ("prob:nan", "0 < P <= 1"),
            ("prob:x", "needs a number P"),
            ("prob:1e-9", "admit nothing"),
            ("prob", "needs a probability"),
            ("prob:0.5:seed=-1", "seed=S"),
            ("prob:0.5:sed=1", "unknown parameter 'sed'"),
            ("prob:0.5:seed=1:seed=2", "given twice"),
            ("prob:0.5:7", "key=value"),
            ("tinylfu:sample=0", "1..=1000000"),
            ("tinylfu:4", "key=value"),
            ("bloom:2", "takes no parameters"),
            ("n-hit:x", "n-hit:N"),
            ("n-hit", "n-hit:N"),
            ("lru", "unknown rule"),
            ("", "unknown rule"),
        ] {
            let e = err(s);
            assert!(e.contains(says) && e.contains(&format!("'{s}'")) && e.contains("tinylfu"), "{s}: {e}");
        }
    }

    #[test]
    fn specs_deserialize_from_strings() {
        let v: Vec<AdmissionSpec> = serde_json::from_str(r#"["tinylfu", "bloom", "prob:0.5:seed=3"]"#).unwrap();
        assert_eq!(v[2], AdmissionSpec::Prob { threshold: 5_000_000, seed: 3 });
        let e = serde_json::from_str::<AdmissionSpec>(r#""prob:2""#).unwrap_err().to_string();
        assert!(e.contains("bad admission 'prob:2'"), "{e}");
        assert_eq!(serde_json::to_string(&v).unwrap(), r#"["tinylfu","bloom","prob:0.5:seed=3"]"#);
    }

    /// A custom filter written against the original one-method trait still works, and sees no victim.
    struct EveryOther(bool);
    impl AdmissionFilter for EveryOther {
        fn admit(&mut self, _key: u64) -> bool {
            self.0 = !self.0;
            self.0
        }
    }

    #[test]
    fn custom_filters_keep_the_one_method_form() {
        let mut a = Admission::custom(Box::new(EveryOther(false)));
        assert!(!a.needs_victim() && !a.is_always());
        a.record(1);
        assert!(a.admit(1, Victim::Unknown));
        assert!(!a.admit(2, Victim::Block(crate::BlockKey::from_raw(9))));
        assert_eq!(a.heap_bytes(), 0);
    }
}
