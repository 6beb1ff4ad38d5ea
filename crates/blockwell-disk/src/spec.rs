//! The device registry: one place that names every model and preset and parses specs such as `barracuda`,
//! `barracuda(write_cache=0,segments=8)`, `ssd(read_us=80,write_us=200,mbps=500,channels=8)` or
//! `memory(slowdown=4)` into a [`DiskSpec`], then a `Box<dyn DiskModel>`. Same shape as
//! `blockwell_core::PolicySpec::parse`: `name` or `name(key=value,...)`, unknown names and parameters are errors
//! that list what is known, and values are checked when parsed, not in the middle of a run.

use crate::hdd::{HddModel, HddParams};
use crate::memory::{MemoryModel, MemoryParams};
use crate::presets;
use crate::ssd::{SsdModel, SsdParams};
use crate::DiskModel;

/// A bad device spec.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error("unknown disk model '{name}' (known: {known})")]
    UnknownModel { name: String, known: String },
    #[error("{model}: unknown parameter '{param}' (known: {known})")]
    UnknownParam { model: String, param: String, known: String },
    #[error("{model}: parameter '{param}': expected {expected}, found '{value}'")]
    BadValue { model: String, param: String, value: String, expected: String },
    #[error("{model}: {message}")]
    Invalid { model: String, message: String },
    #[error("disk spec '{spec}': {message}")]
    Syntax { spec: String, message: String },
}

/// A parsed device: which model with which parameters.
#[derive(Clone, Debug, PartialEq)]
pub enum DeviceParams {
    Hdd(HddParams),
    Ssd(SsdParams),
    Memory(MemoryParams),
}

/// A parsed spec (keeps the text it came from, for reports).
#[derive(Clone, Debug, PartialEq)]
pub struct DiskSpec {
    pub params: DeviceParams,
    text: String,
}

/// Every preset and model name with a one-line description.
pub fn list() -> Vec<(&'static str, &'static str)> {
    let mut v: Vec<(&str, &str)> = presets::HDD_PRESETS.to_vec();
    v.extend_from_slice(&[
        ("sata-ssd", "SATA SSD: 90 us read, 50 us write per 4 KiB page, 530 MB/s, 16 parallel units (also: ssd)"),
        ("nvme-ssd", "NVMe SSD: 70 us read, 20 us write per 4 KiB page, 3400 MB/s, 64 parallel units"),
        (
            "ssd-004",
            "Koutoupis' SATA SSD (Linux Journal): 35.46 us read, 110.7 us write per 4 KiB page, 2 units (231/74 MB/s; calibrated)",
        ),
        ("memory", "DRAM tier: 1950 ns per 4 KiB block x slowdown (default 1) (also: dram)"),
        ("ecs", "the extended-storage paper's file memory 3x slower than DRAM (memory(slowdown=3))"),
    ]);
    v
}

/// The parameters each kind of model takes, for error messages and `blockwell disk list`.
pub const HDD_KEYS: &[&str] = &[
    "segments",
    "segment_sectors",
    "read_ahead",
    "read_ahead_on_hit",
    "read_behind",
    "write_cache",
    "max_write_segments",
    "bus_us",
    "overhead_ms",
    "head_switch_ms",
    "write_settle_ms",
    "rpm",
    "seek_a",
    "seek_b",
    "seek_d0",
    "seek_c",
    "seek_e",
    "read_overhead_ms",
    "write_overhead_ms",
    "ncq",
    "combine_writes",
];
pub const SSD_KEYS: &[&str] = &["read_us", "write_us", "mbps", "channels", "page_kib", "capacity_gb"];
pub const MEMORY_KEYS: &[&str] = &["slowdown", "block_kib", "dram_ns", "capacity_gb"];

