//! Seed `003_*` (Morrey & Grunwald, content-based block caching), Tables 1 and 3 and Figures 4–5: offset- vs
//! content-based caching ([`crate::dedup`]) on one source, in this order:
//!
//! 1. one [`Comparison`] per cache size (Table 3's read hit rates, Table 1's categories, silent writes);
//! 2. the hash-table fraction sweep at [`DedupGrid::policy_size`] (Figures 4–5);
//! 3. one comparison per policy at [`DedupGrid::policy_size`];
//! 4. unified vs private caches over several volumes, [`DedupGrid::policy_size`] per volume: one row per volume
//!    count for a generated source, one row for two or more traces.
//!
//! The source is either generated ([`Generated`]: a Zipf address stream with content per volume, all volumes
//! clones of one disk image, merged by time) or traces with content digests read by the caller
//! ([`Source::Traces`]). Every run is deterministic: the same grid gives the same [`DedupReport`].

use super::{bad, Error};
use crate::dedup::{
    fraction_sweep, load_requests, merge_by_time, unified_vs_private, BlockAccess, Comparison, DedupRun, FractionPoint,
    UnifiedVsPrivate,
};
use crate::gen::{GenConfig, Workload};
use crate::gen_content::{ContentGenConfig, ContentGenerator};
use blockwell_core::dedup::Category;
use blockwell_core::policy::PolicySpec;
use blockwell_trace::Request;
use blockwell_trace::{TraceError, TraceReader};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// A generated source: per volume, a Zipf address stream over `blocks` blocks with content
/// ([`ContentGenerator`]); volume `i` has address seed `seed + i`, and every volume is a clone of one disk image
/// (image seed `seed`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Generated {
    /// Requests per volume.
    pub requests: u64,
    /// Footprint per volume, in blocks.
    pub blocks: u64,
    /// Zipf exponent of the address stream.
    pub alpha: f64,
    /// Probability that a request is a write.
    pub write_ratio: f64,
    /// Probability that written content is one of `pool` popular contents.
    pub dup_ratio: f64,
    /// Probability that written content is the zero block.
    pub zero_fraction: f64,
    /// Fraction of blocks whose initial content is the same on every volume.
    pub cross_volume: f64,
    /// Probability that a write rewrites the address's current content.
    pub rewrite_ratio: f64,
    /// Popular contents.
    pub pool: u64,
    pub seed: u64,
}

impl Default for Generated {
    fn default() -> Self {
        Generated {
            requests: 200_000,
            blocks: 50_000,
            alpha: 0.8,
            write_ratio: 0.5,
            dup_ratio: 0.3,
            zero_fraction: 0.05,
            cross_volume: 0.5,
            rewrite_ratio: 0.3,
            pool: 1000,
            seed: 42,
        }
    }
}

impl Generated {
    /// The generator of volume `i` at `block_size` (one block per request).
    pub fn config(&self, i: u64, block_size: u64) -> ContentGenConfig {
        ContentGenConfig {
            addresses: GenConfig {
                workload: Workload::Zipf,
                requests: self.requests,
                blocks: self.blocks,
                block_size,
                request_size: block_size,
                write_ratio: self.write_ratio,
                volumes: 1,
                alpha: self.alpha,
                seed: self.seed.wrapping_add(i),
                ..GenConfig::default()
            },
            dup_ratio: self.dup_ratio,
            zero_fraction: self.zero_fraction,
            cross_volume: self.cross_volume,
            rewrite_ratio: self.rewrite_ratio,
            pool: self.pool,
            image_seed: Some(self.seed),
            volume_base: i as u32,
        }
    }

    /// The requests of volume `i`.
    pub fn volume(&self, i: u64, block_size: u64) -> Result<Vec<Request>, Error> {
        Ok(ContentGenerator::new(self.config(i, block_size))?.collect())
    }

    /// Volumes `0..n` merged by time (volume `i` of the result is generated volume `i`).
    pub fn merged(&self, n: usize, block_size: u64) -> Result<Vec<Request>, Error> {
        let traces = (0..n as u64).map(|i| self.volume(i, block_size)).collect::<Result<_, _>>()?;
        Ok(merge_by_time(traces))
    }

    /// What a report says the source is.
    pub fn describe(&self) -> String {
        format!(
            "generated: zipf(alpha={}) over {} blocks, {} requests, write ratio {}, dup {}, zero {}, cross-volume {}, \
             rewrite {}, pool {}, seed {}",
            self.alpha,
            self.blocks,
            self.requests,
            self.write_ratio,
            self.dup_ratio,
            self.zero_fraction,
            self.cross_volume,
            self.rewrite_ratio,
            self.pool,
            self.seed
        )
    }
}

