//! Cleaners: how fast a write-back level writes its dirty blocks back to the next level.
//!
//! A cleaner decides *how many* dirty blocks to write back at a moment the driver chooses (a periodic tick);
//! the level decides *which* ([`crate::CacheLevel::clean_plan`]: in key order from where the last pass
//! stopped, merged into runs, as bcache's writeback walks its keys). Eviction of a dirty block and an explicit
//! flush or detach write back whatever the cleaner says. No clock here: the driver passes its own time (the
//! simulator's virtual nanoseconds, the server's monotonic clock).
//!
//! - `none`: no background cleaning. Dirty blocks are written back only when evicted, flushed out or detached.
//! - `watermark(high=30, low=10)`: EnhanceIO's dirty thresholds (`DIRTY_HIGH_THRESH_DEF` 30 %,
//!   `DIRTY_LOW_THRESH_DEF` 10 % of the cache): once the dirty share reaches `high` percent, clean as fast as
//!   the next level takes it until it is down to `low`. With `idle_ms` > 0, also clean everything once no
//!   request has arrived for that long.
//! - `pi(percent=10, p_inverse=40, i_inverse=10000, min_rate_kib=4, update_ms=5000, idle_ms=30000)`: bcache's
//!   writeback-rate controller (`drivers/md/bcache/writeback.c`, `__update_writeback_rate`, with its defaults:
//!   `writeback_percent` 10, `writeback_rate_p_term_inverse` 40, `writeback_rate_i_term_inverse` 10000,
//!   `writeback_rate_minimum` 8 sectors/s, an update every 5 s). Every `update_ms` the error `dirty - target`
//!   (target: `percent` of the capacity) sets the rate `error / p_inverse + integral / i_inverse` blocks per
//!   second, at least `min_rate_kib`; the integral accumulates `error * update seconds` when the error is
//!   negative and the integral positive, or the error positive and the cleaner kept up with the last rate (as
//!   bcache: no wind-up either way). Between updates, the quota grows at the rate (a token bucket of at most
//!   one second). After `idle_ms` without requests the rate is unlimited, as bcache's idle writeback.
//!
//! **State**: a few words per cleaner.

use crate::spec::{json_value, split_spec};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// A cleaner and its parameters, as written on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(tag = "cleaner", rename_all = "lowercase")]
pub enum CleanerSpec {
    None,
    Watermark { high: f64, low: f64, idle_ms: u64 },
    Pi { percent: f64, p_inverse: f64, i_inverse: f64, min_rate_kib: f64, update_ms: u64, idle_ms: u64 },
}

/// A cleaner spec that cannot be parsed or makes no sense.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cleaner '{spec}': {message} (known: none, watermark(high=30,low=10,idle_ms=0), pi(percent=10,p_inverse=40,i_inverse=10000,min_rate_kib=4,update_ms=5000,idle_ms=30000))")]
pub struct CleanerError {
    pub spec: String,
    pub message: String,
}

impl CleanerSpec {
    /// EnhanceIO's thresholds.
    pub const WATERMARK: CleanerSpec = CleanerSpec::Watermark { high: 30.0, low: 10.0, idle_ms: 0 };
    /// bcache's controller.
    pub const PI: CleanerSpec = CleanerSpec::Pi {
        percent: 10.0,
        p_inverse: 40.0,
        i_inverse: 10000.0,
        min_rate_kib: 4.0,
        update_ms: 5000,
        idle_ms: 30000,
    };

    pub fn name(&self) -> &'static str {
        match self {
            CleanerSpec::None => "none",
            CleanerSpec::Watermark { .. } => "watermark",
            CleanerSpec::Pi { .. } => "pi",
        }
    }

    /// Builds the cleaner.
    pub fn build(&self) -> Cleaner {
        Cleaner { spec: *self, state: State::default() }
    }
}

impl fmt::Display for CleanerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CleanerSpec::None => write!(f, "none"),
            CleanerSpec::Watermark { high, low, idle_ms } => {
                write!(f, "watermark(high={high},low={low},idle_ms={idle_ms})")
            }
            CleanerSpec::Pi { percent, p_inverse, i_inverse, min_rate_kib, update_ms, idle_ms } => write!(
                f,
                "pi(percent={percent},p_inverse={p_inverse},i_inverse={i_inverse},min_rate_kib={min_rate_kib},\
                 update_ms={update_ms},idle_ms={idle_ms})"
            ),
        }
    }
}

