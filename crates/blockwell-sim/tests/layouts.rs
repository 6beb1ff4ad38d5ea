//! File layouts: invariants over random file sets, interleaving of concurrently written files, determinism.

use blockwell_sim::layout::{creation_schedule, FileMap, LayoutError, LayoutKind, LayoutParams};
use blockwell_sim::workload::FileInfo;
use proptest::prelude::*;

const BS: u64 = 4096;

fn file(size: u64, writer: u32, dir: u32) -> FileInfo {
    FileInfo { size, writer, dir }
}

/// Small groups and allocation groups so that spilling between groups is exercised.
fn small_params() -> LayoutParams {
    LayoutParams { group_bytes: 64 * BS, group_reserved_bytes: 3 * BS, ag_bytes: 100 * BS, ..LayoutParams::default() }
}

/// All disk blocks of a file, in file order, from `runs` over the whole file.
fn disk_blocks_of(m: &FileMap, f: u32, size: u64) -> Vec<u64> {
    let mut runs = Vec::new();
    m.runs(f, 0, size.div_ceil(BS), &mut runs);
    runs.iter().flat_map(|&(d, n)| d..d + n).collect()
}

fn files_strategy() -> impl Strategy<Value = Vec<FileInfo>> {
    prop::collection::vec((0u64..300_000, 0u32..4, 0u32..5).prop_map(|(s, w, d)| file(s, w, d)), 0..24)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn every_layout_maps_each_block_once(files in files_strategy(), seed in any::<u64>(), small in any::<bool>()) {
        let params = if small { small_params() } else { LayoutParams::default() };
        for &kind in LayoutKind::ALL {
            let m = FileMap::build_with(kind, &files, BS, seed, &params).unwrap();
            prop_assert_eq!(m.validate(&files), Ok(()), "{}", kind);
            // runs() over the whole file covers exactly its blocks, in file order, and no block twice overall.
            let mut seen = std::collections::HashSet::new();
            for (i, f) in files.iter().enumerate() {
                let blocks = disk_blocks_of(&m, i as u32, f.size);
                prop_assert_eq!(blocks.len() as u64, f.size.div_ceil(BS));
                for b in blocks {
                    prop_assert!(b < m.disk_blocks());
                    prop_assert!(seen.insert(b), "{}: disk block {} twice", kind, b);
                }
            }
            // A sub-range maps to the matching slice of the whole file's blocks.
            if let Some((i, f)) = files.iter().enumerate().find(|(_, f)| f.size > 3 * BS) {
                let all = disk_blocks_of(&m, i as u32, f.size);
                let mut runs = Vec::new();
                m.runs(i as u32, 1, 2, &mut runs);
                let part: Vec<u64> = runs.iter().flat_map(|&(d, n)| d..d + n).collect();
                prop_assert_eq!(&part[..], &all[1..3]);
            }
            // Same seed, same map.
            prop_assert_eq!(&m, &FileMap::build_with(kind, &files, BS, seed, &params).unwrap());
        }
    }

    #[test]
    fn schedule_covers_every_block(files in files_strategy(), seed in any::<u64>()) {
        let p = LayoutParams::default();
        let s = creation_schedule(&files, BS, &p, seed);
        let mut per_file = vec![0u64; files.len()];
        for c in &s {
            prop_assert!(c.blocks >= 1 && c.blocks <= 16);
            per_file[c.file as usize] += c.blocks;
        }
        for (f, n) in files.iter().zip(per_file) {
            prop_assert_eq!(n, f.size.div_ceil(BS));
        }
    }
}

/// Extents (disk start, blocks) of a file.
fn extents(m: &FileMap, f: u32) -> Vec<(u64, u64)> {
    m.extents(f).iter().map(|&(_, d, n)| (d, n)).collect()
}

/// Two 4 MiB files of one directory written at the same time by two writers.
fn two_concurrent() -> Vec<FileInfo> {
    vec![file(4 << 20, 0, 7), file(4 << 20, 1, 7)]
}

