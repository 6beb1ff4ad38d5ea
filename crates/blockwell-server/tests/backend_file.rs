//! FileBackend on a temporary file, and DelayBackend timing (lower bounds only).

use blockwell_server::backend::{Backend, MemBackend};
use blockwell_server::delay::{DelayBackend, DelayConfig, LinearServiceTime};
use blockwell_server::file::{FileBackend, FileError, FileOptions};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn temp_file(size: u64) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    f.as_file().set_len(size).unwrap();
    f
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect()
}

#[test]
fn read_write_fua_flush() {
    let f = temp_file(4 * MIB);
    let b = FileBackend::open(f.path(), FileOptions::default()).unwrap();
    assert_eq!(b.size(), 4 * MIB);
    assert!(b.can_multi_conn());
    let data = pattern(10_000, 7);
    b.write_at(&data, 12_345, false).unwrap();
    b.write_at(&data[..100], 3 * MIB + 1, true).unwrap();
    b.flush().unwrap();
    let mut got = vec![0; 10_000];
    b.read_at(&mut got, 12_345).unwrap();
    assert_eq!(got, data);
    let mut got = vec![0; 100];
    b.read_at(&mut got, 3 * MIB + 1).unwrap();
    assert_eq!(got, data[..100]);
    let on_disk = std::fs::read(f.path()).unwrap();
    assert_eq!(&on_disk[12_345..22_345], &data[..]);
}

#[test]
fn read_only_refuses_writes() {
    let f = temp_file(MIB);
    let b = FileBackend::open(f.path(), FileOptions { read_only: true, ..Default::default() }).unwrap();
    assert!(b.is_read_only());
    let e = b.write_at(&[1], 0, false).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(1)); // EPERM
    assert!(b.trim(0, 4096, false).is_err());
}

#[test]
fn trim_punches_a_hole_and_block_status_sees_it() {
    let f = temp_file(4 * MIB);
    let b = FileBackend::open(f.path(), FileOptions::default()).unwrap();
    b.write_at(&pattern(4 * MIB as usize, 3), 0, true).unwrap();
    let before = f.as_file().metadata().unwrap().blocks();
    assert_eq!(b.block_status(0, 4 * MIB).unwrap().unwrap(), vec![(4 * MIB, 0)]);
    b.trim(MIB, 2 * MIB, true).unwrap();
    let after = f.as_file().metadata().unwrap().blocks();
    assert!(after < before, "allocated 512 B blocks: {before} -> {after}");
    let mut got = vec![1; 2 * MIB as usize];
    b.read_at(&mut got, MIB).unwrap();
    assert!(got.iter().all(|&x| x == 0));
    let ext = b.block_status(0, 4 * MIB).unwrap().unwrap();
    assert_eq!(ext, vec![(MIB, 0), (2 * MIB, 3), (MIB, 0)]);
    // A range starting inside the hole.
    let ext = b.block_status(MIB + 4096, 8192).unwrap().unwrap();
    assert_eq!(ext, vec![(8192, 3)]);
}

#[test]
fn write_zeroes_with_and_without_trim() {
    let f = temp_file(2 * MIB);
    let b = FileBackend::open(f.path(), FileOptions::default()).unwrap();
    b.write_at(&pattern(2 * MIB as usize, 9), 0, false).unwrap();
    b.write_zeroes(100, 5000, false, false).unwrap();
    b.write_zeroes(MIB, MIB, true, true).unwrap();
    let d = std::fs::read(f.path()).unwrap();
    assert!(d[100..5100].iter().all(|&x| x == 0));
    assert_ne!(d[99], 0);
    assert_ne!(d[5100], 0);
    assert!(d[MIB as usize..].iter().all(|&x| x == 0));
    let ext = b.block_status(MIB, MIB).unwrap().unwrap();
    assert_eq!(ext, vec![(MIB, 3)]);
}

