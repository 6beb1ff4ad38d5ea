//! Byte counts and cache sizes as people write them: `4096`, `64MiB`, `1.5GiB`, `10MB`, `2692blocks`, `5%`.
//! One parser for the command line, config files and the Python package.

use crate::replay::CacheSize;

/// A size that does not parse, quoting it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SizeError {
    #[error("'{0}': unknown unit '{1}' (use B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)")]
    Unit(String, String),
    #[error("'{0}': expected a number with an optional unit")]
    Number(String),
    #[error("'{0}': out of range")]
    Range(String),
    #[error("'{0}': a size cannot be negative")]
    Negative(String),
    #[error("'{0}': expected a percentage like 5%")]
    Percent(String),
    #[error("'{0}': a percentage must be above 0")]
    PercentRange(String),
    #[error("'{0}': expected a whole number of blocks")]
    Blocks(String),
    #[error("{bytes} B is smaller than one {block_size} B block")]
    BelowOneBlock { bytes: u64, block_size: u64 },
}

/// Parses a byte count: `4096`, `4KiB`, `64MiB`, `1.5GiB`, `10MB` (SI), `512B`.
pub fn parse_bytes(s: &str) -> Result<u64, SizeError> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(SizeError::Negative(s.into()));
    }
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "t" | "tib" => 1 << 40,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(SizeError::Unit(s.into(), unit.into())),
    };
    let v: f64 = num.parse().map_err(|_| SizeError::Number(s.into()))?;
    let bytes = v * mult as f64;
    if !bytes.is_finite() || bytes < 0.0 || bytes > u64::MAX as f64 / 2.0 {
        return Err(SizeError::Range(s.into()));
    }
    Ok(bytes.round() as u64)
}

/// A cache size as given: bytes, blocks, or a percentage of the trace's footprint.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SizeSpec {
    Bytes(u64),
    Blocks(u64),
    /// Percent of the trace's footprint (distinct blocks).
    Percent(f64),
}

impl SizeSpec {
    /// `64MiB`, `4096` (bytes), `1000blocks`, `1%`.
    pub fn parse(s: &str) -> Result<Self, SizeError> {
        let t = s.trim();
        if t.starts_with('-') {
            return Err(SizeError::Negative(s.into()));
        }
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| SizeError::Percent(s.into()))?;
            if !(v > 0.0 && v <= 100_000.0) {
                return Err(SizeError::PercentRange(s.into()));
            }
            return Ok(SizeSpec::Percent(v));
        }
        for suf in ["blocks", "block", "blk"] {
            if let Some(n) = t.strip_suffix(suf) {
                let v: u64 = n.trim().parse().map_err(|_| SizeError::Blocks(s.into()))?;
                return Ok(SizeSpec::Blocks(v));
            }
        }
        Ok(SizeSpec::Bytes(parse_bytes(t)?))
    }

    /// Blocks at `block_size`, with `footprint` distinct blocks for percentages (rounded down, at least one
    /// block: the same rule as `blockwell sim`).
    pub fn blocks(&self, block_size: u64, footprint: u64) -> u64 {
        match *self {
            SizeSpec::Bytes(b) => b / block_size,
            SizeSpec::Blocks(n) => n,
            SizeSpec::Percent(p) => CacheSize::PercentOfFootprint(p).blocks(footprint),
        }
    }

    pub fn needs_footprint(&self) -> bool {
        matches!(self, SizeSpec::Percent(_))
    }

    /// The replay's size of a cache of `block_size` blocks; a byte size below one block is an error.
    pub fn cache_size(&self, block_size: u64) -> Result<CacheSize, SizeError> {
        Ok(match *self {
            SizeSpec::Percent(p) => CacheSize::PercentOfFootprint(p),
            SizeSpec::Blocks(b) => CacheSize::Blocks(b),
            SizeSpec::Bytes(bytes) if bytes < block_size => {
                return Err(SizeError::BelowOneBlock { bytes, block_size });
            }
            SizeSpec::Bytes(b) => CacheSize::Blocks(b / block_size),
        })
    }
}

impl std::str::FromStr for SizeSpec {
    type Err = SizeError;
    fn from_str(s: &str) -> Result<Self, SizeError> {
        SizeSpec::parse(s)
    }
}

impl std::fmt::Display for SizeSpec {
    /// As written: `4096 B`, `10blocks`, `5%`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SizeSpec::Bytes(b) => write!(f, "{b} B"),
            SizeSpec::Blocks(n) => write!(f, "{n}blocks"),
            SizeSpec::Percent(p) => write!(f, "{p}%"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_at_a_block_size() {
        assert_eq!(SizeSpec::parse("64MiB").unwrap().cache_size(4096).unwrap(), CacheSize::Blocks(16384));
        assert_eq!(SizeSpec::parse("10blocks").unwrap().cache_size(4096).unwrap(), CacheSize::Blocks(10));
        assert_eq!(SizeSpec::parse("5%").unwrap().cache_size(4096).unwrap(), CacheSize::PercentOfFootprint(5.0));
        assert_eq!(
            SizeSpec::parse("100").unwrap().cache_size(4096).unwrap_err().to_string(),
            "100 B is smaller than one 4096 B block"
        );
    }
}
