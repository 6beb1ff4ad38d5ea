//! File layouts: where a file's blocks live on the disk. The time-aware simulator maps page-cache misses
//! (file, file block) to disk blocks through a [`FileMap`].

use crate::workload::FileInfo;

/// How a file system places files.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LayoutKind {
    /// Files one after another in creation order, each in one piece.
    #[default]
    Contiguous,
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
    /// Places `files` (sizes rounded up to whole `block_size` blocks). `seed` drives layouts with randomness.
    pub fn build(kind: LayoutKind, files: &[FileInfo], block_size: u64, seed: u64) -> FileMap {
        let _ = seed;
        match kind {
            LayoutKind::Contiguous => {
                let mut next = 0u64;
                let extents = files
                    .iter()
                    .map(|f| {
                        let n = f.size.div_ceil(block_size);
                        let e = vec![(0, next, n)];
                        next += n;
                        e
                    })
                    .collect();
                FileMap { block_size, extents, disk_blocks: next }
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

    /// Appends to `out` the disk runs (first disk block, count) holding blocks `first .. first + n` of `file`, in
    /// file order, merging adjacent runs. Blocks past the end of the file are not mapped.
    pub fn runs(&self, file: u32, first: u64, n: u64, out: &mut Vec<(u64, u64)>) {
        let end = first + n;
        for &(fb, db, len) in &self.extents[file as usize] {
            let lo = fb.max(first);
            let hi = (fb + len).min(end);
            if lo >= hi {
                continue;
            }
            let d = db + (lo - fb);
            match out.last_mut() {
                Some(last) if last.0 + last.1 == d => last.1 += hi - lo,
                _ => out.push((d, hi - lo)),
            }
        }
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
}
