//! The NBD server: fixed-newstyle handshake, structured replies, `base:allocation`, many requests in
//! flight per connection, several named exports, over TCP or a Unix socket.
//!
//! ```no_run
//! use std::sync::Arc;
//! use blockwell_server::backend::MemBackend;
//! use blockwell_server::nbd::{Export, Server};
//!
//! let server = Server::bind_tcp("127.0.0.1:10809", vec![Export::new("disk", Arc::new(MemBackend::new(1 << 30)))])?;
//! let handle = server.spawn()?;
//! // ... clients connect to nbd://127.0.0.1:10809/disk ...
//! handle.shutdown()?; // stop accepting, finish in-flight requests, flush every backend
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! Layout: [`proto`] is the wire format and the I/O-free option state machine (the fuzzing surface);
//! `conn` runs one connection; this module owns listening, exports and shutdown.

mod conn;
pub mod proto;
mod sched;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::backend::Backend;
use proto::*;

/// One named export.
#[derive(Clone)]
pub struct Export {
    pub name: String,
    pub description: String,
    pub backend: Arc<dyn Backend>,
    /// Refuse writes even if the backend accepts them.
    pub read_only: bool,
}

impl Export {
    pub fn new(name: impl Into<String>, backend: Arc<dyn Backend>) -> Self {
        Export { name: name.into(), description: String::new(), backend, read_only: false }
    }

    pub fn description(mut self, d: impl Into<String>) -> Self {
        self.description = d.into();
        self
    }

    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    fn info(&self) -> ExportInfo {
        let b = &*self.backend;
        let size = b.size();
        let ro = self.read_only || b.is_read_only();
        let mut tflags = TFLAG_HAS_FLAGS | TFLAG_SEND_FLUSH | TFLAG_SEND_FUA | TFLAG_SEND_CACHE;
        if ro {
            tflags |= TFLAG_READ_ONLY;
        } else {
            tflags |= TFLAG_SEND_TRIM | TFLAG_SEND_WRITE_ZEROES | TFLAG_SEND_FAST_ZERO;
        }
        if b.can_multi_conn() {
            tflags |= TFLAG_CAN_MULTI_CONN;
        }
        ExportInfo {
            name: self.name.clone(),
            description: self.description.clone(),
            size,
            tflags,
            block_status: b.block_status(0, size.min(4096)).is_some(),
        }
    }
}

/// Something that happened to a client connection (for structured logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnEvent {
    /// A client connected. `peer` is its address (`unix` for a Unix socket).
    Connected { id: u64, peer: String },
    /// The handshake ended with the client in transmission on `export`.
    Opened { id: u64, export: String },
    /// The connection ended after `requests` transmission requests; `error` says why when it was not a clean
    /// end (DISC, EOF at a message boundary, or server shutdown).
    Closed { id: u64, requests: u64, error: Option<String> },
}

/// Receives [`ConnEvent`]s, from the connection threads.
pub type EventSink = Arc<dyn Fn(&ConnEvent) + Send + Sync>;

/// How long, by default, a connection polls its socket for the next request before it sleeps
/// ([`ServerConfig::busy_poll`]).
pub const DEFAULT_BUSY_POLL: Duration = Duration::from_micros(50);

/// The CPU scheduling policy of the connection threads ([`ServerConfig::scheduling`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Scheduling {
    /// `SCHED_BATCH` (Linux): the same CPU share as normal threads, but a connection woken by a request does
    /// not preempt the task running on its CPU. When the client shares that CPU, the client keeps running
    /// and queues more requests, and the connection then reads and answers them in one batch instead of
    /// taking the CPU back after each one (about one context switch per queue-depth of requests instead of
    /// one per two requests at QD32). The cost: on a CPU kept busy by other work, a reply can wait for the
    /// running task's time slice to end. Where the policy cannot be set, the thread stays normal (logged).
    #[default]
    Batch,
    /// `SCHED_OTHER`, the default policy of Linux threads.
    Normal,
}

