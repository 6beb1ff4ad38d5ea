//! File layouts: where a file's blocks live on the disk. The time-aware simulator maps page-cache misses
//! (file, file block) to disk blocks through a [`FileMap`].
//!
//! # The creation model
//!
//! Where a file system puts a file depends on how the file was written. Blockwell models the creation of a
//! workload's files as one concurrent phase ([`creation_schedule`]): every writer ([`FileInfo::writer`]) writes
//! its files one after another in file-index order, all writers at the same time, and the allocator sees their
//! writes round-robin, one chunk per writer per round (a chunk is `chunk_min ..= chunk_max` bytes, 4 KiB–64 KiB
//! by default, drawn from the seed, rounded up to whole blocks and cut at the end of the file). Files written
//! by different writers are therefore written *concurrently*, files of one writer *sequentially*. `block-groups`
//! allocates the chunks in this order; `single-extent` uses it only for the order in which files are created
//! (the round of a file's first chunk), `reiserfs` for the order in which directories are; `contiguous` and
//! `scattered` go by file index.
//!
//! # Layouts
//!
//! - `contiguous`: files one after another in file-index order, each in one piece, no gaps. The ideal
//!   layout (a freshly written, defragmented disk); the baseline.
//! - `block-groups` (ext2/ext3): the disk is divided into block groups of `group_bytes` (128 MiB: ext2/3 with
//!   4 KiB blocks have 32768 blocks per group, one block bitmap block's worth of bits), the first
//!   `group_reserved_bytes` of each holding metadata (two bitmap blocks and the inode table: 2 MiB + 8 KiB
//!   for 16384 inodes of 128 bytes, one per 8 KiB, as mke2fs of the seed's time made them). Directories are spread over the groups
//!   like ext3's Orlov allocator spreads top-level directories: each directory's home group is picked
//!   pseudo-randomly from the seed among the groups of a disk that the data fills to `fill` (half, by
//!   default). A file's blocks are allocated in its directory's group, in the order of the creation schedule, by
//!   the allocator of Linux 2.6.14's ext3 (`balloc.rs`): a file's first block is searched from its group's start
//!   plus a *colour* of `(pid % 16) × group / 16` (`colours`; the writer's pid), the next ones after its last
//!   block, and each open file allocates inside its own *reservation window*, `rsv_min` (8 blocks) doubling to
//!   `rsv_max` (1027 blocks, ~4 MiB) while it fills them, which no other file may use. So files written
//!   concurrently by processes of different colours start 8 MiB apart and stay one extent until they meet; when
//!   they meet (or share a colour), they leapfrog each other in windows of 32 KiB growing to 4 MiB. A file
//!   written alone is one extent. `rsv_min=0` turns the windows off (ext2 of 2.6.14, which had none): then
//!   concurrent writers interleave chunk by chunk (4–64 KiB), and with `colours=1` too every file's search starts
//!   at the group start (the simplest allocator, kept for comparison). A full group spills into the next group
//!   with free space (new groups are added past the end if needed). Not modelled: indirect blocks, delayed
//!   allocation, freed space, ext2's search for free bytes and its 8-block preallocation.
//! - `single-extent` (JFS-like; seed 000 groups XFS with the interleaving file systems, so `block-groups`
//!   with XFS's allocation-group size is the closer model for XFS): every file is one extent, placed in
//!   creation order. The disk is divided into allocation groups of `ag_bytes` (1 GiB, the JFS allocation-group
//!   size seed 000 reports); the k-th directory (in creation order) gets allocation group `k mod groups`, and a
//!   file goes at its group's next free block, or into the next group that has room for the whole file, or
//!   past the end of the disk when none has.
//! - `scattered` (ReiserFS-like apparent randomness, seed 000 §3): each file is cut into runs of
//!   `run_min ..= run_max` blocks (1–16 by default, from the seed). The disk is cut into slots of `run_max`
//!   blocks, and the slots into windows of `window` slots (16: 1 MiB with 4 KiB blocks). Counting the runs of
//!   all files in file order, each window takes the next `max(1, ⌊window × fill⌋)` runs (8 by default) and puts
//!   them at the starts of its slots in a seeded pseudo-random order. So a file's consecutive runs are
//!   scattered within a window, windows follow each other: requests look random at the scale of a window, yet
//!   the blocks of a window are all read within a short span (seed 000 explains its ReiserFS results by prefetched
//!   segments that are reused when the REDCAP cache is large enough for the processes' footprint, and evicted
//!   before reuse when it is not). With
//!   `window` at least the number of slots the whole layout needs, placement is random over the whole region.
//! - `reiserfs` (ReiserFS 3, seed 000 §3): the file system keeps every file in one balanced tree sorted by key,
//!   a file's key starting with its directory's object id and its own, so the files of a directory sit together
//!   in object-id order, which is creation order; readdir, and so a program walking the tree, lists a directory
//!   by the hash of the names. Modelled as: directories one after another in the order they were created (the
//!   round of the first chunk of any of their files in the creation schedule), each directory's files back to
//!   back, each file in one piece, in a seeded pseudo-random order of the directory's files (the hash order of
//!   the names against the order of creation). A program reading a directory's files in file-index order thus
//!   jumps back and forth within the directory's span: the "apparent random accesses" seed 000 reports for
//!   ReiserFS, local to one directory. No parameters; not modelled: tails packed into shared tree nodes (every
//!   file here takes whole blocks), free space, the tree's internal nodes.
//!
//! Every layout gives each block of each file exactly one disk block, never shared with another file block,
//! and is a pure function of (files, block size, seed, parameters).

