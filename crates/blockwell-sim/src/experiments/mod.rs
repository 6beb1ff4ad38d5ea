//! Experiment grids reproduced from the seed papers, run on the time-aware simulator ([`crate::vtime`]), with
//! their result tables:
//!
//! - [`redcap`]: seed `000_*` Figure 1, the improvement in application time with REDCAP over without, per
//!   benchmark × processes × file layout × REDCAP configuration.
//! - [`policies`]: seed `001_*` Figures 3–6 and Table 5, hit ratio, disk requests and execution time against
//!   cache size for replacement policies with and without kernel read-ahead.
//! - [`dedup`]: seed `003_*` Tables 1 and 3 and Figures 4–5, offset- vs content-based caching across cache
//!   sizes, hash-table fractions, policies and volumes (on the trace replay of [`crate::dedup`]).
//! - [`es_equivalence`]: seed `002_*` Table II, the extended-storage tier capacity equivalent to DRAM per
//!   slowdown factor (on the sequential model of [`crate::estier`]).
//!
//! Every run of the time-aware grids is independent; [`par_map`] spreads them over threads and returns results
//! in grid order, so the output does not depend on the thread count (tested). The command-line front is
//! `blockwell experiment`; the measured tables and their comparison with the papers are in
//! `docs/experiments/`.

pub mod dedup;
pub mod es_equivalence;
pub mod policies;
pub mod redcap;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// What can go wrong building or running a grid.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Workload(#[from] crate::workloads::SpecError),
    #[error(transparent)]
    Disk(#[from] blockwell_disk::SpecError),
    #[error(transparent)]
    Trace(#[from] blockwell_trace::TraceError),
    #[error(transparent)]
    Layout(#[from] crate::layout::LayoutError),
    #[error(transparent)]
    Dedup(#[from] crate::dedup::DedupRunError),
    #[error(transparent)]
    ContentGen(#[from] crate::gen_content::ContentGenError),
    #[error(transparent)]
    Es(#[from] crate::estier::EsError),
    /// An extended-storage workload that cannot be generated; `name` is the name given.
    #[error("{name}: {source}")]
    EsWorkload { name: String, source: crate::estier::EsError },
    #[error("the trace has no block accesses")]
    NoAccesses,
    /// A run failed; `run` names it (benchmark, layout, policy, ...).
    #[error("{run}: {source}")]
    Run { run: String, source: crate::vtime::Error },
    /// A grid option that cannot work (empty list, zero size...); `option` names it.
    #[error("{option}: {message}")]
    Option { option: &'static str, message: String },
}

impl Error {
    /// The option a setting error names ([`Error::Option`]), for fronts that spell options their own way
    /// (`--page-cache` on the command line, `page_cache=` in Python).
    pub fn option(&self) -> Option<&'static str> {
        match self {
            Error::Option { option, .. } => Some(option),
            _ => None,
        }
    }
}

/// Maps an error to [`Error::Option`] naming `option`.
pub(crate) fn bad(option: &'static str) -> impl Fn(&dyn std::fmt::Display) -> Error {
    move |e| Error::Option { option, message: e.to_string() }
}

/// Checks a thread count given as an option (`None`: every core).
pub(crate) fn threads_option(t: Option<usize>) -> Result<usize, Error> {
    match t {
        None => Ok(default_threads()),
        Some(0) => Err(Error::Option { option: "threads", message: "must be at least 1".into() }),
        Some(t) => Ok(t),
    }
}

/// Threads to use by default: the machine's available parallelism.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs `f` on every item with up to `threads` threads (scoped; items are taken in `order`, an execution
/// order over indices, e.g. largest first for load balance) and returns the results in item order.
pub fn par_map<T: Sync, R: Send>(items: &[T], order: &[usize], threads: usize, f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    par_map_progress(items, order, threads, f, &|_, _| {})
}

/// Reports how far a grid is: called with (jobs done, jobs in all) after each job (from worker threads).
pub type Progress<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// [`par_map`], calling `progress` after each item.
pub fn par_map_progress<T: Sync, R: Send>(
    items: &[T],
    order: &[usize],
    threads: usize,
    f: impl Fn(&T) -> R + Sync,
    progress: Progress<'_>,
) -> Vec<R> {
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let threads = threads.clamp(1, items.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let k = next.fetch_add(1, Ordering::Relaxed);
                let Some(&i) = order.get(k) else { break };
                let Some(item) = items.get(i) else { continue };
                let r = f(item);
                if let Ok(mut slot) = slots[i].lock() {
                    *slot = Some(r);
                }
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, items.len());
            });
        }
    });
    // Every index of `order` was run; indices missing from `order` run now, on this thread.
    slots
        .into_iter()
        .zip(items)
        .map(|(slot, item)| match slot.into_inner().ok().flatten() {
            Some(r) => r,
            None => f(item),
        })
        .collect()
}

/// `n` right-aligned in `width`, or `-` when absent.
pub(crate) fn cell(v: Option<String>, width: usize) -> String {
    format!("{:>width$}", v.unwrap_or_else(|| "-".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn par_map_keeps_item_order_whatever_the_execution_order() {
        let items: Vec<u64> = (0..50).collect();
        let order: Vec<usize> = (0..50).rev().collect();
        for threads in [1, 2, 7] {
            assert_eq!(par_map(&items, &order, threads, |x| x * x), items.iter().map(|x| x * x).collect::<Vec<_>>());
        }
        // An order that leaves items out still gives every result.
        assert_eq!(par_map(&items, &[3, 1], 2, |x| x + 1), items.iter().map(|x| x + 1).collect::<Vec<_>>());
        assert!(par_map(&Vec::<u64>::new(), &[], 4, |x| *x).is_empty());
    }
}
