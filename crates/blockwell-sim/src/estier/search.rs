//! Equivalent capacity (seed `002_*` Table II) and the break-even price ratio.
//!
//! The paper's reference is its ESDC built from DRAM (slowdown 1) of a given size `C`; for a file memory with
//! slowdown `s` it reads off its Figure 8/11 curves the file-memory capacity `x` that gives the same benchmark
//! performance, and Table II lists `x / C` averaged over ESDC sizes across the 1 GB working set. Here the
//! reference time is `T₁(C)`, the total time of the hierarchy with a slowdown-1 tier of `C` pages, and the
//! search finds the smallest `x` with `Tₛ(x) ≤ T₁(C)`:
//!
//! 1. `x = C` first (at `s = 1` this is the reference itself, so the ratio is exactly 1.0);
//! 2. then doubling `2C, 4C, …` up to `max_blocks` (default: the workload's working set, the most pages live
//!    at once, beyond which a larger tier cannot remove a miss); if even that is slower, there is no equivalent capacity (`None`);
//! 3. then bisection between the last too-slow and the first fast-enough capacity until they are at most
//!    `max(1, tolerance × C)` pages apart (default tolerance 0.005: ratios are exact to ±0.005), returning the
//!    fast-enough end.
//!
//! Bisection assumes `Tₛ` decreases with `x`; with LRU and no page cache the misses do (LRU's stack property),
//! but disk time depends on which pages miss, so `Tₛ` can wiggle by a few disk accesses and the result is then
//! one crossing point, within the wiggle.
//!
//! Break-even price ratio (the paper's §V-B: "if 37% more file memory is needed … file memory that is at least
//! 27% cheaper than DRAM can improve performance"): file memory pays off when its price per bit is at most
//! `1 / ratio` of DRAM's; the required discount is `1 − 1/ratio`.

use super::{simulate, EsConfig, EsError, EsWorkload};
use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Search settings (see the module doc).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SearchConfig {
    /// Stop when the bracket is at most `tolerance × reference` pages wide.
    pub tolerance: f64,
    /// Largest tier capacity tried; `None` = the workload's working set (most pages live at once).
    pub max_blocks: Option<usize>,
    /// Worker threads for [`equivalence_table`] (results do not depend on it).
    pub threads: usize,
}

impl Default for SearchConfig {
    fn default() -> Self {
        SearchConfig { tolerance: 0.005, max_blocks: None, threads: 1 }
    }
}

/// One search result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Equivalence {
    pub slowdown: f64,
    pub reference_blocks: usize,
    pub reference_ns: u64,
    /// Smallest capacity found with time ≤ the reference's; `None` when none up to `max_blocks`.
    pub equivalent_blocks: Option<usize>,
    pub equivalent_ns: Option<u64>,
    pub ratio: Option<f64>,
    /// The too-slow end of the final bracket (at most `max(1, tolerance × reference)` pages below
    /// `equivalent_blocks`); `None` when the reference capacity itself is fast enough.
    pub slower_blocks: Option<usize>,
    /// Simulations run by the search.
    pub evaluations: u32,
}

fn time(base: &EsConfig, w: &EsWorkload, blocks: usize, slowdown: f64) -> Result<u64, EsError> {
    let cfg = EsConfig { es_blocks: blocks, slowdown, ..base.clone() };
    Ok(simulate(&cfg, w)?.total_ns)
}

/// Total time of `base` with a slowdown-1 tier of `blocks` pages: the reference.
pub fn reference_time(base: &EsConfig, w: &EsWorkload, blocks: usize) -> Result<u64, EsError> {
    time(base, w, blocks, 1.0)
}

