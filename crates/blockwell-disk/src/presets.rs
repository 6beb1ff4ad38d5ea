//! Hard-disk presets, each parameter with its source.
//!
//! Sources:
//! - **\[RM\]** `../shared/reference/disk-models.md`: Ruemmler-Wilkes seek-curve fits (least squares to DiskSim's
//!   measured `*.seek` tables), rpm, cylinders, buffer segments.
//! - **\[DS\]** DiskSim 2.01.016's own parameter files for the validated drives, `../shared/reference/disk/
//!   {barracuda,cheetah9LP}.{diskspecs,model}`: zones (cylinders, sectors per track, skews), heads, block count,
//!   head switch, write settle, the eight command overheads, bus time per sector, buffer segments and sizes,
//!   read-ahead, no read-behind (`Read any free blocks = 0`), write caching (`Fast write level` 1 and 2: writes
//!   are acknowledged from the buffer).
//! - **\[RW\]** Ruemmler & Wilkes, "An introduction to disk drive modeling", IEEE Computer 27(3), 1994, HP 97560.
//! - **\[WD\]** Western Digital Caviar WD1200BB data sheet (7200 rpm, 120 GB, 2 MB buffer, ATA-100; average seek
//!   8.9 ms, track-to-track 2.0 ms, full stroke 21 ms), and seed `000_*` §4 (the test disk: WD1200BB, 120 GB,
//!   2 MB cache).
//! - **\[A\]** an assumption, stated where used (and in `docs/disk-model.md`).
//!
//! | preset | drive | what is assumed |
//! |---|---|---|
//! | `barracuda` | Seagate Barracuda ST32171W | nothing: \[RM\] seek, \[DS\] everything else |
//! | `cheetah9lp` | Seagate Cheetah 9LP ST39102LW (seed 001's disk) | nothing: \[RM\] seek, \[DS\] everything else |
//! | `wd1200bb` | WD Caviar WD1200BB (seed 000's disk) | geometry (4 heads, 8 zones), d0, overheads, segments, no read-behind |
//! | `hp97560` | HP 97560 | buffer layout (2 × 128 sectors), write cache off, no read-behind |
//! | `hdd-004` | seed 004's HDD (not named) | everything but rpm and NCQ; three parameters calibrated to the article |

use crate::hdd::{HddParams, Overheads, SeekCurve, Zone};

/// Every HDD preset name, with a one-line description.
pub const HDD_PRESETS: &[(&str, &str)] = &[
    ("barracuda", "Seagate Barracuda ST32171W, 7200 rpm, 2.1 GB, 3x281-sector buffer (DiskSim validated disk)"),
    ("cheetah9lp", "Seagate Cheetah 9LP ST39102LW, 10045 rpm, 9.1 GB, 3x561-sector buffer (Butt et al.'s disk)"),
    ("wd1200bb", "WD Caviar WD1200BB, 7200 rpm, 120 GB, 2 MB buffer (the REDCAP paper's disk; geometry assumed)"),
    ("hp97560", "HP 97560, 4002 rpm, 1.3 GB, 128 KB buffer (Ruemmler & Wilkes 1994)"),
    ("hdd-004", "Koutoupis' SATA HDD (Linux Journal): 7200 rpm, 500 GB, NCQ 32; calibrated to 115/72 MB/s sequential, ~2 MB/s random"),
];

/// The preset named `name` (case-insensitive), if any.
pub fn hdd(name: &str) -> Option<HddParams> {
    match name.to_ascii_lowercase().as_str() {
        "barracuda" | "st32171w" => Some(barracuda()),
        "cheetah9lp" | "cheetah" | "st39102lw" => Some(cheetah9lp()),
        "wd1200bb" => Some(wd1200bb()),
        "hp97560" => Some(hp97560()),
        "hdd-004" | "hdd004" => Some(hdd004()),
        _ => None,
    }
}

const fn z(first_cyl: u32, last_cyl: u32, sectors_per_track: u32, track_skew: u32, cyl_skew: u32) -> Zone {
    Zone { first_cyl, last_cyl, sectors_per_track, track_skew, cyl_skew }
}

