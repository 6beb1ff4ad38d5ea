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

/// Waits up to `secs` for `child` to exit; kills it (and fails) if it does not.
fn wait_exit(child: &mut std::process::Child, secs: u64, what: &str) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if t0.elapsed() > Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `blockwell serve` of `disk` on the Unix socket `sock`, its stderr in a pipe.
fn serve_unix(disk: &std::path::Path, sock: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_blockwell"));
    c.args(["serve", "--backend", disk.to_str().unwrap(), "--unix", sock.to_str().unwrap()]).stderr(Stdio::piped());
    c
}

fn nbd_size(uri: &str) -> String {
    let o = Command::new("nbdinfo").args(["--size", uri]).output().unwrap();
    assert!(o.status.success(), "nbdinfo {uri}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A server killed with SIGKILL leaves its `--unix` socket file behind, and the restart on the same path
/// replaces it. A socket a live server listens on, and a file that is not a socket, are refused and kept.
#[test]
fn a_unix_socket_left_by_kill_9_is_replaced_and_a_live_one_refused() {
    if !have("nbdinfo") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    std::fs::File::create(&disk).unwrap().set_len(1 << 20).unwrap();
    let sock = dir.path().join("nbd.sock");
    let mut first = util::serve::Served::spawn(serve_unix(&disk, &sock));
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    drop(first);
    assert!(sock.exists(), "SIGKILL leaves the socket file");
    // The restart replaces the dead socket and serves.
    let second = util::serve::Served::spawn(serve_unix(&disk, &sock));
    assert_eq!(nbd_size(&second.uri), "1048576");
    // A second server on the live socket is refused, naming it; the first serves on.
    let other = dir.path().join("other.img");
    std::fs::File::create(&other).unwrap().set_len(2 << 20).unwrap();
    let mut third = serve_unix(&other, &sock).stdout(Stdio::null()).spawn().unwrap();
    let status = wait_exit(&mut third, 20, "a server on a live socket");
    let mut err = String::new();
    std::io::Read::read_to_string(&mut third.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    let want = format!("blockwell: error: --unix {}: a server is listening on this socket", sock.display());
    assert!(err.starts_with(&want), "{err}");
    assert_eq!(nbd_size(&second.uri), "1048576", "the live server still serves");
    let (ok, _) = second.stop();
    assert!(ok);
    assert!(!sock.exists(), "a clean stop removes the socket");
    // A regular file at the path is never replaced.
    std::fs::write(&sock, b"not a socket").unwrap();
    let o = serve_unix(&disk, &sock).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("exists and is not a socket: refusing to replace it"), "{err}");
    assert_eq!(std::fs::read(&sock).unwrap(), b"not a socket");
}

/// The server's stdout and stderr are pipes whose readers went away (closed before the server starts, or once
/// it is ready): SIGTERM still stops it normally (exit 0) and its write-back cache device is shut down cleanly,
/// its dirty blocks kept.
#[test]
fn closed_stdout_and_stderr_never_abort_the_server() {
    if !have("qemu-io") {
        return;
    }
    for closed_at_start in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let origin = d.join("origin.img");
        std::fs::File::create(&origin).unwrap().set_len(8 << 20).unwrap();
        let dev = d.join("cache.dev");
        let sock = d.join("nbd.sock");
        let pidfile = d.join("serve.pid");
        let mut child = Command::new(env!("CARGO_BIN_EXE_blockwell"))
            .args(["serve", "--backend", origin.to_str().unwrap(), "--cache", "1MiB"])
            .args(["--cache-dev", dev.to_str().unwrap(), "--cache-dev-size", "4MiB", "--mode", "write-back"])
            .args(["--cleaner", "none", "--unix", sock.to_str().unwrap(), "--pidfile", pidfile.to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if closed_at_start {
            drop(child.stdout.take());
            drop(child.stderr.take());
        } else {
            util::serve::wait_ready(&mut child);
        }
        let t0 = Instant::now();
        while !pidfile.exists() {
            if let Some(s) = child.try_wait().unwrap() {
                panic!("closed at start {closed_at_start}: serve exited before it was ready: {s:?}");
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "not ready after 20 s");
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(child.stdout.take());
        drop(child.stderr.take());
        let uri = format!("nbd+unix:///blockwell?socket={}", sock.display());
        let out = Command::new("qemu-io").args(["-f", "raw", &uri, "-c", "write -P 7 0 64k", "-c", "flush"]).output();
        assert!(out.unwrap().status.success());
        assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
        let status = wait_exit(&mut child, 30, "serve after SIGTERM");
        assert_eq!(status.code(), Some(0), "closed at start {closed_at_start}: {status:?}");
        let st = util::ok(&["cache", "status", dev.to_str().unwrap()]);
        assert!(st.contains("shut down cleanly") && st.contains(" 16 dirty"), "{st}");
    }
}