#[test]
fn o_direct_works_through_a_bounce_buffer_or_fails_clearly() {
    let f = temp_file(MIB);
    match FileBackend::open(f.path(), FileOptions { direct: true, ..Default::default() }) {
        Ok(b) => {
            assert!(b.is_direct());
            let data = pattern(9000, 5);
            b.write_at(&data, 4000, false).unwrap(); // unaligned: read-modify-write
            b.write_at(&data[..8192], 65536, true).unwrap(); // aligned
            let mut got = vec![0; 9000];
            b.read_at(&mut got, 4000).unwrap();
            assert_eq!(got, data);
            let mut got = vec![0; 3];
            b.read_at(&mut got, 3999).unwrap();
            assert_eq!(got, [0, data[0], data[1]]);
            let d = std::fs::read(f.path()).unwrap();
            assert_eq!(&d[4000..13000], &data[..]);
            assert_eq!(&d[65536..65536 + 8192], &data[..8192]);
            assert!(d[..4000].iter().all(|&x| x == 0));
            b.write_zeroes(4001, 10, false, false).unwrap();
            let mut got = vec![9; 12];
            b.read_at(&mut got, 4000).unwrap();
            assert_eq!(got[0], data[0]);
            assert!(got[1..11].iter().all(|&x| x == 0));
            assert_eq!(got[11], data[11]);
        }
        Err(e) => {
            assert!(matches!(e, FileError::DirectUnsupported { .. }), "{e}");
            assert!(e.to_string().contains("O_DIRECT"), "{e}");
        }
    }
    // An unaligned size is refused under O_DIRECT with a clear error.
    let g = temp_file(5000);
    if let Err(e) = FileBackend::open(g.path(), FileOptions { direct: true, ..Default::default() }) {
        assert!(e.to_string().contains("O_DIRECT"), "{e}");
    } else {
        panic!("unaligned size accepted under O_DIRECT");
    }
}

#[test]
fn missing_file_is_a_clear_error() {
    let e = FileBackend::open("/nonexistent/blockwell", FileOptions::default()).err().unwrap();
    assert!(e.to_string().contains("/nonexistent/blockwell"), "{e}");
}

