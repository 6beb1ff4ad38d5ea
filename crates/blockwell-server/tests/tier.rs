//! The persistent cache tier: modes, eviction and write-back, cleaning, restart, detach, refusals, and a
//! random workload checked against a model.

mod tier_common;

use blockwell_cachedev::crash::{Clock, CrashDev};
use blockwell_cachedev::{CacheMode, Dev, MemDev};
use blockwell_core::cleaner::CleanerSpec;
use blockwell_server::backend::Backend;
use blockwell_server::tier::{TierBackend, TierError};
use std::sync::Arc;
use tier_common::*;

const CACHE: usize = 2 << 20;
const ORIGIN: usize = 4 << 20;

fn read(t: &impl Backend, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    t.read_at(&mut b, off).unwrap();
    b
}

#[test]
fn write_back_absorbs_writes_and_survives_a_clean_restart() {
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let t = open(cache.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    let data = pattern(1, 0, 64 * 1024);
    t.write_at(&data, 0, false).unwrap();
    assert_eq!(read(&t, 0, data.len()), data);
    let s = t.snapshot();
    assert_eq!((s.dirty_blocks, s.counters.write_misses, s.counters.read_hits), (16, 16, 16));
    assert!(origin.current()[..data.len()].iter().all(|&b| b == 0), "write-back: the origin is untouched");
    // Overwrites of dirty blocks are absorbed.
    t.write_at(&pattern(2, 8192, 4096), 8192, false).unwrap();
    assert_eq!(t.snapshot().counters.dirty_write_hits, 1);
    t.flush().unwrap();
    t.validate().unwrap();
    t.close().unwrap();
    let t = open(cache.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    let r = t.recovery().clone();
    assert!(r.clean_shutdown && r.dirty == 16 && r.mapped == 16, "{r:?}");
    let mut want = data.clone();
    want[8192..12288].copy_from_slice(&pattern(2, 8192, 4096));
    assert_eq!(read(&t, 0, want.len()), want);
    assert_eq!(t.snapshot().counters.read_hits, 16, "a warm restart");
    // Cleaning writes it all to the origin.
    assert_eq!(t.clean_all().unwrap(), 16);
    assert_eq!(&origin.current()[..want.len()], &want[..]);
    assert_eq!(t.snapshot().dirty_blocks, 0);
    t.validate().unwrap();
}

#[test]
fn dirty_blocks_evicted_are_written_back_and_read_meanwhile() {
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let t = open(cache.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    let slots = t.snapshot().slots;
    // Twice the cache in dirty writes: evictions of dirty blocks, written back by the writers themselves.
    let n = 2 * slots;
    for b in 0..n {
        t.write_at(&pattern(b + 1, b * BS, BS as usize), b * BS, false).unwrap();
    }
    for b in (0..n).step_by(7) {
        assert_eq!(read(&t, b * BS, BS as usize), pattern(b + 1, b * BS, BS as usize), "block {b}");
    }
    let s = t.snapshot();
    assert!(s.counters.dirty_evictions >= n - slots, "{s:?}");
    assert!(s.counters.cleaned_blocks > 0 && s.throttled > 0, "{s:?}");
    t.validate().unwrap();
    t.clean_all().unwrap();
    for b in 0..n {
        let at = (b * BS) as usize;
        assert_eq!(&origin.current()[at..at + BS as usize], &pattern(b + 1, b * BS, BS as usize)[..], "block {b}");
    }
}

#[test]
fn the_cleaner_policy_sets_the_pace() {
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let mut cfg = config(ORIGIN as u64, CacheMode::WriteBack);
    cfg.cleaner = CleanerSpec::Watermark { high: 10.0, low: 5.0, idle_ms: 0 };
    let t = open(cache.clone(), origin.clone(), cfg);
    let slots = t.snapshot().slots;
    let n = slots * 15 / 100;
    for b in 0..n {
        t.write_at(&pattern(b + 1, b * BS, BS as usize), b * BS, false).unwrap();
    }
    let cleaned = t.clean_pass().unwrap();
    let left = t.snapshot().dirty_blocks;
    assert!(cleaned > 0 && left <= slots * 5 / 100 + 1, "cleaned {cleaned}, left {left} of {slots}");
    // In origin order: the first blocks are on the origin.
    assert_eq!(&origin.current()[..BS as usize], &pattern(1, 0, BS as usize)[..]);
    assert_eq!(t.clean_pass().unwrap(), 0, "below the low mark: nothing more");
}

#[test]
fn write_through_writes_the_origin_first_and_switching_from_write_back_cleans() {
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let t = open(cache.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    t.write_at(&pattern(1, 0, 8192), 0, false).unwrap();
    assert_eq!(t.snapshot().dirty_blocks, 2);
    t.set_mode(CacheMode::WriteThrough).unwrap();
    let s = t.snapshot();
    assert_eq!((s.dirty_blocks, s.mode.as_str()), (0, "write-through"));
    assert_eq!(&origin.current()[..8192], &pattern(1, 0, 8192)[..]);
    t.write_at(&pattern(2, 4096, 4096), 4096, false).unwrap();
    assert_eq!(&origin.current()[4096..8192], &pattern(2, 4096, 4096)[..], "write-through");
    assert_eq!(read(&t, 4096, 4096), pattern(2, 4096, 4096));
    assert_eq!(t.snapshot().dirty_blocks, 0);
    t.validate().unwrap();
    t.close().unwrap();
    // The mode is recorded.
    let r = blockwell_cachedev::check::check(&*cache, None).unwrap();
    assert_eq!(r.mode, "write-through");
}

#[test]
fn write_around_and_read_only() {
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteAround);
    let t = open(cache.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteAround));
    t.write_at(&pattern(1, 0, 4096), 0, false).unwrap();
    assert_eq!(read(&t, 0, 4096), pattern(1, 0, 4096));
    assert_eq!(t.snapshot().counters.promotions, 1, "read into the cache");
    t.write_at(&pattern(2, 0, 4096), 0, false).unwrap();
    assert_eq!(t.snapshot().cached_blocks, 0, "write-around drops the copy");
    assert_eq!(read(&t, 0, 4096), pattern(2, 0, 4096));
    t.close().unwrap();
    let t = open(cache.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::ReadOnly));
    let e = t.write_at(&[1; 512], 0, false).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(1), "EPERM");
    assert_eq!(read(&t, 0, 4096), pattern(2, 0, 4096));
}

