//! An SSD timing model: per-operation latency, a host-interface bandwidth and parallel channels.
//!
//! What it models: a request is split into pages of `page_bytes`; page `p` (by absolute page number) goes to
//! channel `p mod channels` (static striping, as flash translation layers lay out sequential data). Each channel
//! serves one page at a time and keeps a busy-until time, so a request of more pages than channels takes several
//! rounds and a request whose pages all land on one channel is serialized. A page costs the read or write latency
//! on its channel; the host interface moves the request's bytes at `mbps` (MB/s, 10^6 bytes): the request
//! completes when its last page is done plus that page's interface transfer, and never before the whole request
//! has crossed the interface. Channel state persists across requests (a write's program time may still occupy a
//! channel when the next request starts only if the caller issues it early; with sequential service every
//! channel is free again). No garbage collection, no write buffer, no read/write interference beyond channels.
//!
//! Parameters (defaults = the `sata-ssd` preset; all presets are representative values, not measurements of one
//! product, stated as assumptions in `docs/disk-model.md`):
//!
//! | parameter | `sata-ssd` | `nvme-ssd` | meaning |
//! |---|---|---|---|
//! | `read_us` | 90 | 70 | page read latency |
//! | `write_us` | 50 | 20 | page write latency (as the host sees it, DRAM-buffered) |
//! | `mbps` | 530 | 3400 | host interface bandwidth, MB/s |
//! | `channels` | 16 | 64 | parallel flash units (channels × dies), enough for `mbps` on sequential reads |
//! | `page_kib` | 4 | 4 | page size |
//! | `capacity_gb` | 256 | 1024 | capacity (10^9 bytes) |

use crate::{DiskModel, DiskOp, DiskRequest, SECTOR};
use serde::{Deserialize, Serialize};

/// `ssd-004`'s page read latency in µs (\[C\], see [`SsdParams::seed004`]).
pub const SSD004_READ_US: f64 = 35.46;
/// `ssd-004`'s page write latency in µs (\[C\]).
pub const SSD004_WRITE_US: f64 = 110.7;

/// SSD parameters (see the module doc).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SsdParams {
    pub name: String,
    pub read_us: f64,
    pub write_us: f64,
    pub mbps: f64,
    pub channels: u32,
    pub page_kib: u32,
    pub capacity_gb: f64,
}

impl SsdParams {
    /// A SATA SSD (550 MB/s class): the `ssd` defaults.
    pub fn sata() -> Self {
        SsdParams {
            name: "sata-ssd".into(),
            read_us: 90.0,
            write_us: 50.0,
            mbps: 530.0,
            channels: 16,
            page_kib: 4,
            capacity_gb: 256.0,
        }
    }

    /// An NVMe SSD (PCIe 3.0 x4 class).
    pub fn nvme() -> Self {
        SsdParams {
            name: "nvme-ssd".into(),
            read_us: 70.0,
            write_us: 20.0,
            mbps: 3400.0,
            channels: 64,
            page_kib: 4,
            capacity_gb: 1024.0,
        }
    }

    /// The SSD of seed `004_*` (Koutoupis, 2013): a SATA III SSD that fio measured at 4 KiB and queue depth 32 at
    /// 231 MB/s sequential and 230 MB/s random read, 74 and 72 MB/s sequential and random write. The article
    /// names no model; 60 GB (its FlashCache reports a 57018 MiB cache). \[A\] 2 parallel units (few enough that
    /// 16 random requests in flight keep both busy nearly all the time: the article's random rates are within 3 %
    /// of its sequential ones) and a 550 MB/s interface; \[C\] the page latencies: 2 units × 4 KiB / latency is the
    /// saturated sequential rate, 231 and 74 MB/s (`docs/experiments/device-caches.md` has the calibration).
    pub fn seed004() -> Self {
        SsdParams {
            name: "ssd-004".into(),
            read_us: SSD004_READ_US,
            write_us: SSD004_WRITE_US,
            mbps: 550.0,
            channels: 2,
            page_kib: 4,
            capacity_gb: 60.0,
        }
    }

    /// Rejects values the model cannot use; the error names the parameter.
    pub fn check(&self) -> Result<(), crate::ParamError> {
        self.problems().map_err(crate::ParamError)
    }

    fn problems(&self) -> Result<(), String> {
        for (n, v) in [("read_us", self.read_us), ("write_us", self.write_us)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{n} must be a finite number >= 0 (is {v})"));
            }
        }
        if !(self.mbps.is_finite() && self.mbps > 0.0) {
            return Err(format!("mbps must be > 0 (is {})", self.mbps));
        }
        if self.channels == 0 {
            return Err("channels must be > 0".into());
        }
        if self.page_kib == 0 || self.page_kib > 1024 {
            return Err(format!("page_kib must be in 1..=1024 (is {})", self.page_kib));
        }
        if !(self.capacity_gb.is_finite() && self.capacity_gb * 1e9 >= SECTOR as f64) {
            return Err(format!("capacity_gb must be > 0 (is {})", self.capacity_gb));
        }
        Ok(())
    }
}

/// The SSD model (see the module doc).
#[derive(Clone, Debug)]
pub struct SsdModel {
    p: SsdParams,
    read_ns: u64,
    write_ns: u64,
    /// Interface time per byte, in ns × 2^20 (fixed point, so small transfers keep their precision).
    xfer_ns_per_byte_fx: u64,
    page_sectors: u64,
    cap: u64,
    busy: Vec<u64>,
}

