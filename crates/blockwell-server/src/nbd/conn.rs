//! One client connection: handshake I/O, then the transmission loop.
//!
//! Transmission follows nbdkit's thread model: a connection has up to [`MAX_WORKERS`] worker threads; a worker
//! takes the (buffered) read half, reads one request with its WRITE payload, lets the read half go, serves the
//! request and writes the reply whole under a mutex on the write half. So replies go out in any order, a slow
//! request never holds up the next one, and at queue depth 1 one thread does everything with no hand-off. A
//! new worker starts only when all started workers are busy serving. In-flight requests are bounded by the
//! number of workers, and the bytes of READ, WRITE and CACHE requests in flight by [`MAX_IN_FLIGHT_BYTES`]
//! ([`Budget`]): when the budget is full the connection reads no more requests, so a client that floods
//! requests without reading its replies holds at most that much. A connection's memory outside the cache is
//! then at most about twice the budget (a read copies from the backend's buffer into its reply) plus the
//! reply buffers its workers keep ([`KEEP_BUFFER`] each) and the read buffer.

use std::io::{self, BufReader, Read, Write};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::proto::{self, *};
use super::stop::{Shutdown, Woken};
use super::{Export, Stream};
use crate::backend::{Backend, OnMiss, ReadInto, ReadOutcome};
use rustix::event::PollFlags;

/// Worker threads (and so requests being served) per connection, as nbdkit's default `--threads`.
const MAX_WORKERS: usize = 16;
/// Read buffer of a connection: at high queue depth one `read` returns many request headers.
const READ_BUFFER: usize = 64 << 10;
/// Payload bytes in flight per connection (a single request may exceed it when nothing else is in flight).
const MAX_IN_FLIGHT_BYTES: u64 = 64 << 20;
/// A reply (or a batch of replies) that cannot be written whole within this time (the client stopped
/// reading) ends the connection.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Once a message has begun, the client must send more of it within this time.
const PROGRESS_TIMEOUT: Duration = Duration::from_secs(60);

/// The time limits of a connection's reads (see [`super::ServerConfig`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// From connecting to the end of the handshake.
    pub handshake: Option<Duration>,
    /// Between requests.
    pub idle: Option<Duration>,
}

