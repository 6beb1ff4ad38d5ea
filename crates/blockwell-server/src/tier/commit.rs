//! Commits: the records the tier queued (slot mappings, dirty bits, frees) made durable together with the data
//! they point to, by [`blockwell_cachedev::Metadata::commit`] (a device sync, the journal write, a sync).
//!
//! Commits are serialized and grouped. Every cache-device data write and every queued record bumps an epoch
//! before the request that made it is answered; a commit covers everything up to the epoch it read when it
//! took the records. A caller that needs its writes durable (FLUSH, FUA) reads the epoch first and returns at
//! once when a commit that started later has already covered it. A background thread commits at least every
//! [`super::TierConfig::commit_interval`] while there is anything to commit.

use super::{eio, Inner};
use crate::backend::Backend;
use blockwell_cachedev::Metadata;
use std::io;
use std::sync::atomic::Ordering;

/// What the commit lock guards.
pub(crate) struct CommitState {
    pub meta: Metadata,
    /// The epoch the last successful commit covered.
    pub committed: u64,
}

impl CommitState {
    pub fn new(meta: Metadata) -> CommitState {
        CommitState { meta, committed: 0 }
    }
}

impl<O: Backend> Inner<O> {
    /// Notes a cache-device write or a record (before the request that made it is answered).
    pub(crate) fn bump(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    /// Makes every write completed and every record queued before the call durable on the cache device, with
    /// the metadata that finds it.
    pub(crate) fn commit(&self) -> io::Result<()> {
        // Records queued without a bump yet (a FREE a request must see durable before it writes the origin)
        // count as a change: without the bump, the check below could find nothing new and skip them.
        if !self.lock().pending.is_empty() {
            self.bump();
        }
        let target = self.epoch.load(Ordering::SeqCst);
        let mut c = self.commit.lock().unwrap_or_else(|e| e.into_inner());
        if c.committed >= target {
            return Ok(());
        }
        let (records, epoch) = {
            let mut st = self.lock();
            let r = std::mem::take(&mut st.pending);
            st.in_commit += r.len();
            (r, self.epoch.load(Ordering::SeqCst))
        };
        // Only the last record of a slot matters within a commit (it is applied whole or not at all): a block
        // written many times between two commits costs one record.
        let res = c.meta.commit(&*self.dev, &last_per_slot(&records));
        let mut st = self.lock();
        st.in_commit -= records.len();
        match res {
            Ok(()) => {
                st.committed(&records);
                c.committed = epoch;
                Ok(())
            }
            Err(e) => {
                st.commit_failed(&records);
                let why = format!("metadata commit failed: {e}");
                st.degraded.get_or_insert(why.clone());
                Err(eio(why))
            }
        }
    }

    /// Commits whenever there is something to commit, at least every commit interval.
    pub(crate) fn committer_loop(&self) {
        loop {
            {
                let g = self.wake_lock.lock().unwrap_or_else(|e| e.into_inner());
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
                let _ = self.wake.wait_timeout(g, self.config.commit_interval);
            }
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            let pending =
                self.epoch.load(Ordering::SeqCst) > self.commit.lock().unwrap_or_else(|e| e.into_inner()).committed;
            if pending {
                // An error is the tier's degraded state; status shows it and FLUSH reports it.
                let _ = self.commit();
            }
        }
    }
}

/// The last record of each slot, in the order of those last records.
fn last_per_slot(records: &[blockwell_cachedev::Record]) -> Vec<blockwell_cachedev::Record> {
    let mut seen = std::collections::HashSet::with_capacity(records.len());
    let mut out: Vec<blockwell_cachedev::Record> =
        records.iter().rev().filter(|r| seen.insert(r.slot)).copied().collect();
    out.reverse();
    out
}