mod balloc;

use crate::gen::{Permutation, Rng, SplitMix64};
use crate::workload::FileInfo;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

blockwell_core::spec_registry! {
    /// How a file system places files.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
    #[serde(rename_all = "kebab-case")]
    pub enum LayoutKind: "layout" {
        /// Files one after another in file-index order, each in one piece.
        #[default]
        Contiguous => "contiguous", [], "files one after another, each in one piece (ideal, defragmented)";
        /// ext2/ext3-like block groups: a directory's files in one group, concurrently written files interleaved.
        BlockGroups => "block-groups", [],
            "ext2/ext3: directories spread over 128 MiB block groups, concurrently written files interleave";
        /// JFS-like: every file one extent, allocation groups per directory.
        SingleExtent => "single-extent", [], "JFS-like: each file one extent, allocation groups per directory";
        /// ReiserFS-like apparent randomness: small runs at pseudo-random places.
        Scattered => "scattered", [], "ReiserFS-like apparent randomness: 1-16 block runs at pseudo-random places";
        /// ReiserFS: a directory's files together, in an order other than the one they are read in.
        Reiserfs => "reiserfs", [],
            "ReiserFS: a directory's files back to back, in a pseudo-random order against readdir's";
    }
}

impl fmt::Display for LayoutKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LayoutKind {
    type Err = LayoutError;

    /// [`LayoutKind::from_name`]: case, `-` and `_` are ignored (`block_groups`, `BlockGroups`).
    fn from_str(s: &str) -> Result<Self, LayoutError> {
        Ok(Self::from_name(s)?)
    }
}

/// Bad layout names or parameters.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LayoutError {
    #[error(transparent)]
    Unknown(#[from] blockwell_core::spec::UnknownName),
    #[error("unknown layout parameter '{param}' (known: {known})")]
    UnknownParam { param: String, known: String },
    #[error("layout parameter '{param}': {message}")]
    BadParam { param: &'static str, message: String },
}

/// Tuning of the layouts (see the module doc). All sizes in bytes; they are rounded up to whole blocks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LayoutParams {
    /// Creation model: smallest chunk a writer appends at a time.
    pub chunk_min: u64,
    /// Creation model: largest chunk a writer appends at a time.
    pub chunk_max: u64,
    /// `block-groups`: bytes per block group.
    pub group_bytes: u64,
    /// `block-groups`: metadata at the start of each group.
    pub group_reserved_bytes: u64,
    /// `block-groups`: first reservation window of a file (ext3: 8 blocks); 0: no windows (ext2).
    pub rsv_min: u64,
    /// `block-groups`: largest reservation window (ext3: 1027 blocks).
    pub rsv_max: u64,
    /// `block-groups`: goal colours per group (ext2/3: 16, by the writer's pid); 1: every file starts its
    /// search at the group start.
    pub colours: u64,
    /// `single-extent`: bytes per allocation group.
    pub ag_bytes: u64,
    /// `scattered`: smallest run, in blocks.
    pub run_min: u64,
    /// `scattered`: largest run (and slot size), in blocks.
    pub run_max: u64,
    /// `scattered`: slots (of `run_max` blocks) per window within which runs are shuffled.
    pub window: u64,
    /// `block-groups`, `single-extent`, `scattered`: fraction of the disk region the data fills, 0.01 to 1.
    pub fill: f64,
}