/// What a connection is offered: the exports, what the handshake allows ([`Policy`]) and the TLS
/// certificates. The server swaps it whole ([`super::ServerHandle::set_exports`],
/// [`super::ServerHandle::reload_tls`]); a connection keeps the one it started with until it enters
/// transmission.
pub(crate) struct Offer {
    pub exports: Vec<Export>,
    pub infos: Vec<ExportInfo>,
    pub policy: Policy,
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl Offer {
    /// Checks and describes `exports`: at least one, names unique and at most 4096 bytes, `default_export`
    /// one of them (None: the only export when there is one).
    pub fn new(
        exports: Vec<Export>,
        default_export: Option<&str>,
        list: bool,
        tls_mode: TlsMode,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> io::Result<Offer> {
        let bad = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
        if exports.is_empty() {
            return Err(bad("an NBD server needs at least one export".into()));
        }
        for (i, e) in exports.iter().enumerate() {
            if e.name.len() > 4096 || exports[..i].iter().any(|o| o.name == e.name) {
                return Err(bad(format!("export name {:?} is duplicated or too long", e.name)));
            }
        }
        let default_export = match default_export {
            None => Policy::for_exports(exports.len()).default_export,
            Some(name) => Some(
                exports
                    .iter()
                    .position(|e| e.name == name)
                    .ok_or_else(|| bad(format!("default export {name:?} is not an export")))?,
            ),
        };
        let infos = exports.iter().map(Export::info).collect();
        Ok(Offer { exports, infos, policy: Policy { tls: tls_mode, list, default_export }, tls })
    }
}

/// Reads exactly `buf`. Returns `Ok(false)` on a clean end: EOF before the first byte, or the server stopping
/// before the first byte of this message was read. A message cut short (EOF, or a stop while it is
/// incomplete) is `UnexpectedEof`; a time limit is `TimedOut`.
fn read_msg(rd: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match rd.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            // The server is stopping (see [`Polled`]).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return if filled == 0 { Ok(false) } else { Err(io::ErrorKind::UnexpectedEof.into()) };
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// [`read_msg`] where a clean end is also an error (the middle of a handshake or of a payload).
fn read_all(rd: &mut impl Read, buf: &mut [u8]) -> io::Result<()> {
    if read_msg(rd, buf)? || buf.is_empty() {
        Ok(())
    } else {
        Err(io::ErrorKind::UnexpectedEof.into())
    }
}

/// Serves one connection to completion. Errors are the client's problem (or a vanished client); they end
/// this connection only.
///
/// When `stop` is triggered, the connection stops reading at the next message boundary, answers what it has
/// in flight (within the shutdown timeout) and returns. `stream` is non-blocking: every wait is a poll on the
/// socket and the stop signal.
///
/// `opened` hears the name of the export the client chose and whether over TLS; `requests` counts the
/// transmission requests read. The connection lets go of `offer` when it enters transmission, holding only
/// its export (counted as open on it until the connection ends, see [`super::Retired`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn serve(
    stream: Stream,
    offer: Arc<Offer>,
    stop: &Arc<Shutdown>,
    busy_poll: Duration,
    limits: Limits,
    opened: &mut dyn FnMut(&str, bool),
    requests: &mut u64,
) -> io::Result<()> {
    let handshake_until = limits.handshake.map(|d| Instant::now() + d);
    let polled = |stream: &Stream| -> io::Result<Polled> {
        Ok(Polled {
            stream: stream.try_clone()?,
            poll: Duration::ZERO,
            spin: false,
            stop: stop.clone(),
            handshake_until,
            idle: limits.idle,
            boundary: false,
        })
    };
    let mut rd = polled(&stream)?;
    let mut wr = ReplyWriter { stream, stop: stop.clone(), until: None, broken: false };
    // The TLS pump, once TLS is up: it ends when the connection's plain stream closes.
    let mut pump = None;
    wr.begin().write_all(&proto::greeting())?;
    let mut n = Negotiation::with_policy(&offer.infos, offer.policy.clone());
    let mut flags = [0; 4];
    if !read_msg(&mut rd, &mut flags)? {
        return Ok(());
    }
    n.client_flags(u32::from_be_bytes(flags)).map_err(invalid)?;
    let mut out = Vec::new();
    let (export, _open) = loop {
        let mut h = [0; OPTION_HEADER_LEN];
        if stop.is_set() || !read_msg(&mut rd, &mut h)? {
            return Ok(());
        }
        let (opt, len) = parse_option_header(&h).map_err(invalid)?;
        let mut data = vec![0; len as usize];
        read_all(&mut rd, &mut data)?;
        out.clear();
        let step = n.option(opt, &data, &mut out).map_err(invalid)?;
        // The connection counts as open on its export before the client hears that it may use it, so removing
        // the export from then on waits for this connection. An export removed while this client negotiated
        // (from the offer before the change) is not entered: the client is disconnected before the go-ahead.
        let entered = match step {
            Step::Transmit { export } => match offer.exports[export].enter() {
                Some(open) => Some(open),
                None => {
                    let name = &offer.exports[export].name;
                    return Err(io::Error::new(io::ErrorKind::NotFound, format!("export {name:?} was removed")));
                }
            },
            _ => None,
        };
        wr.begin().write_all(&out)?;
        match step {
            Step::Continue => {}
            Step::Close => return Ok(()),
            Step::Transmit { export } => break (export, entered),
            Step::StartTls => {
                let cfg = offer.tls.clone().ok_or_else(|| io::Error::other("STARTTLS without certificates"))?;
                let (plain, p) = super::tls::upgrade(wr.stream, cfg, stop, handshake_until)?;
                pump = Some(p);
                rd = polled(&plain)?;
                wr = ReplyWriter { stream: plain, stop: stop.clone(), until: None, broken: false };
                n.tls_started();
            }
        }
    };
    let neg = n.negotiated(export);
    drop(n);
    let e = offer.exports[export].clone();
    drop(offer);
    opened(&e.name, pump.is_some());
    rd.poll = busy_poll;
    rd.handshake_until = None;
    let res = transmission(rd, wr, e.backend.clone(), e.read_only || e.backend.is_read_only(), neg, stop, requests);
    if let Some(p) = pump {
        let _ = p.join();
    }
    res
}

fn invalid(e: ProtocolError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Counts payload bytes in flight.
#[derive(Default)]
struct Budget {
    state: Mutex<BudgetState>,
    cv: Condvar,
}

#[derive(Default)]
struct BudgetState {
    /// Requests holding a charge.
    requests: usize,
    /// Bytes charged.
    bytes: u64,
    /// Threads waiting in [`Budget::acquire`].
    waiters: usize,
}

impl Budget {
    fn acquire(&self, bytes: u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.requests > 0 && s.bytes + bytes > MAX_IN_FLIGHT_BYTES {
            s.waiters += 1;
            s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
            s.waiters -= 1;
        }
        s.requests += 1;
        s.bytes += bytes;
    }
    fn release(&self, bytes: u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.requests -= 1;
        s.bytes -= bytes;
        // A notify is a futex system call even when nobody waits: only wake when someone does.
        if s.waiters > 0 {
            self.cv.notify_all();
        }
    }
}

struct Job {
    req: Request,
    /// When the request was read (in the client's order).
    arrival: Instant,
    /// WRITE payload.
    data: Vec<u8>,
    /// Bytes charged to the budget.
    charged: u64,
}

struct Ctx {
    backend: Arc<dyn Backend>,
    read_only: bool,
    neg: Negotiated,
    size: u64,
    writer: Mutex<ReplyWriter>,
    budget: Budget,
}

impl Ctx {
    /// The connection's write half, for one reply or one batch of replies (its deadline starts now).
    fn out(&self) -> std::sync::MutexGuard<'_, ReplyWriter> {
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        w.begin();
        w
    }
}

/// The write half of a connection. Every reply must be written whole within [`WRITE_TIMEOUT`] of its start,
/// and once the server stops, by the shutdown deadline; a write that fails or runs out of time closes the
/// connection (both directions: the reader ends, and no later reply can follow a partial one).
pub(crate) struct ReplyWriter {
    stream: Stream,
    stop: Arc<Shutdown>,
    until: Option<Instant>,
    broken: bool,
}

impl ReplyWriter {
    /// Starts a reply: its deadline.
    fn begin(&mut self) -> &mut Self {
        self.until = Some(Instant::now() + WRITE_TIMEOUT);
        self
    }

    fn fail(&mut self, e: io::Error) -> io::Error {
        self.broken = true;
        self.stream.shutdown();
        e
    }

    /// Waits until the socket takes more bytes.
    fn wait(&mut self) -> io::Result<()> {
        match self.stop.wait(self.stream.as_fd(), PollFlags::OUT, self.until, true) {
            Ok(Woken::Ready) => Ok(()),
            Ok(_) => {
                Err(self.fail(io::Error::new(io::ErrorKind::TimedOut, "the client did not read its replies in time")))
            }
            Err(e) => Err(self.fail(e)),
        }
    }

    fn closed() -> io::Error {
        io::Error::new(io::ErrorKind::BrokenPipe, "connection closed after a failed reply")
    }
}

impl ReplyWriter {
    /// Runs a write on the non-blocking socket until it takes bytes, waiting whenever it is full.
    fn retry(&mut self, mut f: impl FnMut(&mut Stream) -> io::Result<usize>) -> io::Result<usize> {
        loop {
            if self.broken {
                return Err(Self::closed());
            }
            match f(&mut self.stream) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait()?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.fail(e)),
            }
        }
    }
}

