//! The rows of a replay's report: one schema for `blockwell sim --csv`, the rows of its `--json` and the Python
//! package's DataFrames (which take them from here).
//!
//! Two rules hold for every row:
//!
//! - **A ratio of nothing is undefined**, never 0: a miss ratio without accesses of its kind (the write miss
//!   ratio under `--reads-only`, every ratio after a warm-up as long as the trace), a prefetcher's accuracy
//!   without prefetches, its coverage without read misses or prefetch hits. It is an empty CSV field, JSON
//!   `null` and NaN/None in Python ([`Value::Ratio`] `None`).
//! - **A row carries the settings that produced it** ([`Settings`]): the block size, preset, prefetcher,
//!   admission, sequential cutoff, reads-only, warm-up and volume filter, beside the cache's policy, size and
//!   associativity; so rows of runs that differ only in one setting can be told apart once their files are
//!   concatenated.

use crate::replay::{CacheResult, Interval, ReplayReport, Settings};
use blockwell_core::stats::OpStats;
use blockwell_core::Stats;

/// A field of a row.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Count(u64),
    /// A ratio, `None` when undefined (its denominator is 0).
    Ratio(Option<f64>),
    Text(String),
    /// Text that may be absent (an empty CSV field, JSON `null`).
    MaybeText(Option<String>),
    MaybeCount(Option<u64>),
    MaybeFloat(Option<f64>),
    Flag(bool),
}

impl Value {
    /// The CSV field: ratios with 6 decimals, an undefined or absent value empty, text quoted when it needs it.
    pub fn csv(&self) -> String {
        match self {
            Value::Count(n) | Value::MaybeCount(Some(n)) => n.to_string(),
            Value::Ratio(Some(r)) => format!("{r:.6}"),
            Value::Text(t) | Value::MaybeText(Some(t)) => csv_field(t),
            Value::MaybeFloat(Some(x)) => x.to_string(),
            Value::Flag(b) => b.to_string(),
            Value::Ratio(None) | Value::MaybeText(None) | Value::MaybeCount(None) | Value::MaybeFloat(None) => {
                String::new()
            }
        }
    }

    /// The JSON value (`null` for an undefined ratio or an absent value).
    pub fn json(&self) -> serde_json::Value {
        match self {
            Value::Count(n) | Value::MaybeCount(Some(n)) => (*n).into(),
            Value::Ratio(Some(x)) | Value::MaybeFloat(Some(x)) => (*x).into(),
            Value::Text(t) | Value::MaybeText(Some(t)) => t.clone().into(),
            Value::Flag(b) => (*b).into(),
            Value::Ratio(None) | Value::MaybeText(None) | Value::MaybeCount(None) | Value::MaybeFloat(None) => {
                serde_json::Value::Null
            }
        }
    }
}

/// Quotes a CSV field when it needs it (commas, quotes, line breaks).
pub fn csv_field(x: &str) -> String {
    if x.contains([',', '"', '\n']) {
        format!("\"{}\"", x.replace('"', "\"\""))
    } else {
        x.to_string()
    }
}

/// One row: its columns' names and values, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Row(pub Vec<(&'static str, Value)>);

impl Row {
    /// The CSV header line (with its line break).
    pub fn header(&self) -> String {
        let mut s = self.0.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(",");
        s.push('\n');
        s
    }

    /// The CSV line (with its line break).
    pub fn csv(&self) -> String {
        let mut s = self.0.iter().map(|(_, v)| v.csv()).collect::<Vec<_>>().join(",");
        s.push('\n');
        s
    }

    /// The row as a JSON object.
    pub fn json(&self) -> serde_json::Value {
        serde_json::Value::Object(self.0.iter().map(|(k, v)| (k.to_string(), v.json())).collect())
    }

    /// The value of column `name`.
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| *k == name).map(|(_, v)| v)
    }
}

