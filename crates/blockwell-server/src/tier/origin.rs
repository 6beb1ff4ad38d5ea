//! The identity of an origin: its size and a UUID that a cache device records, so that a device formatted
//! for one origin is never used in front of another.
//!
//! On a regular file the UUID lives in the extended attribute `user.blockwell.origin` (16 bytes), written when
//! a cache is first formatted for the file (`stamp`) and read afterwards: it follows the file through renames
//! and copies that keep extended attributes, and a different file of the same size does not have it. Block
//! devices and file systems without user extended attributes get a UUID derived from the origin's canonical
//! path instead (weaker: another device at the same path, of the same size, would match).

use blockwell_cachedev::OriginId;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// The extended attribute holding an origin's UUID.
pub const XATTR: &str = "user.blockwell.origin";

/// Where an identity came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentitySource {
    /// Read from the extended attribute.
    Xattr,
    /// Written to the extended attribute now.
    Stamped,
    /// Derived from the canonical path.
    Path,
}

/// The identity of the origin open as `file` at `path`, of `size` bytes. With `stamp`, a regular file without
/// the attribute gets a new UUID written to it; without, it is identified by its path.
pub fn identity(path: &Path, file: &File, size: u64, stamp: bool) -> io::Result<(OriginId, IdentitySource)> {
    let regular = file.metadata()?.file_type().is_file();
    if regular {
        let mut buf = [0u8; 16];
        match rustix::fs::fgetxattr(file, XATTR, &mut buf) {
            Ok(16) => return Ok((OriginId { size, uuid: buf }, IdentitySource::Xattr)),
            Ok(_) | Err(rustix::io::Errno::NODATA) if stamp => {
                let uuid = *uuid::Uuid::new_v4().as_bytes();
                match rustix::fs::fsetxattr(file, XATTR, &uuid, rustix::fs::XattrFlags::empty()) {
                    Ok(()) => return Ok((OriginId { size, uuid }, IdentitySource::Stamped)),
                    Err(e) if unsupported(e) => {}
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(_) | Err(rustix::io::Errno::NODATA) => {}
            Err(e) if unsupported(e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let _ = file.metadata()?.file_type().is_block_device();
    let canon = std::fs::canonicalize(path)?;
    let h = xxhash_rust::xxh3::xxh3_128(canon.as_os_str().as_encoded_bytes());
    Ok((OriginId { size, uuid: h.to_le_bytes() }, IdentitySource::Path))
}

fn unsupported(e: rustix::io::Errno) -> bool {
    e == rustix::io::Errno::NOTSUP || e == rustix::io::Errno::OPNOTSUPP || e == rustix::io::Errno::PERM
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamped_file_keeps_its_identity_and_another_file_differs() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a.img");
        let b = dir.path().join("b.img");
        std::fs::write(&a, vec![0u8; 8192]).unwrap();
        std::fs::write(&b, vec![0u8; 8192]).unwrap();
        let fa = File::open(&a).unwrap();
        let (id1, src1) = identity(&a, &fa, 8192, true).unwrap();
        let (id2, src2) = identity(&a, &fa, 8192, false).unwrap();
        assert_eq!(id1, id2);
        let fb = File::open(&b).unwrap();
        let (id3, _) = identity(&b, &fb, 8192, false).unwrap();
        assert_ne!(id1, id3, "another file of the same size is another origin");
        match src1 {
            IdentitySource::Stamped => assert_eq!(src2, IdentitySource::Xattr),
            // A file system without user xattrs: identified by path, still stable.
            IdentitySource::Path => assert_eq!(src2, IdentitySource::Path),
            IdentitySource::Xattr => panic!("a fresh file has no attribute"),
        }
    }
}