impl Write for ReplyWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.retry(|s| s.write(buf))
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        self.retry(|s| s.write_vectored(bufs))
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The read half of a connection, with adaptive busy polling in transmission (see
/// [`super::ServerConfig::busy_poll`]). It waits for data on the socket and the stop signal together, with the
/// connection's time limits; a stop while waiting is `WouldBlock`, a time limit `TimedOut`.
struct Polled {
    stream: Stream,
    /// How long to poll; zero: never.
    poll: Duration,
    /// The last wait for data ended within `poll`, so the next one polls first.
    spin: bool,
    stop: Arc<Shutdown>,
    /// The end of the handshake's time (None in transmission).
    handshake_until: Option<Instant>,
    /// The idle limit, applied when a request is awaited.
    idle: Option<Duration>,
    /// The next read starts a request (set by the reader; the idle limit applies, not the progress one).
    boundary: bool,
}

impl Read for Polled {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let first = std::mem::take(&mut self.boundary);
        let start = Instant::now();
        if self.spin && !self.poll.is_zero() {
            loop {
                match self.stream.read(buf) {
                    Ok(n) => return Ok(n),
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                    Err(e) => return Err(e),
                }
                if start.elapsed() >= self.poll {
                    break;
                }
                // Let a client that shares this CPU run: it is the one that will send the request.
                thread::yield_now();
            }
        }
        loop {
            match self.stream.read(buf) {
                Ok(n) => {
                    self.spin = n > 0 && start.elapsed() < self.poll;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            let (until, what) = match self.handshake_until {
                Some(t) => (Some(t), "the handshake took too long"),
                None if first => (self.idle.map(|d| Instant::now() + d), "idle timeout"),
                None => (Some(Instant::now() + PROGRESS_TIMEOUT), "the client stalled in the middle of a message"),
            };
            // A message under way in transmission is read to its end (up to the shutdown deadline) when the
            // server stops: its request is then served. A wait for a new message, or in the handshake, ends.
            let finish = !first && self.handshake_until.is_none();
            match self.stop.wait(self.stream.as_fd(), PollFlags::IN, until, finish)? {
                Woken::Ready => {}
                Woken::Stopping => return Err(io::Error::new(io::ErrorKind::WouldBlock, "the server is stopping")),
                Woken::TimedOut => return Err(io::Error::new(io::ErrorKind::TimedOut, what)),
            }
        }
    }
}

/// The read half of the connection, taken in turn by the workers.
struct Reader {
    rd: BufReader<Polled>,
    /// DISC, EOF, a protocol error or the server stopping: no more requests.
    done: bool,
    /// Why reading ended, when it was an error.
    result: io::Result<()>,
    /// Requests at the front of the buffer already passed to [`Backend::hint_reads`].
    hinted: usize,
    /// Scratch for [`Backend::hint_reads`].
    hints: Vec<(u64, u32)>,
}

/// State shared by the workers of one connection.
struct Shared<'a> {
    ctx: Ctx,
    reader: Mutex<Reader>,
    stop: &'a Shutdown,
    /// Worker threads started.
    workers: AtomicUsize,
    /// Workers waiting for or holding the reader (that is, ready to take the next request).
    readers: AtomicUsize,
    /// Requests read (DISC not included).
    requests: AtomicU64,
}

fn transmission(
    rd: Polled,
    wr: ReplyWriter,
    backend: Arc<dyn Backend>,
    read_only: bool,
    neg: Negotiated,
    stop: &Shutdown,
    requests: &mut u64,
) -> io::Result<()> {
    let shared = Shared {
        ctx: Ctx { size: backend.size(), backend, read_only, neg, writer: Mutex::new(wr), budget: Budget::default() },
        reader: Mutex::new(Reader {
            rd: BufReader::with_capacity(READ_BUFFER, rd),
            done: false,
            result: Ok(()),
            hinted: 0,
            hints: Vec::new(),
        }),
        stop,
        workers: AtomicUsize::new(1),
        readers: AtomicUsize::new(0),
        requests: AtomicU64::new(0),
    };
    // This thread is the first worker; the others start when every worker is busy with a request.
    thread::scope(|s| worker(s, &shared));
    let _ = shared.ctx.out().flush();
    *requests = shared.requests.load(Ordering::Relaxed);
    let reader = shared.reader.into_inner().unwrap_or_else(|p| p.into_inner());
    reader.result
}

/// One worker: takes the reader, reads one request (and its WRITE payload), lets go of the reader, serves the
/// request and writes the reply; again until the reader is done. There is no hand-off between threads: at
/// queue depth 1 a single thread reads, serves and replies (nbdkit's model).
fn worker<'scope>(s: &'scope thread::Scope<'scope, '_>, sh: &'scope Shared<'_>) {
    let mut out = ReplyBuf::default();
    let mut batch = ReplyBuf::default();
    loop {
        sh.readers.fetch_add(1, Ordering::SeqCst);
        let job = {
            let mut r = sh.reader.lock().unwrap_or_else(|p| p.into_inner());
            let job = take_request(&mut r, sh, &mut batch);
            // Replies answered inline go out before this worker waits for anything.
            if !batch.is_empty() {
                let _ = sh.ctx.out().write_all(batch.bytes());
                batch.clear();
            }
            job
        };
        let ready = sh.readers.fetch_sub(1, Ordering::SeqCst) - 1;
        let Some(job) = job else { return };
        if ready == 0 && sh.workers.load(Ordering::SeqCst) < MAX_WORKERS {
            sh.workers.fetch_add(1, Ordering::SeqCst);
            // A thread limit (RLIMIT_NPROC, memory) only means fewer workers: the started ones go on serving.
            if let Err(e) = thread::Builder::new().spawn_scoped(s, move || worker(s, sh)) {
                sh.workers.fetch_sub(1, Ordering::SeqCst);
                tracing::debug!(error = %e, "worker_thread_unavailable");
            }
        }
        let charged = job.charged;
        // A failed reply write means the client is gone; the reader notices on its side.
        let _ = execute(&sh.ctx, job, &mut out);
        sh.ctx.budget.release(charged);
    }
}

