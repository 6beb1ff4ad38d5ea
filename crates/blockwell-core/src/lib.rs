//! # blockwell-core
//!
//! The block-cache engine shared by Blockwell's simulator and live server. A demand access goes in, a plan
//! comes out (hits, misses, blocks to fetch, victims); the engine does no I/O and reads no clock, so the same
//! trace and configuration always give the same result.
//!
//! - [`key`]: block keys (volume, block) and byte-range math.
//! - [`arena`]: index-linked lists over an arena and a handle-only hash index.
//! - [`policy`]: the replacement policies, one module each, and their registry.
//! - [`level`]: [`CacheLevel`], the whole cache step of one level (policy, prefetcher, blocks in flight,
//!   admission, sequential cutoff, dirty and pinned blocks, counters): a request in, a plan out. Every driver
//!   (sim, the live server, the FUSE export) runs this type.
//! - [`cache`]: [`cache::BlockCache`], a policy over a byte budget at a block size (the replacement part of a
//!   level).
//! - [`admission`]: which missed blocks enter a level (`always`, `n-hit:N`, `tinylfu`, `bloom`, `prob:P`, or a
//!   custom rule); [`cutoff`]: the sequential cutoff.
//! - [`sketch`]: frequency sketches and Bloom filters (W-TinyLFU's and the admission filters').
//! - [`prefetch`]: the prefetchers (observe demand requests, propose block ranges), one module each.
//! - [`cluster`]: merges block fetches into device requests.
//! - [`dedup`]: content-based caching (seed 003): one copy per content, shared by addresses, Table 1 counters.
//! - [`redcap`]: the REDCAP segment cache and its activation controller.
//! - [`stats`]: block- and request-level counters split by reads and writes.

pub mod admission;
pub mod arena;
pub mod cache;
pub(crate) mod cacheline;
pub mod cleaner;
pub mod cluster;
pub mod cutoff;
pub mod dedup;
pub mod key;
pub(crate) mod lehmer;
pub mod level;
pub mod policy;
pub mod prefetch;
pub mod redcap;
pub mod sketch;
pub mod spec;
pub mod stats;
pub mod typed;

pub use cache::{BlockCache, CacheConfig, CacheError, Op, Plan};
pub use key::BlockKey;
pub use level::{CacheLevel, Fate, LevelConfig, Request, StepPlan, Victim, WritePolicy};
pub use policy::{Access, DynPolicy, Evicted, Outcome, Policy, PolicyKind, PolicySpec, Preset};
pub use stats::Stats;
