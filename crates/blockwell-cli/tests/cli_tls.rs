//! NBD over TLS with real clients (nbdinfo, nbdcopy, qemu-io and qemu-img with `tls-creds-x509`), client
//! certificates as the allow-list, export listing and the default export, and the rule that a TCP address
//! beyond loopback needs TLS or an explicit flag.

mod util;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use util::fails;
use util::fs::sh_ok;
use util::serve::{have, Served};

/// A CA, a server certificate for localhost signed by it, a client certificate signed by it, and a client
/// certificate of another CA: the directories a server and its clients are given.
struct Certs {
    _dir: tempfile::TempDir,
    /// server-cert.pem, server-key.pem, ca-cert.pem.
    server: PathBuf,
    /// ca-cert.pem only (a client that checks the server).
    client_anon: PathBuf,
    /// ca-cert.pem, client-cert.pem, client-key.pem.
    client: PathBuf,
    /// ca-cert.pem and a client certificate of another CA.
    client_rogue: PathBuf,
}

fn certs() -> Option<Certs> {
    if !have("openssl") || !have("nbdinfo") || !have("nbdcopy") || !have("qemu-io") {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = r#"set -e
        cd "$1"
        mk() { openssl req -newkey rsa:2048 -nodes -keyout "$1-key.pem" -out "$1.csr" -subj "/CN=$2" 2>/dev/null; }
        sign() { openssl x509 -req -in "$1.csr" -CA "$2-cert.pem" -CAkey "$2-key.pem" -CAcreateserial -out "$1-cert.pem" -days 2 -extfile "$3" 2>/dev/null; }
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca-cert.pem -days 2 -subj "/CN=blockwell test CA" 2>/dev/null
        openssl req -x509 -newkey rsa:2048 -nodes -keyout rogue-key.pem -out rogue-cert.pem -days 2 -subj "/CN=rogue CA" 2>/dev/null
        printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > server.ext
        printf 'extendedKeyUsage=clientAuth\n' > client.ext
        mk server localhost && sign server ca server.ext
        mk client client && sign client ca client.ext
        mk intruder intruder && sign intruder rogue client.ext
        mkdir server client-anon client client-rogue
        cp server-cert.pem server-key.pem ca-cert.pem server/
        cp ca-cert.pem client-anon/
        cp ca-cert.pem client-cert.pem client-key.pem client/
        cp ca-cert.pem client-rogue/
        cp intruder-cert.pem client-rogue/client-cert.pem
        cp intruder-key.pem client-rogue/client-key.pem
    "#;
    sh_ok("sh", &["-c", script, "sh", d.to_str().unwrap()]);
    Some(Certs {
        server: d.join("server"),
        client_anon: d.join("client-anon"),
        client: d.join("client"),
        client_rogue: d.join("client-rogue"),
        _dir: dir,
    })
}

/// `nbds://localhost:PORT/NAME?tls-certificates=DIR` for a served `nbds://127.0.0.1:PORT/NAME`.
fn tls_uri(s: &Served, certs: &Path) -> String {
    let u = s.uri.replace("127.0.0.1", "localhost");
    format!("{u}?tls-certificates={}", certs.display())
}

fn nbdinfo(args: &[&str]) -> (bool, String) {
    let o = Command::new("nbdinfo").args(args).output().unwrap();
    (o.status.success(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

fn port(s: &Served) -> String {
    s.addr().rsplit(':').next().unwrap().to_string()
}

/// A 4 MiB export served with `--tls MODE --tls-certificates` (the server's) and `extra`; the temporary directory
/// lives as long as the server is used.
fn serve_tls(c: &Certs, mode: &str, extra: &[&str]) -> (tempfile::TempDir, Served) {
    let dir = tempfile::tempdir().unwrap();
    let d = disk(dir.path(), "disk.img", 4);
    let mut args = vec!["--backend", &d, "--tls", mode, "--tls-certificates", c.server.to_str().unwrap()];
    args.extend_from_slice(extra);
    let s = Served::start(&args);
    (dir, s)
}

fn disk(dir: &Path, name: &str, mib: u64) -> String {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(mib << 20).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn tls_require_serves_real_clients_and_refuses_plain_text() {
    let Some(c) = certs() else { return };
    let dir = tempfile::tempdir().unwrap();
    let d = disk(dir.path(), "disk.img", 16);
    let s = Served::start(&["--backend", &d, "--tls", "require", "--tls-certificates", c.server.to_str().unwrap()]);
    assert!(s.uri.starts_with("nbds://127.0.0.1:"), "{}", s.banner);
    // qemu-io writes through qemu's own TLS client.
    let creds = format!("tls-creds-x509,id=tls0,dir={},endpoint=client", c.client_anon.display());
    let image = format!("driver=nbd,host=localhost,port={},export=blockwell,tls-creds=tls0", port(&s));
    let out = Command::new("qemu-io")
        .args(["--object", &creds, "--image-opts", &image, "-c", "write -P 0x5a 1M 2M", "-c", "flush"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !text.contains("error"), "{text}");
    let out = Command::new("qemu-img").args(["info", "--object", &creds, "--image-opts", &image]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("16 MiB"), "{out:?}");
    // nbdcopy reads it back through libnbd's.
    let back = dir.path().join("back.img");
    let ok = Command::new("nbdcopy").args([&tls_uri(&s, &c.client_anon), back.to_str().unwrap()]).status().unwrap();
    assert!(ok.success());
    let b = std::fs::read(&back).unwrap();
    assert!(b[1 << 20..3 << 20].iter().all(|&x| x == 0x5a) && b[..1 << 20].iter().all(|&x| x == 0));
    // In the clear the server answers nothing but "TLS required".
    let plain = s.uri.replace("nbds://", "nbd://");
    let (ok, text) = nbdinfo(&[&plain]);
    assert!(!ok, "{text}");
    let (ok, text) = nbdinfo(&[&tls_uri(&s, &c.client_anon)]);
    assert!(ok && text.contains("with TLS"), "{text}");
    let (ok, out) = s.stop();
    assert!(ok && out.contains("stopped"), "{out}");
}

#[test]
fn client_certificates_are_the_allow_list() {
    let Some(c) = certs() else { return };
    let (_dir, s) = serve_tls(&c, "require", &["--tls-verify-peer"]);
    let (ok, text) = nbdinfo(&["--size", &tls_uri(&s, &c.client)]);
    assert!(ok && text.trim() == "4194304", "{text}");
    for who in [&c.client_anon, &c.client_rogue] {
        let (ok, text) = nbdinfo(&["--size", &tls_uri(&s, who)]);
        assert!(!ok, "{} got in: {text}", who.display());
    }
    assert!(s.stop().0);
}

#[test]
fn tls_on_lets_the_client_choose() {
    let Some(c) = certs() else { return };
    let (_dir, s) = serve_tls(&c, "on", &[]);
    assert!(s.uri.starts_with("nbd://"), "{}", s.banner);
    let (ok, text) = nbdinfo(&[&s.uri]);
    assert!(ok && text.contains("without TLS"), "{text}");
    let tls = tls_uri(&s, &c.client_anon).replace("nbd://", "nbds://");
    let (ok, text) = nbdinfo(&[&tls]);
    assert!(ok && text.contains("with TLS"), "{text}");
    assert!(s.stop().0);
}

/// A client that starts TLS and then sends garbage, or nothing, loses its connection; the server serves on.
#[test]
fn a_broken_tls_handshake_ends_only_its_connection() {
    let Some(c) = certs() else { return };
    let (_dir, s) = serve_tls(&c, "require", &["--handshake-timeout", "1"]);
    let addr = s.addr();
    let starttls = |junk: &[u8]| {
        let mut t = std::net::TcpStream::connect(&addr).unwrap();
        t.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        let mut g = [0; 18];
        t.read_exact(&mut g).unwrap();
        let mut m = 3u32.to_be_bytes().to_vec();
        m.extend_from_slice(&0x4948_4156_454f_5054u64.to_be_bytes());
        m.extend_from_slice(&5u32.to_be_bytes());
        m.extend_from_slice(&0u32.to_be_bytes());
        t.write_all(&m).unwrap();
        let mut ack = [0; 20];
        t.read_exact(&mut ack).unwrap();
        assert_eq!(u32::from_be_bytes(ack[12..16].try_into().unwrap()), 1, "STARTTLS acknowledged");
        t.write_all(junk).unwrap();
        let mut rest = Vec::new();
        let _ = t.read_to_end(&mut rest);
        rest
    };
    // Garbage instead of a ClientHello: an alert at most, then the connection closes.
    let rest = starttls(&[0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert!(rest.len() < 64, "{rest:?}");
    // Nothing at all: closed at the handshake timeout.
    let t0 = std::time::Instant::now();
    starttls(&[]);
    assert!(t0.elapsed() < std::time::Duration::from_secs(5), "{:?}", t0.elapsed());
    let (ok, text) = nbdinfo(&["--size", &tls_uri(&s, &c.client_anon)]);
    assert!(ok, "{text}");
    let (ok, out) = s.stop();
    assert!(ok, "{out}");
}

#[test]
fn listing_the_default_export_and_remote_listen_are_explicit() {
    let dir = tempfile::tempdir().unwrap();
    let d = disk(dir.path(), "disk.img", 4);
    // Beyond loopback without TLS: refused unless asked for.
    let e = fails(&["serve", "--backend", &d, "--listen", "0.0.0.0:0"]);
    assert!(e.contains("--listen 0.0.0.0:0 is beyond this machine") && e.contains("--allow-insecure-listen"), "{e}");
    let e = fails(&["serve", "--backend", &d, "--tls", "require"]);
    assert!(e.contains("--tls require needs --tls-certificates"), "{e}");
    let mut cmd = util::bin();
    cmd.args(["serve", "--backend", &d, "--listen", "0.0.0.0:0", "--allow-insecure-listen"]);
    drop(Served::spawn(cmd));
    if !have("nbdinfo") {
        return;
    }
    // Two exports: the empty name selects none of them unless one is the default.
    disk(dir.path(), "b.img", 8);
    let cfg = dir.path().join("exports.toml");
    let body = "[[export]]\nname = \"a\"\nbackend = \"disk.img\"\n[[export]]\nname = \"b\"\nbackend = \"b.img\"\n";
    std::fs::write(&cfg, body).unwrap();
    let c = cfg.to_str().unwrap();
    let s = Served::start(&["--config", c]);
    let root = format!("nbd://127.0.0.1:{}", port(&s));
    let (ok, text) = nbdinfo(&["--size", &root]);
    assert!(!ok && text.contains("no export named ''"), "{text}");
    let (ok, text) = nbdinfo(&["--list", &root]);
    assert!(ok && text.contains("export=\"a\"") && text.contains("export=\"b\""), "{text}");
    assert!(s.stop().0);
    let s = Served::start(&["--config", c, "--default-export", "b", "--no-list"]);
    let root = format!("nbd://127.0.0.1:{}", port(&s));
    let (ok, text) = nbdinfo(&["--size", &root]);
    assert!(ok && text.trim() == "8388608", "{text}");
    let (ok, text) = nbdinfo(&["--list", &root]);
    assert!(!text.contains("export=\"a\""), "{ok} {text}");
    assert!(s.stop().0);
    let e = fails(&["serve", "--config", c, "--default-export", "c"]);
    assert!(e.contains("--default-export \"c\": no export has that name"), "{e}");
}

/// SIGHUP reads the certificate directory again: after a rotation to another CA, new clients need the new CA.
#[test]
fn sighup_rotates_the_certificates() {
    let (Some(old), Some(new)) = (certs(), certs()) else { return };
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("tls");
    std::fs::create_dir(&live).unwrap();
    let install = |from: &Certs| {
        for f in ["server-cert.pem", "server-key.pem", "ca-cert.pem"] {
            std::fs::copy(from.server.join(f), live.join(f)).unwrap();
        }
    };
    install(&old);
    let d = disk(dir.path(), "disk.img", 4);
    let s = Served::start(&["--backend", &d, "--tls", "require", "--tls-certificates", live.to_str().unwrap()]);
    assert!(nbdinfo(&["--size", &tls_uri(&s, &old.client_anon)]).0);
    install(&new);
    assert!(Command::new("kill").args(["-HUP", &s.child.id().to_string()]).status().unwrap().success());
    let t0 = std::time::Instant::now();
    while !nbdinfo(&["--size", &tls_uri(&s, &new.client_anon)]).0 {
        assert!(t0.elapsed() < std::time::Duration::from_secs(10), "the new certificates were not taken");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let (ok, text) = nbdinfo(&["--size", &tls_uri(&s, &old.client_anon)]);
    assert!(!ok, "a client of the old CA still trusts the server: {text}");
    let (ok, out) = s.stop();
    assert!(ok, "{out}");
}
