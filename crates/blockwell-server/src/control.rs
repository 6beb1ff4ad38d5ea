//! The control plane of a running server: a Unix-socket status endpoint and a loopback-only Prometheus
//! endpoint. Both are small std-only server threads that take a closure rendering the reply, so they know
//! nothing about exports or counters.
//!
//! Control protocol (one request per connection): the client sends one line, newline-terminated, at most 1 KiB,
//! and the server answers with the rendered text and closes the connection:
//! - `status`, `status json`: the counters;
//! - `cache flush [EXPORT]`: write every dirty block of the cache devices (of one export) back to the origin;
//! - `cache mode MODE [EXPORT]`: switch the cache devices' mode (leaving write-back cleans first).
//!
//! The cache commands answer `ok: ...` or `error: ...` once done. An unknown request gets one line starting
//! with `error: `.
//!
//! Metrics: HTTP/1.1 `GET /metrics` answers `200` with `text/plain; version=0.0.4`; any other path `404`,
//! any other method `405`. One request per connection (`Connection: close`).

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Longest request line or HTTP header block accepted.
const MAX_REQUEST: u64 = 1024;
/// A client that sends nothing for this long is dropped.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors starting a control or metrics endpoint.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("{}: a server is already listening there", .0.display())]
    InUse(PathBuf),
    #[error("{}: exists and is not a socket", .0.display())]
    NotSocket(PathBuf),
    #[error(
        "{addr}: refusing a non-loopback address (the metrics endpoint has no authentication); use 127.0.0.1:PORT"
    )]
    NotLoopback { addr: SocketAddr },
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error(transparent)]
    Untrusted(#[from] crate::unix::TrustError),
}

/// A request on the control socket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `status`: one dmsetup-like line per export.
    Status,
    /// `status json`: one JSON document.
    StatusJson,
    /// `cache flush [EXPORT]`: clean every dirty block of the cache devices (of the export named).
    CacheFlush(Option<String>),
    /// `cache mode MODE [EXPORT]`: switch the cache devices' write mode.
    CacheMode(blockwell_cachedev::CacheMode, Option<String>),
}

impl Request {
    /// Parses one request line.
    pub fn parse(line: &str) -> Option<Request> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let name = |w: Option<&&str>| w.map(|s| s.to_string());
        match words.as_slice() {
            ["status"] => Some(Request::Status),
            ["status", "json"] => Some(Request::StatusJson),
            ["cache", "flush"] | ["cache", "flush", _] => Some(Request::CacheFlush(name(words.get(2)))),
            ["cache", "mode", m] | ["cache", "mode", m, _] => {
                Some(Request::CacheMode(m.parse().ok()?, name(words.get(3))))
            }
            _ => None,
        }
    }

    /// The request line, as sent by [`request`].
    pub fn as_line(&self) -> String {
        let named = |base: String, n: &Option<String>| match n {
            Some(n) => format!("{base} {n}"),
            None => base,
        };
        match self {
            Request::Status => "status".into(),
            Request::StatusJson => "status json".into(),
            Request::CacheFlush(n) => named("cache flush".into(), n),
            Request::CacheMode(m, n) => named(format!("cache mode {m}"), n),
        }
    }
}

/// Renders the reply to a control request.
pub type ControlFn = Arc<dyn Fn(Request) -> String + Send + Sync>;
/// Renders the Prometheus exposition text.
pub type MetricsFn = Arc<dyn Fn() -> String + Send + Sync>;

/// The default control socket, in a directory only its user can write: `$XDG_RUNTIME_DIR/blockwell.sock`;
/// without `XDG_RUNTIME_DIR`, `/run/blockwell/control.sock` for root and `/tmp/blockwell-<uid>/control.sock`
/// for other users (the directory made 0700 and checked by [`serve_control`]).
pub fn default_control_path() -> PathBuf {
    let uid = rustix::process::getuid();
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) if !d.is_empty() => Path::new(&d).join("blockwell.sock"),
        _ if uid.is_root() => PathBuf::from("/run/blockwell/control.sock"),
        _ => PathBuf::from(format!("/tmp/blockwell-{}/control.sock", uid.as_raw())),
    }
}

