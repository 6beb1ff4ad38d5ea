//! CachedBackend over a MemBackend, against a reference model.

use blockwell_core::admission::AdmissionSpec as Admission;
use blockwell_core::prefetch::PrefetcherSpec;
use blockwell_core::{PolicySpec, Preset};
use blockwell_server::backend::{Backend, MemBackend, OnMiss, ReadInto, ReadOutcome, SharedBytes};
use blockwell_server::cache::{CachedBackend, CachedConfig, CachedError, WriteMode};
use blockwell_server::delay::{DelayBackend, DelayConfig, LinearServiceTime};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A read served at once from memory, or nothing done (`Backend::read` with `OnMiss::Decline`).
fn read_now<B: Backend + ?Sized>(c: &B, buf: &mut [u8], off: u64) -> bool {
    c.read(off, ReadInto::Copy(buf), OnMiss::Decline).unwrap() == ReadOutcome::Served
}

/// Like [`read_now`], sharing the cache's memory.
fn shared<B: Backend + ?Sized>(c: &B, off: u64, len: u64, out: &mut Vec<SharedBytes>) -> bool {
    c.read(off, ReadInto::Share { len, out }, OnMiss::Decline).unwrap() == ReadOutcome::Served
}

const BS: u64 = 4096;

use blockwell_testkit::Rng;

fn cached(size: usize, cap_blocks: u64, f: impl FnOnce(&mut CachedConfig)) -> CachedBackend<MemBackend> {
    let mut c = CachedConfig::new(cap_blocks * BS);
    f(&mut c);
    CachedBackend::new(MemBackend::new(size), c).unwrap()
}

fn fill(len: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng(seed | 1);
    (0..len).map(|_| r.next() as u8).collect()
}

fn read(c: &impl Backend, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0xEE; len];
    c.read_at(&mut b, off).unwrap();
    b
}

/// A read the way the NBD server does it: the fast path first, `read_at` when it declines.
fn read_fast_first(c: &impl Backend, off: u64, len: usize) -> Vec<u8> {
    let mut b = vec![0xEE; len];
    if !read_now(c, &mut b, off) {
        b.fill(0xEE);
        c.read_at(&mut b, off).unwrap();
    }
    b
}

/// Threads own disjoint regions (so the model is exact), each doing unaligned reads and writes; the cache and
/// the policy are shared by all. After each acknowledged write the backend holds the data; every read matches.
fn random_workload(policy: &str, mode: WriteMode, threads: u64, region: u64, cap_blocks: u64) {
    random_workload_prefetch(policy, "none", mode, threads, region, cap_blocks)
}

fn random_workload_prefetch(policy: &str, prefetch: &str, mode: WriteMode, threads: u64, region: u64, cap_blocks: u64) {
    let size = (threads * region) as usize;
    let c = Arc::new(cached(size, cap_blocks, |c| {
        c.policy = PolicySpec::parse(policy).unwrap();
        c.prefetch = PrefetcherSpec::parse(prefetch).unwrap();
        c.mode = mode;
    }));
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                let base = t * region;
                let mut model = vec![0u8; region as usize];
                let mut r = Rng(0x9E37_79B9_7F4A_7C15 ^ (t + 1));
                for i in 0..3000u64 {
                    let off = r.below(region);
                    let len = 1 + r.below((region - off).min(3 * BS));
                    if r.below(3) == 0 {
                        let data = fill(len as usize, r.next());
                        c.write_at(&data, base + off, r.below(8) == 0).unwrap();
                        model[off as usize..(off + len) as usize].copy_from_slice(&data);
                        // Acknowledged: the backend holds it.
                        let mut back = vec![0; len as usize];
                        c.inner().read_at(&mut back, base + off).unwrap();
                        assert_eq!(back, data, "backend after write {i}");
                    } else {
                        let got = if r.below(2) == 0 {
                            read(&*c, base + off, len as usize)
                        } else {
                            read_fast_first(&*c, base + off, len as usize)
                        };
                        assert!(got == model[off as usize..(off + len) as usize], "thread {t} read {i} at {off}+{len}");
                    }
                    if i % 500 == 0 {
                        c.validate().unwrap();
                    }
                }
                model
            })
        })
        .collect();
    let mut whole = Vec::new();
    for h in hs {
        whole.extend(h.join().unwrap());
    }
    assert!(c.inner().snapshot() == whole, "backend differs from model");
    c.validate().unwrap();
    let s = c.snapshot();
    assert!(s.slots_allocated <= cap_blocks, "{s:?}");
    assert!(s.read_block_hits > 0 && s.evictions > 0, "{s:?}");
}

