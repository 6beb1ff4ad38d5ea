//! Running as a service: socket activation (systemd's `LISTEN_FDS`, through `systemd-socket-activate`),
//! `sd_notify` READY and STOPPING, and `--pidfile`.

mod util;

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use util::serve::have;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn socket_activation_notify_and_pidfile() {
    if !have("systemd-socket-activate") || !have("nbdinfo") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    std::fs::File::create(&disk).unwrap().set_len(4 << 20).unwrap();
    let notify_path = dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let pidfile = dir.path().join("blockwell.pid");
    let port = free_port();
    // systemd-socket-activate listens, and starts the server with the socket at the first connection.
    let mut activator = Command::new("systemd-socket-activate")
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--setenv=NOTIFY_SOCKET={}", notify_path.display()))
        .arg(env!("CARGO_BIN_EXE_blockwell"))
        .args(["serve", "--backend", disk.to_str().unwrap(), "--pidfile", pidfile.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let uri = format!("nbd://127.0.0.1:{port}/blockwell");
    let t0 = Instant::now();
    let size = loop {
        let o = Command::new("nbdinfo").args(["--size", &uri]).output().unwrap();
        if o.status.success() {
            break String::from_utf8_lossy(&o.stdout).trim().to_string();
        }
        assert!(t0.elapsed() < Duration::from_secs(20), "{}", String::from_utf8_lossy(&o.stderr));
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(size, "4194304");
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"READY=1\n");
    // The activator execs the server: the pidfile names the process serving the socket.
    let pid: u32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    assert_eq!(pid, activator.id());
    assert!(Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap().success());
    let n = notify.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"STOPPING=1\n");
    let status = activator.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut activator.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{status:?}: {err}");
    assert!(err.contains("listen=127.0.0.1:"), "{err}");
    assert!(!pidfile.exists(), "the pidfile is removed on a clean stop");
}

#[test]
fn an_activated_socket_beyond_loopback_follows_the_listen_rule() {
    if !have("systemd-socket-activate") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    std::fs::File::create(&disk).unwrap().set_len(1 << 20).unwrap();
    let port = free_port();
    let mut activator = Command::new("systemd-socket-activate")
        .arg(format!("--listen=0.0.0.0:{port}"))
        .arg(env!("CARGO_BIN_EXE_blockwell"))
        .args(["serve", "--backend", disk.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first connection starts the server, which refuses the socket and exits.
    let t0 = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = activator.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut activator.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("the activated socket listens on 0.0.0.0:") && err.contains("--allow-insecure-listen"),
        "{err}"
    );
}

/// The units in contrib/systemd pass `systemd-analyze verify` (with the binary built here as ExecStart).
#[test]
fn the_systemd_units_verify() {
    if !have("systemd-analyze") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let contrib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../contrib/systemd");
    for unit in ["blockwell@.service", "blockwell@.socket"] {
        let text = std::fs::read_to_string(contrib.join(unit)).unwrap();
        let text = text.replace("/usr/local/bin/blockwell", env!("CARGO_BIN_EXE_blockwell"));
        std::fs::write(dir.path().join(unit.replace('@', "@test")), text).unwrap();
    }
    let o = Command::new("systemd-analyze")
        .current_dir(dir.path())
        .args(["verify", "--man=no", "blockwell@test.socket", "blockwell@test.service"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && text.trim().is_empty(), "{text}");
}
