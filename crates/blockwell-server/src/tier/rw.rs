//! The tier's data paths: read (hits from slots, misses from the origin, promotion), write (write-back into
//! slots; write-through and write-around to the origin first), FLUSH, TRIM and WRITE_ZEROES.

use super::state::{key, State, Use};
use super::{add, eio, Inner};
use crate::backend::Backend;
use crate::cache::copy_range;
use blockwell_cachedev::CacheMode;
use blockwell_core::key::block_span;
use blockwell_core::level::Fate;
use blockwell_core::Op;
use std::io;
use std::sync::atomic::Ordering;

/// What a write does to one block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Into the block's slot, in place.
    InPlace(u32),
    /// Into a new slot for the block.
    Fill(u32),
    /// To the origin only.
    Origin,
    /// Nothing (the origin was written already).
    Skip,
}

/// The step of block `b` that a write in `mode` leaves without a slot: write-back sends it to the origin, after a
/// commit (`need_commit`) when the metadata may still map it; the other modes wrote the origin already.
fn uncached_step(st: &State, b: u64, mode: CacheMode, need_commit: &mut bool) -> Step {
    if mode == CacheMode::WriteBack {
        *need_commit |= st.durably_held.contains_key(&b);
        Step::Origin
    } else {
        Step::Skip
    }
}

/// Runs of consecutive numbers in a sorted list, as (first, count).
fn runs(sorted: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &b in sorted {
        match out.last_mut() {
            Some((f, n)) if *f + *n == b => *n += 1,
            _ => out.push((b, 1)),
        }
    }
    out
}

impl<O: Backend> Inner<O> {
    /// The byte range of `block` that a request `[offset, offset+len)` covers, relative to the block, and
    /// whether that is the whole block (up to the end of the origin).
    fn piece(&self, block: u64, offset: u64, len: u64) -> (usize, usize, bool) {
        let start = block * self.block_size;
        let blen = self.block_len(block) as u64;
        let lo = start.max(offset);
        let hi = (start + blen).min(offset + len);
        ((lo - start) as usize, (hi - start) as usize, lo == start && hi == start + blen)
    }

    /// Reads whole blocks `first..first+n` from the origin (the last one short at the end of the origin).
    fn read_origin_blocks(&self, first: u64, n: u64) -> io::Result<Vec<u8>> {
        let start = first * self.block_size;
        let end = ((first + n) * self.block_size).min(self.size);
        let mut data = vec![0u8; (end - start) as usize];
        add(&self.counters.origin_reads, 1);
        add(&self.counters.origin_read_bytes, data.len() as u64);
        self.origin.read_at(&mut data, start).inspect_err(|_| add(&self.counters.origin_read_errors, 1))?;
        Ok(data)
    }

