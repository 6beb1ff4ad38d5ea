//! # blockwell-server
//!
//! The live side of Blockwell. Layers wrap the next one (DESIGN.md convention 5, after nbdkit's filters):
//! a [`backend::Backend`] is anything with `read_at`/`write_at`/`flush`/`trim`/`size`; the file backend, the
//! slow-disk emulator, the RAM cache (driven by `blockwell-core`'s engine) and the content-based cache ([`content`],
//! one cache shared by several exports) are backends over backends; the NBD server ([`nbd`]) serves any backend.

pub mod backend;
pub mod cache;
pub mod claim;
pub mod content;
pub mod control;
pub mod delay;
pub mod file;
pub mod nbd;
pub mod stats;
pub mod tier;
pub mod unix;