/// Finds the tier capacity at `slowdown` that matches the time of a slowdown-1 tier of `reference_blocks`
/// (see the module doc). `base` gives everything else (page cache, mode, disk, costs).
pub fn equivalent_capacity(
    base: &EsConfig,
    w: &EsWorkload,
    reference_blocks: usize,
    slowdown: f64,
    search: &SearchConfig,
) -> Result<Equivalence, EsError> {
    if reference_blocks == 0 {
        return Err(EsError::Invalid("reference capacity must be at least one page".into()));
    }
    if !(slowdown.is_finite() && slowdown >= 1.0) {
        return Err(EsError::Invalid(format!("slowdown must be >= 1 (is {slowdown})")));
    }
    if !(search.tolerance.is_finite() && search.tolerance >= 0.0) {
        return Err(EsError::Invalid(format!("tolerance must be >= 0 (is {})", search.tolerance)));
    }
    let c = reference_blocks;
    let reference_ns = reference_time(base, w, c)?;
    let cap = search.max_blocks.unwrap_or(w.working_set as usize).max(c);
    let mut out = Equivalence {
        slowdown,
        reference_blocks,
        reference_ns,
        equivalent_blocks: None,
        equivalent_ns: None,
        ratio: None,
        slower_blocks: None,
        evaluations: 0,
    };
    let mut eval = |x: usize| {
        out.evaluations += 1;
        time(base, w, x, slowdown)
    };
    // The reference capacity itself (always enough at slowdown 1).
    let t_c = eval(c)?;
    if t_c <= reference_ns {
        return Ok(Equivalence { equivalent_blocks: Some(c), equivalent_ns: Some(t_c), ratio: Some(1.0), ..out });
    }
    // Doubling: lo is too slow, (hi, t_hi) fast enough.
    let mut lo = c;
    let (mut hi, mut t_hi) = loop {
        let x = lo.saturating_mul(2).min(cap);
        if x == lo {
            return Ok(out);
        }
        let t = eval(x)?;
        if t <= reference_ns {
            break (x, t);
        }
        lo = x;
    };
    // Bisection.
    let step = ((search.tolerance * c as f64).floor() as usize).max(1);
    while hi - lo > step {
        let mid = lo + (hi - lo) / 2;
        let t = eval(mid)?;
        if t <= reference_ns {
            hi = mid;
            t_hi = t;
        } else {
            lo = mid;
        }
    }
    Ok(Equivalence {
        equivalent_blocks: Some(hi),
        equivalent_ns: Some(t_hi),
        ratio: Some(hi as f64 / c as f64),
        slower_blocks: Some(lo),
        ..out
    })
}

/// One row of the Table II layout: a slowdown, its ratio at each reference size, and their mean.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EqRow {
    pub slowdown: f64,
    pub per_size: Vec<Equivalence>,
    /// Mean ratio over the sizes that have an equivalent capacity (the paper averages over ESDC sizes).
    pub mean_ratio: Option<f64>,
    /// Sizes with an equivalent capacity.
    pub found: usize,
    /// Break-even price of file memory per bit relative to DRAM: `1 / mean_ratio`.
    pub break_even_price: Option<f64>,
    /// Required discount: `1 − 1 / mean_ratio`.
    pub discount: Option<f64>,
}

/// The Table II layout for one workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EsTable {
    pub workload: String,
    pub reference_blocks: Vec<usize>,
    pub rows: Vec<EqRow>,
}

/// Runs [`equivalent_capacity`] for every (slowdown, reference size) pair, on `search.threads` threads; the
/// result does not depend on the thread count.
pub fn equivalence_table(
    base: &EsConfig,
    w: &EsWorkload,
    reference_blocks: &[usize],
    slowdowns: &[f64],
    search: &SearchConfig,
) -> Result<EsTable, EsError> {
    let jobs: Vec<(usize, usize)> =
        (0..slowdowns.len()).flat_map(|i| (0..reference_blocks.len()).map(move |j| (i, j))).collect();
    let results: Mutex<Vec<Option<Result<Equivalence, EsError>>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..search.threads.clamp(1, jobs.len().max(1)) {
            s.spawn(|| loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(i, j)) = jobs.get(n) else { break };
                let r = equivalent_capacity(base, w, reference_blocks[j], slowdowns[i], search);
                if let Ok(mut v) = results.lock() {
                    v[n] = Some(r);
                }
            });
        }
    });
    let results = results.into_inner().map_err(|_| EsError::Invalid("a search thread panicked".into()))?;
    let mut flat = Vec::with_capacity(jobs.len());
    for r in results {
        flat.push(r.ok_or_else(|| EsError::Invalid("a search job did not run".into()))??);
    }
    let mut it = flat.into_iter();
    let rows = slowdowns
        .iter()
        .map(|&s| {
            let per_size: Vec<Equivalence> = it.by_ref().take(reference_blocks.len()).collect();
            let ratios: Vec<f64> = per_size.iter().filter_map(|e| e.ratio).collect();
            let mean = (!ratios.is_empty()).then(|| ratios.iter().sum::<f64>() / ratios.len() as f64);
            EqRow {
                slowdown: s,
                found: ratios.len(),
                per_size,
                mean_ratio: mean,
                break_even_price: mean.map(|m| 1.0 / m),
                discount: mean.map(|m| 1.0 - 1.0 / m),
            }
        })
        .collect();
    Ok(EsTable { workload: w.name.clone(), reference_blocks: reference_blocks.to_vec(), rows })
}
