//! [`CrashDev`]: a device in memory that logs every write and sync, so that a test can rebuild what a power
//! loss at any point would have left on it (in the spirit of dm-log-writes and LazyFS).
//!
//! Several devices (a cache device and its origin) and the test's own events share one [`Clock`]: every write
//! and every sync takes the next tick, so "a crash at tick `t`" means the same instant on all of them. The
//! image after a crash at `t` ([`CrashDev::image_at`]) holds every write synced before `t`, and of the writes
//! after the last sync before `t`, any subset chosen by the caller's random source: each write is kept or lost
//! independently (which also models reordering, as a drive with a volatile cache may write them in any order),
//! and a kept write may be torn at [`SECTOR`] boundaries (each sector kept or lost independently).
//!
//! [`Damage`] is the other fault class: media damage found after the crash (a flipped bit, a zeroed block),
//! applied to an image. Its invariant is weaker than a crash's only in that a device may be *refused*: every
//! FLUSHed write reads back, or opening the device fails with the reason.

use crate::dev::Dev;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The unit a torn write is torn at.
pub const SECTOR: usize = 512;

/// The shared tick counter.
#[derive(Clone, Debug, Default)]
pub struct Clock(Arc<AtomicU64>);

impl Clock {
    pub fn new() -> Clock {
        Clock::default()
    }

    /// Takes the next tick.
    pub fn tick(&self) -> u64 {
        self.0.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The last tick taken.
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[derive(Clone, Debug)]
enum Event {
    Write { at: u64, offset: u64, data: Vec<u8> },
    Sync { at: u64 },
}

/// How a crash treats the writes not yet synced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrashMode {
    /// Chance that an unsynced write survives.
    pub keep: f64,
    /// Tear surviving writes of more than one sector (each sector survives with chance `keep`).
    pub tear: bool,
}

impl CrashMode {
    /// Applies a write the crash caught unsynced to `image`: whole with chance `keep`, or, torn, each of its
    /// sectors with chance `keep`.
    fn apply_unsynced(self, image: &mut [u8], e: &Event, random: &mut dyn FnMut() -> f64) {
        if let Event::Write { offset, data, .. } = e {
            if self.tear && data.len() > SECTOR {
                for (i, s) in data.chunks(SECTOR).enumerate() {
                    if random() < self.keep {
                        let o = *offset as usize + i * SECTOR;
                        image[o..o + s.len()].copy_from_slice(s);
                    }
                }
            } else if random() < self.keep {
                apply(image, e);
            }
        }
    }
}

/// Media damage to an image (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Damage {
    /// One bit flipped.
    FlipBit { offset: u64, bit: u8 },
    /// `len` bytes zeroed (a block the medium lost).
    Zero { offset: u64, len: u64 },
}

impl Damage {
    /// A random damage within `[offset, offset+len)`: a flipped bit, or the whole range zeroed; `random`
    /// returns numbers uniform in [0, 1).
    pub fn within(offset: u64, len: u64, random: &mut dyn FnMut() -> f64) -> Damage {
        if random() < 0.5 {
            Damage::Zero { offset, len }
        } else {
            let bit = (random() * (len * 8) as f64) as u64 % (len * 8);
            Damage::FlipBit { offset: offset + bit / 8, bit: (bit % 8) as u8 }
        }
    }

    /// Applies the damage to `image`.
    pub fn apply(self, image: &mut [u8]) {
        match self {
            Damage::FlipBit { offset, bit } => image[offset as usize] ^= 1 << bit,
            Damage::Zero { offset, len } => image[offset as usize..(offset + len) as usize].fill(0),
        }
    }

    /// The byte range it touches.
    pub fn range(self) -> std::ops::Range<u64> {
        match self {
            Damage::FlipBit { offset, .. } => offset..offset + 1,
            Damage::Zero { offset, len } => offset..offset + len,
        }
    }
}

struct State {
    current: Vec<u8>,
    log: Vec<Event>,
}