/// Sends one request to the control socket at `path` and returns the reply.
pub fn request(path: &Path, req: Request) -> io::Result<String> {
    request_within(path, req, IO_TIMEOUT)
}

/// [`request`], waiting up to `timeout` for the reply (a cache flush takes as long as the origin needs).
/// The socket must belong to the calling user or root ([`crate::unix::check_owner`]): a socket another user
/// placed at the path is refused (`PermissionDenied`) before anything is sent or read.
pub fn request_within(path: &Path, req: Request, timeout: Duration) -> io::Result<String> {
    if let Err(e) = crate::unix::check_owner(path) {
        return Err(match e {
            crate::unix::TrustError::Io { source, .. } => source,
            e => io::Error::new(io::ErrorKind::PermissionDenied, e.to_string()),
        });
    }
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(timeout))?;
    s.write_all(format!("{}\n", req.as_line()).as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// A running endpoint thread; stops (and removes its socket file, if any) on [`Endpoint::stop`] or drop.
pub struct Endpoint {
    stop: Arc<AtomicBool>,
    wake: Wake,
    thread: Option<JoinHandle<()>>,
}

enum Wake {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

impl Endpoint {
    /// The TCP address of a metrics endpoint (useful with port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match self.wake {
            Wake::Tcp(a) => Some(a),
            Wake::Unix(_) => None,
        }
    }

    /// Stops accepting and joins the thread.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    fn stop_inner(&mut self) {
        let Some(t) = self.thread.take() else { return };
        self.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept with a connection of our own.
        match &self.wake {
            Wake::Unix(p) => drop(UnixStream::connect(p)),
            Wake::Tcp(a) => drop(TcpStream::connect_timeout(a, Duration::from_secs(1))),
        }
        let _ = t.join();
        if let Wake::Unix(p) = &self.wake {
            let _ = std::fs::remove_file(p);
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ControlError {
    let what = what.into();
    move |source| ControlError::Io { what, source }
}

/// Starts the control socket at `path`. A stale socket file (nobody listening) is replaced; a live one is
/// an error. The socket is owner-only (0600) from the start. At the default path, its directory is made
/// private first ([`crate::unix::private_dir`]).
pub fn serve_control(path: &Path, render: ControlFn) -> Result<Endpoint, ControlError> {
    if path == default_control_path() {
        if let Some(dir) = path.parent() {
            crate::unix::private_dir(dir)?;
        }
    }
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            return Err(ControlError::NotSocket(path.to_path_buf()));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(ControlError::InUse(path.to_path_buf()));
        }
        std::fs::remove_file(path).map_err(io_err(path.display().to_string()))?;
    }
    let listener = crate::unix::bind(path, 0o600).map_err(io_err(path.display().to_string()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("blockwell-control".into())
        .spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(c) = conn {
                    let _ = answer_control(c, &render);
                }
            }
        })
        .map_err(io_err("starting the control thread"))?;
    Ok(Endpoint { stop, wake: Wake::Unix(path.to_path_buf()), thread: Some(thread) })
}

fn answer_control(mut c: UnixStream, render: &ControlFn) -> io::Result<()> {
    c.set_read_timeout(Some(IO_TIMEOUT))?;
    c.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut line = String::new();
    BufReader::new((&c).take(MAX_REQUEST)).read_line(&mut line)?;
    let reply = match Request::parse(&line) {
        Some(r) => render(r),
        None => format!(
            "error: unknown request '{}' (known: status, status json, cache flush [EXPORT], cache mode MODE [EXPORT])\n",
            line.trim()
        ),
    };
    c.write_all(reply.as_bytes())
}

/// Starts the metrics endpoint on `addr`, which must be a loopback address.
pub fn serve_metrics(addr: SocketAddr, render: MetricsFn) -> Result<Endpoint, ControlError> {
    if !addr.ip().is_loopback() {
        return Err(ControlError::NotLoopback { addr });
    }
    let listener = TcpListener::bind(addr).map_err(io_err(addr.to_string()))?;
    let local = listener.local_addr().map_err(io_err(addr.to_string()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::Builder::new()
        .name("blockwell-metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(c) = conn {
                    let _ = answer_http(c, &render);
                }
            }
        })
        .map_err(io_err("starting the metrics thread"))?;
    Ok(Endpoint { stop, wake: Wake::Tcp(local), thread: Some(thread) })
}