/// Prefetchers in the live cache must never change what a read returns, whatever writes race with their
/// fetches (the asynchronous ones run on the worker thread).
#[test]
fn random_concurrent_workload_matches_model_with_prefetchers() {
    for p in ["redcap(segment_kb=16)", "ondemand", "linux24", "linux26", "stride", "obl", "bsd"] {
        random_workload_prefetch("lru", p, WriteMode::WriteThrough, 3, 40 * BS + 5, 24);
    }
    random_workload_prefetch("arc", "redcap(segment_kb=32)", WriteMode::WriteAround, 3, 40 * BS, 24);
}

/// A backend that records each read request (offset, length).
struct Recording(MemBackend, Mutex<Vec<(u64, usize)>>);

impl Backend for Recording {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.1.lock().unwrap().push((offset, buf.len()));
        self.0.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> std::io::Result<()> {
        self.0.write_at(buf, offset, fua)
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn trim(&self, o: u64, l: u64, fua: bool) -> std::io::Result<()> {
        self.0.trim(o, l, fua)
    }
    fn write_zeroes(&self, o: u64, l: u64, t: bool, fua: bool) -> std::io::Result<()> {
        self.0.write_zeroes(o, l, t, fua)
    }
}

fn recording(size: usize, cap_blocks: u64, prefetch: &str) -> (CachedBackend<Arc<Recording>>, Arc<Recording>, Vec<u8>) {
    let data = fill(size, 99);
    let mem = MemBackend::new(size);
    mem.write_at(&data, 0, false).unwrap();
    let rec = Arc::new(Recording(mem, Mutex::new(Vec::new())));
    let mut cfg = CachedConfig::new(cap_blocks * BS);
    cfg.prefetch = PrefetcherSpec::parse(prefetch).unwrap();
    (CachedBackend::new(rec.clone(), cfg).unwrap(), rec, data)
}

#[test]
fn redcap_reads_the_whole_segment_in_one_request_and_then_hits() {
    let (c, rec, data) = recording(1 << 20, 64, "redcap(segment_kb=128)");
    // The first 4 misses are probes that read only their own blocks (the latency REDCAP's estimate needs).
    for b in [130, 160, 190, 220] {
        assert_eq!(read(&c, b * BS, 4096), data[(b * BS) as usize..((b + 1) * BS) as usize]);
    }
    assert_eq!(*rec.1.lock().unwrap(), [130, 160, 190, 220].map(|b| (b * BS, 4096)));
    rec.1.lock().unwrap().clear();
    // A 4 KiB read at block 37 misses: the aligned 128 KiB segment (blocks 32..64) is one backend read.
    assert_eq!(read(&c, 37 * BS, 4096), data[37 * 4096..38 * 4096]);
    assert_eq!(*rec.1.lock().unwrap(), vec![(32 * BS, 128 << 10)]);
    // The rest of the segment is served from RAM, as first hits on prefetched blocks.
    for b in (32..64).filter(|&b| b != 37) {
        assert_eq!(read_fast_first(&c, b * BS + 100, 200), data[(b * BS + 100) as usize..(b * BS + 300) as usize]);
    }
    assert_eq!(rec.1.lock().unwrap().len(), 1, "no further backend read");
    let s = c.snapshot();
    assert_eq!((s.prefetch_used, s.prefetch_blocks_read, s.redcap_active), (31, 31, Some(true)));
    // A write is not a miss that prefetches.
    c.write_at(&[7u8; 4096], 200 * BS, false).unwrap();
    assert_eq!(rec.1.lock().unwrap().len(), 1);
    c.validate().unwrap();
}

#[test]
fn read_ahead_runs_in_the_background_and_turns_a_scan_into_hits() {
    let (c, rec, data) = recording(4 << 20, 512, "ondemand(max_kb=128)");
    let mut fast = 0;
    for b in 0..256u64 {
        c.quiesce();
        let mut buf = vec![0u8; 4096];
        if read_now(&c, &mut buf, b * BS) {
            fast += 1;
        } else {
            c.read_at(&mut buf, b * BS).unwrap();
        }
        assert_eq!(buf, data[(b * BS) as usize..((b + 1) * BS) as usize], "block {b}");
    }
    let reads = rec.1.lock().unwrap().clone();
    assert!(fast >= 240, "a sequential scan is served from read-ahead: {fast} of 256 from RAM");
    assert!(reads.len() <= 20, "read-ahead windows, not 4 KiB requests: {reads:?}");
    assert!(reads.iter().any(|r| r.1 >= 64 << 10), "windows grow: {reads:?}");
    let s = c.snapshot();
    assert!(s.prefetch_used >= 240 && s.redcap_active.is_none(), "{s:?}");
    c.validate().unwrap();
}

/// REDCAP over a slow device: random 4 KiB reads make whole-segment fetches a loss, so it switches itself
/// off; strided reads (4 KiB of every 8 KiB) would win, which the shadow segment cache notices, and it comes
/// back on.
#[test]
fn redcap_switches_off_on_random_reads_and_back_on_for_strided_reads() {
    const SIZE: u64 = 64 << 20;
    let slow = DelayBackend::new(
        MemBackend::new(SIZE as usize),
        DelayConfig {
            model: Box::new(LinearServiceTime { latency: Duration::from_millis(2), bandwidth: 100_000_000 }),
            serialize: true,
        },
    );
    let mut cfg = CachedConfig::new(256 * BS);
    cfg.prefetch = PrefetcherSpec::parse("redcap(segment_kb=128,period=16)").unwrap();
    let c = CachedBackend::new(slow, cfg).unwrap();
    let mut r = Rng(77);
    let mut buf = vec![0u8; 4096];
    for _ in 0..64 {
        c.read_at(&mut buf, r.below(SIZE / BS) * BS).unwrap();
    }
    let s = c.snapshot();
    assert_eq!((s.redcap_active, s.redcap_switches), (Some(false), 1), "{s:?}");
    let before = s.prefetch_blocks_read;
    for i in 0..128u64 {
        let off = (1 << 20) + i * 2 * BS;
        if !read_now(&c, &mut buf, off) {
            c.read_at(&mut buf, off).unwrap();
        }
    }
    let s = c.snapshot();
    assert_eq!((s.redcap_active, s.redcap_switches), (Some(true), 2), "{s:?}");
    assert!(s.prefetch_blocks_read > before, "segments are fetched again once it is on: {s:?}");
    c.validate().unwrap();
}

/// Large reads copy their blocks after releasing the cache's lock. While they do, evictions reuse slots and
/// writes overwrite blocks: a reader must still see, for every block, that block's data (an old or a new
/// version, never another block's, never a mix of two versions).
#[test]
fn large_reads_copying_unlocked_never_see_another_blocks_data() {
    const BLOCKS: u64 = 256;
    // Block b, version v: every 8-byte word is (b << 32 | v).
    let block = |b: u64, v: u64| -> Vec<u8> { (0..BS / 8).flat_map(|_| ((b << 32) | v).to_le_bytes()).collect() };
    let mem = MemBackend::new((BLOCKS * BS) as usize);
    for b in 0..BLOCKS {
        mem.write_at(&block(b, 0), b * BS, false).unwrap();
    }
    let c = Arc::new(CachedBackend::new(mem, CachedConfig::new(64 * BS)).unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (c, stop) = (c.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut r = Rng(5);
            let mut v = 1;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let b = r.below(BLOCKS);
                c.write_at(&block(b, v), b * BS, false).unwrap();
                v += 1;
            }
        })
    };
    let readers: Vec<_> = (0..3)
        .map(|t| {
            let c = c.clone();
            std::thread::spawn(move || {
                let mut r = Rng(11 + t);
                let mut fast = 0;
                for _ in 0..400 {
                    let first = r.below(BLOCKS - 40);
                    let n = 17 + r.below(24);
                    let got = read_fast_first(&*c, first * BS, (n * BS) as usize);
                    fast += u64::from(read_now(&c, &mut vec![0; (n * BS) as usize], first * BS));
                    for (i, blk) in got.chunks(BS as usize).enumerate() {
                        let w0 = u64::from_le_bytes(blk[..8].try_into().unwrap());
                        assert_eq!(w0 >> 32, first + i as u64, "block {} holds another block's data", first + i as u64);
                        assert!(blk.chunks(8).all(|w| w == &blk[..8]), "block {} mixes versions", first + i as u64);
                    }
                }
                fast
            })
        })
        .collect();
    let fast: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    c.validate().unwrap();
    assert!(fast > 0, "some large reads took the unlocked-copy path");
}

