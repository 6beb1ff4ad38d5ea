//! Clients and limits that try to exhaust a real `blockwell serve` process (the abuse suite beside
//! `crates/blockwell-server/tests/nbd_abuse.rs`' protocol cases): CACHE floods and unread replies (memory stays
//! under the cache plus a stated bound per connection, and a well-behaved client keeps being served), a thread
//! limit, a file-descriptor limit, and a churn of 10,000 connections.

mod util;

use std::time::{Duration, Instant};

use blockwell_testkit::nbd::{RawClient, CMD_CACHE, CMD_READ};
use util::serve::Served;

const MIB: u64 = 1 << 20;
/// What `blockwell serve` itself takes with no client (code, thread stacks touched, allocator), generously.
const BASE: u64 = 48 * MIB;
/// The memory a connection may hold outside the cache (`crates/blockwell-server/src/nbd/conn.rs`): twice its
/// 64 MiB in-flight budget plus 16 workers' kept 4 MiB reply buffers.
const PER_CONNECTION: u64 = 192 * MIB;

/// The server's peak resident memory so far (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    kb * 1024
}

fn serve(dir: &tempfile::TempDir, size: u64) -> Served {
    let disk = dir.path().join("disk.img");
    std::fs::File::create(&disk).unwrap().set_len(size).unwrap();
    Served::start(&["--backend", disk.to_str().unwrap(), "--cache", "64MiB"])
}

/// One 28-byte CACHE request once made the server read its whole length into memory before caching it: four
/// connections of CACHE requests drove a 64 MiB cache's server past 3 GB. Now a CACHE request prefetches one
/// window at a time and counts against the connection's in-flight budget.
#[test]
fn cache_requests_cannot_amplify_memory() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(&dir, 512 * MIB);
    let a = s.addr();
    let mut clients: Vec<RawClient> = (0..4).map(|_| RawClient::open(&a, "blockwell").unwrap()).collect();
    // Every request asks for 32 MiB the cache does not hold, so each one reads from the backend.
    for (c, cl) in clients.iter_mut().enumerate() {
        for k in 0..16u64 {
            cl.send(CMD_CACHE, k, ((k * 5 + c as u64 * 3) % 16) * 32 * MIB, 32 << 20, &[]).unwrap();
        }
    }
    for cl in &mut clients {
        for _ in 0..16 {
            assert_eq!(cl.reply().unwrap().0, 0, "CACHE failed");
        }
    }
    let peak = peak_rss(s.child.id());
    // 16 workers each holding one 1 MiB window per connection, far below the per-connection bound.
    let bound = 64 * MIB + BASE + 4 * 16 * 2 * MIB;
    eprintln!("peak RSS {} MiB (bound {} MiB)", peak / MIB, bound / MIB);
    assert!(peak < bound, "peak RSS {} MiB, bound {} MiB", peak / MIB, bound / MIB);
    let mut c = RawClient::open(&a, "blockwell").unwrap();
    assert_eq!(c.read(0, 4096).unwrap().unwrap(), vec![0; 4096]);
    let (ok, out) = s.stop();
    assert!(ok, "{out}");
    assert!(out.contains("; 64 requests from clients (NBD CACHE)"), "{out}");
}

/// Clients that send READs and never read the replies: each connection stops reading requests once its budget
/// is full, so the server's memory stays under the cache plus the per-connection bound, and another client is
/// served as before.
#[test]
fn unread_replies_cost_at_most_the_connection_budget() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(&dir, 512 * MIB);
    let a = s.addr();
    let mut flooders = Vec::new();
    for c in 0..4u64 {
        let mut cl = RawClient::open(&a, "blockwell").unwrap();
        // 2 GiB of replies: the client's socket buffer takes a few MiB, the rest waits in the server.
        for k in 0..64u64 {
            cl.send(CMD_READ, k, ((k + c * 4) % 16) * 32 * MIB, 32 << 20, &[]).unwrap();
        }
        flooders.push(cl);
    }
    let mut good = RawClient::open(&a, "blockwell").unwrap();
    let mut worst = Duration::ZERO;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        let t = Instant::now();
        assert_eq!(good.read(4096, 4096).unwrap().unwrap(), vec![0; 4096]);
        worst = worst.max(t.elapsed());
    }
    assert!(worst < Duration::from_secs(1), "a well-behaved client waited {worst:?} for a 4 KiB read");
    let peak = peak_rss(s.child.id());
    let bound = 64 * MIB + BASE + 4 * PER_CONNECTION;
    eprintln!("peak RSS {} MiB (bound {} MiB)", peak / MIB, bound / MIB);
    assert!(peak < bound, "peak RSS {} MiB, bound {} MiB", peak / MIB, bound / MIB);
    drop(flooders);
    assert_eq!(good.read(0, 4096).unwrap().unwrap(), vec![0; 4096]);
    let (ok, out) = s.stop();
    assert!(ok, "{out}");
}

