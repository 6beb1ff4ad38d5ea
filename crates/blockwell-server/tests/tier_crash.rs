//! Power loss, simulated: a workload runs against a write-back tier whose cache device and origin log every
//! write and sync on one clock; then, for many crash instants, the images a power loss would leave
//! (unsynced writes kept, lost, reordered or torn at 512 B) are recovered and checked:
//!
//! - recovery succeeds (the metadata is never found corrupt);
//! - every sector reads back as a value some write gave it, and never one older than its last flushed write
//!   (a write is flushed when a FLUSH issued after its reply completed before the crash, or it was FUA);
//! - what the recovered cache serves is what reaches the origin when it is cleaned and detached (no value
//!   changes without a write).
//!
//! `BLOCKWELL_CRASH_POINTS` sets the crash instants per workload (default 600; the script
//! `scripts/crash.sh` runs 100,000). Workloads: one client with overwrites, TRIM, WRITE_ZEROES, FUA and
//! cleaning; three concurrent clients on overlapping ranges with the background cleaner running, in four runs
//! (each its own interleaving) sharing the instants.

mod tier_common;

use blockwell_cachedev::crash::{Clock, CrashDev, CrashMode, Damage};
use blockwell_cachedev::{CacheMode, Dev, MemDev};
use blockwell_core::cleaner::CleanerSpec;
use blockwell_server::backend::Backend;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tier_common::*;

const CACHE: usize = 1 << 20;
const ORIGIN: usize = 2 << 20;
const SECTORS: u64 = ORIGIN as u64 / 512;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Sectors get the write's pattern (id), or zeroes (id 0).
    Write {
        id: u64,
        fua: bool,
    },
    Zeroes,
    Trim,
    Flush,
}

#[derive(Clone, Copy, Debug)]
struct Op {
    kind: Kind,
    first: u64,
    n: u64,
    issued: u64,
    acked: u64,
}

/// The client side: runs one operation, logging its issue and reply ticks.
struct Log {
    clock: Clock,
    ops: Mutex<Vec<Op>>,
}

impl Log {
    fn run(&self, kind: Kind, first: u64, n: u64, f: impl FnOnce() -> std::io::Result<()>) {
        let issued = self.clock.tick();
        f().expect("the workload's requests succeed");
        let acked = self.clock.tick();
        self.ops.lock().unwrap().push(Op { kind, first, n, issued, acked });
    }
}

fn workload(t: &(impl Backend + ?Sized), log: &Log, rng: &mut Rng, ops: usize, id_base: u64, clean: &dyn Fn()) {
    for i in 0..ops {
        // Mostly within a hot region, so that overwrites and evictions happen.
        let first = if rng.below(4) == 0 { rng.below(SECTORS) } else { rng.below(SECTORS / 2) };
        let n = (1 + rng.below(24)).min(SECTORS - first);
        let (off, len) = (first * 512, n * 512);
        match rng.below(100) {
            0..=59 => {
                let id = id_base + i as u64 + 1;
                let fua = rng.below(10) == 0;
                let data = pattern(id, off, len as usize);
                log.run(Kind::Write { id, fua }, first, n, || t.write_at(&data, off, fua));
            }
            60..=64 => log.run(Kind::Zeroes, first, n, || t.write_zeroes(off, len, rng.below(2) == 0, false)),
            65..=67 => log.run(Kind::Trim, first, n, || t.trim(off, len, false)),
            68..=79 => log.run(Kind::Flush, 0, 0, || t.flush()),
            80..=84 => clean(),
            _ => {
                let mut b = vec![0u8; len as usize];
                t.read_at(&mut b, off).expect("reads succeed");
            }
        }
    }
}

/// What each sector may hold after a crash at `t`: `None` for anything (a TRIM is in play), else the write
/// ids allowed (0: zeroes or never written).
fn allowed(ops: &[Op], t: u64) -> HashMap<u64, Option<Vec<u64>>> {
    let flushes: Vec<&Op> = ops.iter().filter(|o| o.kind == Kind::Flush && o.acked < t).collect();
    let durable = |w: &Op| {
        matches!(w.kind, Kind::Write { fua: true, .. }) && w.acked < t || flushes.iter().any(|f| w.acked < f.issued)
    };
    let mut per: HashMap<u64, Vec<&Op>> = HashMap::new();
    for o in ops.iter().filter(|o| o.kind != Kind::Flush && o.issued < t) {
        for s in o.first..o.first + o.n {
            per.entry(s).or_default().push(o);
        }
    }
    per.into_iter()
        .map(|(s, ws)| {
            let d: Vec<&&Op> = ws.iter().filter(|w| durable(w)).collect();
            // A write that happened before a durable one was overwritten by it.
            let live: Vec<&&Op> = ws.iter().filter(|w| !d.iter().any(|x| w.acked < x.issued)).collect();
            if live.iter().any(|w| w.kind == Kind::Trim) {
                return (s, None);
            }
            let mut ids: Vec<u64> = live
                .iter()
                .map(|w| match w.kind {
                    Kind::Write { id, .. } => id,
                    _ => 0,
                })
                .collect();
            if d.is_empty() {
                ids.push(0);
            }
            (s, Some(ids))
        })
        .collect()
}

