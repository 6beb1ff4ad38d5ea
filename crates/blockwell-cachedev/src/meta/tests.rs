use super::*;
use crate::crash::{Clock, CrashDev, CrashMode};
use crate::dev::MemDev;
use crate::superblock::CacheMode;

const ORIGIN: OriginId = OriginId { size: 1 << 30, uuid: [9; 16] };

fn fmt_opts() -> FormatOptions {
    FormatOptions {
        block_size: 4096,
        origin: ORIGIN,
        origin_path: "/tmp/origin.img".into(),
        mode: CacheMode::WriteBack,
        journal_blocks: None,
        force: false,
    }
}

fn open_opts() -> OpenOptions {
    OpenOptions { origin: ORIGIN, origin_path: "/tmp/origin.img".into(), block_size: None, mode: CacheMode::WriteBack }
}

fn rec(slot: u64, block: u64, dirty: bool) -> Record {
    Record { slot, entry: if dirty { Entry::dirty(block) } else { Entry::clean(block, block as u32 ^ 0x5555) } }
}

fn free(slot: u64) -> Record {
    Record { slot, entry: Entry::FREE }
}

/// A table as (block, dirty, crc) per slot.
type Table = Vec<(u64, bool, u32)>;

fn blocks(entries: &[Entry]) -> Table {
    entries.iter().map(|e| (e.block, e.dirty, e.crc)).collect()
}

use blockwell_testkit::Rng;

#[test]
fn format_then_open_finds_an_empty_clean_device() {
    let dev = MemDev::new(8 << 20);
    let sb = Metadata::format(&dev, &fmt_opts()).unwrap();
    let slots = sb.geometry.slots;
    assert!(slots > 1800, "{slots}");
    let (m, r) = Metadata::open(&dev, &open_opts()).unwrap();
    assert!(r.clean_shutdown && !r.was_detached && !r.torn_commit);
    assert_eq!((r.mapped, r.dirty, r.commits_replayed), (0, 0, 0));
    assert!(m.entries().iter().all(Entry::is_free));
    assert_eq!(m.superblock().mounts, 1);
    assert!(!m.superblock().clean, "an open device is not clean");
}

