//! # blockwell-sim
//!
//! Drivers over the engine: [`replay`] feeds one pass of a trace to many (policy × size) caches across all
//! cores; [`tier`] replays seed `004_*`'s two-level write-back caches (RAM over a cache device over the
//! origin, with a cleaner), whose cache-device level [`cachedev`] shares with [`vtime`]'s; [`mrc`] computes
//! miss-ratio curves; [`analysis`] summarizes a trace; [`gen`] generates synthetic workloads; [`gen_content`]
//! adds content digests; [`dedup`] compares offset- and content-based caching (seed 003); [`estier`] models seed
//! `002_*`'s extended-storage tier (DRAM page cache → slower memory tier → disk) and its equivalent-capacity
//! analysis; [`experiments`] runs the seed papers' experiment grids.

pub mod analysis;
pub mod cachedev;
pub mod dedup;
pub mod estier;
pub mod experiments;
pub mod filetrace;
pub mod gen;
pub mod gen_content;
pub mod layout;
pub mod mini;
pub mod mrc;
pub mod replay;
pub mod rows;
pub mod size;
pub mod tier;
pub mod vtime;
pub mod workload;
pub mod workloads;
