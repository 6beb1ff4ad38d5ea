//! Changing a running server's exports ([`ServerHandle::set_exports`]): added exports serve new clients at
//! once, kept ones keep their clients, a removed one disappears for new clients and goes on serving its open
//! connections until they end, and a bad set changes nothing.

use std::sync::Arc;
use std::time::Duration;

use blockwell_server::backend::MemBackend;
use blockwell_server::nbd::{Export, Server, ServerHandle};
use blockwell_testkit::nbd::{RawClient, CMD_WRITE};

fn mem(name: &str, mib: usize) -> Export {
    Export::new(name, Arc::new(MemBackend::new(mib << 20)))
}

fn start(exports: Vec<Export>) -> (ServerHandle, String) {
    let h = Server::bind_tcp("127.0.0.1:0", exports).unwrap().spawn().unwrap();
    let addr = h.local_addr().unwrap().to_string();
    (h, addr)
}

fn write(c: &mut RawClient, offset: u64, data: &[u8]) {
    c.send(CMD_WRITE, 7, offset, data.len() as u32, data).unwrap();
    assert_eq!(c.reply().unwrap(), (0, 7));
}

fn names(h: &ServerHandle) -> Vec<String> {
    h.exports().iter().map(|e| e.name.clone()).collect()
}

#[test]
fn added_kept_and_removed_exports() {
    let (h, addr) = start(vec![mem("a", 1), mem("b", 1)]);
    let mut on_a = RawClient::open(&addr, "a").unwrap();
    let mut on_b = RawClient::open(&addr, "b").unwrap();
    write(&mut on_b, 0, &[0xbb; 512]);

    // Remove a, keep b, add c.
    let now = h.exports();
    let b = now.iter().find(|e| e.name == "b").unwrap().clone();
    let retired = h.set_exports(vec![b, mem("c", 2)], None, true).unwrap();
    assert_eq!(names(&h), ["b", "c"]);
    assert_eq!(retired.len(), 1);
    assert_eq!(retired[0].export().name, "a");
    assert_eq!(retired[0].connections(), 1);

    // New clients: a is unknown, b is the same export (its data), c is new.
    assert!(RawClient::open(&addr, "a").is_err());
    assert_eq!(RawClient::open(&addr, "b").unwrap().read(0, 512).unwrap().unwrap(), vec![0xbb; 512]);
    assert_eq!(RawClient::open(&addr, "c").unwrap().size, 2 << 20);
    // Open connections go on: a's client on the removed export, b's on the kept one.
    write(&mut on_a, 4096, &[0xaa; 512]);
    assert_eq!(on_a.read(4096, 512).unwrap().unwrap(), vec![0xaa; 512]);
    assert_eq!(on_b.read(0, 512).unwrap().unwrap(), vec![0xbb; 512]);

    // The removed export is let go once its last client leaves, not before.
    let r = retired.into_iter().next().unwrap();
    let waiter = std::thread::spawn(move || r.wait().map(|e| e.name.clone()));
    std::thread::sleep(Duration::from_millis(200));
    assert!(!waiter.is_finished(), "a client is still on the removed export");
    drop(on_a);
    assert_eq!(waiter.join().unwrap().unwrap(), "a");
    drop(on_b);
    h.shutdown().unwrap();
}

#[test]
fn a_bad_export_set_changes_nothing() {
    let (h, addr) = start(vec![mem("a", 1)]);
    let a = h.exports();
    assert!(h.set_exports(vec![], None, true).is_err());
    assert!(h.set_exports(vec![a[0].clone(), mem("a", 1)], None, true).is_err(), "duplicate name");
    assert!(h.set_exports(vec![a[0].clone(), mem("b", 1)], Some("z"), true).is_err(), "unknown default");
    assert_eq!(names(&h), ["a"]);
    assert!(h.exports()[0].same(&a[0]));
    // With two exports the empty name selects the named default.
    assert!(h.set_exports(vec![a[0].clone(), mem("b", 3)], Some("b"), true).unwrap().is_empty());
    assert_eq!(RawClient::open(&addr, "").unwrap().size, 3 << 20);
    h.shutdown().unwrap();
}

/// A client that was negotiating when its export was removed (it holds the offer from before the change) is
/// disconnected at the end of its handshake instead of entering the removed export.
#[test]
fn a_client_negotiating_for_a_removed_export_is_disconnected() {
    use blockwell_server::nbd::proto::*;
    use std::io::{Read, Write};
    let (h, addr) = start(vec![mem("a", 1), mem("b", 1)]);
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut greeting = [0; 18];
    s.read_exact(&mut greeting).unwrap();
    // The greeting came from a connection thread that already holds the offer with "a".
    let b = h.exports().into_iter().find(|e| e.name == "b").unwrap();
    let retired = h.set_exports(vec![b], None, true).unwrap();
    s.write_all(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes()).unwrap();
    let mut m = IHAVEOPT.to_be_bytes().to_vec();
    m.extend_from_slice(&OPT_GO.to_be_bytes());
    m.extend_from_slice(&7u32.to_be_bytes());
    m.extend_from_slice(&1u32.to_be_bytes());
    m.extend_from_slice(b"a");
    m.extend_from_slice(&0u16.to_be_bytes());
    s.write_all(&m).unwrap();
    // Whatever the handshake answered, the connection then ends without serving a request.
    let mut rest = Vec::new();
    let t0 = std::time::Instant::now();
    // EOF or a reset: the server closed it (a read timeout would take 10 s).
    let _ = s.read_to_end(&mut rest);
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(retired[0].connections(), 0);
    retired.into_iter().next().unwrap().wait().unwrap();
    h.shutdown().unwrap();
}