fn answer_http(mut c: TcpStream, render: &MetricsFn) -> io::Result<()> {
    c.set_read_timeout(Some(IO_TIMEOUT))?;
    c.set_write_timeout(Some(IO_TIMEOUT))?;
    let mut r = BufReader::new((&c).take(8 * MAX_REQUEST));
    let mut first = String::new();
    r.read_line(&mut first)?;
    // Drain the headers up to the blank line.
    loop {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
    }
    let mut parts = first.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", render()),
        ("GET" | "HEAD", _) => ("404 Not Found", "text/plain; charset=utf-8", "not found; try /metrics\n".into()),
        _ => ("405 Method Not Allowed", "text/plain; charset=utf-8", "only GET\n".into()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    c.write_all(head.as_bytes())?;
    if method != "HEAD" {
        c.write_all(body.as_bytes())?;
    }
    c.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(addr: SocketAddr, req: &str) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn control_answers_one_request_per_connection() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.sock");
        let ep = serve_control(
            &p,
            Arc::new(|r| match r {
                Request::Status => "a: line\n".into(),
                Request::StatusJson => "{}\n".into(),
                other => format!("ok: {}\n", other.as_line()),
            }),
        )
        .unwrap();
        assert_eq!(request(&p, Request::Status).unwrap(), "a: line\n");
        assert_eq!(request(&p, Request::StatusJson).unwrap(), "{}\n");
        let flush = Request::CacheFlush(Some("disk".into()));
        assert_eq!(request(&p, flush).unwrap(), "ok: cache flush disk\n");
        let mode = Request::CacheMode(blockwell_cachedev::CacheMode::WriteThrough, None);
        assert_eq!(request(&p, mode).unwrap(), "ok: cache mode write-through\n");
        assert_eq!(Request::parse("cache mode bogus"), None);
        assert_eq!(Request::parse("cache flush a b"), None);
        let mut s = UnixStream::connect(&p).unwrap();
        s.write_all(b"reboot\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("error: unknown request 'reboot'"), "{out}");
        // A second server on the same live socket is refused.
        assert!(matches!(serve_control(&p, Arc::new(|_| String::new())), Err(ControlError::InUse(_))));
        ep.stop();
        assert!(!p.exists(), "the socket file is removed on stop");
        assert!(request(&p, Request::Status).is_err());
    }

    #[test]
    fn stale_socket_is_replaced_and_regular_file_refused() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("stale.sock");
        drop(std::os::unix::net::UnixListener::bind(&p).unwrap());
        assert!(p.exists());
        let ep = serve_control(&p, Arc::new(|_| "ok\n".into())).unwrap();
        assert_eq!(request(&p, Request::Status).unwrap(), "ok\n");
        drop(ep);
        let f = d.path().join("file");
        std::fs::write(&f, b"x").unwrap();
        assert!(matches!(serve_control(&f, Arc::new(|_| String::new())), Err(ControlError::NotSocket(_))));
    }

    #[test]
    fn metrics_serves_get_metrics_only_on_loopback() {
        let bad: SocketAddr = "0.0.0.0:0".parse().unwrap();
        let e = serve_metrics(bad, Arc::new(String::new)).err().unwrap();
        assert!(e.to_string().contains("non-loopback"), "{e}");
        let ep = serve_metrics("127.0.0.1:0".parse().unwrap(), Arc::new(|| "x_total 1\n".into())).unwrap();
        let a = ep.local_addr().unwrap();
        let ok = http(a, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains("Content-Type: text/plain; version=0.0.4"), "{ok}");
        assert!(ok.ends_with("\r\n\r\nx_total 1\n"), "{ok}");
        assert!(http(a, "GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(http(a, "POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        ep.stop();
    }

    #[test]
    fn request_lines_parse() {
        assert_eq!(Request::parse("status\n"), Some(Request::Status));
        assert_eq!(Request::parse(" status  json \r\n"), Some(Request::StatusJson));
        assert_eq!(Request::parse("status xml"), None);
        assert_eq!(Request::parse(""), None);
    }
}
