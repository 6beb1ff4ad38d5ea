//! `blockwell experiment`'s simulator grids for Python: options come as the JSON of the keyword arguments given
//! (deserialized into the library's option structs, whose defaults are the command's), results go back as the
//! command's `--csv` tables, so both fronts check the same settings and print the same numbers.

use crate::{trace_err, value_err, Source};
use blockwell_sim::experiments::{dedup, es_equivalence, policies, redcap, Error};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde::de::DeserializeOwned;
use std::path::PathBuf;

/// Reads the options of `experiment` from JSON, naming an unknown or mistyped keyword.
fn options<T: DeserializeOwned>(experiment: &str, json: &str) -> PyResult<T> {
    serde_json::from_str(json).map_err(|e| value_err(experiment, e))
}

/// A grid error as a Python exception: a bad setting names its keyword; a trace that does not read is a
/// `TraceError`.
fn grid_err(e: Error) -> PyErr {
    match e {
        Error::Trace(t) => trace_err(t),
        e => PyValueError::new_err(e.to_string()),
    }
}

/// Runs experiment `name` (`redcap`, `prefetch-policies`, `dedup`, `es-equivalence`, `es-levels`) with
/// `options` (JSON of the option struct's fields) on `traces` (prefetch-policies: at most one block trace;
/// dedup: up to four traces with digests), the GIL released. Returns (table name, text) pairs: CSV tables as
/// the command's `--csv` writes them, and for `es-levels` the JSON of the per-level metrics.
#[pyfunction]
#[pyo3(signature = (
    name, options_json, traces=Vec::new(), *, format=None, skip_bad_lines=0, object_size="4096", csv_columns=None,
    limit=None
))]
#[allow(clippy::too_many_arguments)]
pub fn experiment(
    py: Python<'_>,
    name: &str,
    options_json: &str,
    traces: Vec<PathBuf>,
    format: Option<&str>,
    skip_bad_lines: u64,
    object_size: &str,
    csv_columns: Option<&str>,
    limit: Option<u64>,
) -> PyResult<Vec<(String, String)>> {
    let sources = traces
        .into_iter()
        .map(|t| Source::new(t, format, skip_bad_lines, object_size, csv_columns))
        .collect::<PyResult<Vec<_>>>()?;
    let no_traces = |what: &str| {
        if sources.is_empty() {
            Ok(())
        } else {
            Err(value_err("trace", format!("{what} runs on generated workloads only")))
        }
    };
    let table = |name: &str, text: String| vec![(name.to_string(), text)];
    match name {
        "redcap" => {
            no_traces("redcap")?;
            let g = options::<redcap::RedcapOptions>(name, options_json)?.grid().map_err(grid_err)?;
            let r = py.detach(|| g.run()).map_err(grid_err)?;
            Ok(table("cells", r.csv()))
        }
        "prefetch-policies" => {
            let o: policies::PolicyOptions = options(name, options_json)?;
            if sources.len() > 1 {
                return Err(value_err("trace", "one block trace at most"));
            }
            let r = py.detach(|| -> Result<_, Error> {
                let trace = match sources.first() {
                    Some(s) => Some(policies::Source::from_trace(s.name(), s.open()?.as_mut())?),
                    None => None,
                };
                o.grid(trace)?.run()
            });
            Ok(table("points", r.map_err(grid_err)?.csv()))
        }
        "dedup" => {
            let o: dedup::DedupOptions = options(name, options_json)?;
            let g = o.grid(None).map_err(grid_err)?;
            let r = py.detach(|| -> Result<_, Error> {
                let g = match sources.first() {
                    Some(first) => {
                        let open = |i: usize| sources[i].open();
                        let src = dedup::Source::from_traces(
                            first.path.display().to_string(),
                            sources.len(),
                            &open,
                            o.block_size,
                            limit,
                            &mut |_| {},
                        )?;
                        dedup::DedupGrid { source: src, ..g }
                    }
                    None => g,
                };
                g.run()
            });
            Ok(r.map_err(grid_err)?.csv_tables().into_iter().map(|(n, t)| (n.to_string(), t)).collect())
        }
        "es-equivalence" | "es-levels" => {
            no_traces("es-equivalence")?;
            let g = options::<es_equivalence::EsOptions>("es-equivalence", options_json)?.grid().map_err(grid_err)?;
            let levels = name == "es-levels";
            py.detach(|| -> Result<_, Error> {
                let t = g.tables()?;
                if levels {
                    let l = g.levels(&t)?;
                    let json = serde_json::to_string(&l)
                        .map_err(|e| Error::Option { option: "levels", message: e.to_string() })?;
                    return Ok(table("levels", json));
                }
                Ok(table("tables", es_equivalence::csv(&t)))
            })
            .map_err(grid_err)
        }
        _ => Err(value_err(
            "experiment",
            format!("unknown experiment '{name}' (known: redcap, prefetch-policies, dedup, es-equivalence)"),
        )),
    }
}