#[test]
fn shared_reads_hand_out_the_cached_bytes_in_order() {
    let c = cached(64 * BS as usize, 32, |_| {});
    let data = fill(64 * BS as usize, 3);
    c.inner().write_at(&data, 0, false).unwrap();
    let mut parts = Vec::new();
    assert!(!shared(&c, 100, 10 * BS, &mut parts), "cold: declined");
    assert!(parts.is_empty());
    assert_eq!(read(&c, 0, 12 * BS as usize), data[..12 * BS as usize]);
    assert!(shared(&c, 100, 10 * BS, &mut parts));
    let joined: Vec<u8> = parts.iter().flat_map(|p| p.bytes().iter().copied()).collect();
    assert_eq!(joined, data[100..100 + 10 * BS as usize]);
    assert_eq!(parts.len(), 11, "one piece per block touched");
    // A later write does not change bytes already handed out (the slot is copied on write).
    c.write_at(&vec![0xFF; BS as usize], BS, false).unwrap();
    assert_eq!(parts[1].bytes(), &data[BS as usize..2 * BS as usize]);
    assert_eq!(read(&c, BS, BS as usize), vec![0xFF; BS as usize]);
    drop(parts);
    c.validate().unwrap();
}

#[test]
fn fast_path_serves_only_whole_hits_and_counts_like_read_at() {
    let c = cached(64 * BS as usize, 8, |_| {});
    let data = fill(64 * BS as usize, 7);
    c.inner().write_at(&data, 0, false).unwrap();
    let mut b = vec![0u8; 2 * BS as usize];
    // Cold: declined, and nothing changes (no request counted, nothing admitted).
    assert!(!read_now(&c, &mut b, 100));
    let s0 = c.snapshot();
    assert_eq!((s0.read_requests, s0.resident_blocks, s0.read_block_misses), (0, 0, 0));
    // Blocks 0 and 1 become resident through read_at; then an unaligned read inside them takes the fast path.
    assert_eq!(read(&c, 0, 2 * BS as usize), data[..2 * BS as usize]);
    assert!(read_now(&c, &mut b[..5000], 100));
    assert_eq!(b[..5000], data[100..5100]);
    // A read reaching block 2 (not resident) is declined and leaves the counters alone.
    let before = c.snapshot();
    assert!(!read_now(&c, &mut b, BS + 1));
    assert_eq!(c.snapshot(), before);
    let s = c.snapshot();
    assert_eq!((s.read_requests, s.read_request_hits), (2, 1));
    assert_eq!((s.read_block_hits, s.read_block_misses), (2, 2));
    // The fast path updates recency like a hit: after touching block 0, filling the cache evicts block 1 first.
    assert!(read_now(&c, &mut b[..10], 0));
    for blk in 2..9 {
        read(&c, blk * BS, 1);
    }
    assert!(read_now(&c, &mut b[..10], 0), "block 0 was used recently and must stay");
    assert!(!read_now(&c, &mut b[..10], BS), "block 1 was least recently used and must be gone");
    c.validate().unwrap();
}

