//! NBD over TLS (`NBD_OPT_STARTTLS`) with rustls.
//!
//! After the server acknowledges `NBD_OPT_STARTTLS`, the connection thread runs the TLS handshake on the
//! client's socket (within the handshake time limit), then hands the TLS session to a pump thread that
//! relays between it and one end of a Unix socket pair. The connection goes on with the other end as a plain
//! stream, so option haggling and transmission, with every limit and deadline of `super::conn`, are the same
//! code with or without TLS. The pump holds at most `BUFFER` bytes each way; when the connection closes its
//! end, the pump sends `close_notify` and closes the client's socket within `CLOSE_TIMEOUT`.
//!
//! Certificates follow the layout of qemu's `tls-creds-x509` and nbdkit's `--tls-certificates`: a directory
//! with `server-cert.pem` (the chain, leaf first), `server-key.pem`, and `ca-cert.pem`, against which client
//! certificates are verified when peers must present one (`--tls-verify-peer`: the allow-list is "signed by
//! this CA"). TLS-PSK is not offered: rustls implements no external pre-shared keys (it supports PSKs for
//! session resumption only); use client certificates, or nbdkit's `--tls-psk` in front.

use super::stop::{Shutdown, Woken};
use super::Stream;
use rustix::event::{PollFd, PollFlags};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig, ServerConnection};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Plaintext the pump holds in each direction.
const BUFFER: usize = 256 << 10;
/// Once the connection has closed its end, the client gets this long to take the rest and the close_notify.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors loading the certificates.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {what}")]
    Pem { path: PathBuf, what: String },
    #[error("{path}: no certificate in it")]
    NoCertificate { path: PathBuf },
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// The server's TLS settings from a certificate directory (see the module documentation).
pub fn load(dir: &Path, verify_peer: bool) -> Result<Arc<ServerConfig>, TlsError> {
    let pem = |name: &str| dir.join(name);
    let bad = |path: PathBuf| move |e: rustls::pki_types::pem::Error| TlsError::Pem { path, what: e.to_string() };
    let cert_path = pem("server-cert.pem");
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert_path)
        .map_err(bad(cert_path.clone()))?
        .collect::<Result<_, _>>()
        .map_err(bad(cert_path.clone()))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: cert_path });
    }
    let key_path = pem("server-key.pem");
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(bad(key_path.clone()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = if verify_peer {
        let ca_path = pem("ca-cert.pem");
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(&ca_path).map_err(bad(ca_path.clone()))? {
            roots
                .add(c.map_err(bad(ca_path.clone()))?)
                .map_err(|e| TlsError::Pem { path: ca_path.clone(), what: e.to_string() })?;
        }
        if roots.is_empty() {
            return Err(TlsError::NoCertificate { path: ca_path });
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let cfg =
        builder.with_single_cert(certs, key).map_err(|e| TlsError::Config(format!("{}: {e}", key_path.display())))?;
    Ok(Arc::new(cfg))
}

/// Runs the TLS handshake on the client's non-blocking socket `sock` (by `until`, or until the server stops),
/// then starts the pump. Returns the plain stream the connection goes on with, and the pump thread (it ends
/// once that stream is closed).
pub(crate) fn upgrade(
    mut sock: Stream,
    cfg: Arc<ServerConfig>,
    stop: &Shutdown,
    until: Option<Instant>,
) -> io::Result<(Stream, JoinHandle<()>)> {
    let mut tls = ServerConnection::new(cfg).map_err(io::Error::other)?;
    while tls.is_handshaking() {
        let want = if tls.wants_write() {
            match tls.write_tls(&mut sock) {
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => PollFlags::OUT,
                Err(e) => return Err(e),
            }
        } else {
            match tls.read_tls(&mut sock) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the client left during the TLS handshake",
                    ))
                }
                Ok(_) => {
                    if let Err(e) = tls.process_new_packets() {
                        // Tell the client why (a TLS alert), then give up.
                        let _ = tls.write_tls(&mut sock);
                        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("TLS handshake: {e}")));
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => PollFlags::IN,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        };
        match stop.wait(sock.as_fd(), want, until, false)? {
            Woken::Ready => {}
            Woken::Stopping => return Err(io::Error::new(io::ErrorKind::WouldBlock, "the server is stopping")),
            Woken::TimedOut => return Err(io::Error::new(io::ErrorKind::TimedOut, "the TLS handshake took too long")),
        }
    }
    // The pump hands rustls at most one read of plaintext at a time, and only once the last is sent: no limit
    // of rustls's own may cut that write short.
    tls.set_buffer_limit(None);
    let (inner, outer) = UnixStream::pair()?;
    inner.set_nonblocking(true)?;
    outer.set_nonblocking(true)?;
    let pump = std::thread::Builder::new().name("nbd-tls".into()).spawn(move || {
        let _ = Pump { sock, tls, plain: outer, to_plain: Vec::new() }.run();
    })?;
    Ok((Stream::Unix(inner), pump))
}

