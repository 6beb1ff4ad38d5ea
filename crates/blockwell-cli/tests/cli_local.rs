//! Local permissions: the NBD Unix socket's mode does not depend on the umask, the default control socket lives
//! in a directory only its user can write, and `blockwell status` refuses a socket another user owns.

mod util;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

use util::serve::Served;
use util::{fails, ok};

fn disk(dir: &Path) -> String {
    let p = dir.join("disk.img");
    std::fs::File::create(&p).unwrap().set_len(1 << 20).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
    p.to_str().unwrap().to_string()
}

/// Starts `blockwell serve ARGS` under umask 000 (through `sh`) and waits for `ready`.
fn serve_umask0(args: &[&str]) -> Served {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg("umask 000; exec \"$0\" serve \"$@\"").arg(env!("CARGO_BIN_EXE_blockwell")).args(args);
    cmd.stderr(Stdio::piped());
    Served::spawn(cmd)
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

#[test]
fn the_nbd_socket_mode_is_explicit_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let d = disk(dir.path());
    let sock = dir.path().join("nbd.sock");
    let s = sock.to_str().unwrap();
    for (args, want) in [(vec![], 0o600), (vec!["--socket-mode", "0660"], 0o660), (vec!["--socket-mode", "666"], 0o666)]
    {
        let mut all = vec!["--backend", &d, "--unix", s];
        all.extend(args);
        let served = serve_umask0(&all);
        assert_eq!(mode(&sock), want, "{all:?}");
        drop(served);
        let _ = std::fs::remove_file(&sock);
    }
    let e = fails(&["serve", "--backend", &d, "--unix", s, "--socket-mode", "0999"]);
    assert!(e.contains("--socket-mode") && e.contains("octal file mode"), "{e}");
    let e = fails(&["serve", "--backend", &d, "--socket-mode", "0600"]);
    assert!(e.contains("--unix"), "{e}");
}

#[test]
fn the_control_socket_is_owner_only_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let d = disk(dir.path());
    let ctl = dir.path().join("ctl.sock");
    let served = serve_umask0(&["--backend", &d, "--listen", "127.0.0.1:0", "--control", ctl.to_str().unwrap()]);
    assert_eq!(mode(&ctl), 0o600);
    assert!(ok(&["status", "--control", ctl.to_str().unwrap()]).contains("blockwell"));
    drop(served);
}

#[test]
fn status_refuses_a_socket_another_user_owns() {
    if !util::root("giving a socket to another user") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fake.sock");
    // A squatter's socket that answers with a fake status.
    let l = std::os::unix::net::UnixListener::bind(&p).unwrap();
    std::os::unix::fs::lchown(&p, Some(65534), Some(65534)).unwrap();
    let t = std::thread::spawn(move || {
        use std::io::Write;
        if let Ok((mut c, _)) = l.accept() {
            let _ = c.write_all(b"{\"exports\": []}\n");
        }
    });
    let e = fails(&["status", "--control", p.to_str().unwrap()]);
    assert!(e.contains("belongs to uid 65534, not to you (uid 0) or root: refusing it"), "{e}");
    let e = fails(&["cache", "flush", "--control", p.to_str().unwrap()]);
    assert!(e.contains("belongs to uid 65534"), "{e}");
    // Nothing connected: unblock the listener.
    std::os::unix::fs::lchown(&p, Some(0), Some(0)).unwrap();
    let _ = std::os::unix::net::UnixStream::connect(&p);
    t.join().unwrap();
}

/// `--control` without a path, for a user without `XDG_RUNTIME_DIR`: a private directory under /tmp, made
/// 0700, and refused when someone else can write it.
#[test]
fn the_default_control_socket_lives_in_a_private_directory() {
    if !util::root("running the server as user nobody") || !util::serve::have("setpriv") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("blockwell");
    std::fs::copy(env!("CARGO_BIN_EXE_blockwell"), &bin).unwrap();
    let d = disk(dir.path());
    let private = Path::new("/tmp/blockwell-65534");
    let _ = std::fs::remove_dir_all(private);
    let nobody = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"]).arg(&bin).args(args);
        c.env_remove("XDG_RUNTIME_DIR").stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    };
    let served = Served::spawn(nobody(&["serve", "--backend", &d, "--listen", "127.0.0.1:0", "--control"]));
    let banner = &served.banner;
    assert!(banner.contains("control socket at /tmp/blockwell-65534/control.sock"), "{banner}");
    assert_eq!(mode(private), 0o700);
    assert_eq!(std::fs::metadata(private).unwrap().uid(), 65534);
    let out = nobody(&["status"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("disk.img"));
    drop(served);
    // A directory others can write is refused.
    std::fs::set_permissions(private, std::fs::Permissions::from_mode(0o777)).unwrap();
    let _ = std::fs::remove_file(private.join("control.sock"));
    let out = nobody(&["serve", "--backend", &d, "--listen", "127.0.0.1:0", "--control"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("writable by other users (mode 777)"), "{err}");
    std::fs::remove_dir_all(private).unwrap();
}