/// Recovers the images of a crash at `t` and checks every sector, then that cleaning and detaching puts the
/// same values on the origin.
fn check_crash(cache: Vec<u8>, origin: Vec<u8>, ops: &[Op], t: u64, what: &str, history: &dyn Fn(u64) -> String) {
    if let Err(e) = recover_and_check(cache, origin, ops, t, what, history) {
        panic!("{what}: recovery failed: {e}");
    }
}

/// As [`check_crash`], but a device refused by recovery is returned as the error (media damage may refuse it).
fn recover_and_check(
    cache: Vec<u8>,
    origin: Vec<u8>,
    ops: &[Op],
    t: u64,
    what: &str,
    history: &dyn Fn(u64) -> String,
) -> Result<(), blockwell_server::tier::TierError> {
    let cache: Arc<dyn Dev> = Arc::new(MemDev::from_bytes(cache));
    let origin = Arc::new(CrashDev::with_contents(origin, Clock::new()));
    let tier = blockwell_server::tier::TierBackend::open(
        DevOrigin(origin.clone()),
        cache.clone(),
        config(ORIGIN as u64, CacheMode::WriteBack),
    )?;
    let mut all = vec![0u8; ORIGIN];
    tier.read_at(&mut all, 0).unwrap_or_else(|e| panic!("{what}: read after recovery: {e}"));
    let allow = allowed(ops, t);
    for (&s, ids) in &allow {
        let Some(ids) = ids else { continue };
        let got = sector_id(&all[s as usize * 512..(s as usize + 1) * 512], s);
        match got {
            Some(id) if ids.contains(&id) => {}
            _ => {
                panic!("{what}: sector {s} holds {got:?}; allowed {ids:?}; ops on it: {:?}; {}", on(ops, s), history(s))
            }
        }
    }
    for s in 0..SECTORS {
        if !allow.contains_key(&s) {
            let got = sector_id(&all[s as usize * 512..(s as usize + 1) * 512], s);
            assert_eq!(got, Some(0), "{what}: sector {s} was never written");
        }
    }
    tier.validate().unwrap_or_else(|e| panic!("{what}: {e}"));
    tier.detach().unwrap_or_else(|e| panic!("{what}: detach: {e}"));
    let after = origin.current();
    for (&s, ids) in &allow {
        if ids.is_some() {
            let (a, b) =
                (&all[s as usize * 512..(s as usize + 1) * 512], &after[s as usize * 512..(s as usize + 1) * 512]);
            assert!(
                a == b,
                "{what}: sector {s} read {:?} from the cache, {:?} reached the origin",
                sector_id(a, s),
                sector_id(b, s)
            );
        }
    }
    Ok(())
}

/// The operations on sector `s`, each with the first FLUSH issued after its reply (when it completed).
fn on(ops: &[Op], s: u64) -> Vec<(Op, Option<(u64, u64)>)> {
    ops.iter()
        .filter(|o| o.kind != Kind::Flush && o.first <= s && s < o.first + o.n)
        .map(|o| {
            let f = ops.iter().filter(|f| f.kind == Kind::Flush && f.issued > o.acked).min_by_key(|f| f.acked);
            (*o, f.map(|f| (f.issued, f.acked)))
        })
        .collect()
}

fn points() -> usize {
    std::env::var("BLOCKWELL_CRASH_POINTS").ok().and_then(|v| v.parse().ok()).unwrap_or(600)
}

