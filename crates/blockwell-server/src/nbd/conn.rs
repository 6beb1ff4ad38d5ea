//! One client connection: handshake I/O, then the transmission loop.
//!
//! The connection thread reads requests; each request (with its WRITE payload already read) goes to a small
//! pool of worker threads through a bounded channel, so reading the next request never waits for a reply.
//! Replies are written whole under a mutex on the socket's write half, so they may go out in any order.
//! In-flight work is bounded by a count and a byte budget ([`Budget`]).

use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use super::proto::{self, *};
use super::{Export, Stream};
use crate::backend::Backend;

/// Worker threads per connection.
const WORKERS: usize = 4;
/// Requests in flight per connection (queued or executing).
const MAX_IN_FLIGHT: usize = 64;
/// Payload bytes in flight per connection (a single request may exceed it when nothing else is in flight).
const MAX_IN_FLIGHT_BYTES: u64 = 64 << 20;
/// How often a blocked read looks at the server's stop flag.
const STOP_POLL: Duration = Duration::from_millis(50);
/// A reply that cannot be written for this long (the client stopped reading) ends the connection.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Reads exactly `buf`, waking every [`STOP_POLL`] to look at `stop`. Returns `Ok(false)` on a clean end:
/// EOF before the first byte, or the server stopping while no byte of this message has arrived. A message
/// cut short (EOF, or stop while it is incomplete) is `UnexpectedEof`.
fn read_msg(rd: &mut Stream, buf: &mut [u8], stop: &AtomicBool) -> io::Result<bool> {
    let mut filled = 0;
    while filled < buf.len() {
        match rd.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                if stop.load(Ordering::SeqCst) {
                    return if filled == 0 { Ok(false) } else { Err(io::ErrorKind::UnexpectedEof.into()) };
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// [`read_msg`] where a clean end is also an error (the middle of a handshake or of a payload).
fn read_all(rd: &mut Stream, buf: &mut [u8], stop: &AtomicBool) -> io::Result<()> {
    if read_msg(rd, buf, stop)? || buf.is_empty() {
        Ok(())
    } else {
        Err(io::ErrorKind::UnexpectedEof.into())
    }
}

/// Serves one connection to completion. Errors are the client's problem (or a vanished client); they end
/// this connection only.
///
/// When `stop` is set, the connection stops reading at the next message boundary, answers what it has in
/// flight and returns.
pub(crate) fn serve(stream: Stream, exports: &[Export], infos: &[ExportInfo], stop: &AtomicBool) -> io::Result<()> {
    stream.set_timeouts(STOP_POLL, WRITE_TIMEOUT)?;
    let mut rd = stream.try_clone()?;
    let mut wr = stream;
    wr.write_all(&proto::greeting())?;
    let mut n = Negotiation::new(infos);
    let mut flags = [0; 4];
    if !read_msg(&mut rd, &mut flags, stop)? {
        return Ok(());
    }
    n.client_flags(u32::from_be_bytes(flags)).map_err(invalid)?;
    let mut out = Vec::new();
    let export = loop {
        let mut h = [0; OPTION_HEADER_LEN];
        if !read_msg(&mut rd, &mut h, stop)? {
            return Ok(());
        }
        let (opt, len) = parse_option_header(&h).map_err(invalid)?;
        let mut data = vec![0; len as usize];
        read_all(&mut rd, &mut data, stop)?;
        out.clear();
        let step = n.option(opt, &data, &mut out).map_err(invalid)?;
        wr.write_all(&out)?;
        match step {
            Step::Continue => {}
            Step::Close => return Ok(()),
            Step::Transmit { export } => break export,
        }
    };
    let neg = n.negotiated(export);
    let e = &exports[export];
    transmission(rd, wr, e.backend.clone(), e.read_only || e.backend.is_read_only(), neg, stop)
}

fn invalid(e: ProtocolError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// Counts requests and payload bytes in flight.
struct Budget {
    state: Mutex<(usize, u64)>,
    cv: Condvar,
}

impl Budget {
    fn acquire(&self, bytes: u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.0 >= MAX_IN_FLIGHT || (s.0 > 0 && s.1 + bytes > MAX_IN_FLIGHT_BYTES) {
            s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        s.0 += 1;
        s.1 += bytes;
    }
    fn release(&self, bytes: u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 -= 1;
        s.1 -= bytes;
        self.cv.notify_all();
    }
}

struct Job {
    req: Request,
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
    writer: Mutex<Stream>,
    budget: Budget,
}

fn transmission(
    mut rd: Stream,
    wr: Stream,
    backend: Arc<dyn Backend>,
    read_only: bool,
    neg: Negotiated,
    stop: &AtomicBool,
) -> io::Result<()> {
    let ctx = Arc::new(Ctx {
        size: backend.size(),
        backend,
        read_only,
        neg,
        writer: Mutex::new(wr),
        budget: Budget { state: Mutex::new((0, 0)), cv: Condvar::new() },
    });
    let (tx, rx) = sync_channel::<Job>(MAX_IN_FLIGHT);
    let rx = Arc::new(Mutex::new(rx));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (ctx, rx) = (ctx.clone(), rx.clone());
            thread::spawn(move || worker(&ctx, &rx))
        })
        .collect();
    let result = read_loop(&mut rd, &ctx, stop, |job| tx.send(job).is_ok());
    drop(tx);
    for w in workers {
        let _ = w.join();
    }
    let _ = ctx.writer.lock().unwrap_or_else(|p| p.into_inner()).flush();
    result
}

/// Reads requests until DISC, EOF or a protocol error; `dispatch` hands a job to the workers.
fn read_loop(rd: &mut Stream, ctx: &Ctx, stop: &AtomicBool, mut dispatch: impl FnMut(Job) -> bool) -> io::Result<()> {
    loop {
        let mut h = [0; REQUEST_LEN];
        if !read_msg(rd, &mut h, stop)? {
            return Ok(());
        }
        let req = parse_request(&h).map_err(invalid)?;
        if req.typ == CMD_DISC {
            return Ok(());
        }
        let payload = if req.typ == CMD_WRITE { u64::from(req.len) } else { 0 };
        if req.typ == CMD_WRITE && req.len > MAX_PAYLOAD {
            // Too large to accept: consume the payload so the stream stays in sync, then refuse.
            let mut left = payload;
            let mut chunk = vec![0; 1 << 20];
            while left > 0 {
                let n = left.min(chunk.len() as u64) as usize;
                read_all(rd, &mut chunk[..n], stop)?;
                left -= n as u64;
            }
            ctx.budget.acquire(0);
            if !dispatch(Job { req, data: Vec::new(), charged: 0 }) {
                return Ok(());
            }
            continue;
        }
        let charged = match req.typ {
            CMD_READ | CMD_WRITE => u64::from(req.len.min(MAX_PAYLOAD)),
            _ => 0,
        };
        ctx.budget.acquire(charged);
        let mut data = Vec::new();
        if req.typ == CMD_WRITE {
            data = vec![0; req.len as usize];
            if let Err(e) = read_all(rd, &mut data, stop) {
                // The client vanished mid-payload: nothing of this write is applied.
                ctx.budget.release(charged);
                return Err(e);
            }
        }
        if !dispatch(Job { req, data, charged }) {
            return Ok(());
        }
    }
}

fn worker(ctx: &Ctx, rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(|p| p.into_inner());
            rx.recv()
        };
        let Ok(job) = job else { return };
        let charged = job.charged;
        // A failed reply write means the client is gone; the reader notices on its side.
        let _ = execute(ctx, job);
        ctx.budget.release(charged);
    }
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

fn execute(ctx: &Ctx, job: Job) -> io::Result<()> {
    let r = job.req;
    if let Err(err) = check(ctx, &r) {
        return send_error(ctx, &r, err, "request refused");
    }
    let b = &*ctx.backend;
    let fua = r.flags & CMD_FLAG_FUA != 0;
    let (off, len) = (r.offset, u64::from(r.len));
    let res = match r.typ {
        CMD_READ => {
            let mut buf = vec![0; r.len as usize];
            return match b.read_at(&mut buf, off) {
                Ok(()) => send_read(ctx, &r, &buf),
                Err(e) => send_error(ctx, &r, errno(&e), &e.to_string()),
            };
        }
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
        let mut w = ctx.writer.lock().unwrap_or_else(|p| p.into_inner());
        return w.write_all(&buf);
    }
    let mut w = ctx.writer.lock().unwrap_or_else(|p| p.into_inner());
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

fn send_read(ctx: &Ctx, r: &Request, data: &[u8]) -> io::Result<()> {
    if ctx.neg.structured_replies {
        if data.is_empty() {
            return send_ok(ctx, r);
        }
        let h = chunk_header(r.cookie, REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 8 + data.len() as u32);
        send(ctx, &[&h, &r.offset.to_be_bytes(), data])
    } else {
        send(ctx, &[&simple_header(r.cookie, 0), data])
    }
}

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
