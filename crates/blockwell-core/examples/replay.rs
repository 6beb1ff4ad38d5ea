//! Developer tool: replays a file of block ids (one per line) through one policy and prints the miss count
//! and miss ratio, for quick comparisons with libCacheSim's plain-text traces.
//!
//! `cargo run --release -p blockwell-core --example replay -- <policy-spec> <capacity-blocks> <file> [preset]`
//!
//! With OPT, next-use times are computed by a reverse pass over the ids.

use blockwell_core::policy::{parse_policy_list, Access, Policy, PolicyVisitor, Preset, NEVER};
use blockwell_core::BlockKey;
use std::collections::HashMap;

struct Run<'a> {
    cap: usize,
    ids: &'a [u64],
    next: &'a [u64],
}

impl PolicyVisitor for Run<'_> {
    type Output = (u64, u64);
    fn visit<P: Policy>(self, config: P::Config) -> (u64, u64) {
        let mut p = P::new(self.cap, &config);
        let mut out = Vec::new();
        let mut misses = 0u64;
        for (i, &id) in self.ids.iter().enumerate() {
            out.clear();
            let key = BlockKey::new(0, id).expect("id below 2^48");
            if !p.access(Access::with_next_use(key, self.next[i]), &mut out).is_hit() {
                misses += 1;
            }
            if std::env::var_os("REPLAY_VALIDATE").is_some() {
                p.validate().unwrap_or_else(|e| panic!("after access {i}: {e}"));
            }
        }
        (misses, self.ids.len() as u64)
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: replay <policy-spec> <capacity-blocks> <file> [default|libcachesim|seed001]");
        std::process::exit(2);
    }
    let spec = parse_policy_list(&args[1]).expect("policy").remove(0);
    let cap: usize = args[2].parse().expect("capacity");
    let preset = args.get(4).map(|p| Preset::from_name(p).expect("preset")).unwrap_or(Preset::Default);
    let text = std::fs::read_to_string(&args[3]).expect("read file");
    let ids: Vec<u64> = text.lines().filter(|l| !l.trim().is_empty()).map(|l| l.trim().parse().expect("id")).collect();
    let mut next = vec![NEVER; ids.len()];
    let mut seen: HashMap<u64, u64> = HashMap::new();
    for i in (0..ids.len()).rev() {
        if let Some(&j) = seen.get(&ids[i]) {
            next[i] = j;
        }
        seen.insert(ids[i], i as u64);
    }
    let (m, n) = spec.visit(preset, Run { cap, ids: &ids, next: &next }).expect("policy config");
    println!("{m} {n} {:.6}", m as f64 / n as f64);
}