/// Crashes at `count` instants spread over the run (every logged event's tick is a candidate), each with a
/// random mode: all unsynced writes lost, all kept (kill -9), or a random subset torn at 512 B.
fn crash_many(
    clock: &Clock,
    (cache, origin): (&CrashDev, &CrashDev),
    ops: &[Op],
    (start, count): (u64, usize),
    seed: u64,
    name: &str,
) -> usize {
    let mut ticks: Vec<u64> = cache.ticks().into_iter().chain(origin.ticks()).filter(|&t| t > start).collect();
    ticks.sort_unstable();
    ticks.dedup();
    let end = clock.now() + 1;
    let mut rng = Rng(seed);
    let mut chosen: Vec<u64> =
        (0..count).map(|_| ticks[rng.below(ticks.len() as u64) as usize] + rng.below(2)).collect();
    chosen.push(end);
    chosen.sort_unstable();
    let (mut rc, mut ro) = (cache.replay(), origin.replay());
    for (i, &t) in chosen.iter().enumerate() {
        let mode = match i % 4 {
            0 => CrashMode { keep: 0.0, tear: false },
            1 => CrashMode { keep: 1.0, tear: false },
            _ => CrashMode { keep: rng.unit(), tear: true },
        };
        let mut r1 = Rng(seed ^ (t << 8) ^ i as u64 | 1);
        let mut r2 = Rng(seed ^ (t << 16) ^ i as u64 | 1);
        let ci = rc.image_at(t, mode, &mut || r1.unit());
        let oi = ro.image_at(t, mode, &mut || r2.unit());
        let history = |s: u64| {
            let (writes, syncs) = origin.history(s * 512, 512);
            let writes: Vec<(u64, Option<u64>)> =
                writes.into_iter().map(|(at, d)| (at, Some(u64::from_le_bytes(d[..8].try_into().unwrap())))).collect();
            let near: Vec<u64> = syncs.into_iter().filter(|&x| x + 300 > t && x < t + 50).collect();
            format!("origin writes of the sector (tick, id): {writes:?}; origin syncs near the crash: {near:?}")
        };
        check_crash(ci, oi, ops, t, &format!("{name}: crash at tick {t} ({mode:?})"), &history);
    }
    chosen.len()
}

