//! Looking at a file or block device before it becomes a cache device: where it may hold data, and whether
//! it is the same file as another (the origin).

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

/// The byte ranges of `file` (of `size` bytes) that may hold data: the allocated extents of a regular file
/// (`SEEK_DATA`/`SEEK_HOLE`; holes read as zeroes), the whole of anything else or of a file system that cannot
/// tell.
pub fn data_regions(file: &File, size: u64) -> io::Result<Vec<(u64, u64)>> {
    use rustix::fs::{seek, SeekFrom};
    if !file.metadata()?.file_type().is_file() {
        return Ok(vec![(0, size)]);
    }
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos < size {
        let start = match seek(file, SeekFrom::Data(pos)) {
            Ok(s) => s,
            Err(rustix::io::Errno::NXIO) => break,
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOTSUP) => return Ok(vec![(0, size)]),
            Err(e) => return Err(e.into()),
        };
        let end = match seek(file, SeekFrom::Hole(start)) {
            Ok(e) => e.min(size),
            Err(_) => size,
        };
        out.push((start, end));
        pos = end;
    }
    Ok(out)
}

/// Whether `a` and `b` are the same file or block device (device and inode; for block devices, the device
/// number), whatever their paths.
pub fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    if a.file_type().is_block_device() && b.file_type().is_block_device() {
        return a.rdev() == b.rdev();
    }
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn holes_are_not_data_and_links_are_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let f = std::fs::OpenOptions::new().create(true).truncate(true).read(true).write(true).open(&p).unwrap();
        f.set_len(64 << 20).unwrap();
        assert_eq!(data_regions(&f, 64 << 20).unwrap(), vec![], "a sparse file holds nothing");
        f.write_all_at(b"data", 32 << 20).unwrap();
        let r = data_regions(&f, 64 << 20).unwrap();
        assert!(r.len() == 1 && r[0].0 <= 32 << 20 && r[0].1 > 32 << 20, "{r:?}");
        let l = dir.path().join("link");
        std::fs::hard_link(&p, &l).unwrap();
        let m = |p: &std::path::Path| std::fs::metadata(p).unwrap();
        assert!(same_file(&m(&p), &m(&l)));
        assert!(!same_file(&m(&p), &m(dir.path())));
    }
}