/// What the grid runs on.
#[derive(Clone, Debug)]
pub enum Source {
    /// Generated volumes: volume 0 for the single-volume tables, volumes `0..n` merged for each count `n` of
    /// [`DedupGrid::volumes`].
    Generated(Generated),
    /// Traces with content digests, read by the caller. `accesses`: the block accesses of the first trace
    /// ([`crate::dedup::load`]), for the single-volume tables. `volumes`: the requests of every trace (trace `i`
    /// becomes volume `i`); two or more give one unified-vs-private row, fewer none.
    Traces { name: String, accesses: Vec<BlockAccess>, volumes: Vec<Vec<Request>> },
}

/// A policy's row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PolicyRow {
    /// The policy as written.
    pub policy: String,
    pub comparison: Comparison,
}

/// Everything the grid measured.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DedupReport {
    /// The trace's name or the generator's settings ([`Generated::describe`]).
    pub source: String,
    pub block_size: u64,
    /// The policy of the size, fraction and volume tables.
    pub policy: String,
    pub hash_fraction: f64,
    pub ref_bytes: u64,
    /// Block accesses of the single-volume tables.
    pub block_accesses: u64,
    pub sizes: Vec<Comparison>,
    pub fractions: Vec<FractionPoint>,
    pub policies: Vec<PolicyRow>,
    pub volumes: Vec<UnifiedVsPrivate>,
}

/// The grid.
#[derive(Clone, Debug)]
pub struct DedupGrid {
    pub source: Source,
    /// Policy, preset, block size, hash-table fraction and bytes per extra reference of every table but the
    /// policy table (which changes the policy) and the sweep (which changes the fraction).
    pub base: DedupRun,
    /// Cache sizes of the Table 3 rows, in bytes.
    pub sizes: Vec<u64>,
    /// Hash-table fractions of the sweep.
    pub fractions: Vec<f64>,
    /// Policies of the policy table.
    pub policies: Vec<PolicySpec>,
    /// Cache size of the sweep and the policy table, and per volume of the unified-vs-private rows.
    pub policy_size: u64,
    /// Volume counts of the unified-vs-private rows of a generated source, each from 2 to 16.
    pub volumes: Vec<usize>,
}

impl DedupGrid {
    fn check(&self) -> Result<(), Error> {
        if self.volumes.iter().any(|&v| !(2..=16).contains(&v)) {
            return Err(Error::Option { option: "volumes", message: "counts between 2 and 16".into() });
        }
        Ok(())
    }

    /// Runs the tables in order (see the module doc).
    pub fn run(self) -> Result<DedupReport, Error> {
        self.check()?;
        let run = &self.base;
        let bs = run.block_size;
        let (source, single, more) = match self.source {
            Source::Generated(g) => (g.describe(), load_requests(&g.volume(0, bs)?, bs)?, Volumes::Generated(g)),
            Source::Traces { name, accesses, volumes } if volumes.len() >= 2 => {
                (name, accesses, Volumes::Traces(volumes))
            }
            Source::Traces { name, accesses, .. } => (name, accesses, Volumes::None),
        };
        if single.is_empty() {
            return Err(Error::NoAccesses);
        }
        let sizes = self.sizes.iter().map(|&s| run.compare(&single, s)).collect::<Result<_, _>>()?;
        let fractions = fraction_sweep(run, &single, self.policy_size, &self.fractions)?;
        let mut policies = Vec::new();
        for p in &self.policies {
            let r = DedupRun { policy: p.clone(), ..run.clone() };
            policies
                .push(PolicyRow { policy: p.label().to_string(), comparison: r.compare(&single, self.policy_size)? });
        }
        let unified = |n: usize, merged: Vec<Request>| -> Result<UnifiedVsPrivate, Error> {
            Ok(unified_vs_private(run, &load_requests(&merged, bs)?, n, self.policy_size * n as u64)?)
        };
        let volumes = match more {
            Volumes::Traces(traces) => vec![unified(traces.len(), merge_by_time(traces))?],
            Volumes::Generated(g) => {
                self.volumes.iter().map(|&n| unified(n, g.merged(n, bs)?)).collect::<Result<_, _>>()?
            }
            Volumes::None => Vec::new(),
        };
        Ok(DedupReport {
            source,
            block_size: bs,
            policy: run.policy.label().to_string(),
            hash_fraction: run.hash_fraction,
            ref_bytes: run.ref_bytes,
            block_accesses: single.len() as u64,
            sizes,
            fractions,
            policies,
            volumes,
        })
    }
}