/// The settings' columns, appended to every row.
fn settings(row: &mut Vec<(&'static str, Value)>, s: &Settings) {
    row.extend([
        ("preset", Value::Text(s.preset.clone())),
        ("prefetch", Value::Text(s.prefetch.clone())),
        ("admission", Value::Text(s.admission.clone())),
        ("sequential_cutoff", Value::Count(s.sequential_cutoff)),
        ("reads_only", Value::Flag(s.reads_only)),
        ("warmup", Value::Text(s.warmup.clone())),
        ("volumes", Value::MaybeText(s.volumes.clone())),
    ]);
}

/// The ratios of a cache's counters: block and request level (total, read, write), the prefetcher's accuracy
/// and coverage. Each `None` when undefined.
pub fn ratios(st: &Stats) -> [(&'static str, Option<f64>); 8] {
    let t = st.total();
    [
        ("block_miss_ratio", t.block_miss_ratio()),
        ("read_block_miss_ratio", st.read.block_miss_ratio()),
        ("write_block_miss_ratio", st.write.block_miss_ratio()),
        ("request_miss_ratio", t.request_miss_ratio()),
        ("read_request_miss_ratio", st.read.request_miss_ratio()),
        ("write_request_miss_ratio", st.write.request_miss_ratio()),
        ("prefetch_accuracy", st.prefetch_accuracy()),
        ("prefetch_coverage", st.prefetch_coverage()),
    ]
}

/// The row of one cache of a report (`blockwell sim --csv`; the Python package's `sim()` rows).
pub fn sim_row(r: &ReplayReport, c: &CacheResult) -> Row {
    let st = &c.stats;
    let t = st.total();
    let (rd, wr) = (st.read, st.write);
    let mut row = vec![
        ("policy", Value::Text(c.policy.clone())),
        ("cache_blocks", Value::Count(c.cache_blocks)),
        ("cache_bytes", Value::Count(c.cache_bytes)),
        ("block_size", Value::Count(r.block_size)),
        ("requests", Value::Count(t.requests)),
        ("blocks", Value::Count(t.blocks)),
        ("block_misses", Value::Count(t.block_misses())),
        ("block_miss_ratio", Value::Ratio(t.block_miss_ratio())),
        ("read_blocks", Value::Count(rd.blocks)),
        ("read_block_misses", Value::Count(rd.block_misses())),
        ("read_block_miss_ratio", Value::Ratio(rd.block_miss_ratio())),
        ("write_blocks", Value::Count(wr.blocks)),
        ("write_block_misses", Value::Count(wr.block_misses())),
        ("write_block_miss_ratio", Value::Ratio(wr.block_miss_ratio())),
        ("request_misses", Value::Count(t.request_misses())),
        ("request_miss_ratio", Value::Ratio(t.request_miss_ratio())),
        ("read_requests", Value::Count(rd.requests)),
        ("read_request_misses", Value::Count(rd.request_misses())),
        ("write_requests", Value::Count(wr.requests)),
        ("write_request_misses", Value::Count(wr.request_misses())),
        ("prefetch_issued", Value::Count(st.prefetch_issued)),
        ("prefetch_used", Value::Count(st.prefetch_used)),
        ("prefetch_late", Value::Count(st.prefetch_late)),
        ("prefetch_wasted", Value::Count(st.prefetch_wasted)),
        ("prefetch_accuracy", Value::Ratio(st.prefetch_accuracy())),
        ("prefetch_coverage", Value::Ratio(st.prefetch_coverage())),
        ("admission_rejections", Value::Count(st.admission_rejections)),
        ("bypassed", Value::Count(st.bypassed)),
        ("evictions", Value::Count(st.evictions)),
        ("associativity", Value::MaybeCount(c.associativity.map(|w| w as u64))),
        ("sets", Value::Count(c.sets)),
    ];
    settings(&mut row, &r.settings);
    Row(row)
}

/// The rows of every cache of a report.
pub fn sim_rows(r: &ReplayReport) -> Vec<Row> {
    r.results.iter().map(|c| sim_row(r, c)).collect()
}

/// The column names of [`sim_row`], in order.
pub fn sim_columns() -> Vec<&'static str> {
    sim_row(&empty_report(), &empty_result()).0.into_iter().map(|(k, _)| k).collect()
}

/// The row of one interval of one cache (`blockwell sim --interval N --csv`; the Python package's
/// `over_time()`): `k` is the interval's 1-based number.
pub fn interval_row(r: &ReplayReport, c: &CacheResult, k: usize, i: &Interval) -> Row {
    let t: OpStats = i.total();
    let mut row = vec![
        ("policy", Value::Text(c.policy.clone())),
        ("cache_blocks", Value::Count(c.cache_blocks)),
        ("interval", Value::Count(k as u64)),
        ("end_request", Value::Count(i.end_request)),
        ("requests", Value::Count(t.requests)),
        ("blocks", Value::Count(t.blocks)),
        ("block_misses", Value::Count(t.block_misses())),
        ("block_miss_ratio", Value::Ratio(t.block_miss_ratio())),
        ("read_blocks", Value::Count(i.read.blocks)),
        ("read_block_misses", Value::Count(i.read.block_misses())),
        ("read_block_miss_ratio", Value::Ratio(i.read.block_miss_ratio())),
        ("request_misses", Value::Count(t.request_misses())),
        ("request_miss_ratio", Value::Ratio(t.request_miss_ratio())),
        ("block_size", Value::Count(r.block_size)),
        ("associativity", Value::MaybeCount(c.associativity.map(|w| w as u64))),
    ];
    settings(&mut row, &r.settings);
    Row(row)
}

/// The rows of every interval of every cache of a report, cache by cache.
pub fn interval_rows(r: &ReplayReport) -> Vec<Row> {
    r.results
        .iter()
        .flat_map(|c| c.intervals.iter().enumerate().map(move |(k, i)| interval_row(r, c, k + 1, i)))
        .collect()
}

/// The column names of [`interval_row`], in order.
pub fn interval_columns() -> Vec<&'static str> {
    let i = Interval { end_request: 0, read: OpStats::default(), write: OpStats::default() };
    interval_row(&empty_report(), &empty_result(), 1, &i).0.into_iter().map(|(k, _)| k).collect()
}

