//! The worker thread that performs the cache's asynchronous prefetch reads: each job is one device read of
//! the engine's plan; its blocks are installed if the engine still waits for them.

use super::{DeviceRead, Inner};
use crate::backend::Backend;
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

/// What the worker is asked to do.
pub(crate) enum Job {
    /// Read and install a prefetch of the plan with this token.
    Read(DeviceRead, u64),
    /// Say when every job queued before is done.
    Quiesce(SyncSender<()>),
    Stop,
}

/// Starts the worker.
pub(crate) fn start<B: Backend + 'static>(inner: Arc<Inner<B>>, rx: Receiver<Job>) -> std::io::Result<JoinHandle<()>> {
    thread::Builder::new().name("cache-prefetch".into()).spawn(move || run(&inner, rx))
}

fn run<B: Backend>(inner: &Inner<B>, rx: Receiver<Job>) {
    while let Ok(job) = rx.recv() {
        match job {
            Job::Stop => return,
            Job::Quiesce(done) => {
                let _ = done.send(());
            }
            Job::Read(r, token) => {
                crate::stats::Counters::add(&inner.counters.prefetch_blocks_read, r.n);
                // An error drops the blocks; a demand read will try again and report it.
                let _ = inner.fetch(&[r], token, None);
            }
        }
    }
}