/// Reads requests while holding the reader, answering those the backend can serve from memory at once
/// ([`Backend::read`] with [`OnMiss::Decline`]) inline into `batch`; returns the first request that needs a worker, or `None`
/// when reading has ended. `batch` is written out whenever no whole request header is already buffered (so a reply
/// never waits for the client's next request) and when it grows past [`BATCH_BYTES`]: at high queue depth one
/// `read` brings many requests and one `write` answers them.
fn take_request(r: &mut Reader, sh: &Shared<'_>, batch: &mut ReplyBuf) -> Option<Job> {
    loop {
        if r.done {
            return None;
        }
        match read_request(&mut r.rd, &sh.ctx, sh.stop) {
            Ok(Some(job)) => {
                sh.requests.fetch_add(1, Ordering::Relaxed);
                if r.hinted == 0 {
                    hint_buffered(r, &sh.ctx, &job.req);
                } else {
                    r.hinted -= 1;
                }
                if !serve_inline(&sh.ctx, &job.req, batch) {
                    return Some(job);
                }
                sh.ctx.budget.release(job.charged);
                if r.rd.buffer().len() < REQUEST_LEN || batch.len() >= BATCH_BYTES {
                    let _ = sh.ctx.out().write_all(batch.bytes());
                    batch.clear();
                }
            }
            Ok(None) => r.done = true,
            Err(e) => {
                r.done = true;
                r.result = Err(e);
            }
        }
    }
}