fn empty_report() -> ReplayReport {
    ReplayReport {
        block_size: 0,
        preset: String::new(),
        requests: 0,
        block_accesses: 0,
        footprint_blocks: None,
        unsampled_block_accesses: None,
        warmup_requests: 0,
        skipped_lines: 0,
        skipped_examples: Vec::new(),
        settings: Settings::of(&crate::replay::ReplayConfig::default()),
        results: Vec::new(),
    }
}

fn empty_result() -> CacheResult {
    CacheResult {
        policy: String::new(),
        config: serde_json::Value::Null,
        cache_blocks: 0,
        cache_bytes: 0,
        associativity: None,
        sets: 0,
        stats: Stats::default(),
        intervals: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwell_core::stats::OpStats;

    #[test]
    fn undefined_ratios_are_empty_in_csv_and_null_in_json() {
        let mut r = empty_report();
        let c = CacheResult {
            stats: Stats {
                read: OpStats { requests: 2, request_hits: 1, blocks: 4, block_hits: 1 },
                ..Stats::default()
            },
            ..empty_result()
        };
        r.results.push(c.clone());
        let row = sim_row(&r, &c);
        assert_eq!(row.get("read_block_miss_ratio"), Some(&Value::Ratio(Some(0.75))));
        for k in ["write_block_miss_ratio", "prefetch_accuracy"] {
            assert_eq!(row.get(k), Some(&Value::Ratio(None)), "{k}");
            assert_eq!(row.json()[k], serde_json::Value::Null, "{k}");
        }
        assert_eq!(row.get("prefetch_coverage"), Some(&Value::Ratio(Some(0.0))), "read misses, no prefetch hits");
        let cols = sim_columns();
        let fields: Vec<String> = row.csv().trim_end().split(',').map(str::to_string).collect();
        assert_eq!(fields.len(), cols.len());
        let at = |k: &str| &fields[cols.iter().position(|c| *c == k).unwrap()];
        assert_eq!(at("write_block_miss_ratio"), "");
        assert_eq!(at("prefetch_accuracy"), "");
        assert_eq!(at("read_block_miss_ratio"), "0.750000");
    }

    #[test]
    fn every_row_carries_the_settings() {
        for cols in [sim_columns(), interval_columns()] {
            for k in [
                "block_size",
                "associativity",
                "preset",
                "prefetch",
                "admission",
                "sequential_cutoff",
                "reads_only",
                "warmup",
                "volumes",
            ] {
                assert!(cols.contains(&k), "{k} missing from {cols:?}");
            }
        }
    }
}