/// `hint_reads` only looks: no counter moves and recency is untouched, so a hinted block that is then not read
/// is still the next victim.
#[test]
fn hint_reads_changes_nothing() {
    let c = cached(64 * BS as usize, 4, |_| {});
    let data = fill(64 * BS as usize, 9);
    c.inner().write_at(&data, 0, false).unwrap();
    for blk in 0..4 {
        read(&c, blk * BS, 1);
    }
    let before = c.snapshot();
    // Resident blocks (0 oldest), absent ones, a multi-block read, a large read (skipped), empty and tail reads.
    c.hint_reads(&[(0, 4096), (100, 5000), (10 * BS, 4096), (0, 128 << 10), (3 * BS, 0), (63 * BS, 4096)]);
    assert_eq!(c.snapshot(), before);
    read(&c, 4 * BS, 1);
    let mut b = vec![0u8; 10];
    assert!(!read_now(&c, &mut b, 0), "block 0 was hinted, not used: it stays least recently used");
    assert!(read_now(&c, &mut b, BS));
    assert_eq!(b, data[BS as usize..BS as usize + 10]);
    c.validate().unwrap();
}

#[test]
fn random_concurrent_workload_matches_model_lru() {
    random_workload("lru", WriteMode::WriteThrough, 4, 40 * BS + 123, 24);
}

