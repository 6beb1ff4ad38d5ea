//! The NBD server: fixed-newstyle handshake, structured replies, `base:allocation`, many requests in
//! flight per connection, several named exports, over TCP or a Unix socket.
//!
//! ```no_run
//! use std::sync::{Arc, Condvar, Mutex, RwLock};
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
mod stop;
pub mod tls;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crate::backend::Backend;
use proto::*;
use stop::{Shutdown, Woken};

/// One named export. Clones are the same export ([`ServerHandle::set_exports`] tells exports apart by that).
#[derive(Clone)]
pub struct Export {
    pub name: String,
    pub description: String,
    pub backend: Arc<dyn Backend>,
    /// Refuse writes even if the backend accepts them.
    pub read_only: bool,
    users: Arc<Users>,
}

/// The connections in transmission on an export, and whether it was removed (then no new one enters).
#[derive(Default)]
struct Users {
    state: Mutex<(usize, bool)>,
    left: Condvar,
}

/// A connection's hold on its export ([`Export::enter`]); dropping it lets the export go.
struct InUse(Arc<Users>);

impl Drop for InUse {
    fn drop(&mut self) {
        let mut s = self.0.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 -= 1;
        if s.0 == 0 {
            self.0.left.notify_all();
        }
    }
}

impl Export {
    pub fn new(name: impl Into<String>, backend: Arc<dyn Backend>) -> Self {
        Export { name: name.into(), description: String::new(), backend, read_only: false, users: Arc::default() }
    }

    /// Whether `other` is this export (a clone of it), not only one with the same name.
    pub fn same(&self, other: &Export) -> bool {
        Arc::ptr_eq(&self.users, &other.users)
    }

    /// Counts a connection as open on the export until the guard drops; None once the export is removed.
    fn enter(&self) -> Option<InUse> {
        let mut s = self.users.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.1 {
            return None;
        }
        s.0 += 1;
        Some(InUse(self.users.clone()))
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
    /// The handshake ended with the client in transmission on `export`, over TLS or not.
    Opened { id: u64, export: String, tls: bool },
    /// The connection ended after `requests` transmission requests; `error` says why when it was not a clean
    /// end (DISC, EOF at a message boundary, or server shutdown).
    Closed { id: u64, requests: u64, error: Option<String> },
    /// A connection was closed at once, unserved: too many open (`--max-connections`), or no thread for it.
    Refused { peer: String, reason: String },
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
    /// for up to this long before it sleeps until data arrives. A request that arrives while the server
    /// polls costs no wake-up, which on a machine whose idle CPUs sleep is most of a round trip at queue
    /// depth 1. A client that pauses for longer makes the next wait a plain sleep, so an idle
    /// server does not poll. Zero turns polling off. Default [`DEFAULT_BUSY_POLL`].
    pub busy_poll: Duration,
    /// The scheduling policy of the connection threads. Default [`Scheduling::Batch`].
    pub scheduling: Scheduling,
    /// Connections served at once; a client connecting beyond that is closed at once (logged). Default
    /// [`DEFAULT_MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// A client must finish the handshake within this time of connecting (None: no limit). Default
    /// [`DEFAULT_HANDSHAKE_TIMEOUT`].
    pub handshake_timeout: Option<Duration>,
    /// A connection with no request for this long is closed (None, the default: never).
    pub idle_timeout: Option<Duration>,
    /// After a stop, connections get this long to answer what they have read; replies a client does not read
    /// by then are dropped with the connection. Default [`DEFAULT_SHUTDOWN_TIMEOUT`].
    pub shutdown_timeout: Duration,
    /// TLS ([`tls`]): whether clients must, may or cannot use it, and the certificates. Default off.
    pub tls_mode: TlsMode,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// Whether NBD_OPT_LIST lists the exports. Default true.
    pub list: bool,
    /// The export the empty export name selects. None (the default): the only export when there is one,
    /// else no export (the empty name is then unknown).
    pub default_export: Option<String>,
}

/// Default [`ServerConfig::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default [`ServerConfig::handshake_timeout`] (qemu-nbd's handshake limit).
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`ServerConfig::shutdown_timeout`].
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(10);

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

    /// Sets [`ServerConfig::max_connections`] (at least 1).
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Sets [`ServerConfig::handshake_timeout`].
    pub fn with_handshake_timeout(mut self, d: Option<Duration>) -> Self {
        self.handshake_timeout = d;
        self
    }

    /// Sets [`ServerConfig::idle_timeout`].
    pub fn with_idle_timeout(mut self, d: Option<Duration>) -> Self {
        self.idle_timeout = d;
        self
    }

    /// Sets [`ServerConfig::shutdown_timeout`].
    pub fn with_shutdown_timeout(mut self, d: Duration) -> Self {
        self.shutdown_timeout = d;
        self
    }

    /// Sets [`ServerConfig::tls_mode`] and the certificates ([`tls::load`]); a mode other than off needs them.
    pub fn with_tls(mut self, mode: TlsMode, cfg: Option<Arc<rustls::ServerConfig>>) -> Self {
        self.tls_mode = mode;
        self.tls = cfg;
        self
    }

    /// Sets [`ServerConfig::list`].
    pub fn with_list(mut self, list: bool) -> Self {
        self.list = list;
        self
    }

    /// Sets [`ServerConfig::default_export`].
    pub fn with_default_export(mut self, name: Option<String>) -> Self {
        self.default_export = name;
        self
    }
}

