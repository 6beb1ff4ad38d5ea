//! Workload generators: the shape of each one, determinism, the registry and its errors.

use blockwell_core::Op;
use blockwell_sim::layout::{FileMap, LayoutKind, LayoutSpec};
use blockwell_sim::workload::{FileRequest, Workload};
use blockwell_sim::workloads::{generate, list, paper_app, SpecError, WorkloadKind, WorkloadSpec, TABLE2};

const KIB: u64 = 1024;
const MIB: u64 = 1 << 20;

fn gen(spec: &str) -> Workload {
    let w = generate(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
    w.validate().unwrap_or_else(|e| panic!("{spec}: {e}"));
    assert!(w.processes.iter().flatten().all(|r| r.at_ns.is_none()), "closed loop");
    w
}

/// Requests of a process read the bytes `from..to` of `file` in order, without gaps, `req` bytes each.
fn assert_forward(reqs: &[FileRequest], file: u32, from: u64, to: u64, req: u64) {
    let mut at = from;
    for r in reqs {
        assert_eq!((r.file, r.offset, r.op), (file, at, Op::Read));
        assert_eq!(r.len, req.min(to - at));
        at += r.len;
    }
    assert_eq!(at, to);
}

#[test]
fn kernel_read_reads_each_own_tree_whole_dir_by_dir() {
    let w = gen("kernel-read(procs=3,files=200,dirs=10,request_kb=4)");
    assert_eq!(w.processes.len(), 3);
    assert_eq!(w.files.len(), 600);
    for (p, reqs) in w.processes.iter().enumerate() {
        let mine: Vec<u32> = (p as u32 * 200..(p as u32 + 1) * 200).collect();
        // Process p's files: written by p, in its own 10 directories, in non-decreasing directory order.
        for &f in &mine {
            assert_eq!(w.files[f as usize].writer, p as u32);
            assert_eq!(w.files[f as usize].dir / 10, p as u32);
        }
        assert!(mine.windows(2).all(|x| w.files[x[0] as usize].dir <= w.files[x[1] as usize].dir));
        // Each file read whole, in file order, in 4 KiB requests.
        let mut i = 0;
        for &f in &mine {
            let size = w.files[f as usize].size;
            let n = size.div_ceil(4 * KIB) as usize;
            assert_forward(&reqs[i..i + n], f, 0, size, 4 * KIB);
            i += n;
        }
        assert_eq!(i, reqs.len());
    }
    // Every process's tree is a copy: same sizes.
    let sizes = |p: usize| w.files[p * 200..(p + 1) * 200].iter().map(|f| f.size).collect::<Vec<_>>();
    assert_eq!(sizes(0), sizes(2));
    // Small files, a realistic spread: median near 8 KiB, some files over 64 KiB.
    let mut s = sizes(0);
    s.sort_unstable();
    assert!((4 * KIB..16 * KIB).contains(&s[100]), "median {}", s[100]);
    assert!(s[199] > 64 * KIB && s[0] < 2 * KIB, "{} .. {}", s[0], s[199]);
}

#[test]
fn ior_reads_own_files_or_blocks_of_a_shared_file() {
    let w = gen("ior(procs=4,file_mb=2,request_kb=256)");
    assert_eq!(w.files.len(), 4);
    for (p, reqs) in w.processes.iter().enumerate() {
        assert_eq!(w.files[p].writer, p as u32);
        assert_eq!(reqs.len(), 8);
        assert_forward(reqs, p as u32, 0, 2 * MIB, 256 * KIB);
    }
    let s = gen("ior(procs=4,file_mb=2,shared=true)");
    assert_eq!(s.files.len(), 1);
    assert_eq!(s.files[0].size, 8 * MIB);
    for (p, reqs) in s.processes.iter().enumerate() {
        let p = p as u64;
        assert_forward(reqs, 0, p * 2 * MIB, (p + 1) * 2 * MIB, 256 * KIB);
    }
}

#[test]
fn tac_reads_backward_last_block_first() {
    let w = gen("tac(procs=2,file_mb=1)");
    for (p, reqs) in w.processes.iter().enumerate() {
        assert_eq!(reqs.len(), 256);
        assert_eq!(reqs[0].offset, MIB - 4 * KIB, "starts at the last block");
        assert_eq!(reqs[255].offset, 0);
        assert!(reqs.windows(2).all(|x| x[1].offset + 4 * KIB == x[0].offset), "strictly backward, adjacent");
        assert!(reqs.iter().all(|r| r.len == 4 * KIB && r.file == p as u32));
    }
    // A request size that does not divide the file: the first (last-in-file) piece is short.
    let w = gen("tac(procs=1,file_mb=1,request_kb=3)");
    let r = &w.processes[0];
    assert_eq!(r[0].offset + r[0].len, MIB);
    assert_eq!(r[0].offset % (3 * KIB), 0);
    assert_eq!(r.iter().map(|x| x.len).sum::<u64>(), MIB);
}

#[test]
fn strided_reads_one_piece_and_skips_one() {
    let w = gen("strided-4k(procs=2,file_mb=1)");
    for (p, reqs) in w.processes.iter().enumerate() {
        assert_eq!(reqs.len(), 128);
        for (i, r) in reqs.iter().enumerate() {
            assert_eq!((r.file, r.offset, r.len), (p as u32, i as u64 * 8 * KIB, 4 * KIB));
        }
    }
    let w = gen("strided-512k(procs=1,file_mb=4)");
    let offs: Vec<(u64, u64)> = w.processes[0].iter().map(|r| (r.offset / KIB, r.len / KIB)).collect();
    assert_eq!(offs, vec![(0, 512), (1024, 512), (2048, 512), (3072, 512)]);
    // fill: a second pass reads the gaps, so the whole file is read once.
    let w = gen("strided-4k(procs=1,file_mb=1,fill=true)");
    let r = &w.processes[0];
    assert_eq!(r.len(), 256);
    assert_eq!((r[128].offset, r[129].offset), (4 * KIB, 12 * KIB));
    let mut offs: Vec<u64> = r.iter().map(|x| x.offset).collect();
    offs.sort_unstable();
    assert!(offs.iter().enumerate().all(|(i, &o)| o == i as u64 * 4 * KIB));
    // Custom stride.
    let w = gen("strided-4k(procs=1,file_mb=1,stride_kb=64)");
    assert_eq!(w.processes[0].len(), 16);
    assert_eq!(w.processes[0][1].offset, 64 * KIB);
}

#[test]
fn loop_repeats_the_file_set() {
    let w = gen("loop(procs=2,files=30,loops=3,request_kb=8)");
    assert_eq!(w.files.len(), 30, "shared set");
    assert!(w.files.iter().all(|f| f.writer == 0));
    let one_pass: usize = w.files.iter().map(|f| f.size.div_ceil(8 * KIB) as usize).sum();
    for reqs in &w.processes {
        assert_eq!(reqs.len(), 3 * one_pass);
        assert_eq!(&reqs[..one_pass], &reqs[one_pass..2 * one_pass], "every pass identical");
        let mut i = 0;
        for (f, info) in w.files.iter().enumerate() {
            let n = info.size.div_ceil(8 * KIB) as usize;
            assert_forward(&reqs[i..i + n], f as u32, 0, info.size, 8 * KIB);
            i += n;
        }
    }
    let own = gen("loop(procs=2,files=30,loops=1,shared=false)");
    assert_eq!(own.files.len(), 60);
    assert!(own.processes[1].iter().all(|r| r.file >= 30));
    assert_eq!(own.files[45].writer, 1);
}

#[test]
fn random_reads_are_aligned_and_spread_or_skewed() {
    let w = gen("random(procs=2,files=4,file_mb=4,requests=20000)");
    let pieces = 4 * 1024; // 4 files × 1024 pieces of 4 KiB
    for reqs in &w.processes {
        assert_eq!(reqs.len(), 20_000);
        let mut count = vec![0u32; pieces];
        for r in reqs {
            assert_eq!((r.len, r.offset % (4 * KIB), r.op), (4 * KIB, 0, Op::Read));
            count[(r.file as u64 * 1024 + r.offset / (4 * KIB)) as usize] += 1;
        }
        // Uniform: every file gets about a quarter, no piece is hot.
        for f in 0..4 {
            let n: u32 = count[f * 1024..(f + 1) * 1024].iter().sum();
            assert!((4500..5500).contains(&n), "file {f}: {n}");
        }
        assert!(*count.iter().max().unwrap() < 20);
        // Hardly any sequential successors (seed 001: tpc-h has 3 % sequential references).
        let seq = reqs.windows(2).filter(|x| x[1].file == x[0].file && x[1].offset == x[0].offset + x[0].len);
        assert!(seq.count() < 100);
    }
    assert_ne!(w.processes[0], w.processes[1], "processes draw from different streams");
    let z = gen("random(procs=1,files=4,file_mb=4,requests=20000,dist=zipf,alpha=1.0)");
    let mut count = std::collections::HashMap::new();
    for r in &z.processes[0] {
        *count.entry((r.file, r.offset)).or_insert(0u32) += 1;
    }
    let top = *count.values().max().unwrap();
    assert!(top > 1000, "the most popular piece gets ~1/H(4096) ≈ 11 % of requests: {top}");
    let wr = gen("random(requests=10000,write_pct=30)");
    let writes = wr.processes[0].iter().filter(|r| r.op == Op::Write).count();
    assert!((2700..3300).contains(&writes), "{writes}");
}

#[test]
fn mixes_combine_looping_and_random_processes() {
    for (spec, lp, rp) in [("mix-seq(loop_files=20,random_requests=500)", 2, 1), ("mix-random(loop_files=20)", 1, 2)] {
        let w = gen(spec);
        assert_eq!(w.processes.len(), lp + rp, "{spec}");
        let loop_files = 20 * lp;
        for p in 0..lp {
            assert!(w.processes[p].iter().all(|r| (r.file as usize) < loop_files), "{spec}");
        }
        for p in lp..lp + rp {
            assert!(w.processes[p].iter().all(|r| r.file as usize >= loop_files && r.len == 4 * KIB), "{spec}");
        }
    }
    let only_random = gen("mix-random(loop_procs=0,random_requests=100)");
    assert_eq!(only_random.processes.len(), 2);
}

/// Seed 001's applications at their default scales against Table 2: files, data and block references scaled
/// by `scale`, and the share of requests that continue the previous one (Table 2's "Seq. refs.") within 7
/// points. (The mixes weight their applications by requests, Table 2 by block references: multi3 is the
/// farthest, 10 % against 16 %.)
#[test]
fn applications_have_table_2s_shape() {
    let scales = [0.1, 0.05, 0.5, 0.1, 0.01, 0.01, 0.1, 0.1, 0.01];
    for (app, &scale) in TABLE2.iter().zip(&scales) {
        let kind = WorkloadKind::from_name(app.name).unwrap();
        assert_eq!(paper_app(kind), Some(app));
        assert_eq!(WorkloadSpec::new(kind).params().unwrap()["scale"], scale, "{}", app.name);
        let w = gen(app.name);
        let data: u64 = w.files.iter().map(|f| f.size).sum();
        let near = |got: f64, want: f64, tol: f64| (got / want - 1.0).abs() <= tol;
        assert!(near(data as f64, app.data_mb * scale * MIB as f64, 0.03), "{}: {data} bytes", app.name);
        let refs = w.block_references(4096) as f64;
        assert!(near(refs, app.references as f64 * scale, 0.10), "{}: {refs} block references", app.name);
        let files = w.files.len() as f64;
        match app.name {
            // Few large files: Table 2's count, smaller. Mixes: their applications' counts.
            "viewperf" | "tpc-h" | "tpc-r" => assert_eq!(files, app.files as f64, "{}", app.name),
            // Mixes: their applications' files (`multis_run_their_applications_side_by_side`).
            "multi1" | "multi2" | "multi3" => {}
            _ => assert_eq!(files, (app.files as f64 * scale).round(), "{}", app.name),
        }
        let seq = 100.0 * w.sequential_fraction();
        assert!((seq - app.consecutive_pct).abs() <= 7.0, "{}: {seq:.1} % sequential requests", app.name);
    }
}

#[test]
fn cscope_queries_read_the_database_then_whole_source_files_two_blocks_at_a_time() {
    let w = gen("cscope(scale=0.02,queries=4)");
    assert_eq!(w.processes.len(), 1);
    let (db, reqs) = (w.files[0].size, &w.processes[0]);
    let db_reqs = db.div_ceil(8 * KIB) as usize;
    let data: u64 = w.files.iter().map(|f| f.size).sum();
    assert!((db as f64 / data as f64 - 0.25).abs() < 0.01, "database: 25 % of the data");
    // Four queries, each the whole database first, then sources in file order, each whole.
    let starts: Vec<usize> = (0..reqs.len()).filter(|&i| reqs[i].file == 0 && reqs[i].offset == 0).collect();
    assert_eq!(starts.len(), 4);
    let mut read_per_query = Vec::new();
    for (q, &at) in starts.iter().enumerate() {
        let end = starts.get(q + 1).copied().unwrap_or(reqs.len());
        assert_forward(&reqs[at..at + db_reqs], 0, 0, db, 8 * KIB);
        let mut i = at + db_reqs;
        let mut last = 0;
        let mut files = 0;
        while i < end {
            let f = reqs[i].file;
            assert!(f > last, "sources in file order, each once per query");
            let n = w.files[f as usize].size.div_ceil(8 * KIB) as usize;
            assert_forward(&reqs[i..i + n], f, 0, w.files[f as usize].size, 8 * KIB);
            (i, last, files) = (i + n, f, files + 1);
        }
        read_per_query.push(files);
    }
    // About 40 % of the 212 sources per query, a different set each time.
    let sources = w.files.len() - 1;
    assert!(read_per_query.iter().all(|&n| (n as f64 / sources as f64 - 0.4).abs() < 0.1), "{read_per_query:?}");
    assert!(reqs.iter().all(|r| r.think_ns == 700_000));
    let (a, b) = (&reqs[starts[0]..starts[1]], &reqs[starts[1]..starts[2]]);
    assert_ne!(a, b);
}

#[test]
fn glimpse_reads_its_index_in_large_chunks_and_few_mostly_small_files() {
    let w = gen("glimpse");
    let reqs = &w.processes[0];
    let text = &w.files[1..];
    // 72 % of the text files are one or two blocks long (the paper).
    let small = text.iter().filter(|f| f.size <= 8 * KIB).count() as f64 / text.len() as f64;
    assert!((small - 0.72).abs() < 0.03, "{small}");
    // Index: 550 MB of text in 669 MB of data.
    let data: u64 = w.files.iter().map(|f| f.size).sum();
    assert!((w.files[0].size as f64 / data as f64 - 119.0 / 669.0).abs() < 0.01);
    assert!(reqs.iter().filter(|r| r.file == 0).all(|r| r.len == 128 * KIB || r.offset + r.len == w.files[0].size));
    assert!(reqs.iter().filter(|r| r.file != 0).all(|r| r.len <= 4 * KIB));
    // "5 % of the accesses to the rest of the files read chunks of 25 or more blocks."
    let rest: Vec<_> = reqs.iter().filter(|r| w.files[r.file as usize].size > 8 * KIB).collect();
    let big = rest.iter().filter(|r| r.len >= 25 * 4096).count() as f64 / rest.len() as f64;
    assert!((0.03..0.07).contains(&big), "{big}");
}

#[test]
fn gcc_reads_each_source_once_and_popular_headers_from_a_small_set() {
    let w = gen("gcc");
    let reqs = &w.processes[0];
    let data: u64 = w.files.iter().map(|f| f.size).sum();
    // Headers first: half the files, 4 MB of the paper's 41 MB (scaled by 0.5).
    let h = (w.files.len() as f64 / 2.0).round() as usize;
    let headers: u64 = w.files[..h].iter().map(|f| f.size).sum();
    assert!((headers as f64 / (2.0 * MIB as f64) - 1.0).abs() < 0.05, "{headers}");
    assert!((data as f64 / (20.5 * MIB as f64) - 1.0).abs() < 0.03);
    let mut reads = vec![0u32; w.files.len()];
    for r in reqs.iter().filter(|r| r.offset == 0) {
        reads[r.file as usize] += 1;
    }
    assert!(reads[h..].iter().all(|&n| n == 1), "each source file read once");
    let mut hr: Vec<u32> = reads[..h].to_vec();
    hr.sort_unstable();
    assert!(hr[h - 1] > 500 && hr[h / 2] < 100, "a few headers read by most units: {:?}", &hr[h - 3..]);
    // "50 % of references are to files that are at most two blocks long" (block references).
    let small: u64 = reqs
        .iter()
        .filter(|r| w.files[r.file as usize].size <= 8 * KIB)
        .map(|r| (r.offset + r.len - 1) / 4096 - r.offset / 4096 + 1)
        .sum();
    let share = small as f64 / w.block_references(4096) as f64;
    assert!((0.45..0.65).contains(&share), "{share}");
}

#[test]
fn viewperf_loops_over_a_few_large_files_with_think_time() {
    let w = gen("viewperf");
    let reqs = &w.processes[0];
    let data: u64 = w.files.iter().map(|f| f.size).sum();
    let big: u64 = w.files[..7].iter().map(|f| f.size).sum();
    assert!((big as f64 / data as f64 - 0.97).abs() < 0.01);
    // Each test reads its data file whole at least twice, 4 KiB at a time, 2.8 ms of think time per read.
    for t in 0..7u32 {
        let starts = reqs.iter().filter(|r| r.file == t && r.offset == 0).count();
        assert!((2..=3).contains(&starts), "file {t}: {starts} passes");
    }
    assert!(reqs.iter().all(|r| r.len <= 4 * KIB && r.think_ns == 2_800_000));
    assert!(w.sequential_fraction() > 0.99);
}

#[test]
fn tpc_reads_records_at_random_blocks_each_block_twice() {
    let w = gen("tpc-h(scale=0.002)");
    let reqs = &w.processes[0];
    assert_eq!(w.files.len(), 49);
    assert!(w.files.windows(2).all(|f| f[0].size >= f[1].size), "a few large files, many smaller");
    assert!(reqs.iter().all(|r| r.len == 256 && r.offset % 256 == 0 && r.think_ns == 0));
    // Two streams, interleaved: each stream's reads come in pairs to one block.
    for s in 0..2 {
        let mine: Vec<_> = reqs.iter().skip(s).step_by(2).collect();
        for pair in mine.chunks_exact(2) {
            assert_eq!((pair[0].file, pair[0].offset / 4096), (pair[1].file, pair[1].offset / 4096));
        }
    }
    // Blocks are spread over the data: most of it is touched.
    let distinct: std::collections::HashSet<_> = reqs.iter().map(|r| (r.file, r.offset / 4096)).collect();
    let blocks: u64 = w.files.iter().map(|f| f.size / 4096).sum();
    assert!(distinct.len() as f64 > 0.9 * blocks as f64, "{} of {blocks}", distinct.len());
    let r = gen("tpc-r");
    assert!(r.requests() < gen("tpc-h").requests());
}

#[test]
fn multis_run_their_applications_side_by_side() {
    let m = gen("multi2(scale=0.02)");
    assert_eq!(m.processes.len(), 3);
    let parts =
        [gen("cscope(scale=0.02,seed=42)"), gen("gcc(scale=0.02,seed=43)"), gen("viewperf(scale=0.02,seed=44)")];
    let mut base = 0u32;
    for (p, w) in parts.iter().enumerate() {
        // The same requests as the application alone, on its own files (written by its process).
        let shifted: Vec<FileRequest> =
            w.processes[0].iter().map(|r| FileRequest { file: r.file + base, ..*r }).collect();
        assert_eq!(m.processes[p], shifted, "process {p}");
        let mine = &m.files[base as usize..base as usize + w.files.len()];
        assert!(mine.iter().zip(&w.files).all(|(a, b)| a.size == b.size && a.writer == p as u32));
        base += w.files.len() as u32;
    }
    assert_eq!(base as usize, m.files.len());
    let e = WorkloadSpec::parse("multi1(apps=cscope+loop)").unwrap_err();
    assert!(matches!(&e, SpecError::BadValue { param, .. } if param == "apps"), "{e}");
    assert!(WorkloadSpec::parse("multi1(apps=cscope++gcc)").is_err());
    assert_eq!(gen("multi1(apps=tpc-r,scale=0.001)").processes.len(), 1);
}

#[test]
fn sequential_fraction_counts_continuations() {
    assert_eq!(gen("ior(procs=2,file_mb=1,request_kb=256)").sequential_fraction(), 6.0 / 8.0);
    assert_eq!(gen("strided-4k(procs=1,file_mb=1)").sequential_fraction(), 0.0);
    assert_eq!(gen("tac(procs=1,file_mb=1)").sequential_fraction(), 0.0);
    assert!(gen("random(requests=10000)").sequential_fraction() < 0.01);
    assert_eq!(Workload::default().sequential_fraction(), 0.0);
}

#[test]
fn generators_are_deterministic_and_seeded() {
    for spec in [
        "kernel-read(files=100)",
        "loop(files=50)",
        "random(requests=1000)",
        "mix-seq(loop_files=10)",
        "cscope(scale=0.01)",
        "glimpse(scale=0.005)",
        "gcc(scale=0.05)",
        "viewperf(scale=0.01)",
        "tpc-h(scale=0.001)",
        "multi3(scale=0.001)",
    ] {
        assert_eq!(gen(spec), gen(spec), "{spec}");
    }
    assert_ne!(gen("kernel-read(files=100,seed=1)").files, gen("kernel-read(files=100,seed=2)").files);
    assert_ne!(gen("random(requests=100,seed=1)"), gen("random(requests=100,seed=2)"));
    assert_ne!(gen("cscope(scale=0.01,seed=1)"), gen("cscope(scale=0.01,seed=2)"));
    assert_ne!(gen("tpc-h(scale=0.001,seed=1)"), gen("tpc-h(scale=0.001,seed=2)"));
    // The workload is named by its spec.
    assert_eq!(gen("tac(procs=1, file_mb=1)").name, "tac(procs=1, file_mb=1)");
}

#[test]
fn every_default_workload_is_valid_and_sized_for_seconds() {
    for &k in WorkloadKind::ALL {
        let w = gen(k.name());
        let n = w.requests();
        assert!((100..=200_000).contains(&n), "{}: {n} requests", k.name());
        assert!(w.files.iter().map(|f| f.size).sum::<u64>() <= 512 * MIB, "{}", k.name());
    }
}

#[test]
fn files_written_concurrently_interleave_only_on_block_groups() {
    let w = gen("strided-4k(procs=2,file_mb=4)");
    // ext2-like block groups (no reservation windows, one goal for every writer): chunk by chunk.
    let bg = LayoutSpec::parse("block-groups(rsv_min=0,colours=1)").unwrap().build(&w.files, 4096, 7).unwrap();
    let ct = FileMap::build(LayoutKind::Contiguous, &w.files, 4096, 7);
    bg.validate(&w.files).unwrap();
    assert!(bg.extents(0).len() > 50 && bg.extents(1).len() > 50);
    assert_eq!((ct.extents(0).len(), ct.extents(1).len()), (1, 1));
    // A 128 KiB disk segment under block-groups holds blocks of both files.
    let seg = |m: &FileMap, f: u32| -> std::collections::HashSet<u64> {
        m.extents(f).iter().flat_map(|&(_, d, n)| d..d + n).map(|d| d / 32).collect()
    };
    assert!(seg(&bg, 0).intersection(&seg(&bg, 1)).count() > 10);
    assert_eq!(seg(&ct, 0).intersection(&seg(&ct, 1)).count(), 0);
}

#[test]
fn spec_errors_name_the_problem() {
    let e = WorkloadSpec::parse("nope").unwrap_err();
    assert!(matches!(&e, SpecError::Unknown(u) if u.name == "nope" && u.what == "workload"), "{e}");
    assert!(e.to_string().contains("strided-4k"), "{e}");
    let e = WorkloadSpec::parse("strided-4k(procs=8,bogus=1)").unwrap_err();
    assert!(matches!(&e, SpecError::UnknownParam { param, .. } if param == "bogus"), "{e}");
    assert!(e.to_string().contains("file_mb"), "lists the known ones: {e}");
    let e = WorkloadSpec::parse("strided-4k(file_mb=big)").unwrap_err();
    assert!(matches!(&e, SpecError::BadValue { param, .. } if param == "file_mb"), "{e}");
    let e = WorkloadSpec::parse("tac(procs=33)").unwrap_err();
    assert!(matches!(&e, SpecError::BadValue { param, .. } if param == "procs"), "{e}");
    assert!(WorkloadSpec::parse("tac(procs=0)").is_err());
    let e = WorkloadSpec::parse("strided-4k(stride_kb=2)").unwrap_err();
    assert!(e.to_string().contains("stride_kb"), "{e}");
    let e = WorkloadSpec::parse("random(dist=pareto)").unwrap_err();
    assert!(e.to_string().contains("'dist'"), "{e}");
    let e = WorkloadSpec::parse("mix-seq(random_file_mb=0)").unwrap_err();
    assert!(e.to_string().contains("random_file_mb"), "{e}");
    let e = WorkloadSpec::parse("ior(procs=2").unwrap_err();
    assert!(matches!(e, SpecError::Syntax { .. }), "{e}");
    let e = WorkloadSpec::parse("ior(procs)").unwrap_err();
    assert!(e.to_string().contains("key=value"), "{e}");
    let e = WorkloadSpec::parse("random(requests=100000000,procs=32)").unwrap_err();
    assert!(matches!(e, SpecError::TooLarge { .. }), "{e}");
    // Names are case-insensitive, '_' for '-', parameters with '-' for '_'.
    let s = WorkloadSpec::parse("Strided_4K(file-mb=1)").unwrap();
    assert_eq!(s.kind, WorkloadKind::Strided4k);
    assert_eq!(s.params().unwrap()["file_mb"], 1);
}

#[test]
fn list_describes_every_generator() {
    let l = list();
    assert_eq!(l.len(), WorkloadKind::ALL.len());
    let s4 = l.iter().find(|g| g.name == "strided-4k").unwrap();
    let rk = s4.params.iter().find(|p| p.0 == "request_kb").unwrap();
    assert_eq!(rk.1, "4");
    let s512 = l.iter().find(|g| g.name == "strided-512k").unwrap();
    assert_eq!(s512.params.iter().find(|p| p.0 == "stride_kb").unwrap().1, "1024");
    // Every generator but seed 001's applications (one process each, or one per application) takes processes.
    for g in &l {
        let app = paper_app(WorkloadKind::from_name(g.name).unwrap()).is_some();
        assert!(!g.summary.is_empty() && (app || g.params.iter().any(|p| p.0.contains("procs"))), "{}", g.name);
        assert_eq!(app, g.params.iter().any(|p| p.0 == "scale"), "{}", g.name);
    }
}

/// Prints the size of every default workload (for docs/workloads.md):
/// `cargo test -p blockwell-sim --test workload_generators default_sizes -- --ignored --nocapture`.
#[test]
#[ignore]
fn default_sizes() {
    println!(
        "| workload | processes | files | data (MiB) | requests | bytes requested (MiB) | 4 KiB block references | \
         sequential requests | consecutive block references |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for &k in WorkloadKind::ALL {
        let w = gen(k.name());
        let data: u64 = w.files.iter().map(|f| f.size).sum();
        println!(
            "| `{}` | {} | {} | {:.1} | {} | {:.1} | {} | {:.0} % | {:.0} % |",
            k.name(),
            w.processes.len(),
            w.files.len(),
            data as f64 / MIB as f64,
            w.requests(),
            w.bytes() as f64 / MIB as f64,
            w.block_references(4096),
            100.0 * w.sequential_fraction(),
            100.0 * w.consecutive_block_fraction(4096)
        );
    }
}

/// Prints how each layout places two generated workloads (for docs/workloads.md):
/// `cargo test -p blockwell-sim --test workload_generators layout_stats -- --ignored --nocapture`.
#[test]
#[ignore]
fn layout_stats() {
    println!("| workload | layout | extents per file | mean extent (KiB) | 128 KiB segments holding 2+ files | disk span (MiB) |");
    println!("|---|---|---|---|---|---|");
    for spec in ["strided-4k(procs=8)", "kernel-read(procs=8)"] {
        let w = gen(spec);
        for layout in
            ["contiguous", "block-groups", "block-groups(rsv_min=0)", "single-extent", "scattered", "reiserfs"]
        {
            let m = LayoutSpec::parse(layout).unwrap().build(&w.files, 4096, 1).unwrap();
            m.validate(&w.files).unwrap();
            let extents: usize = (0..w.files.len() as u32).map(|f| m.extents(f).len()).sum();
            let blocks: u64 = w.files.iter().map(|f| f.size.div_ceil(4096)).sum();
            let mut owner: std::collections::HashMap<u64, (u32, bool)> = std::collections::HashMap::new();
            for f in 0..w.files.len() as u32 {
                for &(_, d, n) in m.extents(f) {
                    for seg in d / 32..=(d + n - 1) / 32 {
                        let e = owner.entry(seg).or_insert((f, false));
                        if e.0 != f {
                            e.1 = true;
                        }
                    }
                }
            }
            let shared = owner.values().filter(|v| v.1).count();
            println!(
                "| `{spec}` | `{layout}` | {:.1} | {:.1} | {:.0} % | {:.0} |",
                extents as f64 / w.files.len() as f64,
                blocks as f64 * 4.0 / extents as f64,
                100.0 * shared as f64 / owner.len() as f64,
                m.disk_blocks() as f64 * 4096.0 / MIB as f64
            );
        }
    }
}

/// The error messages quoted in docs/workloads.md.
#[test]
fn documented_error_messages() {
    let e = |s: &str| WorkloadSpec::parse(s).unwrap_err().to_string();
    assert_eq!(
        e("nope"),
        "unknown workload 'nope' (known: kernel-read, ior, tac, strided-4k, strided-512k, loop, random, mix-seq, \
         mix-random, cscope, glimpse, gcc, viewperf, tpc-h, tpc-r, multi1, multi2, multi3)"
    );
    assert_eq!(
        e("strided-4k(bogus=1)"),
        "workload 'strided-4k': unknown parameter 'bogus' (known: file_mb, fill, procs, request_kb, stride_kb, think_us)"
    );
    assert_eq!(e("tac(procs=33)"), "workload 'tac': parameter 'procs': 33 is not between 1 and 32");
    assert_eq!(
        e("strided-4k(file_mb=big)"),
        "workload 'strided-4k': parameter 'file_mb': invalid type: string \"big\", expected u64"
    );
}

/// Times generation and layout at the papers' scale (32 processes, 1 GiB files; a kernel tree of 18,000 files
/// per process): `cargo test --release -p blockwell-sim --test workload_generators paper_scale -- --ignored
/// --nocapture`.
#[test]
#[ignore]
fn paper_scale_timing() {
    println!("| workload | requests | generate | contiguous | block-groups | single-extent | scattered | reiserfs |");
    println!("|---|---|---|---|---|---|---|---|");
    for spec in [
        "strided-4k(procs=32,file_mb=1024)",
        "tac(procs=32,file_mb=1024)",
        "kernel-read(procs=32,files=18000,dirs=1000)",
    ] {
        let t = std::time::Instant::now();
        let w = gen(spec);
        let mut row = format!("| `{spec}` | {} | {:.0} ms |", w.requests(), t.elapsed().as_secs_f64() * 1e3);
        for &k in LayoutKind::ALL {
            let t = std::time::Instant::now();
            let m = FileMap::build(k, &w.files, 4096, 1);
            row += &format!(" {:.0} ms |", t.elapsed().as_secs_f64() * 1e3);
            assert_eq!(m.files(), w.files.len());
        }
        println!("{row}");
    }
}