impl FromStr for CleanerSpec {
    type Err = CleanerError;
    fn from_str(s: &str) -> Result<Self, CleanerError> {
        let err = |message: String| CleanerError { spec: s.trim().to_string(), message };
        let t = split_spec(s).map_err(|e| err(e.to_string()))?;
        let mut spec = match t.name.to_ascii_lowercase().as_str() {
            "none" | "off" => CleanerSpec::None,
            "watermark" => Self::WATERMARK,
            "pi" | "bcache" => Self::PI,
            other => return Err(err(format!("unknown cleaner '{other}'"))),
        };
        for (k, v) in &t.params {
            let num = json_value(v).as_f64().filter(|x| x.is_finite() && *x >= 0.0);
            let num = num.ok_or_else(|| err(format!("{k}={v}: expected a number >= 0")))?;
            let known = match &mut spec {
                CleanerSpec::None => false,
                CleanerSpec::Watermark { high, low, idle_ms } => match k.as_str() {
                    "high" => set(high, num),
                    "low" => set(low, num),
                    "idle_ms" => set_ms(idle_ms, num),
                    _ => false,
                },
                CleanerSpec::Pi { percent, p_inverse, i_inverse, min_rate_kib, update_ms, idle_ms } => match k.as_str()
                {
                    "percent" => set(percent, num),
                    "p_inverse" => set(p_inverse, num),
                    "i_inverse" => set(i_inverse, num),
                    "min_rate_kib" => set(min_rate_kib, num),
                    "update_ms" => set_ms(update_ms, num),
                    "idle_ms" => set_ms(idle_ms, num),
                    _ => false,
                },
            };
            if !known {
                return Err(err(format!("unknown parameter '{k}'")));
            }
        }
        match spec {
            CleanerSpec::Watermark { high, low, .. } if !(low <= high && high <= 100.0) => {
                Err(err("needs 0 <= low <= high <= 100".into()))
            }
            CleanerSpec::Pi { percent, p_inverse, i_inverse, update_ms, .. }
                if percent > 100.0 || p_inverse < 1.0 || i_inverse < 1.0 || update_ms == 0 =>
            {
                Err(err("needs percent <= 100, p_inverse >= 1, i_inverse >= 1, update_ms > 0".into()))
            }
            s => Ok(s),
        }
    }
}

fn set(x: &mut f64, v: f64) -> bool {
    *x = v;
    true
}

fn set_ms(x: &mut u64, v: f64) -> bool {
    *x = v as u64;
    true
}

#[derive(Clone, Copy, Debug, Default)]
struct State {
    /// Watermark: between reaching `high` and getting down to `low`.
    cleaning: bool,
    /// PI: the time of the last update and of the last quota, the rate (blocks/s), the integral, unused quota.
    last_update: Option<u64>,
    last_quota: u64,
    rate: f64,
    integral: f64,
    tokens: f64,
    /// PI: quota handed out since the last update, and what the driver reported written of it.
    granted: f64,
    written: f64,
}

/// A running cleaner (see the module docs).
#[derive(Clone, Debug)]
pub struct Cleaner {
    spec: CleanerSpec,
    state: State,
}

/// What the driver tells a cleaner at a tick.
#[derive(Clone, Copy, Debug)]
pub struct CleanerInput {
    /// The driver's clock, in nanoseconds (monotone).
    pub now_ns: u64,
    pub dirty: u64,
    /// The level's capacity in blocks.
    pub capacity: u64,
    pub block_size: u64,
    /// Nanoseconds since the last request arrived.
    pub idle_ns: u64,
}

impl Cleaner {
    pub fn spec(&self) -> &CleanerSpec {
        &self.spec
    }

    /// The PI controller's current rate in blocks per second (`None` for the other cleaners).
    pub fn rate(&self) -> Option<f64> {
        matches!(self.spec, CleanerSpec::Pi { .. }).then_some(self.state.rate)
    }

    /// The driver wrote back `blocks` of the quota it was given.
    pub fn written(&mut self, blocks: u64) {
        self.state.written += blocks as f64;
    }