/// `block-groups` without reservation windows and colours: ext2's allocation, first free block after the goal.
fn ext2_like() -> LayoutParams {
    LayoutParams { rsv_min: 0, colours: 1, ..LayoutParams::default() }
}

#[test]
fn block_groups_interleave_concurrently_written_files() {
    let files = two_concurrent();
    let m = FileMap::build_with(LayoutKind::BlockGroups, &files, BS, 1, &ext2_like()).unwrap();
    let (a, b) = (extents(&m, 0), extents(&m, 1));
    // Without windows: 1024 blocks each in 4-64 KiB chunks: many extents, none longer than a chunk (16 blocks).
    assert!(a.len() >= 1024 / 16 && b.len() >= 1024 / 16, "{} {}", a.len(), b.len());
    assert!(a.iter().chain(&b).all(|&(_, n)| n <= 16));
    // Interleaved: between two extents of file 0 lies an extent of file 1, in one group.
    let mut all: Vec<(u64, u32)> = a.iter().map(|e| (e.0, 0)).chain(b.iter().map(|e| (e.0, 1))).collect();
    all.sort_unstable();
    let switches = all.windows(2).filter(|w| w[0].1 != w[1].1).count();
    assert!(switches >= all.len() - 2, "{switches} switches among {} extents", all.len());
    let span = all.last().unwrap().0 - all[0].0;
    assert!(span < 2048 + 16, "both files packed in their group: span {span}");

    // ext3's reservation windows, same goal (colours=1): the writers leapfrog in windows of 8 blocks doubling
    // to 1027, so each file has a few extents (whole windows, merged where one follows the file's previous one)
    // instead of 64 or more.
    let p = LayoutParams { colours: 1, ..LayoutParams::default() };
    let m = FileMap::build_with(LayoutKind::BlockGroups, &files, BS, 1, &p).unwrap();
    m.validate(&files).unwrap();
    for f in 0..2 {
        let e = extents(&m, f);
        assert!((2..=10).contains(&e.len()), "file {f}: {e:?}");
        let sizes: Vec<u64> = e.iter().map(|x| x.1).collect();
        assert!(sizes.iter().any(|&n| n >= 256), "{sizes:?}");
    }
    // Default (16 colours): the two writers' first goals are 1/16 group (2048 blocks) apart, and 4 MiB files
    // never meet: one extent each.
    let m = FileMap::build(LayoutKind::BlockGroups, &files, BS, 1);
    let (a, b) = (extents(&m, 0), extents(&m, 1));
    assert_eq!((a.len(), b.len()), (1, 1), "{a:?} {b:?}");
    assert_eq!(a[0].0.abs_diff(b[0].0) % 2048, 0, "{a:?} {b:?}");

    // Contiguous and single-extent: one extent each, not interleaved.
    for kind in [LayoutKind::Contiguous, LayoutKind::SingleExtent] {
        let m = FileMap::build(kind, &files, BS, 1);
        assert_eq!(extents(&m, 0).len(), 1, "{kind}");
        assert_eq!(extents(&m, 1).len(), 1, "{kind}");
    }
    let c = FileMap::build(LayoutKind::Contiguous, &files, BS, 1);
    assert_eq!((extents(&c, 0), extents(&c, 1)), (vec![(0, 1024)], vec![(1024, 1024)]));
}

#[test]
fn block_groups_one_writer_is_sequential_and_directories_spread() {
    // One writer: its files are written one after another, each one extent, adjacent in the group.
    let files = vec![file(1 << 20, 0, 3), file(1 << 20, 0, 3)];
    let m = FileMap::build(LayoutKind::BlockGroups, &files, BS, 5);
    let (a, b) = (extents(&m, 0), extents(&m, 1));
    assert_eq!((a.len(), b.len()), (1, 1));
    assert_eq!(a[0].0 + 256, b[0].0);
    // The group's first blocks are metadata.
    let g = 32768;
    assert!(a[0].0 % g >= 514, "{}", a[0].0 % g);
    // 64 directories of 8 MiB filling 5 % of the disk (80 groups) land in many different groups.
    let p = LayoutParams { fill: 0.05, ..LayoutParams::default() };
    let files: Vec<FileInfo> = (0..64).map(|d| file(8 << 20, 0, d)).collect();
    let m = FileMap::build_with(LayoutKind::BlockGroups, &files, BS, 5, &p).unwrap();
    let groups: std::collections::HashSet<u64> = (0..64).map(|f| extents(&m, f)[0].0 / g).collect();
    assert!(groups.len() >= 30, "{} groups used", groups.len());
}

