//! A running `blockwell serve` and the NBD clients that talk to it, for the integration tests that serve.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Whether `tool` is installed; prints "SKIPPED: <tool> not installed" when not.
pub fn have(tool: &str) -> bool {
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        super::skip(&format!("{tool} not installed"));
    }
    ok
}

/// A running `blockwell serve`, its NBD URIs (one per export) and its other startup lines.
pub struct Served {
    pub child: Child,
    pub uri: String,
    pub uris: Vec<String>,
    /// Every stdout line up to `blockwell: ready`.
    pub banner: String,
}

/// Reads a starting `blockwell serve`'s stdout up to its `blockwell: ready` line and returns what it printed
/// (the rest of stdout stays in `child.stdout`); panics with its stderr if it exits first.
pub fn wait_ready(child: &mut Child) -> String {
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    loop {
        let mut line = String::new();
        if out.read_line(&mut line).unwrap() == 0 {
            let mut err = String::new();
            if let Some(e) = child.stderr.as_mut() {
                e.read_to_string(&mut err).unwrap();
            }
            panic!("blockwell serve exited before ready; stdout: {banner}; stderr: {err}")
        }
        banner.push_str(&line);
        if line.starts_with("blockwell: ready") {
            break;
        }
    }
    child.stdout = Some(out.into_inner());
    banner
}

impl Served {
    /// `blockwell serve --listen 127.0.0.1:0 ARGS`, its stderr kept in a pipe.
    pub fn start(args: &[&str]) -> Served {
        let mut cmd = super::bin();
        cmd.arg("serve").args(["--listen", "127.0.0.1:0"]).args(args).stderr(Stdio::piped());
        Served::spawn(cmd)
    }

    /// Runs `cmd`, a `blockwell serve` however started (under `setpriv`, `prlimit`...; its stderr as the caller
    /// set it), up to `ready`.
    pub fn spawn(mut cmd: Command) -> Served {
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("start blockwell serve");
        let banner = wait_ready(&mut child);
        let uris: Vec<String> = banner
            .split_whitespace()
            .filter(|w| w.starts_with("nbd") && w.contains("://"))
            .map(str::to_string)
            .collect();
        // Owned from here: a failed check below kills the server (Drop) instead of leaving it running.
        let served = Served { uri: uris.first().cloned().unwrap_or_default(), uris, banner, child };
        assert!(!served.uris.is_empty(), "no URI in {:?}", served.banner);
        served
    }

    /// The first export's `host:port`.
    pub fn addr(&self) -> String {
        self.uri.split("//").nth(1).and_then(|r| r.split('/').next()).unwrap_or_default().to_string()
    }

    /// The address after `blockwell: metrics at http://`.
    pub fn metrics_addr(&self) -> String {
        let l =
            self.banner.lines().find_map(|l| l.strip_prefix("blockwell: metrics at http://")).expect("metrics line");
        l.trim_end_matches("/metrics").to_string()
    }

    /// SIGTERM, then the exit status and the rest of stdout.
    pub fn stop(mut self) -> (bool, String) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let mut rest = String::new();
        self.child.stdout.take().unwrap().read_to_string(&mut rest).unwrap();
        let status = self.child.wait().unwrap();
        (status.success(), rest)
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn qemu_io(uri: &str, cmds: &[&str]) -> String {
    let mut c = Command::new("qemu-io");
    c.args(["-f", "raw", uri]);
    for x in cmds {
        c.args(["-c", x]);
    }
    let out = c.output().expect("qemu-io");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("failed") && !text.contains("error"), "qemu-io {cmds:?}:\n{text}");
    text
}

pub fn disk(dir: &Path, mib: u64) -> std::path::PathBuf {
    let p = dir.join("disk.img");
    std::fs::File::create(&p).unwrap().set_len(mib << 20).unwrap();
    p
}

/// `blockwell status --control sock` (and `--json`): stdout on success.
pub fn status(sock: &Path, json: bool) -> String {
    let mut args = vec!["status", "--control", sock.to_str().unwrap()];
    if json {
        args.push("--json");
    }
    super::ok(&args)
}

/// A raw HTTP/1.1 GET; returns the whole response.
pub fn http_get(addr: &str, path: &str) -> String {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}