#[test]
fn delay_is_at_least_n_times_latency() {
    let model = LinearServiceTime { latency: Duration::from_millis(5), bandwidth: 100_000_000 };
    let d = DelayBackend::new(MemBackend::new(1 << 20), DelayConfig { model: Box::new(model), serialize: true });
    let d = std::sync::Arc::new(d);
    let t = Instant::now();
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let d = d.clone();
            std::thread::spawn(move || {
                for j in 0..5u64 {
                    let mut buf = vec![0; 1000];
                    d.read_at(&mut buf, i * 10_000 + j).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // 20 requests through one head: at least 20 latencies, concurrency notwithstanding.
    assert!(t.elapsed() >= Duration::from_millis(100), "{:?}", t.elapsed());
    let s = d.stats();
    assert_eq!((s.reads, s.bytes_read), (20, 20_000));
    // Bandwidth term: 1 MB at 100 MB/s is 10 ms.
    let t = Instant::now();
    d.write_at(&vec![1; 1_000_000], 0, false).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(15));
    assert_eq!(d.stats().bytes_written, 1_000_000);
    assert!(LinearServiceTime::preset("HDD").is_some() && DelayConfig::preset("ssd").is_some());
    assert!(LinearServiceTime::preset("floppy").is_none());
}

#[test]
fn layers_stack_cache_over_delay_over_file() {
    use blockwell_server::cache::{CachedBackend, CachedConfig};
    let f = temp_file(MIB);
    let file = FileBackend::open(f.path(), FileOptions::default()).unwrap();
    let slow = DelayBackend::new(file, DelayConfig::preset("ssd").unwrap());
    let c = CachedBackend::new(slow, CachedConfig::new(64 * 4096)).unwrap();
    let data = pattern(20_000, 2);
    c.write_at(&data, 777, true).unwrap();
    c.flush().unwrap();
    assert_eq!(&std::fs::read(f.path()).unwrap()[777..20_777], &data[..]);
    let mut got = vec![0; 20_000];
    c.read_at(&mut got, 777).unwrap();
    assert_eq!(got, data);
    let reads_before = c.inner().stats().reads;
    c.read_at(&mut got, 777).unwrap();
    assert_eq!(c.inner().stats().reads, reads_before, "second read served from RAM");
    assert!(c.can_multi_conn());
    assert_eq!(c.block_status(0, MIB).unwrap().unwrap().iter().map(|e| e.0).sum::<u64>(), MIB);
}

/// A `blockwell-disk` model as the emulator's service time: the model's state carries across requests, so a
/// read right after the previous one (served from the on-disk buffer's read-ahead or the next sectors) costs
/// less than one across the disk; every delay is what the model said (counted in `delay_ns`).
#[test]
fn disk_model_service_times_follow_the_heads_position() {
    use blockwell_server::delay::{DiskServiceTime, IoKind, ServiceTime};
    let model = blockwell_disk::DiskSpec::model("wd1200bb").unwrap();
    let st = DiskServiceTime::new(model);
    let first = st.service_time(IoKind::Read, 0, 4096);
    std::thread::sleep(first + Duration::from_millis(20));
    let next = st.service_time(IoKind::Read, 4096, 4096);
    let far = st.service_time(IoKind::Read, 100_000_000_000, 4096);
    assert!(next < far, "sequential {next:?} vs far {far:?}");
    assert!(far > Duration::from_millis(5) && far < Duration::from_millis(40), "{far:?}");
    assert_eq!(st.service_time(IoKind::Flush, 0, 0), Duration::ZERO);
    // Through the DelayBackend: the delay counter is the sum of the model's times, each slept in full.
    let d = DelayBackend::new(MemBackend::new(1 << 20), DelayConfig::disk("cheetah9lp").unwrap());
    let t = Instant::now();
    for i in 0..5u64 {
        d.read_at(&mut [0; 4096], i * 200_000).unwrap();
    }
    let s = d.stats();
    assert_eq!(s.reads, 5);
    assert!(t.elapsed() >= Duration::from_nanos(s.delay_ns) && s.delay_ns > 0, "{:?} {s:?}", t.elapsed());
    assert!(DelayConfig::parse("hdd").is_ok() && DelayConfig::parse("barracuda").is_ok());
    let e = DelayConfig::parse("floppy").err().unwrap().to_string();
    assert!(e.contains("floppy") && e.contains("wd1200bb"), "{e}");
}

/// A device model on its own timeline: a one-channel SSD serves concurrent requests one after another (20 reads
/// of 1 ms from 4 threads take at least 20 ms), and each request's wait counts its queueing too; a disk model
/// with command queueing (hdd-004) answers every request of concurrent threads.
#[test]
fn disk_models_queue_concurrent_requests_on_their_own_timeline() {
    let run = |spec: &str| {
        let d = std::sync::Arc::new(DelayBackend::new(MemBackend::new(64 << 20), DelayConfig::disk(spec).unwrap()));
        let t = Instant::now();
        let threads: Vec<_> = (0..4u64)
            .map(|i| {
                let d = d.clone();
                std::thread::spawn(move || {
                    for j in 0..5u64 {
                        let mut buf = vec![0; 4096];
                        d.read_at(&mut buf, ((i * 5 + j) * 7919 % 16384) * 4096).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        (t.elapsed(), d.stats())
    };
    let (elapsed, s) = run("ssd(channels=1,read_us=1000,mbps=1000)");
    assert!(elapsed >= Duration::from_millis(20), "one channel: {elapsed:?}");
    assert_eq!(s.reads, 20);
    // Waits overlap: their sum exceeds the elapsed time (the queue is counted in each wait).
    assert!(Duration::from_nanos(s.delay_ns) > elapsed, "{s:?} {elapsed:?}");
    let (elapsed, s) = run("hdd-004");
    assert_eq!(s.reads, 20);
    assert!(elapsed >= Duration::from_millis(1), "{elapsed:?}");
}