#[test]
fn random_concurrent_workload_matches_model_other_policies() {
    for p in ["arc", "2q", "s3fifo", "lirs", "clock", "sieve"] {
        random_workload(p, WriteMode::WriteThrough, 3, 20 * BS + 7, 16);
    }
    random_workload("lru", WriteMode::WriteAround, 3, 20 * BS, 16);
}

/// A backend whose reads and writes return late: what a read returns may be overtaken by a write before the
/// reader gets it (the window a cache fill must survive), and two writes to one block may complete in
/// either order (the cache must end up with the backend's order).
struct LateReads(MemBackend);

impl Backend for LateReads {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.0.read_at(buf, offset)?;
        std::thread::sleep(Duration::from_micros(200));
        Ok(())
    }
    fn write_at(&self, buf: &[u8], offset: u64, fua: bool) -> std::io::Result<()> {
        self.0.write_at(buf, offset, fua)?;
        std::thread::sleep(Duration::from_micros(100));
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn trim(&self, _: u64, _: u64, _: bool) -> std::io::Result<()> {
        Ok(())
    }
    fn write_zeroes(&self, offset: u64, len: u64, may_trim: bool, fua: bool) -> std::io::Result<()> {
        self.0.write_zeroes(offset, len, may_trim, fua)
    }
}