#[test]
fn block_groups_spill_when_a_group_is_full() {
    let p = small_params(); // 64-block groups, 3 reserved
    let files = vec![file(200 * BS, 0, 0)];
    let m = FileMap::build_with(LayoutKind::BlockGroups, &files, BS, 0, &p).unwrap();
    m.validate(&files).unwrap();
    for &(_, d, n) in m.extents(0) {
        assert!(d % 64 >= 3 && d % 64 + n <= 64, "extent ({d}, {n}) crosses metadata or a group end");
    }
    assert!(m.extents(0).len() >= 4, "200 blocks need 4 groups of 61");
}

#[test]
fn single_extent_places_in_creation_order_by_directory_group() {
    // 400 blocks filling a tenth of the disk: 4 allocation groups of 1000 blocks.
    let p = LayoutParams { ag_bytes: 1000 * BS, fill: 0.1, ..LayoutParams::default() };
    // Writers 0 and 1 each write two files concurrently; dirs 0 and 1.
    let files = vec![file(100 * BS, 0, 0), file(100 * BS, 0, 0), file(100 * BS, 1, 1), file(100 * BS, 1, 1)];
    let m = FileMap::build_with(LayoutKind::SingleExtent, &files, BS, 0, &p).unwrap();
    m.validate(&files).unwrap();
    let start = |f| extents(&m, f)[0].0;
    // Dir 0 → AG 0, dir 1 → AG 1; each AG packed in creation order.
    assert_eq!((start(0), start(1)), (0, 100));
    assert_eq!((start(2), start(3)), (1000, 1100));
    // A file larger than an AG is still one extent (past the AGs).
    let files = vec![file(1500 * BS, 0, 0)];
    let m = FileMap::build_with(LayoutKind::SingleExtent, &files, BS, 0, &p).unwrap();
    m.validate(&files).unwrap();
    assert_eq!(m.extents(0).len(), 1);
}

#[test]
fn reiserfs_keeps_directories_together_in_creation_order_and_shuffles_their_files() {
    // Two writers create two directories of 40 one-to-three-block files each, concurrently; writer 1 starts
    // later (a first file of 20 blocks in its own directory 2, created before directory 1).
    let mut files = vec![file(20 * BS, 1, 2)];
    for i in 0..80u32 {
        let (w, d) = if i < 40 { (0, 0) } else { (1, 1) };
        files.push(file((1 + u64::from(i % 3)) * BS, w, d));
    }
    let m = FileMap::build(LayoutKind::Reiserfs, &files, BS, 5);
    m.validate(&files).unwrap();
    let start = |f: u32| extents(&m, f)[0].0;
    // Every file in one piece; the data packed without gaps.
    assert!((0..files.len() as u32).all(|f| extents(&m, f).len() == 1));
    let total: u64 = files.iter().map(|f| f.size / BS).sum();
    assert_eq!(m.disk_blocks(), total);
    // Directory 0 (writer 0's first file, round 0) first, then directory 2 (writer 1's first), then 1: each
    // directory's span holds exactly its files.
    let span = |fs: std::ops::Range<u32>| {
        let lo = fs.clone().map(start).min().unwrap();
        let hi = fs.clone().map(|f| start(f) + files[f as usize].size / BS).max().unwrap();
        (lo, hi)
    };
    let blocks = |fs: std::ops::Range<u32>| fs.map(|f| files[f as usize].size / BS).sum::<u64>();
    let (d0, d1) = (span(1..41), span(41..81));
    assert_eq!(d0, (0, blocks(1..41)));
    assert_eq!(start(0), d0.1);
    assert_eq!(d1, (d0.1 + 20, total));
    // Within a directory, reading in file order jumps back and forth.
    let back = (2..41).filter(|&f| start(f) < start(f - 1)).count();
    assert!(back > 8 && back < 32, "{back} of 39 steps go backwards");
    // Deterministic per seed; another seed, another order.
    assert_eq!(m, FileMap::build(LayoutKind::Reiserfs, &files, BS, 5));
    assert_ne!(m, FileMap::build(LayoutKind::Reiserfs, &files, BS, 6));
}