fn base(name: &str) -> Option<DeviceParams> {
    if let Some(h) = presets::hdd(name) {
        return Some(DeviceParams::Hdd(h));
    }
    match name.to_ascii_lowercase().as_str() {
        "ssd" | "sata-ssd" | "sata_ssd" => Some(DeviceParams::Ssd(SsdParams::sata())),
        "nvme-ssd" | "nvme_ssd" | "nvme" => Some(DeviceParams::Ssd(SsdParams::nvme())),
        "ssd-004" | "ssd004" => Some(DeviceParams::Ssd(SsdParams::seed004())),
        "memory" | "dram" | "mem" => Some(DeviceParams::Memory(MemoryParams::dram())),
        "ecs" | "es" => Some(DeviceParams::Memory(MemoryParams::ecs())),
        _ => None,
    }
}

struct Setter<'a> {
    model: &'a str,
    key: &'a str,
    value: &'a str,
}

impl Setter<'_> {
    fn bad(&self, expected: &str) -> SpecError {
        SpecError::BadValue {
            model: self.model.into(),
            param: self.key.into(),
            value: self.value.into(),
            expected: expected.into(),
        }
    }

    fn f64(&self) -> Result<f64, SpecError> {
        self.value.parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(|| self.bad("a number"))
    }

    fn u32(&self) -> Result<u32, SpecError> {
        self.value.parse::<u32>().map_err(|_| self.bad("a non-negative integer"))
    }

    fn u64(&self) -> Result<u64, SpecError> {
        self.value.parse::<u64>().map_err(|_| self.bad("a non-negative integer"))
    }

    fn bool(&self) -> Result<bool, SpecError> {
        match self.value.to_ascii_lowercase().as_str() {
            "1" | "true" | "on" | "yes" => Ok(true),
            "0" | "false" | "off" | "no" => Ok(false),
            _ => Err(self.bad("a boolean (0/1, true/false, on/off)")),
        }
    }
}

fn unknown(model: &str, key: &str, known: &[&str]) -> SpecError {
    SpecError::UnknownParam { model: model.into(), param: key.into(), known: known.join(", ") }
}

impl DiskSpec {
    /// Parses `name` or `name(key=value,...)`.
    pub fn parse(s: &str) -> Result<DiskSpec, SpecError> {
        let s = s.trim();
        let (name, args) = match s.find('(') {
            Some(i) if s.ends_with(')') => (s[..i].trim(), &s[i + 1..s.len() - 1]),
            Some(_) => {
                return Err(SpecError::Syntax {
                    spec: s.into(),
                    message: "expected name(key=value,...) with a closing ')'".into(),
                })
            }
            None => (s, ""),
        };
        let mut params = base(name).ok_or_else(|| SpecError::UnknownModel {
            name: name.into(),
            known: list().iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", "),
        })?;
        let model = name.to_ascii_lowercase();
        for kv in args.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| SpecError::Syntax {
                spec: s.into(),
                message: format!("expected key=value, found '{kv}'"),
            })?;
            let key = k.trim().replace('-', "_");
            let set = Setter { model: &model, key: &key, value: v.trim() };
            match &mut params {
                DeviceParams::Hdd(h) => match key.as_str() {
                    "segments" => h.segments = set.u32()?,
                    "segment_sectors" => h.segment_sectors = set.u32()?,
                    "read_ahead" => h.read_ahead = set.bool()?,
                    "read_ahead_on_hit" => h.read_ahead_on_hit = set.bool()?,
                    "read_behind" => h.read_behind = set.bool()?,
                    "write_cache" => h.write_cache = set.bool()?,
                    "max_write_segments" => h.max_write_segments = set.u32()?,
                    "bus_us" => h.bus_us_per_sector = set.f64()?,
                    "overhead_ms" => h.overhead.set_all(set.f64()?),
                    "head_switch_ms" => h.head_switch_ms = set.f64()?,
                    "write_settle_ms" => h.write_settle_ms = set.f64()?,
                    "rpm" => h.rpm = set.u32()?,
                    "seek_a" => h.seek.a = set.f64()?,
                    "seek_b" => h.seek.b = set.f64()?,
                    "seek_d0" => h.seek.d0 = set.u32()?,
                    "seek_c" => h.seek.c = set.f64()?,
                    "seek_e" => h.seek.e = set.f64()?,
                    "read_overhead_ms" => h.overhead.set_reads(set.f64()?),
                    "write_overhead_ms" => h.overhead.set_writes(set.f64()?),
                    "ncq" => h.ncq = set.u32()?,
                    "combine_writes" => h.combine_writes = set.bool()?,
                    _ => return Err(unknown(&model, &key, HDD_KEYS)),
                },
                DeviceParams::Ssd(p) => match key.as_str() {
                    "read_us" => p.read_us = set.f64()?,
                    "write_us" => p.write_us = set.f64()?,
                    "mbps" => p.mbps = set.f64()?,
                    "channels" => p.channels = set.u32()?,
                    "page_kib" => p.page_kib = set.u32()?,
                    "capacity_gb" => p.capacity_gb = set.f64()?,
                    _ => return Err(unknown(&model, &key, SSD_KEYS)),
                },
                DeviceParams::Memory(p) => match key.as_str() {
                    "slowdown" => p.slowdown = set.f64()?,
                    "block_kib" => p.block_kib = set.u32()?,
                    "dram_ns" => p.dram_ns = set.u64()?,
                    "capacity_gb" => p.capacity_gb = set.f64()?,
                    _ => return Err(unknown(&model, &key, MEMORY_KEYS)),
                },
            }
        }
        let checked = match &params {
            DeviceParams::Hdd(h) => h.check(),
            DeviceParams::Ssd(p) => p.check(),
            DeviceParams::Memory(p) => p.check(),
        };
        checked.map_err(|e| SpecError::Invalid { model: model.clone(), message: e.0 })?;
        Ok(DiskSpec { params, text: s.to_string() })
    }

    /// Parses `s` and builds the model in one step.
    pub fn model(s: &str) -> Result<Box<dyn DiskModel>, SpecError> {
        DiskSpec::parse(s)?.build()
    }

    /// The text the spec was parsed from.
    pub fn label(&self) -> &str {
        &self.text
    }

    /// A model in its power-on state.
    pub fn build(&self) -> Result<Box<dyn DiskModel>, SpecError> {
        let invalid = |e: crate::ParamError| SpecError::Invalid { model: self.text.clone(), message: e.0 };
        Ok(match &self.params {
            DeviceParams::Hdd(h) => Box::new(HddModel::new(h.clone()).map_err(invalid)?),
            DeviceParams::Ssd(p) => Box::new(SsdModel::new(p.clone()).map_err(invalid)?),
            DeviceParams::Memory(p) => Box::new(MemoryModel::new(p.clone()).map_err(invalid)?),
        })
    }
}