impl From<Vec<Export>> for ServerConfig {
    fn from(exports: Vec<Export>) -> Self {
        ServerConfig {
            exports,
            events: None,
            busy_poll: DEFAULT_BUSY_POLL,
            scheduling: Scheduling::default(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            handshake_timeout: Some(DEFAULT_HANDSHAKE_TIMEOUT),
            idle_timeout: None,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            tls_mode: TlsMode::Off,
            tls: None,
            list: true,
            default_export: None,
        }
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

    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }

    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(true),
            Stream::Unix(s) => s.set_nonblocking(true),
        }
    }

    /// Ends both directions: the reader sees EOF, the client sees the connection close.
    fn shutdown(&self) {
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Stream::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
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
    /// With the path to remove at the end (None: a socket someone else made, such as systemd's).
    Unix(UnixListener, Option<PathBuf>),
}

impl Listener {
    /// A new connection and its peer's address.
    fn accept(&self) -> io::Result<(Stream, String)> {
        Ok(match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept()?;
                s.set_nodelay(true)?;
                let s = Stream::Tcp(s);
                s.set_nonblocking()?;
                (s, peer.to_string())
            }
            Listener::Unix(l, _) => {
                let (s, _) = l.accept()?;
                let s = Stream::Unix(s);
                s.set_nonblocking()?;
                (s, "unix".to_string())
            }
        })
    }
}

impl Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Listener::Tcp(l) => l.as_fd(),
            Listener::Unix(l, _) => l.as_fd(),
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Listener::Unix(_, Some(path)) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// A bound NBD server, not yet accepting.
pub struct Server {
    listener: Listener,
    events: Option<EventSink>,
    busy_poll: Duration,
    scheduling: Scheduling,
    limits: conn::Limits,
    /// Swapped whole by [`ServerHandle::set_exports`] and [`ServerHandle::reload_tls`]; each connection takes
    /// the current one when it starts.
    offer: Arc<RwLock<Arc<conn::Offer>>>,
    max_connections: usize,
    stop: Arc<Shutdown>,
}

/// Stops a running server from another thread (see [`Server::stopper`]).
#[derive(Clone)]
pub struct Stopper(Arc<Shutdown>);

impl Stopper {
    /// Asks the server to shut down; [`Server::run`] returns once it has.
    pub fn stop(&self) {
        self.0.trigger();
    }
}

/// A server running on its own thread.
pub struct ServerHandle {
    thread: JoinHandle<io::Result<()>>,
    stop: Stopper,
    local_addr: Option<SocketAddr>,
    offer: Arc<RwLock<Arc<conn::Offer>>>,
}

/// An export taken out of service by [`ServerHandle::set_exports`]: new clients no longer see it; clients in
/// transmission on it go on until they disconnect.
pub struct Retired(Export);

impl Retired {
    /// The export.
    pub fn export(&self) -> &Export {
        &self.0
    }