#[test]
fn scattered_runs_are_shuffled_within_windows() {
    let files = vec![file(8 << 20, 0, 0)];
    let m = FileMap::build(LayoutKind::Scattered, &files, BS, 9);
    m.validate(&files).unwrap();
    let e = extents(&m, 0);
    // Runs of 1-16 blocks (adjacent runs may merge): many small extents.
    assert!(e.len() >= 2048 / 24, "{} extents", e.len());
    assert!(e.iter().map(|x| x.1).sum::<u64>() / e.len() as u64 <= 16);
    // Consecutive extents jump around, both directions, within a window...
    let back = e.windows(2).filter(|w| w[1].0 < w[0].0).count();
    assert!(back > e.len() / 4 && back < 3 * e.len() / 4, "{back} of {}", e.len());
    // ...and windows (16 slots of 16 blocks) follow each other in file order.
    let win: Vec<u64> = e.iter().map(|x| x.0 / 256).collect();
    assert!(win.windows(2).all(|w| w[1] >= w[0]), "{win:?}");
    assert!(win.last().unwrap() - win[0] >= 2048 / 16 / 8 - 1);
    // Another seed gives another placement.
    assert_ne!(m, FileMap::build(LayoutKind::Scattered, &files, BS, 10));
    // A window as large as the region: random over the whole region, windows no longer ordered.
    let p = LayoutParams { window: 1 << 20, ..LayoutParams::default() };
    let g = FileMap::build_with(LayoutKind::Scattered, &files, BS, 9, &p).unwrap();
    g.validate(&files).unwrap();
    let win: Vec<u64> = extents(&g, 0).iter().map(|x| x.0 / 256).collect();
    assert!(win.windows(2).filter(|w| w[1] < w[0]).count() > win.len() / 4);
}

#[test]
fn bad_params_name_the_parameter() {
    let files = two_concurrent();
    let bad = |p: LayoutParams| FileMap::build_with(LayoutKind::BlockGroups, &files, BS, 0, &p).unwrap_err();
    let e = bad(LayoutParams { chunk_min: 0, ..LayoutParams::default() });
    assert!(matches!(e, LayoutError::BadParam { param: "chunk_min", .. }), "{e}");
    let e = bad(LayoutParams { group_reserved_bytes: 1 << 30, ..LayoutParams::default() });
    assert!(e.to_string().contains("group_reserved_bytes"), "{e}");
    let e = bad(LayoutParams { window: 0, ..LayoutParams::default() });
    assert!(e.to_string().contains("window"), "{e}");
    let e = bad(LayoutParams { fill: 0.0, ..LayoutParams::default() });
    assert!(e.to_string().contains("fill"), "{e}");
    // build never panics, even on a block size of 0 or an unknown file.
    let m = FileMap::build(LayoutKind::Scattered, &files, 0, 0);
    let mut out = Vec::new();
    m.runs(99, 0, 10, &mut out);
    assert!(out.is_empty());
}

#[test]
fn scattered_with_a_huge_window_spans_only_what_the_data_needs() {
    let files = vec![file(8 << 20, 0, 0)];
    let p = LayoutParams { window: 1 << 40, ..LayoutParams::default() };
    let m = FileMap::build_with(LayoutKind::Scattered, &files, BS, 9, &p).unwrap();
    m.validate(&files).unwrap();
    let runs = m.extents(0).len() as u64;
    // About twice as many 16-block slots as runs (fill 0.5).
    assert!(m.disk_blocks() <= 16 * (2 * 2048 + 2), "{} blocks for {runs} extents", m.disk_blocks());
}