impl Default for LayoutParams {
    fn default() -> Self {
        LayoutParams {
            chunk_min: 4 << 10,
            chunk_max: 64 << 10,
            group_bytes: 128 << 20,
            group_reserved_bytes: (2 << 20) + (8 << 10),
            rsv_min: 8 << 12,
            rsv_max: 1027 << 12,
            colours: 16,
            ag_bytes: 1 << 30,
            run_min: 1,
            run_max: 16,
            window: 16,
            fill: 0.5,
        }
    }
}

impl LayoutParams {
    /// Rejects settings no layout can use, naming the parameter.
    pub fn validate(&self, block_size: u64) -> Result<(), LayoutError> {
        let bad = |param, message: String| Err(LayoutError::BadParam { param, message });
        if block_size == 0 {
            return bad("block_size", "must be at least 1 byte".into());
        }
        if self.chunk_min == 0 || self.chunk_min > self.chunk_max {
            return bad("chunk_min", format!("must be between 1 and chunk_max ({})", self.chunk_max));
        }
        let group = self.group_bytes.div_ceil(block_size);
        if group < 2 {
            return bad("group_bytes", format!("must hold at least 2 blocks of {block_size} B"));
        }
        if self.group_reserved_bytes.div_ceil(block_size) >= group {
            return bad("group_reserved_bytes", format!("must be smaller than group_bytes ({})", self.group_bytes));
        }
        if self.rsv_min > 0 && self.rsv_max < self.rsv_min {
            return bad("rsv_max", format!("must be at least rsv_min ({})", self.rsv_min));
        }
        if self.colours == 0 || self.colours > group {
            return bad("colours", format!("must be between 1 and the blocks per group ({group})"));
        }
        if self.ag_bytes < block_size {
            return bad("ag_bytes", format!("must hold at least one block of {block_size} B"));
        }
        if self.run_min == 0 || self.run_min > self.run_max {
            return bad("run_min", format!("must be between 1 and run_max ({})", self.run_max));
        }
        if self.window == 0 {
            return bad("window", "must be at least 1 slot".into());
        }
        if !(self.fill >= 0.01 && self.fill <= 1.0) {
            return bad("fill", format!("{} is not between 0.01 and 1", self.fill));
        }
        Ok(())
    }
}

/// A layout with parameter overrides, as written on a command line: `scattered`, `block-groups(fill=0.3)`,
/// `single-extent(ag_bytes=268435456)`. Values are numbers; parameter names are the fields of [`LayoutParams`]
/// (`-` accepted for `_`).
#[derive(Clone, Debug, PartialEq)]
pub struct LayoutSpec {
    pub kind: LayoutKind,
    pub params: LayoutParams,
}

impl Default for LayoutSpec {
    fn default() -> Self {
        LayoutKind::default().into()
    }
}

impl From<LayoutKind> for LayoutSpec {
    fn from(kind: LayoutKind) -> Self {
        LayoutSpec { kind, params: LayoutParams::default() }
    }
}

impl FromStr for LayoutSpec {
    type Err = LayoutError;
    fn from_str(s: &str) -> Result<Self, LayoutError> {
        LayoutSpec::parse(s)
    }
}