#[test]
fn power_loss_one_client_overwrites_trim_zeroes_fua() {
    let (clock, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let mut cfg = config(ORIGIN as u64, CacheMode::WriteBack);
    // No background cleaning: dirty blocks leave by eviction (written back by the writers themselves and by
    // the passes the workload runs).
    cfg.cleaner = CleanerSpec::None;
    cfg.sequential_cutoff = 64 * 1024;
    let t = open(cache.clone(), origin.clone(), cfg);
    let start = clock.now();
    let log = Log { clock: clock.clone(), ops: Mutex::new(Vec::new()) };
    let mut rng = Rng(0x5eed);
    workload(&t, &log, &mut rng, 1500, 0, &|| {
        t.clean_pass().unwrap();
    });
    let s = t.snapshot();
    assert!(
        s.counters.dirty_evictions > 50 && s.counters.cleaned_blocks > 50 && s.commits > 50,
        "the workload exercises the tier: {s:?}"
    );
    let ops = log.ops.lock().unwrap().clone();
    drop(t);
    let n = crash_many(&clock, (&cache, &origin), &ops, (start, points()), 1, "one client");
    assert!(n >= points());
    eprintln!("one client: {} operations, {n} crash instants, every one recovered and checked", ops.len());
}

/// Runs of the three-client workload: each run interleaves the clients, the cleaner and the committer its own
/// way, and a race shows only in the runs where its interleaving happens.
const RUNS: u64 = 4;

#[test]
fn power_loss_three_concurrent_clients_with_the_background_cleaner() {
    let per_run = points().div_ceil(RUNS as usize);
    let mut total = 0;
    for run in 0..RUNS {
        let (clock, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
        let mut cfg = config(ORIGIN as u64, CacheMode::WriteBack);
        cfg.cleaner = CleanerSpec::Watermark { high: 15.0, low: 5.0, idle_ms: 0 };
        cfg.clean_interval = Duration::from_millis(1);
        cfg.commit_interval = Duration::from_millis(5);
        let t = Arc::new(open(cache.clone(), origin.clone(), cfg));
        let start = clock.now();
        let log = Arc::new(Log { clock: clock.clone(), ops: Mutex::new(Vec::new()) });
        let threads: Vec<_> = (0..3u64)
            .map(|k| {
                let (t, log) = (t.clone(), log.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng(0xabc + k + 16 * run);
                    workload(&*t, &log, &mut rng, 600, (k + 1) << 32, &|| {});
                })
            })
            .collect();
        for th in threads {
            th.join().unwrap();
        }
        let ops = log.ops.lock().unwrap().clone();
        let t = Arc::into_inner(t).expect("the clients are done");
        drop(t);
        let name = format!("three clients, run {run}");
        let n = crash_many(&clock, (&cache, &origin), &ops, (start, per_run), 2 + run, &name);
        assert!(n >= per_run);
        total += n;
        eprintln!("{name}: {} operations, {n} crash instants, every one recovered and checked", ops.len());
    }
    assert!(total >= points());
}

#[test]
fn cleaning_a_block_rewritten_in_a_new_slot_never_lets_an_older_clean_copy_come_back() {
    // The block's clean copy is evicted (its slot's FREE record not yet committed), the block is rewritten
    // whole into a new slot and cleaned. If the cleaner reached the origin before that FREE record was durable,
    // a crash would leave the old clean copy mapped: served after recovery, while the origin holds the newer
    // bytes, which would come back once the copy left the cache.
    let (clock, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let mut cfg = config(ORIGIN as u64, CacheMode::WriteBack);
    cfg.reserve = Some(64);
    let t = open(cache.clone(), origin.clone(), cfg);
    let b = 7u64;
    t.write_at(&pattern(1, b * BS, BS as usize), b * BS, false).unwrap();
    t.clean_all().unwrap();
    // Evict it: read enough other blocks (nothing is committed meanwhile).
    let slots = t.snapshot().capacity_blocks;
    let mut buf = vec![0u8; BS as usize];
    for k in 0..slots + 8 {
        t.read_at(&mut buf, (100 + k) * BS).unwrap();
    }
    assert!(t.snapshot().counters.demotions > 0);
    let start = clock.now();
    t.write_at(&pattern(2, b * BS, BS as usize), b * BS, false).unwrap();
    t.clean_pass().unwrap();
    let _ = t.clean_all();
    // Crash at every instant since the rewrite, as kill -9 would (every write kept) and as power loss would.
    let end = clock.now() + 1;
    let (mut rc, mut ro) = (cache.replay(), origin.replay());
    for tick in start..=end {
        for mode in [CrashMode { keep: 1.0, tear: false }, CrashMode { keep: 0.0, tear: false }] {
            let ci = rc.image_at(tick, mode, &mut || 0.5);
            let oi = ro.image_at(tick, mode, &mut || 0.5);
            let o = Arc::new(CrashDev::with_contents(oi, Clock::new()));
            let r = blockwell_server::tier::TierBackend::open(
                DevOrigin(o.clone()),
                Arc::new(MemDev::from_bytes(ci)) as Arc<dyn Dev>,
                config(ORIGIN as u64, CacheMode::WriteBack),
            )
            .unwrap();
            let mut got = vec![0u8; BS as usize];
            r.read_at(&mut got, b * BS).unwrap();
            let id = sector_id(&got[..512], b * 8);
            assert!(matches!(id, Some(1) | Some(2)), "tick {tick}: {id:?}");
            r.detach().unwrap();
            let on_origin = o.current()[(b * BS) as usize..][..BS as usize].to_vec();
            assert!(
                on_origin == got,
                "tick {tick} {mode:?}: served {id:?}, the origin holds {:?}",
                sector_id(&on_origin[..512], b * 8)
            );
        }
    }
}

#[test]
fn a_partial_write_past_an_unchecked_clean_copy_never_lets_that_copy_come_back() {
    // After a crash, a clean copy is restored unchecked; a partial write to it drops the copy and goes to the
    // origin. The copy's FREE record must be durable before the origin write: otherwise a crash in between
    // leaves the older copy mapped and matching its checksum, served while the origin holds the newer bytes.
    let (clock, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let t = open(cache.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    let b = 9u64;
    t.write_at(&pattern(1, b * BS, BS as usize), b * BS, false).unwrap();
    t.clean_all().unwrap();
    t.flush().unwrap();
    // kill -9: the devices as they are, a new run on them.
    let (ci, oi) = (cache.current(), origin.current());
    drop(t);
    drop(clock);
    let clock = Clock::new();
    let cache = Arc::new(CrashDev::with_contents(ci, clock.clone()));
    let origin = Arc::new(CrashDev::with_contents(oi, clock.clone()));
    let t = open(cache.clone(), origin.clone(), config(ORIGIN as u64, CacheMode::WriteBack));
    assert_eq!(t.snapshot().cached_blocks, 1, "the clean copy is restored");
    // Everything so far committed: the FREE the write queues is the only change it makes before the origin.
    t.flush().unwrap();
    let start = clock.now();
    let sector = b * BS + 1024;
    t.write_at(&pattern(2, sector, 512), sector, false).unwrap();
    let end = clock.now() + 1;
    drop(t);
    let (mut rc, mut ro) = (cache.replay(), origin.replay());
    for tick in start..=end {
        for mode in [CrashMode { keep: 1.0, tear: false }, CrashMode { keep: 0.0, tear: false }] {
            let o = Arc::new(CrashDev::with_contents(ro.image_at(tick, mode, &mut || 0.5), Clock::new()));
            let r = blockwell_server::tier::TierBackend::open(
                DevOrigin(o.clone()),
                Arc::new(MemDev::from_bytes(rc.image_at(tick, mode, &mut || 0.5))) as Arc<dyn Dev>,
                config(ORIGIN as u64, CacheMode::WriteBack),
            )
            .unwrap();
            let mut got = vec![0u8; BS as usize];
            r.read_at(&mut got, b * BS).unwrap();
            let id = sector_id(&got[1024..1536], sector / 512);
            assert!(matches!(id, Some(1) | Some(2)), "tick {tick}: {id:?}");
            r.detach().unwrap();
            let on_origin = &o.current()[(b * BS) as usize..][..BS as usize];
            assert!(
                on_origin == got.as_slice(),
                "tick {tick} {mode:?}: served {id:?}, the origin holds {:?}",
                sector_id(&on_origin[1024..1536], sector / 512)
            );
        }
    }
}

/// The journal blocks of a cache image that carry the journal's magic and belong to the current lap, as (byte
/// offset, commit sequence), read from the raw bytes as the format page describes them.
fn journal_blocks(img: &[u8]) -> Vec<(u64, u64)> {
    let at = |o: usize| u64::from_le_bytes(img[o..o + 8].try_into().unwrap());
    let sb = if img[4096..4104] == img[..8] && at(4096 + 24) > at(24) { 4096 } else { 0 };
    let (journal, blocks, first_seq) = (at(sb + 96), at(sb + 72), at(sb + 160));
    (0..blocks)
        .map(|i| journal + i * 4096)
        .filter(|&o| &img[o as usize..o as usize + 4] == b"BWJN" && at(o as usize + 8) >= first_seq)
        .map(|o| (o, at(o as usize + 8)))
        .collect()
}

#[test]
fn media_damage_in_the_journal_after_power_loss_is_refused_or_loses_no_flushed_write() {
    // The one-client workload; at crash instants the cache image also gets a flipped bit or a zeroed block in
    // a journal block of a commit older than the newest (damage to the newest cannot be told from a commit the
    // crash interrupted). Invariant: recovery refuses the device, or every sector holds a value allowed by
    // the writes and FLUSHes before the crash, and cleaning puts the same on the origin.
    let (clock, cache, origin) = devices(CACHE, ORIGIN, CacheMode::WriteBack);
    let mut cfg = config(ORIGIN as u64, CacheMode::WriteBack);
    cfg.cleaner = CleanerSpec::None;
    let t = open(cache.clone(), origin.clone(), cfg);
    let start = clock.now();
    let log = Log { clock: clock.clone(), ops: Mutex::new(Vec::new()) };
    let mut rng = Rng(0xd1a6);
    workload(&t, &log, &mut rng, 800, 0, &|| {
        t.clean_pass().unwrap();
    });
    let ops = log.ops.lock().unwrap().clone();
    drop(t);
    let flushes: Vec<u64> = ops.iter().filter(|o| o.kind == Kind::Flush).map(|o| o.acked + 1).collect();
    let (mut refused, mut checked) = (0, 0);
    let (mut rc, mut ro) = (cache.replay(), origin.replay());
    // Right after FLUSHes (the commits they made are durable), with unsynced writes kept or lost.
    for (i, &at) in flushes.iter().enumerate().filter(|(i, _)| i % 2 == 0).take(points() / 4) {
        if at <= start {
            continue;
        }
        let mode = CrashMode { keep: if i % 4 == 0 { 0.0 } else { 1.0 }, tear: false };
        let mut img = rc.image_at(at, mode, &mut || rng.unit());
        let oi = ro.image_at(at, mode, &mut || rng.unit());
        let journal = journal_blocks(&img);
        let newest = journal.iter().map(|j| j.1).max().unwrap_or(0);
        let older: Vec<u64> = journal.iter().filter(|j| j.1 < newest).map(|j| j.0).collect();
        if older.is_empty() {
            continue;
        }
        let target = older[rng.below(older.len() as u64) as usize];
        let damage = Damage::within(target, 4096, &mut || rng.unit());
        damage.apply(&mut img);
        let what = format!("crash at tick {at} ({mode:?}), {damage:?}");
        match recover_and_check(img, oi, &ops, at, &what, &|_| String::new()) {
            Err(e) => {
                assert!(e.to_string().contains("corrupt metadata"), "{what}: {e}");
                refused += 1;
            }
            Ok(()) => checked += 1,
        }
    }
    assert!(refused > 10, "refused {refused}, checked {checked}");
    eprintln!(
        "media damage in the journal: {refused} devices refused with the reason, {checked} recovered and checked"
    );
}