/// A server whose user may start no more threads (RLIMIT_NPROC) once aborted: a connection thread or a
/// worker that cannot start now means a refused connection (logged) or fewer workers, never a dead server.
#[test]
fn a_thread_limit_refuses_connections_and_keeps_serving() {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    use std::process::{Command, Stdio};
    if !util::root("running the server as user nobody")
        || !util::serve::have("setpriv")
        || !util::serve::have("prlimit")
    {
        return;
    }
    // RLIMIT_NPROC does not bind root: the server runs as nobody, from a copy of the binary it can reach.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("blockwell");
    std::fs::copy(env!("CARGO_BIN_EXE_blockwell"), &bin).unwrap();
    let disk = dir.path().join("disk.img");
    std::fs::File::create(&disk).unwrap().set_len(64 * MIB).unwrap();
    std::fs::set_permissions(&disk, std::fs::Permissions::from_mode(0o666)).unwrap();
    // Runs the server as nobody with at most `nproc` threads of that user: its address and process.
    let start = |nproc: u64| {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--", "prlimit"])
            .arg(format!("--nproc={nproc}"))
            .arg("--")
            .arg(&bin)
            .args(["serve", "--backend", disk.to_str().unwrap(), "--cache", "16MiB", "--delay", "hdd"])
            .args(["--listen", "127.0.0.1:0"])
            .stderr(Stdio::piped());
        let s = Served::spawn(cmd);
        (s.addr(), s)
    };
    // The limit counts every thread of the user: those of an idle server and any other of nobody's, plus room
    // for one connection thread and three workers.
    let (_, idle) = start(10_000);
    let limit = threads_of_uid(65534) + 4;
    drop(idle);
    let (a, mut child) = start(limit);
    let pid = child.child.id();
    let mut c = RawClient::open(&a, "blockwell").unwrap();
    // 32 slow reads at once: every started worker is busy, so the connection keeps asking for more.
    for k in 0..32u64 {
        c.send(CMD_READ, k, k * 1024 * 1024, 4096, &[]).unwrap();
    }
    let mut data = [0u8; 4096];
    for _ in 0..32 {
        let (err, _) = c.reply().unwrap();
        assert_eq!(err, 0);
        std::io::Read::read_exact(&mut c.stream, &mut data).unwrap();
    }
    assert!(threads_of_uid(65534) <= limit, "{} threads past the limit {limit}", threads_of_uid(65534));
    // Connections past the thread limit are closed unserved.
    let refused = (0..8).filter(|_| RawClient::open(&a, "blockwell").is_err()).count();
    assert!(refused > 0, "every connection got a thread under a limit of {limit}");
    assert_eq!(c.read(4096, 4096).unwrap().unwrap(), vec![0; 4096]);
    drop(c);
    assert!(Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success());
    let mut err = String::new();
    child.child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    let status = child.child.wait().unwrap();
    assert!(status.success(), "{status:?}: {err}");
    assert!(err.contains("refuse") && err.contains("cannot start a thread"), "{err}");
}

/// Threads of every process whose real user is `uid` (what RLIMIT_NPROC counts).
fn threads_of_uid(uid: u32) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(s) = std::fs::read_to_string(e.path().join("status")) else { continue };
        let real = s.lines().find_map(|l| l.strip_prefix("Uid:")).and_then(|l| l.split_whitespace().next());
        if real == Some(uid.to_string().as_str()) {
            n += s.lines().find_map(|l| l.strip_prefix("Threads:")).map_or(0, |t| t.trim().parse().unwrap_or(0));
        }
    }
    n
}

