//! Writing dirty blocks back to the origin: the cleaner thread (the engine's [`blockwell_core::cleaner`]
//! policy sets the pace), the write-back of dirty blocks the engine evicted (always, first), and cleaning
//! everything (FLUSH of the cache, a mode switch, detach).
//!
//! A pass takes the evicted dirty blocks, then the engine's `clean_plan` (dirty blocks in origin order from
//! where the last pass stopped), reads them from their slots, writes them to the origin in runs of
//! consecutive blocks, flushes the origin, and only then marks them clean (a clean record, with the data's
//! checksum) or frees the slots of evicted ones. A block written meanwhile stays dirty: the engine forgets a
//! block's hand-out when it is written, writes in progress pin it, and the slot's generation must not have
//! moved. An origin error keeps the blocks dirty; the next pass retries them.

use super::state::{key, Use};
use super::{add, eio, Inner};
use crate::backend::Backend;
use blockwell_cachedev::Entry;
use blockwell_core::cleaner::CleanerInput;
use blockwell_core::cluster::DeviceRead;
use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// One block of a pass.
struct Pick {
    block: u64,
    slot: u32,
    gen: u32,
    crc: Option<u32>,
    /// Recovered after a crash and not read since: a mismatch is a write the crash interrupted.
    adopt: bool,
}

impl<O: Backend> Inner<O> {
    /// The cleaner thread: a pass every clean interval, and when woken (dirty blocks evicted).
    pub(crate) fn cleaner_loop(&self) {
        let mut backoff = Duration::ZERO;
        loop {
            {
                let g = self.wake_lock.lock().unwrap_or_else(|e| e.into_inner());
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
                let _ = self.wake.wait_timeout(g, self.config.clean_interval.max(backoff));
            }
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            backoff = match self.clean_tick() {
                Ok(_) => Duration::ZERO,
                // The origin failed: the blocks stay dirty; retry less often, up to every 5 s.
                Err(_) => (backoff * 2).clamp(Duration::from_millis(200), Duration::from_secs(5)),
            };
        }
    }

    /// One pass: every evicted dirty block, and the cleaner's quota of the engine's dirty blocks.
    pub(crate) fn clean_tick(&self) -> io::Result<u64> {
        let (dirty, evicted) = {
            let st = self.lock();
            (st.level.dirty_count(), st.evicted.len() as u64)
        };
        let now = self.now_ns();
        let idle = now.saturating_sub(self.last_request.load(Ordering::Relaxed));
        let quota = self.cleaner.lock().unwrap_or_else(|e| e.into_inner()).quota(CleanerInput {
            now_ns: now,
            dirty: dirty + evicted,
            capacity: self.geometry.slots,
            block_size: self.block_size,
            idle_ns: idle,
        });
        let n = self.clean_some(evicted, quota.min(dirty))?;
        self.cleaner.lock().unwrap_or_else(|e| e.into_inner()).written(n);
        Ok(n)
    }

