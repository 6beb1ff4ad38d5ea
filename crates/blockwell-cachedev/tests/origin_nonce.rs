//! The origin write nonce: a device notices that its origin was written without it, drops its clean copies,
//! and refuses, keeps or drops its dirty blocks as asked, writing nothing when it refuses.

use blockwell_cachedev::{
    CacheMode, Entry, Error, FormatOptions, MemDev, Metadata, OpenOptions, OriginCheck, OriginId, Record, StaleDirty,
};

const ORIGIN: OriginId = OriginId { size: 1 << 20, uuid: [9; 16] };

fn device() -> MemDev {
    let dev = MemDev::new(4 << 20);
    let f = FormatOptions {
        block_size: 4096,
        origin: ORIGIN,
        origin_path: "/o".into(),
        mode: CacheMode::WriteBack,
        journal_blocks: None,
        force: false,
    };
    Metadata::format(&dev, &f).unwrap();
    dev
}

fn opts() -> OpenOptions {
    OpenOptions { origin: ORIGIN, origin_path: "/o".into(), block_size: None, mode: CacheMode::WriteBack }
}

fn check(nonce: u64, new_nonce: u64, stale: StaleDirty) -> Option<OriginCheck> {
    Some(OriginCheck { nonce, new_nonce, stale })
}

/// Opens with the origin's nonce `nonce`, holding two clean blocks and one dirty one; returns the nonce the
/// device recorded.
fn populate(dev: &MemDev, nonce: u64) -> u64 {
    let (mut m, _) = Metadata::open_checked(dev, &opts(), check(nonce, 77, StaleDirty::Refuse)).unwrap();
    let e = |block, dirty| Entry { block, dirty, hint: 0, crc: 0, has_crc: false };
    let recs = [
        Record { slot: 0, entry: e(1, false) },
        Record { slot: 1, entry: e(2, false) },
        Record { slot: 2, entry: e(3, true) },
    ];
    m.commit(dev, &recs).unwrap();
    m.shutdown(dev, |_| 1).unwrap();
    m.superblock().origin_nonce
}

#[test]
fn a_device_adopts_a_fresh_nonce_and_keeps_a_matching_one() {
    let dev = device();
    // Formatted: no nonce recorded, so nothing to compare; the device takes the fresh one (the caller gives it
    // to the origin).
    assert_eq!(populate(&dev, 0), 77);
    let (m, r) = Metadata::open_checked(&dev, &opts(), check(77, 88, StaleDirty::Refuse)).unwrap();
    assert_eq!(m.superblock().origin_nonce, 77, "the origin still has the device's nonce: kept");
    assert!(!r.origin_written_without_device);
    assert_eq!((r.mapped, r.dirty), (3, 1));
}

#[test]
fn a_stale_device_refuses_without_writing_then_keeps_or_discards() {
    let dev = device();
    populate(&dev, 0);
    let before = dev.snapshot();
    // The origin was written without the device: another nonce.
    let e = Metadata::open_checked(&dev, &opts(), check(5, 99, StaleDirty::Refuse)).err().unwrap();
    assert!(matches!(e, Error::StaleDirty { dirty: 1 }), "{e}");
    assert!(e.to_string().contains("--force") && e.to_string().contains("--discard-stale"), "{e}");
    assert!(dev.snapshot() == before, "a refusal writes nothing");
    // Forced: the dirty block stays, the clean copies go, and the device adopts a fresh nonce.
    let snap = dev.snapshot();
    let kept = MemDev::from_bytes(snap.clone());
    let (m, r) = Metadata::open_checked(&kept, &opts(), check(5, 99, StaleDirty::Keep)).unwrap();
    assert!(r.origin_written_without_device);
    assert_eq!((r.stale_dirty_kept, r.stale_dropped, r.mapped, r.dirty), (1, 2, 1, 1));
    assert_eq!(m.superblock().origin_nonce, 99);
    drop(m);
    // Durably: reopened with the new nonce, it finds only the dirty block and nothing stale.
    let (_, r) = Metadata::open_checked(&kept, &opts(), check(99, 1, StaleDirty::Refuse)).unwrap();
    assert_eq!((r.mapped, r.dirty, r.origin_written_without_device), (1, 1, false));
    // Discarded: nothing is left.
    let gone = MemDev::from_bytes(snap);
    let (_, r) = Metadata::open_checked(&gone, &opts(), check(5, 99, StaleDirty::Discard)).unwrap();
    assert_eq!((r.stale_dropped, r.mapped), (3, 0));
    let (_, r) = Metadata::open_checked(&gone, &opts(), check(99, 1, StaleDirty::Refuse)).unwrap();
    assert_eq!(r.mapped, 0);
}

#[test]
fn a_stale_device_with_only_clean_blocks_opens_cold() {
    let dev = device();
    let (mut m, _) = Metadata::open_checked(&dev, &opts(), check(0, 40, StaleDirty::Refuse)).unwrap();
    m.commit(&dev, &[Record { slot: 4, entry: Entry { block: 9, dirty: false, hint: 0, crc: 0, has_crc: false } }])
        .unwrap();
    m.shutdown(&dev, |_| 1).unwrap();
    drop(m);
    let (_, r) = Metadata::open_checked(&dev, &opts(), check(41, 42, StaleDirty::Refuse)).unwrap();
    assert!(r.origin_written_without_device);
    assert_eq!((r.stale_dropped, r.mapped), (1, 0));
}