impl Source {
    /// Reads `n` traces with content digests (at most four): the block accesses of trace 0 (read to `limit`
    /// requests) and, for two or more, every trace's requests (trace `i` becomes volume `i`). `open(i)` opens
    /// trace `i` afresh; `done` sees each reader once read (to report skipped lines).
    pub fn from_traces(
        name: String,
        n: usize,
        open: &dyn Fn(usize) -> Result<Box<dyn TraceReader>, TraceError>,
        block_size: u64,
        limit: Option<u64>,
        done: &mut dyn FnMut(&dyn TraceReader),
    ) -> Result<Source, Error> {
        if n > 4 {
            return Err(bad("trace")(&"at most four files"));
        }
        let mut r = open(0)?;
        let accesses = crate::dedup::load(r.as_mut(), block_size, limit)?;
        done(r.as_ref());
        let mut volumes = Vec::new();
        if n >= 2 {
            for i in 0..n {
                let mut r = open(i)?;
                let mut out = Vec::new();
                while limit.map_or(true, |l| (out.len() as u64) < l) {
                    match r.next_request()? {
                        Some(q) => out.push(q),
                        None => break,
                    }
                }
                done(r.as_ref());
                volumes.push(out);
            }
        }
        Ok(Source::Traces { name, accesses, volumes })
    }
}

/// The grid's settings as a user writes them, for `blockwell experiment dedup` and Python's
/// `blockwell.experiments.dedup`: sizes as text (`16MiB`), fractions as numbers. [`DedupOptions::grid`] checks
/// them; an error names the option (by its field name, [`Error::option`]). The defaults are the command's;
/// the generator's (`requests` to `seed`, [`Generated`]) apply when the source is not traces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DedupOptions {
    pub block_size: u64,
    /// Cache sizes of the Table 3 rows.
    pub cache: Vec<String>,
    pub policy: String,
    pub policies: Vec<String>,
    pub policy_size: String,
    pub fractions: Vec<f64>,
    pub hash_fraction: f64,
    pub ref_bytes: u64,
    pub volumes: Vec<usize>,
    pub requests: u64,
    pub blocks: u64,
    pub alpha: f64,
    pub write_ratio: f64,
    pub dup_ratio: f64,
    pub zero_fraction: f64,
    pub cross_volume: f64,
    pub rewrite_ratio: f64,
    pub pool: u64,
    pub seed: u64,
}

impl Default for DedupOptions {
    fn default() -> Self {
        let g = Generated::default();
        DedupOptions {
            block_size: 4096,
            cache: ["2MiB", "4MiB", "8MiB", "16MiB", "32MiB", "64MiB", "128MiB"].map(String::from).to_vec(),
            policy: "lru".into(),
            policies: ["lru", "arc", "2q", "s3fifo", "clock"].map(String::from).to_vec(),
            policy_size: "16MiB".into(),
            fractions: [128.0, 64.0, 32.0, 16.0, 8.0].map(|d| 1.0 / d).to_vec(),
            hash_fraction: 1.0 / 64.0,
            ref_bytes: 48,
            volumes: vec![2, 3, 4],
            requests: g.requests,
            blocks: g.blocks,
            alpha: g.alpha,
            write_ratio: g.write_ratio,
            dup_ratio: g.dup_ratio,
            zero_fraction: g.zero_fraction,
            cross_volume: g.cross_volume,
            rewrite_ratio: g.rewrite_ratio,
            pool: g.pool,
            seed: g.seed,
        }
    }
}

impl DedupOptions {
    /// The generator these options describe.
    pub fn generated(&self) -> Generated {
        Generated {
            requests: self.requests,
            blocks: self.blocks,
            alpha: self.alpha,
            write_ratio: self.write_ratio,
            dup_ratio: self.dup_ratio,
            zero_fraction: self.zero_fraction,
            cross_volume: self.cross_volume,
            rewrite_ratio: self.rewrite_ratio,
            pool: self.pool,
            seed: self.seed,
        }
    }