    pub(crate) fn read(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        add(&self.counters.read_requests, 1);
        self.touch_clock();
        let len = buf.len() as u64;
        if len == 0 {
            return Ok(());
        }
        let req = self.request(Op::Read, offset, len);
        let first = req.first.block();
        // (block, slot, crc to check, generation) read from the device; blocks read from the origin; misses
        // to promote.
        let mut hits: Vec<(u64, u32, Option<u32>, u32, bool)> = Vec::new();
        let mut misses: Vec<u64> = Vec::new();
        let mut fetch: Vec<u64> = Vec::new();
        let (token, bypass) = {
            let mut st = self.lock();
            let State { level, plan, .. } = &mut *st;
            level.access(&req, plan);
            let plan = std::mem::take(&mut st.plan);
            self.victims(&mut st, &plan.victims);
            let degraded = st.degraded.is_some();
            for (i, f) in plan.fates.iter().enumerate() {
                let b = first + i as u64;
                match st.slot_of(b) {
                    Some(s) => {
                        if *f == Fate::Fetch && st.level.fetch_done(key(b), plan.token) {
                            // A dirty block evicted and not yet written back: back in the engine, in its slot.
                            st.evicted.remove(&b);
                            st.level.set_dirty(key(b), true);
                        }
                        st.clock = st.clock.wrapping_add(1);
                        let stamp = st.clock;
                        let slot = &mut st.slots[s as usize];
                        slot.readers += 1;
                        slot.stamp = stamp;
                        // While a write is changing the slot, its checksum is not the data's.
                        let crc = if slot.writers == 0 { slot.crc } else { None };
                        hits.push((b, s, crc, slot.gen, slot.adopt));
                    }
                    None => {
                        misses.push(b);
                        if *f == Fate::Fetch {
                            if degraded {
                                st.level.fetch_failed(key(b), plan.token);
                            } else {
                                fetch.push(b);
                            }
                        }
                    }
                }
            }
            let r = (plan.token, plan.bypass);
            st.plan = plan;
            r
        };
        if bypass {
            add(&self.counters.uncached_reads, 1);
        }
        // Hits, from the device.
        let bs = self.block_size as usize;
        let mut block = vec![0u8; bs];
        let mut bad: Vec<(u64, u32, u32)> = Vec::new();
        // Dirty blocks recovered after a crash, read now: (block, slot, generation, the data's checksum).
        let mut adopted: Vec<(u64, u32, u32, u32)> = Vec::new();
        let mut fatal: Option<io::Error> = None;
        for &(b, s, crc, gen, adopt) in &hits {
            let blen = self.block_len(b);
            let data = &mut block[..blen];
            match self.dev.read_at(data, self.geometry.slot_offset(u64::from(s))) {
                Ok(()) if crc.map_or(true, |c| crc32c::crc32c(data) == c) => {
                    add(&self.counters.dev_read_blocks, 1);
                    copy_range(b * self.block_size, data, buf, offset);
                    if adopt {
                        adopted.push((b, s, gen, crc32c::crc32c(data)));
                    }
                }
                Ok(()) if adopt => {
                    // A write the crash interrupted changed the data after its checksum was committed.
                    add(&self.counters.dev_read_blocks, 1);
                    copy_range(b * self.block_size, data, buf, offset);
                    adopted.push((b, s, gen, crc32c::crc32c(data)));
                }
                r => {
                    if r.is_err() {
                        add(&self.counters.dev_read_errors, 1);
                    } else {
                        add(&self.counters.checksum_failures, 1);
                    }
                    bad.push((b, s, gen));
                    // (Copied anyway: if a write overtook the read, these are its bytes.)
                    copy_range(b * self.block_size, data, buf, offset);
                }
            }
        }
        // Clean blocks that failed come from the origin; dirty ones cannot.
        let mut lost: Vec<u64> = Vec::new();
        {
            let mut st = self.lock();
            for &(b, s, gen, crc) in &adopted {
                let slot = &st.slots[s as usize];
                if slot.used == Use::Valid(b) && slot.gen == gen && slot.writers == 0 && slot.adopt {
                    if slot.crc != Some(crc) {
                        st.dirty_written(s, Some(crc));
                    }
                    let slot = &mut st.slots[s as usize];
                    slot.adopt = false;
                    slot.verified = true;
                }
            }
            for &(_, s, _, _, _) in &hits {
                st.unpin_reader(s);
            }
            for &(b, s, gen) in &bad {
                let slot = &st.slots[s as usize];
                if slot.used == Use::Valid(b) && (slot.gen != gen || slot.writers > 0) {
                    // A write into the slot overtook the read: not a device error.
                    continue;
                }
                let dirty = slot.dirty && slot.used == Use::Valid(b);
                if dirty {
                    lost.push(b);
                    st.degraded.get_or_insert_with(|| format!("dirty block {b} cannot be read from the cache device"));
                } else {
                    st.drop_block(b);
                    misses.push(b);
                }
            }
        }
        if !bad.is_empty() || !adopted.is_empty() {
            self.bump();
        }
        if let Some(&b) = lost.first() {
            fatal = Some(eio(format!("dirty block {b} cannot be read from the cache device")));
        }
        // Misses, from the origin, whole blocks.
        misses.sort_unstable();
        let mut fetched: Vec<(u64, Vec<u8>)> = Vec::new();
        let mut failed: Vec<u64> = Vec::new();
        for (b0, n) in runs(&misses) {
            match self.read_origin_blocks(b0, n) {
                Ok(data) => {
                    copy_range(b0 * self.block_size, &data, buf, offset);
                    for (j, chunk) in data.chunks(bs).enumerate() {
                        let b = b0 + j as u64;
                        if fetch.binary_search(&b).is_ok() {
                            fetched.push((b, chunk.to_vec()));
                        }
                    }
                }
                Err(e) => {
                    failed.extend(b0..b0 + n);
                    fatal.get_or_insert(e);
                }
            }
        }
        if !failed.is_empty() {
            let mut st = self.lock();
            for &b in fetch.iter().filter(|b| failed.contains(b)) {
                st.level.fetch_failed(key(b), token);
            }
        }
        if !fetched.is_empty() {
            self.promote(token, fetched);
        }
        match fatal {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Installs blocks read from the origin for a read miss (the engine admitted them) into free slots.
    fn promote(&self, token: u64, blocks: Vec<(u64, Vec<u8>)>) {
        let lo = blocks.iter().map(|b| b.0).min().unwrap_or(0);
        let hi = blocks.iter().map(|b| b.0).max().unwrap_or(0);
        let _stripes = self.stripes.lock(lo, hi - lo + 1);
        if self.ensure_free(blocks.len() as u64).is_err() {
            let mut st = self.lock();
            for (b, _) in &blocks {
                st.level.fetch_failed(key(*b), token);
            }
            return;
        }
        let mut todo: Vec<(u64, u32, Vec<u8>)> = Vec::new();
        {
            let mut st = self.lock();
            for (b, data) in blocks {
                if !st.level.fetch_done(key(b), token) {
                    continue;
                }
                match st.alloc(b) {
                    Some(s) => todo.push((b, s, data)),
                    None => {
                        add(&self.counters.no_room, 1);
                        st.level.invalidate(key(b), 1);
                    }
                }
            }
        }
        let results: Vec<io::Result<()>> =
            todo.iter().map(|(_, s, data)| self.dev.write_at(data, self.geometry.slot_offset(u64::from(*s)))).collect();
        let mut st = self.lock();
        for ((b, s, data), r) in todo.iter().zip(results) {
            match r {
                Ok(()) if st.level.has_data(key(*b)) => {
                    add(&self.counters.dev_write_blocks, 1);
                    add(&self.counters.promotions, 1);
                    st.install(*s, false, crc32c::crc32c(data));
                }
                Ok(()) => st.release(*s), // evicted meanwhile
                Err(e) => {
                    add(&self.counters.dev_write_errors, 1);
                    st.release(*s);
                    st.level.invalidate(key(*b), 1);
                    st.degraded.get_or_insert_with(|| format!("cache device write failed: {e}"));
                }
            }
        }
        drop(st);
        self.bump();
    }

    /// Handles an engine step's victims: clean ones leave, dirty ones wait for their write-back.
    pub(crate) fn victims(&self, st: &mut State, victims: &[blockwell_core::level::Victim]) {
        if victims.is_empty() {
            return;
        }
        let before = st.evicted.len();
        let mapped = victims.iter().filter(|v| st.slot_of(v.key.block()).is_some()).count();
        st.victims(victims);
        let dirty = st.evicted.len() - before;
        add(&self.counters.demotions, (mapped - dirty) as u64);
        if dirty > 0 {
            self.wake.notify_all();
        }
    }

    /// Makes `want` slots free if it can: commits pending frees, writes evicted dirty blocks back (a writer
    /// that finds the cache full of dirty blocks waits for that: foreground throttling).
    pub(crate) fn ensure_free(&self, want: u64) -> io::Result<()> {
        for _ in 0..16 {
            let (free, frees, evicted) = {
                let st = self.lock();
                (st.free.len() as u64, st.pending_frees, st.evicted.len() as u64)
            };
            if free >= want {
                return Ok(());
            }
            if frees > 0 {
                self.commit()?;
                continue;
            }
            if evicted > 0 {
                add(&self.counters.throttled, 1);
                if self.clean_some(evicted, 0)? == 0 {
                    // The cleaner thread is writing them back: wait for its pass to end.
                    let st = self.lock();
                    if st.writing_back.is_empty() {
                        return Ok(());
                    }
                    drop(self.written_back.wait(st).unwrap_or_else(|e| e.into_inner()));
                }
                continue;
            }
            return Ok(());
        }
        Ok(())
    }

    pub(crate) fn write(&self, buf: &[u8], offset: u64, fua: bool) -> io::Result<()> {
        add(&self.counters.write_requests, 1);
        self.touch_clock();
        if buf.is_empty() {
            return Ok(());
        }
        let (first, n) = block_span(offset, buf.len() as u64, self.block_size);
        let _stripes = self.stripes.lock(first, n);
        let mode = self.lock().mode;
        if mode != CacheMode::WriteBack {
            // The origin first (after any write-back of these blocks in flight).
            drop(self.wait_write_backs(self.lock(), |b| b >= first && b < first + n));
            add(&self.counters.origin_writes, 1);
            add(&self.counters.origin_write_bytes, buf.len() as u64);
            if let Err(e) = self.origin.write_at(buf, offset, fua) {
                let mut st = self.lock();
                for b in first..first + n {
                    if !st.slot_of(b).is_some_and(|s| st.slots[s as usize].dirty) {
                        st.drop_block(b);
                    }
                }
                return Err(e);
            }
            if !fua {
                self.origin_written.fetch_add(1, Ordering::SeqCst);
            }
        }
        self.ensure_free(n)?;
        let req = self.request(Op::Write, offset, buf.len() as u64);
        let mut steps: Vec<Step> = Vec::with_capacity(n as usize);
        // Blocks written in place in part: (block, the checksum their data has now, adoptable after a crash).
        let mut partial: Vec<(u64, Option<u32>, bool)> = Vec::new();
        let mut need_commit = false;
        let bypass;
        {
            let mut st = self.lock();
            let State { level, plan, .. } = &mut *st;
            level.access(&req, plan);
            let plan = std::mem::take(&mut st.plan);
            bypass = plan.bypass;
            self.victims(&mut st, &plan.victims);
            let degraded = st.degraded.is_some();
            for (i, f) in plan.fates.iter().enumerate() {
                let b = first + i as u64;
                let (_, _, whole) = self.piece(b, offset, buf.len() as u64);
                let step = match (st.slot_of(b), mode) {
                    (Some(s), CacheMode::WriteBack) if whole || st.slots[s as usize].verified => {
                        // The block's data is in the device (the only current copy if dirty): in place.
                        st.make_dirty(s);
                        if st.level.has_data(key(b)) {
                            st.evicted.remove(&b);
                            st.level.set_dirty(key(b), true);
                            st.level.set_pinned(key(b), true);
                        } else {
                            st.evicted.insert(b);
                        }
                        Step::InPlace(s)
                    }
                    (Some(s), _) if st.slots[s as usize].dirty => {
                        // Left dirty by write-back: the cached copy stays the current one.
                        let held = st.level.has_data(key(b));
                        st.level.set_pinned(key(b), held);
                        Step::InPlace(s)
                    }
                    (Some(_), CacheMode::WriteThrough) if whole && *f == Fate::Update => {
                        let s = st.slot_of(b).expect("checked");
                        st.level.set_pinned(key(b), true);
                        Step::InPlace(s)
                    }
                    (Some(_), m) => {
                        // A partial write to a clean copy (or a copy not yet checked after a crash), or
                        // write-around: drop the copy.
                        st.drop_block(b);
                        uncached_step(&st, b, m, &mut need_commit)
                    }
                    (None, m) if *f == Fate::Allocate && !degraded && m != CacheMode::WriteAround => {
                        match st.alloc(b) {
                            Some(s) => {
                                st.level.set_pinned(key(b), true);
                                Step::Fill(s)
                            }
                            None => {
                                add(&self.counters.no_room, 1);
                                st.level.invalidate(key(b), 1);
                                uncached_step(&st, b, m, &mut need_commit)
                            }
                        }
                    }
                    (None, m) => {
                        if matches!(f, Fate::Allocate | Fate::Update) {
                            st.level.invalidate(key(b), 1);
                        }
                        uncached_step(&st, b, m, &mut need_commit)
                    }
                };
                if let Step::InPlace(s) = step {
                    let slot = &mut st.slots[s as usize];
                    slot.writers += 1;
                    slot.readers += 1;
                    if !whole {
                        partial.push((b, slot.crc, slot.adopt));
                    }
                }
                steps.push(step);
            }
            st.plan = plan;
            let to_origin = |b: u64| b >= first && b < first + n && steps[(b - first) as usize] == Step::Origin;
            drop(self.wait_write_backs(st, to_origin));
        }
        if bypass {
            add(&self.counters.uncached_writes, 1);
        }
        if need_commit {
            add(&self.counters.forced_commits, 1);
            self.commit()?;
        }
        // Data into slots. A block written in part is read first: its data is checked against its checksum (a
        // damaged block is not written over) and the checksum of the result computed.
        let len = buf.len() as u64;
        let mut results: Vec<io::Result<()>> = Vec::with_capacity(steps.len());
        let mut partial_crc: Vec<Option<u32>> = Vec::with_capacity(partial.len());
        let mut damaged: Vec<u64> = Vec::new();
        for (i, step) in steps.iter().enumerate() {
            let b = first + i as u64;
            let (lo, hi, whole) = self.piece(b, offset, len);
            let src = &buf[(b * self.block_size + lo as u64 - offset) as usize
                ..(b * self.block_size + hi as u64 - offset) as usize];
            let r = match step {
                Step::InPlace(s) if !whole => {
                    let (_, want, adopt) = partial[partial_crc.len()];
                    let at = self.geometry.slot_offset(u64::from(*s));
                    let mut data = vec![0u8; self.block_len(b)];
                    match self.dev.read_at(&mut data, at) {
                        Ok(()) if want.is_some_and(|c| c != crc32c::crc32c(&data)) && !adopt => {
                            add(&self.counters.checksum_failures, 1);
                            damaged.push(b);
                            partial_crc.push(want);
                            Err(eio(format!("block {b} failed its checksum on the cache device")))
                        }
                        pre => {
                            if pre.is_err() {
                                add(&self.counters.dev_read_errors, 1);
                            }
                            data[lo..hi].copy_from_slice(src);
                            partial_crc.push(pre.is_ok().then(|| crc32c::crc32c(&data)));
                            add(&self.counters.dev_write_blocks, 1);
                            self.dev.write_at(src, at + lo as u64)
                        }
                    }
                }
                Step::InPlace(s) | Step::Fill(s) => {
                    add(&self.counters.dev_write_blocks, 1);
                    self.dev.write_at(src, self.geometry.slot_offset(u64::from(*s)) + lo as u64)
                }
                _ => Ok(()),
            };
            results.push(r);
        }
        // Origin writes of the blocks that do not go to the device (write-back).
        let mut origin_err = None;
        let to_origin: Vec<u64> =
            steps.iter().enumerate().filter(|(_, s)| **s == Step::Origin).map(|(i, _)| first + i as u64).collect();
        for (b0, k) in runs(&to_origin) {
            let lo = (b0 * self.block_size).max(offset);
            let hi = ((b0 + k) * self.block_size).min(offset + len);
            add(&self.counters.origin_writes, 1);
            add(&self.counters.origin_write_bytes, hi - lo);
            if let Err(e) = self.origin.write_at(&buf[(lo - offset) as usize..(hi - offset) as usize], lo, fua) {
                origin_err.get_or_insert(e);
            } else if !fua {
                self.origin_written.fetch_add(1, Ordering::SeqCst);
            }
        }
        // Finish under the lock.
        let mut dev_err = None;
        {
            let mut st = self.lock();
            let mut partial_crc = partial_crc.into_iter();
            for (i, (step, r)) in steps.iter().zip(results).enumerate() {
                let b = first + i as u64;
                let (lo, hi, whole) = self.piece(b, offset, len);
                let crc = || {
                    let at = (b * self.block_size + lo as u64 - offset) as usize;
                    crc32c::crc32c(&buf[at..at + (hi - lo)])
                };
                match (*step, r) {
                    (Step::InPlace(s), r) => {
                        st.level.set_pinned(key(b), false);
                        let new_crc = if whole { Some(crc()) } else { partial_crc.next().flatten() };
                        if damaged.contains(&b) {
                            // Nothing was written: the block keeps the checksum its damaged data fails.
                            let slot = &mut st.slots[s as usize];
                            slot.writers -= 1;
                            st.unpin_reader(s);
                            let why = format!("dirty block {b} failed its checksum on the cache device");
                            st.degraded.get_or_insert_with(|| why.clone());
                            dev_err.get_or_insert(eio(why));
                            continue;
                        }
                        let slot = &mut st.slots[s as usize];
                        slot.writers -= 1;
                        slot.gen = slot.gen.wrapping_add(1);
                        slot.crc = if r.is_ok() { new_crc } else { None };
                        slot.verified = true;
                        let dirty = slot.dirty;
                        st.unpin_reader(s);
                        match r {
                            Ok(()) if !dirty && st.slots[s as usize].used == Use::Valid(b) => {
                                // Write-through into a clean copy: the metadata gets its new checksum.
                                st.record(s, blockwell_cachedev::Entry::clean(b, crc()));
                            }
                            Ok(()) => st.dirty_written(s, new_crc),
                            Err(e) => {
                                add(&self.counters.dev_write_errors, 1);
                                if !dirty && st.slots[s as usize].used == Use::Valid(b) {
                                    st.drop_block(b);
                                } else if dirty {
                                    st.dirty_written(s, None);
                                }
                                st.degraded.get_or_insert_with(|| format!("cache device write failed: {e}"));
                                dev_err.get_or_insert(e);
                            }
                        }
                    }
                    (Step::Fill(s), Ok(())) => {
                        st.level.set_pinned(key(b), false);
                        let dirty = mode == CacheMode::WriteBack;
                        st.install(s, dirty, crc());
                        if !st.level.has_data(key(b)) {
                            if dirty {
                                st.evicted.insert(b);
                            } else {
                                let s = st.slot_of(b).expect("just installed");
                                st.release(s);
                            }
                        }
                    }
                    (Step::Origin, _) if st.slot_of(b).is_none() => {
                        // A read planned after this write's step may have fetched the block from the origin
                        // before this write reached it: its fill must not be installed.
                        st.level.invalidate(key(b), 1);
                    }
                    (Step::Fill(s), Err(e)) => {
                        st.level.set_pinned(key(b), false);
                        add(&self.counters.dev_write_errors, 1);
                        st.release(s);
                        st.level.invalidate(key(b), 1);
                        st.degraded.get_or_insert_with(|| format!("cache device write failed: {e}"));
                        dev_err.get_or_insert(e);
                    }
                    _ => {}
                }
            }
        }
        self.bump();
        if let Some(e) = dev_err.or(origin_err) {
            return Err(e);
        }
        if fua && mode == CacheMode::WriteBack {
            self.commit()?;
        }
        Ok(())
    }

    /// Before a clean stop: every dirty block recovered after a crash and not read since gets the checksum of
    /// its data as found (or none, if it cannot be read), since after a clean stop a mismatch means damage.
    pub(crate) fn adopt_unread(&self) {
        let unread: Vec<(u64, u32)> = {
            let st = self.lock();
            (st.slots.iter().enumerate())
                .filter_map(|(s, slot)| match slot.used {
                    Use::Valid(b) if slot.adopt => Some((b, s as u32)),
                    _ => None,
                })
                .collect()
        };
        for (b, s) in unread {
            let mut data = vec![0u8; self.block_len(b)];
            let crc = self
                .dev
                .read_at(&mut data, self.geometry.slot_offset(u64::from(s)))
                .ok()
                .map(|()| crc32c::crc32c(&data));
            let mut st = self.lock();
            let slot = &mut st.slots[s as usize];
            if slot.adopt && slot.used == Use::Valid(b) && slot.writers == 0 {
                slot.adopt = false;
                if crc.is_none() || slot.crc != crc {
                    st.dirty_written(s, crc);
                }
            }
        }
    }

    /// FLUSH: the origin (writes that went there), then a commit.
    pub(crate) fn flush_all(&self) -> io::Result<()> {
        self.flush_origin()?;
        self.commit()
    }

    /// Makes every origin write completed before the call durable. Flushes are serialized: a caller that
    /// finds its writes taken by a flush in progress waits for that flush instead of returning at once.
    fn flush_origin(&self) -> io::Result<()> {
        let target = self.origin_written.load(Ordering::SeqCst);
        let mut flushed = self.origin_flushed.lock().unwrap_or_else(|e| e.into_inner());
        if *flushed >= target {
            return Ok(());
        }
        let covers = self.origin_written.load(Ordering::SeqCst);
        self.origin.flush()?;
        *flushed = covers;
        Ok(())
    }

    /// TRIM (`zeroes` false) or WRITE_ZEROES. A dirty copy holds the only current data, and dropping it would
    /// let its FREE record reach the metadata (any commit may take it) before the origin has the new bytes: so
    /// a dirty block stays, zeroed in place for WRITE_ZEROES and untouched for TRIM (whose bytes are then
    /// anything). Clean copies leave the cache. Then the origin does the operation, after a commit when the
    /// metadata might still map a clean copy of one of the blocks.
    pub(crate) fn discard(&self, offset: u64, len: u64, fua: bool, zeroes: bool, may_trim: bool) -> io::Result<()> {
        self.touch_clock();
        let (first, n) = block_span(offset, len, self.block_size);
        let _stripes = self.stripes.lock(first, n);
        let mut zero_in_place: Vec<(u64, u32)> = Vec::new();
        let mut need_commit = false;
        {
            let mut st = self.lock();
            let write_back = st.mode == CacheMode::WriteBack;
            let mut kept: Vec<u64> = Vec::new();
            for b in first..first + n {
                match st.slot_of(b) {
                    Some(s) if st.slots[s as usize].dirty => {
                        kept.push(b);
                        if zeroes {
                            let slot = &mut st.slots[s as usize];
                            slot.writers += 1;
                            slot.readers += 1;
                            let held = st.level.has_data(key(b));
                            st.level.set_pinned(key(b), held);
                            zero_in_place.push((b, s));
                        }
                    }
                    _ => {
                        st.drop_block(b);
                        need_commit |= write_back && st.durably_held.contains_key(&b);
                    }
                }
            }
            drop(self.wait_write_backs(st, |b| b >= first && b < first + n && !kept.contains(&b)));
        }
        self.bump();
        if need_commit {
            add(&self.counters.forced_commits, 1);
            self.commit()?;
        }
        let mut err = None;
        for &(b, s) in &zero_in_place {
            let (lo, hi, _) = self.piece(b, offset, len);
            let r = self.dev.write_at(&vec![0u8; hi - lo], self.geometry.slot_offset(u64::from(s)) + lo as u64);
            let mut st = self.lock();
            st.level.set_pinned(key(b), false);
            let slot = &mut st.slots[s as usize];
            slot.writers -= 1;
            slot.gen = slot.gen.wrapping_add(1);
            // Zeroed whole, the block's checksum is known; zeroed in part, it is not (the rest was not read).
            let whole = lo == 0 && hi == self.block_len(b);
            let crc = (whole && r.is_ok()).then(|| crc32c::crc32c(&vec![0u8; hi]));
            st.dirty_written(s, crc);
            st.unpin_reader(s);
            if let Err(e) = r {
                add(&self.counters.dev_write_errors, 1);
                st.degraded.get_or_insert_with(|| format!("cache device write failed: {e}"));
                err.get_or_insert(e);
            }
        }
        if !zero_in_place.is_empty() {
            self.bump();
        }
        if zeroes {
            add(&self.counters.origin_zero_writes, 1);
            add(&self.counters.origin_bytes_zeroed, len);
        } else {
            add(&self.counters.origin_trims, 1);
            add(&self.counters.origin_bytes_trimmed, len);
        }
        let r = if zeroes {
            self.origin.write_zeroes(offset, len, may_trim, fua)
        } else {
            self.origin.trim(offset, len, fua)
        };
        if !fua {
            self.origin_written.fetch_add(1, Ordering::SeqCst);
        }
        {
            // Reads that fetched these blocks from the origin before this reached it must not install them.
            let mut st = self.lock();
            for b in first..first + n {
                if st.slot_of(b).is_none() {
                    st.level.invalidate(key(b), 1);
                }
            }
        }
        r?;
        match err {
            Some(e) => Err(e),
            None if fua => self.commit(),
            None => Ok(()),
        }
    }
}
