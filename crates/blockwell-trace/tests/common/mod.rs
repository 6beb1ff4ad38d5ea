//! Helpers shared by the integration tests.
#![allow(dead_code)]

use blockwell_trace::{open, Format, ReaderOptions, Request, TraceError, TraceReader};
use std::io::Write;
use std::path::{Path, PathBuf};

pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).expect("write test file");
    p
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).expect("gzip");
    e.finish().expect("gzip")
}

pub fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::stream::encode_all(bytes, 3).expect("zstd")
}

/// Every request of a reader, or the first error.
pub fn drain(r: &mut dyn TraceReader) -> Result<Vec<Request>, TraceError> {
    let mut out = Vec::new();
    while let Some(q) = r.next_request()? {
        out.push(q);
    }
    Ok(out)
}

/// Reads `text` as `format` (None: detect) from a file called `name` in `dir`.
pub fn read_as(
    dir: &Path,
    name: &str,
    text: &[u8],
    format: Option<Format>,
    opts: &ReaderOptions,
) -> (Result<Vec<Request>, TraceError>, Vec<String>, PathBuf) {
    let p = write_file(dir, name, text);
    match open(&p, format, opts) {
        Ok(mut r) => {
            let res = drain(&mut *r);
            (res, r.volumes().to_vec(), p)
        }
        Err(e) => (Err(e), Vec::new(), p),
    }
}

/// The display of the error reading `text` as `format`, with the file path replaced by `FILE`.
pub fn error_of(dir: &Path, text: &str, format: Format) -> String {
    let (res, _, p) = read_as(dir, "t.txt", text.as_bytes(), Some(format), &ReaderOptions::default());
    match res {
        Ok(v) => panic!("expected an error, read {} requests", v.len()),
        Err(e) => e.to_string().replace(&p.display().to_string(), "FILE"),
    }
}

/// A small deterministic generator (xorshift64*).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}