/// The canonical text: the kind's name, then the parameters that differ from the defaults in
/// [`LAYOUT_PARAMS`] order (`block-groups`, `block-groups(rsv_min=0,colours=1)`). Parses back to the same spec.
impl fmt::Display for LayoutSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        let (Ok(serde_json::Value::Object(mine)), Ok(serde_json::Value::Object(defaults))) =
            (serde_json::to_value(&self.params), serde_json::to_value(LayoutParams::default()))
        else {
            return Ok(());
        };
        let changed: Vec<String> = LAYOUT_PARAMS
            .iter()
            .filter_map(|&k| match (mine.get(k), defaults.get(k)) {
                (Some(v), Some(d)) if v != d => Some(format!("{k}={v}")),
                _ => None,
            })
            .collect();
        if !changed.is_empty() {
            write!(f, "({})", changed.join(","))?;
        }
        Ok(())
    }
}

impl LayoutSpec {
    /// Parses `name` or `name(key=value,...)`; unknown parameters and bad values are errors naming them.
    /// Ranges that depend on the block size are checked by [`FileMap::build_with`].
    pub fn parse(s: &str) -> Result<Self, LayoutError> {
        let s = s.trim();
        let text = blockwell_core::spec::split_spec(s).map_err(|e| LayoutError::BadParam {
            param: "spec",
            message: match e {
                blockwell_core::spec::SpecSyntaxError::NoClosingParen => format!("'{s}' has no closing ')'"),
                e => e.to_string(),
            },
        })?;
        let kind: LayoutKind = text.name.parse()?;
        let defaults = match serde_json::to_value(LayoutParams::default()) {
            Ok(serde_json::Value::Object(m)) => m,
            _ => serde_json::Map::new(),
        };
        let mut m = defaults.clone();
        for (k, v) in text.params {
            let Some(&param) = LAYOUT_PARAMS.iter().find(|p| **p == k) else {
                return Err(LayoutError::UnknownParam { param: k, known: LAYOUT_PARAMS.join(", ") });
            };
            let value: serde_json::Value = serde_json::from_str(v)
                .map_err(|_| LayoutError::BadParam { param, message: format!("expected a number, found '{v}'") })?;
            let mut one = defaults.clone();
            one.insert(k.clone(), value.clone());
            if let Err(e) = serde_json::from_value::<LayoutParams>(serde_json::Value::Object(one)) {
                return Err(LayoutError::BadParam { param, message: e.to_string() });
            }
            m.insert(k, value);
        }
        let params: LayoutParams = serde_json::from_value(serde_json::Value::Object(m))
            .map_err(|e| LayoutError::BadParam { param: "spec", message: e.to_string() })?;
        Ok(LayoutSpec { kind, params })
    }

    /// [`FileMap::build_with`] with this spec's kind and parameters.
    pub fn build(&self, files: &[FileInfo], block_size: u64, seed: u64) -> Result<FileMap, LayoutError> {
        FileMap::build_with(self.kind, files, block_size, seed, &self.params)
    }
}

/// The parameter names of [`LayoutParams`].
pub const LAYOUT_PARAMS: &[&str] = &[
    "chunk_min",
    "chunk_max",
    "group_bytes",
    "group_reserved_bytes",
    "rsv_min",
    "rsv_max",
    "colours",
    "ag_bytes",
    "run_min",
    "run_max",
    "window",
    "fill",
];

/// One step of the creation model: `file`'s writer appends `blocks` blocks to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    pub file: u32,
    pub blocks: u64,
}

