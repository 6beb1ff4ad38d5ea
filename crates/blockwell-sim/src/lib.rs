//! # blockwell-sim
//!
//! Drivers over the engine: [`replay`] feeds one pass of a trace to many (policy × size) caches across all
//! cores; [`mrc`] computes miss-ratio curves; [`analysis`] summarizes a trace; [`gen`] generates synthetic
//! workloads.

pub mod analysis;
pub mod experiments;
pub mod filetrace;
pub mod gen;
pub mod layout;
pub mod mrc;
pub mod replay;
pub mod vtime;
pub mod workload;
pub mod workloads;