/// The exports a server offers (the first is the default, export name ""), who hears of connections, and how
/// the connections wait for requests.
#[derive(Clone)]
pub struct ServerConfig {
    pub exports: Vec<Export>,
    pub events: Option<EventSink>,
    /// Adaptive busy polling: when the previous request arrived within this time of the connection starting
    /// to wait for it, the connection polls its socket (non-blocking reads, yielding the CPU between them)
    /// for up to this long before it sleeps in a blocking read. A request that arrives while the server
    /// polls costs no wake-up, which on a machine whose idle CPUs sleep is most of a round trip at queue
    /// depth 1. A client that pauses for longer makes the next wait a plain blocking read, so an idle
    /// server does not poll. Zero turns polling off. Default [`DEFAULT_BUSY_POLL`].
    pub busy_poll: Duration,
    /// The scheduling policy of the connection threads. Default [`Scheduling::Batch`].
    pub scheduling: Scheduling,
}

impl ServerConfig {
    /// Sends connection events to `sink`.
    pub fn with_events(mut self, sink: EventSink) -> Self {
        self.events = Some(sink);
        self
    }

    /// Sets [`ServerConfig::busy_poll`].
    pub fn with_busy_poll(mut self, d: Duration) -> Self {
        self.busy_poll = d;
        self
    }

    /// Sets [`ServerConfig::scheduling`].
    pub fn with_scheduling(mut self, s: Scheduling) -> Self {
        self.scheduling = s;
        self
    }
}

impl From<Vec<Export>> for ServerConfig {
    fn from(exports: Vec<Export>) -> Self {
        ServerConfig { exports, events: None, busy_poll: DEFAULT_BUSY_POLL, scheduling: Scheduling::default() }
    }
}

/// A connected socket of either transport.
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    fn set_timeouts(&self, read: Duration, write: Duration) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => {
                s.set_read_timeout(Some(read))?;
                s.set_write_timeout(Some(write))
            }
            Stream::Unix(s) => {
                s.set_read_timeout(Some(read))?;
                s.set_write_timeout(Some(write))
            }
        }
    }

    /// A read that never blocks: `Ok(None)` when no byte is waiting.
    fn read_nowait(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        use std::os::fd::AsFd;
        let fd = match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        };
        match rustix::net::recv(fd, buf, rustix::net::RecvFlags::DONTWAIT) {
            Ok((n, _)) => Ok(Some(n)),
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(bufs),
            Stream::Unix(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.flush(),
            Stream::Unix(s) => s.flush(),
        }
    }
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Listener {
    /// A new connection and its peer's address.
    fn accept(&self) -> io::Result<(Stream, String)> {
        Ok(match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                s.set_nonblocking(false)?;
                s.set_nodelay(true)?;
                (Stream::Tcp(s), peer.to_string())
            }
            Listener::Unix(l, _) => {
                let (s, _) = l.accept()?;
                s.set_nonblocking(false)?;
                (Stream::Unix(s), "unix".to_string())
            }
        })
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A bound NBD server, not yet accepting.
pub struct Server {
    listener: Listener,
    exports: Arc<Vec<Export>>,
    events: Option<EventSink>,
    busy_poll: Duration,
    scheduling: Scheduling,
    stop: Arc<AtomicBool>,
}

/// Stops a running server from another thread (see [`Server::stopper`]).
#[derive(Clone)]
pub struct Stopper(Arc<AtomicBool>);