/// Relays between the TLS session and the connection's plain stream.
struct Pump {
    sock: Stream,
    tls: ServerConnection,
    plain: UnixStream,
    /// Plaintext from the client not yet taken by the connection.
    to_plain: Vec<u8>,
}

impl Pump {
    fn run(&mut self) -> io::Result<()> {
        let (mut client_done, mut plain_done) = (false, false);
        let mut plain_shut = false;
        let mut closing: Option<Instant> = None;
        let mut buf = vec![0u8; 64 << 10];
        loop {
            let mut moved = false;
            // Client to connection: plaintext rustls already holds (the handshake may have read some), then
            // more records from the socket.
            while !client_done && self.to_plain.len() < BUFFER {
                match self.tls.reader().read(&mut buf) {
                    Ok(0) => client_done = true,
                    Ok(n) => {
                        self.to_plain.extend_from_slice(&buf[..n]);
                        moved = true;
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(_) => client_done = true,
                }
            }
            if !client_done && self.to_plain.len() < BUFFER {
                match self.tls.read_tls(&mut self.sock) {
                    Ok(0) => client_done = true,
                    Ok(_) => {
                        moved = true;
                        if self.tls.process_new_packets().is_err() {
                            let _ = self.tls.write_tls(&mut self.sock);
                            return Ok(());
                        }
                    }
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                    Err(_) => client_done = true,
                }
            }
            if !self.to_plain.is_empty() {
                match self.plain.write(&self.to_plain) {
                    Ok(n) => {
                        self.to_plain.drain(..n);
                        moved = true;
                    }
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                    // The connection is gone: nothing more to relay to it.
                    Err(_) => {
                        self.to_plain.clear();
                        plain_done = true;
                    }
                }
            }
            if client_done && self.to_plain.is_empty() && !plain_shut {
                let _ = self.plain.shutdown(std::net::Shutdown::Write);
                plain_shut = true;
            }
            // Connection to client.
            if !plain_done && !self.tls.wants_write() {
                match self.plain.read(&mut buf) {
                    Ok(0) => plain_done = true,
                    Ok(n) => {
                        self.tls.writer().write_all(&buf[..n])?;
                        moved = true;
                    }
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                    Err(_) => plain_done = true,
                }
            }
            if plain_done && closing.is_none() {
                self.tls.send_close_notify();
                closing = Some(Instant::now() + CLOSE_TIMEOUT);
            }
            while self.tls.wants_write() {
                match self.tls.write_tls(&mut self.sock) {
                    Ok(_) => moved = true,
                    Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => break,
                    Err(_) => return Ok(()),
                }
            }
            if plain_done && !self.tls.wants_write() {
                self.sock.shutdown();
                return Ok(());
            }
            if moved {
                continue;
            }
            if closing.is_some_and(|t| Instant::now() >= t) {
                self.sock.shutdown();
                return Ok(());
            }
            if self.wait(client_done, plain_done, closing)? {
                plain_done = true;
            }
        }
    }

    /// Sleeps until one of the two sockets can move data the pump wants to move, the connection closes its
    /// end (returns true), or `closing` passes. The client's socket is watched only for what the pump wants of
    /// it (a hang-up there shows as a read of 0 or a failed write); the plain one also for its hang-up.
    fn wait(&mut self, client_done: bool, plain_done: bool, closing: Option<Instant>) -> io::Result<bool> {
        let mut sock_ev = PollFlags::empty();
        if !client_done && self.to_plain.len() < BUFFER {
            sock_ev |= PollFlags::IN;
        }
        if self.tls.wants_write() {
            sock_ev |= PollFlags::OUT;
        }
        let mut plain_ev = PollFlags::empty();
        if !plain_done && !self.tls.wants_write() {
            plain_ev |= PollFlags::IN;
        }
        if !self.to_plain.is_empty() {
            plain_ev |= PollFlags::OUT;
        }
        let timeout =
            closing.and_then(|t| rustix::event::Timespec::try_from(t.saturating_duration_since(Instant::now())).ok());
        let mut fds = Vec::with_capacity(2);
        if !plain_done || !plain_ev.is_empty() {
            fds.push(PollFd::from_borrowed_fd(self.plain.as_fd(), plain_ev));
        }
        if !sock_ev.is_empty() {
            fds.push(PollFd::from_borrowed_fd(self.sock.as_fd(), sock_ev));
        }
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        let hung_up = !plain_done && fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR);
        Ok(hung_up)
    }
}