    /// Connections still in transmission on it.
    pub fn connections(&self) -> usize {
        self.0.users.state.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    /// Waits until its last connection has ended, then flushes its backend (as a server shutdown does). The
    /// export is returned for the caller to drop when done with it: the backend closes (and its file is
    /// released) when the last clone goes.
    pub fn wait(self) -> io::Result<Export> {
        let u = &self.0.users;
        let mut s = u.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.0 > 0 {
            s = u.left.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        drop(s);
        self.0.backend.flush()?;
        Ok(self.0)
    }
}

impl ServerHandle {
    /// Serves new TLS handshakes with `cfg` (rotated certificates); connections already open keep theirs. An
    /// error when the server runs without TLS.
    pub fn reload_tls(&self, cfg: Arc<rustls::ServerConfig>) -> io::Result<()> {
        let mut o = self.offer.write().unwrap_or_else(|p| p.into_inner());
        if o.tls.is_none() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "this server runs without TLS"));
        }
        *o = Arc::new(conn::Offer {
            exports: o.exports.clone(),
            infos: o.infos.clone(),
            policy: o.policy.clone(),
            tls: Some(cfg),
        });
        Ok(())
    }

    /// The exports offered now.
    pub fn exports(&self) -> Vec<Export> {
        self.offer.read().unwrap_or_else(|p| p.into_inner()).exports.clone()
    }

    /// Offers `exports` to new clients from now on, with `default_export` (see
    /// [`ServerConfig::default_export`]) and listing as `list`. An export of the current set is kept (its
    /// clients, cache and counters untouched) when `exports` holds it (a clone from [`ServerHandle::exports`]);
    /// the others are returned as [`Retired`]: hidden from new clients at once, served to their open
    /// connections until those end. A client that was negotiating when its export was removed is disconnected
    /// instead of entering it. On an error (no export, a duplicate or too long name, an unknown default)
    /// nothing changes.
    pub fn set_exports(
        &self,
        exports: Vec<Export>,
        default_export: Option<&str>,
        list: bool,
    ) -> io::Result<Vec<Retired>> {
        let mut o = self.offer.write().unwrap_or_else(|p| p.into_inner());
        let next = conn::Offer::new(exports, default_export, list, o.policy.tls, o.tls.clone())?;
        let retired: Vec<Retired> =
            o.exports.iter().filter(|e| !next.exports.iter().any(|n| n.same(e))).cloned().map(Retired).collect();
        *o = Arc::new(next);
        drop(o);
        for r in &retired {
            r.0.users.state.lock().unwrap_or_else(|p| p.into_inner()).1 = true;
        }
        Ok(retired)
    }

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

/// How long the accept loop backs off after an error such as EMFILE.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

