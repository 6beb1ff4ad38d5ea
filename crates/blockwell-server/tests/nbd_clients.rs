//! Real NBD clients (qemu-io, qemu-img, nbdinfo, nbdcopy) against the in-process server. Each test skips
//! with "SKIPPED: <tool> not installed" when its client is missing.

mod nbd_common;

use std::process::Command;

use nbd_common::{random_bytes, run, tool, Fixture};

#[test]
fn qemu_io_write_read_discard_zero_flush() {
    let Some(qemu_io) = tool("qemu-io") else { return };
    let mut f = Fixture::new(4 << 20);
    let out = run(Command::new(qemu_io).args(["-f", "raw", &f.url("disk")]).args([
        "-c",
        "write -P 0xab 0 1M",
        "-c",
        "read -P 0xab 0 1M",
        "-c",
        "write -P 0x11 4095 3",
        "-c",
        "read -P 0x11 4095 3",
        "-c",
        "discard 0 64k",
        "-c",
        "write -z 128k 64k",
        "-c",
        "read -P 0 128k 64k",
        "-c",
        "write -f -P 0x22 2M 8k",
        "-c",
        "flush",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("Pattern verification failed"), "{text}");
    assert!(!text.contains("failed"), "{text}");
    f.shutdown();
    let mut want = vec![0u8; 4 << 20];
    want[..1 << 20].fill(0xab);
    want[4095..4098].fill(0x11);
    want[128 << 10..192 << 10].fill(0);
    want[2 << 20..(2 << 20) + 8192].fill(0x22);
    let got = f.mems[0].snapshot();
    // The discarded range may read as anything (MemBackend keeps the data): compare the rest.
    assert_eq!(got[64 << 10..], want[64 << 10..]);
}

#[test]
fn nbdinfo_json_reports_size_block_sizes_and_flags() {
    let Some(nbdinfo) = tool("nbdinfo") else { return };
    let f = Fixture::new(8 << 20);
    let out = run(Command::new(&nbdinfo).args(["--json", &f.url("disk")]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let e = &v["exports"][0];
    assert_eq!(e["export-size"], 8 << 20, "{v}");
    assert_eq!(e["block_size_minimum"], 1, "{v}");
    assert_eq!(e["block_size_preferred"], 4096, "{v}");
    assert_eq!(e["block_size_maximum"], 32 << 20, "{v}");
    for (k, want) in [
        ("can_flush", true),
        ("can_fua", true),
        ("can_trim", true),
        ("can_zero", true),
        ("can_fast_zero", true),
        ("can_cache", true),
        ("can_multi_conn", true),
        ("is_read_only", false),
    ] {
        assert_eq!(e[k], want, "{k} in {v}");
    }
    assert_eq!(e["description"], "a memory disk", "{v}");
    let out = run(Command::new(&nbdinfo).args(["--json", &f.url("ro")]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exports"][0]["is_read_only"], true, "{v}");
    assert_eq!(v["exports"][0]["can_trim"], false, "{v}");
    assert_eq!(v["exports"][0]["export-size"], 1 << 20, "{v}");
}

#[test]
fn nbdinfo_list_shows_every_export_with_description() {
    let Some(nbdinfo) = tool("nbdinfo") else { return };
    let f = Fixture::new(1 << 20);
    let out = run(Command::new(&nbdinfo).args(["--json", "--list", &f.url("")]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let exports = v["exports"].as_array().unwrap();
    let pairs: Vec<(String, String)> = exports
        .iter()
        .map(|e| (e["export-name"].as_str().unwrap().into(), e["description"].as_str().unwrap_or("").into()))
        .collect();
    assert_eq!(
        pairs,
        [("disk".to_string(), "a memory disk".to_string()), ("ro".to_string(), "read only".to_string())],
        "{v}"
    );
}

#[test]
fn nbdcopy_round_trip_16_mib() {
    let Some(nbdcopy) = tool("nbdcopy") else { return };
    let mut f = Fixture::new(16 << 20);
    let dir = tempfile::tempdir().unwrap();
    let (src, back) = (dir.path().join("src.img"), dir.path().join("back.img"));
    let data = random_bytes(16 << 20, 7);
    std::fs::write(&src, &data).unwrap();
    run(Command::new(&nbdcopy).arg(&src).arg(f.url("disk")));
    run(Command::new(&nbdcopy).arg(f.url("disk")).arg(&back));
    assert!(std::fs::read(&back).unwrap() == data, "nbdcopy round trip differs");
    f.shutdown();
    assert!(f.mems[0].snapshot() == data);
}

#[test]
fn qemu_img_convert_and_compare() {
    let Some(qemu_img) = tool("qemu-img") else { return };
    let f = Fixture::new(8 << 20);
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.img");
    let mut data = random_bytes(8 << 20, 99);
    data[1 << 20..3 << 20].fill(0); // a zero run, which qemu-img writes as zeroes
    std::fs::write(&src, &data).unwrap();
    let url = f.url("disk");
    run(Command::new(&qemu_img).args(["convert", "-n", "-f", "raw", "-O", "raw"]).arg(&src).arg(&url));
    run(Command::new(&qemu_img).args(["compare", "-f", "raw", "-F", "raw"]).arg(&src).arg(&url));
    assert!(f.mems[0].snapshot() == data);
}

#[test]
fn four_concurrent_qemu_io_clients_on_disjoint_regions() {
    let Some(qemu_io) = tool("qemu-io") else { return };
    let mut f = Fixture::new(8 << 20);
    let children: Vec<_> = (0..4u8)
        .map(|i| {
            let (pat, off) = (format!("{:#x}", 0x30 + i), i as usize * (2 << 20));
            Command::new(&qemu_io)
                .args(["-f", "raw", &f.url("disk")])
                .args(["-c", &format!("aio_write -P {pat} {off} 1M")])
                .args(["-c", &format!("aio_write -P {pat} {} 1M", off + (1 << 20))])
                .args(["-c", "aio_flush"])
                .args(["-c", &format!("read -P {pat} {off} 2M")])
                .output()
                .unwrap()
        })
        .collect();
    for out in children {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && !text.contains("failed"), "{text} {}", String::from_utf8_lossy(&out.stderr));
    }
    f.shutdown();
    let got = f.mems[0].snapshot();
    for i in 0..4usize {
        assert!(got[i * (2 << 20)..(i + 1) * (2 << 20)].iter().all(|&b| b == 0x30 + i as u8), "region {i}");
    }
}