/// The order in which the allocator sees the files' blocks: writers round-robin (in ascending writer id), one
/// chunk each per round, each writer working through its files in index order. Deterministic per `seed`.
/// Empty files get no chunk. `params` must be valid for `block_size` ([`LayoutParams::validate`]).
pub fn creation_schedule(files: &[FileInfo], block_size: u64, params: &LayoutParams, seed: u64) -> Vec<Chunk> {
    let bs = block_size.max(1);
    let cmin = params.chunk_min.div_ceil(bs).max(1);
    let cmax = params.chunk_max.div_ceil(bs).max(cmin);
    // Per writer (ascending id): its files in index order.
    let mut writers: std::collections::BTreeMap<u32, Vec<u32>> = std::collections::BTreeMap::new();
    for (i, f) in files.iter().enumerate() {
        if f.size > 0 {
            writers.entry(f.writer).or_default().push(i as u32);
        }
    }
    // (files of the writer, index of the current file, blocks left in it)
    let mut state: Vec<(Vec<u32>, usize, u64)> = writers
        .into_values()
        .map(|fs| {
            let left = files[fs[0] as usize].size.div_ceil(bs);
            (fs, 0, left)
        })
        .collect();
    let total: u64 = files.iter().map(|f| f.size.div_ceil(bs)).sum();
    let mut out = Vec::with_capacity((total / ((cmin + cmax) / 2).max(1)) as usize + state.len());
    let mut rng = Rng::new(seed ^ 0xc4ea_7e00_5c4e_d01e);
    while !state.is_empty() {
        state.retain_mut(|(fs, cur, left)| {
            let want = cmin + rng.below(cmax - cmin + 1);
            let n = want.min(*left);
            out.push(Chunk { file: fs[*cur], blocks: n });
            *left -= n;
            if *left == 0 {
                *cur += 1;
                match fs.get(*cur) {
                    Some(&f) => *left = files[f as usize].size.div_ceil(bs),
                    None => return false,
                }
            }
            true
        });
    }
    out
}

/// The disk blocks of every file of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileMap {
    block_size: u64,
    /// Per file, its extents: (first file block, first disk block, blocks), sorted by file block.
    extents: Vec<Vec<(u64, u64, u64)>>,
    disk_blocks: u64,
}

impl FileMap {
    /// Places `files` (sizes rounded up to whole `block_size` blocks) with the default [`LayoutParams`]. `seed`
    /// drives the creation model and layouts with randomness. A `block_size` of 0 is taken as 1.
    pub fn build(kind: LayoutKind, files: &[FileInfo], block_size: u64, seed: u64) -> FileMap {
        Self::place(kind, files, block_size.max(1), seed, &LayoutParams::default())
    }

    /// Like [`FileMap::build`] with explicit parameters, checked first.
    pub fn build_with(
        kind: LayoutKind,
        files: &[FileInfo],
        block_size: u64,
        seed: u64,
        params: &LayoutParams,
    ) -> Result<FileMap, LayoutError> {
        params.validate(block_size)?;
        Ok(Self::place(kind, files, block_size, seed, params))
    }

    fn place(kind: LayoutKind, files: &[FileInfo], bs: u64, seed: u64, p: &LayoutParams) -> FileMap {
        let mut m = FileMap { block_size: bs, extents: vec![Vec::new(); files.len()], disk_blocks: 0 };
        match kind {
            LayoutKind::Contiguous => {
                let mut next = 0u64;
                for (i, f) in files.iter().enumerate() {
                    let n = f.size.div_ceil(bs);
                    m.push(i, 0, next, n);
                    next += n;
                }
            }
            LayoutKind::BlockGroups => m.place_block_groups(files, seed, p),
            LayoutKind::SingleExtent => m.place_single_extent(files, seed, p),
            LayoutKind::Scattered => m.place_scattered(files, seed, p),
            LayoutKind::Reiserfs => m.place_reiserfs(files, seed, p),
        }
        m.disk_blocks = m.extents.iter().flatten().map(|&(_, d, n)| d + n).max().unwrap_or(0);
        m
    }

    /// Appends `n` blocks of `file` starting at file block `fb` on disk block `db`, merging with its last extent.
    fn push(&mut self, file: usize, fb: u64, db: u64, n: u64) {
        if n == 0 {
            return;
        }
        let e = &mut self.extents[file];
        match e.last_mut() {
            Some(last) if last.0 + last.2 == fb && last.1 + last.2 == db => last.2 += n,
            _ => e.push((fb, db, n)),
        }
    }

    fn total_blocks(files: &[FileInfo], bs: u64) -> u64 {
        files.iter().map(|f| f.size.div_ceil(bs)).sum()
    }

    /// Groups of `per_group` usable blocks needed for the data to fill `fill` of them.
    fn groups_for(total: u64, per_group: u64, fill: f64) -> u64 {
        ((total as f64 / fill / per_group as f64).ceil() as u64).max(1)
    }

