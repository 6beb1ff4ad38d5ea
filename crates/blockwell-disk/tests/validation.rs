//! Validation against DiskSim's measured traces (issue #4 §1): the mean simulated service time must be within 5 %
//! of the measured mean for both disks. Skips (with a message) when `../shared` is not beside the repository.

use blockwell_disk::validate::{read_trace, validate};
use blockwell_disk::DiskSpec;
use std::path::PathBuf;

fn reference() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference/disk");
    if p.join("barracuda.trace").is_file() {
        Some(p)
    } else {
        skip("../shared/reference/disk (DiskSim validation traces) is not beside the repository");
        None
    }
}

fn check(model: &str, trace: &str) {
    let Some(dir) = reference() else { return };
    let records = read_trace(&dir.join(trace)).expect("trace parses");
    assert_eq!(records.len(), 10_000);
    let mut m = DiskSpec::parse(model).unwrap().build().unwrap();
    let v = validate(m.as_mut(), &records);
    eprintln!(
        "{model}: measured {:.1} us, simulated {:.1} us, error {:+.2} %, demerit {:.1} us ({:.1} %); reads {:.1}/{:.1}, writes {:.1}/{:.1}",
        v.mean_measured_us,
        v.mean_simulated_us,
        100.0 * v.relative_error,
        v.demerit_us,
        v.demerit_pct,
        v.reads.mean_measured_us,
        v.reads.mean_simulated_us,
        v.writes.mean_measured_us,
        v.writes.mean_simulated_us
    );
    assert!(v.relative_error.abs() < 0.05, "{model}: mean off by {:.2} %", 100.0 * v.relative_error);
    // Same inputs, same outputs.
    let again = validate(m.as_mut(), &records);
    assert_eq!(again.simulated_us, v.simulated_us);
}

#[test]
fn barracuda_mean_within_5_percent() {
    check("barracuda", "barracuda.trace");
}

#[test]
fn cheetah9lp_mean_within_5_percent() {
    check("cheetah9lp", "cheetah9LP.trace");
}

use blockwell_testkit::skip;
