//! Protocol abuse and edge cases over a raw socket, plus Unix sockets, structured replies and
//! `base:allocation` through real clients.

mod nbd_common;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use blockwell_server::backend::{Backend, MemBackend};
use blockwell_server::nbd::proto::*;
use blockwell_server::nbd::{Export, Server};
use blockwell_testkit::Rng;
use nbd_common::{run, tool, Fixture};

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut g = [0; 18];
    (&s).read_exact(&mut g).unwrap();
    assert_eq!(g, greeting());
    s
}

fn send_opt(mut s: &TcpStream, opt: u32, data: &[u8]) {
    let mut v = IHAVEOPT.to_be_bytes().to_vec();
    v.extend_from_slice(&opt.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    s.write_all(&v).unwrap();
}

/// Reads one option reply: (option, type, data).
fn read_opt_reply(mut s: &TcpStream) -> (u32, u32, Vec<u8>) {
    let mut h = [0; 20];
    s.read_exact(&mut h).unwrap();
    assert_eq!(u64::from_be_bytes(h[..8].try_into().unwrap()), OPT_REPLY_MAGIC);
    let len = u32::from_be_bytes(h[16..].try_into().unwrap()) as usize;
    let mut d = vec![0; len];
    s.read_exact(&mut d).unwrap();
    (u32::from_be_bytes(h[8..12].try_into().unwrap()), u32::from_be_bytes(h[12..16].try_into().unwrap()), d)
}

/// GO on `name`; returns the export size.
fn go(s: &TcpStream, name: &str) -> u64 {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&0u16.to_be_bytes());
    send_opt(s, OPT_GO, &d);
    let mut size = None;
    loop {
        let (opt, typ, d) = read_opt_reply(s);
        assert_eq!(opt, OPT_GO);
        match typ {
            REP_INFO if d[..2] == [0, 0] => size = Some(u64::from_be_bytes(d[2..10].try_into().unwrap())),
            REP_INFO => {}
            REP_ACK => return size.unwrap(),
            t => panic!("GO reply type {t:#x}"),
        }
    }
}

/// Handshake to transmission on `disk` with simple replies.
fn open(port: u16) -> TcpStream {
    let s = connect(port);
    (&s).write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes()).unwrap();
    go(&s, "disk");
    s
}

fn request(mut s: &TcpStream, typ: u16, cookie: u64, offset: u64, len: u32, payload: &[u8]) {
    let h = encode_request(&Request { flags: 0, typ, cookie, offset, len });
    s.write_all(&h).unwrap();
    s.write_all(payload).unwrap();
}

/// Reads a simple reply: (error, cookie).
fn simple_reply(mut s: &TcpStream) -> (u32, u64) {
    let mut h = [0; 16];
    s.read_exact(&mut h).unwrap();
    assert_eq!(u32::from_be_bytes(h[..4].try_into().unwrap()), SIMPLE_REPLY_MAGIC);
    (u32::from_be_bytes(h[4..8].try_into().unwrap()), u64::from_be_bytes(h[8..].try_into().unwrap()))
}

