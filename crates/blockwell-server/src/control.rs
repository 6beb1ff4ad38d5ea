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

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

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
    // The same probe as the NBD socket's: only a socket nobody listens on is replaced.
    crate::unix::replace_stale(path).map_err(|e| match e {
        crate::unix::SocketPathError::InUse(p) => ControlError::InUse(p),
        crate::unix::SocketPathError::NotSocket(p) => ControlError::NotSocket(p),
        crate::unix::SocketPathError::Unknown { path, source } => {
            ControlError::Io { what: path.display().to_string(), source }
        }
    })?;
    let listener = crate::unix::bind(path, 0o600).map_err(io_err(path.display().to_string()))?;
    let answer = move |c: UnixStream| answer_control(c, &render, IO_TIMEOUT);
    let busy = |mut c: UnixStream| {
        let _ = c.set_nonblocking(true);
        let _ = c.write_all(b"error: too many control requests at once; try again\n");
    };
    let (stop, thread) = spawn_endpoint(
        "blockwell-control",
        std::iter::from_fn(move || Some(listener.accept().map(|(c, _)| c))),
        answer,
        busy,
    )?;
    Ok(Endpoint { stop, wake: Wake::Unix(path.to_path_buf()), thread: Some(thread) })
}

/// Requests an endpoint answers at once, each on a thread of its own; a connection beyond them is refused at
/// once (one line or a 503), so neither slow clients nor a long `cache flush` hold up the others.
const MAX_CONCURRENT: usize = 8;

/// Starts the accept thread of an endpoint: each connection of `incoming` is answered by `answer` on a thread
/// of its own, at most [`MAX_CONCURRENT`] at once, beyond which `busy` answers it. On stop, the thread waits for
/// the requests being answered.
fn spawn_endpoint<S: Send + 'static>(
    name: &str,
    incoming: impl Iterator<Item = io::Result<S>> + Send + 'static,
    answer: impl Fn(S) -> io::Result<()> + Send + Sync + 'static,
    busy: fn(S),
) -> Result<(Arc<AtomicBool>, JoinHandle<()>), ControlError> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let answer = Arc::new(answer);
    let label = name.to_string();
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let mut running: Vec<JoinHandle<()>> = Vec::new();
            for conn in incoming {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(c) = conn else { continue };
                running.retain(|t| !t.is_finished());
                if running.len() >= MAX_CONCURRENT {
                    busy(c);
                    continue;
                }
                let answer = answer.clone();
                // No thread for it: the connection is dropped (closed) unanswered.
                if let Ok(t) = std::thread::Builder::new().name(label.clone()).spawn(move || drop(answer(c))) {
                    running.push(t);
                }
            }
            for t in running {
                let _ = t.join();
            }
        })
        .map_err(io_err(format!("starting the {name} thread")))?;
    Ok((stop, thread))
}

/// A socket with read and write timeouts.
trait Timed: Read + Write {
    fn read_timeout(&self, t: Duration) -> io::Result<()>;
    fn write_timeout(&self, t: Duration) -> io::Result<()>;
}

impl Timed for UnixStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
}

impl Timed for TcpStream {
    fn read_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(t))
    }
    fn write_timeout(&self, t: Duration) -> io::Result<()> {
        self.set_write_timeout(Some(t))
    }
}

/// What is left of `until`, or a time-out error.
fn left(until: Instant) -> io::Result<Duration> {
    match until.checked_duration_since(Instant::now()) {
        Some(d) if !d.is_zero() => Ok(d),
        _ => Err(io::Error::new(io::ErrorKind::TimedOut, "the client took too long")),
    }
}

/// Reads a request until `end` finds where it ends in what was read, or the client closes its side: all of it
/// within `within`, at most `max` bytes.
fn read_request<S: Timed>(c: &mut S, within: Duration, max: usize, end: fn(&[u8]) -> bool) -> io::Result<Vec<u8>> {
    let until = Instant::now() + within;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !end(&buf) {
        if buf.len() > max {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "request too long"));
        }
        c.read_timeout(left(until)?)?;
        match c.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(buf)
}

