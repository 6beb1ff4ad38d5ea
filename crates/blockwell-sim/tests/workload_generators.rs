//! Workload generators: the shape of each one, determinism, the registry and its errors.

use blockwell_core::Op;
use blockwell_sim::layout::{FileMap, LayoutKind, LayoutSpec};
use blockwell_sim::workload::{FileRequest, Workload};
use blockwell_sim::workloads::{generate, list, SpecError, WorkloadKind, WorkloadSpec};

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
    for spec in ["kernel-read(files=100)", "loop(files=50)", "random(requests=1000)", "mix-seq(loop_files=10)"] {
        assert_eq!(gen(spec), gen(spec), "{spec}");
    }
    assert_ne!(gen("kernel-read(files=100,seed=1)").files, gen("kernel-read(files=100,seed=2)").files);
    assert_ne!(gen("random(requests=100,seed=1)"), gen("random(requests=100,seed=2)"));
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
    assert!(l.iter().all(|g| !g.summary.is_empty() && g.params.iter().any(|p| p.0.contains("procs"))));
}

/// Prints the size of every default workload (for docs/workloads.md):
/// `cargo test -p blockwell-sim --test workload_generators default_sizes -- --ignored --nocapture`.
#[test]
#[ignore]
fn default_sizes() {
    println!("| workload | processes | files | data (MiB) | requests | bytes requested (MiB) | sequential requests |");
    println!("|---|---|---|---|---|---|---|");
    for &k in WorkloadKind::ALL {
        let w = gen(k.name());
        let data: u64 = w.files.iter().map(|f| f.size).sum();
        println!(
            "| `{}` | {} | {} | {:.1} | {} | {:.1} | {:.0} % |",
            k.name(),
            w.processes.len(),
            w.files.len(),
            data as f64 / MIB as f64,
            w.requests(),
            w.bytes() as f64 / MIB as f64,
            100.0 * w.sequential_fraction()
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
        for layout in ["contiguous", "block-groups", "block-groups(rsv_min=0)", "single-extent", "scattered"] {
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
        "unknown workload 'nope' (known: kernel-read, ior, tac, strided-4k, strided-512k, loop, random, mix-seq, mix-random)"
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
    println!("| workload | requests | generate | contiguous | block-groups | single-extent | scattered |");
    println!("|---|---|---|---|---|---|---|");
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
