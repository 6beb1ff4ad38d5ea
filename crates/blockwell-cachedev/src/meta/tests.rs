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
    assert!(r.text().contains("result           no problems found"), "{}", r.text());
    assert_eq!(dev.snapshot(), before, "check writes nothing");
    dev.poke(2 * 4096 + 64, &[0xaa]);
    let r = crate::check::check(&dev, None).unwrap();
    assert!(!r.ok && r.problems[0].contains("slot table"), "{:?}", r.problems);
    let r = crate::check::check(&dev, Some(OriginId { size: 1, uuid: [0; 16] })).unwrap();
    assert!(r.problems.iter().any(|p| p.contains("belongs to origin")), "{:?}", r.problems);
}

/// Five commits of one dirty record each (a write and a FLUSH each), then a crash: the device and the ring
/// index of each commit's journal block.
fn five_flushed_commits() -> (MemDev, Geometry, Vec<u64>) {
    let dev = MemDev::new(8 << 20);
    Metadata::format(&dev, &fmt_opts()).unwrap();
    let (mut m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    let mut at = Vec::new();
    for i in 0..5u64 {
        at.push(m.journal_pos);
        m.commit(&dev, &[rec(i, 100 + i, true)]).unwrap();
    }
    let g = *m.geometry();
    drop(m); // a crash
    (dev, g, at)
}

#[test]
fn damage_before_the_end_of_the_journal_is_refused_not_replayed_as_a_torn_tail() {
    // One flipped byte, a zeroed block, a damaged magic in the third commit's journal block: commits 4 and 5
    // exist after it, so it is damage, not a torn tail.
    type Damage = fn(&MemDev, usize);
    let damages: [(&str, Damage); 3] = [
        ("a flipped byte", |d, at| {
            let b = d.snapshot()[at + 200];
            d.poke(at + 200, &[b ^ 0x10]);
        }),
        ("a zeroed block", |d, at| d.poke(at, &[0; 4096])),
        ("a damaged magic", |d, at| d.poke(at, b"XXXX")),
    ];
    for (what, damage) in damages {
        let (dev, g, at) = five_flushed_commits();
        let third = (g.journal_offset + at[2] * META_BLOCK) as usize;
        damage(&dev, third);
        let before = dev.snapshot();
        let e = Metadata::open(&dev, &open_opts()).err().unwrap_or_else(|| panic!("{what}: opened"));
        match &e {
            Error::JournalDamaged { seq, block, .. } => assert_eq!((*seq, *block), (3, at[2]), "{what}"),
            e => panic!("{what}: {e}"),
        }
        let msg = e.to_string();
        assert!(msg.contains("commit 3 (journal block 2)") && msg.contains("2 later commit(s)"), "{what}: {msg}");
        assert_eq!(dev.snapshot(), before, "{what}: a refused device is untouched");
        let r = crate::check::check(&dev, Some(ORIGIN)).unwrap();
        assert!(!r.ok, "{what}: {}", r.text());
        assert!(r.problems.iter().any(|p| p.contains("commit 3 (journal block 2)")), "{what}: {:?}", r.problems);
        assert!(r.text().starts_with("result           1 problem(s) found"), "{what}: {}", r.text());
        assert!(r.text().contains("commit 3 is damaged and the later ones are not replayed"), "{}", r.text());
        assert_eq!(dev.snapshot(), before, "{what}: check writes nothing");
    }
}

#[test]
fn damage_to_the_newest_commit_reads_as_a_torn_tail() {
    // The limit of what a journal without a later write can tell: the newest commit damaged is
    // indistinguishable from one a crash interrupted, and is reported as a torn commit.
    let (dev, g, at) = five_flushed_commits();
    dev.poke((g.journal_offset + at[4] * META_BLOCK) as usize + 200, &[0xee]);
    let (m, r) = Metadata::open(&dev, &open_opts()).unwrap();
    assert!(r.torn_commit);
    assert_eq!(r.commits_replayed, 4);
    assert!(m.entries()[4].is_free());
}

#[test]
fn media_damage_after_a_crash_is_refused_or_loses_no_committed_record() {
    // The power-loss workload; at crash instants, the image also gets media damage (a flipped bit or a zeroed
    // 4 KiB block) in a journal block, a block of the checkpoint's table, or a superblock copy. Invariant: the
    // device is refused with the reason, or it recovers a table with every commit that returned. The one
    // exception is the limit of a journal: damage to the newest commit, with nothing written after it, reads as
    // a commit the crash interrupted (counted, and checked to be only that).
    use crate::crash::Damage;
    use crate::superblock::read_copies;
    let clock = Clock::new();
    let dev = CrashDev::new(2 << 20, clock.clone());
    let mut o = fmt_opts();
    o.journal_blocks = Some(6);
    Metadata::format(&dev, &o).unwrap();
    let (mut m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    let slots = m.geometry().slots;
    let mut rng = Rng(0xda3a6e);
    let mut states: Vec<(u64, Table)> = vec![(clock.now(), blocks(m.entries()))];
    for round in 0..60u64 {
        let n = 1 + rng.next() % 300;
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
    let (mut refused, mut intact, mut newest_lost) = (0, 0, 0);
    let mut reasons = std::collections::BTreeSet::new();
    for t in (states[0].0 + 1..=end + 1).step_by(2) {
        for mode in [CrashMode { keep: 1.0, tear: false }, CrashMode { keep: 0.5, tear: true }] {
            let mut img = dev.image_at(t, mode, &mut || rng.unit());
            let (_, sb) = read_copies(&img[..8192]).chosen.expect("a crash leaves a superblock");
            let g = sb.geometry;
            // The valid journal blocks: (offset, commit sequence).
            let journal: Vec<(u64, u64)> = (0..g.journal_blocks)
                .map(|i| g.journal_offset + i * META_BLOCK)
                .filter_map(|at| {
                    let b = &img[at as usize..(at + META_BLOCK) as usize];
                    crate::record::decode_journal_block(&sb.uuid, b).map(|(h, _)| (at, h.seq))
                })
                .collect();
            let newest = journal.iter().map(|j| j.1).filter(|&s| s >= sb.journal_seq).max();
            let target = match rng.below(4) {
                0 | 1 if !journal.is_empty() => journal[rng.below(journal.len() as u64) as usize].0,
                0 | 1 => g.journal_offset + rng.below(g.journal_blocks) * META_BLOCK,
                2 => g.table_offset[sb.checkpoint_table as usize] + rng.below(g.table_blocks) * META_BLOCK,
                _ => rng.below(2) * META_BLOCK,
            };
            let damage = Damage::within(target, META_BLOCK, &mut || rng.unit());
            damage.apply(&mut img);
            let in_newest = journal.iter().any(|&(at, s)| Some(s) == newest && at == target);
            let k = states.iter().rposition(|(at, _)| *at < t).unwrap();
            match Metadata::open(&MemDev::from_bytes(img), &open_opts()) {
                Err(e) => {
                    refused += 1;
                    let why = e.to_string();
                    reasons.insert(why.split(':').take(2).collect::<Vec<_>>().join(":"));
                }
                Ok((rm, _)) => {
                    let got = blocks(rm.entries());
                    if got == states[k].1 || states.get(k + 1).is_some_and(|s| got == s.1) {
                        intact += 1;
                    } else {
                        assert!(
                            in_newest && k >= 1 && got == states[k - 1].1,
                            "tick {t}, {damage:?} at {target} ({mode:?}): a committed record was lost silently"
                        );
                        newest_lost += 1;
                    }
                }
            }
        }
    }
    assert!(refused > 50 && intact > 50, "refused {refused}, intact {intact}, newest lost {newest_lost}");
    assert!(reasons.iter().any(|r| r.contains("journal is damaged before its end")), "{reasons:?}");
    eprintln!("media damage: {refused} refused, {intact} intact, {newest_lost} newest commit lost; {reasons:?}");
}

#[test]
fn repair_names_the_slots_of_a_damaged_table_block_and_keeps_the_rest() {
    let dev = MemDev::new(8 << 20);
    Metadata::format(&dev, &fmt_opts()).unwrap();
    let (mut m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    // Dirty blocks in table blocks 0 and 1 (169 entries a block), then a clean stop (a checkpoint).
    m.commit(&dev, &[rec(3, 30, true), rec(200, 2000, true), rec(201, 2010, true)]).unwrap();
    let g = *m.geometry();
    m.shutdown(&dev, |_| 0).unwrap();
    let copy = m.superblock().checkpoint_table as usize;
    drop(m);
    // Table block 0 of the checkpoint damaged: refused.
    dev.poke((g.table_offset[copy] + 100) as usize, &[0xff]);
    assert!(matches!(Metadata::open(&dev, &open_opts()), Err(Error::Corrupt(_))));
    let before = dev.snapshot();
    let r = crate::repair::repair(&dev, false).unwrap();
    assert_eq!(dev.snapshot(), before, "a repair without write writes nothing");
    assert_eq!(r.damaged_table_blocks, vec![0]);
    assert_eq!((r.kept, r.kept_dirty), (2, 2));
    assert_eq!(r.unvouched.len(), ENTRIES_PER_BLOCK, "every slot of the damaged block is named");
    assert!(r.unvouched.iter().all(|u| u.block.is_none() && u.slot < ENTRIES_PER_BLOCK as u64));
    let text = r.text("cache.dev");
    assert!(text.contains("slot 3: origin block unknown, data at byte"), "{text}");
    let r = crate::repair::repair(&dev, true).unwrap();
    assert!(r.written);
    let (m, rec) = Metadata::open(&dev, &open_opts()).unwrap();
    assert!(rec.clean_shutdown);
    assert_eq!((m.entries()[200].block, m.entries()[201].block), (2000, 2010));
    assert!(m.entries()[200].dirty && m.entries()[3].is_free());
    drop(m);
    assert!(crate::check::check(&dev, Some(ORIGIN)).unwrap().ok);
}

#[test]
fn dirty_entries_carry_their_data_checksum_and_old_ones_still_read() {
    use crate::superblock::{Superblock, INCOMPAT_DATA_CRC};
    let dev = MemDev::new(8 << 20);
    Metadata::format(&dev, &fmt_opts()).unwrap();
    let (mut m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    let sum = Record { slot: 1, entry: Entry::dirty_crc(11, 0xabcd) };
    m.commit(&dev, &[sum, rec(2, 12, true)]).unwrap();
    drop(m);
    let (m, _) = Metadata::open(&dev, &open_opts()).unwrap();
    assert_eq!(m.entries()[1].data_crc(), Some(0xabcd));
    assert_eq!(m.entries()[2].data_crc(), None, "a dirty entry without its checksum (an older device's)");
    let sb = Superblock::decode(&dev.snapshot()[..4096]).unwrap();
    assert_eq!(sb.encode()[12..16], INCOMPAT_DATA_CRC.to_le_bytes(), "the feature bit is set");
    // A superblock of the older format (no feature bit) still opens.
    drop(m);
    for copy in [0usize, 4096] {
        let mut b = dev.snapshot()[copy..copy + 4096].to_vec();
        b[12..16].fill(0);
        b[16..20].fill(0);
        let crc = crc32c::crc32c(&b);
        b[16..20].copy_from_slice(&crc.to_le_bytes());
        dev.poke(copy, &b);
    }
    Metadata::open(&dev, &open_opts()).unwrap();
}