/// The read buffer must hold at least this many READs before they are passed to [`Backend::hint_reads`]. With
/// fewer, the client is the bottleneck (the server answers each small group as it arrives, its metadata still in
/// cache) and the extra pass only delays the replies: measured with fio at QD32 with client and server on their
/// own CPUs, hinting groups of 2 lowered the IOPS, groups of 8 or more left them unchanged.
const HINT_MIN_READS: usize = 8;

/// Whether `q` is a READ that [`serve_inline`] may answer, and so worth a hint.
fn hintable(ctx: &Ctx, q: &Request) -> bool {
    q.typ == CMD_READ && q.len > 0 && q.len <= INLINE_MAX && check(ctx, q).is_ok()
}

/// Called with the request `cur` just read, when no buffered request has been hinted yet: passes `cur` (if it is
/// a small valid READ) and the small valid READs whole in the read buffer behind it, up to the first other
/// request, to [`Backend::hint_reads`], when they are at least [`HINT_MIN_READS`]; `r.hinted` then counts the
/// buffered ones among them.
fn hint_buffered(r: &mut Reader, ctx: &Ctx, cur: &Request) {
    let buf = r.rd.buffer();
    if buf.len() < (HINT_MIN_READS - 1) * REQUEST_LEN {
        return;
    }
    r.hints.clear();
    if hintable(ctx, cur) {
        r.hints.push((cur.offset, cur.len));
    }
    let current = r.hints.len();
    for h in buf.chunks_exact(REQUEST_LEN) {
        let h: &[u8; REQUEST_LEN] = h.try_into().expect("chunks_exact yields whole headers");
        match parse_request(h) {
            Ok(q) if hintable(ctx, &q) => r.hints.push((q.offset, q.len)),
            _ => break,
        }
    }
    if r.hints.len() >= HINT_MIN_READS {
        ctx.backend.hint_reads(&r.hints);
        r.hinted = r.hints.len() - current;
    }
}

/// A reply buffer that keeps its bytes initialized across uses, so that reading into it never zero-fills
/// (a 1 MiB `resize` costs a memset as long as the copy itself).
#[derive(Default)]
struct ReplyBuf {
    data: Vec<u8>,
    len: usize,
}

impl ReplyBuf {
    fn is_empty(&self) -> bool {
        self.len == 0
    }
    fn len(&self) -> usize {
        self.len
    }
    fn bytes(&self) -> &[u8] {
        &self.data[..self.len]
    }
    fn push(&mut self, b: &[u8]) {
        self.tail(b.len()).copy_from_slice(b);
    }
    /// Extends by `n` bytes (stale contents) and returns them.
    fn tail(&mut self, n: usize) -> &mut [u8] {
        let end = self.len + n;
        if self.data.len() < end {
            self.data.resize(end, 0);
        }
        let start = self.len;
        self.len = end;
        &mut self.data[start..end]
    }
    fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
    /// Empties the buffer; gives back its memory when it grew past [`KEEP_BUFFER`] (one huge read must not pin
    /// 32 MiB per worker).
    fn clear(&mut self) {
        self.len = 0;
        if self.data.len() > KEEP_BUFFER {
            self.data = Vec::new();
        }
    }
}

/// Reads up to this size may be answered inline by the thread that read them.
const INLINE_MAX: u32 = 128 << 10;
/// Inline replies are written out once they reach this many bytes.
const BATCH_BYTES: usize = 256 << 10;

/// Appends the reply to a valid READ of at most [`INLINE_MAX`] bytes to `batch` if the backend serves it from
/// memory at once; otherwise leaves `batch` as it was and returns false.
fn serve_inline(ctx: &Ctx, r: &Request, batch: &mut ReplyBuf) -> bool {
    if r.typ != CMD_READ || r.len == 0 || r.len > INLINE_MAX || check(ctx, r).is_err() {
        return false;
    }
    let mark = batch.len();
    if ctx.neg.structured_replies {
        batch.push(&chunk_header(r.cookie, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 8 + r.len));
        batch.push(&r.offset.to_be_bytes());
    } else {
        batch.push(&simple_header(r.cookie, 0));
    }
    if ctx.backend.read(r.offset, ReadInto::Copy(batch.tail(r.len as usize)), OnMiss::Decline).ok()
        == Some(ReadOutcome::Served)
    {
        true
    } else {
        batch.truncate(mark);
        false
    }
}