/// Several threads hammer the SAME blocks with whole-block and partial writes and reads. At quiet points
/// (all threads at a barrier) the cache must agree with the backend everywhere.
#[test]
fn overlapping_writers_leave_cache_and_backend_agreeing() {
    const THREADS: usize = 4;
    let size = 8 * BS as usize;
    let c = Arc::new(CachedBackend::new(LateReads(MemBackend::new(size)), CachedConfig::new(6 * BS)).unwrap());
    let barrier = Arc::new(std::sync::Barrier::new(THREADS));
    let hs: Vec<_> = (0..THREADS as u64)
        .map(|t| {
            let (c, barrier) = (c.clone(), barrier.clone());
            std::thread::spawn(move || {
                let mut r = Rng(t + 77);
                for phase in 0..40 {
                    for _ in 0..100 {
                        let off = r.below(size as u64);
                        let len = 1 + r.below((size as u64 - off).min(2 * BS));
                        if r.below(2) == 0 {
                            c.write_at(&fill(len as usize, r.next()), off, false).unwrap();
                        } else {
                            read(&*c, off, len as usize);
                        }
                    }
                    barrier.wait();
                    if t == 0 {
                        c.validate().unwrap();
                        let backend = c.inner().0.snapshot();
                        for b in 0..8 {
                            let want = &backend[(b * BS) as usize..((b + 1) * BS) as usize];
                            assert!(read(&*c, b * BS, BS as usize) == want, "phase {phase} block {b}");
                        }
                    }
                    barrier.wait();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

#[test]
fn second_read_is_all_hits() {
    let c = cached(64 * BS as usize, 16, |_| {});
    c.inner().write_at(&fill(64 * BS as usize, 5), 0, false).unwrap();
    let a = read(&c, 1000, 5 * BS as usize);
    let s1 = c.snapshot();
    assert_eq!((s1.read_block_hits, s1.read_block_misses), (0, 6));
    assert_eq!(s1.backend_reads, 1, "one backend request per missed run");
    let b = read(&c, 1000, 5 * BS as usize);
    assert_eq!(a, b);
    let s2 = c.snapshot();
    assert_eq!((s2.read_block_hits, s2.read_block_misses), (6, 6));
    assert_eq!(s2.backend_reads, 1);
    assert_eq!(s2.read_request_hits, 1);
    assert_eq!(s2.slots_allocated, 6);
    assert!(s2.to_status_line().contains("read_block_hits 6"));
}

#[test]
fn capacity_is_never_exceeded_and_victims_free_slots() {
    let c = cached(100 * BS as usize, 8, |_| {});
    for i in 0..100 {
        read(&c, i * BS, BS as usize);
        c.validate().unwrap();
    }
    read(&c, 0, 100 * BS as usize); // a request larger than the cache
    c.validate().unwrap();
    let s = c.snapshot();
    assert_eq!(s.slots_allocated, 8);
    assert_eq!(s.resident_blocks, 8);
    assert!(s.evictions >= 92, "{s:?}");
}

#[test]
fn write_through_updates_cached_blocks_and_caches_whole_blocks() {
    let c = cached(16 * BS as usize, 8, |_| {});
    read(&c, 0, BS as usize); // block 0 cached
    c.write_at(b"hello", 10, false).unwrap(); // partial, resident: patched
    c.write_at(b"x", 5 * BS + 1, false).unwrap(); // partial, not resident: not allocated
    c.write_at(&fill(BS as usize, 3), 2 * BS, true).unwrap(); // whole block: cached
    let s = c.snapshot();
    assert_eq!(s.slots_allocated, 2, "{s:?}");
    assert_eq!(&read(&c, 10, 5), b"hello");
    assert_eq!(read(&c, 2 * BS, BS as usize), fill(BS as usize, 3));
    let s = c.snapshot();
    assert_eq!(s.read_block_misses, 1, "only the first read missed: {s:?}");
    assert_eq!(&c.inner().snapshot()[10..15], b"hello");
}

#[test]
fn write_around_invalidates() {
    let c = cached(16 * BS as usize, 8, |c| c.mode = WriteMode::WriteAround);
    read(&c, 0, 2 * BS as usize);
    assert_eq!(c.snapshot().resident_blocks, 2);
    c.write_at(b"abc", BS + 5, false).unwrap();
    let s = c.snapshot();
    assert_eq!((s.resident_blocks, s.invalidations), (1, 1));
    assert_eq!(&read(&c, BS + 5, 3), b"abc");
    assert_eq!(&c.inner().snapshot()[BS as usize + 5..BS as usize + 8], b"abc");
    c.validate().unwrap();
}

#[test]
fn trim_and_write_zeroes_invalidate() {
    let c = cached(16 * BS as usize, 8, |_| {});
    c.write_at(&fill(4 * BS as usize, 1), 0, false).unwrap();
    assert_eq!(c.snapshot().resident_blocks, 4);
    c.write_zeroes(100, 200, false, false).unwrap();
    assert!(read(&c, 100, 200).iter().all(|&x| x == 0));
    c.trim(BS, BS, false).unwrap();
    c.validate().unwrap();
    assert_eq!(c.snapshot().invalidations, 2);
}

#[test]
fn read_only_refuses_writes() {
    let c = cached(16 * BS as usize, 8, |c| c.mode = WriteMode::ReadOnly);
    assert!(c.is_read_only());
    assert_eq!(c.write_at(b"a", 0, false).unwrap_err().raw_os_error(), Some(1));
    assert!(c.trim(0, BS, false).is_err());
    assert!(c.write_zeroes(0, BS, true, false).is_err());
    assert!(c.inner().snapshot().iter().all(|&x| x == 0));
    read(&c, 0, 10);
}

#[test]
fn sequential_cutoff_bypasses_long_streams() {
    let c = cached(256 * BS as usize, 64, |c| c.sequential_cutoff = 16 * BS);
    for i in 0..32 {
        read(&c, i * BS, BS as usize);
    }
    let s = c.snapshot();
    // Requests 1..=15 (under 16 blocks of stream) are cached; from the 16th on they bypass.
    assert_eq!(s.bypassed, 17, "{s:?}");
    assert_eq!(s.slots_allocated, 15, "{s:?}");
    // Random reads elsewhere are cached as usual.
    read(&c, 200 * BS, 10);
    read(&c, 100 * BS, 10);
    assert_eq!(c.snapshot().slots_allocated, 17);
    // A long sequential write bypasses too and leaves no stale copy behind.
    for i in 0..20u64 {
        c.write_at(&[i as u8 + 1; BS as usize], i * BS, false).unwrap();
    }
    for i in 0..20u64 {
        assert_eq!(read(&c, i * BS + 7, 1), [i as u8 + 1]);
    }
    c.validate().unwrap();
}

#[test]
fn n_hit_admission() {
    let c = cached(64 * BS as usize, 16, |c| c.admission = "n-hit:2".parse().unwrap());
    read(&c, 0, BS as usize);
    let s = c.snapshot();
    assert_eq!((s.slots_allocated, s.admission_rejections, s.read_block_misses), (0, 1, 1));
    read(&c, 0, BS as usize); // second miss: admitted
    assert_eq!(c.snapshot().slots_allocated, 1);
    read(&c, 0, BS as usize);
    let s = c.snapshot();
    assert_eq!((s.read_block_hits, s.read_block_misses), (1, 2), "{s:?}");
    assert_eq!("always".parse::<Admission>().unwrap(), Admission::Always);
    assert!("n-hit:0".parse::<Admission>().is_err());
    assert!("n-hit:x".parse::<Admission>().unwrap_err().to_string().contains("n-hit:N"));
    // A scan seen once does not evict the working set.
    read(&c, 5 * BS, BS as usize);
    read(&c, 5 * BS, BS as usize);
    for b in 20..60 {
        read(&c, b * BS, BS as usize);
    }
    let before = c.snapshot().read_block_hits;
    read(&c, 0, BS as usize);
    read(&c, 5 * BS, BS as usize);
    assert_eq!(c.snapshot().read_block_hits, before + 2);
}

/// The live cache takes the admission filters: TinyLFU keeps a scan seen once from evicting blocks read often
/// (the data stays right), `bloom` admits a block's second miss, `prob:1` everything.
#[test]
fn tinylfu_bloom_and_prob_admission() {
    for policy in ["lru", "clock", "arc", "s3fifo"] {
        let c = cached(256 * BS as usize, 16, |c| {
            c.admission = "tinylfu".parse().unwrap();
            c.policy = PolicySpec::parse(policy).unwrap();
        });
        c.inner().write_at(&fill(256 * BS as usize, 3), 0, false).unwrap();
        for _ in 0..4 {
            for b in 0..16 {
                read(&c, b * BS, BS as usize);
            }
        }
        let s = c.snapshot();
        assert_eq!((s.slots_allocated, s.admission_rejections), (16, 0), "{policy}: room, then hits: {s:?}");
        let hits = s.read_block_hits;
        for b in 100..200 {
            assert_eq!(read(&c, b * BS, BS as usize), fill(256 * BS as usize, 3)[(b * BS) as usize..][..BS as usize]);
        }
        let s = c.snapshot();
        assert!(s.admission_rejections >= 90, "{policy}: the scan is kept out: {s:?}");
        for b in 0..16 {
            read(&c, b * BS, BS as usize);
        }
        assert!(c.snapshot().read_block_hits >= hits + 14, "{policy}: the hot blocks stayed");
        c.validate().unwrap();
    }
    let c = cached(64 * BS as usize, 16, |c| c.admission = "bloom".parse().unwrap());
    read(&c, 0, BS as usize);
    read(&c, 0, BS as usize);
    read(&c, 0, BS as usize);
    let s = c.snapshot();
    assert_eq!((s.admission_rejections, s.slots_allocated, s.read_block_hits), (1, 1, 1));
    let c = cached(64 * BS as usize, 16, |c| c.admission = "prob:1".parse().unwrap());
    read(&c, 0, BS as usize);
    assert_eq!(c.snapshot().slots_allocated, 1);
    assert!("prob:1.5".parse::<Admission>().unwrap_err().to_string().contains("0 < P <= 1"));
}

#[test]
fn cache_command_prefetches() {
    let c = cached(64 * BS as usize, 16, |_| {});
    c.inner().write_at(&fill(64 * BS as usize, 9), 0, false).unwrap();
    c.cache(0, 8 * BS).unwrap();
    let s = c.snapshot();
    assert_eq!((s.prefetch_issued, s.slots_allocated, s.backend_reads), (8, 8, 1));
    assert_eq!(read(&c, 0, 4 * BS as usize), fill(64 * BS as usize, 9)[..4 * BS as usize]);
    let s = c.snapshot();
    assert_eq!((s.prefetch_used, s.read_block_hits, s.backend_reads), (4, 4, 1));
    for b in 30..50 {
        read(&c, b * BS, 1);
    }
    assert_eq!(c.snapshot().prefetch_wasted, 4);
    c.validate().unwrap();
}

#[test]
fn unaligned_device_size_and_tail_block() {
    let size = 10 * BS as usize + 100;
    let c = cached(size, 4, |_| {});
    let data = fill(300, 4);
    c.write_at(&data[..100], 10 * BS, false).unwrap(); // the whole (short) last block
    assert_eq!(c.snapshot().slots_allocated, 1);
    assert_eq!(read(&c, 10 * BS, 100), data[..100]);
    assert_eq!(read(&c, 10 * BS - 50, 150)[50..], data[..100]);
    assert_eq!(c.snapshot().read_block_hits, 2);
}

#[test]
fn bad_configurations_are_refused_clearly() {
    let build = |f: &dyn Fn(&mut CachedConfig)| {
        let mut c = CachedConfig::new(64 * BS);
        f(&mut c);
        CachedBackend::new(MemBackend::new(1 << 20), c).err()
    };
    for p in ["lirs", "s3fifo", "2q"] {
        let policy = PolicySpec::parse(p).unwrap();
        let quirky = policy.config(Preset::Libcachesim).unwrap().get("libcachesim_quirks") == Some(&true.into());
        let e = build(&|c| {
            c.policy = policy.clone();
            c.preset = Preset::Libcachesim;
        });
        assert!(quirky, "{p} under the libcachesim preset sets libcachesim_quirks");
        let e = e.expect("quirks refused");
        assert!(matches!(e, CachedError::Quirks { .. }), "{e}");
        assert!(e.to_string().contains("libcachesim_quirks"), "{e}");
        // The same policy without quirks is accepted.
        let ok = build(&|c| c.policy = PolicySpec::parse(p).unwrap());
        assert!(ok.is_none(), "{p}: {ok:?}");
    }
    let e = build(&|c| c.policy = PolicySpec::parse("lirs(libcachesim_quirks=true)").unwrap()).unwrap();
    assert!(e.to_string().contains("libcachesim_quirks"), "{e}");
    assert!(build(&|c| c.policy = PolicySpec::parse("opt").unwrap()).unwrap().to_string().contains("future"));
    assert!(build(&|c| c.block_size = 1000).unwrap().to_string().contains("block size"));
    assert!(build(&|c| c.capacity_bytes = 10).is_some());
    assert!("write-back".parse::<WriteMode>().unwrap_err().to_string().contains("write-through"));
    assert_eq!("Write-Around".parse::<WriteMode>().unwrap(), WriteMode::WriteAround);
}

#[test]
fn many_readers_of_hot_blocks_stay_consistent() {
    let c = Arc::new(cached(32 * BS as usize, 8, |_| {}));
    let want = fill(32 * BS as usize, 11);
    c.inner().write_at(&want, 0, false).unwrap();
    let errors = Arc::new(Mutex::new(0));
    let hs: Vec<_> = (0..4u64)
        .map(|t| {
            let (c, want, errors) = (c.clone(), want.clone(), errors.clone());
            std::thread::spawn(move || {
                let mut r = Rng(t + 5);
                for _ in 0..5000 {
                    let off = r.below(12 * BS);
                    let len = 1 + r.below(2 * BS);
                    if read(&*c, off, len as usize) != want[off as usize..(off + len) as usize] {
                        *errors.lock().unwrap() += 1;
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
    assert_eq!(*errors.lock().unwrap(), 0);
    c.validate().unwrap();
}

/// The one read call: declining a miss does nothing (not counted, nothing cached); fetching it serves it and
/// caches it, counted once; the next read is served at once.
#[test]
fn one_read_call_declines_or_fetches_a_miss() {
    let c = cached(16 * BS as usize, 8, |_| {});
    c.write_at(&fill(BS as usize, 7), 0, false).unwrap();
    c.inner().write_at(&fill(BS as usize, 9), BS, false).unwrap();
    let mut b = vec![0; BS as usize];
    assert_eq!(c.read(BS, ReadInto::Copy(&mut b), OnMiss::Decline).unwrap(), ReadOutcome::NeedsIo);
    let s = c.snapshot();
    assert_eq!((s.read_requests, s.backend_reads, s.resident_blocks), (0, 0, 1), "{s:?}");
    assert_eq!(c.read(BS, ReadInto::Copy(&mut b), OnMiss::Fetch).unwrap(), ReadOutcome::Served);
    assert_eq!(b, fill(BS as usize, 9));
    let s = c.snapshot();
    assert_eq!((s.read_requests, s.backend_reads, s.read_block_misses, s.resident_blocks), (1, 1, 1, 2), "{s:?}");
    let mut parts = Vec::new();
    assert_eq!(c.read(BS, ReadInto::Share { len: BS, out: &mut parts }, OnMiss::Decline).unwrap(), ReadOutcome::Served);
    assert_eq!(parts.iter().flat_map(|p| p.bytes().to_vec()).collect::<Vec<u8>>(), fill(BS as usize, 9));
    c.validate().unwrap();
}
