//! What Blockwell's test suites share (a dev-dependency only): [`Rng`], a small deterministic generator,
//! [`skip`], the one way a test says it cannot run here, and [`nbd::RawClient`], an NBD client that can
//! misbehave.

pub mod nbd;

/// xorshift64 (Marsaglia's 13, 7, 17): deterministic, dependency-free randomness for tests. The seed must not
/// be 0.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (`n` >= 1; modulo bias is fine for tests).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Reports a test that cannot run here (a tool, `/dev/fuse` or `../shared` missing) with "SKIPPED: ...". In CI
/// (`CI` set), where the test command installed everything, a skip is a failure.
pub fn skip(why: &str) {
    assert!(std::env::var_os("CI").is_none(), "in CI nothing may skip, but: {why}");
    eprintln!("SKIPPED: {why}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_xorshift64_and_stays_in_range() {
        let mut r = Rng(1);
        assert_eq!(r.next(), 1082269761);
        let mut r = Rng(0x2545_f491);
        for _ in 0..10_000 {
            assert!(r.below(7) < 7);
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
        }
    }
}