/// Reads one request: `Ok(None)` at DISC, EOF or when the server stops; `Err` for a protocol error or a
/// client that vanished mid-message.
fn read_request(rd: &mut BufReader<Polled>, ctx: &Ctx, stop: &Shutdown) -> io::Result<Option<Job>> {
    // Once the server stops, requests already buffered are still served but none is read off the socket (a
    // client that never pauses would otherwise keep a stopping server reading forever).
    let mut h = [0; REQUEST_LEN];
    if stop.is_set() && rd.buffer().len() < REQUEST_LEN {
        return Ok(None);
    }
    rd.get_mut().boundary = rd.buffer().is_empty();
    if !read_msg(rd, &mut h)? {
        return Ok(None);
    }
    let arrival = Instant::now();
    let req = parse_request(&h).map_err(invalid)?;
    if req.typ == CMD_DISC {
        return Ok(None);
    }
    if req.typ == CMD_WRITE && req.len > MAX_PAYLOAD {
        // Too large to accept: consume the payload so the stream stays in sync, then refuse.
        let mut left = u64::from(req.len);
        let mut chunk = vec![0; 1 << 20];
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            read_all(rd, &mut chunk[..n])?;
            left -= n as u64;
        }
        ctx.budget.acquire(0);
        return Ok(Some(Job { req, arrival, data: Vec::new(), charged: 0 }));
    }
    // CACHE is charged as a READ of its length: a backend may hold up to that much data while it prefetches.
    let charged = match req.typ {
        CMD_READ | CMD_WRITE | CMD_CACHE => u64::from(req.len.min(MAX_PAYLOAD)),
        _ => 0,
    };
    ctx.budget.acquire(charged);
    let mut data = Vec::new();
    if req.typ == CMD_WRITE {
        data = vec![0; req.len as usize];
        if let Err(e) = read_all(rd, &mut data) {
            // The client vanished mid-payload: nothing of this write is applied.
            ctx.budget.release(charged);
            return Err(e);
        }
    }
    Ok(Some(Job { req, arrival, data, charged }))
}

/// Maps a backend error to an NBD error value.
fn errno(e: &io::Error) -> u32 {
    match e.kind() {
        io::ErrorKind::PermissionDenied => EPERM,
        io::ErrorKind::OutOfMemory => ENOMEM,
        io::ErrorKind::Unsupported => ENOTSUP,
        // ENOSPC from a file backend (ErrorKind::StorageFull needs Rust 1.83; MSRV is 1.80).
        _ if e.raw_os_error() == Some(28) => ENOSPC,
        _ => EIO,
    }
}

/// Checks a request against the export; `Err(errno)` to refuse it.
fn check(ctx: &Ctx, r: &Request) -> Result<(), u32> {
    let allowed = match r.typ {
        CMD_READ => CMD_FLAG_DF,
        CMD_WRITE => CMD_FLAG_FUA,
        CMD_FLUSH | CMD_CACHE => 0,
        CMD_TRIM => CMD_FLAG_FUA,
        CMD_WRITE_ZEROES => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        CMD_BLOCK_STATUS if ctx.neg.base_allocation => CMD_FLAG_REQ_ONE,
        _ => return Err(EINVAL),
    };
    if r.flags & !allowed != 0 {
        return Err(EINVAL);
    }
    if matches!(r.typ, CMD_READ | CMD_WRITE) && r.len > MAX_PAYLOAD {
        return Err(if r.flags & CMD_FLAG_DF != 0 { EOVERFLOW } else { EINVAL });
    }
    let writes = matches!(r.typ, CMD_WRITE | CMD_TRIM | CMD_WRITE_ZEROES);
    if writes && ctx.read_only {
        return Err(EPERM);
    }
    if r.typ != CMD_FLUSH {
        let end = r.offset.checked_add(u64::from(r.len));
        if end.map_or(true, |end| end > ctx.size) {
            return Err(if writes { ENOSPC } else { EINVAL });
        }
    }
    if r.typ == CMD_BLOCK_STATUS && r.len == 0 {
        return Err(EINVAL);
    }
    Ok(())
}