    fn place_block_groups(&mut self, files: &[FileInfo], seed: u64, p: &LayoutParams) {
        let bs = self.block_size;
        let g = p.group_bytes.div_ceil(bs);
        let r = p.group_reserved_bytes.div_ceil(bs).min(g - 1);
        let ngroups = Self::groups_for(Self::total_blocks(files, bs), g - r, p.fill);
        let (rsv_min, rsv_max) = (p.rsv_min.div_ceil(bs), p.rsv_max.div_ceil(bs));
        let mut groups = balloc::Groups::new(ngroups, g, r, rsv_min, rsv_max);
        let home = |dir: u32| -> usize {
            (SplitMix64(seed ^ 0xb10c_6e0b ^ (dir as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).next_u64() % ngroups)
                as usize
        };
        // The writers' pids modulo the colours: consecutive pids from a seeded base.
        let colours = p.colours.clamp(1, g);
        let pid_base = SplitMix64(seed ^ 0x00c0_10e5).next_u64() % colours;
        let colour_goal = |writer: u32| ((u64::from(writer) + pid_base) % colours) * (g / colours);
        // Per file: its allocation state once started, and the file blocks placed so far.
        let mut state: Vec<Option<balloc::FileAlloc>> = vec![None; files.len()];
        let mut done: Vec<u64> = vec![0; files.len()];
        for c in creation_schedule(files, bs, p, seed) {
            let f = c.file as usize;
            let st = state[f].get_or_insert_with(|| groups.open(home(files[f].dir), colour_goal(files[f].writer)));
            let mut left = c.blocks;
            while left > 0 {
                let (gi, s, n) = groups.alloc(st, left);
                self.push(f, done[f], gi as u64 * g + s, n);
                done[f] += n;
                left -= n;
            }
            if done[f] == files[f].size.div_ceil(bs) {
                groups.close(st);
            }
        }
    }

    fn place_single_extent(&mut self, files: &[FileInfo], seed: u64, p: &LayoutParams) {
        let bs = self.block_size;
        let ag = p.ag_bytes.div_ceil(bs);
        let nags = Self::groups_for(Self::total_blocks(files, bs), ag, p.fill);
        let mut next: Vec<u64> = vec![0; nags as usize];
        let mut beyond = nags * ag;
        let mut dir_ag: std::collections::HashMap<u32, usize> = std::collections::HashMap::new();
        // Creation order: the order of each file's first chunk.
        let mut created = vec![false; files.len()];
        for c in creation_schedule(files, bs, p, seed) {
            let f = c.file as usize;
            if std::mem::replace(&mut created[f], true) {
                continue;
            }
            let n = files[f].size.div_ceil(bs);
            let k = dir_ag.len();
            let start = *dir_ag.entry(files[f].dir).or_insert(k % nags as usize);
            let fits = (0..next.len()).map(|i| (start + i) % next.len()).find(|&a| ag - next[a] >= n);
            let db = match fits {
                Some(a) => {
                    let db = a as u64 * ag + next[a];
                    next[a] += n;
                    db
                }
                None => {
                    let db = beyond;
                    beyond += n;
                    db
                }
            };
            self.push(f, 0, db, n);
        }
    }

    fn place_reiserfs(&mut self, files: &[FileInfo], seed: u64, p: &LayoutParams) {
        let bs = self.block_size;
        // Directories in creation order (the first chunk of any of their files), each with its files.
        let mut order: Vec<u32> = Vec::new();
        let mut members: std::collections::HashMap<u32, Vec<usize>> = std::collections::HashMap::new();
        let mut created = vec![false; files.len()];
        for c in creation_schedule(files, bs, p, seed) {
            let f = c.file as usize;
            if std::mem::replace(&mut created[f], true) {
                continue;
            }
            let dir = files[f].dir;
            let m = members.entry(dir).or_insert_with(|| {
                order.push(dir);
                Vec::new()
            });
            m.push(f);
        }
        let mut next = 0u64;
        for dir in order {
            let mut fs = members.remove(&dir).unwrap_or_default();
            fs.sort_unstable();
            let perm = Permutation::new(fs.len() as u64, SplitMix64(seed ^ 0x7e15_e7f5 ^ u64::from(dir)).next_u64());
            for k in 0..fs.len() as u64 {
                let f = fs[perm.apply(k) as usize];
                let n = files[f].size.div_ceil(bs);
                self.push(f, 0, next, n);
                next += n;
            }
        }
    }

    fn place_scattered(&mut self, files: &[FileInfo], seed: u64, p: &LayoutParams) {
        let bs = self.block_size;
        let (rmin, rmax) = (p.run_min, p.run_max);
        let mut rng = Rng::new(seed ^ 0x5ca7_7e3e_d000);
        // Cut every file into runs first (so the number of slots is known), in file order.
        let mut runs: Vec<(usize, u64, u64)> = Vec::new(); // (file, first file block, blocks)
        for (i, f) in files.iter().enumerate() {
            let n = f.size.div_ceil(bs);
            let mut at = 0;
            while at < n {
                let len = (rmin + rng.below(rmax - rmin + 1)).min(n - at);
                runs.push((i, at, len));
                at += len;
            }
        }
        // Window w takes runs w*per .. (w+1)*per and shuffles them over its `window` slots.
        // A window larger than the whole layout is the whole layout.
        let w = p.window.min(((runs.len() as f64 / p.fill).ceil() as u64).max(1));
        let per = ((w as f64 * p.fill).floor() as u64).clamp(1, w);
        for (win, group) in runs.chunks(per as usize).enumerate() {
            let win = win as u64;
            let perm = Permutation::new(w, SplitMix64(seed ^ win.wrapping_mul(0x9e37_79b9_7f4a_7c15)).next_u64());
            for (i, &(f, fb, len)) in group.iter().enumerate() {
                self.push(f, fb, (win * w + perm.apply(i as u64)) * rmax, len);
            }
        }
    }

    pub fn block_size(&self) -> u64 {
        self.block_size
    }

    /// Disk blocks the layout spans (the highest used disk block + 1).
    pub fn disk_blocks(&self) -> u64 {
        self.disk_blocks
    }

    /// Number of files mapped.
    pub fn files(&self) -> usize {
        self.extents.len()
    }

    /// `file`'s extents: (first file block, first disk block, blocks), in file order, adjacent ones merged.
    /// Empty for an unknown file.
    pub fn extents(&self, file: u32) -> &[(u64, u64, u64)] {
        self.extents.get(file as usize).map_or(&[], |e| e.as_slice())
    }

    /// Appends to `out` the disk runs (first disk block, count) holding blocks `first .. first + n` of `file`, in
    /// file order, merging adjacent runs. Blocks past the end of the file (or of an unknown file) are not mapped.
    pub fn runs(&self, file: u32, first: u64, n: u64, out: &mut Vec<(u64, u64)>) {
        let end = first.saturating_add(n);
        let extents = self.extents(file);
        // Extents are sorted by file block: skip those ending before `first`.
        let start = extents.partition_point(|&(fb, _, len)| fb + len <= first);
        for &(fb, db, len) in &extents[start..] {
            if fb >= end {
                break;
            }
            let lo = fb.max(first);
            let hi = (fb + len).min(end);
            let d = db + (lo - fb);
            match out.last_mut() {
                Some(last) if last.0 + last.1 == d => last.1 += hi - lo,
                _ => out.push((d, hi - lo)),
            }
        }
    }

    /// Checks the invariants: each file's extents cover its blocks `0..ceil(size / block_size)` in order
    /// without gaps, no disk block holds two file blocks, and every extent ends below
    /// [`FileMap::disk_blocks`]. `Err` names the first violation.
    pub fn validate(&self, files: &[FileInfo]) -> Result<(), String> {
        if files.len() != self.extents.len() {
            return Err(format!("{} files given, {} mapped", files.len(), self.extents.len()));
        }
        let mut all: Vec<(u64, u64, usize)> = Vec::new();
        for (i, (f, ext)) in files.iter().zip(&self.extents).enumerate() {
            let mut fb = 0;
            for &(efb, db, n) in ext {
                if efb != fb || n == 0 {
                    return Err(format!("file {i}: extent at file block {efb} (expected {fb}, {n} blocks)"));
                }
                if db + n > self.disk_blocks {
                    return Err(format!("file {i}: extent ends at {} past disk_blocks {}", db + n, self.disk_blocks));
                }
                fb += n;
                all.push((db, n, i));
            }
            if fb != f.size.div_ceil(self.block_size) {
                return Err(format!("file {i}: {fb} blocks mapped, size needs {}", f.size.div_ceil(self.block_size)));
            }
        }
        all.sort_unstable();
        for w in all.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(format!("files {} and {} share disk block {}", w[0].2, w[1].2, w[1].0));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_files_follow_each_other() {
        let files = vec![FileInfo { size: 3 * 4096, writer: 0, dir: 0 }, FileInfo { size: 4097, writer: 0, dir: 0 }];
        let m = FileMap::build(LayoutKind::Contiguous, &files, 4096, 0);
        assert_eq!(m.disk_blocks(), 5);
        let mut out = Vec::new();
        m.runs(1, 0, 10, &mut out);
        assert_eq!(out, vec![(3, 2)]);
    }

    #[test]
    fn names_round_trip() {
        for &k in LayoutKind::ALL {
            assert_eq!(k.name().parse::<LayoutKind>().unwrap(), k);
            assert_eq!(serde_json::to_value(k).unwrap(), serde_json::Value::String(k.name().into()));
        }
        assert_eq!(LayoutKind::REGISTRY.validate(LayoutKind::ALL), Ok(()));
        assert_eq!("Block_Groups".parse::<LayoutKind>().unwrap(), LayoutKind::BlockGroups);
        let e = "ntfs".parse::<LayoutKind>().unwrap_err().to_string();
        assert!(e.contains("'ntfs'") && e.contains("scattered"), "{e}");
    }

    #[test]
    fn specs_parse_and_name_bad_parameters() {
        let s = LayoutSpec::parse("block-groups(fill=0.25, group-bytes=1048576)").unwrap();
        assert_eq!(s.kind, LayoutKind::BlockGroups);
        assert_eq!((s.params.fill, s.params.group_bytes), (0.25, 1 << 20));
        assert_eq!(LayoutSpec::parse("scattered").unwrap().params, LayoutParams::default());
        let e = LayoutSpec::parse("scattered(bogus=1)").unwrap_err().to_string();
        assert!(e.contains("'bogus'") && e.contains("run_max"), "{e}");
        let e = LayoutSpec::parse("scattered(run_max=x)").unwrap_err();
        assert!(matches!(e, LayoutError::BadParam { param: "run_max", .. }), "{e}");
        let e = LayoutSpec::parse("scattered(run_max=-1)").unwrap_err();
        assert!(matches!(e, LayoutError::BadParam { param: "run_max", .. }), "{e}");
        assert!(LayoutSpec::parse("scattered(run_max=1").is_err());
        // Ranges are checked at build time.
        let f = [FileInfo { size: 1, writer: 0, dir: 0 }];
        let e = LayoutSpec::parse("scattered(run_min=9,run_max=8)").unwrap().build(&f, 4096, 0).unwrap_err();
        assert!(matches!(e, LayoutError::BadParam { param: "run_min", .. }), "{e}");
    }

    #[test]
    fn specs_print_their_changed_parameters_and_parse_back() {
        for text in ["block-groups", "block-groups(rsv_min=0,colours=1)", "scattered(window=4,fill=0.25)"] {
            let s: LayoutSpec = text.parse().unwrap();
            assert_eq!(s.to_string(), text);
            assert_eq!(s.to_string().parse::<LayoutSpec>().unwrap(), s);
        }
        // Order and spelling are canonical; a parameter given at its default is left out.
        let s = LayoutSpec::parse("block-groups(colours=1, rsv-min=0, fill=0.5)").unwrap();
        assert_eq!(s.to_string(), "block-groups(rsv_min=0,colours=1)");
        assert_eq!(LayoutSpec::from(LayoutKind::Scattered).to_string(), "scattered");
    }

    #[test]
    fn param_names_are_the_fields() {
        let v = serde_json::to_value(LayoutParams::default()).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut names = LAYOUT_PARAMS.to_vec();
        keys.sort_unstable();
        names.sort_unstable();
        assert_eq!(keys, names);
    }
}