impl SsdModel {
    pub fn new(p: SsdParams) -> Result<SsdModel, crate::ParamError> {
        p.check()?;
        let page_sectors = (u64::from(p.page_kib) * 1024 / SECTOR).max(1);
        Ok(SsdModel {
            read_ns: (p.read_us * 1000.0).round() as u64,
            write_ns: (p.write_us * 1000.0).round() as u64,
            xfer_ns_per_byte_fx: ((1000.0 / p.mbps) * f64::from(1u32 << 20)).round() as u64,
            page_sectors,
            cap: ((p.capacity_gb * 1e9) as u64 / SECTOR).max(1),
            busy: vec![0; p.channels as usize],
            p,
        })
    }

    pub fn params(&self) -> &SsdParams {
        &self.p
    }

    fn xfer_ns(&self, bytes: u64) -> u64 {
        ((u128::from(bytes) * u128::from(self.xfer_ns_per_byte_fx)) >> 20) as u64
    }
}

impl DiskModel for SsdModel {
    fn service(&mut self, now_ns: u64, req: &DiskRequest) -> u64 {
        let n = req.sectors.clamp(1, self.cap);
        let start = req.sector % self.cap;
        let first_page = start / self.page_sectors;
        let last_page = (start + n - 1) / self.page_sectors;
        let lat = match req.op {
            DiskOp::Read => self.read_ns,
            DiskOp::Write => self.write_ns,
        };
        let page_bytes = self.page_sectors * SECTOR;
        let channels = self.busy.len() as u64;
        let pages = last_page - first_page + 1;
        let page_xfer = self.xfer_ns(page_bytes.min(n * SECTOR));
        let mut done = now_ns + self.xfer_ns(n * SECTOR);
        // Pages go round-robin over the channels; each channel serves its share back to back.
        for ch in 0..channels {
            let first_on_ch = (ch + channels - first_page % channels) % channels; // offset of its first page
            if first_on_ch >= pages {
                continue;
            }
            let count = (pages - first_on_ch - 1) / channels + 1;
            let b = &mut self.busy[ch as usize];
            *b = (*b).max(now_ns) + count * lat;
            done = done.max(*b + page_xfer);
        }
        done - now_ns
    }

    fn capacity_sectors(&self) -> u64 {
        self.cap
    }

    /// Channels keep their own busy times: overlapping requests queue per channel.
    fn overlapping(&self) -> bool {
        true
    }

    fn reset(&mut self) {
        self.busy.iter_mut().for_each(|b| *b = 0);
    }

    fn boxed_clone(&self) -> Box<dyn DiskModel> {
        let mut c = self.clone();
        c.reset();
        Box::new(c)
    }

    fn describe(&self) -> String {
        let p = &self.p;
        format!(
            "{}: read {} us, write {} us per {} KiB page, {} MB/s, {} channels, {} GB",
            p.name, p.read_us, p.write_us, p.page_kib, p.mbps, p.channels, p.capacity_gb
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ssd(channels: u32) -> SsdModel {
        SsdModel::new(SsdParams { channels, mbps: 1e6, ..SsdParams::sata() }).unwrap()
    }

    #[test]
    fn pages_on_different_channels_proceed_in_parallel() {
        // 8 pages of 4 KiB = 64 sectors.
        let mut m = ssd(8);
        let one = m.service(0, &DiskRequest::read(0, 8));
        let eight = m.service(1_000_000, &DiskRequest::read(0, 64));
        let sixteen = m.service(2_000_000, &DiskRequest::read(0, 128));
        assert!(eight < one + one / 10, "8 pages on 8 channels ≈ one page: {eight} vs {one}");
        assert!((2 * 90_000..2 * 90_000 + 10_000).contains(&sixteen), "two rounds: {sixteen}");
        let mut serial = ssd(1);
        let eight1 = serial.service(0, &DiskRequest::read(0, 64));
        assert!(eight1 >= 8 * 90_000, "one channel serializes: {eight1}");
    }

    #[test]
    fn bandwidth_bounds_large_requests_and_writes_use_write_latency() {
        let mut m = SsdModel::new(SsdParams::sata()).unwrap();
        let mib = m.service(0, &DiskRequest::read(0, 2048)); // 1 MiB at 530 MB/s ≈ 1.98 ms
        assert!((1_978_000..2_100_000).contains(&mib), "{mib}");
        m.reset();
        let w = m.service(0, &DiskRequest::write(0, 8));
        let r = m.service(w, &DiskRequest::read(0, 8));
        assert!(w < r, "write {w} vs read {r}");
    }

    #[test]
    fn a_busy_channel_delays_an_early_request() {
        let mut m = ssd(8);
        let a = m.service(0, &DiskRequest::read(0, 8));
        // Issued before the first finished (a caller that overlaps requests): waits for channel 0.
        let b = m.service(a / 2, &DiskRequest::read(0, 8));
        assert!(b > a / 2 + 90_000 - 1, "{a} {b}");
        let c = m.service(a / 2 + b, &DiskRequest::read(8, 8)); // channel 1 is free
        assert!(c <= a);
    }
}