/// Serves one request and writes its reply. `out` is the worker's reply buffer, reused across requests.
fn execute(ctx: &Ctx, job: Job, out: &mut ReplyBuf) -> io::Result<()> {
    crate::backend::set_arrival(job.arrival);
    let r = job.req;
    if let Err(err) = check(ctx, &r) {
        return send_error(ctx, &r, err, "request refused");
    }
    let b = &*ctx.backend;
    let fua = r.flags & CMD_FLAG_FUA != 0;
    let (off, len) = (r.offset, u64::from(r.len));
    let res = match r.typ {
        CMD_READ => return serve_read(ctx, &r, out),
        CMD_WRITE => b.write_at(&job.data, off, fua),
        CMD_FLUSH => b.flush(),
        CMD_TRIM => b.trim(off, len, fua),
        CMD_CACHE => b.cache(off, len),
        CMD_WRITE_ZEROES => {
            if r.flags & CMD_FLAG_FAST_ZERO != 0 {
                // We cannot promise that zeroing is faster than writing on an arbitrary backend.
                return send_error(ctx, &r, ENOTSUP, "fast zero not available");
            }
            b.write_zeroes(off, len, r.flags & CMD_FLAG_NO_HOLE == 0, fua)
        }
        CMD_BLOCK_STATUS => {
            return match b.block_status(off, len) {
                Some(Ok(ext)) => send_block_status(ctx, &r, &ext),
                Some(Err(e)) => send_error(ctx, &r, errno(&e), &e.to_string()),
                None => send_error(ctx, &r, ENOTSUP, "block status unknown"),
            };
        }
        _ => return send_error(ctx, &r, EINVAL, "unknown command"),
    };
    match res {
        Ok(()) => send_ok(ctx, &r),
        Err(e) => send_error(ctx, &r, errno(&e), &e.to_string()),
    }
}