    /// Writes back up to `evicted_max` evicted dirty blocks and up to `quota` of the engine's dirty blocks.
    /// Returns how many became clean (or left, for evicted ones).
    pub(crate) fn clean_some(&self, evicted_max: u64, quota: u64) -> io::Result<u64> {
        let mut picks: Vec<Pick> = Vec::new();
        {
            let mut st = self.lock();
            let evicted: Vec<u64> = st.evicted.iter().copied().take(evicted_max as usize).collect();
            for b in evicted {
                let s = st.slot_of(b).expect("an evicted block keeps its slot");
                let slot = &mut st.slots[s as usize];
                if slot.writers > 0 || slot.cleaning {
                    continue;
                }
                slot.readers += 1;
                slot.cleaning = true;
                picks.push(Pick { block: b, slot: s, gen: slot.gen, crc: slot.crc, adopt: slot.adopt });
                st.writing_back.insert(b);
            }
            if quota > 0 {
                let mut runs: Vec<DeviceRead> = Vec::new();
                st.level.clean_plan(quota, self.config.clean_run_blocks, &mut runs);
                for r in runs {
                    for b in r.first.block()..r.first.block() + r.n {
                        let Some(s) = st.slot_of(b).filter(|&s| !st.slots[s as usize].cleaning) else {
                            st.level.clean_failed(key(b));
                            continue;
                        };
                        let slot = &mut st.slots[s as usize];
                        slot.readers += 1;
                        slot.cleaning = true;
                        picks.push(Pick { block: b, slot: s, gen: slot.gen, crc: slot.crc, adopt: slot.adopt });
                        st.writing_back.insert(b);
                    }
                }
            }
        }
        if picks.is_empty() {
            return Ok(0);
        }
        // A block the metadata may still map, clean, in a slot it has left (a later write put it in a new slot)
        // must not reach the origin before that mapping is gone: recovery would serve the older copy, and the
        // origin's newer bytes would come back once it left. Commit first (the FREE records are queued).
        let held = {
            let st = self.lock();
            picks.iter().any(|p| st.durably_held.get(&p.block).is_some_and(|&s| s != p.slot))
        };
        if held {
            if let Err(e) = self.commit() {
                self.unpick(&picks);
                return Err(e);
            }
        }
        picks.sort_by_key(|p| p.block);
        // Read the slots and write runs of consecutive blocks to the origin.
        let bs = self.block_size as usize;
        let mut data: Vec<Option<Vec<u8>>> = Vec::with_capacity(picks.len());
        let mut mismatch: Vec<usize> = Vec::new();
        for (k, p) in picks.iter().enumerate() {
            let mut d = vec![0u8; self.block_len(p.block)];
            match self.dev.read_at(&mut d, self.geometry.slot_offset(u64::from(p.slot))) {
                Ok(()) if p.adopt || p.crc.map_or(true, |c| crc32c::crc32c(&d) == c) => data.push(Some(d)),
                r => {
                    if r.is_err() {
                        add(&self.counters.dev_read_errors, 1);
                    }
                    mismatch.push(k);
                    data.push(None);
                }
            }
        }
        let mut written = vec![false; picks.len()];
        let mut origin_err = None;
        let mut i = 0;
        while i < picks.len() {
            if data[i].is_none() {
                i += 1;
                continue;
            }
            let mut j = i + 1;
            while j < picks.len()
                && data[j].is_some()
                && picks[j].block == picks[j - 1].block + 1
                && (j - i) < self.config.clean_run_blocks as usize
            {
                j += 1;
            }
            let mut buf = Vec::with_capacity((j - i) * bs);
            for d in &data[i..j] {
                buf.extend_from_slice(d.as_ref().expect("checked"));
            }
            add(&self.counters.clean_writes, 1);
            add(&self.counters.origin_writes, 1);
            add(&self.counters.origin_write_bytes, buf.len() as u64);
            match self.origin.write_at(&buf, picks[i].block * self.block_size, false) {
                Ok(()) => written[i..j].fill(true),
                Err(e) => {
                    add(&self.counters.origin_write_errors, 1);
                    origin_err.get_or_insert(e);
                }
            }
            i = j;
        }
        if written.iter().any(|&w| w) {
            if let Err(e) = self.origin.flush() {
                add(&self.counters.origin_write_errors, 1);
                written.fill(false);
                origin_err.get_or_insert(e);
            }
        }
        let mut done = 0;
        {
            let mut st = self.lock();
            for (k, p) in picks.iter().enumerate() {
                let (b, s) = (p.block, p.slot);
                st.slots[s as usize].cleaning = false;
                st.writing_back.remove(&b);
                let unchanged = {
                    let slot = &st.slots[s as usize];
                    slot.used == Use::Valid(b) && slot.gen == p.gen && slot.writers == 0
                };
                let in_engine = st.level.has_data(key(b)) && st.slot_of(b) == Some(s);
                if written[k] && unchanged && st.evicted.contains(&b) {
                    st.unpin_reader(s);
                    st.release(s);
                    done += 1;
                } else if written[k] && unchanged && in_engine && st.level.clean_done(key(b)) {
                    let crc = crc32c::crc32c(data[k].as_ref().expect("written blocks were read"));
                    let slot = &mut st.slots[s as usize];
                    slot.dirty = false;
                    slot.crc = Some(crc);
                    slot.adopt = false;
                    st.record(s, Entry::clean(b, crc));
                    st.unpin_reader(s);
                    done += 1;
                } else {
                    if in_engine {
                        st.level.clean_failed(key(b));
                    }
                    st.unpin_reader(s);
                }
            }
            // A block that failed its read or its checksum with no write in the way is lost to the device.
            for &k in &mismatch {
                let p = &picks[k];
                let slot = &st.slots[p.slot as usize];
                if slot.used == Use::Valid(p.block) && slot.gen == p.gen && slot.writers == 0 {
                    add(&self.counters.checksum_failures, 1);
                    let b = p.block;
                    st.degraded.get_or_insert_with(|| format!("dirty block {b} cannot be read from the cache device"));
                }
            }
        }
        self.written_back.notify_all();
        add(&self.counters.cleaned_blocks, done);
        self.bump();
        match origin_err {
            Some(e) if done == 0 => Err(e),
            _ => Ok(done),
        }
    }

    /// Gives back what a pass picked, untouched.
    fn unpick(&self, picks: &[Pick]) {
        let mut st = self.lock();
        for p in picks {
            st.slots[p.slot as usize].cleaning = false;
            st.writing_back.remove(&p.block);
            if st.level.has_data(key(p.block)) && st.slot_of(p.block) == Some(p.slot) {
                st.level.clean_failed(key(p.block));
            }
            st.unpin_reader(p.slot);
        }
        drop(st);
        self.written_back.notify_all();
    }

    /// Writes every dirty block back and commits (callers hold `drain`). Fails, saying how many blocks are
    /// left, when the origin keeps refusing them.
    pub(crate) fn clean_all_locked(&self) -> io::Result<u64> {
        let mut total = 0;
        let mut stuck = 0;
        loop {
            let (dirty, evicted) = {
                let st = self.lock();
                (st.level.dirty_count(), st.evicted.len() as u64)
            };
            if dirty + evicted == 0 {
                self.commit()?;
                return Ok(total);
            }
            match self.clean_some(evicted, dirty) {
                Ok(n) if n > 0 => {
                    total += n;
                    stuck = 0;
                }
                r => {
                    stuck += 1;
                    if stuck > 50 {
                        let why = match r {
                            Err(e) => e.to_string(),
                            Ok(_) => "blocks kept being written or could not be read".to_string(),
                        };
                        return Err(eio(format!(
                            "{} dirty block(s) could not be written back: {why}",
                            dirty + evicted
                        )));
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
}