    /// How many dirty blocks to write back now (`u64::MAX`: as many as there are).
    pub fn quota(&mut self, i: CleanerInput) -> u64 {
        let st = &mut self.state;
        match self.spec {
            CleanerSpec::None => 0,
            CleanerSpec::Watermark { high, low, idle_ms } => {
                let pct = if i.capacity == 0 { 0.0 } else { i.dirty as f64 * 100.0 / i.capacity as f64 };
                if pct >= high && i.dirty > 0 {
                    st.cleaning = true;
                }
                if pct <= low {
                    st.cleaning = false;
                }
                if idle_ms > 0 && i.idle_ns >= idle_ms * 1_000_000 && i.dirty > 0 {
                    return u64::MAX;
                }
                if st.cleaning {
                    // Down to the low mark.
                    let keep = (low * i.capacity as f64 / 100.0).floor() as u64;
                    i.dirty.saturating_sub(keep).max(1)
                } else {
                    0
                }
            }
            CleanerSpec::Pi { percent, p_inverse, i_inverse, min_rate_kib, update_ms, idle_ms } => {
                let min_rate = (min_rate_kib * 1024.0 / i.block_size as f64).max(f64::MIN_POSITIVE);
                let period = update_ms * 1_000_000;
                let last = *st.last_update.get_or_insert(i.now_ns);
                if st.rate == 0.0 {
                    st.rate = min_rate;
                    st.last_quota = i.now_ns;
                }
                if i.now_ns >= last + period {
                    let target = percent / 100.0 * i.capacity as f64;
                    let error = i.dirty as f64 - target;
                    let kept_up = st.written + 0.5 >= st.granted;
                    let secs = update_ms as f64 / 1000.0;
                    if (error < 0.0 && st.integral > 0.0) || (error > 0.0 && kept_up) {
                        st.integral += error * secs;
                    }
                    st.rate = (error / p_inverse + st.integral / i_inverse).max(min_rate);
                    st.last_update = Some(i.now_ns);
                    st.granted = 0.0;
                    st.written = 0.0;
                }
                if idle_ms > 0 && i.idle_ns >= idle_ms * 1_000_000 && i.dirty > 0 {
                    st.last_quota = i.now_ns;
                    return u64::MAX;
                }
                let dt = i.now_ns.saturating_sub(st.last_quota) as f64 / 1e9;
                st.last_quota = i.now_ns;
                st.tokens = (st.tokens + st.rate * dt).min(st.rate.max(1.0));
                let q = st.tokens.floor();
                st.tokens -= q;
                st.granted += q;
                q as u64
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(now_s: f64, dirty: u64) -> CleanerInput {
        CleanerInput { now_ns: (now_s * 1e9) as u64, dirty, capacity: 1000, block_size: 4096, idle_ns: 0 }
    }

    #[test]
    fn specs_parse_with_defaults_and_refuse_nonsense() {
        assert_eq!("none".parse::<CleanerSpec>().unwrap(), CleanerSpec::None);
        assert_eq!("watermark".parse::<CleanerSpec>().unwrap(), CleanerSpec::WATERMARK);
        assert_eq!(
            "watermark(high=50,low=20)".parse::<CleanerSpec>().unwrap(),
            CleanerSpec::Watermark { high: 50.0, low: 20.0, idle_ms: 0 }
        );
        let pi: CleanerSpec = "pi(percent=5)".parse().unwrap();
        assert!(matches!(pi, CleanerSpec::Pi { percent, p_inverse, .. } if percent == 5.0 && p_inverse == 40.0));
        assert_eq!(pi.to_string().parse::<CleanerSpec>().unwrap(), pi, "Display round-trips");
        for bad in ["lru", "watermark(high=10,low=20)", "pi(bogus=1)", "watermark(high=x)", "pi(update_ms=0)"] {
            let e = bad.parse::<CleanerSpec>().unwrap_err();
            assert!(e.to_string().starts_with(&format!("cleaner '{bad}'")), "{e}");
        }
    }

    #[test]
    fn watermark_cleans_from_high_down_to_low() {
        let mut c = CleanerSpec::WATERMARK.build();
        assert_eq!(c.quota(input(0.0, 200)), 0, "20 % dirty: below high");
        assert_eq!(c.quota(input(1.0, 300)), 200, "30 %: down to 10 %");
        assert!(c.quota(input(2.0, 150)) > 0, "still above low: keeps cleaning");
        assert_eq!(c.quota(input(3.0, 100)), 0, "at low: stops");
        assert_eq!(c.quota(input(4.0, 250)), 0, "below high again: waits");
        let mut idle = CleanerSpec::Watermark { high: 30.0, low: 10.0, idle_ms: 1000 }.build();
        assert_eq!(idle.quota(CleanerInput { idle_ns: 2_000_000_000, ..input(5.0, 5) }), u64::MAX);
    }

    #[test]
    fn pi_rate_follows_the_error_like_bcache() {
        let mut c = CleanerSpec::PI.build();
        // Far above the 10 % target: the proportional term alone gives (900 - 100) / 40 = 20 blocks/s.
        c.quota(input(0.0, 900));
        c.quota(input(5.0, 900));
        let r1 = c.rate().unwrap();
        assert!((r1 - (800.0 / 40.0 + 800.0 * 5.0 / 10000.0)).abs() < 1e-9, "{r1}");
        // The quota over the next second is about the rate.
        let q: u64 = (1..=10).map(|k| c.quota(input(5.0 + k as f64 * 0.1, 900))).sum();
        assert!((19..=21).contains(&q), "{q}");
        c.written(q);
        // Below target: the rate falls to the minimum (4 KiB/s = 1 block/s).
        c.quota(input(10.0, 50));
        c.quota(input(15.0, 50));
        c.quota(input(20.0, 50));
        assert!(c.rate().unwrap() <= r1, "{:?}", c.rate());
        for _ in 0..50 {
            c.quota(input(25.0, 0));
        }
        let mut t = 25.0;
        while c.rate().unwrap() > 1.0 + 1e-9 && t < 5000.0 {
            t += 5.0;
            c.quota(input(t, 0));
        }
        assert!((c.rate().unwrap() - 1.0).abs() < 1e-9, "the minimum rate: {:?}", c.rate());
        // Idle: everything.
        assert_eq!(c.quota(CleanerInput { idle_ns: 31_000_000_000, ..input(t + 1.0, 10) }), u64::MAX);
    }
}
