//! Shared helpers for the NBD integration tests: an in-process server over MemBackends and tool lookup.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;

use blockwell_server::backend::MemBackend;
use blockwell_server::nbd::{Export, Server, ServerHandle};
use blockwell_testkit::Rng;

pub struct Fixture {
    pub handle: Option<ServerHandle>,
    pub port: u16,
    pub mems: Vec<Arc<MemBackend>>,
}

impl Fixture {
    /// Serves `disk` (rw, `size` bytes) and `ro` (read-only, 1 MiB) on 127.0.0.1, port 0.
    pub fn new(size: usize) -> Fixture {
        let disk = Arc::new(MemBackend::new(size));
        let ro = Arc::new(MemBackend::new(1 << 20));
        let exports = vec![
            Export::new("disk", disk.clone()).description("a memory disk"),
            Export::new("ro", ro.clone()).description("read only").read_only(),
        ];
        let handle = Server::bind_tcp("127.0.0.1:0", exports).unwrap().spawn().unwrap();
        let port = handle.local_addr().unwrap().port();
        Fixture { handle: Some(handle), port, mems: vec![disk, ro] }
    }

    pub fn url(&self, name: &str) -> String {
        format!("nbd://127.0.0.1:{}/{}", self.port, name)
    }

    pub fn shutdown(&mut self) {
        if let Some(h) = self.handle.take() {
            h.shutdown().unwrap();
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The tool's path, or None after printing the skip message.
pub fn tool(name: &str) -> Option<PathBuf> {
    let found =
        std::env::var_os("PATH").and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| p.is_file()));
    if found.is_none() {
        skip(&format!("{name} not installed"));
    }
    found
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Deterministic pseudo-random bytes.
pub fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    (0..n).map(|_| (rng.next() >> 24) as u8).collect()
}

pub use blockwell_testkit::skip;
