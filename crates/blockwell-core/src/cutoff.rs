//! The sequential cutoff (bcache's `sequential_cutoff`): a stream of back-to-back requests that reaches the
//! cutoff in bytes bypasses the cache level, so one large copy does not flush it.
//!
//! Up to [`STREAMS`] streams are tracked by where their last request ended (per volume); a request that starts
//! where a stream ended extends it, any other starts a new stream, replacing the least recently used one. The
//! request that makes the run reach the cutoff, and every later one in the run, bypasses.
//!
//! **State**: [`STREAMS`] × 32 B.

/// Streams tracked.
pub const STREAMS: usize = 16;

/// One tracked stream.
#[derive(Clone, Copy, Debug)]
struct Stream {
    volume: u32,
    end: u64,
    bytes: u64,
    last_use: u64,
}

/// Sequential-run detection over byte ranges.
#[derive(Clone, Debug, Default)]
pub struct SequentialCutoff {
    cutoff: u64,
    clock: u64,
    streams: Vec<Stream>,
}

impl SequentialCutoff {
    /// Bypass runs of at least `cutoff` bytes; 0 turns it off.
    pub fn new(cutoff: u64) -> Self {
        SequentialCutoff { cutoff, clock: 0, streams: Vec::new() }
    }

    pub fn cutoff(&self) -> u64 {
        self.cutoff
    }

    /// Whether a request at `offset` of `len` bytes would bypass, without recording it.
    pub fn would_bypass(&self, volume: u32, offset: u64, len: u64) -> bool {
        if self.cutoff == 0 {
            return false;
        }
        let run = self.streams.iter().find(|s| s.volume == volume && s.end == offset).map_or(len, |s| s.bytes + len);
        run >= self.cutoff
    }

    /// Records a request; true when it bypasses.
    pub fn observe(&mut self, volume: u32, offset: u64, len: u64) -> bool {
        if self.cutoff == 0 {
            return false;
        }
        self.clock += 1;
        let now = self.clock;
        let end = offset.saturating_add(len);
        if let Some(s) = self.streams.iter_mut().find(|s| s.volume == volume && s.end == offset) {
            s.end = end;
            s.bytes = s.bytes.saturating_add(len);
            s.last_use = now;
            return s.bytes >= self.cutoff;
        }
        let fresh = Stream { volume, end, bytes: len, last_use: now };
        if self.streams.len() < STREAMS {
            self.streams.push(fresh);
        } else if let Some(oldest) = self.streams.iter_mut().min_by_key(|s| s.last_use) {
            *oldest = fresh;
        }
        len >= self.cutoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_bypasses_from_the_request_that_reaches_the_cutoff() {
        let mut c = SequentialCutoff::new(16384);
        assert!(!c.observe(0, 0, 4096));
        assert!(!c.observe(0, 4096, 8192));
        assert!(c.would_bypass(0, 12288, 4096));
        assert!(!c.would_bypass(1, 12288, 4096), "another volume is another stream");
        assert!(c.observe(0, 12288, 4096), "run reaches 16 KiB");
        assert!(c.observe(0, 16384, 512));
        assert!(!c.observe(0, 1 << 30, 4096), "a jump starts a new stream");
        assert!(!SequentialCutoff::new(0).observe(0, 0, u64::MAX), "0 is off");
    }

    #[test]
    fn the_least_recently_used_stream_is_replaced() {
        let mut c = SequentialCutoff::new(3 * 4096);
        for s in 0..STREAMS as u64 {
            c.observe(0, s << 30, 4096);
        }
        c.observe(0, 1 << 40, 4096); // replaces stream 0
        assert!(!c.observe(0, 4096, 8192), "stream 0 was forgotten");
        assert!(c.observe(0, (15 << 30) + 4096, 8192), "the most recent stream is still tracked");
    }
}