/// Zones of equal cylinder bands, one per entry of `spt` (sectors per track, outermost first), the bands just
/// wide enough to hold `capacity` sectors on `heads` surfaces; track and cylinder skews of one head switch and one
/// track-to-track seek at `rpm`. Returns the zones and the cylinder count.
fn banded_zones(
    spt: &[u32],
    heads: u32,
    capacity: u64,
    rpm: u32,
    head_switch_ms: f64,
    track_ms: f64,
) -> (Vec<Zone>, u32) {
    let per_cyl_sum: u64 = spt.iter().map(|&s| u64::from(s) * u64::from(heads)).sum();
    let band = capacity.div_ceil(per_cyl_sum) as u32;
    let rev_ms = 60_000.0 / f64::from(rpm);
    let zones = spt
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let skew = |ms: f64| ((ms / rev_ms) * f64::from(s)).ceil() as u32;
            z(i as u32 * band, (i as u32 + 1) * band - 1, s, skew(head_switch_ms), skew(track_ms))
        })
        .collect();
    (zones, band * spt.len() as u32)
}

/// Seagate Barracuda ST32171W: \[DS\] `barracuda.diskspecs` / `barracuda.model`, seek curve \[RM\].
pub fn barracuda() -> HddParams {
    HddParams {
        name: "barracuda".into(),
        drive: "Seagate Barracuda ST32171W".into(),
        rpm: 7200,       // [DS] Rotation speed
        heads: 5,        // [DS] Number of data surfaces
        cylinders: 5172, // [DS] Number of cylinders
        zones: vec![
            // [DS] zones: first/last cylinder, blocks per track, track/cylinder skew (spares not modelled)
            z(0, 1127, 186, 37, 52),
            z(1129, 2352, 185, 37, 52),
            z(2354, 2761, 177, 35, 49),
            z(2763, 3098, 170, 34, 47),
            z(3100, 3387, 163, 32, 46),
            z(3389, 3700, 157, 31, 44),
            z(3702, 4013, 148, 29, 41),
            z(4015, 4326, 141, 28, 39),
            z(4328, 4615, 135, 27, 38),
            z(4617, 4928, 126, 25, 35),
            z(4930, 5171, 119, 23, 33),
        ],
        capacity_sectors: 4_110_000,                               // [DS] Block count
        seek: SeekCurve::new(2.014, 0.1944, 1300, 5.975, 0.00215), // [RM]
        head_switch_ms: 0.1,                                       // [DS] Head switch time
        write_settle_ms: 0.0,                                      // [DS] Add. write settling delay
        overhead: Overheads {
            // [DS] Read/Write hit/miss over. after read/write
            read_hit_after_read: 0.082,
            read_hit_after_write: 0.596,
            read_miss_after_read: 0.61307,
            read_miss_after_write: 0.56813,
            write_hit_after_read: 1.01,
            write_hit_after_write: 0.9291,
            write_miss_after_read: 1.05363,
            write_miss_after_write: 0.8156,
        },
        bus_us_per_sector: 134.0, // [DS] Bulk sector transfer time 0.134 ms
        segments: 3,              // [DS] Number of buffer segments
        segment_sectors: 281,     // [DS] Segment size (in blks)
        read_ahead: true,         // [DS] Maximum read-ahead 281
        read_ahead_on_hit: false, // [DS] Read-ahead on idle hit = 0
        read_behind: false,       // [DS] Read any free blocks = 0
        write_cache: true,        // [DS] Fast write level 1
        max_write_segments: 1,    // [DS] Maximum number of write segments
        ncq: 1,                   // [DS] no command queueing in the validation setup
        combine_writes: false,
    }
}

/// Seagate Cheetah 9LP ST39102LW: \[DS\] `cheetah9LP.diskspecs` / `cheetah9LP.model`, seek curve \[RM\].
pub fn cheetah9lp() -> HddParams {
    HddParams {
        name: "cheetah9lp".into(),
        drive: "Seagate Cheetah 9LP ST39102LW".into(),
        rpm: 10045,
        heads: 12,
        cylinders: 6962,
        zones: vec![
            z(0, 846, 254, 97, 133),
            z(848, 1643, 245, 97, 133),
            z(1645, 2392, 238, 97, 117),
            z(2394, 3096, 227, 97, 116),
            z(3098, 3757, 217, 97, 108),
            z(3759, 4379, 209, 97, 108),
            z(4381, 4964, 201, 97, 108),
            z(4966, 5515, 189, 88, 94),
            z(5516, 6031, 181, 88, 93),
            z(6032, 6517, 174, 88, 93),
            z(6518, 6961, 167, 88, 80),
        ],
        capacity_sectors: 17_783_240,
        seek: SeekCurve::new(1.063, 0.0978, 1100, 3.108, 0.00108),
        head_switch_ms: 0.03,
        write_settle_ms: 0.461,
        overhead: Overheads {
            read_hit_after_read: 0.066,
            read_hit_after_write: 0.273,
            read_miss_after_read: 0.28362,
            read_miss_after_write: 0.08673,
            write_hit_after_read: 0.748,
            write_hit_after_write: 0.5,
            write_miss_after_read: 0.90692,
            write_miss_after_write: 0.8964,
        },
        bus_us_per_sector: 105.0,
        segments: 3,
        segment_sectors: 561,
        read_ahead: true,
        read_ahead_on_hit: false, // [DS] Read-ahead on idle hit = 0
        read_behind: false,       // [DS] Read any free blocks = 0
        write_cache: true,        // [DS] Fast write level 2
        max_write_segments: 3,    // [DS]
        ncq: 1,                   // [DS]
        combine_writes: false,
    }
}