impl Server {
    fn new(listener: Listener, config: ServerConfig) -> io::Result<Server> {
        if config.tls_mode != TlsMode::Off && config.tls.is_none() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "TLS on or required, but no certificates"));
        }
        let tls = config.tls.filter(|_| config.tls_mode != TlsMode::Off);
        let offer =
            conn::Offer::new(config.exports, config.default_export.as_deref(), config.list, config.tls_mode, tls)?;
        Ok(Server {
            listener,
            offer: Arc::new(RwLock::new(Arc::new(offer))),
            events: config.events,
            busy_poll: config.busy_poll,
            scheduling: config.scheduling,
            limits: conn::Limits { handshake: config.handshake_timeout, idle: config.idle_timeout },
            max_connections: config.max_connections.max(1),
            stop: Arc::new(Shutdown::new(config.shutdown_timeout)?),
        })
    }

    /// Listens on a TCP address (port 0 picks a free port; the NBD port is 10809).
    pub fn bind_tcp(addr: impl ToSocketAddrs, config: impl Into<ServerConfig>) -> io::Result<Server> {
        let l = TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        Server::new(Listener::Tcp(l), config.into())
    }

    /// Listens on a Unix socket at `path`, owner-only (0600) (removed again when the server ends).
    pub fn bind_unix(path: impl AsRef<Path>, config: impl Into<ServerConfig>) -> io::Result<Server> {
        Self::bind_unix_mode(path, 0o600, config)
    }

    /// Like [`Server::bind_unix`], with the socket file's mode `mode` (set before the socket listens, whatever
    /// the umask). A socket file nobody listens on (a server killed with SIGKILL leaves one) is replaced; a live
    /// one, or a file that is not a socket, is refused ([`crate::unix::replace_stale`]).
    pub fn bind_unix_mode(path: impl AsRef<Path>, mode: u32, config: impl Into<ServerConfig>) -> io::Result<Server> {
        let path = path.as_ref();
        crate::unix::replace_stale(path)?;
        let l = crate::unix::bind(path, mode)?;
        l.set_nonblocking(true)?;
        Server::new(Listener::Unix(l, Some(path.to_path_buf())), config.into())
    }

    /// Serves on a TCP socket already listening (socket activation: systemd's `LISTEN_FDS`).
    pub fn from_tcp(l: TcpListener, config: impl Into<ServerConfig>) -> io::Result<Server> {
        l.set_nonblocking(true)?;
        Server::new(Listener::Tcp(l), config.into())
    }

    /// Serves on a Unix socket already listening (socket activation); its file is left in place at the end.
    pub fn from_unix(l: UnixListener, config: impl Into<ServerConfig>) -> io::Result<Server> {
        l.set_nonblocking(true)?;
        Server::new(Listener::Unix(l, None), config.into())
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
        let offer = self.offer.clone();
        let thread = thread::Builder::new().name("nbd-accept".into()).spawn(move || self.run())?;
        Ok(ServerHandle { thread, stop, local_addr, offer })
    }

    /// Accepts and serves connections until stopped, then shuts down gracefully (see
    /// [`ServerHandle::shutdown`]).
    pub fn run(self) -> io::Result<()> {
        let mut threads: Vec<JoinHandle<()>> = Vec::new();
        let mut next_id = 0u64;
        loop {
            let (stream, peer) = match self.listener.accept() {
                Ok(s) => s,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    // Sleep until a client connects or the server stops: no periodic wake-up.
                    match self.stop.wait(self.listener.as_fd(), rustix::event::PollFlags::IN, None, false)? {
                        Woken::Ready => continue,
                        _ => break,
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning or dying.
                    tracing::warn!(error = %e, "accept_error");
                    if self.stop.pause(ACCEPT_BACKOFF)? {
                        break;
                    }
                    continue;
                }
            };
            if self.stop.is_set() {
                break;
            }
            threads.retain(|t| !t.is_finished());
            let refuse = |peer: String, reason: String| {
                if let Some(sink) = &self.events {
                    sink(&ConnEvent::Refused { peer, reason });
                }
            };
            if threads.len() >= self.max_connections {
                refuse(peer, format!("{} connections open (--max-connections)", threads.len()));
                drop(stream);
                continue;
            }
            let id = next_id;
            next_id += 1;
            let stop = self.stop.clone();
            let offer = self.offer.read().unwrap_or_else(|p| p.into_inner()).clone();
            let events = self.events.clone();
            let who = peer.clone();
            let (busy_poll, scheduling, limits) = (self.busy_poll, self.scheduling, self.limits);
            let spawned = thread::Builder::new().name(format!("nbd-conn-{id}")).spawn(move || {
                if scheduling == Scheduling::Batch {
                    if let Err(e) = sched::set_batch() {
                        tracing::debug!(conn = id, error = %e, "sched_batch_unavailable");
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
                    offer,
                    &stop,
                    busy_poll,
                    limits,
                    &mut |export, tls| emit(ConnEvent::Opened { id, export: export.to_string(), tls }),
                    &mut requests,
                );
                emit(ConnEvent::Closed { id, requests, error: res.err().map(|e| e.to_string()) });
            });
            match spawned {
                Ok(t) => threads.push(t),
                Err(e) => refuse(who, format!("cannot start a thread for it: {e}")),
            }
        }
        // Each connection sees the stop at its next message boundary, answers what it has in flight (within
        // the shutdown timeout) and ends.
        for t in threads {
            let _ = t.join();
        }
        let mut first_err = None;
        let offer = self.offer.read().unwrap_or_else(|p| p.into_inner()).clone();
        for e in offer.exports.iter() {
            if let Err(err) = e.backend.flush() {
                first_err.get_or_insert(err);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}