#[test]
fn associativity_keeps_eviction_within_a_set_of_the_cache_device() {
    const WAYS: u64 = 16;
    let run = |ways: Option<u64>| {
        let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteThrough);
        let mut cfg = config(ORIGIN as u64, CacheMode::WriteThrough);
        cfg.associativity = ways.and_then(|w| std::num::NonZeroUsize::new(w as usize));
        let t = open(cache, origin, cfg);
        let s = t.snapshot();
        assert_eq!(s.associativity, ways.map(|w| w as usize));
        // Three runs of 16 blocks that FlashCache's hash sends to set 0: (block / 16) mod sets == 0.
        let sets = s.capacity_blocks.div_ceil(WAYS);
        assert!(2 * WAYS * sets + WAYS <= ORIGIN as u64 / 4096 && s.capacity_blocks > 3 * WAYS);
        for r in 0..3 {
            let first = r * WAYS * sets;
            read(&t, first * 4096, (WAYS * 4096) as usize);
        }
        t.validate().unwrap();
        t.snapshot().cached_blocks
    };
    assert_eq!(run(None), 3 * WAYS, "fully associative: all three runs fit");
    assert_eq!(run(Some(WAYS)), WAYS, "16-way: one set holds one run");
}

#[test]
fn trim_and_write_zeroes_through_dirty_blocks() {
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let t = open(cache.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    t.write_at(&pattern(1, 0, 16384), 0, false).unwrap();
    // Zero 6 KiB from 1 KiB: block 0 partly (zeroed in place), block 1 wholly, no more.
    t.write_zeroes(1024, 6144, false, false).unwrap();
    let got = read(&t, 0, 16384);
    let mut want = pattern(1, 0, 16384);
    want[1024..7168].fill(0);
    assert_eq!(got, want);
    t.trim(8192, 8192, false).unwrap();
    assert_eq!(&read(&t, 0, 7168)[..], &want[..7168], "trim leaves other blocks alone");
    t.clean_all().unwrap();
    assert_eq!(&origin.current()[..7168], &want[..7168]);
    t.validate().unwrap();
}

#[test]
fn detach_makes_the_origin_current_and_the_cache_cold() {
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let t = open(cache.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    t.write_at(&pattern(9, 40960, 8192), 40960, false).unwrap();
    t.detach().unwrap();
    assert_eq!(&origin.current()[40960..49152], &pattern(9, 40960, 8192)[..]);
    let t = open(cache.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    assert!(t.recovery().was_detached && t.recovery().mapped == 0);
    assert_eq!(read(&t, 40960, 8192), pattern(9, 40960, 8192));
}

#[test]
fn devices_of_another_origin_or_damaged_are_refused_untouched() {
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let before = cache.current();
    let mut cfg = config(ORIGIN as u64, CacheMode::WriteBack);
    cfg.origin.uuid = [1; 16];
    let e = TierBackend::open(DevOrigin(origin.clone()), cache.clone(), cfg).err().unwrap();
    assert!(matches!(e, TierError::Device(blockwell_cachedev::Error::OriginMismatch { .. })), "{e}");
    assert!(e.to_string().contains("belongs to another origin"), "{e}");
    assert_eq!(cache.current(), before, "nothing written");
    // A damaged table.
    let bad = Arc::new(MemDev::from_bytes(before.clone()));
    bad.poke(8192 + 64, &[0x77]);
    let e = TierBackend::open(DevOrigin(origin.clone()), bad.clone(), config(ORIGIN as u64, CacheMode::WriteBack))
        .err()
        .unwrap();
    assert!(e.to_string().contains("corrupt metadata"), "{e}");
    // Truncated.
    let short = Arc::new(MemDev::from_bytes(before[..before.len() / 2].to_vec()));
    let e =
        TierBackend::open(DevOrigin(origin.clone()), short, config(ORIGIN as u64, CacheMode::WriteBack)).err().unwrap();
    assert!(e.to_string().contains("truncated"), "{e}");
    // Never formatted.
    let blank: Arc<dyn Dev> = Arc::new(MemDev::new(CACHE));
    let e = TierBackend::open(DevOrigin(origin), blank, config(ORIGIN as u64, CacheMode::WriteBack)).err().unwrap();
    assert!(e.to_string().contains("not a Blockwell cache device"), "{e}");
}

/// A model of the device: the bytes every read must return.
#[test]
fn random_operations_match_a_model_in_every_mode() {
    for mode in [CacheMode::WriteBack, CacheMode::WriteThrough, CacheMode::WriteAround] {
        let (_, cache, origin) = devices(1 << 20, 2 << 20, mode);
        let mut cfg = config(2 << 20, mode);
        cfg.sequential_cutoff = 64 * 1024;
        let t = open(cache.clone(), origin.clone(), cfg);
        let mut model = vec![0u8; 2 << 20];
        let mut rng = Rng(0x1234 + mode as u64);
        for step in 0..4000u64 {
            let sectors = (2 << 20) / 512;
            let first = rng.below(sectors);
            let len = (1 + rng.below(40)).min(sectors - first);
            let (off, n) = (first * 512, (len * 512) as usize);
            match rng.below(20) {
                0..=8 => {
                    let d = pattern(step + 1, off, n);
                    t.write_at(&d, off, rng.below(10) == 0).unwrap();
                    model[off as usize..off as usize + n].copy_from_slice(&d);
                }
                9..=16 => assert_eq!(read(&t, off, n), &model[off as usize..off as usize + n], "step {step} {mode}"),
                17 => {
                    t.write_zeroes(off, n as u64, rng.below(2) == 0, false).unwrap();
                    model[off as usize..off as usize + n].fill(0);
                }
                18 => t.flush().unwrap(),
                _ => {
                    let _ = t.clean_pass().unwrap();
                }
            }
            if step % 97 == 0 {
                t.validate().unwrap_or_else(|e| panic!("step {step} {mode}: {e}"));
            }
        }
        let s = t.snapshot();
        assert!(s.degraded.is_none() && s.checksum_failures == 0, "{mode}: {s:?}");
        if mode == CacheMode::WriteBack {
            assert!(
                s.counters.dirty_evictions > 100
                    && s.counters.cleaned_blocks > 100
                    && s.counters.dirty_write_hits > 100,
                "{s:?}"
            );
        }
        assert!(s.counters.promotions > 1000 && s.counters.demotions > 1000, "{mode}: {s:?}");
        t.clean_all().unwrap();
        assert_eq!(read(&t, 0, 2 << 20), model, "{mode}");
        t.validate().unwrap();
        t.close().unwrap();
        let t = open(cache, origin.clone(), config(2 << 20, mode));
        assert_eq!(read(&t, 0, 2 << 20), model, "{mode} after a restart");
        let _ = CrashDev::new(1, Default::default());
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Faults

use std::sync::atomic::Ordering;

#[test]
fn a_cache_read_error_on_a_clean_block_falls_back_to_the_origin() {
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteThrough);
    let dev = FaultDev::new(cache.clone());
    let t = open(dev.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteThrough));
    t.write_at(&pattern(3, 0, 8192), 0, false).unwrap();
    assert_eq!(t.snapshot().cached_blocks, 2);
    dev.fail_reads.store(true, Ordering::SeqCst);
    assert_eq!(read(&t, 0, 8192), pattern(3, 0, 8192), "served by the origin");
    let s = t.snapshot();
    assert!(s.dev_read_errors >= 1 && s.degraded.is_none(), "{s:?}");
    assert_eq!(s.cached_blocks, 0, "the blocks that failed left the cache");
    t.validate().unwrap();
}

#[test]
fn a_cache_read_error_on_a_dirty_block_is_eio_and_degrades() {
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let dev = FaultDev::new(cache.clone());
    let t = open(dev.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    t.write_at(&pattern(4, 0, 4096), 0, false).unwrap();
    t.write_at(&pattern(5, 65536, 4096), 65536, false).unwrap();
    dev.fail_reads.store(true, Ordering::SeqCst);
    let e = t.read_at(&mut [0u8; 4096], 0).unwrap_err();
    assert!(e.to_string().contains("dirty block 0 cannot be read"), "{e}");
    assert!(t.snapshot().degraded.is_some());
    dev.fail_reads.store(false, Ordering::SeqCst);
    // The data was not dropped: once the device reads again, it is there.
    assert_eq!(read(&t, 0, 4096), pattern(4, 0, 4096));
    assert_eq!(read(&t, 65536, 4096), pattern(5, 65536, 4096));
}

#[test]
fn a_cache_write_error_fails_the_write_and_later_flushes() {
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let dev = FaultDev::new(cache.clone());
    let t = open(dev.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    t.write_at(&pattern(6, 0, 4096), 0, false).unwrap();
    t.flush().unwrap();
    dev.fail_writes.store(true, Ordering::SeqCst);
    assert!(t.write_at(&pattern(7, 8192, 4096), 8192, false).is_err(), "the failed write is not acknowledged");
    let s = t.snapshot();
    assert!(s.dev_write_errors >= 1 && s.degraded.is_some(), "{s:?}");
    assert!(t.flush().is_err(), "a FLUSH cannot promise what the device cannot hold");
    // Degraded: new blocks are not cached; a write to an absent block goes to the origin.
    dev.fail_writes.store(false, Ordering::SeqCst);
    t.write_at(&pattern(8, 1 << 20, 4096), 1 << 20, false).unwrap();
    assert_eq!(&origin.current()[1 << 20..(1 << 20) + 4096], &pattern(8, 1 << 20, 4096)[..]);
    assert_eq!(read(&t, 0, 4096), pattern(6, 0, 4096), "acknowledged data is still served");
}

#[test]
fn an_origin_error_while_cleaning_keeps_blocks_dirty_and_is_retried() {
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let o = FaultOrigin { inner: DevOrigin(origin.clone()), fail_writes: false.into() };
    let t = TierBackend::open(o, cache.clone() as Arc<dyn Dev>, config(ORIGIN as u64, CacheMode::WriteBack)).unwrap();
    t.write_at(&pattern(9, 0, 16384), 0, false).unwrap();
    t.origin().fail_writes.store(true, Ordering::SeqCst);
    assert!(t.clean_all().is_err(), "the origin refuses: cleaning fails and says so");
    let s = t.snapshot();
    assert_eq!(s.dirty_blocks, 4, "still dirty");
    assert!(s.origin_write_errors > 0 && s.degraded.is_none(), "{s:?}");
    assert_eq!(read(&t, 0, 16384), pattern(9, 0, 16384));
    t.origin().fail_writes.store(false, Ordering::SeqCst);
    assert_eq!(t.clean_all().unwrap(), 4);
    assert_eq!(&origin.current()[..16384], &pattern(9, 0, 16384)[..]);
}

#[test]
fn a_clean_block_whose_data_changed_on_the_device_is_read_from_the_origin() {
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let t = open(cache.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    t.write_at(&pattern(10, 0, 4096), 0, false).unwrap();
    t.clean_all().unwrap();
    t.close().unwrap();
    // Flip one bit of the block's slot on the device (bit rot, or a torn in-place write).
    let img = cache.current();
    let g = blockwell_cachedev::Geometry::for_size(img.len() as u64, 4096, None).unwrap();
    let slot = (0..g.slots).find(|&s| img[g.slot_offset(s) as usize..][..4096] == pattern(10, 0, 4096)[..]).unwrap();
    let mut bad = img.clone();
    bad[g.slot_offset(slot) as usize + 100] ^= 1;
    let dev: Arc<dyn Dev> = Arc::new(MemDev::from_bytes(bad));
    let t = TierBackend::open(DevOrigin(origin.clone()), dev, config(ORIGIN as u64, CacheMode::WriteBack)).unwrap();
    assert_eq!(read(&t, 0, 4096), pattern(10, 0, 4096));
    let s = t.snapshot();
    assert_eq!(s.checksum_failures, 1, "{s:?}");
    assert_eq!(read(&t, 0, 4096), pattern(10, 0, 4096), "and from the origin again");
    t.validate().unwrap();
}

/// An origin whose first flush waits at a gate until the test opens it.
struct GatedOrigin {
    inner: DevOrigin,
    entered: std::sync::Mutex<bool>,
    open: std::sync::Mutex<bool>,
    cv: std::sync::Condvar,
}

impl Backend for GatedOrigin {
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> std::io::Result<()> {
        self.inner.write_at(buf, offset, fua)
    }
    fn flush(&self) -> std::io::Result<()> {
        *self.entered.lock().unwrap() = true;
        self.cv.notify_all();
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
        drop(open);
        self.inner.flush()
    }
    fn trim(&self, offset: u64, len: u64, fua: bool) -> std::io::Result<()> {
        self.inner.trim(offset, len, fua)
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> std::io::Result<()> {
        self.inner.write_zeroes(offset, len, may_trim, fua)
    }
}

#[test]
fn a_flush_waits_for_an_origin_flush_in_progress_that_took_its_writes() {
    // Client A's FLUSH is inside the origin's flush, which covers a write of client B's; B's FLUSH must not
    // return before that origin flush completes (it used to find nothing left to flush and return at once).
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteThrough);
    let gated = GatedOrigin {
        inner: DevOrigin(origin.clone()),
        entered: std::sync::Mutex::new(false),
        open: std::sync::Mutex::new(false),
        cv: std::sync::Condvar::new(),
    };
    let t = Arc::new(
        TierBackend::open(gated, cache as Arc<dyn Dev>, config(ORIGIN as u64, CacheMode::WriteThrough)).unwrap(),
    );
    t.write_at(&pattern(1, 0, 4096), 0, false).unwrap();
    let a = {
        let t = t.clone();
        std::thread::spawn(move || t.flush().unwrap())
    };
    {
        let g = &t.origin().entered;
        let mut entered = g.lock().unwrap();
        while !*entered {
            entered = t.origin().cv.wait(entered).unwrap();
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let b = {
        let t = t.clone();
        std::thread::spawn(move || {
            t.flush().unwrap();
            tx.send(()).unwrap();
        })
    };
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(300)).is_err(),
        "a FLUSH returned while the origin flush covering its write was still running"
    );
    *t.origin().open.lock().unwrap() = true;
    t.origin().cv.notify_all();
    rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the FLUSH returns once the origin flush is done");
    a.join().unwrap();
    b.join().unwrap();
}

#[test]
fn a_dirty_block_changed_by_a_write_the_crash_interrupted_survives_a_clean_restart() {
    // A dirty block's checksum is committed, then a write changes the block in place and the power fails
    // before the next commit: the device holds the new data and the old checksum. Recovery adopts the data as
    // found; a clean stop that never read the block must not leave that old checksum as the truth.
    let (_, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let t = open(cache.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    t.write_at(&pattern(1, 0, 4096), 0, false).unwrap();
    t.flush().unwrap();
    t.write_at(&pattern(2, 0, 4096), 0, false).unwrap();
    let crashed: Arc<dyn Dev> = Arc::new(MemDev::from_bytes(cache.current()));
    let origin2 = Arc::new(CrashDev::with_contents(origin.current(), Clock::new()));
    drop(t);
    let t = open(crashed.clone(), origin2.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    assert!(!t.recovery().clean_shutdown);
    t.close().unwrap();
    let t = open(crashed.clone(), origin2.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    assert!(t.recovery().clean_shutdown);
    assert_eq!(read(&t, 0, 4096), pattern(2, 0, 4096), "the write the crash interrupted, adopted");
    assert!(t.snapshot().degraded.is_none());
    t.close().unwrap();
    // Damage after that clean stop is not adopted: the read fails and the export is degraded.
    let g = blockwell_cachedev::check::check_metadata(&*crashed, None).unwrap();
    let mut img = vec![0u8; crashed.size() as usize];
    crashed.read_at(&mut img, 0).unwrap();
    let slot = (0..g.slots as usize)
        .find(|s| img[g.data_offset as usize + s * 4096..][..4096] == pattern(2, 0, 4096)[..])
        .expect("a slot holds the block");
    let at = g.data_offset + slot as u64 * 4096 + 100;
    crashed.write_at(&[img[at as usize] ^ 0x20], at).unwrap();
    let t = open(crashed, origin2, config(ORIGIN as u64, CacheMode::WriteBack));
    let e = t.read_at(&mut [0u8; 4096], 0).unwrap_err();
    assert!(e.to_string().contains("dirty block 0 cannot be read"), "{e}");
    assert!(t.snapshot().degraded.is_some() && t.snapshot().checksum_failures == 1);
}
