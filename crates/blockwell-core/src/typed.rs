//! `FromStr` for the spec types named on command lines and in configs ([`PolicySpec`], [`PrefetcherSpec`],
//! [`Preset`]), so that clap and serde parse them once, with the same errors everywhere.

use crate::policy::{PolicyError, PolicySpec, Preset};
use crate::prefetch::{PrefetchError, PrefetcherSpec};
use std::str::FromStr;

impl FromStr for PolicySpec {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, PolicyError> {
        PolicySpec::parse(s)
    }
}

impl FromStr for PrefetcherSpec {
    type Err = PrefetchError;
    fn from_str(s: &str) -> Result<Self, PrefetchError> {
        PrefetcherSpec::parse(s)
    }
}

/// An unknown preset name.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown preset '{0}' (known: default, libcachesim, butt05)")]
pub struct PresetError(pub String);

impl FromStr for Preset {
    type Err = PresetError;
    fn from_str(s: &str) -> Result<Self, PresetError> {
        Preset::from_name(s.trim()).ok_or_else(|| PresetError(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_through_from_str() {
        assert_eq!("lru-k(k=3)".parse::<PolicySpec>().unwrap().label(), "lru-k(k=3)");
        assert!("nope".parse::<PolicySpec>().is_err());
        assert_eq!("obl(blocks=2)".parse::<PrefetcherSpec>().unwrap().kind, crate::prefetch::PrefetcherKind::Obl);
        assert_eq!("libcachesim".parse::<Preset>(), Ok(Preset::Libcachesim));
        assert_eq!(
            "x".parse::<Preset>().unwrap_err().to_string(),
            "unknown preset 'x' (known: default, libcachesim, butt05)"
        );
    }
}