impl std::str::FromStr for DiskSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DiskSpec::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DiskRequest;

    #[test]
    fn every_listed_name_builds() {
        for (name, desc) in list() {
            let s = DiskSpec::parse(name).unwrap_or_else(|e| panic!("{name}: {e}"));
            let m = s.build().unwrap();
            assert!(m.capacity_sectors() > 0, "{name}");
            assert!(!desc.is_empty());
            assert!(!m.describe().is_empty());
        }
    }

    #[test]
    fn overrides_apply() {
        let s = DiskSpec::parse("ssd(read_us=80, write_us=200, mbps=500, channels=8)").unwrap();
        match &s.params {
            DeviceParams::Ssd(p) => {
                assert_eq!((p.read_us, p.write_us, p.mbps, p.channels), (80.0, 200.0, 500.0, 8));
            }
            other => panic!("{other:?}"),
        }
        let mut m = DiskSpec::parse("memory(slowdown=4)").unwrap().build().unwrap();
        assert_eq!(m.service(0, &DiskRequest::read(0, 8)), 4 * 1950);
        let s = DiskSpec::parse("Barracuda(write_cache=off,segments=8,segment-sectors=128)").unwrap();
        match &s.params {
            DeviceParams::Hdd(h) => assert!(!h.write_cache && h.segments == 8 && h.segment_sectors == 128),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.label(), "Barracuda(write_cache=off,segments=8,segment-sectors=128)");
    }

    #[test]
    fn every_model_survives_odd_requests_and_is_deterministic() {
        let mut x = 99u64;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            x >> 11
        };
        let reqs: Vec<(u64, DiskRequest)> = (0..400)
            .map(|i| {
                let sector = match i % 5 {
                    0 => u64::MAX - next() % 1000, // far beyond the capacity: wraps
                    1 => next(),
                    _ => next() % 10_000_000,
                };
                let sectors = match i % 7 {
                    _ if i == 1 => u64::MAX, // clamped to the capacity
                    0 => 0,                  // treated as 1
                    1 => 1 << 16,
                    _ => 1 + next() % 300,
                };
                let op = if i % 3 == 0 { crate::DiskOp::Write } else { crate::DiskOp::Read };
                let gap = [0, 10_000, 5_000_000][(i % 3) as usize];
                (gap, DiskRequest { op, sector, sectors })
            })
            .collect();
        let options =
            ["wd1200bb(read_behind=1)", "barracuda(read_behind=1,read_ahead_on_hit=1)", "hp97560(read_behind=1)"];
        for name in list().into_iter().map(|(n, _)| n).chain(options) {
            let mut a = DiskSpec::model(name).unwrap();
            let mut b = a.boxed_clone();
            let run = |m: &mut Box<dyn crate::DiskModel>| {
                let mut t = 0u64;
                reqs.iter()
                    .map(|(gap, r)| {
                        let s = m.service(t, r);
                        t += s + gap;
                        s
                    })
                    .collect::<Vec<u64>>()
            };
            let (ra, rb) = (run(&mut a), run(&mut b));
            assert_eq!(ra, rb, "{name}");
            assert!(ra.iter().all(|&s| s > 0), "{name}: every request takes some time");
        }
    }

    #[test]
    fn errors_name_the_bad_part() {
        let e = DiskSpec::parse("floppy").unwrap_err().to_string();
        assert!(e.contains("unknown disk model 'floppy'") && e.contains("barracuda"), "{e}");
        let e = DiskSpec::parse("ssd(latency=3)").unwrap_err().to_string();
        assert!(e.contains("unknown parameter 'latency'") && e.contains("read_us"), "{e}");
        let e = DiskSpec::parse("ssd(channels=many)").unwrap_err().to_string();
        assert!(e.contains("'channels'") && e.contains("many"), "{e}");
        let e = DiskSpec::parse("ssd(channels=0)").unwrap_err().to_string();
        assert!(e.contains("channels must be > 0"), "{e}");
        let e = DiskSpec::parse("memory(slowdown=4").unwrap_err().to_string();
        assert!(e.contains("closing ')'"), "{e}");
        let e = DiskSpec::parse("memory(slowdown)").unwrap_err().to_string();
        assert!(e.contains("key=value"), "{e}");
        let e = DiskSpec::parse("cheetah9lp(read_ahead=maybe)").unwrap_err().to_string();
        assert!(e.contains("'read_ahead'") && e.contains("boolean"), "{e}");
        let e = DiskSpec::parse("hp97560(rpm=0)").unwrap_err().to_string();
        assert!(e.contains("rpm"), "{e}");
    }

    #[test]
    fn read_behind_is_off_in_every_preset_and_parses_like_read_ahead() {
        let hdd = |s: &str| match DiskSpec::parse(s).unwrap().params {
            DeviceParams::Hdd(h) => h,
            other => panic!("{other:?}"),
        };
        for (name, _) in presets::HDD_PRESETS {
            assert!(!hdd(name).read_behind, "{name}");
        }
        assert!(hdd("wd1200bb(read_behind=1)").read_behind);
        assert!(hdd("wd1200bb(read-behind=on)").read_behind);
        assert!(!hdd("wd1200bb(read_behind=false)").read_behind);
        let e = DiskSpec::parse("wd1200bb(read_behind=maybe)").unwrap_err().to_string();
        assert!(e.contains("'read_behind'") && e.contains("maybe") && e.contains("boolean"), "{e}");
        let e = DiskSpec::parse("wd1200bb(read_behnd=1)").unwrap_err().to_string();
        assert!(e.contains("read_behind"), "the known parameters are listed: {e}");
        assert!(DiskSpec::model("wd1200bb(read_behind=1)").unwrap().describe().contains("read-behind on"));
        assert!(!DiskSpec::model("wd1200bb").unwrap().describe().contains("read-behind"));
    }
}