fn simple_header(cookie: u64, err: u32) -> [u8; 16] {
    let mut h = [0; 16];
    h[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    h[4..8].copy_from_slice(&err.to_be_bytes());
    h[8..16].copy_from_slice(&cookie.to_be_bytes());
    h
}

fn chunk_header(cookie: u64, flags: u16, typ: u16, len: u32) -> [u8; 20] {
    let mut h = [0; 20];
    h[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    h[4..6].copy_from_slice(&flags.to_be_bytes());
    h[6..8].copy_from_slice(&typ.to_be_bytes());
    h[8..16].copy_from_slice(&cookie.to_be_bytes());
    h[16..20].copy_from_slice(&len.to_be_bytes());
    h
}

/// Replies up to this size are written with one `write` (header and payload together: with TCP_NODELAY,
/// separate writes cost a syscall and a packet each).
const COALESCE_BYTES: usize = 256 << 10;

fn send(ctx: &Ctx, parts: &[&[u8]]) -> io::Result<()> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    if parts.len() > 1 && total <= COALESCE_BYTES {
        let mut buf = Vec::with_capacity(total);
        for p in parts {
            buf.extend_from_slice(p);
        }
        let mut w = ctx.out();
        return w.write_all(&buf);
    }
    let mut w = ctx.out();
    for p in parts {
        w.write_all(p)?;
    }
    Ok(())
}

fn send_ok(ctx: &Ctx, r: &Request) -> io::Result<()> {
    if ctx.neg.structured_replies {
        send(ctx, &[&chunk_header(r.cookie, REPLY_FLAG_DONE, REPLY_TYPE_NONE, 0)])
    } else {
        send(ctx, &[&simple_header(r.cookie, 0)])
    }
}

/// Reads the data of a READ straight into the worker's reply buffer, after the reply header, and sends header
/// and data with one `write`.
fn serve_read(ctx: &Ctx, r: &Request, out: &mut ReplyBuf) -> io::Result<()> {
    out.clear();
    if r.len >= SHARE_MIN && serve_read_shared(ctx, r)? {
        return Ok(());
    }
    if ctx.neg.structured_replies {
        if r.len == 0 {
            return send_ok(ctx, r);
        }
        out.push(&chunk_header(r.cookie, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 8 + r.len));
        out.push(&r.offset.to_be_bytes());
    } else {
        out.push(&simple_header(r.cookie, 0));
    }
    let buf = out.tail(r.len as usize);
    if let Err(e) = ctx.backend.read(r.offset, ReadInto::Copy(buf), OnMiss::Fetch) {
        return send_error(ctx, r, errno(&e), &e.to_string());
    }
    let res = ctx.out().write_all(out.bytes());
    out.clear();
    res
}

/// READs of at least this many bytes are first offered to [`Backend::read`] as a [`ReadInto::Share`].
const SHARE_MIN: u32 = 64 << 10;

/// Sends a READ's reply straight from the backend's memory (`writev` of the header and the backend's blocks,
/// no copy in user space) when the backend can share it; `Ok(false)` when it cannot.
fn serve_read_shared(ctx: &Ctx, r: &Request) -> io::Result<bool> {
    let mut parts = Vec::new();
    let into = ReadInto::Share { len: u64::from(r.len), out: &mut parts };
    if ctx.backend.read(r.offset, into, OnMiss::Decline)? != ReadOutcome::Served {
        return Ok(false);
    }
    let mut head = Vec::with_capacity(28);
    if ctx.neg.structured_replies {
        head.extend_from_slice(&chunk_header(r.cookie, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 8 + r.len));
        head.extend_from_slice(&r.offset.to_be_bytes());
    } else {
        head.extend_from_slice(&simple_header(r.cookie, 0));
    }
    let mut slices: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
    slices.push(&head);
    slices.extend(parts.iter().map(|p| p.bytes()));
    let mut w = ctx.out();
    write_all_slices(&mut *w, &slices)?;
    Ok(true)
}

/// `write_all` over several buffers with `writev` (at most [`IOV_BATCH`] at a time), resuming after partial
/// writes.
fn write_all_slices(w: &mut impl Write, slices: &[&[u8]]) -> io::Result<()> {
    let (mut i, mut off) = (0, 0);
    while i < slices.len() {
        let batch: Vec<io::IoSlice<'_>> = std::iter::once(&slices[i][off..])
            .chain(slices[i + 1..].iter().copied())
            .take(IOV_BATCH)
            .map(io::IoSlice::new)
            .collect();
        let mut n = match w.write_vectored(&batch) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        while n > 0 && i < slices.len() {
            let left = slices[i].len() - off;
            if n >= left {
                n -= left;
                i += 1;
                off = 0;
            } else {
                off += n;
                n = 0;
            }
        }
        while i < slices.len() && slices[i].len() == off {
            i += 1;
            off = 0;
        }
    }
    Ok(())
}

/// Buffers per `writev` (Linux's IOV_MAX is 1024).
const IOV_BATCH: usize = 1024;

/// Reply buffers up to this size are kept by a worker for the next request.
const KEEP_BUFFER: usize = 4 << 20;

fn send_error(ctx: &Ctx, r: &Request, err: u32, msg: &str) -> io::Result<()> {
    if ctx.neg.structured_replies {
        let msg = &msg.as_bytes()[..msg.len().min(4096)];
        let h = chunk_header(r.cookie, REPLY_FLAG_DONE, REPLY_TYPE_ERROR, 6 + msg.len() as u32);
        send(ctx, &[&h, &err.to_be_bytes(), &(msg.len() as u16).to_be_bytes(), msg])
    } else {
        send(ctx, &[&simple_header(r.cookie, err)])
    }
}

fn send_block_status(ctx: &Ctx, r: &Request, extents: &[(u64, u32)]) -> io::Result<()> {
    let mut d = BASE_ALLOCATION_ID.to_be_bytes().to_vec();
    let mut covered = 0u64;
    for &(len, flags) in extents {
        if len == 0 || covered >= u64::from(r.len) {
            break;
        }
        // Extent lengths are 32-bit on the wire; the last one may run past the request.
        let l = len.min(u64::from(u32::MAX) & !0xfff).min(u64::from(r.len) - covered).max(1);
        d.extend_from_slice(&(l as u32).to_be_bytes());
        d.extend_from_slice(&flags.to_be_bytes());
        covered += l;
        if r.flags & CMD_FLAG_REQ_ONE != 0 {
            break;
        }
    }
    if d.len() == 4 {
        return send_error(ctx, r, EIO, "backend returned no extents");
    }
    let h = chunk_header(r.cookie, REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, d.len() as u32);
    send(ctx, &[&h, &d])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn budget_blocks_past_the_limit_until_a_release_wakes_it() {
        let b = Budget::default();
        b.acquire(MAX_IN_FLIGHT_BYTES - 4096);
        // A request that fits goes through at once.
        b.acquire(4096);
        let (tx, rx) = mpsc::channel();
        thread::scope(|s| {
            s.spawn(|| {
                b.acquire(1 << 20);
                tx.send(()).unwrap();
                b.release(1 << 20);
            });
            // Over the limit: the third request waits.
            assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
            assert_eq!(b.state.lock().unwrap().waiters, 1);
            b.release(4096);
            // Still over the limit: keeps waiting.
            assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
            b.release(MAX_IN_FLIGHT_BYTES - 4096);
            rx.recv_timeout(Duration::from_secs(10)).expect("the release woke the waiter");
        });
        let s = b.state.lock().unwrap();
        assert_eq!((s.requests, s.bytes, s.waiters), (0, 0, 0));
    }

    #[test]
    fn budget_always_admits_a_lone_request_however_large() {
        let b = Budget::default();
        b.acquire(2 * MAX_IN_FLIGHT_BYTES);
        b.release(2 * MAX_IN_FLIGHT_BYTES);
        let s = b.state.lock().unwrap();
        assert_eq!((s.requests, s.bytes, s.waiters), (0, 0, 0));
    }
}