impl Stopper {
    /// Asks the server to shut down; [`Server::run`] returns once it has.
    pub fn stop(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A server running on its own thread.
pub struct ServerHandle {
    thread: JoinHandle<io::Result<()>>,
    stop: Stopper,
    local_addr: Option<SocketAddr>,
}

impl ServerHandle {
    /// The TCP address (None for a Unix socket).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.local_addr
    }

    /// Stops accepting, lets in-flight requests finish and be answered, closes every connection, flushes
    /// every backend, and returns.
    pub fn shutdown(self) -> io::Result<()> {
        self.stop.stop();
        self.thread.join().unwrap_or_else(|_| Err(io::Error::other("server thread panicked")))
    }
}

/// How often the accept loop looks at the stop flag.
const POLL: Duration = Duration::from_millis(20);

impl Server {
    fn new(listener: Listener, config: ServerConfig) -> io::Result<Server> {
        let exports = config.exports;
        if exports.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "an NBD server needs at least one export"));
        }
        for (i, e) in exports.iter().enumerate() {
            if e.name.len() > 4096 || exports[..i].iter().any(|o| o.name == e.name) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("export name {:?} is duplicated or too long", e.name),
                ));
            }
        }
        Ok(Server {
            listener,
            exports: Arc::new(exports),
            events: config.events,
            busy_poll: config.busy_poll,
            scheduling: config.scheduling,
            stop: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Listens on a TCP address (port 0 picks a free port; the NBD port is 10809).
    pub fn bind_tcp(addr: impl ToSocketAddrs, config: impl Into<ServerConfig>) -> io::Result<Server> {
        let l = TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        Server::new(Listener::Tcp(l), config.into())
    }

    /// Listens on a Unix socket at `path` (removed again when the server ends).
    pub fn bind_unix(path: impl AsRef<Path>, config: impl Into<ServerConfig>) -> io::Result<Server> {
        let path = path.as_ref();
        let l = UnixListener::bind(path)?;
        l.set_nonblocking(true)?;
        Server::new(Listener::Unix(l, path.to_path_buf()), config.into())
    }

    /// The TCP address (None for a Unix socket).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        match &self.listener {
            Listener::Tcp(l) => l.local_addr().ok(),
            Listener::Unix(..) => None,
        }
    }

    /// A handle that makes [`Server::run`] return.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.stop.clone())
    }

    /// Runs on a new thread.
    pub fn spawn(self) -> io::Result<ServerHandle> {
        let stop = self.stopper();
        let local_addr = self.local_addr();
        let thread = thread::Builder::new().name("nbd-accept".into()).spawn(move || self.run())?;
        Ok(ServerHandle { thread, stop, local_addr })
    }

    /// Accepts and serves connections until stopped, then shuts down gracefully (see
    /// [`ServerHandle::shutdown`]).
    pub fn run(self) -> io::Result<()> {
        let infos: Arc<Vec<ExportInfo>> = Arc::new(self.exports.iter().map(Export::info).collect());
        let mut threads: Vec<JoinHandle<()>> = Vec::new();
        let mut next_id = 0u64;
        while !self.stop.load(Ordering::SeqCst) {
            let (stream, peer) = match self.listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    thread::sleep(POLL);
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning or dying.
                    log(&format!("accept failed: {e}"));
                    thread::sleep(POLL);
                    continue;
                }
            };
            threads.retain(|t| !t.is_finished());
            let id = next_id;
            next_id += 1;
            let (exports, infos, stop) = (self.exports.clone(), infos.clone(), self.stop.clone());
            let events = self.events.clone();
            let (busy_poll, scheduling) = (self.busy_poll, self.scheduling);
            let spawned = thread::Builder::new().name(format!("nbd-conn-{id}")).spawn(move || {
                if scheduling == Scheduling::Batch {
                    if let Err(e) = sched::set_batch() {
                        log(&format!("connection {id}: cannot use SCHED_BATCH, staying normal: {e}"));
                    }
                }
                let emit = |e: ConnEvent| {
                    if let Some(sink) = &events {
                        sink(&e);
                    }
                };
                emit(ConnEvent::Connected { id, peer });
                let mut requests = 0;
                let res = conn::serve(
                    stream,
                    &exports,
                    &infos,
                    &stop,
                    busy_poll,
                    &mut |export| emit(ConnEvent::Opened { id, export: exports[export].name.clone() }),
                    &mut requests,
                );
                if let Err(e) = &res {
                    log(&format!("connection {id} ended: {e}"));
                }
                emit(ConnEvent::Closed { id, requests, error: res.err().map(|e| e.to_string()) });
            });
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => log(&format!("cannot start a connection thread: {e}")),
            }
        }
        // Each connection sees the stop flag at its next message boundary, answers what it has in flight
        // and ends.
        for t in threads {
            let _ = t.join();
        }
        let mut first_err = None;
        for e in self.exports.iter() {
            if let Err(err) = e.backend.flush() {
                first_err.get_or_insert(err);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}

/// Diagnostics go to stderr only when `BLOCKWELL_NBD_LOG` is set (quiet by default).
fn log(msg: &str) {
    if std::env::var_os("BLOCKWELL_NBD_LOG").is_some() {
        eprintln!("blockwell-nbd: {msg}");
    }
}