/// A logged device in memory (see the module docs).
pub struct CrashDev {
    clock: Clock,
    size: usize,
    initial: Vec<u8>,
    state: Mutex<State>,
    /// Fail writes and syncs from this tick on (0: never): a device that dies.
    fail_from: AtomicU64,
}

impl CrashDev {
    /// A zeroed device of `size` bytes.
    pub fn new(size: usize, clock: Clock) -> CrashDev {
        Self::with_contents(vec![0; size], clock)
    }

    /// A device holding `bytes` (already durable).
    pub fn with_contents(bytes: Vec<u8>, clock: Clock) -> CrashDev {
        CrashDev {
            clock,
            size: bytes.len(),
            initial: bytes.clone(),
            state: Mutex::new(State { current: bytes, log: Vec::new() }),
            fail_from: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What reads see now (every write, synced or not).
    pub fn current(&self) -> Vec<u8> {
        self.lock().current.clone()
    }

    /// Makes writes and syncs fail with EIO from now on.
    pub fn fail_writes(&self) {
        self.fail_from.store(self.clock.now().max(1), Ordering::SeqCst);
    }

    /// Ticks of the logged events, in order (crash points worth trying lie between them).
    pub fn ticks(&self) -> Vec<u64> {
        self.lock()
            .log
            .iter()
            .map(|e| match e {
                Event::Write { at, .. } | Event::Sync { at } => *at,
            })
            .collect()
    }

    /// The ticks of the writes that touched `[offset, offset+len)`, each with the bytes it put at `offset`
    /// (up to 16 of them), and the ticks of the syncs: what a failing crash test reports.
    pub fn history(&self, offset: u64, len: u64) -> (Vec<(u64, Vec<u8>)>, Vec<u64>) {
        let st = self.lock();
        let mut writes = Vec::new();
        let mut syncs = Vec::new();
        for e in &st.log {
            match e {
                Event::Write { at, offset: o, data } if *o < offset + len && offset < o + data.len() as u64 => {
                    let from = offset.saturating_sub(*o) as usize;
                    writes.push((*at, data[from..(from + 16).min(data.len())].to_vec()));
                }
                Event::Sync { at } => syncs.push(*at),
                _ => {}
            }
        }
        (writes, syncs)
    }

    /// The device after a power loss just before tick `t` (events at ticks `< t` happened); `random` returns
    /// numbers uniform in [0, 1).
    pub fn image_at(&self, t: u64, mode: CrashMode, random: &mut dyn FnMut() -> f64) -> Vec<u8> {
        let st = self.lock();
        let mut image = self.initial.clone();
        let mut pending: Vec<&Event> = Vec::new();
        for e in st.log.iter() {
            match e {
                Event::Write { at, .. } if *at < t => pending.push(e),
                Event::Sync { at } if *at < t => {
                    for p in pending.drain(..) {
                        apply(&mut image, p);
                    }
                }
                _ => break,
            }
        }
        for p in pending {
            mode.apply_unsynced(&mut image, p, random);
        }
        image
    }
}

/// Images at increasing crash ticks, built incrementally (see [`CrashDev::replay`]).
pub struct Replay {
    log: Vec<Event>,
    pos: usize,
    durable: Vec<u8>,
    pending: Vec<usize>,
}

impl CrashDev {
    /// A replay of the log as it stands now, for images at non-decreasing ticks.
    pub fn replay(&self) -> Replay {
        Replay { log: self.lock().log.clone(), pos: 0, durable: self.initial.clone(), pending: Vec::new() }
    }
}

impl Replay {
    /// As [`CrashDev::image_at`]; `t` must not be smaller than at the previous call.
    pub fn image_at(&mut self, t: u64, mode: CrashMode, random: &mut dyn FnMut() -> f64) -> Vec<u8> {
        while let Some(e) = self.log.get(self.pos) {
            match e {
                Event::Write { at, .. } if *at < t => self.pending.push(self.pos),
                Event::Sync { at } if *at < t => {
                    for &p in &self.pending {
                        apply(&mut self.durable, &self.log[p]);
                    }
                    self.pending.clear();
                }
                _ => break,
            }
            self.pos += 1;
        }
        let mut image = self.durable.clone();
        for &p in &self.pending {
            mode.apply_unsynced(&mut image, &self.log[p], random);
        }
        image
    }
}

fn apply(image: &mut [u8], e: &Event) {
    if let Event::Write { offset, data, .. } = e {
        let o = *offset as usize;
        image[o..o + data.len()].copy_from_slice(data);
    }
}

impl Dev for CrashDev {
    fn size(&self) -> u64 {
        self.size as u64
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let st = self.lock();
        let o = offset as usize;
        let src = st.current.get(o..o + buf.len()).ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut st = self.lock();
        let at = self.clock.tick();
        let fail = self.fail_from.load(Ordering::SeqCst);
        if fail != 0 && at >= fail {
            return Err(io::Error::from_raw_os_error(5));
        }
        let o = offset as usize;
        let dst = st.current.get_mut(o..o + buf.len()).ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        dst.copy_from_slice(buf);
        st.log.push(Event::Write { at, offset, data: buf.to_vec() });
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut st = self.lock();
        let at = self.clock.tick();
        let fail = self.fail_from.load(Ordering::SeqCst);
        if fail != 0 && at >= fail {
            return Err(io::Error::from_raw_os_error(5));
        }
        st.log.push(Event::Sync { at });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synced_writes_survive_and_unsynced_ones_may_not() {
        let clock = Clock::new();
        let d = CrashDev::new(4096, clock.clone());
        d.write_at(&[1; 1024], 0).unwrap();
        d.sync().unwrap();
        let t_synced = clock.now() + 1;
        d.write_at(&[2; 1024], 1024).unwrap();
        let all = CrashMode { keep: 1.0, tear: false };
        let none = CrashMode { keep: 0.0, tear: false };
        let mut r = || 0.5;
        let img = d.image_at(t_synced, none, &mut r);
        assert!(img[..1024].iter().all(|&b| b == 1));
        assert!(img[1024..2048].iter().all(|&b| b == 0));
        let img = d.image_at(clock.now() + 1, all, &mut r);
        assert!(img[1024..2048].iter().all(|&b| b == 2));
        let img = d.image_at(clock.now() + 1, none, &mut r);
        assert!(img[1024..2048].iter().all(|&b| b == 0), "not synced: lost");
        // Torn: alternate sectors survive.
        let mut flip = false;
        let mut alt = move || {
            flip = !flip;
            if flip {
                0.0
            } else {
                0.99
            }
        };
        let img = d.image_at(clock.now() + 1, CrashMode { keep: 0.5, tear: true }, &mut alt);
        assert!(img[1024..1536].iter().all(|&b| b == 2) && img[1536..2048].iter().all(|&b| b == 0));
        // The incremental replay gives the same images.
        let mut rp = d.replay();
        for t in 1..=clock.now() + 1 {
            for mode in [all, none] {
                assert_eq!(rp.image_at(t, mode, &mut || 0.5), d.image_at(t, mode, &mut || 0.5), "tick {t}");
            }
        }
        // A dead device.
        d.fail_writes();
        assert!(d.write_at(&[3], 0).is_err() && d.sync().is_err());
    }

    #[test]
    fn media_damage_flips_one_bit_or_zeroes_the_range() {
        let mut r = 0.0;
        let mut next = move || {
            r += 0.3;
            r % 1.0
        };
        for _ in 0..20 {
            let mut img = vec![0xffu8; 8192];
            let d = Damage::within(4096, 4096, &mut next);
            d.apply(&mut img);
            let changed: Vec<usize> = (0..img.len()).filter(|&i| img[i] != 0xff).collect();
            match d {
                Damage::FlipBit { offset, bit } => {
                    assert_eq!(changed, vec![offset as usize]);
                    assert_eq!(img[offset as usize], 0xff ^ (1 << bit));
                }
                Damage::Zero { offset, len } => {
                    assert_eq!(changed, (offset as usize..(offset + len) as usize).collect::<Vec<_>>())
                }
            }
            assert!(changed.iter().all(|&i| d.range().contains(&(i as u64)) && i >= 4096));
        }
    }
}
