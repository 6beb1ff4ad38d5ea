//! Golden test: the libCacheSim reference miss ratios on the CloudPhysics trace
//! (`shared/reference/libcachesim-cloudphysics.md`), reproduced to 6 decimals by `blockwell sim --preset
//! libcachesim`. The expected values are read from the reference file, never copied here.

mod util;

use blockwell_core::PolicyKind;

/// (policy, cache blocks, miss ratio) rows of the reference table.
fn reference(md: &str) -> (Vec<u64>, Vec<(PolicyKind, Vec<f64>)>) {
    let mut sizes = Vec::new();
    let mut rows = Vec::new();
    for line in md.lines().filter(|l| l.starts_with('|')) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells[0].starts_with("policy") {
            sizes = cells[1..].iter().map(|c| c.parse().expect("size in blocks")).collect();
            continue;
        }
        if cells[0].starts_with("---") {
            continue;
        }
        let name = cells[0].split_whitespace().next().expect("policy name");
        let kind = PolicyKind::from_name(name).unwrap_or_else(|e| panic!("reference row '{name}': {e}"));
        rows.push((kind, cells[1..].iter().map(|c| c.parse().expect("miss ratio")).collect()));
    }
    assert!(!sizes.is_empty() && rows.len() >= 8, "reference table not found");
    (sizes, rows)
}

#[test]
fn cloudphysics_matches_libcachesim_reference() {
    let Some(shared) = util::shared() else { return };
    let md = std::fs::read_to_string(shared.join("reference/libcachesim-cloudphysics.md")).unwrap();
    let (sizes, rows) = reference(&md);
    let trace = shared.join("traces/cloudphysics/cloudPhysicsIO.csv");
    let policies = rows.iter().map(|(k, _)| k.name()).collect::<Vec<_>>().join(",");
    let cache = sizes.iter().map(|s| format!("{s}blocks")).collect::<Vec<_>>().join(",");
    let out = util::ok(&[
        "sim",
        "--trace",
        trace.to_str().unwrap(),
        "--preset",
        "libcachesim",
        "--policy",
        &policies,
        "--cache",
        &cache,
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["block_accesses"], 1_141_869);
    let results = v["results"].as_array().unwrap();
    let mut checked = 0;
    for (kind, expected) in &rows {
        for (size, want) in sizes.iter().zip(expected) {
            let r = results
                .iter()
                .find(|r| r["policy"] == kind.name() && r["cache_blocks"] == *size)
                .unwrap_or_else(|| panic!("no result for {} at {size}", kind.name()));
            let s = &r["stats"];
            let blocks = s["read"]["blocks"].as_u64().unwrap() + s["write"]["blocks"].as_u64().unwrap();
            let hits = s["read"]["block_hits"].as_u64().unwrap() + s["write"]["block_hits"].as_u64().unwrap();
            let got = (blocks - hits) as f64 / blocks as f64;
            assert_eq!(format!("{got:.6}"), format!("{want:.6}"), "{} at {size} blocks", kind.name());
            checked += 1;
        }
    }
    assert_eq!(checked, rows.len() * sizes.len());
}