/// WD Caviar WD1200BB (the REDCAP paper's disk). \[WD\]: 7200 rpm, 234,441,648 sectors (120 GB), 2 MB buffer, seek
/// track-to-track 2.0 / average 8.9 / full stroke 21 ms fitted to the two-regime form with
/// [`SeekCurve::fit_datasheet`]. \[A\]: 4 heads and 8 zones from 1170 to 650 sectors per track (typical of
/// 2002-era 40 GB/platter drives; the capacity and the media rate of about 35-70 MB/s follow), regime boundary at
/// one fifth of the cylinders, skews of one head switch / one track-to-track seek, controller overhead 0.3 ms,
/// ATA-100 bus (100 MB/s: 5.12 µs per sector), buffer as 8 segments of 512 sectors (the REDCAP paper observes more
/// processes than disk-cache segments in most runs of 1-32 processes), read-ahead also after buffer hits (drives
/// of that generation keep prefetching a sequential stream), no read-behind (no source says either way), write cache
/// on (the ATA default).
pub fn wd1200bb() -> HddParams {
    let heads = 4u32;
    let capacity: u64 = 234_441_648;
    let spt: [u32; 8] = [1170, 1096, 1022, 947, 873, 799, 724, 650];
    let rpm = 7200u32;
    let head_switch_ms = 1.0; // [A]
    let track_ms = 2.0; // [WD]
    let (zones, cylinders) = banded_zones(&spt, heads, capacity, rpm, head_switch_ms, track_ms);
    let seek = SeekCurve::fit_datasheet(track_ms, 8.9, 21.0, cylinders, cylinders / 5).unwrap_or(SeekCurve::new(
        1.5,
        0.5,
        cylinders / 5,
        8.0,
        21.0 / f64::from(cylinders),
    ));
    HddParams {
        name: "wd1200bb".into(),
        drive: "WD Caviar WD1200BB".into(),
        rpm,
        heads,
        cylinders,
        zones,
        capacity_sectors: capacity,
        seek,
        head_switch_ms,
        write_settle_ms: 0.0,
        overhead: Overheads::uniform(0.3),
        bus_us_per_sector: 5.12,
        segments: 8,
        segment_sectors: 512,
        read_ahead: true,
        read_ahead_on_hit: true,
        read_behind: false, // [A] no source says the WD1200BB keeps what it reads before the target
        write_cache: true,
        max_write_segments: 1,
        ncq: 1, // [A] ATA-100 drives had no command queueing
        combine_writes: false,
    }
}

/// HP 97560 \[RW\]: 4002 rpm, 1962 cylinders, 19 data surfaces, 72 sectors per track, seek `3.24 + 0.400*sqrt(d)`
/// below 383 cylinders and `8.00 + 0.008*d` above, head switch 1.6 ms, controller overhead 2.2 ms, track skew 8
/// and cylinder skew 18 sectors, SCSI-2 at 10 MB/s (51.2 µs per sector), 128 KB buffer with read-ahead.
/// \[A\]: the buffer as 2 segments of 128 sectors; write cache off (immediate reporting was off in \[RW\]'s traces); no
/// read-behind.
pub fn hp97560() -> HddParams {
    HddParams {
        name: "hp97560".into(),
        drive: "HP 97560".into(),
        rpm: 4002,
        heads: 19,
        cylinders: 1962,
        zones: vec![z(0, 1961, 72, 8, 18)],
        capacity_sectors: 1962 * 19 * 72,
        seek: SeekCurve::new(3.24, 0.400, 383, 8.00, 0.008),
        head_switch_ms: 1.6,
        write_settle_ms: 0.0,
        overhead: Overheads::uniform(2.2),
        bus_us_per_sector: 51.2,
        segments: 2,
        segment_sectors: 128,
        read_ahead: true,
        read_ahead_on_hit: false,
        read_behind: false, // [A] no source says the HP 97560 keeps what it reads before the target
        write_cache: false,
        max_write_segments: 1,
        ncq: 1,
        combine_writes: false,
    }
}

