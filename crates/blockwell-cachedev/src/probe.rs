//! What a device holds before it is formatted: nothing (zeroes, or never written), a file system, partition
//! table or volume that another program recognises by its signature, or other data. `blockwell cache format`
//! refuses anything but nothing, as mkfs tools and wipefs do.
//!
//! Signatures recognised (offsets from the start of the device): ext2/3/4 (0xEF53 at 1080), XFS (`XFSB` at 0),
//! btrfs (`_BHRfS_M` at 65,600), Linux swap (`SWAPSPACE2` or `SWAP-SPACE` before the end of the first 4 KiB
//! page), a GPT (`EFI PART` at 512) or an MBR partition table (0x55AA at 510 with a partition entry), FAT and
//! NTFS boot sectors, LUKS (`LUKS\xba\xbe` at 0), an LVM physical volume (`LABELONE` in one of the first four
//! sectors), a bcache superblock (its magic at 4,120), Linux md RAID (superblock 1.1 at 0, 1.2 at 4 KiB) and
//! ISO 9660 (`CD001` at 32,769).
//!
//! Zeroes are told from data by reading: every allocated extent of a regular file (holes read as zeroes and are
//! skipped) or of a block device, the first 64 MiB in full and beyond that 1 MiB out of every 64 MiB. Data only
//! in the parts not sampled is not seen; the signatures above all lie in the first 64 MiB.

use crate::dev::Dev;
use std::io;

/// What a device holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Contents {
    /// Zeroes wherever it was read (or nothing allocated).
    Empty,
    /// A recognised signature: what it is.
    Signature(String),
    /// Non-zero bytes at this offset, of nothing recognised.
    Data(u64),
}

/// Bytes read in full before sampling starts.
const FULL: u64 = 64 << 20;
/// Beyond [`FULL`], this much is read out of every [`STRIDE`].
const SAMPLE: u64 = 1 << 20;
const STRIDE: u64 = 64 << 20;

fn at(b: &[u8], off: usize, want: &[u8]) -> bool {
    b.get(off..off + want.len()) == Some(want)
}

fn le16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

/// The signature in `head` (the device's first bytes, as many as it has up to 68 KiB), if any.
pub fn signature(head: &[u8]) -> Option<String> {
    let h = head;
    if at(h, 0, b"LUKS\xba\xbe") {
        return Some("a LUKS encrypted volume".into());
    }
    if at(h, 0, b"XFSB") {
        return Some("an XFS file system".into());
    }
    if h.len() >= 1024 + 0x68 && le16(h, 1024 + 56) == 0xEF53 {
        let compat = le32(h, 1024 + 0x5C);
        let incompat = le32(h, 1024 + 0x60);
        let kind = if incompat & (0x40 | 0x80 | 0x200) != 0 {
            "ext4"
        } else if compat & 0x4 != 0 {
            "ext3"
        } else {
            "ext2"
        };
        let label = String::from_utf8_lossy(&h[1024 + 0x78..1024 + 0x88]).trim_end_matches('\0').to_string();
        let label = if label.is_empty() { String::new() } else { format!(" labelled '{label}'") };
        return Some(format!("an {kind} file system{label}"));
    }
    if at(h, 65536 + 64, b"_BHRfS_M") {
        return Some("a btrfs file system".into());
    }
    if at(h, 4096 - 10, b"SWAPSPACE2") || at(h, 4096 - 10, b"SWAP-SPACE") {
        return Some("a Linux swap area".into());
    }
    for s in 0..4 {
        if at(h, s * 512, b"LABELONE") && at(h, s * 512 + 24, b"LVM2 001") {
            return Some("an LVM physical volume".into());
        }
    }
    const BCACHE: [u8; 16] =
        [0xc6, 0x85, 0x73, 0xf6, 0x4e, 0x1a, 0x45, 0xca, 0x82, 0x65, 0xf5, 0x7f, 0x48, 0xba, 0x6d, 0x81];
    if at(h, 4096 + 24, &BCACHE) {
        return Some("a bcache device (a cache or a backing device)".into());
    }
    const MD: [u8; 4] = [0xfc, 0x4e, 0x2b, 0xa9];
    if at(h, 0, &MD) || at(h, 4096, &MD) {
        return Some("a Linux md RAID member".into());
    }
    if at(h, 512, b"EFI PART") {
        return Some("a GPT partition table".into());
    }
    if at(h, 3, b"NTFS    ") {
        return Some("an NTFS file system".into());
    }
    if at(h, 54, b"FAT1") || at(h, 82, b"FAT32") {
        return Some("a FAT file system".into());
    }
    if at(h, 510, &[0x55, 0xaa]) && (0..4).any(|i| h[446 + 16 * i + 4] != 0) {
        return Some("an MBR (DOS) partition table".into());
    }
    if at(h, 32769, b"CD001") {
        return Some("an ISO 9660 file system".into());
    }
    None
}

/// What `dev` holds; `regions`: the byte ranges that may hold data (a regular file's allocated extents; the
/// whole device otherwise).
pub fn probe(dev: &dyn Dev, regions: &[(u64, u64)]) -> io::Result<Contents> {
    let size = dev.size();
    let n = size.min(68 << 10) as usize;
    let mut head = vec![0u8; n];
    dev.read_at(&mut head, 0)?;
    if let Some(s) = signature(&head) {
        return Ok(Contents::Signature(s));
    }
    let mut buf = vec![0u8; 1 << 20];
    for &(start, end) in regions {
        let mut off = start;
        while off < end.min(size) {
            if off >= FULL && (off - FULL) % STRIDE >= SAMPLE {
                // Skip to the next sampled megabyte.
                off = FULL + ((off - FULL) / STRIDE + 1) * STRIDE;
                continue;
            }
            let len = (end.min(size) - off).min(buf.len() as u64) as usize;
            dev.read_at(&mut buf[..len], off)?;
            if let Some(i) = buf[..len].iter().position(|&b| b != 0) {
                return Ok(Contents::Data(off + i as u64));
            }
            off += len as u64;
        }
    }
    Ok(Contents::Empty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemDev;

    #[test]
    fn zeroes_data_and_signatures() {
        let dev = MemDev::new(200 << 20);
        let all = [(0, 200 << 20)];
        assert_eq!(probe(&dev, &all).unwrap(), Contents::Empty);
        dev.poke(150 << 20, b"x");
        assert_eq!(probe(&dev, &all).unwrap(), Contents::Empty, "outside the sampled megabytes");
        dev.poke((128 << 20) + 5, b"x");
        assert_eq!(probe(&dev, &all).unwrap(), Contents::Data((128 << 20) + 5));
        dev.poke(4096 - 10, b"SWAPSPACE2");
        assert_eq!(probe(&dev, &all).unwrap(), Contents::Signature("a Linux swap area".into()));
        let gpt = MemDev::new(1 << 20);
        gpt.poke(510, &[0x55, 0xaa]);
        gpt.poke(446 + 4, &[0x83]);
        assert!(matches!(probe(&gpt, &[(0, 1 << 20)]).unwrap(), Contents::Signature(s) if s.contains("MBR")));
        gpt.poke(512, b"EFI PART");
        assert!(matches!(probe(&gpt, &[(0, 1 << 20)]).unwrap(), Contents::Signature(s) if s.contains("GPT")));
        // Regions: holes are not read.
        let d = MemDev::new(1 << 20);
        d.poke(800_000, b"y");
        assert_eq!(probe(&d, &[(0, 4096)]).unwrap(), Contents::Empty);
        assert_eq!(probe(&d, &[(0, 4096), (786_432, 1 << 20)]).unwrap(), Contents::Data(800_000));
    }
}