/// Writes `data` whole within `within`, however slowly the client reads.
fn write_reply<S: Timed>(c: &mut S, data: &[u8], within: Duration) -> io::Result<()> {
    let until = Instant::now() + within;
    let mut rest = data;
    while !rest.is_empty() {
        c.write_timeout(left(until)?)?;
        match c.write(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => rest = &rest[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn answer_control(mut c: UnixStream, render: &ControlFn, within: Duration) -> io::Result<()> {
    let req = read_request(&mut c, within, MAX_REQUEST as usize, |b| b.contains(&b'\n'))?;
    let line = String::from_utf8_lossy(&req);
    let line = line.lines().next().unwrap_or("");
    let reply = match Request::parse(line) {
        Some(r) => render(r),
        None => format!(
            "error: unknown request '{}' (known: status, status json, cache flush [EXPORT], cache mode MODE [EXPORT])\n",
            line.trim()
        ),
    };
    write_reply(&mut c, reply.as_bytes(), within)
}

/// Starts the metrics endpoint on `addr`, which must be a loopback address. Scrapes are answered concurrently
/// (up to `MAX_CONCURRENT`; more get `503`), and each must send its request and take its reply within 5 s.
pub fn serve_metrics(addr: SocketAddr, render: MetricsFn) -> Result<Endpoint, ControlError> {
    serve_metrics_within(addr, render, IO_TIMEOUT)
}

fn serve_metrics_within(addr: SocketAddr, render: MetricsFn, within: Duration) -> Result<Endpoint, ControlError> {
    if !addr.ip().is_loopback() {
        return Err(ControlError::NotLoopback { addr });
    }
    let listener = TcpListener::bind(addr).map_err(io_err(addr.to_string()))?;
    let local = listener.local_addr().map_err(io_err(addr.to_string()))?;
    let answer = move |c: TcpStream| answer_http(c, &render, within);
    let busy = |mut c: TcpStream| {
        let _ = c.set_nonblocking(true);
        let _ = c.write_all(
            b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        );
        // Closing with the request unread would reset the connection, and the reply could be lost with it.
        let _ = c.shutdown(std::net::Shutdown::Write);
        let _ = c.read(&mut [0u8; 8 * MAX_REQUEST as usize]);
    };
    let (stop, thread) = spawn_endpoint(
        "blockwell-metrics",
        std::iter::from_fn(move || Some(listener.accept().map(|(c, _)| c))),
        answer,
        busy,
    )?;
    Ok(Endpoint { stop, wake: Wake::Tcp(local), thread: Some(thread) })
}

fn answer_http(mut c: TcpStream, render: &MetricsFn, within: Duration) -> io::Result<()> {
    let head = read_request(&mut c, within, 8 * MAX_REQUEST as usize, |b| b.windows(4).any(|w| w == b"\r\n\r\n"))?;
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let parsed = req.parse(&head);
    let (method, path) = (req.method.unwrap_or(""), req.path.unwrap_or("").split('?').next().unwrap_or(""));
    let text = "text/plain; charset=utf-8";
    let (status, ctype, body) = match (parsed, method, path) {
        (Ok(httparse::Status::Complete(_)), "GET" | "HEAD", "/metrics") => {
            ("200 OK", "text/plain; version=0.0.4; charset=utf-8", render())
        }
        (Ok(httparse::Status::Complete(_)), "GET" | "HEAD", _) => {
            ("404 Not Found", text, "not found; try /metrics\n".into())
        }
        (Ok(httparse::Status::Complete(_)), _, _) => ("405 Method Not Allowed", text, "only GET\n".into()),
        _ => ("400 Bad Request", text, "bad request\n".into()),
    };
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != "HEAD" {
        reply.extend_from_slice(body.as_bytes());
    }
    write_reply(&mut c, &reply, within)
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
    fn slow_scrapers_stall_no_one_and_meet_their_deadline() {
        let within = Duration::from_millis(400);
        let ep = serve_metrics_within("127.0.0.1:0".parse().unwrap(), Arc::new(|| "x 1\n".into()), within).unwrap();
        let a = ep.local_addr().unwrap();
        // A client that connects and sends nothing, and one that trickles its request a byte at a time.
        let silent = TcpStream::connect(a).unwrap();
        let trickle = std::thread::spawn(move || {
            let mut s = TcpStream::connect(a).unwrap();
            let t0 = Instant::now();
            for b in b"GET /metrics HTTP/1.1\r\nHost: slow\r\n\r\n" {
                if s.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            (t0.elapsed(), out)
        });
        std::thread::sleep(Duration::from_millis(50));
        // Meanwhile a scrape is answered at once.
        let t0 = Instant::now();
        assert!(http(a, "GET /metrics HTTP/1.1\r\n\r\n").ends_with("x 1\n"));
        assert!(t0.elapsed() < Duration::from_millis(300), "{:?}", t0.elapsed());
        // The trickling client is cut at the deadline, its request unanswered.
        let (took, out) = trickle.join().unwrap();
        assert!(out.is_empty() && took < within * 3, "{took:?} {out:?}");
        // Past the limit of requests at once: 503 at once.
        let idle: Vec<TcpStream> = (0..MAX_CONCURRENT).map(|_| TcpStream::connect(a).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(50));
        assert!(http(a, "GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 503"));
        drop((idle, silent));
        std::thread::sleep(within);
        assert!(http(a, "GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
        assert!(http(a, "GARBAGE\r\n\r\n").starts_with("HTTP/1.1 400"));
        ep.stop();
    }

    #[test]
    fn a_long_control_request_does_not_hold_up_status() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("c.sock");
        let ep = serve_control(
            &p,
            Arc::new(|r| match r {
                Request::CacheFlush(_) => {
                    std::thread::sleep(Duration::from_millis(800));
                    "ok: flushed\n".into()
                }
                _ => "a: line\n".into(),
            }),
        )
        .unwrap();
        let p2 = p.clone();
        let flush = std::thread::spawn(move || request(&p2, Request::CacheFlush(None)).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        let t0 = Instant::now();
        assert_eq!(request(&p, Request::Status).unwrap(), "a: line\n");
        assert!(t0.elapsed() < Duration::from_millis(500), "{:?}", t0.elapsed());
        assert_eq!(flush.join().unwrap(), "ok: flushed\n");
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
