//! Idle connections cost no CPU: no thread of the server wakes up while every client is idle. (Its own test
//! binary, so that no other test's threads are counted.)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use blockwell_server::backend::MemBackend;
use blockwell_server::nbd::proto::*;
use blockwell_server::nbd::{Export, Server};

/// Voluntary plus involuntary context switches of every thread of this process.
fn switches() -> u64 {
    let mut total = 0;
    for t in std::fs::read_dir("/proc/self/task").unwrap() {
        let status = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap_or_default();
        for l in status.lines() {
            if l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:") {
                total += l.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap();
            }
        }
    }
    total
}

#[test]
fn two_hundred_idle_connections_and_the_listener_never_wake_up() {
    let b = Arc::new(MemBackend::new(1 << 20));
    let h = Server::bind_tcp("127.0.0.1:0", vec![Export::new("disk", b)]).unwrap().spawn().unwrap();
    let port = h.local_addr().unwrap().port();
    let mut clients = Vec::new();
    for _ in 0..200 {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        (&s).read_exact(&mut [0; 18]).unwrap();
        (&s).write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes()).unwrap();
        let mut d = 4u32.to_be_bytes().to_vec();
        d.extend_from_slice(b"disk");
        d.extend_from_slice(&0u16.to_be_bytes());
        let mut v = IHAVEOPT.to_be_bytes().to_vec();
        v.extend_from_slice(&OPT_GO.to_be_bytes());
        v.extend_from_slice(&(d.len() as u32).to_be_bytes());
        v.extend_from_slice(&d);
        (&s).write_all(&v).unwrap();
        // One request in transmission, then idle.
        let r = encode_request(&Request { flags: 0, typ: CMD_FLUSH, cookie: 7, offset: 0, len: 0 });
        (&s).write_all(&r).unwrap();
        clients.push(s);
    }
    // Read every GO reply and the FLUSH reply (the end of each stream is the 16-byte simple reply).
    for s in &clients {
        let mut got = Vec::new();
        let mut b = [0u8; 4096];
        while got.len() < 16 || got[got.len() - 16..got.len() - 12] != SIMPLE_REPLY_MAGIC.to_be_bytes() {
            let n = (&*s).read(&mut b).unwrap();
            assert!(n > 0, "the server closed a connection");
            got.extend_from_slice(&b[..n]);
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    let before = switches();
    std::thread::sleep(Duration::from_secs(2));
    let woke = switches() - before;
    // This test's own thread sleeping accounts for one or two; a poll every 50 ms per connection would be
    // 200 × 40 = 8,000.
    assert!(woke < 40, "{woke} context switches in 2 s with 200 idle connections");
    drop(clients);
    h.shutdown().unwrap();
}
