//! Stopping the server without polling: a flag for the fast checks and an eventfd that every blocking wait
//! (accept, the next request, a reply the client is slow to read) sleeps on beside its socket. An idle
//! connection or an idle listener costs no CPU, and a stop reaches every waiter at once.
//!
//! After a stop, waits on a socket end at the shutdown deadline ([`Shutdown::deadline`]): a client that stops
//! reading its replies cannot hold the server past `--shutdown-timeout`.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags};

/// What a wait ended with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The socket is ready.
    Ready,
    /// The server is stopping (waits for requests end here; waits to write a reply go on until the deadline).
    Stopping,
    /// The wait's own deadline passed.
    TimedOut,
}

/// The server's stop signal.
pub(crate) struct Shutdown {
    efd: OwnedFd,
    /// When the stop was asked for (set once), and how long connections then get.
    at: OnceLock<Instant>,
    grace: Duration,
}

impl Shutdown {
    pub fn new(grace: Duration) -> io::Result<Shutdown> {
        let efd = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?;
        Ok(Shutdown { efd, at: OnceLock::new(), grace })
    }

    /// Asks every waiter to stop (idempotent).
    pub fn trigger(&self) {
        self.at.get_or_init(Instant::now);
        // The counter stays nonzero (nobody reads it): the eventfd is readable from now on, for every poll.
        let _ = rustix::io::write(&self.efd, &1u64.to_ne_bytes());
    }

    pub fn is_set(&self) -> bool {
        self.at.get().is_some()
    }

    /// When connections must be closed, once stopping: the stop plus the grace period.
    pub fn deadline(&self) -> Option<Instant> {
        self.at.get().map(|&t| t + self.grace)
    }

    /// Waits until `fd` has `events`, the server stops, or `until` passes. Once the server is stopping, the
    /// wait returns [`Woken::Stopping`] at once, unless it must `finish` what it is doing (a reply being
    /// written, a request being read): then it goes on until the shutdown deadline.
    pub fn wait(
        &self,
        fd: BorrowedFd<'_>,
        events: PollFlags,
        until: Option<Instant>,
        finish: bool,
    ) -> io::Result<Woken> {
        loop {
            let stopping = self.is_set();
            if stopping && !finish {
                return Ok(Woken::Stopping);
            }
            let until = [until, self.deadline().filter(|_| stopping)].into_iter().flatten().min();
            let timeout = match until {
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(if stopping { Woken::Stopping } else { Woken::TimedOut });
                    }
                    Some(rustix::time::Timespec { tv_sec: left.as_secs() as i64, tv_nsec: left.subsec_nanos().into() })
                }
                None => None,
            };
            let mut fds = [PollFd::new(&fd, events), PollFd::new(&self.efd, PollFlags::IN)];
            // After the stop the eventfd stays readable: only the socket is waited for then.
            let n = if stopping { 1 } else { 2 };
            match poll(&mut fds[..n], timeout.as_ref()) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            if !fds[0].revents().is_empty() {
                // POLLHUP/POLLERR count as ready: the read or write that follows reports them.
                return Ok(Woken::Ready);
            }
            // Otherwise the stop came or the time is up: both are decided at the top.
        }
    }

    /// Sleeps for `d` unless the server stops first; true when it is stopping.
    pub fn pause(&self, d: Duration) -> io::Result<bool> {
        if self.is_set() {
            return Ok(true);
        }
        let woken = self.wait(self.efd.as_fd(), PollFlags::IN, Some(Instant::now() + d), false)?;
        Ok(woken != Woken::TimedOut)
    }
}