/// The outer zone's sectors per track of `hdd-004` (\[C\]: the media rate that gives the article's sequential read).
pub const HDD004_OUTER_SPT: u32 = 2043;
/// `hdd-004`'s write command overhead in ms (\[C\]: 4 KiB sequential writes at the article's 72 MB/s).
pub const HDD004_WRITE_OVERHEAD_MS: f64 = 0.0487;

/// The HDD of seed `004_*` (Koutoupis, "Advanced Hard Drive Caching Techniques", 2013): a SATA III 7200 rpm drive
/// that fio measured at 4 KiB and queue depth 32 at 115 MB/s sequential read, 72 MB/s sequential write and
/// 2 MB/s random read and write. The article names no model. \[004\]: SATA III, the four numbers. \[A\]: a 2013-era
/// 7200 rpm 500 GB single-platter drive: 2 heads, 8 zones from the outer zone's sectors per track down to half
/// of it, track-to-track / average / full-stroke seek 1.0 / 8.5 / 17 ms ([`SeekCurve::fit_datasheet`], `d0` at a
/// fifth of the cylinders), head switch 0.5 ms, skews of one head switch / one track-to-track seek, read
/// overheads 0.02 ms (hit) and 0.1 ms (miss), a 6 Gb/s bus (1 µs per sector), 32 MiB of its buffer in 16
/// segments of 2 MiB (a 1 MiB read leaves room for as much read-ahead), read-ahead also after hits, write cache
/// on with 32 write segments, SATA NCQ of 32 commands (the protocol's limit; the article ran fio at queue depth
/// 32), sequential cached writes combined. \[C\]: calibrated so that the model with 16 requests in flight, in the
/// order the live emulator serves them (`blockwell disk bench --queue 16`), gives the article's sequential
/// rates: the outer zone's sectors per track ([`HDD004_OUTER_SPT`]: the media rate, hence sequential reads) and
/// the write command overhead ([`HDD004_WRITE_OVERHEAD_MS`]: sequential 4 KiB writes are bound by the command
/// rate). The random rate is not a parameter: it comes from seek, rotation and the queue's reordering
/// (`docs/disk-model.md`).
pub fn hdd004() -> HddParams {
    let heads = 2u32;
    let capacity: u64 = 976_562_500; // 500 GB
    let outer = HDD004_OUTER_SPT;
    let spt: Vec<u32> = (0..8).map(|i| outer - (outer / 2) * i / 7).collect();
    let rpm = 7200u32;
    let head_switch_ms = 0.5;
    let track_ms = 1.0;
    let (zones, cylinders) = banded_zones(&spt, heads, capacity, rpm, head_switch_ms, track_ms);
    let seek = SeekCurve::fit_datasheet(track_ms, 8.5, 17.0, cylinders, cylinders / 5).unwrap_or(SeekCurve::new(
        0.9,
        0.1,
        cylinders / 5,
        6.0,
        11.0 / f64::from(cylinders),
    ));
    let w = HDD004_WRITE_OVERHEAD_MS;
    HddParams {
        name: "hdd-004".into(),
        drive: "Koutoupis' SATA HDD (Linux Journal, 7200 rpm, 500 GB class; calibrated)".into(),
        rpm,
        heads,
        cylinders,
        zones,
        capacity_sectors: capacity,
        seek,
        head_switch_ms,
        write_settle_ms: 0.0,
        overhead: Overheads {
            read_hit_after_read: 0.02,
            read_hit_after_write: 0.02,
            read_miss_after_read: 0.1,
            read_miss_after_write: 0.1,
            write_hit_after_read: w,
            write_hit_after_write: w,
            write_miss_after_read: w,
            write_miss_after_write: w,
        },
        bus_us_per_sector: 1.0,
        segments: 16,
        segment_sectors: 4096,
        read_ahead: true,
        read_ahead_on_hit: true,
        read_behind: false,
        write_cache: true,
        max_write_segments: 32,
        ncq: 32,
        combine_writes: true,
    }
}
