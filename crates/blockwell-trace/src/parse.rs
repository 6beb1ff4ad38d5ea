//! Field and number parsing shared by the text formats: no allocation, no panics, overflow is `None`.

/// Splits `line` at `sep` into its first `N` fields; returns how many fields there are in all (the rest of
/// the array is `""`).
#[inline]
pub fn split<const N: usize>(line: &str, sep: char) -> (usize, [&str; N]) {
    let mut out = [""; N];
    let mut n = 0;
    if sep.is_ascii() {
        // Byte scan: an ASCII separator never sits inside a multi-byte character.
        let sep = sep as u8;
        let mut start = 0;
        for (i, &b) in line.as_bytes().iter().enumerate() {
            if b == sep {
                if n < N {
                    out[n] = line.get(start..i).unwrap_or("");
                }
                n += 1;
                start = i + 1;
            }
        }
        if n < N {
            out[n] = line.get(start..).unwrap_or("");
        }
        return (n + 1, out);
    }
    for f in line.split(sep) {
        if n < N {
            out[n] = f;
        }
        n += 1;
    }
    (n, out)
}

/// Splits `line` at runs of ASCII whitespace into its first `N` fields; returns how many there are in all.
#[inline]
pub fn split_ws<const N: usize>(line: &str) -> (usize, [&str; N]) {
    let mut out = [""; N];
    let mut n = 0;
    for f in line.split_ascii_whitespace() {
        if n < N {
            out[n] = f;
        }
        n += 1;
    }
    (n, out)
}

/// An unsigned decimal integer (surrounding spaces allowed).
#[inline]
pub fn uint(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `uint(s) * unit`, `None` on a malformed number or overflow.
#[inline]
pub fn scaled(s: &str, unit: u64) -> Option<u64> {
    uint(s)?.checked_mul(unit)
}

/// A non-negative decimal number (`12`, `12.5`, `.5`, `1.5e-3`) times `unit`, exactly for plain decimals
/// (nanosecond time stamps from seconds lose nothing), truncated toward zero. `None` on a malformed or
/// negative number or overflow.
pub fn decimal(s: &str, unit: u64) -> Option<u64> {
    let s = s.trim();
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if !(digits(int) && digits(frac)) {
        return float(s, unit);
    }
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let whole = if int.is_empty() { 0 } else { int.parse::<u64>().ok()?.checked_mul(unit)? };
    let frac = &frac[..frac.len().min(19)];
    if frac.is_empty() {
        return Some(whole);
    }
    let f: u128 = frac.parse().ok()?;
    let part = f * unit as u128 / 10u128.pow(frac.len() as u32);
    whole.checked_add(u64::try_from(part).ok()?)
}

/// Scientific notation and the like, through `f64`.
fn float(s: &str, unit: u64) -> Option<u64> {
    if !s.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-')) {
        return None;
    }
    let v: f64 = s.parse().ok()?;
    let x = v * unit as f64;
    // 2^64 as f64; `as` saturates, but an out-of-range value is an error, not u64::MAX.
    if !(0.0..18_446_744_073_709_551_616.0).contains(&x) {
        return None;
    }
    Some(x as u64)
}

/// 32 hex digits as a `u128` (an MD5 digest).
pub fn hex128(s: &str) -> Option<u128> {
    let s = s.trim();
    if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u128::from_str_radix(s, 16).ok()
}

/// `maj,min` (a Linux device number as blkparse and the FIU traces print it).
pub fn devno(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.trim().split_once(',')?;
    Some((u32::try_from(uint(a)?).ok()?, u32::try_from(uint(b)?).ok()?))
}

/// A one-letter operation, `R`/`r` read or `W`/`w` write (Alibaba, FIU, SPC).
pub(crate) fn op_letter(s: &str) -> Option<blockwell_core::Op> {
    match s.trim() {
        "R" | "r" => Some(blockwell_core::Op::Read),
        "W" | "w" => Some(blockwell_core::Op::Write),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact() {
        assert_eq!(decimal("0.000001240", 1_000_000_000), Some(1240));
        assert_eq!(decimal("12", 1_000), Some(12_000));
        assert_eq!(decimal(".5", 1_000_000_000), Some(500_000_000));
        assert_eq!(decimal("5.", 10), Some(50));
        assert_eq!(decimal("1.5e-3", 1_000_000_000), Some(1_500_000));
        assert_eq!(decimal("1.123456789123456789123", 1_000_000_000), Some(1_123_456_789));
        assert_eq!(decimal("-1", 1), None);
        assert_eq!(decimal("nan", 1), None);
        assert_eq!(decimal("inf", 1), None);
        assert_eq!(decimal("1e30", 1), None);
        assert_eq!(decimal("", 1), None);
        assert_eq!(decimal(".", 1), None);
        assert_eq!(decimal("18446744073709551615", 1), Some(u64::MAX));
        assert_eq!(decimal("18446744073709551615.9", 1), Some(u64::MAX));
        assert_eq!(decimal("1844674407370955161.5", 10), Some(u64::MAX));
        assert_eq!(decimal("1844674407370955161.6", 10), None);
        assert_eq!(decimal("18446744073709551616", 1), None);
    }

    #[test]
    fn integers_and_splits() {
        assert_eq!(uint(" 42 "), Some(42));
        assert_eq!(uint("+42"), None);
        assert_eq!(uint("4 2"), None);
        assert_eq!(scaled("36028797018963968", 512), None);
        assert_eq!(split::<3>("a,b,c,d", ','), (4, ["a", "b", "c"]));
        assert_eq!(split::<3>("a", ','), (1, ["a", "", ""]));
        assert_eq!(split::<3>("", ','), (1, ["", "", ""]));
        assert_eq!(split::<3>("é,,ü", ','), (3, ["é", "", "ü"]));
        assert_eq!(split::<2>("a§b", '§'), (2, ["a", "b"]));
        assert_eq!(split_ws::<2>("  a  b c "), (3, ["a", "b"]));
        assert_eq!(devno("8,16"), Some((8, 16)));
        assert_eq!(devno("8;16"), None);
        assert_eq!(hex128("000000000000000000000000000000ff"), Some(255));
        assert_eq!(hex128("0xff"), None);
    }
}