/// True when the server closed the connection (EOF or reset) within the timeout.
fn closed(mut s: &TcpStream) -> bool {
    let mut b = [0; 64];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

#[test]
fn garbage_client_flags_disconnects() {
    let f = Fixture::new(1 << 20);
    let s = connect(f.port);
    (&s).write_all(b"\xff\xff\xff\xffjunkjunkjunk").unwrap();
    assert!(closed(&s));
    open(f.port); // the server is still fine
}

#[test]
fn unknown_option_gets_err_unsup_then_go_succeeds() {
    let f = Fixture::new(1 << 20);
    let s = connect(f.port);
    (&s).write_all(&FLAG_C_FIXED_NEWSTYLE.to_be_bytes()).unwrap();
    send_opt(&s, 0xbeef, b"some data");
    assert_eq!(read_opt_reply(&s).1, REP_ERR_UNSUP);
    let mut d = 7u32.to_be_bytes().to_vec();
    d.extend_from_slice(b"missing\0\0");
    send_opt(&s, OPT_GO, &d);
    assert_eq!(read_opt_reply(&s).1, REP_ERR_UNKNOWN);
    assert_eq!(go(&s, "disk"), 1 << 20);
    request(&s, CMD_FLUSH, 5, 0, 0, &[]);
    assert_eq!(simple_reply(&s), (0, 5));
}

#[test]
fn read_past_end_is_einval_and_connection_stays_usable() {
    let f = Fixture::new(1 << 20);
    let s = open(f.port);
    request(&s, CMD_READ, 1, (1 << 20) - 10, 20, &[]);
    assert_eq!(simple_reply(&s), (EINVAL, 1));
    request(&s, CMD_WRITE, 2, (1 << 20) - 2, 4, &[1, 2, 3, 4]);
    assert_eq!(simple_reply(&s), (ENOSPC, 2));
    request(&s, CMD_READ, 3, u64::MAX - 1, 4, &[]);
    assert_eq!(simple_reply(&s), (EINVAL, 3));
    request(&s, 99, 4, 0, 0, &[]);
    assert_eq!(simple_reply(&s), (EINVAL, 4));
    request(&s, CMD_BLOCK_STATUS, 5, 0, 512, &[]);
    assert_eq!(simple_reply(&s), (EINVAL, 5), "block status without negotiation");
    request(&s, CMD_WRITE, 6, 100, 3, b"abc");
    assert_eq!(simple_reply(&s), (0, 6));
    request(&s, CMD_READ, 7, 99, 5, &[]);
    assert_eq!(simple_reply(&s), (0, 7));
    let mut d = [0; 5];
    (&s).read_exact(&mut d).unwrap();
    assert_eq!(&d, b"\0abc\0");
}

#[test]
fn oversize_write_is_refused_and_its_payload_consumed() {
    let f = Fixture::new(64 << 20);
    let s = open(f.port);
    let big = vec![0x77; (MAX_PAYLOAD + 1) as usize];
    request(&s, CMD_WRITE, 1, 0, MAX_PAYLOAD + 1, &big);
    assert_eq!(simple_reply(&s), (EINVAL, 1));
    request(&s, CMD_READ, 2, 0, 4, &[]);
    assert_eq!(simple_reply(&s), (0, 2));
    let mut d = [9; 4];
    (&s).read_exact(&mut d).unwrap();
    assert_eq!(d, [0; 4]);
}

#[test]
fn read_only_export_refuses_writes_with_eperm() {
    let f = Fixture::new(1 << 20);
    let s = connect(f.port);
    (&s).write_all(&FLAG_C_FIXED_NEWSTYLE.to_be_bytes()).unwrap();
    go(&s, "ro");
    request(&s, CMD_WRITE, 1, 0, 2, b"no");
    assert_eq!(simple_reply(&s), (EPERM, 1));
    request(&s, CMD_TRIM, 2, 0, 4096, &[]);
    assert_eq!(simple_reply(&s), (EPERM, 2));
}

#[test]
fn bad_request_magic_disconnects() {
    let f = Fixture::new(1 << 20);
    let s = open(f.port);
    let mut h = encode_request(&Request { flags: 0, typ: CMD_READ, cookie: 1, offset: 0, len: 8 });
    h[0] = 0;
    (&s).write_all(&h).unwrap();
    assert!(closed(&s));
    open(f.port);
}

#[test]
fn client_vanishing_mid_write_leaves_server_and_data_intact() {
    let mut f = Fixture::new(1 << 20);
    let s = open(f.port);
    request(&s, CMD_WRITE, 1, 0, 4096, &[0x55; 4096]);
    assert_eq!(simple_reply(&s), (0, 1));
    let h = encode_request(&Request { flags: 0, typ: CMD_WRITE, cookie: 2, offset: 8192, len: 8192 });
    (&s).write_all(&h).unwrap();
    (&s).write_all(&[0x66; 4096]).unwrap();
    drop(s);
    let s = open(f.port);
    request(&s, CMD_READ, 3, 0, 4096, &[]);
    assert_eq!(simple_reply(&s), (0, 3));
    let mut d = vec![0; 4096];
    (&s).read_exact(&mut d).unwrap();
    assert!(d.iter().all(|&b| b == 0x55));
    request(&s, CMD_DISC, 4, 0, 0, &[]);
    assert!(closed(&s));
    f.shutdown();
    let snap = f.mems[0].snapshot();
    assert!(snap[..4096].iter().all(|&b| b == 0x55));
    assert!(snap[4096..].iter().all(|&b| b == 0), "the half-sent write must not be applied");
}

#[test]
fn many_requests_in_flight_are_all_answered() {
    let f = Fixture::new(4 << 20);
    let s = open(f.port);
    let writer = s.try_clone().unwrap();
    // Pipeline 200 writes without reading any reply, then 200 reads.
    let t = std::thread::spawn(move || {
        for i in 0..200u64 {
            request(&writer, CMD_WRITE, i, i * 8192, 8192, &vec![i as u8; 8192]);
        }
    });
    let mut seen: Vec<u64> = (0..200).map(|_| simple_reply(&s)).map(|(e, c)| (assert_eq!(e, 0), c).1).collect();
    t.join().unwrap();
    seen.sort_unstable();
    assert_eq!(seen, (0..200).collect::<Vec<_>>());
    let snap = f.mems[0].snapshot();
    for i in 0..200usize {
        assert!(snap[i * 8192..(i + 1) * 8192].iter().all(|&b| b == i as u8), "block {i}");
    }
}

#[test]
fn shutdown_finishes_in_flight_and_flushes() {
    struct Counting(MemBackend, std::sync::atomic::AtomicUsize);
    impl Backend for Counting {
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn read_at(&self, b: &mut [u8], o: u64) -> io::Result<()> {
            self.0.read_at(b, o)
        }
        fn write_at(&self, b: &[u8], o: u64, fua: bool) -> io::Result<()> {
            std::thread::sleep(Duration::from_millis(50));
            self.0.write_at(b, o, fua)
        }
        fn flush(&self) -> io::Result<()> {
            self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
        fn trim(&self, o: u64, l: u64, fua: bool) -> io::Result<()> {
            self.0.trim(o, l, fua)
        }
        fn write_zeroes(&self, o: u64, l: u64, t: bool, fua: bool) -> io::Result<()> {
            self.0.write_zeroes(o, l, t, fua)
        }
    }
    let b = Arc::new(Counting(MemBackend::new(1 << 20), Default::default()));
    let h = Server::bind_tcp("127.0.0.1:0", vec![Export::new("disk", b.clone())]).unwrap().spawn().unwrap();
    let s = open(h.local_addr().unwrap().port());
    for i in 0..4 {
        request(&s, CMD_WRITE, i, i * 4096, 4096, &[7; 4096]);
    }
    std::thread::sleep(Duration::from_millis(20));
    h.shutdown().unwrap();
    // Every write that was read before the shutdown was applied and answered.
    let mut cookies: Vec<u64> = (0..4).map(|_| simple_reply(&s)).map(|(e, c)| (assert_eq!(e, 0), c).1).collect();
    cookies.sort_unstable();
    assert_eq!(cookies, [0, 1, 2, 3]);
    assert!(closed(&s));
    assert!(b.0.snapshot()[..4 * 4096].iter().all(|&x| x == 7));
    assert_eq!(b.1.load(std::sync::atomic::Ordering::SeqCst), 1, "flushed once at shutdown");
}

/// A MemBackend whose second half is a hole (for `base:allocation`).
struct Holey(MemBackend);

impl Backend for Holey {
    fn size(&self) -> u64 {
        self.0.size()
    }
    fn read_at(&self, b: &mut [u8], o: u64) -> io::Result<()> {
        self.0.read_at(b, o)
    }
    fn write_at(&self, b: &[u8], o: u64, fua: bool) -> io::Result<()> {
        self.0.write_at(b, o, fua)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, _: u64, _: u64, _: bool) -> io::Result<()> {
        Ok(())
    }
    fn write_zeroes(&self, o: u64, l: u64, t: bool, fua: bool) -> io::Result<()> {
        self.0.write_zeroes(o, l, t, fua)
    }
    fn block_status(&self, offset: u64, len: u64) -> Option<io::Result<Vec<(u64, u32)>>> {
        let half = self.size() / 2;
        let end = offset + len;
        let mut v = Vec::new();
        if offset < half {
            v.push((half.min(end) - offset, 0));
        }
        if end > half {
            v.push((end - offset.max(half), 3));
        }
        Some(Ok(v))
    }
}

#[test]
fn unix_socket_with_structured_replies_and_base_allocation() {
    let Some(nbdinfo) = tool("nbdinfo") else { return };
    let Some(qemu_io) = tool("qemu-io") else { return };
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("nbd.sock");
    let b = Arc::new(Holey(MemBackend::new(2 << 20)));
    let h = Server::bind_unix(&sock, vec![Export::new("holey", b.clone())]).unwrap().spawn().unwrap();
    let uri = format!("nbd+unix:///holey?socket={}", sock.display());
    let out = run(Command::new(&nbdinfo).args(["--map", &uri]));
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(&lines[0][..3], ["0", "1048576", "0"], "{text}");
    assert_eq!(&lines[1][..3], ["1048576", "1048576", "3"], "{text}");
    // Structured reads (libnbd/qemu negotiate structured replies) work over the Unix socket.
    let out = run(Command::new(&qemu_io).args(["-f", "raw", &uri]).args([
        "-c",
        "write -P 0x42 1000 5000",
        "-c",
        "read -P 0x42 1000 5000",
        "-c",
        "read -P 0 1M 4k",
    ]));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("failed"));
    h.shutdown().unwrap();
    assert!(!sock.exists(), "socket file removed at shutdown");
    assert!(b.0.snapshot()[1000..6000].iter().all(|&x| x == 0x42));
}

/// Hundreds of pipelined READs of mixed sizes over a small cache: hits answered inline by the reading thread
/// (batched replies), misses and large reads by workers, and refused reads, all interleaved. Every reply carries
/// its own request's data.
#[test]
fn pipelined_reads_mixing_inline_hits_workers_and_errors() {
    use blockwell_server::cache::{CachedBackend, CachedConfig};
    const SIZE: usize = 8 << 20;
    let mem = MemBackend::new(SIZE);
    let pattern: Vec<u8> = (0..SIZE).map(|i| (i as u64).wrapping_mul(0x9E37_79B9) as u8 ^ (i >> 12) as u8).collect();
    mem.write_at(&pattern, 0, false).unwrap();
    let cached = Arc::new(CachedBackend::new(mem, CachedConfig::new(1 << 20)).unwrap());
    let handle = Server::bind_tcp("127.0.0.1:0", vec![Export::new("disk", cached.clone())]).unwrap().spawn().unwrap();
    let s = open(handle.local_addr().unwrap().port());
    let mut reqs = Vec::new();
    let mut rng = Rng(12345);
    for i in 0..600u64 {
        let x = rng.next();
        // Mostly small reads in a hot 512 KiB region (hits after the first pass), some large, some past the end.
        let (off, len) = match i % 10 {
            0 => (x % (SIZE as u64 - (300 << 10)), 100_000 + (x % 200_000) as u32),
            1 if i % 20 == 1 => (SIZE as u64 - 100, 4096),
            _ => (x % (512 << 10), 1 + (x % 8192) as u32),
        };
        reqs.push((off, len));
    }
    let writer = s.try_clone().unwrap();
    let sent = reqs.clone();
    let t = std::thread::spawn(move || {
        for (i, &(off, len)) in sent.iter().enumerate() {
            request(&writer, CMD_READ, i as u64, off, len, &[]);
        }
    });
    let mut seen = vec![false; reqs.len()];
    for _ in 0..reqs.len() {
        let (err, cookie) = simple_reply(&s);
        let (off, len) = reqs[cookie as usize];
        assert!(!std::mem::replace(&mut seen[cookie as usize], true), "cookie {cookie} answered twice");
        if off + u64::from(len) > SIZE as u64 {
            assert_eq!(err, EINVAL, "read past the end");
            continue;
        }
        assert_eq!(err, 0, "read {cookie} at {off}+{len}");
        let mut d = vec![0; len as usize];
        (&s).read_exact(&mut d).unwrap();
        assert!(d == pattern[off as usize..off as usize + len as usize], "data of read {cookie} at {off}+{len}");
    }
    t.join().unwrap();
    assert!(seen.iter().all(|&x| x));
    handle.shutdown().unwrap();
    let st = cached.snapshot();
    assert!(st.read_request_hits > 50 && st.backend_reads > 50, "both paths were taken: {st:?}");
    cached.validate().unwrap();
}

/// A MemBackend that serves every read on the fast path and records what it is hinted.
struct Hinted {
    mem: MemBackend,
    hints: std::sync::Mutex<Vec<Vec<(u64, u32)>>>,
}

impl Backend for Hinted {
    fn size(&self) -> u64 {
        self.mem.size()
    }
    fn read_at(&self, b: &mut [u8], o: u64) -> io::Result<()> {
        self.mem.read_at(b, o)
    }
    fn write_at(&self, b: &[u8], o: u64, fua: bool) -> io::Result<()> {
        self.mem.write_at(b, o, fua)
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn trim(&self, _: u64, _: u64, _: bool) -> io::Result<()> {
        Ok(())
    }
    fn write_zeroes(&self, o: u64, l: u64, t: bool, fua: bool) -> io::Result<()> {
        self.mem.write_zeroes(o, l, t, fua)
    }
    fn read(
        &self,
        o: u64,
        into: blockwell_server::backend::ReadInto<'_>,
        _: blockwell_server::backend::OnMiss,
    ) -> std::io::Result<blockwell_server::backend::ReadOutcome> {
        self.mem.read(o, into, blockwell_server::backend::OnMiss::Fetch)
    }
    fn hint_reads(&self, reads: &[(u64, u32)]) {
        self.hints.lock().unwrap().push(reads.to_vec());
    }
}

/// Pipelined READs arriving together are hinted to the backend as one group, in order, up to the first request
/// that is not a valid small READ (here a read past the end, then a write); groups too small to pay are not.
#[test]
fn buffered_reads_are_hinted_up_to_the_first_other_request() {
    const SIZE: u64 = 1 << 20;
    let b = Arc::new(Hinted { mem: MemBackend::new(SIZE as usize), hints: Default::default() });
    let data: Vec<u8> = (0..SIZE).map(|i| (i * 7 % 251) as u8).collect();
    b.mem.write_at(&data, 0, false).unwrap();
    let h = Server::bind_tcp("127.0.0.1:0", vec![Export::new("disk", b.clone())]).unwrap().spawn().unwrap();
    let s = open(h.local_addr().unwrap().port());
    let read_at = |i: u64| (i * 40_000 % (SIZE - 8192), 1000 + i as u32 * 300);
    // All in one write, so that the server finds them in its buffer together: 12 reads, a read past the end,
    // 3 reads (too few to hint), a write, 9 reads. Cookies are indexes into `reqs`.
    let mut reqs: Vec<(u16, u64, u32)> = (0..12).map(|i| (CMD_READ, read_at(i).0, read_at(i).1)).collect();
    reqs.push((CMD_READ, SIZE - 10, 4096));
    reqs.extend((12..15).map(|i| (CMD_READ, read_at(i).0, read_at(i).1)));
    reqs.push((CMD_WRITE, 0, 512));
    reqs.extend((15..24).map(|i| (CMD_READ, read_at(i).0, read_at(i).1)));
    let mut wire = Vec::new();
    for (cookie, &(typ, offset, len)) in reqs.iter().enumerate() {
        wire.extend_from_slice(&encode_request(&Request { flags: 0, typ, cookie: cookie as u64, offset, len }));
        if typ == CMD_WRITE {
            wire.extend_from_slice(&vec![9; len as usize]);
        }
    }
    (&s).write_all(&wire).unwrap();
    for _ in 0..reqs.len() {
        let (err, cookie) = simple_reply(&s);
        let (typ, o, l) = reqs[cookie as usize];
        if o + u64::from(l) > SIZE {
            assert_eq!(err, EINVAL, "read past the end");
            continue;
        }
        assert_eq!(err, 0, "request {cookie}");
        if typ == CMD_READ {
            let mut d = vec![0; l as usize];
            (&s).read_exact(&mut d).unwrap();
            assert!(d == data[o as usize..(o + u64::from(l)) as usize], "data of read {cookie}");
        }
    }
    h.shutdown().unwrap();
    let hints = b.hints.lock().unwrap();
    let group = |r: std::ops::Range<usize>| reqs[r].iter().map(|&(_, o, l)| (o, l)).collect::<Vec<_>>();
    assert_eq!(*hints, [group(0..12), group(17..26)], "hinted groups");
}

/// Connection events: connect, open on an export, and a disconnect that counts requests and names an error
/// when the client broke the protocol.
#[test]
fn connection_events_are_reported() {
    use blockwell_server::nbd::{ConnEvent, ServerConfig};
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let config = ServerConfig::from(vec![Export::new("disk", Arc::new(MemBackend::new(1 << 20)))])
        .with_events(Arc::new(move |e: &ConnEvent| sink.lock().unwrap().push(e.clone())));
    let handle = Server::bind_tcp("127.0.0.1:0", config).unwrap().spawn().unwrap();
    let port = handle.local_addr().unwrap().port();
    // A clean session: two reads, then DISC.
    let s = open(port);
    for c in 0..2 {
        request(&s, CMD_READ, c, 0, 512, &[]);
        assert_eq!(simple_reply(&s).0, 0);
        let mut d = [0; 512];
        (&s).read_exact(&mut d).unwrap();
    }
    request(&s, CMD_DISC, 9, 0, 0, &[]);
    assert!(closed(&s));
    // A broken one: a request with a bad magic.
    let s2 = open(port);
    (&s2).write_all(&[0xAB; 28]).unwrap();
    assert!(closed(&s2));
    handle.shutdown().unwrap();
    let ev = seen.lock().unwrap().clone();
    let of = |id: u64| {
        ev.iter().filter(|e| matches!(e, ConnEvent::Connected { id: i, .. } | ConnEvent::Opened { id: i, .. } | ConnEvent::Closed { id: i, .. } if *i == id)).cloned().collect::<Vec<_>>()
    };
    let first = of(0);
    assert!(matches!(&first[0], ConnEvent::Connected { peer, .. } if peer.starts_with("127.0.0.1:")), "{first:?}");
    assert_eq!(first[1], ConnEvent::Opened { id: 0, export: "disk".into(), tls: false });
    assert_eq!(first[2], ConnEvent::Closed { id: 0, requests: 2, error: None });
    let second = of(1);
    assert_eq!(second.len(), 3, "{second:?}");
    assert!(
        matches!(&second[2], ConnEvent::Closed { id: 1, requests: 0, error: Some(e) } if e.contains("magic")),
        "{second:?}"
    );
}

#[test]
fn shutdown_does_not_wait_for_a_client_that_never_pauses() {
    // A client at queue depth 1 that sends its next request as soon as a reply arrives never lets a read
    // time out; the server must still stop reading and close the connection when told to stop.
    let b = Arc::new(MemBackend::new(1 << 20));
    let h = Server::bind_tcp("127.0.0.1:0", vec![Export::new("disk", b)]).unwrap().spawn().unwrap();
    let s = open(h.local_addr().unwrap().port());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let client = {
        let (s, stop) = (s.try_clone().unwrap(), stop.clone());
        std::thread::spawn(move || {
            let mut answered = 0u64;
            for cookie in 0.. {
                if stop.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let mut h = encode_request(&Request { flags: 0, typ: CMD_WRITE, cookie, offset: 0, len: 512 }).to_vec();
                h.extend_from_slice(&[1; 512]);
                if (&s).write_all(&h).is_err() {
                    break;
                }
                let mut r = [0; 16];
                if (&s).read_exact(&mut r).is_err() {
                    break;
                }
                answered += 1;
            }
            answered
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(h.shutdown().map_err(|e| e.to_string())));
    let r = rx.recv_timeout(Duration::from_secs(10));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let answered = client.join().unwrap();
    assert!(answered > 100, "the client kept the server busy: {answered} writes");
    assert!(matches!(r, Ok(Ok(()))), "shutdown with a busy client: {r:?}");
}

/// A TCP server on a fresh memory export with `config` applied.
fn server_with(
    config: impl FnOnce(blockwell_server::nbd::ServerConfig) -> blockwell_server::nbd::ServerConfig,
) -> blockwell_server::nbd::ServerHandle {
    let b = Arc::new(MemBackend::new(64 << 20));
    let cfg = config(blockwell_server::nbd::ServerConfig::from(vec![Export::new("disk", b)]));
    Server::bind_tcp("127.0.0.1:0", cfg).unwrap().spawn().unwrap()
}

#[test]
fn shutdown_ends_within_its_timeout_when_a_client_stops_reading_replies() {
    let h = server_with(|c| c.with_shutdown_timeout(Duration::from_millis(500)));
    let s = open(h.local_addr().unwrap().port());
    // 1 MiB READs, never read back: the socket buffers fill and the server's reply writes block.
    for i in 0..64 {
        request(&s, CMD_READ, i, 0, 1 << 20, &[]);
    }
    std::thread::sleep(Duration::from_millis(300));
    let t0 = std::time::Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(h.shutdown().map_err(|e| e.to_string())));
    let r = rx.recv_timeout(Duration::from_secs(20));
    assert!(matches!(r, Ok(Ok(()))), "shutdown with unread replies: {r:?}");
    assert!(t0.elapsed() < Duration::from_secs(5), "shutdown took {:?}", t0.elapsed());
}

#[test]
fn connections_beyond_the_limit_are_closed_at_once() {
    use blockwell_server::nbd::ConnEvent;
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let h = server_with(|c| {
        c.with_max_connections(2).with_events(Arc::new(move |e: &ConnEvent| sink.lock().unwrap().push(e.clone())))
    });
    let port = h.local_addr().unwrap().port();
    let (a, b) = (open(port), open(port));
    let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(closed(&c), "a third connection gets no greeting");
    // The first two still work; when one leaves, a new client is served.
    request(&a, CMD_READ, 1, 0, 512, &[]);
    assert_eq!(simple_reply(&a), (0, 1));
    (&a).read_exact(&mut [0; 512]).unwrap();
    drop(b);
    std::thread::sleep(Duration::from_millis(100));
    let d = open(port);
    request(&d, CMD_FLUSH, 2, 0, 0, &[]);
    assert_eq!(simple_reply(&d), (0, 2));
    drop((a, d));
    h.shutdown().unwrap();
    let refused: Vec<_> =
        seen.lock().unwrap().iter().filter(|e| matches!(e, ConnEvent::Refused { .. })).cloned().collect();
    assert!(
        matches!(&refused[..], [ConnEvent::Refused { peer, reason }] if peer.starts_with("127.0.0.1:") && reason.contains("--max-connections")),
        "{refused:?}"
    );
}

#[test]
fn a_client_that_never_finishes_the_handshake_is_disconnected() {
    let h = server_with(|c| c.with_handshake_timeout(Some(Duration::from_millis(300))));
    let s = connect(h.local_addr().unwrap().port());
    let t0 = std::time::Instant::now();
    assert!(closed(&s), "closed after the handshake timeout");
    assert!(t0.elapsed() >= Duration::from_millis(250), "not before it: {:?}", t0.elapsed());
    h.shutdown().unwrap();
}

#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout_and_a_busy_one_is_not() {
    let h = server_with(|c| c.with_idle_timeout(Some(Duration::from_millis(400))));
    let port = h.local_addr().unwrap().port();
    let idle = open(port);
    let busy = open(port);
    for i in 0..8 {
        std::thread::sleep(Duration::from_millis(100));
        request(&busy, CMD_FLUSH, i, 0, 0, &[]);
        assert_eq!(simple_reply(&busy), (0, i));
    }
    assert!(closed(&idle), "the idle connection is closed");
    request(&busy, CMD_FLUSH, 99, 0, 0, &[]);
    assert_eq!(simple_reply(&busy), (0, 99), "the busy one is not");
    h.shutdown().unwrap();
}
