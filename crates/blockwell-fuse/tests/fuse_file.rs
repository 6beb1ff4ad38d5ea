//! The FUSE file over an in-memory backend, driven through std::fs: contents, size, fixed size, punch hole,
//! readdir and a clean unmount. Needs /dev/fuse and permission to mount (root or fusermount3); otherwise it
//! prints "SKIPPED: …" and passes.

use blockwell_fuse::{mount, Options};
use blockwell_server::backend::{Backend, MemBackend};
use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn file_reads_writes_and_keeps_its_size() {
    if !std::path::Path::new("/dev/fuse").exists() {
        skip("/dev/fuse is missing");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mem = Arc::new(MemBackend::new(1 << 20));
    let backend: Arc<dyn Backend> = mem.clone();
    let m = match mount(backend, dir.path(), &Options { name: "dev".into(), ..Default::default() }) {
        Ok(m) => m,
        Err(e) => {
            skip(&format!("FUSE mounting is not permitted here: {e}"));
            return;
        }
    };
    let file = m.file().to_path_buf();
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    assert_eq!(names, ["dev"]);
    let meta = std::fs::metadata(&file).unwrap();
    assert_eq!(meta.len(), 1 << 20);
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        assert_eq!(meta.permissions().mode() & 0o7777, 0o644);
        assert_eq!(meta.blocks(), (1 << 20) / 512);
    }

    let mut f = std::fs::OpenOptions::new().read(true).write(true).open(&file).unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 + 3) as u8).collect();
    f.seek(SeekFrom::Start(12_345)).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    assert_eq!(&mem.snapshot()[12_345..12_345 + data.len()], &data[..]);
    let mut back = vec![0u8; data.len()];
    f.seek(SeekFrom::Start(12_345)).unwrap();
    f.read_exact(&mut back).unwrap();
    assert_eq!(back, data);

    // Past the end: reads are short, writes fail.
    f.seek(SeekFrom::Start((1 << 20) - 10)).unwrap();
    let mut tail = Vec::new();
    f.read_to_end(&mut tail).unwrap();
    assert_eq!(tail.len(), 10);
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    assert!(f.write_all(b"x").is_err());

    // Fixed size.
    assert!(f.set_len(4096).is_err());
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 1 << 20);

    // Punch hole → zeroes.
    let st = std::process::Command::new("fallocate")
        .args(["--punch-hole", "--offset", "16384", "--length", "65536", file.to_str().unwrap()])
        .status();
    if st.is_ok_and(|s| s.success()) {
        assert!(mem.snapshot()[16384..16384 + 65536].iter().all(|&b| b == 0));
        assert_ne!(mem.snapshot()[16383], 0);
    }
    drop(f);
    m.unmount(Duration::from_secs(10)).unwrap();
    assert!(!std::fs::read_to_string("/proc/self/mountinfo").unwrap().contains(dir.path().to_str().unwrap()));
}

use blockwell_testkit::skip;