    /// The grid on `traces` (read with [`Source::from_traces`]) or, without them, on the generator.
    pub fn grid(&self, traces: Option<Source>) -> Result<DedupGrid, Error> {
        let bytes = |option: &'static str, s: &str| crate::size::parse_bytes(s).map_err(|e| bad(option)(&e));
        let policy = |option: &'static str, p: &str| PolicySpec::parse(p).map_err(|e| bad(option)(&e));
        if self.block_size == 0 {
            return Err(bad("block_size")(&"must be at least 1"));
        }
        let fraction = |option: &'static str, f: f64| {
            if f > 0.0 && f <= 1.0 {
                Ok(f)
            } else {
                Err(bad(option)(&format!("{f} is not a fraction between 0 and 1")))
            }
        };
        let base = DedupRun {
            policy: policy("policy", &self.policy)?,
            preset: blockwell_core::policy::Preset::Default,
            block_size: self.block_size,
            hash_fraction: fraction("hash_fraction", self.hash_fraction)?,
            ref_bytes: self.ref_bytes,
        };
        let g = DedupGrid {
            source: traces.unwrap_or_else(|| Source::Generated(self.generated())),
            base,
            sizes: self.cache.iter().map(|s| bytes("cache", s)).collect::<Result<_, _>>()?,
            fractions: self.fractions.iter().map(|&f| fraction("fractions", f)).collect::<Result<_, _>>()?,
            policies: self.policies.iter().map(|p| policy("policies", p)).collect::<Result<_, _>>()?,
            policy_size: bytes("policy_size", &self.policy_size)?,
            volumes: self.volumes.clone(),
        };
        g.check()?;
        Ok(g)
    }
}

impl DedupReport {
    /// The tables as CSV text, by name: `sizes` (Table 3 and silent writes), `categories` (Table 1),
    /// `fractions` (Figures 4-5), `policies`, `volumes` (unified vs private).
    pub fn csv_tables(&self) -> Vec<(&'static str, String)> {
        let mut sizes = String::from(
            "cache_bytes,offset_read_hit_rate,content_read_hit_rate,ideal_read_hit_rate,silent_writes,\
             content_device_writes,offset_device_writes,full_comparisons,comparisons_per_insert\n",
        );
        for c in &self.sizes {
            let _ = writeln!(
                sizes,
                "{},{},{},{},{},{},{},{},{:.6}",
                c.cache_bytes,
                r6(c.offset.read_hit_rate()),
                r6(c.content.read_hit_rate()),
                r6(c.content_ideal.read_hit_rate()),
                c.silent_writes(),
                c.content.device_writes(),
                c.offset.device_writes,
                c.content.full_comparisons,
                c.content.comparisons_per_insert()
            );
        }
        let names: Vec<&str> = Category::ALL.iter().map(|c| c.short()).collect();
        let mut categories = format!("cache_bytes,{}\n", names.join(","));
        for c in &self.sizes {
            let v: Vec<String> = Category::ALL.iter().map(|&k| c.content.get(k).to_string()).collect();
            let _ = writeln!(categories, "{},{}", c.cache_bytes, v.join(","));
        }
        let mut fractions = String::from(
            "cache_bytes,hash_fraction,full_comparisons,comparisons_per_insert,read_hit_rate,ideal_read_hit_rate\n",
        );
        for p in &self.fractions {
            let _ = writeln!(
                fractions,
                "{},{},{},{:.6},{},{}",
                p.cache_bytes,
                p.hash_fraction,
                p.full_comparisons,
                p.comparisons_per_insert,
                r6(p.read_hit_rate),
                r6(p.ideal_read_hit_rate)
            );
        }
        let mut policies = String::from(
            "policy,cache_bytes,offset_read_hit_rate,content_read_hit_rate,ideal_read_hit_rate,refs_dropped\n",
        );
        for p in &self.policies {
            let c = &p.comparison;
            let _ = writeln!(
                policies,
                "\"{}\",{},{},{},{},{}",
                p.policy,
                c.cache_bytes,
                r6(c.offset.read_hit_rate()),
                r6(c.content.read_hit_rate()),
                r6(c.content_ideal.read_hit_rate()),
                c.content.refs_dropped
            );
        }
        let mut volumes = String::from(
            "volumes,cache_bytes,private_offset,private_content,unified_offset,unified_content,content_hits\n",
        );
        for v in &self.volumes {
            let _ = writeln!(
                volumes,
                "{},{},{},{},{},{},{}",
                v.volumes,
                v.cache_bytes,
                r6(v.private_offset),
                r6(v.private_content),
                r6(v.unified_offset),
                r6(v.unified_content),
                v.unified_content_hits
            );
        }
        vec![
            ("sizes", sizes),
            ("categories", categories),
            ("fractions", fractions),
            ("policies", policies),
            ("volumes", volumes),
        ]
    }
}