/// 10,000 connections that handshake and leave, two at a time: the server ends where it began (threads, open
/// files) and still serves. Its stderr is a pipe nobody reads during the churn: the 30,000 log lines wait in the
/// log's queue instead of stalling connection threads (a full pipe once stopped the server after ~700 lines),
/// and all of them come out once the pipe is read.
#[test]
fn connection_churn_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    std::fs::File::create(&disk).unwrap().set_len(16 * MIB).unwrap();
    // Normal scheduling: under the batch policy a connection woken while both CPUs run clients waits for a
    // time slice, which this test, about counts and not latency, does not need to measure.
    let mut cmd = util::bin();
    cmd.args(["serve", "--backend", disk.to_str().unwrap(), "--cache", "1MiB", "--sched", "normal"])
        .args(["--listen", "127.0.0.1:0"])
        .stderr(std::process::Stdio::piped());
    let mut s = Served::spawn(cmd);
    let a = s.addr();
    let pid = s.child.id();
    let count = |what: &str| -> usize {
        match what {
            "fds" => std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count(),
            _ => std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().count(),
        }
    };
    let (fds0, threads0) = (count("fds"), count("threads"));
    std::thread::scope(|sc| {
        for _ in 0..2 {
            sc.spawn(|| {
                for i in 0..5_000u64 {
                    let mut c = RawClient::open(&a, "blockwell").unwrap();
                    if i % 100 == 0 {
                        assert_eq!(c.read(i * 512, 512).unwrap().unwrap(), vec![0; 512]);
                    }
                }
            });
        }
    });
    // Connection threads finish just after their clients leave.
    let t0 = Instant::now();
    while (count("fds"), count("threads")) != (fds0, threads0) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "fds {} (was {fds0}), threads {} (was {threads0})",
            count("fds"),
            count("threads")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(RawClient::open(&a, "blockwell").unwrap().read(0, 4096).unwrap().unwrap(), vec![0; 4096]);
    let mut stderr = s.child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut text).unwrap();
        text
    });
    assert!(std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success());
    assert!(s.child.wait().unwrap().success());
    let log = log.join().unwrap();
    let lines = |event: &str| log.lines().filter(|l| l.starts_with(&format!("blockwell: {event} "))).count();
    assert_eq!((lines("connect"), lines("open"), lines("disconnect")), (10_001, 10_001, 10_001));
    assert_eq!(lines("stop"), 1, "{}", &log[log.len().saturating_sub(2000)..]);
}

/// A server out of file descriptors (RLIMIT_NOFILE) backs off accepting instead of dying, and serves again once
/// clients leave.
#[test]
fn running_out_of_file_descriptors_is_survived() {
    use std::process::{Command, Stdio};
    if !util::serve::have("prlimit") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    std::fs::File::create(&disk).unwrap().set_len(MIB).unwrap();
    let mut cmd = Command::new("prlimit");
    cmd.args(["--nofile=32", "--"])
        .arg(env!("CARGO_BIN_EXE_blockwell"))
        .args(["serve", "--backend", disk.to_str().unwrap(), "--cache", "1MiB", "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped());
    let mut child = Served::spawn(cmd);
    let a = child.addr();
    let a = a.as_str();
    // More connections than descriptors: the ones past the limit wait in the listen queue, unanswered.
    let mut held = Vec::new();
    for _ in 0..40 {
        let s = std::net::TcpStream::connect(a).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        held.push(s);
    }
    let greeted = held
        .iter()
        .filter(|s| {
            let mut r: &std::net::TcpStream = s;
            std::io::Read::read_exact(&mut r, &mut [0u8; 18]).is_ok()
        })
        .count();
    assert!(greeted > 0 && greeted < 40, "{greeted} of 40 greeted under 32 descriptors");
    drop(held);
    // Once they leave, a client is served again.
    let t0 = Instant::now();
    loop {
        if let Ok(mut c) = RawClient::open(a, "blockwell") {
            assert_eq!(c.read(0, 4096).unwrap().unwrap(), vec![0; 4096]);
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no client served after the flood left");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(Command::new("kill").args(["-TERM", &child.child.id().to_string()]).status().unwrap().success());
    assert!(child.child.wait().unwrap().success());
    // The accept loop said why it backed off.
    let mut log = String::new();
    std::io::Read::read_to_string(&mut child.child.stderr.take().unwrap(), &mut log).unwrap();
    assert!(log.contains("blockwell: accept_error level=warn error=\"Too many open files"), "{log}");
}