#[test]
fn commits_survive_a_crash_and_replay_in_order() {
    let dev = MemDev::new(8 << 20);
    Metadata::format(&dev, &fmt_opts()).unwrap();
    let (mut m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    m.commit(&dev, &[rec(0, 100, true), rec(1, 101, false)]).unwrap();
    m.commit(&dev, &[free(0), rec(2, 100, true)]).unwrap();
    let want = blocks(m.entries());
    drop(m); // no shutdown: a crash
    let (m, r) = Metadata::open(&dev, &open_opts()).unwrap();
    assert!(!r.clean_shutdown);
    assert_eq!((r.commits_replayed, r.records_replayed, r.mapped, r.dirty), (2, 4, 2, 1));
    assert_eq!(blocks(m.entries()), want);
    assert_eq!(m.entries()[2].block, 100);
    assert!(m.entries()[0].is_free());
}

#[test]
fn a_full_ring_checkpoints_and_large_commits_span_blocks() {
    let dev = MemDev::new(4 << 20);
    let mut o = fmt_opts();
    o.journal_blocks = Some(8);
    Metadata::format(&dev, &o).unwrap();
    let (mut m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    let slots = m.geometry().slots;
    let mut rng = Rng(7);
    for round in 0..200u64 {
        let n = 1 + rng.next() % 600; // up to three journal blocks
        let recs: Vec<Record> = (0..n)
            .map(|_| {
                let s = rng.next() % slots;
                if rng.next() % 4 == 0 {
                    free(s)
                } else {
                    // Distinct blocks per slot, so the mapping stays valid.
                    rec(s, s * 100 + round % 100, rng.next() % 2 == 0)
                }
            })
            .collect();
        m.commit(&dev, &recs).unwrap();
    }
    assert!(m.stats().checkpoints > 3, "{:?}", m.stats());
    let want = blocks(m.entries());
    drop(m);
    let (m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    assert_eq!(blocks(m.entries()), want);
}

#[test]
fn power_loss_at_any_point_recovers_a_committed_prefix() {
    // Commits of random records on a logged device; a crash at every tick, with unsynced writes kept, lost
    // or torn at random: the table recovered is exactly the one after the last commit that returned, or after
    // the commit in progress, never a mix and never an error.
    let clock = Clock::new();
    let dev = CrashDev::new(2 << 20, clock.clone());
    let mut o = fmt_opts();
    o.journal_blocks = Some(6);
    Metadata::format(&dev, &o).unwrap();
    let (mut m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    let slots = m.geometry().slots;
    let mut rng = Rng(99);
    // (tick after the commit returned, table then)
    let mut states: Vec<(u64, Table)> = vec![(clock.now(), blocks(m.entries()))];
    for round in 0..100u64 {
        let n = 1 + rng.next() % 500;
        let recs: Vec<Record> = (0..n)
            .map(|_| {
                let s = rng.next() % slots;
                if rng.next() % 3 == 0 {
                    free(s)
                } else {
                    rec(s, s * 100 + round % 100, rng.next() % 2 == 0)
                }
            })
            .collect();
        m.commit(&dev, &recs).unwrap();
        states.push((clock.now(), blocks(m.entries())));
    }
    let end = clock.now();
    let mut points = 0;
    for t in (states[0].0 + 1)..=end + 1 {
        for mode in [
            CrashMode { keep: 0.5, tear: true },
            CrashMode { keep: 0.9, tear: true },
            CrashMode { keep: 0.0, tear: false },
            CrashMode { keep: 1.0, tear: false },
        ] {
            let img = dev.image_at(t, mode, &mut || rng.unit());
            let d = MemDev::from_bytes(img);
            let (rm, _) = Metadata::open(&d, &open_opts()).unwrap_or_else(|e| panic!("tick {t}: {e}"));
            // The last commit that returned before t, and the one after it.
            let k = states.iter().rposition(|(at, _)| *at < t).unwrap();
            let got = blocks(rm.entries());
            let ok = got == states[k].1 || states.get(k + 1).is_some_and(|s| got == s.1);
            assert!(ok, "tick {t}: recovered table is neither commit {k} nor {}", k + 1);
            points += 1;
        }
    }
    assert!(points > 1000, "{points}");
}

#[test]
fn parts_of_an_interrupted_commit_never_join_a_later_one() {
    // Commit N is torn (its first parts written, the rest not); after recovery a new commit N of the same
    // size is torn the other way. Replay must not stitch the old first parts to the new last part.
    let dev = MemDev::new(4 << 20);
    Metadata::format(&dev, &fmt_opts()).unwrap();
    let (mut m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    m.commit(&dev, &[rec(0, 1, true)]).unwrap();
    let g = *m.geometry();
    let pos = m.journal_pos;
    let big = |block: u64| -> Vec<Record> { (0..400).map(|s| rec(s, block + s, true)).collect() };
    m.commit(&dev, &big(10_000)).unwrap();
    let first_mount = dev.snapshot();
    let at = (g.journal_offset + pos * META_BLOCK) as usize;
    // Tear it: keep parts 0 and 1, lose part 2.
    dev.poke(at + 2 * 4096, &[0; 4096]);
    drop(m);
    let (mut m, r) = Metadata::open(&dev, &open_opts()).unwrap();
    assert!(r.torn_commit);
    assert_eq!(m.entries()[0].block, 1);
    assert!(m.entries()[1].is_free());
    m.commit(&dev, &big(20_000)).unwrap();
    // Now lose the new parts 0 and 1, and put the old ones back.
    dev.poke(at, &first_mount[at..at + 2 * 4096]);
    drop(m);
    let (m, r) = Metadata::open(&dev, &open_opts()).unwrap();
    assert!(r.torn_commit);
    assert_eq!(m.entries()[0].block, 1, "neither big commit applies");
    assert!(m.entries()[1].is_free());
}

#[test]
fn clean_shutdown_keeps_hints_and_detach_forgets_everything() {
    let dev = MemDev::new(8 << 20);
    Metadata::format(&dev, &fmt_opts()).unwrap();
    let (mut m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    m.commit(&dev, &[rec(3, 30, false), rec(4, 40, true)]).unwrap();
    m.shutdown(&dev, |slot| slot as u32 * 10).unwrap();
    let (mut m, r) = Metadata::open(&dev, &open_opts()).unwrap();
    assert!(r.clean_shutdown && r.commits_replayed == 0);
    assert_eq!((m.entries()[3].hint, m.entries()[4].hint), (30, 40));
    let e = m.detach(&dev).unwrap_err();
    assert!(matches!(e, Error::Dirty(_)), "{e}");
    m.commit(&dev, &[rec(4, 40, false)]).unwrap();
    m.detach(&dev).unwrap();
    let (m, r) = Metadata::open(&dev, &open_opts()).unwrap();
    assert!(r.was_detached && r.mapped == 0);
    assert!(m.entries().iter().all(Entry::is_free));
    drop(m);
    // Reopened again after a crash: still empty (the forgetting was durable).
    let (m, r) = Metadata::open(&dev, &open_opts()).unwrap();
    assert!(!r.was_detached && r.mapped == 0 && m.entries().iter().all(Entry::is_free));
}

#[test]
fn wrong_devices_are_refused_with_the_reason() {
    let dev = MemDev::new(8 << 20);
    Metadata::format(&dev, &fmt_opts()).unwrap();
    let (mut m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    m.commit(&dev, &[rec(0, 5, true)]).unwrap();
    drop(m);
    // Another origin.
    let other = OpenOptions { origin: OriginId { size: ORIGIN.size, uuid: [1; 16] }, ..open_opts() };
    assert!(matches!(Metadata::open(&dev, &other), Err(Error::OriginMismatch { .. })));
    let smaller = OpenOptions { origin: OriginId { size: 1 << 20, ..ORIGIN }, ..open_opts() };
    assert!(matches!(Metadata::open(&dev, &smaller), Err(Error::OriginMismatch { .. })));
    // Another block size.
    let bs = OpenOptions { block_size: Some(8192), ..open_opts() };
    assert!(matches!(Metadata::open(&dev, &bs), Err(Error::BlockSize { asked: 8192, found: 4096 })));
    // Formatting over it needs force.
    assert!(matches!(Metadata::format(&dev, &fmt_opts()), Err(Error::Formatted(_))));
    // Truncated.
    let short = MemDev::from_bytes(dev.snapshot()[..4 << 20].to_vec());
    assert!(matches!(Metadata::open(&short, &open_opts()), Err(Error::Truncated { .. })));
    // A damaged table block.
    let bad = MemDev::from_bytes(dev.snapshot());
    bad.poke(2 * 4096 + 100, &[0x12]);
    let e = Metadata::open(&bad, &open_opts()).err().unwrap();
    assert!(matches!(&e, Error::Corrupt(m) if m.contains("slot table")), "{e}");
    // Both superblocks damaged; one damaged is fine.
    let bad = MemDev::from_bytes(dev.snapshot());
    bad.poke(300, &[1]);
    Metadata::open(&bad, &open_opts()).unwrap();
    let bad = MemDev::from_bytes(dev.snapshot());
    bad.poke(300, &[1]);
    bad.poke(4096 + 300, &[1]);
    assert!(matches!(Metadata::open(&bad, &open_opts()), Err(Error::Corrupt(_))));
    // Not a cache device at all; a newer format.
    assert!(matches!(Metadata::open(&MemDev::new(8 << 20), &open_opts()), Err(Error::NotFormatted)));
    let newer = MemDev::from_bytes(dev.snapshot());
    for copy in [0usize, 4096] {
        let mut sb = crate::superblock::Superblock::decode(&dev.snapshot()[copy..copy + 4096]).unwrap();
        sb.version = 2;
        newer.poke(copy, &sb.encode());
    }
    assert!(matches!(Metadata::open(&newer, &open_opts()), Err(Error::NewerFormat { found: 2, .. })));
}

#[test]
fn a_failed_write_fails_the_metadata_for_good() {
    let clock = Clock::new();
    let dev = CrashDev::new(4 << 20, clock);
    Metadata::format(&dev, &fmt_opts()).unwrap();
    let (mut m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    dev.fail_writes();
    assert!(m.commit(&dev, &[rec(0, 1, true)]).is_err());
    assert!(m.is_failed());
    assert!(matches!(m.commit(&dev, &[]), Err(Error::Failed)));
}

#[test]
fn check_reports_problems_without_writing() {
    let dev = MemDev::new(8 << 20);
    Metadata::format(&dev, &fmt_opts()).unwrap();
    let (mut m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    m.commit(&dev, &[rec(0, 5, true), rec(1, 6, false)]).unwrap();
    drop(m);
    let before = dev.snapshot();
    let r = crate::check::check(&dev, Some(ORIGIN)).unwrap();
    assert!(r.ok, "{:?}", r.problems);
    assert_eq!((r.mapped, r.dirty, r.journal_commits), (2, 1, 1));
    assert!(r.text().contains("result           clean"), "{}", r.text());
    assert_eq!(dev.snapshot(), before, "check writes nothing");
    dev.poke(2 * 4096 + 64, &[0xaa]);
    let r = crate::check::check(&dev, None).unwrap();
    assert!(!r.ok && r.problems[0].contains("slot table"), "{:?}", r.problems);
    let r = crate::check::check(&dev, Some(OriginId { size: 1, uuid: [0; 16] })).unwrap();
    assert!(r.problems.iter().any(|p| p.contains("belongs to origin")), "{:?}", r.problems);
}