/// Where the unified-vs-private rows come from.
enum Volumes {
    Generated(Generated),
    Traces(Vec<Vec<Request>>),
    None,
}

/// A rate with 6 decimals for CSV; empty when undefined (no reads), never 0.
fn r6(x: Option<f64>) -> String {
    x.map_or(String::new(), |x| format!("{x:.6}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockwell_core::Op;

    fn grid(source: Source) -> DedupGrid {
        DedupGrid {
            source,
            base: DedupRun::default(),
            sizes: vec![256 << 10, 2 << 20],
            fractions: vec![1.0 / 64.0, 1.0 / 8.0],
            policies: ["lru", "arc"].iter().map(|p| PolicySpec::parse(p).unwrap()).collect(),
            policy_size: 1 << 20,
            volumes: vec![2, 3],
        }
    }

    fn generated() -> Source {
        Source::Generated(Generated { requests: 5000, blocks: 2000, ..Generated::default() })
    }

    #[test]
    fn a_generated_source_gives_every_table_the_same_twice() {
        let r = grid(generated()).run().unwrap();
        assert_eq!(r.block_accesses, 5000);
        assert!(r.source.starts_with("generated: zipf(alpha=0.8) over 2000 blocks, 5000 requests"), "{}", r.source);
        assert_eq!(r.sizes.iter().map(|c| c.cache_bytes).collect::<Vec<_>>(), [256 << 10, 2 << 20]);
        assert_eq!(r.fractions.iter().map(|f| f.hash_fraction).collect::<Vec<_>>(), [1.0 / 64.0, 1.0 / 8.0]);
        assert_eq!(r.policies.iter().map(|p| p.policy.as_str()).collect::<Vec<_>>(), ["lru", "arc"]);
        assert_eq!(
            r.volumes.iter().map(|v| (v.volumes, v.cache_bytes)).collect::<Vec<_>>(),
            [(2, 2 << 20), (3, 3 << 20)]
        );
        // Clones of one disk image share content: the unified content cache finds it under other addresses.
        assert!(r.volumes.iter().all(|v| v.unified_content_hits > 0), "{:?}", r.volumes);
        assert_eq!(grid(generated()).run().unwrap(), r);
    }

    /// `n` requests of one 4 KiB block each, every third a write, over 50 addresses with 50 contents.
    fn requests(n: u64, shift: u64) -> Vec<Request> {
        (0..n)
            .map(|i| Request {
                time_ns: (i * 10 + shift) * 1000,
                volume: 0,
                op: if i % 3 == 0 { Op::Write } else { Op::Read },
                offset: (i % 50) * 4096,
                len: 4096,
                digest: Some(u128::from(i % 50 + 1)),
            })
            .collect()
    }

    #[test]
    fn traces_give_one_volume_row_from_two_and_none_from_one() {
        let accesses = load_requests(&requests(400, 0), 4096).unwrap();
        let traces = |volumes| Source::Traces { name: "t".into(), accesses: accesses.clone(), volumes };
        let two = grid(traces(vec![requests(400, 0), requests(400, 1)])).run().unwrap();
        assert_eq!((two.source.as_str(), two.block_accesses), ("t", 400));
        assert_eq!(two.volumes.len(), 1);
        assert_eq!((two.volumes[0].volumes, two.volumes[0].cache_bytes), (2, 2 << 20));
        assert!(two.volumes[0].unified_content_hits > 0, "identical volumes share content");
        assert!(two.sizes[0].silent_writes() > 0);
        assert!(grid(traces(vec![requests(400, 0)])).run().unwrap().volumes.is_empty());
    }

    #[test]
    fn bad_grids_are_errors() {
        let mut g = grid(generated());
        g.volumes = vec![1];
        assert!(matches!(g.run(), Err(Error::Option { option: "volumes", .. })));
        let empty = Source::Traces { name: "t".into(), accesses: Vec::new(), volumes: Vec::new() };
        assert!(matches!(grid(empty).run(), Err(Error::NoAccesses)));
        let bad = Source::Generated(Generated { blocks: 0, ..Generated::default() });
        assert!(matches!(grid(bad).run(), Err(Error::ContentGen(_))));
    }
}
